"""Checks and small conversions shared by the losses."""
from __future__ import annotations

from functrans import _dtypes
from functrans import numpy as jnp


def _floating(name: str, x, what: str = "predictions"):
    x = jnp.asarray(x)
    if not _dtypes.is_inexact(x.dtype):
        raise TypeError(f"{name}: {what} must be floating point, got {x.dtype} "
                        f"(convert with .astype(jnp.float32))")
    return x


def _errors(name, predictions, targets):
    predictions = _floating(name, predictions)
    return predictions if targets is None else predictions - targets


def _axes(axis, ndim: int) -> tuple:
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, tuple) else (axis,)
    return tuple(a % ndim for a in axes)
