"""The uniform distribution on ``[loc, loc + scale]`` (as ``jax.scipy.stats.uniform``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import uniform
    >>> uniform.pdf(jnp.float32(0.5))
    Array(1., dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import numpy as jnp
from functrans.scipy.stats._util import promote

__all__ = ["logpdf", "pdf", "cdf", "ppf"]


def logpdf(x, loc=0, scale=1):
    """``-log(scale)`` on ``[loc, loc + scale]``, ``-inf`` outside."""
    x, loc, scale = promote("uniform.logpdf", x, loc, scale)
    inside = (x >= loc) & (x <= loc + scale)
    return jnp.where(inside, -jnp.log(scale), -np.inf)


def pdf(x, loc=0, scale=1):
    """``1 / scale`` on ``[loc, loc + scale]``, 0 outside."""
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """``P(X <= x) = clip((x - loc) / scale, 0, 1)``."""
    x, loc, scale = promote("uniform.cdf", x, loc, scale)
    return jnp.clip((x - loc) / scale, 0.0, 1.0)


def ppf(q, loc=0, scale=1):
    """The quantile function ``loc + q scale`` for ``q`` in ``[0, 1]``, NaN outside."""
    q, loc, scale = promote("uniform.ppf", q, loc, scale)
    return jnp.where((q < 0) | (q > 1), np.nan, loc + q * scale)
