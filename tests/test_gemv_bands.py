"""Batch-1 matrix-vector products cut into bands of C over the thread pool (see
``matrix_products.gemv_bands``): where they are cut, their results against NumPy around the
thresholds, and the bits of the bands against the one BLAS call the calling thread makes
instead when it runs them alone, so that no result depends on whether the pool was
paused."""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import export
from functrans.backends.compiler import fusion
from functrans.backends.llvm import matrix_products, thread_pool
from functrans.backends.llvm.matrix_products import (GEMV_BAND_ALIGN, GEMV_BANDED_MAX_ELEMENTS,
                                                     GEMV_SPLIT_MIN_ELEMENTS, gemm_split,
                                                     gemv_bands)
from llvm_setups import openblas_routine


def _product(m, n, k, lhs_transposed=False, rhs_transposed=False, batch=1):
    return fusion.DotKernel(None, None, None, batch, m, n, k, lhs_transposed, rhs_transposed)


def test_an_mlp_at_batch_one_runs_its_large_layers_in_bands():
    """The 784x512 and 512x512 layers of an MLP at batch 1 (each under the matrix-product
    split's flops) are one band of 256 columns per thread, ``w @ x`` one of 256 rows; the
    512x10 output layer, a batch of such products and one thread stay as before."""
    for k in (784, 512):
        layer = _product(1, 512, k)
        assert 2 * 512 * k < matrix_products.GEMM_SPLIT_MIN_FLOPS
        assert gemv_bands(layer, threads=2) == (2, 256)
        assert gemm_split(layer, threads=2) == ("n", 2)
        assert gemm_split(layer, threads=1) == (None, 1)
        assert gemm_split(_product(512, 1, k), threads=2) == ("m", 2)  # w @ x
    assert gemm_split(_product(1, 10, 512), threads=2) == (None, 1)
    assert gemv_bands(_product(1, 512, 512, batch=4), threads=2)[0] == 1
    assert gemm_split(_product(1, 512, 512, batch=4), threads=2) == ("batch", 2)


def test_bands_are_cut_only_where_blas_sums_alike():
    """Cuts at multiples of GEMV_BAND_ALIGN; an "N" product (x @ w, w stored as it is)
    only when its length is a multiple of it too; never a short sum, nor outside the size
    range."""
    n_kernel, t_kernel = (lambda n, k: _product(1, n, k)), \
        (lambda n, k: _product(1, n, k, rhs_transposed=True))
    assert not matrix_products.gemv_transposed(n_kernel(512, 512))
    assert matrix_products.gemv_transposed(t_kernel(512, 512))
    assert matrix_products.gemv_transposed(_product(512, 1, 512))  # w @ x
    assert not matrix_products.gemv_transposed(_product(512, 1, 512, lhs_transposed=True))
    assert gemv_bands(n_kernel(1000, 784), threads=2) == (1, 1000)  # 1000 % 16
    for threads in (2, 3, 4):
        chunks, band = gemv_bands(t_kernel(1001, 784), threads=threads)
        assert chunks == threads and band % GEMV_BAND_ALIGN == 0
        assert (chunks - 1) * band < 1001 <= chunks * band
    assert gemv_bands(n_kernel(8192, 8), threads=2)[0] == 1  # a sum of 8 terms
    assert gemv_bands(n_kernel(256, 511), threads=2)[0] == 1  # under 2^17 elements
    assert 256 * 512 == GEMV_SPLIT_MIN_ELEMENTS and gemv_bands(n_kernel(256, 512), 2)[0] == 2
    big = n_kernel(4096, 2048)
    assert 4096 * 2048 > GEMV_BANDED_MAX_ELEMENTS and gemv_bands(big, threads=2)[0] == 1
    assert gemm_split(big, threads=2) == ("n", 2)  # split as a matrix product instead


# (length of C, terms summed) around the thresholds: odd, short, long, over 4096 rows
_SHAPES = [(256, 512), (256, 784), (512, 784), (528, 255), (1008, 131), (1024, 16),
           (1024, 17), (2048, 47), (2048, 48), (2048, 49), (4112, 64), (8208, 33),
           (257, 512), (300, 1001), (513, 784), (1001, 300), (4097, 100), (9000, 40)]


def _blas(dtype):
    return openblas_routine(("s" if dtype == np.float32 else "d") + "gemv", "the bands' bits")


def _gemv(routine, dtype, trans, rows, cols, matrix, offset, ld, x, beta, y, y_offset):
    scalar = ctypes.c_float if dtype == np.float32 else ctypes.c_double
    i = lambda v: ctypes.byref(ctypes.c_int(v))  # noqa: E731 (Fortran: all by reference)
    size = matrix.itemsize
    routine(ctypes.byref(ctypes.c_char(trans)), i(rows), i(cols), ctypes.byref(scalar(0.75)),
            ctypes.c_void_p(matrix.ctypes.data + offset * size), i(ld),
            ctypes.c_void_p(x.ctypes.data), i(1), ctypes.byref(scalar(beta)),
            ctypes.c_void_p(y.ctypes.data + y_offset * size), i(1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_bands_give_the_bits_of_one_blas_call(dtype):
    """For each shape and thread count that gemv_bands cuts, BLAS run band by band (as the
    pool runs them) gives the bits of one call over all of C (as the caller runs them
    alone), for both kernels, with and without accumulating into C."""
    routine = _blas(dtype)
    rng = np.random.default_rng(5)
    checked = 0
    for length, depth in _SHAPES:
        for transposed in (False, True):
            step = _product(1, length, depth, rhs_transposed=transposed)
            matrix = rng.normal(size=length * depth).astype(dtype)
            x = rng.normal(size=depth).astype(dtype)
            start_y = rng.normal(size=length).astype(dtype)
            trans, ld = (b"T", depth) if transposed else (b"N", length)
            for threads in (2, 3, 4, 8):
                chunks, band = gemv_bands(step, threads=threads)
                if chunks < 2:
                    continue
                for beta in (0.0, 1.0):
                    whole, banded = start_y.copy(), start_y.copy()
                    shape = (depth, length) if transposed else (length, depth)
                    _gemv(routine, dtype, trans, *shape, matrix, 0, ld, x, beta, whole, 0)
                    for start in range(0, length, band):
                        size = min(band, length - start)
                        shape = (depth, size) if transposed else (size, depth)
                        offset = start * depth if transposed else start
                        _gemv(routine, dtype, trans, *shape, matrix, offset, ld, x, beta,
                              banded, start)
                    assert np.array_equal(whole, banded), (length, depth, trans, threads, beta)
                    checked += 1
    assert checked >= 100


def _layouts(length, depth, dtype, rng):
    """x @ w, x @ wᵀ, w @ x and wᵀ @ x as (function, arguments, NumPy's result)."""
    x = rng.normal(size=(1, depth)).astype(dtype)
    w = rng.normal(size=(depth, length)).astype(dtype)
    wt = np.ascontiguousarray(w.T)
    column = np.ascontiguousarray(x.T)
    return [(lambda x, w: x @ w, (x, w), x @ w),
            (lambda x, wt: x @ wt.T, (x, wt), x @ w),
            (lambda wt, c: wt @ c, (wt, column), wt @ column),
            (lambda w, c: w.T @ c, (w, column), wt @ column)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_banded_products_match_numpy_around_the_thresholds(dtype, x64):
    """Every layout of a batch-1 product, at sizes around the band thresholds (odd ones
    included), matches NumPy; the pool's result and the caller's alone (the pool held) have
    the same bits; an accumulating product (a bias added into C) too."""
    rng = np.random.default_rng(7)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    shapes = [(256, 511), (256, 512), (528, 255), (512, 784), (257, 512), (1001, 300),
              (1000, 784), (4112, 64)]
    for length, depth in shapes:
        for f, args, expected in _layouts(length, depth, dtype, rng):
            compiled = functrans.jit(f)
            got = np.asarray(compiled(*args))
            assert got.dtype == dtype
            scale = np.abs(args[0]).max() * np.abs(args[1]).max() * depth
            np.testing.assert_allclose(got, expected, rtol=0, atol=tolerance * scale)
            with thread_pool.reserved():
                alone = np.asarray(compiled(*args))
            assert np.array_equal(got, alone), (length, depth)
    x, w = (rng.normal(size=s).astype(dtype) for s in ((1, 784), (784, 512)))
    bias = rng.normal(size=512).astype(dtype)
    got = np.asarray(functrans.jit(lambda x, w, b: x @ w + b)(x, w, bias))
    np.testing.assert_allclose(got, x @ w + bias, rtol=0, atol=tolerance * 784 * 20)


_REPEAT_SCRIPT = textwrap.dedent("""
    import json, threading
    import numpy as np
    import functrans, functrans.numpy as jnp
    from functrans.backends.llvm import thread_pool
    rng = np.random.default_rng(2)
    ws = [rng.normal(size=s).astype(np.float32) for s in ((784, 512), (512, 512), (512, 10))]
    x = rng.normal(size=(1, 784)).astype(np.float32)
    f = functrans.jit(lambda x, a, b, c: jnp.maximum(jnp.maximum(x @ a, 0) @ b, 0) @ c)
    first = np.asarray(f(x, *ws)).tobytes()
    stop = threading.Event()
    def busy():  # takes a core now and then: the pool pauses, and resumes
        while not stop.is_set():
            sum(range(20000))
    side = threading.Thread(target=busy)
    side.start()
    same = all(np.asarray(f(x, *ws)).tobytes() == first for _ in range(400))
    stop.set()
    side.join()
    print(json.dumps({"same": same, "stats": thread_pool.stats()}))
""")


def test_an_mlp_at_batch_one_gives_the_same_bits_run_after_run():
    """The MLP 784-512-512-10 at batch 1 on two threads beside a busy thread: its bands run
    on the pool or, paused, as one call, and every run gives the first run's bits."""
    env = dict(os.environ, FUNCTRANS_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", _REPEAT_SCRIPT], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["same"], report
    print(report["stats"])


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to link the library")
def test_a_shared_library_runs_the_bands(tmp_path):
    """An exported batch-1 layer, called as a ``.so`` (its own pool, started on first call),
    gives jit's bits every call."""
    rng = np.random.default_rng(3)
    w = rng.normal(size=(784, 512)).astype(np.float32)
    x = rng.normal(size=(1, 784)).astype(np.float32)

    def layer(x):
        return jnp.tanh(x @ w)

    exported = export.export(functrans.jit(layer))(x)
    library = ctypes.CDLL(export.to_shared_library(exported, str(tmp_path / "layer")).library)
    expected = np.asarray(functrans.jit(layer)(x))
    np.testing.assert_allclose(expected, np.tanh(x @ w), rtol=0, atol=1e-4)
    out = np.empty((1, 512), np.float32)
    pointer = ctypes.c_void_p
    for _ in range(200):
        status = library.layer(pointer(x.ctypes.data), pointer(out.ctypes.data), None,
                               ctypes.c_size_t(0))
        assert status == 0 and np.array_equal(out, expected)
