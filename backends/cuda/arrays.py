"""Arrays that live on a GPU, and the GPU devices that make them.

A :class:`GpuArray` is a :class:`functrans.Array` whose buffer is a CuPy array on one GPU.
Jitted functions compiled by the cuda backend take it without a copy and return new
``GpuArray``s, so a training loop's state stays on the GPU between steps. Everything else
that reads an array's values (printing, NumPy conversion, eager operations, the CPU
compiler) sees a host copy, made on first use and kept: results are always right, and only
jitted code runs on the GPU.

    >>> import functrans, numpy as np                                   # doctest: +SKIP
    >>> gpu = functrans.devices("gpu")[0]                               # doctest: +SKIP
    >>> x = functrans.device_put(np.arange(4.0, dtype=np.float32), gpu) # doctest: +SKIP
    >>> x.device, type(x).__name__                                      # doctest: +SKIP
    (GpuDevice(id=0), 'GpuArray')
    >>> functrans.jit(lambda v: v * 2)(x)                               # doctest: +SKIP
    Array([0., 2., 4., 6.], dtype=float32)

bfloat16, which CuPy lacks, is held on the GPU as its ``uint16`` bit patterns.
"""
from __future__ import annotations

import numpy as np

from functrans import _array, _devices, core, distributed
from functrans._array import Array, is_concrete_array
from functrans._devices import Device
from functrans.backends.cuda.driver import cupy_module
from functrans.backends.cuda.scalar_ops import BFLOAT16, storage_dtype


class GpuDevice(Device):
    """One GPU. ``local_id`` is its CUDA ordinal in this process."""

    __slots__ = ()

    def __init__(self, id: int, process_index: int = 0, local_id: int | None = None):
        super().__init__("gpu", id, process_index, local_id)

    def put(self, leaf) -> "GpuArray":
        """``device_put(leaf, this_gpu)``."""
        if isinstance(leaf, GpuArray) and leaf.device == self:
            return leaf
        if is_concrete_array(leaf):
            host, weak = leaf._value, leaf.weak_type
        else:
            aval = core.get_aval(leaf)
            host, weak = np.asarray(leaf, dtype=aval.dtype), aval.weak_type
        cp = cupy_module()
        with cp.cuda.Device(self.local_id):
            # (ascontiguousarray makes a 0-d array 1-d: the reshape keeps its shape)
            contiguous = np.ascontiguousarray(host).reshape(host.shape)
            buffer = cp.asarray(contiguous.view(storage_dtype(host.dtype)))
        return GpuArray(buffer, host.dtype, weak, self)


class GpuArray(Array):
    """An immutable array whose buffer is a CuPy array on one GPU (see the module doc)."""

    __slots__ = ("_gpu", "_host", "_logical_dtype")
    _platform = "gpu"

    def __init__(self, buffer, dtype, weak_type: bool = False, device: GpuDevice | None = None):
        self._gpu = buffer
        self._host = None
        self._logical_dtype = np.dtype(dtype)
        self.weak_type = weak_type
        self._device = device

    @classmethod
    def wrap(cls, buffer, aval: core.ShapedArray) -> "GpuArray":
        """A result of a jitted call: ``buffer`` holds ``aval`` (bfloat16 as bits)."""
        obj = object.__new__(cls)
        obj._gpu = buffer
        obj._host = None
        obj._logical_dtype = aval.dtype
        obj.weak_type = aval.weak_type
        obj._device = None
        return obj

    # The host copy: made once, on the first read of the values.
    def _get_value(self):
        host = self._host
        if host is None:
            if self._gpu is None:
                raise RuntimeError("GpuArray has no buffer")
            host = self._gpu.get()
            if self._logical_dtype == BFLOAT16:
                host = host.view(BFLOAT16)
            host.flags.writeable = False
            self._host = host
        return host

    def _set_value(self, value):
        # Only delete() assigns: the array is consumed, and its GPU buffer released.
        self._host = value
        self._gpu = None

    _value = property(_get_value, _set_value)

    @property
    def aval(self) -> core.ShapedArray:
        return core.ShapedArray(self.shape, self._logical_dtype, self.weak_type)

    shape = property(lambda self: self._buffer().shape)
    dtype = property(lambda self: self._logical_dtype)
    ndim = property(lambda self: self._buffer().ndim)
    size = property(lambda self: self._buffer().size)
    nbytes = property(lambda self: self._buffer().nbytes)
    itemsize = property(lambda self: self._logical_dtype.itemsize)

    def _buffer(self):
        if self._gpu is None:
            self._value._fail()  # a deleted array: the clear error
        return self._gpu

    @property
    def device(self) -> GpuDevice:
        if self._device is None:
            self._device = device_of(self._buffer())
        return self._device

    @property
    def device_buffer(self):
        """The CuPy array (bfloat16 as uint16), shared, not copied: do not write to it."""
        return self._buffer()

    def block_until_ready(self) -> "GpuArray":
        cp = cupy_module()
        with cp.cuda.Device(self._buffer().device.id):
            cp.cuda.get_current_stream().synchronize()
        return self

    def is_ready(self) -> bool:
        """Whether the kernels queued on the device's stream (this array's among them) ended."""
        cp = cupy_module()
        with cp.cuda.Device(self._buffer().device.id):
            return bool(cp.cuda.get_current_stream().done)

    def __dlpack__(self, *args, **kwargs):
        return self._buffer().__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._buffer().__dlpack_device__()

    @property
    def __cuda_array_interface__(self):
        return self._buffer().__cuda_array_interface__

    def copy(self) -> "GpuArray":
        return GpuArray(self._buffer().copy(), self._logical_dtype, self.weak_type, self._device)

    def __reduce__(self):
        # Pickles as a host array: a GPU pointer means nothing in another process.
        return (_array._rebuild_array, (np.array(self._value), self.weak_type))


_devices_by_ordinal: dict = {}


def device_of(buffer) -> GpuDevice:
    """The :class:`GpuDevice` a CuPy array lives on (in this process)."""
    ordinal = int(buffer.device.id)
    device = _devices_by_ordinal.get(ordinal)
    if device is None:
        # the GPU platform's devices, as the backend registered them
        for d in _devices.devices("gpu"):
            if d.process_index == distributed.process_index():
                _devices_by_ordinal.setdefault(d.local_id, d)
        device = _devices_by_ordinal[ordinal]
    return device


def wrap_outputs(buffers, avals) -> list:
    """Arrays for a cuda executable's results: CuPy buffers become :class:`GpuArray`s,
    host values (a literal output) plain arrays."""
    out = []
    for b, aval in zip(buffers, avals):
        if type(b) is np.ndarray:
            out.append(core.wrap_array(b, aval))
        else:
            out.append(GpuArray.wrap(b, aval))
    return out


def is_gpu_array(x) -> bool:
    return type(x) is GpuArray


__all__ = ["GpuArray", "GpuDevice", "device_of", "wrap_outputs"]
