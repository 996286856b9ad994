"""Global configuration: flags read from the environment, changed with ``config.update``.

    >>> import functrans
    >>> functrans.config.update("enable_x64", True)   # doctest: +SKIP
"""
from __future__ import annotations

import os
import threading


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    return int(value)


class Config:
    """Named flags with defaults taken from ``FUNCTRANS_*`` environment variables."""

    def __init__(self):
        self._values = {
            "enable_x64": _env_bool("FUNCTRANS_ENABLE_X64", False),
            "cpu_device_count": _env_int("FUNCTRANS_CPU_DEVICES", 1),
            "debug_nans": _env_bool("FUNCTRANS_DEBUG_NANS", False),
            "debug_infs": _env_bool("FUNCTRANS_DEBUG_INFS", False),
            "disable_jit": _env_bool("FUNCTRANS_DISABLE_JIT", False),
            "explain_cache_misses": _env_bool("FUNCTRANS_EXPLAIN_RETRACE", False),
            "log_compiles": _env_bool("FUNCTRANS_LOG_COMPILES", False),
            "traceback_filtering": os.environ.get("FUNCTRANS_TRACEBACK_FILTERING", "on"),
            "default_backend": os.environ.get("FUNCTRANS_DEFAULT_BACKEND", ""),
            "cache_dir": os.environ.get("FUNCTRANS_CACHE_DIR", ""),
            # how random bits derive from a key: JAX's current scheme (a 64-bit counter per
            # output element) unless turned off for the original one; JAX's own variable
            # name is honoured too, so a ported launch script keeps its meaning
            "threefry_partitionable": _env_bool(
                "FUNCTRANS_THREEFRY_PARTITIONABLE",
                _env_bool("JAX_THREEFRY_PARTITIONABLE", True)),
            # default mode of random.gumbel / categorical / choice: "high" when set
            "use_high_dynamic_range_gumbel": _env_bool(
                "FUNCTRANS_USE_HIGH_DYNAMIC_RANGE_GUMBEL", False),
            # type-check every staged program (slow; the test suite turns it on)
            "check_jaxprs": _env_bool("FUNCTRANS_CHECK_JAXPRS", False),
        }
        self._listeners: dict[str, list] = {}
        self._lock = threading.Lock()

    def update(self, name: str, value) -> None:
        """Set flag ``name`` to ``value`` (as ``jax.config.update``)."""
        if name.startswith("jax_"):
            name = name[len("jax_"):]
        if name not in self._values:
            raise ValueError(f"unknown config option {name!r}; known: {sorted(self._values)}")
        with self._lock:
            self._values[name] = value
        for listener in self._listeners.get(name, ()):
            listener(value)

    def on_change(self, name: str, listener) -> None:
        self._listeners.setdefault(name, []).append(listener)

    def read(self, name: str):
        return self._values[name]

    def __getattr__(self, name: str):
        values = self.__dict__.get("_values")
        if values is not None:
            if name in values:
                return values[name]
            if name.startswith("jax_") and name[4:] in values:
                return values[name[4:]]
        raise AttributeError(name)


config = Config()
