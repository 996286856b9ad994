"""The beta distribution on ``[loc, loc + scale]`` (as ``jax.scipy.stats.beta``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import beta
    >>> beta.pdf(jnp.float32(0.5), 1.0, 1.0)
    Array(1., dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import numpy as jnp
from functrans.scipy import special
from functrans.scipy.stats._util import promote

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]


def logpdf(x, a, b, loc=0, scale=1):
    """``log`` of ``y**(a-1) (1-y)**(b-1) / (B(a, b) scale)``, ``y = (x - loc) / scale``
    in ``[0, 1]``."""
    x, a, b, loc, scale = promote("beta.logpdf", x, a, b, loc, scale)
    y = (x - loc) / scale
    inside = (y >= 0) & (y <= 1)
    safe_y = jnp.where(inside, y, 0.5).astype(y.dtype)
    value = (special.xlogy(a - 1.0, safe_y) + special.xlog1py(b - 1.0, -safe_y)
             - special.betaln(a, b) - jnp.log(scale))
    return jnp.where(inside, value, -np.inf)


def pdf(x, a, b, loc=0, scale=1):
    """The density at ``x``."""
    return jnp.exp(logpdf(x, a, b, loc, scale))


def cdf(x, a, b, loc=0, scale=1):
    """``P(X <= x) = I_y(a, b)``, the regularized incomplete beta function."""
    x, a, b, loc, scale = promote("beta.cdf", x, a, b, loc, scale)
    y = jnp.clip((x - loc) / scale, 0.0, 1.0)
    return special.betainc(a, b, y)


def logcdf(x, a, b, loc=0, scale=1):
    """``log P(X <= x)``."""
    return jnp.log(cdf(x, a, b, loc, scale))


def sf(x, a, b, loc=0, scale=1):
    """``P(X > x) = I_{1-y}(b, a)``, computed directly (accurate in the upper tail)."""
    x, a, b, loc, scale = promote("beta.sf", x, a, b, loc, scale)
    y = jnp.clip((x - loc) / scale, 0.0, 1.0)
    return special.betainc(b, a, 1.0 - y)


def logsf(x, a, b, loc=0, scale=1):
    """``log P(X > x)``."""
    return jnp.log(sf(x, a, b, loc, scale))
