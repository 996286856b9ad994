"""The operators and methods of arrays, installed by ``functrans.numpy`` on
:class:`functrans.Array` and on :class:`functrans.core.Tracer` (so code reads the same
eagerly and under a transform), and the functions behind methods that have no other home:
``astype`` and ``view``.

``Array`` lives below this layer and knows nothing of ``jnp``: as in JAX, the numpy layer
gives arrays their methods when it is imported (:func:`install_array_methods`).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from functrans import _dtypes, core
from functrans._array import Array, is_concrete_array, sharding_layer
from functrans.numpy import _indexing
from functrans.numpy._promotion import asarray, concrete_value, to_array
from functrans.numpy._scalar_types import _as_dtype_or_kind
from functrans.primitives import elementwise as lax


def astype(x, dtype, /, *, copy=False, device=None):
    """``x`` converted to ``dtype`` (float to int truncates toward zero).

        >>> astype(array([1.7, -1.7]), int32)
        Array([ 1, -1], dtype=int32)
    """
    builtin = any(dtype is t for t in (int, float, complex, bool))
    dtype = _dtypes.check_user_dtype(dtype if builtin else _as_dtype_or_kind(dtype), "astype")
    return lax.convert_element_type(to_array(x), dtype)


def view(x, dtype=None, type=None):  # noqa: A002
    """``x``'s bits reinterpreted as ``dtype`` (eagerly; under a transform only a view as
    the same dtype is supported, as there is no bitcast primitive)."""
    x = to_array(x)
    if type is not None:
        raise NotImplementedError("view: the `type` argument is not supported")
    if dtype is None:
        return x
    dtype = np.dtype(_as_dtype_or_kind(dtype))
    if dtype == x.dtype:
        return x
    value = concrete_value(x)
    if value is None:
        raise NotImplementedError("view: reinterpreting the bits of a traced array as another "
                                  "dtype needs a bitcast primitive, which is not available")
    return Array._from_buffer(np.ascontiguousarray(value).view(dtype))


# ---- x.at[idx] ---------------------------------------------------------------------------------

class _IndexUpdateHelper:
    """``x.at[idx]``: the functional counterpart of ``x[idx] op= y``."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __getitem__(self, idx):
        return _IndexUpdateRef(self.array, idx)

    def __repr__(self):
        return f"_IndexUpdateHelper({self.array!r})"


class _IndexUpdateRef:
    """``x.at[index]``: functional updates and reads. ``indices_are_sorted`` and
    ``unique_indices`` are JAX's hints (promises about the indices that let XLA pick a faster
    scatter); functrans's scatters are correct without them. ``out_sharding`` places the
    result."""

    __slots__ = ("array", "index")

    def __init__(self, array, index):
        self.array = array
        self.index = index

    @staticmethod
    def _check(wrap_negative_indices):
        if not wrap_negative_indices:
            raise NotImplementedError("x.at[...]: wrap_negative_indices=False is not supported "
                                      "(negative indices count from the end)")

    def _placed(self, out, out_sharding):
        if out_sharding is None:
            return out
        return sharding_layer.constrain(out, out_sharding)

    def _update(self, op, values, mode=None, out_sharding=None, wrap_negative_indices=True,
                indices_are_sorted=False, unique_indices=False):
        self._check(wrap_negative_indices)
        out = _indexing.scatter_update(self.array, self.index, values, op, mode=mode)
        return self._placed(out, out_sharding)

    def get(self, *, indices_are_sorted=False, unique_indices=False, mode=None,
            fill_value=None, out_sharding=None, wrap_negative_indices=True):
        self._check(wrap_negative_indices)
        out = _indexing.getitem(self.array, self.index, mode=mode, fill_value=fill_value)
        return self._placed(out, out_sharding)

    def set(self, values, **kwargs):
        return self._update("set", values, **kwargs)

    def add(self, values, **kwargs):
        return self._update("add", values, **kwargs)

    def subtract(self, values, **kwargs):
        return self._update("add", -asarray(values), **kwargs)

    def multiply(self, values, **kwargs):
        return self._update("mul", values, **kwargs)

    mul = multiply

    def divide(self, values, **kwargs):
        return self._update("mul", 1 / asarray(values), **kwargs)

    def power(self, values, **kwargs):
        current = self.get(mode=kwargs.get("mode"))
        return self.set(current ** values, **kwargs)

    def min(self, values, **kwargs):
        return self._update("min", values, **kwargs)

    def max(self, values, **kwargs):
        return self._update("max", values, **kwargs)

    def apply(self, func, **kwargs):
        return self.set(func(self.get(mode=kwargs.get("mode"))), **kwargs)


# ---- installing the methods --------------------------------------------------------------------

_BINARY_OPS = {
    "__add__": "add", "__sub__": "subtract", "__mul__": "multiply", "__truediv__": "true_divide",
    "__floordiv__": "floor_divide", "__mod__": "remainder", "__pow__": "power",
    "__matmul__": "matmul", "__and__": "bitwise_and", "__or__": "bitwise_or",
    "__xor__": "bitwise_xor", "__lshift__": "left_shift", "__rshift__": "right_shift",
    "__eq__": "equal", "__ne__": "not_equal", "__lt__": "less", "__le__": "less_equal",
    "__gt__": "greater", "__ge__": "greater_equal", "__divmod__": "divmod",
}
_COMPARISONS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__")
_UNARY_OPS = {"__neg__": "negative", "__pos__": "positive", "__abs__": "abs",
              "__invert__": "invert"}
_FORWARDED_METHODS = [
    "sum", "mean", "max", "min", "prod", "argmax", "argmin", "any", "all", "var", "std",
    "cumsum", "cumprod", "ravel", "squeeze", "swapaxes", "clip", "round", "dot",
    "conj", "conjugate", "take", "sort", "argsort", "repeat", "nonzero", "trace", "diagonal",
    "ptp", "searchsorted", "choose", "nansum", "view",
]


def _is_array_like(x) -> bool:
    return is_concrete_array(x) or \
        isinstance(x, (core.Tracer, np.ndarray, np.generic, bool, int, float, complex)) \
        or hasattr(x, "__jax_array__")


def _getitem(self, idx):
    return _indexing.getitem(self, idx)


def install_array_methods(jnp: Mapping) -> None:
    """Give :class:`Array` and :class:`functrans.core.Tracer` their operators and methods,
    each calling the ``jnp`` function of its name. ``jnp`` is the namespace of
    ``functrans.numpy``, read at call time (so the methods call the functions it finally
    holds: ufunc objects, key-aware wrappers)."""

    def binary(name, reverse=False):
        def method(self, other):
            if not _is_array_like(other):
                return NotImplemented
            fn = jnp[name]
            return fn(other, self) if reverse else fn(self, other)
        method.__name__ = name
        return method

    def unary(name):
        def method(self):
            return jnp[name](self)
        method.__name__ = name
        return method

    def forward(name):
        def method(self, *args, **kwargs):
            return jnp[name](self, *args, **kwargs)
        method.__name__ = name
        return method

    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and not isinstance(shape[0], int) and shape[0] is not None:
            shape = shape[0]
        return jnp["reshape"](self, shape, order=order)

    def transpose(self, *axes):
        if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], int)):
            axes = axes[0]
        return jnp["transpose"](self, axes or None)

    def astype_method(self, dtype, copy=False):
        return jnp["astype"](self, dtype)

    for cls in (Array, core.Tracer):
        for dunder, fname in _BINARY_OPS.items():
            setattr(cls, dunder, binary(fname))
            if dunder not in _COMPARISONS:
                setattr(cls, "__r" + dunder[2:], binary(fname, reverse=True))
        for dunder, fname in _UNARY_OPS.items():
            setattr(cls, dunder, unary(fname))
        for name in _FORWARDED_METHODS:
            setattr(cls, name, forward(name))
        cls.__round__ = lambda self, ndigits=None: jnp["round"](self, ndigits or 0)
        cls.reshape = reshape
        cls.flatten = lambda self, order="C": jnp["ravel"](self, order)
        # jnp.compress takes the condition first; the method takes it as its argument
        cls.compress = lambda self, condition, axis=None, **kw: jnp["compress"](
            condition, self, axis, **kw)
        cls.transpose = transpose
        cls.astype = astype_method
        cls.__getitem__ = _getitem
        cls.T = property(lambda self: jnp["transpose"](self))
        cls.mT = property(lambda self: jnp["swapaxes"](self, -1, -2))
        cls.real = property(lambda self: jnp["real"](self))
        cls.imag = property(lambda self: jnp["imag"](self))
        cls.at = property(_IndexUpdateHelper)
    # jax.Array's copy() on a traced value: a copy in the program (values are immutable)
    core.Tracer.copy = lambda self: jnp["array"](self, copy=True)
