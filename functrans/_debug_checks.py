"""NaN/inf checks for ``debug_nans`` / ``debug_infs``: eager outputs, checked per primitive
(compiled outputs: :mod:`functrans._debug_rerun`)."""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans._config import config
from functrans._source_info import user_frame


def enabled() -> bool:
    return bool(config.debug_nans or config.debug_infs)


def bad_kind(value: np.ndarray) -> str | None:
    if not _dtypes.is_inexact(value.dtype) or value.size == 0:
        return None
    if config.debug_nans and np.isnan(value).any():
        return "NaN"
    if config.debug_infs and np.isinf(value).any():
        return "inf"
    return None


def check_eager_outputs(primitive, outputs, source_info=None) -> None:
    """Raise FloatingPointError on a NaN/inf in ``outputs``, naming ``source_info`` (the
    line of the equation a transform is evaluating, as the backward pass of ``grad``), else
    the innermost user frame."""
    for out in outputs:
        value = getattr(out, "_value", None)
        if value is None:
            continue
        kind = bad_kind(value)
        if kind is not None:
            info = source_info or user_frame(2)
            where = f" at {info.filename}:{info.lineno} ({info.function})" if info else ""
            raise FloatingPointError(
                f"invalid value ({kind}) encountered in primitive '{primitive.name}'{where}")
