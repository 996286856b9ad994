"""The geometric distribution: the number of trials up to and including the first success,
with success probability ``p``, shifted by ``loc`` (as ``jax.scipy.stats.geom``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import geom
    >>> geom.pmf(jnp.float32(1.0), 0.25)
    Array(0.25, dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import numpy as jnp
from functrans.scipy import special
from functrans.scipy.stats._util import promote

__all__ = ["logpmf", "pmf"]


def logpmf(k, p, loc=0):
    """``log P(X = k) = (j - 1) log(1 - p) + log p``, ``j = k - loc``; ``-inf`` for ``j < 1``."""
    k, p, loc = promote("geom.logpmf", k, p, loc)
    j = k - loc
    value = special.xlog1py(j - 1.0, -p) + jnp.log(p)
    return jnp.where(j <= 0, -np.inf, value)


def pmf(k, p, loc=0):
    """``P(X = k)``."""
    return jnp.exp(logpmf(k, p, loc))
