"""A first set of jnp functions; the full surface grows around it."""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans.core import get_aval
from functrans.numpy._creation import asarray
from functrans.numpy._promotion import promote_args, promote_args_inexact, to_array
from functrans.primitives import elementwise as ew
from functrans.primitives import reductions, structural


def add(x, y):
    return ew.add(*promote_args("add", x, y))


def subtract(x, y):
    return ew.sub(*promote_args("subtract", x, y))


def multiply(x, y):
    return ew.mul(*promote_args("multiply", x, y))


def true_divide(x, y):
    return ew.div(*promote_args_inexact("true_divide", x, y))


divide = true_divide


def negative(x):
    return ew.neg(to_array(x))


def positive(x):
    return to_array(x)


def sin(x):
    return ew.sin(*promote_args_inexact("sin", x))


def cos(x):
    return ew.cos(*promote_args_inexact("cos", x))


def exp(x):
    return ew.exp(*promote_args_inexact("exp", x))


def log(x):
    return ew.log(*promote_args_inexact("log", x))


def tanh(x):
    return ew.tanh(*promote_args_inexact("tanh", x))


def power(x, y):
    if isinstance(y, int) and not isinstance(y, bool):
        return ew.integer_pow(to_array(x), y)
    x, y = promote_args_inexact("power", x, y)
    return ew.pow(x, y)


def maximum(x, y):
    return ew.max(*promote_args("maximum", x, y))


def sum(a, axis=None, dtype=None, keepdims=False):  # noqa: A001
    a = to_array(a)
    ndim = get_aval(a).ndim
    axes = tuple(range(ndim)) if axis is None else (
        (axis,) if isinstance(axis, int) else tuple(axis))
    axes = tuple(ax % ndim for ax in axes) if ndim else ()
    if _dtypes.is_bool(get_aval(a).dtype):
        a = ew.convert_element_type(a, _dtypes.default_int_dtype())
    out = reductions.reduce_sum(a, axes)
    if keepdims:
        out = structural.expand_dims(out, axes)
    return out


def reshape(a, newshape, order="C"):
    a = to_array(a)
    if isinstance(newshape, int):
        newshape = (newshape,)
    newshape = list(newshape)
    size = get_aval(a).size
    if newshape.count(-1) == 1:
        known = int(np.prod([s for s in newshape if s != -1], dtype=np.int64))
        newshape[newshape.index(-1)] = size // known if known else 0
    return structural.reshape(a, tuple(newshape))


def transpose(a, axes=None):
    a = to_array(a)
    ndim = get_aval(a).ndim
    axes = tuple(reversed(range(ndim))) if axes is None else tuple(ax % ndim for ax in axes)
    return structural.transpose(a, axes)


def astype(x, dtype):
    return ew.convert_element_type(to_array(x), _dtypes.canonicalize_dtype(dtype))


def eye(N, M=None, k=0, dtype=None):
    dtype = _dtypes.canonicalize_dtype(dtype or _dtypes.default_float_dtype())
    M = N if M is None else M
    return asarray(np.eye(N, M, k, dtype=dtype))


def equal(x, y):
    return ew.eq(*promote_args("equal", x, y))


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("np", "annotations")]
