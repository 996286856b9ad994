"""The generalized normal distribution with shape ``beta``, density proportional to
``exp(-|x|**beta)`` (as ``jax.scipy.stats.gennorm``; ``beta = 2`` is a normal, 1 a Laplace).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import gennorm
    >>> gennorm.cdf(jnp.float32(0.0), 1.5)
    Array(0.5, dtype=float32)
"""
from __future__ import annotations

from functrans import numpy as jnp
from functrans.scipy import special
from functrans.scipy.stats._util import promote

__all__ = ["logpdf", "pdf", "cdf"]


def logpdf(x, beta):
    """``log(beta / (2 Gamma(1/beta))) - |x|**beta``."""
    x, beta = promote("gennorm.logpdf", x, beta)
    return jnp.log(0.5 * beta) - special.gammaln(1.0 / beta) - jnp.abs(x) ** beta


def pdf(x, beta):
    """The density at ``x``."""
    return jnp.exp(logpdf(x, beta))


def cdf(x, beta):
    """``P(X <= x) = (1 + sign(x) P(1/beta, |x|**beta)) / 2``, ``P`` the regularized lower
    incomplete gamma function."""
    x, beta = promote("gennorm.cdf", x, beta)
    return 0.5 * (1.0 + jnp.sign(x) * special.gammainc(1.0 / beta, jnp.abs(x) ** beta))
