"""The beta-binomial distribution: a binomial over ``n`` trials whose success probability is
drawn from ``Beta(a, b)``, shifted by ``loc`` (as ``jax.scipy.stats.betabinom``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import betabinom
    >>> betabinom.pmf(jnp.float32(1.0), 2.0, 1.0, 1.0)    # uniform on {0, 1, 2}
    Array(0.33333..., dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import numpy as jnp
from functrans.scipy import special
from functrans.scipy.stats._util import promote

__all__ = ["logpmf", "pmf"]


def logpmf(k, n, a, b, loc=0):
    """``log P(X = k) = log C(n, j) + log B(j + a, n - j + b) - log B(a, b)`` with
    ``j = floor(k) - loc``; ``-inf`` outside ``0 <= j <= n``, NaN for ``n < 0``, ``a <= 0`` or
    ``b <= 0``."""
    k, n, a, b, loc = promote("betabinom.logpmf", k, n, a, b, loc)
    j = jnp.floor(k) - loc
    # log C(n, j) = -log(n + 1) - log B(n - j + 1, j + 1) stays finite for large n
    log_choose = -jnp.log1p(n) - special.betaln(n - j + 1.0, j + 1.0)
    value = log_choose + special.betaln(j + a, n - j + b) - special.betaln(a, b)
    value = jnp.where((j == 0) & (n == 0), 0.0, value)
    value = jnp.where((j < 0) | (j > n), -np.inf, value)
    return jnp.where((n < 0) | (a <= 0) | (b <= 0), np.nan, value)


def pmf(k, n, a, b, loc=0):
    """``P(X = k)``."""
    return jnp.exp(logpmf(k, n, a, b, loc))
