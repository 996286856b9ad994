"""The gamma distribution with shape ``a`` (as ``jax.scipy.stats.gamma``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import gamma
    >>> gamma.pdf(jnp.float32(0.0), 1.0)
    Array(1., dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import numpy as jnp
from functrans.scipy import special
from functrans.scipy.stats._util import promote

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]


def logpdf(x, a, loc=0, scale=1):
    """``log`` of ``y**(a-1) e**-y / (Gamma(a) scale)``, ``y = (x - loc) / scale >= 0``."""
    x, a, loc, scale = promote("gamma.logpdf", x, a, loc, scale)
    y = (x - loc) / scale
    safe_y = jnp.where(y >= 0, y, 1.0).astype(y.dtype)
    value = special.xlogy(a - 1.0, safe_y) - safe_y - special.gammaln(a) - jnp.log(scale)
    return jnp.where(y < 0, -np.inf, value)


def pdf(x, a, loc=0, scale=1):
    """The density at ``x``."""
    return jnp.exp(logpdf(x, a, loc, scale))


def _standard(name, x, a, loc, scale):
    x, a, loc, scale = promote(name, x, a, loc, scale)
    return jnp.maximum((x - loc) / scale, 0.0), a


def cdf(x, a, loc=0, scale=1):
    """``P(X <= x) = P(a, y)``, the regularized lower incomplete gamma function."""
    y, a = _standard("gamma.cdf", x, a, loc, scale)
    return special.gammainc(a, y)


def logcdf(x, a, loc=0, scale=1):
    """``log P(X <= x)``."""
    return jnp.log(cdf(x, a, loc, scale))


def sf(x, a, loc=0, scale=1):
    """``P(X > x) = Q(a, y)``, computed directly (accurate in the upper tail)."""
    y, a = _standard("gamma.sf", x, a, loc, scale)
    return special.gammaincc(a, y)


def logsf(x, a, loc=0, scale=1):
    """``log P(X > x)``."""
    return jnp.log(sf(x, a, loc, scale))
