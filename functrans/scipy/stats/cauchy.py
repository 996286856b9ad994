"""The Cauchy distribution (as ``jax.scipy.stats.cauchy``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import cauchy
    >>> cauchy.cdf(jnp.float32(0.0))
    Array(0.5, dtype=float32)
"""
from __future__ import annotations

import math

import numpy as np

from functrans import numpy as jnp
from functrans.scipy.stats._util import promote

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf", "isf"]


def logpdf(x, loc=0, scale=1):
    """``-log(pi scale (1 + z**2))``, ``z = (x - loc) / scale``."""
    x, loc, scale = promote("cauchy.logpdf", x, loc, scale)
    z = (x - loc) / scale
    return -math.log(math.pi) - jnp.log(scale) - jnp.log1p(z * z)


def pdf(x, loc=0, scale=1):
    """The density at ``x``."""
    return jnp.exp(logpdf(x, loc, scale))


def _lower_tail(z):
    # 1/2 + arctan(z)/pi written as arctan2(1, -z)/pi: no cancellation for large negative z
    return jnp.arctan2(jnp.ones_like(z), -z) / math.pi


def cdf(x, loc=0, scale=1):
    """``P(X <= x) = 1/2 + arctan(z) / pi``."""
    x, loc, scale = promote("cauchy.cdf", x, loc, scale)
    return _lower_tail((x - loc) / scale)


def logcdf(x, loc=0, scale=1):
    """``log P(X <= x)``."""
    return jnp.log(cdf(x, loc, scale))


def sf(x, loc=0, scale=1):
    """``P(X > x) = cdf`` of the mirrored point."""
    x, loc, scale = promote("cauchy.sf", x, loc, scale)
    return _lower_tail((loc - x) / scale)


def logsf(x, loc=0, scale=1):
    """``log P(X > x)``."""
    return jnp.log(sf(x, loc, scale))


def _standard_ppf(q):
    """``tan(pi (q - 1/2))`` written as ``-1 / tan(pi q)`` below 1/2 and
    ``1 / tan(pi (1 - q))`` above (``1 - q`` is exact there), so tail quantiles keep their
    relative accuracy."""
    lower = q < 0.5
    tail = jnp.where(lower, q, 1.0 - q)
    magnitude = 1.0 / jnp.tan(math.pi * tail)
    out = jnp.where(lower, -magnitude, magnitude)
    out = jnp.where(q == 0, -np.inf, jnp.where(q == 1, np.inf, out))
    return jnp.where((q < 0) | (q > 1), np.nan, out)


def ppf(q, loc=0, scale=1):
    """The quantile function ``loc + scale tan(pi (q - 1/2))``; NaN outside ``[0, 1]``."""
    q, loc, scale = promote("cauchy.ppf", q, loc, scale)
    return loc + scale * _standard_ppf(q)


def isf(q, loc=0, scale=1):
    """The inverse survival function ``loc - scale tan(pi (q - 1/2))``."""
    q, loc, scale = promote("cauchy.isf", q, loc, scale)
    return loc - scale * _standard_ppf(q)
