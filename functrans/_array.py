"""``functrans.Array``: an immutable array on a device.

This module knows only the layers below it (the core, devices, dtypes). What arrays do
with the layers above is registered by those layers when they are imported, as in JAX:
``functrans.numpy`` installs the operators and methods (on :class:`Array` and on
:class:`functrans.core.Tracer` alike, see ``functrans/numpy/_array_methods.py``), and
``functrans.sharding`` registers its sharding types (:func:`register_sharding_layer`).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from functrans import _devices, _dtypes, _transfer_guard, core


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
        return sharding_layer.single_device_sharding(self.device)

    @property
    def is_fully_replicated(self) -> bool:
        return True

    @property
    def addressable_shards(self) -> list:
        """The one block of an array on one device: the whole array."""
        return [sharding_layer.shard(self.device, (slice(None),) * self.ndim, 0, self)]

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


# ---- what the sharding layer provides ---------------------------------------------------------

class _ShardingLayer:
    """The parts of ``functrans.sharding`` that arrays, ``jnp`` functions (``out_sharding=``)
    and ``device_put`` use. That package builds on this module and on the API, so it
    registers them (:func:`register_sharding_layer`) when it is imported, which
    ``import functrans`` does."""

    sharding_type: type | tuple = ()  # Sharding: a placement target of device_put
    partitioned_array_type: type | tuple = ()  # PartitionedArray: an array split over devices
    single_device_sharding: Callable  # SingleDeviceSharding(device)
    shard: Callable  # Shard(device, index, replica_id, data)
    put: Callable  # put(value, sharding): a concrete value placed by a sharding
    put_traced: Callable  # put_traced(tracer, sharding): the same inside a transform
    constrain: Callable  # with_sharding_constraint(x, shardings)


sharding_layer = _ShardingLayer()


def register_sharding_layer(*, sharding_type: type, partitioned_array_type: type,
                            single_device_sharding: Callable, shard: Callable, put: Callable,
                            put_traced: Callable, constrain: Callable) -> None:
    """Register what :class:`_ShardingLayer` lists (called by ``functrans.sharding``)."""
    sharding_layer.sharding_type = sharding_type
    sharding_layer.partitioned_array_type = partitioned_array_type
    sharding_layer.single_device_sharding = single_device_sharding
    sharding_layer.shard = shard
    sharding_layer.put = put
    sharding_layer.put_traced = put_traced
    sharding_layer.constrain = constrain
