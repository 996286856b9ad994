"""Reductions (sum, prod, max, mean, var, argmax, allclose, trace, ...) and cumulative
operations (the order statistics, which sort, are ``_order_statistics``').

All reductions take NumPy's ``axis`` (None, an int or a tuple), ``keepdims`` and, where NumPy
has them, ``dtype``, ``initial`` and ``where`` (a boolean mask of the elements to include).
Dtypes follow JAX: sums and products of booleans and small integers accumulate in the
default integer type; float16/bfloat16 accumulate in float32 and are rounded back; means
and variances of integers are floats.
"""
from __future__ import annotations

import builtins

import numpy as np

from functrans import _dtypes
from functrans.core import get_aval
from functrans.numpy import _ufuncs as uf
from functrans.numpy._promotion import (broadcast_to_shape, canonicalize_axes, canonicalize_axis,
                                        check_arraylike, has_lax_fn, lax_fn, promote_dtypes_inexact,
                                        to_array)
from functrans.primitives import elementwise as lax
from functrans.primitives import reductions as lax_reductions
from functrans.primitives import structural
from functrans.numpy._shape import concatenate, diagonal

_LOW_PRECISION = (_dtypes.float16, _dtypes.bfloat16)


def _canonical(dtype, fname: str):
    return None if dtype is None else _dtypes.check_user_dtype(dtype, fname)


def _no_out(fname, out):
    if out is not None:
        raise ValueError(f"{fname}: the `out` argument is not supported (arrays are immutable)")


def _operand(fname: str, a):
    """The array ``a`` given to the reduction ``fname``: arrays and scalars only, as in JAX
    (a list raises ``TypeError``; convert it with ``jnp.asarray``)."""
    check_arraylike(fname, a)
    return to_array(a)


def _keep(x, axes, keepdims):
    return structural.expand_dims(x, axes) if keepdims and axes else x


def _accumulation_dtype(dtype, promote_integers=True):
    """The type sums and products are returned in when no ``dtype`` is asked for."""
    if _dtypes.is_bool(dtype):
        return _dtypes.default_int_dtype()
    if promote_integers and _dtypes.is_integer(dtype):
        default = _dtypes.default_uint_dtype() if _dtypes.is_unsigned(dtype) \
            else _dtypes.default_int_dtype()
        if np.dtype(dtype).itemsize < default.itemsize:
            return default
    return dtype


def _masked(a, where, fill):
    """``a`` with the elements outside ``where`` replaced by ``fill``."""
    if where is None:
        return a
    aval = get_aval(a)
    mask = broadcast_to_shape(uf._to_bool(where), aval.shape)
    return lax.select(mask, a, structural.full(aval.shape, fill, aval.dtype))


def _generic_reduce(fname, a, axis, keepdims, where, initial, identity, reduce_fn, result_dtype,
                    compute_dtype=None, combine=None):
    a = to_array(a)
    aval = get_aval(a)
    axes = canonicalize_axes(axis, aval.ndim)
    compute = compute_dtype or result_dtype
    if compute in _LOW_PRECISION:
        compute = _dtypes.float32
    weak = aval.weak_type and compute == aval.dtype
    a = lax.convert_element_type(a, compute, weak)
    if identity is None and (where is not None or builtins.any(aval.shape[i] == 0 for i in axes)):
        if initial is None:
            raise ValueError(f"{fname}: zero-size reductions and reductions with `where` need "
                             "an `initial` value (the operation has no identity)")
    fill = identity if identity is not None else initial
    a = _masked(a, where, fill(compute) if callable(fill) else fill)
    out = reduce_fn(a, axes)
    if initial is not None:
        out = combine(out, lax._weak_full(initial, get_aval(out)))
    out = lax.convert_element_type(out, result_dtype, weak and result_dtype == compute)
    return _keep(out, axes, keepdims)


def sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None,  # noqa: A001
        promote_integers=True):
    """Sum of elements over ``axis``.

        >>> sum(arange(6).reshape(2, 3), axis=0)
        Array([3, 5, 7], dtype=int32)
    """
    _no_out("sum", out)
    a = _operand("sum", a)
    result = _canonical(dtype, "sum") or _accumulation_dtype(get_aval(a).dtype, promote_integers)
    return _generic_reduce("sum", a, axis, keepdims, where, initial, 0,
                           lax_reductions.reduce_sum, result, combine=lax.add)


def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None,
         promote_integers=True):
    """Product of elements over ``axis``.

        >>> prod(array([1, 2, 3, 4]))
        Array(24, dtype=int32)
    """
    _no_out("prod", out)
    a = _operand("prod", a)
    result = _canonical(dtype, "prod") or _accumulation_dtype(get_aval(a).dtype, promote_integers)
    return _generic_reduce("prod", a, axis, keepdims, where, initial, 1,
                           lambda x, axes: lax_fn("reduce_prod")(x, axes), result,
                           combine=lax.mul)


def _lowest(dtype):
    dtype = np.dtype(dtype)
    if _dtypes.is_bool(dtype):
        return False
    if _dtypes.is_integer(dtype):
        return int(np.iinfo(dtype).min)
    return -np.inf


def _highest(dtype):
    dtype = np.dtype(dtype)
    if _dtypes.is_bool(dtype):
        return True
    if _dtypes.is_integer(dtype):
        return int(np.iinfo(dtype).max)
    return np.inf


def max(a, axis=None, out=None, keepdims=False, initial=None, where=None):  # noqa: A001
    """Largest element over ``axis`` (NaN if any is NaN).

        >>> max(array([1.0, 3.0, 2.0]))
        Array(3., dtype=float32)
    """
    _no_out("max", out)
    a = _operand("max", a)
    dtype = get_aval(a).dtype
    return _generic_reduce("max", a, axis, keepdims, where, initial,
                           _lowest if initial is not None else None,
                           lambda x, axes: lax_fn("reduce_max")(x, axes), dtype,
                           compute_dtype=dtype, combine=lax.max)


def min(a, axis=None, out=None, keepdims=False, initial=None, where=None):  # noqa: A001
    """Smallest element over ``axis`` (NaN if any is NaN)."""
    _no_out("min", out)
    a = _operand("min", a)
    dtype = get_aval(a).dtype
    return _generic_reduce("min", a, axis, keepdims, where, initial,
                           _highest if initial is not None else None,
                           lambda x, axes: lax_fn("reduce_min")(x, axes), dtype,
                           compute_dtype=dtype, combine=lax.min)


amax, amin = max, min


def _reduce_or(x, axes):
    if has_lax_fn("reduce_or"):
        return lax_fn("reduce_or")(x, axes)
    # without a boolean reduction, count the true elements
    count = lax_reductions.reduce_sum(lax.convert_element_type(x, _dtypes.int32), axes)
    return lax.gt(count, lax._weak_full(0, get_aval(count)))


def _reduce_and(x, axes):
    if has_lax_fn("reduce_and"):
        return lax_fn("reduce_and")(x, axes)
    return lax.bitwise_not(_reduce_or(lax.bitwise_not(x), axes))


def any(a, axis=None, out=None, keepdims=False, *, where=None):  # noqa: A001
    """Whether any element over ``axis`` is true (non-zero)."""
    _no_out("any", out)
    a = uf._to_bool(_operand("any", a))
    return _generic_reduce("any", a, axis, keepdims, where, None, False, _reduce_or,
                           _dtypes.bool_)


def all(a, axis=None, out=None, keepdims=False, *, where=None):  # noqa: A001
    """Whether every element over ``axis`` is true (non-zero).

        >>> all(array([1, 2, 0]))
        Array(False, dtype=bool)
    """
    _no_out("all", out)
    a = uf._to_bool(_operand("all", a))
    return _generic_reduce("all", a, axis, keepdims, where, None, True, _reduce_and,
                           _dtypes.bool_)


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether every element of ``a`` and ``b`` is close (see :func:`isclose`)."""
    return all(uf.isclose(a, b, rtol, atol, equal_nan))


def _divide_by_count(total, a, axes, where, offset=0.0):
    """``total / (number of elements reduced - offset)``; the count is static unless a
    ``where`` mask is given."""
    aval = get_aval(a)
    if where is None:
        n = 1
        for i in axes:
            n *= aval.shape[i]
        return lax.div(total, lax._weak_full(float(n) - offset, get_aval(total)))
    mask = broadcast_to_shape(uf._to_bool(where), aval.shape)
    count = lax_reductions.reduce_sum(lax.convert_element_type(mask, get_aval(total).dtype), axes)
    return lax.div(total, lax.sub(count, lax._weak_full(float(offset), get_aval(count))))


def _inexact_dtype(dtype):
    return dtype if _dtypes.is_inexact(dtype) else _dtypes.default_float_dtype()


def _real_dtype(dtype):
    return np.dtype(np.real(np.zeros((), dtype)).dtype)


def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    """Arithmetic mean over ``axis`` (integers give the default float type).

        >>> mean(array([1, 2, 3, 4]))
        Array(2.5, dtype=float32)
    """
    _no_out("mean", out)
    a = _operand("mean", a)
    aval = get_aval(a)
    axes = canonicalize_axes(axis, aval.ndim)
    result = _canonical(dtype, "mean") or _inexact_dtype(aval.dtype)
    compute = _dtypes.float32 if result in _LOW_PRECISION else _inexact_dtype(result)
    total = sum(a, axis=axes, dtype=compute, where=where)
    out_ = _divide_by_count(total, a, axes, where)
    out_ = lax.convert_element_type(out_, result, aval.weak_type and result == aval.dtype)
    return _keep(out_, axes, keepdims)


def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None,
        correction=None):
    """Variance over ``axis``, dividing by ``N - ddof`` (``correction`` is the array-API
    name for ``ddof``).

        >>> var(array([1.0, 2.0, 3.0, 4.0]))
        Array(1.25, dtype=float32)
    """
    _no_out("var", out)
    if correction is not None:
        ddof = correction
    a = _operand("var", a)
    aval = get_aval(a)
    axes = canonicalize_axes(axis, aval.ndim)
    in_dtype = _inexact_dtype(aval.dtype)
    result = _canonical(dtype, "var") or in_dtype
    if _dtypes.is_complex(result):
        result = _real_dtype(result)
    compute = _dtypes.float32 if in_dtype in _LOW_PRECISION else in_dtype
    a = lax.convert_element_type(a, compute)
    centered = lax.sub(a, broadcast_to_shape(mean(a, axes, keepdims=True, where=where),
                                             aval.shape))
    if _dtypes.is_complex(compute):
        squares = lax.real(lax.mul(centered, lax.conj(centered)))
    else:
        squares = lax.square(centered)
    total = sum(squares, axis=axes, where=where)
    out_ = _divide_by_count(total, squares, axes, where, offset=float(ddof))
    out_ = lax.convert_element_type(out_, result)
    return _keep(out_, axes, keepdims)


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None,
        correction=None):
    """Standard deviation over ``axis`` (the square root of :func:`var`)."""
    return uf.sqrt(var(a, axis, dtype, out, ddof, keepdims, where=where, correction=correction))


def ptp(a, axis=None, out=None, keepdims=False):
    """Range (maximum minus minimum) over ``axis``."""
    _no_out("ptp", out)
    return uf.subtract(max(a, axis, keepdims=keepdims), min(a, axis, keepdims=keepdims))


def count_nonzero(a, axis=None, keepdims=False):
    """Number of non-zero elements over ``axis``.

        >>> count_nonzero(array([0, 1, 2, 0]))
        Array(2, dtype=int32)
    """
    a = _operand("count_nonzero", a)
    return sum(uf._to_bool(a), axis=axis, dtype=_dtypes.default_int_dtype(), keepdims=keepdims)


# ---- argmax / argmin -------------------------------------------------------------------------

def _arg_reduce(fname, a, axis, keepdims):
    a = _operand(fname, a)
    aval = get_aval(a)
    if axis is None:
        if aval.size == 0:
            raise ValueError(f"{fname}: attempt to get {fname} of an empty sequence")
        flat = structural.reshape(a, (aval.size,))
        out = lax_fn(fname)(flat, 0, _dtypes.default_int_dtype())
        return structural.reshape(out, (1,) * aval.ndim) if keepdims else out
    axis = canonicalize_axis(axis, aval.ndim)
    if aval.shape[axis] == 0:
        raise ValueError(f"{fname}: attempt to get {fname} of an empty sequence")
    out = lax_fn(fname)(a, axis, _dtypes.default_int_dtype())
    return _keep(out, (axis,), keepdims)


def argmax(a, axis=None, out=None, keepdims=None):
    """Index of the largest element over ``axis`` (the first one on ties and NaNs).

        >>> argmax(array([1, 5, 2]))
        Array(1, dtype=int32)
    """
    _no_out("argmax", out)
    return _arg_reduce("argmax", a, axis, bool(keepdims))


def argmin(a, axis=None, out=None, keepdims=None):
    """Index of the smallest element over ``axis`` (the first one on ties and NaNs)."""
    _no_out("argmin", out)
    return _arg_reduce("argmin", a, axis, bool(keepdims))


def nanargmax(a, axis=None, out=None, keepdims=None):
    """:func:`argmax` ignoring NaNs (-1 where every element is NaN)."""
    _no_out("nanargmax", out)
    return _nan_arg("argmax", a, axis, keepdims, -np.inf)


def nanargmin(a, axis=None, out=None, keepdims=None):
    """:func:`argmin` ignoring NaNs (-1 where every element is NaN)."""
    _no_out("nanargmin", out)
    return _nan_arg("argmin", a, axis, keepdims, np.inf)


def _nan_arg(fname, a, axis, keepdims, fill):
    a = _operand(fname, a)
    if not _dtypes.is_inexact(get_aval(a).dtype):
        return _arg_reduce(fname, a, axis, bool(keepdims))
    nans = uf.isnan(a)
    out = _arg_reduce(fname, uf.where(nans, fill, a), axis, bool(keepdims))
    all_nan = all(nans, axis=axis, keepdims=bool(keepdims))
    return uf.where(all_nan, -1, out)


# ---- NaN-ignoring reductions -----------------------------------------------------------------

def _nan_replaced(a, value):
    a = to_array(a)
    if not _dtypes.is_inexact(get_aval(a).dtype):
        return a
    return uf.where(uf.isnan(a), value, a)


def nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """:func:`sum` treating NaNs as zero."""
    return sum(_nan_replaced(a, 0), axis, dtype, out, keepdims, initial, where)


def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """:func:`prod` treating NaNs as one."""
    return prod(_nan_replaced(a, 1), axis, dtype, out, keepdims, initial, where)


def _not_nan(a, where):
    ok = uf.logical_not(uf.isnan(a))
    return ok if where is None else uf.logical_and(ok, where)


def nanmax(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """:func:`max` ignoring NaNs (NaN where every element is NaN)."""
    _no_out("nanmax", out)
    a = _operand("nanmax", a)
    if not _dtypes.is_inexact(get_aval(a).dtype):
        return max(a, axis, None, keepdims, initial, where)
    out_ = max(_nan_replaced(a, -np.inf), axis, None, keepdims, initial, where)
    return uf.where(all(uf.isnan(a), axis=axis, keepdims=keepdims), np.nan, out_)


def nanmin(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """:func:`min` ignoring NaNs (NaN where every element is NaN)."""
    _no_out("nanmin", out)
    a = _operand("nanmin", a)
    if not _dtypes.is_inexact(get_aval(a).dtype):
        return min(a, axis, None, keepdims, initial, where)
    out_ = min(_nan_replaced(a, np.inf), axis, None, keepdims, initial, where)
    return uf.where(all(uf.isnan(a), axis=axis, keepdims=keepdims), np.nan, out_)


def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, where=None):
    """:func:`mean` of the non-NaN elements.

        >>> nanmean(array([1.0, nan, 3.0]))
        Array(2., dtype=float32)
    """
    a = _operand("nanmean", a)
    if not _dtypes.is_inexact(get_aval(a).dtype):
        return mean(a, axis, dtype, out, keepdims, where=where)
    return mean(a, axis, dtype, out, keepdims, where=_not_nan(a, where))


def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None):
    """:func:`var` of the non-NaN elements."""
    a = _operand("nanvar", a)
    if not _dtypes.is_inexact(get_aval(a).dtype):
        return var(a, axis, dtype, out, ddof, keepdims, where=where)
    return var(_nan_replaced(a, 0), axis, dtype, out, ddof, keepdims, where=_not_nan(a, where))


def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None):
    """:func:`std` of the non-NaN elements."""
    return uf.sqrt(nanvar(a, axis, dtype, out, ddof, keepdims, where))


def average(a, axis=None, weights=None, returned=False, keepdims=False):
    """Weighted mean over ``axis``; with ``returned``, also the sum of the weights.

        >>> average(array([1.0, 2.0]), weights=array([3.0, 1.0]))
        Array(1.25, dtype=float32)
    """
    a = _operand("average", a)
    aval = get_aval(a)
    if weights is None:
        avg = mean(a, axis, keepdims=keepdims)
        axes = canonicalize_axes(axis, aval.ndim)
        n = 1
        for i in axes:
            n *= aval.shape[i]
        if returned:
            return avg, structural.full(get_aval(avg).shape, float(n), get_aval(avg).dtype)
        return avg
    a, weights = promote_dtypes_inexact(a, weights)
    w_aval = get_aval(weights)
    if w_aval.shape != aval.shape:
        if axis is None or w_aval.ndim != 1:
            raise ValueError("average: weights of a different shape than `a` must be 1-D and "
                             "come with an `axis`")
        ax = canonicalize_axis(axis, aval.ndim)
        if w_aval.shape[0] != aval.shape[ax]:
            raise ValueError("average: the length of weights differs from the length of `a` "
                             "along axis")
        weights = structural.broadcast_in_dim(weights, aval.shape, (ax,))
    weights_sum = sum(weights, axis, keepdims=keepdims)
    avg = uf.true_divide(sum(uf.multiply(a, weights), axis, keepdims=keepdims), weights_sum)
    if returned:
        return avg, weights_sum
    return avg


# ---- diagonal sums -----------------------------------------------------------------------------

def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    """Sum along a diagonal (see :func:`diagonal`)."""
    return sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype, out=out)


def _cumulative(fname, lax_name, a, axis, dtype, promote=True):
    a = _operand(fname, a)
    aval = get_aval(a)
    if axis is None:
        a = structural.reshape(a, (aval.size,))
        axis = 0
    axis = canonicalize_axis(axis, get_aval(a).ndim)
    if dtype is not None:
        result = _canonical(dtype, fname)
    elif promote:
        result = _accumulation_dtype(aval.dtype)
    else:
        result = aval.dtype
    compute = _dtypes.float32 if result in _LOW_PRECISION else result
    if _dtypes.is_bool(compute):
        compute = _dtypes.default_int_dtype()
    a = lax.convert_element_type(a, compute)
    if get_aval(a).shape[axis] == 0:
        return lax.convert_element_type(a, result)
    out = lax_fn(lax_name)(a, axis=axis, reverse=False)
    return lax.convert_element_type(out, result)


def cumsum(a, axis=None, dtype=None, out=None):
    """Cumulative sum along ``axis`` (of the flattened array when ``axis`` is None).

        >>> cumsum(array([1, 2, 3]))
        Array([1, 3, 6], dtype=int32)
    """
    _no_out("cumsum", out)
    return _cumulative("cumsum", "cumsum", a, axis, dtype)


def cumprod(a, axis=None, dtype=None, out=None):
    """Cumulative product along ``axis``."""
    _no_out("cumprod", out)
    return _cumulative("cumprod", "cumprod", a, axis, dtype)


cumproduct = cumprod


def nancumsum(a, axis=None, dtype=None, out=None):
    """:func:`cumsum` treating NaNs as zero."""
    return cumsum(_nan_replaced(a, 0), axis, dtype, out)


def nancumprod(a, axis=None, dtype=None, out=None):
    """:func:`cumprod` treating NaNs as one."""
    return cumprod(_nan_replaced(a, 1), axis, dtype, out)


def _with_initial(out, axis, value, include_initial):
    if not include_initial:
        return out
    aval = get_aval(out)
    shape = list(aval.shape)
    shape[axis] = 1
    return concatenate([structural.full(tuple(shape), value, aval.dtype), out], axis=axis)


def _array_api_cumulative(name, accumulate, initial, x, axis, dtype, include_initial):
    x = _operand(name, x)
    if axis is None:
        if get_aval(x).ndim > 1:
            raise ValueError(f"{name}: axis must be given for arrays of more than one "
                             "dimension")
        axis = 0
    out = accumulate(x, axis, dtype)
    return _with_initial(out, canonicalize_axis(axis, get_aval(out).ndim), initial,
                         include_initial)


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    """Array-API cumulative sum; ``include_initial`` prepends a zero."""
    return _array_api_cumulative("cumulative_sum", cumsum, 0, x, axis, dtype, include_initial)


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
    """Array-API cumulative product; ``include_initial`` prepends a one."""
    return _array_api_cumulative("cumulative_prod", cumprod, 1, x, axis, dtype, include_initial)
