"""``checkpoint`` / ``remat``: recompute the forward pass during the backward pass.

``checkpoint(f)`` stages ``f`` into a ``remat`` equation. Evaluated or differentiated in
forward mode it is just ``f``. Under reverse mode its partial-evaluation rule saves only what
the policy allows (nothing by default; dot products with ``dots_saveable``) and emits a
``remat_linear`` equation; transposing that equation first recomputes the residuals from the
saved primal inputs, then runs the backward pass of the linear part.
"""
from __future__ import annotations

import functools
from typing import Callable

from functrans import core, tree_util
from functrans._api import _as_array, split_static_args
from functrans.core import ClosedJaxpr, Jaxpr, Primitive, Var, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters import partial_eval as pe
from functrans.interpreters.staging import closed_over_consts_as_args, trace_to_jaxpr_dynamic

__all__ = ["checkpoint", "remat", "checkpoint_policies"]


class checkpoint_policies:  # noqa: N801 (JAX's name)
    """Which intermediate values reverse mode may keep instead of recomputing."""

    @staticmethod
    def nothing_saveable(primitive, *avals, **params) -> bool:
        return False

    @staticmethod
    def everything_saveable(primitive, *avals, **params) -> bool:
        return True

    @staticmethod
    def dots_saveable(primitive, *avals, **params) -> bool:
        return primitive.name in ("dot_general", "conv_general_dilated")

    checkpoint_dots = dots_saveable

    @staticmethod
    def dots_with_no_batch_dims_saveable(primitive, *avals, **params) -> bool:
        if primitive.name != "dot_general":
            return False
        (_, _), (lhs_batch, _) = params["dimension_numbers"]
        return not lhs_batch


remat_p = Primitive("remat", multiple_results=True)


@remat_p.def_abstract_eval
def _remat_abstract_eval(*avals, jaxpr, policy, prevent_cse=True):
    return jaxpr.out_avals


@remat_p.def_impl
def _remat_impl(*args, jaxpr, policy, prevent_cse=True):
    from functrans.backends.reference.interpreter import eval_jaxpr_numpy
    return eval_jaxpr_numpy(jaxpr.jaxpr, [core.to_numpy(c) for c in jaxpr.consts], args)


def _remat_jvp(primals, tangents, *, jaxpr, policy, prevent_cse=True):
    nonzeros = [not isinstance(t, ad.Zero) for t in tangents]
    jvp_closed, out_nonzeros = ad.jvp_jaxpr(jaxpr, nonzeros, instantiate=False)
    nz = [t for t in tangents if not isinstance(t, ad.Zero)]
    outs = remat_p.bind(*primals, *nz, jaxpr=jvp_closed, policy=policy, prevent_cse=prevent_cse)
    n = len(jaxpr.out_avals)
    it = iter(outs[n:])
    return outs[:n], [next(it) if nzo else ad.Zero(ad.tangent_aval(a))
                      for a, nzo in zip(jaxpr.out_avals, out_nonzeros)]


def _remat_batch(vals, dims, *, jaxpr, policy, prevent_cse=True):
    size = batching.batch_size_of(vals, dims)
    batched, out_dims = batching.batch_jaxpr(jaxpr, size, dims, False)
    return remat_p.bind(*vals, jaxpr=batched, policy=policy, prevent_cse=prevent_cse), out_dims


def _saved_outvars(jaxpr: Jaxpr, policy) -> list:
    """Variables of ``jaxpr`` the policy lets reverse mode keep."""
    saved = []
    for eqn in jaxpr.eqns:
        if policy(eqn.primitive, *[v.aval for v in eqn.invars], **eqn.params):
            saved.extend(eqn.outvars)
    return saved


def _remat_partial_eval(trace, tracers, *, jaxpr, policy, prevent_cse=True):
    unknowns = [not t.pval.is_known() for t in tracers]
    known_closed, unknown_closed, out_unknowns, num_res = pe.partial_eval_jaxpr(
        jaxpr, unknowns, instantiate=False)
    known_jaxpr = known_closed.jaxpr
    num_known_out = len(known_jaxpr.outvars) - num_res
    residual_vars = known_jaxpr.outvars[num_known_out:]
    # Residuals the policy allows to keep are outputs of the known program; the others are
    # recomputed from the known inputs when the backward pass needs them.
    saveable = {id(v) for v in _saved_outvars(known_jaxpr, policy)} | \
        {id(v) for v in known_jaxpr.invars}
    saved_idx = [i for i, v in enumerate(residual_vars) if id(v) in saveable]
    saved_vars = [residual_vars[i] for i in saved_idx]
    primal_known = Jaxpr(known_jaxpr.constvars, known_jaxpr.invars,
                         known_jaxpr.outvars[:num_known_out] + saved_vars, known_jaxpr.eqns)
    primal_known, _ = pe.dce_jaxpr(primal_known, [True] * len(primal_known.outvars), instantiate=True)
    known_vals = [t.pval.get_known() for t in tracers if t.pval.is_known()]
    outs = core.eval_jaxpr(primal_known, known_closed.consts, *known_vals)
    known_outs, saved_vals = outs[:num_known_out], outs[num_known_out:]

    # The recompute program: known inputs and saved values -> all residuals.
    saved_inputs = [Var(v.aval) for v in saved_vars]
    substitution = {id(v): nv for v, nv in zip(saved_vars, saved_inputs)}
    eqns = []
    for eqn in known_jaxpr.eqns:
        if all(id(o) in substitution for o in eqn.outvars):
            continue  # this value is saved: read it instead of recomputing it
        eqns.append(eqn.replace(invars=[substitution.get(id(v), v) if not isinstance(v, core.Literal)
                                        else v for v in eqn.invars]))
    recompute = Jaxpr(known_jaxpr.constvars, list(known_jaxpr.invars) + saved_inputs,
                      [substitution.get(id(v), v) for v in residual_vars], eqns)
    recompute, _ = pe.dce_jaxpr(recompute, [True] * len(recompute.outvars), instantiate=True)
    recompute_closed = ClosedJaxpr(recompute, known_closed.consts)

    known_tracers = [trace.instantiate_const(trace.pure(v)) for v in known_vals]
    saved_tracers = [trace.instantiate_const(trace.pure(v)) for v in saved_vals]
    unknown_tracers = [trace.instantiate_const(t) for t in tracers if not t.pval.is_known()]
    unknown_outs = trace.default_process_primitive(
        remat_linear_p, known_tracers + saved_tracers + unknown_tracers,
        dict(recompute=recompute_closed, linear=unknown_closed, num_known=len(known_vals),
             num_saved=len(saved_vals)))
    known_iter, unknown_iter = iter(known_outs), iter(unknown_outs)
    return [next(unknown_iter) if uk else next(known_iter) for uk in out_unknowns]


remat_p.jvp = _remat_jvp
remat_p.batch = _remat_batch
remat_p.partial_eval = _remat_partial_eval

# ---- the linear half: recompute residuals, then the tangent program -------------------------

remat_linear_p = Primitive("remat_linear", multiple_results=True)


@remat_linear_p.def_abstract_eval
def _remat_linear_abstract_eval(*avals, recompute, linear, num_known, num_saved):
    return linear.out_avals


@remat_linear_p.def_impl
def _remat_linear_impl(*args, recompute, linear, num_known, num_saved):
    from functrans.backends.reference.interpreter import eval_jaxpr_numpy
    residuals = eval_jaxpr_numpy(recompute.jaxpr, [core.to_numpy(c) for c in recompute.consts],
                                 args[:num_known + num_saved])
    return eval_jaxpr_numpy(linear.jaxpr, [core.to_numpy(c) for c in linear.consts],
                            list(residuals) + list(args[num_known + num_saved:]))


def _remat_linear_transpose(cts, *args, recompute, linear, num_known, num_saved):
    k = num_known + num_saved
    residuals = core.eval_jaxpr(recompute.jaxpr, recompute.consts, *args[:k])
    primals = list(residuals) + list(args[k:])
    cts_in = ad.backward_pass(linear.jaxpr, linear.consts, primals, list(cts))
    return [None] * k + cts_in[len(residuals):]


def _remat_linear_batch(vals, dims, *, recompute, linear, num_known, num_saved):
    size = batching.batch_size_of(vals, dims)
    k = num_known + num_saved
    rec_b, res_dims = batching.batch_jaxpr(recompute, size, dims[:k], False)
    lin_b, out_dims = batching.batch_jaxpr(linear, size, list(res_dims) + list(dims[k:]), False)
    outs = remat_linear_p.bind(*vals, recompute=rec_b, linear=lin_b, num_known=num_known,
                               num_saved=num_saved)
    return outs, out_dims


remat_linear_p.transpose = _remat_linear_transpose
remat_linear_p.batch = _remat_linear_batch


def checkpoint(fun: Callable, *, prevent_cse: bool = True, policy: Callable | None = None,
               static_argnums=()) -> Callable:
    """Mark ``fun`` for rematerialization: reverse mode recomputes its intermediates in the
    backward pass instead of storing them (saving memory for compute). ``policy`` (see
    :class:`checkpoint_policies`) names values that may be kept.

        >>> import functrans, functrans.numpy as jnp
        >>> f = functrans.checkpoint(lambda x: jnp.sin(jnp.sin(x)))
        >>> functrans.grad(f)(0.0)
        Array(1., dtype=float32, weak_type=True)
    """
    policy = policy or checkpoint_policies.nothing_saveable
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)

    @functools.wraps(fun)
    def remat_f(*args, **kwargs):
        dyn, rebuild = split_static_args(args, static_argnums)
        leaves, in_tree = tree_util.tree_flatten((dyn, kwargs))
        leaves = [_as_array(x) for x in leaves]
        out_tree_cell = []

        def flat(*xs):
            dargs, kw = tree_util.tree_unflatten(in_tree, xs)
            out_leaves, out_tree = tree_util.tree_flatten(fun(*rebuild(dargs), **kw))
            out_tree_cell.append(out_tree)
            return out_leaves

        jaxpr, consts = trace_to_jaxpr_dynamic(flat, [get_aval(x) for x in leaves])
        closed, const_args = closed_over_consts_as_args(ClosedJaxpr(jaxpr, consts))
        outs = remat_p.bind(*const_args, *leaves, jaxpr=closed, policy=policy,
                            prevent_cse=prevent_cse)
        return tree_util.tree_unflatten(out_tree_cell[0], outs)

    return remat_f


remat = checkpoint
