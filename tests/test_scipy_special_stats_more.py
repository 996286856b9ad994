"""The added ``jax.scipy.special`` functions (functrans/scipy/_special/) and
``jax.scipy.stats`` distributions and summaries, against SciPy: values at ordinary and edge
arguments (float32, and float64 under x64), jit against eager, and numerical gradients."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special as ssp
import scipy.stats as sst

import functrans
import functrans.numpy as jnp
from functrans.scipy import special as fsp
from functrans.scipy.stats import (betabinom, binom, dirichlet, geom, gennorm, gumbel_l,
                                   gumbel_r, multinomial, nbinom, pareto, vonmises, wrapcauchy)
from functrans.scipy.stats import _descriptive as desc
from functrans.test_util import check_grads, x64

INF = np.inf


def _close(actual, expected, rtol, atol=0.0):
    np.testing.assert_allclose(np.asarray(actual).astype(np.float64),
                               np.asarray(expected, np.float64), rtol=rtol, atol=atol,
                               equal_nan=True)


# =============================================================================================
# special: values against SciPy
# =============================================================================================

_X = np.array([-2.5, -1.0, -0.5, 0.0, 0.3, 1.0, 2.5, 7.0, 30.0])
_POS = np.array([0.0, 1e-4, 0.2, 1.0, 1.5, 4.0, 20.0, 60.0, INF])

UNARY = [
    # name, scipy reference, arguments, float32 rtol
    ("gammasgn", ssp.gammasgn, np.array([-2.5, -2.0, -1.5, -0.5, 0.0, 0.5, 3.0]), 0),
    ("loggamma", ssp.loggamma, np.array([-1.5, 0.0, 1e-3, 0.5, 1.0, 3.0, 50.0]), 2e-5),
    ("erfcx", ssp.erfcx, np.array([-INF, -9.0, -3.0, -1.0, 0.0, 0.5, 2.9, 3.1, 10.0, 1e5,
                                   1e20, INF]), 3e-5),
    ("exp1", ssp.exp1, np.array([-1.0, 0.0, 1e-5, 0.3, 1.0, 1.01, 3.0, 30.0, 80.0, INF]), 3e-5),
    ("expi", ssp.expi, np.array([-50.0, -3.0, -1.0, -1e-3, 0.0, 1e-4, 0.5, 1.0, 10.0, 39.0,
                                 41.0, 80.0, INF]), 3e-5),
    ("dawsn", ssp.dawsn, np.array([-INF, -9.0, -1.0, 0.0, 1e-5, 0.2, 1.0, 3.0, 7.9, 8.1, 20.0,
                                   1e4, INF]), 2e-5),
    ("spence", ssp.spence, np.array([-1.0, 0.0, 1e-6, 0.2, 0.5, 0.99, 1.0, 1.01, 1.5, 2.0, 2.5,
                                     3.0, 10.0, 1e5, INF]), 3e-5),
]


@pytest.mark.parametrize("name", ["sici", "fresnel"])
def test_sici_fresnel(name):
    x = np.array([-INF, -30.0, -3.0, -0.5, 0.0, 1e-5, 0.2, 1.0, 1.49, 1.51, 1.99, 2.01, 3.0,
                  7.0, 40.0, INF])
    with np.errstate(all="ignore"):
        expected = getattr(ssp, name)(x)
    for out, ref in zip(getattr(fsp, name)(jnp.asarray(x, jnp.float32)), expected):
        _close(out, ref, rtol=5e-5, atol=1e-6)
    with x64():
        for out, ref in zip(getattr(fsp, name)(jnp.asarray(x, jnp.float64)), expected):
            _close(out, ref, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name,reference,args,rtol", UNARY, ids=[u[0] for u in UNARY])
def test_unary_against_scipy(name, reference, args, rtol):
    fn = getattr(fsp, name)
    with np.errstate(all="ignore"):
        expected = reference(args)
    _close(fn(jnp.asarray(args, jnp.float32)), expected, rtol=rtol, atol=1e-30)
    with x64():
        _close(fn(jnp.asarray(args, jnp.float64)), expected, rtol=max(rtol * 1e-6, 1e-12))


def test_beta_poch_comb():
    a = np.array([-2.5, -0.5, 0.5, 1.0, 2.0, 3.5, 10.0])
    b = np.array([1.5, 2.0, 0.25, 1.0, 3.0, 0.7, 4.0])
    _close(fsp.beta(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)),
           ssp.beta(a, b), rtol=2e-5)
    z = np.array([-2.5, -2.0, -0.5, 0.0, 0.5, 1.0, 3.0, 10.0])
    for m in (0.0, 1.0, 2.0, 3.0, -1.0, 2.5, -1.5, -3.5):
        _close(fsp.poch(jnp.asarray(z, jnp.float32), m), ssp.poch(z, m), rtol=5e-5)
    n = np.array([5.0, 5.0, 5.0, 5.0, -1.0, 2.5, 30.0, 0.0])
    k = np.array([2.0, 0.0, 6.0, -1.0, 1.0, 1.0, 12.0, 0.0])
    _close(fsp.comb(jnp.asarray(n, jnp.float32), jnp.asarray(k, jnp.float32)),
           ssp.comb(n, k), rtol=1e-4)
    nr, kr = np.array([5.0, 1.0, 3.0]), np.array([2.0, 4.0, 0.0])
    _close(fsp.comb(jnp.asarray(nr, jnp.float32), jnp.asarray(kr, jnp.float32), repetition=True),
           ssp.comb(nr, kr, repetition=True), rtol=1e-5)


def test_boxcox():
    x = np.array([-1.0, 0.0, 1e-3, 0.5, 1.0, 2.0, 50.0])
    for lmbda in (0.0, 1e-8, 0.5, -1.5, 2.0):
        with np.errstate(all="ignore"):
            _close(fsp.boxcox(jnp.asarray(x, jnp.float32), lmbda), ssp.boxcox(x, lmbda), rtol=2e-5)
            x1 = x - 0.5
            _close(fsp.boxcox1p(jnp.asarray(x1, jnp.float32), lmbda), ssp.boxcox1p(x1, lmbda),
                   rtol=2e-5)


def test_expn():
    n = np.array([0, 1, 2, 3, 5, 10, 30])
    x = np.array([0.0, 1e-4, 0.5, 0.999, 1.0, 1.001, 2.0, 7.0, 40.0, INF])
    nn, xx = np.meshgrid(n, x)
    expected = ssp.expn(nn, xx)
    _close(fsp.expn(jnp.asarray(nn, jnp.float32), jnp.asarray(xx, jnp.float32)), expected,
           rtol=5e-5, atol=1e-37)
    with x64():
        _close(fsp.expn(jnp.asarray(nn, jnp.float64), jnp.asarray(xx, jnp.float64)), expected,
               rtol=1e-11, atol=1e-300)
    # non-integer or negative order, negative x: NaN
    out = fsp.expn(jnp.array([-1.0, 2.5, 2.0]), jnp.array([1.0, 1.0, -1.0]))
    assert np.all(np.isnan(np.asarray(out)))


def test_zeta():
    x = np.array([2.0, 3.0, 1.5, 10.0])
    q = np.array([1.0, 2.0, 0.5, 3.0])
    _close(fsp.zeta(jnp.asarray(x, jnp.float32), jnp.asarray(q, jnp.float32)), ssp.zeta(x, q),
           rtol=1e-5)
    with pytest.raises(NotImplementedError, match="zeta"):
        fsp.zeta(jnp.float32(2.0))


def test_hyp1f1():
    a = np.array([1.0, 0.5, 2.0, -2.0, 3.0, 1.0, 0.3])
    b = np.array([2.0, 1.5, 3.0, 2.0, 1.0, 5.0, 2.2])
    for x in (-20.0, -1.0, 0.0, 0.5, 3.0, 15.0):
        _close(fsp.hyp1f1(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32), x),
               ssp.hyp1f1(a, b, x), rtol=1e-4)
        with x64():
            _close(fsp.hyp1f1(jnp.asarray(a), jnp.asarray(b), jnp.float64(x)),
                   ssp.hyp1f1(a, b, x), rtol=1e-10)


@pytest.mark.parametrize("a,b,c", [(1.0, 1.0, 2.0), (0.5, 1.5, 2.5), (-2.0, 3.0, 1.5),
                                   (2.0, 3.0, 4.5), (1.5, -0.5, 0.7), (3.0, 2.0, 1.0)])
def test_hyp2f1(a, b, c):
    x = np.array([-50.0, -5.0, -2.0, -0.5, 0.0, 0.3, 0.5, 0.9, 0.99, 1.0])
    expected = ssp.hyp2f1(a, b, c, x)
    # jitted: near x = 1 the series runs thousands of steps, slow op by op
    hyp2f1 = functrans.jit(fsp.hyp2f1)
    params32 = [jnp.full(x.shape, v, jnp.float32) for v in (a, b, c)]
    _close(hyp2f1(*params32, jnp.asarray(x, jnp.float32)), expected, rtol=5e-5)
    with x64():
        params64 = [jnp.full(x.shape, v, jnp.float64) for v in (a, b, c)]
        _close(hyp2f1(*params64, jnp.asarray(x)), expected, rtol=1e-12)
    # beyond 1: NaN (branch cut) unless the series is a polynomial
    assert np.isnan(float(fsp.hyp2f1(0.5, 0.5, c, 1.5)))
    _close(fsp.hyp2f1(-2.0, b, 1.5, 1.5), ssp.hyp2f1(-2.0, b, 1.5, 1.5), rtol=1e-5)


def test_bessel_jn():
    z = np.array([-30.0, -3.0, -0.5, 0.0, 1e-8, 0.5, 1.99, 2.01, 5.0, 10.0, 25.0, 29.0, INF])
    expected = ssp.jv(np.arange(6)[:, None], z)
    expected[:, -1] = 0.0           # the limit at inf (SciPy gives NaN there)
    out = fsp.bessel_jn(jnp.asarray(z, jnp.float32), v=5)
    assert out.shape == (6, z.size) and out.dtype == jnp.float32
    _close(out, expected, rtol=0, atol=5e-7)
    with x64():
        _close(fsp.bessel_jn(jnp.asarray(z), v=5, n_iter=60), expected, rtol=0, atol=1e-14)
    jitted = functrans.jit(lambda z: fsp.bessel_jn(z, v=2, n_iter=100))
    _close(jitted(jnp.array([60.0, -45.0])), ssp.jv(np.arange(3)[:, None], [60.0, -45.0]),
           rtol=0, atol=5e-7)
    # past the recurrence's range: NaN, not a wrong number
    assert np.all(np.isnan(np.asarray(fsp.bessel_jn(jnp.array([60.0]), v=1))))
    with pytest.raises(TypeError):
        fsp.bessel_jn(jnp.ones(2), v=1.5)
    with pytest.raises(ValueError):
        fsp.bessel_jn(jnp.ones(2, jnp.int32), v=1)


def test_owens_t():
    h = np.array([-3.0, -1.0, 0.0, 0.1, 0.5, 1.0, 2.0, 5.0, 8.0, 12.0])[:, None]
    a = np.array([-INF, -5.0, -1.0, -0.3, 0.0, 0.01, 0.5, 0.99, 1.0, 1.01, 3.0, 100.0, INF])
    expected = ssp.owens_t(h, a)
    _close(fsp.owens_t(jnp.asarray(h, jnp.float32), jnp.asarray(a, jnp.float32)), expected,
           rtol=5e-6, atol=1e-30)
    with x64():
        _close(fsp.owens_t(jnp.asarray(h), jnp.asarray(a)), expected, rtol=1e-12, atol=1e-300)


def test_wofz():
    z = np.array([0.5 + 0.5j, 1 + 1j, 3 + 0.01j, 1e3 + 1j, 0.1j, 5j, 20 + 20j, 1e-3 + 0j,
                  6 + 0.5j, 30j, 1 - 1j, -3 - 2j, 0j, INF + 0j, 2.0 - 0.1j, -0.5j])
    expected = ssp.wofz(z)
    out = fsp.wofz(jnp.asarray(z, jnp.complex64))
    assert out.dtype == jnp.complex64
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-6, atol=1e-30)
    with x64():
        np.testing.assert_allclose(np.asarray(fsp.wofz(jnp.asarray(z))), expected, rtol=1e-13)
    # a real argument gives the complex value
    np.testing.assert_allclose(np.asarray(fsp.wofz(jnp.array([1.0, 2.0]))),
                               ssp.wofz(np.array([1.0, 2.0])), rtol=1e-6)
    jitted = functrans.jit(fsp.wofz)(jnp.asarray(z[:4], jnp.complex64))
    np.testing.assert_allclose(np.asarray(jitted), expected[:4], rtol=1e-6)


def test_sph_harm_y():
    rng = np.random.default_rng(0)
    n = rng.integers(0, 12, 100)
    m = np.array([rng.integers(-k, k + 1) for k in n])
    theta = rng.uniform(0, np.pi, 100)
    phi = rng.uniform(-3, 7, 100)
    theta[:5], theta[5:10] = 0.0, np.pi
    expected = ssp.sph_harm_y(n, m, theta, phi)
    args32 = (jnp.asarray(n), jnp.asarray(m), jnp.asarray(theta, jnp.float32),
              jnp.asarray(phi, jnp.float32))
    np.testing.assert_allclose(np.asarray(fsp.sph_harm_y(*args32)), expected, atol=3e-6)
    jitted = functrans.jit(lambda *a: fsp.sph_harm_y(*a, n_max=11))
    np.testing.assert_allclose(np.asarray(jitted(*args32)), expected, atol=3e-6)
    with x64():
        out = fsp.sph_harm_y(jnp.asarray(n), jnp.asarray(m), jnp.asarray(theta), jnp.asarray(phi))
        np.testing.assert_allclose(np.asarray(out), expected, atol=1e-13)
    # degrees above n_max are clipped to it
    clipped = fsp.sph_harm_y(jnp.array([10]), jnp.array([2]), jnp.array([0.4]), jnp.array([0.3]),
                             n_max=6)
    np.testing.assert_allclose(np.asarray(clipped), [ssp.sph_harm_y(6, 2, 0.4, 0.3)], rtol=1e-5)
    with pytest.raises(NotImplementedError, match="diff_n"):
        fsp.sph_harm_y(jnp.array([1]), jnp.array([0]), 0.3, 0.1, diff_n=1)


def test_bernoulli():
    _close(fsp.bernoulli(12), ssp.bernoulli(12), rtol=1e-6)
    assert fsp.bernoulli(0).shape == (1,)
    with pytest.raises(ValueError):
        fsp.bernoulli(-1)


# =============================================================================================
# special: jit and gradients
# =============================================================================================

JITTED = [
    ("erfcx", lambda x: fsp.erfcx(x)),
    ("exp1", lambda x: fsp.exp1(jnp.abs(x))),
    ("expi", lambda x: fsp.expi(x * 10.0)),
    ("expn", lambda x: fsp.expn(3.0, jnp.abs(x))),
    ("hyp1f1", lambda x: fsp.hyp1f1(0.5, 1.5, x)),
    ("beta", lambda x: fsp.beta(x, 2.5)),
    ("boxcox1p", lambda x: fsp.boxcox1p(jnp.abs(x), 0.3)),
    ("dawsn", lambda x: fsp.dawsn(x * 4.0)),
    ("spence", lambda x: fsp.spence(jnp.abs(x))),
    ("sici", lambda x: fsp.sici(x)[1]),
    ("fresnel", lambda x: fsp.fresnel(x)[0]),
    ("hyp2f1", lambda x: fsp.hyp2f1(0.5, 1.5, 2.5, x / 5.0)),
    ("owens_t", lambda x: fsp.owens_t(x, x - 1.0)),
    ("bessel_jn", lambda x: fsp.bessel_jn(x * 3.0, v=3)),
]


@pytest.mark.parametrize("name,fn", JITTED, ids=[j[0] for j in JITTED])
def test_jit_matches_eager(name, fn):
    x = jnp.array([-3.0, -0.7, 0.2, 1.0, 4.5], jnp.float32)
    _close(functrans.jit(fn)(x), fn(x), rtol=1e-5, atol=1e-30)


def test_vmap_matches_loop():
    xs = jnp.array([0.5, 3.0, 7.0], jnp.float32)
    for fn in (fsp.erfcx, fsp.expi, fsp.dawsn, fsp.spence, lambda x: fsp.hyp1f1(0.5, 1.5, x),
               lambda x: fsp.hyp2f1(0.5, 1.5, 2.5, x / 8.0), lambda x: fsp.owens_t(x, 0.5),
               lambda x: fsp.bessel_jn(x, v=2)):
        looped = np.stack([np.asarray(fn(x)) for x in xs])
        _close(functrans.vmap(fn)(xs), looped, rtol=1e-6, atol=1e-30)


GRADS = [
    ("erfcx", fsp.erfcx, (-1.2,)),
    ("erfcx_large", fsp.erfcx, (5.0,)),
    ("exp1", fsp.exp1, (0.7,)),
    ("expi", fsp.expi, (2.0,)),
    ("expi_negative", fsp.expi, (-2.0,)),
    ("expn", lambda x: fsp.expn(3.0, x), (1.7,)),
    ("hyp1f1", lambda x: fsp.hyp1f1(0.5, 1.5, x), (-1.3,)),
    ("beta", fsp.beta, (1.5, 2.5)),
    ("poch", fsp.poch, (2.5, 1.5)),
    ("comb", fsp.comb, (6.5, 2.5)),
    ("boxcox", fsp.boxcox, (2.0, 0.5)),
    ("boxcox1p", fsp.boxcox1p, (0.4, -0.3)),
    ("dawsn", fsp.dawsn, (1.3,)),
    ("spence", fsp.spence, (2.5,)),
    ("spence_small", fsp.spence, (0.3,)),
    ("si", lambda x: fsp.sici(x)[0], (3.0,)),
    ("ci", lambda x: fsp.sici(x)[1], (-0.7,)),
    ("fresnel_s", lambda x: fsp.fresnel(x)[0], (0.8,)),
    ("fresnel_c", lambda x: fsp.fresnel(x)[1], (2.3,)),
    ("owens_t", fsp.owens_t, (0.7, 0.4)),
    ("owens_t_wide", fsp.owens_t, (-1.3, 2.5)),
    ("sph_harm_y_theta", lambda t: jnp.real(fsp.sph_harm_y(jnp.array(3), jnp.array(-2), t, 0.4)),
     (0.9,)),
]


@pytest.mark.parametrize("name,fn,args", GRADS, ids=[g[0] for g in GRADS])
def test_grads(name, fn, args):
    with x64():
        check_grads(fn, tuple(np.float64(a) for a in args), order=1, modes=("fwd", "rev"))


def test_hyp2f1_grads_all_arguments():
    with x64():
        check_grads(fsp.hyp2f1, tuple(np.float64(v) for v in (0.5, 1.5, 2.5, 0.4)), order=1)
        check_grads(fsp.hyp2f1, tuple(np.float64(v) for v in (1.2, 0.7, 1.9, -2.0)), order=1)


def test_hyp1f1_grads_all_arguments():
    with x64():
        check_grads(fsp.hyp1f1, (np.float64(0.5), np.float64(1.5), np.float64(-1.3)), order=1)
        check_grads(fsp.hyp1f1, (np.float64(2.5), np.float64(0.7), np.float64(3.0)), order=1)


# =============================================================================================
# stats distributions against SciPy
# =============================================================================================

_K = np.array([-1.0, 0.0, 1.0, 2.0, 3.0, 5.0, 6.0, 12.0])


def test_discrete_distributions():
    for p in (0.0, 0.3, 1.0):
        with np.errstate(all="ignore"):
            _close(binom.logpmf(jnp.asarray(_K, jnp.float32), 5.0, p), sst.binom.logpmf(_K, 5, p),
                   rtol=2e-5, atol=2e-6)
    _close(binom.pmf(jnp.asarray(_K, jnp.float32), 10.0, 0.4, loc=1.0),
           sst.binom.pmf(_K, 10, 0.4, loc=1), rtol=2e-5, atol=1e-7)
    _close(nbinom.logpmf(jnp.asarray(_K, jnp.float32), 5.0, 0.3), sst.nbinom.logpmf(_K, 5, 0.3),
           rtol=2e-5)
    _close(nbinom.pmf(jnp.asarray(_K, jnp.float32), 2.5, 0.6, 1.0),
           sst.nbinom.pmf(_K, 2.5, 0.6, loc=1), rtol=2e-5)
    _close(geom.logpmf(jnp.asarray(_K, jnp.float32), 0.3), sst.geom.logpmf(_K, 0.3), rtol=2e-5)
    _close(geom.pmf(jnp.asarray(_K, jnp.float32), 0.7, loc=-1.0), sst.geom.pmf(_K, 0.7, loc=-1),
           rtol=2e-5)
    _close(betabinom.logpmf(jnp.asarray(_K, jnp.float32), 5.0, 2.0, 3.0),
           sst.betabinom.logpmf(_K, 5, 2.0, 3.0), rtol=2e-5)
    _close(betabinom.pmf(jnp.asarray(_K, jnp.float32), 20.0, 0.5, 0.7, 1.0),
           sst.betabinom.pmf(_K, 20, 0.5, 0.7, loc=1), rtol=5e-5)
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

_DOC_MODULES = [f"functrans.scipy._special.{name}" for name in (
    "gamma_functions", "box_cox", "error_functions", "integrals", "zeta", "hypergeometric",
    "bessel", "spherical_harmonics")] + [
    f"functrans.scipy.stats.{name}" for name in (
        "binom", "nbinom", "geom", "betabinom", "pareto", "gennorm", "gumbel_l", "gumbel_r",
        "vonmises", "wrapcauchy", "dirichlet", "multinomial", "_descriptive")]


@pytest.mark.parametrize("module_name", _DOC_MODULES)
def test_docstring_examples(module_name):
    import doctest
    import importlib
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, extraglobs={"jnp": jnp},
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
