"""Reductions over their outermost dimension (batch normalization's sums over every
position) cut into pieces with partial results of their own (backends/llvm/kernels.py:
split_chunks, call_split_reduction): the same bits on one thread and on several, and sums
at least as close to the exact ones as a single loop's."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from functrans.backends.compiler.fusion import Buffer, ReduceKernel
from functrans.backends.llvm import kernels

_SCRIPT = """
import sys
import numpy as np
import functrans, functrans.numpy as jnp
rng = np.random.default_rng(0)
x = rng.standard_normal((64, 32, 32, 16)).astype(np.float32)
f = functrans.jit(lambda x: (jnp.sum(x, axis=(0, 1, 2)), jnp.max(x * 2, axis=(0, 1, 2)),
                             jnp.sum(jnp.square(x - 0.5), axis=(0, 1, 2))))
np.savez(sys.argv[1], *[np.asarray(r) for r in f(x)])
"""


def _reduce(shape, reduced, dtype=np.float32, monoid="add"):
    out_shape = [n for n, r in zip(shape, reduced) if not r]
    return ReduceKernel(shape, reduced, monoid, None,
                        Buffer(1, tuple(out_shape), np.dtype(dtype), "temp"), None, ("reduce_sum",))


def test_which_reductions_are_cut_and_into_how_many_pieces():
    assert kernels.split_chunks(_reduce((65536, 16), (True, False))) == kernels.SPLIT_CHUNKS
    assert kernels.split_chunks(_reduce((65536, 16), (True, False), monoid="max")) > 1
    # too small, nothing kept, a kept outermost dimension (split in rows already), integers
    assert kernels.split_chunks(_reduce((1024, 16), (True, False))) == 1
    # a layer's bias gradient over a batch of 128
    assert kernels.split_chunks(_reduce((128, 512), (True, False))) == 1
    assert kernels.split_chunks(_reduce((65536, 16), (True, True))) == 1
    assert kernels.split_chunks(_reduce((16, 65536), (False, True))) == 1
    assert kernels.split_chunks(_reduce((65536, 16), (True, False), np.int32)) == 1
    # partial results that would not fit the caller's stack
    assert kernels.split_chunks(_reduce((64, 16384), (True, False))) == 1


def test_split_reductions_give_the_same_bits_on_any_number_of_threads(tmp_path):
    results = []
    for threads in (1, 2, 3):
        path = tmp_path / f"r{threads}.npz"
        env = dict(os.environ, FUNCTRANS_NUM_THREADS=str(threads))
        done = subprocess.run([sys.executable, "-c", _SCRIPT, str(path)], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        with np.load(path) as saved:
            results.append([saved[k] for k in sorted(saved.files)])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)
    x = np.random.default_rng(0).standard_normal((64, 32, 32, 16)).astype(np.float32)
    total, largest, squares = results[0]
    exact = x.astype(np.float64).sum(axis=(0, 1, 2))
    # 65536 terms of size 1: a float32 running sum strays by about 1e-3 here
    np.testing.assert_allclose(total, exact, rtol=0, atol=1e-3)
    np.testing.assert_array_equal(largest, (x * 2).max(axis=(0, 1, 2)))
    np.testing.assert_allclose(squares, np.square(x.astype(np.float64) - 0.5).sum(axis=(0, 1, 2)),
                               rtol=1e-5)


def test_split_maxima_and_minima_propagate_nan_and_infinities():
    """A NaN, or an infinity, in any one piece reaches the combined result, as NumPy's
    reduction gives it."""
    import functrans
    import functrans.numpy as jnp
    x = np.random.default_rng(1).standard_normal((4096, 8, 8)).astype(np.float32)
    assert kernels.split_chunks(_reduce(x.shape, (True, False, False))) > 1
    x[3000, 2, 5] = np.nan
    x[10, 1, 1] = np.inf
    x[2500, 4, 4] = -np.inf
    y = np.full(x.shape, 1.0001, np.float32)
    y[7, 3, 3] = np.nan
    f = functrans.jit(lambda x, y: (jnp.max(x, axis=0), jnp.min(x, axis=0),
                                    jnp.sum(x, axis=0), jnp.prod(y, axis=0)))
    for got, want in zip(f(x, y), (x.max(axis=0), x.min(axis=0), x.sum(axis=0),
                                   y.prod(axis=0))):
        got = np.asarray(got)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=2e-5)
