"""Finding where a NaN/inf came from (``debug_nans`` / ``debug_infs``) after a compiled call:
the program is re-run op by op with the reference implementations."""
from __future__ import annotations

import numpy as np

from functrans._debug_checks import bad_kind
from functrans.core import Literal, to_numpy
from functrans.interpreters.inline import INLINABLE


def check_compiled_outputs(closed, args, outputs) -> None:
    """After a compiled call: on a NaN/inf output, re-run the program op by op with the
    reference implementations and name the first primitive that produced one (looking inside
    nested ``jit`` / ``custom_jvp`` / ``custom_vjp`` / ``remat`` calls for the innermost)."""
    if not any(bad_kind(np.asarray(getattr(o, "_value", o))) for o in outputs):
        return
    found = _first_bad_equation(closed.jaxpr, [to_numpy(c) for c in closed.consts],
                                [to_numpy(a) for a in args])
    if found is None:
        raise FloatingPointError("invalid value (NaN/inf) in the output of a compiled function; "
                                 "the reference re-run did not reproduce it")
    eqn, kind = found
    info = eqn.source_info
    where = f" at {info.filename}:{info.lineno} ({info.function})" if info else ""
    raise FloatingPointError(
        f"invalid value ({kind}) encountered in primitive '{eqn.primitive.name}'{where} "
        "(found by re-running the compiled program op by op)")


def _first_bad_equation(jaxpr, consts, args):
    """The first equation of ``jaxpr`` (run op by op on NumPy values) whose output holds a
    NaN/inf, with the kind found; inside a call-like equation, the innermost one."""
    env = {}
    for v, c in zip(jaxpr.constvars, consts):
        env[id(v)] = c
    for v, a in zip(jaxpr.invars, args):
        env[id(v)] = a

    def read(v):
        return np.asarray(v.val, v.aval.dtype) if isinstance(v, Literal) else env[id(v)]

    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        outs = eqn.primitive.run_impl(*ins, **eqn.params)
        outs = outs if eqn.primitive.multiple_results else [outs]
        for v, o in zip(eqn.outvars, outs):
            env[id(v)] = np.asarray(o)
        kind = next((k for k in (bad_kind(np.asarray(o)) for o in outs) if k), None)
        if kind is None:
            continue
        body_key = INLINABLE.get(eqn.primitive.name)
        if body_key is not None:
            body = eqn.params[body_key]
            inner = _first_bad_equation(body.jaxpr, [np.asarray(c) for c in body.consts], ins)
            if inner is not None:
                return inner
        return eqn, kind
    return None
