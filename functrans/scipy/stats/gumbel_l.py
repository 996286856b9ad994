"""The left-skewed Gumbel distribution (the law of a minimum), with CDF
``1 - exp(-exp((x - loc) / scale))`` (as ``jax.scipy.stats.gumbel_l``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import gumbel_l
    >>> gumbel_l.sf(jnp.float32(0.0))
    Array(0.367879..., dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import numpy as jnp
from functrans.scipy.stats._util import log1m_exp, promote

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf"]


def logpdf(x, loc=0, scale=1):
    """``z - exp(z) - log(scale)``, ``z = (x - loc) / scale``."""
    x, loc, scale = promote("gumbel_l.logpdf", x, loc, scale)
    z = (x - loc) / scale
    return z - jnp.exp(z) - jnp.log(scale)


def pdf(x, loc=0, scale=1):
    """The density at ``x``."""
    return jnp.exp(logpdf(x, loc, scale))


def logsf(x, loc=0, scale=1):
    """``log P(X > x) = -exp(z)``."""
    x, loc, scale = promote("gumbel_l.logsf", x, loc, scale)
    return -jnp.exp((x - loc) / scale)


def sf(x, loc=0, scale=1):
    """``P(X > x) = exp(-exp(z))``."""
    return jnp.exp(logsf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """``P(X <= x) = 1 - exp(-exp(z))``, with ``expm1`` for accuracy in the lower tail."""
    return -jnp.expm1(logsf(x, loc, scale))


def logcdf(x, loc=0, scale=1):
    """``log P(X <= x)``."""
    return log1m_exp(logsf(x, loc, scale))


def ppf(p, loc=0, scale=1):
    """The quantile function ``loc + scale log(-log(1 - p))``. As in ``jax.scipy.stats``, NaN
    outside the open interval ``(0, 1)`` (the endpoints included)."""
    p, loc, scale = promote("gumbel_l.ppf", p, loc, scale)
    inside = (p > 0) & (p < 1)
    safe_p = jnp.where(inside, p, 0.5).astype(p.dtype)
    return jnp.where(inside, loc + scale * jnp.log(-jnp.log1p(-safe_p)), np.nan)
