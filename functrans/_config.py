"""Global configuration: flags read from the environment, changed with ``config.update``.

    >>> import functrans
    >>> functrans.config.update("enable_x64", True)   # doctest: +SKIP

Memory kept between calls is bounded by the options below (sizes in bytes; -1: no limit):

- ``jit_cache_max_entries`` (64, ``FUNCTRANS_JIT_CACHE_MAX_ENTRIES``): signatures each ``jit``
  or ``pmap`` function keeps (traced program and executable); the least recently called go.
- ``executable_cache_max_entries`` (1024, ``FUNCTRANS_EXECUTABLE_CACHE_MAX_ENTRIES``):
  executables kept by the caches shared by all functions.
- ``arena_cache_threshold`` (1 MiB, ``FUNCTRANS_ARENA_CACHE_THRESHOLD``): a compiled
  program's scratch arena up to this size stays with it between calls; a larger one is lent
  per call from a pool that keeps at most ``arena_pool_max_size`` (a sixteenth of the
  machine's physical memory, at least 64 MiB; ``FUNCTRANS_ARENA_POOL_MAX_SIZE``) bytes
  between calls. The llvm backend's large results are on blocks used again once their
  arrays die; it keeps at most half as many bytes of such blocks idle.
- ``compilation_cache_max_size`` (1 GiB, ``FUNCTRANS_COMPILATION_CACHE_MAX_SIZE``): the on-disk
  cache of compiled code, least recently used entries evicted (0 turns it off, as does
  ``enable_compilation_cache=False`` or ``FUNCTRANS_DISABLE_COMPILATION_CACHE=1``); it lives
  in ``cache_dir`` (alias ``compilation_cache_dir``, ``FUNCTRANS_CACHE_DIR``).

The CPU the llvm backend compiles for is ``llvm_cpu`` (``FUNCTRANS_LLVM_CPU``): ``"native"``
(the default: this machine's CPU and all its features) or an x86-64 micro-architecture level,
``"x86-64-v2"``, ``"x86-64-v3"`` (AVX2, FMA) or ``"x86-64-v4"`` (AVX-512), whose code runs
on every CPU of that level. Changing it empties the in-memory caches of compiled programs.
"""
from __future__ import annotations

import contextlib
import os
import re
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


def _physical_memory() -> int | None:
    """Bytes of physical memory of this machine, or None where the platform does not say."""
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return pages * page_size if pages > 0 and page_size > 0 else None


def _default_arena_pool_size() -> int:
    """The pooled scratch arenas kept between calls: a sixteenth of physical memory, at least
    64 MiB. A program whose arena the pool cannot keep maps a fresh one for every call, and
    the kernel zeroes each page on first touch: the d512 transformer's 675 MB arena cost
    160 ms of system time per 2 s step (docs/performance.md)."""
    memory = _physical_memory()
    return max(64 << 20, memory // 16) if memory else 64 << 20


# JAX's names for options that exist here under another name
_ALIASES = {"compilation_cache_dir": "cache_dir", "num_cpu_devices": "cpu_device_count",
            "platform_name": "default_backend"}

# JAX's environment variables, honoured for the options functrans has, so that a launch
# script written for JAX (or the fix a warning suggests) keeps its meaning: variable ->
# (option, the FUNCTRANS_ variable that wins when both are set). JAX_PLATFORMS names a list;
# its first platform becomes the default backend.
_JAX_VARIABLES = {
    "JAX_ENABLE_X64": ("enable_x64", "FUNCTRANS_ENABLE_X64"),
    "JAX_NUM_CPU_DEVICES": ("cpu_device_count", "FUNCTRANS_CPU_DEVICES"),
    "JAX_DEBUG_NANS": ("debug_nans", "FUNCTRANS_DEBUG_NANS"),
    "JAX_DEBUG_INFS": ("debug_infs", "FUNCTRANS_DEBUG_INFS"),
    "JAX_DISABLE_JIT": ("disable_jit", "FUNCTRANS_DISABLE_JIT"),
    "JAX_EXPLAIN_CACHE_MISSES": ("explain_cache_misses", "FUNCTRANS_EXPLAIN_RETRACE"),
    "JAX_LOG_COMPILES": ("log_compiles", "FUNCTRANS_LOG_COMPILES"),
    "JAX_TRACEBACK_FILTERING": ("traceback_filtering", "FUNCTRANS_TRACEBACK_FILTERING"),
    "JAX_PLATFORMS": ("default_backend", "FUNCTRANS_DEFAULT_BACKEND"),
    "JAX_PLATFORM_NAME": ("default_backend", "FUNCTRANS_DEFAULT_BACKEND"),
    "JAX_COMPILATION_CACHE_DIR": ("cache_dir", "FUNCTRANS_CACHE_DIR"),
    "JAX_ENABLE_COMPILATION_CACHE": ("enable_compilation_cache",
                                     "FUNCTRANS_DISABLE_COMPILATION_CACHE"),
    "JAX_COMPILATION_CACHE_MAX_SIZE": ("compilation_cache_max_size",
                                       "FUNCTRANS_COMPILATION_CACHE_MAX_SIZE"),
    "JAX_THREEFRY_PARTITIONABLE": ("threefry_partitionable", "FUNCTRANS_THREEFRY_PARTITIONABLE"),
    "JAX_CHECK_TRACER_LEAKS": ("check_tracer_leaks", "FUNCTRANS_CHECK_TRACER_LEAKS"),
    "JAX_TRANSFER_GUARD": ("transfer_guard", None),
    "JAX_TRANSFER_GUARD_HOST_TO_DEVICE": ("transfer_guard_host_to_device", None),
    "JAX_TRANSFER_GUARD_DEVICE_TO_HOST": ("transfer_guard_device_to_host", None),
    "JAX_TRANSFER_GUARD_DEVICE_TO_DEVICE": ("transfer_guard_device_to_device", None),
    "JAX_DEFAULT_MATMUL_PRECISION": ("default_matmul_precision", None),
}


def _apply_jax_variables(values: dict) -> None:
    """Set ``values`` from JAX's environment variables (see ``_JAX_VARIABLES``), each read
    as its option's type. The CPU device count is also read from the XLA flag JAX users set
    for it (``XLA_FLAGS=--xla_force_host_platform_device_count=8``), if nothing else sets it."""
    flag = re.search(r"--xla_force_host_platform_device_count=(\d+)",
                     os.environ.get("XLA_FLAGS", ""))
    if flag and not {"FUNCTRANS_CPU_DEVICES", "JAX_NUM_CPU_DEVICES"} & set(os.environ):
        values["cpu_device_count"] = int(flag.group(1))
    for variable, (name, own_variable) in _JAX_VARIABLES.items():
        if variable not in os.environ or (own_variable and own_variable in os.environ):
            continue
        if variable == "JAX_PLATFORMS":
            values[name] = os.environ[variable].split(",")[0].strip()
        elif isinstance(values[name], bool):
            values[name] = _env_bool(variable, values[name])
        elif isinstance(values[name], int):
            values[name] = _env_int(variable, values[name])
        else:
            values[name] = os.environ[variable]

# options that are a count or a number of bytes, -1 meaning no limit
_LIMITS = ("jit_cache_max_entries", "executable_cache_max_entries", "arena_cache_threshold",
           "arena_pool_max_size", "compilation_cache_max_size")


_TRANSFER_GUARD_LEVELS = ("allow", "log", "disallow", "log_explicit", "disallow_explicit")

# options whose value is one of a few names, or None (JAX's enum options)
_ENUMS = {
    **{name: _TRANSFER_GUARD_LEVELS for name in (
        "transfer_guard", "transfer_guard_host_to_device", "transfer_guard_device_to_host",
        "transfer_guard_device_to_device")},
    # Accepted as JAX accepts them. Every matmul on the CPU backends computes in full
    # float32 (float64 with x64) whatever is asked: none trades precision for speed.
    "default_matmul_precision": (
        "default", "high", "highest", "bfloat16", "tensorfloat32", "float32",
        "ANY_F8_ANY_F8_F32", "ANY_F8_ANY_F8_F32_FAST_ACCUM", "ANY_F8_ANY_F8_ANY",
        "ANY_F8_ANY_F8_ANY_FAST_ACCUM", "F16_F16_F16", "F16_F16_F32", "BF16_BF16_BF16",
        "BF16_BF16_F32", "BF16_BF16_F32_X3", "BF16_BF16_F32_X6", "BF16_BF16_F32_X9",
        "TF32_TF32_F32", "TF32_TF32_F32_X3", "F32_F32_F32", "F64_F64_F64"),
}


# the CPUs the llvm backend compiles for (see backends/llvm/targets.py)
TARGET_CPUS = ("native", "x86-64-v2", "x86-64-v3", "x86-64-v4")


def check_target_cpu(value, where: str = "config option 'llvm_cpu'") -> str:
    """``value`` if it names a CPU the llvm backend compiles for (:data:`TARGET_CPUS`),
    else a ValueError that says what ``where`` accepts."""
    if not isinstance(value, str) or value not in TARGET_CPUS:
        raise ValueError(f"{where}: unknown target CPU {value!r}; known: "
                         f"{', '.join(TARGET_CPUS)} (native: this machine's CPU; "
                         "x86-64-vN: the x86-64 micro-architecture levels)")
    return value


def check_enum(name: str, value) -> None:
    """Raise ValueError (JAX's message) unless ``value`` is None or a name option ``name``
    accepts."""
    if value is not None and value not in _ENUMS[name]:
        raise ValueError(f"new enum value must be None or in {list(_ENUMS[name])}, got "
                         f"{value} of type {type(value)}.")


def _check_limit(name: str, value) -> int:
    if type(value) is not int or value < -1:  # bool is an int subclass, and no limit
        raise ValueError(f"config option {name!r} is a size: an int >= 0, or -1 for no "
                         f"limit; got {value!r}")
    return value


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
            "enable_compilation_cache": not _env_bool("FUNCTRANS_DISABLE_COMPILATION_CACHE",
                                                      False),
            "compilation_cache_max_size": _env_int("FUNCTRANS_COMPILATION_CACHE_MAX_SIZE",
                                                   1 << 30),
            "jit_cache_max_entries": _env_int("FUNCTRANS_JIT_CACHE_MAX_ENTRIES", 64),
            "executable_cache_max_entries": _env_int("FUNCTRANS_EXECUTABLE_CACHE_MAX_ENTRIES",
                                                     1024),
            "arena_cache_threshold": _env_int("FUNCTRANS_ARENA_CACHE_THRESHOLD", 1 << 20),
            "arena_pool_max_size": _env_int("FUNCTRANS_ARENA_POOL_MAX_SIZE",
                                           _default_arena_pool_size()),
            # look for leaked tracers at the end of every trace (slow: a garbage collection
            # per trace); JAX's variable name is honoured too
            "check_tracer_leaks": _env_bool("FUNCTRANS_CHECK_TRACER_LEAKS",
                                            _env_bool("JAX_CHECK_TRACER_LEAKS", False)),
            # type-check every staged program (slow; the test suite turns it on)
            "check_jaxprs": _env_bool("FUNCTRANS_CHECK_JAXPRS", False),
            # a folder where each compilation writes its program after every compiler pass
            "dump_passes": os.environ.get("FUNCTRANS_DUMP_PASSES", ""),
            # compiler passes left out, by name, comma-separated (to bisect a wrong result:
            # see docs/compiler.md); a pass that is left out changes only speed
            "disable_passes": os.environ.get("FUNCTRANS_DISABLE_PASSES", ""),
            # prove every buffer plan sound at compile time (written before read, no live
            # buffer reused; the test suite turns it on)
            "verify_plans": _env_bool("FUNCTRANS_VERIFY_PLANS", False),
            # fill scratch memory and fresh outputs with NaN (integers: 0xA5 bytes) before
            # each compiled call, so a read of memory nothing wrote shows in the results
            # (slow; the test suite turns it on)
            "poison_scratch": _env_bool("FUNCTRANS_POISON_SCRATCH", False),
            # the CPU compiled code is for (see TARGET_CPUS)
            "llvm_cpu": check_target_cpu(
                os.environ.get("FUNCTRANS_LLVM_CPU", "").strip() or "native",
                "environment variable FUNCTRANS_LLVM_CPU"),
            # compute with subnormal floats flushed to zero (x86's FTZ and DAZ), as XLA's CPU
            # runtime does: eager operations and compiled code (see functrans/_float_mode.py)
            "flush_denormals": _env_bool("FUNCTRANS_FLUSH_DENORMALS", True),
            **{name: None for name in _ENUMS},
        }
        _apply_jax_variables(self._values)
        for name in _ENUMS:
            check_enum(name, self._values[name])
        for name in _LIMITS:
            _check_limit(name, self._values[name])
        self._listeners: dict[str, list] = {}
        self._lock = threading.Lock()
        self._updated: set[str] = set()

    def _name(self, name: str) -> str:
        if name.startswith("jax_"):
            name = name[len("jax_"):]
        return _ALIASES.get(name, name)

    def update(self, name: str, value) -> None:
        """Set flag ``name`` to ``value`` (as ``jax.config.update``)."""
        name = self._name(name)
        if name not in self._values:
            raise ValueError(f"unknown config option {name!r}; known: {sorted(self._values)}")
        if name in _LIMITS:
            _check_limit(name, value)
        if name in _ENUMS:
            check_enum(name, value)
        if name == "llvm_cpu":
            check_target_cpu(value)
        with self._lock:
            self._values[name] = value
            self._updated.add(name)
        for listener in self._listeners.get(name, ()):
            listener(value)

    @contextlib.contextmanager
    def setting(self, name: str, value):
        """Flag ``name`` set to ``value`` for the length of a ``with`` block, then restored
        (process-wide, as every flag)."""
        previous = self.read(name)
        self.update(name, value)
        try:
            yield
        finally:
            self.update(name, previous)

    def parse_flags_with_absl(self, argv=None) -> None:
        """Apply ``--jax_<option>=<value>`` (and ``--jax_<flag>`` / ``--nojax_<flag>`` for
        booleans) from the command line (``sys.argv``), as JAX does for absl flags; other
        arguments are left to their owners. An unknown ``--jax_`` option is a ValueError."""
        import sys
        for arg in (sys.argv[1:] if argv is None else argv):
            match = re.fullmatch(r"--(no)?jax_(\w+)(?:=(.*))?", arg)
            if match is None:
                continue
            negated, name, text = match.groups()
            name = self._name(name)
            if name not in self._values:
                raise ValueError(f"unknown config option --jax_{name} on the command line")
            current = self._values[name]
            if isinstance(current, bool):
                value = not negated if text is None else \
                    text.strip().lower() in ("1", "true", "yes", "on")
            elif isinstance(current, int):
                value = int(text)
            else:
                value = text
            self.update(name, value)

    def was_updated(self, name: str) -> bool:
        """Whether ``name`` was set with :meth:`update` in this process."""
        return self._name(name) in self._updated

    def on_change(self, name: str, listener) -> None:
        self._listeners.setdefault(self._name(name), []).append(listener)

    def read(self, name: str):
        return self._values[self._name(name)]

    def __getattr__(self, name: str):
        values = self.__dict__.get("_values")
        if values is not None:
            name = self._name(name)
            if name in values:
                return values[name]
        raise AttributeError(name)


config = Config()


@contextlib.contextmanager
def default_matmul_precision(precision):
    """Context manager: the precision of matmuls and convolutions that name none
    (``jax_default_matmul_precision``); values as JAX accepts them ("default", "high",
    "highest", "bfloat16", "tensorfloat32", "float32", and algorithm names such as
    "BF16_BF16_F32"). An unknown value is a ValueError. The CPU backends compute every
    matmul in full float32 (float64 with x64), so results do not depend on it.

    Example::

        with functrans.default_matmul_precision("float32"):
            y = x @ w
    """
    check_enum("default_matmul_precision", precision)
    saved = config.read("default_matmul_precision")
    config.update("default_matmul_precision", precision)
    try:
        yield
    finally:
        config.update("default_matmul_precision", saved)
