"""The logistic distribution (as ``jax.scipy.stats.logistic``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import logistic
    >>> logistic.cdf(jnp.float32(0.0))
    Array(0.5, dtype=float32)
"""
from __future__ import annotations

from functrans import numpy as jnp
from functrans.scipy import special
from functrans.scipy.stats._util import promote

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf", "isf"]


def _softplus(z):
    return jnp.logaddexp(0.0, z)


def logpdf(x, loc=0, scale=1):
    """``log`` of the density ``e**-z / (scale (1 + e**-z)**2)``, ``z = (x - loc) / scale``."""
    x, loc, scale = promote("logistic.logpdf", x, loc, scale)
    z = jnp.abs((x - loc) / scale)
    # the density is symmetric; using |z| keeps exp(-|z|) from overflowing
    return -z - 2.0 * jnp.log1p(jnp.exp(-z)) - jnp.log(scale)


def pdf(x, loc=0, scale=1):
    """The density at ``x``."""
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """``P(X <= x) = expit((x - loc) / scale)``."""
    x, loc, scale = promote("logistic.cdf", x, loc, scale)
    return special.expit((x - loc) / scale)


def logcdf(x, loc=0, scale=1):
    """``log P(X <= x) = -softplus(-z)``."""
    x, loc, scale = promote("logistic.logcdf", x, loc, scale)
    return -_softplus((loc - x) / scale)


def sf(x, loc=0, scale=1):
    """``P(X > x) = expit(-z)``."""
    x, loc, scale = promote("logistic.sf", x, loc, scale)
    return special.expit((loc - x) / scale)


def logsf(x, loc=0, scale=1):
    """``log P(X > x) = -softplus(z)``."""
    x, loc, scale = promote("logistic.logsf", x, loc, scale)
    return -_softplus((x - loc) / scale)


def ppf(q, loc=0, scale=1):
    """The quantile function ``loc + scale * logit(q)``."""
    q, loc, scale = promote("logistic.ppf", q, loc, scale)
    return loc + scale * special.logit(q)


def isf(q, loc=0, scale=1):
    """The inverse survival function ``loc - scale * logit(q)``."""
    q, loc, scale = promote("logistic.isf", q, loc, scale)
    return loc - scale * special.logit(q)
