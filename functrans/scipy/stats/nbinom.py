"""The negative binomial distribution: ``k`` failures before the ``n``-th success in trials of
probability ``p``, shifted by ``loc`` (as ``jax.scipy.stats.nbinom``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import nbinom
    >>> nbinom.pmf(jnp.float32(0.0), 1.0, 0.5)
    Array(0.5, dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import numpy as jnp
from functrans.scipy import special
from functrans.scipy.stats._util import promote

__all__ = ["logpmf", "pmf"]


def logpmf(k, n, p, loc=0):
    """``log P(X = k) = log C(j + n - 1, n - 1) + n log p + j log(1 - p)``, ``j = k - loc``;
    ``-inf`` for ``j < 0`` (``j`` need not be an integer, as in ``jax.scipy.stats``)."""
    k, n, p, loc = promote("nbinom.logpmf", k, n, p, loc)
    j = k - loc
    log_choose = special.gammaln(j + n) - special.gammaln(j + 1.0) - special.gammaln(n)
    value = log_choose + special.xlogy(n, p) + special.xlog1py(j, -p)
    return jnp.where(j < 0, -np.inf, value)


def pmf(k, n, p, loc=0):
    """``P(X = k)``."""
    return jnp.exp(logpmf(k, n, p, loc))
