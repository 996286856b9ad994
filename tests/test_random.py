"""functrans.random and the threefry2x32 primitive.

Reference values are the Random123 known-answer tests for threefry2x32 with 20 rounds, and
JAX's ``jax.random`` under its original (non-partitionable) threefry scheme, which
``config.update("jax_threefry_partitionable", False)`` selects. The current scheme, the
default, is checked against JAX's vectors in test_random_bits.py.
"""
from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, strategies as st

import functrans
import functrans.numpy as jnp
import functrans.random as random
from functrans.primitives.random_bits import threefry2x32, threefry2x32_p
from functrans.test_util import x64

U32 = np.uint32


def _np(x):
    return np.asarray(x)


# =============================================================================================
# The primitive
# =============================================================================================

KNOWN_ANSWERS = [  # (key1, key2, x1, x2) -> (y1, y2)
    ((0, 0, 0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344, 0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize("inputs,expected", KNOWN_ANSWERS)
def test_threefry_known_answers(inputs, expected):
    args = [np.array([v], U32) for v in inputs]
    out = threefry2x32(*args)
    assert [int(_np(o)[0]) for o in out] == list(expected)
    jitted = functrans.jit(threefry2x32)(*args)
    assert [int(_np(o)[0]) for o in jitted] == list(expected)


def test_threefry_is_elementwise_and_batches():
    rng = np.random.default_rng(0)
    k1, k2, x1, x2 = (rng.integers(0, 2 ** 32, size=(3, 4), dtype=U32) for _ in range(4))
    y1, y2 = threefry2x32(k1, k2, x1, x2)
    for i in range(3):
        for j in range(4):
            a, b = threefry2x32(*(np.array([v[i, j]], U32) for v in (k1, k2, x1, x2)))
            assert (_np(a)[0], _np(b)[0]) == (_np(y1)[i, j], _np(y2)[i, j])
    # vmap with the key unbatched and the counters batched along axis 1
    f = functrans.vmap(lambda a, b: threefry2x32(_col(k1), _col(k2), a, b),
                       in_axes=1, out_axes=1)
    v1, v2 = f(x1, x2)
    w1, w2 = threefry2x32(np.repeat(k1[:, :1], 4, 1), np.repeat(k2[:, :1], 4, 1), x1, x2)
    np.testing.assert_array_equal(_np(v1), _np(w1))
    np.testing.assert_array_equal(_np(v2), _np(w2))


def _col(k):
    return np.ascontiguousarray(k[:, 0])


def test_threefry_shape_rule_errors():
    z = np.zeros(2, U32)
    with pytest.raises(TypeError, match="threefry2x32.*uint32"):
        threefry2x32(z, z, z, np.zeros(2, np.int32))
    with pytest.raises(TypeError, match="threefry2x32.*one shape"):
        threefry2x32(z, z, z, np.zeros(3, U32))
    assert threefry2x32_p.multiple_results


def test_threefry_has_zero_derivative_through_its_outputs():
    def f(x):
        bits = threefry2x32(*(np.arange(3, dtype=U32),) * 4)[0]
        return jnp.sum(x * lax_convert(bits))

    def lax_convert(b):
        return functrans.lax.convert_element_type(b, np.float32)

    expected = float(np.sum(_np(threefry2x32(*(np.arange(3, dtype=U32),) * 4)[0]).astype(np.float32)))
    np.testing.assert_allclose(_np(functrans.grad(f)(2.0)), expected, rtol=1e-6)


# =============================================================================================
# Same bits as JAX under the original threefry scheme
# =============================================================================================

@contextlib.contextmanager
def original_scheme():
    previous = functrans.config.threefry_partitionable
    functrans.config.update("jax_threefry_partitionable", False)
    try:
        yield
    finally:
        functrans.config.update("jax_threefry_partitionable", previous)


@pytest.fixture
def original_threefry():
    with original_scheme():
        yield


def test_the_flag_selects_the_scheme():
    assert functrans.config.threefry_partitionable    # JAX's default since 0.5
    key = random.PRNGKey(0)
    assert _np(random.split(key)).tolist() == [[1797259609, 2579123966], [928981903, 3453687069]]
    with original_scheme():
        assert _np(random.split(key)).tolist() == [[4146024105, 967050713],
                                                   [2718843009, 1272950319]]
        # a function jitted under one scheme is retraced under the other
        jitted = functrans.jit(lambda k: random.bits(k, (2,)))
        assert _np(jitted(key)).tolist() == [928981903, 3453687069]
    assert _np(jitted(key)).tolist() == [4070199207, 4202968722]


@pytest.mark.parametrize("variable", ["FUNCTRANS_THREEFRY_PARTITIONABLE",
                                      "JAX_THREEFRY_PARTITIONABLE"])
def test_the_environment_selects_the_scheme(variable):
    code = "import functrans.random as r; print(r.split(r.PRNGKey(0))[0].tolist())"
    env = {k: v for k, v in os.environ.items() if not k.endswith("THREEFRY_PARTITIONABLE")}
    out = subprocess.run([sys.executable, "-c", code], env={**env, variable: "0"},
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[4146024105, 967050713]"


def test_keys_split_and_fold_in_match_jax(original_threefry):
    key = random.PRNGKey(0)
    assert key.dtype == np.uint32 and _np(key).tolist() == [0, 0]
    assert _np(random.key_data(random.key(0))).tolist() == [0, 0]
    assert _np(random.split(key)).tolist() == [[4146024105, 967050713], [2718843009, 1272950319]]
    assert _np(random.split(random.PRNGKey(42), 3)).tolist() == [
        [3134548294, 3733159049], [3746501087, 894150801], [801545058, 2363201431]]
    assert _np(random.fold_in(key, 7)).tolist() == [2716826189, 292468403]
    assert _np(random.PRNGKey(-1)).tolist() == [0, 4294967295]
    assert _np(random.PRNGKey(123)).tolist() == [0, 123]
    assert _np(random.PRNGKey(2 ** 32 + 5)).tolist() == [0, 5]
    assert random.split(key, (2, 3)).shape == (2, 3, 2)


def test_seeds_under_x64_match_jax(original_threefry):
    with x64():
        assert _np(random.PRNGKey(2 ** 32 + 5)).tolist() == [1, 5]
        assert _np(random.PRNGKey(-1)).tolist() == [4294967295, 4294967295]
        assert _np(random.PRNGKey(2 ** 63 - 1)).tolist() == [2147483647, 4294967295]


def test_bits_match_jax(original_threefry):
    key = random.PRNGKey(0)
    assert _np(random.bits(key, (5,))).tolist() == [2467461003, 428148500, 1688610540,
                                                    3840466878, 2562233961]
    assert _np(random.bits(key, (5,), np.uint8)).tolist() == [143, 35, 95, 55, 29]
    assert _np(random.bits(key, (5,), np.uint16)).tolist() == [20137, 63263, 64300, 20622, 16513]
    with x64():
        assert _np(random.bits(key, (3,), np.uint64)).tolist() == [
            10597664315880824766, 1838883807893689961, 13686855971547664781]


def test_uniform_matches_jax(original_threefry):
    key = random.PRNGKey(0)
    np.testing.assert_array_equal(_np(random.uniform(key, (3,))),
                                  np.float32([0.96532142162323, 0.31468164920806885,
                                              0.6330299377441406]))
    np.testing.assert_array_equal(_np(random.uniform(key, (5,))), np.float32(
        [0.5745004415512085, 0.09968602657318115, 0.39316022396087646, 0.8941782712936401,
         0.5965665578842163]))
    np.testing.assert_allclose(_np(random.uniform(random.PRNGKey(1), (2, 3), minval=-2., maxval=5.)),
                               [[3.8155570030212402, -0.8377137184143066, 3.9013400077819824],
                                [2.5002188682556152, 1.9805775880813599, 2.301112174987793]],
                               rtol=1e-6)
    np.testing.assert_array_equal(_np(random.uniform(key, (3,), np.float16)),
                                  np.float16([0.138671875, 0.2158203125, 0.08203125]))
    bf16 = random.uniform(key, (3,), jnp.bfloat16)
    assert bf16.dtype == jnp.bfloat16
    np.testing.assert_array_equal(_np(bf16).astype(np.float32), [0.34375, 0.0, 0.125])
    with x64():
        out = random.uniform(key, (3,), np.float64)
        assert out.dtype == np.float64
        np.testing.assert_array_equal(_np(out), [0.5745005337275046, 0.0996860909733377,
                                                 0.7419659489424089])


def test_continuous_distributions_match_jax(original_threefry):
    key = random.PRNGKey(0)
    cases = {
        "normal": (random.normal(key, (5,)),
                   [0.18784384429454803, -1.2833425998687744, -0.2710916996002197,
                    1.2490594387054443, 0.2444700300693512]),
        "truncated_normal": (random.truncated_normal(key, -1., 2., (4,)),
                             [1.6339194774627686, -0.40437328815460205, 0.45890870690345764,
                              -0.25005656480789185]),
        "exponential": (random.exponential(key, (3,)),
                        [3.361633062362671, 0.3778718113899231, 1.0024750232696533]),
        "laplace": (random.laplace(key, (3,)),
                    [-2.6684868335723877, 0.46304649114608765, -0.3093279004096985]),
        "logistic": (random.logistic(key, (3,)),
                     [3.32633900642395, -0.7783219218254089, 0.5452374815940857]),
        "gumbel": (random.gumbel(key, (3,)),
                   [3.3440380096435547, -0.1451333463191986, 0.7825522422790527]),
    }
    for name, (got, want) in cases.items():
        assert got.dtype == np.float32, name
        np.testing.assert_allclose(_np(got), want, rtol=2e-6, atol=1e-6, err_msg=name)
    c = random.normal(key, (3,), np.complex64)
    np.testing.assert_allclose(_np(c), [0.09823953 + 0.80460155j, 0.3601542 - 0.8633454j,
                                        -0.37558758 - 0.41827935j], rtol=2e-6)


def test_discrete_distributions_match_jax(original_threefry):
    key = random.PRNGKey(0)
    assert _np(random.randint(key, (8,), 0, 10)).tolist() == [8, 6, 8, 4, 6, 0, 3, 8]
    assert _np(random.randint(random.PRNGKey(3), (6,), -5, 100)).tolist() == [18, 82, 34, 46, 86, 27]
    assert _np(random.randint(random.PRNGKey(5), (6,), -2 ** 31, 2 ** 31 - 1)).tolist() == [
        2036722101, 1767712766, -72016605, 480917687, -2090390835, -1816313035]
    u8 = random.randint(random.PRNGKey(5), (6,), 0, 256, dtype=np.uint8)
    assert u8.dtype == np.uint8 and _np(u8).tolist() == [181, 254, 35, 183, 205, 53]
    assert _np(random.randint(random.PRNGKey(5), (6,), -3, 3, np.int8)).tolist() == [0, 1, -2, 2, 2, -2]
    assert _np(random.randint(random.PRNGKey(5), (6,), 3, 3)).tolist() == [3] * 6
    assert _np(random.randint(random.PRNGKey(5), (2, 3), np.array([0, 10, 100]),
                              np.array([[5], [20]]))).tolist() == [[4, 10, 100], [15, 15, 100]]
    with x64():
        big = random.randint(key, (4,), 0, 10 ** 12, dtype=np.int64)
        assert _np(big).tolist() == [85816184970, 622316141864, 679423349439, 836026686054]
    assert _np(random.permutation(key, 10)).tolist() == [2, 7, 9, 6, 0, 8, 1, 3, 4, 5]
    grid = np.arange(12).reshape(3, 4)
    assert _np(random.permutation(key, grid, axis=0)).tolist() == [[4, 5, 6, 7], [8, 9, 10, 11],
                                                                   [0, 1, 2, 3]]
    assert _np(random.permutation(key, grid, axis=1, independent=True)).tolist() == [
        [2, 0, 3, 1], [4, 7, 6, 5], [10, 9, 8, 11]]
    assert _np(random.bernoulli(key, 0.3, (8,))).tolist() == [False, False, False, False, True,
                                                             False, True, False]
    assert _np(random.bernoulli(key, np.array([0.1, 0.5, 0.9]))).tolist() == [False, True, True]
    logits = np.log(np.array([0.1, 0.2, 0.7], np.float32))
    assert _np(random.categorical(key, logits, shape=(8,))).tolist() == [0, 1, 2, 2, 2, 0, 0, 2]
    flat = np.zeros((2, 5), np.float32)
    assert _np(random.categorical(key, flat, axis=0, shape=(4, 5))).tolist() == [
        [1, 1, 0, 1, 0], [1, 1, 0, 0, 1], [0, 0, 1, 0, 1], [0, 0, 0, 0, 0]]
    assert _np(random.categorical(key, flat, axis=1, shape=(3, 2), replace=False)).tolist() == [
        [1, 3], [2, 4], [0, 0]]
    assert _np(random.rademacher(key, (5,))).tolist() == [-1, 1, 1, -1, -1]


def test_choice_matches_jax(original_threefry):
    key = random.PRNGKey(0)
    assert _np(random.choice(key, 10, (4,))).tolist() == [8, 1, 7, 0]
    assert _np(random.choice(key, 10, (4,), replace=False)).tolist() == [2, 7, 9, 6]
    p = np.array([.1, .2, .3, .2, .2], np.float32)
    assert _np(random.choice(key, 5, (6,), p=p)).tolist() == [2, 4, 1, 1, 2, 2]
    p7 = np.array([.1, .2, .3, .1, .1, .1, .1], np.float32)
    assert _np(random.choice(key, 7, (2, 3), replace=False, p=p7)).tolist() == [[5, 3, 2], [1, 0, 6]]
    grid = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    assert _np(random.choice(key, grid, (2,), axis=1, replace=False)).tolist() == [
        [2., 1.], [6., 5.], [10., 9.]]


def test_choice_with_replacement_from_an_array(original_threefry):
    if not hasattr(jnp, "take"):
        pytest.skip("jnp.take is not available yet")
    values = np.array([10, 20, 30, 40, 50, 60, 70, 80, 90, 100], np.int32)
    # same indices as choice(key, 10, (4,)) == [8, 1, 7, 0]
    assert _np(random.choice(random.PRNGKey(0), values, (4,))).tolist() == [90, 20, 80, 10]


# =============================================================================================
# Transforms
# =============================================================================================

SAMPLERS = {
    "uniform": lambda k: random.uniform(k, (3,)),
    "normal": lambda k: random.normal(k, (2, 2)),
    "randint": lambda k: random.randint(k, (4,), -3, 7),
    "bits": lambda k: random.bits(k, (3,)),
    "split": lambda k: random.split(k, 3),
    "fold_in": lambda k: random.fold_in(k, 5),
    "permutation": lambda k: random.permutation(k, 6),
    "bernoulli": lambda k: random.bernoulli(k, 0.4, (5,)),
    "categorical": lambda k: random.categorical(k, np.zeros(4, np.float32), shape=(3,)),
    "gumbel": lambda k: random.gumbel(k, (2,)),
    "truncated_normal": lambda k: random.truncated_normal(k, -0.5, 0.5, (3,)),
    "choice": lambda k: random.choice(k, 5, (3,), replace=False),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_jit_matches_eager(name):
    f = SAMPLERS[name]
    key = random.PRNGKey(17)
    eager, jitted = _np(f(key)), _np(functrans.jit(f)(key))
    if eager.dtype.kind == "f":
        # compiled backends may round transcendental functions differently by an ulp
        np.testing.assert_allclose(jitted, eager, rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(jitted, eager)


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_vmap_over_keys_matches_a_loop(name):
    f = SAMPLERS[name]
    keys = random.split(random.PRNGKey(3), 4)
    batched = _np(functrans.vmap(f)(keys))
    looped = np.stack([_np(f(np.asarray(keys)[i])) for i in range(4)])
    np.testing.assert_allclose(batched, looped, rtol=1e-6, atol=1e-6)


def test_vmap_over_seeds_and_fold_in_data():
    seeds = np.arange(4, dtype=np.int32)
    keys = functrans.vmap(random.PRNGKey)(seeds)
    np.testing.assert_array_equal(_np(keys), [[0, s] for s in range(4)])
    folded = functrans.vmap(lambda d: random.fold_in(random.PRNGKey(0), d))(np.arange(3, dtype=U32))
    np.testing.assert_array_equal(_np(folded)[2], _np(random.fold_in(random.PRNGKey(0), 2)))


def test_grad_flows_through_parameters_not_bits():
    key = random.PRNGKey(0)
    noise = _np(random.normal(key, (3,)))
    u = _np(random.uniform(key, (3,)))

    def loss(mu, lo):
        return jnp.sum(mu + random.normal(key, (3,)) * 2.0) + jnp.sum(
            random.uniform(key, (3,), minval=lo, maxval=4.0))

    d_mu, d_lo = functrans.grad(loss, argnums=(0, 1))(0.5, 1.0)
    np.testing.assert_allclose(float(d_mu), 3.0, rtol=1e-6)
    # d/dlo of lo + u * (4 - lo) is 1 - u
    np.testing.assert_allclose(float(d_lo), float(np.sum(1 - u)), rtol=1e-5)
    assert np.isfinite(noise).all()
    grads = functrans.vmap(functrans.grad(lambda m, k: jnp.sum(m * random.uniform(k, (2,)))),
                           in_axes=(None, 0))(1.0, random.split(key, 3))
    assert grads.shape == (3,)


# =============================================================================================
# Distributions: properties
# =============================================================================================

def test_sample_statistics():
    key = random.PRNGKey(1)
    u = _np(random.uniform(key, (20000,)))
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    z = _np(random.normal(key, (20000,)))
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1) < 0.03
    e = _np(random.exponential(key, (20000,)))
    assert abs(e.mean() - 1) < 0.05
    b = _np(random.bernoulli(key, 0.25, (20000,)))
    assert abs(b.mean() - 0.25) < 0.02
    c = _np(random.categorical(key, np.log(np.array([0.2, 0.3, 0.5], np.float32)), shape=(20000,)))
    np.testing.assert_allclose(np.bincount(c) / c.size, [0.2, 0.3, 0.5], atol=0.02)
    t = _np(random.truncated_normal(key, -0.3, 1.2, (5000,)))
    assert t.min() > -0.3 and t.max() < 1.2
    lap = _np(random.laplace(key, (20000,)))
    assert abs(np.mean(np.abs(lap)) - 1) < 0.05


@given(st.integers(-1000, 1000), st.integers(1, 500), st.integers(0, 2 ** 31 - 1))
def test_randint_stays_in_range(low, span, seed):
    out = _np(random.randint(random.PRNGKey(seed), (64,), low, low + span))
    assert out.min() >= low and out.max() < low + span


@given(st.integers(1, 40), st.integers(0, 2 ** 31 - 1))
def test_permutation_and_choice_without_replacement(n, seed):
    key = random.PRNGKey(seed)
    assert sorted(_np(random.permutation(key, n)).tolist()) == list(range(n))
    k = max(1, n // 2)
    picked = _np(random.choice(key, n, (k,), replace=False)).tolist()
    assert len(set(picked)) == k and all(0 <= i < n for i in picked)


def test_split_keys_differ_and_are_deterministic():
    keys = _np(random.split(random.PRNGKey(7), 100))
    assert len({tuple(k) for k in keys}) == 100
    np.testing.assert_array_equal(keys, _np(random.split(random.PRNGKey(7), 100)))


# =============================================================================================
# Errors
# =============================================================================================

def test_key_errors():
    with pytest.raises(ValueError, match="batch of keys.*vmap"):
        random.uniform(random.split(random.PRNGKey(0), 2), (2,))
    with pytest.raises(TypeError, match="uint32"):
        random.normal(np.zeros(2, np.int32))
    with pytest.raises(TypeError, match="seed"):
        random.PRNGKey(1.5)
    with pytest.raises(ValueError, match="floating"):
        random.uniform(random.PRNGKey(0), (2,), np.int32)
    with pytest.raises(ValueError, match="without replacement"):
        random.choice(random.PRNGKey(0), 3, (4,), replace=False)
    with pytest.raises(ValueError, match="broadcast"):
        random.uniform(random.PRNGKey(0), (3,), minval=np.zeros(2, np.float32))


def test_multivariate_normal():
    linalg = getattr(jnp, "linalg", None)
    if linalg is None or not hasattr(linalg, "cholesky") or not hasattr(jnp, "einsum"):
        pytest.skip("jnp.linalg.cholesky / jnp.einsum are not available yet")
    cov = np.array([[2.0, 0.6], [0.6, 1.0]], np.float32)
    mean = np.array([1.0, -1.0], np.float32)
    x = _np(random.multivariate_normal(random.PRNGKey(0), mean, cov, (20000,)))
    assert x.shape == (20000, 2)
    np.testing.assert_allclose(x.mean(0), mean, atol=0.05)
    np.testing.assert_allclose(np.cov(x.T), cov, atol=0.08)


def test_key_data_round_trip():
    key = random.PRNGKey(3)
    np.testing.assert_array_equal(_np(random.key_data(random.wrap_key_data(key))), _np(key))
    assert math.prod(random.split(key, 4).shape) == 8
