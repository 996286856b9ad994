"""Windowed reductions (pooling), lax.reduce, associative_scan and optimization_barrier:
against NumPy loops, finite differences, jit and vmap."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import functrans as ft
import functrans.numpy as jnp
from functrans import lax
from functrans.test_util import check_grads, x64 as enable_x64

# =============================================================================================
# NumPy loop references
# =============================================================================================


def _dilated(size, d):
    return 0 if size == 0 else (size - 1) * d + 1


def _out_shape(shape, window, strides, padding, base, wdil):
    out = []
    for n, w, s, (lo, hi), b, d in zip(shape, window, strides, padding, base, wdil):
        size, extent = _dilated(n, b) + lo + hi, _dilated(w, d)
        out.append((size - extent) // s + 1 if size >= extent else 0)
    return tuple(out)


def _window_members(o, window, strides, padding, base, wdil, shape):
    """For output index ``o``: the operand index of each window element (None for padding or a
    dilation hole), in row-major window order."""
    for k in itertools.product(*(range(w) for w in window)):
        index = []
        for od, kd, s, (lo, _), b, d, n in zip(o, k, strides, padding, base, wdil, shape):
            p = od * s + kd * d - lo
            if p % b or not 0 <= p // b < n:
                index = None
                break
            index.append(p // b)
        yield None if index is None else tuple(index)


def loop_reduce_window(x, kind, window, strides, padding, base, wdil, init=None):
    x = np.asarray(x)
    identity = {"sum": 0, "max": -np.inf, "min": np.inf}[kind]
    if init is None:
        init = identity
    fold = {"sum": lambda a, b: a + b, "max": max, "min": min}[kind]
    out_shape = _out_shape(x.shape, window, strides, padding, base, wdil)
    out = np.zeros(out_shape, np.float64)
    for o in np.ndindex(*out_shape):
        acc = init
        for index in _window_members(o, window, strides, padding, base, wdil, x.shape):
            acc = fold(acc, init if index is None else float(x[index]))
        out[o] = acc
    return out


def loop_sum_transpose(ct, shape, window, strides, padding, base, wdil):
    """A^T ct for A = reduce_window_sum, by scattering each output's cotangent."""
    grad = np.zeros(shape)
    for o in np.ndindex(*ct.shape):
        for index in _window_members(o, window, strides, padding, base, wdil, shape):
            if index is not None:
                grad[index] += ct[o]
    return grad


def loop_chooser_grad(x, ct, kind, window, strides, padding, base, wdil):
    """The cotangent of each output goes to the first maximum (minimum) of its window."""
    grad = np.zeros(x.shape)
    pad_value = -np.inf if kind == "max" else np.inf
    better = (lambda a, b: a > b) if kind == "max" else (lambda a, b: a < b)
    for o in np.ndindex(*ct.shape):
        best, where = None, None
        for index in _window_members(o, window, strides, padding, base, wdil, x.shape):
            value = pad_value if index is None else x[index]
            if best is None or better(value, best):
                best, where = value, index
        if where is not None:
            grad[where] += ct[o]
    return grad


# =============================================================================================
# Random window configurations
# =============================================================================================


@st.composite
def window_configs(draw, max_ndim=3):
    ndim = draw(st.integers(1, max_ndim))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(ndim))
    window = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
    strides = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
    padding = tuple((draw(st.integers(-1, 2)), draw(st.integers(-1, 2))) for _ in range(ndim))
    base = tuple(draw(st.integers(1, 2)) for _ in range(ndim))
    wdil = tuple(draw(st.integers(1, 2)) for _ in range(ndim))
    for n, (lo, hi), b in zip(shape, padding, base):
        assume(_dilated(n, b) + lo + hi >= 0)
    return shape, window, strides, padding, base, wdil


def _call(fn, x, config):
    _, window, strides, padding, base, wdil = config
    return fn(x, window, strides, padding, base, wdil)


def _distinct(rng, shape, dtype=np.float32):
    """Values without ties (spaced by at least 0.1), so every window has one maximum."""
    n = int(np.prod(shape))
    return (rng.permutation(n).astype(np.float64) * 0.1 - n * 0.05).reshape(shape).astype(dtype)


# =============================================================================================
# Forward values against loops
# =============================================================================================


@settings(max_examples=20, deadline=None)
@given(window_configs(), st.sampled_from(["sum", "max", "min"]))
def test_reduce_window_matches_loop(config, kind):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(config[0]).astype(np.float32)
    fn = {"sum": lax.reduce_window_sum, "max": lax.reduce_window_max,
          "min": lax.reduce_window_min}[kind]
    out = _call(fn, jnp.asarray(x), config)
    expected = loop_reduce_window(x, kind, *config[1:])
    assert out.shape == expected.shape
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5)


@settings(max_examples=20, deadline=None)
@given(window_configs(max_ndim=2), st.sampled_from([("add", 0.0), ("max", -np.inf),
                                                    ("min", np.inf), ("add", 1.5),
                                                    ("max", 0.25)]))
def test_generic_reduce_window_with_init(config, computation_init):
    """Padding and holes hold the init value, and each window folds it in once."""
    name, init = computation_init
    rng = np.random.default_rng(1)
    x = rng.standard_normal(config[0]).astype(np.float32)
    computation = {"add": lax.add, "max": lax.max, "min": lax.min}[name]
    kind = {"add": "sum", "max": "max", "min": "min"}[name]
    _, window, strides, padding, base, wdil = config
    out = lax.reduce_window(jnp.asarray(x), init, computation, window, strides, padding, base,
                            wdil)
    expected = loop_reduce_window(x, kind, window, strides, padding, base, wdil, init=init)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5)


def test_integer_max_and_sum():
    x = np.arange(24, dtype=np.int32).reshape(4, 6) * 7 % 11
    out = lax.reduce_window(jnp.asarray(x), np.iinfo(np.int32).min, lax.max, (2, 3), (1, 2),
                            ((1, 0), (0, 1)))
    expected = loop_reduce_window(x, "max", (2, 3), (1, 2), ((1, 0), (0, 1)), (1, 1), (1, 1))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(out), expected.astype(np.int32))
    total = lax.reduce_window(jnp.asarray(x), 0, lax.add, (2, 2), (2, 2), "VALID")
    assert total.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(total), x.reshape(2, 2, 3, 2).sum((1, 3)))


def test_user_computations_are_recognised():
    x = jnp.asarray(np.arange(12.0, dtype=np.float32).reshape(3, 4))
    by_lambda = lax.reduce_window(x, 0.0, lambda a, b: a + b, (2, 2), (1, 1), "VALID")
    by_jnp = lax.reduce_window(x, -jnp.inf, jnp.maximum, (2, 2), (1, 1), "VALID")
    np.testing.assert_allclose(np.asarray(by_lambda), [[10, 14, 18], [26, 30, 34]])
    np.testing.assert_allclose(np.asarray(by_jnp), [[5, 6, 7], [9, 10, 11]])


def test_same_padding_uses_the_dilated_window():
    x = jnp.asarray(np.arange(7.0, dtype=np.float32))
    out = lax.reduce_window(x, 0.0, lax.add, (3,), (2,), "SAME", window_dilation=(2,))
    pads = lax.padtype_to_pads((7,), (5,), (2,), "SAME")
    assert out.shape == (4,) and pads == ((2, 2),)
    np.testing.assert_allclose(np.asarray(out),
                               loop_reduce_window(np.arange(7.0), "sum", (3,), (2,), pads,
                                                  (1,), (2,)))


# =============================================================================================
# Pooling as flax writes it
# =============================================================================================


def flax_pool(inputs, init, reduce_fn, window_shape, strides, padding):
    dims = (1,) + window_shape + (1,)
    strides = (1,) + strides + (1,)
    if not isinstance(padding, str):
        padding = ((0, 0),) + tuple(padding) + ((0, 0),)
    return lax.reduce_window(inputs, init, reduce_fn, dims, strides, padding)


def avg_pool(x, window_shape, strides, padding):
    return flax_pool(x, 0.0, lax.add, window_shape, strides, padding) / np.prod(window_shape)


def max_pool(x, window_shape, strides, padding):
    return flax_pool(x, -jnp.inf, lax.max, window_shape, strides, padding)


def test_flax_pools_valid():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 6, 8, 3)).astype(np.float32)
    blocks = x.reshape(2, 3, 2, 4, 2, 3)
    np.testing.assert_allclose(np.asarray(avg_pool(jnp.asarray(x), (2, 2), (2, 2), "VALID")),
                               blocks.mean((2, 4)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(max_pool(jnp.asarray(x), (2, 2), (2, 2), "VALID")),
                               blocks.max((2, 4)))


@pytest.mark.parametrize("window, strides", [((3, 3), (1, 1)), ((3, 2), (2, 2)),
                                             ((2, 2), (2, 1))])
def test_flax_pools_same(window, strides):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 7, 2)).astype(np.float32)
    pads = lax.padtype_to_pads((5, 7), window, strides, "SAME")
    config = ((1,) + window + (1,), (1,) + strides + (1,), ((0, 0),) + pads + ((0, 0),),
              (1,) * 4, (1,) * 4)
    out = max_pool(jnp.asarray(x), window, strides, "SAME")
    assert out.shape == (2, -(-5 // strides[0]), -(-7 // strides[1]), 2)
    np.testing.assert_allclose(np.asarray(out), loop_reduce_window(x, "max", *config))
    avg = avg_pool(jnp.asarray(x), window, strides, "SAME")
    np.testing.assert_allclose(np.asarray(avg),
                               loop_reduce_window(x, "sum", *config) / np.prod(window),
                               rtol=1e-5, atol=1e-6)


# =============================================================================================
# Transposition and gradients
# =============================================================================================


@settings(max_examples=20, deadline=None)
@given(window_configs())
def test_sum_transpose_is_the_adjoint(config):
    """<ct, A x> == <A^T ct, x>, and A^T ct equals the loop's scatter of ct onto the windows."""
    with enable_x64():
        _check_sum_adjoint(config)


def _check_sum_adjoint(config):
    rng = np.random.default_rng(4)
    shape = config[0]
    x = rng.standard_normal(shape)
    y, pullback = ft.vjp(lambda v: _call(lax.reduce_window_sum, v, config), jnp.asarray(x))
    ct = rng.standard_normal(y.shape)
    (x_ct,) = pullback(jnp.asarray(ct))
    assert x_ct.shape == shape and x_ct.dtype == np.float64
    np.testing.assert_allclose(np.sum(ct * np.asarray(y)), np.sum(np.asarray(x_ct) * x),
                               rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(x_ct), loop_sum_transpose(ct, shape, *config[1:]),
                               rtol=1e-10, atol=1e-10)


@settings(max_examples=20, deadline=None)
@given(window_configs(), st.sampled_from(["max", "min"]))
def test_chooser_gradient_goes_to_the_selected_element(config, kind):
    with enable_x64():
        _check_chooser_gradient(config, kind)


def _check_chooser_gradient(config, kind):
    rng = np.random.default_rng(5)
    x = _distinct(rng, config[0], np.float64)
    fn = lax.reduce_window_max if kind == "max" else lax.reduce_window_min
    y, pullback = ft.vjp(lambda v: _call(fn, v, config), jnp.asarray(x))
    ct = rng.standard_normal(y.shape)
    (x_ct,) = pullback(jnp.asarray(ct))
    np.testing.assert_allclose(np.asarray(x_ct),
                               loop_chooser_grad(x, ct, kind, *config[1:]), rtol=1e-12)
    # forward mode: the tangent of the selected element (zero where it is padding)
    t = rng.standard_normal(x.shape)
    _, tangent = ft.jvp(lambda v: _call(fn, v, config), (jnp.asarray(x),), (jnp.asarray(t),))
    np.testing.assert_allclose(np.sum(np.asarray(tangent) * ct), np.sum(np.asarray(x_ct) * t),
                               rtol=1e-10, atol=1e-10)


def test_max_pool_gradient_on_ties_picks_the_first_element():
    """As in JAX: one element per window receives the cotangent (the first maximum in window
    order), and overlapping windows accumulate."""
    x = jnp.asarray(np.array([[0.0, 0.0, 0.0], [0.0, 5.0, 5.0], [0.0, 5.0, 5.0]], np.float32))
    grad = ft.grad(lambda v: lax.reduce_window(v, -jnp.inf, lax.max, (2, 2), (1, 1),
                                               "VALID").sum())(x)
    np.testing.assert_array_equal(np.asarray(grad), [[0, 0, 0], [0, 4, 0], [0, 0, 0]])


SUM_CASES = [((5,), (3,), (2,), ((1, 2),), (1,), (2,)),
             ((4, 5), (2, 3), (1, 2), ((0, 1), (-1, 2)), (2, 1), (1, 2)),
             ((3, 4, 2), (2, 2, 1), (2, 1, 1), "SAME", (1, 1, 1), (1, 1, 1))]


@pytest.mark.parametrize("case", SUM_CASES)
def test_sum_check_grads_order_2(x64, case):
    shape, window, strides, padding, base, wdil = case
    x = np.random.default_rng(6).standard_normal(shape)

    def f(v):
        return jnp.sin(lax.reduce_window(v, 0.0, lax.add, window, strides, padding, base, wdil))

    check_grads(f, (jnp.asarray(x),), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("computation, init", [(lax.max, -np.inf), (lax.min, np.inf)])
@pytest.mark.parametrize("padding", ["VALID", "SAME"])
def test_chooser_check_grads(x64, computation, init, padding):
    x = _distinct(np.random.default_rng(7), (2, 5, 4, 2), np.float64)

    def f(v):
        return lax.reduce_window(v * v * v, init, computation, (1, 3, 2, 1), (1, 2, 1, 1), padding)

    check_grads(f, (jnp.asarray(x),), order=1, modes=("fwd", "rev"), eps=1e-4)


def test_second_order_through_max_pool(x64):
    """The max-pool tangent is linear in the input tangent, so a Hessian-vector product works."""
    x = _distinct(np.random.default_rng(8), (6, 6), np.float64)

    def loss(v):
        return jnp.sum(max_pool(v[None, :, :, None], (2, 2), (2, 2), "VALID") ** 3)

    check_grads(loss, (jnp.asarray(x),), order=2, modes=("fwd", "rev"), eps=1e-4)


# =============================================================================================
# jit and vmap
# =============================================================================================


def test_jit_matches_eager():
    rng = np.random.default_rng(9)
    x = jnp.asarray(_distinct(rng, (2, 6, 5, 3)))

    def model(v):
        pooled = max_pool(v, (3, 3), (2, 2), "SAME")
        return jnp.sum(avg_pool(jnp.tanh(pooled), (2, 2), (1, 1), "VALID") ** 2)

    for fn in (model, ft.grad(model)):
        np.testing.assert_allclose(np.asarray(ft.jit(fn)(x)), np.asarray(fn(x)),
                                   rtol=1e-5, atol=1e-6)
    dilated = ft.jit(lambda v: lax.reduce_window_min(v, (2, 2, 1, 1), (1, 2, 1, 1),
                                                     ((1, 0), (0, 2), (0, 0), (0, 0)),
                                                     (1, 2, 1, 1), (1, 2, 1, 1)))
    np.testing.assert_allclose(np.asarray(dilated(x)),
                               loop_reduce_window(np.asarray(x), "min", (2, 2, 1, 1),
                                                  (1, 2, 1, 1),
                                                  ((1, 0), (0, 2), (0, 0), (0, 0)),
                                                  (1, 2, 1, 1), (1, 2, 1, 1)))


@settings(max_examples=15, deadline=None)
@given(window_configs(max_ndim=2), st.sampled_from(["sum", "max"]), st.integers(0, 2))
def test_vmap_matches_loop(config, kind, in_axis):
    rng = np.random.default_rng(10)
    shape = config[0]
    in_axis = min(in_axis, len(shape))
    batch = 3
    xs = _distinct(rng, shape[:in_axis] + (batch,) + shape[in_axis:])
    fn = lax.reduce_window_sum if kind == "sum" else lax.reduce_window_max

    def f(v):
        return _call(fn, v, config)

    def g(v):  # gradient of a weighted sum: exercises the batched jvp and transpose rules
        out = f(v)
        weights = jnp.asarray(np.arange(1.0, 1.0 + out.size, dtype=np.float32).reshape(out.shape))
        return jnp.sum(out * weights)

    for fun in (f, ft.grad(g)):
        batched = ft.vmap(fun, in_axes=in_axis)(jnp.asarray(xs))
        looped = np.stack([np.asarray(fun(jnp.asarray(np.take(xs, i, axis=in_axis))))
                           for i in range(batch)])
        np.testing.assert_allclose(np.asarray(batched), looped, rtol=1e-5, atol=1e-5)


def test_shape_errors_name_the_primitive():
    x = jnp.ones((3, 4))
    with pytest.raises(TypeError, match=r"reduce_window_sum.*rank 2.*float32\[3,4\]"):
        lax.reduce_window_sum(x, (2,), (1,), ((0, 0),))
    with pytest.raises(TypeError, match=r"reduce_window_max: window_strides must be positive"):
        lax.reduce_window_max(x, (2, 2), (0, 1), "VALID")
    with pytest.raises(TypeError, match=r"reduce_window_min: the padding crops"):
        lax.reduce_window_min(x, (1, 1), (1, 1), ((-2, -2), (0, 0)))
    with pytest.raises(TypeError, match=r"reduce_window_sum.*bool"):
        lax.reduce_window_sum(jnp.ones((3,), bool), (2,), (1,), "VALID")
    with pytest.raises(NotImplementedError, match="reduce_window"):
        lax.reduce_window(x, 1.0, lax.mul, (2, 2), (1, 1), "VALID")


# =============================================================================================
# lax.reduce
# =============================================================================================


@pytest.mark.parametrize("computation, init, np_fn, dtype", [
    (lax.add, 0.0, np.sum, np.float32), (lax.mul, 1.0, np.prod, np.float32),
    (lax.max, -np.inf, np.max, np.float32), (lax.min, np.inf, np.min, np.float32),
    (lambda a, b: a + b, 0, np.sum, np.int32), (lax.bitwise_and, True, np.all, np.bool_),
    (lax.bitwise_or, False, np.any, np.bool_), (lax.bitwise_or, 0, np.bitwise_or.reduce, np.int32)])
def test_reduce(computation, init, np_fn, dtype):
    rng = np.random.default_rng(11)
    x = rng.integers(0, 3, (3, 4, 2)).astype(dtype) if dtype != np.float32 else \
        rng.standard_normal((3, 4, 2)).astype(dtype)
    out = lax.reduce(jnp.asarray(x), init, computation, (0, 2))
    assert out.dtype == dtype
    np.testing.assert_allclose(np.asarray(out), np_fn(x, axis=(0, 2)), rtol=1e-5)


def test_reduce_non_identity_init_and_pytrees():
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(np.asarray(lax.reduce(jnp.asarray(x), 10.0, lax.add, (1,))),
                               [13.0, 22.0])
    np.testing.assert_allclose(np.asarray(lax.reduce(jnp.asarray(x), 4.0, lax.max, (1,))),
                               [4.0, 5.0])
    (out,) = lax.reduce((jnp.asarray(x),), (0.0,), lax.add, (0,))
    np.testing.assert_allclose(np.asarray(out), [3.0, 5.0, 7.0])
    grad = ft.grad(lambda v: lax.reduce(v, 1.0, lax.mul, (0, 1)))(jnp.asarray(x + 1))
    np.testing.assert_allclose(np.asarray(grad), np.prod(x + 1) / (x + 1), rtol=1e-5)
    with pytest.raises(NotImplementedError, match="reduce"):
        lax.reduce(jnp.asarray(x), 0.0, lax.sub, (0,))
    with pytest.raises(NotImplementedError, match="reduce"):
        lax.reduce((jnp.asarray(x), jnp.asarray(x)), (0.0, 0.0), lambda a, b: (a, b), (0,))


# =============================================================================================
# associative_scan
# =============================================================================================


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 8, 9, 13])
@pytest.mark.parametrize("reverse", [False, True])
def test_associative_scan_add(n, reverse):
    x = np.random.default_rng(12).standard_normal((2, n, 3)).astype(np.float32)
    out = lax.associative_scan(lax.add, jnp.asarray(x), reverse=reverse, axis=1)
    expected = np.flip(np.cumsum(np.flip(x, 1), 1), 1) if reverse else np.cumsum(x, 1)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5)


def _compose(first, second):
    """Affine maps v -> a v + b applied in order: the recurrence h_t = a_t h_{t-1} + b_t."""
    a1, b1 = first
    a2, b2 = second
    return a1 * a2, a2 * b1 + b2


@pytest.mark.parametrize("reverse", [False, True])
def test_associative_scan_pytree_linear_recurrence(reverse):
    rng = np.random.default_rng(13)
    a = rng.uniform(0.5, 1.0, 7).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float32)
    A, B = lax.associative_scan(_compose, (jnp.asarray(a), jnp.asarray(b)), reverse=reverse)
    order = range(6, -1, -1) if reverse else range(7)
    h, expected = 0.0, np.zeros(7)
    for t in order:
        h = a[t] * h + b[t]
        expected[t] = h
    np.testing.assert_allclose(np.asarray(B), expected, rtol=1e-5, atol=1e-6)
    jitted = ft.jit(lambda a, b: lax.associative_scan(_compose, (a, b), reverse=reverse))
    np.testing.assert_allclose(np.asarray(jitted(jnp.asarray(a), jnp.asarray(b))[1]), expected,
                               rtol=1e-5, atol=1e-6)


def test_associative_scan_grad_and_vmap(x64):
    rng = np.random.default_rng(14)
    x = rng.uniform(0.5, 1.5, (6,))
    check_grads(lambda v: lax.associative_scan(lax.mul, v), (jnp.asarray(x),), order=2)
    xs = rng.standard_normal((3, 6))
    batched = ft.vmap(lambda v: lax.associative_scan(lax.max, v))(jnp.asarray(xs))
    np.testing.assert_allclose(np.asarray(batched), np.maximum.accumulate(xs, axis=1))


# =============================================================================================
# optimization_barrier
# =============================================================================================


def test_optimization_barrier_is_an_identity_under_transforms(x64):
    x = np.random.default_rng(15).standard_normal((3, 2))

    def f(v):
        a, b = lax.optimization_barrier((jnp.sin(v), v * 2.0))
        return a * b

    np.testing.assert_allclose(np.asarray(f(jnp.asarray(x))), np.sin(x) * 2 * x)
    np.testing.assert_allclose(np.asarray(ft.jit(f)(jnp.asarray(x))), np.sin(x) * 2 * x)
    check_grads(f, (jnp.asarray(x),), order=2)
    np.testing.assert_allclose(np.asarray(ft.vmap(f)(jnp.asarray(x))), np.sin(x) * 2 * x)
    assert "optimization_barrier" in str(ft.make_jaxpr(f)(jnp.asarray(x)))


# =============================================================================================
# Against JAX, when it is installed
# =============================================================================================


@pytest.mark.parametrize("config", [
    ((1, 6, 7, 2), (1, 3, 3, 1), (1, 2, 2, 1), "SAME", None, None),
    ((5, 6), (2, 3), (2, 1), ((1, 0), (2, -1)), (2, 1), (1, 2))])
@pytest.mark.parametrize("name", ["add", "max"])
def test_against_jax(config, name):
    jax = pytest.importorskip("jax")
    shape, window, strides, padding, base, wdil = config
    x = _distinct(np.random.default_rng(16), shape)
    init = 0.0 if name == "add" else -np.inf

    def ours(v):
        return lax.reduce_window(v, init, getattr(lax, name), window, strides, padding, base, wdil)

    def theirs(v):
        return jax.lax.reduce_window(v, init, getattr(jax.lax, name), window, strides, padding,
                                     base, wdil)

    np.testing.assert_allclose(np.asarray(ours(jnp.asarray(x))), np.asarray(theirs(x)),
                               rtol=1e-5, atol=1e-5)
    if name == "max" and wdil is not None and any(d != 1 for d in wdil):
        return  # JAX has no reverse mode for max pooling with window dilation (functrans has)
    np.testing.assert_allclose(np.asarray(ft.grad(lambda v: jnp.sum(ours(v) ** 2))(jnp.asarray(x))),
                               np.asarray(jax.grad(lambda v: (theirs(v) ** 2).sum())(x)),
                               rtol=1e-4, atol=1e-4)


def test_init_value_as_array_or_traced():
    x = np.random.default_rng(17).standard_normal((4, 5)).astype(np.float32)
    config = ((2, 2), (1, 2), ((1, 0), (0, 1)), (1, 1), (1, 1))
    as_array = lax.reduce_window(jnp.asarray(x), jnp.array(-np.inf), lax.max, *config)
    np.testing.assert_allclose(np.asarray(as_array), loop_reduce_window(x, "max", *config))
    # a known identity init adds nothing to the program
    staged = ft.make_jaxpr(lambda v: lax.reduce_window(v, jnp.array(-np.inf), lax.max, *config))
    assert [e.primitive.name for e in staged(jnp.asarray(x)).jaxpr.eqns] == ["reduce_window_max"]

    def pooled(v, init):
        return lax.reduce_window(v, init, lax.add, *config)

    out = ft.jit(pooled)(jnp.asarray(x), jnp.float32(0.5))
    np.testing.assert_allclose(np.asarray(out), loop_reduce_window(x, "sum", *config, init=0.5),
                               rtol=1e-5, atol=1e-5)
    batched = ft.vmap(lambda v, i: lax.reduce_window(v, i, lax.max, *config))(
        jnp.asarray(np.stack([x, x])), jnp.asarray(np.array([-np.inf, 0.0], np.float32)))
    np.testing.assert_allclose(np.asarray(batched[1]),
                               np.maximum(loop_reduce_window(x, "max", *config), 0.0))


def test_low_precision_and_float64(x64):
    x = np.random.default_rng(18).standard_normal((6,))
    out = lax.reduce_window_sum(jnp.asarray(x), (3,), (1,), "VALID")
    assert out.dtype == np.float64
    np.testing.assert_allclose(np.asarray(out), np.convolve(x, np.ones(3), "valid"), rtol=1e-12)
    half = lax.reduce_window_max(jnp.asarray(x.astype(np.float16)), (2,), (2,), "VALID")
    assert half.dtype == np.float16
    np.testing.assert_array_equal(np.asarray(half), x.astype(np.float16).reshape(3, 2).max(1))


def _first_max_gradient(x, window, ct):
    """NumPy oracle: each window's cotangent goes to its first maximum (row-major within the
    window), for windows that tile ``x`` (stride = window, VALID)."""
    out = np.zeros_like(x)
    for index in np.ndindex(ct.shape):
        corner = tuple(i * w for i, w in zip(index, window))
        block = x[tuple(slice(c, c + w) for c, w in zip(corner, window))]
        first = np.unravel_index(np.argmax(block), block.shape)
        out[tuple(c + f for c, f in zip(corner, first))] += ct[index]
    return out


@pytest.mark.parametrize("shape,window", [((2, 9, 8, 3), (1, 2, 2, 1)), ((3, 7, 6), (1, 3, 2)),
                                          ((4, 6), (2, 3)), ((5,), (1,))])
def test_max_pool_gradient_of_tiling_windows_is_elementwise(shape, window):
    """Windows that tile the operand (stride = window): the gradient goes to the first
    maximum of each window, ties included, and compiles without a scatter."""
    rng = np.random.default_rng(8)
    x = rng.integers(0, 3, shape).astype(np.float32)  # many ties
    pool = lambda v: lax.reduce_window(v, -np.inf, lax.max, window, window, "VALID")  # noqa: E731
    out_shape = ft.eval_shape(pool, x).shape
    ct = rng.standard_normal(out_shape).astype(np.float32)
    grad = lambda v: ft.vjp(pool, v)[1](ct)[0]  # noqa: E731
    expected = _first_max_gradient(x, window, ct)
    np.testing.assert_allclose(np.asarray(grad(x)), expected, rtol=1e-6, atol=1e-6)
    compiled = ft.jit(grad)
    np.testing.assert_allclose(np.asarray(compiled(x)), expected, rtol=1e-6, atol=1e-6)
    assert "scatter" not in compiled.lower(x).compile()._executable.program.describe()
