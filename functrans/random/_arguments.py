"""Checking and converting the arguments of the samplers: shapes, dtypes, parameters.

The result shape rules are jax.random's: a sampler given ``shape`` draws exactly that shape
(its parameters must broadcast to it); without one, the parameters' broadcast shape.
"""
from __future__ import annotations

import functools

import numpy as np

import functrans.numpy as jnp
from functrans import _dtypes, lax
from functrans.core import Tracer, get_aval
from functrans.numpy._promotion import broadcast_shapes, broadcast_to_shape
from functrans.primitives.dot import place_result

asarray = jnp.asarray


def as_array(x):
    """``x`` as an array (tracers stay as they are)."""
    return x if isinstance(x, Tracer) else asarray(x)


def convert(x, dtype):
    return lax.convert_element_type(x, dtype)


def const(value, dtype, shape=()):
    return lax.full(shape, value, dtype)


def shape_tuple(shape, name: str) -> tuple:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    try:
        return tuple(int(s) for s in shape)
    except TypeError as err:
        raise TypeError(f"{name}: shape must be a tuple of ints, got {shape!r}") from err


def broadcast_to(x, shape, name: str):
    try:
        return broadcast_to_shape(x, shape)
    except ValueError as err:
        raise ValueError(f"{name}: an argument of shape {get_aval(x).shape} does not "
                         f"broadcast to the requested shape {shape}") from err


def float_dtype(dtype, name: str) -> np.dtype:
    # a 64-bit request with x64 off warns, as JAX's samplers do (without naming the sampler)
    dtype = _dtypes.default_float_dtype() if dtype is None else _dtypes.check_user_dtype(dtype)
    if not _dtypes.is_float(dtype):
        raise ValueError(f"{name} needs a floating-point dtype, got {dtype}")
    return dtype


def int_dtype(dtype, name: str) -> np.dtype:
    dtype = _dtypes.default_int_dtype() if dtype is None else _dtypes.check_user_dtype(dtype)
    if not _dtypes.is_integer(dtype):
        raise ValueError(f"{name} needs an integer dtype, got {dtype}")
    return dtype


def float_param(value, dtype):
    """A distribution parameter as an array of the sample dtype."""
    return convert(as_array(value), dtype)


def inexact_param(value):
    """A parameter as an array of its own float dtype, or of the default float dtype when it
    is an integer or bool (jnp's promotion to inexact)."""
    value = as_array(value)
    if not _dtypes.is_float(get_aval(value).dtype):
        value = convert(value, _dtypes.default_float_dtype())
    return value


def sample_shape(name: str, shape, *params) -> tuple:
    """The result shape as jax.random fixes it: ``shape`` when given (every parameter must
    broadcast to it), else the broadcast shape of the parameters."""
    return shape_from_param_shapes(name, shape, *(get_aval(p).shape for p in params))


def shape_from_param_shapes(name: str, shape, *param_shapes) -> tuple:
    param_shapes = list(param_shapes)
    try:
        joint = broadcast_shapes(*param_shapes)
    except ValueError as err:
        raise ValueError(f"{name}: parameter shapes {param_shapes} do not broadcast "
                         "together") from err
    if shape is None:
        return joint
    shape = shape_tuple(shape, name)
    try:
        ok = broadcast_shapes(shape, joint) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{name}: parameters of shapes {param_shapes} do not broadcast to "
                         f"the requested shape {shape}")
    return shape


def tiny(dtype) -> float:
    return float(_dtypes.finfo(dtype).tiny)


def any_true(mask):
    return lax.reduce_or(mask, tuple(range(get_aval(mask).ndim)))


def takes_out_sharding(fn):
    """Add JAX's ``out_sharding=`` keyword to a sampler: the result is split as it says."""
    @functools.wraps(fn)
    def wrapped(*args, out_sharding=None, **kwargs):
        return place_result(fn(*args, **kwargs), out_sharding)
    return wrapped
