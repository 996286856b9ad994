"""``functrans.Array``: an immutable array on a device, and the array methods shared with tracers.

Operators and methods are defined once here and installed on both :class:`Array` and
:class:`functrans.core.Tracer`, so code reads the same eagerly and under a transform.
"""
from __future__ import annotations

import numpy as np

from functrans import _devices, _dtypes, _transfer_guard, core


def _jnp():
    import functrans.numpy as jnp  # deferred: numpy -> _array at import
    return jnp


class _ArrayType(type):
    """``isinstance(x, Array)`` is true for every array value a user sees, as for
    ``jax.Array``: concrete arrays (on any device, sharded or not), tracers of every
    transform, and typed PRNG key arrays (registered by ``functrans.random``). Code that
    needs a concrete buffer asks :func:`is_concrete_array` instead."""

    def __instancecheck__(cls, obj):
        if type.__instancecheck__(cls, obj):
            return True
        return cls is Array and isinstance(obj, _array_value_types)


# classes whose instances are array values without being concrete Arrays
_array_value_types: tuple = (core.Tracer,)


def register_array_value_type(value_type: type) -> None:
    """Make ``isinstance(x, Array)`` true for instances of ``value_type`` (typed keys)."""
    global _array_value_types
    if value_type not in _array_value_types:
        _array_value_types = _array_value_types + (value_type,)


def is_concrete_array(x) -> bool:
    """Whether ``x`` is a concrete :class:`Array` (with a buffer): not a tracer or a key."""
    return type.__instancecheck__(Array, x)


class Array(metaclass=_ArrayType):
    """An immutable n-dimensional array. On a CPU device its buffer is a NumPy array.

        >>> import functrans.numpy as jnp
        >>> x = jnp.arange(3.0)
        >>> x * 2
        Array([0., 2., 4.], dtype=float32)
    """

    __slots__ = ("_value", "weak_type", "_device", "_aval", "__weakref__")
    __array_priority__ = 100
    _platform = "cpu"  # where the buffer lives (a GPU array says "gpu")

    def __init__(self, value: np.ndarray, weak_type: bool = False, device=None):
        # Host data is copied (in native byte order): the caller's array stays writeable,
        # and writing to it (or to the array it views) never changes this Array.
        self._value = core.host_copy(np.asarray(value))
        self.weak_type = weak_type
        self._device = device

    @classmethod
    def _from_buffer(cls, value: np.ndarray, weak_type: bool = False, device=None) -> "Array":
        """Wrap a fresh buffer the library just computed, or a view of other Arrays' buffers:
        memory nobody else can write (no copy, no checks). Host data goes through
        ``Array(value)`` instead, which copies it."""
        obj = object.__new__(cls)
        value.flags.writeable = False
        obj._value = value
        obj.weak_type = weak_type
        obj._device = device
        return obj

    @property
    def aval(self) -> core.ShapedArray:
        try:  # made once: the array is immutable (delete() forgets it)
            return self._aval
        except AttributeError:
            value = self._value
            aval = self._aval = core.ShapedArray(value.shape, value.dtype, self.weak_type)
            return aval

    shape = property(lambda self: self._value.shape)
    dtype = property(lambda self: self._value.dtype)
    ndim = property(lambda self: self._value.ndim)
    size = property(lambda self: self._value.size)
    nbytes = property(lambda self: self._value.nbytes)
    itemsize = property(lambda self: self._value.itemsize)

    @property
    def device(self):
        if self._device is None:
            self._device = _devices.local_devices(backend="cpu")[0]
        return self._device

    def devices(self) -> set:
        return {self.device}

    @property
    def sharding(self):
        """Where the array lives: ``SingleDeviceSharding(device)`` for an array on one device
        (a ``NamedSharding`` for arrays split over a mesh)."""
        # (functrans.sharding builds on this module; imported on use)
        from functrans.sharding import SingleDeviceSharding
        return SingleDeviceSharding(self.device)

    @property
    def is_fully_replicated(self) -> bool:
        return True

    @property
    def addressable_shards(self) -> list:
        """The one block of an array on one device: the whole array."""
        # deferred: sharding -> sharding._arrays -> _array at import
        from functrans.sharding import Shard
        return [Shard(self.device, (slice(None),) * self.ndim, 0, self)]

    @property
    def global_shards(self) -> list:
        return self.addressable_shards

    def block_until_ready(self) -> "Array":
        return self

    def is_ready(self) -> bool:
        """Whether the value is computed: always, for an array in host memory."""
        return True

    def copy_to_host_async(self) -> None:
        """Start copying the value to the host: it lives there already."""

    def is_fully_addressable(self) -> bool:
        return True

    def is_deleted(self) -> bool:
        """Whether this array was donated to a jitted call (``donate_argnums``)."""
        return isinstance(self._value, _DeletedBuffer)

    def delete(self) -> None:
        """Release this array: later uses raise an error."""
        delete(self)

    def __array__(self, dtype=None, copy=None):
        value = self._value
        if dtype is not None and np.dtype(dtype) != value.dtype:
            return value.astype(dtype)
        if copy:
            return value.copy()
        return value

    def __dlpack__(self, *args, **kwargs):
        return self._value.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._value.__dlpack_device__()

    def to_numpy(self) -> np.ndarray:
        return self._value

    def __len__(self):
        if self._value.ndim == 0:
            raise TypeError("len() of unsized object (a 0-d array)")
        return self._value.shape[0]

    def __iter__(self):
        if self._value.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self._value.shape[0]))

    def __bool__(self):
        return bool(self._value)

    def __float__(self):
        return float(self._value)

    def __int__(self):
        return int(self._value)

    def __complex__(self):
        return complex(self._value)

    def __index__(self):
        if not _dtypes.is_integer(self.dtype) and not _dtypes.is_bool(self.dtype):
            raise TypeError(f"only integer arrays can be used as an index, not {self.dtype}")
        return int(self._value)

    def item(self, *args):
        return self._value.item(*args)

    def tolist(self):
        return self._value.tolist()

    def copy(self) -> "Array":
        return Array._from_buffer(self._value.copy(), self.weak_type, self._device)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self.copy()

    def __reduce__(self):
        return (_rebuild_array, (self._value.copy(), self.weak_type))

    __hash__ = None

    def __setitem__(self, idx, value):
        raise TypeError("functrans arrays are immutable: `x[idx] = y` is not supported. "
                        "Use `x = x.at[idx].set(y)` to get an updated copy.")

    def __repr__(self):
        value = self._value
        if isinstance(value, _DeletedBuffer):
            return "Array(<deleted: donated to a jitted call>)"
        if value.dtype == _dtypes.float0:
            return f"Array(float0{list(value.shape)})"
        prefix = "Array("
        body = np.array2string(value, separator=", ", prefix=prefix)
        dtype = value.dtype.name
        weak = ", weak_type=True" if self.weak_type else ""
        return f"{prefix}{body}, dtype={dtype}{weak})"

    def __str__(self):
        return str(self._value)

    def __format__(self, spec):
        if self._value.ndim == 0:
            return format(self._value.item(), spec)
        return format(str(self), spec)


class _DeletedBuffer:
    """Stands in for the buffer of an Array that was donated to a jitted call: any use
    raises, instead of silently reading memory the call may have reused."""

    __slots__ = ()

    def _fail(self, *args, **kwargs):
        raise RuntimeError("Array has been deleted: it was donated to a jitted call "
                           "(donate_argnums) and its buffer may have been reused. Use the "
                           "call's result instead, or do not donate this argument.")

    __array__ = __getattr__ = __len__ = __iter__ = __bool__ = _fail


_DELETED = _DeletedBuffer()

core.register_array_type(Array)


def host_to_array(x, aval=None, device=None, explicit: bool = False) -> Array:
    """Host data (a NumPy array or scalar, a Python scalar) as an Array of its canonical
    dtype: a private copy in native byte order (:func:`functrans.core.to_numpy`; a Python
    int must fit its dtype). The caller's array is left as it was.

        >>> import numpy as np
        >>> h = np.ones(2, np.float32)
        >>> x = host_to_array(h)
        >>> h[0] = 5.0  # h stays writeable, and x keeps its values
        >>> x
        Array([1., 1.], dtype=float32)

    It is a host-to-device transfer, ``explicit`` when the program asked for it
    (``device_put``), for the transfer guards; while a program is being staged it is a
    constant of that program instead, as in JAX.
    """
    if _transfer_guard.switch.on and not core.is_staging():
        _transfer_guard.check("host_to_device", explicit,
                              lambda: _transfer_guard.describe_host_to_device(
                                  aval if aval is not None else core.get_aval(x), device))
    if aval is None:
        if type(x) is np.ndarray:  # the common case, without building an aval
            return Array._from_buffer(core.host_copy(x, _dtypes.canonicalize_dtype(x.dtype)),
                                      False, device)
        aval = core.get_aval(x)
    return Array._from_buffer(core.to_numpy(x, aval), aval.weak_type, device)


def delete(array: "Array") -> None:
    """Mark ``array`` as deleted (its buffer was donated)."""
    array._value = _DELETED
    try:
        del array._aval
    except AttributeError:
        pass


def _rebuild_array(value, weak_type):
    return Array(value, weak_type)


# ---- methods shared by Array and Tracer ------------------------------------------------------

def _binary(name, reverse=False):
    def method(self, other):
        if not _is_array_like(other):
            return NotImplemented
        fn = getattr(_jnp(), name)
        return fn(other, self) if reverse else fn(self, other)
    method.__name__ = name
    return method


def _is_array_like(x) -> bool:
    return is_concrete_array(x) or \
        isinstance(x, (core.Tracer, np.ndarray, np.generic, bool, int, float, complex)) \
        or hasattr(x, "__jax_array__")


def _unary(name):
    def method(self):
        return getattr(_jnp(), name)(self)
    method.__name__ = name
    return method


def _forward(name):
    def method(self, *args, **kwargs):
        return getattr(_jnp(), name)(self, *args, **kwargs)
    method.__name__ = name
    return method


def _reshape(self, *shape, order="C"):
    if len(shape) == 1 and not isinstance(shape[0], int) and shape[0] is not None:
        shape = shape[0]
    return _jnp().reshape(self, shape, order=order)


def _transpose(self, *axes):
    if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], int)):
        axes = axes[0]
    return _jnp().transpose(self, axes or None)


def _astype(self, dtype, copy=False):
    return _jnp().astype(self, dtype)


def _getitem(self, idx):
    return _jnp()._indexing.getitem(self, idx)


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
        from functrans.sharding._constraints import with_sharding_constraint
        return with_sharding_constraint(out, out_sharding)

    def _update(self, op, values, mode=None, out_sharding=None, wrap_negative_indices=True,
                indices_are_sorted=False, unique_indices=False):
        self._check(wrap_negative_indices)
        out = _jnp()._indexing.scatter_update(self.array, self.index, values, op, mode=mode)
        return self._placed(out, out_sharding)

    def get(self, *, indices_are_sorted=False, unique_indices=False, mode=None,
            fill_value=None, out_sharding=None, wrap_negative_indices=True):
        self._check(wrap_negative_indices)
        out = _jnp()._indexing.getitem(self.array, self.index, mode=mode, fill_value=fill_value)
        return self._placed(out, out_sharding)

    def set(self, values, **kwargs):
        return self._update("set", values, **kwargs)

    def add(self, values, **kwargs):
        return self._update("add", values, **kwargs)

    def subtract(self, values, **kwargs):
        return self._update("add", -_jnp().asarray(values), **kwargs)

    def multiply(self, values, **kwargs):
        return self._update("mul", values, **kwargs)

    mul = multiply

    def divide(self, values, **kwargs):
        return self._update("mul", 1 / _jnp().asarray(values), **kwargs)

    def power(self, values, **kwargs):
        current = self.get(mode=kwargs.get("mode"))
        return self.set(current ** values, **kwargs)

    def min(self, values, **kwargs):
        return self._update("min", values, **kwargs)

    def max(self, values, **kwargs):
        return self._update("max", values, **kwargs)

    def apply(self, func, **kwargs):
        return self.set(func(self.get(mode=kwargs.get("mode"))), **kwargs)


_BINARY_OPS = {
    "__add__": "add", "__sub__": "subtract", "__mul__": "multiply", "__truediv__": "true_divide",
    "__floordiv__": "floor_divide", "__mod__": "remainder", "__pow__": "power",
    "__matmul__": "matmul", "__and__": "bitwise_and", "__or__": "bitwise_or",
    "__xor__": "bitwise_xor", "__lshift__": "left_shift", "__rshift__": "right_shift",
    "__eq__": "equal", "__ne__": "not_equal", "__lt__": "less", "__le__": "less_equal",
    "__gt__": "greater", "__ge__": "greater_equal", "__divmod__": "divmod",
}
_UNARY_OPS = {"__neg__": "negative", "__pos__": "positive", "__abs__": "abs",
              "__invert__": "invert"}
_FORWARDED_METHODS = [
    "sum", "mean", "max", "min", "prod", "argmax", "argmin", "any", "all", "var", "std",
    "cumsum", "cumprod", "ravel", "squeeze", "swapaxes", "clip", "round", "dot",
    "conj", "conjugate", "take", "sort", "argsort", "repeat", "nonzero", "trace", "diagonal",
    "ptp", "searchsorted", "choose", "nansum", "view",
]


def _install(cls):
    for dunder, fname in _BINARY_OPS.items():
        setattr(cls, dunder, _binary(fname))
        if dunder not in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"):
            setattr(cls, "__r" + dunder[2:], _binary(fname, reverse=True))
    for dunder, fname in _UNARY_OPS.items():
        setattr(cls, dunder, _unary(fname))
    for name in _FORWARDED_METHODS:
        setattr(cls, name, _forward(name))
    cls.__round__ = lambda self, ndigits=None: _jnp().round(self, ndigits or 0)
    cls.reshape = _reshape
    cls.flatten = lambda self, order="C": _jnp().ravel(self, order)
    # jnp.compress takes the condition first; the method takes it as its argument
    cls.compress = lambda self, condition, axis=None, **kw: _jnp().compress(condition, self, axis, **kw)
    cls.transpose = _transpose
    cls.astype = _astype
    cls.__getitem__ = _getitem
    cls.T = property(lambda self: _jnp().transpose(self))
    cls.mT = property(lambda self: _jnp().swapaxes(self, -1, -2))
    cls.real = property(lambda self: _jnp().real(self))
    cls.imag = property(lambda self: _jnp().imag(self))
    cls.at = property(_IndexUpdateHelper)


_install(Array)
_install(core.Tracer)
# jax.Array's copy() on a traced value: a copy in the program (values are immutable anyway)
core.Tracer.copy = lambda self: _jnp().array(self, copy=True)
