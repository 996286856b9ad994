"""Polynomials, 1-D convolution and correlation, differences, interpolation, histograms.

Polynomial coefficient arrays are ordered from the highest power down, as in NumPy.
"""
from __future__ import annotations

import builtins

import numpy as np

from functrans import _dtypes
from functrans.core import ConcretizationTypeError, Tracer, get_aval
from functrans.numpy import _ufuncs as uf
from functrans.numpy._promotion import (_concrete, canonicalize_axis, concrete_or_error,
                                        concrete_value, has_lax_fn, lax_fn, operator_index,
                                        promote_dtypes, promote_dtypes_inexact, to_array)
from functrans.numpy._padding import pad
from functrans.numpy._shape import (atleast_2d, broadcast_to, concatenate, diagonal, flip,
                                    ravel, slice_along_axis, stack, take)
from functrans.numpy._ufuncs import _inexact
from functrans.primitives import elementwise as lax
from functrans.primitives import structural
from functrans.primitives.control_flow import fori_loop
from functrans.numpy import _reductions as red
from functrans.numpy import linalg
from functrans.numpy._contractions import matmul
from functrans.numpy._creation import linspace
from functrans.numpy._reductions import mean
from functrans.numpy._reductions import sum as sum_
from functrans.numpy._sorting import argsort, searchsorted
from functrans.numpy._array_info import result_type
from functrans.numpy._creation import arange, array, asarray, eye, ones, zeros, zeros_like
from functrans.numpy._reductions import all as all_, argmax, cumsum, max as max_
from functrans.numpy._reductions import trace
from functrans.numpy._shape import atleast_1d, roll
from functrans.numpy._ufuncs import abs as abs_, mod, where


def _coefficient(p, i):
    return structural.reshape(slice_along_axis(p, 0, i, i + 1), ())


def _check_1d(fname, *arrays):
    for a in arrays:
        if get_aval(a).ndim != 1:
            raise ValueError(f"{fname}: expected 1-D arrays, got shape {get_aval(a).shape}")


# ---- convolution -----------------------------------------------------------------------------

def _correlate_valid_padded(x, y, lo, hi, precision, preferred_element_type):
    """``out[i] = sum_j xpad[i + j] * y[j]`` for ``x`` padded by ``lo``/``hi`` zeros."""
    n, m = get_aval(x).shape[0], get_aval(y).shape[0]
    if has_lax_fn("conv_general_dilated"):
        out = lax_fn("conv_general_dilated")(
            structural.reshape(x, (1, 1, n)), structural.reshape(y, (1, 1, m)),
            window_strides=(1,), padding=((lo, hi),), precision=precision,
            preferred_element_type=preferred_element_type)
        return structural.reshape(out, (get_aval(out).shape[-1],))
    # without a convolution primitive: one shifted product per tap of the (short) kernel
    xp = pad(x, ((lo, hi),))
    length = n + lo + hi - m + 1
    out = None
    for j in range(m):
        term = lax.mul(slice_along_axis(xp, 0, j, j + length),
                       structural.broadcast_in_dim(_coefficient(y, j), (length,), ()))
        out = term if out is None else lax.add(out, term)
    return out


def _convolve(fname, a, v, mode, flip_kernel, precision, preferred_element_type):
    a, v = promote_dtypes(a, v)
    if _dtypes.is_bool(get_aval(a).dtype):
        a, v = (lax.convert_element_type(x, _dtypes.default_int_dtype()) for x in (a, v))
    _check_1d(fname, a, v)
    n, m = get_aval(a).shape[0], get_aval(v).shape[0]
    if n == 0 or m == 0:
        raise ValueError(f"{fname}: inputs cannot be empty")
    swapped = m > n
    if swapped:
        a, v, n, m = v, a, m, n
    kernel = flip(v) if flip_kernel else v
    if mode == "full":
        lo, hi = m - 1, m - 1
    elif mode == "same":
        lo = m - 1 - (m - 1) // 2
        hi = m - 1 - lo
    elif mode == "valid":
        lo = hi = 0
    else:
        raise ValueError(f"{fname}: mode must be 'full', 'same' or 'valid', got {mode!r}")
    out = _correlate_valid_padded(a, kernel, lo, hi, precision, preferred_element_type)
    if swapped and not flip_kernel:
        # correlation is not symmetric: correlating the other way reverses the result
        out = flip(out)
    return out


def convolve(a, v, mode="full", *, precision=None, preferred_element_type=None):
    """Discrete linear convolution of two 1-D arrays.

        >>> convolve(array([1.0, 2.0, 3.0]), array([0.0, 1.0, 0.5]))
        Array([0. , 1. , 2.5, 4. , 1.5], dtype=float32)
    """
    return _convolve("convolve", a, v, mode, True, precision, preferred_element_type)


def correlate(a, v, mode="valid", *, precision=None, preferred_element_type=None):
    """Cross-correlation of two 1-D arrays: ``c[k] = sum_n a[n + k] * conj(v[n])``."""
    a, v = promote_dtypes(a, v)
    if _dtypes.is_complex(get_aval(v).dtype):
        v = uf.conjugate(v)
    return _convolve("correlate", a, v, mode, False, precision, preferred_element_type)


# ---- polynomials -----------------------------------------------------------------------------

def polyval(p, x, *, unroll=16):
    """Evaluate the polynomial with coefficients ``p`` (highest power first) at ``x``.

        >>> polyval(array([1.0, 0.0, -1.0]), 3.0)
        Array(8., dtype=float32)
    """
    p, x = promote_dtypes(p, x)
    _check_1d("polyval", p)
    shape = get_aval(x).shape
    y = structural.full(shape, 0, get_aval(x).dtype)
    for i in range(get_aval(p).shape[0]):
        y = lax.add(lax.mul(y, x), structural.broadcast_in_dim(_coefficient(p, i), shape, ()))
    return y


def _pad_front(p, length):
    n = get_aval(p).shape[0]
    if n >= length:
        return p
    return concatenate([structural.full((length - n,), 0, get_aval(p).dtype), p])


def polyadd(a1, a2):
    """Sum of two polynomials."""
    a1, a2 = promote_dtypes(ravel(a1), ravel(a2))
    n = builtins.max(get_aval(a1).shape[0], get_aval(a2).shape[0])
    return uf.add(_pad_front(a1, n), _pad_front(a2, n))


def polysub(a1, a2):
    """Difference of two polynomials."""
    a1, a2 = promote_dtypes(ravel(a1), ravel(a2))
    n = builtins.max(get_aval(a1).shape[0], get_aval(a2).shape[0])
    return uf.subtract(_pad_front(a1, n), _pad_front(a2, n))


def polymul(a1, a2, *, trim_leading_zeros=False):
    """Product of two polynomials."""
    return convolve(ravel(a1), ravel(a2), mode="full")


def polyder(p, m=1):
    """The ``m``-th derivative of a polynomial."""
    p = to_array(p)
    m = operator_index(m, "polyder: m")
    if m < 0:
        raise ValueError("polyder: order of derivative must be non-negative")
    for _ in range(m):
        n = get_aval(p).shape[0]
        if n <= 1:
            return structural.full((builtins.min(n, 1),), 0, get_aval(p).dtype)
        powers = np.arange(n - 1, 0, -1).astype(get_aval(p).dtype)
        p = uf.multiply(slice_along_axis(p, 0, 0, n - 1), powers)
    return p


def polyint(p, m=1, k=None):
    """The ``m``-th antiderivative of a polynomial, with integration constants ``k``."""
    p, = promote_dtypes_inexact(p)
    m = operator_index(m, "polyint: m")
    ks = np.zeros(m) if k is None else np.broadcast_to(np.asarray(k, dtype=np.float64), (m,))
    for i in range(m):
        n = get_aval(p).shape[0]
        divisors = np.arange(n, 0, -1).astype(get_aval(p).dtype)
        p = concatenate([uf.true_divide(p, divisors),
                         structural.full((1,), ks[i], get_aval(p).dtype)])
    return p


def vander(x, N=None, increasing=False):
    """The Vandermonde matrix: columns are powers of ``x`` (decreasing unless
    ``increasing``)."""
    x = to_array(x)
    _check_1d("vander", x)
    n = get_aval(x).shape[0] if N is None else operator_index(N, "vander: N")
    powers = np.arange(n)
    if not increasing:
        powers = powers[::-1]
    cols = [uf.power(x, int(k)) for k in powers]
    return stack(cols, axis=1) if cols else structural.full((get_aval(x).shape[0], 0), 0,
                                                            get_aval(x).dtype)


def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """Least-squares polynomial fit of degree ``deg`` (coefficients highest power first)."""
    if full or cov or w is not None:
        raise NotImplementedError("polyfit: full, cov and w are not supported")
    x, y = promote_dtypes_inexact(x, y)
    A = vander(x, operator_index(deg, "polyfit: deg") + 1)
    return linalg.lstsq(A, y, rcond=rcond)[0]


# ---- differences and interpolation -----------------------------------------------------------

def _edge_block(value, like, axis):
    value = to_array(value)
    shape = list(get_aval(like).shape)
    if get_aval(value).ndim == 0:
        shape[axis] = 1
        return broadcast_to(value, tuple(shape))
    return value


def diff(a, n=1, axis=-1, prepend=None, append=None):
    """The ``n``-th discrete difference along ``axis``.

        >>> diff(array([1, 4, 9, 16]))
        Array([3, 5, 7], dtype=int32)
    """
    a = to_array(a)
    n = operator_index(n, "diff: n")
    axis = canonicalize_axis(axis, get_aval(a).ndim)
    pieces = []
    if prepend is not None:
        pieces.append(_edge_block(prepend, a, axis))
    pieces.append(a)
    if append is not None:
        pieces.append(_edge_block(append, a, axis))
    if len(pieces) > 1:
        a = concatenate(pieces, axis=axis)
    for _ in range(n):
        size = get_aval(a).shape[axis]
        if size == 0:
            break
        hi = slice_along_axis(a, axis, 1, size)
        lo = slice_along_axis(a, axis, 0, size - 1)
        a = uf.not_equal(hi, lo) if _dtypes.is_bool(get_aval(a).dtype) else uf.subtract(hi, lo)
    return a


def ediff1d(ary, to_end=None, to_begin=None):
    """Differences between consecutive elements of the flattened array."""
    out = diff(ravel(ary))
    pieces = []
    if to_begin is not None:
        pieces.append(ravel(lax.convert_element_type(to_array(to_begin), get_aval(out).dtype)))
    pieces.append(out)
    if to_end is not None:
        pieces.append(ravel(lax.convert_element_type(to_array(to_end), get_aval(out).dtype)))
    return concatenate(pieces) if len(pieces) > 1 else out


def gradient(f, *varargs, axis=None, edge_order=None):
    """Second-order central differences inside, first-order at the edges (uniform scalar
    spacings only)."""
    if edge_order not in (None, 1):
        raise NotImplementedError("gradient: only edge_order=1 is supported")
    f, = promote_dtypes_inexact(f)
    ndim = get_aval(f).ndim
    axes = tuple(range(ndim)) if axis is None else (
        (canonicalize_axis(axis, ndim),) if np.ndim(axis) == 0 else
        tuple(canonicalize_axis(a, ndim) for a in axis))
    if not varargs:
        spacings = [1.0] * len(axes)
    elif len(varargs) == 1:
        spacings = [varargs[0]] * len(axes)
    else:
        spacings = list(varargs)
    outs = []
    for ax, h in zip(axes, spacings):
        if np.ndim(concrete_value(h) if concrete_value(h) is not None else 1) != 0:
            raise NotImplementedError("gradient: coordinate arrays are not supported, only "
                                      "scalar spacings")
        n = get_aval(f).shape[ax]
        if n < 2:
            raise ValueError("gradient: each differentiated axis needs at least 2 elements")
        first = uf.true_divide(uf.subtract(slice_along_axis(f, ax, 1, 2),
                                           slice_along_axis(f, ax, 0, 1)), h)
        last = uf.true_divide(uf.subtract(slice_along_axis(f, ax, n - 1, n),
                                          slice_along_axis(f, ax, n - 2, n - 1)), h)
        pieces = [first]
        if n > 2:
            pieces.append(uf.true_divide(uf.subtract(slice_along_axis(f, ax, 2, n),
                                                     slice_along_axis(f, ax, 0, n - 2)),
                                         uf.multiply(h, 2.0)))
        pieces.append(last)
        outs.append(concatenate(pieces, axis=ax))
    return outs[0] if len(outs) == 1 else outs


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """Integral of ``y`` by the trapezoidal rule (samples at ``x``, or spaced ``dx``)."""
    y, = promote_dtypes_inexact(y)
    axis = canonicalize_axis(axis, get_aval(y).ndim)
    n = get_aval(y).shape[axis]
    avg = uf.multiply(uf.add(slice_along_axis(y, axis, 1, n), slice_along_axis(y, axis, 0, n - 1)),
                      0.5)
    if x is None:
        return uf.multiply(sum_(avg, axis=axis), dx)
    x = to_array(x)
    if get_aval(x).ndim == 1:
        d = diff(x)
        shape = [1] * get_aval(y).ndim
        shape[axis] = get_aval(d).shape[0]
        d = structural.reshape(d, tuple(shape))
    else:
        d = diff(x, axis=axis)
    return sum_(uf.multiply(avg, d), axis=axis)


def interp(x, xp, fp, left=None, right=None, period=None):
    """Piecewise-linear interpolation of the points ``(xp, fp)`` (``xp`` increasing) at
    ``x``; outside the range, ``left``/``right`` (default: the end values).

        >>> interp(1.5, array([1.0, 2.0]), array([10.0, 20.0]))
        Array(15., dtype=float32)
    """
    x, xp, fp = promote_dtypes_inexact(x, xp, fp)
    _check_1d("interp", xp, fp)
    if get_aval(xp).shape != get_aval(fp).shape:
        raise ValueError("interp: xp and fp must have the same length")
    if period is not None:
        period = uf.absolute(period)
        x = uf.remainder(x, period)
        xp = uf.remainder(xp, period)
        order = argsort(xp)
        xp, fp = take(xp, order), take(fp, order)
        n0 = get_aval(xp).shape[0]
        xp = concatenate([uf.subtract(slice_along_axis(xp, 0, n0 - 1, n0), period), xp,
                          uf.add(slice_along_axis(xp, 0, 0, 1), period)])
        fp = concatenate([slice_along_axis(fp, 0, n0 - 1, n0), fp, slice_along_axis(fp, 0, 0, 1)])
    n = get_aval(xp).shape[0]
    i = uf.clip(searchsorted(xp, x, side="right"), 1, n - 1)
    x_lo, x_hi = take(xp, uf.subtract(i, 1), mode="clip"), take(xp, i, mode="clip")
    f_lo, f_hi = take(fp, uf.subtract(i, 1), mode="clip"), take(fp, i, mode="clip")
    dx = uf.subtract(x_hi, x_lo)
    flat = uf.less_equal(uf.absolute(dx), float(_dtypes.finfo(get_aval(dx).dtype).eps))
    slope = uf.true_divide(uf.subtract(f_hi, f_lo), uf.where(flat, 1.0, dx))
    f = uf.where(flat, f_hi, uf.add(f_lo, uf.multiply(uf.subtract(x, x_lo), slope)))
    if period is None:
        first_x, last_x = _coefficient(xp, 0), _coefficient(xp, n - 1)
        f = uf.where(uf.less(x, first_x), _coefficient(fp, 0) if left is None else left, f)
        f = uf.where(uf.greater(x, last_x), _coefficient(fp, n - 1) if right is None else right, f)
    return f


# ---- counting --------------------------------------------------------------------------------

def bincount(x, weights=None, minlength=0, *, length=None):
    """Number of occurrences (or summed ``weights``) of each non-negative integer in ``x``.
    Under a transform give ``length=`` (values at or beyond it are dropped).

        >>> bincount(array([0, 1, 1, 3]))
        Array([1, 2, 0, 1], dtype=int32)
    """
    x = to_array(x)
    if not _dtypes.is_integer(get_aval(x).dtype):
        raise TypeError(f"bincount: x must be an integer array, got {get_aval(x).dtype}")
    if get_aval(x).ndim != 1:
        raise ValueError("bincount: x must be 1-D")
    if length is None:
        value = concrete_value(x)
        if value is None:
            raise ConcretizationTypeError(
                "bincount: the output length depends on the values of a traced array; pass "
                "length= (a static int)")
        length = builtins.max(int(minlength), int(value.max()) + 1 if value.size else 0)
    length = operator_index(length, "bincount: length")
    # one scatter-add; negative values count into bin 0 and values past the end are dropped
    idx = uf.maximum(x, 0)
    if weights is None:
        ones = structural.full(get_aval(x).shape, 1, _dtypes.default_int_dtype())
        out = structural.full((length,), 0, _dtypes.default_int_dtype())
        return out.at[idx].add(ones, mode="drop")
    weights, = promote_dtypes(weights)
    out = structural.full((length,), 0, get_aval(weights).dtype)
    return out.at[idx].add(weights, mode="drop")


def histogram_bin_edges(a, bins=10, range=None, weights=None):  # noqa: A002
    """The bin edges :func:`histogram` uses."""
    a, = promote_dtypes_inexact(a)
    if np.ndim(bins) != 0 or hasattr(bins, "aval"):
        return to_array(bins)
    bins = operator_index(bins, "histogram: bins")
    if range is None:
        lo, hi = red.min(a), red.max(a)
    else:
        lo, hi = range
    lo, hi = promote_dtypes_inexact(lo, hi)
    # a degenerate range is widened by 0.5 each way, as NumPy does
    same = uf.equal(lo, hi)
    lo = uf.where(same, uf.subtract(lo, 0.5), lo)
    hi = uf.where(same, uf.add(hi, 0.5), hi)
    return lax.convert_element_type(linspace(lo, hi, bins + 1), get_aval(a).dtype)


def histogram(a, bins=10, range=None, weights=None, density=None):  # noqa: A002
    """Counts (or summed weights) of ``a`` in ``bins`` equal bins over ``range`` (or the
    given edges); the last bin includes its right edge. Returns ``(hist, bin_edges)``."""
    a = ravel(to_array(a))
    edges = histogram_bin_edges(a, bins, range)
    nb = get_aval(edges).shape[0] - 1
    a, edges = promote_dtypes_inexact(a, edges)
    idx = uf.subtract(searchsorted(edges, a, side="right"), 1)
    last = _coefficient(edges, nb)
    idx = uf.where(uf.equal(a, last), nb - 1, idx)
    inside = uf.logical_and(uf.greater_equal(idx, 0), uf.less(idx, nb))
    idx = uf.where(inside, idx, nb)
    if weights is None:
        w = lax.convert_element_type(inside, _dtypes.default_float_dtype()
                                     if density else _dtypes.default_int_dtype())
    else:
        w = uf.where(inside, ravel(weights), 0)
    counts = slice_along_axis(bincount(idx, w, length=nb + 1), 0, 0, nb)
    if density:
        widths = diff(edges)
        counts = uf.true_divide(uf.true_divide(counts, sum_(counts)), widths)
    return counts, edges


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None):
    """Covariance matrix of the variables in the rows (or columns, ``rowvar=False``)."""
    if fweights is not None or aweights is not None:
        raise NotImplementedError("cov: fweights and aweights are not supported")
    X, = promote_dtypes_inexact(m)
    X = atleast_2d(X)
    if not rowvar and get_aval(X).shape[0] != 1:
        X = structural.transpose(X, (1, 0))
    if y is not None:
        Y, = promote_dtypes_inexact(y)
        Y = atleast_2d(Y)
        if not rowvar and get_aval(Y).shape[0] != 1:
            Y = structural.transpose(Y, (1, 0))
        X, Y = promote_dtypes(X, Y)
        X = concatenate([X, Y], axis=0)
    n = get_aval(X).shape[1]
    ddof = (0 if bias else 1) if ddof is None else ddof
    centered = uf.subtract(X, mean(X, axis=1, keepdims=True))
    c = matmul(centered, uf.conjugate(structural.transpose(centered, (1, 0))))
    out = uf.true_divide(c, float(n - ddof))
    return structural.reshape(out, ()) if get_aval(out).shape == (1, 1) else out


def corrcoef(x, y=None, rowvar=True):
    """Pearson correlation coefficients (the covariance normalized by the std devs)."""
    c = cov(x, y, rowvar)
    if get_aval(c).ndim == 0:
        return uf.true_divide(c, c)
    d = uf.sqrt(uf.real(diagonal(c)))
    out = uf.true_divide(uf.true_divide(c, structural.expand_dims(d, (1,))),
                         structural.expand_dims(d, (0,)))
    return uf.clip(out, -1, 1) if not _dtypes.is_complex(get_aval(out).dtype) else out


# =============================================================================================
# Multi-dimensional histograms
# =============================================================================================

def _is_bin_count(b) -> builtins.bool:
    if isinstance(b, (int, np.integer)):
        return True
    if isinstance(b, (list, tuple, Tracer)):
        return False
    return np.ndim(b) == 0 and np.asarray(b).dtype.kind in "iu"


def histogramdd(sample, bins=10, range=None, weights=None, density=None):  # noqa: A002
    """Counts of the ``(N, D)`` points of ``sample`` in a ``D``-dimensional grid of bins.

    ``bins``: a count for every dimension, or one count or array of edges per dimension.
    ``range``: ``None``, or a ``(low, high)`` (or ``None``) per dimension. The last bin of
    each dimension includes its right edge; points outside are not counted. Returns
    ``(hist, [edges per dimension])``.

        >>> hist, edges = histogramdd(jnp.array([[0.0, 0.0], [1.0, 1.0], [1.0, 0.0]]), bins=2)
        >>> hist
        Array([[1, 0],
               [1, 1]], dtype=int32)
    """
    sample = asarray(sample)
    if sample.ndim != 2:
        raise ValueError(f"jnp.histogramdd: sample must be a 2-D array of shape (N, D), got "
                         f"shape {sample.shape}")
    num_points, num_dims = sample.shape
    if _is_bin_count(bins):
        bins = [bins] * num_dims
    if len(bins) != num_dims:
        raise ValueError(f"jnp.histogramdd: bins must give one entry per dimension ({num_dims})"
                         f", got {len(bins)}")
    if range is None:
        range = [None] * num_dims  # noqa: A001
    if len(range) != num_dims:
        raise ValueError(f"jnp.histogramdd: range must give one entry per dimension "
                         f"({num_dims}), got {len(range)}")
    edges, cells, inside = [], None, None
    for d in builtins.range(num_dims):
        column, count_or_edges = sample[:, d], bins[d]
        if _is_bin_count(count_or_edges):
            count_or_edges = int(count_or_edges)
        edge = histogram_bin_edges(column, count_or_edges, range[d])
        # compare in one inexact dtype, so integer edges or samples are not truncated
        common = result_type(edge, column, _dtypes.default_float_dtype())
        edge, column = edge.astype(common), column.astype(common)
        nbins = edge.shape[0] - 1
        position = searchsorted(edge, column, side="right") - 1
        # the right-most edge belongs to the last bin
        position = where(column == edge[-1], nbins - 1, position)
        ok = (position >= 0) & (position < nbins)
        cells = position if cells is None else cells * nbins + position
        inside = ok if inside is None else inside & ok
        edges.append(edge)
    shape = tuple(e.shape[0] - 1 for e in edges)
    total = int(np.prod(shape))
    # points outside the grid go to one extra cell that is cut off afterwards
    cells = where(inside, cells, total)
    if weights is None:
        counts_dtype = (_dtypes.default_float_dtype() if density
                        else _dtypes.default_int_dtype())
        w = inside.astype(counts_dtype)
    else:
        w = where(inside, ravel(_inexact_array("histogramdd", weights)), 0)
    hist = bincount(cells, w, length=total + 1)[:total].reshape(shape)
    if density:
        volume = ones((), edges[0].dtype)
        for d, e in enumerate(edges):
            width = diff(e).reshape((-1,) + (1,) * (num_dims - d - 1))
            volume = volume * width
        hist = hist / sum_(hist) / volume
    return hist, edges


def histogram2d(x, y, bins=10, range=None, weights=None, density=None):  # noqa: A002
    """Counts of the points ``(x[i], y[i])`` in a 2-D grid of bins: :func:`histogramdd` of
    ``stack([x, y], axis=1)``. ``bins`` is a count, a pair (counts or edges), or one array
    of edges for both axes. Returns ``(hist, xedges, yedges)``.

        >>> hist, xe, ye = histogram2d(jnp.array([0.0, 1.0]), jnp.array([0.0, 1.0]), bins=2)
        >>> hist
        Array([[1, 0],
               [0, 1]], dtype=int32)
    """
    x, y = asarray(x), asarray(y)
    try:
        count = len(bins)
    except TypeError:
        count = 1
    if count != 1 and count != 2:
        # one array of edges shared by both axes
        bins = [bins, bins]
    dtype = result_type(x, y)
    sample = stack([x.astype(dtype), y.astype(dtype)], axis=1)
    hist, (xedges, yedges) = histogramdd(sample, bins, range, weights, density)
    return hist, xedges, yedges


# =============================================================================================
# Polynomials from roots, polynomial division
# =============================================================================================

def _inexact_array(fname, x):
    if isinstance(x, (list, tuple)):
        x = asarray(x)
    x = asarray(x)
    if not _dtypes.is_inexact(x.dtype):
        x = x.astype(_dtypes.default_float_dtype())
    return x


def poly(seq_of_zeros):
    """Coefficients (highest power first, leading 1) of the monic polynomial with the given
    roots. A square matrix stands for its eigenvalues (the result is then complex).

        >>> poly(jnp.array([1.0, 2.0]))
        Array([ 1., -3.,  2.], dtype=float32)
    """
    roots = atleast_1d(_inexact_array("poly", seq_of_zeros))
    if roots.ndim == 2 and roots.shape[0] == roots.shape[1] and roots.shape[0] != 0:
        return _characteristic_polynomial(roots)
    if roots.ndim != 1:
        raise ValueError(f"jnp.poly: the input must be 1-D or a non-empty square 2-D array, "
                         f"got shape {roots.shape}")
    if roots.shape[0] == 0:
        return ones((), roots.dtype)
    coeffs = ones((1,), roots.dtype)
    zero = zeros((1,), roots.dtype)
    for i in range(roots.shape[0]):
        # multiply by (x - root): shift up one power, subtract root times the old polynomial
        coeffs = (concatenate([coeffs, zero])
                  - roots[i] * concatenate([zero, coeffs]))
    return coeffs


def _characteristic_polynomial(a):
    """Coefficients of ``det(x I - a)``, i.e. ``poly`` of the eigenvalues of ``a``, by the
    Faddeev-LeVerrier recurrence (traces of matrix products; no eigensolver needed). As in
    JAX, whose route goes through the (complex) eigenvalues, the result is complex."""
    n = a.shape[0]
    identity = eye(n, dtype=a.dtype)
    coeffs = [ones((), a.dtype)]
    m = zeros_like(a)
    for k in range(1, n + 1):
        # m_k = a m_{k-1} + c_{k-1} I and c_k = -trace(a m_k) / k
        m = a @ m + coeffs[-1] * identity
        coeffs.append(-trace(a @ m) / k)
    complex_dtype = result_type(a.dtype, np.complex64)
    return stack(coeffs).astype(complex_dtype)


def polydiv(u, v, *, trim_leading_zeros=False):
    """Quotient and remainder of dividing polynomial ``u`` by ``v`` (coefficients highest
    power first). To keep shapes static, the remainder has ``u``'s length (leading zeros
    kept) unless ``trim_leading_zeros=True``, which needs concrete values.

        >>> polydiv(jnp.array([1.0, -3.0, 2.0]), jnp.array([1.0, -1.0]))
        (Array([ 1., -2.], dtype=float32), Array([0., 0., 0.], dtype=float32))
    """
    u, v = _inexact_array("polydiv", u), _inexact_array("polydiv", v)
    dtype = result_type(u, v)
    u, v = u.astype(dtype), v.astype(dtype)
    if u.ndim != 1 or v.ndim != 1:
        raise ValueError(f"jnp.polydiv: both inputs must be 1-D, got shapes {u.shape} and "
                         f"{v.shape}")
    m, n = u.shape[0] - 1, v.shape[0] - 1
    inverse_lead = 1 / v[0]
    quotient = zeros((builtins.max(m - n + 1, 1),), dtype)
    remainder = u
    # long division: each step removes the current leading term of the remainder
    for k in range(m - n + 1):
        term = inverse_lead * remainder[k]
        quotient = quotient.at[k].set(term)
        remainder = remainder.at[k:k + n + 1].add(-term * v)
    if trim_leading_zeros:
        value = concrete_or_error(remainder, "jnp.polydiv",
                                  "Pass trim_leading_zeros=False under transformations.")
        # the cancelled terms are only zero up to rounding
        tolerance = np.sqrt(_dtypes.finfo(np.real(value).dtype).eps)
        big = np.flatnonzero(np.abs(value) > tolerance)
        start = int(big[0]) if big.size else value.shape[0]
        remainder = remainder[start:]
    return quotient, remainder


def unwrap(p, discont=None, axis: int = -1, period=2 * np.pi):
    """Unwrap a phase signal along ``axis``: jumps larger than ``discont`` (default
    ``period / 2``) are replaced by their equivalent modulo ``period``.

        >>> import functrans.numpy as jnp
        >>> jnp.unwrap(jnp.array([0.0, 6.0]))
        Array([ 0.      , -0.283185], dtype=float32)
    """
    p = _inexact(p)
    if p.ndim == 0:
        raise ValueError("jnp.unwrap: the input must have at least one dimension")
    axis = int(axis) % p.ndim
    if discont is None:
        discont = period / 2
    interval = period / 2
    step = diff(p, axis=axis)
    wrapped = mod(step + interval, period) - interval
    # a jump of exactly +period/2 stays positive (NumPy's convention)
    wrapped = where((wrapped == -interval) & (step > 0), interval, wrapped)
    correction = where(abs_(step) < discont, 0, wrapped - step)
    first = take(p, arange(1), axis=axis)
    rest = take(p, arange(1, p.shape[axis]), axis=axis)
    return concatenate([first, rest + cumsum(correction, axis=axis).astype(p.dtype)],
                       axis=axis)


# =============================================================================================
# Polynomial roots
# =============================================================================================

_ROOT_ITERATIONS = 80


def _polynomial_roots(p):
    """Roots of the polynomial with coefficients ``p`` (highest first, ``p[0] != 0``) by the
    Aberth-Ehrlich simultaneous iteration: each estimate takes a Newton step corrected by the
    repulsion of the other estimates, so all roots are found at once (cubic convergence for
    simple roots). A fixed number of steps keeps it traceable; converged roots stop moving
    because their Newton step is 0."""
    n = p.shape[0] - 1
    complex_dtype = _complex_of(p.dtype)
    if n < 1:
        return zeros((0,), complex_dtype)
    monic = (p / p[0]).astype(complex_dtype)
    derivative = monic[:-1] * arange(n, 0, -1).astype(complex_dtype)
    # start on a circle that encloses every root (Cauchy's bound), rotated off the axes so
    # that no start is symmetric to another under conjugation
    radius = 1 + max_(abs_(monic[1:]))
    angles = 2 * np.pi * np.arange(n) / n + 0.4
    start = (radius * asarray(np.cos(angles) + 1j * np.sin(angles), complex_dtype))
    off_diagonal = asarray(~np.eye(n, dtype=bool))

    def horner(coefficients, z):
        value = zeros_like(z)
        for c in coefficients:
            value = value * z + c
        return value

    def step(_, z):
        value, slope = horner(monic, z), horner(derivative, z)
        newton = where(value == 0, 0, value / where(slope == 0, 1, slope))
        gaps = z[:, None] - z[None, :]
        safe_gaps = where(off_diagonal & (gaps != 0), gaps, 1)
        repulsion = sum_(where(off_diagonal & (gaps != 0), 1 / safe_gaps, 0), axis=1)
        denominator = 1 - newton * repulsion
        return z - newton / where(denominator == 0, 1, denominator)

    return fori_loop(0, _ROOT_ITERATIONS, step, start)


def roots(p, *, strip_zeros: bool = True):
    """The roots of a polynomial with coefficients ``p`` (highest degree first), as complex
    numbers (found all at once by the Aberth-Ehrlich iteration, in no particular order).

    With ``strip_zeros=True`` (the default) leading zeros are dropped and trailing zeros
    become roots at 0, so ``p`` must be concrete. With ``strip_zeros=False`` the result always
    has ``len(p) - 1`` entries and each leading zero gives a NaN root instead. (The example
    rounds the roots: the iteration's last float32 digit depends on the CPU; see
    docs/compiler.md.)

        >>> import functrans.numpy as jnp
        >>> jnp.sort_complex(jnp.roots(jnp.array([1.0, -3.0, 2.0]))).round(5)
        Array([1.+0.j, 2.+0.j], dtype=complex64)
    """
    p = atleast_1d(_inexact(p))
    if p.ndim != 1:
        raise ValueError(f"jnp.roots: the coefficients must be one-dimensional, got shape "
                         f"{p.shape}")
    if strip_zeros:
        values = _concrete("roots", p, "p (with strip_zeros=True)")
        nonzero = np.flatnonzero(values)
        if nonzero.size == 0:
            return zeros((0,), _complex_of(p.dtype))
        first, last = int(nonzero[0]), int(nonzero[-1])
        found = _polynomial_roots(p[first:last + 1])
        # each trailing zero coefficient is a factor x, i.e. a root at 0
        trailing = zeros((p.shape[0] - 1 - last,), found.dtype)
        return concatenate([found, trailing])
    n = p.shape[0]
    if n < 2:
        return zeros((0,), _complex_of(p.dtype))
    leading = argmax(p != 0)
    leading = where(all_(p == 0), n, leading)
    # move the leading zeros to the end: they become roots at 0, which we then mark NaN
    shifted = roll(p, -leading)
    safe = shifted.at[0].set(where(shifted[0] == 0, 1, shifted[0]))
    found = _polynomial_roots(safe)
    # a polynomial with k trailing zeros has k roots at 0; mark those k as NaN
    order = argsort(abs_(found), stable=True)
    nan_slot = arange(n - 1) < leading
    nan_positions = zeros((n - 1,), bool).at[order].set(nan_slot)
    nan = array(complex(np.nan, np.nan), found.dtype)
    return where(nan_positions, nan, found)


def _complex_of(dtype):
    """The complex dtype with ``dtype``'s precision (the dtype of roots)."""
    return np.result_type(np.dtype(dtype), np.complex64)
