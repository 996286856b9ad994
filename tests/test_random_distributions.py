"""The distributions of functrans.random beyond uniform/normal: gamma family, transforms of
uniform and normal draws, counts, and the gamma/beta/dirichlet reparameterization gradients.

Every statistical test runs twice: with the right parameters it must pass, and with a
slightly wrong parameterization it must fail, so a test that cannot fail is caught here.
Keys are fixed, so the tests are deterministic.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special as special
import scipy.stats as stats

import functrans
import functrans.numpy as jnp
import functrans.random as random

N = 20000          # samples per goodness-of-fit test
PASS_P = 1e-3      # a correct sampler passes at this level (with a fixed key: deterministic)
FAIL_P = 1e-6      # a wrongly parameterized reference must be rejected at this level

KEY = random.PRNGKey(1234)


def _np(x):
    return np.asarray(x)


def ks_pvalue(samples, dist):
    return stats.kstest(_np(samples).astype(np.float64).ravel(), dist.cdf).pvalue


def chi2_pvalue(samples, dist):
    """Chi-square goodness of fit of integer samples to a scipy discrete distribution, the
    outer 0.1% of mass pooled into the end bins."""
    x = _np(samples).astype(np.int64).ravel()
    lo, hi = int(dist.ppf(1e-3)), int(dist.ppf(1 - 1e-3))
    if hi - lo < 2:
        lo, hi = lo - 1, hi + 1
    inner = np.arange(lo + 1, hi)
    observed = np.array([np.sum(x <= lo)] + [np.sum(x == v) for v in inner] + [np.sum(x >= hi)])
    expected = np.array([dist.cdf(lo)] + [dist.pmf(v) for v in inner] + [dist.sf(hi - 1)])
    expected = expected / expected.sum() * x.size
    return stats.chisquare(observed, expected).pvalue


def check_moments(samples, dist, var=True):
    """Sample mean (and variance) within 5 standard errors of the distribution's."""
    x = _np(samples).astype(np.float64).ravel()
    mean, variance = dist.stats(moments="mv")
    assert abs(x.mean() - mean) < 5 * np.sqrt(variance / x.size), (x.mean(), mean)
    if var:
        kurt = float(dist.stats(moments="k"))
        se = variance * np.sqrt((kurt + 2) / x.size)
        assert abs(x.var() - variance) < 5 * se, (x.var(), variance)


# =============================================================================================
# Continuous distributions: KS against scipy, and against a wrong parameterization
# =============================================================================================

CONTINUOUS = {
    # name: (sampler(key, shape), scipy distribution, a wrong distribution, check variance)
    "gamma_small": (lambda k, s: random.gamma(k, 0.3, s), stats.gamma(0.3),
                    stats.gamma(0.3, scale=1.15), True),
    "gamma": (lambda k, s: random.gamma(k, 2.5, s), stats.gamma(2.5), stats.gamma(2.8), True),
    "gamma_large": (lambda k, s: random.gamma(k, 400.0, s), stats.gamma(400.0),
                    stats.gamma(400.0, scale=1.01), True),
    "loggamma": (lambda k, s: jnp.exp(random.loggamma(k, 0.7, s)), stats.gamma(0.7),
                 stats.gamma(0.8), True),
    "beta": (lambda k, s: random.beta(k, 2.0, 0.5, s), stats.beta(2.0, 0.5),
             stats.beta(2.0, 0.55), True),
    "beta_small": (lambda k, s: random.beta(k, 0.2, 0.3, s), stats.beta(0.2, 0.3),
                   stats.beta(0.3, 0.2), True),
    "chisquare": (lambda k, s: random.chisquare(k, 3.0, s), stats.chi2(3.0),
                  stats.chi2(3.3), True),
    "f": (lambda k, s: random.f(k, 5.0, 12.0, s), stats.f(5.0, 12.0), stats.f(12.0, 5.0), False),
    "t": (lambda k, s: random.t(k, 6.0, s), stats.t(6.0), stats.t(6.0, scale=1.1), False),
    "t_small_df": (lambda k, s: random.t(k, 0.5, s), stats.t(0.5), stats.t(0.6), None),
    "cauchy": (lambda k, s: random.cauchy(k, s), stats.cauchy(), stats.cauchy(scale=1.15), None),
    "pareto": (lambda k, s: random.pareto(k, 5.0, s), stats.pareto(5.0), stats.pareto(5.5), False),
    "lognormal": (lambda k, s: random.lognormal(k, 0.5, s), stats.lognorm(0.5),
                  stats.lognorm(0.55), True),
    "rayleigh": (lambda k, s: random.rayleigh(k, 2.0, s), stats.rayleigh(scale=2.0),
                 stats.rayleigh(scale=2.1), True),
    "maxwell": (lambda k, s: random.maxwell(k, s), stats.maxwell(), stats.maxwell(scale=1.05),
                True),
    "double_sided_maxwell": (
        lambda k, s: jnp.abs(random.double_sided_maxwell(k, 1.0, 2.0, s) - 1.0),
        stats.maxwell(scale=2.0), stats.maxwell(scale=2.1), True),
    "weibull_min": (lambda k, s: random.weibull_min(k, 2.0, 1.5, s),
                    stats.weibull_min(1.5, scale=2.0), stats.weibull_min(1.6, scale=2.0), True),
    "generalized_normal": (lambda k, s: random.generalized_normal(k, 1.5, s), stats.gennorm(1.5),
                           stats.gennorm(1.8), True),
    "generalized_normal_2": (lambda k, s: random.generalized_normal(k, 2.0, s),
                             stats.norm(scale=np.sqrt(0.5)), stats.norm(), True),
    "triangular": (lambda k, s: random.triangular(k, -1.0, 0.5, 3.0, s),
                   stats.triang(1.5 / 4.0, loc=-1.0, scale=4.0),
                   stats.triang(1.8 / 4.0, loc=-1.0, scale=4.0), True),
    "wald": (lambda k, s: random.wald(k, 2.0, s), stats.invgauss(2.0), stats.invgauss(2.3), False),
    "wald_large_mean": (lambda k, s: random.wald(k, 50.0, s), stats.invgauss(50.0),
                        stats.invgauss(50.0, scale=1.1), None),
}


@pytest.mark.parametrize("name", sorted(CONTINUOUS))
def test_continuous_fits_scipy_and_rejects_a_wrong_parameter(name):
    sampler, dist, wrong, check_var = CONTINUOUS[name]
    samples = _np(sampler(KEY, (N,)))
    assert samples.shape == (N,) and samples.dtype == np.float32
    assert np.isfinite(samples).all()
    assert ks_pvalue(samples, dist) > PASS_P
    assert ks_pvalue(samples, wrong) < FAIL_P
    if check_var is not None:
        check_moments(samples, dist, var=check_var)


def test_dirichlet_marginals_are_beta():
    alpha = np.array([0.5, 2.0, 4.0], np.float32)
    x = _np(random.dirichlet(KEY, alpha, (N,)))
    assert x.shape == (N, 3)
    np.testing.assert_allclose(x.sum(-1), 1.0, atol=1e-5)
    total = alpha.sum()
    for i, a in enumerate(alpha):
        assert ks_pvalue(x[:, i], stats.beta(a, total - a)) > PASS_P
        assert ks_pvalue(x[:, i], stats.beta(a * 1.15, total - a)) < FAIL_P
    # correlations: cov(x_i, x_j) = -a_i a_j / (a0^2 (a0 + 1))
    cov = np.cov(x[:, 0], x[:, 1])[0, 1]
    expected = -alpha[0] * alpha[1] / (total ** 2 * (total + 1))
    assert abs(cov - expected) < 0.15 * abs(expected)


def test_ball_is_uniform():
    for d, p in [(3, 2.0), (2, 1.0), (4, 1.5)]:
        x = _np(random.ball(KEY, d, p, (N,)))
        assert x.shape == (N, d)
        radius = np.sum(np.abs(x) ** p, axis=-1) ** (1 / p)
        assert (radius <= 1 + 1e-6).all()
        # uniform in the ball: radius**d is uniform on [0, 1]
        assert ks_pvalue(radius ** d, stats.uniform()) > PASS_P
        assert ks_pvalue(radius ** (d + 0.3), stats.uniform()) < FAIL_P
        # symmetric under sign flips of a coordinate
        assert abs(np.mean(x[:, 0])) < 5 * np.std(x[:, 0]) / np.sqrt(N)


def test_orthogonal_is_orthogonal_and_haar():
    n = 3
    q = _np(random.orthogonal(KEY, n, (4000,)))
    assert q.shape == (4000, n, n)
    np.testing.assert_allclose(q @ np.swapaxes(q, -1, -2), np.broadcast_to(np.eye(n), q.shape),
                               atol=2e-6)
    # for Haar measure on O(n) an entry's (q + 1) / 2 is Beta((n-1)/2, (n-1)/2), and the
    # determinant is +1 or -1 equally often
    reference = stats.beta((n - 1) / 2, (n - 1) / 2)
    for i, j in [(0, 0), (2, 1)]:
        assert ks_pvalue((q[:, i, j] + 1) / 2, reference) > PASS_P
    det = np.linalg.det(q)
    assert abs(np.mean(det > 0) - 0.5) < 0.05
    # QR of a Gaussian matrix WITHOUT the sign fix is not Haar: the same test catches it
    unfixed = _np(jnp.linalg.qr(random.normal(KEY, (4000, n, n)))[0])
    assert ks_pvalue((unfixed[:, 0, 0] + 1) / 2, reference) < FAIL_P


def test_orthogonal_rectangular_and_complex():
    wide = _np(random.orthogonal(KEY, 2, (5,), m=4))
    assert wide.shape == (5, 2, 4)
    np.testing.assert_allclose(wide @ np.swapaxes(wide, -1, -2),
                               np.broadcast_to(np.eye(2), (5, 2, 2)), atol=2e-6)
    tall = _np(random.orthogonal(KEY, 4, m=2))
    assert tall.shape == (4, 2)
    np.testing.assert_allclose(tall.T @ tall, np.eye(2), atol=2e-6)
    try:
        unitary = _np(random.orthogonal(KEY, 3, (2,), dtype=jnp.complex64))
    except NotImplementedError:
        pytest.skip("complex QR is not implemented")
    assert unitary.dtype == np.complex64
    np.testing.assert_allclose(unitary @ np.conj(np.swapaxes(unitary, -1, -2)),
                               np.broadcast_to(np.eye(3), (2, 3, 3)), atol=5e-6)


# =============================================================================================
# Counts: chi-square against scipy, and against a wrong parameterization
# =============================================================================================

DISCRETE = {
    "poisson_small": (lambda k, s: random.poisson(k, 0.7, s), stats.poisson(0.7),
                      stats.poisson(0.77)),
    "poisson_knuth": (lambda k, s: random.poisson(k, 6.0, s), stats.poisson(6.0),
                      stats.poisson(6.3)),
    "poisson_rejection": (lambda k, s: random.poisson(k, 25.0, s), stats.poisson(25.0),
                          stats.poisson(26.0)),
    "poisson_huge": (lambda k, s: random.poisson(k, 1e5, s), stats.poisson(1e5),
                     stats.poisson(1e5 + 40)),
    "binomial_small": (lambda k, s: random.binomial(k, 12.0, 0.3, s), stats.binom(12, 0.3),
                       stats.binom(12, 0.33)),
    "binomial_rejection": (lambda k, s: random.binomial(k, 200.0, 0.4, s), stats.binom(200, 0.4),
                           stats.binom(200, 0.41)),
    "binomial_flipped": (lambda k, s: random.binomial(k, 60.0, 0.9, s), stats.binom(60, 0.9),
                         stats.binom(60, 0.91)),
    "binomial_huge": (lambda k, s: random.binomial(k, 1e6, 0.25, s), stats.binom(10 ** 6, 0.25),
                      stats.binom(10 ** 6, 0.2502)),
    "geometric": (lambda k, s: random.geometric(k, 0.3, s), stats.geom(0.3), stats.geom(0.32)),
    "geometric_rare": (lambda k, s: random.geometric(k, 0.02, s), stats.geom(0.02),
                       stats.geom(0.022)),
}


@pytest.mark.parametrize("name", sorted(DISCRETE))
def test_counts_fit_scipy_and_reject_a_wrong_parameter(name):
    sampler, dist, wrong = DISCRETE[name]
    samples = _np(sampler(KEY, (N,)))
    assert samples.shape == (N,)
    assert np.all(samples == np.round(samples))
    assert chi2_pvalue(samples, dist) > PASS_P
    assert chi2_pvalue(samples, wrong) < FAIL_P
    check_moments(samples, dist)


def test_count_dtypes_and_edge_cases():
    assert random.poisson(KEY, 3.0, (4,)).dtype == np.int32
    assert random.geometric(KEY, 0.5, (4,)).dtype == np.int32
    assert random.binomial(KEY, 10.0, 0.5, (4,)).dtype == np.float32
    assert random.poisson(KEY, 3.0, (4,), dtype=jnp.int16).dtype == np.int16
    np.testing.assert_array_equal(_np(random.poisson(KEY, 0.0, (5,))), 0)
    np.testing.assert_array_equal(_np(random.poisson(KEY, -1.0, (2,))), -1)
    np.testing.assert_array_equal(_np(random.binomial(KEY, 7.0, 0.0, (3,))), 0)
    np.testing.assert_array_equal(_np(random.binomial(KEY, 7.0, 1.0, (3,))), 7)
    np.testing.assert_array_equal(_np(random.binomial(KEY, 0.0, 0.5, (3,))), 0)
    assert np.isnan(_np(random.binomial(KEY, 5.0, 1.5, (2,)))).all()
    np.testing.assert_array_equal(_np(random.geometric(KEY, 1.0, (3,))), 1)
    x = _np(random.binomial(KEY, jnp.array([3.0, 30.0, 3000.0]), jnp.array([0.2, 0.6, 0.999]),
                            (500, 3)))
    assert ((x >= 0) & (x <= np.array([3, 30, 3000]))).all()


def test_multinomial():
    p = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    # as in jax.random, shape is the whole result shape, categories last (keyword-only)
    counts = _np(random.multinomial(KEY, 25.0, p, shape=(N, 4)))
    assert counts.shape == (N, 4)
    np.testing.assert_array_equal(counts.sum(-1), 25)
    for i in range(4):
        assert chi2_pvalue(counts[:, i], stats.binom(25, p[i])) > PASS_P
    assert chi2_pvalue(counts[:, 3], stats.binom(25, 0.43)) < FAIL_P
    batched = random.multinomial(KEY, jnp.array([5.0, 9.0]), jnp.array([[0.5, 0.5], [0.1, 0.9]]))
    assert batched.shape == (2, 2)
    np.testing.assert_array_equal(_np(batched).sum(-1), [5, 9])


# =============================================================================================
# Shapes, dtypes, broadcasting, determinism
# =============================================================================================

def test_parameters_broadcast_as_in_jax():
    a = jnp.array([0.5, 1.0, 2.0])
    assert random.gamma(KEY, a).shape == (3,)
    assert random.gamma(KEY, a, (4, 3)).shape == (4, 3)
    assert random.gamma(KEY, 2.0, (4, 3)).shape == (4, 3)
    assert random.beta(KEY, jnp.ones((2, 1)), a).shape == (2, 3)
    assert random.beta(KEY, 1.0, a, (5, 2, 3)).shape == (5, 2, 3)
    assert random.poisson(KEY, jnp.ones((2, 3))).shape == (2, 3)
    assert random.triangular(KEY, 0.0, a * 0.5, 2.0).shape == (3,)
    assert random.t(KEY, a, None).shape == (3,)
    assert random.t(KEY, 3.0).shape == ()
    assert random.dirichlet(KEY, jnp.ones((2, 4))).shape == (2, 4)
    assert random.dirichlet(KEY, jnp.ones(4), (5, 2)).shape == (5, 2, 4)
    assert random.double_sided_maxwell(KEY, a, 1.0, (2,)).shape == (2, 3)
    assert random.weibull_min(KEY, a, 2.0, (4, 3)).shape == (4, 3)
    assert random.ball(KEY, 3, shape=(2, 5)).shape == (2, 5, 3)
    assert random.orthogonal(KEY, 3, (2, 4)).shape == (2, 4, 3, 3)
    assert random.lognormal(KEY).shape == ()
    # the requested shape must contain the parameters' broadcast shape, as in jax.random
    with pytest.raises(ValueError, match="gamma"):
        random.gamma(KEY, a, (3, 2))
    with pytest.raises(ValueError, match="binomial"):
        random.binomial(KEY, jnp.ones(2), a)
    assert random.t(KEY, a).shape == (3,)   # shape=None: the parameters' shape, as in JAX
    with pytest.raises(ValueError, match="dirichlet"):
        random.dirichlet(KEY, 1.0)
    with pytest.raises(TypeError, match="key"):
        random.gamma(jnp.zeros(2), 1.0)


def test_parameters_vary_per_element():
    a = jnp.array([0.5, 5.0, 50.0])
    x = _np(random.gamma(KEY, a, (4000, 3)))
    np.testing.assert_allclose(x.mean(0), [0.5, 5.0, 50.0], rtol=0.06)
    lam = jnp.array([0.5, 9.0, 11.0, 300.0])   # both Poisson methods in one array
    counts = _np(random.poisson(KEY, lam, (4000, 4)))
    np.testing.assert_allclose(counts.mean(0), _np(lam), rtol=0.06)


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_half_precision(dtype):
    for fn in [lambda k: random.gamma(k, 2.0, (100,), dtype),
               lambda k: random.beta(k, 2.0, 3.0, (100,), dtype),
               lambda k: random.t(k, 4.0, (100,), dtype),
               lambda k: random.binomial(k, 20.0, 0.5, (100,), dtype)]:
        x = fn(KEY)
        assert x.dtype == dtype
        assert np.isfinite(_np(x).astype(np.float32)).all()


def test_float64(x64):
    assert random.gamma(KEY, 2.0, (3,)).dtype == np.float64
    assert random.poisson(KEY, 2.0, (3,)).dtype == np.int64
    for fn, dist in [(lambda k: random.gamma(k, 0.4, (N,)), stats.gamma(0.4)),
                     (lambda k: random.beta(k, 3.0, 1.5, (N,)), stats.beta(3.0, 1.5)),
                     (lambda k: random.t(k, 2.5, (N,)), stats.t(2.5)),
                     (lambda k: random.wald(k, 3.0, (N,)), stats.invgauss(3.0))]:
        x = fn(KEY)
        assert x.dtype == np.float64
        assert ks_pvalue(x, dist) > PASS_P
    counts = random.binomial(KEY, 1e7, 0.3, (N,))
    assert counts.dtype == np.float64
    assert chi2_pvalue(counts, stats.binom(10 ** 7, 0.3)) > PASS_P


SAMPLERS = {
    "gamma": lambda k: random.gamma(k, jnp.array([0.2, 1.0, 7.0]), (6, 3)),
    "loggamma": lambda k: random.loggamma(k, 0.1, (8,)),
    "beta": lambda k: random.beta(k, 0.5, 2.0, (8,)),
    "dirichlet": lambda k: random.dirichlet(k, jnp.array([0.3, 1.0, 3.0]), (4,)),
    "chisquare": lambda k: random.chisquare(k, 4.0, (8,)),
    "f": lambda k: random.f(k, 3.0, 9.0, (8,)),
    "t": lambda k: random.t(k, 3.0, (8,)),
    "cauchy": lambda k: random.cauchy(k, (8,)),
    "pareto": lambda k: random.pareto(k, 2.0, (8,)),
    "lognormal": lambda k: random.lognormal(k, 0.3, (8,)),
    "rayleigh": lambda k: random.rayleigh(k, 1.5, (8,)),
    "maxwell": lambda k: random.maxwell(k, (8,)),
    "double_sided_maxwell": lambda k: random.double_sided_maxwell(k, 0.0, 2.0, (8,)),
    "weibull_min": lambda k: random.weibull_min(k, 1.0, 0.7, (8,)),
    "generalized_normal": lambda k: random.generalized_normal(k, 0.8, (8,)),
    "triangular": lambda k: random.triangular(k, 0.0, 0.2, 1.0, (8,)),
    "wald": lambda k: random.wald(k, 1.5, (8,)),
    "ball": lambda k: random.ball(k, 3, 1.0, (4,)),
    "orthogonal": lambda k: random.orthogonal(k, 3, (2,)),
    "geometric": lambda k: random.geometric(k, 0.2, (8,)),
    "poisson": lambda k: random.poisson(k, jnp.array([0.5, 4.0, 40.0]), (6, 3)),
    "binomial": lambda k: random.binomial(k, jnp.array([4.0, 40.0, 400.0]), 0.7, (6, 3)),
    "multinomial": lambda k: random.multinomial(k, 30.0, jnp.array([0.2, 0.3, 0.5]),
                                                shape=(3, 3)),
}


def _assert_same(a, b):
    a, b = _np(a), _np(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_deterministic_jit_and_vmap(name):
    sampler = SAMPLERS[name]
    first = sampler(KEY)
    _assert_same(first, sampler(KEY))
    other = _np(sampler(random.PRNGKey(99)))
    assert np.any(other != _np(first))
    _assert_same(functrans.jit(sampler)(KEY), first)
    keys = random.split(KEY, 3)
    batched = functrans.vmap(sampler)(keys)
    _assert_same(batched, np.stack([_np(sampler(k)) for k in keys]))


# =============================================================================================
# Gradients: implicit reparameterization against finite differences of scipy's inverse CDFs
# =============================================================================================

def _gamma_quantile_derivative(a, x, eps=1e-6):
    """d x / d a at fixed CDF level, by central differences of scipy's gamma inverse CDF
    (in logs, so that samples far in the left tail keep their precision)."""
    u = special.gammainc(a, x)
    h = eps * a
    log_hi = np.log(special.gammaincinv(a + h, u))
    log_lo = np.log(special.gammaincinv(a - h, u))
    return x * (log_hi - log_lo) / (2 * h)


@pytest.mark.parametrize("a", [1e-3, 0.05, 0.6, 1.0, 3.7, 40.0, 2e3, 3e5])
def test_gamma_gradient_matches_inverse_cdf(a, x64):
    shape = (64,)
    a_arr = jnp.full(shape, a)
    x, tangent = functrans.jvp(lambda a: random.gamma(KEY, a, shape), (a_arr,), (jnp.ones(shape),))
    x, tangent = _np(x), _np(tangent)
    # tiny shapes may underflow to 0, where the derivative is 0 too; subnormal samples are
    # compared only as far as the reference (scipy's gammaincinv) resolves them
    positive = x > np.finfo(np.float64).tiny
    expected = _gamma_quantile_derivative(a, x[positive])
    np.testing.assert_allclose(tangent[positive], expected, rtol=1e-6)
    assert np.all(tangent[x == 0] == 0)
    # reverse mode, and the same gradient under jit
    grad = functrans.grad(lambda a: jnp.sum(random.gamma(KEY, a, shape)))(a_arr)
    np.testing.assert_allclose(_np(grad), tangent, rtol=1e-12)
    jitted = functrans.jit(functrans.grad(lambda a: jnp.sum(random.gamma(KEY, a, shape))))(a_arr)
    np.testing.assert_allclose(_np(jitted), tangent, rtol=1e-9)


def test_gamma_gradient_float32():
    a = jnp.array([0.02, 0.5, 2.0, 30.0, 5e4], np.float32)
    shape = (50, 5)
    grad = _np(functrans.grad(lambda a: jnp.sum(random.gamma(KEY, a, shape)))(a))
    x = _np(random.gamma(KEY, a, shape)).astype(np.float64)
    expected = np.array([_gamma_quantile_derivative(float(a[i]), np.maximum(x[:, i], 1e-300)).sum()
                         for i in range(5)])
    np.testing.assert_allclose(grad, expected, rtol=2e-4)


def test_loggamma_gradient_for_tiny_shapes(x64):
    # the samples underflow to 0 in float64, yet their logs and log-derivatives are exact
    a = 1e-4
    log_x, tangent = functrans.jvp(lambda a: random.loggamma(KEY, a, (16,)), (a,), (1.0,))
    log_x = _np(log_x)
    assert np.mean(log_x < -745) > 0.5   # most of them underflow to 0
    # P(a, x) ~ x**a / Gamma(a + 1) here, so log x = (log u + lgamma(a + 1)) / a
    log_u = a * log_x - special.gammaln(a + 1)
    h = 1e-9
    expected = (((log_u + special.gammaln(a + h + 1)) / (a + h))
                - ((log_u + special.gammaln(a - h + 1)) / (a - h))) / (2 * h)
    np.testing.assert_allclose(_np(tangent), expected, rtol=1e-5)


def test_gamma_gradient_is_unbiased():
    # d/da E[x] = d/da a = 1 for the standard gamma; each sample's derivative averages to it
    a = jnp.array([0.3, 2.0, 20.0])
    grads = functrans.vmap(functrans.grad(lambda k, a: jnp.sum(random.gamma(k, a)), argnums=1),
                           in_axes=(0, None))(random.split(KEY, 4000), a)
    # forward mode under vmap gives the same per-sample derivatives
    forward = functrans.vmap(
        lambda k: functrans.jacfwd(lambda a: random.gamma(k, a))(a).diagonal())(
            random.split(KEY, 4000))
    grads, forward = _np(grads), _np(forward)
    np.testing.assert_allclose(forward, grads, rtol=1e-5)
    assert np.all(np.abs(grads.mean(0) - 1.0) < 5 * grads.std(0) / np.sqrt(4000))
    # the mean alone cannot tell every wrong derivative apart (x / a also averages to 1);
    # the pointwise comparisons with scipy above do, and this one differs from it
    x = _np(functrans.vmap(lambda k: random.gamma(k, a))(random.split(KEY, 4000)))
    assert not np.allclose(grads, x / _np(a), rtol=1e-2)


@pytest.mark.parametrize("a", [0.3, 2.0, 30.0, 2e5])
def test_gamma_second_derivative(a, x64):
    # d2x/da2 at fixed CDF level, by central differences of the scipy derivative
    x = float(random.gamma(KEY, a))
    u = special.gammainc(a, x)
    first = lambda b: (special.gammaincinv(b * (1 + 1e-5), u)  # noqa: E731
                       - special.gammaincinv(b * (1 - 1e-5), u)) / (2e-5 * b)
    h = 1e-4 * a
    expected = (first(a + h) - first(a - h)) / (2 * h)
    f = lambda a: random.gamma(KEY, a)  # noqa: E731
    for second in [functrans.jacfwd(functrans.jacfwd(f)), functrans.grad(functrans.grad(f)),
                   functrans.jit(functrans.hessian(f))]:
        np.testing.assert_allclose(_np(second(a)), expected, rtol=2e-3)


def _log_gammas(key, params, shape):
    """The gamma samples beta/dirichlet are built from (same key split as theirs)."""
    return _np(random.loggamma(key, params, shape))


def test_beta_gradient_matches_inverse_cdfs(x64):
    # beta = X / (X + Y) with X ~ Gamma(a), Y ~ Gamma(b): the reparameterization moves X along
    # Gamma(a)'s inverse CDF, so d beta / d a is (Y / (X + Y)**2) dX/da, with dX/da from
    # scipy's gammaincinv
    a, b, shape = 1.7, 0.4, (32,)
    sample = _np(random.beta(KEY, a, b, shape))
    key_a, key_b = random.split(KEY)
    gx, gy = np.exp(_log_gammas(key_a, a, shape)), np.exp(_log_gammas(key_b, b, shape))
    np.testing.assert_allclose(sample, gx / (gx + gy), rtol=1e-12)
    da = _np(functrans.jacfwd(lambda a: random.beta(KEY, a, b, shape))(a))
    db = _np(functrans.jacrev(lambda b: random.beta(KEY, a, b, shape))(b))
    expected_da = gy / (gx + gy) ** 2 * _gamma_quantile_derivative(a, gx)
    expected_db = -gx / (gx + gy) ** 2 * _gamma_quantile_derivative(b, gy)
    np.testing.assert_allclose(da, expected_da, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(db, expected_db, rtol=1e-6, atol=1e-12)


def test_beta_gradient_is_unbiased():
    # d/da E[x] = d/da a / (a + b) = b / (a + b)**2
    a, b = 2.0, 3.0
    keys = random.split(KEY, 20000)
    grads = _np(functrans.vmap(functrans.grad(lambda k, a: random.beta(k, a, b), argnums=1),
                               in_axes=(0, None))(keys, a))
    assert abs(grads.mean() - b / (a + b) ** 2) < 5 * grads.std() / np.sqrt(grads.size)


def test_dirichlet_gradient_matches_inverse_cdfs(x64):
    alpha, shape = np.array([0.6, 2.0, 5.0]), (8,)
    sample = _np(random.dirichlet(KEY, alpha, shape))
    g = np.exp(_log_gammas(KEY, alpha, shape + (3,)))
    total = g.sum(-1, keepdims=True)
    np.testing.assert_allclose(sample, g / total, rtol=1e-12)
    jac = _np(functrans.jacrev(lambda al: random.dirichlet(KEY, al, shape))(jnp.asarray(alpha)))
    assert jac.shape == shape + (3, 3)
    for j in range(3):
        dg = _gamma_quantile_derivative(alpha[j], g[..., j])          # d g_j / d alpha_j
        # x_i = g_i / sum(g): d x_i / d g_j = (delta_ij - x_i) / sum(g)
        expected = ((np.arange(3) == j) - sample) / total * dg[..., None]
        np.testing.assert_allclose(jac[..., j], expected, rtol=1e-6, atol=1e-12)


def test_dirichlet_gradient_is_unbiased():
    alpha = jnp.array([1.0, 2.0, 3.0])
    keys = random.split(KEY, 8000)
    jac = _np(functrans.vmap(functrans.jacfwd(lambda al, k: random.dirichlet(k, al)),
                             in_axes=(None, 0))(alpha, keys))
    a0 = 6.0
    expected = (np.eye(3) * a0 - _np(alpha)[:, None]) / a0 ** 2      # d E[x_i] / d alpha_j
    err = np.abs(jac.mean(0) - expected)
    assert np.all(err < 5 * jac.std(0) / np.sqrt(8000) + 1e-6)


def test_gradients_through_derived_distributions():
    # chisquare, t, f and generalized_normal are differentiable in their parameters through
    # the gamma samples; check one against its closed form at fixed CDF level
    df = 4.0
    grad = _np(functrans.grad(lambda d: jnp.sum(random.chisquare(KEY, d, (16,))))(df))
    x = _np(random.chisquare(KEY, df, (16,))).astype(np.float64)
    expected = _gamma_quantile_derivative(df / 2, x / 2).sum()    # x = 2 G(df/2)
    np.testing.assert_allclose(grad, expected, rtol=1e-3)
    for fn in [lambda p: random.t(KEY, p, (4,)), lambda p: random.f(KEY, p, 7.0, (4,)),
               lambda p: random.generalized_normal(KEY, p, (4,))]:
        assert np.isfinite(_np(functrans.jacfwd(fn)(3.0))).all()


def test_gumbel_high_mode_matches_the_distribution():
    import scipy.stats
    key = random.PRNGKey(7)
    samples = np.asarray(random.gumbel(key, (20000,), mode="high"), np.float64)
    assert scipy.stats.kstest(samples, scipy.stats.gumbel_r.cdf).pvalue > 1e-3
    assert scipy.stats.kstest(samples + 0.1, scipy.stats.gumbel_r.cdf).pvalue < 1e-6
    np.testing.assert_allclose(np.asarray(random.gumbel(key, (5,), mode="high")),
                               np.asarray(functrans.jit(lambda k: random.gumbel(
                                   k, (5,), mode="high"))(key)), rtol=1e-6)
    with pytest.raises(ValueError, match="mode"):
        random.gumbel(key, (2,), mode="middle")
