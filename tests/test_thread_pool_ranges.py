"""The thread pool's ranged jobs (``ft_parallel_for_range``, see thread_pool.py): chunk by
chunk on the pool, one call ``fn(ctx, 0, n)`` when the calling thread runs the job alone
(the pool held by another thread, paused on a busy machine, or without workers)."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from functrans import _float_mode
from functrans.backends.llvm import interrupts, thread_pool

RANGE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
JOB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


def _entry(name: str):
    thread_pool.ensure_started()
    return JOB(thread_pool.helper_address(name))


def _pool_entry():
    """The ranged jobs' entry; skips the test where the pool has no worker."""
    entry = _entry(thread_pool.RANGE_SYMBOL)
    if thread_pool.workers() == 0:
        pytest.skip("one CPU: the pool runs jobs on the calling thread")
    return entry


def _run(entry, body, n: int) -> None:
    entry(ctypes.cast(body, ctypes.c_void_p), None, n)


@RANGE_FN
def _nothing(ctx, first, end):
    pass


def _with_workers_awake(entry, job, calls: list, attempts: int = 20) -> bool:
    """Run ``job()`` (which records ``(first, end, thread)`` in ``calls``) until a pool
    worker ran a chunk of it: each time after a pause (a chunk that sleeps, as these do,
    looks to the pool like a worker starved of its core, which pauses the pool) and a burst
    of jobs of nothing that wakes the workers (a ranged job finding them all asleep runs
    alone).
    Every run must cover its chunks: one by one, or as one call."""
    for _ in range(attempts):
        time.sleep(0.05)
        for _ in range(thread_pool._BURST_JOBS):
            _run(entry, _nothing, 2)
        time.sleep(0.001)  # the workers get up, and spin
        calls.clear()
        job()
        ranges = sorted(call[:2] for call in calls)
        end = ranges[-1][1]
        assert ranges in ([(0, end)], [(c, c + 1) for c in range(end)]), ranges
        if len({call[2] for call in calls}) > 1:
            return True
    return False


def test_a_ranged_job_runs_chunk_by_chunk_on_the_pool():
    """On the pool every chunk is a call of its own, ``fn(ctx, c, c + 1)``, whichever thread
    claims it."""
    parallel_for_range = _pool_entry()
    calls = []

    @RANGE_FN
    def body(ctx, first, end):
        calls.append((first, end, threading.get_ident()))
        time.sleep(0.0005)  # lets a worker claim chunks too

    if not _with_workers_awake(parallel_for_range, lambda: _run(parallel_for_range, body, 6),
                               calls):
        pytest.skip("no pool worker ran a chunk (the machine is busy)")
    assert sorted(call[:2] for call in calls) == [(c, c + 1) for c in range(6)]


def test_a_ranged_job_run_alone_is_one_call():
    """With the pool held by another thread (as while pmap's devices run), a ranged job is
    the one call ``fn(ctx, 0, n)`` on the calling thread; so is a job of one chunk, and the
    serial entry always; a job of no chunks calls nothing."""
    parallel_for_range = _entry(thread_pool.RANGE_SYMBOL)
    serial_range = _entry(thread_pool.SERIAL_RANGE_SYMBOL)
    calls = []

    @RANGE_FN
    def body(ctx, first, end):
        calls.append((first, end, threading.get_ident()))

    caller = threading.get_ident()
    with thread_pool.reserved() as held:
        _run(parallel_for_range, body, 7)
    assert held and calls == [(0, 7, caller)]
    for entry, n, expected in ((parallel_for_range, 1, [(0, 1, caller)]),
                               (parallel_for_range, 0, []),
                               (serial_range, 5, [(0, 5, caller)]),
                               (serial_range, 0, [])):
        calls.clear()
        _run(entry, body, n)
        assert calls == expected, (n, calls)


def test_a_burst_of_ranged_jobs_wakes_the_sleeping_workers():
    """With every worker asleep, a ranged job is one call on the calling thread (a worker
    would get up later than a short job lasts); the _BURST_JOBS-th of a burst wakes the
    workers, and a job a little later goes to the pool, chunk by chunk."""
    parallel_for_range = _pool_entry()
    calls = []

    @RANGE_FN
    def body(ctx, first, end):
        calls.append((first, end))

    for _ in range(20):
        time.sleep(0.05)  # past the workers' spin (and any pause): they sleep
        before = thread_pool.stats()
        for _ in range(thread_pool._BURST_JOBS):
            calls.clear()
            _run(parallel_for_range, body, 4)
            assert calls == [(0, 4)]
        after = thread_pool.stats()
        time.sleep(0.001)  # the workers get up
        calls.clear()
        _run(parallel_for_range, body, 4)
        if after["waking_jobs"] - before["waking_jobs"] == thread_pool._BURST_JOBS \
                and calls != [(0, 4)]:
            assert sorted(calls) == [(c, c + 1) for c in range(4)]
            break
    else:
        pytest.skip("the pool stayed paused (the machine is busy)")


def test_a_ranged_job_on_the_pool_stops_at_a_sigint():
    """Once the SIGINT counter moves, no thread claims another chunk of a ranged job (the
    chunks go through the same claims as ``ft_parallel_for``'s)."""
    parallel_for_range = _entry(thread_pool.RANGE_SYMBOL)
    interrupts.ensure_loaded()
    words = interrupts._state["words"]
    ran = []

    @RANGE_FN
    def body(ctx, first, end):
        if not ran:
            words[0] += 1  # the first chunk to run moves the counter, as a SIGINT would
        ran.append((first, end))

    _run(parallel_for_range, body, 1000)
    # on the pool: the first chunk and any others claimed before the counter moved; alone:
    # the one call, made before it moved
    assert ran == [(0, 1000)] or (1 <= len(ran) < 10 and all(e == f + 1 for f, e in ran)), ran


def test_ranged_chunks_run_in_the_callers_float_mode():
    """A ranged job's chunks, on whichever thread, run with the caller's FTZ/DAZ bits (the
    pool's threads reach them through a wrapper, which the job's mode must reach too)."""
    parallel_for_range = _pool_entry()
    seen = []

    @RANGE_FN
    def body(ctx, first, end):
        seen.append((first, end, threading.get_ident(),
                     _float_mode.mxcsr() & _float_mode.FLUSH_BITS))
        time.sleep(0.0005)

    def flushing():
        with _float_mode.flushing():
            _run(parallel_for_range, body, 8)

    for job, want in ((flushing, _float_mode.FLUSH_BITS),
                      (lambda: _run(parallel_for_range, body, 8), 0)):
        if not _with_workers_awake(parallel_for_range, job, seen):
            pytest.skip("no pool worker ran a chunk (the machine is busy)")
        assert {mode for *_, mode in seen} == {want}, seen


_PAUSED_SCRIPT = textwrap.dedent("""
    import ctypes, json, os, time
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # the worker starves
    from functrans.backends.llvm import thread_pool
    thread_pool.ensure_started()
    job = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        thread_pool.helper_address(thread_pool.RANGE_SYMBOL))
    calls = []

    @ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    def body(ctx, first, end):
        calls.append((first, end))
        until = time.perf_counter() + 5e-5 * (end - first)
        while time.perf_counter() < until:  # holds the core (and the GIL)
            pass

    jobs = []
    for _ in range(300):
        calls.clear()
        job(ctypes.cast(body, ctypes.c_void_p), None, 4)
        jobs.append(sorted(calls))
    print(json.dumps({"jobs": jobs, "stats": thread_pool.stats()}))
""")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_a_paused_pool_runs_a_ranged_job_as_one_call():
    """The caller and the worker on one core: the worker notices it does not get its core
    and pauses the pool; ranged jobs in the pause are one call on the calling thread, and
    every job covers its chunks once either way."""
    env = dict(os.environ, FUNCTRANS_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", _PAUSED_SCRIPT], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    whole, pieces = [[0, 4]], [[c, c + 1] for c in range(4)]
    assert all(job in (whole, pieces) for job in report["jobs"]), report["jobs"]
    assert report["stats"]["contended_jobs"] > 0, report["stats"]
    assert report["jobs"].count(whole) >= report["stats"]["contended_jobs"]
