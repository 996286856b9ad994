"""A native thread pool for parallel loops, written in LLVM IR and shared by every program.
This module loads and drives it; its code is built by :mod:`support_code`.

Generated kernels split their outermost loop into chunks and call
``ft_parallel_for(chunk_fn, ctx, n_chunks)``, which runs ``chunk_fn(ctx, c)`` for every
``c < n_chunks`` on the calling thread and the pool's workers, and returns when all have
run. The pool is one small LLVM module compiled once per process; its entry point is
registered with the JIT linker under that name, so compiled (and cached) programs link
against it like against libm.

``ft_parallel_for_range(range_fn, ctx, n_chunks)`` is the same for a job whose chunks are
cheaper together than one by one: ``range_fn(ctx, first, end)`` runs chunks ``[first,
end)`` as one piece of work (a band of a matrix-vector product: one BLAS call). The pool's
threads call it chunk by chunk; when the calling thread runs the job alone (no worker, the
pool paused or used by another thread, or every worker asleep: a short job is over before
a sleeping worker gets up, so the job only wakes them for the next one) it is the one call
``range_fn(ctx, 0, n_chunks)``. Its results must not depend on the cut: the generated code
cuts only where they do not. ``ft_parallel_for_joined`` is the same for longer jobs (a
matrix product in blocks of rows or columns), under the rules of ``ft_parallel_for``: the
ordinary pause, and sleeping workers woken for it.

Design, and why:

* Chunks are claimed from one 64-bit counter holding ``(job generation << 32) | next
  chunk``: a worker claims a chunk with compare-and-swap, so a worker that wakes late
  (after the job is done, or when a new job has started) fails the swap instead of running
  a chunk of the wrong job. The caller never waits for a worker that has not started; it
  waits only until every chunk has *finished*.
* Workers spin for about 2 ms after a job (the kernels of a program and the next call come
  within that, and wake them for free), then sleep on a condition variable. The caller spins briefly for the last chunks, then sleeps too.
* A busy machine pauses the pool: a worker that finds it is not getting its core (its CPU
  time against the time passed) makes the next jobs run on the calling thread alone, for a
  pause that doubles while the workers keep starving and halves while they do not (see
  ``support_code._BACKOFF_MIN_NS``); a long job (not a ranged one) still goes to the pool
  during a pause. Three threads on two cores otherwise wait, at the end of each short job, for a descheduled worker's
  chunk. ``stats()`` counts both kinds of job.
* A SIGINT drops the rest of a job: before each claim a thread compares the SIGINT counter
  (see :mod:`interrupts`) with its value when the job was started (a job run on the calling
  thread alone checks it before each chunk too), and when it has moved
  it claims every remaining chunk at once, with one compare-and-swap, and counts them as
  finished. Chunks already running finish; the caller returns as soon as they have.
* One job at a time: a second thread calling ``ft_parallel_for`` while the pool is busy (two
  Python threads in compiled code, or a chunk that itself contains a parallel loop) runs
  its chunks serially instead of waiting, so nothing can deadlock.
* Matrix products hold BLAS to one thread while they run (``ft_blas_hold``): OpenBLAS's
  thread count is one process-wide number even through ``openblas_set_num_threads_local``,
  and its 1- and 2-thread products differ in their last bits, so chunks that each set it
  and restored it raced: a chunk could start just after another restored the count and
  run multi-threaded. The hold is counted: the first holder sets one thread, the last
  restores the count it found, and chunks never touch it.
* The number of workers is ``FUNCTRANS_NUM_THREADS - 1`` (default: the CPUs this process
  may run on, minus the caller). With one thread, ``ft_parallel_for`` is a plain loop.

    >>> ensure_started()          # doctest: +SKIP
    >>> num_threads()             # doctest: +SKIP
    2
"""
from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading

from functrans.backends.compiler import passes
from functrans.backends.llvm import cpu_load, interrupts, linker, machine_code
# the pool's names, used here and by the code generator and BLAS glue through this module
from functrans.backends.llvm.native_abi import (  # noqa: F401
    BLAS_HOLD_SYMBOL, JOINED_SYMBOL, PARALLEL_FOR_SYMBOL as SYMBOL, RANGE_SYMBOL, RESERVE_SYMBOL,
    SERIAL_RANGE_SYMBOL, SERIAL_SYMBOL, SET_BLAS_SYMBOL, START_SYMBOL, STATS_FIELDS,
    STATS_SYMBOL)
# how many ranged jobs in a burst wake sleeping workers (tests make such bursts)
from functrans.backends.llvm.native_abi import BURST_JOBS as _BURST_JOBS  # noqa: F401

logger = logging.getLogger("functrans")
_lock = threading.RLock()
_state: dict = {}


def compiled_threads() -> int:
    """Threads the generated code splits loops, products and convolutions for: the pool's,
    or 1 with the optimization ``parallel_loops`` disabled (see
    :mod:`functrans.backends.compiler.passes`)."""
    return num_threads() if passes.enabled("parallel_loops") else 1


def num_threads() -> int:
    """Threads that run a parallel loop: ``FUNCTRANS_NUM_THREADS``, or the number of CPUs
    this process may use."""
    value = os.environ.get("FUNCTRANS_NUM_THREADS", "").strip()
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            raise ValueError(f"FUNCTRANS_NUM_THREADS must be a positive integer, got {value!r}") \
                from None
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def spare_cores() -> int:
    """How many cores the machine leaves free for more threads of this process, besides the
    one calling: the CPUs it may use, less the machine's load over the last minute (the
    runnable threads of every process), less this thread's, rounded (at half a core);
    one less than :func:`num_threads` where the OS does not say. A compile splits its work
    over more threads only into cores that are free: on a busy machine the other threads
    would wait for a core, and the caller for them (see :mod:`parallel_compile`)."""
    try:
        load = os.getloadavg()[0]
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return num_threads() - 1
    return max(0, int(cores - load - 0.5))


def free_cores() -> int:
    """:func:`spare_cores`, or more where the machine shows more cores free at this moment
    (its runnable threads now and its idle time since the previous reading, see
    :mod:`cpu_load`; read in tens of microseconds). The load average lags a minute behind: a
    machine that has just become quiet still counts busy, and a compile would keep to one
    thread with a core idle beside it. A core the average leaves free stays free, as
    before: a machine that has just become busy counts free until its average rises (the
    answer the tests set through the load average). A compile decides once, as it starts
    (see :func:`pipeline.compile_jaxpr`): its own threads would count as load later."""
    spare = spare_cores()
    try:
        cpus = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return spare
    now = cpu_load.free_cores_now(cpus)
    return spare if now is None else max(spare, now)


def _libc_symbol(name: str) -> int:
    # the process's own symbols first; searching for libraries spawns ldconfig, so it is
    # only done when that fails
    address = linker.process_symbol(name)
    if address:
        return address
    from ctypes.util import find_library  # only here: importing it costs milliseconds

    for find in (lambda: find_library("pthread"), lambda: find_library("c")):
        try:
            return ctypes.cast(getattr(ctypes.CDLL(find()), name), ctypes.c_void_p).value
        except (OSError, AttributeError, TypeError):
            continue
    raise RuntimeError(f"llvm backend: cannot find {name} for the thread pool")


# The pool's code, built only when the on-disk cache lacks its object (support_code imports
# llvmlite.ir, which a warm start never needs).

def _pool_code(triple: str) -> str:
    # deferred: start-up time (llvmlite.ir; see above)
    from functrans.backends.llvm import support_code
    return support_code.pool_module(triple)


def _serial_code(triple: str) -> str:
    # deferred: start-up time (llvmlite.ir; see above)
    from functrans.backends.llvm import support_code
    return support_code.serial_pool_module(triple)


_builder: list = []


def pool_object(built=None) -> bytes:
    """The pool's machine code (made once per process, see
    :func:`machine_code.support_object`, which calls ``built`` once its text is built), its
    POSIX calls registered with the linker."""
    with _lock:
        if not _builder:
            try:
                for name in ("pthread_mutex_init", "pthread_cond_init", "pthread_mutex_lock",
                             "pthread_mutex_unlock", "pthread_cond_wait",
                             "pthread_cond_broadcast", "pthread_create", "clock_gettime"):
                    linker.register_symbol(f"ft_{name}", _libc_symbol(name))
                _builder.append(_pool_code)
            except RuntimeError as err:  # no POSIX threads here: parallel loops run serially
                logger.warning("functrans: %s; compiled loops run on one thread", err)
                _builder.append(_serial_code)
    return machine_code.support_object("functrans-thread-pool", _builder[0], built)


def ensure_started() -> None:
    """Compile the pool, register ``ft_parallel_for`` with the JIT linker and start the
    workers (once per process; again in a forked child, where the workers are gone)."""
    with _lock:
        if _state:
            return
        interrupts.ensure_loaded()  # the pool's claiming loop reads the SIGINT counter
        loaded = linker.load(pool_object())
        # The workers run this code until the process exits: it must never be freed (not
        # even by interpreter shutdown).
        loaded.keep()
        address = loaded.address(SYMBOL)
        linker.register_symbol(SYMBOL, address)
        for name in (RANGE_SYMBOL, BLAS_HOLD_SYMBOL):
            linker.register_symbol(name, loaded.address(name))
        helpers = {name: loaded.address(name)
                   for name in (SYMBOL, RANGE_SYMBOL, JOINED_SYMBOL, SERIAL_SYMBOL,
                                SERIAL_RANGE_SYMBOL)}
        start = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(loaded.address(START_SYMBOL))
        reserve = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(loaded.address(RESERVE_SYMBOL))
        set_blas = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(loaded.address(SET_BLAS_SYMBOL))
        hold = ctypes.CFUNCTYPE(None, ctypes.c_int)(loaded.address(BLAS_HOLD_SYMBOL))
        stats = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(loaded.address(STATS_SYMBOL))
        _state.update(engine=loaded, address=address, start=start, reserve=reserve,
                      set_blas=set_blas, hold=hold, stats=stats, blas_setter=None, **helpers)
        _state["workers"] = start(num_threads() - 1)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_restart_after_fork)


def helper_address(name: str) -> int:
    """The address of the pool's entry point ``name``: ``SYMBOL``, ``RANGE_SYMBOL``,
    ``JOINED_SYMBOL``, ``SERIAL_SYMBOL`` or ``SERIAL_RANGE_SYMBOL`` (the pool is started)."""
    ensure_started()
    return _state[name]


def _restart_after_fork() -> None:
    if _state:
        _state["workers"] = _state["start"](num_threads() - 1)
        # a hold taken by another thread of the parent is never given back here
        _state["set_blas"](_state["blas_setter"])


def hold_blas_with(set_threads_address: int | None) -> None:
    """Make ``ft_blas_hold`` set the BLAS's thread count through the function at
    ``set_threads_address`` (``int f(int count)``, returning the count it replaces, such as
    OpenBLAS's ``openblas_set_num_threads_local``); None makes the hold do nothing."""
    ensure_started()
    with _lock:
        if _state["blas_setter"] != set_threads_address:
            _state["blas_setter"] = set_threads_address
            _state["set_blas"](set_threads_address)



@contextlib.contextmanager
def reserved():
    """Hold the pool for the duration of the block: parallel loops started meanwhile run
    serially on their calling thread. Used while several device threads run at once (pmap),
    each on its own core. If another thread is using the pool, this holds nothing."""
    ensure_started()
    got = _state["reserve"](1)
    try:
        yield bool(got)
    finally:
        if got:
            _state["reserve"](0)


def workers() -> int:
    """How many worker threads the pool runs (besides the calling thread)."""
    ensure_started()
    return _state["workers"]


def stats() -> dict:
    """Counts since the pool started: ``pooled_jobs`` (parallel loops run by the pool),
    ``contended_jobs`` (run on the calling thread alone because a worker recently did not
    get its core), ``pause_ns`` (the current length of such a pause; 0 when the workers
    have their cores), ``starved`` (times a worker found it did not get its core) and
    ``waking_jobs`` (ranged jobs run on the calling thread alone while the workers, all
    asleep, got up).

        >>> sorted(stats())          # doctest: +SKIP
        ['contended_jobs', 'pause_ns', 'pooled_jobs', 'starved', 'waking_jobs']
    """
    ensure_started()
    out = (ctypes.c_int64 * len(STATS_FIELDS))()
    _state["stats"](ctypes.addressof(out))
    return dict(zip(STATS_FIELDS, out))
