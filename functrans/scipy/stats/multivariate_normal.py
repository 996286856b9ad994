"""The multivariate normal distribution (as ``jax.scipy.stats.multivariate_normal``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import multivariate_normal
    >>> multivariate_normal.logpdf(jnp.zeros(2), jnp.zeros(2), jnp.eye(2))
    Array(-1.837877, dtype=float32)
"""
from __future__ import annotations

from functrans import _lax_linalg as lax_linalg
from functrans import numpy as jnp
from functrans.core import get_aval
from functrans.scipy.stats._util import LOG_SQRT_2PI, promote
from functrans.numpy._promotion import promote_dtypes_inexact

__all__ = ["logpdf", "pdf"]


def logpdf(x, mean, cov, allow_singular=None):
    """``log`` of the density of ``N(mean, cov)`` at ``x`` (shape ``(..., n)``), by a
    Cholesky factorization of ``cov`` (shape ``(n, n)``, or a stack broadcasting with
    ``x``). A scalar ``mean`` with a scalar ``cov`` is the univariate case.
    ``allow_singular`` is not supported (a singular ``cov`` gives NaN).
    """
    if allow_singular:
        raise NotImplementedError("multivariate_normal.logpdf: allow_singular=True")
    x, mean, cov = promote_dtypes_inexact(x, mean, cov)
    if jnp.ndim(mean) == 0 and jnp.ndim(cov) == 0:
        x, mean, cov = promote("multivariate_normal.logpdf", x, mean, cov)
        return -0.5 * (x - mean) ** 2 / cov - 0.5 * jnp.log(cov) - LOG_SQRT_2PI
    n = get_aval(mean).shape[-1] if jnp.ndim(mean) else get_aval(cov).shape[-1]
    if jnp.ndim(cov) < 2 or get_aval(cov).shape[-2:] != (n, n):
        raise ValueError(f"multivariate_normal.logpdf: cov must have shape (..., {n}, {n}), "
                         f"got {get_aval(cov).shape}")
    diff = x - mean
    batch = jnp.broadcast_shapes(get_aval(diff).shape[:-1], get_aval(cov).shape[:-2])
    diff = jnp.broadcast_to(diff, batch + (n,))
    factor = jnp.broadcast_to(lax_linalg.cholesky(cov), batch + (n, n))
    # with cov = L L^T, the quadratic form is |L^-1 (x - mean)|**2
    z = lax_linalg.triangular_solve(factor, diff[..., None], left_side=True, lower=True)[..., 0]
    log_det_half = jnp.sum(jnp.log(jnp.diagonal(factor, axis1=-2, axis2=-1)), axis=-1)
    return -0.5 * jnp.sum(z * z, axis=-1) - log_det_half - n * LOG_SQRT_2PI


def pdf(x, mean, cov):
    """The density of ``N(mean, cov)`` at ``x``."""
    return jnp.exp(logpdf(x, mean, cov))
