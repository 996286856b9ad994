"""The functrans version, as ``jax.version``: ``__version__`` (a string) and
``__version_info__`` (a tuple of ints).

    >>> import functrans
    >>> functrans.version.__version__ == functrans.__version__
    True
"""
from __future__ import annotations

__version__ = "0.1.0"

__version_info__ = tuple(int(part) for part in __version__.split(".") if part.isdigit())
_version = __version__

# The JAX release whose behaviour functrans follows: what JAX libraries see as
# ``jax.__version__`` when they run on functrans (``functrans.install_as_jax``).
__jax_version__ = "0.10.2"
__jax_version_info__ = tuple(int(part) for part in __jax_version__.split("."))

__all__ = ["__version__", "__version_info__", "__jax_version__", "__jax_version_info__"]
