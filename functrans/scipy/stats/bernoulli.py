"""The Bernoulli distribution on ``{loc, loc + 1}`` (as ``jax.scipy.stats.bernoulli``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import bernoulli
    >>> bernoulli.pmf(jnp.float32(1.0), 0.25)
    Array(0.25, dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import numpy as jnp
from functrans.scipy import special
from functrans.scipy.stats._util import promote

__all__ = ["logpmf", "pmf", "cdf", "ppf"]


def logpmf(k, p, loc=0):
    """``log P(X = k)``: ``log p`` at ``k - loc == 1``, ``log(1 - p)`` at 0, else ``-inf``."""
    k, p, loc = promote("bernoulli.logpmf", k, p, loc)
    j = k - loc
    value = special.xlogy(j, p) + special.xlog1py(1.0 - j, -p)
    return jnp.where((j == 0) | (j == 1), value, -np.inf)


def pmf(k, p, loc=0):
    """``P(X = k)``."""
    return jnp.exp(logpmf(k, p, loc))


def cdf(k, p):
    """``P(X <= k)``: 0 below 0, ``1 - p`` on ``[0, 1)``, 1 from 1 on."""
    k, p = promote("bernoulli.cdf", k, p)
    out = jnp.where(k < 0, 0.0, jnp.where(k < 1, 1.0 - p, 1.0))
    return jnp.where((p < 0) | (p > 1), np.nan, out).astype(k.dtype)


def ppf(q, p):
    """The quantile function: 0 for ``q <= 1 - p``, else 1 (``-1`` at ``q == 0`` and NaN
    outside ``[0, 1]``, as SciPy)."""
    q, p = promote("bernoulli.ppf", q, p)
    out = jnp.where(q <= 1.0 - p, 0.0, 1.0)
    out = jnp.where(q == 0, -1.0, out)
    return jnp.where((q < 0) | (q > 1) | (p < 0) | (p > 1), np.nan, out).astype(q.dtype)
