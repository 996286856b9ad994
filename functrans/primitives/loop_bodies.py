"""What the control-flow primitives (``cond``, ``while``, ``scan``) share: staging the user's
functions into closed sub-jaxprs whose closed-over values become leading operands,
evaluating sub-jaxprs, reordering, pruning and batching their inputs and outputs, and the
checks that a loop body keeps its carry's type.
"""
from __future__ import annotations

from typing import Callable

from functrans import _dtypes, core, tree_util
from functrans.core import ClosedJaxpr, Jaxpr, Tracer, Var, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters import partial_eval as pe
from functrans.interpreters.staging import (closed_over_consts_as_args, flat_array_outputs,
                                            trace_to_jaxpr_dynamic)
from functrans.primitives import elementwise as ew


def split_list(seq, sizes) -> list[list]:
    """Cut ``seq`` into consecutive pieces of the given sizes (and the rest, if any)."""
    seq = list(seq)
    out, start = [], 0
    for n in sizes:
        out.append(seq[start:start + n])
        start += n
    out.append(seq[start:])
    return out


def merge_lists(flags, when_true, when_false) -> list:
    """Interleave two lists back into one, taking from ``when_true`` where ``flags`` is True."""
    it_true, it_false = iter(when_true), iter(when_false)
    return [next(it_true) if f else next(it_false) for f in flags]


def eval_closed(closed: ClosedJaxpr, *args) -> list:
    """Evaluate a closed jaxpr by binding (so it is transformed by whatever trace is active)."""
    return core.eval_jaxpr(closed.jaxpr, closed.consts, *args)


def eval_closed_numpy(closed: ClosedJaxpr, args) -> list:
    """Evaluate a closed jaxpr on NumPy values with the reference interpreter."""
    consts = [core.to_numpy(c) for c in closed.consts]
    return core.eval_jaxpr_numpy(closed.jaxpr, consts, list(args))


def stage_wrapper(fun: Callable, in_avals) -> ClosedJaxpr:
    """Stage an internal wrapper (which only evaluates closed jaxprs) into a closed jaxpr."""
    jaxpr, consts = trace_to_jaxpr_dynamic(fun, list(in_avals))
    if any(isinstance(c, Tracer) for c in consts):
        raise AssertionError("a control-flow rule closed over a traced value")
    return ClosedJaxpr(jaxpr, consts)


def stage_user_fun(fun: Callable, in_tree, in_avals, what: str):
    """Stage a user function taking the pytree ``in_tree`` of arrays typed ``in_avals``.

    Returns ``(closed, consts, out_tree)``: the closed jaxpr takes the closed-over values
    (``consts``, to be passed as leading operands) followed by the flat arguments."""
    out_tree_cell = []

    def flat_fun(*flat_args):
        out = fun(*tree_util.tree_unflatten(in_tree, flat_args))
        leaves, out_tree = flat_array_outputs(what, out)
        out_tree_cell.append(out_tree)
        return leaves

    jaxpr, consts = trace_to_jaxpr_dynamic(flat_fun, list(in_avals))
    closed, consts = closed_over_consts_as_args(ClosedJaxpr(jaxpr, consts))
    return closed, consts, out_tree_cell[0]


def reorder(closed: ClosedJaxpr, in_order=None, out_order=None) -> ClosedJaxpr:
    """The same program with its inputs and/or outputs listed in another order."""
    j = closed.jaxpr
    invars = j.invars if in_order is None else [j.invars[i] for i in in_order]
    outvars = j.outvars if out_order is None else [j.outvars[i] for i in out_order]
    return ClosedJaxpr(Jaxpr(j.constvars, invars, outvars, j.eqns), closed.consts)


def with_unused_inputs(closed: ClosedJaxpr, avals, position: int) -> ClosedJaxpr:
    """The same program taking extra (ignored) inputs of types ``avals`` at ``position``."""
    j = closed.jaxpr
    extra = [Var(a) for a in avals]
    invars = j.invars[:position] + extra + j.invars[position:]
    return ClosedJaxpr(Jaxpr(j.constvars, invars, j.outvars, j.eqns), closed.consts)


def prune(closed: ClosedJaxpr, used_outputs, keep_inputs) -> tuple[ClosedJaxpr, list[bool]]:
    """``closed`` cut down to its used outputs and the equations they need. An input stays
    when the remaining program reads it or ``keep_inputs`` asks for it (a loop carry must stay
    even when unread, since it is also an output). Returns the program and the kept inputs."""
    jaxpr, read = pe.dce_jaxpr(closed.jaxpr, list(used_outputs))
    kept = [r or k for r, k in zip(read, keep_inputs)]
    const_of = {id(v): c for v, c in zip(closed.jaxpr.constvars, closed.consts)}
    invars = [v for v, k in zip(closed.jaxpr.invars, kept) if k]
    return (ClosedJaxpr(Jaxpr(jaxpr.constvars, invars, jaxpr.outvars, jaxpr.eqns),
                        [const_of[id(v)] for v in jaxpr.constvars]), kept)


def batch_body(axis_data, closed, size, in_dims, instantiate):
    """Batch a sub-jaxpr under the same named axis as the enclosing vmap, so collectives
    inside loop bodies and branches still find their axis."""
    name = getattr(axis_data, "name", None)
    spmd_name = getattr(axis_data, "spmd_name", None)
    return batching.batch_jaxpr(closed, size, in_dims, instantiate, axis_name=name,
                                spmd_axis_name=spmd_name)


def is_nonzero_tangent(t, aval) -> bool:
    # Integer values carry float0 tangents that are always treated as zero: no derivative
    # flows through them, and keeping them out keeps every loop carry differentiable.
    return not isinstance(t, ad.Zero) and _dtypes.is_inexact(aval.dtype)


def zeros(aval):
    return ad.zeros_like_aval(aval)


def instantiate(ct, aval):
    """A cotangent as a value: zeros of ``aval`` where none flows (``Zero`` or None)."""
    if isinstance(ct, ad.Zero) or ct is None:
        return zeros(aval)
    return ct


def types_str(tree, avals) -> str:
    try:
        return str(tree_util.tree_unflatten(tree, [_AvalName(a) for a in avals]))
    except (TypeError, ValueError, AssertionError):  # leaf count off: render a flat list
        return "(" + ", ".join(a.str_short() for a in avals) + ")"


class _AvalName:
    """Prints as an aval's short type name inside a rendered pytree."""

    def __init__(self, aval):
        self.aval = aval

    def __repr__(self):
        return self.aval.str_short()


def same_type(a, b) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype


def check_carry(what: str, in_tree, in_avals, out_tree, out_avals):
    """Raise a TypeError naming both types when a loop body changes its carry's type.

    Returns the input avals to re-stage with when only weak types differ (a Python scalar
    initial value meets a typed result, as JAX promotes), or None when the types agree."""
    mismatch = TypeError(
        f"{what} must return a carry of the same type as its input carry (same pytree "
        f"structure, shapes and dtypes), but the input carry has type "
        f"{types_str(in_tree, in_avals)} and the output has type "
        f"{types_str(out_tree, out_avals)}.")
    if in_tree != out_tree or len(in_avals) != len(out_avals):
        raise mismatch
    promoted, changed = [], False
    for a, b in zip(in_avals, out_avals):
        if a.shape != b.shape:
            raise mismatch
        if a.dtype == b.dtype and (a.weak_type == b.weak_type or not a.weak_type):
            promoted.append(a)  # equal, or a weak result that fits a typed carry
        elif a.weak_type and (a.dtype == b.dtype or _dtypes.is_inexact(b.dtype)
                              or not _dtypes.is_inexact(a.dtype)):
            promoted.append(b)  # a Python scalar initial value takes the result's type
            changed = True
        else:
            raise mismatch
    return promoted if changed else None


def cast_leaves(leaves, avals):
    return [ew.convert_element_type(x, a.dtype, weak_type=a.weak_type)
            if (get_aval(x).dtype, get_aval(x).weak_type) != (a.dtype, a.weak_type) else x
            for x, a in zip(leaves, avals)]

