"""NaN/inf checks for ``debug_nans`` / ``debug_infs``: eager outputs, checked per primitive."""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans._config import config


def enabled() -> bool:
    return bool(config.debug_nans or config.debug_infs)


def _bad_kind(value: np.ndarray) -> str | None:
    if not _dtypes.is_inexact(value.dtype) or value.size == 0:
        return None
    if config.debug_nans and np.isnan(value).any():
        return "NaN"
    if config.debug_infs and np.isinf(value).any():
        return "inf"
    return None


def check_eager_outputs(primitive, outputs) -> None:
    from functrans._source_info import user_frame
    for out in outputs:
        value = getattr(out, "_value", None)
        if value is None:
            continue
        kind = _bad_kind(value)
        if kind is not None:
            info = user_frame(2)
            where = f" at {info.filename}:{info.lineno} ({info.function})" if info else ""
            raise FloatingPointError(
                f"invalid value ({kind}) encountered in primitive '{primitive.name}'{where}")


def check_compiled_outputs(closed, args, outputs) -> None:
    """After a compiled call: on a NaN/inf output, re-run the program op by op with the
    reference implementations and name the first primitive that produced one."""
    if not any(_bad_kind(np.asarray(getattr(o, "_value", o))) for o in outputs):
        return
    from functrans.core import Literal, to_numpy
    env = {}
    for v, c in zip(closed.jaxpr.constvars, closed.consts):
        env[id(v)] = to_numpy(c)
    for v, a in zip(closed.jaxpr.invars, args):
        env[id(v)] = to_numpy(a)

    def read(v):
        return np.asarray(v.val, v.aval.dtype) if isinstance(v, Literal) else env[id(v)]

    for eqn in closed.jaxpr.eqns:
        outs = eqn.primitive.impl(*[read(v) for v in eqn.invars], **eqn.params)
        outs = outs if eqn.primitive.multiple_results else [outs]
        for v, o in zip(eqn.outvars, outs):
            env[id(v)] = np.asarray(o)
            kind = _bad_kind(np.asarray(o))
            if kind is not None:
                where = f" at {eqn.source_info.filename}:{eqn.source_info.lineno} " \
                        f"({eqn.source_info.function})" if eqn.source_info else ""
                raise FloatingPointError(
                    f"invalid value ({kind}) encountered in primitive '{eqn.primitive.name}'"
                    f"{where} (found by re-running the compiled program op by op)")
    raise FloatingPointError("invalid value (NaN/inf) in the output of a compiled function; "
                             "the reference re-run did not reproduce it")
