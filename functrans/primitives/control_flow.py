"""Structured control flow: ``cond``/``switch``, ``while_loop``, ``fori_loop``, ``scan``, ``map``.

Each construct is a *higher-order primitive*: its equation holds closed sub-jaxprs (the
branches, the loop body) staged once from the user's Python functions, so a 1000-step loop is
one equation with one body, never 1000 copies. Values the user's functions close over
(arrays, tracers of enclosing transforms) become explicit leading operands, so every
transform sees them as ordinary inputs.

Three primitives carry everything:

``cond``   operands ``(index, *consts, *operands)``; ``branches``: one closed jaxpr per branch,
           each taking ``(*consts, *operands)``. ``cond``/``switch`` both bind it.
``while``  operands ``(*cond_consts, *body_consts, *carry)``; ``cond_jaxpr``: carry -> bool[],
           ``body_jaxpr``: carry -> carry.
``scan``   operands ``(*consts, *carry, *xs)``; ``jaxpr``: ``(consts, carry, x) -> (carry, y)``,
           run ``length`` times over the leading axis of ``xs``, stacking the ``y``.
           ``fori_loop`` with static bounds and ``map`` are scans.

Their rules sit beside them: reference implementation, shape rule, JVP, partial evaluation
(so ``linearize``/``grad`` split each loop into a known primal loop and a linear loop),
transposition, batching, and dead-code elimination (unused results, the loop carries and
body equations feeding only them, and operands no longer read are dropped). Reverse mode
through ``while_loop`` (which JAX refuses) works too: when the trip count (or, under
``vmap``, a bound on it) is known while differentiating, the loop is re-expressed as a
``scan`` of that many steps, which stores per-iteration residuals; when it is staged (under
``jit``), nothing per iteration is stored and the backward loop recomputes each step's
primal carry from the initial one (O(n²) body evaluations, O(1) memory); see
:func:`_while_partial_eval` and :func:`_while_transpose`.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from functrans import _backends, _dtypes, core, tree_util
from functrans.core import ClosedJaxpr, Jaxpr, Literal, Primitive, ShapedArray, Tracer, Var, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters import partial_eval as pe
from functrans.interpreters.staging import closed_over_consts_as_args, trace_to_jaxpr_dynamic
from functrans.primitives import elementwise as ew
from functrans.primitives import reductions, structural


def platform_dependent(*args, default: Callable | None = None, **per_platform: Callable):
    """Call the function given for the default backend's platform (``cpu=...`` or
    ``cuda=...``) on ``args``, or ``default`` if there is none.

        >>> platform_dependent(1.0, cpu=lambda x: x + 1, default=lambda x: x - 1)
        2.0
    """
    for name in per_platform:
        if name == "gpu":
            raise ValueError("Use 'cuda' or 'rocm' for lax.platform_dependent.")
    platform = _backends.default_platform()
    platform = {"gpu": "cuda"}.get(platform, platform)
    branch = per_platform.get(platform, default)
    if branch is None:
        raise NotImplementedError(f"platform_dependent: no branch for platform {platform!r} "
                                  f"(given: {sorted(per_platform)}) and no default")
    return branch(*args)


__all__ = ["cond", "fori_loop", "map", "platform_dependent", "scan", "switch", "while_loop"]


# =============================================================================================
# Shared helpers: staging bodies, evaluating sub-jaxprs, reordering inputs
# =============================================================================================


def _split(seq, sizes) -> list[list]:
    """Cut ``seq`` into consecutive pieces of the given sizes (and the rest, if any)."""
    seq = list(seq)
    out, start = [], 0
    for n in sizes:
        out.append(seq[start:start + n])
        start += n
    out.append(seq[start:])
    return out


def _merge(flags, when_true, when_false) -> list:
    """Interleave two lists back into one, taking from ``when_true`` where ``flags`` is True."""
    it_true, it_false = iter(when_true), iter(when_false)
    return [next(it_true) if f else next(it_false) for f in flags]


def _eval(closed: ClosedJaxpr, *args) -> list:
    """Evaluate a closed jaxpr by binding (so it is transformed by whatever trace is active)."""
    return core.eval_jaxpr(closed.jaxpr, closed.consts, *args)


def _eval_numpy(closed: ClosedJaxpr, args) -> list:
    """Evaluate a closed jaxpr on NumPy values with the reference interpreter."""
    consts = [core.to_numpy(c) for c in closed.consts]
    return core.eval_jaxpr_numpy(closed.jaxpr, consts, list(args))


def _staged(fun: Callable, in_avals) -> ClosedJaxpr:
    """Stage an internal wrapper (which only evaluates closed jaxprs) into a closed jaxpr."""
    jaxpr, consts = trace_to_jaxpr_dynamic(fun, list(in_avals))
    if any(isinstance(c, Tracer) for c in consts):
        raise AssertionError("a control-flow rule closed over a traced value")
    return ClosedJaxpr(jaxpr, consts)


def _stage_user_fun(fun: Callable, in_tree, in_avals, what: str):
    """Stage a user function taking the pytree ``in_tree`` of arrays typed ``in_avals``.

    Returns ``(closed, consts, out_tree)``: the closed jaxpr takes the closed-over values
    (``consts``, to be passed as leading operands) followed by the flat arguments."""
    out_tree_cell = []

    def flat_fun(*flat_args):
        out = fun(*tree_util.tree_unflatten(in_tree, flat_args))
        leaves, out_tree = tree_util.tree_flatten(out)
        for leaf in leaves:
            if not (isinstance(leaf, Tracer) or core.valid_jaxtype(leaf)):
                raise TypeError(f"{what} returned a value of type {type(leaf).__name__}, "
                                f"which is not an array: {leaf!r}")
        out_tree_cell.append(out_tree)
        return leaves

    jaxpr, consts = trace_to_jaxpr_dynamic(flat_fun, list(in_avals))
    closed, consts = closed_over_consts_as_args(ClosedJaxpr(jaxpr, consts))
    return closed, consts, out_tree_cell[0]


def _permute(closed: ClosedJaxpr, in_order=None, out_order=None) -> ClosedJaxpr:
    """The same program with its inputs and/or outputs listed in another order."""
    j = closed.jaxpr
    invars = j.invars if in_order is None else [j.invars[i] for i in in_order]
    outvars = j.outvars if out_order is None else [j.outvars[i] for i in out_order]
    return ClosedJaxpr(Jaxpr(j.constvars, invars, outvars, j.eqns), closed.consts)


def _with_unused_inputs(closed: ClosedJaxpr, avals, position: int) -> ClosedJaxpr:
    """The same program taking extra (ignored) inputs of types ``avals`` at ``position``."""
    j = closed.jaxpr
    extra = [Var(a) for a in avals]
    invars = j.invars[:position] + extra + j.invars[position:]
    return ClosedJaxpr(Jaxpr(j.constvars, invars, j.outvars, j.eqns), closed.consts)


def _prune(closed: ClosedJaxpr, used_outputs, keep_inputs) -> tuple[ClosedJaxpr, list[bool]]:
    """``closed`` cut down to its used outputs and the equations they need. An input stays
    when the remaining program reads it or ``keep_inputs`` asks for it (a loop carry must stay
    even when unread, since it is also an output). Returns the program and the kept inputs."""
    jaxpr, read = pe.dce_jaxpr(closed.jaxpr, list(used_outputs))
    kept = [r or k for r, k in zip(read, keep_inputs)]
    const_of = {id(v): c for v, c in zip(closed.jaxpr.constvars, closed.consts)}
    invars = [v for v, k in zip(closed.jaxpr.invars, kept) if k]
    return (ClosedJaxpr(Jaxpr(jaxpr.constvars, invars, jaxpr.outvars, jaxpr.eqns),
                        [const_of[id(v)] for v in jaxpr.constvars]), kept)


def _batch_jaxpr(axis_data, closed, size, in_dims, instantiate):
    """Batch a sub-jaxpr under the same named axis as the enclosing vmap, so collectives
    inside loop bodies and branches still find their axis."""
    name = getattr(axis_data, "name", None)
    spmd_name = getattr(axis_data, "spmd_name", None)
    return batching.batch_jaxpr(closed, size, in_dims, instantiate, axis_name=name,
                                spmd_axis_name=spmd_name)


def _is_nonzero_tangent(t, aval) -> bool:
    # Integer values carry float0 tangents that are always treated as zero: no derivative
    # flows through them, and keeping them out keeps every loop carry differentiable.
    return not isinstance(t, ad.Zero) and _dtypes.is_inexact(aval.dtype)


def _zeros(aval):
    return ad.zeros_like_aval(aval)


def _types_str(tree, avals) -> str:
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


def _same_type(a, b) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype


def _check_carry(what: str, in_tree, in_avals, out_tree, out_avals):
    """Raise a TypeError naming both types when a loop body changes its carry's type.

    Returns the input avals to re-stage with when only weak types differ (a Python scalar
    initial value meets a typed result, as JAX promotes), or None when the types agree."""
    mismatch = TypeError(
        f"{what} must return a carry of the same type as its input carry (same pytree "
        f"structure, shapes and dtypes), but the input carry has type "
        f"{_types_str(in_tree, in_avals)} and the output has type "
        f"{_types_str(out_tree, out_avals)}.")
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


def _cast_leaves(leaves, avals):
    return [ew.convert_element_type(x, a.dtype, weak_type=a.weak_type)
            if (get_aval(x).dtype, get_aval(x).weak_type) != (a.dtype, a.weak_type) else x
            for x, a in zip(leaves, avals)]


# =============================================================================================
# cond / switch
# =============================================================================================

cond_p = Primitive("cond", multiple_results=True)


@cond_p.def_impl
def _cond_impl(index, *operands, branches):
    i = int(np.clip(np.asarray(index), 0, len(branches) - 1))
    return _eval_numpy(branches[i], operands)


@cond_p.def_abstract_eval
def _cond_abstract_eval(index, *operands, branches):
    if index.shape != () or not _dtypes.is_integer(index.dtype):
        raise TypeError(f"cond: the branch index must be an integer scalar, got "
                        f"{index.str_short()}")
    for k, branch in enumerate(branches):
        if len(branch.in_avals) != len(operands) or not all(
                _same_type(a, b) for a, b in zip(branch.in_avals, operands)):
            raise TypeError(f"cond: branch {k} takes ({', '.join(a.str_short() for a in branch.in_avals)}) "
                            f"but the operands are ({', '.join(a.str_short() for a in operands)})")
    first = branches[0].out_avals
    for k, branch in enumerate(branches[1:], 1):
        if len(branch.out_avals) != len(first) or not all(
                _same_type(a, b) for a, b in zip(branch.out_avals, first)):
            raise TypeError(f"cond: branch {k} returns ({', '.join(a.str_short() for a in branch.out_avals)}) "
                            f"but branch 0 returns ({', '.join(a.str_short() for a in first)})")
    return [a.update(weak_type=all(b.out_avals[k].weak_type for b in branches))
            for k, a in enumerate(first)]


def _cond_jvp(primals, tangents, *, branches):
    index, *operands = primals
    op_tangents = tangents[1:]
    nonzeros = [_is_nonzero_tangent(t, get_aval(x)) for t, x in zip(op_tangents, operands)]
    num_out = len(branches[0].out_avals)
    # Every branch must produce the same outputs, so a tangent is nonzero if any branch's is.
    out_nonzeros = [False] * num_out
    for branch in branches:
        _, nz = ad.jvp_jaxpr(branch, nonzeros, instantiate=False)
        out_nonzeros = [a or b for a, b in zip(out_nonzeros, nz)]
    out_nonzeros = [nz and _dtypes.is_inexact(a.dtype)
                    for nz, a in zip(out_nonzeros, branches[0].out_avals)]
    jvp_branches = tuple(ad.jvp_jaxpr(b, nonzeros, instantiate=out_nonzeros)[0] for b in branches)
    nz_tangents = [t for t, nz in zip(op_tangents, nonzeros) if nz]
    outs = cond_p.bind(index, *operands, *nz_tangents, branches=jvp_branches)
    primals_out, tangents_out = outs[:num_out], outs[num_out:]
    tangents_out = _merge(out_nonzeros, tangents_out,
                          [ad.Zero(ad.tangent_aval(a)) for a, nz in
                           zip(branches[0].out_avals, out_nonzeros) if not nz])
    return primals_out, tangents_out


def _cond_partial_eval(trace, tracers, *, branches):
    index_tracer, *op_tracers = tracers
    if not index_tracer.pval.is_known():
        return trace.default_process_primitive(cond_p, tracers, dict(branches=branches))
    unknowns = [not t.pval.is_known() for t in op_tracers]
    num_out = len(branches[0].out_avals)
    out_unknowns = [False] * num_out
    for branch in branches:
        _, _, uk, _ = pe.partial_eval_jaxpr(branch, unknowns, instantiate=False)
        out_unknowns = [a or b for a, b in zip(out_unknowns, uk)]
    splits = [pe.partial_eval_jaxpr(b, unknowns, instantiate=out_unknowns) for b in branches]
    num_known_out = num_out - sum(out_unknowns)
    # Branches save different residuals; the known cond returns all of them (zeros in the
    # slots of the branches not taken) so that every branch has the same output types.
    res_avals = [known.out_avals[num_known_out:] for known, _, _, _ in splits]
    all_res_avals = [a for avals in res_avals for a in avals]
    offsets = np.cumsum([0] + [len(r) for r in res_avals]).tolist()
    known_in_avals = [t.aval for t in op_tracers if t.pval.is_known()]
    unknown_in_avals = [t.aval for t in op_tracers if not t.pval.is_known()]

    def known_branch(k, known):
        def fun(*known_args):
            outs = _eval(known, *known_args)
            res = [_zeros(a) for a in all_res_avals]
            res[offsets[k]:offsets[k + 1]] = outs[num_known_out:]
            return outs[:num_known_out] + res
        return _staged(fun, known_in_avals)

    def unknown_branch(k, unknown):
        def fun(*args):
            res, uk_args = args[:len(all_res_avals)], args[len(all_res_avals):]
            return _eval(unknown, *res[offsets[k]:offsets[k + 1]], *uk_args)
        return _staged(fun, all_res_avals + unknown_in_avals)

    known_branches = tuple(known_branch(k, s[0]) for k, s in enumerate(splits))
    unknown_branches = tuple(unknown_branch(k, s[1]) for k, s in enumerate(splits))
    index = index_tracer.pval.get_known()
    known_vals = [t.pval.get_known() for t in op_tracers if t.pval.is_known()]
    known_outs = cond_p.bind(index, *known_vals, branches=known_branches)
    known_out_vals, residuals = known_outs[:num_known_out], known_outs[num_known_out:]
    res_tracers = [trace.instantiate_const(trace.pure(r)) for r in residuals]
    unknown_tracers = [t for t in op_tracers if not t.pval.is_known()]
    unknown_outs = trace.default_process_primitive(
        cond_p, [trace.instantiate_const(index_tracer)] + res_tracers + unknown_tracers,
        dict(branches=unknown_branches))
    return _merge(out_unknowns, unknown_outs, known_out_vals)


def _cond_transpose(cts, index, *operands, branches):
    if ad.is_undefined_primal(index):
        raise AssertionError("cond is not linear in its branch index")
    undefined = [ad.is_undefined_primal(x) for x in operands]
    defined = [x for x in operands if not ad.is_undefined_primal(x)]
    ct_nonzero = [not isinstance(ct, ad.Zero) for ct in cts]
    out_avals = branches[0].out_avals
    res_avals = [get_aval(x) for x in defined]
    ct_avals = [ad.tangent_aval(a) for a, nz in zip(out_avals, ct_nonzero) if nz]
    lin_avals = [x.aval for x in operands if ad.is_undefined_primal(x)]

    def transpose_branch(branch):
        def fun(*args):
            res, cts_in = args[:len(res_avals)], args[len(res_avals):]
            primals = _merge(undefined, [ad.UndefinedPrimal(a) for a in lin_avals], res)
            cts_full = _merge(ct_nonzero, cts_in,
                              [ad.Zero(ad.tangent_aval(a)) for a, nz in zip(out_avals, ct_nonzero) if not nz])
            cts_out = ad.backward_pass(branch.jaxpr, branch.consts, primals, cts_full)
            return [_instantiate(ct, a) for ct, a in
                    zip([c for c, u in zip(cts_out, undefined) if u], lin_avals)]
        return _staged(fun, res_avals + ct_avals)

    t_branches = tuple(transpose_branch(b) for b in branches)
    outs = cond_p.bind(index, *defined, *[ct for ct in cts if not isinstance(ct, ad.Zero)],
                       branches=t_branches)
    outs = iter(outs)
    return [None] + [next(outs) if u else None for u in undefined]


def _instantiate(ct, aval):
    if isinstance(ct, ad.Zero) or ct is None:
        return _zeros(aval)
    return ct


def _cond_batch(vals, dims, *, branches, axis_data=None):
    index, *operands = vals
    index_dim, *op_dims = dims
    size = batching.batch_size_of(vals, dims)
    num_out = len(branches[0].out_avals)
    if index_dim is None:
        out_batched = [False] * num_out
        for branch in branches:
            _, out_dims = _batch_jaxpr(axis_data, branch, size, op_dims, False)
            out_batched = [a or d is not None for a, d in zip(out_batched, out_dims)]
        new_branches = tuple(_batch_jaxpr(axis_data, b, size, op_dims, out_batched)[0] for b in branches)
        outs = cond_p.bind(index, *operands, branches=new_branches)
        return outs, [0 if b else None for b in out_batched]
    # A per-example predicate: every branch runs on the whole batch and each example keeps
    # the result of its own branch (the branches are pure, so running all is safe).
    per_branch = [_eval(_batch_jaxpr(axis_data, b, size, op_dims, True)[0], *operands) for b in branches]
    index = batching.moveaxis(index, index_dim, 0)
    index = ew.convert_element_type(index, np.int32)
    index = ew.clamp(np.int32(0), index, np.int32(len(branches) - 1))
    results = []
    for k in range(num_out):
        cases = [outs[k] for outs in per_branch]
        shape = get_aval(cases[0]).shape
        which = structural.broadcast_in_dim(index, shape, (0,)) if len(shape) > 1 else index
        results.append(ew.select_n(which, *cases))
    return results, [0] * num_out


def _cond_dce(eqn, used_outputs):
    """Drop unused results from every branch, the equations computing only them, and the
    operands no branch reads any more (the index always stays)."""
    branches = eqn.params["branches"]
    num_ops = len(eqn.invars) - 1
    read = [False] * num_ops
    for branch in branches:
        _, branch_read = pe.dce_jaxpr(branch.jaxpr, list(used_outputs))
        read = [a or b for a, b in zip(read, branch_read)]
    # every branch must keep the same signature: the union of what any branch reads
    new_branches = tuple(_prune(b, used_outputs, read)[0] for b in branches)
    return eqn.replace(
        invars=[eqn.invars[0]] + [v for v, r in zip(eqn.invars[1:], read) if r],
        outvars=[v for v, u in zip(eqn.outvars, used_outputs) if u],
        params=dict(eqn.params, branches=new_branches))


cond_p.jvp = _cond_jvp
cond_p.partial_eval = _cond_partial_eval
cond_p.dce = _cond_dce
cond_p.transpose = _cond_transpose
cond_p.batch = _cond_batch
cond_p.batch_needs_axis = True


def _unify_branch_outputs(jaxprs, out_trees, names):
    """Check the branches return the same pytree of the same types; weak-typed results that
    differ only by dtype are promoted to the others' dtype (as JAX does)."""
    for k in range(1, len(jaxprs)):
        if out_trees[k] != out_trees[0]:
            raise TypeError(
                f"{names[0]} and {names[k]} must return the same pytree structure, but "
                f"{names[0]} returns {_types_str(out_trees[0], jaxprs[0].out_avals)} and "
                f"{names[k]} returns {_types_str(out_trees[k], jaxprs[k].out_avals)}.")
    num_out = len(jaxprs[0].out_avals)
    targets = []
    for i in range(num_out):
        avals = [j.out_avals[i] for j in jaxprs]
        strong = [a for a in avals if not a.weak_type]
        target = strong[0] if strong else avals[0]
        for k, a in enumerate(avals):
            if a.shape != target.shape or (a.dtype != target.dtype and not a.weak_type) or \
                    any(s.dtype != target.dtype or s.shape != target.shape for s in strong):
                first = 0 if k else next(m for m in range(len(avals)) if m != k)
                raise TypeError(
                    f"{names[first]} and {names[k]} must return values of the same types, but "
                    f"{names[first]} returns {_types_str(out_trees[first], jaxprs[first].out_avals)} "
                    f"and {names[k]} returns {_types_str(out_trees[k], jaxprs[k].out_avals)}.")
        targets.append(target)
    fixed = []
    for j in jaxprs:
        if all(a.dtype == t.dtype for a, t in zip(j.out_avals, targets)):
            fixed.append(j)
            continue

        def fun(*args, j=j):
            return _cast_leaves(_eval(j, *args), targets)
        fixed.append(_staged(fun, j.in_avals))
    return fixed


def _join_consts(jaxprs, consts_per_branch):
    """Give every branch the same inputs: all branches' closed-over values, then the
    operands. Branch ``k`` ignores the values that belong to the others."""
    all_avals = [get_aval(c) for consts in consts_per_branch for c in consts]
    joined, offset = [], 0
    for closed, consts in zip(jaxprs, consts_per_branch):
        j, n = closed.jaxpr, len(consts)
        before = [Var(a) for a in all_avals[:offset]]
        after = [Var(a) for a in all_avals[offset + n:]]
        invars = before + j.invars[:n] + after + j.invars[n:]
        joined.append(ClosedJaxpr(Jaxpr(j.constvars, invars, j.outvars, j.eqns), closed.consts))
        offset += n
    return tuple(joined), [c for consts in consts_per_branch for c in consts]


def _bind_cond(index, branch_funs, operands, names):
    leaves, in_tree = tree_util.tree_flatten(tuple(operands))
    avals = [get_aval(x) for x in leaves]
    jaxprs, consts, out_trees = [], [], []
    for fun, name in zip(branch_funs, names):
        closed, c, out_tree = _stage_user_fun(fun, in_tree, avals, name)
        jaxprs.append(closed)
        consts.append(c)
        out_trees.append(out_tree)
    checked = _unify_branch_outputs(jaxprs, out_trees, names)
    branches, all_consts = _join_consts(checked, consts)
    outs = cond_p.bind(index, *all_consts, *leaves, branches=branches)
    return tree_util.tree_unflatten(out_trees[0], outs)


def _scalar_operand(x, what: str):
    aval = get_aval(x)
    if aval.shape != ():
        raise TypeError(f"{what} must be a scalar, got {aval.str_short()}")
    return aval


# ``operand=None`` is an operand (None, an empty pytree), as in JAX: told apart from "not
# given" by this marker
_NO_OPERAND = object()


def cond(pred, true_fun: Callable, false_fun: Callable, *operands, operand=_NO_OPERAND):
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``, staged as one
    branch primitive: both functions are traced, only the chosen one runs. Under ``vmap``
    with a batched ``pred`` both run and each example takes its own branch's result.

    ``pred`` is a scalar bool (or number, compared with 0). The branches must return the same
    pytree of the same types. A Python ``if`` on a traced value cannot branch at run time;
    this can.

        >>> import functrans.numpy as jnp
        >>> from functrans import lax
        >>> lax.cond(jnp.array(2.0) > 1, lambda x: x * 10, lambda x: x - 1, jnp.array(3.0))
        Array(30., dtype=float32)
    """
    if operand is not _NO_OPERAND:
        if operands:
            raise TypeError("cond: pass the operands positionally or as operand=, not both")
        operands = (operand,)
    if not (callable(true_fun) and callable(false_fun)):
        raise TypeError("cond: true_fun and false_fun must be callable")
    aval = _scalar_operand(pred, "cond: the predicate")
    if aval.dtype != _dtypes.bool_:
        if not (_dtypes.is_integer(aval.dtype) or _dtypes.is_float(aval.dtype)):
            raise TypeError(f"cond: the predicate must be a boolean or number, got {aval.str_short()}")
        pred = ew.ne(pred, 0)
    index = ew.convert_element_type(pred, np.int32)
    return _bind_cond(index, (false_fun, true_fun), operands, ("false_fun", "true_fun"))


def switch(index, branches: Sequence[Callable], *operands, operand=_NO_OPERAND):
    """``branches[index](*operands)``, with ``index`` clamped to ``[0, len(branches) - 1]``.

        >>> import functrans.numpy as jnp
        >>> from functrans import lax
        >>> lax.switch(1, [lambda x: x + 1, lambda x: x * 2, lambda x: -x], jnp.array(5.0))
        Array(10., dtype=float32)
    """
    if operand is not _NO_OPERAND:
        if operands:
            raise TypeError("switch: pass the operands positionally or as operand=, not both")
        operands = (operand,)
    branches = tuple(branches)
    if not branches:
        raise ValueError("switch: needs at least one branch")
    if not all(callable(b) for b in branches):
        raise TypeError("switch: every branch must be callable")
    aval = _scalar_operand(index, "switch: the index")
    if not _dtypes.is_integer(aval.dtype):
        raise TypeError(f"switch: the index must be an integer scalar, got {aval.str_short()}")
    if len(branches) == 1:
        return branches[0](*operands)
    index = ew.convert_element_type(index, np.int32)
    index = ew.clamp(np.int32(0), index, np.int32(len(branches) - 1))
    return _bind_cond(index, branches, operands, tuple(f"branch {k}" for k in range(len(branches))))


# =============================================================================================
# while_loop
# =============================================================================================

while_p = Primitive("while", multiple_results=True)


@while_p.def_impl
def _while_impl(*args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    cond_consts, body_consts, carry = _split(args, [cond_nconsts, body_nconsts])
    while bool(np.asarray(_eval_numpy(cond_jaxpr, cond_consts + carry)[0])):
        carry = _eval_numpy(body_jaxpr, body_consts + carry)
    return carry


@while_p.def_abstract_eval
def _while_abstract_eval(*avals, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    _, _, carry = _split(avals, [cond_nconsts, body_nconsts])
    body_out = body_jaxpr.out_avals
    if len(body_out) != len(carry) or not all(_same_type(a, b) for a, b in zip(carry, body_out)):
        raise TypeError(f"while: the body maps ({', '.join(a.str_short() for a in carry)}) to "
                        f"({', '.join(a.str_short() for a in body_out)}); the carry type must not change")
    pred = cond_jaxpr.out_avals
    if len(pred) != 1 or pred[0].shape != () or pred[0].dtype != _dtypes.bool_:
        raise TypeError(f"while: the condition must return a boolean scalar, got "
                        f"({', '.join(a.str_short() for a in pred)})")
    return list(carry)


def _while_jvp(primals, tangents, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    cond_consts, body_consts, carry = _split(primals, [cond_nconsts, body_nconsts])
    _, body_const_t, carry_t = _split(tangents, [cond_nconsts, body_nconsts])
    bconst_nz = [_is_nonzero_tangent(t, get_aval(x)) for t, x in zip(body_const_t, body_consts)]
    carry_nz = [_is_nonzero_tangent(t, get_aval(x)) for t, x in zip(carry_t, carry)]
    carry_avals = [get_aval(x) for x in carry]
    # A carry's tangent is nonzero if it is nonzero on entry or becomes so after any number
    # of iterations: iterate the body's tangent dependence to a fixed point.
    while True:
        _, out_nz = ad.jvp_jaxpr(body_jaxpr, bconst_nz + carry_nz, instantiate=carry_nz)
        new_nz = [(a or b) and _dtypes.is_inexact(av.dtype)
                  for a, b, av in zip(carry_nz, out_nz, carry_avals)]
        if new_nz == carry_nz:
            break
        carry_nz = new_nz
    body_jvp, _ = ad.jvp_jaxpr(body_jaxpr, bconst_nz + carry_nz, instantiate=carry_nz)
    nb, nc, nbt = len(body_consts), len(carry), sum(bconst_nz)
    nct = sum(carry_nz)
    # jvp_jaxpr orders inputs (consts, carry, const tangents, carry tangents); the while
    # primitive wants all body consts first, then the carry.
    order = list(range(nb)) + list(range(nb + nc, nb + nc + nbt)) + \
        list(range(nb, nb + nc)) + list(range(nb + nc + nbt, nb + nc + nbt + nct))
    body_jvp = _permute(body_jvp, in_order=order)
    tangent_avals = [ad.tangent_aval(a) for a, nz in zip(carry_avals, carry_nz) if nz]
    cond_aug = _with_unused_inputs(cond_jaxpr, tangent_avals, len(cond_jaxpr.in_avals))
    bconst_tangents = [t for t, nz in zip(body_const_t, bconst_nz) if nz]
    carry_tangents = [ad.instantiate_zeros(t) if not isinstance(t, ad.Zero) else _zeros(ad.tangent_aval(a))
                      for t, a, nz in zip(carry_t, carry_avals, carry_nz) if nz]
    outs = while_p.bind(*cond_consts, *body_consts, *bconst_tangents, *carry, *carry_tangents,
                        cond_jaxpr=cond_aug, body_jaxpr=body_jvp, cond_nconsts=cond_nconsts,
                        body_nconsts=nb + nbt)
    primals_out, tangents_out = outs[:nc], outs[nc:]
    tangents_out = _merge(carry_nz, tangents_out,
                          [ad.Zero(ad.tangent_aval(a)) for a, nz in zip(carry_avals, carry_nz) if not nz])
    return primals_out, tangents_out


def _while_partial_eval(trace, tracers, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    """Split a while loop whose carry is partly unknown (under ``linearize``: primal carries
    known, tangent carries unknown), so that reverse mode works — which JAX refuses, the trip
    count being data dependent.

    The known part of the loop runs first, counting its iterations. Then:

    * the count is a number (the primal is being evaluated, e.g. ``grad(f)(x)``): the loop
      is exactly a ``scan`` of that many steps, and the scan rule splits it into a known
      scan stacking the per-iteration residuals and a linear scan that transposes;
    * only an upper bound is known (under ``vmap`` each example has its own count, and the
      batch's largest is known): a scan of that many steps whose step ``i`` updates the
      carry only while ``i < count`` (the masking is a select, so it differentiates);
    * the count is staged (the primal runs under ``jit``): residual storage of unknown size
      cannot be allocated, so nothing per iteration is stored. The unknown side is a loop
      that runs exactly ``count`` times from the initial carry, recomputing the known carry
      as it goes (:func:`_counted_loop`); its residuals are the initial known carry, the
      constants and the count. It evaluates forward as it is (``jvp``, ``linearize``), and
      :func:`_while_transpose` runs it backwards by recomputation.
    """
    params = dict(cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr, cond_nconsts=cond_nconsts,
                  body_nconsts=body_nconsts)
    cc_tracers, bc_tracers, carry_tracers = _split(tracers, [cond_nconsts, body_nconsts])
    cc_uk = [not t.pval.is_known() for t in cc_tracers]
    bc_uk = [not t.pval.is_known() for t in bc_tracers]
    carry_uk = [not t.pval.is_known() for t in carry_tracers]
    while True:
        _, _, out_uk, _ = pe.partial_eval_jaxpr(body_jaxpr, bc_uk + carry_uk, instantiate=carry_uk)
        new_uk = [a or b for a, b in zip(carry_uk, out_uk)]
        if new_uk == carry_uk:
            break
        carry_uk = new_uk
    _, cond_used = pe.dce_jaxpr(cond_jaxpr.jaxpr, [True])
    cond_reads_unknown = any(u and uk for u, uk in zip(cond_used, cc_uk + carry_uk))
    if all(carry_uk) or cond_reads_unknown:
        return trace.default_process_primitive(while_p, tracers, params)

    known_body, _, _, _ = pe.partial_eval_jaxpr(body_jaxpr, bc_uk + carry_uk, instantiate=carry_uk)
    carry_avals = [t.aval for t in carry_tracers]
    count, known_results = _count_trips(
        [t.pval.get_known() for t in cc_tracers],
        [t.pval.get_known() for t, uk in zip(bc_tracers, bc_uk) if not uk],
        [t.pval.get_known() for t, uk in zip(carry_tracers, carry_uk) if not uk],
        cond_jaxpr=cond_jaxpr, known_body=known_body, carry_avals=carry_avals,
        carry_known=[not uk for uk in carry_uk], keep_carry=True)
    exact = _concrete_value(count)
    num_carry = len(carry_tracers)
    if exact is not None:
        # The trip count is a number: the loop is exactly a scan of that many steps.
        scan_params = dict(jaxpr=body_jaxpr, num_consts=body_nconsts, num_carry=num_carry,
                           length=int(exact), reverse=False,
                           linear=(False,) * (body_nconsts + num_carry), unroll=1)
        return _scan_partial_eval(trace, bc_tracers + carry_tracers, **scan_params)
    bound = _known_upper_bound(count)
    if bound is not None:
        # Only an upper bound is known (under vmap each example has its own trip count):
        # scan that many steps; step i updates the carry only while i < count.
        masked = _masked_body(body_jaxpr, body_nconsts, carry_avals)
        bound = int(bound)
        scan_params = dict(jaxpr=masked, num_consts=body_nconsts + 1, num_carry=num_carry + 1,
                           length=bound, reverse=False,
                           linear=(False,) * (body_nconsts + num_carry + 2), unroll=1)
        outs = _scan_partial_eval(trace, bc_tracers + [trace.pure(count), trace.pure(np.int32(0))]
                                  + carry_tracers, **scan_params)
        return outs[1:]
    # The trip count is staged: keep the known results of the counting loop above, and stage
    # for the unknown carries a loop of exactly `count` steps over the whole carry.
    counted_cond, counted_body = _counted_loop(body_jaxpr, body_nconsts, carry_avals)
    operands = ([trace.instantiate_const(trace.pure(count))] +
                [trace.instantiate_const(t) for t in bc_tracers] +
                [trace.instantiate_const(trace.pure(np.int32(0)))] +
                [trace.instantiate_const(t) for t in carry_tracers])
    outs = trace.default_process_primitive(
        while_p, operands, dict(cond_jaxpr=counted_cond, body_jaxpr=counted_body,
                                cond_nconsts=1, body_nconsts=body_nconsts))
    return _merge(carry_uk, [o for o, uk in zip(outs[1:], carry_uk) if uk], known_results)


_COUNTER = ShapedArray((), np.int32)


def _counted_loop(body_jaxpr, body_nconsts, carry_avals):
    """Condition and body of ``for i in range(n): carry = body(carry)`` as a while loop:
    ``cond(n, i, *carry) = i < n``, ``body(*consts, i, *carry) = (i + 1, *body(consts, carry))``."""
    consts_avals = list(body_jaxpr.in_avals[:body_nconsts])

    def cond(n, i, *carry):
        return [ew.lt(i, n)]

    def body(*args):
        consts, (i,), carry = _split(args, [body_nconsts, 1])
        return [ew.add(i, np.int32(1))] + _eval(body_jaxpr, *consts, *carry)

    return (_staged(cond, [_COUNTER, _COUNTER] + list(carry_avals)),
            _staged(body, consts_avals + [_COUNTER] + list(carry_avals)))


def _count_trips(cond_consts, known_consts, known_carry, *, cond_jaxpr, known_body, carry_avals,
                 carry_known, keep_carry: bool):
    """Run the part of a while loop that reads only known values, counting its iterations.

    ``known_body`` maps ``(known_consts, known_carry)`` to the next known carry (followed by
    any other outputs, ignored); the condition must read only known carries. Returns the
    trip count (int32) and the final known carry — when ``keep_carry``, else only the count
    is computed, with the carries the condition does not need pruned away."""
    num_known = len(known_carry)
    kc_avals = [a for a, k in zip(carry_avals, carry_known) if k]
    cc_avals = [get_aval(x) for x in cond_consts]
    kbc_avals = [get_aval(x) for x in known_consts]

    def count_body(*args):
        consts, (i,), carry = _split(args, [len(kbc_avals), 1])
        outs = _eval(known_body, *consts, *carry)
        return [ew.add(i, np.int32(1))] + outs[:num_known]

    def count_cond(*args):
        consts, (_,), carry = _split(args, [len(cc_avals), 1])
        # the condition reads only known carries; the unknown slots get placeholders
        full = _merge(carry_known, carry, [_zeros(a) for a, k in zip(carry_avals, carry_known) if not k])
        return _eval(cond_jaxpr, *consts, *full)

    body = _staged(count_body, kbc_avals + [_COUNTER] + kc_avals)
    cond = _staged(count_cond, cc_avals + [_COUNTER] + kc_avals)
    outs = _bind_while_pruned(list(cond_consts), list(known_consts),
                              [np.int32(0)] + list(known_carry), cond, body,
                              [True] + [keep_carry] * num_known)
    return outs[0], outs[1:]


def _concrete_value(x):
    """The NumPy value of ``x`` if it is known now (not staged or batched), else None."""
    if isinstance(x, Tracer):
        x = x.to_concrete_value()
        if x is None or isinstance(x, Tracer):
            return None
    return np.asarray(core.to_numpy(x))


def _known_upper_bound(x):
    """An upper bound of the integer ``x`` known now: its value, or for a batched value the
    largest over the batch."""
    value = _concrete_value(x)
    if value is not None:
        return int(np.max(value))
    if isinstance(x, batching.BatchTracer):
        return _known_upper_bound(x.val)
    return None


def _masked_body(body_jaxpr, body_nconsts, carry_avals):
    """``(consts, count, i, carry) -> (i + 1, carry')`` with ``carry' = body(carry)`` while
    ``i < count`` and ``carry`` unchanged afterwards."""
    consts_avals = body_jaxpr.in_avals[:body_nconsts]
    counter = ShapedArray((), np.int32)

    def fun(*args):
        consts, (count, i), carry = _split(args, [body_nconsts, 2])
        new = _eval(body_jaxpr, *consts, *carry)
        active = ew.lt(i, count)
        return [ew.add(i, np.int32(1))] + [ew.select_n(active, old, n) for old, n in zip(carry, new)]

    return _staged(fun, list(consts_avals) + [counter, counter] + list(carry_avals))


def _while_transpose(cts, *args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    """Reverse mode through a while loop linear in some of its body constants and carries
    (the loop :func:`_while_partial_eval` stages when the trip count is not known while
    differentiating). The loop's other values (the primal carry) are known, so its trip
    count ``n`` is found by running their part of the loop again (for the counted loop of
    the partial-evaluation rule, that is only its counter). Then for ``j = n-1`` down to
    ``0`` the cotangent goes back through step ``j``: the known carry before step ``j`` is
    recomputed from the initial one by an inner loop of ``j`` steps, the step's residuals
    come from it, and the linear part of the step is transposed. That costs O(n²) body
    evaluations and O(1) memory, for any trip count, staged or not.
    """
    cc, bc, carry = _split(args, [cond_nconsts, body_nconsts])
    bc_lin = [ad.is_undefined_primal(x) for x in bc]
    carry_undefined = [ad.is_undefined_primal(x) for x in carry]
    # A carry that starts as a given value (an instantiated zero tangent) but is updated
    # from linear values is linear too; its given start only offsets the affine map.
    carry_lin = carry_undefined
    while True:
        known_body, lin_body, out_uk, num_res = pe.partial_eval_jaxpr(
            body_jaxpr, bc_lin + carry_lin, instantiate=carry_lin)
        new_lin = [a or b for a, b in zip(carry_lin, out_uk)]
        if new_lin == carry_lin:
            break
        carry_lin = new_lin
    _, cond_read = pe.dce_jaxpr(cond_jaxpr.jaxpr, [True])
    if any(ad.is_undefined_primal(x) for x in cc) or any(
            r and lin for r, lin in zip(cond_read[cond_nconsts:], carry_lin)):
        raise NotImplementedError("while: cannot transpose a loop whose condition reads a "
                                  "linear (tangent) value")
    carry_avals = list(body_jaxpr.in_avals[body_nconsts:])
    known_consts = [x for x in bc if not ad.is_undefined_primal(x)]
    init_known = [x for x, lin in zip(carry, carry_lin) if not lin]
    lin_const_avals = [x.aval for x in bc if ad.is_undefined_primal(x)]
    lin_carry_avals = [a for a, lin in zip(carry_avals, carry_lin) if lin]
    ct_const_avals = [ad.tangent_aval(a) for a in lin_const_avals]
    ct_carry_avals = [ad.tangent_aval(a) for a in lin_carry_avals]
    nkc, nk, nlc = len(known_consts), len(init_known), len(lin_const_avals)
    kc_avals = [get_aval(x) for x in known_consts]
    k_avals = [a for a, lin in zip(carry_avals, carry_lin) if not lin]

    count, _ = _count_trips(cc, known_consts, init_known, cond_jaxpr=cond_jaxpr,
                            known_body=known_body, carry_avals=carry_avals,
                            carry_known=[not lin for lin in carry_lin], keep_carry=False)

    # The step's residuals as a function of the known constants and the known carry
    # before the step; only the carries it reads need recomputing.
    res_jaxpr, res_reads = _prune(known_body, [False] * nk + [True] * num_res,
                                  [False] * (nkc + nk))
    carry_read = res_reads[nkc:]
    recompute_cond = _staged(lambda j, k, *kc: [ew.lt(k, j)], [_COUNTER, _COUNTER] + k_avals)

    def recompute_step(*args):
        consts, (k,), known = _split(args, [nkc, 1])
        return [ew.add(k, np.int32(1))] + _eval(known_body, *consts, *known)[:nk]

    recompute_body = _staged(recompute_step, kc_avals + [_COUNTER] + k_avals)

    def reverse_step(*args):
        consts, init, (j,), ct_consts, ct_carry = _split(args, [nkc, nk, 1, nlc])
        known = list(init)
        if any(carry_read):
            # the known carry before step j: j steps from the initial one
            outs = _bind_while_pruned([j], list(consts), [np.int32(0)] + known, recompute_cond,
                                      recompute_body, [False] + carry_read)
            known = [o if r else x for o, r, x in zip(outs[1:], carry_read, known)]
        res = _eval(res_jaxpr, *[x for x, r in zip(list(consts) + known, res_reads) if r])
        primals = (list(res) + [ad.UndefinedPrimal(a) for a in lin_const_avals] +
                   [ad.UndefinedPrimal(a) for a in lin_carry_avals])
        cts_in = ad.backward_pass(lin_body.jaxpr, lin_body.consts, primals, list(ct_carry))
        _, ct_step_consts, ct_prev = _split(cts_in, [num_res, nlc])
        new_ct_consts = [acc if isinstance(c, ad.Zero) else ad.add_tangents(acc, c)
                         for acc, c in zip(ct_consts, ct_step_consts)]
        return ([ew.sub(j, np.int32(1))] + new_ct_consts +
                [_instantiate(c, a) for c, a in zip(ct_prev, ct_carry_avals)])

    reverse_cond = _staged(lambda j, *cts_: [ew.ge(j, np.int32(0))],
                           [_COUNTER] + ct_const_avals + ct_carry_avals)
    reverse_body = _staged(reverse_step, kc_avals + k_avals + [_COUNTER] + ct_const_avals +
                           ct_carry_avals)
    ct_carry_out = [_instantiate(ct, a) for ct, a, lin in
                    zip(cts, [ad.tangent_aval(a) for a in carry_avals], carry_lin) if lin]
    outs = _bind_while_pruned(
        [], known_consts + init_known,
        [ew.sub(count, np.int32(1))] + [_zeros(a) for a in ct_const_avals] + ct_carry_out,
        reverse_cond, reverse_body, [True] * (1 + nlc + len(ct_carry_out)))
    _, ct_consts, ct_init = _split(outs, [1, nlc])
    ct_consts, ct_init = iter(ct_consts), iter(ct_init)
    ct_init = [next(ct_init) if lin else None for lin in carry_lin]
    return ([None] * cond_nconsts + [next(ct_consts) if lin else None for lin in bc_lin] +
            [ct if undefined else None for ct, undefined in zip(ct_init, carry_undefined)])


def _while_dce_params(cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, used_carry):
    """Prune a while loop to the carries needed for ``used_carry``: those, the ones the
    condition reads, and (to a fixed point) the ones their updates read. Returns the new
    params, which operands stay and which carries stay."""
    _, cond_read = pe.dce_jaxpr(cond_jaxpr.jaxpr, [True])
    needed = [u or r for u, r in zip(used_carry, cond_read[cond_nconsts:])]
    while True:
        _, body_read = pe.dce_jaxpr(body_jaxpr.jaxpr, needed)
        new_needed = [a or b for a, b in zip(needed, body_read[body_nconsts:])]
        if new_needed == needed:
            break
        needed = new_needed
    new_cond, cond_kept = _prune(cond_jaxpr, [True], [False] * cond_nconsts + needed)
    new_body, body_kept = _prune(body_jaxpr, needed, [False] * body_nconsts + needed)
    keep_cc, keep_bc = cond_kept[:cond_nconsts], body_kept[:body_nconsts]
    params = dict(cond_jaxpr=new_cond, body_jaxpr=new_body, cond_nconsts=sum(keep_cc),
                  body_nconsts=sum(keep_bc))
    return params, keep_cc + keep_bc + needed, needed


def _bind_while_pruned(cond_consts, body_consts, carry, cond_jaxpr, body_jaxpr, used_carry):
    """Bind a while loop cut down to what ``used_carry`` needs; the final carry, with None
    where a carry was pruned."""
    params, keep_in, keep_out = _while_dce_params(cond_jaxpr, body_jaxpr, len(cond_consts),
                                                  len(body_consts), used_carry)
    operands = [x for x, k in zip(list(cond_consts) + list(body_consts) + list(carry), keep_in) if k]
    outs = iter(while_p.bind(*operands, **params))
    return [next(outs) if k else None for k in keep_out]


def _while_dce(eqn, used_outputs):
    """Drop the carries no used result needs (see :func:`_while_dce_params`), with the body
    equations computing them and the constants no longer read."""
    params, keep_in, keep_out = _while_dce_params(**eqn.params, used_carry=list(used_outputs))
    return eqn.replace(invars=[v for v, k in zip(eqn.invars, keep_in) if k],
                       outvars=[v for v, k in zip(eqn.outvars, keep_out) if k],
                       params=dict(eqn.params, **params))


def _while_batch(vals, dims, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, axis_data=None):
    size = batching.batch_size_of(vals, dims)
    vals = [batching.moveaxis(v, d, 0) if d is not None else v for v, d in zip(vals, dims)]
    batched = [d is not None for d in dims]
    cc, bc, carry = _split(vals, [cond_nconsts, body_nconsts])
    cc_b, bc_b, carry_b = _split(batched, [cond_nconsts, body_nconsts])

    def as_dims(flags):
        return [0 if b else None for b in flags]

    def body_fixed_point(carry_b):
        while True:
            _, out_dims = _batch_jaxpr(axis_data, body_jaxpr, size, as_dims(bc_b + carry_b), carry_b)
            new_b = [a or d is not None for a, d in zip(carry_b, out_dims)]
            if new_b == carry_b:
                return carry_b
            carry_b = new_b

    carry_b = body_fixed_point(carry_b)
    cond_b, (pred_dim,) = _batch_jaxpr(axis_data, cond_jaxpr, size, as_dims(cc_b + carry_b), False)
    if pred_dim is None:
        body_b, _ = _batch_jaxpr(axis_data, body_jaxpr, size, as_dims(bc_b + carry_b), carry_b)
        init_b = _split(batched, [cond_nconsts, body_nconsts])[2]
        carry = [batching.bdim_at_front(x, 0 if ib else None, size) if b else x
                 for x, b, ib in zip(carry, carry_b, init_b)]
        outs = while_p.bind(*cc, *bc, *carry, cond_jaxpr=cond_b, body_jaxpr=body_b,
                            cond_nconsts=cond_nconsts, body_nconsts=body_nconsts)
        return outs, as_dims(carry_b)
    # A per-example predicate: loop until every example is done; examples that are done keep
    # their carry (the body still runs on them, its result is discarded by a select).
    init_b = _split(batched, [cond_nconsts, body_nconsts])[2]
    carry_b = [True] * len(carry)
    body_b, _ = _batch_jaxpr(axis_data, body_jaxpr, size, as_dims(bc_b + carry_b), True)
    cond_b, _ = _batch_jaxpr(axis_data, cond_jaxpr, size, as_dims(cc_b + carry_b), True)
    carry = [batching.bdim_at_front(x, 0 if b else None, size) for x, b in zip(carry, init_b)]
    carry_avals = [get_aval(x) for x in carry]
    cc_avals = [get_aval(x) for x in cc]
    bc_avals = [get_aval(x) for x in bc]

    def any_active(*args):
        pred, = _eval(cond_b, *args)
        count = reductions.reduce_sum(ew.convert_element_type(pred, np.int32), (0,))
        return [ew.gt(count, np.int32(0))]

    def masked_body(*args):
        consts_c, consts_b, old = _split(args, [len(cc), len(bc)])
        pred, = _eval(cond_b, *consts_c, *old)
        new = _eval(body_b, *consts_b, *old)
        out = []
        for o, n in zip(old, new):
            shape = get_aval(o).shape
            which = structural.broadcast_in_dim(pred, shape, (0,)) if len(shape) > 1 else pred
            out.append(ew.select_n(which, o, n))
        return out

    new_cond = _staged(any_active, cc_avals + carry_avals)
    new_body = _staged(masked_body, cc_avals + bc_avals + carry_avals)
    outs = while_p.bind(*cc, *cc, *bc, *carry, cond_jaxpr=new_cond, body_jaxpr=new_body,
                        cond_nconsts=len(cc), body_nconsts=len(cc) + len(bc))
    return outs, [0] * len(carry)


while_p.jvp = _while_jvp
while_p.partial_eval = _while_partial_eval
while_p.transpose = _while_transpose
while_p.batch = _while_batch
while_p.dce = _while_dce
while_p.batch_needs_axis = True


def while_loop(cond_fun: Callable, body_fun: Callable, init_val):
    """Repeat ``val = body_fun(val)`` while ``cond_fun(val)`` is True; return the final value.

    Semantically::

        while cond_fun(val):
            val = body_fun(val)
        return val

    but staged as one loop primitive, so the trip count can depend on data. The carry
    (``init_val``, any pytree of arrays) must keep its structure, shapes and dtypes.
    Forward- and reverse-mode differentiation both work. Reverse mode stores per-iteration
    values when the trip count is known while differentiating; under ``jit`` it recomputes
    them instead, taking time quadratic in the trip count (see the module notes), so for
    long loops with a static trip count prefer ``fori_loop``/``scan``.

        >>> from functrans import lax
        >>> lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 2.0), (0, 1.0))
        (Array(5, dtype=int32, weak_type=True), Array(32., dtype=float32, weak_type=True))
    """
    if not (callable(cond_fun) and callable(body_fun)):
        raise TypeError("while_loop: cond_fun and body_fun must be callable")
    leaves, tree = tree_util.tree_flatten(init_val)
    avals = [get_aval(x) for x in leaves]
    in_tree = tree_util.tree_structure((init_val,))
    body, body_consts, body_tree = _stage_user_fun(body_fun, in_tree, avals, "while_loop body_fun")
    promoted = _check_carry("while_loop body_fun", tree, avals, body_tree, body.out_avals)
    if promoted is not None:
        leaves = _cast_leaves(leaves, promoted)
        avals = [get_aval(x) for x in leaves]
        body, body_consts, body_tree = _stage_user_fun(body_fun, in_tree, avals, "while_loop body_fun")
        _check_carry("while_loop body_fun", tree, avals, body_tree, body.out_avals)
    cond_jaxpr, cond_consts, cond_tree = _stage_user_fun(cond_fun, in_tree, avals, "while_loop cond_fun")
    pred = cond_jaxpr.out_avals
    if len(pred) != 1 or pred[0].shape != () or pred[0].dtype != _dtypes.bool_:
        raise TypeError("while_loop cond_fun must return a boolean scalar, got "
                        f"{_types_str(cond_tree, pred)}")
    outs = while_p.bind(*cond_consts, *body_consts, *leaves, cond_jaxpr=cond_jaxpr,
                        body_jaxpr=body, cond_nconsts=len(cond_consts),
                        body_nconsts=len(body_consts))
    return tree_util.tree_unflatten(tree, outs)


# =============================================================================================
# scan
# =============================================================================================

scan_p = Primitive("scan", multiple_results=True)


@scan_p.def_impl
def _scan_impl(*args, jaxpr, num_consts, num_carry, length, reverse, linear, unroll):
    consts, carry, xs = _split(args, [num_consts, num_carry])
    y_avals = jaxpr.out_avals[num_carry:]
    ys = [np.empty((length,) + a.shape, a.dtype) for a in y_avals]
    body_consts = [core.to_numpy(c) for c in jaxpr.consts]
    for step in range(length):
        i = length - 1 - step if reverse else step
        outs = core.eval_jaxpr_numpy(jaxpr.jaxpr, body_consts, consts + carry + [x[i] for x in xs])
        carry = outs[:num_carry]
        for y, o in zip(ys, outs[num_carry:]):
            y[i] = o
    return carry + ys


@scan_p.def_abstract_eval
def _scan_abstract_eval(*avals, jaxpr, num_consts, num_carry, length, reverse, linear, unroll):
    _, carry, xs = _split(avals, [num_consts, num_carry])
    body_in = jaxpr.in_avals
    if len(body_in) != len(avals):
        raise TypeError(f"scan: the body takes {len(body_in)} inputs, given {len(avals)} operands")
    for x, b in zip(xs, body_in[num_consts + num_carry:]):
        if x.shape[:1] != (length,) or x.shape[1:] != b.shape or x.dtype != b.dtype:
            raise TypeError(f"scan: scanned operand {x.str_short()} does not match the body's "
                            f"slice type {b.str_short()} with length {length}")
    carry_out = jaxpr.out_avals[:num_carry]
    if not all(_same_type(a, b) for a, b in zip(carry, carry_out)):
        raise TypeError(f"scan: the body maps the carry ({', '.join(a.str_short() for a in carry)}) "
                        f"to ({', '.join(a.str_short() for a in carry_out)}); its type must not change")
    ys = [a.update(shape=(length,) + a.shape) for a in jaxpr.out_avals[num_carry:]]
    return list(carry) + ys


def _scan_jvp(primals, tangents, *, jaxpr, num_consts, num_carry, length, reverse, linear, unroll):
    consts, carry, xs = _split(primals, [num_consts, num_carry])
    const_t, carry_t, xs_t = _split(tangents, [num_consts, num_carry])
    const_nz = [_is_nonzero_tangent(t, get_aval(x)) for t, x in zip(const_t, consts)]
    xs_nz = [_is_nonzero_tangent(t, get_aval(x)) for t, x in zip(xs_t, xs)]
    carry_nz = [_is_nonzero_tangent(t, get_aval(x)) for t, x in zip(carry_t, carry)]
    carry_avals = [get_aval(x) for x in carry]
    num_ys = len(jaxpr.out_avals) - num_carry
    while True:
        _, out_nz = ad.jvp_jaxpr(jaxpr, const_nz + carry_nz + xs_nz,
                                 instantiate=carry_nz + [False] * num_ys)
        new_nz = [(a or b) and _dtypes.is_inexact(av.dtype)
                  for a, b, av in zip(carry_nz, out_nz[:num_carry], carry_avals)]
        if new_nz == carry_nz:
            break
        carry_nz = new_nz
    jvp_body, out_nz = ad.jvp_jaxpr(jaxpr, const_nz + carry_nz + xs_nz,
                                    instantiate=carry_nz + [False] * num_ys)
    ys_nz = out_nz[num_carry:]
    nc, ncar, nx = num_consts, num_carry, len(xs)
    nct, ncart, nxt = sum(const_nz), sum(carry_nz), sum(xs_nz)
    n = nc + ncar + nx
    # jvp_jaxpr orders (primals..., tangents...); scan wants consts, carry and xs each
    # followed by their tangents.
    in_order = (list(range(nc)) + list(range(n, n + nct)) +
                list(range(nc, nc + ncar)) + list(range(n + nct, n + nct + ncart)) +
                list(range(nc + ncar, n)) + list(range(n + nct + ncart, n + nct + ncart + nxt)))
    ny, nyt = num_ys, sum(ys_nz)
    m = ncar + ny
    out_order = (list(range(ncar)) + list(range(m, m + ncart)) +
                 list(range(ncar, m)) + list(range(m + ncart, m + ncart + nyt)))
    jvp_body = _permute(jvp_body, in_order, out_order)
    const_tangents = [t for t, nz in zip(const_t, const_nz) if nz]
    carry_tangents = [_instantiate(t, ad.tangent_aval(a))
                      for t, a, nz in zip(carry_t, carry_avals, carry_nz) if nz]
    xs_tangents = [t for t, nz in zip(xs_t, xs_nz) if nz]
    new_linear = ((False,) * nc + (True,) * nct + (False,) * ncar + (True,) * ncart +
                  (False,) * nx + (True,) * nxt)
    outs = scan_p.bind(*consts, *const_tangents, *carry, *carry_tangents, *xs, *xs_tangents,
                       jaxpr=jvp_body, num_consts=nc + nct, num_carry=ncar + ncart,
                       length=length, reverse=reverse, linear=new_linear, unroll=unroll)
    carry_out, carry_t_out, ys_out, ys_t_out = _split(outs, [ncar, ncart, ny])
    y_avals = [a.update(shape=(length,) + a.shape) for a in jaxpr.out_avals[num_carry:]]
    carry_t_out = _merge(carry_nz, carry_t_out,
                         [ad.Zero(ad.tangent_aval(a)) for a, nz in zip(carry_avals, carry_nz) if not nz])
    ys_t_out = _merge(ys_nz, ys_t_out,
                      [ad.Zero(ad.tangent_aval(a)) for a, nz in zip(y_avals, ys_nz) if not nz])
    return carry_out + ys_out, carry_t_out + ys_t_out


def _scan_partial_eval(trace, tracers, *, jaxpr, num_consts, num_carry, length, reverse, linear,
                       unroll):
    """Split a scan into a known scan (run now, or staged by an enclosing jit) that also
    returns the per-iteration residuals stacked along the scanned axis, and an unknown scan
    over those residuals (under ``linearize``: the linear tangent scan that reverse mode
    transposes). Residuals that are loop invariant (a known constant operand, a literal) or
    that are slices of a known scanned operand are passed as they are instead of stacked."""
    const_tr, carry_tr, xs_tr = _split(tracers, [num_consts, num_carry])
    const_uk = [not t.pval.is_known() for t in const_tr]
    xs_uk = [not t.pval.is_known() for t in xs_tr]
    carry_uk = [not t.pval.is_known() for t in carry_tr]
    num_ys = len(jaxpr.out_avals) - num_carry
    while True:
        _, _, out_uk, _ = pe.partial_eval_jaxpr(jaxpr, const_uk + carry_uk + xs_uk,
                                                instantiate=carry_uk + [False] * num_ys)
        new_uk = [a or b for a, b in zip(carry_uk, out_uk[:num_carry])]
        if new_uk == carry_uk:
            break
        carry_uk = new_uk
    known, unknown, out_uk, num_res = pe.partial_eval_jaxpr(
        jaxpr, const_uk + carry_uk + xs_uk, instantiate=carry_uk + [False] * num_ys)
    ys_uk = out_uk[num_carry:]
    num_known_out = len(known.out_avals) - num_res
    known_const_tr = [t for t, uk in zip(const_tr, const_uk) if not uk]
    known_carry_tr = [t for t, uk in zip(carry_tr, carry_uk) if not uk]
    known_xs_tr = [t for t, uk in zip(xs_tr, xs_uk) if not uk]
    nkc, nkcar = len(known_const_tr), len(known_carry_tr)

    # Classify each residual: ("const", i) a known const operand, ("xs", i) a slice of a
    # known scanned operand, ("value", v) a constant, ("stacked", None) per iteration.
    position = {id(v): i for i, v in enumerate(known.jaxpr.invars)}
    const_value = {id(v): c for v, c in zip(known.jaxpr.constvars, known.consts)}
    kinds = []
    for v in known.jaxpr.outvars[num_known_out:]:
        if isinstance(v, Literal):
            kinds.append(("value", v.val))
        elif id(v) in const_value:
            kinds.append(("value", const_value[id(v)]))
        elif id(v) in position and position[id(v)] < nkc:
            kinds.append(("const", position[id(v)]))
        elif id(v) in position and position[id(v)] >= nkc + nkcar:
            kinds.append(("xs", position[id(v)] - nkc - nkcar))
        else:
            kinds.append(("stacked", None))
    res_avals = known.out_avals[num_known_out:]

    def known_body(*args):
        outs = _eval(known, *args)
        res = outs[num_known_out:]
        return outs[:num_known_out] + [r for r, (kind, _) in zip(res, kinds) if kind == "stacked"]

    known_jaxpr = _staged(known_body, known.in_avals)
    known_vals = [t.pval.get_known() for t in known_const_tr + known_carry_tr + known_xs_tr]
    known_outs = scan_p.bind(*known_vals, jaxpr=known_jaxpr, num_consts=nkc, num_carry=nkcar,
                             length=length, reverse=reverse,
                             linear=(False,) * len(known_vals), unroll=unroll)
    known_out_vals, stacked = known_outs[:num_known_out], known_outs[num_known_out:]

    # The unknown scan: consts = invariant residuals + unknown consts; carry = unknown carry;
    # xs = scanned-operand residuals + stacked residuals + unknown xs.
    const_res, xs_res, stacked_res = [], [], []
    for r, ((kind, arg), aval) in enumerate(zip(kinds, res_avals)):
        if kind == "const":
            const_res.append((r, trace.instantiate_const(known_const_tr[arg]), aval))
        elif kind == "value":
            const_res.append((r, trace.instantiate_const(trace.pure(arg)), aval))
        elif kind == "xs":
            xs_res.append((r, trace.instantiate_const(known_xs_tr[arg]), aval))
    stacked_iter = iter(stacked)
    for r, (kind, _) in enumerate(kinds):
        if kind == "stacked":
            stacked_res.append((r, trace.instantiate_const(trace.pure(next(stacked_iter))),
                                res_avals[r]))
    uk_consts = [t for t, uk in zip(const_tr, const_uk) if uk]
    uk_carry = [trace.instantiate_const(t) for t, uk in zip(carry_tr, carry_uk) if uk]
    uk_xs = [t for t, uk in zip(xs_tr, xs_uk) if uk]
    num_uk_consts = len(const_res) + len(uk_consts)
    res_order = [r for r, _, _ in const_res] + [r for r, _, _ in xs_res + stacked_res]

    def unknown_body(*args):
        c_res, uk_c, uk_carry_in, x_res, uk_x = _split(
            args, [len(const_res), len(uk_consts), len(uk_carry), len(xs_res) + len(stacked_res)])
        res = [None] * num_res
        for r, val in zip(res_order, c_res + x_res):
            res[r] = val
        return _eval(unknown, *res, *uk_c, *uk_carry_in, *uk_x)

    body_in_avals = ([a for _, _, a in const_res] + [t.aval for t in uk_consts] +
                     [t.aval for t in uk_carry] + [a for _, _, a in xs_res + stacked_res] +
                     [jaxpr.in_avals[num_consts + num_carry + i] for i, uk in enumerate(xs_uk) if uk])
    unknown_jaxpr = _staged(unknown_body, body_in_avals)
    operands = ([t for _, t, _ in const_res] + uk_consts + uk_carry +
                [t for _, t, _ in xs_res + stacked_res] + uk_xs)
    new_linear = ((False,) * len(const_res) + (True,) * len(uk_consts) + (True,) * len(uk_carry) +
                  (False,) * (len(xs_res) + len(stacked_res)) + (True,) * len(uk_xs))
    unknown_outs = trace.default_process_primitive(
        scan_p, operands,
        dict(jaxpr=unknown_jaxpr, num_consts=num_uk_consts, num_carry=len(uk_carry),
             length=length, reverse=reverse, linear=new_linear, unroll=unroll))
    return _merge(carry_uk + ys_uk, unknown_outs, known_out_vals)


def _scan_transpose(cts, *args, jaxpr, num_consts, num_carry, length, reverse, linear, unroll):
    """Reverse-mode scan: a scan in the opposite direction over the transposed body. The
    cotangents of the linear constant operands are summed over iterations in the carry."""
    consts, init, xs = _split(args, [num_consts, num_carry])
    const_lin = [ad.is_undefined_primal(c) for c in consts]
    xs_lin = [ad.is_undefined_primal(x) for x in xs]
    res_consts = [c for c in consts if not ad.is_undefined_primal(c)]
    res_xs = [x for x in xs if not ad.is_undefined_primal(x)]
    ct_carry, ct_ys = cts[:num_carry], cts[num_carry:]
    carry_avals = jaxpr.in_avals[num_consts:num_consts + num_carry]
    x_avals = jaxpr.in_avals[num_consts + num_carry:]
    y_avals = jaxpr.out_avals[num_carry:]
    const_avals = jaxpr.in_avals[:num_consts]
    lin_const_avals = [a for a, lin in zip(const_avals, const_lin) if lin]
    lin_x_avals = [a for a, lin in zip(x_avals, xs_lin) if lin]
    ys_nz = [not isinstance(ct, ad.Zero) for ct in ct_ys]
    ct_carry = [_instantiate(ct, ad.tangent_aval(a)) for ct, a in zip(ct_carry, carry_avals)]
    ct_consts_init = [_zeros(ad.tangent_aval(a)) for a in lin_const_avals]
    nrc, nlc, nrx = len(res_consts), len(lin_const_avals), len(res_xs)

    def transposed_body(*args):
        r_consts, ct_acc, ct_c, r_xs, ct_y = _split(args, [nrc, nlc, num_carry, nrx])
        primals = (_merge(const_lin, [ad.UndefinedPrimal(a) for a in lin_const_avals], r_consts) +
                   [ad.UndefinedPrimal(a) for a in carry_avals] +
                   _merge(xs_lin, [ad.UndefinedPrimal(a) for a in lin_x_avals], r_xs))
        cts_out = list(ct_c) + _merge(ys_nz, ct_y, [ad.Zero(ad.tangent_aval(a))
                                                    for a, nz in zip(y_avals, ys_nz) if not nz])
        cts_in = ad.backward_pass(jaxpr.jaxpr, jaxpr.consts, primals, cts_out)
        ct_consts, ct_init, ct_xs = _split(cts_in, [num_consts, num_carry])
        ct_consts = [c for c, lin in zip(ct_consts, const_lin) if lin]
        new_acc = [acc if isinstance(c, ad.Zero) else ad.add_tangents(acc, c)
                   for acc, c in zip(ct_acc, ct_consts)]
        return (new_acc + [_instantiate(c, ad.tangent_aval(a)) for c, a in zip(ct_init, carry_avals)] +
                [_instantiate(c, ad.tangent_aval(a)) for c, lin, a in zip(ct_xs, xs_lin, x_avals) if lin])

    in_avals = ([get_aval(c) for c in res_consts] + [ad.tangent_aval(a) for a in lin_const_avals] +
                [ad.tangent_aval(a) for a in carry_avals] + list(_slice_avals(res_xs)) +
                [ad.tangent_aval(a) for a, nz in zip(y_avals, ys_nz) if nz])
    t_jaxpr = _staged(transposed_body, in_avals)
    ct_ys_nz = [ct for ct in ct_ys if not isinstance(ct, ad.Zero)]
    new_linear = ((False,) * nrc + (True,) * (nlc + num_carry) + (False,) * nrx +
                  (True,) * len(ct_ys_nz))
    outs = scan_p.bind(*res_consts, *ct_consts_init, *ct_carry, *res_xs, *ct_ys_nz,
                       jaxpr=t_jaxpr, num_consts=nrc, num_carry=nlc + num_carry, length=length,
                       reverse=not reverse, linear=new_linear, unroll=unroll)
    ct_consts, ct_init, ct_xs = _split(outs, [nlc, num_carry])
    ct_consts_it, ct_xs_it = iter(ct_consts), iter(ct_xs)
    result = [next(ct_consts_it) if lin else None for lin in const_lin]
    result += [ct if ad.is_undefined_primal(a) else None for ct, a in zip(ct_init, init)]
    result += [next(ct_xs_it) if lin else None for lin in xs_lin]
    return result


def _slice_avals(stacked):
    """Per-iteration slice types of stacked operands."""
    for x in stacked:
        a = get_aval(x)
        yield a.update(shape=a.shape[1:])


def _scan_batch(vals, dims, *, jaxpr, num_consts, num_carry, length, reverse, linear, unroll,
                axis_data=None):
    size = batching.batch_size_of(vals, dims)
    consts, init, xs = _split(vals, [num_consts, num_carry])
    const_dims, init_dims, xs_dims = _split(dims, [num_consts, num_carry])
    # batch dims: consts and carry at axis 0; scanned operands at axis 1 (axis 0 is scanned)
    consts = [batching.moveaxis(c, d, 0) if d is not None else c for c, d in zip(consts, const_dims)]
    xs = [batching.moveaxis(x, d, 1) if d is not None else x for x, d in zip(xs, xs_dims)]
    const_b = [d is not None for d in const_dims]
    xs_b = [d is not None for d in xs_dims]
    carry_b = [d is not None for d in init_dims]
    num_ys = len(jaxpr.out_avals) - num_carry

    def as_dims(flags):
        return [0 if b else None for b in flags]

    # A carry is batched if it starts batched or becomes batched after some iterations.
    while True:
        _, out_dims = _batch_jaxpr(axis_data, jaxpr, size, as_dims(const_b + carry_b + xs_b),
                                           carry_b + [False] * num_ys)
        new_b = [a or d is not None for a, d in zip(carry_b, out_dims[:num_carry])]
        if new_b == carry_b:
            break
        carry_b = new_b
    batched, out_dims = _batch_jaxpr(axis_data, jaxpr, size, as_dims(const_b + carry_b + xs_b),
                                             carry_b + [False] * num_ys)
    init = [batching.bdim_at_front(x, d, size) if b else x
            for x, d, b in zip(init, init_dims, carry_b)]
    outs = scan_p.bind(*consts, *init, *xs, jaxpr=batched, num_consts=num_consts,
                       num_carry=num_carry, length=length, reverse=reverse, linear=linear,
                       unroll=unroll)
    ys_dims = [1 if d is not None else None for d in out_dims[num_carry:]]
    return outs, as_dims(carry_b) + ys_dims


def _scan_dce(eqn, used_outputs):
    """Drop unused stacked results and the carries that feed no used result (to a fixed
    point: a carry read by the update of a used carry stays), the body equations computing
    only them, and the constants and scanned operands the body no longer reads."""
    p = eqn.params
    jaxpr, num_consts, num_carry = p["jaxpr"], p["num_consts"], p["num_carry"]
    num_xs = len(eqn.invars) - num_consts - num_carry
    used_carry, used_ys = list(used_outputs[:num_carry]), list(used_outputs[num_carry:])
    while True:
        _, read = pe.dce_jaxpr(jaxpr.jaxpr, used_carry + used_ys)
        new_used = [a or b for a, b in zip(used_carry, read[num_consts:num_consts + num_carry])]
        if new_used == used_carry:
            break
        used_carry = new_used
    body, kept = _prune(jaxpr, used_carry + used_ys,
                        [False] * num_consts + used_carry + [False] * num_xs)
    keep_consts, _, keep_xs = _split(kept, [num_consts, num_carry])
    return eqn.replace(
        invars=[v for v, k in zip(eqn.invars, kept) if k],
        outvars=[v for v, u in zip(eqn.outvars, used_carry + used_ys) if u],
        params=dict(p, jaxpr=body, num_consts=sum(keep_consts), num_carry=sum(used_carry),
                    linear=tuple(lin for lin, k in zip(p["linear"], kept) if k)))


scan_p.jvp = _scan_jvp
scan_p.partial_eval = _scan_partial_eval
scan_p.dce = _scan_dce
scan_p.transpose = _scan_transpose
scan_p.batch = _scan_batch
scan_p.batch_needs_axis = True


def scan(f: Callable, init, xs=None, length: int | None = None, reverse: bool = False,
         unroll: int | bool = 1, _split_transpose: bool = False):
    """Loop ``f(carry, x) -> (carry, y)`` over the leading axis of ``xs``, returning the
    final carry and the ``y`` values stacked. Semantically::

        def scan(f, init, xs, length=None):
            carry, ys = init, []
            for x in (xs if xs is not None else [None] * length):
                carry, y = f(carry, x)
                ys.append(y)
            return carry, np.stack(ys)

    ``init``, ``xs`` and ``y`` may be pytrees; ``xs=None`` scans ``length`` times with ``x``
    None. ``reverse=True`` runs from the last element to the first (ys stay in place). The
    body is staged once; ``unroll`` is a hint for compiled backends and never changes results.

        >>> import functrans.numpy as jnp
        >>> from functrans import lax
        >>> lax.scan(lambda c, x: (c + x, c * x), 0.0, jnp.arange(4.0))
        (Array(6., dtype=float32), Array([0., 0., 2., 9.], dtype=float32))
    """
    if not callable(f):
        raise TypeError("scan: f must be callable")
    xs_leaves, xs_tree = tree_util.tree_flatten(xs)
    xs_avals = [get_aval(x) for x in xs_leaves]
    for a in xs_avals:
        if a.ndim == 0:
            raise ValueError(f"scan: every leaf of xs must have a leading axis to scan over, "
                             f"got a scalar {a.str_short()}")
    lengths = sorted({a.shape[0] for a in xs_avals})
    if len(lengths) > 1:
        raise ValueError(f"scan: all leaves of xs must have the same leading axis length, "
                         f"got lengths {lengths}")
    if length is not None:
        length = int(length)
        if lengths and lengths[0] != length:
            raise ValueError(f"scan: length={length} does not match the leading axis "
                             f"{lengths[0]} of xs")
    elif lengths:
        length = lengths[0]
    else:
        raise ValueError("scan: with no xs to scan over, give length")
    if isinstance(unroll, bool):
        unroll = length if unroll else 1
    unroll = max(int(unroll), 1)
    init_leaves, init_tree = tree_util.tree_flatten(init)
    x_avals = [a.update(shape=a.shape[1:]) for a in xs_avals]
    trees = {}

    def body_fun(carry, x):
        out = f(carry, x)
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise TypeError("scan: f must return a pair (carry, y), got "
                            f"{type(out).__name__}")
        carry_out, y = out
        trees["carry"] = tree_util.tree_structure(carry_out)
        trees["y"] = tree_util.tree_structure(y)
        return tuple(out)

    def stage(carry_avals):
        in_tree = tree_util.tree_structure((init, xs))
        closed, consts, _ = _stage_user_fun(body_fun, in_tree, carry_avals + x_avals, "scan f")
        return closed, consts

    carry_avals = [get_aval(x) for x in init_leaves]
    closed, consts = stage(carry_avals)
    num_carry_out = trees["carry"].num_leaves
    promoted = _check_carry("scan f", init_tree, carry_avals, trees["carry"],
                            closed.out_avals[:num_carry_out])
    if promoted is not None:
        init_leaves = _cast_leaves(init_leaves, promoted)
        carry_avals = [get_aval(x) for x in init_leaves]
        closed, consts = stage(carry_avals)
        _check_carry("scan f", init_tree, carry_avals, trees["carry"],
                     closed.out_avals[:trees["carry"].num_leaves])
    operands = list(consts) + list(init_leaves) + list(xs_leaves)
    outs = scan_p.bind(*operands, jaxpr=closed, num_consts=len(consts),
                       num_carry=len(init_leaves), length=length, reverse=bool(reverse),
                       linear=(False,) * len(operands), unroll=unroll)
    carry_out, ys = outs[:len(init_leaves)], outs[len(init_leaves):]
    return (tree_util.tree_unflatten(init_tree, carry_out),
            tree_util.tree_unflatten(trees["y"], ys))


# =============================================================================================
# fori_loop and map: built on scan (and while_loop)
# =============================================================================================


def _concrete_int(x):
    """The value of ``x`` as a Python int if it is known now, else None."""
    if isinstance(x, Tracer):
        value = x.to_concrete_value()
        return None if value is None else int(np.asarray(core.to_numpy(value)))
    try:
        return int(np.asarray(core.to_numpy(x)))
    except (TypeError, ValueError):
        return None


def fori_loop(lower, upper, body_fun: Callable, init_val, *, unroll: int | bool | None = None):
    """``for i in range(lower, upper): val = body_fun(i, val)``; returns ``val``.

    With bounds known at trace time (Python ints, concrete arrays) this is a ``scan`` of
    ``upper - lower`` steps, so it supports reverse-mode differentiation; with traced
    bounds it is a ``while_loop``.

        >>> from functrans import lax
        >>> lax.fori_loop(0, 5, lambda i, x: x + i, 0.0)
        Array(10., dtype=float32, weak_type=True)
    """
    if not callable(body_fun):
        raise TypeError("fori_loop: body_fun must be callable")
    for bound, name in ((lower, "lower"), (upper, "upper")):
        aval = get_aval(bound)
        if aval.shape != () or not _dtypes.is_integer(aval.dtype):
            raise TypeError(f"fori_loop: {name} must be an integer scalar, got {aval.str_short()}")
    dtype = _fori_bound_dtype(lower, upper)
    lo, hi = _concrete_int(lower), _concrete_int(upper)
    if lo is not None and hi is not None:
        def step(carry, _):
            i, val = carry
            return (i + 1, body_fun(i, val)), None

        # Known bounds become Python ints, as in JAX: the index is a weakly typed integer,
        # so `x + i` keeps a Python-scalar carry weakly typed.
        (_, result), _ = scan(step, (lo, init_val), None, length=max(hi - lo, 0),
                              unroll=1 if unroll is None else unroll)
        return result

    def loop_cond(carry):
        i, stop, _ = carry
        return ew.lt(i, stop)

    def loop_body(carry):
        i, stop, val = carry
        return ew.add(i, np.asarray(1, dtype)[()]), stop, body_fun(i, val)

    lower = ew.convert_element_type(lower, dtype)
    upper = ew.convert_element_type(upper, dtype)
    _, _, result = while_loop(loop_cond, loop_body, (lower, upper, init_val))
    return result


def _fori_bound_dtype(lower, upper):
    """The loop index dtype: the bounds' common dtype; a weakly typed bound (a Python int)
    takes the other's signed integer type, and other mixes are refused as in JAX."""
    a, b = get_aval(lower), get_aval(upper)
    if a.dtype == b.dtype:
        return a.dtype
    signed = _dtypes.is_signed(a.dtype) and _dtypes.is_signed(b.dtype)
    if signed and a.weak_type != b.weak_type:
        return b.dtype if a.weak_type else a.dtype
    raise TypeError("lower and upper arguments to fori_loop must have equal types, got "
                    f"{np.dtype(a.dtype).name} and {np.dtype(b.dtype).name}")


def map(f: Callable, xs, *, batch_size: int | None = None):  # noqa: A001 - jax.lax.map's name
    """``f`` applied to each slice of ``xs`` along its leading axis, results stacked — as a
    ``scan``, so one example is processed at a time (low memory, one staged body). With
    ``batch_size``, ``batch_size`` examples are processed at once with ``vmap``.

        >>> import functrans.numpy as jnp
        >>> from functrans import lax
        >>> lax.map(lambda x: x * 2, jnp.arange(3.0))
        Array([0., 2., 4.], dtype=float32)
    """
    if batch_size is None:
        _, ys = scan(lambda _, x: ((), f(x)), (), xs)
        return ys
    from functrans._api import vmap  # upward: _api is in the API, above this layer
    batch_size = int(batch_size)
    if batch_size < 1:
        raise ValueError(f"map: batch_size must be positive, got {batch_size}")
    leaves, tree = tree_util.tree_flatten(xs)
    if not leaves:
        raise ValueError("map: xs has no arrays to map over")
    n = get_aval(leaves[0]).shape[0]
    num_batches, remainder = divmod(n, batch_size)
    batched_f = vmap(f)
    outs = []
    if num_batches:
        main = [x if not remainder else _slice_leading(x, 0, num_batches * batch_size)
                for x in leaves]
        chunks = [structural.reshape(x, (num_batches, batch_size) + get_aval(x).shape[1:])
                  for x in main]
        _, ys = scan(lambda _, c: ((), batched_f(tree_util.tree_unflatten(tree, c))), (), chunks)
        ys_leaves, y_tree = tree_util.tree_flatten(ys)
        outs.append(([structural.reshape(y, (num_batches * batch_size,) + get_aval(y).shape[2:])
                      for y in ys_leaves], y_tree))
    if remainder:
        rest = [_slice_leading(x, num_batches * batch_size, n) for x in leaves]
        ys_leaves, y_tree = tree_util.tree_flatten(batched_f(tree_util.tree_unflatten(tree, rest)))
        outs.append((ys_leaves, y_tree))
    if len(outs) == 1:
        return tree_util.tree_unflatten(outs[0][1], outs[0][0])
    (main_leaves, y_tree), (rest_leaves, _) = outs
    from functrans import lax  # upward: lax is in the API, above this layer
    return tree_util.tree_unflatten(
        y_tree, [lax.concatenate([a, b], 0) for a, b in zip(main_leaves, rest_leaves)])


def _slice_leading(x, start: int, stop: int):
    from functrans import lax  # upward: lax is in the API, above this layer
    if not hasattr(lax, "slice_in_dim"):
        raise NotImplementedError("map with a batch_size that does not divide the length "
                                  "needs lax.slice_in_dim, which is not available yet")
    return lax.slice_in_dim(x, start, stop, axis=0)
