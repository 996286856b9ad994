"""``cond`` and ``switch``: one higher-order primitive, ``cond``, whose operands are
``(index, *consts, *operands)`` and whose ``branches`` param holds one closed jaxpr per
branch, each taking ``(*consts, *operands)``. Its reference implementation, shape rule,
JVP, partial evaluation, transpose, batching rule (a batched predicate becomes a select) and
dead-code elimination sit beside it; ``platform_dependent`` picks a branch by platform
when the program is traced.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from functrans import _backends, _dtypes, tree_util
from functrans.core import ClosedJaxpr, Jaxpr, Primitive, Var, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters import partial_eval as pe
from functrans.primitives import elementwise as ew
from functrans.primitives import structural
from functrans.primitives.loop_bodies import (batch_body, cast_leaves, eval_closed,
                                              eval_closed_numpy, instantiate,
                                              is_nonzero_tangent, merge_lists, prune,
                                              same_type, stage_user_fun, stage_wrapper,
                                              types_str, zeros)


# =============================================================================================
# cond / switch
# =============================================================================================

cond_p = Primitive("cond", multiple_results=True)


@cond_p.def_impl
def _cond_impl(index, *operands, branches):
    i = int(np.clip(np.asarray(index), 0, len(branches) - 1))
    return eval_closed_numpy(branches[i], operands)


@cond_p.def_abstract_eval
def _cond_abstract_eval(index, *operands, branches):
    if index.shape != () or not _dtypes.is_integer(index.dtype):
        raise TypeError(f"cond: the branch index must be an integer scalar, got "
                        f"{index.str_short()}")
    for k, branch in enumerate(branches):
        if len(branch.in_avals) != len(operands) or not all(
                same_type(a, b) for a, b in zip(branch.in_avals, operands)):
            raise TypeError(f"cond: branch {k} takes ({', '.join(a.str_short() for a in branch.in_avals)}) "
                            f"but the operands are ({', '.join(a.str_short() for a in operands)})")
    first = branches[0].out_avals
    for k, branch in enumerate(branches[1:], 1):
        if len(branch.out_avals) != len(first) or not all(
                same_type(a, b) for a, b in zip(branch.out_avals, first)):
            raise TypeError(f"cond: branch {k} returns ({', '.join(a.str_short() for a in branch.out_avals)}) "
                            f"but branch 0 returns ({', '.join(a.str_short() for a in first)})")
    return [a.update(weak_type=all(b.out_avals[k].weak_type for b in branches))
            for k, a in enumerate(first)]


def _cond_jvp(primals, tangents, *, branches):
    index, *operands = primals
    op_tangents = tangents[1:]
    nonzeros = [is_nonzero_tangent(t, get_aval(x)) for t, x in zip(op_tangents, operands)]
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
    tangents_out = merge_lists(out_nonzeros, tangents_out,
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
            outs = eval_closed(known, *known_args)
            res = [zeros(a) for a in all_res_avals]
            res[offsets[k]:offsets[k + 1]] = outs[num_known_out:]
            return outs[:num_known_out] + res
        return stage_wrapper(fun, known_in_avals)

    def unknown_branch(k, unknown):
        def fun(*args):
            res, uk_args = args[:len(all_res_avals)], args[len(all_res_avals):]
            return eval_closed(unknown, *res[offsets[k]:offsets[k + 1]], *uk_args)
        return stage_wrapper(fun, all_res_avals + unknown_in_avals)

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
    return merge_lists(out_unknowns, unknown_outs, known_out_vals)


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
            primals = merge_lists(undefined, [ad.UndefinedPrimal(a) for a in lin_avals], res)
            cts_full = merge_lists(ct_nonzero, cts_in,
                              [ad.Zero(ad.tangent_aval(a)) for a, nz in zip(out_avals, ct_nonzero) if not nz])
            cts_out = ad.backward_pass(branch.jaxpr, branch.consts, primals, cts_full)
            return [instantiate(ct, a) for ct, a in
                    zip([c for c, u in zip(cts_out, undefined) if u], lin_avals)]
        return stage_wrapper(fun, res_avals + ct_avals)

    t_branches = tuple(transpose_branch(b) for b in branches)
    outs = cond_p.bind(index, *defined, *[ct for ct in cts if not isinstance(ct, ad.Zero)],
                       branches=t_branches)
    outs = iter(outs)
    return [None] + [next(outs) if u else None for u in undefined]


def _cond_batch(vals, dims, *, branches, axis_data=None):
    index, *operands = vals
    index_dim, *op_dims = dims
    size = batching.batch_size_of(vals, dims)
    num_out = len(branches[0].out_avals)
    if index_dim is None:
        out_batched = [False] * num_out
        for branch in branches:
            _, out_dims = batch_body(axis_data, branch, size, op_dims, False)
            out_batched = [a or d is not None for a, d in zip(out_batched, out_dims)]
        new_branches = tuple(batch_body(axis_data, b, size, op_dims, out_batched)[0] for b in branches)
        outs = cond_p.bind(index, *operands, branches=new_branches)
        return outs, [0 if b else None for b in out_batched]
    # A per-example predicate: every branch runs on the whole batch and each example keeps
    # the result of its own branch (the branches are pure, so running all is safe).
    per_branch = [eval_closed(batch_body(axis_data, b, size, op_dims, True)[0], *operands) for b in branches]
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
    new_branches = tuple(prune(b, used_outputs, read)[0] for b in branches)
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
                f"{names[0]} returns {types_str(out_trees[0], jaxprs[0].out_avals)} and "
                f"{names[k]} returns {types_str(out_trees[k], jaxprs[k].out_avals)}.")
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
                    f"{names[first]} returns {types_str(out_trees[first], jaxprs[first].out_avals)} "
                    f"and {names[k]} returns {types_str(out_trees[k], jaxprs[k].out_avals)}.")
        targets.append(target)
    fixed = []
    for j in jaxprs:
        if all(a.dtype == t.dtype for a, t in zip(j.out_avals, targets)):
            fixed.append(j)
            continue

        def fun(*args, j=j):
            return cast_leaves(eval_closed(j, *args), targets)
        fixed.append(stage_wrapper(fun, j.in_avals))
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
        closed, c, out_tree = stage_user_fun(fun, in_tree, avals, name)
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
# platform_dependent: a branch chosen when the program is traced
# =============================================================================================


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


__all__ = ["cond", "platform_dependent", "switch"]
