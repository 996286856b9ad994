"""The von Mises distribution on the circle with concentration ``kappa`` (as
``jax.scipy.stats.vonmises``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import vonmises
    >>> vonmises.pdf(jnp.float32(0.0), 1.0)
    Array(0.3417..., dtype=float32)
"""
from __future__ import annotations

import math

import numpy as np

from functrans import numpy as jnp
from functrans import lax
from functrans.scipy.stats._util import promote

__all__ = ["logpdf", "pdf"]


def logpdf(x, kappa):
    """``kappa cos(x) - log(2 pi I0(kappa))`` (periodic in ``x``); NaN for ``kappa <= 0``, as
    in ``jax.scipy.stats``."""
    x, kappa = promote("vonmises.logpdf", x, kappa)
    # with I0(k) = exp(k) i0e(k) the exponent becomes k (cos x - 1), which cannot overflow
    safe_kappa = jnp.where(kappa > 0, kappa, 1.0).astype(kappa.dtype)
    value = (safe_kappa * (jnp.cos(x) - 1.0) - jnp.log(lax.bessel_i0e(safe_kappa))
             - math.log(2.0 * math.pi))
    return jnp.where(kappa > 0, value, np.nan)


def pdf(x, kappa):
    """The density at ``x``."""
    return jnp.exp(logpdf(x, kappa))
