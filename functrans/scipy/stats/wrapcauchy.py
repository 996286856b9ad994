"""The wrapped Cauchy distribution on ``[0, 2 pi]`` with shape ``0 < c < 1`` (as
``jax.scipy.stats.wrapcauchy``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import wrapcauchy
    >>> wrapcauchy.pdf(jnp.float32(0.0), 0.5)
    Array(0.47746..., dtype=float32)
"""
from __future__ import annotations

import math

import numpy as np

from functrans import numpy as jnp
from functrans.scipy.stats._util import promote

__all__ = ["logpdf", "pdf"]


def logpdf(x, c):
    """``log((1 - c**2) / (2 pi (1 + c**2 - 2 c cos x)))`` on ``[0, 2 pi]``, ``-inf`` off it;
    NaN unless ``0 < c < 1``."""
    x, c = promote("wrapcauchy.logpdf", x, c)
    value = (jnp.log1p(-c * c) - math.log(2.0 * math.pi)
             - jnp.log(1.0 + c * c - 2.0 * c * jnp.cos(x)))
    value = jnp.where((x >= 0) & (x <= 2.0 * math.pi), value, -np.inf)
    return jnp.where((c > 0) & (c < 1), value, np.nan)


def pdf(x, c):
    """The density at ``x``."""
    return jnp.exp(logpdf(x, c))
