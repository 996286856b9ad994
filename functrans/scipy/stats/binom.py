"""The binomial distribution: ``k`` successes in ``n`` trials of probability ``p``, shifted by
``loc`` (as ``jax.scipy.stats.binom``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import binom
    >>> binom.pmf(jnp.float32(1.0), 2.0, 0.5)
    Array(0.5, dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import numpy as jnp
from functrans.scipy import special
from functrans.scipy.stats._util import promote

__all__ = ["logpmf", "pmf"]


def logpmf(k, n, p, loc=0):
    """``log P(X = k) = log C(n, j) + j log p + (n - j) log(1 - p)``, ``j = k - loc``;
    ``-inf`` outside ``0 <= j <= n``. As in ``jax.scipy.stats``, ``j`` is not required to be
    an integer (the log-gamma form interpolates between integers)."""
    k, n, p, loc = promote("binom.logpmf", k, n, p, loc)
    j = k - loc
    log_choose = special.gammaln(n + 1.0) - special.gammaln(j + 1.0) - special.gammaln(n - j + 1.0)
    # xlogy / xlog1py make 0 * log 0 = 0, so p = 0 or 1 gives the point masses
    value = log_choose + special.xlogy(j, p) + special.xlog1py(n - j, -p)
    return jnp.where((j < 0) | (j > n), -np.inf, value)


def pmf(k, n, p, loc=0):
    """``P(X = k)``."""
    return jnp.exp(logpmf(k, n, p, loc))
