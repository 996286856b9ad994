"""The Dirichlet distribution on the probability simplex (as ``jax.scipy.stats.dirichlet``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import dirichlet
    >>> dirichlet.pdf(jnp.array([0.25, 0.75]), jnp.array([1.0, 1.0]))
    Array(1., dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import numpy as jnp
from functrans.core import get_aval
from functrans.scipy import special
from functrans.numpy._promotion import promote_dtypes_inexact

__all__ = ["logpdf", "pdf"]


def logpdf(x, alpha):
    """``sum_i (alpha_i - 1) log x_i - log B(alpha)`` for ``x`` on the simplex, ``-inf`` off it.

    ``alpha`` has shape ``(K,)``; ``x`` has shape ``(K, ...)`` (points along the trailing
    axes), or ``(K - 1, ...)`` with the last coordinate implied as ``1 - sum(x)``. A point is
    on the simplex when every coordinate is positive and they sum to 1 within ``1e-6``.
    """
    x, alpha = promote_dtypes_inexact(x, alpha)
    if jnp.ndim(alpha) != 1:
        raise ValueError(f"dirichlet.logpdf: alpha must be one-dimensional, got shape "
                         f"{get_aval(alpha).shape}")
    k = get_aval(alpha).shape[0]
    if jnp.ndim(x) == 0 or get_aval(x).shape[0] not in (k, k - 1):
        raise ValueError(f"dirichlet.logpdf: x must have {k} or {k - 1} entries along axis 0 "
                         f"(alpha has shape {get_aval(alpha).shape}), got shape "
                         f"{get_aval(x).shape}")
    if get_aval(x).shape[0] == k - 1:
        x = jnp.concatenate([x, 1.0 - jnp.sum(x, axis=0, keepdims=True)], axis=0)
    alpha_b = jnp.reshape(alpha, (k,) + (1,) * (jnp.ndim(x) - 1))
    log_beta = jnp.sum(special.gammaln(alpha)) - special.gammaln(jnp.sum(alpha))
    value = jnp.sum(special.xlogy(alpha_b - 1.0, x), axis=0) - log_beta
    on_simplex = jnp.all(x > 0, axis=0) & (jnp.abs(jnp.sum(x, axis=0) - 1.0) < 1e-6)
    return jnp.where(on_simplex, value, -np.inf)


def pdf(x, alpha):
    """The density at ``x``."""
    return jnp.exp(logpdf(x, alpha))
