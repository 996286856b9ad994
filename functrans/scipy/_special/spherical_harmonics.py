"""Spherical harmonics :func:`sph_harm_y`, built on the associated Legendre functions.
"""
from __future__ import annotations

import math

import numpy as np

from functrans import lax
from functrans import numpy as jnp
from functrans.core import get_aval
from functrans.numpy._promotion import concrete_or_error, promote_args_inexact

__all__ = ["sph_harm_y"]


# =============================================================================================
# Spherical harmonics
# =============================================================================================

def sph_harm_y(n, m, theta, phi, diff_n=None, n_max=None):
    """The spherical harmonics ``Y_n^m(theta, phi) = N P_n^m(cos theta) exp(i m phi)``,
    orthonormal on the sphere (Condon-Shortley phase included, as SciPy), for degree
    ``n >= 0``, order ``|m| <= n``, polar angle ``theta`` and azimuth ``phi``; complex result.

    ``n_max`` (static) bounds the degree; degrees above it are clipped to it, as in
    ``jax.scipy.special``. Without it, ``max(n)`` is read from ``n``, which must then be
    concrete (not traced). ``diff_n`` (derivatives) is not supported.

    The normalized functions are built by the stable upward recurrence in the degree,
    ``y_l = a_l (cos(theta) y_{l-1} - y_{l-2} / a_{l-1})``, ``a_l = sqrt((4l**2 - 1) /
    (l**2 - m**2))``, from ``y_|m|^|m|``, with ``Y_n^-m = (-1)**m conj(Y_n^m)``.

        >>> abs(complex(sph_harm_y(jnp.array(0), jnp.array(0), 0.3, 0.1)) - 0.2820948) < 1e-6
        True
    """
    if diff_n is not None:
        raise NotImplementedError("sph_harm_y: diff_n (derivatives) is not supported")
    if n_max is None:
        n_max = int(np.max(concrete_or_error(
            n, "sph_harm_y", "Pass n_max (the largest degree) as a static integer.")))
    n_max = int(n_max)
    theta, phi = promote_args_inexact("sph_harm_y", theta, phi)
    dtype = get_aval(theta).dtype
    n = jnp.asarray(n)
    m = jnp.asarray(m)
    shape = jnp.broadcast_shapes(get_aval(n).shape, get_aval(m).shape, get_aval(theta).shape,
                                 get_aval(phi).shape)
    n = jnp.broadcast_to(jnp.minimum(n, n_max).astype(dtype), shape)
    m = jnp.broadcast_to(m.astype(dtype), shape)
    theta = jnp.broadcast_to(theta, shape)
    phi = jnp.broadcast_to(phi, shape)
    order = jnp.abs(m)
    cos_t, sin_t = jnp.cos(theta), jnp.sin(theta)
    # y_m^m = (-1)**m sqrt((2m + 1) / (4 pi) (2m)! / (4**m m!**2)) sin(theta)**m
    log_norm = 0.5 * (jnp.log(2.0 * order + 1.0) - math.log(4.0 * math.pi)
                      + lax.lgamma(2.0 * order + 1.0) - order * math.log(4.0)
                      - 2.0 * lax.lgamma(order + 1.0))
    odd_order = jnp.remainder(order, 2.0) == 1.0
    abs_sin = jnp.abs(sin_t)
    safe_sin = jnp.where(abs_sin > 0, abs_sin, 1.0)
    sin_power = jnp.where(order == 0, 1.0,
                          jnp.where(abs_sin > 0, jnp.exp(order * jnp.log(safe_sin)), 0.0))
    sin_sign = jnp.where((sin_t < 0) & odd_order, -1.0, 1.0)
    seed = jnp.where(odd_order, -1.0, 1.0) * sin_sign * jnp.exp(log_norm) * sin_power

    def coefficient(l):
        # a_l = sqrt((4 l**2 - 1) / (l**2 - m**2)) for l > |m|
        safe = jnp.where(l > order, l * l - order * order, 1.0)
        return jnp.sqrt((4.0 * l * l - 1.0) / safe)

    def body(i, state):
        y_cur, y_prev, result = state
        l = (i + 1).astype(dtype)
        active = l > order
        prev_term = jnp.where(l - 1.0 > order, y_prev / coefficient(l - 1.0), 0.0)
        y_new = coefficient(l) * (cos_t * y_cur - prev_term)
        result = jnp.where(active & (l == n), y_new, result)
        return (jnp.where(active, y_new, y_cur), jnp.where(active, y_cur, y_prev), result)

    result = jnp.where(n == order, seed, 0.0).astype(dtype)
    if n_max > 0:
        _, _, result = lax.fori_loop(0, n_max, body, (seed, jnp.zeros_like(seed), result))
    # Y_n^-m = (-1)**m conj(Y_n^m): for negative m, the real part carries (-1)**m
    real = jnp.where((m < 0) & odd_order, -result, result)
    angle = m * phi
    complex_dtype = np.complex128 if np.dtype(dtype).itemsize >= 8 else np.complex64
    return ((real * jnp.cos(angle)).astype(complex_dtype)
            + 1j * (real * jnp.sin(angle)).astype(complex_dtype))
