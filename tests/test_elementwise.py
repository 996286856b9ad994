"""Elementwise primitives beyond the generic checks of the primitive table
(``test_primitives.py``): integer edge cases, saturating casts, kinks, error messages."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import lax


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


@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_power_of_one_half_keeps_the_special_cases_of_pow(backend):
    """As in JAX, ``x ** 0.5`` is pow, not sqrt, at -0 and -inf: +0 and +inf (NumPy computes
    a power by one exponent of 0.5 as a square root, which gives -0 and NaN there)."""
    x = np.array([-0.0, -np.inf, np.inf, 0.0, 4.0, -1.0], np.float32)
    expected = np.array([0.0, np.inf, np.inf, 0.0, 2.0, np.nan], np.float32)
    for f in (lambda x: x ** 0.5, lambda x: lax.pow(x, np.float32(0.5)),
              lambda x: lax.pow(x[0], np.float32(0.5))):
        out = np.atleast_1d(np.asarray(functrans.jit(f, backend=backend)(x)))
        np.testing.assert_array_equal(out, expected[:out.size])
        assert not np.signbit(out[0])
