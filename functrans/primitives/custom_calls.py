"""The call primitives behind ``custom_jvp`` and ``custom_vjp``: ``custom_jvp_call`` and
``custom_vjp_call``. A program holds them as equations whose ``call_jaxpr`` is the primal
function and whose params keep the user's rule, so a transform reached later still finds it.

Binding one hands the function and its rule to the active trace's custom-call handler
(``process_custom_jvp_call`` / ``process_custom_vjp_call``), so each transform decides: the
JVP trace applies the rule, staging records the call, evaluation just calls the function.
The user-facing ``custom_jvp``/``custom_vjp`` classes (``functrans._custom_derivatives``)
set the transforms' rules for the calls (``custom_jvp``, ``custom_batch``).
"""
from __future__ import annotations

from typing import Callable

from functrans import core
from functrans.core import ClosedJaxpr, Primitive
from functrans.interpreters import ad


class CustomCallPrimitive(Primitive):
    """A call primitive whose binding is delegated to the trace's custom-call handler.

    ``bind_call(fun, rule, args, params)`` is the entry point from user code; ``bind`` (used
    when a staged equation is evaluated) rebuilds ``fun`` and ``rule`` from the params."""

    def __init__(self, name, kind):
        super().__init__(name, multiple_results=True)
        self.kind = kind
        # The transforms' rules for the call (read by the JVP and batching traces, which
        # sit below this module): ``custom_jvp(fwd, bwd, primals, tangents, params)`` for a
        # custom_vjp call under jvp, ``custom_batch(trace, primitive, fun, rule..., vals,
        # dims, params)`` under vmap.
        self.custom_jvp: Callable | None = None
        self.custom_batch: Callable | None = None

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
        _check_consts_not_differentiated(self.kind, consts)
        if self.kind == "jvp":
            rule = params["jvp"]
        else:
            rule = (params["fwd"], params["bwd"])
        rest = {k: v for k, v in params.items() if k not in ("jvp", "fwd", "bwd")}
        return self.bind_call(fun, rule, list(args), rest)


def _call_jaxpr_fun(call_jaxpr: ClosedJaxpr, consts):
    def fun(*args):
        return core.eval_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts, *consts, *args)
    return fun


def _check_consts_not_differentiated(kind: str, consts):
    """A staged custom call closed over these values; its rule knows nothing of their
    derivatives, so differentiating with respect to them is an error (as in JAX)."""
    if not any(isinstance(c, ad.JVPTracer) and not isinstance(c.tangent, ad.Zero) for c in consts):
        return
    if kind == "vjp":
        raise TypeError(
            "Detected differentiation of a custom_vjp function with respect to a closed-over "
            "value. The custom VJP rule only says how to differentiate with respect to the "
            "function's explicit arguments: pass the closed-over value as an argument (see "
            "functrans.closure_convert) and give its cotangent in bwd.")
    raise TypeError(
        "Detected differentiation of a custom_jvp function with respect to a closed-over "
        "value. The custom JVP rule only says how to differentiate with respect to the "
        "function's explicit arguments: pass the closed-over value as an argument.")


custom_jvp_call_p = CustomCallPrimitive("custom_jvp_call", "jvp")
custom_vjp_call_p = CustomCallPrimitive("custom_vjp_call", "vjp")


def _custom_call_abstract_eval(*avals, call_jaxpr, num_consts, **params):
    return call_jaxpr.out_avals


def _custom_call_impl(*args, call_jaxpr, num_consts, **params):
    return core.eval_jaxpr_numpy(call_jaxpr.jaxpr, [core.to_numpy(c) for c in call_jaxpr.consts], args)


for _p in (custom_jvp_call_p, custom_vjp_call_p):
    _p.def_abstract_eval(_custom_call_abstract_eval)
    _p.def_impl(_custom_call_impl)
