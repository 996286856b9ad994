"""Special integrals: the exponential integrals :func:`exp1`, :func:`expi` and :func:`expn`,
the sine/cosine integrals :func:`sici`, the Fresnel integrals :func:`fresnel`, and the
dilogarithm :func:`spence`. Series and continued fractions run as ``lax.fori_loop`` /
``lax.while_loop``; every function carries its closed-form derivative.

    >>> import functrans.numpy as jnp
    >>> spence(jnp.float32(1.0))
    Array(0., dtype=float32)
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
from functrans.scipy._special import _eps

__all__ = ["exp1", "expi", "expn", "sici", "fresnel", "spence"]

_EULER_GAMMA = 0.5772156649015329


# =============================================================================================
# Exponential integrals
# =============================================================================================

_EXPN_STEPS = 120


def _expn_positive(n, x):
    """``E_n(x)`` for integer ``n >= 1`` and ``0 < x < inf``: the power series (with the
    ``digamma(n)`` term at ``k = n - 1``) for ``x <= 1``, the continued fraction
    ``e**-x / (x + n - 1n/(x + n + 2 - 2(n+1)/(x + n + 4 - ...)))`` (modified Lentz)
    above."""
    eps = _eps(x)
    tiny = float(_dtypes.finfo(get_aval(x).dtype).tiny) / eps
    use_series = x <= 1.0
    xs = jnp.where(use_series, x, 0.5).astype(x.dtype)
    xf = jnp.where(use_series, 2.0, x).astype(x.dtype)
    log_xs = jnp.log(xs)
    psi_n = lax.digamma(n)
    series0 = jnp.where(n == 1.0, -log_xs - _EULER_GAMMA,
                        1.0 / jnp.where(n == 1.0, 2.0, n - 1.0))

    b0 = xf + n
    d0 = 1.0 / b0

    def body(i, state):
        fact, series, b, c, d, h = state
        k = (i + 1).astype(x.dtype)
        # series term k: fact = (-x)**k / k!
        fact = fact * (-xs / k)
        term = jnp.where(k == n - 1.0, fact * (-log_xs + psi_n),
                         -fact / jnp.where(k == n - 1.0, 1.0, k - n + 1.0))
        series = series + term
        # continued fraction level k
        an = -k * (n - 1.0 + k)
        b = b + 2.0
        d = an * d + b
        d = 1.0 / jnp.where(jnp.abs(d) < tiny, tiny, d)
        c = b + an / c
        c = jnp.where(jnp.abs(c) < tiny, tiny, c)
        return fact, series, b, c, d, h * c * d

    init = (jnp.ones_like(x), series0, b0, jnp.full_like(x, 1.0 / tiny), d0, d0)
    _, series, _, _, _, h = lax.fori_loop(0, _EXPN_STEPS, body, init)
    return jnp.where(use_series, series, h * jnp.exp(-xf))


def _expn(n, x):
    integer = (n >= 0) & (jnp.floor(n) == n)
    inside = integer & (n >= 1) & (x > 0) & (x < np.inf)
    safe_n = jnp.where(inside, n, 1.0).astype(n.dtype)
    safe_x = jnp.where(inside, x, 1.0).astype(x.dtype)
    value = _expn_positive(safe_n, safe_x)
    # E_0(x) = e**-x / x; E_n(0) = 1/(n - 1) for n > 1 and inf for n <= 1; E_n(inf) = 0
    safe_x0 = jnp.where(x > 0, x, 1.0).astype(x.dtype)
    value = jnp.where(n == 0, jnp.exp(-safe_x0) / safe_x0, value)
    at_zero = jnp.where(n > 1, 1.0 / jnp.where(n > 1, n - 1.0, 1.0), np.inf)
    value = jnp.where(x == 0, at_zero, value)
    value = jnp.where(x == np.inf, 0.0, value)
    return jnp.where(~integer | (x < 0) | jnp.isnan(x), np.nan, value).astype(x.dtype)


@custom_jvp
def expn(n, x):
    """The generalized exponential integral ``E_n(x) = integral_1^inf e**(-x t) / t**n dt``
    for integer ``n >= 0`` and ``x >= 0``; NaN for non-integer or negative ``n`` and for
    ``x < 0``. Differentiable in ``x`` (``dE_n/dx = -E_{n-1}``).

        >>> expn(jnp.float32(2.0), jnp.float32(1.0))
        Array(0.148495..., dtype=float32)
    """
    n, x = promote_args_inexact("expn", n, x)
    return _expn(n, x)


@expn.defjvp
def _expn_jvp(primals, tangents):
    n, x = promote_args_inexact("expn", *primals)
    _, x_dot = tangents
    return expn(n, x), -expn(n - 1.0, x) * x_dot


@custom_jvp
def exp1(x):
    """The exponential integral ``E_1(x) = integral_x^inf e**-t / t dt`` for ``x >= 0``
    (``inf`` at 0, NaN for ``x < 0``).

        >>> exp1(jnp.float32(1.0))
        Array(0.219383..., dtype=float32)
    """
    (x,) = promote_args_inexact("exp1", x)
    return _expn(jnp.ones_like(x), x)


@exp1.defjvp
def _exp1_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    return exp1(x), -jnp.exp(-x) / x * x_dot


_EXPI_SWITCH = 40.0     # the asymptotic series is accurate to float64 beyond this
_EXPI_SERIES_STEPS = 160
_EXPI_ASYMPTOTIC_STEPS = 40


def _expi_positive(x):
    """``Ei(x)`` for ``x > 0``: ``gamma + log x + sum_k x**k / (k k!)`` (all terms positive,
    no cancellation) up to 40, then ``e**x / x sum_k k! / x**k``."""
    use_series = x <= _EXPI_SWITCH
    xs = jnp.where(use_series, x, 1.0).astype(x.dtype)
    xa = jnp.where(use_series, 2.0 * _EXPI_SWITCH, x).astype(x.dtype)

    def series_body(i, state):
        power, total = state
        k = (i + 1).astype(x.dtype)
        power = power * xs / k              # x**k / k!
        return power, total + power / k

    _, series = lax.fori_loop(0, _EXPI_SERIES_STEPS, series_body,
                              (jnp.ones_like(x), jnp.zeros_like(x)))
    series = _EULER_GAMMA + jnp.log(xs) + series

    def asymptotic_body(i, state):
        term, total = state
        term = term * (i + 1).astype(x.dtype) / xa
        return term, total + term

    _, asymptotic = lax.fori_loop(0, _EXPI_ASYMPTOTIC_STEPS, asymptotic_body,
                                  (jnp.ones_like(x), jnp.ones_like(x)))
    # e**x / x written as exp(x - log x) postpones overflow to where Ei itself overflows
    asymptotic = jnp.exp(xa - jnp.log(xa)) * asymptotic
    return jnp.where(use_series, series, asymptotic)


@custom_jvp
def expi(x):
    """The exponential integral ``Ei(x) = -PV integral_{-x}^inf e**-t / t dt``; for ``x < 0``
    it is ``-E_1(-x)``; ``-inf`` at 0 and ``inf`` at ``inf`` (as SciPy).

        >>> expi(jnp.float32(1.0))
        Array(1.8951179, dtype=float32)
    """
    (x,) = promote_args_inexact("expi", x)
    positive = (x > 0) & (x < np.inf)
    safe_pos = jnp.where(positive, x, 1.0).astype(x.dtype)
    negative_part = -_expn(jnp.ones_like(x), jnp.where(x < 0, -x, 1.0).astype(x.dtype))
    value = jnp.where(positive, _expi_positive(safe_pos), negative_part)
    value = jnp.where(x == 0, -np.inf, jnp.where(x == np.inf, np.inf, value))
    return jnp.where(jnp.isnan(x), np.nan, value).astype(x.dtype)


@expi.defjvp
def _expi_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    return expi(x), jnp.exp(x) / x * x_dot


_DILOG_STEPS = 60           # |z| <= 1/2 after the transformations: 2**-60 / 60**2 is negligible
_PI2_6 = math.pi ** 2 / 6.0


def _dilog_small(z):
    """``Li2(z) = sum_k z**k / k**2`` for ``|z| <= 1/2``."""
    def body(i, state):
        power, total = state
        k = (i + 1).astype(z.dtype)
        power = power * z
        return power, total + power / (k * k)
    return lax.fori_loop(0, _DILOG_STEPS, body, (jnp.ones_like(z), jnp.zeros_like(z)))[1]


def _dilog_negative_unit(z):
    """``Li2(z)`` for ``-1 <= z <= 0``: the series, after Landen's identity
    ``Li2(z) = -Li2(z / (z - 1)) - log(1 - z)**2 / 2`` below -1/2."""
    landen = z < -0.5
    w = jnp.where(landen, z / (z - 1.0), z).astype(z.dtype)
    series = _dilog_small(w)
    log1m = jnp.log1p(-z)
    return jnp.where(landen, -series - 0.5 * log1m * log1m, series)


def _dilog_at_most_one(z):
    """``Li2(z)`` for ``z <= 1``, reduced to ``|w| <= 1/2`` by reflection (``z > 1/2``),
    Landen's identity (``-1 <= z < -1/2``) and inversion (``z < -1``)."""
    high = z > 0.5
    below = z < -1.0
    # reflection: Li2(z) = pi**2/6 - log z log(1 - z) - Li2(1 - z)
    zh = jnp.where(high, z, 0.75).astype(z.dtype)
    one_minus = 1.0 - zh
    safe_one_minus = jnp.where(one_minus > 0, one_minus, 1.0).astype(z.dtype)
    log_product = jnp.where(one_minus > 0, jnp.log(zh) * jnp.log(safe_one_minus), 0.0)
    reflected = _PI2_6 - log_product - _dilog_small(one_minus)
    # inversion: Li2(z) = -pi**2/6 - log(-z)**2 / 2 - Li2(1/z)
    zb = jnp.where(below, z, -2.0).astype(z.dtype)
    log_neg = jnp.log(-zb)
    inverted = -_PI2_6 - 0.5 * log_neg * log_neg - _dilog_negative_unit(1.0 / zb)
    zm = jnp.where(high | below, 0.0, z).astype(z.dtype)
    middle = jnp.where(zm < 0, _dilog_negative_unit(jnp.minimum(zm, 0.0)), _dilog_small(zm))
    return jnp.where(high, reflected, jnp.where(below, inverted, middle))


@custom_jvp
def spence(x):
    """Spence's function ``integral_1^x log(t) / (1 - t) dt = Li2(1 - x)`` (SciPy's
    convention) for ``x >= 0``; NaN for ``x < 0``.

        >>> spence(jnp.float32(1.0))
        Array(0., dtype=float32)
    """
    (x,) = promote_args_inexact("spence", x)
    finite = (x >= 0) & (x < np.inf)
    safe_x = jnp.where(finite, x, 1.0).astype(x.dtype)
    value = _dilog_at_most_one(1.0 - safe_x)
    # no value at x = inf, as SciPy and jax.scipy.special
    return jnp.where((x < 0) | ~finite, np.nan, value).astype(x.dtype)


@spence.defjvp
def _spence_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    # d/dx Li2(1 - x) = log(x) / (1 - x), whose limit at x = 1 is -1
    near_one = x == 1.0
    safe_x = jnp.where(near_one, 2.0, x)
    slope = jnp.where(near_one, -1.0, jnp.log(safe_x) / (1.0 - safe_x))
    return spence(x), slope * x_dot


# =============================================================================================
# Sine/cosine and Fresnel integrals: power series near 0, complex continued fractions beyond
# =============================================================================================
# The continued fractions are complex; they run on (real, imaginary) pairs of real arrays so
# that they need nothing beyond real elementwise operations.

_CF_STEPS = 100


def _complex_mul(p, q):
    return p[0] * q[0] - p[1] * q[1], p[0] * q[1] + p[1] * q[0]


def _complex_reciprocal(p, tiny):
    norm = p[0] * p[0] + p[1] * p[1]
    norm = jnp.where(norm < tiny, tiny, norm)
    return p[0] / norm, -p[1] / norm


def _complex_lentz(b0, step_a, step_b, tiny):
    """The value ``h`` of ``1/(b0 + a_1/(b_1 + a_2/(b_2 + ...)))`` with real partial
    numerators ``a_k = step_a(k)`` and complex ``b_k = b_{k-1} + step_b`` (modified Lentz,
    a fixed number of levels)."""
    zero = jnp.zeros_like(b0[0])
    d = _complex_reciprocal(b0, tiny)

    def body(i, state):
        b, c, d, h = state
        a = step_a(i + 1)
        b = (b[0] + step_b[0], b[1] + step_b[1])
        d = _complex_reciprocal((a * d[0] + b[0], a * d[1] + b[1]), tiny)
        c_inv = _complex_reciprocal(c, tiny)
        c = (b[0] + a * c_inv[0], b[1] + a * c_inv[1])
        h = _complex_mul(h, _complex_mul(c, d))
        return b, c, d, h

    init = (b0, (jnp.full_like(zero, 1.0 / tiny), zero), d, d)
    return lax.fori_loop(0, _CF_STEPS, body, init)[3]


def _tiny(x) -> float:
    return float(_dtypes.finfo(get_aval(x).dtype).tiny) / _eps(x)


_SICI_SWITCH = 2.0
_SICI_SERIES_STEPS = 30


def _sici_nonnegative(t):
    """``(Si(t), Ci(t))`` for ``0 < t < inf``."""
    use_series = t <= _SICI_SWITCH
    ts = jnp.where(use_series, t, 1.0).astype(t.dtype)
    tf = jnp.where(use_series, 2.0 * _SICI_SWITCH, t).astype(t.dtype)

    # series: Si = sum_k (-1)**k t**(2k+1) / ((2k+1) (2k+1)!),
    #         Ci = gamma + log t + sum_{k>=1} (-1)**k t**(2k) / (2k (2k)!)
    def series_body(i, state):
        # power = (-1)**floor(j/2) t**j / j!, entering at j = 2i + 1; the sign flips on
        # each step to an even power
        power, si, ci = state
        j = (2 * i + 2).astype(t.dtype)
        power = -power * ts / j
        ci = ci + power / j
        power = power * ts / (j + 1.0)
        si = si + power / (j + 1.0)
        return power, si, ci

    _, si_s, ci_s = lax.fori_loop(0, _SICI_SERIES_STEPS, series_body,
                                  (ts, ts, jnp.zeros_like(t)))
    ci_s = _EULER_GAMMA + jnp.log(ts) + ci_s

    # continued fraction for E1(i t): b_0 = 1 + i t, a_k = -k**2, b_k = b_{k-1} + 2
    h = _complex_lentz((jnp.ones_like(t), tf), lambda k: -(k.astype(t.dtype) ** 2),
                       (2.0, 0.0), _tiny(t))
    h = _complex_mul((jnp.cos(tf), -jnp.sin(tf)), h)
    si_f = 0.5 * math.pi + h[1]
    ci_f = -h[0]
    return jnp.where(use_series, si_s, si_f), jnp.where(use_series, ci_s, ci_f)


@custom_jvp
def sici(x):
    """The sine and cosine integrals ``(Si(x), Ci(x))``: ``Si(x) = integral_0^x sin t / t dt``
    (odd) and ``Ci(x) = gamma + log|x| + integral_0^|x| (cos t - 1) / t dt`` (even; ``-inf``
    at 0, NaN at ``-inf``).

        >>> sici(jnp.float32(1.0))
        (Array(0.946083..., dtype=float32), Array(0.337403..., dtype=float32))
    """
    (x,) = promote_args_inexact("sici", x)
    t = jnp.abs(x)
    inside = (t > 0) & (t < np.inf)
    si, ci = _sici_nonnegative(jnp.where(inside, t, 1.0).astype(x.dtype))
    si = jnp.where(t == np.inf, 0.5 * math.pi, jnp.where(t == 0, 0.0, si))
    ci = jnp.where(x == np.inf, 0.0, jnp.where(t == 0, -np.inf, ci))
    ci = jnp.where((x == -np.inf) | jnp.isnan(x), np.nan, ci)
    return (jnp.sign(x) * si).astype(x.dtype), ci.astype(x.dtype)


@sici.defjvp
def _sici_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    si, ci = sici(x)
    # Si'(x) = sin(x) / x (1 at 0), Ci'(x) = cos(x) / x
    nonzero = x != 0
    safe_x = jnp.where(nonzero, x, 1.0)
    d_si = jnp.where(nonzero, jnp.sin(safe_x) / safe_x, 1.0)
    d_ci = jnp.where(nonzero, jnp.cos(safe_x) / safe_x, np.inf)
    return (si, ci), (d_si * x_dot, d_ci * x_dot)


_FRESNEL_SWITCH = 1.5
_FRESNEL_SERIES_STEPS = 20


def _fresnel_nonnegative(t):
    """``(S(t), C(t))`` for ``0 <= t < inf``."""
    use_series = t < _FRESNEL_SWITCH
    ts = jnp.where(use_series, t, 0.0).astype(t.dtype)
    tf = jnp.where(use_series, 2.0 * _FRESNEL_SWITCH, t).astype(t.dtype)
    half_pi = 0.5 * math.pi

    # series in u = pi t**2 / 2: C = t sum_k (-1)**k u**(2k) / ((2k)! (4k+1)),
    #                            S = t sum_k (-1)**k u**(2k+1) / ((2k+1)! (4k+3))
    u = half_pi * ts * ts

    def series_body(i, state):
        power, s_sum, c_sum = state             # power = (-1)**k u**(2k) / (2k)!
        k = i.astype(t.dtype)
        c_sum = c_sum + power / (4.0 * k + 1.0)
        odd = power * u / (2.0 * k + 1.0)
        s_sum = s_sum + odd / (4.0 * k + 3.0)
        power = -odd * u / (2.0 * k + 2.0)
        return power, s_sum, c_sum

    _, s_sum, c_sum = lax.fori_loop(0, _FRESNEL_SERIES_STEPS, series_body,
                                    (jnp.ones_like(t), jnp.zeros_like(t), jnp.zeros_like(t)))
    s_series, c_series = ts * s_sum, ts * c_sum

    # continued fraction of erfc at (1 - i) sqrt(pi)/2 t: b_0 = 1 - i pi t**2,
    # a_k = -(2k - 1)(2k), b_k = b_{k-1} + 4
    h = _complex_lentz((jnp.ones_like(t), -math.pi * tf * tf),
                       lambda k: -(2.0 * k.astype(t.dtype) - 1.0) * (2.0 * k.astype(t.dtype)),
                       (4.0, 0.0), _tiny(t))
    h = _complex_mul((tf, -tf), h)
    phase = half_pi * tf * tf
    rotated = _complex_mul((jnp.cos(phase), jnp.sin(phase)), h)
    cs = _complex_mul((0.5, 0.5), (1.0 - rotated[0], -rotated[1]))
    return jnp.where(use_series, s_series, cs[1]), jnp.where(use_series, c_series, cs[0])


@custom_jvp
def fresnel(x):
    """The Fresnel integrals ``(S(x), C(x))`` with ``S(x) = integral_0^x sin(pi t**2 / 2) dt``
    and ``C(x) = integral_0^x cos(pi t**2 / 2) dt`` (both odd; ``+-1/2`` at ``+-inf``).

        >>> fresnel(jnp.float32(1.0))
        (Array(0.438259..., dtype=float32), Array(0.779893..., dtype=float32))
    """
    (x,) = promote_args_inexact("fresnel", x)
    t = jnp.abs(x)
    finite = t < np.inf
    s_value, c_value = _fresnel_nonnegative(jnp.where(finite, t, 0.0).astype(x.dtype))
    s_value = jnp.where(finite, s_value, 0.5)
    c_value = jnp.where(finite, c_value, 0.5)
    sign = jnp.sign(x)
    return (sign * s_value).astype(x.dtype), (sign * c_value).astype(x.dtype)


@fresnel.defjvp
def _fresnel_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    phase = 0.5 * math.pi * x * x
    return fresnel(x), (jnp.sin(phase) * x_dot, jnp.cos(phase) * x_dot)
