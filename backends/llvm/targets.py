"""Target CPUs: the CPU the generated machine code is compiled for.

The machine code LLVM emits depends on the CPU it is told about: which instructions it may
use (AVX2, FMA, AVX-512), how wide the vectors are, and so the order in which a vectorized
sum adds its terms. The target is named by ``config.llvm_cpu`` (``FUNCTRANS_LLVM_CPU``), by
``jit(f, compiler_options={"target_cpu": ...})`` for one function, and by
``to_shared_library(..., target_cpu=...)`` for a library built to run elsewhere:

* ``"native"`` (the default): this machine's CPU, with every feature it has;
* ``"x86-64-v2"``, ``"x86-64-v3"``, ``"x86-64-v4"``: the x86-64 micro-architecture levels,
  LLVM's CPUs of the same names. Code for a level runs on every CPU of that level or a
  later one: v2 needs SSE4.2 and POPCNT, v3 adds AVX2, FMA, BMI2 (Intel Haswell, AMD Zen
  and later), v4 adds AVX-512 F/BW/CD/DQ/VL.

Every decision the backend makes from the CPU follows the target being compiled for
(:func:`current`), never the host: LLVM's target machine, whether ``ldexp`` is one vector
instruction, the width of a streamed block. The target is part of the compilation cache key
(:func:`codegen.target_description`), on disk and in memory, so code compiled for one target
never serves another. ``jit`` refuses a level this CPU lacks (its code would stop on an
illegal instruction); ``to_shared_library`` builds for any level.

    >>> with compiling_for("x86-64-v3") as target:     # doctest: +SKIP
    ...     current().has_avx512
    False
"""
from __future__ import annotations

import contextlib
import glob
import os
import threading

from functrans._config import TARGET_CPUS, check_target_cpu, config
from functrans.backends.llvm import cache

# What each level adds to the one before, as LLVM names the features (``+avx2``): the CPU
# must have them all to run code compiled for the level.
_V2 = ("cx16", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3")
_V3 = _V2 + ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave")
_V4 = _V3 + ("avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl")
LEVEL_FEATURES = {"x86-64-v2": _V2, "x86-64-v3": _V3, "x86-64-v4": _V4}
assert set(LEVEL_FEATURES) | {"native"} == set(TARGET_CPUS)


class TargetCPU:
    """One target: its name (``"native"`` or a level), the LLVM triple, CPU name and
    feature string a target machine is made from (no features for a level: the CPU name
    implies them)."""

    __slots__ = ("name", "triple", "cpu", "features")

    def __init__(self, name: str, triple: str, cpu: str, features: str):
        self.name, self.triple, self.cpu, self.features = name, triple, cpu, features

    @property
    def has_avx512(self) -> bool:
        if self.name == "native":
            return "+avx512f" in self.features.split(",")
        return "avx512f" in LEVEL_FEATURES[self.name]

    @property
    def vector_registers(self) -> int:
        """How many vector registers the code may use: 32 with AVX-512 (zmm0-31, which
        AVX-512VL also gives 128- and 256-bit code), else 16 (x86-64's xmm/ymm0-15)."""
        return 32 if self.has_avx512 else 16

    @property
    def description(self) -> str:
        """What identifies the machine code: part of the compilation cache key."""
        return f"{self.triple}|{self.cpu}|{self.features}"

    def __repr__(self):
        return f"TargetCPU({self.name!r}, cpu={self.cpu!r})"


_host = None


def host() -> TargetCPU:
    """This machine's CPU as LLVM describes it. The description is kept in the cache
    directory per CPU (:func:`cache.host_target`): asking LLVM means loading it, a large
    part of a warm start whose programs all come from the cache."""
    global _host
    if _host is None:
        triple, cpu, features = cache.host_target(_llvm_host_description).split("|", 2)
        _host = TargetCPU("native", triple, cpu, features)
    return _host


def _llvm_host_description() -> str:
    import llvmlite.binding as llvm
    return (f"{llvm.get_default_triple()}|{llvm.get_host_cpu_name()}|"
            f"{llvm.get_host_cpu_features().flatten()}")


def resolve(target=None) -> TargetCPU:
    """The target named ``target`` (a name of ``TARGET_CPUS`` or a :class:`TargetCPU`);
    None: the one being compiled for (:func:`current`). ValueError for an unknown name,
    or for an x86-64 level on another architecture."""
    if target is None:
        return current()
    if isinstance(target, TargetCPU):
        return target
    check_target_cpu(target, "target CPU")
    machine = host()
    if target == "native":
        return machine
    if not machine.triple.startswith(("x86_64", "amd64")):
        raise ValueError(f"target CPU {target!r} is an x86-64 level, and this machine is "
                         f"{machine.triple}: compile for 'native'")
    return TargetCPU(target, machine.triple, target, "")


_compiling = threading.local()


def current() -> TargetCPU:
    """The target of the compilation running on this thread (:func:`compiling_for`), else
    the configured one, ``config.llvm_cpu``."""
    stack = getattr(_compiling, "stack", None)
    if stack:
        return stack[-1]
    return resolve(config.llvm_cpu)


@contextlib.contextmanager
def compiling_for(target=None):
    """Within the block, this thread compiles for ``target`` (see :func:`resolve`): the code
    generator and the compilations nested in this one (bodies compiled on their own) ask
    :func:`current`."""
    resolved = resolve(target)
    stack = _compiling.__dict__.setdefault("stack", [])
    stack.append(resolved)
    try:
        yield resolved
    finally:
        stack.pop()


def missing_features(target: TargetCPU) -> list[str]:
    """The features ``target`` needs that this machine's CPU lacks."""
    have = set(host().features.split(","))
    return [f for f in LEVEL_FEATURES.get(target.name, ()) if f"+{f}" not in have]


def check_runs_here(target: TargetCPU) -> None:
    """ValueError if code compiled for ``target`` cannot run on this machine."""
    missing = missing_features(target)
    if missing:
        raise ValueError(f"target CPU {target.name!r} needs {', '.join(missing)}, which this "
                         f"CPU ({host().cpu}) does not have: its code cannot run here (a "
                         "shared library can still be built for it, with to_shared_library)")


# ---- the host's caches -----------------------------------------------------------------------

DEFAULT_CACHE_BYTES = 8 << 20
_cache_bytes = None


def last_level_cache_bytes() -> int:
    """Size of the largest CPU cache (from sysfs; 8 MiB where the system does not say)."""
    global _cache_bytes
    if _cache_bytes is None:
        sizes = []
        for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
            try:
                with open(path) as f:
                    text = f.read().strip().upper()
            except OSError:
                continue
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            digits = text.rstrip("KMG")
            if digits.isdigit():
                sizes.append(int(digits) * scale)
        if not sizes and hasattr(os, "sysconf"):
            try:
                sizes.append(int(os.sysconf("SC_LEVEL3_CACHE_SIZE")))
            except (ValueError, OSError):
                pass
        _cache_bytes = max([s for s in sizes if s > 0], default=DEFAULT_CACHE_BYTES)
    return _cache_bytes


def min_streamed_bytes() -> int:
    """Kernels touching more bytes than this (inputs plus outputs) stream their output past
    the cache (see :mod:`streaming_stores`): part of the compilation cache key."""
    return last_level_cache_bytes()
