"""The narrow interface between the front end and the compilers.

A backend registers ``compile(closed_jaxpr, devices) -> Executable``, where an executable is
called with NumPy buffers (one per jaxpr input) and returns a list of NumPy buffers, and
the names of the compiler options ``compile`` takes as keywords (``jit``'s
``compiler_options``; the llvm backend's ``target_cpu``). Backends live in
``functrans.backends.<name>`` and register themselves when imported; the front end
discovers them by listing that package, never by importing one by name.
"""
from __future__ import annotations

import contextlib
import importlib
import pkgutil
import threading
from typing import Callable

from functrans import _collector
from functrans._config import config

_registry: dict[str, "Backend"] = {}
_discovered = False
_lock = threading.Lock()


class Backend:
    """``optional_passes()``: the names of the compiler passes that the config option
    ``disable_passes`` may leave out (to bisect a wrong result)."""

    def __init__(self, name: str, platform: str, compile: Callable, priority: int = 0,
                 available: Callable[[], bool] = lambda: True,
                 optional_passes: Callable[[], list] = list, compiler_options=()):
        self.name = name
        self.platform = platform
        self._compile = compile
        self.priority = priority
        self.available = available
        self.optional_passes = optional_passes
        self.compiler_options = tuple(compiler_options)

    def compile(self, closed, devices, compiler_options=None):
        """``closed`` compiled for ``devices``, with ``compiler_options`` (a mapping, or
        pairs, of option names to values); ValueError for an option this backend does not
        take."""
        options = dict(compiler_options or ())
        unknown = sorted(set(options) - set(self.compiler_options))
        if unknown:
            takes = (f"it takes {', '.join(map(repr, self.compiler_options))}"
                     if self.compiler_options else "it takes none")
            raise ValueError(f"compiler_options: the {self.name} backend has no option "
                             f"{', '.join(map(repr, unknown))} ({takes})")
        with _collector.paused():  # see functrans._collector
            return self._compile(closed, devices, **options)

    def __repr__(self):
        return f"Backend({self.name}, platform={self.platform})"


def register_backend(name: str, platform: str, compile: Callable, priority: int = 0,
                     available: Callable[[], bool] = lambda: True,
                     optional_passes: Callable[[], list] = list,
                     compiler_options=()) -> None:
    """``optional_passes()``: the names of the passes ``disable_passes`` may leave out;
    ``compiler_options``: the names of the keyword options ``compile`` takes."""
    _registry[name] = Backend(name, platform, compile, priority, available, optional_passes,
                              compiler_options)


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    with _lock:
        if _discovered:
            return
        package = importlib.import_module("functrans.backends")
        for info in pkgutil.iter_modules(package.__path__):
            try:
                importlib.import_module(f"functrans.backends.{info.name}")
            except ImportError:
                continue  # an optional backend whose dependencies are absent
        _discovered = True


_PLATFORMS = {"cpu": "cpu", "gpu": "gpu", "cuda": "gpu"}


def default_platform() -> str:
    """Where jit compiles and device_put places when nothing is named: the platform of
    ``config.default_backend`` (``FUNCTRANS_DEFAULT_BACKEND``) if set, else ``"gpu"`` when a
    GPU backend is available (CuPy and a GPU), else ``"cpu"``."""
    name = config.default_backend
    if name:
        return _PLATFORMS.get(name) or get_backend(name).platform
    _discover()
    if any(b.platform == "gpu" and b.available() for b in _registry.values()):
        return "gpu"
    return "cpu"


def get_backend(name: str | None = None, platform: str | None = None) -> Backend:
    """The backend called ``name`` (or a platform: ``"cpu"``, ``"gpu"``), or the preferred
    available one for ``platform`` (by default :func:`default_platform`)."""
    _discover()
    if name is None:
        name = config.default_backend or None
    if name is not None:
        if name in _PLATFORMS:
            platform = _PLATFORMS[name]
        elif name not in _registry:
            raise ValueError(f"unknown backend {name!r}; available: {sorted(_registry)}")
        else:
            return _registry[name]
    if platform is None:
        platform = default_platform()
    candidates = [b for b in _registry.values() if b.platform == platform and b.available()]
    if not candidates:
        raise RuntimeError(f"no backend available for platform {platform!r}")
    return max(candidates, key=lambda b: b.priority)


_device_parallel_hooks: list = []


def register_device_parallel_hook(hook: Callable) -> None:
    """A backend's ``hook(num_devices)`` returns a context manager entered while that many
    device threads run compiled code at once (pmap), e.g. to stop each one from also
    spreading its loops over every core."""
    _device_parallel_hooks.append(hook)


@contextlib.contextmanager
def device_parallel_section(num_devices: int):
    """Enter every backend's hook for ``num_devices`` concurrent device threads."""
    with contextlib.ExitStack() as stack:
        if num_devices > 1:
            for hook in _device_parallel_hooks:
                stack.enter_context(hook(num_devices))
        yield


_lent_memory_checks: list = []


def register_lent_memory_check(check: Callable) -> None:
    """A backend whose results may not own their memory (an array on a block of a pool,
    given back when the array dies) registers ``check(array) -> bool``: whether that array
    is still the only one using its memory, so that ``jit``'s donation may write into it."""
    _lent_memory_checks.append(check)


def sole_user_of_memory(value) -> bool:
    """Whether the NumPy array ``value`` owns its memory, or is the only array on memory a
    backend lent it (see :func:`register_lent_memory_check`)."""
    return value.flags.owndata or any(check(value) for check in _lent_memory_checks)


_shared_library_builders: dict[str, Callable] = {}


def register_shared_library_builder(platform: str, build: Callable) -> None:
    """A backend's ``build(entries, prefix, library, target_cpu=None)`` compiles programs
    into a standalone shared library and C header for ``platform`` and, on a CPU, for the
    target CPU named (see ``functrans.export.to_shared_library``)."""
    _shared_library_builders[platform] = build


def shared_library_builder(platform: str = "cpu") -> Callable:
    """The registered shared-library builder for ``platform``; RuntimeError if none."""
    _discover()
    build = _shared_library_builders.get(platform)
    if build is None:
        raise RuntimeError(f"no backend can build shared libraries for {platform!r} (the llvm "
                           "backend does, and needs llvmlite)")
    return build


def backends() -> dict[str, Backend]:
    _discover()
    return dict(_registry)
