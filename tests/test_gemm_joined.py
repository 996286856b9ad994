"""Matrix products split into blocks of rows or columns of C whose blocks the calling thread,
running them alone, joins into one BLAS call (see ``matrix_products.joined_blocks``): which
splits are joined, the bits of the blocks against the one call (so that no result depends on
whether the pool was paused), and a program's results run on the pool and alone."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans.backends.compiler import fusion
from functrans.backends.llvm import thread_pool
from functrans.backends.llvm.matrix_products import gemm_split, joined_blocks
from llvm_setups import openblas_routine


def _product(m, n, k, lhs_transposed=False, rhs_transposed=False, batch=1):
    return fusion.DotKernel(None, None, None, batch, m, n, k, lhs_transposed, rhs_transposed)


def test_only_float32_products_are_joined():
    """OpenBLAS's dgemm sums some shapes' blocks in another order than one call."""
    for dtype, joined in ((np.float64, False), (np.float32, True)):
        out = fusion.Buffer(0, (128, 512), dtype, "temp")
        step = fusion.DotKernel(None, None, out, 1, 128, 512, 784, False, False)
        assert joined_blocks(step, threads=2) == joined


def test_the_mlp_steps_products_are_joined_and_long_or_batched_ones_are_not():
    """The 784-512-512-10 MLP's products at batch 128 on two threads (two blocks each);
    not: a batch of products, a product cut finer than one block per thread, one not cut,
    a batch-1 product (bands: see test_gemv_bands), one thread."""
    for step in (_product(128, 512, 784), _product(128, 512, 512, rhs_transposed=True),
                 _product(784, 512, 128, lhs_transposed=True),
                 _product(512, 512, 128, lhs_transposed=True)):
        assert gemm_split(step, threads=2)[1] == 2
        assert joined_blocks(step, threads=2)
        assert not joined_blocks(step, threads=1)
    assert not joined_blocks(_product(256, 256, 256, batch=8), threads=2)
    fine = _product(8192, 512, 512)
    assert gemm_split(fine, threads=2)[1] > 2
    assert not joined_blocks(fine, threads=2)
    assert not joined_blocks(_product(128, 10, 512), threads=2)
    assert not joined_blocks(_product(1, 512, 784), threads=2)
    # a matrix-vector product cut as a matrix product (no bands: 1000 % 16): gemv's blocks
    # sum otherwise than one call
    assert gemm_split(_product(1, 1000, 784), threads=2)[1] == 2
    assert not joined_blocks(_product(1, 1000, 784), threads=2)
    # blocks OpenBLAS would take to its small-matrix kernels, of a product it would not
    assert gemm_split(_product(32, 300, 128), threads=2)[1] == 2
    assert not joined_blocks(_product(32, 300, 128), threads=2)


def _gemm(dtype):
    return openblas_routine(("s" if dtype == np.float32 else "d") + "gemm", "the blocks' bits")


def _call(routine, dtype, a, b, c, m, n, k, lhs_t, rhs_t, beta, axis, start, end):
    """Rows (axis "m") or columns ("n") [start, end) of row-major C = 0.75 op(A) op(B) +
    beta C, as the generated code calls BLAS (see matrix_products.gemm_calls)."""
    scalar = ctypes.c_float if dtype == np.float32 else ctypes.c_double
    i = lambda v: ctypes.byref(ctypes.c_int(v))  # noqa: E731 (Fortran: all by reference)
    size = a.itemsize
    a_off = b_off = c_off = 0
    rows, cols = m, n
    if axis == "m":
        a_off, c_off, rows = (start if lhs_t else start * k), start * n, end - start
    else:
        b_off, c_off, cols = (start * k if rhs_t else start), start, end - start
    routine(ctypes.byref(ctypes.c_char(b"T" if rhs_t else b"N")),
            ctypes.byref(ctypes.c_char(b"T" if lhs_t else b"N")), i(cols), i(rows), i(k),
            ctypes.byref(scalar(0.75)), ctypes.c_void_p(b.ctypes.data + b_off * size),
            i(k if rhs_t else n), ctypes.c_void_p(a.ctypes.data + a_off * size),
            i(m if lhs_t else k), ctypes.byref(scalar(beta)),
            ctypes.c_void_p(c.ctypes.data + c_off * size), i(n))


_SHAPES = [(128, 512, 784), (128, 512, 512), (784, 512, 128), (512, 512, 128), (128, 512, 10),
           (256, 1024, 512), (100, 700, 300), (333, 517, 129), (64, 2048, 96), (1000, 128, 64),
           (8, 2048, 512), (16, 1024, 784), (32, 1000, 300), (2, 4096, 1000), (64, 512, 64)]


def test_the_blocks_give_the_bits_of_one_blas_call():
    """For each shape and thread count that joins a split, BLAS run block by block (as the
    pool runs them) gives the bits of one call over all of C (as the caller runs them
    alone), for every transposition, with and without accumulating into C."""
    dtype = np.float32
    routine = _gemm(dtype)
    rng = np.random.default_rng(7)
    checked = 0
    for m, n, k in _SHAPES:
        for lhs_t in (False, True):
            for rhs_t in (False, True):
                a = rng.normal(size=m * k).astype(dtype)
                b = rng.normal(size=k * n).astype(dtype)
                start_c = rng.normal(size=m * n).astype(dtype)
                for threads in (2, 3, 4):
                    step = _product(m, n, k, lhs_t, rhs_t)
                    axis, chunks = gemm_split(step, threads=threads)
                    if not joined_blocks(step, threads=threads):
                        continue
                    extent = m if axis == "m" else n
                    rows = -(-extent // chunks)
                    for beta in (0.0, 1.0):
                        whole, blocks = start_c.copy(), start_c.copy()
                        _call(routine, dtype, a, b, whole, m, n, k, lhs_t, rhs_t, beta,
                              axis, 0, extent)
                        for start in range(0, extent, rows):
                            _call(routine, dtype, a, b, blocks, m, n, k, lhs_t, rhs_t, beta,
                                  axis, start, min(extent, start + rows))
                        assert np.array_equal(whole, blocks), (m, n, k, lhs_t, rhs_t, axis,
                                                               threads, beta)
                        checked += 1
    assert checked >= 50


def test_a_product_gives_the_same_bits_on_the_pool_and_alone():
    """A jitted MLP layer and its gradient, run with the pool free and held (its blocks then
    one call on this thread): the same bits."""
    if thread_pool.num_threads() < 2:
        pytest.skip("one thread: nothing is split")
    rng = np.random.default_rng(3)
    w = jnp.asarray(rng.normal(size=(784, 512)).astype(np.float32))
    x = jnp.asarray(rng.normal(size=(128, 784)).astype(np.float32))

    def loss(w, x):
        return jnp.sum(jnp.maximum(x @ w, 0.0) ** 2)

    step = functrans.jit(functrans.value_and_grad(loss))
    pooled = [np.asarray(v) for v in functrans.tree_util.tree_leaves(step(w, x))]
    with thread_pool.reserved():
        alone = [np.asarray(v) for v in functrans.tree_util.tree_leaves(step(w, x))]
    for p, a in zip(pooled, alone):
        assert np.array_equal(p, a)
