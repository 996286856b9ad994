"""Array creation: asarray, array, zeros, ones, full, *_like, arange, linspace, eye, tri,
diag, meshgrid, indices."""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans._array import Array
from functrans.core import ConcretizationTypeError, Tracer, canonicalize_shape, get_aval
# asarray, array and iota are the lowest numpy module's, which every other one builds on
from functrans.numpy._promotion import (_canonical, _static_int, array, asarray,  # noqa: F401
                                        broadcast_shapes, broadcast_to_shape,
                                        canonicalize_axis, concrete_value, iota,
                                        operator_index, promote_dtypes_inexact, to_array)
from functrans.primitives import elementwise, structural
from functrans.numpy import _ufuncs as uf
from functrans.numpy._padding import pad
from functrans.numpy._shape import diagonal, moveaxis, stack
from functrans.numpy._ufuncs import power
from functrans.numpy._sorting import nonzero


def full(shape, fill_value, dtype=None):
    """An array of ``shape`` filled with ``fill_value`` (a scalar, or an array that broadcasts
    to ``shape``).

    A scalar converts to ``dtype`` as ``lax.convert_element_type`` converts it (as in JAX,
    ``full(2, 300, dtype=uint8)`` is ``[44, 44]``).

        >>> full(2, 7)
        Array([7, 7], dtype=int32, weak_type=True)
    """
    dtype = _canonical(dtype, "full")
    shape = canonicalize_shape(shape)
    if not _is_scalar(fill_value):
        return broadcast_to_shape(asarray(fill_value, dtype), shape)
    if dtype is None:
        dtype, weak = _dtypes.dtype_and_weak(fill_value)
    else:
        weak = False
    return structural.full(shape, fill_value, dtype, weak_type=weak)


def _is_scalar(value) -> bool:
    """Whether ``value`` has no axes (a Python scalar's value is not checked here)."""
    if _dtypes.is_python_scalar(value):
        return True
    return not isinstance(value, (list, tuple)) and get_aval(value).ndim == 0


def zeros(shape, dtype=None):
    return structural.full(canonicalize_shape(shape), 0, _canonical(dtype, "zeros") or _dtypes.default_float_dtype())


def ones(shape, dtype=None):
    return structural.full(canonicalize_shape(shape), 1, _canonical(dtype, "ones") or _dtypes.default_float_dtype())


def empty(shape, dtype=None):
    return zeros(shape, dtype)


def _like(a, dtype, shape, fname: str):
    """The shape, dtype and weak type of an array like ``a`` (only its type is read: a
    Python int out of its dtype's range is no error here, as in JAX)."""
    if _dtypes.is_python_scalar(a):
        a_shape, (a_dtype, a_weak) = (), _dtypes.dtype_and_weak(a)
    elif not isinstance(a, (Array, Tracer, np.ndarray, np.generic)) and \
            hasattr(a, "shape") and hasattr(a, "dtype"):
        # anything with a shape and a dtype (a ShapeDtypeStruct, an abstract value)
        a_shape, a_dtype = canonicalize_shape(a.shape), _canonical(a.dtype, fname)
        a_weak = bool(getattr(a, "weak_type", False))
    else:
        aval = get_aval(a if isinstance(a, (Array, Tracer, np.ndarray, np.generic)) else asarray(a))
        a_shape, a_dtype, a_weak = aval.shape, aval.dtype, aval.weak_type
    return (a_shape if shape is None else canonicalize_shape(shape),
            _canonical(dtype, fname) or a_dtype, a_weak and dtype is None)


def zeros_like(a, dtype=None, shape=None, *, device=None, out_sharding=None):
    shape, dtype, weak = _like(a, dtype, shape, "zeros_like")
    return structural.full(shape, 0, dtype, weak_type=weak)


def ones_like(a, dtype=None, shape=None, *, device=None, out_sharding=None):
    shape, dtype, weak = _like(a, dtype, shape, "ones_like")
    return structural.full(shape, 1, dtype, weak_type=weak)


def full_like(a, fill_value, dtype=None, shape=None, *, device=None, out_sharding=None):
    shape, dtype, weak = _like(a, dtype, shape, "full_like")
    return structural.full(shape, fill_value, dtype, weak_type=weak)


def empty_like(a, dtype=None, shape=None, *, device=None, out_sharding=None):
    return zeros_like(a, dtype, shape)


def copy(a, order=None):
    """A copy of ``a`` (arrays are immutable, so this is mostly for NumPy compatibility)."""
    return array(a, copy=True)


# ---- ranges ----------------------------------------------------------------------------------

def _static_scalar(x, fname: str, what: str):
    value = concrete_value(x)
    if value is None:  # a traced value: as JAX, the error of a concrete value needed
        raise ConcretizationTypeError(
            f"Abstract tracer value encountered where concrete value is expected: {fname}: "
            f"{what} must be a static scalar (its value decides the output shape), got {x!r}. "
            "If it is an argument of a jitted function, mark it static with `static_argnums`.")
    if np.ndim(value) != 0:
        raise TypeError(f"{fname}: {what} must be a scalar, got an array of shape "
                        f"{np.shape(value)}")
    return value.item() if isinstance(value, np.ndarray) else value


def arange(start, stop=None, step=None, dtype=None):
    """Evenly spaced values in ``[start, stop)``; the bounds must be static.

        >>> arange(4)
        Array([0, 1, 2, 3], dtype=int32)
    """
    args = [a for a in (start, stop, step) if a is not None]
    values = [_static_scalar(a, "arange", "every bound") for a in args]
    if dtype is None:
        kinds = {np.asarray(v).dtype.kind for v in values}
        if "c" in kinds:
            dtype = _dtypes.default_complex_dtype()
        elif "f" in kinds:
            dtype = _dtypes.default_float_dtype()
        else:
            arrays = [a for a in args if not _dtypes.is_python_scalar(a)]
            dtype = _dtypes.result_type(*arrays) if arrays else _dtypes.default_int_dtype()
            if not _dtypes.is_integer(dtype):
                dtype = _dtypes.default_int_dtype()
    dtype = _dtypes.canonicalize_dtype(dtype)
    if stop is None and step is None and _dtypes.is_integer(dtype):
        return iota(dtype, (max(int(np.ceil(values[0])), 0),), 0)
    start_v = values[0] if stop is not None else 0
    stop_v = values[1] if stop is not None else values[0]
    step_v = values[-1] if step is not None else 1
    return Array._from_buffer(np.arange(start_v, stop_v, step_v).astype(dtype))


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0):
    """``num`` evenly spaced values from ``start`` to ``stop`` (inclusive when ``endpoint``).

    ``start`` and ``stop`` may be arrays (the values are laid out along ``axis``).

        >>> linspace(0.0, 1.0, 5)
        Array([0.  , 0.25, 0.5 , 0.75, 1.  ], dtype=float32)
    """
    num = operator_index(num, "linspace: num")
    if num < 0:
        raise ValueError(f"linspace: number of samples, {num}, must be non-negative")
    out_dtype = _canonical(dtype, "linspace")
    start, stop = promote_dtypes_inexact(start, stop)
    compute = get_aval(start).dtype
    if out_dtype is None:
        out_dtype = compute
    if compute in (_dtypes.float16, _dtypes.bfloat16):
        compute = _dtypes.float32
    start = elementwise.convert_element_type(start, compute)
    stop = elementwise.convert_element_type(stop, compute)
    bshape = broadcast_shapes(get_aval(start).shape, get_aval(stop).shape)
    start, stop = broadcast_to_shape(start, bshape), broadcast_to_shape(stop, bshape)
    out_shape = (num,) + bshape
    div = (num - 1) if endpoint else num
    ramp = structural.broadcast_in_dim(iota(compute, (num,)), out_shape, (0,))
    lo = structural.broadcast_in_dim(start, out_shape, tuple(range(1, len(out_shape))))
    hi = structural.broadcast_in_dim(stop, out_shape, tuple(range(1, len(out_shape))))
    delta = elementwise.sub(stop, start)
    if div > 0:
        step = elementwise.div(delta, elementwise._weak_full(float(div), get_aval(delta)))
        # lo + ramp * (hi - lo) / div rounds as NumPy does; the last sample is `stop` exactly
        frac = elementwise.div(ramp, elementwise._weak_full(float(div), get_aval(ramp)))
        out = elementwise.add(lo, elementwise.mul(frac, elementwise.sub(hi, lo)))
        if endpoint and num > 1:
            is_last = elementwise.eq(ramp, elementwise._weak_full(float(num - 1), get_aval(ramp)))
            out = elementwise.select(is_last, hi, out)
    else:
        step = elementwise._weak_full(float("nan"), get_aval(delta))
        out = lo
    axis = canonicalize_axis(axis, len(out_shape))
    if axis:
        perm = list(range(1, len(out_shape)))
        perm.insert(axis, 0)
        out = structural.transpose(out, tuple(perm))
    out = _cast_samples(out, out_dtype)
    if retstep:
        return out, elementwise.convert_element_type(step, get_aval(out).dtype) \
            if not _dtypes.is_integer(out_dtype) else step
    return out


def _cast_samples(x, dtype):
    dtype = _dtypes.canonicalize_dtype(dtype)
    if _dtypes.is_integer(dtype):
        x = elementwise.floor(x)
    return elementwise.convert_element_type(x, dtype)


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    """``base ** linspace(start, stop, num)``.

        >>> logspace(0.0, 2.0, 3)
        Array([  1.,  10., 100.], dtype=float32)
    """
    exponents = linspace(start, stop, num, endpoint=endpoint, axis=axis)
    out = power(promote_dtypes_inexact(base, exponents)[0], exponents)
    return out if dtype is None else _cast_samples(out, dtype)


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """Samples evenly spaced on a log scale from ``start`` to ``stop`` (same sign, non-zero).

        >>> geomspace(1.0, 8.0, 4)[-1]
        Array(8., dtype=float32)
    """
    start, stop = promote_dtypes_inexact(start, stop)
    sign = uf.sign(start)
    logs = linspace(uf.log10(uf.abs(start)), uf.log10(uf.abs(stop)), num,
                    endpoint=endpoint, axis=0)
    out = uf.power(elementwise._weak_full(10.0, get_aval(logs)), logs)
    out = uf.multiply(out, sign)
    # the end points are the inputs exactly, not 10 ** log10(x)
    n = get_aval(out).shape[0]
    if num > 0:
        ramp = iota(_dtypes.int32, get_aval(out).shape, 0)
        out = uf.where(uf.equal(ramp, 0), start, out)
        if endpoint and num > 1:
            out = uf.where(uf.equal(ramp, n - 1), stop, out)
    out = moveaxis(out, 0, canonicalize_axis(axis, get_aval(out).ndim))
    return out if dtype is None else _cast_samples(out, dtype)


# ---- matrices --------------------------------------------------------------------------------

def _tri_mask(N, M, k):
    """Boolean ``(N, M)``: True where ``j <= i + k``."""
    rows = iota(_dtypes.int32, (N, M), 0)
    cols = iota(_dtypes.int32, (N, M), 1)
    return elementwise.ge(elementwise.add(rows, int(k)), cols)


def eye(N, M=None, k=0, dtype=None):
    """A 2-D array with ones on the ``k``-th diagonal.

        >>> eye(2)
        Array([[1., 0.],
               [0., 1.]], dtype=float32)
    """
    N = operator_index(N, "eye: N")
    M = N if M is None else operator_index(M, "eye: M")
    k = operator_index(k, "eye: k")
    dtype = _canonical(dtype, "eye") or _dtypes.default_float_dtype()
    rows = iota(_dtypes.int32, (N, M), 0)
    cols = iota(_dtypes.int32, (N, M), 1)
    mask = elementwise.eq(elementwise.add(rows, int(k)), cols)
    return elementwise.convert_element_type(mask, dtype)


def identity(n, dtype=None):
    """The ``n x n`` identity matrix."""
    return eye(n, dtype=dtype)


def tri(N, M=None, k=0, dtype=None):
    """Ones at and below the ``k``-th diagonal, zeros above.

        >>> tri(2)
        Array([[1., 0.],
               [1., 1.]], dtype=float32)
    """
    N = operator_index(N, "tri: N")
    M = N if M is None else operator_index(M, "tri: M")
    dtype = _canonical(dtype, "tri") or _dtypes.default_float_dtype()
    return elementwise.convert_element_type(_tri_mask(N, M, operator_index(k, "tri: k")), dtype)


def _masked_matrix(m, keep_lower, k, fname):
    m = to_array(m)
    aval = get_aval(m)
    if aval.ndim < 2:
        raise ValueError(f"{fname} requires an array of at least 2 dimensions, got {aval.str_short()}")
    N, M = aval.shape[-2:]
    mask = _tri_mask(N, M, k if keep_lower else k - 1)
    if not keep_lower:
        mask = elementwise.bitwise_not(mask)
    mask = structural.broadcast_in_dim(mask, aval.shape, (aval.ndim - 2, aval.ndim - 1))
    zero = structural.full(aval.shape, 0, aval.dtype, weak_type=aval.weak_type)
    return elementwise.select(mask, m, zero)


def tril(m, k=0):
    """The lower triangle of the last two axes of ``m`` (at and below diagonal ``k``)."""
    return _masked_matrix(m, True, operator_index(k, "tril: k"), "tril")


def triu(m, k=0):
    """The upper triangle of the last two axes of ``m`` (at and above diagonal ``k``)."""
    return _masked_matrix(m, False, operator_index(k, "triu: k"), "triu")


def diag(v, k=0):
    """The ``k``-th diagonal of a 2-D array, or a 2-D array with a 1-D ``v`` on it.

        >>> diag(array([1, 2]))
        Array([[1, 0],
               [0, 2]], dtype=int32)
    """
    v = to_array(v)
    aval = get_aval(v)
    k = operator_index(k, "diag: k")
    if aval.ndim == 2:
        return diagonal(v, offset=k)
    if aval.ndim != 1:
        raise ValueError(f"diag: input must be 1-D or 2-D, got {aval.str_short()}")
    n = aval.shape[0] + abs(k)
    # row i of the result holds v[i] (k >= 0) or column j holds v[j] (k < 0); pad v to n first
    padded = pad(v, (0, abs(k)))
    along = 0 if k >= 0 else 1
    values = structural.broadcast_in_dim(padded, (n, n), (along,))
    rows = iota(_dtypes.int32, (n, n), 0)
    cols = iota(_dtypes.int32, (n, n), 1)
    mask = elementwise.eq(elementwise.add(rows, int(k)), cols)
    zero = structural.full((n, n), 0, aval.dtype, weak_type=aval.weak_type)
    return elementwise.select(mask, values, zero)


def diagflat(v, k=0):
    """A 2-D array with the flattened ``v`` on its ``k``-th diagonal."""
    v = to_array(v)
    return diag(structural.reshape(v, (get_aval(v).size,)), k)


# ---- grids -----------------------------------------------------------------------------------

def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """Coordinate matrices from 1-D coordinate vectors (as ``np.meshgrid``).

        >>> X, Y = meshgrid(arange(2), arange(3))
        >>> X.shape
        (3, 2)
    """
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    arrays = [to_array(x) for x in xi]
    for a in arrays:
        if get_aval(a).ndim != 1:
            raise ValueError(f"meshgrid: arguments must be 1-D, got {get_aval(a).str_short()}")
    shape = [get_aval(a).shape[0] for a in arrays]
    if indexing == "xy" and len(arrays) >= 2:
        shape[0], shape[1] = shape[1], shape[0]
    outs = []
    for i, a in enumerate(arrays):
        axis = i
        if indexing == "xy" and len(arrays) >= 2 and i < 2:
            axis = 1 - i
        if sparse:
            s = [1] * len(arrays)
            s[axis] = get_aval(a).shape[0]
            outs.append(structural.reshape(a, tuple(s)))
        else:
            outs.append(structural.broadcast_in_dim(a, tuple(shape), (axis,)))
    return outs


def indices(dimensions, dtype=None, sparse=False):
    """An array of index grids, one per dimension (as ``np.indices``).

        >>> indices((2, 2))[0]
        Array([[0, 0],
               [1, 1]], dtype=int32)
    """
    dimensions = canonicalize_shape(dimensions)
    dtype = _canonical(dtype, "indices") or _dtypes.default_int_dtype()
    grids = []
    for i, n in enumerate(dimensions):
        if sparse:
            s = [1] * len(dimensions)
            s[i] = n
            grids.append(structural.reshape(iota(dtype, (n,), 0), tuple(s)))
        else:
            grids.append(iota(dtype, dimensions, i))
    if sparse:
        return tuple(grids)
    return stack(grids) if grids else zeros((0,), dtype)


def ix_(*args):
    """Open mesh index arrays from 1-D sequences, for cross-product indexing."""
    arrays = [to_array(a) for a in args]
    out = []
    for i, a in enumerate(arrays):
        if get_aval(a).ndim != 1:
            raise ValueError("ix_: arguments must be 1-D")
        s = [1] * len(arrays)
        s[i] = get_aval(a).shape[0]
        out.append(structural.reshape(a, tuple(s)))
    return tuple(out)


def fromfunction(function, shape, *, dtype=float, **kwargs):
    """``function(*indices(shape))`` (as ``np.fromfunction``)."""
    dtype = _canonical(dtype, "fromfunction")
    grids = [iota(dtype, canonicalize_shape(shape), i) for i in range(len(canonicalize_shape(shape)))]
    return function(*grids, **kwargs)


def tril_indices(n, k=0, m=None):
    """Row and column indices of the lower triangle of an ``(n, m)`` array."""
    rows, cols = np.tril_indices(operator_index(n, "n"), k, m)
    return (Array._from_buffer(rows.astype(_dtypes.default_int_dtype())),
            Array._from_buffer(cols.astype(_dtypes.default_int_dtype())))


def triu_indices(n, k=0, m=None):
    """Row and column indices of the upper triangle of an ``(n, m)`` array."""
    rows, cols = np.triu_indices(operator_index(n, "n"), k, m)
    return (Array._from_buffer(rows.astype(_dtypes.default_int_dtype())),
            Array._from_buffer(cols.astype(_dtypes.default_int_dtype())))


def diag_indices(n, ndim=2):
    """Indices of the main diagonal of an ``n x ... x n`` array."""
    idx = Array._from_buffer(np.arange(operator_index(n, "n"), dtype=_dtypes.default_int_dtype()))
    return (idx,) * ndim


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
    return diag_indices(shape[0], len(shape))


def _triangle_indices_from(fname, arr, k, lower):
    shape = _shape_of(fname, arr)
    if len(shape) != 2:
        raise ValueError(f"jnp.{fname}: only 2-D inputs are accepted, got shape {shape}")
    k = _static_int(fname, k, "k")
    make = tril_indices if lower else triu_indices
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
    mask = mask_func(ones((n, n), dtype=_dtypes.default_int_dtype()), k)
    return nonzero(mask, size=size)
