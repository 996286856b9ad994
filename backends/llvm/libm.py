"""The C math library as generated code calls it: float64 math and the rarer float32 functions
(:mod:`vector_math` writes the common float32 ones as inline code, which vectorizes).

Generated code names each function ``ft_libm_<symbol>``, and :func:`register_libm_symbols`
points those names at this process's libm, so that machine code from the on-disk cache is
relocated against it, wherever it is loaded. A warm start registers them without building
any IR: this module imports only the linker.

    >>> register_libm_symbols()        # doctest: +SKIP
"""
from __future__ import annotations

import ctypes

from functrans.backends.llvm import linker

LIBM_FUNCTIONS = {
    # name: (float32 symbol, float64 symbol, arity)
    "exp": ("expf", "exp", 1), "exp2": ("exp2f", "exp2", 1), "log": ("logf", "log", 1),
    "log1p": ("log1pf", "log1p", 1), "expm1": ("expm1f", "expm1", 1),
    "tanh": ("tanhf", "tanh", 1), "sin": ("sinf", "sin", 1), "cos": ("cosf", "cos", 1),
    "tan": ("tanf", "tan", 1), "asin": ("asinf", "asin", 1), "acos": ("acosf", "acos", 1),
    "atan": ("atanf", "atan", 1), "sinh": ("sinhf", "sinh", 1), "cosh": ("coshf", "cosh", 1),
    "asinh": ("asinhf", "asinh", 1), "acosh": ("acoshf", "acosh", 1),
    "atanh": ("atanhf", "atanh", 1), "erf": ("erff", "erf", 1), "erfc": ("erfcf", "erfc", 1),
    "lgamma": ("lgammaf", "lgamma", 1), "cbrt": ("cbrtf", "cbrt", 1),
    "pow": ("powf", "pow", 2), "atan2": ("atan2f", "atan2", 2),
    "nextafter": ("nextafterf", "nextafter", 2), "fmod": ("fmodf", "fmod", 2),
}

_registered = False


def _libm():
    # the usual names first: ctypes.util.find_library runs a subprocess (ldconfig or a compiler)
    for name in ("libm.so.6", "libm.dylib"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    from ctypes.util import find_library
    return ctypes.CDLL(find_library("m"))


def register_libm_symbols() -> None:
    """Make ``ft_libm_<symbol>`` resolvable by the JIT linker (once per process). Generated
    code names C functions this way so that cached machine code is relocated against this
    process's libm, whatever its address."""
    global _registered
    if _registered:
        return
    libm = _libm()
    for f32_name, f64_name, _ in LIBM_FUNCTIONS.values():
        for sym in (f32_name, f64_name):
            addr = ctypes.cast(getattr(libm, sym), ctypes.c_void_p).value
            linker.register_symbol(f"ft_libm_{sym}", addr)
    _registered = True
