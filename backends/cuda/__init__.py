"""The cuda backend: fused CUDA kernels compiled with NVRTC through CuPy, cuBLAS for matrix
products, NCCL for collectives across GPUs.

It is optional (``pip install functrans[cuda]``): without CuPy, or without a GPU, this
package still imports, registers the backend as unavailable and lists no GPU devices.
Code generation itself needs neither, so ``jit(f, backend="cuda").lower(x).as_text()``-style
inspection and the compile tests run anywhere (see docs/gpu.md).

    >>> import functrans
    >>> functrans._backends.backends()["cuda"].platform
    'gpu'
"""
from __future__ import annotations

from functrans._backends import register_backend
from functrans._devices import Device, register_platform
from functrans.backends.cuda.runtime import (CudaExecutable, compile_jaxpr, cupy_module,
                                             gpu_count, is_available)

__all__ = ["CudaExecutable", "compile_jaxpr", "gpu_count", "is_available", "gpu_devices"]


def gpu_devices() -> list:
    """One :class:`Device` per visible GPU of every process (``process_count()`` processes,
    each seeing the same number of GPUs; process ``p`` owns ids ``p * n .. p * n + n - 1``)."""
    from functrans import distributed
    count = gpu_count()
    if count == 0:
        raise RuntimeError("no CUDA GPU is visible to this process (check CUDA_VISIBLE_DEVICES "
                           "and that CuPy matches the driver: python -c 'import cupy; "
                           "cupy.show_config()')")
    return [Device("gpu", p * count + i, p, i)
            for p in range(distributed.process_count()) for i in range(count)]


register_backend("cuda", "gpu", compile_jaxpr, priority=20, available=is_available)
if cupy_module() is not None:
    register_platform("gpu", gpu_devices)
