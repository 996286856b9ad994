"""``custom_vmap``: a function with a user-supplied rule for how it is batched.

    >>> import functrans, functrans.numpy as jnp
    >>> from functrans.custom_batching import custom_vmap
    >>> @custom_vmap
    ... def f(x, y):
    ...     return x + y
    >>> @f.def_vmap
    ... def f_vmap_rule(axis_size, in_batched, xs, ys):
    ...     return xs * ys, True          # batched: multiply instead (to show the rule runs)
    >>> functrans.vmap(f)(jnp.arange(3.0), jnp.arange(1.0, 4.0))
    Array([0., 2., 6.], dtype=float32)

A call of a ``custom_vmap`` function under a transform binds ``custom_vmap_call``, a
primitive holding the function's program (``call_jaxpr``) and a *flat* rule
``rule(axis_size, in_batched, *leaves) -> (out_leaves, out_batched)``:

* evaluation, staging (``jit``) and compilation use the program; the compiler inlines it;
* batching calls the rule on whole batches (batched operands with their batch axis first);
* forward mode (``jvp``) is another ``custom_vmap_call``: its program is the jvp of the
  program, its rule the jvp of the rule, so ``vmap(jvp(f))`` still uses the user's rule;
* reverse mode (``grad``, ``vjp``, ``linearize``) of the call itself is not supported, as
  in JAX; wrap the function in ``custom_vjp`` for that. ``grad(vmap(f))`` works, because
  the rule replaces the call before differentiation sees it.

Values the function closes over travel as leading operands marked in ``closed_mask``: the
rule knows nothing about them, so when only they are batched the function's own program
is batched instead, and when they are batched together with the arguments the call is
rejected.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from functrans import _dtypes, core, tree_util
from functrans._api import _as_array
from functrans.core import Primitive, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters.staging import closed_over_consts_as_args, trace_to_closed_jaxpr
from functrans.tree_util import tree_flatten, tree_unflatten
from functrans.primitives.scan import map as lax_map

__all__ = ["custom_vmap", "sequential_vmap"]


# =============================================================================================
# The primitive
# =============================================================================================

custom_vmap_call_p = Primitive("custom_vmap_call", multiple_results=True)


@custom_vmap_call_p.def_abstract_eval
def _custom_vmap_abstract_eval(*avals, call_jaxpr, rule, closed_mask, name, num_primals):
    return call_jaxpr.out_avals


@custom_vmap_call_p.def_impl
def _custom_vmap_impl(*args, call_jaxpr, rule, closed_mask, name, num_primals):
    return core.eval_jaxpr_numpy(call_jaxpr.jaxpr, [core.to_numpy(c) for c in call_jaxpr.consts],
                            args)


# A compiler sees the body spliced into the enclosing program, like a custom_jvp call
# (interpreters/inline.py lists custom_vmap_call with the other inlinable calls).


def _custom_vmap_batch(vals, dims, *, call_jaxpr, rule, closed_mask, name, num_primals):
    size = batching.batch_size_of(vals, dims)
    closed_batched = any(d is not None and closed for d, closed in zip(dims, closed_mask))
    if closed_batched:
        if any(d is not None and not closed for d, closed in zip(dims, closed_mask)):
            raise NotImplementedError(
                f"custom_vmap function {name}: a value it closes over is batched by the same "
                "vmap as its arguments, and the vmap rule only sees the arguments. Pass that "
                "value to the function as an explicit argument instead.")
        # The rule describes batching over the arguments, which are not batched here: the
        # program itself is batched, as any function would be.
        batched, out_dims = batching.batch_jaxpr(call_jaxpr, size, dims, False)
        return core.eval_jaxpr(batched.jaxpr, batched.consts, *vals), out_dims
    vals = [v if d is None else batching.moveaxis(v, d, 0) for v, d in zip(vals, dims)]
    in_batched = [d is not None for d in dims]
    outs, out_batched = rule(size, in_batched, *vals)
    for i, (out, batched, aval) in enumerate(zip(outs, out_batched, call_jaxpr.out_avals)):
        expected = (size,) + tuple(aval.shape) if batched else tuple(aval.shape)
        got = tuple(get_aval(out).shape)
        if got != expected:
            raise ValueError(
                f"custom_vmap rule of {name} returned output {i} of shape {got}, but the "
                f"function's output has shape {tuple(aval.shape)} and the rule marked it "
                f"{'batched' if batched else 'unbatched'} (axis size {size}), so its shape "
                f"must be {expected}")
    return list(outs), [0 if b else None for b in out_batched]


custom_vmap_call_p.batch = _custom_vmap_batch


# ---- forward mode: the jvp of a custom_vmap call is a custom_vmap call ------------------------


def _custom_vmap_jvp(primals, tangents, *, call_jaxpr, rule, closed_mask, name, num_primals):
    n = len(primals)
    in_avals = list(call_jaxpr.in_avals)
    out_avals = list(call_jaxpr.out_avals)
    # integer inputs carry float0 tangents, which are zero: keep only real tangents
    has_tangent = [not isinstance(t, ad.Zero) and _dtypes.is_inexact(a.dtype)
                   for t, a in zip(tangents, in_avals)]
    tangent_args = [t for t, keep in zip(tangents, has_tangent) if keep]
    out_has_tangent = [_dtypes.is_inexact(a.dtype) for a in out_avals]

    def with_zeros(values, present, like):
        it = iter(values)
        return [next(it) if keep else ad.Zero(ad.tangent_aval(get_aval(p)))
                for keep, p in zip(present, like)]

    def body_jvp(*xs):
        ps = list(xs[:n])
        p_out, t_out = ad.jvp_flat(
            lambda *a: core.eval_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts, *a),
            ps, with_zeros(xs[n:], has_tangent, ps))
        return list(p_out) + [ad.instantiate_zeros(t) for t, keep in zip(t_out, out_has_tangent)
                              if keep]

    jvp_jaxpr = trace_to_closed_jaxpr(
        body_jvp, in_avals + [a for a, keep in zip(in_avals, has_tangent) if keep])

    def rule_jvp(axis_size, in_batched, *vals):
        ps, real_ts = list(vals[:n]), list(vals[n:])
        p_batched = list(in_batched[:n])
        cell = {}

        def jvp_of_rule(ps, ts, batched):
            def primal_rule(*xs):
                outs, out_batched = rule(axis_size, batched, *xs)
                cell["out_batched"] = list(out_batched)
                return outs

            p_out, t_out = ad.jvp_flat(primal_rule, ps, ts)
            return list(p_out) + [ad.instantiate_zeros(t)
                                  for t, keep in zip(t_out, out_has_tangent) if keep]

        if not any(p_batched):
            # Only tangents are batched (jacfwd, or vmap over tangents): the rule sees
            # unbatched primals, and the jvp of it is batched over the tangents as any
            # function would be, so the primal outputs stay unbatched.
            t_dims = [0 if b else None for b in in_batched[n:]]
            outs, extra = _vmap_unrestricted(
                lambda *ts: jvp_of_rule(ps, with_zeros(ts, has_tangent, ps), [False] * n),
                real_ts, t_dims, axis_size)
            out_batched = cell["out_batched"]
            rule_batched = out_batched + [b for b, keep in zip(out_batched, out_has_tangent)
                                          if keep]
            return outs, [a or b for a, b in zip(rule_batched, extra)]
        # Some primal is batched. The rule sees a primal and its tangent batched alike:
        # broadcast whichever of the two is not batched when the other is.
        t_batched = _spread(in_batched[n:], has_tangent, False)
        ts = with_zeros(real_ts, has_tangent, ps)
        both = [pb or tb for pb, tb in zip(p_batched, t_batched)]
        ps = [batching.broadcast(p, axis_size, 0) if b and not pb else p
              for p, b, pb in zip(ps, both, p_batched)]
        ts = [_batched_tangent(t, p, axis_size) if b and not tb else t
              for t, p, b, tb in zip(ts, ps, both, t_batched)]
        outs = jvp_of_rule(ps, ts, both)
        out_batched = cell["out_batched"]
        return outs, out_batched + [b for b, keep in zip(out_batched, out_has_tangent) if keep]

    mask = tuple(closed_mask) + tuple(c for c, keep in zip(closed_mask, has_tangent) if keep)
    outs = custom_vmap_call_p.bind(*primals, *tangent_args, call_jaxpr=jvp_jaxpr, rule=rule_jvp,
                                   closed_mask=mask, name=name, num_primals=n)
    m = len(out_avals)
    primal_out = outs[:m]
    tangent_iter = iter(outs[m:])
    tangent_out = [next(tangent_iter) if keep else ad.Zero(ad.tangent_aval(a))
                   for keep, a in zip(out_has_tangent, out_avals)]
    return primal_out, tangent_out


custom_vmap_call_p.jvp = _custom_vmap_jvp


def _spread(values, present, fill):
    """``values`` placed at the positions where ``present`` is true, ``fill`` elsewhere."""
    it = iter(values)
    return [next(it) if keep else fill for keep in present]


def _vmap_unrestricted(fun, args, dims, axis_size):
    """``fun`` batched over ``args`` (batch dims ``dims``, None: unbatched), leaving each
    output batched (at axis 0) or not as it comes out. Returns outputs and batched flags."""
    with core.new_main(batching.BatchTrace, batching.AxisData(None, axis_size),
                       name="vmap") as main:
        trace = batching.BatchTrace(main)
        tracers = [x if d is None else batching.BatchTracer(trace, x, d)
                   for x, d in zip(args, dims)]
        outs = [trace.full_raise(o) for o in fun(*tracers)]
        values = [o.val if o.batch_dim is None else batching.moveaxis(o.val, o.batch_dim, 0)
                  for o in outs]
        return values, [o.batch_dim is not None for o in outs]


def _batched_tangent(t, batched_primal, axis_size):
    """Tangent ``t`` broadcast along a new leading batch axis (a symbolic zero stays zero)."""
    if isinstance(t, ad.Zero):
        return ad.Zero(ad.tangent_aval(get_aval(batched_primal)))
    return batching.broadcast(t, axis_size, 0)


def _reverse_mode_error(name):
    return ValueError(
        f"reverse-mode differentiation (grad, vjp, linearize) of custom_vmap function {name} "
        "is not supported: its vmap rule has no transpose. Forward mode (jvp, jacfwd) works, "
        "and so does grad of a vmap of it; to differentiate it in reverse mode, wrap it in "
        "functrans.custom_vjp (custom_vjp on the outside).")


def _custom_vmap_partial_eval(trace, tracers, **params):
    # Linearizing a jvp call: the primal half is known and the tangent half is not. The call
    # cannot be split into a known primal part and a linear tangent part (the rule has no
    # such split), which is what reverse mode needs.
    num_primals = params["num_primals"]
    if num_primals is not None and all(t.pval.is_known() for t in tracers[:num_primals]):
        raise _reverse_mode_error(params["name"])
    return trace.default_process_primitive(custom_vmap_call_p, tracers, params)


def _custom_vmap_transpose(cts, *args, call_jaxpr, rule, closed_mask, name, num_primals):
    raise _reverse_mode_error(name)


custom_vmap_call_p.partial_eval = _custom_vmap_partial_eval
custom_vmap_call_p.transpose = _custom_vmap_transpose


# =============================================================================================
# The user-facing decorator
# =============================================================================================


def _function_name(fun) -> str:
    return getattr(fun, "__name__", None) or repr(fun)


def _resolve_kwargs(fun, name, args, kwargs) -> tuple:
    """``args`` and ``kwargs`` as one tuple of positional arguments (defaults filled in)."""
    if not kwargs:
        return tuple(args)
    try:
        bound = inspect.signature(fun).bind(*args, **kwargs)
    except (TypeError, ValueError) as err:
        raise TypeError(f"The input arguments to the custom_vmap-decorated function {name} "
                        f"could not be resolved to positional-only arguments. Binding failed "
                        f"with the error:\n{err}") from err
    bound.apply_defaults()
    if bound.kwargs:
        raise TypeError(f"The input arguments to the custom_vmap-decorated function {name} "
                        "could not be resolved to positional-only arguments: keyword-only "
                        f"arguments {sorted(bound.kwargs)} are not supported")
    return tuple(bound.args)


def _check_rule_trees(rule_name, fun_out_tree, out_tree, batched_tree):
    if out_tree != batched_tree:
        raise ValueError(
            "structure of output value and output batching specification returned by custom "
            f"vmap rule ({rule_name}) do not match.\nOutput values: {out_tree}\n"
            f"Batching spec: {batched_tree}")
    if out_tree != fun_out_tree:
        raise ValueError(
            f"structure of output returned by custom vmap rule ({rule_name}) does not match "
            f"that of original custom-vmapped function.\nOriginal output: {fun_out_tree}\n"
            f"Rule output: {out_tree}")


class custom_vmap:  # noqa: N801 (JAX's name)
    """Customize how a function is batched by :func:`functrans.vmap`.

    Unbatched, the function runs as written. Under ``vmap`` the rule set with
    :meth:`def_vmap` runs instead, on whole batches:
    ``rule(axis_size, in_batched, *args) -> (out, out_batched)``, where ``in_batched`` is a
    list (one entry per argument) of pytrees of bools saying which leaves carry the batch
    axis (always axis 0), and ``out_batched`` says the same of the outputs.

        >>> import functrans, functrans.numpy as jnp
        >>> from functrans.custom_batching import custom_vmap
        >>> @custom_vmap
        ... def norm(x):
        ...     return jnp.sqrt(jnp.sum(x * x))
        >>> @norm.def_vmap
        ... def norm_rule(axis_size, in_batched, xs):
        ...     return jnp.sqrt(jnp.sum(xs * xs, axis=1)), in_batched[0]
        >>> functrans.vmap(norm)(jnp.array([[3.0, 4.0], [6.0, 8.0]]))
        Array([ 5., 10.], dtype=float32)

    ``jit`` and forward-mode ``jvp`` compose with it (under ``vmap`` the jvp uses the jvp
    of the rule). Reverse mode of the call itself raises ``ValueError``, as in JAX: wrap
    the function in :class:`functrans.custom_vjp` to differentiate it in reverse mode.
    """

    def __init__(self, fun: Callable[..., Any]):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.vmap_rule: Callable | None = None

    def __get__(self, instance, owner):
        if instance is None:
            return self
        return functools.partial(self, instance)

    def def_vmap(self, vmap_rule: Callable[..., tuple[Any, Any]]) -> Callable[..., tuple[Any, Any]]:
        """Set the batching rule ``vmap_rule(axis_size, in_batched, *args) -> (out,
        out_batched)``; returns the rule unchanged, so it can be used as a decorator."""
        self.vmap_rule = vmap_rule
        return vmap_rule

    def __call__(self, *args, **kwargs):
        name = _function_name(self.fun)
        args = _resolve_kwargs(self.fun, name, args, kwargs)
        if self.vmap_rule is None:
            raise AttributeError(f"No batching rule defined for custom_vmap function {name} "
                                 "using def_vmap.")
        leaves, in_tree = tree_flatten(args)
        if len(core.trace_stack()) == 1 and not any(isinstance(x, core.Tracer) for x in leaves):
            # no transform is active: nothing can batch this call, so run the function
            return self.fun(*args)
        leaves = [_as_array(x) for x in leaves]
        user_fun, user_rule = self.fun, self.vmap_rule
        rule_name = _function_name(user_rule)
        out_tree_cell = []

        def flat_fun(*flat):
            out_leaves, out_tree = tree_flatten(user_fun(*tree_unflatten(in_tree, flat)))
            out_tree_cell.append(out_tree)
            return out_leaves

        closed = trace_to_closed_jaxpr(flat_fun, [get_aval(x) for x in leaves])
        out_tree = out_tree_cell[-1]
        # Closed-over values (tracers of enclosing transforms included) become operands.
        call_jaxpr, consts = closed_over_consts_as_args(closed)
        num_consts = len(consts)

        def flat_rule(axis_size, in_batched, *vals):
            # the batch rule calls this only when no closed-over operand is batched
            arg_batched = tree_unflatten(in_tree, list(in_batched[num_consts:]))
            user_args = tree_unflatten(in_tree, list(vals[num_consts:]))
            out, out_batched = user_rule(axis_size, list(arg_batched), *user_args)
            out_leaves, rule_out_tree = tree_flatten(out)
            batched_leaves, batched_tree = tree_flatten(out_batched)
            _check_rule_trees(rule_name, out_tree, rule_out_tree, batched_tree)
            return [_as_array(o) for o in out_leaves], [bool(b) for b in batched_leaves]

        closed_mask = (True,) * num_consts + (False,) * len(leaves)
        outs = custom_vmap_call_p.bind(*consts, *leaves, call_jaxpr=call_jaxpr, rule=flat_rule,
                                       closed_mask=closed_mask, name=name, num_primals=None)
        return tree_unflatten(out_tree, outs)


# =============================================================================================
# sequential_vmap
# =============================================================================================


def sequential_vmap(f: Callable) -> custom_vmap:
    """``f`` as a :class:`custom_vmap` whose batching rule is a loop over the batch
    (:func:`functrans.lax.map`): for functions that do not support a batch axis, such as
    host callbacks.

        >>> import functrans, functrans.numpy as jnp
        >>> from functrans.custom_batching import sequential_vmap
        >>> f = sequential_vmap(lambda x: x + 1)
        >>> functrans.vmap(f)(jnp.arange(3.0))
        Array([1., 2., 3.], dtype=float32)
    """
    f = custom_vmap(f)

    @f.def_vmap
    def rule(axis_size, in_batched, *args):
        batched_flags, tree = tree_flatten(list(in_batched))
        arg_leaves = tree_util.tree_leaves(list(args))
        mapped = [x for x, b in zip(arg_leaves, batched_flags) if b]

        def one(mapped_leaves):
            it = iter(mapped_leaves)
            leaves = [next(it) if b else x for x, b in zip(arg_leaves, batched_flags)]
            return f(*tree_unflatten(tree, leaves))

        out = lax_map(one, mapped)
        return out, tree_util.tree_map(lambda _: True, out)

    return f
