"""Compiled convolutions (im2col + matrix product, backends/compiler/decompose.py)
against the reference implementation, over layouts, strides, paddings, dilations and
groups, forward and backward."""
from __future__ import annotations

import re

import numpy as np
import pytest

import functrans
from functrans import lax
from functrans.backends.compiler.decompose import decompose_closed

CASES = [
    # (lhs shape, rhs shape, strides, padding, lhs_dilation, rhs_dilation, dimension numbers, groups)
    ((2, 9, 8, 3), (3, 3, 3, 5), (1, 1), "SAME", None, None, ("NHWC", "HWIO", "NHWC"), 1),
    ((2, 3, 9, 8), (5, 3, 3, 2), (2, 3), "VALID", None, None, ("NCHW", "OIHW", "NCHW"), 1),
    ((1, 10, 7, 4), (2, 3, 2, 6), (2, 1), ((1, 2), (0, 1)), None, (2, 1), ("NHWC", "HWIO", "NHWC"), 2),
    ((2, 6, 5, 4), (3, 3, 4, 2), (1, 1), ((2, 2), (1, -1)), (2, 1), None, ("NHWC", "HWIO", "NCHW"), 1),
    ((2, 4, 11), (6, 2, 3), (3,), ((2, 1),), None, (2,), ("NCH", "OIH", "NCH"), 2),
    ((1, 5, 6, 4, 2), (2, 3, 2, 2, 3), (1, 2, 1), "SAME", None, None,
     ("NDHWC", "DHWIO", "NDHWC"), 1),
    ((3, 8, 8, 6), (1, 1, 6, 4), (1, 1), "VALID", None, None, ("NHWC", "HWIO", "NHWC"), 1),
    ((2, 7, 7, 6), (3, 3, 1, 6), (2, 2), "SAME", None, None, ("NHWC", "HWIO", "NHWC"), 6),
]


def _conv(case):
    _, _, strides, padding, lhs_dil, rhs_dil, dn, groups = case

    def f(x, w):
        return lax.conv_general_dilated(x, w, strides, padding, lhs_dil, rhs_dil, dn,
                                        feature_group_count=groups)
    return f


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_compiled_convolution_equals_reference(case):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(case[0]).astype(np.float32)
    w = rng.standard_normal(case[1]).astype(np.float32)
    f = _conv(case)
    expected = np.asarray(f(x, w))  # eager: the reference implementation
    closed = functrans.make_jaxpr(f)(x, w)
    rewritten = decompose_closed(closed)
    assert "conv_general_dilated[" not in str(rewritten)
    for backend in ("llvm", "reference"):
        got = np.asarray(functrans.jit(f, backend=backend)(x, w))
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    # the backward pass: its transposed convolutions are decomposed too
    loss = lambda x, w: (f(x, w) ** 2).sum()  # noqa: E731
    grads = functrans.jit(functrans.grad(loss, argnums=(0, 1)))(x, w)
    ref = functrans.grad(loss, argnums=(0, 1))(x, w)
    for a, b in zip(grads, ref):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-3, atol=1e-3)


def test_what_is_left_alone():
    x = np.ones((2, 4, 5), np.int32)
    w = np.ones((3, 4, 2), np.int32)
    f = lambda x, w: lax.conv_general_dilated(x, w, (1,), "SAME")  # noqa: E731
    closed = functrans.make_jaxpr(f)(x, w)
    assert decompose_closed(closed) is closed  # integers: the reference implementation
    np.testing.assert_array_equal(np.asarray(functrans.jit(f)(x, w)), np.asarray(f(x, w)))
    xb = np.ones((4, 3, 5), np.float32)
    wb = np.ones((2, 3, 2), np.float32)
    g = lambda x, w: lax.conv_general_dilated(x, w, (1,), "VALID", batch_group_count=2)  # noqa: E731
    closed = functrans.make_jaxpr(g)(xb, wb)
    assert decompose_closed(closed) is closed  # batch groups are not rewritten
    np.testing.assert_allclose(np.asarray(functrans.jit(g)(xb, wb)), np.asarray(g(xb, wb)))


def test_convolutions_inside_loops_are_rewritten():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 6, 6, 2)).astype(np.float32)
    w = rng.standard_normal((3, 3, 2, 2)).astype(np.float32) * 0.3

    def f(x, w):
        step = lambda _, h: lax.conv_general_dilated(  # noqa: E731
            h, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return lax.fori_loop(0, 3, step, x)

    closed = functrans.make_jaxpr(f)(x, w)
    assert "conv_general_dilated[" not in str(decompose_closed(closed))
    np.testing.assert_allclose(np.asarray(functrans.jit(f)(x, w)), np.asarray(f(x, w)),
                               rtol=1e-4, atol=1e-4)


WINDOWS = [
    # (shape, window, strides, padding, base dilation, window dilation)
    ((2, 8, 8, 3), (1, 2, 2, 1), (1, 2, 2, 1), "VALID", None, None),
    ((2, 9, 7, 3), (1, 3, 3, 1), (1, 2, 2, 1), "SAME", None, None),
    ((5, 7), (2, 3), (1, 2), ((1, 0), (2, 1)), (2, 1), (1, 2)),
    ((4, 6), (3, 1), (2, 1), ((0, -1), (0, 0)), None, None),
    ((3, 5, 4), (1, 1, 1), (1, 1, 1), "VALID", None, None),
]


@pytest.mark.parametrize("kind", ["add", "max", "min"])
@pytest.mark.parametrize("case", WINDOWS, ids=[str(i) for i in range(len(WINDOWS))])
def test_compiled_pooling_equals_reference(kind, case):
    import functrans.numpy as jnp
    shape, window, strides, padding, base, wdil = case
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    init = {"add": 0.0, "max": -np.inf, "min": np.inf}[kind]

    def f(v):
        return lax.reduce_window(v, init, getattr(lax, kind), window, strides, padding, base,
                                 wdil)

    closed = functrans.make_jaxpr(f)(x)
    assert not re.search(r"= reduce_window_\w+\[", str(decompose_closed(closed)))
    np.testing.assert_allclose(np.asarray(functrans.jit(f)(x)), np.asarray(f(x)), rtol=1e-5,
                               atol=1e-5)
    loss = lambda v: jnp.sum(f(v) ** 2)  # noqa: E731
    np.testing.assert_allclose(np.asarray(functrans.jit(functrans.grad(loss))(x)),
                               np.asarray(functrans.grad(loss)(x)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("select", ["max", "min"])
def test_window_select_with_ties_and_nans(select):
    from functrans.primitives.windowed import window_select_p
    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, (2, 7, 6, 2)).astype(np.float32)  # many ties
    x[0, 1, 1, 0] = np.nan
    x[1, 4, 2, 1] = np.nan
    params = dict(window_dimensions=(1, 3, 2, 1), window_strides=(1, 2, 2, 1),
                  padding=((0, 0), (1, 1), (0, 1), (0, 0)), base_dilation=(1, 1, 1, 1),
                  window_dilation=(1, 1, 2, 1))
    f = lambda v: window_select_p.bind(v, select=select, **params)  # noqa: E731
    closed = functrans.make_jaxpr(f)(x)
    assert "= window_select[" not in str(decompose_closed(closed))
    np.testing.assert_array_equal(np.asarray(functrans.jit(f)(x)), np.asarray(f(x)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_argmax_argmin_compiled_with_ties_and_nans(dtype, x64):
    import functrans.numpy as jnp
    rng = np.random.default_rng(4)
    x = rng.integers(-2, 3, (5, 6, 4)).astype(dtype)  # ties everywhere
    if np.dtype(dtype).kind == "f":
        x[1, 2, 0] = np.nan
        x[3, :, 2] = np.nan
    for fn in (jnp.argmax, jnp.argmin):
        for axis in (0, 1, 2):
            f = lambda v, fn=fn, axis=axis: fn(v, axis=axis)  # noqa: E731
            closed = functrans.make_jaxpr(f)(x)
            assert "= arg" not in str(decompose_closed(closed))
            np.testing.assert_array_equal(np.asarray(functrans.jit(f)(x)), np.asarray(f(x)))
    batched = functrans.jit(functrans.vmap(lambda v: jnp.argmax(v, axis=0), in_axes=2))(x)
    np.testing.assert_array_equal(np.asarray(batched), np.argmax(x, axis=0).T)


def test_random_bits_compile_to_native_code_bit_for_bit():
    from functrans import random
    key = random.PRNGKey(7)
    for shape in [(), (5,), (3, 129), (2, 3, 4)]:
        f = lambda k, shape=shape: (random.bits(k, shape), random.uniform(k, shape),  # noqa: E731
                                    random.normal(k, shape))
        closed = functrans.make_jaxpr(f)(key)
        assert "= threefry2x32[" not in str(decompose_closed(closed))
        compiled = functrans.jit(f)
        program = compiled.lower(key).compile()._executable.program.describe()
        assert "numpy threefry2x32" not in program and "numpy erf_inv" not in program
        bits, uniform, normal = compiled(key)
        ref_bits, ref_uniform, ref_normal = f(key)
        np.testing.assert_array_equal(np.asarray(bits), np.asarray(ref_bits))
        np.testing.assert_array_equal(np.asarray(uniform), np.asarray(ref_uniform))
        np.testing.assert_allclose(np.asarray(normal), np.asarray(ref_normal), rtol=2e-6,
                                   atol=2e-6)


def test_compiled_erf_inv_is_within_a_few_ulp():
    import scipy.special
    x = np.concatenate([np.linspace(-1, 1, 20001),
                        [1.0, -1.0, 1.5, -2.0, np.nan, 0.0, 1e-30, 0.99999994]]).astype(np.float32)
    got = np.asarray(functrans.jit(lax.erf_inv)(x))
    ref = scipy.special.erfinv(x.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(got[np.isinf(ref)], ref[np.isinf(ref)])
    finite = np.isfinite(ref)
    spacing = np.spacing(np.abs(ref[finite]).astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got[finite] - ref[finite]) / spacing) < 4
