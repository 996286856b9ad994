"""Subnormal floats flushed to zero while functrans computes, as on JAX's CPU backend.

XLA's CPU runtime runs its code with two bits of the x86 control register MXCSR set:
FTZ (flush to zero, bit 15: a result too small to be a normal float is 0) and DAZ
(denormals are zero, bit 6: a subnormal operand counts as 0). So in JAX
``jnp.float32(3e-45) == 0`` is true, ``jnp.array([1e-40], jnp.float32) * 2`` is 0, and a
product whose result would be subnormal is 0, in float32 and float64 alike, eagerly and
under ``jit``. Operations that only move bits (copies, reshapes, ``neg``, ``abs``,
``select``, bit casts, transfers) keep a subnormal as it is. Subnormal arithmetic is also
tens of times slower on Intel cores: the backward pass of a recurrent network, whose
cotangents shrink into them, ran 11x faster with the bits set.

functrans does the same while the config option ``flush_denormals``
(``FUNCTRANS_FLUSH_DENORMALS``, on by default) is on: compiled code sets the two bits on
entry and restores the caller's on return (see ``backends/llvm/codegen.py``), its pool
threads take the calling thread's mode, and the reference implementations that compute
eager operations run inside :func:`flushing` (NumPy's loops then flush as XLA's code
does). The caller's mode is restored afterwards, also when the computation raises.

Only x86-64 Linux has the bits here (through the C library's ``fegetenv``/``fesetenv``,
whose ``fenv_t`` ends with MXCSR); elsewhere :func:`flushing` does nothing.

    >>> with flushing():          # doctest: +SKIP
    ...     np.float32(1e-20) * np.float32(1e-20)
    np.float32(0.0)
"""
from __future__ import annotations

import ctypes
import platform
import sys
import threading

from functrans._config import config

FTZ = 1 << 15  # MXCSR: results that would be subnormal are 0
DAZ = 1 << 6  # MXCSR: subnormal operands are read as 0
FLUSH_BITS = FTZ | DAZ

# glibc's and musl's x86-64 fenv_t: the x87 environment (28 bytes), then MXCSR
_FENV_WORDS = 8
_MXCSR_WORD = 7


def _load_fenv():
    if not (sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")):
        return None
    # the process's own symbols (Python links the C math library), else libm by its name;
    # never ctypes.util.find_library, which runs ldconfig (milliseconds, at import)
    get = set_ = None
    for name in (None, "libm.so.6"):
        try:
            libm = ctypes.CDLL(name)
            get, set_ = libm.fegetenv, libm.fesetenv
            break
        except (OSError, AttributeError):
            continue
    if get is None:
        return None
    get.argtypes = set_.argtypes = [ctypes.c_void_p]
    get.restype = set_.restype = ctypes.c_int
    return get, set_


_fenv = _load_fenv()
_Env = ctypes.c_uint32 * _FENV_WORDS


class _ThreadMode(threading.local):
    depth = 0  # nested flushing() blocks on this thread (only the outermost switches)
    saved = None  # the caller's environment, while depth > 0
    flushed = None


_thread = _ThreadMode()


def supported() -> bool:
    """Whether this platform has the flush bits (x86-64 Linux)."""
    return _fenv is not None


def enabled() -> bool:
    """Whether computations flush subnormals now (the config option, on a platform that
    can)."""
    return _fenv is not None and bool(config.flush_denormals)


def mxcsr() -> int:
    """The calling thread's MXCSR (0 where there is none)."""
    if _fenv is None:
        return 0
    env = _Env()
    _fenv[0](env)
    return env[_MXCSR_WORD]


class flushing:
    """A block that runs with FTZ and DAZ set on the calling thread when
    :func:`enabled`, restoring the thread's floating-point environment at its end (also
    through an exception). Blocks nest; only the outermost one switches.

        >>> with flushing():                                   # doctest: +SKIP
        ...     assert np.float32(3e-45) * 1 == 0
    """

    __slots__ = ("active",)

    def __enter__(self):
        state = _thread
        self.active = False
        if state.depth:
            state.depth += 1
            self.active = True
        elif _fenv is not None and config.flush_denormals:
            saved, flushed = state.saved, state.flushed
            if saved is None:
                saved, flushed = state.saved, state.flushed = _Env(), _Env()
            _fenv[0](saved)
            ctypes.memmove(flushed, saved, ctypes.sizeof(_Env))
            flushed[_MXCSR_WORD] |= FLUSH_BITS
            _fenv[1](flushed)
            state.depth = 1
            self.active = True
        return self

    def __exit__(self, *exc):
        if self.active:
            state = _thread
            state.depth -= 1
            if not state.depth:
                _fenv[1](state.saved)
        return False
