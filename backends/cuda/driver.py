"""CuPy and the CUDA driver: whether they are here, and how many GPUs this process sees.

The cuda backend is optional: CuPy is imported on first need, never at import time, and every
answer here is False or 0 without it (or without a driver or a GPU).

    >>> gpu_count()          # doctest: +SKIP
    2
"""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def cupy_module():
    """CuPy, or None when it is not installed (or fails to load its CUDA libraries)."""
    try:
        import cupy
        return cupy
    except Exception:  # ImportError, or a CUDA library CuPy was built against is missing
        return None


@functools.lru_cache(maxsize=None)
def gpu_count() -> int:
    """How many CUDA devices this process sees (0 without CuPy or a driver)."""
    cp = cupy_module()
    if cp is None:
        return 0
    try:
        return int(cp.cuda.runtime.getDeviceCount())
    except Exception:  # no driver, or no device
        return 0


def is_available() -> bool:
    return gpu_count() > 0
