"""The normal distribution ``N(loc, scale**2)`` (as ``jax.scipy.stats.norm``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import norm
    >>> norm.cdf(jnp.float32(0.0))
    Array(0.5, dtype=float32)
"""
from __future__ import annotations

from functrans import numpy as jnp
from functrans.scipy import special
from functrans.scipy.stats._util import LOG_SQRT_2PI, promote

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf", "isf"]


def logpdf(x, loc=0, scale=1):
    """``log`` of the density ``exp(-z**2 / 2) / (scale sqrt(2 pi))``, ``z = (x - loc) / scale``."""
    x, loc, scale = promote("norm.logpdf", x, loc, scale)
    z = (x - loc) / scale
    return -0.5 * z * z - jnp.log(scale) - LOG_SQRT_2PI


def pdf(x, loc=0, scale=1):
    """The density of ``N(loc, scale**2)`` at ``x``."""
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """``P(X <= x)``."""
    x, loc, scale = promote("norm.cdf", x, loc, scale)
    return special.ndtr((x - loc) / scale)


def logcdf(x, loc=0, scale=1):
    """``log P(X <= x)``, accurate far into the lower tail."""
    x, loc, scale = promote("norm.logcdf", x, loc, scale)
    return special.log_ndtr((x - loc) / scale)


def sf(x, loc=0, scale=1):
    """The survival function ``P(X > x)``."""
    x, loc, scale = promote("norm.sf", x, loc, scale)
    return special.ndtr((loc - x) / scale)


def logsf(x, loc=0, scale=1):
    """``log P(X > x)``, accurate far into the upper tail."""
    x, loc, scale = promote("norm.logsf", x, loc, scale)
    return special.log_ndtr((loc - x) / scale)


def ppf(q, loc=0, scale=1):
    """The quantile function: the ``x`` with ``cdf(x) = q``."""
    q, loc, scale = promote("norm.ppf", q, loc, scale)
    return loc + scale * special.ndtri(q)


def isf(q, loc=0, scale=1):
    """The inverse survival function: the ``x`` with ``sf(x) = q``."""
    q, loc, scale = promote("norm.isf", q, loc, scale)
    return loc - scale * special.ndtri(q)
