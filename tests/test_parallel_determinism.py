"""Compiled programs give bitwise-equal results run after run on several threads, whatever
the timing: products split across the thread pool and the loops beside them are cut into a
fixed set of chunks, and every BLAS call runs on one thread (OpenBLAS's 1- and 2-thread
products differ in their last bits, and its thread count is one process-wide number that
split products used to set and restore from several threads at once)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from functrans.backends.compiler import fusion
from functrans.backends.llvm import codegen

# Run in a process of its own: the pool's thread count is fixed when it starts.
SCRIPT = textwrap.dedent("""
    import json, sys, threading
    import numpy as np
    import functrans, functrans.numpy as jnp

    def mixed(x, w1, w2, a, b, v):
        h = jnp.tanh(x @ w1)                          # 512x64 @ 64x256: split in rows
        gram = h.T @ h                                # 256x512 @ 512x256: split
        small = h[:16] @ w2                           # 16x256 @ 256x128: one BLAS call
        batched = jnp.einsum("bij,bjk->bik", a, b)    # a batch of 16 products, split
        lse = jnp.log(jnp.sum(jnp.exp(h * 3.0), axis=1))  # a row reduction, split in rows
        return gram, small, batched, lse, jnp.sum(h * v), jnp.mean(gram, axis=0)

    def one_product(p, q):  # large enough for BLAS to thread it, too small to split
        return jnp.tanh(p @ q)

    rng = np.random.default_rng(0)
    arrays = lambda *shapes: [rng.normal(size=s).astype(np.float32) for s in shapes]
    programs = [
        (functrans.jit(one_product), arrays((16, 256), (256, 128))),
        (functrans.jit(mixed), arrays((512, 64), (64, 256), (256, 128), (16, 128, 128),
                                      (16, 128, 128), (512, 256))),
    ]
    first = [[np.asarray(o) for o in f(*args)] for f, args in programs]

    differing = []
    def check(run, k):
        f, args = programs[k]
        out = [np.asarray(o) for o in f(*args)]
        if not all(np.array_equal(p, q) for p, q in zip(first[k], out)):
            differing.append([run, k])

    stop = threading.Event()
    def busy():  # NumPy competing for the cores: chunks start and end at other times
        m = rng.normal(size=(200, 200))
        while not stop.is_set():
            m = np.tanh(m @ m.T / 200)
    def beside():  # the mixed program in another thread too (its chunks then run there)
        while not stop.is_set():
            check(-1, 1)
    threads = [threading.Thread(target=busy), threading.Thread(target=beside)]
    for t in threads:
        t.start()
    for run in range(int(sys.argv[1])):
        check(run, 0)
        check(run, 1)
    stop.set()
    for t in threads:
        t.join()
    print(json.dumps(differing))
""")


def _differing_runs(threads: int, runs: int) -> list:
    env = dict(os.environ, FUNCTRANS_NUM_THREADS=str(threads))
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(runs)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_results_are_bitwise_equal_run_after_run_on_several_threads():
    """Both programs, run 20 times each in turn on 4 threads beside a busy NumPy thread and
    a thread running the larger one too, give the bits of their first run. (Before the
    BLAS hold, a product ran on however many threads the last split product's chunk had
    left OpenBLAS with.)"""
    assert _differing_runs(threads=4, runs=20) == []


def test_a_product_is_split_into_several_chunks_per_thread():
    """On two threads a product of milliseconds is cut into more chunks than threads (a
    thread that loses its core holds up only a small part), each a block of whole rows of C
    with its whole k sum; a smaller one into one chunk per thread (each chunk re-packs the
    shared operand); on one thread either is one BLAS call."""
    product = fusion.DotKernel(None, None, None, 1, 8192, 512, 512, False, False)
    assert 2 * 8192 * 512 * 512 >= codegen.GEMM_FINE_SPLIT_FLOPS
    assert codegen.gemm_split(product, threads=2) == ("m", 8)
    assert codegen.gemm_split(product, threads=1) == (None, 1)
    smaller = fusion.DotKernel(None, None, None, 1, 512, 256, 64, False, False)
    assert codegen.gemm_split(smaller, threads=2) == ("m", 2)


def test_a_product_cut_finer_than_the_threads_keeps_long_chunks():
    """Each chunk re-packs the operand the chunks share, so chunks beyond one per thread
    keep GEMM_FINE_CHUNK_EXTENT rows or columns: a transformer layer's 2048-row products
    (milliseconds each) run in one chunk per thread, not in eight of 256 rows."""
    for m, n, k in [(2048, 512, 2048), (2048, 2048, 512), (1024, 512, 512)]:
        product = fusion.DotKernel(None, None, None, 1, m, n, k, False, False)
        assert 2 * m * n * k >= codegen.GEMM_FINE_SPLIT_FLOPS
        axis, chunks = codegen.gemm_split(product, threads=2)
        assert chunks == 2, (m, n, k, axis, chunks)
    wide = fusion.DotKernel(None, None, None, 1, 512, 4096, 2048, False, False)
    assert codegen.gemm_split(wide, threads=2) == ("n", 4)
    # a batch re-packs nothing: its chunks stay fine
    heads = fusion.DotKernel(None, None, None, 64, 256, 256, 64, False, False)
    assert codegen.gemm_split(heads, threads=2) == ("batch", 8)
