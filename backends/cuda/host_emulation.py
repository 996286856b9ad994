"""Run generated CUDA programs on the CPU: the kernels' per-element code compiled as host code.

Every kernel the code generator writes keeps its work in ``__host__ __device__`` functions,
and the module's ``host_source`` adds ``extern "C" host_<kernel>(void** buffers)`` wrappers
that loop over it serially. :func:`build_library` compiles one or more modules with
``nvcc -shared`` (which also compiles every kernel for the GPU, so a successful build proves
the device code compiles too), and :class:`HostBackend` lets
:meth:`~runtime.CudaExecutable.run_schedule` run the whole schedule (arena, matmuls,
fallbacks) with NumPy arrays. That checks the generated arithmetic, indexing and reductions
against the reference interpreter on machines without a GPU, as long as ``nvcc`` is there.
It does not exercise the parallel parts (grid-stride loops, block reductions).

    >>> exe = runtime.compile_jaxpr(closed)                         # doctest: +SKIP
    >>> lib = build_library([exe.module])                           # doctest: +SKIP
    >>> run(exe, lib, np.ones(3, np.float32))                       # doctest: +SKIP
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile

import numpy as np

from functrans.backends.cuda.codegen import KernelLaunch
from functrans.backends.cuda.prelude import PRELUDE
from functrans.backends.cuda.runtime import ArrayBackend, CudaExecutable, _logical, _storage
from functrans.backends.compiler.fusion import Buffer

NVCC_FLAGS = ("-std=c++14", "-shared", "-Xcompiler", "-fPIC", "-O1", "-w")


class NvccError(RuntimeError):
    """nvcc rejected generated code; the message holds its diagnostics and the file."""


def nvcc_path() -> str | None:
    return shutil.which("nvcc")


def translation_unit(modules) -> str:
    """One source holding the kernels of ``modules`` (generated with distinct prefixes) and
    their host wrappers."""
    parts = [PRELUDE]
    for m in modules:
        parts.append(m.source[len(PRELUDE):] if m.source.startswith(PRELUDE) else m.source)
        parts.append(m.host_source)
    return "\n".join(parts)


def compile_with_nvcc(source: str, output: str, flags=NVCC_FLAGS) -> None:
    """``nvcc flags source -o output``; raises :class:`NvccError` with its messages."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise NvccError("nvcc is not on PATH")
    directory = os.path.dirname(output)
    path = os.path.join(directory, os.path.basename(output) + ".cu")
    with open(path, "w") as f:
        f.write(source)
    proc = subprocess.run([nvcc, *flags, path, "-o", output], capture_output=True, text=True)
    if proc.returncode != 0:
        raise NvccError(f"nvcc failed on {path}:\n{proc.stderr[-6000:]}")


def build_library(modules, directory: str | None = None) -> ctypes.CDLL:
    """Compile ``modules`` into one shared library (cached by the source's hash)."""
    source = translation_unit(modules)
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    directory = directory or os.path.join(tempfile.gettempdir(), "functrans-cuda-host")
    os.makedirs(directory, exist_ok=True)
    output = os.path.join(directory, f"lib{digest}.so")
    if not os.path.exists(output):
        tmp = output + f".{os.getpid()}.tmp"
        compile_with_nvcc(source, tmp)
        os.replace(tmp, output)
    return ctypes.CDLL(output)


class HostBackend(ArrayBackend):
    """NumPy arrays; kernels are the serial ``host_<name>`` wrappers in ``library``."""

    xp = np

    def __init__(self, library: ctypes.CDLL):
        self.library = library

    def pointer(self, array) -> int:
        return int(array.ctypes.data)

    def from_host(self, array):
        return np.array(array, copy=True)

    def to_host(self, array) -> np.ndarray:
        return np.asarray(array)

    def launch(self, launch: KernelLaunch, pointers: list, scratch: int) -> None:
        fn = getattr(self.library, f"host_{launch.name}")
        table = (ctypes.c_void_p * max(len(pointers), 1))(*pointers)
        fn.argtypes = [ctypes.c_void_p]
        fn(table)


def run(executable: CudaExecutable, library: ctypes.CDLL, *args) -> list:
    """``executable(*args)`` on the CPU; NumPy arrays in, NumPy arrays out."""
    program = executable.program
    backend = HostBackend(library)
    inputs = [_storage(np.asarray(a), b) for a, b in zip(args, program.inputs)]
    outs = executable.run_schedule(backend, inputs, key=("host", id(library)))
    return [_logical(o, b) if isinstance(b, Buffer) else o for o, b in zip(outs, program.outputs)]

