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
