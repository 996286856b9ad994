"""More of the ``jax.numpy`` surface: index tricks (``r_``, ``c_``, ``mgrid``, ``ogrid``,
``s_``), window functions, index helpers (``*_indices_from``, ``mask_indices``), ``put``,
``trim_zeros``, ``poly``/``polydiv``, multi-dimensional histograms, ``matvec``/``vecmat``,
host-side creation from buffers, strings, iterables and files, saving and loading through
NumPy, printing, DLPack import, and the small-float and small-int dtypes of ``ml_dtypes``.

Functions whose output *shape* depends on values (``trim_zeros``, the index tricks' bounds)
need concrete values; everything else is written with public ``functrans.numpy`` functions,
so it traces, differentiates and batches like them.

    >>> import functrans.numpy as jnp
    >>> jnp.r_[1:4, 0, jnp.array([7, 8])]
    Array([1, 2, 3, 0, 7, 8], dtype=int32)
"""
from __future__ import annotations

import builtins
import operator

import ml_dtypes
import numpy as np

import functrans.numpy as jnp
from functrans import _dtypes
from functrans.core import Tracer
from functrans.numpy._promotion import concrete_or_error
from functrans.numpy._scalar_types import _scalar_type, bool_
from functrans._array import Array
from functrans._api import device_put

__all__ = [
    "bool", "ComplexWarning",
    "c_", "r_", "s_", "index_exp", "mgrid", "ogrid",
    "bartlett", "blackman", "hamming", "hanning", "kaiser",
    "diag_indices_from", "tril_indices_from", "triu_indices_from", "mask_indices",
    "put", "trim_zeros", "poly", "polydiv", "histogram2d", "histogramdd", "matvec", "vecmat",
    "frombuffer", "fromstring", "fromiter", "fromfile", "save", "load", "savez",
    "array_repr", "array_str", "printoptions", "get_printoptions", "set_printoptions",
    "from_dlpack",
]


def _static_int(fname, value, what) -> int:
    """A Python int from a concrete integer-like ``value`` (floats are truncated, as JAX
    does for window lengths); traced values get an error naming ``fname``."""
    if isinstance(value, Tracer):
        value = concrete_or_error(value, f"jnp.{fname}",
                                  f"{what} must be a static integer (it sets the output shape).")
    try:
        return operator.index(value)
    except TypeError:
        scalar = np.asarray(value)
        if scalar.ndim == 0 and scalar.dtype.kind in "iuf":
            return int(scalar)
        raise TypeError(f"jnp.{fname}: {what} must be an integer, got {value!r}") from None


# =============================================================================================
# Scalar types and warnings
# =============================================================================================

# ``jnp.bool`` is the NumPy 2 name of ``jnp.bool_`` (the very same scalar type).
bool = bool_  # noqa: A001 - NumPy's name

ComplexWarning = np.exceptions.ComplexWarning

# The narrow floating-point and integer types of ml_dtypes, as far as the installed version
# has them. Arrays of these dtypes can be created, indexed, reshaped and converted to and from
# the standard dtypes; arithmetic on them is not supported (convert with ``.astype`` first).
_ML_DTYPE_NAMES = (
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz",
    "float8_e3m4", "float8_e4m3", "float8_e8m0fnu", "float4_e2m1fn", "float6_e2m3fn",
    "float6_e3m2fn", "int4", "uint4", "int2", "uint2", "int1", "uint1",
)
for _name in _ML_DTYPE_NAMES:
    if hasattr(ml_dtypes, _name):
        globals()[_name] = _scalar_type(_name, getattr(ml_dtypes, _name))
        __all__.append(_name)
del _name


# =============================================================================================
# Index tricks: s_, index_exp, mgrid, ogrid, r_, c_
# =============================================================================================

# Index expressions are plain Python values (tuples of slices), so NumPy's helpers serve.
s_ = np.s_
index_exp = np.index_exp


def _concrete_scalar(value, where):
    if isinstance(value, Tracer):
        value = concrete_or_error(value, where, "Slice bounds and steps must be static.")
    return np.asarray(value).item() if hasattr(value, "shape") else value


def _slice_values(s: slice, where) -> np.ndarray:
    """The 1-D host array a slice of an index trick stands for: ``arange(start, stop, step)``,
    or ``num`` evenly spaced points from ``start`` to ``stop`` inclusive when the step is an
    imaginary number ``num * 1j``."""
    start = _concrete_scalar(s.start, where)
    stop = _concrete_scalar(s.stop, where)
    step = _concrete_scalar(s.step, where)
    start = 0 if start is None else start
    step = 1 if step is None else step
    if isinstance(step, complex):
        return np.linspace(start, stop, int(builtins.abs(step)))
    return np.arange(start, stop, step)


def _host_to_array(values: np.ndarray):
    """A host array as a functrans Array of the default int or float dtype."""
    if values.dtype.kind in "iu":
        return jnp.asarray(values, dtype=_dtypes.default_int_dtype())
    return jnp.asarray(values, dtype=_dtypes.default_float_dtype())


class _Grid:
    """``mgrid[...]`` (dense) and ``ogrid[...]`` (open) grids from slices."""

    def __init__(self, sparse: builtins.bool, name: str):
        self.sparse, self.name = sparse, name

    def __getitem__(self, key):
        where = f"jnp.{self.name}"
        if isinstance(key, slice):
            return _host_to_array(_slice_values(key, where))
        if not isinstance(key, tuple) or not all(isinstance(k, slice) for k in key):
            raise TypeError(f"{where}[...] takes slices, e.g. {self.name}[0:3, 0:1:5j]; got "
                            f"{key!r}")
        axes = [_slice_values(k, where) for k in key]
        # every axis takes the common dtype, as NumPy's grids do
        dtype = np.result_type(*axes) if axes else np.dtype(int)
        axes = [_host_to_array(a.astype(dtype)) for a in axes]
        if self.sparse:
            return list(jnp.meshgrid(*axes, indexing="ij", sparse=True))
        if not axes:
            return jnp.zeros((0,), _host_to_array(np.zeros(0, dtype)).dtype)
        return jnp.stack(jnp.meshgrid(*axes, indexing="ij"), axis=0)

    def __repr__(self):
        return f"functrans.numpy.{self.name}"


mgrid = _Grid(sparse=False, name="mgrid")
ogrid = _Grid(sparse=True, name="ogrid")


class _Concatenator:
    """``r_[...]`` and ``c_[...]``: concatenate slices, scalars and arrays along an axis.

    A leading string sets the layout: ``"axis"``, ``"axis,ndmin"`` or
    ``"axis,ndmin,trans1d"`` (pieces are raised to ``ndmin`` dimensions, a 1-D piece placed
    along axis ``trans1d``), or ``"r"``/``"c"`` for a 2-D row/column result.
    """

    def __init__(self, axis, ndmin, trans1d, name):
        self.axis, self.ndmin, self.trans1d, self.name = axis, ndmin, trans1d, name

    def _parse_directive(self, text):
        if text in ("r", "c"):
            return self.axis, self.ndmin, self.trans1d, text
        try:
            numbers = [int(part) for part in text.split(",")]
        except ValueError:
            raise ValueError(f"jnp.{self.name}: unknown directive {text!r}; expected 'r', "
                             f"'c' or 'axis[,ndmin[,trans1d]]'") from None
        if len(numbers) > 3:
            raise ValueError(f"jnp.{self.name}: a directive has at most three numbers, got "
                             f"{text!r}")
        axis, ndmin, trans1d = numbers + [self.ndmin, self.trans1d][len(numbers) - 1:]
        return axis, ndmin, trans1d, None

    @staticmethod
    def _raise_dims(piece, ndmin, trans1d):
        """``piece`` with leading axes of 1 up to ``ndmin``; with ``trans1d`` its own axes
        are moved to start at position ``trans1d`` instead of the end."""
        original = piece.ndim
        if original >= ndmin:
            return piece
        piece = jnp.reshape(piece, (1,) * (ndmin - original) + piece.shape)
        if trans1d != -1:
            added = ndmin - original
            start = trans1d + added + 1 if trans1d < 0 else trans1d
            order = list(range(ndmin))
            # the original axes (now last) go to `start`, the added ones fill the rest
            order = order[:start] + order[added:] + order[start:added]
            piece = jnp.transpose(piece, order)
        return piece

    def __getitem__(self, key):
        items = key if isinstance(key, tuple) else (key,)
        axis, ndmin, trans1d, matrix = self.axis, self.ndmin, self.trans1d, None
        if items and isinstance(items[0], str):
            axis, ndmin, trans1d, matrix = self._parse_directive(items[0])
            items = items[1:]
        pieces = []
        for item in items:
            if isinstance(item, str):
                raise ValueError(f"jnp.{self.name}: a directive string may only come first")
            if isinstance(item, slice):
                piece = _host_to_array(_slice_values(item, f"jnp.{self.name}"))
            else:
                piece = jnp.asarray(item)
                if piece.ndim == 0:
                    piece = jnp.reshape(piece, (1,))
            pieces.append(self._raise_dims(piece, ndmin, trans1d))
        if not pieces:
            return jnp.zeros((0,), _dtypes.default_float_dtype())
        out = jnp.concatenate(pieces, axis=axis)
        if matrix is not None:
            out = jnp.atleast_2d(out)
            if matrix == "c":
                out = out.T
        return out

    def __len__(self):
        return 0

    def __repr__(self):
        return f"functrans.numpy.{self.name}"


r_ = _Concatenator(axis=0, ndmin=1, trans1d=-1, name="r_")
c_ = _Concatenator(axis=-1, ndmin=2, trans1d=0, name="c_")


# =============================================================================================
# Window functions
# =============================================================================================

def _window(name, M, formula):
    """A symmetric window of length ``M`` from ``formula(n, M)`` over host float64 points,
    in the default float dtype (empty for ``M < 1``, ``[1.]`` for ``M == 1``)."""
    M = _static_int(name, M, "M")
    dtype = _dtypes.default_float_dtype()
    if M < 1:
        return jnp.zeros((0,), dtype)
    if M == 1:
        return jnp.ones((1,), dtype)
    n = np.arange(M, dtype=np.float64)
    return jnp.asarray(formula(n, M), dtype=dtype)


def bartlett(M):
    """The Bartlett (triangular) window of length ``M``: rises linearly from 0 to 1 and back.

        >>> bartlett(5)
        Array([0. , 0.5, 1. , 0.5, 0. ], dtype=float32)
    """
    return _window("bartlett", M, lambda n, M: 1 - np.abs(2 * n / (M - 1) - 1))


def blackman(M):
    """The Blackman window of length ``M``:
    ``0.42 - 0.5 cos(2 pi n / (M-1)) + 0.08 cos(4 pi n / (M-1))``.

        >>> blackman(3)
        Array([-1.3877788e-17,  1.0000000e+00, -1.3877788e-17], dtype=float32)
    """
    return _window("blackman", M, lambda n, M: 0.42 - 0.5 * np.cos(2 * np.pi * n / (M - 1))
                   + 0.08 * np.cos(4 * np.pi * n / (M - 1)))


def hamming(M):
    """The Hamming window of length ``M``: ``0.54 - 0.46 cos(2 pi n / (M-1))``.

        >>> hamming(3)
        Array([0.08, 1.  , 0.08], dtype=float32)
    """
    return _window("hamming", M, lambda n, M: 0.54 - 0.46 * np.cos(2 * np.pi * n / (M - 1)))


def hanning(M):
    """The Hann window of length ``M``: ``0.5 - 0.5 cos(2 pi n / (M-1))``.

        >>> hanning(3)
        Array([0., 1., 0.], dtype=float32)
    """
    return _window("hanning", M, lambda n, M: 0.5 - 0.5 * np.cos(2 * np.pi * n / (M - 1)))


def kaiser(M, beta):
    """The Kaiser window of length ``M`` and shape ``beta`` (may be traced):
    ``i0(beta * sqrt(1 - (2n/(M-1) - 1)**2)) / i0(beta)``.

        >>> kaiser(3, 2.0)
        Array([0.43867633, 1.        , 0.43867633], dtype=float32)
    """
    M = _static_int("kaiser", M, "M")
    dtype = _dtypes.default_float_dtype()
    if M < 1:
        return jnp.zeros((0,), dtype)
    beta = jnp.asarray(beta, dtype=dtype)
    if M == 1:
        return jnp.ones((1,), dtype)
    n = np.arange(M, dtype=np.float64)
    ratio = jnp.asarray(np.sqrt(np.maximum(0.0, 1 - (2 * n / (M - 1) - 1) ** 2)), dtype=dtype)
    return jnp.i0(beta * ratio) / jnp.i0(beta)


# =============================================================================================
# Index helpers
# =============================================================================================

def _shape_of(fname, arr):
    shape = getattr(arr, "shape", None)
    return tuple(shape) if shape is not None else np.shape(arr)


def diag_indices_from(arr):
    """Indices of the main diagonal of ``arr`` (all of whose sides must be equal).

        >>> diag_indices_from(jnp.ones((2, 2)))
        (Array([0, 1], dtype=int32), Array([0, 1], dtype=int32))
    """
    shape = _shape_of("diag_indices_from", arr)
    if len(shape) < 2:
        raise ValueError(f"jnp.diag_indices_from: the input must be at least 2-D, got shape "
                         f"{shape}")
    if len(set(shape)) != 1:
        raise ValueError(f"jnp.diag_indices_from: all dimensions of the input must be equal, "
                         f"got shape {shape}")
    return jnp.diag_indices(shape[0], len(shape))


def _triangle_indices_from(fname, arr, k, lower):
    shape = _shape_of(fname, arr)
    if len(shape) != 2:
        raise ValueError(f"jnp.{fname}: only 2-D inputs are accepted, got shape {shape}")
    k = _static_int(fname, k, "k")
    make = jnp.tril_indices if lower else jnp.triu_indices
    return make(shape[0], k=k, m=shape[1])


def tril_indices_from(arr, k=0):
    """Row and column indices of the lower triangle (on and below diagonal ``k``) of the
    2-D ``arr``.

        >>> tril_indices_from(jnp.ones((2, 2)))
        (Array([0, 1, 1], dtype=int32), Array([0, 0, 1], dtype=int32))
    """
    return _triangle_indices_from("tril_indices_from", arr, k, lower=True)


def triu_indices_from(arr, k=0):
    """Row and column indices of the upper triangle (on and above diagonal ``k``) of the
    2-D ``arr``.

        >>> triu_indices_from(jnp.ones((2, 2)))
        (Array([0, 0, 1], dtype=int32), Array([0, 1, 1], dtype=int32))
    """
    return _triangle_indices_from("triu_indices_from", arr, k, lower=False)


def mask_indices(n, mask_func, k=0, *, size=None):
    """Indices ``(rows, cols)`` where ``mask_func(ones((n, n)), k)`` is non-zero (e.g.
    ``mask_func=jnp.triu``). ``size`` pads (with 0) or truncates to a static length.

        >>> mask_indices(3, jnp.triu, 1)
        (Array([0, 0, 1], dtype=int32), Array([1, 2, 2], dtype=int32))
    """
    n = _static_int("mask_indices", n, "n")
    mask = mask_func(jnp.ones((n, n), dtype=_dtypes.default_int_dtype()), k)
    return jnp.nonzero(mask, size=size)


# =============================================================================================
# put, trim_zeros
# =============================================================================================

def put(a, ind, v, mode=None, *, inplace=True):
    """A copy of ``a`` with ``v`` written at the flat positions ``ind`` (``v`` is repeated to
    the number of positions). functrans arrays are immutable, so ``inplace=False`` is
    required.

    ``mode``: ``None`` (negative positions count from the end, out-of-range ones are
    skipped), ``"clip"`` (positions clamped into range) or ``"wrap"`` (taken modulo the
    size). ``"raise"`` would need a data-dependent error and is not supported. When a
    position repeats, the last value written to it wins.

        >>> put(jnp.zeros(4), jnp.array([0, 2]), jnp.array([5.0, 6.0]), inplace=False)
        Array([5., 0., 6., 0.], dtype=float32)
    """
    if inplace:
        raise ValueError("jnp.put cannot modify arrays in place (functrans arrays are "
                         "immutable); pass inplace=False to get the updated array back.")
    for position, arg in enumerate((a, ind, v)):
        if isinstance(arg, (list, tuple)):
            raise TypeError(f"jnp.put requires array or scalar arguments, got a "
                            f"{type(arg).__name__} at position {position}")
    a = jnp.asarray(a)
    ind = jnp.ravel(jnp.asarray(ind))
    if not (_dtypes.is_integer(ind.dtype)):
        raise TypeError(f"jnp.put: indices must be integers, got {ind.dtype}")
    values = jnp.ravel(jnp.asarray(v))
    if ind.size == 0:
        return a
    if values.size == 0:
        raise ValueError("jnp.put: cannot write an empty array of values to non-empty indices")
    values = jnp.tile(values, -(-ind.size // values.size))[:ind.size]
    flat = jnp.ravel(a)
    if mode is None or mode in ("fill", "drop"):
        out = flat.at[ind].set(values, mode="drop")
    elif mode == "clip":
        out = flat.at[jnp.clip(ind, 0, flat.size - 1)].set(values)
    elif mode == "wrap":
        out = flat.at[jnp.mod(ind, flat.size)].set(values)
    elif mode == "raise":
        raise NotImplementedError("jnp.put: mode='raise' is not supported (it needs an error "
                                  "that depends on the values); use 'clip' or 'wrap'")
    else:
        raise ValueError(f"jnp.put: unknown mode {mode!r}; expected None, 'clip' or 'wrap'")
    return jnp.reshape(out, a.shape)


def trim_zeros(filt, trim="fb", axis=None):
    """``filt`` without its leading (``"f"`` in ``trim``) and/or trailing (``"b"``) zeros
    along the given axes (default: every axis; a hyperplane is trimmed only if all of it is
    zero). The result's shape depends on the values, so ``filt`` must be concrete.

        >>> trim_zeros(jnp.array([0, 0, 1, 2, 0, 3, 0]))
        Array([1, 2, 0, 3], dtype=int32)
    """
    arr = jnp.asarray(filt)
    value = concrete_or_error(arr, "jnp.trim_zeros",
                              "Call it outside jit, or slice with static bounds instead.")
    if arr.ndim == 0:
        raise ValueError("jnp.trim_zeros: the input must be at least 1-D")
    trim = trim.lower()
    axes = range(arr.ndim) if axis is None else (
        (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis))
    axes = sorted({int(ax) % arr.ndim for ax in axes})
    nonzero = value != 0
    index = [slice(None)] * arr.ndim
    for ax in axes:
        others = tuple(d for d in range(arr.ndim) if d != ax)
        hit = np.flatnonzero(nonzero.any(axis=others) if others else nonzero)
        if hit.size == 0:
            # everything along this axis is zero: nothing survives
            index[ax] = slice(0, 0)
            continue
        start = int(hit[0]) if "f" in trim else 0
        stop = int(hit[-1]) + 1 if "b" in trim else arr.shape[ax]
        index[ax] = slice(start, stop)
    return arr[tuple(index)]


# =============================================================================================
# Polynomials from roots, polynomial division
# =============================================================================================

def _inexact_array(fname, x):
    if isinstance(x, (list, tuple)):
        x = jnp.asarray(x)
    x = jnp.asarray(x)
    if not _dtypes.is_inexact(x.dtype):
        x = x.astype(_dtypes.default_float_dtype())
    return x


def poly(seq_of_zeros):
    """Coefficients (highest power first, leading 1) of the monic polynomial with the given
    roots. A square matrix stands for its eigenvalues (the result is then complex).

        >>> poly(jnp.array([1.0, 2.0]))
        Array([ 1., -3.,  2.], dtype=float32)
    """
    roots = jnp.atleast_1d(_inexact_array("poly", seq_of_zeros))
    if roots.ndim == 2 and roots.shape[0] == roots.shape[1] and roots.shape[0] != 0:
        return _characteristic_polynomial(roots)
    if roots.ndim != 1:
        raise ValueError(f"jnp.poly: the input must be 1-D or a non-empty square 2-D array, "
                         f"got shape {roots.shape}")
    if roots.shape[0] == 0:
        return jnp.ones((), roots.dtype)
    coeffs = jnp.ones((1,), roots.dtype)
    zero = jnp.zeros((1,), roots.dtype)
    for i in range(roots.shape[0]):
        # multiply by (x - root): shift up one power, subtract root times the old polynomial
        coeffs = (jnp.concatenate([coeffs, zero])
                  - roots[i] * jnp.concatenate([zero, coeffs]))
    return coeffs


def _characteristic_polynomial(a):
    """Coefficients of ``det(x I - a)``, i.e. ``poly`` of the eigenvalues of ``a``, by the
    Faddeev-LeVerrier recurrence (traces of matrix products; no eigensolver needed). As in
    JAX, whose route goes through the (complex) eigenvalues, the result is complex."""
    n = a.shape[0]
    identity = jnp.eye(n, dtype=a.dtype)
    coeffs = [jnp.ones((), a.dtype)]
    m = jnp.zeros_like(a)
    for k in range(1, n + 1):
        # m_k = a m_{k-1} + c_{k-1} I and c_k = -trace(a m_k) / k
        m = a @ m + coeffs[-1] * identity
        coeffs.append(-jnp.trace(a @ m) / k)
    complex_dtype = jnp.result_type(a.dtype, np.complex64)
    return jnp.stack(coeffs).astype(complex_dtype)


def polydiv(u, v, *, trim_leading_zeros=False):
    """Quotient and remainder of dividing polynomial ``u`` by ``v`` (coefficients highest
    power first). To keep shapes static, the remainder has ``u``'s length (leading zeros
    kept) unless ``trim_leading_zeros=True``, which needs concrete values.

        >>> polydiv(jnp.array([1.0, -3.0, 2.0]), jnp.array([1.0, -1.0]))
        (Array([ 1., -2.], dtype=float32), Array([0., 0., 0.], dtype=float32))
    """
    u, v = _inexact_array("polydiv", u), _inexact_array("polydiv", v)
    dtype = jnp.result_type(u, v)
    u, v = u.astype(dtype), v.astype(dtype)
    if u.ndim != 1 or v.ndim != 1:
        raise ValueError(f"jnp.polydiv: both inputs must be 1-D, got shapes {u.shape} and "
                         f"{v.shape}")
    m, n = u.shape[0] - 1, v.shape[0] - 1
    inverse_lead = 1 / v[0]
    quotient = jnp.zeros((builtins.max(m - n + 1, 1),), dtype)
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
    sample = jnp.asarray(sample)
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
        edge = jnp.histogram_bin_edges(column, count_or_edges, range[d])
        # compare in one inexact dtype, so integer edges or samples are not truncated
        common = jnp.result_type(edge, column, _dtypes.default_float_dtype())
        edge, column = edge.astype(common), column.astype(common)
        nbins = edge.shape[0] - 1
        position = jnp.searchsorted(edge, column, side="right") - 1
        # the right-most edge belongs to the last bin
        position = jnp.where(column == edge[-1], nbins - 1, position)
        ok = (position >= 0) & (position < nbins)
        cells = position if cells is None else cells * nbins + position
        inside = ok if inside is None else inside & ok
        edges.append(edge)
    shape = tuple(e.shape[0] - 1 for e in edges)
    total = int(np.prod(shape))
    # points outside the grid go to one extra cell that is cut off afterwards
    cells = jnp.where(inside, cells, total)
    if weights is None:
        counts_dtype = (_dtypes.default_float_dtype() if density
                        else _dtypes.default_int_dtype())
        w = inside.astype(counts_dtype)
    else:
        w = jnp.where(inside, jnp.ravel(_inexact_array("histogramdd", weights)), 0)
    hist = jnp.bincount(cells, w, length=total + 1)[:total].reshape(shape)
    if density:
        volume = jnp.ones((), edges[0].dtype)
        for d, e in enumerate(edges):
            width = jnp.diff(e).reshape((-1,) + (1,) * (num_dims - d - 1))
            volume = volume * width
        hist = hist / jnp.sum(hist) / volume
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
    x, y = jnp.asarray(x), jnp.asarray(y)
    try:
        count = len(bins)
    except TypeError:
        count = 1
    if count != 1 and count != 2:
        # one array of edges shared by both axes
        bins = [bins, bins]
    dtype = jnp.result_type(x, y)
    sample = jnp.stack([x.astype(dtype), y.astype(dtype)], axis=1)
    hist, (xedges, yedges) = histogramdd(sample, bins, range, weights, density)
    return hist, xedges, yedges


# =============================================================================================
# matvec, vecmat
# =============================================================================================

def matvec(x1, x2, /):
    """Batched matrix-vector product: ``x1`` of shape ``(..., m, n)`` times ``x2`` of shape
    ``(..., n)`` gives ``(..., m)`` (batch axes broadcast).

        >>> matvec(jnp.array([[1.0, 2.0], [3.0, 4.0]]), jnp.array([1.0, 1.0]))
        Array([3., 7.], dtype=float32)
    """
    x1, x2 = jnp.asarray(x1), jnp.asarray(x2)
    if x1.ndim < 2 or x2.ndim < 1:
        raise ValueError(f"jnp.matvec: needs a matrix (..., m, n) and a vector (..., n), got "
                         f"shapes {x1.shape} and {x2.shape}")
    if x1.shape[-1] != x2.shape[-1]:
        raise ValueError(f"jnp.matvec: the contracted sizes differ: x1 has shape {x1.shape} "
                         f"and x2 has shape {x2.shape}")
    return jnp.matmul(x1, x2[..., None])[..., 0]


def vecmat(x1, x2, /):
    """Batched vector-matrix product with the vector conjugated: ``conj(x1)`` of shape
    ``(..., n)`` times ``x2`` of shape ``(..., n, m)`` gives ``(..., m)``.

        >>> vecmat(jnp.array([1.0, 1.0]), jnp.array([[1.0, 2.0], [3.0, 4.0]]))
        Array([4., 6.], dtype=float32)
    """
    x1, x2 = jnp.asarray(x1), jnp.asarray(x2)
    if x1.ndim < 1 or x2.ndim < 2:
        raise ValueError(f"jnp.vecmat: needs a vector (..., n) and a matrix (..., n, m), got "
                         f"shapes {x1.shape} and {x2.shape}")
    if x1.shape[-1] != x2.shape[-2]:
        raise ValueError(f"jnp.vecmat: the contracted sizes differ: x1 has shape {x1.shape} "
                         f"and x2 has shape {x2.shape}")
    return jnp.matmul(jnp.conj(x1)[..., None, :], x2)[..., 0, :]


# =============================================================================================
# Host-side creation, saving and loading
# =============================================================================================
# These read bytes, text, iterables or files on the host at call time (at trace time under
# jit, where the result is a constant), then convert as jnp.asarray does: 64-bit types are
# narrowed unless x64 is enabled.

def frombuffer(buffer, dtype=float, count=-1, offset=0):
    """A 1-D array of the bytes in ``buffer`` read as ``dtype`` (``count`` items, or all,
    starting at byte ``offset``).

        >>> frombuffer(b"\\x01\\x02\\x03", dtype=jnp.uint8)
        Array([1, 2, 3], dtype=uint8)
    """
    return jnp.asarray(np.frombuffer(buffer, dtype=np.dtype(dtype), count=count,
                                     offset=offset))


def fromstring(string, dtype=float, count=-1, *, sep):
    """A 1-D array of the numbers in the text ``string``, separated by ``sep``.

        >>> fromstring("1 2 3", dtype=int, sep=" ")
        Array([1, 2, 3], dtype=int32)
    """
    return jnp.asarray(np.fromstring(string, dtype=np.dtype(dtype), count=count, sep=sep))


def fromiter(iterable, dtype, count=-1):
    """A 1-D array of the values of ``iterable`` (consumed on the host when called).

        >>> fromiter(range(3), dtype=float)
        Array([0., 1., 2.], dtype=float32)
    """
    return jnp.asarray(np.fromiter(iterable, dtype=np.dtype(dtype), count=count))


def fromfile(file, dtype=float, count=-1, sep="", offset=0):
    """A 1-D array of the data in ``file`` (binary, or text when ``sep`` is given), read on
    the host when called."""
    return jnp.asarray(np.fromfile(file, dtype=np.dtype(dtype), count=count, sep=sep,
                                   offset=offset))


def save(file, arr, allow_pickle=True):
    """Save one array to a ``.npy`` file (through ``numpy.save``)."""
    np.save(file, np.asarray(arr), allow_pickle=allow_pickle)


def savez(file, *args, allow_pickle=True, **kwds):
    """Save several arrays to an uncompressed ``.npz`` archive (through ``numpy.savez``)."""
    np.savez(file, *(np.asarray(a) for a in args), allow_pickle=allow_pickle,
             **{k: np.asarray(v) for k, v in kwds.items()})


def load(file, *args, **kwargs):
    """Load a ``.npy`` file as an Array (arguments as ``numpy.load``); ``.npz`` archives
    come back as NumPy's lazy archive object. bfloat16 data, which NumPy stores as 2-byte
    opaque records, is recognized and restored.

        >>> import io
        >>> f = io.BytesIO()
        >>> save(f, jnp.array([1, 2], dtype=jnp.bfloat16))
        >>> _ = f.seek(0)
        >>> load(f)
        Array([1, 2], dtype=bfloat16)
    """
    out = np.load(file, *args, **kwargs)
    if not isinstance(out, np.ndarray):
        return out
    if out.dtype == np.dtype("V2"):
        out = out.view(_dtypes.bfloat16)
    try:
        return jnp.asarray(out)
    except TypeError:
        return out  # a dtype arrays cannot hold (e.g. object): hand back NumPy's array


# =============================================================================================
# Printing and DLPack
# =============================================================================================

# Arrays print through NumPy, so NumPy's print options govern them.
printoptions = np.printoptions
get_printoptions = np.get_printoptions
set_printoptions = np.set_printoptions


def array_repr(arr, max_line_width=None, precision=None, suppress_small=None):
    """The ``repr`` of an array with the given print options, e.g. ``Array([1., 2.],
    dtype=float32)`` (NumPy arrays print as NumPy prints them).

        >>> array_repr(jnp.array([1.0, 2.5]), precision=1)
        'Array([1. , 2.5], dtype=float32)'
    """
    if not isinstance(arr, Array):
        return np.array_repr(np.asarray(arr), max_line_width, precision, suppress_small)
    with np.printoptions(**{k: v for k, v in (("linewidth", max_line_width),
                                               ("precision", precision),
                                               ("suppress", suppress_small))
                            if v is not None}):
        return repr(arr)


def array_str(a, max_line_width=None, precision=None, suppress_small=None):
    """The ``str`` of an array (its values only) with the given print options.

        >>> array_str(jnp.array([1.0, 2.5]))
        '[1.  2.5]'
    """
    return np.array_str(np.asarray(a), max_line_width, precision, suppress_small)


def from_dlpack(x, /, *, device=None, copy=None):
    """An Array from any object with ``__dlpack__`` on the host (a NumPy array, a PyTorch
    CPU tensor, ...). The data are copied unless ``copy=False``: functrans arrays are
    immutable, and a shared buffer could change under them.

        >>> from_dlpack(np.arange(3))
        Array([0, 1, 2], dtype=int32)
    """
    host = np.from_dlpack(x)
    if copy is not False:
        host = np.array(host, copy=True)
    out = jnp.asarray(host)
    if device is not None:
        out = device_put(out, device)
    return out
