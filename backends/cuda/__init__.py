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

import functools
import importlib.util

from functrans._backends import register_backend
from functrans._devices import register_platform

__all__ = ["CudaExecutable", "compile_jaxpr", "gpu_count", "is_available", "gpu_devices"]

# The code generator and runtime are imported on first use: on a machine without CuPy this
# package only registers an unavailable backend, and jit's start-up should not pay for more.
# (Every import of this package's modules below is deferred for that reason.)
_LAZY = {"CudaExecutable", "cupy_module", "gpu_count"}


def __getattr__(name):
    if name in _LAZY:
        from functrans.backends.cuda import runtime  # deferred: start-up time (see above)
        return getattr(runtime, name)
    raise AttributeError(name)


@functools.lru_cache(maxsize=None)
def _cupy_installed() -> bool:
    # asked on every default-platform lookup (each jit compile, pmap call, device_put): the
    # import system's search is slow, and the answer does not change within a process
    return importlib.util.find_spec("cupy") is not None


def is_available() -> bool:
    """Whether CuPy is installed and sees a GPU."""
    if not _cupy_installed():
        return False
    from functrans.backends.cuda.driver import gpu_count  # deferred: start-up time
    return gpu_count() > 0


def compile_jaxpr(closed, devices=None, **options):
    """Compile ``closed`` to CUDA kernels (see :func:`runtime.compile_jaxpr`)."""
    # deferred: start-up time (the code generator and runtime)
    from functrans.backends.cuda.runtime import compile_jaxpr as compile_cuda
    return compile_cuda(closed, devices, **options)


def gpu_devices() -> list:
    """One :class:`Device` per visible GPU of every process (``process_count()`` processes,
    each seeing the same number of GPUs; process ``p`` owns ids ``p * n .. p * n + n - 1``)."""
    # deferred: start-up time (GPU arrays, and the processes' count asked only here)
    from functrans import distributed
    from functrans.backends.cuda.arrays import GpuDevice
    from functrans.backends.cuda.driver import gpu_count
    count = gpu_count()
    if count == 0:
        raise RuntimeError("no CUDA GPU is visible to this process (check CUDA_VISIBLE_DEVICES "
                           "and that CuPy matches the driver: python -c 'import cupy; "
                           "cupy.show_config()')")
    return [GpuDevice(p * count + i, p, i)
            for p in range(distributed.process_count()) for i in range(count)]


def _compile_for_jit(closed, devices=None):
    # jit's results stay on the GPU, as GpuArrays
    return compile_jaxpr(closed, devices, device_outputs=True)


def _optional_passes() -> list:
    # deferred: start-up time (the code generator and runtime)
    from functrans.backends.cuda.runtime import optional_passes
    return optional_passes()


register_backend("cuda", "gpu", _compile_for_jit, priority=20, available=is_available,
                 optional_passes=_optional_passes)
if _cupy_installed():
    register_platform("gpu", gpu_devices)
