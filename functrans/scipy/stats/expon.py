"""The exponential distribution with rate ``1 / scale`` starting at ``loc`` (as
``jax.scipy.stats.expon``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import expon
    >>> expon.pdf(jnp.float32(0.0))
    Array(1., dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import numpy as jnp
from functrans.scipy.stats._util import promote

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf"]


def logpdf(x, loc=0, scale=1):
    """``-y - log(scale)`` for ``y = (x - loc) / scale >= 0``, ``-inf`` below."""
    x, loc, scale = promote("expon.logpdf", x, loc, scale)
    y = (x - loc) / scale
    return jnp.where(y < 0, -np.inf, -y - jnp.log(scale))


def pdf(x, loc=0, scale=1):
    """The density at ``x``."""
    return jnp.exp(logpdf(x, loc, scale))


def _standard(name, x, loc, scale):
    x, loc, scale = promote(name, x, loc, scale)
    return jnp.maximum((x - loc) / scale, 0.0)


def cdf(x, loc=0, scale=1):
    """``P(X <= x) = 1 - exp(-y)``, accurate for small ``y``."""
    return -jnp.expm1(-_standard("expon.cdf", x, loc, scale))


def logcdf(x, loc=0, scale=1):
    """``log P(X <= x)``."""
    return jnp.log(cdf(x, loc, scale))


def sf(x, loc=0, scale=1):
    """``P(X > x) = exp(-y)``."""
    return jnp.exp(-_standard("expon.sf", x, loc, scale))


def logsf(x, loc=0, scale=1):
    """``log P(X > x) = -y``."""
    return -_standard("expon.logsf", x, loc, scale)


def ppf(q, loc=0, scale=1):
    """The quantile function ``loc - scale log(1 - q)``; NaN outside ``[0, 1]``."""
    q, loc, scale = promote("expon.ppf", q, loc, scale)
    out = loc - scale * jnp.log1p(-q)
    return jnp.where((q < 0) | (q > 1), np.nan, out)
