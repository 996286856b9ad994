"""Float32 products with few rows run as generated register tiles (see
``backends/llvm/register_tiles.py``) instead of BLAS: which products take them, their results
against NumPy (float64) for whole and edge tiles, blocks of k, a transposed A, scales and
accumulation, and the same bits on one thread and on the pool."""
from __future__ import annotations

import re

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans.backends.compiler import fusion
from functrans.backends.llvm import register_tiles, targets
from functrans.backends.llvm.matrix_products import gemm_split, register_tiled

pytestmark = pytest.mark.skipif(not targets.current().has_avx512,
                                reason="register tiles are generated for AVX-512 targets only")


_TILES = re.compile(r'define internal void @"?tiles\d')


def _product(m, n, k, lhs_transposed=False, rhs_transposed=False, batch=1,
             dtype=np.float32, alpha=1.0):
    out = fusion.Buffer(0, (m, n), dtype, "temp")
    step = fusion.DotKernel(None, None, out, batch, m, n, k, lhs_transposed, rhs_transposed)
    step.alpha = alpha
    return step


def test_which_products_take_register_tiles():
    """The MLP's forward products and its weight gradients do; not: B transposed,
    float64, a batch of products, columns that are not whole tiles, long sums with many
    rows, many rows of A not transposed, a scale with several blocks of k, one row."""
    for step in (_product(128, 512, 784), _product(128, 512, 512),
                 _product(512, 512, 128, lhs_transposed=True, alpha=-0.1),
                 _product(784, 512, 128, lhs_transposed=True, alpha=-0.1)):
        assert register_tiled(step, threads=2) and register_tiled(step, threads=1)
    for step in (_product(128, 512, 512, rhs_transposed=True),
                 _product(128, 512, 784, dtype=np.float64), _product(128, 512, 784, batch=4),
                 _product(128, 500, 784), _product(784, 512, 256, lhs_transposed=True),
                 _product(1025, 512, 128, lhs_transposed=True), _product(300, 512, 128),
                 _product(300, 512, 784), _product(128, 512, 784, alpha=0.5),
                 _product(1, 512, 784)):
        assert not register_tiled(step, threads=2)


def test_a_tiled_products_split_is_over_whole_tiles_of_columns():
    step = _product(512, 512, 128, lhs_transposed=True, alpha=-0.1)
    assert gemm_split(step, threads=2) == ("n", 2)
    # 64 columns cannot be cut into whole tiles: not tiled on two threads, rows split
    narrow = _product(512, 64, 128, lhs_transposed=True)
    assert gemm_split(narrow, threads=2)[0] == "m" and not register_tiled(narrow, threads=2)


def _check(fn, args, want, compiled):
    got = np.asarray(compiled(*args))
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= 4e-6 * scale, (np.abs(got - want).max(), scale)
    assert _TILES.search(compiled.lower(*args).compile()._executable.ir_text)


# (m, n, k): rows of every remainder of a tile of 6, one and several column tiles, k in one
# block, in two even blocks (784) and in three uneven ones (1030)
SHAPES = [(2, 64, 64), (5, 128, 100), (6, 64, 77), (7, 192, 512), (11, 64, 513),
          (128, 512, 784), (130, 192, 1030), (256, 256, 64)]


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_products_against_numpy(m, n, k):
    rng = np.random.default_rng(m * 1000 + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    exact = a.astype(np.float64) @ w.astype(np.float64)
    _check(None, (a, w), exact, functrans.jit(lambda a, w: a @ w))
    _check(None, (a, w, c), exact + c, functrans.jit(lambda a, w, c: c + jnp.dot(a, w)))


@pytest.mark.parametrize("m,n,k", [(2, 64, 64), (13, 128, 128), (512, 512, 128),
                                   (300, 128, 100), (784, 512, 128), (1021, 128, 65)])
def test_transposed_a_scaled_and_accumulated(m, n, k):
    """A weight gradient with the SGD update fused in: ``w - lr * xᵀ g``."""
    rng = np.random.default_rng(m + n + k)
    x = rng.standard_normal((k, m)).astype(np.float32)
    g = rng.standard_normal((k, n)).astype(np.float32)
    w = rng.standard_normal((m, n)).astype(np.float32)
    exact = x.T.astype(np.float64) @ g.astype(np.float64)
    _check(None, (x, g, w), w - np.float32(0.1) * exact,
           functrans.jit(lambda x, g, w: w - 0.1 * (x.T @ g)))
    _check(None, (x, g), np.float32(2.0) * exact, functrans.jit(lambda x, g: 2.0 * (x.T @ g)))


def test_special_values_propagate():
    """Infinities and NaNs reach C as they would through BLAS's sums."""
    a = np.ones((8, 64), np.float32)
    w = np.ones((64, 64), np.float32)
    a[1, 3] = np.inf
    a[2, 5] = np.nan
    got = np.asarray(functrans.jit(lambda a, w: a @ w)(a, w))
    assert np.isinf(got[1]).all() and np.isnan(got[2]).all()
    assert (got[[0, 3, 4, 5, 6, 7]] == 64).all()


def _without(passes: str, fn):
    functrans.config.update("disable_passes", passes)
    try:
        return fn()
    finally:
        functrans.config.update("disable_passes", "")


def test_the_same_bits_on_one_thread_and_on_the_pool():
    """Each element sums its k terms in the same order whatever the split: the MLP's
    first layer on two threads (two chunks of columns) and unsplit."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((128, 784)).astype(np.float32)
    w = rng.standard_normal((784, 512)).astype(np.float32)
    c = rng.standard_normal((128, 512)).astype(np.float32)
    split = np.asarray(functrans.jit(lambda a, w, c: c + a @ w)(a, w, c))
    whole = _without("parallel_loops",
                     lambda: np.asarray(functrans.jit(lambda a, w, c: c + a @ w)(a, w, c)))
    assert np.array_equal(split, whole)


def test_disabled_they_call_blas():
    a = np.ones((128, 512), np.float32)
    w = np.ones((512, 512), np.float32)
    text = _without("register_tiles", lambda: functrans.jit(lambda a, w: a @ w + 1.0).lower(
        a, w).compile()._executable.ir_text)
    assert "ft_sgemm" in text and not _TILES.search(text)


def test_tile_geometry_fits_the_registers():
    """24 accumulators, 4 rows of B and a broadcast: 29 of AVX-512's 32 registers."""
    assert register_tiles.ROWS * register_tiles.VECTORS + register_tiles.VECTORS + 1 <= 32


def test_a_bias_is_added_to_the_sum_not_summed_into():
    """``b + x @ w`` with terms each below half an ulp of the bias: summed from the bias
    every term would be lost (the result the bias alone); each block summed from zero and
    then added keeps them, as BLAS and float64 do."""
    m, n, k = 12, 64, 784
    x = np.ones((m, k), np.float32)
    w = np.full((k, n), 1e-8, np.float32)
    bias = np.ones(n, np.float32)
    got = np.asarray(functrans.jit(lambda x, w, b: jnp.dot(x, w) + b)(x, w, bias))
    want = np.float32(1.0 + k * np.float64(np.float32(1e-8)))
    assert np.abs(got - want).max() <= 2e-7, (got[0, 0], want)
    text = functrans.jit(lambda x, w, b: jnp.dot(x, w) + b).lower(
        x, w, bias).compile()._executable.ir_text
    assert _TILES.search(text)
