"""The chi-squared distribution with ``df`` degrees of freedom (as
``jax.scipy.stats.chi2``): a gamma distribution with shape ``df / 2`` and scale 2.

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import chi2
    >>> chi2.pdf(jnp.float32(0.0), 2.0)
    Array(0.5, dtype=float32)
"""
from __future__ import annotations

from functrans.scipy.stats import gamma as _gamma
from functrans.scipy.stats._util import promote

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]


def _as_gamma(name, x, df, loc, scale):
    x, df, loc, scale = promote(name, x, df, loc, scale)
    return x, df / 2.0, loc, 2.0 * scale


def logpdf(x, df, loc=0, scale=1):
    """``log`` of the density at ``x``."""
    return _gamma.logpdf(*_as_gamma("chi2.logpdf", x, df, loc, scale))


def pdf(x, df, loc=0, scale=1):
    """The density at ``x``."""
    return _gamma.pdf(*_as_gamma("chi2.pdf", x, df, loc, scale))


def cdf(x, df, loc=0, scale=1):
    """``P(X <= x)``."""
    return _gamma.cdf(*_as_gamma("chi2.cdf", x, df, loc, scale))


def logcdf(x, df, loc=0, scale=1):
    """``log P(X <= x)``."""
    return _gamma.logcdf(*_as_gamma("chi2.logcdf", x, df, loc, scale))


def sf(x, df, loc=0, scale=1):
    """``P(X > x)``."""
    return _gamma.sf(*_as_gamma("chi2.sf", x, df, loc, scale))


def logsf(x, df, loc=0, scale=1):
    """``log P(X > x)``."""
    return _gamma.logsf(*_as_gamma("chi2.logsf", x, df, loc, scale))
