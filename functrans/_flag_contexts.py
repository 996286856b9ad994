"""Configuration flags that are also context managers, as in JAX: ``debug_nans``,
``debug_infs``, ``enable_x64``, ``check_tracer_leaks`` / ``checking_leaks``, ``log_compiles``
and ``explain_cache_misses`` (``with functrans.debug_nans(True): ...``)."""
from __future__ import annotations

import contextlib

from functrans._config import config

__all__ = ["check_tracer_leaks", "checking_leaks", "debug_nans", "debug_infs", "enable_x64",
           "numpy_dtype_promotion", "numpy_rank_promotion",
           "log_compiles", "explain_cache_misses"]




class _FlagState:
    """A boolean config flag that is also a context manager factory, as ``jax.debug_nans``:
    ``flag.value`` reads it, ``with flag(True):`` sets it for a block and restores it.

    The flag is process-wide (functrans's config is global), not per thread."""

    def __init__(self, name: str, doc: str):
        self._name = name
        self.__doc__ = doc

    @property
    def name(self) -> str:
        return "jax_" + self._name

    @property
    def value(self) -> bool:
        return bool(config.read(self._name))

    def __call__(self, new_val: bool = True):
        return config.setting(self._name, bool(new_val))

    def __repr__(self):
        return f"<flag {self.name}={self.value}>"


debug_nans = _FlagState(
    "debug_nans",
    """While set, an operation or jitted call that produces a NaN raises FloatingPointError
    naming the primitive (``functrans.config.update("jax_debug_nans", True)`` sets it for
    good).

        >>> import functrans, functrans.numpy as jnp
        >>> with functrans.debug_nans(True):
        ...     jnp.log(-1.0)
        Traceback (most recent call last):
        FloatingPointError: invalid value (NaN) encountered in primitive 'log' ...
    """)

debug_infs = _FlagState(
    "debug_infs",
    """As :data:`debug_nans`, for infinities: ``with functrans.debug_infs(True): ...``.""")

enable_x64 = _FlagState(
    "enable_x64",
    """While set, 64-bit types are available (Python floats become float64, ints int64):
    ``with functrans.enable_x64(True): ...``; ``functrans.enable_x64.value`` reads it.

        >>> import functrans, functrans.numpy as jnp
        >>> with functrans.enable_x64(True):
        ...     print(jnp.zeros(1).dtype)
        float64
    """)

check_tracer_leaks = _FlagState(
    "check_tracer_leaks",
    """While set, every transformation (jit, grad, vjp, jvp, vmap, make_jaxpr, control-flow
    bodies) checks when its trace ends that none of its tracers is still referred to from
    outside it, and raises UnexpectedTracerError naming each leaked one and what holds it
    (``config.update("jax_check_tracer_leaks", True)`` or ``FUNCTRANS_CHECK_TRACER_LEAKS=1``
    set it for good). Each trace then runs a garbage collection: for debugging only.

    Example::

        with functrans.check_tracer_leaks(True):
            functrans.jit(f)(x)
    """)


def checking_leaks():
    """Context manager: check for leaked tracers in the block, as ``jax.checking_leaks``
    (the same as ``check_tracer_leaks(True)``).

        >>> import functrans
        >>> leaked = []
        >>> def f(x):
        ...     leaked.append(x)       # keeps a tracer after jit's trace ends
        ...     return x
        >>> with functrans.checking_leaks():
        ...     functrans.jit(f)(1.0)  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        UnexpectedTracerError: Leaked trace DynamicJaxprTrace ...
    """
    return check_tracer_leaks(True)


log_compiles = _FlagState(
    "log_compiles",
    """While set, each trace and compilation of a jitted function is logged (at warning
    level, logger ``functrans``): ``with functrans.log_compiles(True): ...``.""")

explain_cache_misses = _FlagState(
    "explain_cache_misses",
    """While set, a jitted function that traces again logs why (which argument's shape,
    dtype or structure changed): ``with functrans.explain_cache_misses(True): ...``.""")


@contextlib.contextmanager
def numpy_dtype_promotion(value: str):
    """A block with the given dtype promotion mode (``jax.numpy_dtype_promotion``).
    functrans promotes by JAX's standard lattice; ``"strict"`` (no implicit promotion) is not
    supported."""
    if value not in ("standard", "strict"):
        raise ValueError(f"jax_numpy_dtype_promotion must be 'standard' or 'strict', got "
                         f"{value!r}")
    if value == "strict":
        raise NotImplementedError("numpy_dtype_promotion('strict') is not supported: functrans "
                                  "always promotes dtypes by the standard rules")
    yield


@contextlib.contextmanager
def numpy_rank_promotion(value: str):
    """A block with the given rank promotion mode (``jax.numpy_rank_promotion``): functrans
    broadcasts ranks as NumPy does (``"allow"``); ``"warn"``/``"raise"`` are not
    supported."""
    if value not in ("allow", "warn", "raise"):
        raise ValueError(f"jax_numpy_rank_promotion must be 'allow', 'warn' or 'raise', got "
                         f"{value!r}")
    if value != "allow":
        raise NotImplementedError(f"numpy_rank_promotion({value!r}) is not supported: "
                                  f"functrans always broadcasts ranks (as 'allow')")
    yield
