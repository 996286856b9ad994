"""What the LLVM backend's tests share: a long elementwise chain, a program compiled with
the streaming stores' threshold moved, a pass replaced by one that miscompiles, SciPy's
OpenBLAS routines as generated code calls them, and scripts run in a fresh process with a
cache directory of their own."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import functrans
import functrans.numpy as jnp
from functrans.backends.compiler import fusion
from functrans.backends.llvm import codegen, pipeline, streaming_stores


def chain(x):
    """Eight elementwise operations, three of them inline math functions."""
    y = jnp.tanh(x * 1.5 + 0.5)
    return jnp.maximum(jnp.abs(jnp.exp(-y * y) + x) * 0.5, 0.1)


def compiled(fn, *args, streamed_above: int = 1 << 62, target_cpu=None):
    """``fn`` compiled for ``args`` (no disk cache) with arrays of over ``streamed_above``
    bytes written by streaming stores (by default none is)."""
    closed = functrans.make_jaxpr(fn)(*args)
    original = streaming_stores.min_streamed_bytes
    streaming_stores.min_streamed_bytes = lambda: streamed_above
    try:
        return pipeline.compile_jaxpr(closed, use_cache=False, target_cpu=target_cpu)
    finally:
        streaming_stores.min_streamed_bytes = original


def miscompile_dot_epilogues(monkeypatch):
    """Replace ``fusion.fuse_dot_epilogues`` (for the test's duration) by a pass that scales
    every product it folds twice; returns the real pass."""
    real = fusion.fuse_dot_epilogues

    def miscompiling(program):
        program = real(program)
        for step in program.steps:
            if isinstance(step, fusion.DotKernel) and step.accumulate:
                step.alpha *= 2.0
        return program

    monkeypatch.setattr(fusion, "fuse_dot_epilogues", miscompiling)
    return real


def openblas_routine(name: str, checked: str):
    """SciPy's OpenBLAS routine ``name`` (``sgemm``, ``dgemv``, ...) with BLAS held to one
    thread, as while generated code calls it; skips the test (which checks ``checked``
    against it) where the library is another."""
    library = codegen._scipy_openblas()
    if library is None or not hasattr(library, f"scipy_{name}_"):
        pytest.skip(f"not SciPy's OpenBLAS: {checked} are checked against it")
    setter = getattr(library, "openblas_set_num_threads_local", None)
    if setter is not None:
        setter(1)  # as while a product holds BLAS
    return getattr(library, f"scipy_{name}_")


def run_with_cache_dir(script: str, cache_dir) -> str:
    """The standard output of ``script`` (dedented) run by a fresh interpreter on the CPU
    backend with ``FUNCTRANS_CACHE_DIR=cache_dir``; its failure fails the test."""
    environment = dict(os.environ, FUNCTRANS_CACHE_DIR=str(cache_dir),
                       FUNCTRANS_DEFAULT_BACKEND="cpu")
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=environment,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout
