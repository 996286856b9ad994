"""``custom_jvp``, ``custom_vjp`` and ``custom_gradient``: user-supplied derivative rules.

A call of a decorated function binds a *call primitive* through
``Trace.process_custom_jvp_call`` / ``process_custom_vjp_call``, so each transform decides:
eager evaluation and partial evaluation run the function; the jvp trace applies the rule;
the batching trace batches both the function and the rule; staging records one equation
holding the function's jaxpr and the rule, so the rule is still found when the staged
program is differentiated later. Outside every transform the call is just the function, so
it returns exactly what the undecorated function returns.

The rules are called as JAX calls them. With ``nondiff_argnums``, a jvp rule is called
``rule(*nondiff_args, primals, tangents)``, a vjp ``fwd`` gets every argument in its place
and ``bwd`` is called ``bwd(*nondiff_args, residuals, cotangent)``.

Internally the transforms see flat rules over the leaves of the differentiable arguments:
``jvp(primals, tangents) -> (primals_out, tangents_out)`` (tangents may be ``ad.Zero``),
``fwd(perturbed, *primals) -> (outs, residuals, res_tree, out_tree)`` and
``bwd(res_tree, out_tree, residuals, cotangents) -> cotangents_in``.

Reverse mode through ``custom_vjp`` uses ``custom_lin``, a primitive linear in the tangents
whose transpose calls the user's ``bwd``; it cannot be evaluated, so forward mode of a
``custom_vjp`` function is a ``TypeError`` as in JAX.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any, Callable, Sequence

from functrans import _dtypes, core, tree_util
from functrans._api import _as_array
from functrans._jit import jit_p
from functrans.core import (ClosedJaxpr, Jaxpr, Primitive, Tracer, UnexpectedTracerError, Var,
                            get_aval)
from functrans.interpreters import ad, batching
from functrans.interpreters.staging import trace_to_closed_jaxpr, trace_to_jaxpr_dynamic
from functrans.tree_util import keystr, tree_flatten, tree_leaves, tree_unflatten
from functrans.primitives.custom_calls import custom_jvp_call_p, custom_vjp_call_p
from functrans.primitives.elementwise import stop_gradient

__all__ = ["custom_jvp", "custom_vjp", "custom_gradient", "SymbolicZero", "zero_from_primal",
           "CustomVJPPrimal", "custom_vjp_primal_tree_values"]


# =============================================================================================
# Symbolic zeros as rules see them
# =============================================================================================


class SymbolicZero:
    """A tangent or cotangent known to be zero, given to rules defined with
    ``symbolic_zeros=True`` instead of an array of zeros (and accepted back from them).
    ``shape``, ``dtype`` and ``aval`` describe the zero it stands for.

        >>> import functrans
        >>> from functrans.custom_derivatives import SymbolicZero
        >>> SymbolicZero.from_primal_value(1.0).shape
        ()
    """

    def __init__(self, aval):
        self.aval = aval

    shape = property(lambda self: self.aval.shape)
    dtype = property(lambda self: self.aval.dtype)
    ndim = property(lambda self: self.aval.ndim)
    size = property(lambda self: self.aval.size)
    weak_type = property(lambda self: self.aval.weak_type)

    def __repr__(self):
        return "SymbolicZero"

    @staticmethod
    def from_primal_value(val) -> "SymbolicZero":
        return SymbolicZero(ad.tangent_aval(get_aval(val)))


def zero_from_primal(val, symbolic_zeros: bool = False):
    """Zero tangents for the pytree ``val``: :class:`SymbolicZero` objects, or arrays of zeros.

        >>> from functrans.custom_derivatives import zero_from_primal
        >>> zero_from_primal({'a': 1.0})
        {'a': Array(0., dtype=float32, weak_type=True)}
    """
    def zero(x):
        aval = ad.tangent_aval(get_aval(x))
        return SymbolicZero(aval) if symbolic_zeros else ad.zeros_like_aval(aval)
    return tree_util.tree_map(zero, val)


@dataclasses.dataclass
class CustomVJPPrimal:
    """An argument leaf as a ``custom_vjp`` ``fwd`` rule defined with ``symbolic_zeros=True``
    receives it: the value, and whether it is being differentiated."""
    value: Any
    perturbed: bool


def custom_vjp_primal_tree_values(tree):
    """The values of a tree of :class:`CustomVJPPrimal` leaves (what ``fwd`` receives with
    ``symbolic_zeros=True``), as the plain argument tree.

        >>> from functrans.custom_derivatives import CustomVJPPrimal, custom_vjp_primal_tree_values
        >>> custom_vjp_primal_tree_values((CustomVJPPrimal(1.0, True),))
        (1.0,)
    """
    def value(leaf):
        if type(leaf) is not CustomVJPPrimal:
            raise TypeError(f"unexpected leaf type {type(leaf)}")
        return leaf.value
    return tree_util.tree_map(value, tree)


def _to_rule_tangent(t, symbolic_zeros: bool):
    if isinstance(t, ad.Zero):
        return SymbolicZero(t.aval) if symbolic_zeros else ad.instantiate_zeros(t)
    return t


def _from_rule_tangent(t):
    return ad.Zero(t.aval) if isinstance(t, SymbolicZero) else t


# =============================================================================================
# Arguments: keywords, nondiff_argnums, eager calls
# =============================================================================================


def _fun_name(fun) -> str:
    return getattr(fun, "__name__", None) or type(fun).__name__


def _nondiff_argnums(fun, nondiff_argnums, nondiff_argnames) -> tuple[int, ...]:
    nums = {int(i) for i in nondiff_argnums}
    if nondiff_argnames:
        names = [nondiff_argnames] if isinstance(nondiff_argnames, str) else nondiff_argnames
        params = list(inspect.signature(fun).parameters)
        for name in names:
            if name not in params:
                raise ValueError(f"nondiff_argnames: {fun!r} has no parameter named {name!r}")
            nums.add(params.index(name))
    return tuple(sorted(nums))


class _Arguments:
    """How a decorated function's arguments become positional ones, as JAX passes them to
    the rules (keywords resolved, defaults filled in). The signature is read once."""

    def __init__(self, fun, kind: str):
        self.fun, self.kind = fun, kind
        try:
            self.signature = (None if isinstance(fun, functools.partial) else
                              inspect.signature(fun))
        except (TypeError, ValueError):
            self.signature = None
        params = self.signature.parameters.values() if self.signature is not None else ()
        positional = [p for p in params if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                      inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        self.num_positional = len(positional)
        self.var_positional = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
        self.keyword_only = any(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params)

    def resolve(self, args, kwargs) -> tuple:
        if not kwargs and not self.keyword_only and (
                len(args) == self.num_positional or
                (self.var_positional and len(args) >= self.num_positional)):
            return tuple(args)  # nothing to resolve or fill in
        name = _fun_name(self.fun)
        if self.signature is None:
            if kwargs:
                raise TypeError(f"The input arguments to the {self.kind}-decorated function "
                                f"{name} could not be resolved to positional-only arguments: "
                                f"its signature is unknown, so pass them positionally.")
            return tuple(args)
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as err:
            raise TypeError(f"The input arguments to the {self.kind}-decorated function {name} "
                            "could not be resolved to positional-only arguments. Binding failed "
                            f"with the error:\n{err}") from err
        bound.apply_defaults()
        passed = [k for k in bound.kwargs if k in kwargs]
        if passed:
            raise TypeError("The following keyword arguments could not be resolved to "
                            f"positions: {', '.join(passed)}")
        return bound.args


def _is_eager(args) -> bool:
    """No transform sees these arguments: no tracer among them and no staging trace open."""
    return isinstance(core.find_top_trace(tree_leaves(args)), core.EvalTrace)


def _check_argnums(argnums, num_args: int, kind: str):
    for i in argnums:
        if i >= num_args:
            raise TypeError(f"{kind} function has nondiff_argnums={argnums} but was called with "
                            f"only {num_args} positional arguments")


def _merge(nondiff, nondiff_vals, diff_vals, n):
    out, nd, d = [], iter(nondiff_vals), iter(diff_vals)
    for i in range(n):
        out.append(next(nd) if i in nondiff else next(d))
    return out


class _NondiffArgs:
    """The nondiff arguments of one call. Leaves that are tracers (JAX allows them for
    custom_jvp, with their derivative stopped) become hidden inputs of the call, so every
    transform sees them as operands instead of as closed-over values."""

    def __init__(self, values):
        leaves, self.tree = tree_flatten(list(values))
        self.leaves = leaves
        self.traced = [isinstance(x, Tracer) for x in leaves]
        self.traced_values = [_stop_gradient(x) for x, t in zip(leaves, self.traced) if t]

    def rebuild(self, traced_values) -> list:
        it = iter(traced_values)
        leaves = [next(it) if t else x for x, t in zip(self.leaves, self.traced)]
        return tree_unflatten(self.tree, leaves)


def _stop_gradient(x):
    return stop_gradient(x)


def _aval_tree_str(tree, avals) -> str:
    return str(tree_unflatten(tree, [a.str_short() for a in avals])).replace("'", "")


def _same_types(avals, expected) -> bool:
    return len(avals) == len(expected) and all(
        a.shape == b.shape and a.dtype == b.dtype for a, b in zip(avals, expected))


# =============================================================================================
# custom_jvp
# =============================================================================================


class custom_jvp:  # noqa: N801 (JAX's name)
    """A function with a custom forward-mode derivative rule (reverse mode follows by
    transposition). ``defjvp(rule)`` sets ``rule(primals, tangents) -> (primal_out,
    tangent_out)``; with ``nondiff_argnums`` the rule is called
    ``rule(*nondiff_args, primals, tangents)``.

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

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = (),
                 nondiff_argnames: Sequence[str] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = _nondiff_argnums(fun, nondiff_argnums, nondiff_argnames)
        self.jvp = None
        self.symbolic_zeros = False
        self._arguments = None

    def __get__(self, instance, owner):
        if instance is None:
            return self
        return functools.partial(self, instance)

    def defjvp(self, jvp: Callable, symbolic_zeros: bool = False) -> Callable:
        """Set the rule ``jvp(primals, tangents) -> (primal_out, tangent_out)`` (with
        ``nondiff_argnums``: ``jvp(*nondiff_args, primals, tangents)``). With
        ``symbolic_zeros=True`` the tangents of arguments that are not differentiated arrive
        as :class:`SymbolicZero` objects, and the rule may return them. Returns ``jvp``, so
        it can be used as a decorator."""
        self.jvp = jvp
        self.symbolic_zeros = symbolic_zeros
        return jvp

    def defjvps(self, *tangent_fns) -> None:
        """Set one rule per argument, ``fn(tangent, primal_out, *primals) -> tangent_out``
        (None for an argument the output does not depend on); the output tangent is the sum.

            >>> import functrans, functrans.numpy as jnp
            >>> f = functrans.custom_jvp(lambda x, y: x * y)
            >>> f.defjvps(lambda t, ans, x, y: t * y, None)
            >>> functrans.grad(f)(2.0, 3.0)
            Array(3., dtype=float32, weak_type=True)
        """
        if self.nondiff_argnums:
            raise TypeError("Can't use ``defjvps`` with ``nondiff_argnums``.")

        def jvp(primals, tangents):
            primal_out = self(*primals)
            zeros = zero_from_primal(primal_out)
            terms = [fn(t, primal_out, *primals) if fn is not None else zeros
                     for t, fn in zip(tangents, tangent_fns)]
            total = tree_util.tree_map(lambda _, *ts: functools.reduce(ad.add_tangents, ts),
                                       primal_out, *terms)
            return primal_out, total

        self.defjvp(jvp)

    def __call__(self, *args, **kwargs):
        name = _fun_name(self.fun)
        if self.jvp is None:
            raise AttributeError(f"No JVP defined for custom_jvp function {name} using defjvp.")
        if self._arguments is None:
            self._arguments = _Arguments(self.fun, "custom_jvp")
        args = self._arguments.resolve(args, kwargs)
        if _is_eager(args):
            return self.fun(*args)
        nondiff = self.nondiff_argnums
        _check_argnums(nondiff, len(args), "custom_jvp")
        static = _NondiffArgs([args[i] for i in nondiff])
        diff_args = tuple(args[i] for i in range(len(args)) if i not in nondiff)
        leaves, in_tree = tree_flatten(diff_args)
        leaves = [_as_array(x) for x in leaves]
        call = _JVPCall(self, name, nondiff, static, in_tree, len(leaves), len(args))
        outs = custom_jvp_call_p.bind_call(call.flat_fun, call.flat_jvp,
                                           leaves + static.traced_values, {})
        return tree_unflatten(call.out_tree, outs)


class _JVPCall:
    """One call of a custom_jvp function: its flat function and flat rule, and what they
    learned about the output (its structure and types)."""

    def __init__(self, f: custom_jvp, name, nondiff, static: _NondiffArgs, in_tree, num_diff,
                 num_args):
        self.f, self.name, self.nondiff, self.static = f, name, nondiff, static
        self.in_tree, self.num_diff, self.num_args = in_tree, num_diff, num_args
        self.fun_out = None   # (tree, avals) of the function's output, once it ran
        self.out_tree = None

    def _args(self, flat):
        diff = tree_unflatten(self.in_tree, list(flat[:self.num_diff]))
        static = self.static.rebuild(flat[self.num_diff:])
        return diff, static

    def flat_fun(self, *flat):
        diff, static = self._args(flat)
        out = self.f.fun(*_merge(self.nondiff, static, diff, self.num_args))
        out_leaves, out_tree = tree_flatten(out)
        self.fun_out = (out_tree, [get_aval(o) for o in out_leaves])
        self.out_tree = out_tree
        return out_leaves

    def flat_jvp(self, primals, tangents):
        diff, static = self._args(primals)
        symbolic = self.f.symbolic_zeros
        py_tangents = tree_unflatten(self.in_tree, [_to_rule_tangent(t, symbolic)
                                                    for t in tangents[:self.num_diff]])
        rule_name = _fun_name(self.f.jvp)
        pair = self.f.jvp(*static, diff, py_tangents)
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise TypeError(f"Custom JVP rule {rule_name} for function {self.name} must return "
                            "a pair (primal output, tangent output) as a tuple or list of "
                            f"length two, but it returned {pair!r}.")
        p_leaves, p_tree = tree_flatten(pair[0])
        t_leaves, t_tree = tree_flatten(pair[1])
        if p_tree != t_tree:
            raise TypeError(f"Custom JVP rule {rule_name} for function {self.name} returned a "
                            f"primal output of structure {p_tree} and a tangent output of "
                            f"structure {t_tree}; the two pytree structures must be equal.")
        p_avals = [get_aval(p) for p in p_leaves]
        _check_primal_out(self, rule_name, "rule", p_tree, p_avals)
        _check_tangent_types(p_avals, [t.aval if isinstance(t, SymbolicZero) else get_aval(t)
                                       for t in t_leaves])
        self.out_tree = p_tree
        return p_leaves, [_from_rule_tangent(t) for t in t_leaves]

def _check_primal_out(call, rule: str, label: str, tree, avals) -> None:
    """The primal output of a custom rule (``rule``, a custom_jvp rule or a custom_vjp fwd,
    shown as ``label``) must look like the function's own output, when that already ran."""
    if call.fun_out is None:
        return
    fun_tree, fun_avals = call.fun_out
    if fun_tree == tree and _same_types(avals, fun_avals):
        return
    what = "pytree structure" if fun_tree != tree else "shapes/dtypes"
    kind = "Custom JVP rule" if label == "rule" else "Custom VJP fwd rule"
    raise TypeError(
        f"{kind} {rule} for function {call.name} returned a primal output whose {what} "
        f"differs from the output of {call.name} itself (the first element of the "
        f"{'rule' if label == 'rule' else 'fwd'}'s pair is the function's output):\n"
        f"    {label + ':':<10}{_aval_tree_str(tree, avals)}\n"
        f"    function: {_aval_tree_str(fun_tree, fun_avals)}")


def _check_tangent_types(primal_avals, tangent_avals):
    expected = [ad.tangent_aval(a.strip_weak_type()) for a in primal_avals]
    if _same_types(tangent_avals, expected):
        return
    if len(expected) == 1:
        raise TypeError(
            f"Custom JVP rule returned a tangent of type {tangent_avals[0].str_short()} for a "
            f"primal output of type {primal_avals[0].str_short()}, whose tangents have type "
            f"{expected[0].str_short()}.")
    bad = "; ".join(f"Expected {e.strip_weak_type().str_short()} (tangent type of "
                    f"{p.strip_weak_type().str_short()}) but got {t.strip_weak_type().str_short()}"
                    for p, e, t in zip(primal_avals, expected, tangent_avals)
                    if not _same_types([t], [e]))
    raise TypeError("Custom JVP rule must produce primal and tangent outputs with corresponding "
                    f"shapes and dtypes. {bad}.")


# =============================================================================================
# custom_vjp
# =============================================================================================


class custom_vjp:  # noqa: N801 (JAX's name)
    """A function with a custom reverse-mode rule: ``fwd(*args) -> (out, residuals)`` and
    ``bwd(residuals, out_cotangent) -> tuple of argument cotangents`` (None for an argument
    with no cotangent). With ``nondiff_argnums`` those arguments are passed to ``fwd`` in
    their places and to ``bwd`` first: ``bwd(*nondiff_args, residuals, out_cotangent)``.

        >>> import functrans, functrans.numpy as jnp
        >>> @functrans.custom_vjp
        ... def clip_grad(x):
        ...     return x
        >>> clip_grad.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -1.0, 1.0),))
        >>> functrans.grad(lambda x: 5.0 * clip_grad(x))(2.0)
        Array(1., dtype=float32, weak_type=True)
    """

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = (),
                 nondiff_argnames: Sequence[str] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = _nondiff_argnums(fun, nondiff_argnums, nondiff_argnames)
        self.fwd = None
        self.bwd = None
        self.symbolic_zeros = False
        self.optimize_remat = False
        self._arguments = None

    def __get__(self, instance, owner):
        if instance is None:
            return self
        return functools.partial(self, instance)

    def defvjp(self, fwd: Callable, bwd: Callable, symbolic_zeros: bool = False,
               optimize_remat: bool = False) -> None:
        """Set the forward and backward rules.

        ``symbolic_zeros=True``: ``fwd`` receives each argument leaf as a
        :class:`CustomVJPPrimal` (``value``, ``perturbed``), and ``bwd`` receives a
        :class:`SymbolicZero` for each output whose cotangent is zero.
        ``optimize_remat=True``: under :func:`functrans.checkpoint`, the forward pass runs the
        function itself instead of ``fwd`` when the residuals are recomputed later."""
        if symbolic_zeros and optimize_remat:
            raise NotImplementedError(
                "remat optimization for custom_vjp does not support symbolic zeros")
        self.fwd = fwd
        self.bwd = bwd
        self.symbolic_zeros = symbolic_zeros
        self.optimize_remat = optimize_remat

    def __call__(self, *args, **kwargs):
        name = _fun_name(self.fun)
        if self.fwd is None or self.bwd is None:
            raise AttributeError(f"No VJP defined for custom_vjp function {name} using defvjp.")
        if self._arguments is None:
            self._arguments = _Arguments(self.fun, "custom_vjp")
        args = self._arguments.resolve(args, kwargs)
        nondiff = self.nondiff_argnums
        _check_argnums(nondiff, len(args), "custom_vjp")
        for i in nondiff:
            _check_for_tracers(args[i])
        if _is_eager(args):
            return self.fun(*args)
        diff_args = tuple(args[i] for i in range(len(args)) if i not in nondiff)
        leaves, in_tree = tree_flatten(diff_args)
        leaves = [_as_array(x) for x in leaves]
        call = _VJPCall(self, name, nondiff, [args[i] for i in nondiff], in_tree,
                        [get_aval(x) for x in leaves], len(args))
        fwd = call.flat_fwd_optimized if self.optimize_remat else call.flat_fwd
        outs = custom_vjp_call_p.bind_call(call.flat_fun, (fwd, call.flat_bwd), leaves, {})
        return tree_unflatten(call.out_tree, outs)


def _check_for_tracers(x):
    for leaf in tree_leaves(x):
        if isinstance(leaf, Tracer):
            raise UnexpectedTracerError(
                "Found a traced value passed as an argument to a custom_vjp function in a "
                "position indicated by nondiff_argnums as non-differentiable. Traced values "
                "cannot be non-differentiable arguments of custom_vjp functions: nondiff_argnums "
                "is for arguments that cannot be traced, such as functions. Make array-valued "
                "arguments ordinary arguments (bwd may return None for them).")


class _VJPCall:
    """One call of a custom_vjp function: its flat function, forward and backward rules."""

    def __init__(self, f: custom_vjp, name, nondiff, static, in_tree, in_avals, num_args):
        self.f, self.name, self.nondiff, self.static = f, name, nondiff, static
        self.in_tree, self.in_avals, self.num_args = in_tree, in_avals, num_args
        self.fun_out = None
        self.out_tree = None

    def _call(self, fn, diff_leaves):
        diff = tree_unflatten(self.in_tree, list(diff_leaves))
        return fn(*_merge(self.nondiff, self.static, diff, self.num_args))

    def flat_fun(self, *flat):
        out = self._call(self.f.fun, flat)
        out_leaves, out_tree = tree_flatten(out)
        self.fun_out = (out_tree, [get_aval(o) for o in out_leaves])
        self.out_tree = out_tree
        return out_leaves

    def flat_fwd(self, perturbed, *flat):
        fwd_name = _fun_name(self.f.fwd)
        if self.f.symbolic_zeros:
            flat = [CustomVJPPrimal(x, p) for x, p in zip(flat, perturbed)]
        pair = self._call(self.f.fwd, flat)
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise TypeError(
                f"Custom VJP fwd rule {fwd_name} for function {self.name} must return a pair "
                f"(primal output, residuals) as a tuple or list of length two: the output of "
                f"{self.name} and the values bwd reads. It returned {pair!r}.")
        out, res = pair
        out_leaves, out_tree = tree_flatten(out)
        res_leaves, res_tree = tree_flatten(res)
        _check_primal_out(self, fwd_name, "fwd", out_tree, [get_aval(o) for o in out_leaves])
        self.out_tree = out_tree
        return out_leaves, res_leaves, res_tree, out_tree

    def flat_fwd_optimized(self, perturbed, *flat):
        """``flat_fwd`` as one ``custom_vjp_fwd`` equation, which dead-code elimination turns
        into the function itself when nothing reads the residuals (under checkpoint)."""
        avals = [get_aval(x) for x in flat]
        trees = {}

        def fwd_leaves(*xs):
            out_leaves, res_leaves, res_tree, out_tree = self.flat_fwd(perturbed, *xs)
            trees["res"], trees["out"] = res_tree, out_tree
            return list(res_leaves) + list(out_leaves)

        fwd = trace_to_closed_jaxpr(fwd_leaves, avals)
        fun = trace_to_closed_jaxpr(self.flat_fun, avals)
        # both programs take every constant, then the arguments (each ignores the other's)
        fwd_consts, fun_consts = [get_aval(c) for c in fwd.consts], [get_aval(c) for c in fun.consts]
        num_res = trees["res"].num_leaves
        outs = custom_vjp_fwd_p.bind(
            *fwd.consts, *fun.consts, *flat, fwd_jaxpr=_taking_consts(fwd, [], fun_consts),
            fun_jaxpr=_taking_consts(fun, fwd_consts, []),
            num_consts=len(fwd_consts) + len(fun_consts), num_res=num_res)
        self.out_tree = trees["out"]
        return outs[num_res:], outs[:num_res], trees["res"], trees["out"]

    def flat_bwd(self, res_tree, out_tree, res_leaves, ct_leaves):
        res = tree_unflatten(res_tree, list(res_leaves))
        ct = tree_unflatten(out_tree, [_to_rule_tangent(c, self.f.symbolic_zeros)
                                       for c in ct_leaves])
        cts_in = self.f.bwd(*self.static, res, ct)
        if isinstance(cts_in, list) and len(cts_in) == self.in_tree.num_children:
            cts_in = tuple(cts_in)
        return _check_bwd_output(cts_in, self.in_tree, self.in_avals)


_NO_COTANGENT = object()


def _check_bwd_output(cts_in, in_tree, in_avals) -> list:
    """The flat cotangents of ``bwd``'s output, matched against the arguments: None (for a
    whole argument or any subtree) and SymbolicZero become ``ad.Zero``."""
    flat = []

    def collect(ct, arg):
        n = tree_util.tree_structure(arg).num_leaves
        flat.extend([_NO_COTANGENT if ct is None else ct] * n)

    dummy = tree_unflatten(in_tree, [object()] * in_tree.num_leaves)
    try:
        if not isinstance(cts_in, tuple):
            raise ValueError
        tree_util.tree_map(collect, cts_in, dummy, is_leaf=lambda x: x is None)
    except ValueError:
        raise TypeError(
            "Custom VJP bwd rule must return a tuple with one cotangent per differentiable "
            "argument of the function, each of the argument's pytree structure (None for no "
            f"cotangent), but it returned structure {tree_util.tree_structure(cts_in)} for "
            f"arguments of structure {in_tree}.") from None
    paths = [keystr(p) for p, _ in tree_util.tree_flatten_with_path(dummy)[0]]
    out = []
    for path, aval, ct in zip(paths, in_avals, flat):
        ct_aval = ad.tangent_aval(aval)
        if ct is _NO_COTANGENT or ct_aval.dtype == _dtypes.float0:
            out.append(ad.Zero(ct_aval))
            continue
        given = ct.aval if isinstance(ct, SymbolicZero) else get_aval(ct)
        if given.shape != ct_aval.shape or (given.dtype != ct_aval.dtype
                                            and not _dtypes.is_inexact(aval.dtype)):
            kind = "SymbolicZero" if isinstance(ct, SymbolicZero) else "array"
            raise ValueError(
                f"Custom VJP bwd rule returned, at output{path}, a cotangent {kind} of type "
                f"{given.str_short()} for an argument of type {aval.str_short()}: "
                + ("the shapes do not match." if given.shape != ct_aval.shape else
                   "an integer argument's cotangent must keep its dtype."))
        out.append(_from_rule_tangent(ct))
    return out


# ---- forward mode of custom_vjp: linear in tangents, transposed by bwd -----------------------

custom_lin_p = Primitive("custom_lin", multiple_results=True)

_JVP_OF_CUSTOM_VJP = "can't apply forward-mode autodiff (jvp) to a custom_vjp function."


@custom_lin_p.def_abstract_eval
def _custom_lin_abstract_eval(*avals, num_res, bwd, out_avals, res_tree, out_tree,
                              in_nonzeros, symbolic_zeros):
    return list(out_avals)


def _custom_lin_forward_mode(*args, **params):
    # custom_lin is only transposed (reverse mode); computing it means forward mode
    raise TypeError(_JVP_OF_CUSTOM_VJP)


custom_lin_p.def_impl(_custom_lin_forward_mode)
custom_lin_p.batch = _custom_lin_forward_mode


def _custom_lin_transpose(cts, *args, num_res, bwd, out_avals, res_tree, out_tree, in_nonzeros,
                          symbolic_zeros):
    res = list(args[:num_res])
    if not symbolic_zeros:
        cts = [ad.instantiate_zeros(ct) for ct in cts]
    cts_in = bwd(res_tree, out_tree, res, cts)
    return [None] * num_res + [ct for ct, nz in zip(cts_in, in_nonzeros) if nz]


custom_lin_p.transpose = _custom_lin_transpose


def custom_vjp_jvp(fwd, bwd, primals, tangents, params):
    """JVP of a custom_vjp call: run ``fwd`` on the primals and make the output tangents a
    ``custom_lin`` of the input tangents (so reverse mode transposes it into ``bwd``)."""
    in_nonzeros = tuple(not isinstance(t, ad.Zero) for t in tangents)
    out_leaves, res_leaves, res_tree, out_tree = fwd(in_nonzeros, *primals)
    out_avals = [ad.tangent_aval(get_aval(o)) for o in out_leaves]
    symbolic = _symbolic_zeros_of(bwd)
    tangents_out = custom_lin_p.bind(
        *res_leaves, *[t for t in tangents if not isinstance(t, ad.Zero)],
        num_res=len(res_leaves), bwd=bwd, out_avals=tuple(out_avals), res_tree=res_tree,
        out_tree=out_tree, in_nonzeros=in_nonzeros, symbolic_zeros=symbolic)
    return out_leaves, tangents_out


# ---- optimize_remat: a forward rule that becomes the function when its residuals are dead ----

custom_vjp_fwd_p = Primitive("custom_vjp_fwd", multiple_results=True)


def _taking_consts(closed: ClosedJaxpr, before, after) -> ClosedJaxpr:
    """``closed`` as a program without constants taking ``before`` (unused inputs of these
    types), its constants, ``after`` (unused), then its arguments."""
    j = closed.jaxpr
    pre, post = [Var(a) for a in before], [Var(a) for a in after]
    return ClosedJaxpr(Jaxpr([], pre + j.constvars + post + j.invars, j.outvars, j.eqns), [])


@custom_vjp_fwd_p.def_abstract_eval
def _custom_vjp_fwd_abstract_eval(*avals, fwd_jaxpr, fun_jaxpr, num_consts, num_res):
    return fwd_jaxpr.out_avals


@custom_vjp_fwd_p.def_impl
def _custom_vjp_fwd_impl(*args, fwd_jaxpr, fun_jaxpr, num_consts, num_res):
    return core.eval_jaxpr_numpy(fwd_jaxpr.jaxpr, [], args)


def _custom_vjp_fwd_jvp(primals, tangents, *, fwd_jaxpr, **params):
    # Differentiating the forward rule itself (higher-order AD) differentiates its program.
    return ad.jvp_flat(lambda *a: core.eval_jaxpr(fwd_jaxpr.jaxpr, [], *a), primals, tangents)


def _custom_vjp_fwd_batch(vals, dims, *, fwd_jaxpr, fun_jaxpr, num_consts, num_res):
    size = batching.batch_size_of(vals, dims)
    vals = [batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims)]
    fwd_b, _ = batching.batch_jaxpr(fwd_jaxpr, size, [0] * len(vals), True)
    fun_b, _ = batching.batch_jaxpr(fun_jaxpr, size, [0] * len(vals), True)
    outs = custom_vjp_fwd_p.bind(*vals, fwd_jaxpr=fwd_b, fun_jaxpr=fun_b, num_consts=num_consts,
                                 num_res=num_res)
    return outs, [0] * len(outs)


def _custom_vjp_fwd_dce(eqn, used_outputs):
    """With no residual read, compute the outputs with the function instead of ``fwd``."""
    num_res = eqn.params["num_res"]
    if any(used_outputs[:num_res]):
        return eqn
    return eqn.replace(primitive=jit_p, outvars=eqn.outvars[num_res:],
                       params=dict(jaxpr=eqn.params["fun_jaxpr"], name="custom_vjp_fun",
                                   backend=None, donated_invars=()))


custom_vjp_fwd_p.jvp = _custom_vjp_fwd_jvp
custom_vjp_fwd_p.batch = _custom_vjp_fwd_batch
custom_vjp_fwd_p.dce = _custom_vjp_fwd_dce


# ---- batching ---------------------------------------------------------------------------------


def _batch_call(main, fun, args, size):
    """``fun`` (flat in, flat out) on ``args`` batched at axis 0; outputs at axis 0.

    While the vmap ``main`` that met the custom call runs, and ``args`` come from below it,
    ``fun`` runs under it again, so values of that vmap the function or its rules close over
    are its own values (and its axis name reaches collectives inside). Otherwise (a rule
    kept for later in a staged program, a backward rule run by transposition after the vmap
    ended, a function being staged above it) it runs under a fresh vmap; while the vmap
    that met the call is alive, the fresh one maps the same axis under the same name, and
    values of the first that ``fun`` closes over are read as per-example values."""
    if not main.alive:
        return batching.batch_fun(fun, list(args), [0] * len(args), size, lambda m: [0] * m)
    if any(isinstance(x, Tracer) and x._trace.level >= main.level for x in args):
        axis = main.payload
        return batching.batch_fun(fun, list(args), [0] * len(args), size, lambda m: [0] * m,
                                  axis.name, axis.spmd_name, stands_for=main)
    trace = batching.BatchTrace(main)
    outs = [trace.full_raise(o) for o in fun(*[batching.BatchTracer(trace, x, 0) for x in args])]
    return [batching.matchaxis(size, t.batch_dim, 0, t.val) for t in outs]


def _batched(main, fun, size):
    def batched(*args):
        return _batch_call(main, fun, args, size)
    return batched


def _batch_with_zeros(main, fun, args, zeros_in, size):
    """Batch ``fun`` over ``args`` (all at axis 0) where positions ``zeros_in`` of its inputs
    are symbolic zeros (``ad.Zero`` of the per-example type, not passed in). Zero outputs
    stay symbolic (whether an output is zero does not depend on the example). Returns the
    outputs, ``ad.Zero`` (of the batched type) where zero."""
    out_zero_avals = []

    def flat(*xs):
        it = iter(xs)
        full = [zero if zero is not None else next(it) for zero in zeros_in]
        outs = fun(*full)
        out_zero_avals[:] = [o.aval if isinstance(o, ad.Zero) else None for o in outs]
        return [o for o in outs if not isinstance(o, ad.Zero)]

    nonzero = _batch_call(main, flat, args, size)
    it = iter(nonzero)
    return [ad.Zero(a.update(shape=(size,) + a.shape)) if a is not None else next(it)
            for a in out_zero_avals]


def _per_example_zero(t, size):
    """A batched ``ad.Zero`` as the per-example zero the unbatched rule expects."""
    return ad.Zero(t.aval.update(shape=t.aval.shape[1:]))


def batch_custom_jvp(trace, primitive, fun, jvp, vals, dims, params):
    size = batching.batch_size_of(vals, dims)
    vals = [batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims)]
    fun_b = _batched(trace.main, fun, size)

    def jvp_b(primals, tangents):
        n = len(primals)
        zeros_in = [None] * n + [_per_example_zero(t, size) if isinstance(t, ad.Zero) else None
                                 for t in tangents]

        def flat(*xs):
            p_out, t_out = jvp(xs[:n], xs[n:])
            return list(p_out) + list(t_out)

        args = list(primals) + [t for t in tangents if not isinstance(t, ad.Zero)]
        outs = _batch_with_zeros(trace.main, flat, args, zeros_in, size)
        half = len(outs) // 2
        return outs[:half], outs[half:]

    outs = primitive.bind_call(fun_b, jvp_b, vals, params)
    return [batching.BatchTracer(trace, o, 0) for o in outs]


def batch_custom_vjp(trace, primitive, fun, fwd, bwd, vals, dims, params):
    size = batching.batch_size_of(vals, dims)
    vals = [batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims)]
    fun_b = _batched(trace.main, fun, size)
    trees = {}

    def fwd_b(perturbed, *primals):
        def flat(*xs):
            out_leaves, res_leaves, res_tree, out_tree = fwd(perturbed, *xs)
            trees["res_tree"], trees["out_tree"] = res_tree, out_tree
            trees["num_out"] = len(out_leaves)
            return list(out_leaves) + list(res_leaves)

        outs = _batch_call(trace.main, flat, primals, size)
        k = trees["num_out"]
        return outs[:k], outs[k:], trees["res_tree"], trees["out_tree"]

    def bwd_b(res_tree, out_tree, res_leaves, ct_leaves):
        nres = len(res_leaves)
        zeros_in = [None] * nres + [_per_example_zero(c, size) if isinstance(c, ad.Zero) else None
                                    for c in ct_leaves]

        def flat(*xs):
            return bwd(res_tree, out_tree, list(xs[:nres]), list(xs[nres:]))

        # every output of the batched function is batched at axis 0, so are its cotangents
        args = list(res_leaves) + [c for c in ct_leaves if not isinstance(c, ad.Zero)]
        return _batch_with_zeros(trace.main, flat, args, zeros_in, size)

    bwd_b.symbolic_zeros = _symbolic_zeros_of(bwd)
    outs = primitive.bind_call(fun_b, (fwd_b, bwd_b), vals, params)
    return [batching.BatchTracer(trace, o, 0) for o in outs]


def _symbolic_zeros_of(bwd) -> bool:
    """Whether ``bwd`` (a flat backward rule, perhaps batched) wants symbolic zeros."""
    owner = getattr(bwd, "__self__", None)
    if isinstance(owner, _VJPCall):
        return owner.f.symbolic_zeros
    return getattr(bwd, "symbolic_zeros", False)


custom_vjp_call_p.custom_jvp = custom_vjp_jvp
custom_jvp_call_p.custom_batch = batch_custom_jvp
custom_vjp_call_p.custom_batch = batch_custom_vjp


# =============================================================================================
# custom_gradient
# =============================================================================================


class _GradientResiduals:
    """What ``custom_gradient``'s forward pass hands to its backward pass: the user's
    gradient function staged as a jaxpr, whose constants (the values it closed over) are
    the residual arrays. A pytree node, so the arrays travel as residual leaves and the
    program as static data."""

    def __init__(self, jaxpr, consts, ct_in_tree, ct_out_tree):
        self.jaxpr = jaxpr
        self.consts = list(consts)
        self.ct_in_tree = ct_in_tree     # structure of the output cotangent
        self.ct_out_tree = ct_out_tree   # structure of what the gradient function returns


tree_util.register_pytree_node(
    _GradientResiduals,
    lambda r: (r.consts, (r.jaxpr, r.ct_in_tree, r.ct_out_tree)),
    lambda aux, consts: _GradientResiduals(aux[0], consts, aux[1], aux[2]))


def _positional(fun, args, kwargs) -> tuple:
    if not kwargs:
        return tuple(args)
    bound = inspect.signature(fun).bind(*args, **kwargs)
    bound.apply_defaults()
    if bound.kwargs:
        raise TypeError(f"custom_gradient: keyword-only arguments {sorted(bound.kwargs)} of "
                        f"{getattr(fun, '__name__', fun)!r} are not supported")
    return tuple(bound.args)


def custom_gradient(fun: Callable) -> Callable:
    """Define a function and its gradient together, as TensorFlow's ``tf.custom_gradient``.

    ``fun(*args)`` returns ``(value, vjp_fn)``: ``vjp_fn(cotangent)`` gives the cotangents of
    the arguments (a tuple, one per argument; a single value when there is one argument).
    ``vjp_fn`` may close over values computed in the forward pass, but must not branch in
    Python on them: it is traced once into a program.

        >>> import functrans
        >>> @functrans.custom_gradient
        ... def f(x):
        ...     return x ** 2, lambda g: (g * x,)
        >>> f(3.0), functrans.grad(f)(3.0)
        (9.0, Array(3., dtype=float32, weak_type=True))
    """

    def primal(*args):
        value, _ = fun(*args)
        return value

    def fwd(*args):
        value, vjp_fn = fun(*args)
        value_leaves, ct_in_tree = tree_util.tree_flatten((value,))
        ct_avals = [ad.tangent_aval(get_aval(v)) for v in value_leaves]
        ct_out_tree_cell = []

        def flat_vjp(*ct_leaves):
            (ct,) = tree_util.tree_unflatten(ct_in_tree, list(ct_leaves))
            cts_leaves, cts_tree = tree_util.tree_flatten(vjp_fn(ct))
            ct_out_tree_cell.append(cts_tree)
            return cts_leaves

        jaxpr, consts = trace_to_jaxpr_dynamic(flat_vjp, ct_avals)
        return value, _GradientResiduals(jaxpr, consts, ct_in_tree, ct_out_tree_cell[-1])

    def bwd(res: _GradientResiduals, ct):
        ct_leaves, ct_tree = tree_util.tree_flatten((ct,))
        if ct_tree != res.ct_in_tree:
            raise TypeError(f"custom_gradient: cotangent structure {ct_tree} does not match "
                            f"the output structure {res.ct_in_tree}")
        cts = core.eval_jaxpr(res.jaxpr, res.consts, *ct_leaves)
        cts = tree_util.tree_unflatten(res.ct_out_tree, cts)
        if not isinstance(cts, (tuple, list)):
            cts = (cts,)  # one argument: its cotangent may be returned bare
        return tuple(cts)

    wrapped_primal = custom_vjp(primal)
    wrapped_primal.defvjp(fwd, bwd)

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        return wrapped_primal(*_positional(fun, args, kwargs))

    return wrapper
