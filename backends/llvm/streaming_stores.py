"""Non-temporal (streaming) stores for loop kernels whose data does not fit in the cache.

An ordinary store first reads the cache line it writes (write-allocate), so a loop that
streams a large array through memory moves three bytes for every two a copy moves. When a
kernel touches more memory than the last-level cache holds, its output cannot stay cached
for the next reader anyway: such a kernel writes its output with non-temporal stores, which
skip the read and the cache.

The hint only applies to aligned vector stores, so each row of the loop nest is split in
three: scalar iterations up to the first 64-byte boundary of the output, blocks of
``INTERLEAVE`` vectors (computed into a small stack buffer by a loop LLVM vectorizes, then
written with aligned 32-byte vector stores carrying ``!nontemporal``), and the scalar rest.
The values are the same expressions at the same indices, so results are unchanged bit for
bit.

    >>> streamed_output(kernel) is None      # doctest: +SKIP
    True                                     # small kernels keep ordinary stores
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from functrans.backends.compiler import exprs as E
from functrans.backends.compiler import passes
from functrans.backends.compiler.fusion import LoopKernel, unique_buffers
from functrans.backends.llvm import vector_loops
from functrans.backends.llvm.scalar_ops import mem_type
# the cache size decides which kernels stream (named here too, as the tests know it)
from functrans.backends.llvm.targets import (  # noqa: F401
    last_level_cache_bytes, min_streamed_bytes)
from functrans.backends.llvm.vector_math import target_has_avx512

I32, I64 = ir.IntType(32), ir.IntType(64)
LINE_BYTES = 64             # rows are peeled to a cache-line boundary...
# ...then written in vectors of 32 bytes: the width of AVX2 and of AVX-512 code compiled for
# 256-bit vectors, so the stack buffer is written and read back in equal pieces (a store
# forwards to a load of the same size; a larger load stalls until the stores retire)
STORE_BYTES = 32
# Vectors computed side by side in a block. A fused chain of inlined functions (tanh, then
# exp, ...) is one long chain of dependent instructions per vector, and the out-of-order
# window holds too few iterations of it to keep the floating-point units busy: with four
# independent vectors interleaved instruction by instruction (LLVM's interleave count) the
# 8-op benchmark chain runs 1.6x faster on AVX2. More vectors run out of registers.
INTERLEAVE = 4


def streamed_output(step):
    """The output ``step`` writes with non-temporal stores, or None.

    Only a loop kernel with one output of 4 or 8 byte elements, written in row-major order
    (its offset is the linear index of the loop nest, so each row is contiguous), with rows
    of several cache lines, and touching more than :func:`min_streamed_bytes`."""
    if not isinstance(step, LoopKernel) or len(step.outputs) != 1 or not step.shape \
            or not passes.enabled("streaming_stores"):
        return None
    out, offset, _ = step.outputs[0]
    if out.dtype.itemsize not in (4, 8):
        return None
    if step.shape[-1] < 4 * (LINE_BYTES // out.dtype.itemsize):
        return None
    if offset is not E.linearize(E.index_vars(step.shape), step.shape):
        return None
    touched = sum(buf.nbytes for buf in unique_buffers(step.writes() + step.reads()))
    return out if touched > min_streamed_bytes() else None


def emit_streamed_loops(mb, b: ir.IRBuilder, step, out_ptr, compute, bounds):
    """The loop nest of ``step`` with its output streamed (see the module docstring).

    ``compute(indices)`` emits the element at ``indices`` and returns its value (guards
    included); ``bounds`` (start, end), if given, limit the outermost loop."""
    shape = list(step.shape)
    out = step.outputs[0][0]
    lanes = STORE_BYTES // out.dtype.itemsize
    elem = mem_type(out.dtype)
    # a block holds INTERLEAVE vectors (a long chain's count, if more: see vector_loops) of
    # the widest width LLVM may choose for the target CPU (only the interleave count is a
    # hint: a forced width makes LLVM print a remark for every loop it cannot vectorize,
    # such as float64 math, which calls the C library)
    count = max(INTERLEAVE, vector_loops.interleave_count(step))
    block_lanes = (64 if target_has_avx512() else 32) * count // out.dtype.itemsize
    line = _entry_alloca(b, ir.ArrayType(elem, block_lanes))
    line.align = STORE_BYTES
    strides = [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape))]
    hint = mb.module.add_metadata([ir.Constant(I32, 1)])
    interleave = mb.interleaved_loop(count)

    def row(prefix, lo, hi):
        base = ir.Constant(I64, 0)
        for index, stride in zip(prefix, strides):
            base = b.add(base, b.mul(index, ir.Constant(I64, stride), flags=["nsw"]), flags=["nsw"])
        address = b.ptrtoint(b.gep(out_ptr, [b.add(base, lo, flags=["nsw"])], inbounds=True), I64)
        # elements before the next line boundary (none reachable if the row is misaligned
        # within an element: then the whole row takes the scalar path)
        gap = b.and_(b.sub(ir.Constant(I64, 0), address), ir.Constant(I64, LINE_BYTES - 1))
        peel = b.udiv(gap, ir.Constant(I64, out.dtype.itemsize))
        aligned = b.icmp_unsigned("==", b.and_(address, ir.Constant(I64, out.dtype.itemsize - 1)),
                                  ir.Constant(I64, 0))
        head_end = _minimum(b, b.add(lo, peel, flags=["nsw"]), hi)
        head_end = b.select(aligned, head_end, hi)
        blocks = b.udiv(b.sub(hi, head_end), ir.Constant(I64, block_lanes))
        body_end = b.add(head_end, b.mul(blocks, ir.Constant(I64, block_lanes)), flags=["nsw"])
        extent = shape[-1]

        def scalar(i):
            value = compute(list(prefix) + [i])
            b.store(value, b.gep(out_ptr, [b.add(base, i, flags=["nsw"])], inbounds=True))

        def block(q):
            first = b.mul(q, ir.Constant(I64, block_lanes), flags=["nsw"])
            start = b.add(head_end, first, flags=["nsw"])

            def lane(k):
                value = compute(list(prefix) + [b.add(start, k, flags=["nsw"])])
                b.store(value, b.gep(line, [ir.Constant(I64, 0), k], inbounds=True))
            mb.loop(b, block_lanes, lane, name="lane").set_metadata("llvm.loop", interleave)
            vector_type = ir.VectorType(elem, lanes)
            for part in range(block_lanes // lanes):
                offset = ir.Constant(I64, part * lanes)
                source = b.gep(line, [ir.Constant(I64, 0), offset], inbounds=True)
                values = b.load(b.bitcast(source, vector_type.as_pointer()), align=STORE_BYTES)
                index = b.add(base, b.add(start, offset, flags=["nsw"]), flags=["nsw"])
                target = b.bitcast(b.gep(out_ptr, [index], inbounds=True), vector_type.as_pointer())
                store = b.store(values, target, align=STORE_BYTES)
                store.set_metadata("nontemporal", hint)

        mb.loop(b, extent, scalar, name="head", bounds=(lo, head_end))
        mb.loop(b, extent, block, name="line", bounds=(ir.Constant(I64, 0), blocks))
        mb.loop(b, extent, scalar, name="tail", bounds=(body_end, hi))

    whole = (ir.Constant(I64, 0), ir.Constant(I64, shape[-1]))
    if len(shape) == 1:
        row([], *(bounds or whole))
    else:
        mb.loop_nest(b, shape[:-1], lambda prefix: row(prefix, *whole), bounds=bounds)


def _minimum(b: ir.IRBuilder, x, y):
    return b.select(b.icmp_signed("<", x, y), x, y)


def _entry_alloca(b: ir.IRBuilder, ty):
    """A stack slot in the entry block of ``b``'s function (allocated once, not per row)."""
    entry_block = b.function.entry_basic_block
    if b.block is entry_block or not entry_block.instructions:
        return b.alloca(ty, name="line")
    entry = ir.IRBuilder(entry_block)
    entry.position_before(entry_block.instructions[0])
    return entry.alloca(ty, name="line")
