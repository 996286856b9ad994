"""Memory stays bounded: what jit, pmap and the llvm backend keep between calls (traced
programs, executables, scratch arenas), with limits set through ``functrans.config``, and
``clear_caches`` lets it all go."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import _caches, _jit

pytest.importorskip("llvmlite")

from functrans.backends.llvm import arenas, pipeline  # noqa: E402


def _run_script(script: str, tmp_path, **env) -> str:
    """Run ``script`` (dedented) in a fresh interpreter with its own cache directory; its
    stdout."""
    script = textwrap.dedent(script)
    environment = dict(os.environ, FUNCTRANS_CACHE_DIR=str(tmp_path / "cache"),
                       FUNCTRANS_DEFAULT_BACKEND="cpu", **env)
    environment.pop("FUNCTRANS_CHECK_JAXPRS", None)  # measure the library, not the checks
    result = subprocess.run([sys.executable, "-c", script], env=environment,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return result.stdout


_RSS = textwrap.dedent("""
    import os
    def rss_mb():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
""")

needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/statm"),
                                reason="resident memory is read from /proc/self/statm")


# ---- the per-function cache and the shared caches ---------------------------------------------


@needs_proc
def test_resident_memory_of_300_signatures_stays_bounded(tmp_path):
    # Each signature's program needs a scratch arena of rows × 4 KiB (tanh(x) is materialized
    # for the matrix product): kept for ever, the 300 arenas and executables came to over
    # 200 MB (220 MB measured with the limits off). With at most jit_cache_max_entries (64)
    # signatures kept and arenas above the threshold (1 MiB) lent per call, what may stay
    # is the pool's limit (64 MiB), the arenas of the kept signatures up to 256 rows (19 of
    # about 1 MiB), their code, and what compiling 300 programs leaves in the heap (about
    # 60 MB, with one thread or two, one malloc arena or several): under 150 MB. The largest
    # signature runs first through a twin function, so that BLAS's per-thread buffers and
    # the thread pool's stacks, which grow with the core count, are there before measuring.
    out = _run_script(_RSS + textwrap.dedent("""
        import numpy as np
        import functrans, functrans.numpy as jnp
        w = np.ones((1024, 4), np.float32)
        twin = functrans.jit(lambda x: jnp.tanh(x) @ w + 0.0)
        twin(jnp.ones((301, 1024)))
        f = functrans.jit(lambda x: jnp.tanh(x) @ w)
        f(jnp.ones((1, 1024)))
        before = rss_mb()
        for rows in range(2, 302):
            f(jnp.ones((rows, 1024)))
        print(rss_mb() - before, f._cache_size())
    """), tmp_path)
    growth, kept = out.split()
    assert float(growth) < 160, f"resident memory grew by {float(growth):.0f} MB"
    assert int(kept) == functrans.config.jit_cache_max_entries


def _counting_jit():
    traces = []

    def f(x):
        traces.append(x.shape)
        return x * 2.0

    return functrans.jit(f), traces


def test_jit_cache_evicts_the_least_recently_called_signature():
    # Array arguments take the fast path, whose runners are kept by recency of call
    functrans.config.update("jit_cache_max_entries", 3)
    f, traces = _counting_jit()
    a, b, c, d = (jnp.ones(n) for n in (1, 2, 3, 4))
    for x in (a, b, c):
        f(x)
    f(a)  # now b is the least recently called
    f(d)
    assert f._cache_size() == 3
    assert list(f._fast_cache) == [_jit._fast_signature((x,))[0] for x in (c, a, d)]
    del traces[:]
    f(a), f(c), f(d)
    assert traces == [] and len(f._fast_cache) == 3


def test_threads_calling_through_evictions_get_right_results():
    functrans.config.update("jit_cache_max_entries", 2)
    f = functrans.jit(lambda x: x * 2.0 + 1.0)
    inputs = [jnp.arange(float(n)) for n in (3, 4, 5)]
    errors = []

    def work(k):
        try:
            for i in range(30):
                x = inputs[(i + k) % 3]
                np.testing.assert_array_equal(f(x), np.asarray(x) * 2.0 + 1.0)
        except Exception as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert f._cache_size() <= 2 and len(f._fast_cache) <= 2


def test_jit_cache_recency_is_kept_by_the_slow_path_too():
    functrans.config.update("jit_cache_max_entries", 2)
    f, traces = _counting_jit()
    f(np.ones(1, np.float32)), f(np.ones(2, np.float32))  # NumPy arguments: the full path
    f(np.ones(1, np.float32))
    f(np.ones(3, np.float32))  # evicts the signature of length 2
    del traces[:]
    f(np.ones(1, np.float32))
    assert traces == []
    f(np.ones(2, np.float32))
    assert traces == [(2,)]


def test_lowering_the_limit_trims_live_caches_at_once():
    f, _ = _counting_jit()
    for n in range(1, 7):
        f(jnp.ones(n))
    assert f._cache_size() == 6
    functrans.config.update("jax_jit_cache_max_entries", 2)
    assert f._cache_size() == 2 and len(f._fast_cache) == 2
    functrans.config.update("jit_cache_max_entries", -1)  # no limit
    for n in range(1, 7):
        f(jnp.ones(n))
    assert f._cache_size() == 6


def test_cache_limits_are_checked():
    for bad in (-2, 1.5, "10", True):
        with pytest.raises(ValueError, match="'jit_cache_max_entries' is a size"):
            functrans.config.update("jit_cache_max_entries", bad)


def test_executable_cache_is_least_recently_used_and_weak():
    functrans.config.update("executable_cache_max_entries", 2)
    closed = [functrans.make_jaxpr(lambda x, k=k: x + k)(np.ones(2, np.float32))
              for k in range(3)]
    exes = [_jit.compile_closed(c, None) for c in closed[:2]]
    assert _jit.compile_closed(closed[0], None) is exes[0]  # closed[1] is now the oldest
    _jit.compile_closed(closed[2], None)
    assert closed[0] in _jit._executables and closed[2] in _jit._executables
    assert closed[1] not in _jit._executables
    assert len(_jit._executables) == 2
    del closed[2]
    gc.collect()
    assert len(_jit._executables) == 1  # an entry goes with its program


def test_lru_cache_counts_lookups_and_inserts_as_uses():
    functrans.config.update("executable_cache_max_entries", 3)
    cache_ = _caches.LRUCache("executable_cache_max_entries")
    for key in "abc":
        cache_.insert(key, key.upper())
    assert cache_.lookup("a") == "A"
    cache_.insert("d", "D")
    assert list(cache_) == ["c", "a", "d"]
    assert cache_.lookup("b") is None
    with pytest.raises(ValueError, match="not a cache size option"):
        _caches.LRUCache("cache_dir")


def test_pmap_cache_is_bounded():
    functrans.config.update("jit_cache_max_entries", 2)
    g = functrans.pmap(lambda x: x + 1.0)
    for n in range(1, 5):
        g(np.ones((1, n), np.float32))
    assert g._cache_size() == 2


def test_clear_caches_empties_every_in_memory_cache():
    f, traces = _counting_jit()
    f(jnp.ones(3))
    functrans.config.update("arena_cache_threshold", 0)
    g = functrans.jit(lambda x: jnp.tanh(x) @ x.T)
    g(jnp.ones((64, 64)))
    assert arenas.pool.nbytes > 0 and len(_jit._executables) > 0
    functrans.clear_caches()
    assert f._cache_size() == 0 and len(f._fast_cache) == 0 and g._cache_size() == 0
    assert len(_jit._executables) == 0 and arenas.pool.nbytes == 0
    f(jnp.ones(3))
    assert len(traces) == 2


# ---- scratch arenas ---------------------------------------------------------------------------


def _arena_program(rows=256):
    """A program whose scratch arena is rows × 1 KiB (tanh(x) feeds a matrix product)."""
    closed = functrans.make_jaxpr(lambda x, w: jnp.tanh(x) @ w)(
        np.ones((rows, 256), np.float32), np.ones((256, 4), np.float32))
    x = np.linspace(-1, 1, rows * 256, dtype=np.float32).reshape(rows, 256)
    w = np.ones((256, 4), np.float32)
    return closed, (x, w), np.tanh(x) @ w


def test_small_arenas_stay_with_their_executable():
    closed, args, expected = _arena_program()
    exe = pipeline.compile_jaxpr(closed)
    assert 0 < exe.plan.arena_size <= functrans.config.arena_cache_threshold
    np.testing.assert_allclose(exe(*args)[0], expected, rtol=1e-5)
    kept = exe._state.arena
    assert kept is not None and kept.nbytes >= exe.plan.arena_size
    exe(*args)
    assert exe._state.arena is kept


def test_arenas_above_the_threshold_are_returned_after_the_call():
    functrans.config.update("arena_cache_threshold", 1024)
    functrans.config.update("arena_pool_max_size", 0)
    closed, args, expected = _arena_program()
    exe = pipeline.compile_jaxpr(closed)
    assert exe.plan.arena_size > 1024
    for _ in range(2):
        np.testing.assert_allclose(exe(*args)[0], expected, rtol=1e-5)
        assert exe._state.arena is None and arenas.pool.nbytes == 0


def test_pooled_arenas_are_reused_by_later_calls_and_bounded():
    functrans.config.update("arena_cache_threshold", 1024)
    functrans.config.update("arena_pool_max_size", 1 << 20)
    small, small_args, small_expected = _arena_program(256)
    big, big_args, big_expected = _arena_program(2048)  # 2 MiB: more than the pool keeps
    exe, big_exe = pipeline.compile_jaxpr(small), pipeline.compile_jaxpr(big)
    pool = arenas.pool
    pool.trim(0)
    exe(*small_args)
    pooled = pool.nbytes
    assert pooled >= exe.plan.arena_size
    first = id(pool._arenas[0])
    np.testing.assert_allclose(exe(*small_args)[0], small_expected, rtol=1e-5)
    assert id(pool._arenas[0]) == first and pool.nbytes == pooled  # the same arena again
    np.testing.assert_allclose(big_exe(*big_args)[0], big_expected, rtol=1e-5)
    assert pool.nbytes <= 1 << 20
    functrans.config.update("arena_pool_max_size", 0)
    assert pool.nbytes == 0


def test_threads_borrow_arenas_of_their_own():
    functrans.config.update("arena_cache_threshold", 1024)
    closed, args, expected = _arena_program(512)
    exe = pipeline.compile_jaxpr(closed)
    results, errors = [], []

    def work():
        try:
            for _ in range(20):
                results.append(np.allclose(exe(*args)[0], expected, rtol=1e-5))
        except Exception as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 80 and all(results)


def test_the_default_pool_keeps_a_large_programs_arena_between_calls(tmp_path):
    # The default bound is a sixteenth of physical memory: a program in a loop whose arena
    # is larger than the old fixed 64 MiB reuses it, where a fresh mapping per call cost the
    # kernel's zeroing of every page (see docs/performance.md).
    out = _run_script("""
        import numpy as np
        import functrans, functrans.numpy as jnp
        from functrans import _config
        from functrans.backends.llvm import arenas
        print(functrans.config.arena_pool_max_size, _config._physical_memory() or 0)
        mapped = []
        original = arenas._map
        arenas._map = lambda size: mapped.append(size) or original(size)
        rows = 80 << 10   # tanh(x) of 80 Ki rows of 256 floats: an 80 MiB arena
        f = functrans.jit(lambda x, w: jnp.tanh(x) @ w)
        x, w = np.ones((rows, 256), np.float32), np.ones((256, 4), np.float32)
        for _ in range(3):
            f(x, w).block_until_ready()
        print(len(mapped), min(mapped, default=0) >> 20)
    """, tmp_path)
    (limit, memory), (maps, arena_mb) = [map(int, line.split()) for line in out.split("\n")[:2]]
    assert limit == (max(64 << 20, memory // 16) if memory else 64 << 20)
    if limit < 128 << 20:
        pytest.skip(f"a machine with {memory >> 20} MiB keeps only {limit >> 20} MiB of arenas")
    assert arena_mb >= 80 and maps == 1, f"{maps} arenas of {arena_mb} MiB mapped for 3 calls"


@needs_proc
def test_scratch_memory_of_a_large_program_is_returned(tmp_path):
    # Two 2048×2048 products through materialized intermediates: about 48 MB of scratch,
    # which used to stay resident as long as the jitted function lived.
    #
    # What a call leaves resident besides its arena depends on the machine, not on this
    # library: OpenBLAS's per-thread packing buffers (their size follows the CPU's kernels
    # and the thread count), thread stacks, and freed arrays the allocator keeps for reuse
    # (glibc keeps up to twice its adaptive mmap threshold, 64 MB at most, of freed heap).
    # So that part is measured away: a twin program of the same shapes and products runs
    # first, and its first call warms all of it. Then the arena is the only difference
    # between a call whose arena goes back to the system (the pool holds 16 MB) and one
    # whose arena the pool keeps (no limit), and it must show in the second alone.
    out = _run_script(_RSS + textwrap.dedent("""
        import numpy as np
        import functrans, functrans.numpy as jnp
        x = jnp.asarray(np.random.default_rng(0).random((2048, 2048), np.float32))
        twin = functrans.jit(lambda x: (x @ x) @ (x.T @ x) + x)
        y = twin(x); del y
        f = functrans.jit(lambda x: (x @ x) @ (x.T @ x) - x)
        arena = f.lower(x).compile()._executable.plan.arena_size / 2**20
        before = rss_mb()
        y = f(x); del y
        returned = rss_mb() - before
        functrans.config.update("arena_pool_max_size", -1)
        before = rss_mb()
        y = f(x); del y
        kept = rss_mb() - before
        print(arena, returned, kept)
    """), tmp_path, FUNCTRANS_ARENA_POOL_MAX_SIZE=str(16 << 20))
    arena, returned, kept = map(float, out.split())
    assert arena > 32, f"the program's arena is {arena:.0f} MB"   # larger than the pool's 16
    assert returned < arena / 4, f"{returned:.0f} MB of a {arena:.0f} MB arena stayed resident"
    assert kept > 3 * arena / 4, f"a kept {arena:.0f} MB arena showed as {kept:.0f} MB"


def test_minus_one_means_no_limit_for_arenas():
    closed, args, expected = _arena_program(2048)
    functrans.config.update("arena_cache_threshold", -1)
    exe = pipeline.compile_jaxpr(closed)
    np.testing.assert_allclose(exe(*args)[0], expected, rtol=1e-5)
    assert exe._state.arena is not None  # kept, however large
    functrans.config.update("arena_cache_threshold", 1024)
    functrans.config.update("arena_pool_max_size", -1)
    arenas.pool.trim(0)
    exe = pipeline.compile_jaxpr(closed)
    exe(*args)
    assert exe._state.arena is None and arenas.pool.nbytes >= exe.plan.arena_size


@needs_proc
def test_compiling_frees_llvms_pass_pipeline(tmp_path):
    # llvmlite's ModulePassManager never freed itself (its no-op base-class dispose came
    # first): each compile kept its O2 pipeline, about 100 KB, for the process's life.
    # (Figures over thousands of compiles: python -m benchmarks.compile_memory.)
    out = _run_script(_RSS + textwrap.dedent("""
        import gc
        import numpy as np
        import functrans, functrans.numpy as jnp
        from functrans.backends.llvm import codegen, pipeline
        closed = functrans.make_jaxpr(lambda x: jnp.sin(x) * 2 + 1)(np.ones(8, np.float32))
        with pipeline._compile_lock:
            native = pipeline.plan_native(closed)
        builder = codegen.ModuleBuilder(native.program, native.plan, native.slots,
                                        native.schedule)
        text = builder.build()
        for _ in range(20):
            codegen.optimize_and_emit(text, builder.names)
        gc.collect()
        before = rss_mb()
        for _ in range(150):
            codegen.optimize_and_emit(text, builder.names)
        gc.collect()
        print(rss_mb() - before)
    """), tmp_path)
    assert float(out) < 5, f"{float(out):.1f} MB kept by 150 compiles of one module"
