"""The Pareto distribution with shape ``b`` on ``[loc + scale, inf)`` (as
``jax.scipy.stats.pareto``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import pareto
    >>> pareto.cdf(jnp.float32(2.0), 2.0)
    Array(0.75, dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import numpy as jnp
from functrans.scipy.stats._util import promote

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf"]


def _standardize(name, x, b, loc, scale):
    x, b, loc, scale = promote(name, x, b, loc, scale)
    return (x - loc) / scale, b, scale


def logpdf(x, b, loc=0, scale=1):
    """``log(b / y**(b + 1) / scale)`` for ``y = (x - loc) / scale >= 1``, else ``-inf``."""
    y, b, scale = _standardize("pareto.logpdf", x, b, loc, scale)
    safe_y = jnp.where(y >= 1, y, 1.0).astype(y.dtype)
    value = jnp.log(b) - (b + 1.0) * jnp.log(safe_y) - jnp.log(scale)
    return jnp.where(y >= 1, value, -np.inf)


def pdf(x, b, loc=0, scale=1):
    """The density at ``x``."""
    return jnp.exp(logpdf(x, b, loc, scale))


def logsf(x, b, loc=0, scale=1):
    """``log P(X > x) = -b log y`` for ``y >= 1``, 0 below."""
    y, b, _ = _standardize("pareto.logsf", x, b, loc, scale)
    safe_y = jnp.where(y >= 1, y, 1.0).astype(y.dtype)
    return jnp.where(y >= 1, -b * jnp.log(safe_y), 0.0).astype(y.dtype)


def sf(x, b, loc=0, scale=1):
    """The survival function ``P(X > x) = y**-b``."""
    return jnp.exp(logsf(x, b, loc, scale))


def cdf(x, b, loc=0, scale=1):
    """``P(X <= x) = 1 - y**-b`` (computed with ``expm1``, accurate near ``y = 1``)."""
    y, b, _ = _standardize("pareto.cdf", x, b, loc, scale)
    safe_y = jnp.where(y >= 1, y, 1.0).astype(y.dtype)
    return jnp.where(y >= 1, -jnp.expm1(-b * jnp.log(safe_y)), 0.0).astype(y.dtype)


def logcdf(x, b, loc=0, scale=1):
    """``log P(X <= x) = log1p(-y**-b)``; ``-inf`` for ``y <= 1``."""
    # log1p keeps the tiny values far in the upper tail, where 1 - y**-b rounds to 1
    return jnp.log1p(-sf(x, b, loc, scale))


def ppf(q, b, loc=0, scale=1):
    """The quantile function ``loc + scale (1 - q)**(-1/b)``; NaN outside ``[0, 1]``."""
    q, b, loc, scale = promote("pareto.ppf", q, b, loc, scale)
    value = loc + scale * jnp.exp(-jnp.log1p(-q) / b)
    return jnp.where((q < 0) | (q > 1), np.nan, value)
