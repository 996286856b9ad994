"""Student's t distribution with ``df`` degrees of freedom (as ``jax.scipy.stats.t``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import t
    >>> t.pdf(jnp.float32(0.0), 1.0)          # Cauchy: 1 / pi
    Array(0.318309..., dtype=float32)
"""
from __future__ import annotations

import math

from functrans import numpy as jnp
from functrans.scipy import special
from functrans.scipy.stats._util import promote

__all__ = ["logpdf", "pdf"]


def logpdf(x, df, loc=0, scale=1):
    """``log`` of ``Gamma((df+1)/2) / (Gamma(df/2) sqrt(df pi) scale) (1 + z**2/df)**-((df+1)/2)``."""
    x, df, loc, scale = promote("t.logpdf", x, df, loc, scale)
    z = (x - loc) / scale
    half = 0.5 * (df + 1.0)
    normalizer = (special.gammaln(half) - special.gammaln(0.5 * df)
                  - 0.5 * jnp.log(df) - 0.5 * math.log(math.pi) - jnp.log(scale))
    return normalizer - half * jnp.log1p(z * z / df)


def pdf(x, df, loc=0, scale=1):
    """The density at ``x``."""
    return jnp.exp(logpdf(x, df, loc, scale))
