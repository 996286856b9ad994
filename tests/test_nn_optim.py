"""functrans.nn (activations, softmax, initializers) and functrans.optim (optimizers,
schedules, masking, accumulation) against NumPy/SciPy references of the published rules."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
from hypothesis import given, strategies as st

import functrans
import functrans.numpy as jnp
import functrans.random as random
from functrans import nn, optim
from functrans.nn import initializers
from functrans.test_util import check_grads, x64
from assertions import assert_close as _close, assert_same, jit_equals_eager as _jit_equals_eager

X = np.array([-3.0, -1.0, -0.25, 0.0, 0.5, 2.0, 7.0], np.float32)


def _np(x):
    return np.asarray(x)


# =============================================================================================
# nn: activations
# =============================================================================================

def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


ACTIVATIONS = {
    "relu": (nn.relu, lambda x: np.maximum(x, 0)),
    "relu6": (nn.relu6, lambda x: np.clip(x, 0, 6)),
    "sigmoid": (nn.sigmoid, _sigmoid),
    "log_sigmoid": (nn.log_sigmoid, lambda x: np.log(_sigmoid(x))),
    "softplus": (nn.softplus, lambda x: np.log1p(np.exp(x))),
    "silu": (nn.silu, lambda x: x * _sigmoid(x)),
    "swish": (nn.swish, lambda x: x * _sigmoid(x)),
    "gelu_tanh": (nn.gelu, lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    "gelu_exact": (lambda x: nn.gelu(x, approximate=False),
                   lambda x: x * 0.5 * scipy.special.erfc(-x / np.sqrt(2))),
    "elu": (nn.elu, lambda x: np.where(x > 0, x, np.expm1(x))),
    "elu_alpha": (lambda x: nn.elu(x, 0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x))),
    "leaky_relu": (lambda x: nn.leaky_relu(x, 0.1), lambda x: np.where(x >= 0, x, 0.1 * x)),
    "celu": (lambda x: nn.celu(x, 0.5), lambda x: np.maximum(x, 0) + 0.5 * np.expm1(np.minimum(x, 0) / 0.5)),
    "selu": (nn.selu, lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x))),
    "hard_tanh": (nn.hard_tanh, lambda x: np.clip(x, -1, 1)),
    "hard_sigmoid": (nn.hard_sigmoid, lambda x: np.clip(x + 3, 0, 6) / 6),
    "hard_silu": (nn.hard_silu, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "soft_sign": (nn.soft_sign, lambda x: x / (np.abs(x) + 1)),
    "tanh": (nn.tanh, np.tanh),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_values(name):
    fn, ref = ACTIVATIONS[name]
    out = fn(X)
    assert out.dtype == np.float32
    np.testing.assert_allclose(_np(out), ref(X.astype(np.float64)), rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(_np(functrans.jit(fn)(X)), _np(out), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(set(ACTIVATIONS) - {"relu", "relu6", "hard_tanh",
                                                            "hard_sigmoid", "hard_silu",
                                                            "leaky_relu", "elu", "elu_alpha",
                                                            "selu", "celu"}))
def test_activation_gradients(name):
    fn, _ = ACTIVATIONS[name]
    with functrans.test_util.x64():
        check_grads(fn, (np.array([-1.3, 0.4, 2.2]),), order=2, modes=("fwd", "rev"))


def test_piecewise_activation_gradients_and_kinks():
    points = np.array([-2.5, -0.5, 0.5, 3.5, 7.5], np.float32)
    for fn in (nn.relu, nn.relu6, nn.elu, nn.leaky_relu, nn.selu, nn.celu, nn.hard_tanh):
        with functrans.test_util.x64():
            check_grads(fn, (points.astype(np.float64),), order=1, modes=("fwd", "rev"))
    assert float(functrans.grad(nn.relu)(0.0)) == 0.0
    assert float(functrans.grad(nn.relu6)(0.0)) == 0.0 and float(functrans.grad(nn.relu6)(6.0)) == 0.0
    np.testing.assert_array_equal(_np(functrans.vmap(functrans.grad(nn.relu))(X)),
                                  (X > 0).astype(np.float32))
    assert np.isnan(float(nn.relu(np.float32(np.nan))))


def test_integer_inputs_become_floats_and_glu():
    assert nn.sigmoid(np.array([0, 1])).dtype == np.float32
    out = nn.glu(np.array([[1.0, 2.0, 0.0, -1.0]], np.float32))
    np.testing.assert_allclose(_np(out), [[1.0 * 0.5, 2.0 * _sigmoid(-1.0)]], rtol=1e-6)


# =============================================================================================
# nn: softmax family
# =============================================================================================

def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


@given(st.integers(1, 4), st.integers(1, 5), st.sampled_from([0, 1, -1]), st.integers(0, 999))
def test_softmax_log_softmax_logsumexp(rows, cols, axis, seed):
    x = np.random.default_rng(seed).normal(size=(rows, cols)).astype(np.float32) * 5
    np.testing.assert_allclose(_np(nn.softmax(x, axis)), _softmax(x.astype(np.float64), axis),
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(_np(nn.log_softmax(x, axis)),
                               np.log(_softmax(x.astype(np.float64), axis)), rtol=1e-5, atol=1e-5)
    # float32: max + log(sum) cancels when the result is near 0 (absolute error ~1e-7 of
    # the max)
    np.testing.assert_allclose(_np(nn.logsumexp(x, axis)),
                               scipy.special.logsumexp(x.astype(np.float64), axis), rtol=1e-5,
                               atol=1e-6 * np.abs(x).max())
    np.testing.assert_allclose(_np(nn.logsumexp(x, axis, keepdims=True)),
                               scipy.special.logsumexp(x.astype(np.float64), axis, keepdims=True),
                               rtol=1e-5)


def test_softmax_is_stable_and_masks():
    big = np.array([1000.0, 1000.0, -1000.0], np.float32)
    np.testing.assert_allclose(_np(nn.softmax(big)), [0.5, 0.5, 0.0])
    np.testing.assert_allclose(_np(nn.logsumexp(big)), 1000 + math.log(2), rtol=1e-6)
    assert float(nn.logsumexp(np.array([-np.inf, -np.inf], np.float32))) == -np.inf
    x = np.array([[1.0, 2.0, 3.0], [0.5, 0.5, 9.0]], np.float32)
    mask = np.array([[True, False, True], [True, True, False]])
    masked = _np(nn.softmax(x, where=mask))
    np.testing.assert_allclose(masked[0], [_softmax(np.array([1.0, 3.0]))[0], 0,
                                           _softmax(np.array([1.0, 3.0]))[1]], rtol=1e-6)
    np.testing.assert_allclose(masked[1], [0.5, 0.5, 0.0], rtol=1e-6)
    log_masked = _np(nn.log_softmax(x, where=mask))
    assert log_masked[0, 1] == -np.inf
    np.testing.assert_allclose(_np(nn.logsumexp(x, axis=1, where=mask)),
                               [scipy.special.logsumexp([1.0, 3.0]), scipy.special.logsumexp([0.5, 0.5])],
                               rtol=1e-6)


def test_logsumexp_weights_and_sign():
    a = np.array([0.0, 1.0, 2.0], np.float32)
    b = np.array([1.0, -2.0, 0.5], np.float32)
    value, sign = nn.logsumexp(a, b=b, return_sign=True)
    ref, ref_sign = scipy.special.logsumexp(a, b=b, return_sign=True)
    np.testing.assert_allclose(float(value), ref, rtol=1e-6)
    assert float(sign) == ref_sign
    assert np.isnan(float(nn.logsumexp(a, b=b)))


def test_softmax_gradients():
    x = np.array([[0.3, -1.2, 2.0], [1.0, 0.0, -0.5]])
    with functrans.test_util.x64():
        check_grads(lambda v: nn.softmax(v, axis=1), (x,), order=2, modes=("fwd", "rev"))
        check_grads(lambda v: nn.log_softmax(v, axis=0), (x,), order=2, modes=("fwd", "rev"))
        check_grads(lambda v: nn.logsumexp(v, axis=1), (x,), order=2, modes=("fwd", "rev"))
    grads = _np(functrans.grad(lambda v: nn.logsumexp(v))(np.float32([1.0, 2.0, 3.0])))
    np.testing.assert_allclose(grads, _softmax(np.array([1.0, 2.0, 3.0])), rtol=1e-6)


def test_softmax_vmap_matches_loop():
    x = np.random.default_rng(1).normal(size=(4, 5)).astype(np.float32)
    batched = _np(functrans.vmap(nn.softmax)(x))
    np.testing.assert_allclose(batched, np.stack([_np(nn.softmax(r)) for r in x]), rtol=1e-6)


def test_one_hot_and_standardize():
    out = nn.one_hot(np.array([0, 2, 5, -1]), 3)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(_np(out), [[1, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0]])
    out = nn.one_hot(np.array([[1, 0]]), 2, dtype=np.int32, axis=0)
    assert out.shape == (2, 1, 2) and out.dtype == np.int32
    np.testing.assert_array_equal(_np(out)[:, 0, :], [[0, 1], [1, 0]])
    x = np.random.default_rng(2).normal(size=(3, 6)).astype(np.float32) * 3 + 1
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(_np(nn.standardize(x)), ref, rtol=1e-4, atol=1e-5)
    ref0 = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5)
    np.testing.assert_allclose(_np(nn.standardize(x, axis=0)), ref0, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_np(nn.standardize(x, mean=0.0, variance=4.0)),
                               x / np.sqrt(4 + 1e-5), rtol=1e-6)


# =============================================================================================
# nn.initializers
# =============================================================================================

def test_initializers_match_jax_bits():
    # jax.nn.initializers' values (JAX 0.10, its default partitionable threefry)
    key = random.PRNGKey(0)
    np.testing.assert_allclose(_np(initializers.glorot_uniform()(key, (3, 4))), [
        [0.8289182186126709, 0.886157751083374, -0.31053584814071655, -0.05801473930478096],
        [0.12940874695777893, -0.6193680763244629, -0.3514512777328491, 0.35084980726242065],
        [0.45692288875579834, -0.6091626882553101, 0.8987006545066833, -0.8790057897567749]],
        rtol=1e-6)
    np.testing.assert_allclose(_np(initializers.he_normal()(key, (2, 3))), [
        [1.6552032232284546, 1.9494074583053589, -0.4691488444805145],
        [-0.08530155569314957, 0.19099149107933044, -1.0375028848648071]], rtol=1e-5)
    np.testing.assert_allclose(_np(initializers.lecun_normal()(key, (2, 2, 3)))[1, 0],
                               [-0.26771092414855957, 0.2672174274921417, 0.357908695936203],
                               rtol=1e-5)


@pytest.mark.parametrize("factory,scale,mode", [
    (initializers.glorot_uniform, 1.0, "fan_avg"), (initializers.glorot_normal, 1.0, "fan_avg"),
    (initializers.he_uniform, 2.0, "fan_in"), (initializers.he_normal, 2.0, "fan_in"),
    (initializers.lecun_uniform, 1.0, "fan_in"), (initializers.lecun_normal, 1.0, "fan_in"),
    (initializers.xavier_uniform, 1.0, "fan_avg"), (initializers.kaiming_normal, 2.0, "fan_in"),
])
def test_variance_scaling_variances(factory, scale, mode):
    shape = (3, 3, 64, 128)  # a conv kernel: receptive field 9
    fan_in, fan_out = 9 * 64, 9 * 128
    n = fan_in if mode == "fan_in" else (fan_in + fan_out) / 2
    w = _np(factory()(random.PRNGKey(1), shape))
    assert w.shape == shape and w.dtype == np.float32
    np.testing.assert_allclose(w.var(), scale / n, rtol=0.05)
    assert abs(w.mean()) < 0.01


def test_simple_initializers():
    key = random.PRNGKey(0)
    np.testing.assert_array_equal(_np(initializers.zeros(key, (2, 3))), np.zeros((2, 3)))
    np.testing.assert_array_equal(_np(initializers.ones(key, (2,), np.int32)), [1, 1])
    np.testing.assert_array_equal(_np(initializers.constant(3.0)(key, (2,))), [3.0, 3.0])
    u = _np(initializers.uniform(0.5)(key, (5000,)))
    assert u.min() >= 0 and u.max() < 0.5
    z = _np(initializers.normal(2.0)(key, (5000,)))
    assert abs(z.std() - 2.0) < 0.1
    t = _np(initializers.truncated_normal(1.0)(key, (5000,)))
    assert np.abs(t).max() < 2.0
    bf = initializers.glorot_normal()(key, (4, 4), jnp.bfloat16)
    assert bf.dtype == jnp.bfloat16
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        initializers.glorot_uniform()(key, (5,))


def test_orthogonal_initializer():
    if not hasattr(jnp, "linalg") or not hasattr(jnp.linalg, "qr") or not hasattr(jnp, "diagonal"):
        pytest.skip("jnp.linalg.qr / jnp.diagonal are not available yet")
    for shape in [(4, 4), (6, 3), (3, 6), (2, 3, 5)]:
        w = _np(initializers.orthogonal(scale=2.0)(random.PRNGKey(0), shape))
        flat = w.reshape(-1, shape[-1])
        gram = flat.T @ flat if flat.shape[0] >= flat.shape[1] else flat @ flat.T
        np.testing.assert_allclose(gram, 4 * np.eye(gram.shape[0]), atol=1e-4)


# =============================================================================================
# optim: trajectories on a quadratic against NumPy references of the published rules
# =============================================================================================

RNG = np.random.default_rng(0)
CURVATURE = {"w": RNG.uniform(0.5, 2.0, size=(3,)), "b": RNG.uniform(0.5, 2.0, size=(2, 2))}
OFFSET = {"w": RNG.normal(size=(3,)), "b": RNG.normal(size=(2, 2))}
START = {"w": RNG.normal(size=(3,)), "b": RNG.normal(size=(2, 2))}
STEPS = 10


def _grad(p):
    """Gradient of sum(0.5 * A p^2 + c p), leafwise."""
    return {k: CURVATURE[k] * p[k] + OFFSET[k] for k in p}


def _loss(p):
    return sum(jnp.sum(0.5 * CURVATURE[k].astype(np.float32) * p[k] ** 2
                       + OFFSET[k].astype(np.float32) * p[k]) for k in p)


def _run(opt, use_jit=True):
    params = {k: jnp.asarray(v.astype(np.float32)) for k, v in START.items()}
    state = opt.init(params)
    update = functrans.jit(opt.update) if use_jit else opt.update
    trajectory = []
    for _ in range(STEPS):
        grads = functrans.grad(_loss)(params)
        updates, state = update(grads, state, params)
        params = optim.apply_updates(params, updates)
        trajectory.append({k: _np(v) for k, v in params.items()})
    return trajectory


def _reference(step_fn, init_state):
    """Iterate ``step_fn(p, g, state, t) -> (p, state)`` leafwise in float64."""
    trajectory = []
    params = {k: v.copy() for k, v in START.items()}
    states = {k: init_state(v) for k, v in params.items()}
    for t in range(1, STEPS + 1):
        grads = _grad(params)
        for k in params:
            params[k], states[k] = step_fn(params[k], grads[k], states[k], t)
        trajectory.append({k: v.copy() for k, v in params.items()})
    return trajectory


def _adam_direction(g, state, t, b1=0.9, b2=0.999, eps=1e-8, nesterov=False):
    m, v = state
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    if nesterov:
        m_hat = b1 * m / (1 - b1 ** (t + 1)) + (1 - b1) * g / (1 - b1 ** t)
    else:
        m_hat = m / (1 - b1 ** t)
    v_hat = v / (1 - b2 ** t)
    return m_hat / (np.sqrt(v_hat) + eps), (m, v)


def _zeros2(p):
    return (np.zeros_like(p), np.zeros_like(p))


def _ref_sgd(p, g, s, t):
    return p - 0.1 * g, s


def _ref_momentum(p, g, s, t):
    s = g + 0.9 * s
    return p - 0.1 * s, s


def _ref_nesterov(p, g, s, t):
    s = g + 0.9 * s
    return p - 0.1 * (g + 0.9 * s), s


def _ref_adam(p, g, s, t):
    d, s = _adam_direction(g, s, t)
    return p - 0.1 * d, s


def _ref_nadam(p, g, s, t):
    d, s = _adam_direction(g, s, t, nesterov=True)
    return p - 0.1 * d, s


def _ref_adamw(p, g, s, t):
    d, s = _adam_direction(g, s, t)
    return p - 0.1 * (d + 0.05 * p), s


def _ref_rmsprop(p, g, v, t):
    v = 0.9 * v + 0.1 * g * g
    return p - 0.05 * g / np.sqrt(v + 1e-8), v


def _ref_rmsprop_centered_momentum(p, g, s, t):
    m, v, trace = s
    m = 0.9 * m + 0.1 * g
    v = 0.9 * v + 0.1 * g * g
    step = -0.05 * g / np.sqrt(v - m * m + 1e-8)
    trace = step + 0.5 * trace
    return p + trace, (m, v, trace)


def _ref_adagrad(p, g, s, t):
    s = s + g * g
    return p - 0.3 * g / np.sqrt(s + 1e-7), s


def _ref_lamb(p, g, s, t):
    d, s = _adam_direction(g, s, t, eps=1e-6)
    d = d + 0.01 * p
    ratio = np.linalg.norm(p) / np.linalg.norm(d)
    return p - 0.1 * ratio * d, s


def _ref_lion(p, g, m, t):
    direction = np.sign(0.9 * m + 0.1 * g)
    m = 0.99 * m + 0.01 * g
    return p - 0.05 * (direction + 0.1 * p), m


OPTIMIZERS = {
    "sgd": (lambda: optim.sgd(0.1), _ref_sgd, np.zeros_like),
    "momentum": (lambda: optim.momentum(0.1, 0.9), _ref_momentum, np.zeros_like),
    "sgd_momentum": (lambda: optim.sgd(0.1, momentum=0.9), _ref_momentum, np.zeros_like),
    "nesterov": (lambda: optim.nesterov(0.1, 0.9), _ref_nesterov, np.zeros_like),
    "adam": (lambda: optim.adam(0.1), _ref_adam, _zeros2),
    "nadam": (lambda: optim.nadam(0.1), _ref_nadam, _zeros2),
    "adamw": (lambda: optim.adamw(0.1, weight_decay=0.05), _ref_adamw, _zeros2),
    "rmsprop": (lambda: optim.rmsprop(0.05), _ref_rmsprop, np.zeros_like),
    "rmsprop_centered_momentum": (
        lambda: optim.rmsprop(0.05, centered=True, momentum=0.5), _ref_rmsprop_centered_momentum,
        lambda p: (np.zeros_like(p),) * 3),
    "adagrad": (lambda: optim.adagrad(0.3), _ref_adagrad, lambda p: np.full_like(p, 0.1)),
    "lamb": (lambda: optim.lamb(0.1, weight_decay=0.01), _ref_lamb, _zeros2),
    "lion": (lambda: optim.lion(0.05, weight_decay=0.1), _ref_lion, np.zeros_like),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_trajectory_matches_reference(name):
    make, step, init_state = OPTIMIZERS[name]
    got = _run(make())
    want = _reference(step, init_state)
    for t, (g, w) in enumerate(zip(got, want)):
        for k in g:
            np.testing.assert_allclose(g[k], w[k], rtol=1e-4, atol=1e-5,
                                       err_msg=f"{name} step {t + 1} leaf {k}")


def test_optimizer_states_are_pytrees_with_int32_counts():
    opt = optim.adam(0.1)
    state = opt.init({k: jnp.asarray(v.astype(np.float32)) for k, v in START.items()})
    adam_state = state[0]
    assert type(adam_state).__name__ == "ScaleByAdamState"
    assert adam_state.count.dtype == np.int32 and adam_state.count.shape == ()
    leaves = functrans.tree_util.tree_leaves(state)
    assert all(hasattr(leaf, "dtype") for leaf in leaves)


def test_eager_equals_jit():
    eager = _run(optim.adamw(0.1, weight_decay=0.05), use_jit=False)
    jitted = _run(optim.adamw(0.1, weight_decay=0.05), use_jit=True)
    for a, b in zip(eager, jitted):
        for k in a:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6)


def test_vmap_over_independent_models():
    opt = optim.adam(0.05)
    params = jnp.asarray(np.array([[1.0, -1.0], [2.0, 0.5], [-3.0, 0.0]], np.float32))

    def train_step(p, state):
        g = functrans.grad(lambda q: jnp.sum(q * q))(p)
        updates, state = opt.update(g, state, p)
        return optim.apply_updates(p, updates), state

    states = functrans.vmap(opt.init)(params)
    batched_p, batched_s = functrans.vmap(train_step)(params, states)
    for i in range(3):
        row = jnp.asarray(_np(params)[i])
        p_i, _ = train_step(row, opt.init(row))
        np.testing.assert_allclose(_np(batched_p)[i], _np(p_i), rtol=1e-6)
        np.testing.assert_array_equal(_np(batched_s[0].count), [1, 1, 1])


def test_clipping_and_global_norm():
    tree = {"a": np.array([3.0, 0.0], np.float32), "b": np.array([[4.0]], np.float32)}
    assert float(optim.global_norm(tree)) == pytest.approx(5.0)
    clipped, _ = optim.clip_by_global_norm(1.0).update(tree, optim.EmptyState())
    np.testing.assert_allclose(_np(clipped["a"]), [0.6, 0.0], rtol=1e-6)
    np.testing.assert_allclose(_np(clipped["b"]), [[0.8]], rtol=1e-6)
    unchanged, _ = optim.clip_by_global_norm(10.0).update(tree, optim.EmptyState())
    np.testing.assert_array_equal(_np(unchanged["a"]), tree["a"])
    zeros, _ = optim.clip_by_global_norm(1.0).update({"a": np.zeros(2, np.float32)}, optim.EmptyState())
    np.testing.assert_array_equal(_np(zeros["a"]), [0.0, 0.0])
    c, _ = optim.clip(0.5).update({"a": np.array([-2.0, 0.1, 3.0], np.float32)}, optim.EmptyState())
    np.testing.assert_allclose(_np(c["a"]), [-0.5, 0.1, 0.5])


def test_trust_ratio_and_decayed_weights_with_mask():
    params = {"w": np.array([3.0, 4.0], np.float32), "b": np.array([1.0], np.float32)}
    updates = {"w": np.array([0.0, 1.0], np.float32), "b": np.array([0.0], np.float32)}
    scaled, _ = optim.scale_by_trust_ratio().update(updates, optim.EmptyState(), params)
    np.testing.assert_allclose(_np(scaled["w"]), [0.0, 5.0])
    np.testing.assert_allclose(_np(scaled["b"]), [0.0])  # zero update norm: left alone
    decay = optim.add_decayed_weights(0.1, mask={"w": True, "b": False})
    out, _ = decay.update(updates, decay.init(params), params)
    np.testing.assert_allclose(_np(out["w"]), [0.3, 1.4], rtol=1e-6)
    np.testing.assert_allclose(_np(out["b"]), [0.0])
    masked_by_fn = optim.add_decayed_weights(0.1, mask=lambda p: {"w": False, "b": True})
    out, _ = masked_by_fn.update(updates, masked_by_fn.init(params), params)
    np.testing.assert_allclose(_np(out["b"]), [0.1], rtol=1e-6)


def test_masked_and_multi_transform():
    params = {"encoder": {"w": np.ones(2, np.float32)}, "head": np.ones(3, np.float32)}
    grads = {"encoder": {"w": np.full(2, 2.0, np.float32)}, "head": np.full(3, 2.0, np.float32)}
    opt = optim.masked(optim.sgd(0.5), {"encoder": True, "head": False})
    state = opt.init(params)
    out, state = opt.update(grads, state, params)
    np.testing.assert_allclose(_np(out["encoder"]["w"]), [-1.0, -1.0])
    np.testing.assert_allclose(_np(out["head"]), [2.0, 2.0, 2.0])  # passed through
    multi = optim.multi_transform({"frozen": optim.set_to_zero(), "train": optim.adam(0.1)},
                                  {"encoder": "frozen", "head": "train"})
    state = multi.init(params)
    out, state = functrans.jit(multi.update)(grads, state, params)
    np.testing.assert_array_equal(_np(out["encoder"]["w"]), [0.0, 0.0])
    np.testing.assert_allclose(_np(out["head"]), [-0.1] * 3, rtol=1e-5)
    with pytest.raises(ValueError, match="no corresponding transformation"):
        optim.multi_transform({"train": optim.sgd(0.1)}, {"encoder": "x", "head": "train"}).init(params)


def test_apply_every_and_multisteps():
    opt = optim.chain(optim.sgd(1.0), optim.apply_every(3))
    state = opt.init(np.zeros(1, np.float32))
    outs = []
    for g in [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]:
        u, state = opt.update(np.array([g], np.float32), state)
        outs.append(float(_np(u)[0]))
    assert outs == [0.0, 0.0, -6.0, 0.0, 0.0, -15.0]

    inner = optim.adam(0.1)
    multi = optim.MultiSteps(inner, every_k_schedule=2)
    params = np.array([1.0, -1.0], np.float32)
    state = multi.init(params)
    update = functrans.jit(multi.update)
    ref_state = inner.init(params)
    grads = [np.array([1.0, 2.0]), np.array([3.0, -2.0]), np.array([0.5, 0.5]), np.array([1.5, 0.5])]
    for i, g in enumerate(grads):
        u, state = update(g.astype(np.float32), state, params)
        if i % 2 == 0:
            np.testing.assert_array_equal(_np(u), [0.0, 0.0])
            assert not bool(multi.has_updated(state))
        else:
            mean = ((grads[i - 1] + g) / 2).astype(np.float32)
            ref_u, ref_state = inner.update(mean, ref_state, params)
            np.testing.assert_allclose(_np(u), _np(ref_u), rtol=1e-6)
            assert bool(multi.has_updated(state))
    assert int(state.gradient_step) == 2
    summed = optim.MultiSteps(optim.sgd(1.0), 2, use_grad_mean=False).gradient_transformation()
    s = summed.init(params)
    _, s = summed.update(np.ones(2, np.float32), s)
    u, s = summed.update(np.ones(2, np.float32), s)
    np.testing.assert_array_equal(_np(u), [-2.0, -2.0])


def test_schedules():
    def values(schedule, steps):
        return np.array([float(schedule(t)) for t in steps])

    steps = range(0, 14)
    np.testing.assert_allclose(values(optim.linear_schedule(1.0, 0.1, 9, transition_begin=2), steps),
                               [1.0 if t < 2 else max(0.1, 1.0 - 0.9 * (t - 2) / 9) for t in steps],
                               rtol=1e-6)
    np.testing.assert_allclose(values(optim.polynomial_schedule(2.0, 0.0, 3, 10), steps),
                               [2.0 * (1 - min(t, 10) / 10) ** 3 for t in steps], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(values(optim.cosine_decay_schedule(0.5, 10, alpha=0.1), steps),
                               [0.5 * (0.9 * 0.5 * (1 + math.cos(math.pi * min(t, 10) / 10)) + 0.1)
                                for t in steps], rtol=1e-5)
    warm = optim.warmup_cosine_decay_schedule(0.0, 1.0, 4, 12, end_value=0.2)
    expected = [t / 4 if t < 4 else 0.2 + 0.8 * 0.5 * (1 + math.cos(math.pi * min(t - 4, 8) / 8))
                for t in steps]
    np.testing.assert_allclose(values(warm, steps), expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(values(optim.exponential_decay(1.0, 4, 0.5), steps),
                               [0.5 ** (t / 4) for t in steps], rtol=1e-5)
    np.testing.assert_allclose(values(optim.exponential_decay(1.0, 4, 0.5, staircase=True,
                                                              transition_begin=2, end_value=0.3), steps),
                               [max(0.3, 0.5 ** math.floor(max(t - 2, 0) / 4)) for t in steps],
                               rtol=1e-6)
    np.testing.assert_allclose(values(optim.piecewise_constant_schedule(1.0, {3: 0.5, 8: 0.1}), steps),
                               [1.0 if t < 3 else 0.5 if t < 8 else 0.05 for t in steps], rtol=1e-6)
    joined = optim.join_schedules([optim.constant_schedule(1.0), optim.linear_schedule(2.0, 0.0, 4)], [5])
    np.testing.assert_allclose(values(joined, steps),
                               [1.0 if t < 5 else max(0.0, 2.0 - 0.5 * (t - 5)) for t in steps], rtol=1e-6)
    assert optim.constant_schedule(0.3)(7) == 0.3
    # traced counts: schedules run inside jit
    jitted = functrans.jit(optim.warmup_cosine_decay_schedule(0.0, 1.0, 4, 12))
    np.testing.assert_allclose(float(jitted(np.int32(2))), 0.5, rtol=1e-6)


def test_learning_rate_schedule_inside_an_optimizer():
    schedule = optim.linear_schedule(0.1, 0.0, 4)
    opt = optim.sgd(schedule)
    params = np.array([1.0], np.float32)
    state = opt.init(params)
    steps = []
    for _ in range(5):
        u, state = functrans.jit(opt.update)(np.array([1.0], np.float32), state, params)
        steps.append(float(_np(u)[0]))
    np.testing.assert_allclose(steps, [-0.1, -0.075, -0.05, -0.025, 0.0], atol=1e-7)


def test_optimizer_state_checkpoint_round_trip(tmp_path):
    import functrans.checkpoint as ckpt
    params = {k: jnp.asarray(v.astype(np.float32)) for k, v in START.items()}
    opt = optim.chain(optim.clip_by_global_norm(1.0), optim.adamw(0.1))
    state = opt.init(params)
    updates, state = opt.update(functrans.grad(_loss)(params), state, params)
    ckpt.save(tmp_path / "opt.safetensors", {"params": params, "opt": state})
    restored = ckpt.restore(tmp_path / "opt.safetensors", target={"params": params, "opt": state})
    assert functrans.tree_util.tree_structure(restored) == functrans.tree_util.tree_structure(
        {"params": params, "opt": state})
    u1, _ = opt.update(functrans.grad(_loss)(params), state, params)
    u2, _ = opt.update(functrans.grad(_loss)(params), restored["opt"], restored["params"])
    for k in u1:
        np.testing.assert_array_equal(_np(u1[k]), _np(u2[k]))


# =============================================================================================
# nn: log1mexp, the less common activations, logmeanexp, delta_orthogonal
# =============================================================================================


def test_log1mexp():
    x = np.array([1e-8, 1e-3, 0.3, np.log(2.0), 1.0, 5.0, 40.0])
    # float64 reference from whichever classic form is accurate at each x (expm1 below 0.5,
    # log1p above: a different switch point than the implementation's log 2)
    with np.errstate(divide="ignore"):
        reference = np.where(x < 0.5, np.log(-np.expm1(-x)), np.log1p(-np.exp(-x)))
    with x64():
        assert_same(nn.log1mexp(x), reference, np.float64, rtol=1e-14, atol=0)
        check_grads(nn.log1mexp, (np.array([0.2, 0.5, 0.69, 0.7, 3.0]),), order=2)
    got = nn.log1mexp(jnp.asarray(x, jnp.float32))
    assert_same(got, reference, np.float32, rtol=2e-6, atol=1e-30)
    assert nn.log1mexp(2).dtype == np.float32
    assert np.isnan(float(nn.log1mexp(-1.0)))
    assert float(nn.log1mexp(0.0)) == -np.inf
    assert float(functrans.grad(nn.log1mexp)(0.0)) == np.inf  # not NaN
    assert "log1mexp" in nn.__all__


def _np_softplus(x):
    return np.logaddexp(x, 0)


NN_CASES = [
    ("sparse_plus", nn.sparse_plus,
     lambda x: np.where(x <= -1, 0, np.where(x >= 1, x, (x + 1) ** 2 / 4))),
    ("sparse_sigmoid", nn.sparse_sigmoid, lambda x: np.clip((x + 1) / 2, 0, 1)),
    ("squareplus", nn.squareplus, lambda x: (x + np.sqrt(x * x + 4)) / 2),
    ("squareplus_b", lambda x: nn.squareplus(x, b=0.5), lambda x: (x + np.sqrt(x * x + 0.5)) / 2),
    ("mish", nn.mish, lambda x: x * np.tanh(_np_softplus(x))),
]


@pytest.mark.parametrize("name,fn,reference", NN_CASES, ids=[c[0] for c in NN_CASES])
def test_activation_matches_numpy(name, fn, reference):
    x = np.linspace(-3, 3, 25)
    got = fn(x.astype(np.float32))
    assert got.dtype == np.float32
    _close(got, reference(x), 2e-6)
    _jit_equals_eager(fn, x.astype(np.float32))
    # away from the kinks at +-1 of the sparse functions
    smooth = np.array([-2.3, -0.4, 0.3, 1.7])
    with x64():
        check_grads(fn, (smooth,), order=2 if name != "sparse_sigmoid" else 1)


def test_sparse_sigmoid_is_the_derivative_of_sparse_plus():
    x = np.array([-2.5, -0.5, 0.0, 0.4, 2.0], np.float32)
    derivative = functrans.vmap(functrans.grad(nn.sparse_plus))(x)
    _close(derivative, nn.sparse_sigmoid(x))


@pytest.mark.parametrize("axis,keepdims,masked", [(None, False, False), (1, False, False),
                                                  ((0, 2), True, False), (-1, False, True)])
def test_logmeanexp_matches_numpy(axis, keepdims, masked):
    x = RNG.normal(size=(3, 4, 5)) * 3
    where = RNG.random(size=x.shape) > 0.3 if masked else None
    if masked:
        where[..., 0] = True  # an empty slice has no mean
    weights = np.ones_like(x) if where is None else where.astype(float)
    expected = np.log(np.sum(np.exp(x) * weights, axis=axis, keepdims=keepdims)
                      / np.sum(weights, axis=axis, keepdims=keepdims))
    got = nn.logmeanexp(x.astype(np.float32), axis=axis, where=where, keepdims=keepdims)
    _close(got, expected, 1e-5)
    _close(nn.logmeanexp(np.array([1000.0, 1000.0], np.float32)), 1000.0)
    with x64():
        check_grads(lambda v: nn.logmeanexp(v, axis=axis, where=where, keepdims=keepdims),
                    (x,), order=1)


def test_delta_orthogonal():
    for shape in [(3, 2, 5), (3, 3, 4, 4), (3, 3, 3, 2, 6)]:
        w = np.asarray(nn.initializers.delta_orthogonal(scale=2.0)(random.PRNGKey(1), shape))
        assert w.shape == shape and w.dtype == np.float32
        centre = tuple((k - 1) // 2 for k in shape[:-2])
        matrix = w[centre]
        np.testing.assert_allclose(matrix @ matrix.T, 4 * np.eye(shape[-2]), atol=1e-5)
        # nothing outside the centre of the window
        assert np.abs(w).sum() == pytest.approx(np.abs(matrix).sum())
    with pytest.raises(ValueError):
        nn.initializers.delta_orthogonal()(random.PRNGKey(0), (3, 3))
    with pytest.raises(ValueError):
        nn.initializers.delta_orthogonal()(random.PRNGKey(0), (3, 5, 2))
