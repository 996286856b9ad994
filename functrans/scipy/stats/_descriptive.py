"""Descriptive statistics of ``jax.scipy.stats``: :func:`mode`, :func:`rankdata`, :func:`sem`.

All three work along one axis by sorting (no data-dependent shapes), so they run under
``jit`` and ``vmap``.

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats._descriptive import rankdata
    >>> rankdata(jnp.array([3, 1, 2, 2]))
    Array([4. , 1. , 2.5, 2.5], dtype=float32)
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from functrans import _dtypes
from functrans import lax
from functrans import numpy as jnp
from functrans.core import get_aval
from functrans.numpy._promotion import canonicalize_axis, check_arraylike, to_array

__all__ = ["ModeResult", "mode", "rankdata", "sem"]


class ModeResult(NamedTuple):
    """The result of :func:`mode`: the most common value and how often it occurs."""
    mode: object
    count: object


def _check_nan_policy(name: str, nan_policy: str, supported=("propagate",)):
    if nan_policy not in ("propagate", "omit", "raise"):
        raise ValueError(f"{name}: nan_policy must be 'propagate', 'omit' or 'raise', got "
                         f"{nan_policy!r}")
    if nan_policy not in supported:
        raise NotImplementedError(f"{name}: nan_policy={nan_policy!r} is not supported "
                                  f"(supported: {', '.join(supported)})")


def _run_boundaries(sorted_values):
    """Along the last axis of sorted values: where each run of equal values starts and
    ends. NaNs (sorted last) count as equal to each other, as SciPy's ``np.unique`` does."""
    left, right = sorted_values[..., :-1], sorted_values[..., 1:]
    differs = (left != right) & ~(jnp.isnan(left) & jnp.isnan(right)) \
        if _dtypes.is_inexact(get_aval(sorted_values).dtype) else left != right
    edge = jnp.ones(get_aval(sorted_values).shape[:-1] + (1,), bool)
    starts = jnp.concatenate([edge, differs], axis=-1)
    ends = jnp.concatenate([differs, edge], axis=-1)
    return starts, ends


def mode(a, axis=0, nan_policy: str = "propagate", keepdims: bool = False) -> ModeResult:
    """The most common value along ``axis`` (the flattened array for ``axis=None``) and its
    count; among equally common values the smallest. NaNs count as equal to each other.
    Only ``nan_policy="propagate"`` is supported.

        >>> mode(jnp.array([3, 1, 2, 2]))
        ModeResult(mode=Array(2, dtype=int32), count=Array(2, dtype=int32))
    """
    check_arraylike("mode", a)
    _check_nan_policy("mode", nan_policy)
    a = to_array(a)
    if axis is None:
        a, axis = jnp.ravel(a), 0
    if jnp.ndim(a) == 0:
        count = jnp.ones((), _dtypes.default_int_dtype())
        return ModeResult(a, count)
    axis = canonicalize_axis(axis, jnp.ndim(a))
    values = jnp.sort(jnp.moveaxis(a, axis, -1), axis=-1)
    starts, _ = _run_boundaries(values)
    index = lax.broadcasted_iota(_dtypes.default_int_dtype(), get_aval(values).shape,
                                 jnp.ndim(values) - 1)
    run_start = lax.cummax(jnp.where(starts, index, 0), axis=jnp.ndim(values) - 1)
    # the running length of each run; its first maximum closes the longest run of the
    # smallest value (the values are sorted ascending)
    running = index - run_start + 1
    best = jnp.argmax(running, axis=-1, keepdims=True)
    mode_value = jnp.take_along_axis(values, best, axis=-1)[..., 0]
    count = jnp.take_along_axis(running, best, axis=-1)[..., 0].astype(_dtypes.default_int_dtype())
    if keepdims:
        mode_value, count = jnp.expand_dims(mode_value, axis), jnp.expand_dims(count, axis)
    return ModeResult(mode_value, count)


def rankdata(a, method: str = "average", *, axis=None, nan_policy: str = "propagate"):
    """Ranks (from 1) of the data along ``axis`` (of the flattened array for ``axis=None``),
    as floats. Ties get, by ``method``: ``"average"`` their mean rank, ``"min"``/``"max"``
    the lowest/highest, ``"dense"`` consecutive ranks per distinct value, ``"ordinal"``
    distinct ranks in order of appearance. A NaN makes its whole slice NaN.

        >>> rankdata(jnp.array([3, 1, 2, 2]), "min")
        Array([4., 1., 2., 2.], dtype=float32)
    """
    check_arraylike("rankdata", a)
    if method not in ("average", "min", "max", "dense", "ordinal"):
        raise ValueError(f"rankdata: unknown method {method!r}")
    _check_nan_policy("rankdata", nan_policy)
    a = to_array(a)
    if axis is None:
        a, axis = jnp.ravel(a), 0
    axis = canonicalize_axis(axis, jnp.ndim(a))
    data = jnp.moveaxis(a, axis, -1)
    last = jnp.ndim(data) - 1
    order = jnp.argsort(data, axis=-1, stable=True)
    # inverse permutation: where each element landed in the sorted order
    inverse = jnp.argsort(order, axis=-1, stable=True)
    values = jnp.take_along_axis(data, order, axis=-1)
    n = get_aval(values).shape[-1]
    starts, ends = _run_boundaries(values)
    index = lax.broadcasted_iota(_dtypes.default_int_dtype(), get_aval(values).shape, last)
    float_dtype = _dtypes.default_float_dtype()
    if method == "ordinal":
        sorted_ranks = index + 1
    elif method == "dense":
        sorted_ranks = jnp.cumsum(starts.astype(index.dtype), axis=-1)
    else:
        low = lax.cummax(jnp.where(starts, index, 0), axis=last) + 1
        high = lax.cummin(jnp.where(ends, index, n - 1), axis=last, reverse=True) + 1
        sorted_ranks = {"min": low, "max": high}.get(method)
        if sorted_ranks is None:
            sorted_ranks = 0.5 * (low + high).astype(float_dtype)
    ranks = jnp.take_along_axis(sorted_ranks, inverse, axis=-1).astype(float_dtype)
    if _dtypes.is_inexact(get_aval(data).dtype):
        ranks = jnp.where(jnp.any(jnp.isnan(data), axis=-1, keepdims=True), np.nan, ranks)
    return jnp.moveaxis(ranks, -1, axis)


def sem(a, axis=0, ddof: int = 1, nan_policy: str = "propagate", *, keepdims: bool = False):
    """The standard error of the mean, ``std(a, ddof=ddof) / sqrt(n)``, along ``axis`` (all
    of ``a`` for ``None``). ``nan_policy="omit"`` ignores NaNs; ``"raise"`` is not supported.

        >>> sem(jnp.array([1.0, 2.0, 3.0]))
        Array(0.57735026, dtype=float32)
    """
    check_arraylike("sem", a)
    if nan_policy == "raise":
        raise ValueError("sem: nan_policy='raise' is not supported (it needs a "
                         "data-dependent check); use 'propagate' or 'omit'")
    _check_nan_policy("sem", nan_policy, ("propagate", "omit"))
    a = to_array(a)
    if not _dtypes.is_inexact(get_aval(a).dtype):
        a = a.astype(_dtypes.default_float_dtype())
    if nan_policy == "omit":
        count = jnp.sum(~jnp.isnan(a), axis=axis, keepdims=keepdims)
        spread = jnp.nanstd(a, axis=axis, ddof=ddof, keepdims=keepdims)
    else:
        count = jnp.size(a) if axis is None else get_aval(a).shape[axis]
        spread = jnp.std(a, axis=axis, ddof=ddof, keepdims=keepdims)
    return spread / jnp.sqrt(jnp.asarray(count, get_aval(spread).dtype))
