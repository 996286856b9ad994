"""The multinomial distribution: counts ``x`` of ``n`` draws over categories of
probabilities ``p`` (as ``jax.scipy.stats.multinomial``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.stats import multinomial
    >>> multinomial.pmf(jnp.array([1, 1]), 2, jnp.array([0.5, 0.5]))
    Array(0.5, dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans import numpy as jnp
from functrans.core import get_aval
from functrans.scipy import special
from functrans.numpy._promotion import check_arraylike, promote_args_inexact, promote_dtypes

__all__ = ["logpmf", "pmf"]


def logpmf(x, n, p):
    """``log n! - sum_i log x_i! + sum_i x_i log p_i`` where ``sum(x) == n``, else ``-inf``.

    ``x`` (integer counts, categories on the last axis) and ``n`` must be integers, as in
    ``jax.scipy.stats``; the result has ``p``'s floating dtype.
    """
    (p,) = promote_args_inexact("multinomial.logpmf", p)
    check_arraylike("multinomial.logpmf", x, n)
    # no shape broadcasting between x and n: x carries the category axis, n does not
    x, n = promote_dtypes(x, n)
    if not _dtypes.is_integer(get_aval(x).dtype):
        raise ValueError(f"multinomial.logpmf: x and n must be of integer type; got "
                         f"x.dtype={get_aval(x).dtype}, n.dtype={get_aval(n).dtype}")
    dtype = get_aval(p).dtype
    x = x.astype(dtype)
    n = n.astype(dtype)
    total = jnp.sum(x, axis=-1)
    value = (special.gammaln(n + 1.0)
             + jnp.sum(special.xlogy(x, p) - special.gammaln(x + 1.0), axis=-1))
    return jnp.where(total == n, value, -np.inf)


def pmf(x, n, p):
    """``P(X = x)``."""
    return jnp.exp(logpmf(x, n, p))
