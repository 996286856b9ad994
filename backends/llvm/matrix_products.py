"""Matrix products: a :class:`~fusion.DotKernel` becomes calls of BLAS ``sgemm``/``dgemm`` (or
``gemv`` for a matrix times a vector), split into chunks on the thread pool when large, and
integer products a plain loop nest.

BLAS is called through symbols registered with the JIT linker (see :mod:`blas`), so the
machine code does not embed addresses and can be cached across processes.

    >>> gemm_split(step, threads=2)        # doctest: +SKIP
    ('n', 2)
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from functrans.backends.compiler import passes
from functrans.backends.compiler.fusion import DotKernel, Program
from functrans.backends.llvm import register_tiles, thread_pool
from functrans.backends.llvm.attention import AttentionStep
from functrans.backends.llvm.blas import (GEMM_FOR_SYMBOL, GEMM_JOINED_FOR_SYMBOL,
                                          GEMM_RANGE_FOR_SYMBOL)
from functrans.backends.llvm.control_flow import nested_programs
from functrans.backends.llvm.convolution import ConvolutionStep
from functrans.backends.llvm.ir_builder import I8, I8P, I32, I64, calls_only_function, emits
from functrans.backends.llvm.scalar_ops import constant
from functrans.backends.llvm.support_code import CHUNK_FN, RANGE_FN
from functrans.backends.llvm.vector_math import F32, F64

# A matrix product is split across the thread pool into a fixed number of chunks (each a
# single-threaded BLAS call, claimed dynamically). The split depends only on the product's
# shape and the pool's thread count, never on which threads are free, so results do not
# change from run to run. Products from GEMM_SPLIT_MIN_FLOPS up are split (from about there
# OpenBLAS would thread them itself, which the hold rules out), into chunks of at least
# GEMM_CHUNK_FLOPS: one per thread, or, from GEMM_FINE_SPLIT_FLOPS (milliseconds of work),
# GEMM_CHUNKS_PER_THREAD per thread, so that a thread that loses its core to another process
# holds up one chunk, not half the product, while the others take the rest. (Smaller
# products are not worth it: each chunk re-packs an operand, and on a busy machine the pool
# runs short jobs on the calling thread alone; see thread_pool.) A split of rows or columns
# re-packs the operand the chunks share once per chunk, so each such chunk keeps at least
# GEMM_CHUNK_EXTENT rows or columns (more when that operand is large); a batch of products
# re-packs nothing. Chunks beyond one per thread are only cut where each keeps
# GEMM_FINE_CHUNK_EXTENT rows or columns: with other processes on the cores, the 2048-row
# products of a transformer layer ran 5-10% faster in two chunks than in eight of 256 rows
# (whose re-packing competes for the shared cache), and on a quiet machine the two tie.
GEMM_SPLIT_MIN_FLOPS = 1 << 20
GEMM_CHUNK_FLOPS = 1 << 19
GEMM_CHUNKS_PER_THREAD = 4
GEMM_FINE_SPLIT_FLOPS = 1 << 28
GEMM_CHUNK_EXTENT = 128
GEMM_FINE_CHUNK_EXTENT = 1024
GEMM_MAX_CHUNKS = 64
# OpenBLAS runs a product of m * n * k up to this on one thread whatever its thread count
# (SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD in its interface/gemm.c): no hold needed
BLAS_SERIAL_MNK = 65536 * 4
# ... and a matrix-vector product whose matrix has fewer elements than this (2304 *
# GEMM_MULTITHREAD_THRESHOLD in its interface/gemv.c)
BLAS_SERIAL_GEMV_ELEMENTS = 2304 * 4
# A matrix-vector product reads each element of its matrix once, for two flops: it is bound
# by the memory it streams, not by arithmetic, so it is split by the size of its matrix, far
# below GEMM_SPLIT_MIN_FLOPS: from GEMV_SPLIT_MIN_ELEMENTS matrix elements into one band of C
# per thread, each of at least GEMV_CHUNK_ELEMENTS elements (256 KB of float32, about 8 us
# from the L3 cache) and GEMM_CHUNK_EXTENT rows or columns. Each core then streams its own
# part, and a batch-1 network whose weights exceed one core's L2 cache (the MLP
# 784-512-512-10: 2.6 MB against 2 MB) keeps each core's half there from call to call
# (measured: docs/performance.md). The bands run through ft_parallel_for_range: when the
# calling thread runs them alone (a paused pool) they are one BLAS call, as fast as the
# product unsplit, where two half-width calls cost a few percent more.
GEMV_SPLIT_MIN_ELEMENTS = 1 << 17
GEMV_CHUNK_ELEMENTS = 1 << 16
# The bands must give the bits of the whole call, or a result would depend on whether the
# pool was paused. OpenBLAS's gemv kernels (0.3.30, x86-64) sum an element of C in an order
# that depends on its place in the call: the "N" kernel (y = A x, A column-major as stored)
# sums the first (length mod 16) rows of a call and its last (length mod 4) in another order
# than the rest, the "T" kernel (y = Aᵀ x) its last (length mod 8) columns, and sums of a
# few terms go to other code. So bands are cut at multiples of GEMV_BAND_ALIGN, an "N"
# product only when its length is a multiple of it too, and only products summing at least
# GEMV_MIN_DEPTH terms; the others are not banded (a larger one still splits as a matrix
# product, whose chunks a paused pool runs one by one). tests/test_gemv_bands.py checks the
# bits of the bands against the whole call.
GEMV_BAND_ALIGN = 16
GEMV_MIN_DEPTH = 16
# Ranged jobs are for jobs shorter than a worker's spin (see native_abi.RANGE_SYMBOL): up to
# this size (8 MB of float32, about a millisecond from memory); a larger product splits as a
# matrix product.
GEMV_BANDED_MAX_ELEMENTS = 1 << 21
# A split product whose blocks the calling thread joins into one call when it runs them alone
# (see joined_blocks) must give the same bits either way. OpenBLAS 0.3.30 sends products of
# m * n * k up to 100**3 to its small-matrix kernels (SkylakeX), which sum otherwise than its
# blocked ones: a block under that bound, of a product over it, changed the bits (32x300x128
# cut in two, among 323 of 2024 small-m cases). So each block keeps at least this many.
JOINED_MIN_BLOCK_MNK = 1 << 21


def matrix_vector(step: DotKernel) -> str | None:
    """Whether a float product is a matrix times a vector, BLAS's ``gemv``: "m" when C has
    one row (a batch-1 dense layer, ``x @ w``), "n" when it has one column (``w @ x``), else
    None. OpenBLAS's ``gemm`` with one row or column packs its operands as for a matrix
    product: ``gemv`` reads the matrix once, in place (measured: docs/performance.md).
    None too with the optimization ``matrix_vector`` disabled (see ``disable_passes``)."""
    if not passes.enabled("matrix_vector"):
        return None
    if step.m == 1:
        return "m"
    if step.n == 1:
        return "n"
    return None


def gemv_transposed(step: DotKernel) -> bool:
    """Whether BLAS runs a matrix-vector product as ``gemv("T")`` (see :func:`gemm_calls`):
    x @ w with w stored transposed, or w @ x with w stored as it is."""
    return step.rhs_transposed if matrix_vector(step) == "m" else not step.lhs_transposed


def gemv_bands(step: DotKernel, threads: int | None = None) -> tuple:
    """``(chunks, band)``: a batch-1 matrix-vector product cut into ``chunks`` bands of C
    of ``band`` rows or columns (the last one shorter) for ``threads`` threads (default:
    the pool's), run by ``ft_parallel_for_range``; ``(1, length of C)`` when it is not cut
    so (see GEMV_SPLIT_MIN_ELEMENTS and GEMV_BAND_ALIGN). The 784x512 and 512x512 layers
    of an MLP at batch 1 on two threads: ``(2, 256)``."""
    threads = thread_pool.compiled_threads() if threads is None else threads
    vector = matrix_vector(step) if step.batch == 1 else None
    length = (step.n if vector == "m" else step.m) if vector else 0
    elements = length * step.k
    if (threads < 2 or not GEMV_SPLIT_MIN_ELEMENTS <= elements <= GEMV_BANDED_MAX_ELEMENTS
            or step.k < GEMV_MIN_DEPTH
            or (not gemv_transposed(step) and length % GEMV_BAND_ALIGN)):
        return 1, length
    chunks = min(threads, elements // GEMV_CHUNK_ELEMENTS, length // GEMM_CHUNK_EXTENT)
    if chunks < 2:
        return 1, length
    band = -(-length // chunks)
    band = -(-band // GEMV_BAND_ALIGN) * GEMV_BAND_ALIGN
    return -(-length // band), band


def gemm_split(step: DotKernel, threads: int | None = None) -> tuple:
    """``(axis, chunks)``: how a product is split for ``threads`` threads (default: the thread
    pool's), over "batch" elements, rows of C ("m") or columns of C ("n") (the longer side:
    each chunk re-packs the other operand); ``chunks`` is 1 for a product run by one BLAS
    call. On two threads, a 128x784 by 784x512 product: ``("n", 2)``, two chunks of 256
    columns; an 8192x512 by 512x512 one: ``("m", 8)``, eight chunks of 1024 rows. A product
    that runs as register tiles (see :mod:`register_tiles`), which pack nothing, is split
    over columns whatever its longer side."""
    threads = thread_pool.compiled_threads() if threads is None else threads
    bands, _ = gemv_bands(step, threads)
    if bands > 1:  # a matrix-vector product, by the size of its matrix
        return ("n" if matrix_vector(step) == "m" else "m"), bands
    flops = 2 * step.batch * step.m * step.n * step.k
    if threads < 2 or flops < GEMM_SPLIT_MIN_FLOPS:
        return None, 1
    per_thread = GEMM_CHUNKS_PER_THREAD if flops >= GEMM_FINE_SPLIT_FLOPS else 1
    wanted = min(flops // GEMM_CHUNK_FLOPS, threads * per_thread, GEMM_MAX_CHUNKS)
    if step.batch > 1:
        chunks = min(step.batch, wanted)
    else:
        axis, extent, other = ("n", step.n, step.m) if step.n >= step.m else ("m", step.m, step.n)
        chunks = min(extent // max(GEMM_CHUNK_EXTENT, other // 4), wanted)
        if chunks > threads:
            chunks = max(threads, min(chunks, extent // GEMM_FINE_CHUNK_EXTENT))
    if chunks > threads:
        chunks -= chunks % threads  # whole rounds, for balance on a quiet machine
    if chunks < 2:
        return None, 1
    if step.batch == 1 and axis == "m" and register_tiles.applies(step, -(-step.n // chunks)):
        axis = "n"  # register tiles pack nothing: columns, whose chunks are whole tiles
    return ("batch" if step.batch > 1 else axis), int(chunks)


def joined_blocks(step: DotKernel, threads: int | None = None) -> bool:
    """Whether the chunks of a product split into blocks of rows or columns of C (see
    :func:`gemm_split`) run through ``ft_parallel_for_joined``: one BLAS call for all of
    them when the calling thread runs them alone (a paused pool: a busy machine), where
    each block would pack the operand the blocks share again. Single-threaded OpenBLAS
    0.3.30 took 8-12% longer for a 128x512 product in two column blocks than in one call
    (docs/performance.md, "The MLP step"). Only splits of one chunk per thread: a longer
    job, cut finer, still goes to the pool during a pause (support_code._CONTENDED_POOL_NS);
    and blocks of at least JOINED_MIN_BLOCK_MNK.
    Only float32 products: their blocks give the bits of the whole call (each element of C
    sums its k terms in the same order whatever the block; tests/test_gemm_joined.py checks
    it), where OpenBLAS's ``dgemm`` summed some shapes' blocks otherwise (100x700x300 by
    any cut; 256x1024x512 by some)."""
    threads = thread_pool.compiled_threads() if threads is None else threads
    if (step.out is not None and step.out.dtype != np.float32) or matrix_vector(step):
        return False  # a matrix-vector product's gemv blocks: see GEMV_BAND_ALIGN
    axis, chunks = gemm_split(step, threads)
    if axis not in ("m", "n") or not 1 < chunks <= threads or gemv_bands(step, threads)[0] > 1:
        return False
    extent = step.m if axis == "m" else step.n
    rows = -(-extent // chunks)
    smallest = extent - (-(-extent // rows) - 1) * rows  # the last block's rows or columns
    return smallest * (step.m * step.n // extent) * step.k >= JOINED_MIN_BLOCK_MNK


def register_tiled(step: DotKernel, threads: int | None = None) -> bool:
    """Whether ``step`` runs as generated register tiles instead of ``sgemm`` (see
    :mod:`register_tiles`): a product whole or split over columns of C, each chunk's
    columns whole tiles."""
    axis, chunks = gemm_split(step, threads)
    if axis not in (None, "n") or gemv_bands(step, threads)[0] > 1:
        return False
    return register_tiles.applies(step, -(-step.n // chunks) if axis == "n" else None)


def splits_products(program: Program) -> bool:
    """Whether ``program`` (or a loop body in it) runs a matrix product, a convolution or
    blocked attention on the thread pool (its other products then keep BLAS to one
    thread)."""
    programs = [program] + [body.program for body in nested_programs(program)]
    return any((isinstance(s, DotKernel) and s.out.dtype in (np.float32, np.float64)
                and gemm_split(s)[1] > 1) or (isinstance(s, ConvolutionStep) and s.chunks() > 1)
               or (isinstance(s, AttentionStep) and s.chunks > 1)
               for p in programs for s in p.steps)



@emits(DotKernel)
def emit_dot(step: DotKernel, mb, b: ir.IRBuilder, pointer, table) -> None:
    dtype = step.out.dtype
    a_ptr, b_ptr, c_ptr = pointer(step.lhs), pointer(step.rhs), pointer(step.out)
    k = step.k
    if k == 0:
        if not step.accumulate:
            mb.loop(b, step.out.size,
                    lambda i: b.store(constant(dtype, 0), b.gep(c_ptr, [i])),
                    interleave=False)
        return
    if dtype in (np.float32, np.float64):
        emit_gemm(mb, b, step, a_ptr, b_ptr, c_ptr)
    elif step.accumulate or step.alpha != 1.0:
        raise NotImplementedError(f"llvm backend: a scaled or accumulating {dtype} product")
    else:
        emit_naive_dot(mb, b, step, a_ptr, b_ptr, c_ptr)


def emit_gemm(mb, b, step: DotKernel, a_ptr, b_ptr, c_ptr):
    """Row-major C = op(A) op(B) as the column-major product Cᵀ = op(B)ᵀ op(A)ᵀ: BLAS
    sees our row-major B as its first operand and A as its second. A large product is
    split into chunks (see :func:`gemm_split`) that the thread pool runs, each a
    single-threaded BLAS call: a product large enough for BLAS to thread holds BLAS to
    one thread while it runs (see :mod:`thread_pool`), so that its result never depends
    on the BLAS thread count another thread left behind."""
    if matrix_vector(step):
        held = step.m * step.n * step.k >= BLAS_SERIAL_GEMV_ELEMENTS  # per call
    else:
        held = step.batch * step.m * step.n * step.k > BLAS_SERIAL_MNK
    if held:
        hold = mb.math.declare(thread_pool.BLAS_HOLD_SYMBOL, ir.VoidType(), [I32])
        b.call(hold, [ir.Constant(I32, 1)])
    axis, chunks = gemm_split(step)
    if chunks <= 1:
        gemm_calls(mb, b, step, a_ptr, b_ptr, c_ptr, lambda ty, v: mb.entry_alloca(b, ty))
    else:
        emit_split_gemm(mb, b, step, a_ptr, b_ptr, c_ptr, axis, chunks)
    if held:
        b.call(hold, [ir.Constant(I32, 0)])


def emit_split_gemm(mb, b, step: DotKernel, a_ptr, b_ptr, c_ptr, axis: str, chunks: int):
    """The product in ``chunks`` chunks along ``axis``, run by ``ft_gemm_for`` (by
    ``ft_gemm_for_joined`` when :func:`joined_blocks`), or the bands of a matrix-vector
    product (see :func:`gemv_bands`), run by ``ft_gemm_for_range``. Each
    chunk writes its own block of C with the whole k sum, so which thread runs which
    chunk never changes the result."""
    mb.kernel_count += 1
    name = f"gemm{mb.kernel_count}_chunk"
    mb.names[name] = f"a matrix product {step.describe()}"
    extent = {"batch": step.batch, "m": step.m, "n": step.n}[axis]
    bands, rows = gemv_bands(step)
    joined = bands == 1 and joined_blocks(step)
    ranged = bands > 1 or joined
    if bands == 1:
        rows = -(-extent // chunks)
    chunks = -(-extent // rows)
    fn = ir.Function(mb.module, RANGE_FN if ranged else CHUNK_FN, name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    calls_only_function(fn)
    cb = ir.IRBuilder(fn.append_basic_block("entry"))
    ctx = cb.bitcast(fn.args[0], I8P.as_pointer())
    stack = ir.IRBuilder(fn.entry_basic_block)
    stack.position_at_start(fn.entry_basic_block)
    mb.skip_chunk_if_interrupted(cb, ctx, 3)
    ptrs = [cb.bitcast(cb.load(cb.gep(ctx, [ir.Constant(I64, k)], inbounds=True)), p.type)
            for k, p in enumerate((a_ptr, b_ptr, c_ptr))]
    # chunk c (ranged: chunks [first, end)) is rows [start, end) of extent
    start = cb.mul(fn.args[1], ir.Constant(I64, rows), flags=["nuw", "nsw"])
    if ranged:
        end = cb.mul(fn.args[2], ir.Constant(I64, rows), flags=["nuw", "nsw"])
    else:
        end = cb.add(start, ir.Constant(I64, rows), flags=["nuw", "nsw"])
    end = cb.select(cb.icmp_signed("<", end, ir.Constant(I64, extent)), end,
                    ir.Constant(I64, extent))
    slot = lambda ty, v: stack.alloca(ty)  # noqa: E731 (stack slots in the entry block)
    gemm_calls(mb, cb, step, *ptrs, slot, split=(axis, start, end))
    cb.ret_void()
    fn = mb.shared(fn)
    ctx = mb.chunk_context(b, (a_ptr, b_ptr, c_ptr))
    symbol = GEMM_JOINED_FOR_SYMBOL if joined else (
        GEMM_RANGE_FOR_SYMBOL if ranged else GEMM_FOR_SYMBOL)
    gemm_for = mb.math.declare(symbol, ir.VoidType(), [I8P, I8P, I64])
    b.call(gemm_for, [b.bitcast(fn, I8P), ctx, ir.Constant(I64, chunks)])


def gemm_calls(mb, b, step: DotKernel, a_ptr, b_ptr, c_ptr, new_slot, split=None):
    """The BLAS call(s) of ``step`` at ``b``: all of it, or with ``split = (axis, start,
    end)`` (i64 values) the batch elements, rows of C ("m") or columns of C ("n") in
    ``[start, end)``. ``new_slot(type, None)`` makes a stack slot."""
    # the tiles take columns of C: a split of rows or batches (a plan made with another
    # thread count than register_tiled's) goes to BLAS
    if register_tiled(step) and (split is None or split[0] == "n"):
        if mb.tile_kernel is None:
            mb.tile_kernel = register_tiles.kernel(mb)
        tiles = mb.tile_kernel
        j0, j1 = (split[1], split[2]) if split is not None else (ir.Constant(I64, 0),
                                                                 ir.Constant(I64, step.n))
        b.call(tiles, [a_ptr, b_ptr, c_ptr, j0, j1] + register_tiles.arguments(step))
        return
    ty = F32 if step.out.dtype == np.float32 else F64
    tp = ty.as_pointer()
    i32p = I32.as_pointer()
    gemm = mb.math.declare("ft_sgemm" if ty == F32 else "ft_dgemm", ir.VoidType(),
                             [I8P, I8P, i32p, i32p, i32p, tp, tp, i32p, tp, i32p, tp, tp, i32p])
    m, n, k = step.m, step.n, step.k
    axis, start, end = split if split is not None else (None, None, None)

    # Fortran passes every argument by reference: stack slots (in the entry block: a
    # product inside a loop body must not grow the stack per iteration)
    def slot(ty_, value):
        if split is None and not isinstance(value, ir.Value):
            return mb.constant_slot(b, ty_, value)
        p = new_slot(ty_, None)
        b.store(value if isinstance(value, ir.Value) else ir.Constant(ty_, value), p)
        return p

    def i64(v):
        return ir.Constant(I64, v)

    size = b.trunc(b.sub(end, start), I32) if axis in ("m", "n") else None
    args = dict(
        trans_b=slot(I8, ord("T" if step.rhs_transposed else "N")),
        trans_a=slot(I8, ord("T" if step.lhs_transposed else "N")),
        m=slot(I32, size if axis == "n" else n), n=slot(I32, size if axis == "m" else m),
        k=slot(I32, k),
        lda=slot(I32, max(1, k if step.rhs_transposed else n)),
        ldb=slot(I32, max(1, m if step.lhs_transposed else k)),
        ldc=slot(I32, max(1, n)), alpha=slot(ty, step.alpha),
        beta=slot(ty, 1.0 if step.accumulate else 0.0))

    vector = matrix_vector(step)
    if vector:
        gemv = mb.math.declare("ft_sgemv" if ty == F32 else "ft_dgemv", ir.VoidType(),
                                 [I8P, i32p, i32p, tp, tp, i32p, tp, i32p, tp, tp, i32p])
        unit = slot(I32, 1)
        # BLAS reads our row-major B as the column-major matrix B_cm = Bᵀ (and A as Aᵀ;
        # see emit_gemm). With m == 1, y = op(B)ᵀ x (x the row of A) is gemv of B_cm,
        # transposed when B is stored transposed; with n == 1, y = op(A) x (x the column
        # of B) is gemv of A_cm, transposed unless A is stored transposed. (rows, cols):
        # the matrix as stored, column-major.
        matrix_is_b = vector == "m"
        if matrix_is_b:
            flip = step.rhs_transposed
            rows, cols = (args["k"], args["m"]) if flip else (args["m"], args["k"])
        else:
            flip = not step.lhs_transposed
            rows, cols = (args["k"], args["n"]) if flip else (args["n"], args["k"])
        trans = slot(I8, ord("T" if flip else "N"))

    def call(a, bb, c):
        if axis == "m":  # rows start.. of op(A) and of C
            a = b.gep(a, [start if step.lhs_transposed else b.mul(start, i64(k))])
            c = b.gep(c, [b.mul(start, i64(n))])
        elif axis == "n":  # columns start.. of op(B) and of C
            bb = b.gep(bb, [b.mul(start, i64(k)) if step.rhs_transposed else start])
            c = b.gep(c, [start])
        if vector:
            matrix, ld, x = (bb, args["lda"], a) if matrix_is_b else (a, args["ldb"], bb)
            b.call(gemv, [trans, rows, cols, args["alpha"], matrix, ld, x, unit,
                          args["beta"], c, unit])
            return
        b.call(gemm, [args["trans_b"], args["trans_a"], args["m"], args["n"], args["k"],
                      args["alpha"], bb, args["lda"], a, args["ldb"], args["beta"], c,
                      args["ldc"]])

    def one(bi):
        if bi is None:
            return call(a_ptr, b_ptr, c_ptr)
        call(b.gep(a_ptr, [b.mul(bi, i64(m * k))]), b.gep(b_ptr, [b.mul(bi, i64(k * n))]),
             b.gep(c_ptr, [b.mul(bi, i64(m * n))]))

    if axis == "batch":
        mb.loop(b, step.batch, one, name="batch", bounds=(start, end))
    elif step.batch == 1:
        one(None)
    else:
        mb.loop(b, step.batch, one, name="batch")


def emit_naive_dot(mb, b, step: DotKernel, a_ptr, b_ptr, c_ptr):
    """Integer products: C[b,i,j] = sum_k A[b,i,k] * B[b,k,j], with j innermost."""
    m, n, k = step.m, step.n, step.k
    dtype = step.out.dtype
    mb.loop(b, step.out.size, lambda i: b.store(constant(dtype, 0), b.gep(c_ptr, [i])))
    c64 = lambda v: ir.Constant(I64, v)  # noqa: E731

    def body(idx):
        bi, i, kk, j = idx
        a_off = (b.add(b.mul(bi, c64(m * k)), b.add(b.mul(kk, c64(m)), i)) if step.lhs_transposed
                 else b.add(b.mul(bi, c64(m * k)), b.add(b.mul(i, c64(k)), kk)))
        b_off = (b.add(b.mul(bi, c64(k * n)), b.add(b.mul(j, c64(k)), kk)) if step.rhs_transposed
                 else b.add(b.mul(bi, c64(k * n)), b.add(b.mul(kk, c64(n)), j)))
        c_off = b.add(b.mul(bi, c64(m * n)), b.add(b.mul(i, c64(n)), j))
        av = b.load(b.gep(a_ptr, [a_off]))
        bv = b.load(b.gep(b_ptr, [b_off]))
        cp = b.gep(c_ptr, [c_off])
        b.store(b.add(b.load(cp), b.mul(av, bv)), cp)

    mb.loop_nest(b, [step.batch, m, k, n], body)
