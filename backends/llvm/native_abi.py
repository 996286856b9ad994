"""What generated code, the runtime's support objects and the Python that drives them agree
on: the names they link against one another by, and the layout of the data they share.

One place for both sides: the code that builds the IR (:mod:`support_code`, the code
generator) and the code that loads and drives the objects (:mod:`interrupts`,
:mod:`thread_pool`, :mod:`program_cache`). The latter runs on a warm start, which builds no
IR: this module imports nothing.
"""

# ---- the SIGINT state block (see interrupts) -------------------------------------------------
#
# A cache line of its own (every polling thread reads it), which generated code links
# against. Its words: the SIGINT counter; when a segment last asked for the handler to be
# checked (cycle-counter ticks); Python's handler, to pass the signal on to; whether that
# handler takes (signal, siginfo, context) (SA_SIGINFO) or the signal alone.
STATE_SYMBOL = "ft_interrupt_state"
STATE_WORDS = 8
EPOCH, LAST_CHECK, PREVIOUS, PREVIOUS_SIGINFO = 0, 1, 2, 3
HANDLER_SYMBOL = "ft_interrupt_handler"
ADDRESS_SYMBOL = "ft_interrupt_state_address"

# What a segment returns besides 0: a SIGINT stopped it early; or, before doing anything,
# the handler is due a check (a handler replaced and restored since, by an event loop or a
# notebook cell, is covered again within about CHECK_TICKS: some 10 ms)
INTERRUPTED, CHECK_HANDLER = 1, 2
CHECK_TICKS = 1 << 25

# ---- the thread pool (see thread_pool) -------------------------------------------------------

PARALLEL_FOR_SYMBOL = "ft_parallel_for"  # void (chunk_fn, ctx, n_chunks)
# ft_parallel_for for a short job whose chunks cost more one by one than together (each a
# call with its own fixed cost, such as a BLAS call on a band of a matrix): void (range_fn,
# ctx, n_chunks), range_fn(ctx, first, end) running chunks [first, end). The chunks the
# calling thread runs alone (no worker, the pool busy or paused) are one call. It is for
# jobs well under a worker's spin (support_code._WORKER_SPIN_TICKS, about 2 ms): one that
# finds every worker asleep runs alone and wakes them for the next (see
# support_code._WAKE_NS), and a paused pool runs it on the caller at once, without timing a
# first chunk to send a long job to the pool after all (see support_code._CONTENDED_POOL_NS).
RANGE_SYMBOL = "ft_parallel_for_range"
# ft_parallel_for_range with the pool's ordinary rules (the pause of ordinary jobs; workers
# found asleep are woken for it, as for ft_parallel_for): for jobs of hundreds of
# microseconds whose pieces cost more one by one than together, such as a matrix product cut
# into row or column blocks (each block a BLAS call that packs the shared operand again).
# The chunks the calling thread runs alone are one call, as for RANGE_SYMBOL.
JOINED_SYMBOL = "ft_parallel_for_joined"
SERIAL_SYMBOL = "ft_serial_for"  # the same as a plain loop on the calling thread
SERIAL_RANGE_SYMBOL = "ft_serial_for_range"  # ft_parallel_for_range as one call on it
START_SYMBOL = "ft_pool_start"  # int (workers): starts them, returns how many run
RESERVE_SYMBOL = "ft_pool_reserve"  # int (on): hold the pool for one thread, or give it back
BLAS_HOLD_SYMBOL = "ft_blas_hold"  # void (on): BLAS on one thread while held
SET_BLAS_SYMBOL = "ft_pool_set_blas"  # void (setter): the BLAS's thread-count setter
STATS_SYMBOL = "ft_pool_stats"  # void (int64 *out): the counters of STATS_FIELDS
STATS_FIELDS = ("pooled_jobs", "contended_jobs", "pause_ns", "starved", "waking_jobs")
# A ranged job that finds every worker asleep wakes them only when it is the BURST_JOBS-th
# of a burst of such jobs (see support_code._BURST_NS)
BURST_JOBS = 4
