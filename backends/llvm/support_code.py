"""The native code of the runtime's support objects, as LLVM IR: the SIGINT handler with its
state block (see :mod:`interrupts`) and the thread pool (see :mod:`thread_pool`, which says
how the pool works and why).

Their machine code depends on the host CPU alone and is kept in the on-disk cache (see
:func:`machine_code.support_object`), so this module (and ``llvmlite.ir``) is imported only
when a cache is cold: by the code generator, and by the loaders when they build an object.

    >>> text = pool_module("x86_64-unknown-linux-gnu")      # doctest: +SKIP
"""
from __future__ import annotations

import time

import llvmlite.ir as ir

from functrans.backends.llvm import float_mode
from functrans.backends.llvm.native_abi import (
    ADDRESS_SYMBOL, BLAS_HOLD_SYMBOL, BURST_JOBS, EPOCH, HANDLER_SYMBOL, PARALLEL_FOR_SYMBOL,
    PREVIOUS, PREVIOUS_SIGINFO, RANGE_SYMBOL, RESERVE_SYMBOL, SERIAL_RANGE_SYMBOL,
    JOINED_SYMBOL,
    SERIAL_SYMBOL, SET_BLAS_SYMBOL, START_SYMBOL, STATE_SYMBOL, STATE_WORDS, STATS_FIELDS,
    STATS_SYMBOL)

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
I8P = I8.as_pointer()
VOID = ir.VoidType()
# a chunk of a parallel loop: void (ctx, chunk index)
CHUNK_FN = ir.FunctionType(VOID, [I8P, I64])
# a piece of a ranged job (see native_abi.RANGE_SYMBOL): void (ctx, first, end), chunks
# [first, end) as one piece of work
RANGE_FN = ir.FunctionType(VOID, [I8P, I64, I64])
STATE_TYPE = ir.ArrayType(I64, STATE_WORDS)

# ---- the SIGINT handler ----------------------------------------------------------------------


def interrupt_handler_module(triple: str) -> str:
    """The state block, ``ft_interrupt_state_address()`` and the handler."""
    m = ir.Module(name="functrans_interrupts")
    m.triple = triple
    state = ir.GlobalVariable(m, STATE_TYPE, "state")
    state.linkage = "internal"
    state.initializer = ir.Constant(STATE_TYPE, None)
    state.align = 64

    def word(b, k):
        return b.gep(state, [ir.Constant(I32, 0), ir.Constant(I32, k)], inbounds=True)

    getter = ir.Function(m, ir.FunctionType(I8P, []), name=ADDRESS_SYMBOL)
    b = ir.IRBuilder(getter.append_basic_block("entry"))
    b.ret(b.bitcast(state, I8P))

    # void handler(int signal, siginfo_t *info, void *context): async-signal-safe (loads,
    # one call, one atomic add)
    handler = ir.Function(m, ir.FunctionType(ir.VoidType(), [I32, I8P, I8P]), name=HANDLER_SYMBOL)
    handler.attributes.add("nounwind")
    sig, info, context = handler.args
    b = ir.IRBuilder(handler.append_basic_block("entry"))
    chain, with_info, plain, count = (handler.append_basic_block(n) for n in
                                      ("chain", "with_info", "plain", "count"))
    previous = b.load_atomic(word(b, PREVIOUS), "acquire", 8)
    b.cbranch(b.icmp_unsigned("!=", previous, ir.Constant(I64, 0)), chain, count)
    b.position_at_end(chain)
    takes_info = b.load_atomic(word(b, PREVIOUS_SIGINFO), "monotonic", 8)
    b.cbranch(b.icmp_unsigned("!=", takes_info, ir.Constant(I64, 0)), with_info, plain)
    b.position_at_end(with_info)
    three = ir.FunctionType(ir.VoidType(), [I32, I8P, I8P]).as_pointer()
    b.call(b.inttoptr(previous, three), [sig, info, context])
    b.branch(count)
    b.position_at_end(plain)
    b.call(b.inttoptr(previous, ir.FunctionType(ir.VoidType(), [I32]).as_pointer()), [sig])
    b.branch(count)
    b.position_at_end(count)
    # after Python's handler: whoever sees the counter move finds Python's flag set
    b.atomic_rmw("add", word(b, EPOCH), ir.Constant(I64, 1), "seq_cst")
    b.ret_void()
    return str(m)


# ---- the thread pool -------------------------------------------------------------------------

_NO_CHUNK = 0xFFFFFFFF  # the low half of the counter while a job is being published
# A worker spins this many cycle-counter ticks (about 2 ms) after a job before sleeping:
# the serial code between two parallel loops of a program (its small kernels, or the next
# call's dispatch) outlasts a short spin, and a sleeping worker costs a futex wake-up that
# delays the next parallel loop by tens of microseconds. Counting ticks, not pause
# instructions, keeps the spin the same length on CPUs whose pause takes 3 or 140 cycles.
_WORKER_SPIN_TICKS = 5_000_000
# ... unless it is not getting its core: a worker compares its thread's CPU time with the
# time passed over each job it ran, and every _CONTENTION_CHECK_SPINS pauses of a spin, and
# when it got less than _CONTENTION_SHARE of it (over at least _CONTENTION_MIN_NS: another
# thread shares its core) it sleeps at once. A sleeper is woken ahead of a CPU-bound
# thread; a spinner keeps sharing its core with it.
_CONTENTION_CHECK_SPINS = 1024
_CONTENTION_MIN_NS = 20_000
_CONTENTION_SHARE = (3, 5)  # 60%, as a fraction
# A starved spell pauses the pool (below) only when measured over at least this long: a VM's
# vCPU or an interrupt takes tens of microseconds now and then from a thread on a quiet
# machine, while a thread that shares its core loses whole time slices (milliseconds).
_PAUSE_MIN_WINDOW_NS = 500_000
# The caller, its own chunks done, spins this many ticks (about 30 us) for the last chunks
# before it sleeps: long enough for chunks that finish together, short enough that a chunk
# whose worker lost its core does not keep the caller's core (which that worker may need)
# busy for a whole time slice.
_CALLER_SPIN_TICKS = 100_000
# A worker that did not get its core (the checks above) also makes the next parallel loops of
# the process run on the calling thread alone for a while: with another process on the
# cores, a job split over more threads than the cores free waits, at its end, for the chunk
# of whichever thread was descheduled, for up to a scheduler time slice per job, and a
# program runs many short jobs. The pause starts at _BACKOFF_MIN_NS and doubles each time
# a worker is starved again soon after it (up to _BACKOFF_MAX_NS); after a quarter as long
# with every worker getting its core it halves, down to zero. The chunks are the same either
# way, so results do not depend on which threads ran them.
_BACKOFF_MIN_NS = 10_000_000
_BACKOFF_MAX_NS = 160_000_000
# During a pause the caller times the job's first chunk, and hands the rest to the pool after
# all when it would take longer than this alone (chunks are even): three threads on two cores
# give the process a third more of them, against a wait of up to a time slice at the end.
_CONTENDED_POOL_NS = 8_000_000
# A ranged job that finds every worker asleep wakes them, and it and the ranged jobs of the
# next _WAKE_NS run on the caller: a worker takes tens of microseconds to get up (a futex
# wake-up, an idle vCPU scheduled again), and a job handed to it meanwhile waits for it.
_WAKE_NS = 100_000
# ... and it wakes them only in a burst of ranged jobs, the BURST_JOBS-th within _BURST_NS
# (native_abi.BURST_JOBS: tests make bursts): a woken worker spins on its core for the next
# jobs (see _WORKER_SPIN_TICKS), which on a busy machine pushes another process onto the
# caller's core. Calls a few milliseconds apart, each of a couple of short jobs, ran a third
# slower when each call woke the workers; calls back to back, or a loop of products, are a
# burst.
_BURST_NS = 1_000_000
# A pause lasts _RANGED_PAUSE times as long for ranged jobs: they gain microseconds from the
# pool, and lose up to a time slice when a worker sharing its core with another process is
# descheduled in the middle of one. With `while 1: pass` beside the MLP forward at batch 1,
# a pause of the ordinary length cost the forward 2-5% (side by side with the bands unsplit)
# as each pause's end let one such job go to the pool.
_RANGED_PAUSE = 4

# clock ids of clock_gettime (the platform's values, as Python's time module knows them)
_THREAD_CPU_CLOCK = getattr(time, "CLOCK_THREAD_CPUTIME_ID", 3)
_MONOTONIC_CLOCK = getattr(time, "CLOCK_MONOTONIC", 1)


class _PoolModule:
    """The pool's module while it is built: its globals, the C functions it calls, the
    functions built so far (see :func:`pool_module`), and small IR helpers."""

    def __init__(self, triple: str):
        m = ir.Module(name="functrans_thread_pool")
        m.triple = triple
        self.m = m
        global_ = self.global_
        self.counter = global_("counter", I64)
        self.done = global_("done", I64)
        self.job_fn = global_("job_fn", I8P)
        self.job_ctx = global_("job_ctx", I8P)
        self.job_n = global_("job_n", I64)
        self.generation = global_("generation", I32)
        # the SIGINT counter when the job was published
        self.job_epoch = global_("job_epoch", I64)
        # the caller's MXCSR (subnormals flushed or not): its chunks run in that mode on any
        # thread (see float_mode.py); x86 only
        self.has_mode = float_mode.supported(triple)
        self.job_mode = global_("job_mode", I32) if self.has_mode else None
        self.interrupt_state = ir.GlobalVariable(m, STATE_TYPE,
                                                 STATE_SYMBOL)
        self.busy = global_("busy", I32)
        self.workers = global_("workers", I32)
        self.sleeping = global_("sleeping", I32)  # workers waiting on job_cv
        # CLOCK_MONOTONIC ns; see _BACKOFF_MIN_NS
        self.serial_until = global_("serial_until", I64)
        self.backoff = global_("backoff", I64)
        # the end of the last pause, or the last halving
        self.calm_since = global_("calm_since", I64)
        # jobs run by the pool, and jobs run on the caller alone because a worker was starved
        self.pooled_jobs = global_("pooled_jobs", I64)
        self.contended_jobs = global_("contended_jobs", I64)
        self.starved_count = global_("starved_count", I64)  # times a worker found itself starved
        # ranged jobs run on the caller alone while the sleeping workers it woke got up
        self.waking_jobs = global_("waking_jobs", I64)
        self.woken_at = global_("woken_at", I64)  # CLOCK_MONOTONIC ns; see _WAKE_NS
        # the start of the current burst of ranged jobs finding every worker asleep, and
        # their count (see _BURST_NS)
        self.burst_from = global_("burst_from", I64)
        self.burst_jobs = global_("burst_jobs", I64)
        # room for a pthread_mutex_t / pthread_cond_t on any platform; ft_pool_start initializes
        self.storage = ir.ArrayType(I64, 16)
        self.mutex, self.job_cv, self.done_cv = (global_(n, self.storage)
                                                 for n in ("mutex", "job_cv", "done_cv"))
        self.lock = self.declare("ft_pthread_mutex_lock", I32, [I8P])
        self.unlock = self.declare("ft_pthread_mutex_unlock", I32, [I8P])
        self.wait = self.declare("ft_pthread_cond_wait", I32, [I8P, I8P])
        self.broadcast = self.declare("ft_pthread_cond_broadcast", I32, [I8P])
        self.create = self.declare("ft_pthread_create", I32, [I64.as_pointer(), I8P, I8P, I8P])
        self.mutex_init = self.declare("ft_pthread_mutex_init", I32, [I8P, I8P])
        self.cond_init = self.declare("ft_pthread_cond_init", I32, [I8P, I8P])
        self.clock = self.declare("ft_clock_gettime", I32, [I32, I64.as_pointer()])
        self.pause = (self.declare("llvm.x86.sse2.pause", VOID, [])
                      if triple.startswith(("x86_64", "i686")) else None)
        self.ticks = self.declare("llvm.readcyclecounter", I64, [])

    def global_(self, name, ty, align=64):
        g = ir.GlobalVariable(self.m, ty, name)
        g.linkage = "internal"
        g.initializer = ir.Constant(ty, None)
        g.align = align
        return g

    def declare(self, name, ret, args):
        return ir.Function(self.m, ir.FunctionType(ret, args), name=name)

    @staticmethod
    def ptr(b, g):
        return b.bitcast(g, I8P)

    def sigint_count(self, b):
        """The SIGINT counter (defined in interrupts.py)."""
        word = b.gep(self.interrupt_state,
                     [ir.Constant(I32, 0), ir.Constant(I32, EPOCH)], inbounds=True)
        return b.load_atomic(word, "monotonic", 8)

    def relax(self, b):
        if self.pause is not None:
            b.call(self.pause, [])

    def wait_while(self, b, cv, waiting, name):
        """Under the pool's mutex, wait on the condition variable ``cv`` for as long as
        ``waiting(b)`` (an i1, read afresh after every wake-up: condition variables wake
        spuriously) holds; ``b`` is left after the mutex is released."""
        fn = b.function
        check = fn.append_basic_block(f"{name}.check")
        wait_block = fn.append_basic_block(f"{name}.wait")
        woke = fn.append_basic_block(f"{name}.woke")
        b.call(self.lock, [self.ptr(b, self.mutex)])
        b.branch(check)
        b.position_at_end(check)
        b.cbranch(waiting(b), wait_block, woke)
        b.position_at_end(wait_block)
        b.call(self.wait, [self.ptr(b, cv), self.ptr(b, self.mutex)])
        b.branch(check)
        b.position_at_end(woke)
        b.call(self.unlock, [self.ptr(b, self.mutex)])

    @staticmethod
    def counted_loop(b, fn, extent, body, name):
        """for i in range(extent): body(i) (extent an i64 value)."""
        pre = b.block
        head = fn.append_basic_block(f"{name}.head")
        loop = fn.append_basic_block(f"{name}.body")
        out = fn.append_basic_block(f"{name}.done")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64)
        i.add_incoming(ir.Constant(I64, 0), pre)
        b.cbranch(b.icmp_signed("<", i, extent), loop, out)
        b.position_at_end(loop)
        body(i)
        i.add_incoming(b.add(i, ir.Constant(I64, 1)), b.block)
        b.branch(head)
        b.position_at_end(out)


def pool_module(triple: str) -> str:
    """The pool's IR: globals, ``ft_parallel_for``, the worker loop, start and reset."""
    pool = _PoolModule(triple)
    for add in (_add_clock, _add_backoff, _add_run_chunks, _add_worker, _add_range_chunk,
                _add_parallel_for, _add_start, _add_reserve):
        add(pool)
    _add_parallel_for(pool, ranged=True)
    _add_parallel_for(pool, ranged=True, joined=True)
    _add_stats(pool.m, (pool.pooled_jobs, pool.contended_jobs, pool.backoff, pool.starved_count,
                        pool.waking_jobs))
    _add_blas_hold(pool.m, pool.lock, pool.unlock, pool.mutex_init, pool.global_)
    _add_serial_helpers(pool.m)
    return str(pool.m)


def _add_clock(pool: _PoolModule) -> None:
    """``now_ns(clock id)``: ``clock_gettime`` in nanoseconds."""
    m, clock = pool.m, pool.clock
    now_ns = ir.Function(m, ir.FunctionType(I64, [I32]), name="now_ns")
    now_ns.linkage = "internal"
    b = ir.IRBuilder(now_ns.append_basic_block("entry"))
    ts = b.alloca(ir.ArrayType(I64, 2))
    ts64 = b.bitcast(ts, I64.as_pointer())
    b.call(clock, [now_ns.args[0], ts64])
    b.ret(b.add(b.mul(b.load(ts64), ir.Constant(I64, 1_000_000_000)),
                b.load(b.gep(ts64, [ir.Constant(I32, 1)]))))
    pool.now_ns = now_ns


def _add_backoff(pool: _PoolModule) -> None:
    """``note_starved()``: a worker lost its core, so the next jobs run on the caller alone
    (for a pause that doubles each time); ``note_with_core()``: a worker ran a job on its own
    core, so after a calm a quarter as long as the pause, the pause is halved."""
    m, serial_until, backoff = pool.m, pool.serial_until, pool.backoff
    calm_since, starved_count, now_ns = pool.calm_since, pool.starved_count, pool.now_ns
    note_starved = ir.Function(m, ir.FunctionType(VOID, []), name="note_starved")
    note_starved.linkage = "internal"
    b = ir.IRBuilder(note_starved.append_basic_block("entry"))
    b.atomic_rmw("add", starved_count, ir.Constant(I64, 1), "monotonic")
    old = b.load_atomic(backoff, "monotonic", 8)
    doubled = b.mul(old, ir.Constant(I64, 2))
    longer = b.select(b.icmp_unsigned(">", doubled, ir.Constant(I64, _BACKOFF_MAX_NS)),
                      ir.Constant(I64, _BACKOFF_MAX_NS), doubled)
    pause_ns = b.select(b.icmp_unsigned("==", old, ir.Constant(I64, 0)),
                        ir.Constant(I64, _BACKOFF_MIN_NS), longer)
    b.store_atomic(pause_ns, backoff, "monotonic", 8)
    until = b.add(b.call(now_ns, [ir.Constant(I32, _MONOTONIC_CLOCK)]), pause_ns)
    b.store_atomic(until, calm_since, "monotonic", 8)
    b.store_atomic(until, serial_until, "release", 8)
    b.ret_void()

    # ---- note_with_core(): a worker ran a job on its own core: after a calm a quarter as
    # long as the pause, halve the pause ----------------------------------------------
    note_with_core = ir.Function(m, ir.FunctionType(VOID, []), name="note_with_core")
    note_with_core.linkage = "internal"
    b = ir.IRBuilder(note_with_core.append_basic_block("entry"))
    check_calm, halve, out_block = (note_with_core.append_basic_block(n)
                                    for n in ("check_calm", "halve", "out"))
    old = b.load_atomic(backoff, "monotonic", 8)
    b.cbranch(b.icmp_unsigned("==", old, ir.Constant(I64, 0)), out_block, check_calm)
    b.position_at_end(check_calm)
    now = b.call(now_ns, [ir.Constant(I32, _MONOTONIC_CLOCK)])
    calm_for = b.sub(now, b.load_atomic(calm_since, "monotonic", 8))
    b.cbranch(b.icmp_signed(">", b.mul(calm_for, ir.Constant(I64, 4)), old), halve, out_block)
    b.position_at_end(halve)
    half = b.lshr(old, ir.Constant(I64, 1))
    b.store_atomic(b.select(b.icmp_unsigned("<", half, ir.Constant(I64, _BACKOFF_MIN_NS)),
                            ir.Constant(I64, 0), half), backoff, "monotonic", 8)
    b.store_atomic(now, calm_since, "monotonic", 8)
    b.branch(out_block)
    b.position_at_end(out_block)
    b.ret_void()
    pool.note_starved = note_starved
    pool.note_with_core = note_with_core


def _add_run_chunks(pool: _PoolModule) -> None:
    """``run_chunks(generation)``: claim and run chunks of that job until none is left."""
    m, counter, done, job_fn = pool.m, pool.counter, pool.done, pool.job_fn
    job_ctx, job_n, job_epoch = pool.job_ctx, pool.job_n, pool.job_epoch
    has_mode, job_mode, mutex = pool.has_mode, pool.job_mode, pool.mutex
    done_cv, lock, unlock, broadcast = pool.done_cv, pool.lock, pool.unlock, pool.broadcast
    run = ir.Function(m, ir.FunctionType(VOID, [I32]), name="run_chunks")
    run.linkage = "internal"
    b = ir.IRBuilder(run.append_basic_block("entry"))
    mode_slot = b.alloca(I32) if has_mode else None
    head, claim, check, body, finished, out = (run.append_basic_block(n) for n in
                                               ("head", "claim", "check", "body", "finished",
                                                "out"))
    b.branch(head)
    b.position_at_end(head)
    v = b.load_atomic(counter, "acquire", 8)
    gen_of_v = b.trunc(b.lshr(v, ir.Constant(I64, 32)), I32)
    same_job = b.icmp_unsigned("==", gen_of_v, run.args[0])
    b.cbranch(same_job, claim, out)
    b.position_at_end(claim)
    c = b.and_(v, ir.Constant(I64, 0xFFFFFFFF))
    n = b.load_atomic(job_n, "monotonic", 8)
    fn_p = b.load_atomic(job_fn, "monotonic", 8)
    ctx = b.load_atomic(job_ctx, "monotonic", 8)
    has_chunk = b.icmp_unsigned("<", c, n)
    swap, drop, dropped = (run.append_basic_block(name) for name in ("swap", "drop", "dropped"))
    b.cbranch(has_chunk, check, out)
    b.position_at_end(check)
    interrupted = b.icmp_unsigned("!=", pool.sigint_count(b), b.load_atomic(job_epoch, "monotonic", 8))
    b.cbranch(interrupted, drop, swap)
    b.position_at_end(drop)  # claim chunks c..n-1 at once, and count them as finished
    remaining = b.sub(n, c)
    result = b.cmpxchg(counter, v, b.add(v, remaining), "acq_rel", "acquire")
    b.cbranch(b.extract_value(result, 1), dropped, head)
    b.position_at_end(dropped)
    finished_count = b.add(b.atomic_rmw("add", done, remaining, "acq_rel"), remaining)
    b.cbranch(b.icmp_unsigned("==", finished_count, n), finished, out)
    b.position_at_end(swap)
    result = b.cmpxchg(counter, v, b.add(v, ir.Constant(I64, 1)), "acq_rel", "acquire")
    b.cbranch(b.extract_value(result, 1), body, head)  # lost the race: look again
    b.position_at_end(body)
    if has_mode:  # the claim's acquire saw the job's mode, stored before it was published
        float_mode.write(b, mode_slot, b.load_atomic(job_mode, "monotonic", 4))
    b.call(b.bitcast(fn_p, CHUNK_FN.as_pointer()), [ctx, c])
    finished_count = b.add(b.atomic_rmw("add", done, ir.Constant(I64, 1), "acq_rel"),
                           ir.Constant(I64, 1))
    b.cbranch(b.icmp_unsigned("==", finished_count, n), finished, head)
    b.position_at_end(finished)  # the last chunk: wake the caller if it went to sleep
    b.call(lock, [pool.ptr(b, mutex)])
    b.call(broadcast, [pool.ptr(b, done_cv)])
    b.call(unlock, [pool.ptr(b, mutex)])
    b.branch(head)
    b.position_at_end(out)
    b.ret_void()
    pool.run = run


def _add_worker(pool: _PoolModule) -> None:
    """``worker(arg)``: wait for a new generation, run its chunks, repeat."""
    m, generation, job_cv, ticks = pool.m, pool.generation, pool.job_cv, pool.ticks
    now_ns, note_starved, note_with_core = pool.now_ns, pool.note_starved, pool.note_with_core
    run = pool.run
    worker = ir.Function(m, ir.FunctionType(I8P, [I8P]), name="worker")
    worker.linkage = "internal"
    b = ir.IRBuilder(worker.append_basic_block("entry"))
    seen_slot = b.alloca(I32)
    spins_slot, cpu_slot, wall_slot = b.alloca(I64), b.alloca(I64), b.alloca(I64)
    b.store(b.load_atomic(generation, "acquire", 4), seen_slot)
    top, spin, spin_next, check, starving, sleep, work = (
        worker.append_basic_block(n) for n in
        ("top", "spin", "spin_next", "check", "starving", "sleep", "work"))

    def nanoseconds(clock_id):
        return b.call(now_ns, [ir.Constant(I32, clock_id)])

    def starved(cpu_start, wall_start):
        """Whether this thread got less than _CONTENTION_SHARE of the time since the two
        clock readings, and whether that time was long enough to pause the pool (i1
        values)."""
        cpu = b.sub(nanoseconds(_THREAD_CPU_CLOCK), cpu_start)
        wall = b.sub(nanoseconds(_MONOTONIC_CLOCK), wall_start)
        part, whole = _CONTENTION_SHARE
        short = b.and_(b.icmp_signed(">", wall, ir.Constant(I64, _CONTENTION_MIN_NS)),
                       b.icmp_signed("<", b.mul(cpu, ir.Constant(I64, whole)),
                                     b.mul(wall, ir.Constant(I64, part))))
        return short, b.icmp_signed(">", wall, ir.Constant(I64, _PAUSE_MIN_WINDOW_NS))

    b.branch(top)
    b.position_at_end(top)
    started = b.call(ticks, [])
    b.store(ir.Constant(I64, 0), spins_slot)
    b.store(nanoseconds(_THREAD_CPU_CLOCK), cpu_slot)
    b.store(nanoseconds(_MONOTONIC_CLOCK), wall_slot)
    b.branch(spin)
    b.position_at_end(spin)
    new = b.icmp_unsigned("!=", b.load_atomic(generation, "acquire", 4), b.load(seen_slot))
    b.cbranch(new, work, spin_next)
    b.position_at_end(spin_next)
    pool.relax(b)
    elapsed = b.sub(b.call(ticks, []), started)
    spins = b.add(b.load(spins_slot), ir.Constant(I64, 1))
    b.store(spins, spins_slot)
    due = b.icmp_unsigned("==", b.and_(spins, ir.Constant(I64, _CONTENTION_CHECK_SPINS - 1)),
                          ir.Constant(I64, 0))
    within = b.icmp_unsigned("<", elapsed, ir.Constant(I64, _WORKER_SPIN_TICKS))
    keep = worker.append_basic_block("keep_spinning")
    b.cbranch(within, keep, sleep)
    b.position_at_end(keep)
    b.cbranch(due, check, spin)
    b.position_at_end(check)  # sleep now if the spin is losing its core to another thread
    spin_starved, spin_long = starved(b.load(cpu_slot), b.load(wall_slot))
    b.cbranch(spin_starved, starving, spin)
    b.position_at_end(starving)  # ... and, over a long enough time, pause the pool
    long_window = b.phi(I1)
    long_window.add_incoming(spin_long, check)
    pausing = worker.append_basic_block("pausing")
    b.cbranch(long_window, pausing, sleep)
    b.position_at_end(pausing)
    b.call(note_starved, [])
    b.branch(sleep)
    b.position_at_end(sleep)
    b.atomic_rmw("add", pool.sleeping, ir.Constant(I32, 1), "seq_cst")
    pool.wait_while(b, job_cv, lambda b: b.icmp_unsigned(
        "==", b.load_atomic(generation, "acquire", 4), b.load(seen_slot)), "sleep")
    b.atomic_rmw("sub", pool.sleeping, ir.Constant(I32, 1), "seq_cst")
    b.branch(work)
    b.position_at_end(work)
    g = b.load_atomic(generation, "acquire", 4)
    b.store(g, seen_slot)
    work_cpu, work_wall = nanoseconds(_THREAD_CPU_CLOCK), nanoseconds(_MONOTONIC_CLOCK)
    b.call(run, [g])
    # a job that did not get its core: sleep right away rather than spin against the thread
    # that took it
    with_core = worker.append_basic_block("with_core")
    job_starved, job_long = starved(work_cpu, work_wall)
    long_window.add_incoming(job_long, b.block)
    b.cbranch(job_starved, starving, with_core)
    b.position_at_end(with_core)
    b.call(note_with_core, [])
    b.branch(top)
    pool.worker = worker


def _add_parallel_for(pool: _PoolModule, ranged: bool = False, joined: bool = False) -> None:
    """``ft_parallel_for(fn, ctx, n)``: run ``fn(ctx, c)`` for every chunk ``c < n``, on the
    pool or, when it is busy, paused or has no workers, on the calling thread.

    With ``ranged``, ``ft_parallel_for_range(fn, ctx, n)`` for a ``fn(ctx, first, end)``
    that runs chunks ``[first, end)`` as one piece of work: on the pool each chunk is
    ``fn(ctx, c, c + 1)``, and a job the caller runs alone is the one call ``fn(ctx, 0, n)``
    (a paused pool runs it so at once, without timing a first chunk, and so does a pool
    whose workers are asleep: see ``native_abi.RANGE_SYMBOL``). With ``joined`` too,
    ``ft_parallel_for_joined``: a ranged job under the ordinary jobs' pause, which wakes
    sleeping workers (``native_abi.JOINED_SYMBOL``)."""
    m, workers, serial_until = pool.m, pool.workers, pool.serial_until
    busy, pooled_jobs, contended_jobs = pool.busy, pool.pooled_jobs, pool.contended_jobs
    now_ns = pool.now_ns
    pf = ir.Function(m, ir.FunctionType(VOID, [I8P, I8P, I64]),
                     name=(JOINED_SYMBOL if joined else RANGE_SYMBOL) if ranged
                     else PARALLEL_FOR_SYMBOL)
    fn_arg, ctx_arg, n_arg = pf.args
    b = ir.IRBuilder(pf.append_basic_block("entry"))
    caller_mode_slot = b.alloca(I32) if pool.has_mode else None
    # a ranged job's function and context, for the chunk wrapper the pool's threads call
    pair = b.alloca(ir.ArrayType(I8P, 2)) if ranged else None
    serial, parallel = pf.append_basic_block("serial"), pf.append_basic_block("parallel")
    start_epoch = pool.sigint_count(b)  # a SIGINT from here on drops the chunks not yet started
    chunk = b.bitcast(fn_arg, (RANGE_FN if ranged else CHUNK_FN).as_pointer())
    no_workers = b.icmp_unsigned("==", b.load_atomic(workers, "acquire", 4), ir.Constant(I32, 0))
    tiny = b.icmp_signed("<=", n_arg, ir.Constant(I64, 1))
    try_lock, check_clock, contended, pooled = (
        pf.append_basic_block(n) for n in ("try_lock", "check_clock", "contended", "pooled"))
    entry = b.block
    b.cbranch(b.or_(no_workers, tiny), serial, check_clock)
    b.position_at_end(check_clock)  # within a pause after a worker was starved: run alone...
    until = b.load_atomic(serial_until, "acquire", 8)
    if ranged and not joined:  # see _RANGED_PAUSE
        longer = b.mul(b.load_atomic(pool.backoff, "monotonic", 8),
                       ir.Constant(I64, _RANGED_PAUSE - 1))
        until = b.add(until, longer)
    now = b.call(now_ns, [ir.Constant(I32, _MONOTONIC_CLOCK)])
    paused = b.icmp_unsigned("<", now, until)
    b.cbranch(paused, contended, try_lock)
    b.position_at_end(contended)
    b.atomic_rmw("add", contended_jobs, ir.Constant(I64, 1), "monotonic")
    # (first chunk left, block) pairs for the phis of try_lock and serial
    to_pool, to_serial = [(ir.Constant(I64, 0), check_clock)], [(ir.Constant(I64, 0), entry)]
    if ranged:
        to_serial.append((ir.Constant(I64, 0), contended))
        b.branch(serial)
    else:
        started = b.call(now_ns, [ir.Constant(I32, _MONOTONIC_CLOCK)])
        b.call(chunk, [ctx_arg, ir.Constant(I64, 0)])
        took = b.sub(b.call(now_ns, [ir.Constant(I32, _MONOTONIC_CLOCK)]), started)
        # ... unless the rest is long enough that the cores the pool does get outweigh
        # waiting, at the end, for a worker's time slice
        rest = b.mul(took, b.sub(n_arg, ir.Constant(I64, 1)))
        long_job = b.icmp_signed(">", rest, ir.Constant(I64, _CONTENDED_POOL_NS))
        to_pool.append((ir.Constant(I64, 1), b.block))
        to_serial.append((ir.Constant(I64, 1), b.block))
        b.cbranch(long_job, try_lock, serial)
    b.position_at_end(try_lock)
    first = b.phi(I64)  # the first chunk left to run
    for value, block in to_pool:
        first.add_incoming(value, block)
    got = b.extract_value(b.cmpxchg(busy, ir.Constant(I32, 0), ir.Constant(I32, 1), "acquire",
                                    "monotonic"), 1)
    to_serial.append((first, b.block))
    b.cbranch(got, pooled, serial)
    b.position_at_end(pooled)
    if ranged and not joined:
        alone = _emit_alone_while_asleep(pool, b, now, (fn_arg, ctx_arg, n_arg), serial,
                                         start_epoch, caller_mode_slot)
        to_serial.append((ir.Constant(I64, 0), alone))
    b.atomic_rmw("add", pooled_jobs, ir.Constant(I64, 1), "monotonic")
    b.branch(parallel)

    b.position_at_end(serial)
    serial_first = b.phi(I64)
    for value, block in to_serial:
        serial_first.add_incoming(value, block)
    _emit_rest_on_caller(pool, b, chunk, ctx_arg, serial_first, n_arg, start_epoch, ranged)

    b.position_at_end(parallel)
    if ranged:  # the pool's threads run chunk c as fn(ctx, c, c + 1) through range_chunk
        for k, value in enumerate((fn_arg, ctx_arg)):
            b.store(value, b.gep(pair, [ir.Constant(I32, 0), ir.Constant(I32, k)]))
        job = (b.bitcast(pool.range_chunk, I8P), b.bitcast(pair, I8P))
    else:
        job = (fn_arg, ctx_arg)
    _emit_pool_job(pool, b, *job, n_arg, first, start_epoch, caller_mode_slot)
    b.ret_void()


def _emit_alone_while_asleep(pool: _PoolModule, b: ir.IRBuilder, now, job, serial,
                             start_epoch, caller_mode_slot):
    """At ``b``, in a ranged job with the pool taken: whether the workers can take it.

    A sleeping worker takes longer to get up (tens of microseconds, more on a busy machine)
    than a short job lasts, and the caller would then run the chunks one by one, or wait for
    a late one. With every worker asleep the job publishes no chunk and runs on the caller;
    when it is one of a burst (see _BURST_NS) it wakes them, for the jobs that follow, and
    so do the jobs of the next _WAKE_NS, while the workers get up. Returns the block that
    then branches to ``serial``, the caller's run (the pool freed); ``b`` is left where the
    job goes to the pool."""
    pf = b.function
    awake, settled, asleep_block, wake, release, alone = (
        pf.append_basic_block(name) for name in (
            "awake", "settled", "asleep", "wake", "release", "alone"))
    asleep = b.load_atomic(pool.sleeping, "acquire", 4)
    b.cbranch(b.icmp_unsigned("<", asleep, b.load_atomic(pool.workers, "acquire", 4)),
              awake, asleep_block)
    b.position_at_end(awake)
    woken_for = b.sub(now, b.load_atomic(pool.woken_at, "monotonic", 8))
    b.cbranch(b.icmp_signed(">", woken_for, ir.Constant(I64, _WAKE_NS)), settled, release)
    b.position_at_end(asleep_block)  # count the burst this job is in
    burst_from = b.load_atomic(pool.burst_from, "monotonic", 8)
    in_burst = b.icmp_signed("<", b.sub(now, burst_from), ir.Constant(I64, _BURST_NS))
    jobs = b.select(in_burst, b.add(b.load_atomic(pool.burst_jobs, "monotonic", 8),
                                    ir.Constant(I64, 1)), ir.Constant(I64, 1))
    b.store_atomic(jobs, pool.burst_jobs, "monotonic", 8)
    b.store_atomic(b.select(in_burst, burst_from, now), pool.burst_from, "monotonic", 8)
    b.cbranch(b.icmp_signed(">=", jobs, ir.Constant(I64, BURST_JOBS)), wake, release)
    b.position_at_end(release)
    b.store_atomic(ir.Constant(I32, 0), pool.busy, "release", 4)
    b.branch(alone)
    b.position_at_end(wake)  # a job of no chunks: it only wakes the workers
    b.store_atomic(now, pool.woken_at, "monotonic", 8)
    fn, ctx, n = job
    _emit_pool_job(pool, b, fn, ctx, n, n, start_epoch, caller_mode_slot)
    b.branch(alone)
    b.position_at_end(alone)
    b.atomic_rmw("add", pool.waking_jobs, ir.Constant(I64, 1), "monotonic")
    b.branch(serial)
    b.position_at_end(settled)
    return alone


def _emit_rest_on_caller(pool: _PoolModule, b: ir.IRBuilder, chunk, ctx, first, n,
                         start_epoch, ranged: bool) -> None:
    """At ``b``: chunks ``first..n-1`` on the calling thread, until a SIGINT (one call of a
    ranged job's function, a loop over the chunks otherwise); then return."""
    pf = b.function
    if ranged:
        call, done = pf.append_basic_block("serial.call"), pf.append_basic_block("serial.end")
        calm = b.icmp_unsigned("==", pool.sigint_count(b), start_epoch)
        b.cbranch(b.and_(b.icmp_signed("<", first, n), calm), call, done)
        b.position_at_end(call)
        b.call(chunk, [ctx, first, n])
        b.branch(done)
        b.position_at_end(done)
        b.ret_void()
        return
    entry = b.block
    loop_head, loop_body, loop_end = (pf.append_basic_block(name) for name in (
        "serial.head", "serial.body", "serial.end"))
    b.branch(loop_head)
    b.position_at_end(loop_head)  # for c in first..n-1, until a SIGINT: chunk(ctx, c)
    c = b.phi(I64)
    c.add_incoming(first, entry)
    more = b.icmp_signed("<", c, n)
    calm = b.icmp_unsigned("==", pool.sigint_count(b), start_epoch)
    b.cbranch(b.and_(more, calm), loop_body, loop_end)
    b.position_at_end(loop_body)
    b.call(chunk, [ctx, c])
    c.add_incoming(b.add(c, ir.Constant(I64, 1)), loop_body)
    b.branch(loop_head)
    b.position_at_end(loop_end)
    b.ret_void()


def _emit_pool_job(pool: _PoolModule, b: ir.IRBuilder, fn, ctx, n, first, start_epoch,
                   caller_mode_slot) -> None:
    """At ``b``, with the pool taken (``busy``): publish the job ``fn(ctx, c)`` for chunks
    ``first..n-1`` (none when ``first`` is ``n``: the job only wakes the workers), run
    chunks on this thread too, wait until every chunk has finished and free the pool;
    leaves ``b`` after that."""
    counter, done, job_fn, job_ctx = pool.counter, pool.done, pool.job_fn, pool.job_ctx
    job_n, generation, job_epoch = pool.job_n, pool.generation, pool.job_epoch
    mutex, job_cv, done_cv = pool.mutex, pool.job_cv, pool.done_cv
    lock, unlock, ticks = pool.lock, pool.unlock, pool.ticks
    pf = b.function
    gen = b.add(b.load_atomic(generation, "monotonic", 4), ir.Constant(I32, 1))
    gen_high = b.shl(b.zext(gen, I64), ir.Constant(I64, 32))
    b.store_atomic(b.or_(gen_high, ir.Constant(I64, _NO_CHUNK)), counter, "seq_cst", 8)
    b.store_atomic(fn, job_fn, "monotonic", 8)
    b.store_atomic(ctx, job_ctx, "monotonic", 8)
    b.store_atomic(n, job_n, "monotonic", 8)
    b.store_atomic(first, done, "monotonic", 8)
    b.store_atomic(start_epoch, job_epoch, "monotonic", 8)
    if pool.has_mode:
        b.store_atomic(float_mode.read(b, caller_mode_slot), pool.job_mode, "monotonic", 4)
    b.store_atomic(b.or_(gen_high, first), counter, "seq_cst", 8)  # claimable from here
    b.call(lock, [pool.ptr(b, mutex)])
    b.store_atomic(gen, generation, "seq_cst", 4)
    b.call(pool.broadcast, [pool.ptr(b, job_cv)])
    b.call(unlock, [pool.ptr(b, mutex)])
    b.call(pool.run, [gen])
    # every chunk is claimed; wait until the last one has finished
    spin, spin_next, sleep, release = (
        pf.append_basic_block(n) for n in ("spin", "spin_next", "sleep", "release"))
    waited_from = b.call(ticks, [])
    b.branch(spin)
    b.position_at_end(spin)
    all_done = b.icmp_unsigned(">=", b.load_atomic(done, "acquire", 8), n)
    b.cbranch(all_done, release, spin_next)
    b.position_at_end(spin_next)
    pool.relax(b)
    waited = b.sub(b.call(ticks, []), waited_from)
    b.cbranch(b.icmp_unsigned("<", waited, ir.Constant(I64, _CALLER_SPIN_TICKS)), spin, sleep)
    b.position_at_end(sleep)
    pool.wait_while(b, done_cv,
                    lambda b: b.icmp_unsigned("<", b.load_atomic(done, "acquire", 8), n), "sleep")
    b.branch(release)
    b.position_at_end(release)
    b.store_atomic(ir.Constant(I32, 0), pool.busy, "release", 4)


def _add_range_chunk(pool: _PoolModule) -> None:
    """``range_chunk(pair, c)``: chunk ``c`` of a ranged job, ``pair = {fn, ctx}`` on its
    caller's stack (the caller returns only when every chunk has finished)."""
    fn = ir.Function(pool.m, CHUNK_FN, name="range_chunk")
    fn.linkage = "internal"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    pair = b.bitcast(fn.args[0], I8P.as_pointer())
    target = b.bitcast(b.load(pair), RANGE_FN.as_pointer())
    ctx = b.load(b.gep(pair, [ir.Constant(I32, 1)]))
    c = fn.args[1]
    b.call(target, [ctx, c, b.add(c, ir.Constant(I64, 1))])
    b.ret_void()
    pool.range_chunk = fn


def _add_start(pool: _PoolModule) -> None:
    """``ft_pool_start(count)``: create the workers."""
    m, busy, workers, serial_until = pool.m, pool.busy, pool.workers, pool.serial_until
    backoff, calm_since, storage = pool.backoff, pool.calm_since, pool.storage
    mutex, job_cv, done_cv, create = pool.mutex, pool.job_cv, pool.done_cv, pool.create
    mutex_init, cond_init, worker = pool.mutex_init, pool.cond_init, pool.worker
    start_fn = ir.Function(m, ir.FunctionType(I32, [I32]), name=START_SYMBOL)
    b = ir.IRBuilder(start_fn.append_basic_block("entry"))
    for g_ in (workers, busy, pool.sleeping):
        b.store_atomic(ir.Constant(I32, 0), g_, "seq_cst", 4)
    for g_ in (serial_until, backoff, calm_since, pool.woken_at, pool.burst_from,
               pool.burst_jobs):
        b.store_atomic(ir.Constant(I64, 0), g_, "seq_cst", 8)
    for g_ in (mutex, job_cv, done_cv):
        b.store(ir.Constant(storage, None), g_)
    b.call(mutex_init, [pool.ptr(b, mutex), ir.Constant(I8P, None)])
    b.call(cond_init, [pool.ptr(b, job_cv), ir.Constant(I8P, None)])
    b.call(cond_init, [pool.ptr(b, done_cv), ir.Constant(I8P, None)])
    tid = b.alloca(I64)
    created = b.alloca(I32)
    b.store(ir.Constant(I32, 0), created)

    def spawn(i):
        rc = b.call(create, [tid, ir.Constant(I8P, None), b.bitcast(worker, I8P),
                             ir.Constant(I8P, None)])
        ok = b.icmp_signed("==", rc, ir.Constant(I32, 0))
        b.store(b.add(b.load(created), b.zext(ok, I32)), created)
    pool.counted_loop(b, start_fn, b.zext(start_fn.args[0], I64), spawn, "spawn")
    count = b.load(created)
    b.store_atomic(count, workers, "seq_cst", 4)
    b.ret(count)


def _add_reserve(pool: _PoolModule) -> None:
    """``ft_pool_reserve(on)``: hold the pool (1) so parallel loops run serially, or free
    it (0)."""
    m, busy = pool.m, pool.busy
    reserve = ir.Function(m, ir.FunctionType(I32, [I32]), name=RESERVE_SYMBOL)
    b = ir.IRBuilder(reserve.append_basic_block("entry"))
    take, give = reserve.append_basic_block("take"), reserve.append_basic_block("give")
    b.cbranch(b.icmp_unsigned("!=", reserve.args[0], ir.Constant(I32, 0)), take, give)
    b.position_at_end(take)
    got = b.extract_value(b.cmpxchg(busy, ir.Constant(I32, 0), ir.Constant(I32, 1), "acquire",
                                    "monotonic"), 1)
    b.ret(b.zext(got, I32))
    b.position_at_end(give)
    b.store_atomic(ir.Constant(I32, 0), busy, "release", 4)
    b.ret(ir.Constant(I32, 1))


def _add_stats(m: ir.Module, counters) -> None:
    """``ft_pool_stats(out)``: write the values of ``counters`` (i64 globals, or None for a
    zero) to ``out[0..]``, in the order of ``STATS_FIELDS``."""
    fn = ir.Function(m, ir.FunctionType(VOID, [I64.as_pointer()]), name=STATS_SYMBOL)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    for i, counter in enumerate(counters):
        value = ir.Constant(I64, 0) if counter is None else \
            b.load_atomic(counter, "monotonic", 8)
        b.store(value, b.gep(fn.args[0], [ir.Constant(I32, i)]))
    b.ret_void()


def _add_blas_hold(m: ir.Module, lock, unlock, mutex_init, global_) -> None:
    """``ft_pool_set_blas(set_threads)``: the BLAS's thread-count setter (it returns the
    count it replaces), or null; it resets the hold. ``ft_blas_hold(on)``: take (1) or give
    back (0) the hold that keeps BLAS on one thread (see the module doc)."""
    setter_type = ir.FunctionType(I32, [I32]).as_pointer()
    setter = global_("blas_set_threads", setter_type)
    holders = global_("blas_holders", I32)
    saved = global_("blas_saved_threads", I32)
    blas_mutex = global_("blas_mutex", ir.ArrayType(I64, 16))

    def mutex_ptr(b):
        return b.bitcast(blas_mutex, I8P)

    set_fn = ir.Function(m, ir.FunctionType(VOID, [I8P]), name=SET_BLAS_SYMBOL)
    b = ir.IRBuilder(set_fn.append_basic_block("entry"))
    b.store(ir.Constant(blas_mutex.value_type, None), blas_mutex)
    b.call(mutex_init, [mutex_ptr(b), ir.Constant(I8P, None)])
    b.store(ir.Constant(I32, 0), holders)
    b.store_atomic(b.bitcast(set_fn.args[0], setter_type), setter, "release", 8)
    b.ret_void()

    hold = ir.Function(m, ir.FunctionType(VOID, [I32]), name=BLAS_HOLD_SYMBOL)
    b = ir.IRBuilder(hold.append_basic_block("entry"))
    take, give, first, last, out, locked = (hold.append_basic_block(n) for n in (
        "take", "give", "first", "last", "out", "locked"))
    fn = b.load_atomic(setter, "acquire", 8)
    b.cbranch(b.icmp_unsigned("==", fn, ir.Constant(setter_type, None)), out, locked)
    b.position_at_end(locked)
    b.call(lock, [mutex_ptr(b)])
    count = b.load(holders)
    b.cbranch(b.icmp_unsigned("!=", hold.args[0], ir.Constant(I32, 0)), take, give)
    b.position_at_end(take)
    b.store(b.add(count, ir.Constant(I32, 1)), holders)
    unlock_block = hold.append_basic_block("unlock")
    b.cbranch(b.icmp_unsigned("==", count, ir.Constant(I32, 0)), first, unlock_block)
    b.position_at_end(first)  # the first holder: one thread, remembering the count it found
    b.store(b.call(fn, [ir.Constant(I32, 1)]), saved)
    b.branch(unlock_block)
    b.position_at_end(give)
    remaining = b.sub(count, ir.Constant(I32, 1))
    b.store(remaining, holders)
    b.cbranch(b.icmp_unsigned("==", remaining, ir.Constant(I32, 0)), last, unlock_block)
    b.position_at_end(last)  # the last holder: the count the first one found
    b.call(fn, [b.load(saved)])
    b.branch(unlock_block)
    b.position_at_end(unlock_block)
    b.call(unlock, [mutex_ptr(b)])
    b.branch(out)
    b.position_at_end(out)
    b.ret_void()


def _add_serial_helpers(m: ir.Module) -> None:
    """``ft_serial_for``: ``ft_parallel_for`` as a plain loop on the calling thread, and
    ``ft_serial_for_range``: ``ft_parallel_for_range`` as one call on it, for products
    whose BLAS threads cannot be held (see ``blas.register_gemm_symbols``)."""
    _serial_loop(m, SERIAL_SYMBOL)
    _serial_range(m, SERIAL_RANGE_SYMBOL)


def _serial_range(m: ir.Module, name: str) -> None:
    """``name(fn, ctx, n)``: ``fn(ctx, 0, n)`` when ``n > 0`` (see ``RANGE_FN``)."""
    pf = ir.Function(m, ir.FunctionType(VOID, [I8P, I8P, I64]), name=name)
    b = ir.IRBuilder(pf.append_basic_block("entry"))
    call, done = pf.append_basic_block("call"), pf.append_basic_block("done")
    b.cbranch(b.icmp_signed(">", pf.args[2], ir.Constant(I64, 0)), call, done)
    b.position_at_end(call)
    b.call(b.bitcast(pf.args[0], RANGE_FN.as_pointer()),
           [pf.args[1], ir.Constant(I64, 0), pf.args[2]])
    b.branch(done)
    b.position_at_end(done)
    b.ret_void()


def _serial_loop(m: ir.Module, name: str) -> None:
    pf = ir.Function(m, ir.FunctionType(VOID, [I8P, I8P, I64]), name=name)
    b = ir.IRBuilder(pf.append_basic_block("entry"))
    head, body, done = (pf.append_basic_block(n) for n in ("head", "body", "done"))
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64)
    i.add_incoming(ir.Constant(I64, 0), pf.entry_basic_block)
    b.cbranch(b.icmp_signed("<", i, pf.args[2]), body, done)
    b.position_at_end(body)
    b.call(b.bitcast(pf.args[0], CHUNK_FN.as_pointer()), [pf.args[1], i])
    i.add_incoming(b.add(i, ir.Constant(I64, 1)), body)
    b.branch(head)
    b.position_at_end(done)
    b.ret_void()


def serial_pool_module(triple: str) -> str:
    """``ft_parallel_for`` as a plain loop (``ft_parallel_for_range`` and
    ``ft_parallel_for_joined`` as one call), and a
    ``ft_pool_start`` that starts nothing."""
    m = ir.Module(name="functrans_serial_pool")
    m.triple = triple
    _serial_loop(m, PARALLEL_FOR_SYMBOL)
    _serial_range(m, RANGE_SYMBOL)
    _serial_range(m, JOINED_SYMBOL)
    _add_serial_helpers(m)
    start = ir.Function(m, ir.FunctionType(I32, [I32]), name=START_SYMBOL)
    ir.IRBuilder(start.append_basic_block("entry")).ret(ir.Constant(I32, 0))
    reserve = ir.Function(m, ir.FunctionType(I32, [I32]), name=RESERVE_SYMBOL)
    ir.IRBuilder(reserve.append_basic_block("entry")).ret(ir.Constant(I32, 1))
    # without threads of ours nothing races for the BLAS's thread count: no hold
    set_blas = ir.Function(m, ir.FunctionType(VOID, [I8P]), name=SET_BLAS_SYMBOL)
    ir.IRBuilder(set_blas.append_basic_block("entry")).ret_void()
    hold = ir.Function(m, ir.FunctionType(VOID, [I32]), name=BLAS_HOLD_SYMBOL)
    ir.IRBuilder(hold.append_basic_block("entry")).ret_void()
    _add_stats(m, (None,) * len(STATS_FIELDS))
    return str(m)
