"""Native cumulative reductions in the llvm backend (backends/llvm/along_axis.py): bit for bit
the reference's results, for every axis, direction and natively computed dtype."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llvmlite")

import functrans  # noqa: E402
import functrans.lax as lax  # noqa: E402
import functrans.numpy as jnp  # noqa: E402
from functrans.test_util import x64  # noqa: E402

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

NAMES = ["cumsum", "cumprod", "cummax", "cummin"]
DTYPES = [np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8, np.uint32]


@st.composite
def _cases(draw):
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=rank, max_size=rank)))
    axis = draw(st.integers(0, rank - 1))
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    name = draw(st.sampled_from(NAMES))
    reverse = draw(st.booleans())
    seed = draw(st.integers(0, 2 ** 16))
    return shape, axis, dtype, name, reverse, seed


def _operand(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if dtype.kind == "f":
        x = rng.standard_normal(shape) * 3
        specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0])
        mask = rng.random(shape) < 0.15
        x[mask] = rng.choice(specials, size=int(mask.sum()))
        return x.astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -100), min(info.max, 100), size=shape, endpoint=True).astype(dtype)


@settings(max_examples=50, deadline=None)
@given(_cases())
def test_cumulative_matches_the_reference_exactly(case):
    shape, axis, dtype, name, reverse, seed = case
    with x64():
        x = _operand(shape, dtype, seed)
        fun = lambda x: getattr(lax, name)(x, axis=axis, reverse=reverse)  # noqa: E731
        compiled = functrans.jit(fun).lower(x).compile()
        assert "numpy" not in compiled._executable.description
        got = np.asarray(compiled(x))
        expected = np.asarray(functrans.jit(fun, backend="reference")(x))
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_a_loop_with_cumsum_is_one_native_loop():
    fun = lambda c, xs: functrans.lax.scan(  # noqa: E731
        lambda c, x: (jnp.cumsum(c + x, axis=0) * 0.5, jnp.cumprod(x)[-1]), c, xs)
    c, xs = np.ones(6, np.float32), np.linspace(0, 1, 24, dtype=np.float32).reshape(4, 6)
    description = functrans.jit(fun).lower(c, xs).compile()._executable.description
    assert "numpy" not in description and "around compiled bodies" not in description
    for a, b in zip(functrans.jit(fun)(c, xs), functrans.jit(fun, backend="reference")(c, xs)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ---- sort (backends/llvm/sorting.py) ---------------------------------------------------------

SORT_DTYPES = [np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8, np.uint32, np.bool_]


@st.composite
def _sort_cases(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(0, 9), min_size=rank, max_size=rank)))
    dimension = draw(st.integers(0, rank - 1))
    n_operands = draw(st.integers(1, 3))
    num_keys = draw(st.integers(1, n_operands))
    dtypes = [np.dtype(draw(st.sampled_from(SORT_DTYPES))) for _ in range(n_operands)]
    ties = draw(st.booleans())  # few distinct values: stability decides the order
    seed = draw(st.integers(0, 2 ** 16))
    return shape, dimension, num_keys, dtypes, ties, seed


def _sort_operand(shape, dtype, ties, rng):
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if ties:
        return rng.integers(0, 3, size=shape).astype(dtype)
    return _operand(shape, dtype, int(rng.integers(0, 2 ** 16)))


@settings(max_examples=60, deadline=None)
@given(_sort_cases())
def test_sort_matches_the_reference_exactly(case):
    shape, dimension, num_keys, dtypes, ties, seed = case
    rng = np.random.default_rng(seed)
    with x64():
        operands = [_sort_operand(shape, d, ties, rng) for d in dtypes]

        def fun(*ops):  # in a loop body, where the sort is native
            def body(i, ops):
                return tuple(lax.sort(ops, dimension=dimension, num_keys=num_keys))
            return functrans.lax.fori_loop(0, 1, body, ops)
        compiled = functrans.jit(fun).lower(*operands).compile()
        assert "numpy" not in compiled._executable.description
        assert "around compiled bodies" not in compiled._executable.description
        got = compiled(*operands)
        expected = functrans.jit(fun, backend="reference")(*operands)
    for g, e in zip(got, expected):
        g, e = np.asarray(g), np.asarray(e)
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_array_equal(g, e)


def _in_loop(f):
    return lambda v: functrans.lax.fori_loop(0, 1, lambda i, v: f(v), v)


def test_sort_special_floats_and_gradients():
    x = np.array([3.0, np.nan, -0.0, 0.0, -np.inf, np.inf, -1.0, np.nan, 2.0], np.float32)
    for f in (_in_loop(jnp.sort), lambda v: jnp.argsort(_in_loop(jnp.sort)(v)),
              _in_loop(lambda v: jnp.sort(v)[::-1])):
        np.testing.assert_array_equal(np.asarray(functrans.jit(f)(x)),
                                      np.asarray(functrans.jit(f, backend="reference")(x)))
    np.testing.assert_array_equal(np.signbit(np.asarray(functrans.jit(_in_loop(jnp.sort))(x))[2:4]),
                                  [True, False])  # -0.0 sorts before 0.0
    y = np.random.default_rng(2).standard_normal((4, 30)).astype(np.float32)
    grad = functrans.jit(functrans.grad(
        lambda v: jnp.sum(_in_loop(lambda w: jnp.sort(w, axis=1))(v)[:, -3:] ** 2)))
    np.testing.assert_allclose(np.asarray(grad(y)), np.asarray(
        functrans.grad(lambda v: jnp.sum(jnp.sort(v, axis=1)[:, -3:] ** 2))(y)), rtol=1e-6)


def test_a_loop_with_sort_is_one_native_loop():
    fun = lambda c, xs: functrans.lax.scan(  # noqa: E731
        lambda c, x: (jnp.sort(c * x, axis=0), jnp.argsort(x)[0]), c, xs)
    c = np.random.default_rng(3).standard_normal(7).astype(np.float32)
    xs = np.random.default_rng(4).standard_normal((5, 7)).astype(np.float32)
    description = functrans.jit(fun).lower(c, xs).compile()._executable.description
    assert "numpy" not in description and "around compiled bodies" not in description
    for a, b in zip(functrans.jit(fun)(c, xs), functrans.jit(fun, backend="reference")(c, xs)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("n", [256, 257, 1000, 4099])
@pytest.mark.parametrize("dtypes,num_keys", [
    ((np.float32,), 1), ((np.float64, np.int32), 1), ((np.int8, np.float32, np.uint8), 2),
    ((np.uint32, np.int64), 2), ((np.bool_, np.int32), 1)])
def test_long_lines_radix_sort_bit_for_bit(n, dtypes, num_keys):
    """Lines of 256 and more take the radix path: the same results, bit for bit."""
    rng = np.random.default_rng(n)
    with x64():
        operands = [_sort_operand((3, n), np.dtype(d), ties=(k == 0 and n % 2 == 1), rng=rng)
                    for k, d in enumerate(dtypes)]
        for op in operands:
            if op.dtype.kind == "f":
                op[:, ::13] = -0.0
                op[:, 1::17] = 0.0
        fun = lambda *ops: functrans.lax.fori_loop(  # noqa: E731
            0, 1, lambda i, ops: tuple(lax.sort(ops, dimension=1, num_keys=num_keys)), ops)
        got = functrans.jit(fun)(*operands)
        expected = functrans.jit(fun, backend="reference")(*operands)
    for g, e in zip(got, expected):
        g, e = np.asarray(g), np.asarray(e)
        np.testing.assert_array_equal(g.view(np.uint8), e.view(np.uint8))


def test_top_level_sorts_are_native_for_long_lines_only():
    x = np.random.default_rng(5).standard_normal((3, 600)).astype(np.float32)
    long_ = functrans.jit(lambda v: jnp.sort(v, axis=1)).lower(x).compile()
    short = functrans.jit(lambda v: jnp.sort(v, axis=0)).lower(x).compile()
    assert "numpy" not in long_._executable.description
    assert "numpy sort" in short._executable.description  # NumPy sorts short lines as fast
    np.testing.assert_array_equal(np.asarray(long_(x)), np.sort(x, axis=1))
    np.testing.assert_array_equal(np.asarray(functrans.jit(jnp.argsort)(x)), np.argsort(x, kind="stable"))
