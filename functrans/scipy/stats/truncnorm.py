"""The normal distribution truncated to ``[a, b]`` in standard units (as
``jax.scipy.stats.truncnorm``): ``(x - loc) / scale`` lies in ``[a, b]``.

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import truncnorm
    >>> truncnorm.cdf(jnp.float32(0.0), -1.0, 1.0)
    Array(0.5, dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import numpy as jnp
from functrans.scipy import special
from functrans.scipy.stats._util import LOG_SQRT_2PI, log_diff_exp, promote

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]


def _log_mass(lo, hi):
    """``log(ndtr(hi) - ndtr(lo))`` for ``lo <= hi``; above 0 the mirrored (upper-tail)
    form keeps relative accuracy."""
    upper = log_diff_exp(special.log_ndtr(-lo), special.log_ndtr(-hi))
    lower = log_diff_exp(special.log_ndtr(hi), special.log_ndtr(lo))
    return jnp.where(lo > 0, upper, lower)


def logpdf(x, a, b, loc=0, scale=1):
    """``log`` of the density: the normal density divided by the mass of ``[a, b]``,
    ``-inf`` outside."""
    x, a, b, loc, scale = promote("truncnorm.logpdf", x, a, b, loc, scale)
    z = (x - loc) / scale
    value = -0.5 * z * z - LOG_SQRT_2PI - jnp.log(scale) - _log_mass(a, b)
    return jnp.where((z < a) | (z > b), -np.inf, value)


def pdf(x, a, b, loc=0, scale=1):
    """The density at ``x``."""
    return jnp.exp(logpdf(x, a, b, loc, scale))


def _clipped(name, x, a, b, loc, scale):
    x, a, b, loc, scale = promote(name, x, a, b, loc, scale)
    return jnp.clip((x - loc) / scale, a, b), a, b


def logcdf(x, a, b, loc=0, scale=1):
    """``log P(X <= x)``."""
    z, a, b = _clipped("truncnorm.logcdf", x, a, b, loc, scale)
    return _log_mass(a, z) - _log_mass(a, b)


def cdf(x, a, b, loc=0, scale=1):
    """``P(X <= x)``."""
    return jnp.exp(logcdf(x, a, b, loc, scale))


def logsf(x, a, b, loc=0, scale=1):
    """``log P(X > x)``."""
    z, a, b = _clipped("truncnorm.logsf", x, a, b, loc, scale)
    return _log_mass(z, b) - _log_mass(a, b)


def sf(x, a, b, loc=0, scale=1):
    """``P(X > x)``."""
    return jnp.exp(logsf(x, a, b, loc, scale))
