"""Automatic differentiation: forward mode as a trace of (primal, tangent) pairs, and
transposition of linear programs for reverse mode.

Reverse mode is not a separate tape: ``vjp`` = ``linearize`` (jvp + partial evaluation,
which splits the computation into the known primal part and a linear jaxpr on tangents)
followed by :func:`backward_pass` over that linear jaxpr.

Tangents may be symbolic zeros (:class:`Zero`) so derivative work is skipped for inputs that
do not depend on the differentiated arguments.
"""
from __future__ import annotations

import weakref
from typing import Callable, Sequence

import numpy as np

from functrans import _dtypes, _tracer_leaks, core, tree_util
from functrans.core import ShapedArray, Tracer, get_aval
from functrans.interpreters import partial_eval as pe
from functrans.interpreters.staging import trace_to_jaxpr_dynamic

# =============================================================================================
# Symbolic zeros and tangent types
# =============================================================================================


def tangent_aval(aval) -> ShapedArray:
    """The type of a tangent: float0 for integer and boolean values, else the value's type."""
    if _dtypes.is_inexact(aval.dtype):
        return aval
    return ShapedArray(aval.shape, _dtypes.float0, weak_type=False)


class Zero:
    """A tangent or cotangent known to be zero, of type ``aval``."""

    __slots__ = ("aval",)

    def __init__(self, aval):
        self.aval = aval

    @staticmethod
    def from_value(x) -> "Zero":
        return Zero(tangent_aval(get_aval(x)))

    def __repr__(self):
        return f"Zero({self.aval.str_short()})"


# Materialized zeros and tangent sums are primitives (broadcast of a constant, add_any),
# declared in the primitives layer above this one, which registers them when it defines them.
_full: Callable | None = None
_add_any: Callable | None = None


def register_tangent_primitives(*, full: Callable | None = None,
                                add_any: Callable | None = None) -> None:
    """Register ``full(shape, fill_value, dtype, weak_type=...)`` (to materialize zero
    tangents) and ``add_any(a, b)`` (to sum tangents and cotangents)."""
    global _full, _add_any
    if full is not None:
        _full = full
    if add_any is not None:
        _add_any = add_any


def zeros_like_aval(aval):
    if aval.dtype == _dtypes.float0:
        return core.wrap_array(np.zeros(aval.shape, dtype=_dtypes.float0), aval)
    return _full(aval.shape, 0, aval.dtype, weak_type=aval.weak_type)


def instantiate_zeros(t):
    return zeros_like_aval(t.aval) if isinstance(t, Zero) else t


def add_tangents(a, b):
    if isinstance(a, Zero):
        return b
    if isinstance(b, Zero):
        return a
    if get_aval(a).dtype == _dtypes.float0:
        return a
    return _add_any(a, b)


def is_float0(x) -> bool:
    return get_aval(x).dtype == _dtypes.float0


# =============================================================================================
# The JVP trace
# =============================================================================================


class JVPTracer(Tracer):
    __slots__ = ("primal", "tangent")

    def __init__(self, trace, primal, tangent):
        self._trace = trace
        self.primal = primal
        self.tangent = tangent

    @property
    def aval(self):
        return get_aval(self.primal)

    def full_lower(self):
        if isinstance(self.tangent, Zero):
            return core.full_lower(self.primal)
        return self

    def to_concrete_value(self):
        primal = self.primal
        if isinstance(primal, Tracer):
            return primal.to_concrete_value()
        return primal

    def _short_repr(self) -> str:
        def show(x):
            return x._short_repr() if isinstance(x, Tracer) else str(x)
        tangent = self.tangent
        # Under grad/vjp/linearize the tangent is an unknown of the linearize trace: JAX
        # calls that tracer a GradTracer and shows only the tangent's type.
        if isinstance(tangent, Tracer) and tangent._trace.main.name == "linearize":
            return (f"GradTracer(primal={show(self.primal)}, "
                    f"typeof(tangent)={tangent.aval.str_short(short_dtypes=True)})")
        return f"JVPTracer(primal={show(self.primal)}, tangent={show(tangent)})"


class JVPTrace(core.Trace):
    def pure(self, val):
        return JVPTracer(self, val, Zero.from_value(val))

    lift = pure

    def process_primitive(self, primitive, tracers, params):
        primals = [t.primal for t in tracers]
        # an integer input's float0 tangent is a zero however it was given: rules never see one
        tangents = [Zero(get_aval(t)) if not isinstance(t, Zero) and is_float0(t) else t
                    for t in (t.tangent for t in tracers)]
        if all(isinstance(t, Zero) for t in tangents):
            out = primitive.bind(*primals, **params)
            if primitive.multiple_results:
                return [JVPTracer(self, o, Zero.from_value(o)) for o in out]
            return JVPTracer(self, out, Zero.from_value(out))
        if primitive.jvp is None:
            raise NotImplementedError(f"differentiation of primitive '{primitive.name}' "
                                      "(forward mode) is not supported")
        primal_out, tangent_out = primitive.jvp(primals, tangents, **params)
        if primitive.multiple_results:
            return [JVPTracer(self, p, t) for p, t in zip(primal_out, tangent_out)]
        return JVPTracer(self, primal_out, tangent_out)

    def process_custom_jvp_call(self, primitive, fun, jvp, tracers, params):
        primals = [t.primal for t in tracers]
        tangents = [t.tangent for t in tracers]
        if all(isinstance(t, Zero) for t in tangents):
            outs = primitive.bind_call(fun, jvp, primals, params)
            return [JVPTracer(self, o, Zero.from_value(o)) for o in outs]
        primals_out, tangents_out = jvp(primals, tangents)
        return [JVPTracer(self, p, t) for p, t in zip(primals_out, tangents_out)]

    def process_custom_vjp_call(self, primitive, fun, fwd, bwd, tracers, params):
        primals = [t.primal for t in tracers]
        tangents = [t.tangent for t in tracers]
        if all(isinstance(t, Zero) for t in tangents):
            outs = primitive.bind_call(fun, (fwd, bwd), primals, params)
            return [JVPTracer(self, o, Zero.from_value(o)) for o in outs]
        primals_out, tangents_out = primitive.custom_jvp(fwd, bwd, primals, tangents, params)
        return [JVPTracer(self, p, t) for p, t in zip(primals_out, tangents_out)]


def jvp_flat(fun: Callable, primals: Sequence, tangents: Sequence):
    """Forward-mode derivative of ``fun`` (flat list in, flat list out)."""
    with core.new_main(JVPTrace, name="jvp") as main:
        trace = JVPTrace(main)
        tracers_in = [JVPTracer(trace, p, t) for p, t in zip(primals, tangents)]
        outs = fun(*tracers_in)
        tracers_out = [trace.full_raise(o) for o in outs]
        primals_out = [t.primal for t in tracers_out]
        tangents_out = [t.tangent for t in tracers_out]
    if _tracer_leaks.enabled():
        main = weakref.ref(main)
        del trace, tracers_in, outs, tracers_out  # only leaks may keep tracers now
        _tracer_leaks.check(main)
    return primals_out, tangents_out


# =============================================================================================
# Rule helpers (used by primitive modules beside each primitive)
# =============================================================================================


def defjvp(primitive, *jvp_fns):
    """JVP from per-argument rules ``fn(tangent, *primals, **params)`` summed together;
    ``None`` marks an argument the output does not depend on differentiably."""

    def rule(primals, tangents, **params):
        primal_out = primitive.bind(*primals, **params)
        tangent_out = Zero.from_value(primal_out)
        for fn, t in zip(jvp_fns, tangents):
            if fn is None or isinstance(t, Zero):
                continue
            tangent_out = add_tangents(tangent_out, fn(t, *primals, **params))
        return primal_out, tangent_out

    primitive.jvp = rule


def defjvp2(primitive, *jvp_fns):
    """As :func:`defjvp`, but each rule also receives the primal output:
    ``fn(tangent, ans, *primals, **params)``."""

    def rule(primals, tangents, **params):
        ans = primitive.bind(*primals, **params)
        tangent_out = Zero.from_value(ans)
        for fn, t in zip(jvp_fns, tangents):
            if fn is None or isinstance(t, Zero):
                continue
            tangent_out = add_tangents(tangent_out, fn(t, ans, *primals, **params))
        return ans, tangent_out

    primitive.jvp = rule


def defjvp_zero(primitive):
    """The output is piecewise constant (or integer): its tangent is always zero."""

    def rule(primals, tangents, **params):
        out = primitive.bind(*primals, **params)
        if primitive.multiple_results:
            return out, [Zero.from_value(o) for o in out]
        return out, Zero.from_value(out)

    primitive.jvp = rule


def linear_jvp(primitive):
    """JVP of a primitive linear in all its arguments: apply it to the tangents."""

    def rule(primals, tangents, **params):
        primal_out = primitive.bind(*primals, **params)
        if all(isinstance(t, Zero) for t in tangents):
            return primal_out, Zero.from_value(primal_out)
        tangents = [instantiate_zeros(t) for t in tangents]
        return primal_out, primitive.bind(*tangents, **params)

    return rule


def deflinear(primitive, transpose_rule):
    """Declare a primitive linear in every argument; ``transpose_rule(ct, **params)`` returns
    the cotangents of its arguments."""
    primitive.jvp = linear_jvp(primitive)

    def transpose(ct, *args, **params):
        if isinstance(ct, Zero):
            return [Zero(a.aval) if is_undefined_primal(a) else None for a in args]
        return transpose_rule(ct, **params)

    primitive.transpose = transpose


def deflinear2(primitive, transpose_rule):
    """As :func:`deflinear`, but the transpose rule also receives the (undefined) operands:
    ``transpose_rule(ct, *args, **params)``."""
    primitive.jvp = linear_jvp(primitive)

    def transpose(ct, *args, **params):
        if isinstance(ct, Zero):
            return [Zero(a.aval) if is_undefined_primal(a) else None for a in args]
        return transpose_rule(ct, *args, **params)

    primitive.transpose = transpose


def defbilinear(primitive, lhs_transpose, rhs_transpose):
    """Declare a binary primitive linear in each operand when the other is held fixed (a
    product: ``mul``, ``dot_general``, ``conv_general_dilated``). Its tangent is
    ``f(dx, y) + f(x, dy)``, and it transposes in whichever operand is the linear input:
    ``lhs_transpose(ct, x, y, **params)`` is the cotangent of ``x`` (an
    :class:`UndefinedPrimal`) for a known ``y``, ``rhs_transpose(ct, x, y, **params)`` that
    of ``y`` for a known ``x``."""
    defjvp(primitive, lambda g, x, y, **params: primitive.bind(g, y, **params),
           lambda g, x, y, **params: primitive.bind(x, g, **params))

    def transpose(ct, x, y, **params):
        x_linear, y_linear = is_undefined_primal(x), is_undefined_primal(y)
        if x_linear and y_linear:
            raise NotImplementedError(f"{primitive.name} is bilinear: transposing it in both "
                                      "operands at once is not supported")
        if isinstance(ct, Zero):
            return [Zero(x.aval) if x_linear else None, Zero(y.aval) if y_linear else None]
        if x_linear:
            return [lhs_transpose(ct, x, y, **params), None]
        return [None, rhs_transpose(ct, x, y, **params)]

    primitive.transpose = transpose


# =============================================================================================
# Transposition (reverse mode)
# =============================================================================================


class UndefinedPrimal:
    """Stands for a linear input during transposition: only its type is known."""

    __slots__ = ("aval",)

    def __init__(self, aval):
        self.aval = aval

    def __repr__(self):
        return f"UndefinedPrimal({self.aval.str_short()})"


def is_undefined_primal(x) -> bool:
    return isinstance(x, UndefinedPrimal)


def backward_pass(jaxpr: core.Jaxpr, consts, primals_in, cotangents_out):
    """Transpose ``jaxpr``, linear in the inputs given as :class:`UndefinedPrimal`.
    Returns one cotangent per input (``Zero`` where none flows; None for defined inputs)."""
    primal_env: dict[int, object] = {}
    ct_env: dict[int, object] = {}

    def read_primal(v):
        if isinstance(v, core.Literal):
            return v.val
        return primal_env.get(id(v), UndefinedPrimal(v.aval))

    def write_cotangent(v, ct):
        if ct is None or isinstance(v, (core.Literal, core.DropVar)):
            return
        # a float0 cotangent (of an integer or boolean value) carries nothing: it is a Zero,
        # and no transpose rule should see one (dot_general's would multiply it)
        if isinstance(ct, Zero) or is_float0(ct):
            return
        prev = ct_env.get(id(v))
        ct_env[id(v)] = ct if prev is None else add_tangents(prev, ct)

    def read_cotangent(v):
        ct = ct_env.pop(id(v), None)
        return Zero(tangent_aval(v.aval)) if ct is None else ct

    for v, c in zip(jaxpr.constvars, consts):
        primal_env[id(v)] = c
    for v, x in zip(jaxpr.invars, primals_in):
        if not is_undefined_primal(x):
            primal_env[id(v)] = x

    # Every equation the backward pass stages keeps the user's line of the equation it
    # comes from (a NaN in a gradient is blamed on the line that computed the value, not on
    # the line that called grad).
    state = core._state
    outer_source_info = state.source_info

    # Equations that only read known values (residual bookkeeping) run forward first.
    linear_eqns = []
    try:
        for eqn in jaxpr.eqns:
            if any(is_undefined_primal(read_primal(v)) for v in eqn.invars):
                linear_eqns.append(eqn)
                continue
            state.source_info = eqn.source_info or outer_source_info
            outs = eqn.primitive.bind(*[read_primal(v) for v in eqn.invars], **eqn.params)
            outs = outs if eqn.primitive.multiple_results else [outs]
            for v, o in zip(eqn.outvars, outs):
                primal_env[id(v)] = o

        for v, ct in zip(jaxpr.outvars, cotangents_out):
            write_cotangent(v, ct)

        for eqn in reversed(linear_eqns):
            cts_in = [read_cotangent(v) for v in eqn.outvars]
            if all(isinstance(ct, Zero) for ct in cts_in):
                continue
            invals = [read_primal(v) for v in eqn.invars]
            rule = eqn.primitive.transpose
            if rule is None:
                raise NotImplementedError(
                    f"reverse-mode differentiation of primitive '{eqn.primitive.name}' is "
                    "not supported (it has no transpose rule; it is not linear in its inputs)")
            ct_arg = cts_in if eqn.primitive.multiple_results else cts_in[0]
            state.source_info = eqn.source_info or outer_source_info
            cts_out = rule(ct_arg, *invals, **eqn.params)
            for v, ct in zip(eqn.invars, cts_out):
                write_cotangent(v, ct)
    finally:
        state.source_info = outer_source_info

    return [read_cotangent(v) if is_undefined_primal(x) else None
            for v, x in zip(jaxpr.invars, primals_in)]


# =============================================================================================
# linearize and vjp (flat)
# =============================================================================================


def linearize_flat(fun: Callable, primals: Sequence):
    """Returns ``(primals_out, linear_jaxpr, residuals, out_tangent_avals)``: the linear
    jaxpr maps input tangents to output tangents, closed over ``residuals``."""
    primals = list(primals)
    n = len(primals)
    in_tangent_avals = [tangent_aval(get_aval(p)) for p in primals]

    def fun_jvp(*args):
        primals_out, tangents_out = jvp_flat(fun, args[:n], args[n:])
        tangents_out = [instantiate_zeros(t) for t in tangents_out]
        return list(primals_out) + tangents_out

    pvals_in = [pe.PartialVal.known(p) for p in primals] + \
               [pe.PartialVal.unknown(a) for a in in_tangent_avals]
    jaxpr, pvals_out, residuals = pe.trace_to_jaxpr_partial(fun_jvp, pvals_in, instantiate_from=None)
    num_out = len(pvals_out) // 2
    primal_pvals, tangent_pvals = pvals_out[:num_out], pvals_out[num_out:]
    primals_out = []
    for pv in primal_pvals:
        if not pv.is_known():
            raise AssertionError("a primal output depends on tangents")
        primals_out.append(pv.get_known())
    return primals_out, jaxpr, residuals, tangent_pvals


def vjp_flat(fun: Callable, primals: Sequence):
    """Returns ``(primals_out, vjp_fun)``, where ``vjp_fun(cotangents_out) -> cotangents_in``."""
    primals_out, jaxpr, residuals, tangent_pvals = linearize_flat(fun, primals)
    in_avals = [tangent_aval(get_aval(p)) for p in primals]

    def vjp_fun(cotangents_out):
        undefined = [UndefinedPrimal(a) for a in in_avals]
        cts_in = backward_pass(jaxpr, residuals, undefined, list(cotangents_out))
        return cts_in

    return primals_out, vjp_fun, [pv.aval for pv in tangent_pvals]


def _flat_with_out_tree(fun: Callable, in_tree, out_tree_cell: list) -> Callable:
    def flat(*leaves):
        out = fun(*tree_util.tree_unflatten(in_tree, leaves))
        out_leaves, out_tree = tree_util.tree_flatten(out)
        out_tree_cell.append(out_tree)
        return out_leaves
    return flat


def linearize_tree(fun: Callable, *primals):
    """``(fun(*primals), f_jvp)`` for pytree arguments and results, ``f_jvp(*tangents)``
    evaluating the linear map without re-running ``fun``: ``linearize`` for the rules below
    the public API that differentiate a user's function (``custom_root``'s tangent solve)."""
    leaves, in_tree = tree_util.tree_flatten(primals)
    out_tree_cell: list = []
    primals_out, jaxpr, residuals, _ = linearize_flat(
        _flat_with_out_tree(fun, in_tree, out_tree_cell), leaves)
    out_tree = out_tree_cell[0]

    def f_jvp(*tangents):
        tangent_leaves, tangent_tree = tree_util.tree_flatten(tangents)
        if tangent_tree != in_tree:
            raise ValueError(f"linearized function: tangent structure {tangent_tree} does not "
                             f"match the primals' {in_tree}")
        outs = core.eval_jaxpr(jaxpr, residuals, *tangent_leaves)
        return tree_util.tree_unflatten(out_tree, outs)

    return tree_util.tree_unflatten(out_tree, primals_out), f_jvp


def vjp_tree(fun: Callable, *primals):
    """``(fun(*primals), pullback)`` for pytree arguments and results, ``pullback(ct)``
    returning one cotangent per primal argument (zeros where none flows): ``vjp`` for the
    rules below the public API (the transpose of ``custom_linear_solve``'s matvec)."""
    leaves, in_tree = tree_util.tree_flatten(primals)
    out_tree_cell: list = []
    primals_out, pullback_flat, out_tangent_avals = vjp_flat(
        _flat_with_out_tree(fun, in_tree, out_tree_cell), leaves)
    out_tree = out_tree_cell[0]
    in_avals = [get_aval(p) for p in leaves]

    def pullback(cotangent):
        ct_leaves, ct_tree = tree_util.tree_flatten(cotangent)
        if ct_tree != out_tree:
            raise ValueError(f"vjp: the cotangent has structure {ct_tree} but the function's "
                             f"output has structure {out_tree}")
        cts = [Zero(aval) if aval.dtype == _dtypes.float0 else ct
               for ct, aval in zip(ct_leaves, out_tangent_avals)]
        cts_in = [zeros_like_aval(tangent_aval(aval)) if isinstance(ct, Zero) else ct
                  for ct, aval in zip(pullback_flat(cts), in_avals)]
        return tuple(tree_util.tree_unflatten(in_tree, cts_in))

    return tree_util.tree_unflatten(out_tree, primals_out), pullback


# =============================================================================================
# Jaxpr-level helpers for higher-order primitives (jit, control flow)
# =============================================================================================


def jvp_jaxpr(closed: core.ClosedJaxpr, nonzeros: Sequence[bool], instantiate: Sequence[bool] | bool):
    """A closed jaxpr computing ``(primals_out..., tangents_out...)`` from
    ``(primals..., tangents of the nonzero inputs...)``. Returns it and which output tangents
    are nonzero (all of them where ``instantiate`` says so)."""
    in_avals = closed.in_avals
    num_out = len(closed.out_avals)
    if isinstance(instantiate, bool):
        instantiate = [instantiate] * num_out
    tangent_avals = [tangent_aval(a) for a, nz in zip(in_avals, nonzeros) if nz]
    n = len(in_avals)
    out_nonzeros_cell: list = []

    def fun(*args):
        primals, nz_tangents = args[:n], iter(args[n:])
        tangents = [next(nz_tangents) if nz else Zero(tangent_aval(a))
                    for a, nz in zip(in_avals, nonzeros)]
        outs, touts = jvp_flat(lambda *xs: core.eval_jaxpr(closed.jaxpr, closed.consts, *xs),
                               primals, tangents)
        out_nz = [not isinstance(t, Zero) or inst for t, inst in zip(touts, instantiate)]
        out_nonzeros_cell[:] = out_nz
        return list(outs) + [instantiate_zeros(t) for t, nz in zip(touts, out_nz) if nz]

    jaxpr, consts = trace_to_jaxpr_dynamic(fun, list(in_avals) + tangent_avals)
    return core.ClosedJaxpr(jaxpr, consts), out_nonzeros_cell


# =============================================================================================
# JAX's rule tables, as views of the rules each primitive holds
# =============================================================================================


class _RuleTable:
    """``table[primitive] = rule`` sets ``primitive.<field>`` (rules live on the primitive;
    this is JAX's spelling of the same registration, as in ``ad.primitive_jvps``)."""

    def __init__(self, field: str):
        self._field = field

    def __setitem__(self, primitive, rule):
        setattr(primitive, self._field, rule)

    def __getitem__(self, primitive):
        rule = getattr(primitive, self._field, None)
        if rule is None:
            raise KeyError(primitive)
        return rule

    def __delitem__(self, primitive):
        setattr(primitive, self._field, None)

    def __contains__(self, primitive):
        return getattr(primitive, self._field, None) is not None

    def get(self, primitive, default=None):
        rule = getattr(primitive, self._field, None)
        return default if rule is None else rule


primitive_jvps = _RuleTable("jvp")
primitive_transposes = _RuleTable("transpose")
Zero.from_primal_value = Zero.from_value
