"""The Laplace (double exponential) distribution (as ``jax.scipy.stats.laplace``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import laplace
    >>> laplace.cdf(jnp.float32(0.0))
    Array(0.5, dtype=float32)
"""
from __future__ import annotations

import math

from functrans import numpy as jnp
from functrans.scipy.stats._util import promote

__all__ = ["logpdf", "pdf", "cdf"]


def logpdf(x, loc=0, scale=1):
    """``-|x - loc| / scale - log(2 scale)``."""
    x, loc, scale = promote("laplace.logpdf", x, loc, scale)
    return -jnp.abs((x - loc) / scale) - jnp.log(scale) - math.log(2.0)


def pdf(x, loc=0, scale=1):
    """The density at ``x``."""
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """``P(X <= x)``: ``e**y / 2`` below ``loc``, ``1 - e**-y / 2`` above."""
    x, loc, scale = promote("laplace.cdf", x, loc, scale)
    y = (x - loc) / scale
    half_tail = 0.5 * jnp.exp(-jnp.abs(y))
    return jnp.where(y < 0, half_tail, 1.0 - half_tail)
