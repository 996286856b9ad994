"""The Hurwitz zeta function :func:`zeta` and the Bernoulli numbers :func:`bernoulli`.

    >>> bernoulli(2)
    Array([ 1.        , -0.5       ,  0.16666667], dtype=float32)
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from functrans import _dtypes
from functrans import lax
from functrans import numpy as jnp
from functrans.numpy._promotion import promote_args_inexact

__all__ = ["zeta", "bernoulli"]


def zeta(x, q=None):
    """The Hurwitz zeta function ``sum_{n >= 0} (n + q)**-x``. As in ``jax.scipy.special``,
    ``q`` is required: the Riemann zeta function (``q=None``) raises NotImplementedError
    (use ``q=1``).

        >>> zeta(jnp.float32(2.0), jnp.float32(1.0))      # pi**2 / 6
        Array(1.644934, dtype=float32)
    """
    if q is None:
        raise NotImplementedError("zeta: the Riemann zeta function (q=None) is not "
                                  "implemented; pass q=1 for it, or q != None for the "
                                  "Hurwitz zeta function")
    x, q = promote_args_inexact("zeta", x, q)
    return lax.zeta(x, q)


def bernoulli(n: int):
    """The Bernoulli numbers ``B_0 ... B_n`` (with ``B_1 = -1/2``), for a static integer
    ``n >= 0``.

        >>> bernoulli(2)
        Array([ 1.        , -0.5       ,  0.16666667], dtype=float32)
    """
    n = int(n)
    if n < 0:
        raise ValueError(f"bernoulli: n must be a non-negative integer, got {n}")
    # exact rationals from sum_{k<m} C(m+1, k) B_k = -(m+1) B_m, then rounded once
    numbers = [Fraction(1)]
    for m in range(1, n + 1):
        total = sum(math.comb(m + 1, k) * numbers[k] for k in range(m))
        numbers.append(-total / (m + 1))
    return jnp.asarray(np.array([float(b) for b in numbers]), _dtypes.default_float_dtype())
