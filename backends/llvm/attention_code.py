"""The code of an :class:`~attention.AttentionStep`: a chunk function on the thread pool that
runs the step's blocks of rows (see :mod:`attention`).

For each block (``r`` rows of batch element ``bi`` from row ``i0``; ``R`` rows at most)::

    for each producer:  [lo, hi) = the columns whose value is live in these rows
                        tile[:r, lo:hi] = op(a)[bi][i0:i0+r] @ op(b)[bi][:, lo:hi]
    the row group over rows bi*m + i0 ... bi*m + i0 + r - 1, reading and writing the tiles
    for each consumer:  [lo, hi) = the columns of its block of rows holding a nonzero,
                        unless the other operand is not finite where the rest would be skipped
                        out[bi][i0:i0+r] (+)= rows[:, lo:hi] @ op(b)[bi][lo:hi]     (as it is)
                        out[bi][lo:hi] += rows[:, lo:hi]ᵀ @ op(b)[bi][i0:i0+r]      (transposed)

The products are single-threaded BLAS calls (BLAS is held to one thread around the step, as
around split products: see :mod:`matrix_products`); chunks of blocks, or of batch elements
when a transposed consumer sums over the blocks, run on the pool through ``ft_gemm_for``.
Chunk ``c`` uses row ``c`` of every tile. The scans for live and nonzero columns, and the
finiteness check, are small vectorized functions of their own.

    >>> emit_attention(step, mb, b, pointer, table)      # doctest: +SKIP
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from functrans.backends.compiler import exprs as E
from functrans.backends.compiler.fusion import unique_buffers
from functrans.backends.llvm import thread_pool
from functrans.backends.llvm.attention import AttentionStep
from functrans.backends.llvm.blas import GEMM_FOR_SYMBOL
from functrans.backends.llvm.expressions import Evaluator
from functrans.backends.llvm.ir_builder import (I1, I8, I8P, I32, I64, calls_only_function,
                                                emits, kernel_alloca)
from functrans.backends.llvm.kernels import build_kernel
from functrans.backends.llvm.scalar_ops import mem_type
from functrans.backends.llvm.support_code import CHUNK_FN
from functrans.backends.llvm.vector_math import F32, F64


def _i64(value) -> ir.Constant:
    return ir.Constant(I64, int(value))


@emits(AttentionStep)
def emit_attention(step: AttentionStep, mb, b: ir.IRBuilder, pointer, table) -> None:
    """The step in a segment: its chunks through ``ft_gemm_for``, BLAS held to one thread."""
    buffers = unique_buffers(step.writes() + step.reads())
    fn = _chunk_function(mb, step, buffers)
    ctx = mb.chunk_context(b, [pointer(buf) for buf in buffers])
    hold = mb.math.declare(thread_pool.BLAS_HOLD_SYMBOL, ir.VoidType(), [I32])
    gemm_for = mb.math.declare(GEMM_FOR_SYMBOL, ir.VoidType(), [I8P, I8P, I64])
    b.call(hold, [ir.Constant(I32, 1)])
    b.call(gemm_for, [b.bitcast(fn, I8P), ctx, _i64(step.chunks)])
    b.call(hold, [ir.Constant(I32, 0)])


class _Block:
    """What the code of one block works with: the chunk function's builder, the buffers'
    pointers (tiles at this chunk's row), the BLAS argument slots, and the block's batch
    element ``bi``, first row ``i0`` and row count ``r`` (i64 values)."""

    def __init__(self, mb, b, step, ptrs, slots, bi, i0, r):
        self.mb, self.b, self.step, self.ptrs, self.slots = mb, b, step, ptrs, slots
        self.bi, self.i0, self.r = bi, i0, r

    def at(self, buf, *terms):
        """A pointer into ``buf``, at the sum of ``terms`` elements (i64 values or ints)."""
        b = self.b
        offset = _i64(0)
        for term in terms:
            offset = b.add(offset, term if isinstance(term, ir.Value) else _i64(term))
        return b.gep(self.ptrs[buf.id], [offset])

    def mul(self, *factors):
        b = self.b
        value = _i64(1)
        for factor in factors:
            value = b.mul(value, factor if isinstance(factor, ir.Value) else _i64(factor))
        return value


def _chunk_function(mb, step: AttentionStep, buffers: list) -> ir.Function:
    """``attention<n>_chunk(ctx, c)``: the blocks of chunk ``c`` (module docstring)."""
    mb.kernel_count += 1
    name = f"attention{mb.kernel_count}_chunk"
    mb.names[name] = f"the blocks of {step.describe()[:200]}"
    fn = ir.Function(mb.module, CHUNK_FN, name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    calls_only_function(fn)  # loops of calls: the scans and the group are functions of their own
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ctx = b.bitcast(fn.args[0], I8P.as_pointer())
    ptrs = {buf.id: b.bitcast(b.load(b.gep(ctx, [_i64(k)], inbounds=True)),
                              mem_type(buf.dtype).as_pointer())
            for k, buf in enumerate(buffers)}
    mb.skip_chunk_if_interrupted(b, ctx, len(buffers))
    chunk = fn.args[1]
    for tile in step.tiles:  # this chunk's row of each tile
        ptrs[tile.id] = b.gep(ptrs[tile.id], [b.mul(chunk, _i64(step.block_rows * step.width))])
    slots = _gemm_slots(b, step)
    per = -(-step.units // step.chunks)
    first = b.mul(chunk, _i64(per))
    last = b.add(first, _i64(per))
    last = b.select(b.icmp_signed("<", last, _i64(step.units)), last, _i64(step.units))

    def block(bi, blk):
        i0 = b.mul(blk, _i64(step.block_rows))
        left = b.sub(_i64(step.rows_per_batch), i0)
        r = b.select(b.icmp_signed("<", left, _i64(step.block_rows)), left,
                     _i64(step.block_rows))
        _emit_block(_Block(mb, b, step, ptrs, slots, bi, i0, r))

    def unit(u):
        if step.accumulates:  # a batch element: its blocks in order
            _zero_transposed_outputs(mb, b, step, ptrs, u)
            mb.loop(b, step.blocks, lambda blk: block(u, blk), name="block")
        else:
            block(b.udiv(u, _i64(step.blocks)), b.urem(u, _i64(step.blocks)))

    mb.loop(b, step.units, unit, name="unit", bounds=(first, last))
    b.ret_void()
    return fn


def _gemm_slots(b, step) -> dict:
    """Stack slots for BLAS's by-reference arguments and the scans' results, shared by every
    call in the chunk function."""
    slots = {name: kernel_alloca(b, I8) for name in ("trans_a", "trans_b")}
    slots.update((name, kernel_alloca(b, I32)) for name in ("m", "n", "k", "lda", "ldb", "ldc"))
    slots.update((name, kernel_alloca(b, I64)) for name in ("lo", "hi"))
    for index in range(len(step.consumers)):
        # whether a consumer's other operand is finite, and for which batch element
        slots[("finite", index)] = kernel_alloca(b, I64)
        slots[("checked", index)] = kernel_alloca(b, I64)
        b.store(_i64(-1), slots[("checked", index)])
        b.store(_i64(0), slots[("finite", index)])
    for dtype in {dot.out.dtype for dot, _, _ in step.producers} | \
            {dot.out.dtype for dot, _ in step.consumers}:
        ty = F32 if dtype == np.float32 else F64
        slots[("alpha", dtype)] = kernel_alloca(b, ty)
        slots[("beta", dtype)] = kernel_alloca(b, ty)
    return slots


def _gemm(blk: _Block, dtype, m, n, k, alpha, a, lda, trans_a: bool, bb, ldb, trans_b: bool,
          beta: float, c, ldc) -> None:
    """Row-major ``C (m x n) = alpha op(A) op(B) + beta C``: ``A`` stored ``m x k`` rows of
    ``lda`` elements (``k x m`` when ``trans_a``), ``B`` stored ``k x n`` (``n x k``), as
    the column-major product ``Cᵀ = op(B)ᵀ op(A)ᵀ`` BLAS computes (see
    ``matrix_products.emit_gemm``)."""
    b, slots = blk.b, blk.slots
    ty = F32 if dtype == np.float32 else F64
    tp = ty.as_pointer()
    i32p = I32.as_pointer()
    gemm = blk.mb.math.declare("ft_sgemm" if ty == F32 else "ft_dgemm", ir.VoidType(),
                               [I8P, I8P, i32p, i32p, i32p, tp, tp, i32p, tp, i32p, tp, tp,
                                i32p])
    b.store(ir.Constant(I8, ord("T" if trans_a else "N")), slots["trans_a"])
    b.store(ir.Constant(I8, ord("T" if trans_b else "N")), slots["trans_b"])
    for name, value in (("m", n), ("n", m), ("k", k), ("lda", ldb), ("ldb", lda), ("ldc", ldc)):
        value = value if isinstance(value, ir.Value) else _i64(value)
        b.store(b.trunc(value, I32), slots[name])
    b.store(ir.Constant(ty, float(alpha)), slots[("alpha", np.dtype(dtype))])
    b.store(ir.Constant(ty, float(beta)), slots[("beta", np.dtype(dtype))])
    b.call(gemm, [slots["trans_b"], slots["trans_a"], slots["m"], slots["n"], slots["k"],
                  slots[("alpha", np.dtype(dtype))], bb, slots["lda"], a, slots["ldb"],
                  slots[("beta", np.dtype(dtype))], c, slots["ldc"]])


def _emit_block(blk: _Block) -> None:
    step, b = blk.step, blk.b
    width, m = step.width, step.rows_per_batch
    row0 = b.add(b.mul(blk.bi, _i64(m)), blk.i0)
    for index, (dot, tile, live) in enumerate(step.producers):
        if live is None:
            lo, hi = _i64(0), _i64(width)
        else:
            lo, hi = _live_columns(blk, index, row0)
        with b.if_then(b.icmp_signed("<", lo, hi)):
            _producer_gemm(blk, dot, tile, lo, hi)
    kernel_fn, kernel_buffers = build_kernel(blk.mb, step.group)
    b.call(kernel_fn, [blk.ptrs[buf.id] for buf in kernel_buffers] + [row0, b.add(row0, blk.r)])
    for index, (dot, rows) in enumerate(step.consumers):
        tiled = any(rows.id == t.id for t in step.tiles)
        block_rows = blk.ptrs[rows.id] if tiled else blk.at(rows, blk.mul(row0, width))
        if dot.lhs_transposed:
            _transposed_consumer(blk, index, dot, block_rows)
        else:
            _consumer(blk, index, dot, block_rows)


def _producer_gemm(blk: _Block, dot, tile, lo, hi) -> None:
    """Rows ``i0 .. i0 + r`` and columns ``lo .. hi`` of the product, into the tile."""
    b, bi, i0 = blk.b, blk.bi, blk.i0
    m, n, k = dot.m, dot.n, dot.k
    if dot.lhs_transposed:  # stored [batch](k x m)
        a, lda = blk.at(dot.lhs, blk.mul(bi, k * m), i0), m
    else:
        a, lda = blk.at(dot.lhs, blk.mul(b.add(blk.mul(bi, m), i0), k)), k
    if dot.rhs_transposed:  # stored [batch](n x k)
        bb, ldb = blk.at(dot.rhs, blk.mul(bi, n * k), blk.mul(lo, k)), k
    else:
        bb, ldb = blk.at(dot.rhs, blk.mul(bi, k * n), lo), n
    c = b.gep(blk.ptrs[tile.id], [lo])
    _gemm(blk, dot.out.dtype, blk.r, b.sub(hi, lo), k, dot.alpha, a, lda, dot.lhs_transposed,
          bb, ldb, dot.rhs_transposed, 0.0, c, blk.step.width)


def _consumer(blk: _Block, index: int, dot, block_rows) -> None:
    """``out[bi][i0:i0+r] (+)= rows[:, lo:hi] @ op(b)[bi][lo:hi]``, ``[lo, hi)`` the block's
    nonzero columns where skipping the rest is exact."""
    b, bi = blk.b, blk.bi
    width, n, m = blk.step.width, dot.n, blk.step.rows_per_batch
    base = blk.at(dot.rhs, blk.mul(bi, n * width))  # stored [batch](width x n), or (n x width)
    lo, hi = _nonzero_columns(blk, index, dot.out.dtype, block_rows, base, n * width)
    if dot.rhs_transposed:
        bb, ldb = b.gep(base, [lo]), width
    else:
        bb, ldb = b.gep(base, [blk.mul(lo, n)]), n
    c = blk.at(dot.out, blk.mul(b.add(blk.mul(bi, m), blk.i0), n))
    _gemm(blk, dot.out.dtype, blk.r, n, b.sub(hi, lo), dot.alpha, b.gep(block_rows, [lo]), width,
          False, bb, ldb, dot.rhs_transposed, 1.0 if dot.accumulate else 0.0, c, n)


def _transposed_consumer(blk: _Block, index: int, dot, block_rows) -> None:
    """``out[bi][lo:hi] += rows[:, lo:hi]ᵀ @ op(b)[bi][i0:i0+r]`` (the output was zeroed or
    holds the value to add to), ``[lo, hi)`` as for :func:`_consumer`."""
    b, bi, i0 = blk.b, blk.bi, blk.i0
    width, n, m = blk.step.width, dot.n, blk.step.rows_per_batch
    base = blk.at(dot.rhs, blk.mul(bi, n * m))
    if dot.rhs_transposed:  # stored [batch](n x m)
        bb, ldb = b.gep(base, [i0]), m
    else:  # stored [batch](m x n)
        bb, ldb = b.gep(base, [blk.mul(i0, n)]), n
    lo, hi = _nonzero_columns(blk, index, dot.out.dtype, block_rows, base, n * m)
    c = blk.at(dot.out, blk.mul(bi, width * n), blk.mul(lo, n))
    _gemm(blk, dot.out.dtype, b.sub(hi, lo), n, blk.r, dot.alpha, b.gep(block_rows, [lo]), width,
          True, bb, ldb, dot.rhs_transposed, 1.0, c, n)


def _zero_transposed_outputs(mb, b, step, ptrs, bi) -> None:
    """Zero ``out[bi]`` of each transposed consumer that does not add to its output: every
    block adds its rows' share."""
    memset = mb.math.declare("llvm.memset.p0.i64", ir.VoidType(), [I8P, I8, I64, I1])
    for dot, _ in step.consumers:
        if dot.lhs_transposed and not dot.accumulate:
            size = step.width * dot.n
            start = b.gep(ptrs[dot.out.id], [b.mul(bi, _i64(size))])
            b.call(memset, [b.bitcast(start, I8P), ir.Constant(I8, 0),
                            _i64(size * dot.out.dtype.itemsize), ir.Constant(I1, 0)])


# =============================================================================================
# Column ranges: live, nonzero; finite regions
# =============================================================================================


def _nonzero_columns(blk: _Block, index: int, dtype, block_rows, operand, size: int):
    """``[lo, hi)``: the columns of the block's rows (``r x width`` from ``block_rows``)
    outside which every element is zero, when consumer ``index``'s other operand (its batch
    element: ``size`` elements from ``operand``) holds no inf or NaN; else every column.
    Never empty: an all-zero block keeps column 0 (its zeros times a finite row add
    nothing). The operand is checked once per batch element a chunk runs, and only when a
    block has columns to skip."""
    b, slots = blk.b, blk.slots
    width = blk.step.width
    scan = _helper(blk.mb, "nonzero_columns", dtype)
    b.call(scan, [block_rows, blk.r, _i64(width), _i64(width), slots["lo"], slots["hi"]])
    lo, hi = b.load(slots["lo"]), b.load(slots["hi"])
    empty = b.icmp_signed(">=", lo, hi)
    lo = b.select(empty, _i64(0), lo)
    hi = b.select(empty, _i64(1), hi)
    skips = b.or_(b.icmp_signed(">", lo, _i64(0)), b.icmp_signed("<", hi, _i64(width)))
    checked, finite = slots[("checked", index)], slots[("finite", index)]
    with b.if_then(skips):
        with b.if_then(b.icmp_signed("!=", b.load(checked), blk.bi)):
            ok = b.call(_helper(blk.mb, "all_finite", dtype), [operand, _i64(1), _i64(size),
                                                               _i64(size)])
            b.store(b.zext(ok, I64), finite)
            b.store(blk.bi, checked)
    ok = b.icmp_signed("!=", b.load(finite), _i64(0))
    return b.select(ok, lo, _i64(0)), b.select(ok, hi, _i64(width))


def _live_columns(blk: _Block, index: int, row0):
    """``[lo, hi)``: the columns where producer ``index``'s value is live in some row of the
    block (empty when in none)."""
    b, slots, step = blk.b, blk.slots, blk.step
    fn, buffers = _live_function(blk.mb, step, index)
    b.call(fn, [blk.ptrs[buf.id] for buf in buffers] + [row0, b.add(row0, blk.r),
                                                        slots["lo"], slots["hi"]])
    return b.load(slots["lo"]), b.load(slots["hi"])


def _scan_loop(b, start, end, inits, body):
    """``for i in [start, end): values = body(i, values)`` from ``inits``, the loop
    carrying the values in registers; returns their final values."""
    fn = b.function
    pre = b.block
    head, done = fn.append_basic_block("scan.loop"), fn.append_basic_block("scan.done")
    b.cbranch(b.icmp_signed("<", start, end), head, done)
    b.position_at_end(head)
    i = b.phi(start.type)
    i.add_incoming(start, pre)
    carried = [b.phi(v.type) for v in inits]
    for phi, v in zip(carried, inits):
        phi.add_incoming(v, pre)
    values = body(i, carried)
    nxt = b.add(i, ir.Constant(start.type, 1), flags=["nsw"])
    latch = b.block
    i.add_incoming(nxt, latch)
    for phi, v in zip(carried, values):
        phi.add_incoming(v, latch)
    b.cbranch(b.icmp_signed("<", nxt, end), head, done)
    b.position_at_end(done)
    results = []
    for init, v in zip(inits, values):
        phi = b.phi(init.type)
        phi.add_incoming(init, pre)
        phi.add_incoming(v, latch)
        results.append(phi)
    return results


def _column_bounds(b, j, is_set, lo, hi, none):
    """``lo, hi`` widened to column ``j`` where ``is_set`` (``none``: the empty ``lo``); i32
    values, so that vectors of columns hold as many lanes as vectors of float32."""
    first = b.select(is_set, j, none)
    past = b.select(is_set, b.add(j, ir.Constant(I32, 1)), ir.Constant(I32, 0))
    return (b.select(b.icmp_signed("<", first, lo), first, lo),
            b.select(b.icmp_signed(">", past, hi), past, hi))


def _column_range(b, rows_from, rows_to, cols, is_set):
    """``[lo, hi)`` (i64 values): the columns of ``[0, cols)`` where ``is_set(row, column)``
    (an i64 and an i32 value) holds in some row of ``[rows_from, rows_to)``; ``lo >= hi``
    where it holds nowhere."""
    cols32 = b.trunc(cols, I32)

    def row(r, bounds):
        def column(j, inner):
            return _column_bounds(b, j, is_set(r, j), inner[0], inner[1], cols32)
        return _scan_loop(b, ir.Constant(I32, 0), cols32, bounds, column)
    lo, hi = _scan_loop(b, rows_from, rows_to, [cols32, ir.Constant(I32, 0)], row)
    return b.sext(lo, I64), b.sext(hi, I64)


def _new_function(mb, name: str, ret, args, description: str) -> ir.Function:
    fn = ir.Function(mb.module, ir.FunctionType(ret, args), name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    fn.attributes.add("noinline")
    mb.names[name] = description
    return fn


def _helper(mb, kind: str, dtype) -> ir.Function:
    """The module's scan ``kind`` for ``dtype`` (built once):

    * ``nonzero_columns(ptr, rows, cols, ld, lo*, hi*)``: the columns outside which every
      element of the ``rows x cols`` matrix (rows ``ld`` apart) is zero (NaN is nonzero);
    * ``all_finite(ptr, rows, cols, ld) -> i1``: whether none is an inf or NaN."""
    key = ("attention", kind, np.dtype(dtype).str)
    if key in mb.kernels:
        return mb.kernels[key]
    ty = F32 if np.dtype(dtype) == np.float32 else F64
    tp = ty.as_pointer()
    suffix = "f32" if ty == F32 else "f64"
    if kind == "nonzero_columns":
        fn = _new_function(mb, f"attention_nonzero_columns_{suffix}", ir.VoidType(),
                           [tp, I64, I64, I64, I64.as_pointer(), I64.as_pointer()],
                           "the scan for a block's nonzero columns")
    else:
        fn = _new_function(mb, f"attention_all_finite_{suffix}", I1, [tp, I64, I64, I64],
                           "the check that a region holds no inf or NaN")
    for arg in fn.args[:1]:
        arg.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ptr, rows, cols, ld = fn.args[:4]

    def element(r, j):
        if j.type != I64:
            j = b.zext(j, I64)
        return b.load(b.gep(ptr, [b.add(b.mul(r, ld), j)], inbounds=True))

    if kind == "nonzero_columns":
        lo, hi = _column_range(b, _i64(0), rows, cols, lambda r, j: b.fcmp_unordered(
            "!=", element(r, j), ir.Constant(ty, 0.0)))
        b.store(lo, fn.args[4])
        b.store(hi, fn.args[5])
        b.ret_void()
    else:
        infinity = ir.Constant(ty, float("inf"))

        def row(r, bad):
            def column(j, inner):
                magnitude = mb.math.intrinsic(b, "llvm.fabs", ty, element(r, j))
                finite = b.fcmp_ordered("<", magnitude, infinity)
                return [b.or_(inner[0], b.zext(b.not_(finite), I8))]
            return _scan_loop(b, _i64(0), cols, bad, column)
        bad, = _scan_loop(b, _i64(0), rows, [ir.Constant(I8, 0)], row)
        b.ret(b.icmp_unsigned("==", bad, ir.Constant(I8, 0)))
    mb.kernels[key] = fn
    return fn


def _live_function(mb, step: AttentionStep, index: int):
    """``(function, buffers)``: ``live(buffers..., row_start, row_end, lo*, hi*)``, the
    columns where producer ``index``'s value is live in rows ``[row_start, row_end)`` of
    the group (its condition evaluated at each row and column)."""
    _, _, condition = step.producers[index]
    buffers = unique_buffers(n.args[0] for n in E.loads([condition]))
    mb.kernel_count += 1
    fn = _new_function(mb, f"attention{mb.kernel_count}_live",
                       ir.VoidType(), [mem_type(buf.dtype).as_pointer() for buf in buffers]
                       + [I64, I64, I64.as_pointer(), I64.as_pointer()],
                       "the scan for the columns a block's products must compute")
    ptrs = {buf.id: arg for buf, arg in zip(buffers, fn.args)}
    start, end, lo_out, hi_out = fn.args[len(buffers):]
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    lo, hi = _column_range(b, start, end, _i64(step.width), lambda r, j: Evaluator(
        mb, b, [r, b.zext(j, I64)], ptrs).scalar(condition))
    b.store(lo, lo_out)
    b.store(hi, hi_out)
    b.ret_void()
    return fn, buffers
