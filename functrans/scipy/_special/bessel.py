"""Bessel functions of the first kind of integer order, :func:`bessel_jn` (the modified
Bessel functions ``i0``, ``i1``, ``i0e``, ``i1e`` are in ``functrans.scipy.special``).

    >>> import functrans.numpy as jnp
    >>> bessel_jn(jnp.float32(0.0), v=1)
    Array([1., 0.], dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans import lax
from functrans import numpy as jnp
from functrans.core import get_aval

__all__ = ["bessel_jn"]


# =============================================================================================
# Bessel functions of the first kind of integer order
# =============================================================================================

_BESSEL_SERIES_SWITCH = 2.0
_BESSEL_SERIES_STEPS = 20
# backward recurrence from order N is accurate to about float64 rounding for |z| < N / 2 and
# to float32 rounding up to 0.6 N; beyond that it is NaN rather than wrong
_BESSEL_RANGE = 0.6
_BESSEL_RESCALE = 1e10


def _bessel_j_series(z, orders):
    """``J_n(z) = (z/2)**n / n! sum_m (-z**2/4)**m / (m! (n+1)_m)`` for ``|z| <= 2`` (few
    terms, no cancellation), orders along a new leading axis."""
    n = jnp.reshape(jnp.arange(orders, dtype=get_aval(z).dtype), (orders,) + (1,) * jnp.ndim(z))
    quarter = -0.25 * z * z

    def body(i, state):
        term, total = state
        m = (i + 1).astype(z.dtype)
        term = term * quarter / (m * (n + m))
        return term, total + term

    ones = jnp.ones((orders,) + get_aval(z).shape, get_aval(z).dtype)
    _, total = lax.fori_loop(0, _BESSEL_SERIES_STEPS, body, (ones, ones))
    # (z/2)**n / n!, with 0**0 = 1
    leading = jnp.where(n == 0, 1.0, jnp.power(0.5 * z, n)) / jnp.exp(lax.lgamma(n + 1.0))
    return leading * total


def _bessel_j_backward(z, orders, start):
    """Miller's algorithm: the recurrence ``f_{k-1} = (2k / z) f_k - f_{k+1}`` from
    ``f_{start+1} = 0, f_start = 1`` down to ``f_0``, normalized by
    ``J_0 + 2 (J_2 + J_4 + ...) = 1``; rescaled whenever it grows large (for ``|z| >= 2``
    each step grows by at most ``start``)."""
    dtype = get_aval(z).dtype
    n = jnp.reshape(jnp.arange(orders, dtype=dtype), (orders,) + (1,) * jnp.ndim(z))
    outs = jnp.zeros((orders,) + get_aval(z).shape, dtype)

    def body(i, state):
        f_next, f_cur, total, outs = state
        k = (start - i).astype(dtype)
        total = total + jnp.where(jnp.remainder(k, 2.0) == 0, 2.0 * f_cur, 0.0)
        outs = jnp.where(n == k, f_cur, outs)
        f_prev = 2.0 * k / z * f_cur - f_next
        big = jnp.abs(f_prev) > _BESSEL_RESCALE
        factor = jnp.where(big, 1.0 / _BESSEL_RESCALE, 1.0)
        return f_cur * factor, f_prev * factor, total * factor, outs * factor

    init = (jnp.zeros_like(z), jnp.ones_like(z), jnp.zeros_like(z), outs)
    _, f_zero, total, outs = lax.fori_loop(0, start, body, init)
    outs = jnp.where(n == 0, f_zero, outs)
    return outs / (total + f_zero)


def bessel_jn(z, *, v: int, n_iter: int = 50):
    """The Bessel functions of the first kind ``J_0(z), ..., J_v(z)`` of integer orders,
    stacked along a new leading axis: shape ``(v + 1, *z.shape)``, dtype of ``z``.

    A power series for ``|z| <= 2`` and Miller's backward recurrence from order
    ``n_iter + v`` beyond; the recurrence is accurate for ``|z|`` up to about
    ``0.6 (n_iter + v)`` and gives NaN past that (raise ``n_iter`` for larger ``|z|``).

        >>> bessel_jn(jnp.array([1.0]), v=1)
        Array([[0.765197...],
               [0.440050...]], dtype=float32)
    """
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"bessel_jn: the order v must be a Python integer, got {v!r}")
    if v < 0:
        raise ValueError(f"bessel_jn: the order v must be non-negative, got {v}")
    z = jnp.asarray(z)
    if not _dtypes.is_float(get_aval(z).dtype):
        raise ValueError(f"bessel_jn: z must be a floating-point array, got dtype "
                         f"{get_aval(z).dtype}")
    orders = int(v) + 1
    start = int(n_iter) + int(v)
    magnitude = jnp.abs(z)
    small = magnitude <= _BESSEL_SERIES_SWITCH
    series = _bessel_j_series(jnp.where(small, z, 0.0).astype(z.dtype), orders)
    large_z = jnp.where(small | (magnitude == np.inf), _BESSEL_SERIES_SWITCH * 2, z).astype(z.dtype)
    backward = _bessel_j_backward(large_z, orders, start)
    out = jnp.where(small, series, backward)
    # J_n(+-inf) = 0, the limit (SciPy gives NaN); beyond the recurrence's range, no honest
    # value
    out = jnp.where(magnitude == np.inf, 0.0, out)
    out_of_range = (magnitude > _BESSEL_RANGE * start) & (magnitude < np.inf)
    return jnp.where(out_of_range | jnp.isnan(z), np.nan, out).astype(z.dtype)
