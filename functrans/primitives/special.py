"""Special functions of ``jax.lax`` as primitives: the regularized incomplete gamma functions
(``igamma``, ``igammac``), their derivative in ``a`` (``igamma_grad_a``), the derivative of
a standard-gamma sample in its shape (``random_gamma_grad``), the regularized incomplete beta
function (``betainc``), the Hurwitz zeta function (``zeta``) and the exponentially scaled
modified Bessel functions of order 0 and 1 (``bessel_i0e``, ``bessel_i1e``).

Each is an elementwise primitive over operands of one shape and floating dtype. The reference
implementations use SciPy (already a dependency), except ``igamma_grad_a`` and
``random_gamma_grad``, which SciPy lacks: they run the series / continued fraction of ``P(a, x)``
in NumPy carrying the derivative in ``a`` along (forward mode by hand). Half-precision inputs
are computed in float32 and rounded back.

Derivatives follow ``jax.lax``: ``igamma``/``igammac`` in both arguments, ``betainc`` only in
``x``, the Bessel functions in ``x``; ``igamma_grad_a``, ``random_gamma_grad`` and ``zeta`` have
none. Edge values (``a <= 0``, ``x < 0``, infinities, NaN) match ``jax.lax`` on CPU.

The lax-level functions take arrays of one dtype; rank-0 or size-1 axes broadcast against the
others (as in ``jax.lax``). Here Python scalars take the arrays' dtype, for the library's own
use; ``functrans.lax`` exports ``LAX_FUNCTIONS_WITHOUT_PROMOTION`` instead, which promote
nothing, as ``jax.lax``.
"""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans.core import Primitive, ShapedArray, get_aval
from functrans.interpreters import ad, batching
from functrans.primitives import elementwise as ew
from functrans.primitives.elementwise import broadcast_operands, elementwise_operands

# =============================================================================================
# Reference implementations
# =============================================================================================


def _scipy(name):
    import scipy.special
    return getattr(scipy.special, name)


def _in_f32_or_wider(fn):
    """Evaluate half-precision inputs in float32 (SciPy has no bfloat16 kernels)."""
    def impl(*xs, **params):
        dtype = xs[0].dtype
        if dtype.itemsize < 4:
            xs = [x.astype(np.float32) for x in xs]
        with np.errstate(all="ignore"):
            out = fn(*xs, **params)
        return np.asarray(out).astype(dtype)
    return impl


def _igamma_impl(a, x, upper=False):
    out = _scipy("gammaincc" if upper else "gammainc")(a, x)
    # jax.lax gives NaN for an infinite shape parameter (SciPy: the limit)
    return np.where(np.isinf(a), np.nan, out)


def _gamma_derivative_terms(a, x):
    """For ``a > 0, 0 < x < inf`` (float64): ``(use_series, bracket)`` such that

    * where ``use_series``: ``dP/da = exp(a log x - x - lgamma(a)) * bracket / a`` with
      ``bracket = dS + S (log x - digamma(a + 1))`` from the series
      ``P = x**a e**-x / Gamma(a + 1) * S``, ``S = sum_n x**n / ((a+1)...(a+n))``;
    * elsewhere: ``dP/da = -exp(a log x - x - lgamma(a)) * bracket`` with
      ``bracket = dF + F (log x - digamma(a))`` from ``Q = x**a e**-x / Gamma(a) * F``, ``F``
      the continued fraction (modified Lentz) in which each step also carries its derivative.

    Keeping the common factor ``x**a e**-x / Gamma(a)`` out lets ``random_gamma_grad`` divide
    it away exactly instead of dividing two underflowing numbers.
    """
    digamma = _scipy("digamma")
    eps = np.finfo(np.float64).eps
    tiny = 1e-300
    log_x = np.log(x)
    use_series = (x < 1) | (x < a)
    bracket = np.empty_like(a)

    # ---- series: t_n = t_{n-1} x / (a + n), dt_n/da = dt_{n-1} x/(a+n) - t_n/(a+n)
    sa, sx = a[use_series], x[use_series]
    term, dterm = np.ones_like(sa), np.zeros_like(sa)
    total, dtotal = term.copy(), dterm.copy()
    active = np.ones(sa.shape, bool)
    n = 0
    while active.any() and n < 20000:
        n += 1
        r = sx / (sa + n)
        dterm = np.where(active, dterm * r - term * r / (sa + n), dterm)
        term = np.where(active, term * r, term)
        total = np.where(active, total + term, total)
        dtotal = np.where(active, dtotal + dterm, dtotal)
        active &= ~((np.abs(term) <= eps * np.abs(total)) & (np.abs(dterm) <= eps * np.abs(dtotal)))
    bracket[use_series] = dtotal + total * (np.log(sx) - digamma(sa + 1))

    # ---- continued fraction for Q, differentiated step by step
    fa, fx = a[~use_series], x[~use_series]
    b = fx + 1 - fa
    db = -np.ones_like(fa)
    d = 1 / b
    dd = 1 / (b * b)
    c, dc = np.full_like(fa, 1 / tiny), np.zeros_like(fa)
    h, dh = d.copy(), dd.copy()
    active = np.ones(fa.shape, bool)
    n = 0
    while active.any() and n < 20000:
        n += 1
        an, dan = -n * (n - fa), float(n)
        b = b + 2
        big_d = an * d + b
        dbig_d = dan * d + an * dd + db
        small = np.abs(big_d) < tiny
        big_d, dbig_d = np.where(small, tiny, big_d), np.where(small, 0.0, dbig_d)
        big_c = b + an / c
        dbig_c = db + dan / c - an * dc / (c * c)
        small = np.abs(big_c) < tiny
        big_c, dbig_c = np.where(small, tiny, big_c), np.where(small, 0.0, dbig_c)
        new_d, new_dd = 1 / big_d, -dbig_d / (big_d * big_d)
        delta = big_c * new_d
        ddelta = dbig_c * new_d + big_c * new_dd
        new_h, new_dh = h * delta, dh * delta + h * ddelta
        keep = lambda new, old: np.where(active, new, old)  # noqa: E731
        d, dd, c, dc = keep(new_d, d), keep(new_dd, dd), keep(big_c, c), keep(dbig_c, dc)
        converged = (np.abs(delta - 1) <= eps) & (np.abs(new_dh - dh) <= eps * np.abs(new_dh))
        h, dh = keep(new_h, h), keep(new_dh, dh)
        active &= ~converged
    bracket[~use_series] = dh + h * (np.log(fx) - digamma(fa))
    return use_series, bracket, log_x


def _gamma_grad_common(a, x, want):
    """``igamma_grad_a`` (``want="igamma"``) or ``random_gamma_grad`` (``want="sample"``)
    elementwise in float64, with jax.lax's edge values."""
    gammaln = _scipy("gammaln")
    a64, x64 = np.asarray(a, np.float64), np.asarray(x, np.float64)
    out = np.full(np.broadcast(a64, x64).shape, np.nan)
    a64, x64 = np.broadcast_to(a64, out.shape), np.broadcast_to(x64, out.shape)
    inside = (a64 > 0) & (x64 > 0) & np.isfinite(a64) & np.isfinite(x64)
    out[(x64 == 0) & (a64 > 0) & np.isfinite(a64)] = 0.0
    if inside.any():
        ai, xi = a64[inside], x64[inside]
        use_series, bracket, log_x = _gamma_derivative_terms(ai, xi)
        if want == "igamma":
            factor = np.exp(ai * log_x - xi - gammaln(ai))
            out[inside] = np.where(use_series, factor * bracket / ai, -factor * bracket)
        else:
            # dx/da at fixed P(a, x) = -(dP/da) / (dP/dx), dP/dx = factor / x
            out[inside] = np.where(use_series, -xi * bracket / ai, xi * bracket)
    return out


def _igamma_grad_a_impl(a, x):
    return _gamma_grad_common(a, x, "igamma").astype(a.dtype)


def _random_gamma_grad_impl(a, x):
    return _gamma_grad_common(a, x, "sample").astype(a.dtype)


def _bessel_i0e_impl(x):
    return _scipy("i0e")(x)


def _bessel_i1e_impl(x):
    return _scipy("i1e")(x)


def _betainc_impl(a, b, x):
    return _scipy("betainc")(a, b, x)


def _zeta_impl(x, q):
    return _scipy("zeta")(x, q)


# =============================================================================================
# The primitives
# =============================================================================================


def _float_rule(name):
    def rule(*avals):
        ew._check_kind(name, "real_float", avals)
        ew._same_shapes_and_dtypes(name, avals)
        return ShapedArray(avals[0].shape, avals[0].dtype, all(a.weak_type for a in avals))
    return rule


def _special_primitive(name, impl, arity):
    p = Primitive(name)
    p.def_impl(_in_f32_or_wider(impl))
    p.def_abstract_eval(_float_rule(name))
    if arity == 1:
        batching.defvectorized(p)
    else:
        batching.broadcast_batcher(p)
    return p


igamma_p = _special_primitive("igamma", _igamma_impl, 2)
igammac_p = _special_primitive("igammac", lambda a, x: _igamma_impl(a, x, upper=True), 2)
igamma_grad_a_p = _special_primitive("igamma_grad_a", _igamma_grad_a_impl, 2)
random_gamma_grad_p = _special_primitive("random_gamma_grad", _random_gamma_grad_impl, 2)
regularized_incomplete_beta_p = _special_primitive("regularized_incomplete_beta",
                                                   _betainc_impl, 3)
zeta_p = _special_primitive("zeta", _zeta_impl, 2)
bessel_i0e_p = _special_primitive("bessel_i0e", _bessel_i0e_impl, 1)
bessel_i1e_p = _special_primitive("bessel_i1e", _bessel_i1e_impl, 1)

# ---- derivatives ------------------------------------------------------------------------------


def _gamma_density(a, x):
    """``dP(a, x)/dx = x**(a-1) e**-x / Gamma(a)``, computed in logs."""
    one = ew._const(a, 1)
    return ew.exp(ew.sub(ew.mul(ew.sub(a, one), ew.log(x)), ew.add(x, ew.lgamma(a))))


ad.defjvp(igamma_p,
          lambda g, a, x: ew.mul(g, igamma_grad_a_p.bind(a, x)),
          lambda g, a, x: ew.mul(g, _gamma_density(a, x)))
ad.defjvp(igammac_p,
          lambda g, a, x: ew.neg(ew.mul(g, igamma_grad_a_p.bind(a, x))),
          lambda g, a, x: ew.neg(ew.mul(g, _gamma_density(a, x))))


def _betainc_not_in_a_b(g, a, b, x):
    raise NotImplementedError("betainc: the derivative with respect to a and b is not "
                              "supported (as in jax.lax); only with respect to x")


def _betainc_dx(g, a, b, x):
    # x**(a-1) (1-x)**(b-1) / B(a, b), in logs
    one = ew._const(x, 1)
    log_beta = ew.sub(ew.add(ew.lgamma(a), ew.lgamma(b)), ew.lgamma(ew.add(a, b)))
    log_density = ew.sub(ew.add(ew.mul(ew.sub(b, one), ew.log1p(ew.neg(x))),
                                ew.mul(ew.sub(a, one), ew.log(x))), log_beta)
    return ew.mul(g, ew.exp(log_density))


ad.defjvp(regularized_incomplete_beta_p, _betainc_not_in_a_b, _betainc_not_in_a_b, _betainc_dx)

# d/dx i0e(x) = i1e(x) - sign(x) i0e(x)
ad.defjvp2(bessel_i0e_p,
           lambda g, ans, x: ew.mul(g, ew.sub(bessel_i1e_p.bind(x), ew.mul(ew.sign(x), ans))))


def _bessel_i1e_jvp(g, ans, x):
    # d/dx i1e(x) = i0e(x) - i1e(x) (sign(x) + 1/x); its limit at 0 is 1/2
    eps = float(_dtypes.finfo(get_aval(x).dtype).eps)
    not_tiny = ew.gt(ew.abs(x), ew._const(x, eps))
    safe_x = ew.select(not_tiny, x, ew._const(x, eps))
    slope = ew.sub(bessel_i0e_p.bind(safe_x),
                   ew.mul(ans, ew.add(ew.sign(safe_x), ew.div(ew._const(x, 1), safe_x))))
    return ew.mul(g, ew.select(not_tiny, slope, ew._const(x, 0.5)))


ad.defjvp2(bessel_i1e_p, _bessel_i1e_jvp)

# =============================================================================================
# lax-level functions
# =============================================================================================


def igamma(a, x):
    """The regularized lower incomplete gamma function
    ``P(a, x) = integral_0^x t**(a-1) e**-t dt / Gamma(a)``, elementwise.

        >>> igamma(1.0, jnp.array([0.0, 1.0]))
        Array([0.        , 0.63212055], dtype=float32)
    """
    return igamma_p.bind(*elementwise_operands("igamma", (a, x)))


def igammac(a, x):
    """The regularized upper incomplete gamma function ``Q(a, x) = 1 - P(a, x)``.

        >>> igammac(1.0, jnp.array([0.0, 1.0]))
        Array([1.        , 0.36787945], dtype=float32)
    """
    return igammac_p.bind(*elementwise_operands("igammac", (a, x)))


def igamma_grad_a(a, x):
    """``dP(a, x)/da``, the derivative of :func:`igamma` in its first argument.

        >>> igamma_grad_a(2.0, 3.0)
        Array(-0.19742543, dtype=float32, weak_type=True)
    """
    return igamma_grad_a_p.bind(*elementwise_operands("igamma_grad_a", (a, x)))


def random_gamma_grad(a, x):
    """The derivative ``dx/da`` of a standard-gamma sample ``x`` with shape ``a`` when its
    CDF level ``P(a, x)`` is held fixed (implicit reparameterization).

        >>> random_gamma_grad(2.0, 3.0)
        Array(1.3217986, dtype=float32, weak_type=True)
    """
    return random_gamma_grad_p.bind(*elementwise_operands("random_gamma_grad", (a, x)))


def betainc(a, b, x):
    """The regularized incomplete beta function
    ``I_x(a, b) = integral_0^x t**(a-1) (1-t)**(b-1) dt / B(a, b)``; differentiable in ``x``.

        >>> betainc(2.0, 1.0, 0.5)
        Array(0.25, dtype=float32, weak_type=True)
    """
    return regularized_incomplete_beta_p.bind(*elementwise_operands("betainc", (a, b, x)))


def zeta(x, q):
    """The Hurwitz zeta function ``sum_n (n + q)**-x`` (``x > 1``).

        >>> zeta(2.0, 1.0)      # pi**2 / 6
        Array(1.644934, dtype=float32, weak_type=True)
    """
    return zeta_p.bind(*elementwise_operands("zeta", (x, q)))


def bessel_i0e(x):
    """The exponentially scaled modified Bessel function of order 0, ``exp(-|x|) I0(x)``.

        >>> bessel_i0e(jnp.array([0.0, 1.0]))
        Array([1.       , 0.4657596], dtype=float32)
    """
    return bessel_i0e_p.bind(*elementwise_operands("bessel_i0e", (x,)))


def bessel_i1e(x):
    """The exponentially scaled modified Bessel function of order 1, ``exp(-|x|) I1(x)``.

        >>> bessel_i1e(jnp.array([0.0, 1.0]))
        Array([0.        , 0.20791042], dtype=float32)
    """
    return bessel_i1e_p.bind(*elementwise_operands("bessel_i1e", (x,)))


# ---- jax.lax's forms: no implicit promotion ------------------------------------------------
# The functions above let a Python scalar take the arrays' dtype, for the library's own use.
# jax.lax promotes nothing: a Python scalar keeps its own weak dtype, and the primitive's
# shape rule rejects an operand of another kind or dtype. These are what functrans.lax exports.

def _betainc_without_promotion(a, b, x):
    return regularized_incomplete_beta_p.bind(*broadcast_operands("betainc", (a, b, x)))


_betainc_without_promotion.__name__ = _betainc_without_promotion.__qualname__ = "betainc"
_betainc_without_promotion.__doc__ = betainc.__doc__

LAX_FUNCTIONS_WITHOUT_PROMOTION = {
    fn.__name__: ew.binary_fn_without_promotion(p, fn.__name__, fn.__doc__)
    for fn, p in ((igamma, igamma_p), (igammac, igammac_p), (igamma_grad_a, igamma_grad_a_p),
                  (random_gamma_grad, random_gamma_grad_p), (zeta, zeta_p))}
LAX_FUNCTIONS_WITHOUT_PROMOTION["betainc"] = _betainc_without_promotion


__all__ = ["bessel_i0e", "bessel_i1e", "betainc", "igamma", "igamma_grad_a", "igammac",
           "random_gamma_grad", "zeta"]

