"""The gamma-function relatives of ``jax.scipy.special``: :func:`beta`, :func:`comb`,
:func:`poch`, :func:`loggamma` and :func:`gammasgn` (``gammaln``, ``digamma`` and the other
common ones are in ``functrans.scipy.special`` itself).

    >>> import functrans.numpy as jnp
    >>> comb(jnp.float32(5.0), jnp.float32(2.0))
    Array(10..., dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import lax
from functrans import numpy as jnp
from functrans.numpy._promotion import promote_args_inexact

__all__ = ["beta", "comb", "poch", "loggamma", "gammasgn"]


# =============================================================================================
# The gamma-function family
# =============================================================================================

def gammasgn(x):
    """The sign of the gamma function: 1 for ``x >= 0``, ``(-1)**ceil(-x)`` between the
    negative integers, NaN at the negative integers (the poles) and at NaN.

        >>> gammasgn(jnp.array([-2.5, -0.5, 3.0]))
        Array([-1., -1.,  1.], dtype=float32)
    """
    (x,) = promote_args_inexact("gammasgn", x)
    floor = jnp.floor(x)
    # Gamma < 0 on (-1, 0), (-3, -2), ...: where floor(x) is odd
    odd = jnp.remainder(floor, 2.0) == 1.0
    sign = jnp.where((x < 0) & odd, -1.0, 1.0)
    pole = (x < 0) & (floor == x)
    return jnp.where(pole | jnp.isnan(x), np.nan, sign).astype(x.dtype)


def loggamma(x):
    """The principal branch of ``log Gamma(x)`` for real ``x``: ``gammaln(x)`` for
    ``x > 0``, ``inf`` at 0 and NaN for ``x < 0`` (where the real logarithm does not exist),
    as ``scipy.special.loggamma`` on real input.

        >>> loggamma(jnp.float32(3.0))        # log(2)
        Array(0.6931472, dtype=float32)
    """
    (x,) = promote_args_inexact("loggamma", x)
    return jnp.where(x < 0, np.nan, lax.lgamma(x)).astype(x.dtype)


def beta(a, b):
    """The beta function ``B(a, b) = Gamma(a) Gamma(b) / Gamma(a + b)``, signed for negative
    arguments; NaN where ``a`` or ``b`` is a pole of the gamma function, 0 where only
    ``a + b`` is.

        >>> beta(jnp.float32(1.0), jnp.float32(2.0))
        Array(0.5, dtype=float32)
    """
    a, b = promote_args_inexact("beta", a, b)
    sign_ab = gammasgn(a) * gammasgn(b)
    total = a + b
    # a pole of Gamma(a + b) alone makes B(a, b) zero (jax.scipy gives NaN there; SciPy 0)
    total_pole = (total <= 0) & (jnp.floor(total) == total)
    sign = sign_ab * jnp.where(total_pole, 1.0, gammasgn(total))
    log_abs = lax.lgamma(a) + lax.lgamma(b) - lax.lgamma(total)
    return (sign * jnp.where(total_pole, 0.0, jnp.exp(log_abs))).astype(a.dtype)


def poch(z, m):
    """The Pochhammer symbol (rising factorial) ``(z)_m = Gamma(z + m) / Gamma(z)``; 1 for
    ``m == 0``.

        >>> poch(jnp.float32(3.0), jnp.float32(2.0))      # 3 * 4
        Array(12., dtype=float32)
    """
    z, m = promote_args_inexact("poch", z, m)

    def is_pole(v):
        return (v <= 0) & (jnp.floor(v) == v)

    # each branch sees only arguments it is finite at, so that gradients of the branches
    # not taken stay finite (a NaN there would leak through where's gradient)
    z_pole, total_pole = is_pole(z), is_pole(z + m)
    ordinary = ~z_pole & ~total_pole
    oz = jnp.where(ordinary, z, 1.0).astype(z.dtype)
    om = jnp.where(ordinary, m, 1.0).astype(z.dtype)
    value = gammasgn(oz + om) / gammasgn(oz) * jnp.exp(lax.lgamma(oz + om) - lax.lgamma(oz))
    # Gamma(z + m) at a pole with Gamma(z) finite: the ratio diverges (SciPy: +inf)
    value = jnp.where(total_pole, np.inf, value)
    # z itself a pole and m an integer: the finite product z (z+1) ... (z+m-1), by the
    # reflection (z)_m = (-1)**m Gamma(1 - z) / Gamma(1 - z - m); for other m, 1/Gamma(z) = 0
    reflect = z_pole & (jnp.floor(m) == m)
    rz = jnp.where(reflect, z, 0.0).astype(z.dtype)
    rm = jnp.where(reflect, m, 0.0).astype(z.dtype)
    reflected_arg = 1.0 - rz - rm
    safe_arg = jnp.where(is_pole(reflected_arg), 0.5, reflected_arg).astype(z.dtype)
    parity = jnp.where(jnp.remainder(rm, 2.0) == 1.0, -1.0, 1.0)
    reflected = jnp.where(is_pole(reflected_arg), 0.0,
                          parity * gammasgn(safe_arg)
                          * jnp.exp(lax.lgamma(1.0 - rz) - lax.lgamma(safe_arg)))
    value = jnp.where(z_pole, jnp.where(reflect, reflected, 0.0), value)
    return jnp.where(m == 0, 1.0, value).astype(z.dtype)


def comb(N, k, *, repetition: bool = False):
    """The number of combinations of ``N`` things taken ``k`` at a time,
    ``Gamma(N + 1) / (Gamma(k + 1) Gamma(N - k + 1))`` (real arguments allowed); 0 where
    ``k < 0``, ``N < 0`` or ``k > N``. With ``repetition=True``: ``comb(N + k - 1, k)``.

        >>> comb(jnp.float32(5.0), jnp.float32(2.0))
        Array(10..., dtype=float32)
    """
    N, k = promote_args_inexact("comb", N, k)
    if repetition:
        return comb(N + k - 1.0, k)
    valid = (k >= 0) & (N >= 0) & (k <= N)
    safe_k = jnp.where(valid, k, 0.0).astype(k.dtype)
    safe_N = jnp.where(valid, N, 0.0).astype(N.dtype)
    log_value = (lax.lgamma(safe_N + 1.0) - lax.lgamma(safe_k + 1.0)
                 - lax.lgamma(safe_N - safe_k + 1.0))
    return jnp.where(valid, jnp.exp(log_value), 0.0).astype(N.dtype)
