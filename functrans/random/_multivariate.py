"""Vector- and matrix-valued draws: ``multivariate_normal``, ``orthogonal``, ``ball``."""
from __future__ import annotations

import numpy as np

import functrans.numpy as jnp
from functrans import _dtypes
from functrans.core import get_aval
from functrans.random._arguments import (float_dtype, float_param, shape_from_param_shapes,
                                         shape_tuple)
from functrans.random._bits import split_keys
from functrans.random._continuous import exponential, normal
from functrans.random._gamma import generalized_normal
from functrans.random._keys import as_key


def multivariate_normal(key, mean, cov, shape=None, dtype=None, method="cholesky"):
    """Samples of N(mean, cov): ``mean + F @ z`` with ``z`` standard normal and
    ``cov = F F^T``; ``method`` picks ``F``: ``"cholesky"`` (the Cholesky factor),
    ``"eigh"`` (``V sqrt(w)``) or ``"svd"`` (``U sqrt(s)``). ``shape`` is the batch shape
    (default: the broadcast of ``mean``'s and ``cov``'s batch shapes).

        >>> import functrans.numpy as jnp
        >>> multivariate_normal(PRNGKey(0), jnp.zeros(2), jnp.eye(2), (5,)).shape
        (5, 2)
    """
    key = as_key("multivariate_normal", key)
    dtype = float_dtype(dtype, "multivariate_normal")
    mean, cov = float_param(mean, dtype), float_param(cov, dtype)
    mean_shape, cov_shape = get_aval(mean).shape, get_aval(cov).shape
    if len(mean_shape) < 1 or len(cov_shape) < 2 or cov_shape[-2:] != mean_shape[-1:] * 2:
        raise ValueError(f"multivariate_normal: mean of shape {mean_shape} and cov of shape "
                         f"{cov_shape} do not describe one distribution (need (..., n) and "
                         "(..., n, n))")
    shape = shape_from_param_shapes("multivariate_normal", shape, mean_shape[:-1],
                                    cov_shape[:-2])
    if method == "cholesky":
        factor = jnp.linalg.cholesky(cov)
    elif method == "eigh":
        eigvals, eigvecs = jnp.linalg.eigh(cov)
        factor = eigvecs * jnp.sqrt(eigvals[..., None, :])
    elif method == "svd":
        u, s, _ = jnp.linalg.svd(cov)
        factor = u * jnp.sqrt(s[..., None, :])
    else:
        raise ValueError(f"multivariate_normal: method must be 'cholesky', 'eigh' or 'svd', "
                         f"got {method!r}")
    z = normal(key, shape + mean_shape[-1:], dtype)
    return mean + jnp.einsum("...ij,...j->...i", factor, z)


def orthogonal(key, n, shape=(), dtype=None, m=None):
    """Haar-random orthogonal matrices (unitary for complex dtypes): shape
    ``shape + (n, m)`` (``m`` defaults to ``n``; if ``n != m`` the rows or the columns,
    whichever are fewer, are orthonormal).

    The Q factor of a Gaussian matrix, with each column's sign (phase) fixed by the R
    factor's diagonal: without the fix, QR's sign convention would bias the distribution.

        >>> import functrans.numpy as jnp
        >>> q = orthogonal(PRNGKey(0), 3)
        >>> bool(jnp.allclose(q @ q.T, jnp.eye(3), atol=1e-5))
        True
    """
    key = as_key("orthogonal", key)
    shape = shape_tuple(shape, "orthogonal")
    m = n if m is None else m
    n, m = int(n), int(m)
    dtype = _dtypes.default_float_dtype() if dtype is None else _dtypes.canonicalize_dtype(dtype)
    if not (_dtypes.is_float(dtype) or _dtypes.is_complex(dtype)):
        raise ValueError(f"orthogonal needs a floating-point or complex dtype, got {dtype}")
    z = normal(key, shape + (max(n, m), min(n, m)), dtype)
    q, r = jnp.linalg.qr(z)
    q = q * jnp.sign(jnp.diagonal(r, axis1=-2, axis2=-1))[..., None, :]
    return q if n >= m else jnp.swapaxes(q, -1, -2)


def ball(key, d, p=2, shape=(), dtype=None):
    """Points uniform in the unit ``p``-norm ball of dimension ``d``: shape ``shape + (d,)``.

    Barthe, Guedon, Mendelson and Naor: generalized-normal coordinates ``g`` and a standard
    exponential ``e`` give ``g / (sum |g|**p + e)**(1/p)``.

        >>> import functrans.numpy as jnp
        >>> x = ball(PRNGKey(0), 3, shape=(10,))
        >>> x.shape, bool((jnp.linalg.norm(x, axis=-1) <= 1).all())
        ((10, 3), True)
    """
    key = as_key("ball", key)
    if not isinstance(d, (int, np.integer)) or d < 0:
        raise ValueError(f"ball: d must be a nonnegative int, got {d!r}")
    shape = shape_tuple(shape, "ball")
    dtype = float_dtype(dtype, "ball")
    key_g, key_e = split_keys(key, 2)
    g = generalized_normal(key_g, p, shape + (int(d),), dtype)
    e = exponential(key_e, shape, dtype)
    return g / ((jnp.sum(jnp.abs(g) ** p, axis=-1) + e) ** (1.0 / p))[..., None]
