"""The conversions every primitive family builds on: ``convert_element_type`` (a value to
another dtype), ``broadcast_in_dim`` (to a larger shape), and ``full`` (a scalar to an array
of a dtype and shape, made of the two).

This is the bottom family: the others make their operands and constants with these, so it
imports none of them. ``elementwise`` re-exports ``convert_element_type`` (the compiled
backends fuse it with the elementwise ops), and ``structural`` re-exports
``broadcast_in_dim``, ``broadcast`` and ``full`` with the other shape functions. Each
primitive's shape rule, reference implementation, JVP/transpose and batching rules are
declared together below it, except one: ``broadcast_in_dim`` is linear and its transpose
sums over the broadcast axes (``reduce_sum``) and reshapes, so ``structural``, which sits
above ``reductions``, declares it with the other shape primitives' transposes.
"""
from __future__ import annotations

import numpy as np

from functrans import _dtypes, core
from functrans.core import Primitive, ShapedArray, Tracer, canonicalize_shape, get_aval
from functrans.interpreters import batching
from functrans.interpreters.ad import Zero

# =============================================================================================
# convert_element_type
# =============================================================================================

def _convert_impl(x, *, new_dtype, weak_type=False):
    new_dtype = np.dtype(new_dtype)
    if new_dtype == x.dtype:
        return x
    if new_dtype == _dtypes.bool_:
        return x != 0
    if _dtypes.is_complex(x.dtype) and not _dtypes.is_complex(new_dtype):
        x = x.real
    if _dtypes.is_inexact(x.dtype) and _dtypes.is_integer(new_dtype):
        info = np.iinfo(new_dtype)
        with np.errstate(invalid="ignore"):
            xf = np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0)
            out = np.clip(xf, float(info.min), float(info.max))
            # values at the float boundary of int64 round past the max (NumPy warns of the
            # invalid cast): saturated explicitly below
            result = out.astype(new_dtype)
        result = np.where(xf >= float(info.max), info.max, result)
        return np.where(xf <= float(info.min), info.min, result).astype(new_dtype)
    # a float too large for a narrower float becomes inf, an integer wraps, as in XLA: quietly
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(new_dtype)


convert_element_type_p = Primitive("convert_element_type")
convert_element_type_p.def_impl(_convert_impl)


@convert_element_type_p.def_abstract_eval
def _convert_rule(x, *, new_dtype, weak_type=False):
    return ShapedArray(x.shape, new_dtype, weak_type)


def _convert_jvp(primals, tangents, *, new_dtype, weak_type=False):
    (x,), (t,) = primals, tangents
    out = convert_element_type_p.bind(x, new_dtype=new_dtype, weak_type=weak_type)
    if isinstance(t, Zero) or not _dtypes.is_inexact(new_dtype) or not _dtypes.is_inexact(get_aval(x).dtype):
        return out, Zero.from_value(out)
    return out, convert_element_type_p.bind(t, new_dtype=new_dtype, weak_type=weak_type)


def _convert_transpose(ct, x, *, new_dtype, weak_type=False):
    aval = x.aval
    if isinstance(ct, Zero):
        return [Zero(aval)]
    return [convert_element_type_p.bind(ct, new_dtype=aval.dtype, weak_type=aval.weak_type)]


convert_element_type_p.jvp = _convert_jvp
convert_element_type_p.transpose = _convert_transpose
batching.defvectorized(convert_element_type_p)


def convert_element_type(x, new_dtype, weak_type: bool = False):
    """Cast ``x`` to ``new_dtype`` (float to int truncates toward zero and saturates; NaN
    becomes 0)."""
    new_dtype = _dtypes.canonicalize_dtype(new_dtype)
    if type(x) is int and new_dtype != _dtypes.float0:
        # a Python int converts straight to new_dtype, as NumPy converts it (as in JAX): it
        # need not fit int32 first (convert_element_type(2 ** 40, float32) is exact)
        return core.wrap_array(np.asarray(x).astype(new_dtype),
                               ShapedArray((), new_dtype, bool(weak_type)))
    aval = get_aval(x)
    if aval.dtype == new_dtype and aval.weak_type == weak_type and not _dtypes.is_python_scalar(x) \
            and not isinstance(x, (np.ndarray, np.generic)):  # host data becomes an Array
        return x
    return convert_element_type_p.bind(x, new_dtype=new_dtype, weak_type=bool(weak_type))


# =============================================================================================
# broadcast_in_dim
# =============================================================================================

broadcast_in_dim_p = Primitive("broadcast_in_dim")


@broadcast_in_dim_p.def_abstract_eval
def _broadcast_in_dim_rule(operand, *, shape, broadcast_dimensions):
    dims = broadcast_dimensions
    if len(dims) != operand.ndim:
        raise TypeError(f"broadcast_in_dim: operand {operand.str_short()} has {operand.ndim} "
                        f"dimensions but broadcast_dimensions={dims} has {len(dims)}")
    if any(d < 0 or d >= len(shape) for d in dims) or list(dims) != sorted(set(dims)):
        raise TypeError(f"broadcast_in_dim: broadcast_dimensions={dims} must be strictly "
                        f"increasing and within the result rank {len(shape)}")
    for i, d in enumerate(dims):
        if operand.shape[i] not in (1, shape[d]):
            raise TypeError(f"broadcast_in_dim: operand {operand.str_short()} dimension {i} "
                            f"(size {operand.shape[i]}) cannot broadcast to size {shape[d]} "
                            f"of result shape {tuple(shape)}")
    return ShapedArray(shape, operand.dtype, operand.weak_type)


@broadcast_in_dim_p.def_impl
def _broadcast_in_dim_impl(operand, *, shape, broadcast_dimensions):
    expanded = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        expanded[d] = operand.shape[i]
    return np.broadcast_to(operand.reshape(expanded), shape)


def _broadcast_in_dim_batch(vals, dims, *, shape, broadcast_dimensions):
    (x,), (d,) = vals, dims
    x = batching.moveaxis(x, d, 0)
    size = get_aval(x).shape[0]
    new_dims = (0,) + tuple(b + 1 for b in broadcast_dimensions)
    return broadcast_in_dim_p.bind(x, shape=(size,) + tuple(shape),
                                   broadcast_dimensions=new_dims), 0


broadcast_in_dim_p.batch = _broadcast_in_dim_batch


def broadcast_in_dim(operand, shape, broadcast_dimensions):
    """Broadcast ``operand`` to ``shape``; its axis ``i`` becomes result axis
    ``broadcast_dimensions[i]``."""
    shape = canonicalize_shape(shape)
    broadcast_dimensions = tuple(int(d) for d in broadcast_dimensions)
    aval = get_aval(operand)
    if aval.shape == shape and broadcast_dimensions == tuple(range(len(shape))) \
            and not _dtypes.is_python_scalar(operand) and not isinstance(operand, (np.ndarray, np.generic)):
        return operand
    return broadcast_in_dim_p.bind(operand, shape=shape, broadcast_dimensions=broadcast_dimensions)


def broadcast(operand, sizes):
    """Add leading dimensions of the given ``sizes``."""
    aval = get_aval(operand)
    sizes = tuple(sizes)
    dims = tuple(range(len(sizes), len(sizes) + aval.ndim))
    return broadcast_in_dim(operand, sizes + aval.shape, dims)

# =============================================================================================
# full
# =============================================================================================

def full(shape, fill_value, dtype=None, weak_type: bool = False):
    """An array of ``shape`` filled with ``fill_value``, converted to ``dtype``."""
    shape = tuple(int(s) for s in shape)
    if dtype is None:
        dtype, weak_type = _dtypes.dtype_and_weak(fill_value)
    dtype = _dtypes.canonicalize_dtype(dtype)
    if not _dtypes.is_python_scalar(fill_value) and get_aval(fill_value).ndim != 0:
        raise TypeError(f"full: fill_value must be a scalar, got shape {get_aval(fill_value).shape}")
    if isinstance(fill_value, (int, float, bool, complex, np.generic, np.ndarray)):
        scalar = np.asarray(fill_value).astype(dtype)[()]
        if weak_type:
            py = scalar.item()
            if _dtypes.is_python_scalar(py) and _dtypes.python_scalar_dtype(py) == dtype:
                scalar = py  # a weak literal of the default dtype
            else:
                scalar = convert_element_type(scalar, dtype, weak_type=True)
    else:
        scalar = convert_element_type(fill_value, dtype, weak_type=weak_type)
    if shape == () and not isinstance(scalar, Tracer):
        # a concrete scalar: an Array now, an inline literal when staged
        aval = get_aval(scalar)
        return core.wrap_array(np.asarray(core.to_numpy(scalar, aval)).astype(dtype),
                               ShapedArray((), dtype, aval.weak_type))
    return broadcast_in_dim_p.bind(scalar, shape=shape, broadcast_dimensions=())


__all__ = ["broadcast", "broadcast_in_dim", "convert_element_type", "full"]
