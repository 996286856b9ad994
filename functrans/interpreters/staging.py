"""Staging: trace a Python function into a :class:`~functrans.core.Jaxpr`.

The staging trace is *dynamic*: while it is active, every ``bind`` (even on plain constants)
is recorded, so the whole function becomes one program. Values from outside the function
(closed-over arrays, tracers of enclosing transforms) become constvars; Python and NumPy
scalars become inline literals.
"""
from __future__ import annotations

import weakref
from typing import Callable, Sequence

import numpy as np

from functrans import _dtypes, _tracer_leaks, core, tree_util
from functrans.core import (ClosedJaxpr, Eqn, Jaxpr, Literal, Tracer, Var,
                            get_aval)
from functrans._config import config


class JaxprBuilder:
    """Accumulates the equations, constants and variables of the program being staged."""

    def __init__(self):
        self.eqns: list[Eqn] = []
        self.tracer_to_var: dict[int, Var | Literal] = {}
        self.const_tracers: dict[int, "DynamicJaxprTracer"] = {}
        self.constvar_values: dict[int, object] = {}
        self.constvars: list[Var] = []
        self.tracers: list[DynamicJaxprTracer] = []  # keeps ids stable while staging

    def new_tracer(self, trace, aval) -> "DynamicJaxprTracer":
        tracer = DynamicJaxprTracer(trace, aval)
        self.tracers.append(tracer)
        return tracer

    def add_var(self, tracer, suffix: str = "") -> Var:
        var = self.tracer_to_var[id(tracer)] = Var(tracer.aval, suffix)
        return var

    def getvar(self, tracer) -> Var | Literal:
        var = self.tracer_to_var.get(id(tracer))
        if var is None:
            raise core.UnexpectedTracerError(
                "a traced value from another staged function was used here; values traced "
                "inside jit/cond/scan bodies cannot escape them. Return them as outputs instead.")
        return var

    def add_const(self, trace, value) -> "DynamicJaxprTracer":
        key = id(value)
        tracer = self.const_tracers.get(key)
        if tracer is not None:
            return tracer
        aval = get_aval(value)
        tracer = self.new_tracer(trace, aval)
        if _is_literal_candidate(value):
            self.tracer_to_var[id(tracer)] = Literal(_literal_value(value, aval), aval)
        else:
            var = self.add_var(tracer)
            self.constvars.append(var)
            self.constvar_values[id(var)] = core.constant_value(value, aval)
        self.const_tracers[key] = tracer
        # keep the constant alive so its id is not reused while staging
        self.tracers.append(value)
        return tracer

    def build(self, in_tracers, out_tracers) -> tuple[Jaxpr, list]:
        invars = [self.getvar(t) for t in in_tracers]
        outvars = [self.getvar(t) for t in out_tracers]
        used = _used_constvars(self.eqns, outvars)
        constvars = [v for v in self.constvars if id(v) in used]
        consts = [self.constvar_values[id(v)] for v in constvars]
        return Jaxpr(constvars, invars, outvars, self.eqns), consts


def _used_constvars(eqns, outvars) -> set[int]:
    used = {id(v) for v in outvars}
    for eqn in eqns:
        used.update(id(v) for v in eqn.invars)
    return used


def _is_literal_candidate(value) -> bool:
    if isinstance(value, Tracer):
        return False
    if _dtypes.is_python_scalar(value) or isinstance(value, np.generic):
        return True
    return getattr(value, "ndim", None) == 0 and hasattr(value, "__array__")


def _literal_value(value, aval):
    return np.asarray(core.to_numpy(value, aval), dtype=aval.dtype)[()]


class DynamicJaxprTracer(Tracer):
    __slots__ = ("_aval",)

    def __init__(self, trace, aval):
        self._trace = trace
        self._aval = aval

    @property
    def aval(self):
        return self._aval

    def _short_repr(self) -> str:
        return f"JitTracer({self._aval.str_short()})"


class DynamicJaxprTrace(core.Trace):
    """Records every primitive into the builder in ``main.payload``."""

    @property
    def builder(self) -> JaxprBuilder:
        return self.main.payload

    def pure(self, val):
        return self.builder.add_const(self, val)

    lift = pure

    def new_arg(self, aval, suffix: str = "") -> DynamicJaxprTracer:
        tracer = self.builder.new_tracer(self, aval)
        self.builder.add_var(tracer, suffix)
        return tracer

    def process_primitive(self, primitive, tracers, params):
        avals = [t.aval for t in tracers]
        out_avals = core.abstract_eval_checked(primitive, avals, params)
        builder = self.builder
        out_tracers = [builder.new_tracer(self, a) for a in out_avals]
        invars = [builder.getvar(t) for t in tracers]
        outvars = [builder.add_var(t) for t in out_tracers]
        builder.eqns.append(Eqn(primitive, invars, outvars, params, core.current_source_info()))
        return out_tracers if primitive.multiple_results else out_tracers[0]

    def process_custom_jvp_call(self, primitive, fun, jvp, tracers, params):
        return _stage_custom_call(self, primitive, fun, tracers, params, jvp=jvp)

    def process_custom_vjp_call(self, primitive, fun, fwd, bwd, tracers, params):
        return _stage_custom_call(self, primitive, fun, tracers, params, fwd=fwd, bwd=bwd)


def _stage_custom_call(trace, primitive, fun, tracers, params, **rules):
    """Stage a custom_jvp/custom_vjp call as one equation holding its primal program, so the
    rule is still found when the staged program is differentiated later."""
    closed = trace_to_closed_jaxpr(fun, [t.aval for t in tracers])
    call_jaxpr, consts = closed_over_consts_as_args(closed)
    const_tracers = [trace.full_raise(c) for c in consts]
    params = dict(params, call_jaxpr=call_jaxpr, num_consts=len(consts), **rules)
    return trace.process_primitive(primitive, const_tracers + list(tracers), params)


def trace_to_jaxpr_dynamic(fun: Callable, in_avals: Sequence, arg_suffixes=None) -> tuple[Jaxpr, list]:
    """Stage ``fun`` (flat arguments in, flat list of outputs out) at the given input types.
    Returns the jaxpr and the values of its constvars."""
    builder = JaxprBuilder()
    with core.new_main(DynamicJaxprTrace, builder, dynamic=True, name="jit") as main:
        trace = DynamicJaxprTrace(main)
        in_tracers = [trace.new_arg(a) for a in in_avals]
        outs = fun(*in_tracers)
        out_tracers = [trace.full_raise(o) for o in outs]
        jaxpr, consts = builder.build(in_tracers, out_tracers)
    if _tracer_leaks.enabled():
        main = weakref.ref(main)
        del trace, in_tracers, outs, out_tracers, builder  # only leaks may keep tracers now
        _tracer_leaks.check(main)
    if config.check_jaxprs:
        core.check_jaxpr(jaxpr)
    return jaxpr, consts


def flat_array_outputs(what: str, out) -> tuple[list, tree_util.PyTreeDef]:
    """The leaves and the tree of ``out``, what a function being staged returned, each leaf
    checked to be an array (a tracer, or a value with an array type); ``what`` names the
    function in the error."""
    leaves, out_tree = tree_util.tree_flatten(out)
    for leaf in leaves:
        if not (isinstance(leaf, Tracer) or core.valid_jaxtype(leaf)):
            raise TypeError(f"{what} returned a value of type {type(leaf).__name__}, "
                            f"which is not an array: {leaf!r}")
    return leaves, out_tree


def trace_to_closed_jaxpr(fun: Callable, in_avals: Sequence) -> ClosedJaxpr:
    jaxpr, consts = trace_to_jaxpr_dynamic(fun, in_avals)
    return ClosedJaxpr(jaxpr, consts)


def convert_constvars_jaxpr(jaxpr: Jaxpr) -> Jaxpr:
    """Turn constvars into leading invars."""
    return Jaxpr([], jaxpr.constvars + jaxpr.invars, jaxpr.outvars, jaxpr.eqns)


def closed_over_consts_as_args(closed: ClosedJaxpr) -> tuple[ClosedJaxpr, list]:
    """Split a closed jaxpr into one with no consts (they become leading inputs) and the consts."""
    return ClosedJaxpr(convert_constvars_jaxpr(closed.jaxpr), []), list(closed.consts)

