"""``custom_jvp`` and ``custom_vjp``: user-supplied derivative rules.

A call of a decorated function binds a *call primitive* through
``Trace.process_custom_jvp_call`` / ``process_custom_vjp_call``, so each transform decides:
eager evaluation and partial evaluation run the function; the jvp trace applies the rule;
the batching trace batches both the function and the rule; staging records one equation
holding the function's jaxpr and the rule, so the rule is still found when the staged
program is differentiated later.

Reverse mode through ``custom_vjp`` uses ``custom_lin``, a primitive linear in the tangents
whose transpose calls the user's ``bwd``.
"""
from __future__ import annotations

import functools
from typing import Callable, Sequence

from functrans import core, tree_util
from functrans._api import _as_array
from functrans.core import ClosedJaxpr, Primitive, Tracer, get_aval
from functrans.interpreters import ad, batching
from functrans.tree_util import tree_flatten, tree_unflatten

__all__ = ["custom_jvp", "custom_vjp"]


def _resolve_nondiff(nondiff_argnums, args):
    nondiff = tuple(sorted(nondiff_argnums))
    for i in nondiff:
        if i >= len(args):
            raise TypeError(f"nondiff_argnums={nondiff_argnums} but only {len(args)} arguments")
    diff_idx = [i for i in range(len(args)) if i not in nondiff]
    return nondiff, diff_idx


def _merge(nondiff, nondiff_vals, diff_vals, n):
    out, nd, d = [], iter(nondiff_vals), iter(diff_vals)
    for i in range(n):
        out.append(next(nd) if i in nondiff else next(d))
    return out


# =============================================================================================
# custom_jvp
# =============================================================================================


class CustomCallPrimitive(Primitive):
    """A call primitive whose binding is delegated to the trace's custom-call handler.

    ``bind_call(fun, rule, args, params)`` is the entry point from user code; ``bind`` (used
    when a staged equation is evaluated) rebuilds ``fun`` and ``rule`` from the params."""

    def __init__(self, name, kind):
        super().__init__(name, multiple_results=True)
        self.kind = kind

    def bind_call(self, fun, rule, args, params):
        trace = core.find_top_trace(args)
        tracers = [trace.full_raise(a) for a in args]
        if self.kind == "jvp":
            outs = trace.process_custom_jvp_call(self, fun, rule, tracers, params)
        else:
            fwd, bwd = rule
            outs = trace.process_custom_vjp_call(self, fun, fwd, bwd, tracers, params)
        return [core.full_lower(o) for o in outs]

    def bind(self, *args, call_jaxpr, num_consts, **params):
        consts, args = args[:num_consts], args[num_consts:]
        fun = _call_jaxpr_fun(call_jaxpr, consts)
        if self.kind == "jvp":
            rule = _const_free_rule(params["jvp"], consts)
        else:
            rule = (params["fwd"], params["bwd"])
        rest = {k: v for k, v in params.items() if k not in ("jvp", "fwd", "bwd")}
        return self.bind_call(fun, rule, list(args), rest)


def _call_jaxpr_fun(call_jaxpr: ClosedJaxpr, consts):
    def fun(*args):
        return core.eval_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts, *consts, *args)
    return fun


def _const_free_rule(rule, consts):
    if any(isinstance(c, ad.JVPTracer) for c in consts):
        raise NotImplementedError(
            "a custom_jvp function closes over a value that is being differentiated; pass that "
            "value as an explicit argument instead")
    return rule


custom_jvp_call_p = CustomCallPrimitive("custom_jvp_call", "jvp")
custom_vjp_call_p = CustomCallPrimitive("custom_vjp_call", "vjp")


def _custom_call_abstract_eval(*avals, call_jaxpr, num_consts, **params):
    return call_jaxpr.out_avals


def _custom_call_impl(*args, call_jaxpr, num_consts, **params):
    from functrans.backends.reference.interpreter import eval_jaxpr_numpy
    return eval_jaxpr_numpy(call_jaxpr.jaxpr, [core.to_numpy(c) for c in call_jaxpr.consts], args)


for _p in (custom_jvp_call_p, custom_vjp_call_p):
    _p.def_abstract_eval(_custom_call_abstract_eval)
    _p.def_impl(_custom_call_impl)


class custom_jvp:  # noqa: N801 (JAX's name)
    """A function with a custom forward-mode derivative rule (reverse mode follows by
    transposition).

        >>> import functrans, functrans.numpy as jnp
        >>> @functrans.custom_jvp
        ... def f(x):
        ...     return jnp.sin(x)
        >>> @f.defjvp
        ... def f_jvp(primals, tangents):
        ...     (x,), (t,) = primals, tangents
        ...     return f(x), 2.0 * t
        >>> functrans.grad(f)(0.0)
        Array(2., dtype=float32, weak_type=True)
    """

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp = None
        self.symbolic_zeros = False

    def __get__(self, instance, owner):
        if instance is None:
            return self
        return functools.partial(self, instance)

    def defjvp(self, jvp: Callable, symbolic_zeros: bool = False) -> Callable:
        """Set the rule ``jvp(primals, tangents) -> (primal_out, tangent_out)``."""
        self.jvp = jvp
        self.symbolic_zeros = symbolic_zeros
        return jvp

    def defjvps(self, *tangent_fns) -> None:
        """Set per-argument rules ``fn(tangent, primal_out, *primals) -> tangent_out`` (None
        for arguments with no effect); the output tangent is their sum."""

        def jvp(primals, tangents):
            out = self(*primals)
            total = None
            for fn, t in zip(tangent_fns, tangents):
                if fn is None:
                    continue
                contribution = fn(t, out, *primals)
                total = contribution if total is None else tree_util.tree_map(
                    lambda a, b: a + b, total, contribution)
            if total is None:
                total = tree_util.tree_map(lambda o: o * 0, out)
            return out, total

        self.defjvp(jvp)

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise TypeError("custom_jvp functions take positional arguments only")
        if self.jvp is None:
            raise AttributeError(f"No JVP defined for custom_jvp function "
                                 f"{getattr(self.fun, '__name__', '?')} using defjvp.")
        nondiff, diff_idx = _resolve_nondiff(self.nondiff_argnums, args)
        nondiff_vals = [args[i] for i in nondiff]
        for v in nondiff_vals:
            for leaf in tree_util.tree_leaves(v):
                if isinstance(leaf, Tracer):
                    raise TypeError("custom_jvp nondiff_argnums must not be traced values; "
                                    "make them ordinary arguments")
        diff_args = [args[i] for i in diff_idx]
        leaves, in_tree = tree_flatten(diff_args)
        leaves = [_as_array(x) for x in leaves]
        out_tree_cell = []
        n = len(args)
        user_fun, user_jvp = self.fun, self.jvp

        def flat_fun(*flat):
            dargs = tree_unflatten(in_tree, flat)
            out = user_fun(*_merge(nondiff, nondiff_vals, dargs, n))
            out_leaves, out_tree = tree_flatten(out)
            out_tree_cell.append(out_tree)
            return out_leaves

        def flat_jvp(primals, tangents):
            dprimals = tree_unflatten(in_tree, list(primals))
            tangents = [ad.instantiate_zeros(t) for t in tangents]
            dtangents = tree_unflatten(in_tree, tangents)
            primal_out, tangent_out = user_jvp(
                tuple(nondiff_vals) + tuple(dprimals), tuple(dtangents)) if nondiff else \
                user_jvp(tuple(dprimals), tuple(dtangents))
            p_leaves, p_tree = tree_flatten(primal_out)
            t_leaves, t_tree = tree_flatten(tangent_out)
            if p_tree != t_tree:
                raise TypeError(f"custom_jvp rule returned primal output structure {p_tree} and "
                                f"tangent output structure {t_tree}; they must match")
            out_tree_cell.append(p_tree)
            fixed = []
            for p, t in zip(p_leaves, t_leaves):
                pa, ta = get_aval(p), get_aval(t)
                if pa.shape != ta.shape:
                    raise TypeError(f"custom_jvp rule: tangent of shape {ta.shape} for a primal "
                                    f"output of shape {pa.shape}")
                fixed.append(t if ta.dtype == ad.tangent_aval(pa).dtype else
                             _convert(t, ad.tangent_aval(pa).dtype))
            return p_leaves, fixed

        outs = custom_jvp_call_p.bind_call(flat_fun, flat_jvp, leaves, {})
        return tree_unflatten(out_tree_cell[-1], outs)


def _convert(x, dtype):
    from functrans.primitives.elementwise import convert_element_type
    return convert_element_type(x, dtype)


# =============================================================================================
# custom_vjp
# =============================================================================================


class custom_vjp:  # noqa: N801 (JAX's name)
    """A function with a custom reverse-mode rule: ``fwd(*args) -> (out, residuals)`` and
    ``bwd(residuals, out_cotangent) -> tuple of argument cotangents``.

        >>> import functrans, functrans.numpy as jnp
        >>> @functrans.custom_vjp
        ... def clip_grad(x):
        ...     return x
        >>> clip_grad.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -1.0, 1.0),))
        >>> functrans.grad(lambda x: 5.0 * clip_grad(x))(2.0)
        Array(1., dtype=float32, weak_type=True)
    """

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd = None
        self.bwd = None

    def __get__(self, instance, owner):
        if instance is None:
            return self
        return functools.partial(self, instance)

    def defvjp(self, fwd: Callable, bwd: Callable, symbolic_zeros: bool = False) -> None:
        self.fwd = fwd
        self.bwd = bwd

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise TypeError("custom_vjp functions take positional arguments only")
        if self.fwd is None:
            raise AttributeError(f"No VJP defined for custom_vjp function "
                                 f"{getattr(self.fun, '__name__', '?')} using defvjp.")
        nondiff, diff_idx = _resolve_nondiff(self.nondiff_argnums, args)
        nondiff_vals = [args[i] for i in nondiff]
        diff_args = [args[i] for i in diff_idx]
        leaves, in_tree = tree_flatten(diff_args)
        leaves = [_as_array(x) for x in leaves]
        in_avals = [get_aval(x) for x in leaves]
        n = len(args)
        user_fun, user_fwd, user_bwd = self.fun, self.fwd, self.bwd
        out_tree_cell = []

        def flat_fun(*flat):
            out = user_fun(*_merge(nondiff, nondiff_vals, tree_unflatten(in_tree, flat), n))
            out_leaves, out_tree = tree_flatten(out)
            out_tree_cell.append(out_tree)
            return out_leaves

        def flat_fwd(*flat):
            result = user_fwd(*_merge(nondiff, nondiff_vals, tree_unflatten(in_tree, flat), n))
            if not (isinstance(result, (tuple, list)) and len(result) == 2):
                raise TypeError("custom_vjp fwd must return a pair (output, residuals)")
            out, res = result
            out_leaves, out_tree = tree_flatten(out)
            res_leaves, res_tree = tree_flatten(res)
            out_tree_cell.append(out_tree)
            return out_leaves, res_leaves, res_tree, out_tree

        def flat_bwd(res_tree, out_tree, res_leaves, ct_leaves):
            res = tree_unflatten(res_tree, res_leaves)
            ct = tree_unflatten(out_tree, ct_leaves)
            cts = user_bwd(*nondiff_vals, res, ct)
            if not isinstance(cts, (tuple, list)):
                raise TypeError("custom_vjp bwd must return a tuple with one cotangent per "
                                f"differentiable argument, got {type(cts).__name__}")
            if len(cts) != len(diff_args):
                raise TypeError(f"custom_vjp bwd returned {len(cts)} cotangents for "
                                f"{len(diff_args)} differentiable arguments")
            cts = [tree_util.tree_map(lambda _: None, d) if c is None else c
                   for c, d in zip(cts, diff_args)]
            ct_flat = tree_util.tree_leaves(tuple(cts), is_leaf=lambda x: x is None)
            out = []
            for c, aval in zip(ct_flat, in_avals):
                if c is None:
                    out.append(ad.Zero(ad.tangent_aval(aval)))
                    continue
                ca = get_aval(c)
                if ca.shape != aval.shape:
                    raise ValueError(f"custom_vjp bwd returned a cotangent of shape {ca.shape} "
                                     f"for an argument of shape {aval.shape}")
                out.append(c)
            return out

        outs = custom_vjp_call_p.bind_call(flat_fun, (flat_fwd, flat_bwd), leaves, {})
        return tree_unflatten(out_tree_cell[-1], outs)


# ---- forward mode of custom_vjp: linear in tangents, transposed by bwd -----------------------

custom_lin_p = Primitive("custom_lin", multiple_results=True)


@custom_lin_p.def_abstract_eval
def _custom_lin_abstract_eval(*avals, num_res, bwd, out_avals, res_tree, out_tree):
    return list(out_avals)


@custom_lin_p.def_impl
def _custom_lin_impl(*args, **params):
    raise NotImplementedError(
        "forward-mode differentiation (jvp, jacfwd) of a custom_vjp function is not supported; "
        "use reverse mode (grad, vjp, jacrev) or define the rule with custom_jvp")


def _custom_lin_transpose(cts, *args, num_res, bwd, out_avals, res_tree, out_tree):
    res = list(args[:num_res])
    cts = [ad.instantiate_zeros(ct) for ct in cts]
    cts_in = bwd(res_tree, out_tree, res, cts)
    return [None] * num_res + list(cts_in)


custom_lin_p.transpose = _custom_lin_transpose


def custom_vjp_jvp(fwd, bwd, primals, tangents, params):
    """JVP of a custom_vjp call: run ``fwd`` on the primals and make the output tangents a
    ``custom_lin`` of the input tangents (so reverse mode transposes it into ``bwd``)."""
    out_leaves, res_leaves, res_tree, out_tree = fwd(*primals)
    out_avals = [ad.tangent_aval(get_aval(o)) for o in out_leaves]
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    tangents_out = custom_lin_p.bind(*res_leaves, *tangents, num_res=len(res_leaves), bwd=bwd,
                                     out_avals=tuple(out_avals), res_tree=res_tree,
                                     out_tree=out_tree)
    return out_leaves, tangents_out


# ---- batching ---------------------------------------------------------------------------------


def _batched(fun, dims, size):
    """``fun`` (flat in, flat out) batched over inputs with ``dims``; outputs at axis 0."""
    def batched(*args):
        return batching.batch_fun(fun, list(args), dims, size, lambda n: [0] * n)
    return batched


def batch_custom_jvp(trace, primitive, fun, jvp, vals, dims, params):
    size = batching.batch_size_of(vals, dims)
    vals = [batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims)]
    dims0 = [0] * len(vals)
    fun_b = _batched(fun, dims0, size)

    def jvp_b(primals, tangents):
        n = len(primals)
        tangents = [batching.bdim_at_front(ad.instantiate_zeros(t), None, size)
                    if isinstance(t, ad.Zero) else t for t in tangents]

        def flat(*xs):
            p_out, t_out = jvp(xs[:n], xs[n:])
            return list(p_out) + list(t_out)

        outs = batching.batch_fun(flat, list(primals) + list(tangents), [0] * (2 * n), size,
                                  lambda m: [0] * m)
        half = len(outs) // 2
        return outs[:half], outs[half:]

    outs = primitive.bind_call(fun_b, jvp_b, vals, params)
    return [batching.BatchTracer(trace, o, 0) for o in outs]


def batch_custom_vjp(trace, primitive, fun, fwd, bwd, vals, dims, params):
    size = batching.batch_size_of(vals, dims)
    vals = [batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims)]
    dims0 = [0] * len(vals)
    fun_b = _batched(fun, dims0, size)
    trees = {}

    def fwd_b(*primals):
        def flat(*xs):
            out_leaves, res_leaves, res_tree, out_tree = fwd(*xs)
            trees["res_tree"], trees["out_tree"] = res_tree, out_tree
            trees["num_out"] = len(out_leaves)
            return list(out_leaves) + list(res_leaves)

        outs = batching.batch_fun(flat, list(primals), [0] * len(primals), size, lambda m: [0] * m)
        k = trees["num_out"]
        return outs[:k], outs[k:], trees["res_tree"], trees["out_tree"]

    def bwd_b(res_tree, out_tree, res_leaves, ct_leaves):
        nres = len(res_leaves)

        def flat(*xs):
            cts = bwd(res_tree, out_tree, list(xs[:nres]), list(xs[nres:]))
            return [ad.instantiate_zeros(c) for c in cts]

        # every output of the batched function is batched at axis 0, so are its cotangents
        return batching.batch_fun(flat, list(res_leaves) + list(ct_leaves),
                                  [0] * (nres + len(ct_leaves)), size, lambda m: [0] * m)

    outs = primitive.bind_call(fun_b, (fwd_b, bwd_b), vals, params)
    return [batching.BatchTracer(trace, o, 0) for o in outs]

