"""jnp.ufunc / frompyfunc against NumPy's ufunc methods; gaussian_kde against SciPy."""
import operator

import numpy as np
import pytest
import scipy.stats

import functrans
import functrans.numpy as jnp
from functrans.numpy._ufunc_objects import builtin_ufuncs, frompyfunc, ufunc
from functrans.scipy.stats._kde import gaussian_kde
from functrans.test_util import check_grads, x64
from assertions import assert_close as _close, jit_equals_eager as _jit_equals_eager

RNG = np.random.default_rng(0)
X = np.arange(1, 13, dtype=np.int32).reshape(3, 4)

ADD = frompyfunc(operator.add, nin=2, nout=1, identity=0)
SUB = frompyfunc(operator.sub, nin=2, nout=1)
BUILTIN = builtin_ufuncs()


def _both(f, *args):
    """f eagerly and under jit; they must agree."""
    eager = np.asarray(f(*args))
    jitted = np.asarray(functrans.jit(f)(*args))
    np.testing.assert_allclose(eager, jitted, rtol=1e-6)
    return eager


# ---- ufunc object -------------------------------------------------------------------------------

def test_properties_and_errors():
    assert ADD.nin == 2 and ADD.nout == 1 and ADD.nargs == 2 and ADD.identity == 0
    assert repr(ADD) == "<jnp.ufunc 'add'>"
    assert ADD == frompyfunc(operator.add, nin=2, nout=1, identity=0) and hash(ADD) == hash(
        frompyfunc(operator.add, nin=2, nout=1, identity=0))
    neg = ufunc(operator.neg, 1, 1)
    with pytest.raises(ValueError, match="binary"):
        neg.reduce(X)
    with pytest.raises(NotImplementedError):
        ADD.at(X, 0, 1)  # inplace=True is impossible with immutable arrays
    with pytest.raises(ValueError, match="identity"):
        SUB.reduce(X, where=X > 2)
    with pytest.raises(ValueError, match="no identity"):
        SUB.reduce(np.zeros((0, 2), np.int32))
    with pytest.raises(AttributeError):
        ADD.identity = 3


def test_call_and_outer():
    np.testing.assert_array_equal(_both(lambda a: ADD(a, 2), X), X + 2)
    np.testing.assert_array_equal(ufunc(operator.neg, 1, 1)(X), -X)
    a, b = X[0], X[:, :2]
    np.testing.assert_array_equal(_both(SUB.outer, a, b), np.subtract.outer(a, b))


@pytest.mark.parametrize("axis", [0, 1, -1, None])
@pytest.mark.parametrize("keepdims", [False, True])
def test_generic_reduce(axis, keepdims):
    for ours, ref in [(ADD, np.add), (SUB, np.subtract)]:
        got = _both(lambda a: ours.reduce(a, axis=axis, keepdims=keepdims), X)
        if axis is None:  # NumPy refuses axis=None for subtract; it means "the flattened array"
            want = ref.reduce(X.ravel()).reshape((1, 1) if keepdims else ())
        else:
            want = ref.reduce(X, axis=axis, keepdims=keepdims)
        np.testing.assert_array_equal(got, want)
    got = _both(lambda a: ADD.reduce(a, axis=axis, where=a % 3 > 0, initial=5), X)
    np.testing.assert_array_equal(got, np.add.reduce(X, axis=axis, where=X % 3 > 0, initial=5))
    np.testing.assert_array_equal(ADD.reduce(np.zeros((0, 3), np.int32)), np.zeros(3))


def test_generic_accumulate_reduceat_at():
    for axis in (0, 1):
        np.testing.assert_array_equal(_both(lambda a: SUB.accumulate(a, axis=axis), X),
                                      np.subtract.accumulate(X, axis=axis))
    np.testing.assert_allclose(SUB.accumulate(X, dtype=jnp.float32),
                               np.subtract.accumulate(X, dtype=np.float32))
    a = np.arange(8.0, dtype=np.float32)
    idx = np.array([0, 4, 1, 5, 5])
    for ours, ref in [(ADD, np.add), (SUB, np.subtract)]:
        np.testing.assert_allclose(_both(lambda v: ours.reduceat(v, idx), a), ref.reduceat(a, idx))
        np.testing.assert_allclose(ours.reduceat(X, np.array([0, 2]), axis=1),
                                   ref.reduceat(X, [0, 2], axis=1))
    base = np.zeros((3, 2), np.float32)
    ind = np.array([0, 0, 2])
    expected = base.copy()
    np.subtract.at(expected, ind, np.float32(1.5))
    np.testing.assert_allclose(_both(lambda v: SUB.at(v, ind, 1.5, inplace=False), base), expected)
    expected = base.copy()
    np.add.at(expected, (ind, 1), np.array([1.0, 2.0, 3.0], np.float32))
    got = ADD.at(base, (ind, 1), np.array([1.0, 2.0, 3.0], np.float32), inplace=False)
    np.testing.assert_allclose(got, expected)
    np.testing.assert_allclose(ADD.at(base, 1, 2.0, inplace=False), base + [[0, 0], [2, 2], [0, 0]])


def test_generic_grad_and_vmap():
    with x64():
        x = RNG.normal(size=(4, 3))
        mul = frompyfunc(operator.mul, nin=2, nout=1, identity=1)
        check_grads(lambda v: mul.reduce(v, axis=0), (x,), order=1)
        check_grads(lambda v: mul.accumulate(v, axis=1), (x,), order=1)
    batched = functrans.vmap(lambda v: SUB.accumulate(v))(X)
    np.testing.assert_array_equal(batched, np.stack([np.subtract.accumulate(r) for r in X]))


# ---- built-in ufunc objects ---------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(n for n, u in BUILTIN.items() if u.nin == 2))
def test_builtin_reduce(name):
    uf, ref = BUILTIN[name], getattr(np, name)
    x = X.astype(np.float32) if name.startswith("logaddexp") else X
    assert uf.identity == ref.identity or (uf.identity is None and name in (
        "subtract", "maximum", "minimum")) or name.startswith("logaddexp")
    for axis in (0, 1, None):
        np.testing.assert_allclose(_both(lambda a: uf.reduce(a, axis=axis), x),
                                   ref.reduce(x if axis is not None else x.ravel(),
                                              axis=axis if axis is not None else 0), rtol=1e-6)
    np.testing.assert_array_equal(uf(x, x[0]), ref(x, x[0]))


def test_builtin_methods():
    add, mul, sub, mx = (BUILTIN[n] for n in ("add", "multiply", "subtract", "maximum"))
    np.testing.assert_array_equal(add.reduce(X, axis=(0, 1), keepdims=True),
                                  np.add.reduce(X, axis=(0, 1), keepdims=True))
    np.testing.assert_array_equal(mx.reduce(X, axis=1, where=X < 6, initial=0),
                                  np.maximum.reduce(X, axis=1, where=X < 6, initial=0))
    np.testing.assert_array_equal(add.accumulate(X, axis=1), np.add.accumulate(X, axis=1))
    np.testing.assert_allclose(mul.accumulate(X, dtype=jnp.float32), np.multiply.accumulate(X, 0))
    ind = np.array([0, 0, 2])
    for ours, ref in [(add, np.add), (mul, np.multiply), (sub, np.subtract)]:
        expected = np.full(4, 2.0, np.float32)
        ref.at(expected, ind, np.float32(3.0))
        got = _both(lambda v: ours.at(v, ind, 3.0, inplace=False), np.full(4, 2.0, np.float32))
        np.testing.assert_allclose(got, expected)
    np.testing.assert_array_equal(add.outer(X[0], X[1]), np.add.outer(X[0], X[1]))
    np.testing.assert_array_equal(BUILTIN["negative"](X), -X)


# ---- gaussian_kde -------------------------------------------------------------------------------

DATA2 = RNG.normal(size=(2, 40)).astype(np.float32)
W = RNG.uniform(0.2, 1.0, size=40).astype(np.float32)
PTS2 = RNG.normal(size=(2, 7)).astype(np.float32)


@pytest.mark.parametrize("bw", [None, "scott", "silverman", 0.4, "callable"])
@pytest.mark.parametrize("weighted", [False, True])
def test_kde_matches_scipy(bw, weighted):
    bw_method = (lambda k: 0.3) if bw == "callable" else bw
    w = W if weighted else None
    ours, ref = gaussian_kde(DATA2, bw_method, w), scipy.stats.gaussian_kde(DATA2, bw_method, w)
    np.testing.assert_allclose(ours.neff, ref.neff, rtol=1e-5)
    np.testing.assert_allclose(ours.covariance, ref.covariance, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ours.inv_cov, ref.inv_cov, rtol=1e-4)
    np.testing.assert_allclose(ours(PTS2), ref(PTS2), rtol=1e-4)
    np.testing.assert_allclose(ours.pdf(PTS2), ref.pdf(PTS2), rtol=1e-4)
    np.testing.assert_allclose(ours.logpdf(PTS2), ref.logpdf(PTS2), rtol=1e-4)
    assert ours.d == 2 and ours.n == 40


def test_kde_1d_integrals_and_jit():
    data = DATA2[0]
    ours, ref = gaussian_kde(data), scipy.stats.gaussian_kde(data)
    np.testing.assert_allclose(ours.integrate_box_1d(-0.5, 1.0), ref.integrate_box_1d(-0.5, 1.0),
                               rtol=1e-5)
    np.testing.assert_allclose(ours.integrate_gaussian(0.2, 1.5), ref.integrate_gaussian(0.2, 1.5),
                               rtol=1e-5)
    other, other_ref = gaussian_kde(DATA2[1, :9]), scipy.stats.gaussian_kde(DATA2[1, :9])
    np.testing.assert_allclose(ours.integrate_kde(other), ref.integrate_kde(other_ref), rtol=1e-5)
    np.testing.assert_allclose(other.integrate_kde(ours), ref.integrate_kde(other_ref), rtol=1e-5)
    np.testing.assert_allclose(ours(0.3), ref(0.3), rtol=1e-5)
    # The estimator is a pytree: it can cross a jit boundary or be built inside one.
    np.testing.assert_allclose(functrans.jit(lambda k, p: k.logpdf(p))(ours, data[:5]),
                               ours.logpdf(data[:5]), rtol=1e-5)
    np.testing.assert_allclose(functrans.jit(lambda d: gaussian_kde(d).integrate_box_1d(0., 1.))(
        data), ref.integrate_box_1d(0.0, 1.0), rtol=1e-5)
    with pytest.raises(ValueError, match="1D"):
        gaussian_kde(DATA2).integrate_box_1d(0.0, 1.0)
    with pytest.raises(NotImplementedError):
        ours.set_bandwidth("scott")


def test_kde_2d_integrate_gaussian_and_errors():
    ours, ref = gaussian_kde(DATA2, weights=W), scipy.stats.gaussian_kde(DATA2, weights=W)
    mean, cov = np.array([0.1, -0.2]), np.array([[1.0, 0.3], [0.3, 0.8]])
    np.testing.assert_allclose(ours.integrate_gaussian(mean, cov), ref.integrate_gaussian(mean, cov),
                               rtol=1e-4)
    with pytest.raises(ValueError, match="dimension"):
        ours(np.zeros((3, 2)))
    with pytest.raises(ValueError):
        gaussian_kde(DATA2, bw_method="nope")
    with pytest.raises(ValueError, match="length"):
        gaussian_kde(DATA2, weights=W[:5])


def test_kde_resample_and_grad():
    kde = gaussian_kde(DATA2, weights=W)
    draws = kde.resample(functrans.random.key(0), (4000,))
    assert draws.shape == (2, 4000)
    # Mean of the mixture is the weighted data mean; covariance is data cov + kernel cov.
    w = W / W.sum()
    np.testing.assert_allclose(draws.mean(axis=1), DATA2 @ w, atol=0.08)
    assert kde.resample(functrans.random.key(1)).shape == (2,)
    with x64():
        data = RNG.normal(size=12)
        check_grads(lambda d: gaussian_kde(d).logpdf(np.array([0.1, 0.5])), (data,), order=1)


def test_public_names():
    """jnp.ufunc and jnp.frompyfunc are the classes and functions of this module."""
    import functrans.numpy as jnp
    times = jnp.ufunc(lambda x, y: x * y, 2, 1, identity=1)
    np.testing.assert_allclose(np.asarray(times.reduce(jnp.arange(1.0, 5.0))), 24.0)
    assert isinstance(jnp.frompyfunc(lambda x: x, 1, 1), ufunc)


def test_frompyfunc_ufunc_methods():
    add = jnp.frompyfunc(lambda x, y: x + y, 2, 1, identity=0)
    hyp = jnp.frompyfunc(lambda x, y: jnp.sqrt(x * x + y * y), nin=2, nout=1)
    a = RNG.normal(size=(3, 4)).astype(np.float32)
    b = RNG.normal(size=(4,)).astype(np.float32)
    _close(hyp(a, b), np.hypot(a, b))
    _close(add.reduce(a, axis=1), a.sum(axis=1))
    _close(add.reduce(a, axis=None), a.sum(), 1e-5)
    _close(add.reduce(a, axis=0, keepdims=True, initial=2.0), a.sum(0, keepdims=True) + 2)
    _close(hyp.reduce(a, axis=0), np.sqrt((a ** 2).sum(0)), 1e-5)
    _close(add.accumulate(a, axis=1), np.cumsum(a, axis=1), 1e-5)
    _close(add.outer(b, b[:3]), np.add.outer(b, b[:3]))
    expected = a.copy()
    np.add.at(expected, (np.array([0, 0, 2]), np.array([1, 1, 3])), 1.5)
    _close(add.at(a, (np.array([0, 0, 2]), np.array([1, 1, 3])), 1.5, inplace=False), expected)
    with pytest.raises(NotImplementedError, match="inplace"):
        add.at(a, 0, 1.0)  # arrays are immutable, as in JAX
    _jit_equals_eager(lambda v: add.reduce(v, axis=0), a, tol=1e-6)
    with x64():
        check_grads(lambda v: hyp.reduce(v, axis=1), (np.abs(a.astype(np.float64)) + 0.5,),
                    order=1)
