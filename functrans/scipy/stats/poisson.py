"""The Poisson distribution with mean ``mu``, shifted by ``loc`` (as
``jax.scipy.stats.poisson``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import poisson
    >>> poisson.pmf(jnp.float32(0.0), 1.0)
    Array(0.367879..., dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import numpy as jnp
from functrans.scipy import special
from functrans.scipy.stats._util import promote

__all__ = ["logpmf", "pmf", "cdf"]


def logpmf(k, mu, loc=0):
    """``log P(X = k) = k log mu - mu - log k!`` for integers ``k - loc >= 0``, else ``-inf``."""
    k, mu, loc = promote("poisson.logpmf", k, mu, loc)
    j = k - loc
    value = special.xlogy(j, mu) - special.gammaln(j + 1.0) - mu
    return jnp.where((j < 0) | (j != jnp.round(j)), -np.inf, value)


def pmf(k, mu, loc=0):
    """``P(X = k)``."""
    return jnp.exp(logpmf(k, mu, loc))


def cdf(k, mu, loc=0):
    """``P(X <= k) = Q(floor(k - loc) + 1, mu)`` (the regularized upper incomplete gamma
    function), 0 below ``loc``."""
    k, mu, loc = promote("poisson.cdf", k, mu, loc)
    j = jnp.floor(k - loc)
    safe_j = jnp.where(j < 0, 0.0, j).astype(k.dtype)
    return jnp.where(j < 0, 0.0, special.gammaincc(safe_j + 1.0, mu)).astype(k.dtype)
