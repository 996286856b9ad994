"""The llvm backend: fused native CPU code through llvmlite.

Passes, one module each: :mod:`fusion` (loop fusion over the platform-neutral expressions of
:mod:`exprs`), :mod:`control_flow` (``while``/``scan``/``cond`` as native loops and branches
around compiled bodies; scatters through :mod:`indexing`, which also fuses ``gather``),
:mod:`buffers` (liveness-based arena planning), :mod:`codegen` (one LLVM module per
program; scalar code from :mod:`scalar_ops`, inline math from :mod:`vector_math`, BLAS for
matmul, large loops split into chunks for the native :mod:`thread_pool`), :mod:`runtime`
(the executable, called once per native segment with the GIL released; its loops stop
early on Ctrl-C, see :mod:`interrupts`) and :mod:`cache` (machine code on disk). The driver
is :mod:`pipeline`; :mod:`standalone` links compiled programs into shared libraries with C
entry points (``functrans.export.to_shared_library``); :mod:`targets` is the CPU the code is
for (``FUNCTRANS_LLVM_CPU``). ``FUNCTRANS_NUM_THREADS`` sets how many threads run a
parallel loop (default: the CPUs this process may use).

    >>> import functrans, functrans.numpy as jnp
    >>> functrans.jit(lambda x: jnp.exp(x) + 1, backend="llvm")(jnp.zeros(2))
    Array([2., 2.], dtype=float32)
"""
from __future__ import annotations

import contextlib
import functools
import logging

from functrans import _caches
from functrans._backends import (register_backend, register_device_parallel_hook,
                                 register_shared_library_builder)
from functrans.backends.llvm import linker  # the standard library only: cheap to import

logger = logging.getLogger("functrans")

def _missing_dependency():
    # Found, not imported: loading LLVM (llvmlite.binding) is a large part of a warm start,
    # and a program whose machine code is cached never needs it. SciPy's BLAS is loaded
    # when a program first calls it.
    import importlib.util
    for module, purpose in (("llvmlite", "code generation"), ("scipy", "its BLAS")):
        if importlib.util.find_spec(module) is None:
            return ImportError(f"{module} (for {purpose}) is not installed")
    return None


# the backend is optional: without llvmlite, jit uses the reference interpreter
_IMPORT_ERROR = _missing_dependency()


def _available() -> bool:
    return _IMPORT_ERROR is None


def compile_jaxpr(closed, devices=None, *, target_cpu=None):
    """Compile ``closed`` to native code for ``target_cpu`` (default ``config.llvm_cpu``;
    see :func:`pipeline.compile_jaxpr`)."""
    if _IMPORT_ERROR is not None:
        raise RuntimeError(f"the llvm backend needs llvmlite and scipy: {_IMPORT_ERROR}")
    executable = _from_disk_cache(closed, target_cpu)
    if executable is not None:
        return executable
    # deferred: start-up time (the compiler; see _missing_dependency)
    from functrans.backends.llvm.pipeline import compile_jaxpr as compile_native
    return compile_native(closed, devices, target_cpu=target_cpu)


def _from_disk_cache(closed, target_cpu):
    """``closed``'s executable from the on-disk cache, when an earlier compile stored it with
    its layout, or None: a warm start without the compiler (see :mod:`program_cache`)."""
    # deferred: start-up time (the cache's reader links and starts what programs need)
    from functrans.backends.llvm import cache, program_cache, targets
    if not cache.enabled():
        return None
    if not cache.host_target_stored():
        _prepare_cold_compile()
    target = targets.resolve(target_cpu)
    targets.check_runs_here(target)
    key = program_cache.program_key(closed, target=target)
    entry = cache.load(key) if key is not None else None
    if entry is None:
        return None
    return program_cache.cached_executable(closed, key, entry,
                                           functools.partial(_plan, closed, target))


def _prepare_cold_compile() -> None:
    """A cache directory without this CPU's description is new: this process loads LLVM
    (to describe the CPU for the key) and compiles. LLVM's library is mapped on another
    thread, without the GIL, while this one imports the compiler, which it is about to
    need (see :func:`machine_code.load_library_ahead`)."""
    # deferred: start-up time (LLVM's driver and the compiler: only for a compile, never
    # on a warm start)
    from functrans.backends.llvm import machine_code
    loading = machine_code.load_library_ahead()
    # deferred: start-up time (imported here, beside the mapping, for the compile to come)
    from functrans.backends.llvm import pipeline  # noqa: F401
    if loading is not None:
        loading.join()


def _plan(closed, target):
    # deferred: start-up time (the compiler, imported only when a program read from the
    # disk cache is inspected)
    from functrans.backends.llvm.pipeline import plan_for_inspection
    return plan_for_inspection(closed, True, target)


@contextlib.contextmanager
def _devices_in_parallel(num_devices: int):
    """While ``num_devices`` pmap threads run at once, each runs its loops on its own thread
    and BLAS gets its share of the cores, so they do not oversubscribe the machine."""
    # deferred: start-up time (the thread pool and BLAS)
    from functrans.backends.llvm import blas, thread_pool
    with thread_pool.reserved(), blas.blas_threads(max(1, thread_pool.num_threads() // num_devices)):
        yield


def build_shared_library(entries, prefix: str, library: str, target_cpu=None):
    """A standalone ``.so`` and C header for programs, with machine code for
    ``target_cpu`` (default ``config.llvm_cpu``; see :mod:`standalone`)."""
    if _IMPORT_ERROR is not None:
        raise RuntimeError(f"the llvm backend needs llvmlite and scipy: {_IMPORT_ERROR}")
    # deferred: start-up time (the compiler and the C toolchain's driver)
    from functrans.backends.llvm import standalone
    return standalone.build_shared_library(
        [standalone.Entry(**e) for e in entries], prefix, library, target_cpu=target_cpu)


__all__ = ["compile_jaxpr", "build_shared_library"]

def _optional_passes() -> list:
    # deferred: start-up time (the compiler; see _missing_dependency)
    from functrans.backends.llvm.pipeline import optional_passes
    return optional_passes()


register_backend("llvm", "cpu", compile_jaxpr, priority=10, available=_available,
                 optional_passes=_optional_passes, compiler_options=("target_cpu",))
if _available():
    register_device_parallel_hook(_devices_in_parallel)
    register_shared_library_builder("cpu", build_shared_library)
    # what clear_caches() frees goes back to the system, not only to the C heap
    _caches.on_clear(linker.release_free_heap)
