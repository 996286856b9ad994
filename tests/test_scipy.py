"""functrans.scipy (special, stats, linalg) against SciPy: values at ordinary and edge
arguments in float32 and float64, numerical gradients, and jit/vmap against eager."""
from __future__ import annotations

import doctest
import types

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.special as ssp
import scipy.stats as sst

import functrans
import functrans.numpy as jnp
import functrans.scipy  # noqa: F401
from functrans.scipy import linalg as fla
from functrans.scipy import special as fsp
from functrans.scipy import stats as fst
from functrans.test_util import check_grads


def _close(actual, expected, rtol, atol=0.0):
    actual = np.asarray(actual)
    expected = np.asarray(expected, dtype=np.float64)
    np.testing.assert_allclose(actual.astype(np.float64), expected, rtol=rtol, atol=atol,
                               equal_nan=True)


@pytest.fixture(params=["float32", "float64"])
def dtype(request):
    """Run a test in float32, and in float64 with x64 mode on."""
    if request.param == "float64":
        from functrans.test_util import x64
        with x64():
            yield np.float64
    else:
        yield np.float32


def _tol(dtype, f32=2e-5, f64=1e-12):
    return f32 if dtype == np.float32 else f64


# =============================================================================================
# special: unary functions
# =============================================================================================

_INF = np.inf
UNARY = [
    # name, scipy reference, arguments (edges included), float32 rtol, float64 rtol
    ("erf", ssp.erf, [-_INF, -3.0, -0.5, 0.0, 1e-3, 0.7, 2.5, 6.0, _INF], 2e-6, 1e-14),
    ("erfc", ssp.erfc, [-_INF, -2.0, 0.0, 0.3, 2.0, 5.0, 9.0, _INF], 5e-5, 1e-12),
    ("erfinv", ssp.erfinv, [-1.0, -0.9, -0.2, 0.0, 0.3, 0.99, 1.0, 1.5], 5e-6, 1e-12),
    ("expit", ssp.expit, [-_INF, -100.0, -3.0, 0.0, 2.0, 40.0, _INF], 2e-6, 1e-14),
    ("logit", ssp.logit, [-0.5, 0.0, 1e-6, 0.1, 0.5, 0.9, 1.0, 2.0], 2e-5, 1e-12),
    ("gammaln", ssp.gammaln, [0.0, 1e-3, 0.5, 1.0, 2.0, 3.7, 30.0, 1e4, -1.5, _INF], 5e-6, 1e-12),
    ("digamma", ssp.digamma, [1e-3, 0.5, 1.0, 2.5, 10.0, 300.0, -1.5], 2e-5, 1e-11),
    ("gamma", ssp.gamma, [0.0, -0.0, 0.1, 1.0, 4.5, 20.0, -0.5, -1.5, -2.0, 200.0], 2e-5, 1e-12),
    ("entr", ssp.entr, [-1.0, 0.0, 1e-4, 0.5, 3.0, _INF], 2e-6, 1e-14),
    ("ndtr", ssp.ndtr, [-_INF, -30.0, -8.0, -1.0, 0.0, 0.5, 4.0, 9.0, _INF], 5e-5, 1e-12),
    ("log_ndtr", ssp.log_ndtr, [-_INF, -1e4, -60.0, -15.0, -9.0, -2.0, 0.0, 3.0, 10.0],
     2e-5, 1e-12),
    ("ndtri", ssp.ndtri, [-0.1, 0.0, 1e-30, 1e-8, 0.01, 0.07, 0.08, 0.3, 0.5, 0.7, 0.93, 0.99,
                          0.999, 1.0, 1.1], 5e-6, 1e-12),
    ("i0e", ssp.i0e, [-_INF, -50.0, -3.0, 0.0, 1e-3, 0.5, 5.0, 24.99, 25.0, 80.0, 1e4, _INF],
     3e-6, 1e-14),
    ("i1e", ssp.i1e, [-_INF, -50.0, -3.0, 0.0, 1e-3, 0.5, 5.0, 24.99, 25.0, 80.0, 1e4, _INF],
     3e-6, 1e-14),
    ("i0", ssp.i0, [-20.0, -3.0, 0.0, 0.5, 5.0, 30.0, 80.0], 3e-6, 1e-14),
    ("i1", ssp.i1, [-20.0, -3.0, 0.0, 0.5, 5.0, 30.0, 80.0], 3e-6, 1e-14),
]


@pytest.mark.parametrize("name, reference, args, rtol32, rtol64", UNARY,
                         ids=[row[0] for row in UNARY])
def test_unary_matches_scipy(dtype, name, reference, args, rtol32, rtol64):
    x = np.array(args, dtype=dtype)
    out = getattr(fsp, name)(jnp.array(x))
    assert out.dtype == dtype
    with np.errstate(all="ignore"):
        expected = reference(x.astype(np.float64))
    if dtype == np.float32:
        # the float32 result is the rounded float64 value; a tiny absolute slack covers
        # values that underflow
        expected = np.where(np.abs(expected) < 1e-37, 0.0, expected)
    _close(out, expected, rtol=rtol32 if dtype == np.float32 else rtol64,
           atol=1e-37 if dtype == np.float32 else 1e-300)


def test_factorial_polygamma_multigammaln(dtype):
    n = np.array([-1.0, 0.0, 1.0, 3.5, 10.0], dtype)
    _close(fsp.factorial(jnp.array(n)), ssp.factorial(n.astype(np.float64)), _tol(dtype))
    x = np.array([0.5, 1.0, 3.0, 20.0], dtype)
    for order in (0, 1, 2):
        _close(fsp.polygamma(order, jnp.array(x)), ssp.polygamma(order, x.astype(np.float64)),
               _tol(dtype, 5e-5, 1e-10))
    for d in (1, 3):
        _close(fsp.multigammaln(jnp.array(np.array([2.5, 7.0], dtype)), d),
               [ssp.multigammaln(v, d) for v in (2.5, 7.0)], _tol(dtype))
    with pytest.raises(NotImplementedError, match="exact"):
        fsp.factorial(3, exact=True)


# =============================================================================================
# special: binary functions
# =============================================================================================

BINARY = [
    ("xlogy", ssp.xlogy, [0.0, 0.0, 1.0, 2.5, -2.0, 3.0], [0.0, 2.0, 1.0, 0.5, 3.0, _INF],
     1e-6, 1e-14),
    ("xlog1py", ssp.xlog1py, [0.0, 0.0, 1.0, 2.5, -2.0], [-1.0, 2.0, 1e-8, 0.5, 3.0], 1e-6, 1e-14),
    ("rel_entr", ssp.rel_entr, [0.0, 0.0, 1.0, 2.0, -1.0, 1.0, 0.5], [0.0, -1.0, 0.0, 3.0, 1.0, 1.0, 2.0],
     2e-6, 1e-14),
    ("kl_div", ssp.kl_div, [0.0, 0.0, 1.0, 2.0, -1.0, 1.0, 0.5], [0.0, 2.0, 0.0, 3.0, 1.0, 1.0, 2.0],
     2e-6, 1e-14),
    ("betaln", ssp.betaln, [0.5, 1.0, 3.0, 10.0, 200.0], [0.5, 2.0, 4.5, 0.1, 300.0], 5e-5, 1e-11),
    ("gammainc", ssp.gammainc,
     [1.0, 0.0, 0.1, 0.5, 1.0, 3.0, 10.0, 100.0, 1000.0, 5.0, 2.0, 2.0, 1.0, 0.5, -1.0],
     [0.0, 1.0, 0.05, 2.0, 0.3, 3.5, 20.0, 90.0, 1010.0, 1e-3, _INF, 60.0, -1.0, 1e-20, 1.0],
     5e-4, 1e-11),
    ("gammaincc", ssp.gammaincc,
     [1.0, 0.0, 0.1, 0.5, 1.0, 3.0, 10.0, 100.0, 1000.0, 5.0, 2.0, 2.0, 1.0, 0.5, -1.0],
     [0.0, 1.0, 0.05, 2.0, 0.3, 3.5, 20.0, 90.0, 1010.0, 1e-3, _INF, 60.0, -1.0, 1e-20, 1.0],
     5e-4, 1e-11),  # float32: a log x - x near a = 1000 is only good to ~1e-4 absolute
]


@pytest.mark.parametrize("name, reference, xs, ys, rtol32, rtol64", BINARY,
                         ids=[row[0] for row in BINARY])
def test_binary_matches_scipy(dtype, name, reference, xs, ys, rtol32, rtol64):
    x, y = np.array(xs, dtype), np.array(ys, dtype)
    out = getattr(fsp, name)(jnp.array(x), jnp.array(y))
    assert out.dtype == dtype
    with np.errstate(all="ignore"):
        expected = reference(x.astype(np.float64), y.astype(np.float64))
    _close(out, expected, rtol=rtol32 if dtype == np.float32 else rtol64,
           atol=1e-30 if dtype == np.float32 else 1e-300)


def test_betainc_matches_scipy(dtype):
    a = np.array([0.5, 1.0, 2.0, 10.0, 50.0, 3.0, 3.0, 2.0, -1.0], dtype)
    b = np.array([0.5, 3.0, 2.0, 1.0, 60.0, 4.0, 4.0, 2.0, 1.0], dtype)
    x = np.array([0.1, 0.5, 0.9, 0.7, 0.45, 0.0, 1.0, 1.5, 0.5], dtype)
    out = fsp.betainc(jnp.array(a), jnp.array(b), jnp.array(x))
    expected = ssp.betainc(a.astype(np.float64), b.astype(np.float64), x.astype(np.float64))
    _close(out, expected, rtol=_tol(dtype, 1e-4, 1e-11))


def test_logsumexp_variants(dtype):
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 4)).astype(dtype) * 10
    b = rng.normal(size=(3, 4)).astype(dtype)
    rtol = _tol(dtype, 1e-5, 1e-12)
    _close(fsp.logsumexp(jnp.array(a)), ssp.logsumexp(a.astype(np.float64)), rtol)
    for axis in (0, 1, (0, 1), -1):
        for keepdims in (False, True):
            _close(fsp.logsumexp(jnp.array(a), axis=axis, keepdims=keepdims),
                   ssp.logsumexp(a.astype(np.float64), axis=axis, keepdims=keepdims), rtol)
    out, sign = fsp.logsumexp(jnp.array(a), axis=1, b=jnp.array(b), return_sign=True)
    ref_out, ref_sign = ssp.logsumexp(a.astype(np.float64), axis=1, b=b, return_sign=True)
    _close(out, ref_out, rtol)
    _close(sign, ref_sign, 0)
    # a negative sum without return_sign is NaN, as in SciPy
    assert np.isnan(np.asarray(fsp.logsumexp(jnp.array([0.0, 0.0]), b=jnp.array([1.0, -2.0]))))
    # b broadcasts against a
    _close(fsp.logsumexp(jnp.array(a), axis=0, b=jnp.array(np.abs(b[0]))),
           ssp.logsumexp(a.astype(np.float64), axis=0, b=np.abs(b[0])), rtol)
    # masked entries do not take part
    where = a > 0
    expected = ssp.logsumexp(np.where(where, a, -np.inf).astype(np.float64), axis=1)
    _close(fsp.logsumexp(jnp.array(a), axis=1, where=jnp.array(where)), expected, rtol)
    # large and all -inf inputs
    _close(fsp.logsumexp(jnp.array(np.array([1000.0, 1000.0], dtype))), 1000 + np.log(2), rtol)
    assert np.asarray(fsp.logsumexp(jnp.array(np.array([-np.inf, -np.inf], dtype)))) == -np.inf


def test_softmax_matches_scipy(dtype):
    x = np.random.default_rng(1).normal(size=(2, 3)).astype(dtype)
    for axis in (None, 0, 1):
        _close(fsp.softmax(jnp.array(x), axis=axis), ssp.softmax(x.astype(np.float64), axis=axis),
               _tol(dtype, 1e-5, 1e-13))
        _close(fsp.log_softmax(jnp.array(x), axis=axis),
               ssp.log_softmax(x.astype(np.float64), axis=axis), _tol(dtype, 1e-5, 1e-13))


# =============================================================================================
# special: gradients, jit, vmap
# =============================================================================================

GRAD_CASES = [
    ("erf", (0.3,)), ("erfc", (0.7,)), ("erfinv", (0.4,)), ("expit", (0.8,)),
    ("logit", (0.3,)), ("gammaln", (2.3,)), ("digamma", (1.7,)), ("gamma", (2.4,)),
    ("gamma", (-1.5,)), ("entr", (0.4,)), ("ndtr", (-1.2,)), ("log_ndtr", (-3.0,)),
    ("log_ndtr", (-25.0,)), ("log_ndtr", (2.0,)), ("ndtri", (0.02,)), ("ndtri", (0.6,)),
    ("i0e", (1.3,)), ("i0e", (-30.0,)), ("i1e", (2.0,)), ("i1e", (40.0,)), ("i0", (0.7,)),
    ("i1", (-1.1,)), ("xlogy", (0.7, 2.0)), ("xlog1py", (0.7, 0.5)), ("rel_entr", (0.5, 1.5)),
    ("kl_div", (0.5, 1.5)), ("betaln", (1.5, 2.5)), ("gammainc", (2.5, 1.5)),
    ("gammainc", (1.5, 4.0)), ("gammaincc", (3.0, 2.0)), ("gammaincc", (0.5, 3.0)),
    ("betainc", (2.0, 3.0, 0.3)), ("betainc", (1.5, 2.5, 0.8)),
]


@pytest.mark.parametrize("name, args", GRAD_CASES,
                         ids=[f"{n}{a}" for n, a in GRAD_CASES])
def test_special_grads(x64, name, args):
    args = tuple(np.float64(a) for a in args)
    check_grads(getattr(fsp, name), args, order=1, modes=("fwd", "rev"), atol=1e-5, rtol=1e-5)


def test_special_second_order_grads(x64):
    for f, args in [(fsp.ndtri, (0.3,)), (fsp.log_ndtr, (-2.0,)), (fsp.i0e, (1.5,)),
                    (fsp.xlogy, (0.5, 2.0)), (fsp.betainc, (2.0, 3.0, 0.4))]:
        check_grads(f, tuple(np.float64(a) for a in args), order=2, atol=1e-5, rtol=1e-5)


def test_xlogy_grad_at_zero():
    # the value convention 0 log 0 = 0 does not leak NaN into the x-derivative at y > 0
    assert np.isclose(float(functrans.grad(fsp.xlogy)(0.0, 2.0)), np.log(2.0))
    assert float(functrans.grad(fsp.xlogy, argnums=1)(0.0, 2.0)) == 0.0


JIT_VMAP_CASES = [
    ("erf", 1), ("logit", 1), ("gamma", 1), ("ndtri", 1), ("log_ndtr", 1), ("i0e", 1),
    ("i1e", 1), ("xlogy", 2), ("gammainc", 2), ("gammaincc", 2), ("betainc", 3),
]


@pytest.mark.parametrize("name, arity", JIT_VMAP_CASES, ids=[n for n, _ in JIT_VMAP_CASES])
def test_special_jit_and_vmap_equal_eager(name, arity):
    rng = np.random.default_rng(2)
    args = [rng.uniform(0.05, 0.95, size=(5,)).astype(np.float32) for _ in range(arity)]
    if name in ("gammainc", "gammaincc"):
        args = [a * 10 for a in args]
    if name in ("log_ndtr", "i0e", "i1e", "gamma"):
        args = [(a - 0.5) * 60 for a in args]
    f = getattr(fsp, name)
    eager = np.asarray(f(*map(jnp.array, args)))
    _close(functrans.jit(f)(*args), eager, 2e-5, 1e-7)
    _close(functrans.vmap(f)(*args), eager, 1e-6, 1e-7)
    looped = [np.asarray(f(*[a[i] for a in args])) for i in range(5)]
    _close(np.stack(looped), eager, 1e-6, 1e-7)


def test_gammainc_vmap_of_grad(x64):
    a = np.array([0.5, 2.0, 7.0])
    x = np.array([1.0, 0.5, 9.0])
    grads = functrans.vmap(functrans.grad(fsp.gammainc, argnums=(0, 1)))(a, x)
    for i in range(3):
        ga, gx = functrans.grad(fsp.gammainc, argnums=(0, 1))(a[i], x[i])
        _close(grads[0][i], ga, 1e-10)
        _close(grads[1][i], gx, 1e-10)
    # d/dx P(a, x) is the gamma density
    _close(grads[1], sst.gamma.pdf(x, a), 1e-10)


# =============================================================================================
# stats
# =============================================================================================

_X = np.array([-3.0, -0.5, 0.0, 0.2, 1.0, 2.5, 7.0])
_Q = np.array([0.0, 1e-6, 0.05, 0.3, 0.5, 0.9, 1.0])
_K = np.array([-1.0, 0.0, 1.0, 2.0, 3.0, 2.5, 10.0])

STATS = [
    # (our module, scipy distribution, function, first argument, extra args, extra kwargs)
    ("norm", sst.norm, fn, _X, (), dict(loc=0.5, scale=2.0))
    for fn in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")
] + [
    ("norm", sst.norm, fn, _Q, (), dict(loc=0.5, scale=2.0)) for fn in ("ppf", "isf")
] + [
    ("logistic", sst.logistic, fn, _X, (), dict(loc=-0.3, scale=1.5))
    for fn in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")
] + [
    ("logistic", sst.logistic, fn, _Q, (), dict(loc=0.5, scale=2.0)) for fn in ("ppf", "isf")
] + [
    ("cauchy", sst.cauchy, fn, _X, (), dict(loc=0.5, scale=2.0))
    for fn in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")
] + [
    ("cauchy", sst.cauchy, fn, _Q, (), dict(loc=0.5, scale=2.0)) for fn in ("ppf", "isf")
] + [
    ("laplace", sst.laplace, fn, _X, (), dict(loc=0.5, scale=2.0)) for fn in ("logpdf", "pdf", "cdf")
] + [
    ("uniform", sst.uniform, fn, _X, (), dict(loc=-1.0, scale=3.0)) for fn in ("logpdf", "pdf", "cdf")
] + [
    ("uniform", sst.uniform, "ppf", _Q, (), dict(loc=-1.0, scale=3.0)),
] + [
    ("expon", sst.expon, fn, _X, (), dict(loc=-0.5, scale=2.0))
    for fn in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")
] + [
    ("expon", sst.expon, "ppf", _Q, (), dict(loc=-0.5, scale=2.0)),
] + [
    ("gamma", sst.gamma, fn, _X, (2.5,), dict(loc=-0.5, scale=2.0))
    for fn in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")
] + [
    ("chi2", sst.chi2, fn, _X, (3.0,), dict(loc=-0.5, scale=1.5))
    for fn in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")
] + [
    ("beta", sst.beta, fn, _X / 8 + 0.4, (2.0, 3.5), dict(loc=0.1, scale=0.8))
    for fn in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")
] + [
    ("t", sst.t, fn, _X, (3.0,), dict(loc=0.5, scale=2.0)) for fn in ("logpdf", "pdf")
] + [
    ("truncnorm", sst.truncnorm, fn, _X, (-1.0, 2.0), dict(loc=0.5, scale=1.5))
    for fn in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")
] + [
    ("truncnorm", sst.truncnorm, fn, np.array([5.0, 6.0, 8.0, 9.0, 12.0]), (6.0, 10.0), {})
    for fn in ("logpdf", "logcdf", "logsf")
] + [
    ("poisson", sst.poisson, fn, _K, (2.5,), dict(loc=0.0)) for fn in ("logpmf", "pmf", "cdf")
] + [
    ("bernoulli", sst.bernoulli, fn, _K, (0.3,), {}) for fn in ("logpmf", "pmf", "cdf")
] + [
    ("bernoulli", sst.bernoulli, "ppf", _Q, (0.3,), {}),
]


@pytest.mark.parametrize("module, reference, fn, x, args, kwargs", STATS,
                         ids=[f"{row[0]}.{row[2]}-{i}" for i, row in enumerate(STATS)])
def test_stats_match_scipy(dtype, module, reference, fn, x, args, kwargs):
    ours = getattr(getattr(fst, module), fn)
    out = ours(jnp.array(x.astype(dtype)), *args, **kwargs)
    assert out.dtype == dtype
    with np.errstate(all="ignore"):
        expected = getattr(reference, fn)(x, *args, **kwargs)
    _close(out, expected, rtol=_tol(dtype, 5e-5, 1e-10), atol=_tol(dtype, 1e-6, 1e-13))


def test_stats_default_parameters_and_broadcasting():
    x = np.linspace(-2, 2, 5).astype(np.float32)
    _close(fst.norm.logpdf(x), sst.norm.logpdf(x), 1e-6)
    loc = np.array([[0.0], [1.0]], np.float32)
    _close(fst.norm.cdf(x, loc, 2.0), sst.norm.cdf(x, loc, 2.0), 1e-5)
    _close(fst.gamma.logpdf(x + 3, jnp.array([1.0, 2.0, 3.0, 4.0, 5.0])),
           sst.gamma.logpdf(x + 3, [1.0, 2.0, 3.0, 4.0, 5.0]), 1e-5)


def test_multivariate_normal(dtype):
    rng = np.random.default_rng(3)
    m = rng.normal(size=(3, 3))
    cov = (m @ m.T + 3 * np.eye(3)).astype(dtype)
    mean = rng.normal(size=3).astype(dtype)
    x = rng.normal(size=(4, 3)).astype(dtype)
    rtol = _tol(dtype, 1e-5, 1e-11)
    _close(fst.multivariate_normal.logpdf(x, mean, cov),
           sst.multivariate_normal.logpdf(x, mean, cov), rtol)
    _close(fst.multivariate_normal.pdf(x[0], mean, cov),
           sst.multivariate_normal.pdf(x[0], mean, cov), rtol)
    # a stack of covariances broadcasts against the points
    covs = np.stack([cov, 2 * cov])
    out = fst.multivariate_normal.logpdf(x[:2], mean, covs)
    _close(out, [sst.multivariate_normal.logpdf(x[i], mean, covs[i]) for i in range(2)], rtol)
    _close(fst.multivariate_normal.logpdf(dtype(0.3), dtype(0.1), dtype(2.0)),
           sst.norm.logpdf(0.3, 0.1, np.sqrt(2.0)), rtol)


def test_stats_grads(x64):
    cases = [
        (fst.norm.logpdf, (0.3, 0.1, 2.0)), (fst.norm.logcdf, (-4.0, 0.0, 1.0)),
        (fst.norm.ppf, (0.2, 1.0, 2.0)), (fst.logistic.logpdf, (0.3, 0.0, 1.5)),
        (fst.cauchy.cdf, (0.7, 0.0, 2.0)), (fst.t.logpdf, (0.4, 3.5, 0.1, 1.2)),
        (fst.gamma.logpdf, (1.3, 2.5, 0.0, 1.5)), (fst.gamma.cdf, (1.3, 2.5, 0.0, 1.5)),
        (fst.beta.logpdf, (0.4, 2.0, 3.0)), (fst.beta.cdf, (0.4, 2.0, 3.0)),
        (fst.chi2.sf, (2.0, 3.0)), (fst.expon.logcdf, (0.5, 0.0, 2.0)),
        (fst.laplace.logpdf, (0.5, 0.0, 2.0)), (lambda mu: fst.poisson.logpmf(3.0, mu), (2.5,)),
        (fst.truncnorm.logpdf, (0.3, -1.0, 2.0)), (fst.truncnorm.logcdf, (0.3, -1.0, 2.0)),
        (lambda x, m: fst.multivariate_normal.logpdf(x, m, np.array([[2.0, 0.3], [0.3, 1.0]])),
         (np.array([0.2, -0.4]), np.array([0.1, 0.0]))),
    ]
    for f, args in cases:
        check_grads(f, tuple(np.asarray(a, np.float64) for a in args), order=1,
                    atol=1e-6, rtol=1e-6)


def test_stats_jit_vmap():
    x = np.linspace(0.1, 3.0, 6).astype(np.float32)
    for f in (lambda x: fst.gamma.cdf(x, 2.0), lambda x: fst.norm.logsf(x, 1.0, 2.0),
              lambda x: fst.beta.cdf(x / 4, 2.0, 3.0), lambda x: fst.poisson.cdf(x, 2.0)):
        eager = np.asarray(f(jnp.array(x)))
        _close(functrans.jit(f)(x), eager, 1e-6, 1e-7)
        _close(functrans.vmap(f)(x), eager, 1e-6, 1e-7)


# =============================================================================================
# linalg
# =============================================================================================

def _spd(rng, n, dtype, batch=()):
    m = rng.normal(size=batch + (n, n))
    return (m @ np.swapaxes(m, -1, -2) + n * np.eye(n)).astype(dtype)


def test_cholesky_family(dtype):
    rng = np.random.default_rng(4)
    a = _spd(rng, 4, dtype)
    b = rng.normal(size=(4, 2)).astype(dtype)
    rtol = _tol(dtype, 2e-4, 1e-10)
    for lower in (False, True):
        _close(fla.cholesky(a, lower=lower), sla.cholesky(a.astype(np.float64), lower=lower), rtol,
               atol=rtol)
        c = fla.cho_factor(a, lower=lower)
        assert c[1] == lower
        _close(fla.cho_solve(c, b), np.linalg.solve(a.astype(np.float64), b), rtol, atol=rtol)
        _close(fla.cho_solve(c, b[:, 0]), np.linalg.solve(a.astype(np.float64), b[:, 0]), rtol,
               atol=rtol)


def test_solve_triangular(dtype):
    rng = np.random.default_rng(5)
    a = (np.tril(rng.normal(size=(4, 4))) + 4 * np.eye(4)).astype(dtype)
    b = rng.normal(size=(4, 3)).astype(dtype)
    rtol = _tol(dtype, 1e-4, 1e-11)
    for trans in (0, 1, 2, "N", "T"):
        for lower in (True, False):
            for unit_diagonal in (False, True):
                mat = a if lower else a.T
                expected = sla.solve_triangular(mat.astype(np.float64), b, trans=trans,
                                                lower=lower, unit_diagonal=unit_diagonal)
                _close(fla.solve_triangular(mat, b, trans=trans, lower=lower,
                                            unit_diagonal=unit_diagonal), expected, rtol,
                       atol=rtol)
    _close(fla.solve_triangular(a, b[:, 0], lower=True),
           sla.solve_triangular(a.astype(np.float64), b[:, 0], lower=True), rtol, atol=rtol)


def test_lu_family(dtype):
    rng = np.random.default_rng(6)
    a = rng.normal(size=(4, 4)).astype(dtype)
    b = rng.normal(size=(4, 2)).astype(dtype)
    rtol = _tol(dtype, 1e-4, 1e-11)
    p, l, u = fla.lu(a)
    ep, el, eu = sla.lu(a.astype(np.float64))
    _close(p, ep, 0)
    _close(l, el, rtol, atol=rtol)
    _close(u, eu, rtol, atol=rtol)
    pl, u2 = fla.lu(a, permute_l=True)
    _close(np.asarray(pl) @ np.asarray(u2), a, rtol, atol=rtol)
    rect = rng.normal(size=(3, 5)).astype(dtype)
    p, l, u = fla.lu(rect)
    _close(np.asarray(p) @ np.asarray(l) @ np.asarray(u), rect, rtol, atol=rtol)
    lu_, piv = fla.lu_factor(a)
    elu, epiv = sla.lu_factor(a.astype(np.float64))
    _close(lu_, elu, rtol, atol=rtol)
    np.testing.assert_array_equal(np.asarray(piv), epiv)
    for trans in (0, 1, 2):
        expected = sla.lu_solve((elu, epiv), b, trans=trans)
        _close(fla.lu_solve((lu_, piv), b, trans=trans), expected, rtol, atol=rtol)
    _close(fla.lu_solve((lu_, piv), b[:, 0]), np.linalg.solve(a.astype(np.float64), b[:, 0]),
           rtol, atol=rtol)


def test_decompositions(dtype):
    rng = np.random.default_rng(7)
    a = rng.normal(size=(4, 3)).astype(dtype)
    rtol = _tol(dtype, 1e-4, 1e-11)
    for mode in ("full", "economic"):
        q, r = fla.qr(a, mode=mode)
        eq, er = sla.qr(a.astype(np.float64), mode=mode)
        # QR is unique up to the signs of r's diagonal
        signs = np.sign(np.diag(np.asarray(r, np.float64))) * np.sign(np.diag(er))
        _close(np.asarray(r)[:3] * signs[:, None], er[:3], rtol, atol=rtol)
        _close(np.asarray(q) @ np.asarray(r), a, rtol, atol=rtol)
    (r,) = fla.qr(a, mode="r")
    assert r.shape == (4, 3)
    s = fla.svd(a, compute_uv=False)
    _close(s, sla.svd(a.astype(np.float64), compute_uv=False), rtol)
    u, s, vh = fla.svd(a, full_matrices=False)
    _close((np.asarray(u) * np.asarray(s)) @ np.asarray(vh), a, rtol, atol=rtol)
    h = _spd(rng, 3, dtype)
    w, v = fla.eigh(h)
    _close(w, sla.eigh(h.astype(np.float64), eigvals_only=True), rtol)
    _close(np.asarray(h) @ np.asarray(v), np.asarray(v) * np.asarray(w), rtol, atol=10 * rtol)
    _close(fla.eigh(h, eigvals_only=True), w, rtol)
    # only the lower triangle is read by default
    _close(fla.eigh(np.tril(h), eigvals_only=True), w, rtol)


def test_inv_det_solve(dtype):
    rng = np.random.default_rng(8)
    a = rng.normal(size=(3, 3)).astype(dtype) + 3 * np.eye(3, dtype=dtype)
    b = rng.normal(size=(3, 2)).astype(dtype)
    rtol = _tol(dtype, 1e-4, 1e-11)
    a64 = a.astype(np.float64)
    _close(fla.inv(a), sla.inv(a64), rtol, atol=rtol)
    _close(fla.det(a), sla.det(a64), rtol)
    _close(fla.solve(a, b), sla.solve(a64, b), rtol, atol=rtol)
    _close(fla.solve(a, b, transposed=True), sla.solve(a64, b, transposed=True), rtol, atol=rtol)
    spd = _spd(rng, 3, dtype)
    for lower in (False, True):
        # only one triangle of a positive-definite matrix is read
        half = np.tril(spd) if lower else np.triu(spd)
        _close(fla.solve(half, b, assume_a="pos", lower=lower),
               sla.solve(spd.astype(np.float64), b), rtol, atol=rtol)


def test_block_diag():
    out = fla.block_diag(np.ones((2, 2), np.float32), np.float32(3.0), np.arange(3.0, dtype=np.float32))
    expected = sla.block_diag(np.ones((2, 2)), 3.0, np.arange(3.0))
    _close(out, expected, 0)
    assert out.shape == expected.shape


def test_expm(dtype):
    rng = np.random.default_rng(9)
    rtol = _tol(dtype, 2e-4, 1e-11)
    for scale in (0.0, 1e-3, 1.0, 10.0, 60.0):
        a = (scale * rng.normal(size=(4, 4)) / 4).astype(dtype)
        expected = sla.expm(a.astype(np.float64))
        _close(fla.expm(a), expected, rtol, atol=rtol * np.abs(expected).max())
    # a stack of matrices, each with its own number of squarings
    stack = np.stack([0.1 * np.eye(3), 20 * np.eye(3), [[0, 1, 0], [-1, 0, 0], [0, 0, 0]]])
    stack = stack.astype(dtype)
    out = fla.expm(stack)
    for i in range(3):
        expected = sla.expm(stack[i].astype(np.float64))
        _close(out[i], expected, rtol, atol=rtol * np.abs(expected).max())


def test_linalg_grads(x64):
    rng = np.random.default_rng(10)
    a = rng.normal(size=(3, 3)) + 3 * np.eye(3)
    spd = _spd(rng, 3, np.float64)
    b = rng.normal(size=(3,))
    cases = [
        (lambda a: fla.expm(0.5 * a), (a,)),
        (fla.det, (a,)), (fla.inv, (a,)), (fla.solve, (a, b)),
        (lambda s, b: fla.cho_solve(fla.cho_factor(s), b), (spd, b)),
        (lambda a, b: fla.solve_triangular(a, b, lower=True), (np.tril(a), b)),
        (lambda a, b: fla.lu_solve(fla.lu_factor(a), b, trans=1), (a, b)),
    ]
    for f, args in cases:
        check_grads(f, args, order=1, modes=("fwd", "rev"), atol=1e-5, rtol=1e-5)


def test_linalg_jit_vmap():
    rng = np.random.default_rng(11)
    a = (rng.normal(size=(3, 4, 4)) + 4 * np.eye(4)).astype(np.float32)
    b = rng.normal(size=(3, 4)).astype(np.float32)
    for f in (lambda a, b: fla.expm(0.3 * a) @ b,
              lambda a, b: fla.lu_solve(fla.lu_factor(a), b),
              lambda a, b: fla.solve_triangular(a, b, lower=True, trans=1)):
        looped = np.stack([np.asarray(f(a[i], b[i])) for i in range(3)])
        _close(functrans.vmap(f)(a, b), looped, 1e-5, 1e-5)
        _close(functrans.jit(functrans.vmap(f))(a, b), looped, 1e-5, 1e-5)


def test_unsupported_options_raise():
    with pytest.raises(NotImplementedError, match="pivoting"):
        fla.qr(np.eye(2, dtype=np.float32), pivoting=True)
    with pytest.raises(NotImplementedError, match="generalized"):
        fla.eigh(np.eye(2, dtype=np.float32), np.eye(2, dtype=np.float32))
    with pytest.raises(ValueError, match="square"):
        fla.inv(np.ones((2, 3), np.float32))


# =============================================================================================
# docstring examples
# =============================================================================================

def _modules():
    mods = [functrans.scipy, fsp, fla, fst]
    mods += [getattr(fst, name) for name in fst.__all__
             if isinstance(getattr(fst, name), types.ModuleType)]
    return mods


@pytest.mark.parametrize("module", _modules(), ids=lambda m: m.__name__)
def test_docstring_examples(module):
    # outputs are compared to float32 rounding: NUMBER matches the printed digits only
    result = doctest.testmod(module, extraglobs={"jnp": jnp},
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
