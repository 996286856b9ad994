"""``functrans.scipy``: the parts of SciPy that array programs use most (as ``jax.scipy``).

Every function is built from ``functrans.numpy`` and ``functrans.lax`` operations, so all of
them work under ``jit``, ``grad`` and ``vmap``::

    >>> import functrans.numpy as jnp
    >>> import functrans.scipy.special as special
    >>> special.logsumexp(jnp.array([0.0, 0.0]))
    Array(0.6931472, dtype=float32)
"""
from functrans.scipy import (cluster, fft, integrate, interpolate, linalg, ndimage,  # noqa: F401
                             optimize, signal, spatial, special, stats)

__all__ = ["cluster", "fft", "integrate", "interpolate", "linalg", "ndimage", "optimize",
           "signal", "spatial", "special", "stats"]
