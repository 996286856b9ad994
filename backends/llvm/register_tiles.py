"""Float32 products with few rows, ``C (+)= A @ B`` (a dense layer at a small batch), as
generated register-tiled code instead of BLAS ``sgemm``.

OpenBLAS packs both operands of every call into its own layout first. With few rows of C
(the MLP's batch of 128), each element of the weights B is used only ``m`` times after it
is packed, and the packing of B was 13% of the MLP step's time (docs/performance.md, "The
MLP step"). Here B is read in place: a tile of ``ROWS`` rows of C by ``VECTORS`` vectors
of columns is held in registers while k runs, each step loading ``VECTORS`` vectors of one
row of B and broadcasting one element of A per row. A tile of rows walks down the same
columns of B, which stay in the core's L2 cache (a block of at most ``BLOCK_DEPTH`` rows of
B: ``BLOCK_DEPTH * 64`` floats, 128 KiB). One thread, 128x784 by 784x512: 172 GFLOP/s
against OpenBLAS's 124-130 (C prototype of the same loop, blocks of 392).

Only for AVX-512 targets (16 floats a vector, 32 registers: 24 accumulators, 4 rows of B
and a broadcast), products whose column blocks are whole tiles: C's columns, and each
chunk's when the product is split (over columns only), a multiple of ``VECTORS`` vectors.
Each element of C sums each block's k terms in order from zero, one fused multiply-add
each, and adds the block's sum to C (its initial value when accumulating, else the earlier
blocks'), as BLAS adds its blocks: the same bits whatever the split and whichever thread
runs a chunk, and within a few ulps of BLAS (tests/test_register_tiles.py). A bias the
product accumulates onto stays out of the chain of sums: started from it, a 784-term sum's
rounding put a pre-activation of 1e-7 on the other side of a ReLU's kink from BLAS's and
float64's.

    >>> applies(step)                     # doctest: +SKIP
    True
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from functrans.backends.compiler import passes
from functrans.backends.compiler.fusion import DotKernel
from functrans.backends.llvm import targets
from functrans.backends.llvm.ir_builder import I32, I64
from functrans.backends.llvm.vector_math import F32

LANES = 16  # float32 lanes of a 512-bit vector
ROWS = 6  # rows of C in a tile: 6 x 4 accumulators of the 32 registers
VECTORS = 4  # vectors of columns in a tile
TILE_COLUMNS = LANES * VECTORS
# k in blocks of at most this many rows of B (even blocks): the tile's columns of a block,
# 512 x 64 floats, stay in L2 while the row tiles walk down C. C prototype, one thread,
# 128x512 by K (GFLOP/s): K=784 in one block 134, in blocks of 392 172, of 256 175, of 200
# 166; K=512 in one block 181-191, in blocks of 256 175.
BLOCK_DEPTH = 512
# only products with few rows of C: B is read again by each tile of rows, from L2; with
# many rows OpenBLAS's packing is paid for by the reuse. Unless the sums are short (a weight
# gradient over a batch, A transposed): up to L1_DEPTH rows of B, a tile's columns of B
# (32 KiB) stay in the L1 cache for every tile of rows, up to MAX_LONG_ROWS rows (the MLP's
# 512x512x128 and 784x512x128 weight gradients ran faster than OpenBLAS's).
MAX_ROWS = 256
MAX_LONG_ROWS = 1024
L1_DEPTH = 128
MIN_DEPTH = 64
PREFETCH_ROWS = 4  # rows of B ahead that each step of k asks the cache for
PREFETCH_VECTORS = (0, 1, 2, 3)  # ... its vectors of the tile's columns asked for


def applies(step: DotKernel, column_chunk: int | None = None) -> bool:
    """Whether ``step`` runs as register tiles: a float32 product of one matrix, B not
    transposed (A may be), at most MAX_ROWS rows of C (MAX_LONG_ROWS with A transposed
    and at most L1_DEPTH terms per element) and at least MIN_DEPTH terms, a scale only with one block of k,
    its columns (and ``column_chunk``, a split's columns per chunk) whole tiles, on an
    AVX-512 target; and the optimization ``register_tiles`` enabled."""
    if not passes.enabled("register_tiles") or not targets.current().has_avx512:
        return False
    if step.out is None or step.out.dtype != np.float32 or step.batch != 1:
        return False
    if step.rhs_transposed or (step.alpha != 1.0 and step.k > BLOCK_DEPTH):
        return False
    if step.m < 2 or step.k < MIN_DEPTH:
        return False
    if step.m > MAX_ROWS and not (step.lhs_transposed and step.k <= L1_DEPTH
                                  and step.m <= MAX_LONG_ROWS):
        return False
    if step.n % TILE_COLUMNS or (column_chunk is not None and column_chunk % TILE_COLUMNS):
        return False
    return True


def block_depth(k: int) -> int:
    """The terms of each block of k: even blocks of at most BLOCK_DEPTH."""
    blocks = -(-k // BLOCK_DEPTH)
    return -(-k // blocks)


def arguments(step: DotKernel) -> tuple:
    """The sizes :func:`kernel`'s function takes after ``j0, j1`` for ``step``: ``(m, n, k,
    block depth, A's stride between rows of C, A's stride between terms)`` as i64 values,
    then ``alpha`` (float) and whether C's initial value is added to (i64 0 or 1)."""
    m, n, k = step.m, step.n, step.k
    strides = (1, m) if step.lhs_transposed else (k, 1)
    sizes = [ir.Constant(I64, v) for v in (m, n, k, block_depth(k)) + strides]
    return sizes + [ir.Constant(F32, float(np.float32(step.alpha))),
                    ir.Constant(I64, int(step.accumulate))]


def kernel(mb) -> ir.Function:
    """The function ``void (float* A, float* B, float* C, i64 j0, i64 j1, <arguments>)``
    computing columns ``[j0, j1)`` of C (multiples of TILE_COLUMNS) for any product that
    :func:`applies`: sizes, strides and scale are arguments, so one function serves every
    product of a module and LLVM compiles the tile once (about 30 ms of LLVM a tile body:
    specialized to each product's sizes, the MLP step's four took 125 ms). A's element
    (row i of C, term t) is at ``i * row_stride + t * term_stride``: a transposed A (stored
    k x m) gives each tile's rows side by side in a row of A. The tiles walk C column tile
    by column tile, down the rows (row tiles outermost for a long C timed the same on the
    MLP step's weight gradients)."""
    vec = ir.VectorType(F32, LANES)
    fp = F32.as_pointer()
    fnty = ir.FunctionType(ir.VoidType(), [fp, fp, fp, I64, I64] + [I64] * 6 + [F32, I64])
    mb.kernel_count += 1
    fn = ir.Function(mb.module, fnty, name=f"tiles{mb.kernel_count}")
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    mb.names[fn.name] = "register-tiled float32 products"
    # explicit 512-bit vectors: on cores where LLVM prefers 256-bit ones it would otherwise
    # split each into two
    mb.function_attributes[fn.name] = \
        '"prefer-vector-width"="512" "min-legal-vector-width"="512"'
    a_ptr, b_ptr, c_ptr, j0, j1, m, n, k, depth, a_row, a_term, alpha1, accumulate = fn.args
    for arg in (a_ptr, b_ptr, c_ptr):
        arg.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    fma = mb.math.declare(f"llvm.fma.v{LANES}f32", vec, [vec] * 3)
    i8p = ir.PointerType(ir.IntType(8))
    prefetch = mb.math.declare("llvm.prefetch.p0", ir.VoidType(), [i8p, I32, I32, I32])
    undef = ir.Constant(vec, ir.Undefined)
    zeros = ir.Constant(ir.VectorType(I32, LANES), [0] * LANES)

    def splat(x):
        return b.shuffle_vector(b.insert_element(undef, x, ir.Constant(I32, 0)), undef, zeros)

    def c64(v):
        return ir.Constant(I64, v)

    alpha = splat(alpha1)
    last_row = b.sub(m, c64(1))
    prefetch_step = b.mul(n, c64(PREFETCH_ROWS))

    def tile(j, i, k_start, k_end, adds):
        """rows [i, i + ROWS) by columns [j, j + TILE_COLUMNS) (i64 values), k in
        [k_start, k_end). Rows past C's last (the last tile of rows) read its last row of
        A and store nothing: every row C has is summed in the same order, whatever m."""
        rows = [i] + [b.select(b.icmp_signed("<", b.add(i, c64(r)), m), b.add(i, c64(r)),
                               last_row) for r in range(1, ROWS)]
        a_rows = [b.mul(row, a_row) for row in rows]
        # each block of k sums from zero and is then added to C (as BLAS adds each of its
        # blocks): C's initial value and the earlier blocks' sums are not in the chain
        init = [ir.Constant(vec, [0.0] * LANES)] * VECTORS
        pre = b.block
        body = fn.append_basic_block("k.loop")
        done = fn.append_basic_block("k.done")
        b.branch(body)
        b.position_at_end(body)
        kk = b.phi(I64, name="k")
        kk.add_incoming(k_start, pre)
        acc = [[b.phi(vec) for _ in range(VECTORS)] for _ in range(ROWS)]
        for r in range(ROWS):
            for v in range(VECTORS):
                acc[r][v].add_incoming(init[v], pre)
        row_b = b.add(b.mul(kk, n), j)
        bv = [b.load(b.bitcast(b.gep(b_ptr, [b.add(row_b, c64(LANES * v))]), vec.as_pointer()),
                     align=4) for v in range(VECTORS)]
        # the next rows of B, ahead of their use: they come from L2 in a stride of n floats
        ahead = b.add(row_b, prefetch_step)
        for v in PREFETCH_VECTORS if PREFETCH_ROWS else ():
            target = b.gep(b_ptr, [b.add(ahead, c64(LANES * v))])
            b.call(prefetch, [b.bitcast(target, i8p),
                              ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)])
        a_term_offset = b.mul(kk, a_term)
        new = []
        for r in range(ROWS):
            x = b.load(b.gep(a_ptr, [b.add(a_rows[r], a_term_offset)]), align=4)
            new.append([b.call(fma, [splat(x), bv[v], acc[r][v]]) for v in range(VECTORS)])
        nxt = b.add(kk, c64(1), flags=["nuw", "nsw"])
        kk.add_incoming(nxt, b.block)
        for r in range(ROWS):
            for v in range(VECTORS):
                acc[r][v].add_incoming(new[r][v], b.block)
        b.cbranch(b.icmp_signed("<", nxt, k_end), body, done)
        b.position_at_end(done)
        c_base = b.add(b.mul(i, n), j)
        for r in range(ROWS):
            def store_row(r=r):
                c_row = b.add(c_base, b.mul(c64(r), n))
                for v in range(VECTORS):
                    ptr = b.bitcast(b.gep(c_ptr, [b.add(c_row, c64(LANES * v))]),
                                    vec.as_pointer())
                    # C = alpha * sum (+ C): one rounding of the sum, as BLAS (alpha 1:
                    # the sum itself, or C + sum)
                    added = b.call(fma, [alpha, new[r][v], b.load(ptr, align=4)])
                    b.store(b.select(adds, added, b.fmul(alpha, new[r][v])), ptr, align=4)
            if r == 0:
                store_row()
            else:
                with b.if_then(b.icmp_signed("<", b.add(i, c64(r)), m)):
                    store_row()

    def loop(start, end, step_size, body, name):
        """``body(x)`` for x in range(start, end, step_size), i64 values (start < end)."""
        pre = b.block
        head = fn.append_basic_block(f"{name}.loop")
        after = fn.append_basic_block(f"{name}.done")
        b.branch(head)
        b.position_at_end(head)
        x = b.phi(I64, name=name)
        x.add_incoming(start, pre)
        body(x)
        x_next = b.add(x, step_size, flags=["nuw", "nsw"])
        x.add_incoming(x_next, b.block)
        b.cbranch(b.icmp_signed("<", x_next, end), head, after)
        b.position_at_end(after)

    def block(k_start):
        k_end = b.select(b.icmp_signed("<", b.add(k_start, depth), k), b.add(k_start, depth), k)
        adds = b.or_(b.icmp_signed("!=", accumulate, c64(0)),
                     b.icmp_signed(">", k_start, c64(0)))

        def columns(body):
            loop(j0, j1, c64(TILE_COLUMNS), body, "j")

        def rows(body):
            loop(c64(0), m, c64(ROWS), body, "i")
        columns(lambda j: rows(lambda i: tile(j, i, k_start, k_end, adds)))

    with b.if_then(b.icmp_signed("<", j0, j1)):
        loop(c64(0), k, depth, block, "block")
    b.ret_void()
    return fn
