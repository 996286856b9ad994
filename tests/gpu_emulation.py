"""An emulated CuPy for testing the GPU code paths on a machine without a GPU: "device
arrays" are host arrays tagged with a GPU ordinal, and, as with CuPy, an array may only be
used while its GPU is current (stricter here: reshapes and views too)."""
from __future__ import annotations

import numpy as np


class EmulatedDeviceArray(np.ndarray):
    """A "CuPy array": a host array that remembers its GPU. Like CuPy, operations that
    compute must run with that GPU current (stricter here: reshapes and views too)."""

    def __array_finalize__(self, obj):
        self.gpu = getattr(obj, "gpu", None)

    @property
    def device(self):
        return EmulatedCupy.cuda.Device(self.gpu)

    def get(self):
        return np.array(np.asarray(self))

    def _checked(self):
        current = EmulatedCupy.cuda.current()
        assert self.gpu == current, f"array on GPU {self.gpu} used while GPU {current} is current"
        return self

    def reshape(self, *shape):
        return np.ndarray.reshape(self._checked(), *shape)

    def view(self, *args):
        return np.ndarray.view(self._checked(), *args)


class _EmulatedCuda:
    import threading as _threading
    _local = _threading.local()

    class Device:
        def __init__(self, id=None):
            self.id = _EmulatedCuda.current() if id is None else int(id)

        def __enter__(self):
            stack = _EmulatedCuda._stack()
            stack.append(self.id)
            return self

        def __exit__(self, *exc):
            _EmulatedCuda._stack().pop()

    class _Stream:
        ptr = 0

        def synchronize(self):
            pass

    @classmethod
    def _stack(cls) -> list:
        if not hasattr(cls._local, "stack"):
            cls._local.stack = []
        return cls._local.stack

    @classmethod
    def current(cls) -> int:
        stack = cls._stack()
        return stack[-1] if stack else 0   # CuPy's default current device

    @classmethod
    def get_current_stream(cls):
        return cls._Stream()


class EmulatedCupy:
    """The few CuPy functions pmap's GPU code uses."""
    ndarray = EmulatedDeviceArray
    cuda = _EmulatedCuda
    uint8, bool_ = np.uint8, np.bool_

    @staticmethod
    def _new(host):
        out = np.array(host).view(EmulatedDeviceArray)
        out.gpu = _EmulatedCuda.current()
        return out

    @classmethod
    def _inputs(cls, *arrays):
        for a in arrays:
            if isinstance(a, EmulatedDeviceArray):
                a._checked()

    @classmethod
    def asarray(cls, a, dtype=None):
        cls._inputs(a)
        return cls._new(np.asarray(a, dtype))

    @classmethod
    def ascontiguousarray(cls, a):
        cls._inputs(a)
        return a if a.flags.c_contiguous else cls._new(np.ascontiguousarray(a))

    @classmethod
    def moveaxis(cls, a, source, destination):
        return np.moveaxis(a, source, destination)

    @classmethod
    def isnan(cls, a):
        cls._inputs(a)
        return cls._new(np.isnan(a))

    @classmethod
    def where(cls, c, x, y):
        cls._inputs(c, x, y)
        return cls._new(np.where(c, x, y))
