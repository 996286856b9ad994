"""Order statistics: quantiles, percentiles and medians (and their NaN-ignoring forms),
read off the sorted data along the reduced axes."""
from __future__ import annotations

import builtins

import numpy as np

from functrans import _dtypes
from functrans.core import get_aval
from functrans.numpy import _shape
from functrans.numpy import _ufuncs as uf
from functrans.numpy._promotion import (broadcast_to_shape, canonicalize_axes,
                                        promote_dtypes_inexact)
from functrans.numpy._reductions import _no_out, any, sum  # noqa: A004
from functrans.numpy._sorting import sort
from functrans.primitives import elementwise as lax
from functrans.primitives import structural

_QUANTILE_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
             keepdims=False, *, interpolation=None):
    """The ``q``-th quantile(s) of ``a`` over ``axis`` (``q`` in ``[0, 1]``; its shape leads
    the result). ``method`` is one of linear, lower, higher, midpoint, nearest.

        >>> quantile(array([1.0, 2.0, 3.0, 4.0]), 0.5)
        Array(2.5, dtype=float32)
    """
    _no_out("quantile", out)
    return _quantile(a, q, axis, interpolation or method, keepdims, squash_nans=False)


def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                keepdims=False, *, interpolation=None):
    """:func:`quantile` of the non-NaN elements."""
    _no_out("nanquantile", out)
    return _quantile(a, q, axis, interpolation or method, keepdims, squash_nans=True)


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
               keepdims=False, *, interpolation=None):
    """:func:`quantile` with ``q`` in percent."""
    q = uf.true_divide(q, 100.0)
    return quantile(a, q, axis, out, overwrite_input, method, keepdims,
                    interpolation=interpolation)


def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                  keepdims=False, *, interpolation=None):
    """:func:`nanquantile` with ``q`` in percent."""
    q = uf.true_divide(q, 100.0)
    return nanquantile(a, q, axis, out, overwrite_input, method, keepdims,
                       interpolation=interpolation)


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The median over ``axis``.

        >>> median(array([3.0, 1.0, 2.0]))
        Array(2., dtype=float32)
    """
    return quantile(a, 0.5, axis, out, overwrite_input, "linear", keepdims)


def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The median of the non-NaN elements over ``axis``."""
    return nanquantile(a, 0.5, axis, out, overwrite_input, "linear", keepdims)


def _quantile(a, q, axis, method, keepdims, squash_nans):
    if method not in _QUANTILE_METHODS:
        raise ValueError(f"quantile: method must be one of {_QUANTILE_METHODS}, got {method!r}")
    a, q = promote_dtypes_inexact(a, q)
    if _dtypes.is_complex(get_aval(a).dtype):
        raise TypeError("quantile does not support complex inputs")
    aval = get_aval(a)
    axes = canonicalize_axes(axis, aval.ndim)
    kept = [i for i in range(aval.ndim) if i not in axes]
    # move the reduced axes last and merge them into one
    a = structural.transpose(a, tuple(kept) + axes)
    rest_shape = tuple(aval.shape[i] for i in kept)
    n = 1
    for i in axes:
        n *= aval.shape[i]
    a = structural.reshape(a, rest_shape + (n,))
    q_shape = get_aval(q).shape
    q_flat = structural.reshape(q, (get_aval(q).size,))
    nq = get_aval(q_flat).shape[0]
    dtype = get_aval(a).dtype
    nans = uf.isnan(a)
    if squash_nans:
        count = sum(uf.logical_not(nans), axis=-1, keepdims=True, dtype=dtype)
    else:
        count = structural.full(rest_shape + (1,), float(n), dtype)
    sorted_a = sort(a, axis=-1)
    pos_shape = rest_shape + (nq,)
    q_b = structural.broadcast_in_dim(q_flat, pos_shape, (len(rest_shape),))
    pos = lax.mul(q_b, broadcast_to_shape(lax.sub(count, lax._weak_full(1.0, get_aval(count))),
                                          pos_shape))
    lo_pos = lax.floor(pos)
    hi_pos = lax.ceil(pos)
    top = float(builtins.max(n - 1, 0))

    def take(p):
        idx = lax.convert_element_type(uf.clip(p, 0.0, top), _dtypes.int32)
        return _shape.take_along_axis(sorted_a, idx, axis=-1)

    if method == "linear":
        lo_v, hi_v = take(lo_pos), take(hi_pos)
        t = lax.sub(pos, lo_pos)
        result = lax.add(lo_v, lax.mul(t, lax.sub(hi_v, lo_v)))
    elif method == "lower":
        result = take(lo_pos)
    elif method == "higher":
        result = take(hi_pos)
    elif method == "midpoint":
        result = lax.mul(lax.add(take(lo_pos), take(hi_pos)), lax._weak_full(0.5, get_aval(pos)))
    else:
        result = take(lax.round(pos, 1))
    if squash_nans:
        empty = broadcast_to_shape(lax.eq(count, lax._weak_full(0.0, get_aval(count))), pos_shape)
        result = uf.where(empty, np.nan, result)
    else:
        has_nan = broadcast_to_shape(any(nans, axis=-1, keepdims=True), pos_shape)
        result = uf.where(has_nan, np.nan, result)
    # q's dimensions lead the result
    result = _shape.moveaxis(result, -1, 0)
    result = structural.reshape(result, q_shape + rest_shape)
    if keepdims:
        full_rest = tuple(1 if i in axes else s for i, s in enumerate(aval.shape))
        result = structural.reshape(result, q_shape + full_rest)
    return result


# ---- cumulative operations -------------------------------------------------------------------
