"""The confluent and Gauss hypergeometric functions :func:`hyp1f1` and :func:`hyp2f1`,
summed as series (with the transformations that keep them convergent) and differentiated
in every argument through custom derivative rules.

    >>> import functrans.numpy as jnp
    >>> hyp1f1(jnp.float32(1.0), jnp.float32(1.0), jnp.float32(0.0))
    Array(1., dtype=float32)
"""
from __future__ import annotations

import functools

import numpy as np

from functrans import _dtypes
from functrans import lax
from functrans import numpy as jnp
from functrans._custom_derivatives import custom_jvp
from functrans.core import get_aval
from functrans.numpy._promotion import promote_args_inexact
from functrans.scipy._special import _eps
from functrans.scipy._special.gamma_functions import gammasgn

__all__ = ["hyp1f1", "hyp2f1"]


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
