"""Relatives of the error function: the scaled complementary error function :func:`erfcx`,
Dawson's integral :func:`dawsn`, Owen's T function :func:`owens_t` and the Faddeeva
function :func:`wofz`. Each has a closed-form derivative, carried as a custom derivative
rule (reverse mode cannot go through the ``while_loop`` of a continued fraction).

    >>> import functrans.numpy as jnp
    >>> erfcx(jnp.float32(0.0))
    Array(1., dtype=float32)
"""
from __future__ import annotations

import math

import numpy as np

from functrans import _dtypes
from functrans import lax
from functrans import numpy as jnp
from functrans._custom_derivatives import custom_jvp
from functrans.core import get_aval
from functrans.numpy._promotion import promote_args_inexact

__all__ = ["erfcx", "dawsn", "ndtr", "owens_t", "wofz"]

_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)
_SQRT_HALF = math.sqrt(0.5)


# =============================================================================================
# The scaled complementary error function
# =============================================================================================

_ERFCX_SWITCH = 3.0         # below: exp(x**2) erfc(x) directly; above: continued fraction
_ERFCX_STEPS = 80


def _erfcx_fraction(x):
    """``erfcx(x) = 1/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))`` for
    ``x >= 3``, evaluated bottom-up over a fixed number of levels."""
    def body(i, tail):
        level = (_ERFCX_STEPS - i).astype(x.dtype)
        return x + 0.5 * level / tail
    tail = lax.fori_loop(0, _ERFCX_STEPS, body, x)
    return _INV_SQRT_PI / tail


@custom_jvp
def erfcx(x):
    """The scaled complementary error function ``exp(x**2) erfc(x)``; it stays finite (about
    ``1 / (x sqrt(pi))``) for large ``x``, where ``erfc`` underflows.

        >>> erfcx(jnp.float32(0.0))
        Array(1., dtype=float32)
    """
    (x,) = promote_args_inexact("erfcx", x)
    large = x >= _ERFCX_SWITCH
    safe_large = jnp.where(large, x, _ERFCX_SWITCH).astype(x.dtype)
    # the fraction converges for large x, but 1/inf at x = inf must give 0, not NaN
    fraction = jnp.where(safe_large == np.inf, 0.0, _erfcx_fraction(
        jnp.where(safe_large == np.inf, _ERFCX_SWITCH, safe_large).astype(x.dtype)))
    small = jnp.where(large, 0.0, x).astype(x.dtype)
    direct = jnp.exp(small * small) * lax.erfc(small)
    return jnp.where(large, fraction, direct).astype(x.dtype)


@erfcx.defjvp
def _erfcx_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    value = erfcx(x)
    # d/dx erfcx(x) = 2 x erfcx(x) - 2 / sqrt(pi)
    return value, (2.0 * x * value - 2.0 * _INV_SQRT_PI) * x_dot


_DAWSN_SWITCH = 8.0         # the asymptotic series is accurate to float64 beyond this
_DAWSN_SERIES_STEPS = 200
_DAWSN_ASYMPTOTIC_STEPS = 30


def _dawsn_nonnegative(x):
    """``F(x)`` for ``x >= 0``. Below the switch: ``F(x) = x 1F1(1; 3/2; -x**2)``, which
    Kummer's transformation turns into ``x e**(-x**2) sum_k x**(2k) / (k! (2k + 1))`` (all
    terms positive, no cancellation); above it the asymptotic series
    ``1/(2x) sum_k (2k - 1)!! / (2 x**2)**k``."""
    use_series = x < _DAWSN_SWITCH
    xs = jnp.where(use_series, x, 0.0).astype(x.dtype)
    xa = jnp.where(use_series, 2.0 * _DAWSN_SWITCH, x).astype(x.dtype)
    square = xs * xs

    def series_body(i, state):
        power, total = state
        k = (i + 1).astype(x.dtype)
        power = power * square / k                  # x**(2k) / k!
        return power, total + power / (2.0 * k + 1.0)

    _, series = lax.fori_loop(0, _DAWSN_SERIES_STEPS, series_body,
                              (jnp.ones_like(x), jnp.ones_like(x)))
    series = xs * jnp.exp(-square) * series
    inverse = 1.0 / (2.0 * xa * xa)

    def asymptotic_body(i, state):
        term, total = state
        term = term * (2.0 * (i + 1).astype(x.dtype) - 1.0) * inverse
        return term, total + term

    _, asymptotic = lax.fori_loop(0, _DAWSN_ASYMPTOTIC_STEPS, asymptotic_body,
                                  (jnp.ones_like(x), jnp.ones_like(x)))
    asymptotic = asymptotic / (2.0 * xa)
    return jnp.where(use_series, series, asymptotic)


@custom_jvp
def dawsn(x):
    """Dawson's integral ``F(x) = exp(-x**2) integral_0^x exp(t**2) dt`` (odd in ``x``).

        >>> dawsn(jnp.float32(1.0))
        Array(0.538079..., dtype=float32)
    """
    (x,) = promote_args_inexact("dawsn", x)
    magnitude = jnp.abs(x)
    value = _dawsn_nonnegative(jnp.where(magnitude == np.inf, 0.0, magnitude).astype(x.dtype))
    value = jnp.where(magnitude == np.inf, 0.0, value)
    return (jnp.sign(x) * value).astype(x.dtype)


@dawsn.defjvp
def _dawsn_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    value = dawsn(x)
    # F'(x) = 1 - 2 x F(x)
    return value, (1.0 - 2.0 * x * value) * x_dot


# =============================================================================================
# Owen's T function
# =============================================================================================

# Gauss-Legendre rule on [0, 1]: exact for polynomials of degree < 96, and accurate for the
# integrand below, whose width is 1/h, for h up to the range where T underflows
_OWENS_NODES, _OWENS_WEIGHTS = np.polynomial.legendre.leggauss(48)
_OWENS_NODES = 0.5 * (_OWENS_NODES + 1.0)
_OWENS_WEIGHTS = 0.5 * _OWENS_WEIGHTS


def _owens_t_unit(h, a):
    """``T(h, a) = 1/(2 pi) integral_0^a exp(-h**2 (1 + t**2) / 2) / (1 + t**2) dt`` for
    ``0 <= a <= 1``, by quadrature."""
    nodes = jnp.asarray(_OWENS_NODES.astype(get_aval(h).dtype))
    weights = jnp.asarray(_OWENS_WEIGHTS.astype(get_aval(h).dtype))
    t = a[..., None] * nodes
    one_plus = 1.0 + t * t
    integrand = jnp.exp(-0.5 * (h * h)[..., None] * one_plus) / one_plus
    return a * jnp.sum(integrand * weights, axis=-1) / (2.0 * math.pi)


def ndtr(x):
    """The standard normal CDF ``(1 + erf(x / sqrt(2))) / 2``, accurate in both tails.

        >>> ndtr(jnp.float32(0.0))
        Array(0.5, dtype=float32)
    """
    (x,) = promote_args_inexact("ndtr", x)
    # erfc keeps relative accuracy in the lower tail, where 1 + erf would cancel
    lower = 0.5 * lax.erfc(-x * _SQRT_HALF)
    upper = 1.0 - 0.5 * lax.erfc(x * _SQRT_HALF)
    return jnp.where(x < 0, lower, upper)


def owens_t(h, a):
    """Owen's T function
    ``T(h, a) = 1/(2 pi) integral_0^a exp(-h**2 (1 + t**2) / 2) / (1 + t**2) dt``, the
    probability that ``X > h`` and ``0 < Y < a X`` for independent standard normals.

    Even in ``h``, odd in ``a``. For ``|a| <= 1`` a Gauss-Legendre quadrature; for
    ``|a| > 1`` the identity
    ``T(h, a) = (Phi(h) Q(a h) + Phi(a h) Q(h)) / 2 - T(a h, 1/a)`` (``h >= 0``,
    ``Q = 1 - Phi``) brings ``a`` back into ``[0, 1]``. Differentiable in both arguments.

        >>> round(float(owens_t(jnp.float32(0.0), jnp.float32(1.0))), 6)   # arctan(1) / (2 pi)
        0.125
    """
    h, a = promote_args_inexact("owens_t", h, a)
    hh, aa = jnp.abs(h), jnp.abs(a)
    inverted = aa > 1
    finite = aa < np.inf
    # quadrature arguments in [0, 1]: (h, a) directly, or (a h, 1/a) for the identity
    safe_aa = jnp.where(inverted & finite, aa, 2.0).astype(h.dtype)
    quad_h = jnp.where(inverted, safe_aa * hh, hh)
    quad_a = jnp.where(inverted, 1.0 / safe_aa, aa)
    quadrature = _owens_t_unit(quad_h, quad_a)
    ah = safe_aa * hh
    identity = 0.5 * (ndtr(hh) * ndtr(-ah) + ndtr(ah) * ndtr(-hh)) - quadrature
    value = jnp.where(inverted, identity, quadrature)
    # a = +-inf: T(h, inf) = Q(|h|) / 2
    value = jnp.where(finite, value, 0.5 * ndtr(-hh))
    return (jnp.sign(a) * value).astype(h.dtype)


# =============================================================================================
# The Faddeeva function
# =============================================================================================

def _weideman_coefficients(n: int):
    """Coefficients of Weideman's rational approximation of ``w(z)`` for ``Im z >= 0``
    (J. A. C. Weideman, SIAM J. Numer. Anal. 31, 1994): with ``L = sqrt(n / sqrt(2))``,
    ``w(z) = 2 p(Z) / (L - iz)**2 + 1/sqrt(pi) / (L - iz)``, ``Z = (L + iz) / (L - iz)`` and
    ``p`` the degree ``n - 1`` polynomial whose coefficients are the Fourier coefficients of
    ``exp(-t**2) (L**2 + t**2)`` sampled at ``t = L tan(theta / 2)``."""
    m = 2 * n
    scale = math.sqrt(n / math.sqrt(2.0))
    theta = np.arange(-m + 1, m) * np.pi / m
    t = scale * np.tan(theta / 2.0)
    samples = np.concatenate([[0.0], np.exp(-t * t) * (scale * scale + t * t)])
    fourier = np.real(np.fft.fft(np.fft.fftshift(samples))) / (2 * m)
    # highest degree first, for Horner's rule
    return scale, fourier[1:n + 1][::-1].copy()


# 40 terms: about float64 rounding (1e-14 relative) everywhere in the upper half plane
_WOFZ_SCALE, _WOFZ_COEFFICIENTS = _weideman_coefficients(40)


def _wofz_upper(z):
    """``w(z)`` for ``Im z >= 0``."""
    denominator = _WOFZ_SCALE - 1j * z
    ratio = (_WOFZ_SCALE + 1j * z) / denominator
    poly = jnp.zeros_like(z)
    for c in _WOFZ_COEFFICIENTS:
        poly = poly * ratio + float(c)
    return 2.0 * poly / (denominator * denominator) + _INV_SQRT_PI / denominator


@custom_jvp
def wofz(z):
    """The Faddeeva function ``w(z) = exp(-z**2) erfc(-i z)`` of a complex (or real)
    argument; complex result (``complex64`` for single precision).

    Weideman's rational approximation in the upper half plane; below it the reflection
    ``w(z) = 2 exp(-z**2) - w(-z)``, which grows like ``exp(-z**2)``.

        >>> abs(complex(wofz(jnp.complex64(0.0))) - 1.0) < 1e-6      # w(0) = 1
        True
    """
    (z,) = promote_args_inexact("wofz", z)
    if not _dtypes.is_complex(get_aval(z).dtype):
        z = z.astype(np.complex128 if get_aval(z).dtype.itemsize >= 8 else np.complex64)
    imag = jnp.imag(z)
    lower = imag < 0
    upper_arg = jnp.where(lower, -z, z)
    infinite = jnp.isinf(jnp.real(upper_arg)) | jnp.isinf(jnp.imag(upper_arg))
    safe = jnp.where(infinite, jnp.zeros_like(z), upper_arg)
    value = jnp.where(infinite, jnp.zeros_like(z), _wofz_upper(safe))
    safe_lower = jnp.where(lower, z, jnp.zeros_like(z))
    return jnp.where(lower, 2.0 * jnp.exp(-safe_lower * safe_lower) - value, value)


@wofz.defjvp
def _wofz_jvp(primals, tangents):
    (z,), (z_dot,) = primals, tangents
    value = wofz(z)
    # w'(z) = -2 z w(z) + 2i / sqrt(pi)
    return value, (-2.0 * z * value + 2j * _INV_SQRT_PI) * z_dot
