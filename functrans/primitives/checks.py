"""``check``: the primitive behind ``functrans.experimental.checkify``'s run-time checks.

``check_p(pred, code, *payload, messages)`` asserts that ``pred`` (a boolean scalar) holds.
``messages`` is a static tuple of ``(category, template, treedef)``: when ``pred`` is false,
message ``messages[code]`` is the error, its template formatted with its slice of ``payload``
(``treedef`` rebuilds ``(args, kwargs)`` from the slice).

The primitive has no outputs and is effectful, so dead-code elimination keeps it. The
checkify transform reads it out of the traced program and threads the error through as a
value; a check that runs without checkify (eagerly, or in a compiled program) raises
``JaxRuntimeError`` when it fails.
"""
from __future__ import annotations

import numpy as np

from functrans import core, tree_util
from functrans.core import Primitive
from functrans.interpreters import batching
from functrans.primitives import reductions, structural


class JaxRuntimeError(ValueError):
    """What a failed check raises (``checkify.JaxRuntimeError``)."""


class JaxException(Exception):
    """The base of the kinds of error a check reports (the members of checkify's ``errors=``
    sets)."""


class FailedCheckError(JaxException):
    """A user check (``checkify.check``) that failed."""

    def __str__(self):
        return f"{self.args[0]} (`check` failed)" if self.args else "`check` failed"


class NaNError(JaxException):
    """A NaN produced by an operation whose inputs had none."""


class DivisionByZeroError(JaxException):
    """A division by zero."""


class OOBError(JaxException):
    """An index out of bounds."""

check_p = Primitive("check", multiple_results=True)
check_p.effectful = True


def make_exception(messages, code: int, payload) -> JaxException:
    """The error of failed message ``code``: its category, with its template filled from its
    slice of the flat ``payload``."""
    start = sum(treedef.num_leaves for _, _, treedef in messages[:code])
    category, template, treedef = messages[code]
    # shown as the user's values are: Arrays
    leaves = [core.wrap_array(core.host_copy(np.asarray(p)), core.get_aval(np.asarray(p)))
              for p in payload[start:start + treedef.num_leaves]]
    args, kwargs = tree_util.tree_unflatten(treedef, leaves)
    return category(template.format(*args, **kwargs) if args or kwargs else template)


@check_p.def_abstract_eval
def _check_abstract_eval(pred, code, *payload, messages):
    if pred.shape != () or pred.dtype != np.bool_:
        raise TypeError(f"check: the predicate must be a boolean scalar, got "
                        f"{pred.str_short()}")
    return []


@check_p.def_impl
def _check_impl(pred, code, *payload, messages):
    if not bool(pred):
        exception = make_exception(messages, int(code), payload)
        raise JaxRuntimeError(str(exception)) from exception
    return []


def _check_jvp(primals, tangents, *, messages):
    check_p.bind(*primals, messages=messages)
    return [], []


def _check_batch(vals, dims, *, messages):
    """Per example, the first failing example's message: the batched predicate holds when
    every example's does, and the code and payload are those of the first that fails."""
    size = batching.batch_size_of(vals, dims)
    vals = [batching.bdim_at_front(v, d, size) if d is not None else v
            for v, d in zip(vals, dims)]
    pred = vals[0] if dims[0] is not None else structural.broadcast_in_dim(vals[0], (size,), ())
    first = reductions.argmin(pred, 0, np.int32)  # the first False (0 when all hold)
    picked = [v[first] if d is not None else v for v, d in zip(vals, dims)]
    check_p.bind(reductions.reduce_and(pred, (0,)), *picked[1:], messages=messages)
    return [], []


def _check_transpose(cts, *args, messages):
    return [None] * len(args)


check_p.jvp = _check_jvp
check_p.batch = _check_batch
check_p.transpose = _check_transpose
