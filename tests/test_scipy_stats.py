"""functrans.scipy.stats against SciPy: distributions (values in float32 and float64,
defaults and broadcasting, numerical gradients, jit/vmap against eager) and summaries
(mode, rankdata, sem)."""


from __future__ import annotations

import doctest
import importlib
import types

import numpy as np
import pytest
import scipy.stats as sst

import functrans
import functrans.numpy as jnp
import functrans.scipy  # noqa: F401
from functrans.scipy import stats as fst
from functrans.scipy.stats import (betabinom, binom, dirichlet, geom, gennorm, gumbel_l,
                                   gumbel_r, multinomial, nbinom, pareto, vonmises, wrapcauchy)
from functrans.scipy.stats import _descriptive as desc
from functrans.test_util import check_grads, x64
from assertions import close_in_float64 as _close, dtype, tolerance as _tol  # noqa: F401,F811


INF = np.inf


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
# stats distributions against SciPy
# =============================================================================================

_COUNTS = np.array([-1.0, 0.0, 1.0, 2.0, 3.0, 5.0, 6.0, 12.0])


def test_discrete_distributions():
    for p in (0.0, 0.3, 1.0):
        with np.errstate(all="ignore"):
            _close(binom.logpmf(jnp.asarray(_COUNTS, jnp.float32), 5.0, p), sst.binom.logpmf(_COUNTS, 5, p),
                   rtol=2e-5, atol=2e-6)
    _close(binom.pmf(jnp.asarray(_COUNTS, jnp.float32), 10.0, 0.4, loc=1.0),
           sst.binom.pmf(_COUNTS, 10, 0.4, loc=1), rtol=2e-5, atol=1e-7)
    _close(nbinom.logpmf(jnp.asarray(_COUNTS, jnp.float32), 5.0, 0.3), sst.nbinom.logpmf(_COUNTS, 5, 0.3),
           rtol=2e-5)
    _close(nbinom.pmf(jnp.asarray(_COUNTS, jnp.float32), 2.5, 0.6, 1.0),
           sst.nbinom.pmf(_COUNTS, 2.5, 0.6, loc=1), rtol=2e-5)
    _close(geom.logpmf(jnp.asarray(_COUNTS, jnp.float32), 0.3), sst.geom.logpmf(_COUNTS, 0.3), rtol=2e-5)
    _close(geom.pmf(jnp.asarray(_COUNTS, jnp.float32), 0.7, loc=-1.0), sst.geom.pmf(_COUNTS, 0.7, loc=-1),
           rtol=2e-5)
    _close(betabinom.logpmf(jnp.asarray(_COUNTS, jnp.float32), 5.0, 2.0, 3.0),
           sst.betabinom.logpmf(_COUNTS, 5, 2.0, 3.0), rtol=2e-5)
    _close(betabinom.pmf(jnp.asarray(_COUNTS, jnp.float32), 20.0, 0.5, 0.7, 1.0),
           sst.betabinom.pmf(_COUNTS, 20, 0.5, 0.7, loc=1), rtol=5e-5)
    assert np.isnan(float(betabinom.logpmf(1.0, 5.0, -1.0, 2.0)))


def test_pareto():
    x = np.array([-1.0, 0.5, 1.0, 1.0001, 2.0, 10.0, 1e4])
    for b, loc, scale in ((2.0, 0.0, 1.0), (0.7, -1.0, 2.5)):
        args = (jnp.asarray(x, jnp.float32), b, loc, scale)
        for name in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"):
            _close(getattr(pareto, name)(*args), getattr(sst.pareto, name)(x, b, loc, scale),
                   rtol=5e-4)
        q = np.array([0.0, 0.1, 0.5, 0.99, 1.0])
        _close(pareto.ppf(jnp.asarray(q, jnp.float32), b, loc, scale),
               sst.pareto.ppf(q, b, loc, scale), rtol=2e-5)
    assert np.isnan(float(pareto.ppf(1.5, 2.0)))


def test_gennorm():
    x = np.array([-5.0, -1.0, -0.1, 0.0, 0.5, 2.0, 6.0])
    for beta in (0.7, 1.0, 1.5, 2.0, 5.0):
        xs = jnp.asarray(x, jnp.float32)
        _close(gennorm.logpdf(xs, beta), sst.gennorm.logpdf(x, beta), rtol=2e-5)
        _close(gennorm.pdf(xs, beta), sst.gennorm.pdf(x, beta), rtol=2e-5, atol=1e-30)
        _close(gennorm.cdf(xs, beta), sst.gennorm.cdf(x, beta), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("mod,ref", [(gumbel_r, sst.gumbel_r), (gumbel_l, sst.gumbel_l)],
                         ids=["gumbel_r", "gumbel_l"])
def test_gumbel(mod, ref):
    x = np.array([-8.0, -2.0, -0.3, 0.0, 0.7, 3.0, 10.0])
    for loc, scale in ((0.0, 1.0), (1.5, 0.5)):
        xs = jnp.asarray(x, jnp.float32)
        for name in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"):
            with np.errstate(all="ignore"):
                expected = getattr(ref, name)(x, loc, scale)
            _close(getattr(mod, name)(xs, loc, scale), expected, rtol=2e-4, atol=1e-30)
        q = np.array([1e-6, 0.1, 0.5, 0.9, 0.999])
        _close(mod.ppf(jnp.asarray(q, jnp.float32), loc, scale), ref.ppf(q, loc, scale),
               rtol=1e-4)
    # NaN at and beyond the ends of (0, 1), as jax.scipy.stats
    assert np.all(np.isnan(np.asarray(mod.ppf(jnp.array([0.0, 1.0, 1.5]), 0.0, 1.0))))


def test_circular_distributions():
    x = np.array([-4.0, 0.0, 0.5, 3.0, 6.0])
    for kappa in (0.1, 2.0, 50.0, 500.0):
        _close(vonmises.logpdf(jnp.asarray(x, jnp.float32), kappa),
               sst.vonmises.logpdf(x, kappa), rtol=5e-5)
    assert np.isnan(float(vonmises.logpdf(0.0, 0.0)))
    x = np.array([-1.0, 0.0, 0.5, 3.0, 6.0, 7.0])
    for c in (0.1, 0.5, 0.95):
        _close(wrapcauchy.logpdf(jnp.asarray(x, jnp.float32), c),
               sst.wrapcauchy.logpdf(x, c), rtol=5e-5)
        _close(wrapcauchy.pdf(jnp.asarray(x, jnp.float32), c), sst.wrapcauchy.pdf(x, c),
               rtol=5e-5)
    assert np.isnan(float(wrapcauchy.logpdf(1.0, 1.0)))


def test_dirichlet():
    alpha = np.array([1.0, 2.0, 3.5])
    x = np.array([[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]]).T      # points along the trailing axis
    expected = sst.dirichlet.logpdf(x, alpha)
    _close(dirichlet.logpdf(jnp.asarray(x, jnp.float32), jnp.asarray(alpha, jnp.float32)),
           expected, rtol=2e-5)
    _close(dirichlet.logpdf(jnp.asarray(x[:2], jnp.float32), jnp.asarray(alpha, jnp.float32)),
           expected, rtol=2e-5)
    _close(dirichlet.pdf(jnp.asarray(x[:, 0], jnp.float32), jnp.asarray(alpha, jnp.float32)),
           sst.dirichlet.pdf(x[:, 0], alpha), rtol=2e-5)
    off = dirichlet.logpdf(jnp.array([0.2, 0.3, 0.6]), jnp.asarray(alpha, jnp.float32))
    assert float(off) == -INF
    with pytest.raises(ValueError, match="dirichlet"):
        dirichlet.logpdf(jnp.ones(5) / 5, jnp.asarray(alpha, jnp.float32))


def test_multinomial():
    p = np.array([0.2, 0.3, 0.5])
    x = np.array([[1, 2, 3], [0, 0, 6], [6, 0, 0], [2, 2, 2]])
    _close(multinomial.logpmf(jnp.asarray(x), 6, jnp.asarray(p, jnp.float32)),
           sst.multinomial.logpmf(x, 6, p), rtol=2e-5)
    _close(multinomial.pmf(jnp.asarray(x[0]), 6, jnp.asarray(p, jnp.float32)),
           sst.multinomial.pmf(x[0], 6, p), rtol=2e-5)
    assert float(multinomial.logpmf(jnp.array([1, 2, 3]), 7, jnp.asarray(p))) == -INF
    with pytest.raises(ValueError, match="integer"):
        multinomial.logpmf(jnp.array([1.0, 2.0, 3.0]), 6.0, jnp.asarray(p))


def test_distribution_jit_and_grads():
    x = jnp.array([0.5, 1.5, 3.0], jnp.float32)
    fn = lambda x: gumbel_l.logcdf(x, 0.5, 2.0) + pareto.logpdf(x + 1.0, 1.5) \
        + vonmises.logpdf(x, 2.0) + binom.logpmf(x, 6.0, 0.3)  # noqa: E731
    _close(functrans.jit(fn)(x), fn(x), rtol=1e-5)
    with x64():
        check_grads(lambda k, p: betabinom.logpmf(2.0, 6.0, k, p), (1.5, 2.5), order=1)
        check_grads(lambda x, b: gennorm.logpdf(x, b), (0.7, 1.7), order=1)
        check_grads(lambda x, c: wrapcauchy.logpdf(x, c), (1.2, 0.4), order=1)
        check_grads(lambda a: dirichlet.logpdf(jnp.array([0.2, 0.3, 0.5]), a),
                    (np.array([1.0, 2.0, 3.5]),), order=1)


# =============================================================================================
# stats summaries
# =============================================================================================

def _mode_cases():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 4, size=(5, 7)), rng.integers(-3, 3, size=(4, 3, 6)).astype(np.float32)]


def test_mode():
    for a in _mode_cases():
        for axis in (0, 1, -1, None):
            res = desc.mode(jnp.asarray(a), axis=axis)
            ref = sst.mode(a, axis=axis)
            _close(res.mode, ref.mode, rtol=0)
            _close(res.count, ref.count, rtol=0)
        res = desc.mode(jnp.asarray(a), axis=1, keepdims=True)
        assert res.mode.shape == sst.mode(a, axis=1, keepdims=True).mode.shape
    res = functrans.jit(lambda a: desc.mode(a, axis=1))(jnp.asarray(_mode_cases()[0]))
    _close(res.mode, sst.mode(_mode_cases()[0], axis=1).mode, rtol=0)
    with pytest.raises(NotImplementedError, match="omit"):
        desc.mode(jnp.ones(3), nan_policy="omit")


@pytest.mark.parametrize("method", ["average", "min", "max", "dense", "ordinal"])
def test_rankdata(method):
    a = np.random.default_rng(1).integers(0, 4, size=(4, 6)).astype(np.float32)
    for axis in (None, 0, 1):
        _close(desc.rankdata(jnp.asarray(a), method, axis=axis),
               sst.rankdata(a, method, axis=axis), rtol=0)
    _close(functrans.jit(lambda a: desc.rankdata(a, method, axis=1))(jnp.asarray(a)),
           sst.rankdata(a, method, axis=1), rtol=0)
    with_nan = np.array([[1.0, np.nan, 0.0], [2.0, 1.0, 2.0]])
    _close(desc.rankdata(jnp.asarray(with_nan, jnp.float32), method, axis=1),
           sst.rankdata(with_nan, method, axis=1), rtol=0)


def test_rankdata_bad_method():
    with pytest.raises(ValueError, match="method"):
        desc.rankdata(jnp.ones(3), "foo")


def test_sem():
    a = np.random.default_rng(2).normal(size=(5, 4)).astype(np.float32)
    for axis in (0, 1, None):
        for ddof in (0, 1):
            _close(desc.sem(jnp.asarray(a), axis=axis, ddof=ddof),
                   sst.sem(a, axis=axis, ddof=ddof), rtol=1e-5)
    b = a.copy()
    b[1, 2] = np.nan
    _close(desc.sem(jnp.asarray(b), axis=0, nan_policy="omit"),
           sst.sem(b, axis=0, nan_policy="omit"), rtol=1e-5)
    _close(desc.sem(jnp.asarray(b), axis=0), sst.sem(b, axis=0), rtol=1e-5)
    assert desc.sem(jnp.asarray(a), axis=1, keepdims=True).shape == (5, 1)
    with pytest.raises(ValueError, match="raise"):
        desc.sem(jnp.asarray(a), nan_policy="raise")


# =============================================================================================
# docstring examples
# =============================================================================================


def _run_docstring_examples(module):
    # outputs are compared to float32 rounding: NUMBER matches the printed digits only
    result = doctest.testmod(module, extraglobs={"jnp": jnp},
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def _modules():
    return [fst] + [getattr(fst, name) for name in fst.__all__
                    if isinstance(getattr(fst, name), types.ModuleType)]


@pytest.mark.parametrize("module", _modules(), ids=lambda m: m.__name__)
def test_docstring_examples(module):
    _run_docstring_examples(module)


_DISTRIBUTION_MODULES = [f"functrans.scipy.stats.{name}" for name in (
    "binom", "nbinom", "geom", "betabinom", "pareto", "gennorm", "gumbel_l", "gumbel_r",
    "vonmises", "wrapcauchy", "dirichlet", "multinomial", "_descriptive")]


@pytest.mark.parametrize("module_name", _DISTRIBUTION_MODULES)
def test_distribution_docstring_examples(module_name):
    _run_docstring_examples(importlib.import_module(module_name))
