"""Argument handling shared by the jnp functions: array conversion, dtype promotion with
weak types, and NumPy broadcasting (lowered to ``broadcast_in_dim``)."""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans.core import Tracer, get_aval
from functrans.primitives import elementwise, structural


def check_arraylike(fname: str, *args) -> None:
    for i, a in enumerate(args):
        if not _is_arraylike(a):
            raise TypeError(f"{fname} requires ndarray or scalar arguments, got "
                            f"{type(a).__name__} at position {i}")


def _is_arraylike(x) -> bool:
    from functrans._array import Array
    return isinstance(x, (Array, Tracer, np.ndarray, np.generic, bool, int, float, complex)) \
        or hasattr(x, "__jax_array__")


def broadcast_shapes(*shapes) -> tuple:
    """NumPy broadcasting of shapes, with an error naming them when they do not match."""
    ndim = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(ndim):
        sizes = {s[axis - ndim + len(s)] for s in shapes if axis - ndim + len(s) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise ValueError(f"incompatible shapes for broadcasting: {', '.join(str(tuple(s)) for s in shapes)}")
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def broadcast_to_shape(x, shape):
    aval = get_aval(x)
    shape = tuple(shape)
    if aval.shape == shape:
        return x
    if len(shape) < aval.ndim:
        raise ValueError(f"cannot broadcast shape {aval.shape} to {shape}")
    lead = len(shape) - aval.ndim
    if any(s not in (1, shape[lead + i]) for i, s in enumerate(aval.shape)):
        raise ValueError(f"incompatible shapes for broadcasting: {aval.shape} and {shape}")
    # drop size-1 axes that get stretched, so broadcast_in_dim maps each kept axis exactly
    keep = [i for i, s in enumerate(aval.shape) if s == shape[lead + i]]
    if len(keep) != aval.ndim:
        x = structural.reshape(x, tuple(aval.shape[i] for i in keep))
    return structural.broadcast_in_dim(x, shape, tuple(lead + i for i in keep))


def to_array(x):
    """A Python scalar, NumPy value or list becomes an Array (weak for Python scalars)."""
    from functrans._array import Array
    if isinstance(x, (Array, Tracer)):
        return x
    if _dtypes.is_python_scalar(x):
        dtype = _dtypes.python_scalar_dtype(x)
        return Array(np.asarray(x, dtype=dtype), weak_type=type(x) is not bool)
    if hasattr(x, "__jax_array__"):
        return to_array(x.__jax_array__())
    if isinstance(x, (np.ndarray, np.generic)):
        return Array(np.asarray(x, dtype=_dtypes.canonicalize_dtype(x.dtype)))
    from functrans.numpy._creation import asarray
    return asarray(x)


def promote_dtypes(*args):
    """Convert arguments to their common dtype (JAX's lattice with weak types)."""
    if len(args) < 2:
        return [to_array(a) for a in args]
    dtype, weak = _dtypes.result_type(*args, return_weak_type_flag=True)
    return [elementwise.convert_element_type(to_array(a), dtype, weak) for a in args]


def promote_dtypes_inexact(*args):
    dtype, weak = _dtypes.result_type(*args, return_weak_type_flag=True)
    if not _dtypes.is_inexact(dtype):
        dtype = _dtypes.default_float_dtype()
    return [elementwise.convert_element_type(to_array(a), dtype, weak) for a in args]


def promote_shapes(*args):
    shapes = [get_aval(a).shape for a in args]
    if len(set(shapes)) <= 1:
        return list(args)
    shape = broadcast_shapes(*shapes)
    return [broadcast_to_shape(a, shape) for a in args]


def promote_args(fname: str, *args):
    check_arraylike(fname, *args)
    return promote_shapes(*promote_dtypes(*args))


def promote_args_inexact(fname: str, *args):
    check_arraylike(fname, *args)
    return promote_shapes(*promote_dtypes_inexact(*args))
