"""Common subexpressions of a flat program computed once.

A program often computes one value twice: source that writes ``h - mean`` in two places
(batch normalization's variance and its normalized output), or max pooling's gradient,
whose windows are gathered once for the maximum and again for the mask of where it was.
Each copy is a pass over the whole array, and each a buffer of its own.
:func:`merge_closed` keeps the first of equal equations (the same primitive, parameters
and operands) and points the later ones' readers at its results.

Only equations that are pure and whose parameters compare by value are merged: an
effectful primitive, a stateful draw, a callback (its function may not be pure), or
parameters holding programs, functions or arrays keep every copy. An
``optimization_barrier`` is never merged, so what reads its results is never merged with
what reads its operands, however close: ``checkpoint`` (with ``prevent_cse``, its
default) passes the inputs of the backward pass's recomputation through one, and its
recomputation stays a recomputation. And only where merging keeps the first copy's
results alive at most ``MAX_EXTENSION`` equations longer than before: a convolution's
input padded again for its kernel gradient, far into the backward pass, is padded twice
rather than kept from the forward pass. A program that still has a ``remat`` call before
inlining is left as it is.

    >>> merged = merge_closed(flat_closed_jaxpr)   # doctest: +SKIP
"""
from __future__ import annotations

import enum

import numpy as np

from functrans import core
from functrans.core import ClosedJaxpr, DropVar, Jaxpr, Literal
from functrans.primitives.windowed import optimization_barrier_p

_SCALARS = (type(None), bool, int, str, bytes, np.integer, np.bool_)
# how many equations longer than before a merged value may be kept alive: copies a few
# equations apart (batch normalization's ``h - mean``, 5 apart in the ResNet step's
# gradient; max pooling's windows, gathered for the maximum and again for its mask, up to
# 30 apart in the CNN step's) are merged; a forward pass's value that the backward pass
# computes again (a convolution's padded input, padded again for its kernel gradient:
# 85-240 apart in those steps) is not
MAX_EXTENSION = 32
# pure by their flags but not by their values: each call draws from a global generator
_STATEFUL = frozenset({"rng_uniform"})
# equal barriers are not one value: each stands for the program point it was placed at
_NEVER_MERGED = frozenset({optimization_barrier_p})


class _Unkeyed(Exception):
    """A parameter or operand that does not compare by value."""


def has_remat(closed: ClosedJaxpr | None) -> bool:
    """Whether ``closed`` (before inlining) has a checkpointed part anywhere in it."""
    return closed is not None and _has_remat(closed.jaxpr)


def _has_remat(jaxpr: Jaxpr) -> bool:
    return any(eqn.primitive.name == "remat" or any(_has_remat(sub) for sub in core.subjaxprs(eqn))
               for eqn in jaxpr.eqns)


def merge_closed(closed: ClosedJaxpr) -> ClosedJaxpr:
    """``closed`` (a flat program: see ``fusion.flat_closed``) with every equation equal to
    an earlier one dropped and its results read from the earlier one's (see
    :func:`_mergeable` for where)."""
    jaxpr = closed.jaxpr
    outputs = {id(v) for v in jaxpr.outvars if not isinstance(v, Literal)}
    last_use = _last_uses(jaxpr)
    renames: dict = {}
    seen: dict = {}
    eqns = []
    changed = False

    def read(v):
        return v if isinstance(v, Literal) else renames.get(id(v), v)

    for at, eqn in enumerate(jaxpr.eqns):
        invars = [read(v) for v in eqn.invars]
        if any(a is not b for a, b in zip(invars, eqn.invars)):
            eqn, changed = eqn.replace(invars=invars), True
        key = _key(eqn)
        # a program output keeps its own equation: the caller owns that buffer
        if key is None or any(id(v) in outputs for v in eqn.outvars):
            eqns.append(eqn)
            continue
        first = seen.get(key)
        if first is None or not _mergeable(first, eqn, at, last_use):
            seen[key] = eqn
            eqns.append(eqn)
            continue
        for old, new in zip(eqn.outvars, first.outvars):
            if not isinstance(old, DropVar):
                renames[id(old)] = new
                last_use[id(new)] = max(last_use.get(id(new), -1), last_use.get(id(old), -1))
        changed = True
    if not changed:
        return closed
    return ClosedJaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, [read(v) for v in jaxpr.outvars],
                             eqns), closed.consts)


def _last_uses(jaxpr: Jaxpr) -> dict:
    """id(variable) -> the index of the last equation reading it."""
    last = {}
    for at, eqn in enumerate(jaxpr.eqns):
        for v in eqn.invars:
            if not isinstance(v, Literal):
                last[id(v)] = at
    return last


def _mergeable(first, later, at: int, last_use: dict) -> bool:
    """Whether ``later`` (equation number ``at``) may read ``first``'s results: each one it
    needs exists (is not dropped), and they are still read at or after ``at``, or were last
    read at most ``MAX_EXTENSION`` equations before it."""
    for old, new in zip(later.outvars, first.outvars):
        if isinstance(new, DropVar) and not isinstance(old, DropVar):
            return False
    last = max((last_use.get(id(v), -1) for v in first.outvars if not isinstance(v, DropVar)),
               default=-1)
    return at - last <= MAX_EXTENSION


def _key(eqn):
    prim = eqn.primitive
    if prim.effectful or prim in _NEVER_MERGED or prim.name in _STATEFUL or \
            "callback" in prim.name:
        return None
    try:
        return (prim, tuple(_operand(v) for v in eqn.invars),
                tuple(sorted((name, _frozen(value)) for name, value in eqn.params.items())))
    except _Unkeyed:
        return None


def _operand(v):
    if not isinstance(v, Literal):
        return ("var", id(v))
    value = np.asarray(v.val)
    # by bits: 0.0 and -0.0 (or two NaNs) are different literals
    return ("literal", str(value.dtype), value.shape, value.tobytes(),
            str(getattr(v.aval, "dtype", "")), bool(getattr(v.aval, "weak_type", False)))


def _frozen(value):
    """``value`` as a hashable key equal only for equal parameters, or raise _Unkeyed."""
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, np.floating):
        return ("float", str(value.dtype), value.tobytes())
    if isinstance(value, _SCALARS) or isinstance(value, (enum.Enum, np.dtype)):
        return (type(value), value)
    if isinstance(value, type) and issubclass(value, np.generic):
        return ("dtype", value)
    if isinstance(value, (tuple, list)):
        return (type(value), tuple(_frozen(v) for v in value))
    if isinstance(value, dict):
        return (dict, tuple(sorted((repr(k), _frozen(v)) for k, v in value.items())))
    raise _Unkeyed(type(value).__name__)
