"""``jaxlib`` (and ``jax._src.lib``): the compiled runtime's version. functrans has no
separate runtime package, so its version is the JAX version functrans follows."""
from __future__ import annotations

from functrans.version import __jax_version__ as __version__
from functrans.version import __jax_version_info__ as version_info  # noqa: F401

version = __version__
jaxlib_extension_version = 0

__all__ = ["__version__", "version"]
