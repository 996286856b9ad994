"""Generic table-driven tests of the elementwise primitives: reference vs NumPy/SciPy, shape
rule vs reference output, numerical JVP/VJP (orders 1 and 2) in float64, vmap vs a Python
loop, and jit vs eager."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.special
from hypothesis import given, settings
from hypothesis import strategies as st

import functrans
import functrans.numpy as jnp
from functrans import core, lax
from functrans.primitives import elementwise as ew
from functrans.test_util import check_grads, x64

# name -> (lax function, NumPy/SciPy reference, input sampler, differentiable)
def _any(rng, shape):
    return rng.uniform(-2.0, 2.0, shape)


def _pos(rng, shape):
    return rng.uniform(0.2, 2.0, shape)


def _unit(rng, shape):
    return rng.uniform(-0.9, 0.9, shape)


def _gt1(rng, shape):
    return rng.uniform(1.2, 3.0, shape)


UNARY = {
    "neg": (lax.neg, np.negative, _any, True),
    "exp": (lax.exp, np.exp, _any, True),
    "exp2": (lax.exp2, np.exp2, _any, True),
    "log": (lax.log, np.log, _pos, True),
    "log1p": (lax.log1p, np.log1p, _pos, True),
    "expm1": (lax.expm1, np.expm1, _any, True),
    "tanh": (lax.tanh, np.tanh, _any, True),
    "logistic": (lax.logistic, scipy.special.expit, _any, True),
    "sin": (lax.sin, np.sin, _any, True),
    "cos": (lax.cos, np.cos, _any, True),
    "tan": (lax.tan, np.tan, _unit, True),
    "asin": (lax.asin, np.arcsin, _unit, True),
    "acos": (lax.acos, np.arccos, _unit, True),
    "atan": (lax.atan, np.arctan, _any, True),
    "sinh": (lax.sinh, np.sinh, _any, True),
    "cosh": (lax.cosh, np.cosh, _any, True),
    "asinh": (lax.asinh, np.arcsinh, _any, True),
    "acosh": (lax.acosh, np.arccosh, _gt1, True),
    "atanh": (lax.atanh, np.arctanh, _unit, True),
    "sqrt": (lax.sqrt, np.sqrt, _pos, True),
    "rsqrt": (lax.rsqrt, lambda x: 1 / np.sqrt(x), _pos, True),
    "cbrt": (lax.cbrt, np.cbrt, _pos, True),
    "abs": (lax.abs, np.abs, _any, True),
    "square": (lax.square, np.square, _any, True),
    "erf": (lax.erf, scipy.special.erf, _any, True),
    "erfc": (lax.erfc, scipy.special.erfc, _any, True),
    "erf_inv": (lax.erf_inv, scipy.special.erfinv, _unit, True),
    "lgamma": (lax.lgamma, scipy.special.gammaln, _pos, True),
    "digamma": (lax.digamma, scipy.special.digamma, _pos, True),
    "sign": (lax.sign, np.sign, _any, False),
    "floor": (lax.floor, np.floor, _any, False),
    "ceil": (lax.ceil, np.ceil, _any, False),
    "round": (lax.round, lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5), _any, False),
    "is_finite": (lax.is_finite, np.isfinite, _any, False),
}

BINARY = {
    "add": (lax.add, np.add, _any, True),
    "sub": (lax.sub, np.subtract, _any, True),
    "mul": (lax.mul, np.multiply, _any, True),
    "div": (lax.div, np.divide, _pos, True),
    "rem": (lax.rem, np.fmod, _pos, True),
    "pow": (lax.pow, np.power, _pos, True),
    "max": (lax.max, np.maximum, _any, True),
    "min": (lax.min, np.minimum, _any, True),
    "atan2": (lax.atan2, np.arctan2, _pos, True),
    "nextafter": (lax.nextafter, np.nextafter, _any, False),
    "eq": (lax.eq, np.equal, _any, False),
    "ne": (lax.ne, np.not_equal, _any, False),
    "lt": (lax.lt, np.less, _any, False),
    "le": (lax.le, np.less_equal, _any, False),
    "gt": (lax.gt, np.greater, _any, False),
    "ge": (lax.ge, np.greater_equal, _any, False),
}


def test_table_covers_every_float_primitive():
    covered = set(UNARY) | set(BINARY)
    float_ops = {n for n in list(ew.ELEMENTWISE_UNARY) + list(ew.ELEMENTWISE_BINARY)}
    untested = float_ops - covered - {
        "not", "population_count", "clz", "real", "imag", "conj", "integer_pow", "polygamma",
        "and", "or", "xor", "shift_left", "shift_right_logical", "shift_right_arithmetic",
        "complex"}
    assert not untested, f"elementwise primitives missing from the test table: {untested}"


shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)


@pytest.mark.parametrize("name", sorted(UNARY))
@settings(max_examples=8, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2 ** 16))
def test_unary_vs_numpy(name, shape, seed):
    fn, ref, sample, _ = UNARY[name]
    x = sample(np.random.default_rng(seed), shape).astype(np.float32)
    out = fn(x)
    expected = ref(x)
    assert out.shape == expected.shape
    assert out.dtype == (np.bool_ if expected.dtype == np.bool_ else np.float32)
    np.testing.assert_allclose(np.asarray(out, np.float64), expected, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", sorted(BINARY))
@settings(max_examples=8, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2 ** 16))
def test_binary_vs_numpy(name, shape, seed):
    fn, ref, sample, _ = BINARY[name]
    rng = np.random.default_rng(seed)
    x, y = (sample(rng, shape).astype(np.float32) for _ in range(2))
    out = fn(x, y)
    np.testing.assert_allclose(np.asarray(out, np.float64), ref(x, y), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", sorted(n for n, row in {**UNARY, **BINARY}.items() if row[3]))
def test_numerical_gradients(name):
    fn, _, sample, _ = {**UNARY, **BINARY}[name]
    arity = 1 if name in UNARY else 2
    rng = np.random.default_rng(0)
    with x64():
        args = [sample(rng, (3,)).astype(np.float64) for _ in range(arity)]
        if name in ("max", "min"):
            args[1] = args[0] + 0.5  # away from the kink
        check_grads(fn, args, order=2, modes=("fwd", "rev"), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", sorted({**UNARY, **BINARY}))
def test_vmap_matches_loop(name):
    fn, _, sample, _ = {**UNARY, **BINARY}[name]
    arity = 1 if name in UNARY else 2
    rng = np.random.default_rng(1)
    xs = [sample(rng, (4, 3)).astype(np.float32) for _ in range(arity)]
    in_axes = (0,) + (1,) * (arity - 1)
    xs_in = [xs[0]] + [x.T for x in xs[1:]]
    batched = functrans.vmap(fn, in_axes=in_axes)(*xs_in)
    looped = np.stack([np.asarray(fn(*[x[i] for x in xs])) for i in range(4)])
    np.testing.assert_array_equal(np.asarray(batched), looped)


@pytest.mark.parametrize("name", sorted({**UNARY, **BINARY}))
def test_jit_matches_eager(name):
    fn, _, sample, _ = {**UNARY, **BINARY}[name]
    arity = 1 if name in UNARY else 2
    rng = np.random.default_rng(2)
    xs = [sample(rng, (5,)).astype(np.float32) for _ in range(arity)]
    np.testing.assert_allclose(np.asarray(functrans.jit(fn)(*xs), np.float64),
                               np.asarray(fn(*xs), np.float64), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted({**UNARY, **BINARY}))
def test_shape_rule_agrees_with_reference(name):
    fn, _, sample, _ = {**UNARY, **BINARY}[name]
    arity = 1 if name in UNARY else 2
    xs = [sample(np.random.default_rng(3), (2, 3)).astype(np.float32) for _ in range(arity)]
    jaxpr = functrans.make_jaxpr(fn)(*xs)
    core.check_jaxpr(jaxpr)
    out = fn(*xs)
    (aval,) = jaxpr.out_avals
    assert aval.shape == out.shape and aval.dtype == out.dtype


def test_integer_ops_match_numpy():
    x = np.array([-7, -1, 0, 3, 9], np.int32)
    y = np.array([2, 3, 5, -2, 4], np.int32)
    np.testing.assert_array_equal(lax.div(x, y), np.trunc(x / y).astype(np.int32))
    np.testing.assert_array_equal(lax.rem(x, y), np.fmod(x, y))
    np.testing.assert_array_equal(lax.bitwise_and(x, y), x & y)
    np.testing.assert_array_equal(lax.bitwise_or(x, y), x | y)
    np.testing.assert_array_equal(lax.bitwise_xor(x, y), x ^ y)
    np.testing.assert_array_equal(lax.bitwise_not(x), ~x)
    s = np.array([0, 1, 2, 31, 40], np.int32)
    np.testing.assert_array_equal(lax.shift_left(x, s), np.where(s < 32, x << np.minimum(s, 31), 0))
    np.testing.assert_array_equal(lax.shift_right_arithmetic(x, s), x >> np.minimum(s, 31))
    np.testing.assert_array_equal(
        lax.shift_right_logical(x, s),
        np.where(s < 32, (x.view(np.uint32) >> np.minimum(s, 31).astype(np.uint32)).view(np.int32), 0))
    np.testing.assert_array_equal(lax.population_count(x),
                                  np.bitwise_count(x.view(np.uint32)).astype(np.int32))
    np.testing.assert_array_equal(lax.integer_pow(x, 3), x ** 3)


def test_convert_element_type_saturates_and_maps_nan_to_zero():
    x = np.array([np.nan, 1e10, -1e10, 2.7, -2.7], np.float32)
    out = lax.convert_element_type(x, np.int32)
    np.testing.assert_array_equal(out, [0, 2 ** 31 - 1, -2 ** 31, 2, -2])


@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_out_of_range_casts_are_quiet(backend, x64):
    # XLA converts NaN, infinities and out-of-range values without a warning; NumPy's astype
    # warns about the same casts
    f = functrans.jit(lambda a, b, c: (lax.convert_element_type(a, np.int32),
                                       lax.convert_element_type(b, np.float32),
                                       lax.convert_element_type(c, np.uint8)), backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ints, floats, small = f(np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 2.7], np.float32),
                                np.array([1e300, -1e300, 1.5]), np.array([300, -1], np.int32))
    np.testing.assert_array_equal(ints, [0, 2 ** 31 - 1, -2 ** 31, 2 ** 31 - 1, -2 ** 31, 2])
    np.testing.assert_array_equal(floats, np.array([np.inf, -np.inf, 1.5], np.float32))
    np.testing.assert_array_equal(small, np.array([44, 255], np.uint8))


def test_select_n_and_clamp():
    which = np.array([True, False, True])
    a, b = np.arange(3.0, dtype=np.float32), -np.arange(3.0, dtype=np.float32)
    np.testing.assert_array_equal(lax.select_n(which, a, b), np.where(which, b, a))
    idx = np.array([0, 2, 1], np.int32)
    c = np.full(3, 9.0, np.float32)
    np.testing.assert_array_equal(lax.select_n(idx, a, b, c), np.choose(idx, [a, b, c]))
    np.testing.assert_array_equal(lax.clamp(np.float32(0.5), a, np.float32(1.5)), np.clip(a, 0.5, 1.5))


def test_grad_at_kinks_follows_jax():
    assert functrans.grad(lambda x: lax.abs(x))(0.0) == 1.0  # JAX 0.10: the right-hand slope
    assert functrans.grad(lambda x: lax.abs(x))(-0.0) == 1.0
    assert functrans.grad(lambda x: lax.max(x, 0.0))(0.0) == 0.5  # ties split evenly
    assert np.isinf(functrans.grad(lambda x: lax.sqrt(x))(0.0))
    assert functrans.grad(lambda x: lax.pow(x, 0.0))(0.0) == 0.0


def test_double_where_trick_has_no_nan():
    def safe_log(x):
        safe = jnp_where(lax.gt(x, 0.0), x, 1.0)
        return jnp_where(lax.gt(x, 0.0), lax.log(safe), 0.0)

    def jnp_where(c, a, b):
        a, b = jnp.asarray(a, np.float32), jnp.asarray(b, np.float32)
        a = lax.broadcast_in_dim(a, np.shape(c), ()) if np.ndim(a) == 0 and np.ndim(c) else a
        b = lax.broadcast_in_dim(b, np.shape(c), ()) if np.ndim(b) == 0 and np.ndim(c) else b
        return lax.select(c, a, b)

    g = functrans.grad(lambda x: safe_log(x))(0.0)
    assert g == 0.0 and not np.isnan(g)


def test_shape_error_names_primitive_shapes_and_line():
    with pytest.raises(TypeError) as info:
        lax.add(np.ones(3, np.float32), np.ones(4, np.float32))
    text = str(info.value) + "".join(getattr(info.value, "__notes__", []))
    assert "add" in text and "float32[3]" in text and "float32[4]" in text
    assert "test_elementwise.py" in text


def test_integer_division_edge_cases():
    x = np.array([-2 ** 31, 7, -7, 5, -2 ** 31], np.int32)
    y = np.array([3, -2, 2, 0, -1], np.int32)
    np.testing.assert_array_equal(lax.div(x, y), [-715827882, -3, -3, -1, -2 ** 31])
    np.testing.assert_array_equal(lax.div(np.array([7, 5], np.uint8), np.array([2, 0], np.uint8)),
                                  [3, 255])
    np.testing.assert_array_equal(lax.population_count(np.array([-1, 3], np.int8)), [8, 2])
    z = lax.complex(np.float16(1.5), np.float16(2.0))
    assert z.dtype == np.complex64 and complex(z) == 1.5 + 2j


def test_lax_binary_functions_broadcast_scalars_and_size_one_axes():
    """As in JAX: rank-0 operands and size-1 axes (at equal rank) broadcast; nothing else."""
    import functrans.lax as lax
    import functrans.numpy as jnp
    np.testing.assert_array_equal(lax.add(jnp.float32(1), jnp.ones(3)), np.full(3, 2.0))
    np.testing.assert_array_equal(lax.sub(jnp.ones((1, 3)), jnp.ones((2, 1))), np.zeros((2, 3)))
    np.testing.assert_array_equal(lax.max(jnp.arange(3.0)[None], jnp.float32(1)), [[1, 1, 2]])
    with pytest.raises(TypeError, match="same shape"):
        lax.add(jnp.ones(3), jnp.ones((2, 3)))
    with pytest.raises(TypeError):
        lax.add(jnp.ones(3, jnp.int32), jnp.ones(3))
    grad = functrans.grad(lambda a: jnp.sum(lax.mul(a, jnp.arange(6.0).reshape(2, 3))))
    np.testing.assert_array_equal(grad(jnp.ones((1, 3))), [[3.0, 5.0, 7.0]])
