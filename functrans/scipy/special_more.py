"""More special functions of ``jax.scipy.special``:

* the gamma-function relatives :func:`beta`, :func:`comb`, :func:`poch`, :func:`loggamma`,
  :func:`gammasgn`, and the Box-Cox transforms :func:`boxcox`, :func:`boxcox1p`;
* error-function relatives: :func:`erfcx`, Dawson's integral :func:`dawsn`, the Faddeeva
  function :func:`wofz`, Owen's T function :func:`owens_t`;
* integrals: :func:`exp1`, :func:`expi`, :func:`expn`, :func:`sici`, :func:`fresnel`, and the
  dilogarithm :func:`spence`;
* series: :func:`zeta` (Hurwitz), :func:`hyp1f1`, :func:`hyp2f1`, :func:`bernoulli`;
* :func:`bessel_jn` (first kind, integer orders) and :func:`sph_harm_y`.

Everything is a composition of ``functrans.numpy``/``functrans.lax`` operations (series and
continued fractions run as ``lax.fori_loop``/``lax.while_loop``), so the functions run under
``jit`` and ``vmap``. Functions with a closed-form derivative carry it as a custom derivative
rule (the ``while_loop`` ones need it: reverse mode cannot go through a ``while_loop``); the
others are differentiated through their fixed-length loops.

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.special_more import comb
    >>> comb(jnp.float32(5.0), jnp.float32(2.0))
    Array(10..., dtype=float32)
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from functrans import _dtypes, lax
from functrans import numpy as jnp
from functrans._custom_derivatives import custom_jvp
from functrans.core import get_aval
from functrans.numpy._promotion import concrete_or_error, promote_args_inexact

__all__ = [
    "beta", "comb", "poch", "loggamma", "gammasgn", "boxcox", "boxcox1p", "erfcx", "exp1",
    "expi", "expn", "zeta", "hyp1f1", "hyp2f1", "bernoulli", "dawsn", "spence", "sici",
    "fresnel", "bessel_jn", "owens_t", "wofz", "sph_harm_y",
]

_EULER_GAMMA = 0.5772156649015329
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)


def _eps(x) -> float:
    return float(_dtypes.finfo(get_aval(x).dtype).eps)


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


# =============================================================================================
# Box-Cox transforms
# =============================================================================================

def _boxcox_of_log(log_x, lmbda):
    """``(exp(lmbda log_x) - 1) / lmbda``, and its limit ``log_x`` at ``lmbda == 0``."""
    nonzero = lmbda != 0
    safe_lmbda = jnp.where(nonzero, lmbda, 1.0).astype(lmbda.dtype)
    # expm1 keeps accuracy for small lmbda * log_x, where x**lmbda - 1 would cancel
    return jnp.where(nonzero, jnp.expm1(safe_lmbda * log_x) / safe_lmbda, log_x)


def boxcox(x, lmbda):
    """The Box-Cox transform ``(x**lmbda - 1) / lmbda``, ``log(x)`` for ``lmbda == 0``;
    NaN for ``x < 0``.

        >>> boxcox(jnp.float32(4.0), jnp.float32(0.5))
        Array(2., dtype=float32)
    """
    x, lmbda = promote_args_inexact("boxcox", x, lmbda)
    return _boxcox_of_log(jnp.log(x), lmbda)


def boxcox1p(x, lmbda):
    """The Box-Cox transform of ``1 + x``, accurate for small ``x``; NaN for ``x < -1``.

        >>> boxcox1p(jnp.float32(3.0), jnp.float32(0.5))
        Array(2., dtype=float32)
    """
    x, lmbda = promote_args_inexact("boxcox1p", x, lmbda)
    return _boxcox_of_log(jnp.log1p(x), lmbda)


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


# =============================================================================================
# Zeta, hypergeometric, Bernoulli numbers
# =============================================================================================

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


_HYPERGEOMETRIC_MAX_STEPS = 5000


def _hypergeometric_series(upper, lower, x):
    """The generalized hypergeometric series ``sum_k t_k`` with
    ``t_{k+1} = t_k r_k``, ``r_k = prod_i (upper_i + k) / prod_j (lower_j + k) x / (k + 1)``,
    and its partial derivatives in every parameter and in ``x``, summed until every series'
    terms stop mattering. Returns ``(F, [dF/d upper_i], [dF/d lower_j], dF/dx)``.

    The derivatives ride along in forward mode (``dt_{k+1} = dt_k r_k + t_k dr_k``). They
    come out as plain values, so derivative rules built on them are linear in the tangents
    (and transpose for reverse mode)."""
    eps = _eps(x)
    n_up, n_low = len(upper), len(lower)

    def cond(state):
        k, done = state[0], state[1]
        return lax.reduce_or(jnp.ravel(~done), (0,)) & (k < _HYPERGEOMETRIC_MAX_STEPS)

    def body(state):
        k, done, terms, totals = state
        kf = k.astype(x.dtype)
        ups = [p + kf for p in upper]
        lows = [q + kf for q in lower]
        k1 = kf + 1.0
        up_product = functools.reduce(lambda u, v: u * v, ups, jnp.ones_like(x))
        low_product = functools.reduce(lambda u, v: u * v, lows, jnp.ones_like(x))
        r_x = up_product / (low_product * k1)
        r = r_x * x
        r_partials = []
        for i in range(n_up):
            # the product without factor i, not r / (upper_i + k), which is 0/0 at its zero
            others = functools.reduce(lambda u, v: u * v,
                                      [u for j, u in enumerate(ups) if j != i], jnp.ones_like(x))
            r_partials.append(others / (low_product * k1) * x)
        for low in lows:
            r_partials.append(-r / low)
        r_partials.append(r_x)
        t, partials = terms[0], terms[1:]
        new_terms = (t * r,) + tuple(dt * r + t * dr for dt, dr in zip(partials, r_partials))
        new_totals = tuple(jnp.where(done, old, old + term)
                           for old, term in zip(totals, new_terms))
        converged = jnp.ones_like(done)
        for term, total in zip(new_terms, new_totals):
            converged = converged & ((jnp.abs(term) <= eps * jnp.abs(total)) | (term == 0))
        return k + 1, done | converged, new_terms, new_totals

    one, zero = jnp.ones_like(x), jnp.zeros_like(x)
    start = (one,) + (zero,) * (n_up + n_low + 1)
    init = (jnp.array(0, _dtypes.int32), jnp.zeros(get_aval(x).shape, bool), start, start)
    totals = lax.while_loop(cond, body, init)[-1]
    return (totals[0], list(totals[1:1 + n_up]), list(totals[1 + n_up:1 + n_up + n_low]),
            totals[-1])


def _hyp1f1_with_partials(a, b, x):
    """``(F, dF/da, dF/db, dF/dx)`` of ``1F1(a; b; x)``."""
    # Kummer's transformation 1F1(a; b; x) = e**x 1F1(b - a; b; -x) turns x < 0, where the
    # series alternates and cancels, into a series whose terms end up of one sign. A
    # polynomial (a a non-positive integer) keeps its own few terms.
    polynomial = (a <= 0) & (jnp.floor(a) == a)
    kummer = (x < 0) & ~polynomial
    g, (g_1,), (g_2,), g_3 = _hypergeometric_series(
        [jnp.where(kummer, b - a, a)], [b], jnp.where(kummer, -x, x))
    scale = jnp.where(kummer, jnp.exp(x), 1.0)
    value = scale * g
    d_a = scale * jnp.where(kummer, -g_1, g_1)
    d_b = scale * jnp.where(kummer, g_1 + g_2, g_2)
    d_x = scale * jnp.where(kummer, g - g_3, g_3)
    # b a non-positive integer is a pole, unless the polynomial ends before reaching it;
    # a == 0 gives 1 everywhere (as jax.scipy.special)
    pole = (b <= 0) & (jnp.floor(b) == b) & ~(polynomial & (a > b))
    value = jnp.where(a == 0, 1.0, jnp.where(pole, np.inf, value)).astype(x.dtype)
    return value, d_a, d_b, d_x


@custom_jvp
def hyp1f1(a, b, x):
    """Kummer's confluent hypergeometric function
    ``1F1(a; b; x) = sum_k (a)_k / (b)_k x**k / k!``; differentiable in all three arguments.

        >>> hyp1f1(jnp.float32(1.0), jnp.float32(1.0), jnp.float32(1.0))     # e
        Array(2.71828..., dtype=float32)
    """
    a, b, x = promote_args_inexact("hyp1f1", a, b, x)
    return _hyp1f1_with_partials(a, b, x)[0]


@hyp1f1.defjvp
def _hyp1f1_jvp(primals, tangents):
    a, b, x = promote_args_inexact("hyp1f1", *primals)
    a_dot, b_dot, x_dot = tangents
    value, d_a, d_b, d_x = _hyp1f1_with_partials(a, b, x)
    return value, d_a * a_dot + d_b * b_dot + d_x * x_dot


def _is_non_positive_integer(v):
    return (v <= 0) & (jnp.floor(v) == v)


def _hyp2f1_with_partials(a, b, c, x):
    """``(F, dF/da, dF/db, dF/dc, dF/dx)`` of ``2F1(a, b; c; x)`` for ``x < 1``."""
    polynomial = _is_non_positive_integer(a) | _is_non_positive_integer(b)
    # Pfaff's transformation 2F1(a, b; c; x) = (1-x)**-a 2F1(a, c-b; c; x/(x-1)) maps x < 0
    # into (0, 1), where the terms end up of one sign; a polynomial keeps its own few terms
    pfaff = (x < 0) & ~polynomial
    one_minus = 1.0 - x
    z = jnp.where(pfaff, x / (x - 1.0), x)
    g, (g_1, g_2), (g_3,), g_4 = _hypergeometric_series(
        [a, jnp.where(pfaff, c - b, b)], [c], z)
    scale = jnp.where(pfaff, jnp.exp(-a * jnp.log(one_minus)), 1.0)
    value = scale * g
    d_a = scale * jnp.where(pfaff, g_1 - jnp.log(one_minus) * g, g_1)
    d_b = scale * jnp.where(pfaff, -g_2, g_2)
    d_c = scale * jnp.where(pfaff, g_2 + g_3, g_3)
    # d/dx [(1-x)**-a G(z)] = a (1-x)**(-a-1) G - (1-x)**(-a-2) G'(z), as dz/dx = -1/(1-x)**2
    d_x = jnp.where(pfaff, scale * (a * g - g_4 / one_minus) / one_minus, g_4)
    return value, d_a, d_b, d_c, d_x


def _hyp2f1(a, b, c, x):
    """``2F1`` and its partials with the edges: Gauss's sum at ``x = 1``, NaN beyond, and the
    poles of ``c``."""
    # a polynomial (a or b a non-positive integer) is defined for every x
    polynomial = _is_non_positive_integer(a) | _is_non_positive_integer(b)
    below_one = (x < 1) | polynomial
    safe_x = jnp.where(below_one, x, 0.0).astype(x.dtype)
    value, *partials = _hyp2f1_with_partials(a, b, c, safe_x)
    # x = 1: Gamma(c) Gamma(c-a-b) / (Gamma(c-a) Gamma(c-b)) where c - a - b > 0, else inf
    excess = c - a - b
    safe_excess = jnp.where(excess > 0, excess, 1.0).astype(x.dtype)
    gauss = (gammasgn(c) * gammasgn(safe_excess) * gammasgn(c - a) * gammasgn(c - b)
             * jnp.exp(lax.lgamma(c) + lax.lgamma(safe_excess)
                       - lax.lgamma(c - a) - lax.lgamma(c - b)))
    at_one = jnp.where(excess > 0, gauss, np.inf)
    value = jnp.where(polynomial, value,
                      jnp.where(x == 1, at_one, jnp.where(x > 1, np.nan, value)))
    partials = [jnp.where(below_one, p, np.nan) for p in partials]
    # c a non-positive integer is a pole, unless a polynomial ends before reaching it
    ends_first = ((_is_non_positive_integer(a) & (a > c))
                  | (_is_non_positive_integer(b) & (b > c)))
    pole = _is_non_positive_integer(c) & ~ends_first
    value = jnp.where(pole, np.inf, value)
    value = jnp.where((a == 0) | (b == 0), 1.0, value).astype(x.dtype)
    return value, partials


@custom_jvp
def hyp2f1(a, b, c, x):
    """The Gauss hypergeometric function
    ``2F1(a, b; c; x) = sum_k (a)_k (b)_k / (c)_k x**k / k!`` for real ``x <= 1`` (NaN above
    1, where the real function has a branch cut, unless ``a`` or ``b`` is a non-positive
    integer and the series is a polynomial); differentiable in all four arguments.

    Negative ``x`` goes through Pfaff's transformation, so the sum converges for every
    ``x < 1``, more slowly as ``x / (x - 1)`` nears 1 (``x`` far below 0 or close to 1).

        >>> hyp2f1(jnp.float32(1.0), jnp.float32(1.0), jnp.float32(2.0), jnp.float32(0.5))
        Array(1.386294..., dtype=float32)
    """
    a, b, c, x = promote_args_inexact("hyp2f1", a, b, c, x)
    return _hyp2f1(a, b, c, x)[0]


@hyp2f1.defjvp
def _hyp2f1_jvp(primals, tangents):
    a, b, c, x = promote_args_inexact("hyp2f1", *primals)
    value, partials = _hyp2f1(a, b, c, x)
    tangent = sum(p * t for p, t in zip(partials, tangents))
    return value, tangent


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


# =============================================================================================
# Dawson's integral and the dilogarithm
# =============================================================================================

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


@fresnel.defjvp
def _fresnel_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    phase = 0.5 * math.pi * x * x
    return fresnel(x), (jnp.sin(phase) * x_dot, jnp.cos(phase) * x_dot)


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
    # deferred: scipy.special -> scipy.special_more at import
    from functrans.scipy.special import ndtr
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
