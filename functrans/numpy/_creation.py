"""Array creation: asarray, array, zeros, ones, full, *_like, arange, eye."""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans._array import Array
from functrans.core import Tracer, get_aval
from functrans.primitives import elementwise, structural


def _canonical(dtype):
    return None if dtype is None else _dtypes.canonicalize_dtype(dtype)


def asarray(a, dtype=None, order=None, copy=None):
    """Convert ``a`` (array, scalar, nested lists) to an Array; no copy if already one."""
    dtype = _canonical(dtype)
    if isinstance(a, (Array, Tracer)):
        return a if dtype is None else elementwise.convert_element_type(a, dtype, False)
    if _dtypes.is_python_scalar(a):
        weak = dtype is None and type(a) is not bool
        dt = dtype or _dtypes.python_scalar_dtype(a)
        return Array(np.asarray(a, dtype=dt), weak_type=weak)
    if hasattr(a, "__jax_array__"):
        return asarray(a.__jax_array__(), dtype)
    if isinstance(a, (list, tuple)):
        leaves = _nested_leaves(a)
        if any(isinstance(x, Tracer) for x in leaves):
            from functrans.numpy._shape import stack
            return stack([asarray(x, dtype) for x in a])
        if any(isinstance(x, Array) for x in leaves):
            a = _to_nested_numpy(a)
    if isinstance(a, (np.ndarray, np.generic)) or isinstance(a, (list, tuple)):
        value = np.asarray(a)
        if value.dtype == object:
            raise TypeError(f"cannot convert {a!r} to an array (ragged or non-numeric)")
        if dtype is None:
            if isinstance(a, (list, tuple)) and value.dtype.kind in "iufcb" and _python_only(a):
                dtype, weak = _dtypes.result_type(*_nested_leaves(a), return_weak_type_flag=True) \
                    if _nested_leaves(a) else (_dtypes.default_float_dtype(), False)
                return Array(np.array(value, dtype=dtype), weak_type=False)
            dtype = _dtypes.canonicalize_dtype(value.dtype)
        return Array(np.array(value, dtype=dtype, copy=True))
    try:
        value = np.asarray(a)
    except Exception as err:  # noqa: BLE001
        raise TypeError(f"cannot convert {type(a).__name__} to an array") from err
    return asarray(value, dtype)


def _nested_leaves(a):
    out = []
    for x in a:
        if isinstance(x, (list, tuple)):
            out.extend(_nested_leaves(x))
        else:
            out.append(x)
    return out


def _python_only(a) -> bool:
    return all(_dtypes.is_python_scalar(x) for x in _nested_leaves(a))


def _to_nested_numpy(a):
    if isinstance(a, (list, tuple)):
        return [_to_nested_numpy(x) for x in a]
    return np.asarray(a)


def array(object, dtype=None, copy=True, order=None, ndmin=0):  # noqa: A002
    """Create an Array (as ``jnp.array``)."""
    out = asarray(object, dtype)
    if isinstance(out, Array) and copy and out is object:
        out = out.copy()
    if ndmin > out.ndim:
        out = structural.reshape(out, (1,) * (ndmin - out.ndim) + tuple(out.shape))
    return out


def _shape_tuple(shape):
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def full(shape, fill_value, dtype=None):
    dtype = _canonical(dtype)
    shape = _shape_tuple(shape)
    if dtype is None:
        dtype, weak = _dtypes.dtype_and_weak(fill_value)
    else:
        weak = False
    fill = asarray(fill_value)
    if get_aval(fill).ndim:
        from functrans.numpy._promotion import broadcast_to_shape
        return broadcast_to_shape(elementwise.convert_element_type(fill, dtype, False), shape)
    return structural.full(shape, fill_value if not isinstance(fill_value, Tracer) else fill,
                           dtype, weak_type=weak and _dtypes.is_python_scalar(fill_value))


def zeros(shape, dtype=None):
    return structural.full(_shape_tuple(shape), 0, _canonical(dtype) or _dtypes.default_float_dtype())


def ones(shape, dtype=None):
    return structural.full(_shape_tuple(shape), 1, _canonical(dtype) or _dtypes.default_float_dtype())


def empty(shape, dtype=None):
    return zeros(shape, dtype)


def _like(a, dtype, shape):
    aval = get_aval(asarray(a) if not isinstance(a, (Array, Tracer)) else a)
    return (aval.shape if shape is None else _shape_tuple(shape),
            _canonical(dtype) or aval.dtype, aval.weak_type and dtype is None)


def zeros_like(a, dtype=None, shape=None):
    shape, dtype, weak = _like(a, dtype, shape)
    return structural.full(shape, 0, dtype, weak_type=weak)


def ones_like(a, dtype=None, shape=None):
    shape, dtype, weak = _like(a, dtype, shape)
    return structural.full(shape, 1, dtype, weak_type=weak)


def full_like(a, fill_value, dtype=None, shape=None):
    shape, dtype, weak = _like(a, dtype, shape)
    return structural.full(shape, fill_value, dtype)


def empty_like(a, dtype=None, shape=None):
    return zeros_like(a, dtype, shape)
