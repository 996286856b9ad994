"""Run JAX libraries unchanged: ``import jax`` (and ``jax.X.Y``, ``jaxlib``) resolves to functrans.

Libraries such as optax, flax, equinox and chex ``import jax`` themselves, where a user cannot
change the import. :func:`install_as_jax` puts a finder on ``sys.meta_path`` that answers for
the ``jax`` and ``jaxlib`` packages with functrans's own modules:

- ``jax`` is a module that forwards every attribute to ``functrans`` and reports the JAX
  version functrans is compatible with (``functrans.version.__jax_version__``);
- ``jax.numpy``, ``jax.lax``, ``jax.tree_util``, ... are the very functrans modules of the same
  name (``jax.numpy is functrans.numpy``);
- the few modules JAX keeps under another name (``jax._src.*``, ``jax.core``, ``jaxlib``) are
  mapped by :data:`_RENAMES`.

It is opt-in and reversible (:func:`uninstall_as_jax`), and refuses while the real ``jax`` is
imported. ``python -m functrans.run script.py`` runs a script (or ``-m module``) with it on.

    >>> import functrans
    >>> functrans.install_as_jax()           # doctest: +SKIP
    >>> import jax, jax.numpy as jnp         # doctest: +SKIP
    >>> jnp is functrans.numpy               # doctest: +SKIP
    True
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

from functrans import version as _version

# JAX module name -> functrans module name, where they differ (longest prefix wins).
_RENAMES = {
    "jax": "functrans",
    "jax.core": "functrans.extend.core",
    "jax.version": "functrans.version",
    "jax._src": "functrans.extend._jax_internals",
    "jax._src.core": "functrans.extend.core",
    "jax._src.traceback_util": "functrans._traceback_util",
    "jax._src.dtypes": "functrans.extend._jax_internals.dtypes",
    "jax._src.tree_util": "functrans.extend._jax_internals.tree_util",
    "jax._src.checkify": "functrans.experimental.checkify",
    "jax._src.interpreters": "functrans.interpreters",
    "jax._src.api_util": "functrans.api_util",
    "jax._src.source_info_util": "functrans.extend.source_info_util",
    "jax._src.numpy": "functrans.numpy",
    "jax._src.lax": "functrans.lax",
    "jax._src.random": "functrans.random",
    "jax._src.prng": "functrans.random",
    "jax._src.nn": "functrans.nn",
    "jax._src.lib": "functrans.extend._jax_internals.lib",
    "jaxlib": "functrans.extend._jax_internals.lib",
}

# modules that stand for jax (or jaxlib) with their version: attributes forward to functrans
_VERSIONED = ("jax", "jax.version", "jaxlib", "jaxlib.version")


class _ForwardingModule(types.ModuleType):
    """A module object of its own name forwarding every attribute it does not hold to
    ``target``: for ``jax`` and ``jaxlib`` (which report JAX's version), and for a package
    JAX keeps under another name (``jax._src``), whose ``from jax._src import X`` must find
    ``jax._src.X`` through the finder."""

    def __init__(self, name: str, target: types.ModuleType):
        super().__init__(name, target.__doc__)
        object.__setattr__(self, "_target", target)
        if name in _VERSIONED:
            self.__version__ = _version.__jax_version__
            self.__version_info__ = _version.__jax_version_info__
            self._version = _version.__jax_version__
        if hasattr(target, "__path__"):
            self.__path__ = []  # a package: its submodules come from the finder

    def __getattr__(self, name):
        # a submodule JAX keeps under another name (jax.core): the mapped module, as
        # `import jax.core` gives
        if f"{self.__name__}.{name}" in _RENAMES:
            return importlib.import_module(f"{self.__name__}.{name}")
        try:
            return getattr(object.__getattribute__(self, "_target"), name)
        except AttributeError:
            if name.startswith("__") or "__path__" not in self.__dict__:
                raise
        # JAX imports its submodules eagerly (code reads jax._src.xla_bridge unimported)
        try:
            return importlib.import_module(f"{self.__name__}.{name}")
        except ModuleNotFoundError:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}") \
                from None

    def __dir__(self):
        return sorted(set(dir(self._target)) | set(self.__dict__))


def _target_name(fullname: str) -> str:
    parts = fullname.split(".")
    for cut in range(len(parts), 0, -1):
        prefix = ".".join(parts[:cut])
        if prefix in _RENAMES:
            return ".".join([_RENAMES[prefix], *parts[cut:]])
    return "functrans." + ".".join(parts[1:]) if parts[0] == "jax" else fullname


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target
        self._spec = None

    def load_target(self, fullname: str) -> types.ModuleType:
        try:
            return importlib.import_module(self.target)
        except ModuleNotFoundError as err:
            if err.name is not None and self.target.startswith(err.name):
                raise ModuleNotFoundError(
                    f"No module named {fullname!r}: functrans has no counterpart "
                    f"({self.target!r}) of this JAX module", name=fullname) from None
            raise

    def create_module(self, spec):
        module = self.load_target(spec.name)
        if spec.name in _VERSIONED or (spec.name in _RENAMES and hasattr(module, "__path__")):
            return _ForwardingModule(spec.name, module)
        self._spec = getattr(module, "__spec__", None)
        return module

    def exec_module(self, module):
        # the import system stamped the jax spec on the shared module: give it its own back
        if self._spec is not None and not isinstance(module, _ForwardingModule):
            module.__spec__ = self._spec


class _JaxFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        root = fullname.split(".", 1)[0]
        if root not in ("jax", "jaxlib"):
            return None
        loader = _AliasLoader(_target_name(fullname))
        target_module = loader.load_target(fullname)
        is_package = fullname in _VERSIONED or hasattr(target_module, "__path__")
        return importlib.machinery.ModuleSpec(fullname, loader, is_package=is_package)


_finder = _JaxFinder()


def _is_ours(module) -> bool:
    return isinstance(module, _ForwardingModule) or (
        getattr(module, "__name__", "").startswith("functrans"))


def install_as_jax() -> None:
    """Make ``import jax``, ``import jax.X.Y`` and ``import jaxlib`` resolve to functrans.

    Libraries that import jax (optax, flax, equinox, chex, einops, jaxtyping) then run on
    functrans unchanged. They see ``jax.__version__`` as the JAX version functrans is
    compatible with. Raises ``RuntimeError`` when the real jax is already imported; undo
    with :func:`uninstall_as_jax`. Installing twice is harmless.
    """
    for name in ("jax", "jaxlib"):
        module = sys.modules.get(name)
        if module is not None and not _is_ours(module):
            raise RuntimeError(
                f"functrans.install_as_jax(): the real {name!r} is already imported (from "
                f"{getattr(module, '__file__', '?')}); install the alias before anything "
                f"imports jax, or run the program with `python -m functrans.run`")
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def uninstall_as_jax() -> None:
    """Undo :func:`install_as_jax`: ``import jax`` finds the real jax again (if installed).
    Modules already imported through the alias keep the functrans modules they hold."""
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    for name in list(sys.modules):
        if name.split(".", 1)[0] in ("jax", "jaxlib") and _is_ours(sys.modules[name]):
            del sys.modules[name]


def is_installed() -> bool:
    """Whether :func:`install_as_jax` is in effect."""
    return _finder in sys.meta_path
