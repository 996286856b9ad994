"""The process's environment: ``device_get``, ``default_backend``, ``clear_caches`` and
``print_environment_info``."""
from __future__ import annotations

import platform
import sys
from typing import Any

import numpy as np

from functrans import _backends, _caches, _devices, tree_util
from functrans.core import Tracer
from functrans.version import __version__

__all__ = ["device_get", "default_backend", "clear_caches", "print_environment_info"]


def device_get(x: Any):
    """Copy every array of the pytree ``x`` (``Array``, ``ShardedArray``, GPU arrays) to a
    NumPy array on the host; other leaves (and tracers) are returned as they are.

        >>> import functrans, functrans.numpy as jnp
        >>> device_get({"w": jnp.ones(2)})
        {'w': array([1., 1.], dtype=float32)}
    """
    def get(leaf):
        if isinstance(leaf, Tracer):
            return leaf
        to_array = getattr(leaf, "__array__", None)
        if to_array is None:
            return leaf
        if isinstance(leaf, np.ndarray):
            return leaf
        value = np.asarray(leaf)
        if getattr(leaf, "_value", None) is value and value.flags.writeable:
            # the Array's own buffer: a read-only view, as arrays are immutable
            value = value.view()
            value.flags.writeable = False
        return value

    return tree_util.tree_map(get, x)


def default_backend() -> str:
    """The platform ``jit`` compiles for when none is named: ``"gpu"`` when a GPU backend is
    available (or configured), else ``"cpu"``.

        >>> default_backend() in ("cpu", "gpu")
        True
    """
    return _backends.default_platform()



def clear_caches() -> None:
    """Forget every staged program and compiled executable held in memory, and the scratch
    memory kept for compiled programs: each ``jit`` and ``pmap`` function traces and
    compiles again on its next call. (The on-disk cache of machine code is kept: it is keyed
    by the program, so it is never stale; ``functrans.backends.llvm.cache.clear()`` deletes
    it.)

        >>> clear_caches()
    """
    _caches.clear_all()



def print_environment_info(return_string: bool = False) -> str | None:
    """Print (or return) the versions of functrans, Python, NumPy and the compilers, the
    backends and devices found, for bug reports.

        >>> "functrans" in print_environment_info(return_string=True)
        True
    """

    lines = [f"functrans:    {__version__}",
             f"numpy:        {np.__version__}",
             f"python:       {sys.version.splitlines()[0]}",
             f"platform:     {platform.platform()}"]
    for module in ("llvmlite", "cupy", "mpi4py"):
        try:
            version = getattr(__import__(module), "__version__", "installed")
        except Exception:  # an absent (or broken) optional dependency
            version = "not installed"
        lines.append(f"{module + ':':<13} {version}")
    backends = _backends.backends()
    names = ", ".join(f"{name} ({b.platform}{'' if _safe_available(b) else ', unavailable'})"
                      for name, b in sorted(backends.items()))
    lines.append(f"backends:     {names}")
    lines.append(f"default:      {default_backend()}")
    try:
        lines.append(f"devices:      {_devices.devices()}")
    except Exception as err:  # report, do not fail, in a bug-report helper
        lines.append(f"devices:      unavailable ({err})")
    text = "\n".join(lines)
    if return_string:
        return text
    print(text)
    return None


def _safe_available(backend) -> bool:
    try:
        return bool(backend.available())
    except Exception:
        return False
