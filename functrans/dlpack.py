"""Exchange arrays with other libraries through DLPack, as ``jax.dlpack``.

functrans arrays live in host memory as NumPy buffers, so the exchange goes through NumPy's
DLPack support: any object with ``__dlpack__`` / ``__dlpack_device__`` on the CPU (a NumPy
array, a CPU PyTorch tensor, another functrans array) can be imported, and a functrans
array is exported by passing it to the other library's ``from_dlpack`` (it implements
``__dlpack__``).

    >>> import numpy as np
    >>> from functrans import dlpack
    >>> dlpack.from_dlpack(np.arange(3.0, dtype=np.float32))
    Array([0., 1., 2.], dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans._api import device_put
from functrans._array import Array

__all__ = ["from_dlpack", "is_supported_dtype"]

# DLPack device type codes (dlpack.h): what NumPy can read is host memory.
_DLPACK_CPU_DEVICES = (1, 3)  # kDLCPU, kDLCUDAHost (pinned host memory)

_SUPPORTED_KINDS = "biufc"  # bool, signed, unsigned, floating, complex


def is_supported_dtype(dtype) -> bool:
    """Whether arrays of ``dtype`` can be exchanged through :func:`from_dlpack` here.

        >>> import numpy as np
        >>> from functrans import dlpack
        >>> dlpack.is_supported_dtype(np.float32), dlpack.is_supported_dtype(np.dtype("U3"))
        (True, False)
    """
    dtype = np.dtype(dtype)
    # bfloat16 is an extension dtype that NumPy's DLPack import does not understand
    return dtype.kind in _SUPPORTED_KINDS and dtype != _dtypes.bfloat16 and dtype.itemsize <= 16


def from_dlpack(external_array, device=None, copy: bool | None = None):
    """A functrans array holding the data of ``external_array``, any object implementing
    the DLPack protocol (``__dlpack__`` and ``__dlpack_device__``) in host memory.

    The data is copied by default (``copy=None`` or ``True``), so later writes to the
    external array do not change the functrans array. ``copy=False`` shares the buffer
    instead (it then must not be written while the functrans array is in use); it is
    refused where a copy is needed (a dtype change: 64-bit data without
    ``enable_x64`` becomes 32-bit, as everywhere in functrans). ``device`` places the result
    (default: the default device).

        >>> import numpy as np
        >>> from functrans import dlpack
        >>> x = np.arange(3, dtype=np.int32)
        >>> y = dlpack.from_dlpack(x)
        >>> x[0] = 7
        >>> y
        Array([0, 1, 2], dtype=int32)
    """
    if not (hasattr(external_array, "__dlpack__") and hasattr(external_array, "__dlpack_device__")):
        raise TypeError("The array passed to from_dlpack must have __dlpack__ and "
                        "__dlpack_device__ methods.")
    device_type, _ = external_array.__dlpack_device__()
    if int(device_type) not in _DLPACK_CPU_DEVICES:
        raise NotImplementedError(
            f"from_dlpack: the array lives on DLPack device type {int(device_type)}, not in host "
            "memory; functrans imports host (CPU) arrays only. Move it to the CPU first.")
    host = np.from_dlpack(external_array)
    if not is_supported_dtype(host.dtype):
        raise TypeError(f"from_dlpack: arrays of dtype {host.dtype} are not supported")
    dtype = _dtypes.canonicalize_dtype(host.dtype)
    if copy is False:
        if dtype != host.dtype:
            raise ValueError(f"from_dlpack(copy=False): the {host.dtype} data must be converted "
                             f"to {dtype} (enable_x64 is off), which needs a copy")
        value = host  # shared, as asked: the one place an Array views memory it was given
    else:
        value = np.array(host, dtype=dtype, copy=True)
    out = Array._from_buffer(value)
    return device_put(out, device) if device is not None else out
