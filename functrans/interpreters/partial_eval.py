"""Partial evaluation: run what is known now, stage what is not.

Inputs are :class:`PartialVal`s, either known values or unknown abstract values. Equations
whose inputs are all known are computed right away (by binding one level down, so they are
evaluated eagerly or staged by an enclosing jit); the rest are recorded into a jaxpr whose
constants (the *residuals*) are the known values it reads. ``linearize`` uses this on the
jvp of a function: primals are known, tangents unknown, so the recorded jaxpr is the
linear tangent map.

Also here: :func:`partial_eval_jaxpr` (the same split over an existing jaxpr, used by rules
of higher-order primitives) and :func:`dce_jaxpr`.
"""
from __future__ import annotations

import weakref
from typing import Callable, NamedTuple, Sequence

from functrans import _tracer_leaks, core
from functrans.core import ClosedJaxpr, Eqn, Jaxpr, Literal, Tracer, Var, get_aval
from functrans.interpreters.staging import trace_to_jaxpr_dynamic


class PartialVal(NamedTuple):
    aval: object
    const: object  # the known value, or None when unknown

    @classmethod
    def known(cls, value) -> "PartialVal":
        return PartialVal(get_aval(value), value)

    @classmethod
    def unknown(cls, aval) -> "PartialVal":
        return PartialVal(aval, None)

    def is_known(self) -> bool:
        return self.const is not None

    def get_known(self):
        return self.const


# Recipes say how an unknown tracer's value is produced in the staged jaxpr.
class LambdaBinding(NamedTuple):
    pass


class ConstRecipe(NamedTuple):
    val: object


class EqnRecipe(NamedTuple):
    primitive: object
    tracers_in: list
    params: dict
    avals_out: list
    tracer_refs_out: list
    source_info: object


class PartialEvalTracer(Tracer):
    __slots__ = ("pval", "recipe")

    def __init__(self, trace, pval: PartialVal, recipe):
        self._trace = trace
        self.pval = pval
        self.recipe = recipe

    @property
    def aval(self):
        return self.pval.aval

    def full_lower(self):
        if self.pval.is_known():
            return core.full_lower(self.pval.const)
        return self

    def to_concrete_value(self):
        if self.pval.is_known():
            const = self.pval.const
            return const.to_concrete_value() if isinstance(const, Tracer) else const
        return None

    def _short_repr(self) -> str:
        # a known value prints as itself: users see the primal inside grad, as in JAX
        if self.pval.is_known():
            const = self.pval.const
            return const._short_repr() if isinstance(const, Tracer) else str(const)
        return super()._short_repr()


class PartialEvalTrace(core.Trace):
    def new_arg(self, pval: PartialVal) -> PartialEvalTracer:
        if pval.is_known():
            return PartialEvalTracer(self, pval, None)
        return PartialEvalTracer(self, pval, LambdaBinding())

    def pure(self, val):
        return PartialEvalTracer(self, PartialVal.known(val), None)

    lift = pure

    def instantiate_const(self, tracer: PartialEvalTracer) -> PartialEvalTracer:
        if tracer.pval.is_known():
            return PartialEvalTracer(self, PartialVal.unknown(get_aval(tracer.pval.const)),
                                     ConstRecipe(tracer.pval.const))
        return tracer

    def process_primitive(self, primitive, tracers, params):
        if all(t.pval.is_known() for t in tracers):
            return primitive.bind(*[t.pval.const for t in tracers], **params)
        if primitive.partial_eval is not None:
            return primitive.partial_eval(self, tracers, **params)
        return self.default_process_primitive(primitive, tracers, params)

    def default_process_primitive(self, primitive, tracers, params):
        tracers_in = [self.instantiate_const(t) for t in tracers]
        avals_in = [t.aval for t in tracers_in]
        avals_out = core.abstract_eval_checked(primitive, avals_in, params)
        tracers_out = [PartialEvalTracer(self, PartialVal.unknown(a), None) for a in avals_out]
        recipe = EqnRecipe(primitive, tracers_in, params, avals_out, tracers_out,
                           core.current_source_info())
        for t in tracers_out:
            t.recipe = recipe
        return tracers_out if primitive.multiple_results else tracers_out[0]

    def process_custom_jvp_call(self, primitive, fun, jvp, tracers, params):
        # Known inputs: the call goes on to the transforms below with its rule, so an outer
        # grad differentiates it by the rule (f called inside its own jvp rule, under
        # grad(grad(f))). Unknown inputs: the jvp trace above already applied the rule;
        # the primal function is evaluated under this trace.
        if all(t.pval.is_known() for t in tracers):
            return primitive.bind_call(fun, jvp, [t.pval.const for t in tracers], params)
        return fun(*tracers)

    def process_custom_vjp_call(self, primitive, fun, fwd, bwd, tracers, params):
        if all(t.pval.is_known() for t in tracers):
            return primitive.bind_call(fun, (fwd, bwd), [t.pval.const for t in tracers],
                                       params)
        return fun(*tracers)


def trace_to_jaxpr_partial(fun: Callable, pvals_in: Sequence[PartialVal],
                           instantiate_from: int | None = None):
    """Partially evaluate ``fun`` (flat in, flat out).

    Returns ``(jaxpr, pvals_out, residuals)``: ``jaxpr`` takes the unknown inputs (in order)
    and returns the unknown outputs (in order), closed over ``residuals``. Outputs at
    positions >= ``instantiate_from`` are always made unknown (staged), even if known;
    by default the second half of the outputs is instantiated.
    """
    with core.new_main(PartialEvalTrace, name="linearize") as main:
        trace = PartialEvalTrace(main)
        tracers_in = [trace.new_arg(pv) for pv in pvals_in]
        outs = fun(*tracers_in)
        tracers_out = [trace.full_raise(o) for o in outs]
        start = len(tracers_out) // 2 if instantiate_from is None else instantiate_from
        tracers_out = [trace.instantiate_const(t) if i >= start else t
                       for i, t in enumerate(tracers_out)]
        pvals_out = [t.pval for t in tracers_out]
        unknown_in = [t for t in tracers_in if not t.pval.is_known()]
        unknown_out = [t for t in tracers_out if not t.pval.is_known()]
        jaxpr, residuals = tracers_to_jaxpr(unknown_in, unknown_out)
    if _tracer_leaks.enabled():
        main = weakref.ref(main)
        # only leaks may keep tracers now
        del trace, tracers_in, outs, tracers_out, unknown_in, unknown_out
        _tracer_leaks.check(main)
    return jaxpr, pvals_out, residuals


def _toposort(out_tracers) -> list:
    """Tracers reachable from ``out_tracers``, each after the tracers it reads."""
    order: list = []
    seen: set[int] = set()
    stack = [(t, False) for t in reversed(out_tracers)]
    while stack:
        t, expanded = stack.pop()
        if expanded:
            order.append(t)
            continue
        if id(t) in seen:
            continue
        seen.add(id(t))
        stack.append((t, True))
        recipe = t.recipe
        if isinstance(recipe, EqnRecipe):
            for p in reversed(recipe.tracers_in):
                if id(p) not in seen:
                    stack.append((p, False))
    return order


def tracers_to_jaxpr(tracers_in, tracers_out) -> tuple[Jaxpr, list]:
    tracer_to_var: dict[int, Var] = {}
    constvar_to_val: dict[int, object] = {}
    constvars: list[Var] = []
    const_ids: dict[int, Var] = {}
    processed_eqns: set[int] = set()
    eqns: list[Eqn] = []
    invars = []
    for t in tracers_in:
        v = tracer_to_var[id(t)] = Var(t.aval)
        invars.append(v)
    for t in _toposort(tracers_out):
        recipe = t.recipe
        if isinstance(recipe, LambdaBinding):
            if id(t) not in tracer_to_var:
                raise AssertionError("an input of the partial computation was not declared")
        elif isinstance(recipe, ConstRecipe):
            value = recipe.val
            var = const_ids.get(id(value))
            if var is None:
                var = const_ids[id(value)] = Var(get_aval(value))
                constvars.append(var)
                constvar_to_val[id(var)] = core.constant_value(value, var.aval)
            tracer_to_var[id(t)] = var
        elif isinstance(recipe, EqnRecipe):
            if id(recipe) in processed_eqns:
                continue
            processed_eqns.add(id(recipe))
            outvars = [Var(a) for a in recipe.avals_out]
            for ref, v in zip(recipe.tracer_refs_out, outvars):
                tracer_to_var[id(ref)] = v
            eqns.append(Eqn(recipe.primitive, [tracer_to_var[id(x)] for x in recipe.tracers_in],
                            outvars, recipe.params, recipe.source_info))
        else:
            raise AssertionError(f"tracer without a recipe: {t!r}")
    outvars = [tracer_to_var[id(t)] for t in tracers_out]
    consts = [constvar_to_val[id(v)] for v in constvars]
    return Jaxpr(constvars, invars, outvars, eqns), consts


# =============================================================================================
# Jaxpr-level passes used by rules of higher-order primitives
# =============================================================================================


def dce_jaxpr(jaxpr: Jaxpr, used_outputs: Sequence[bool], instantiate=False) -> tuple[Jaxpr, list[bool]]:
    """Drop equations whose results are unused. Returns the pruned jaxpr (only the used
    outputs) and which inputs it still reads."""
    outvars = [v for v, used in zip(jaxpr.outvars, used_outputs) if used]
    live = {id(v) for v in outvars if not isinstance(v, Literal)}
    new_eqns = []
    for eqn in reversed(jaxpr.eqns):
        used_outs = [id(v) in live for v in eqn.outvars]
        if not any(used_outs) and not eqn.primitive.effectful:
            continue
        if eqn.primitive.dce is not None and not all(used_outs):
            eqn = eqn.primitive.dce(eqn, used_outs)
        new_eqns.append(eqn)
        for v in eqn.invars:
            if not isinstance(v, Literal):
                live.add(id(v))
    new_eqns.reverse()
    used_inputs = [id(v) in live or instantiate for v in jaxpr.invars]
    used_consts = [v for v in jaxpr.constvars if id(v) in live]
    new_jaxpr = Jaxpr(used_consts, [v for v, u in zip(jaxpr.invars, used_inputs) if u],
                      outvars, new_eqns)
    return new_jaxpr, used_inputs


def dce_closed_jaxpr(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Remove dead equations and unused constants, keeping every input and output."""
    jaxpr = closed.jaxpr
    pruned, _ = dce_jaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, jaxpr.outvars, jaxpr.eqns),
                          [True] * len(jaxpr.outvars), instantiate=True)
    const_of = {id(v): c for v, c in zip(jaxpr.constvars, closed.consts)}
    return ClosedJaxpr(pruned, [const_of[id(v)] for v in pruned.constvars])


def partial_eval_jaxpr(closed: ClosedJaxpr, unknowns: Sequence[bool], instantiate: Sequence[bool] | bool):
    """Split ``closed`` into a known part and an unknown part.

    Returns ``(jaxpr_known, jaxpr_unknown, out_unknowns, num_residuals)``:
    ``jaxpr_known`` takes the known inputs and returns the known outputs followed by
    residuals; ``jaxpr_unknown`` takes the residuals followed by the unknown inputs and
    returns the unknown outputs.
    """
    if isinstance(instantiate, bool):
        instantiate = [instantiate] * len(closed.out_avals)
    in_avals = closed.in_avals
    known_avals = [a for a, uk in zip(in_avals, unknowns) if not uk]
    num_out = len(closed.out_avals)
    cell: dict = {}

    def fun_known(*known_args):
        known_iter = iter(known_args)
        pvals = [PartialVal.unknown(a) if uk else PartialVal.known(next(known_iter))
                 for a, uk in zip(in_avals, unknowns)]
        jaxpr_unknown, pvals_out, residuals = trace_to_jaxpr_partial(
            lambda *xs: core.eval_jaxpr(closed.jaxpr, closed.consts, *xs), pvals,
            instantiate_from=num_out)
        # Instantiate the requested outputs: make them unknown by wrapping the known value
        # as a residual read by the unknown jaxpr.
        out_unknowns = []
        known_outs = []
        extra_outvars = []
        extra_res = []
        unknown_iter = iter(jaxpr_unknown.outvars)
        final_outvars = []
        for pv, inst in zip(pvals_out, instantiate):
            if pv.is_known() and not inst:
                out_unknowns.append(False)
                known_outs.append(pv.get_known())
            elif pv.is_known():
                out_unknowns.append(True)
                var = Var(pv.aval)
                extra_outvars.append(var)
                extra_res.append(pv.get_known())
                final_outvars.append(var)
            else:
                out_unknowns.append(True)
                final_outvars.append(next(unknown_iter))
        jaxpr_unknown = Jaxpr(jaxpr_unknown.constvars + extra_outvars, jaxpr_unknown.invars,
                              final_outvars, jaxpr_unknown.eqns)
        all_res = list(residuals) + extra_res
        cell["out_unknowns"] = out_unknowns
        cell["jaxpr_unknown"] = jaxpr_unknown
        cell["num_res"] = len(all_res)
        return known_outs + all_res

    jaxpr_known, consts_known = trace_to_jaxpr_dynamic(fun_known, known_avals)
    jaxpr_unknown = cell["jaxpr_unknown"]
    # residuals become leading inputs of the unknown jaxpr
    jaxpr_unknown = Jaxpr([], jaxpr_unknown.constvars + jaxpr_unknown.invars,
                          jaxpr_unknown.outvars, jaxpr_unknown.eqns)
    return (ClosedJaxpr(jaxpr_known, consts_known), ClosedJaxpr(jaxpr_unknown, []),
            cell["out_unknowns"], cell["num_res"])


def trace_to_jaxpr_nounits(fun, pvals: Sequence[PartialVal], instantiate: bool = False):
    """JAX's spelling of :func:`trace_to_jaxpr_partial`, for a ``linear_util.WrappedFun``
    (or a plain function, flat in and out): returns ``(jaxpr, out_pvals, residuals)`` where
    each output's partial value is JAX's pair, ``(None, value)`` when known and
    ``(aval, None)`` when unknown. ``instantiate`` stages every output."""
    call = getattr(fun, "call_wrapped", fun)
    jaxpr, pvals_out, residuals = trace_to_jaxpr_partial(
        lambda *args: list(call(*args)), pvals,
        instantiate_from=0 if instantiate is True else (1 << 62))
    out = [(None, pv.const) if pv.is_known() else (pv.aval, None) for pv in pvals_out]
    return jaxpr, out, residuals
