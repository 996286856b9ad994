"""Loop kernels: a fused :class:`~fusion.LoopKernel`, :class:`~fusion.ReduceKernel` or
:class:`~row_fusion.RowGroup` becomes one internal function
``k<n>_<prims>(buffers..., i64 start, i64 end)`` running its outermost loop from ``start`` to
``end``, called directly or in chunks on the thread pool (see :func:`parallel_chunks`).

A kernel's buffer arguments are ``noalias`` pointers: the buffer plan guarantees a kernel
never writes memory it reads through another argument, and telling LLVM so lets it vectorize
without runtime overlap checks. Loops are plain counted loops over contiguous memory; LLVM's
O3 pipeline, given the target CPU's features, vectorizes them.

    >>> emit_kernel(step, mb, b, pointer, table)      # doctest: +SKIP
"""
from __future__ import annotations

import functools
import math
import re

import llvmlite.ir as ir
import numpy as np

from functrans.backends.compiler import exprs as E
from functrans.backends.compiler import passes
from functrans.backends.compiler.fusion import Buffer, LoopKernel, ReduceKernel, unique_buffers
from functrans.backends.llvm import scalar_ops, streaming_stores, thread_pool, vector_loops
from functrans.backends.llvm.expressions import Evaluator, combine, monoid_identity
from functrans.backends.llvm.ir_builder import (I1, I8P, I64, calls_only_function, emits,
                                                kernel_alloca)
from functrans.backends.llvm.row_fusion import RowGroup
from functrans.backends.llvm.scalar_ops import mem_type, reg_type
from functrans.backends.llvm.support_code import CHUNK_FN

# A loop is split across threads when it has at least this many elements, in chunks of
# about CHUNK_ELEMENTS (many more chunks than threads, so uneven progress evens out). The
# pool's dispatch costs a few microseconds, a loop this size tens of them. In a program
# whose matrix products run on the pool, its workers are awake anyway: loops from
# POOLED_MIN_ELEMENTS up are split too. (Elsewhere they are not: workers spinning after a
# small loop would take the cores from the BLAS threads of the next unsplit product.)
PARALLEL_MIN_ELEMENTS = 1 << 18
POOLED_MIN_ELEMENTS = 1 << 16
CHUNK_ELEMENTS = 1 << 14
# A reduction over its outermost dimension (batch normalization's sums over every position)
# is cut into SPLIT_CHUNKS pieces of that dimension, each summed into partial results of its
# own, which are then combined in order; the partial results (on the caller's stack) take
# at most SPLIT_MAX_BYTES. The cut depends on the shape only, never on the threads, so one
# and several threads give the same bits.
SPLIT_CHUNKS = 16
SPLIT_MAX_BYTES = 16 * 1024


@emits(LoopKernel, ReduceKernel, RowGroup)
def emit_kernel(step, mb, b: ir.IRBuilder, pointer, table) -> None:
    """A kernel's step in a segment or body: a call of its function (see :func:`call_kernel`)."""
    call_kernel(mb, b, step, pointer)


def build_kernel(mb, step, split: bool = False):
    """The kernel's function ``k<n>_<prims>(buffers..., i64 start, i64 end)``, which runs
    the outermost loop from ``start`` to ``end`` (the whole loop, or one chunk of it). A
    reduction over its outermost dimension reduces the whole loop unless ``split``
    (:func:`split_chunks`), when it reduces ``[start, end)`` of it into its output."""
    buffers = unique_buffers(step.writes() + step.reads())
    # kernels repeat (each layer's bias add, each parameter's update): a kernel whose
    # structure was built before is that function, found without building its IR
    key = kernel_structure(step, buffers) if passes.enabled("shared_kernels") else object()
    key = (key, "split") if split else key
    if key in mb.kernels:
        return mb.kernels[key], buffers
    mb.kernel_count += 1
    prims = "_".join(p for p in step.prims[:6]) or "copy"
    name = f"k{mb.kernel_count}_{re.sub(r'[^A-Za-z0-9_]', '_', prims)}"
    mb.names[name] = f"the kernel fusing [{', '.join(step.prims)}]"
    fty = ir.FunctionType(ir.VoidType(), [mem_type(buf.dtype).as_pointer() for buf in buffers]
                          + [I64, I64])
    fn = ir.Function(mb.module, fty, name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    # a kernel stays its own function: inlined, a program's hundreds of kernels become
    # one segment function whose optimization grows faster than the program (a 64-layer
    # MLP step: 22 s in LLVM, against 4 s as separate functions). A call per kernel
    # costs nanoseconds.
    fn.attributes.add("noinline")
    for arg in fn.args[:len(buffers)]:
        arg.add_attribute("noalias")
    width = vector_loops.vector_width(step)
    if width:
        mb.prefer_vector_width(fn, width)
    ptrs = {buf.id: arg for buf, arg in zip(buffers, fn.args)}
    bounds = tuple(fn.args[len(buffers):])
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    emit = (emit_loop_kernel if isinstance(step, LoopKernel) else
            emit_row_group if isinstance(step, RowGroup) else
            functools.partial(emit_reduce_kernel, split=split))
    values = ([v for _, _, v in step.outputs] if isinstance(step, LoopKernel) else
              step.values() if isinstance(step, RowGroup) else [step.value])
    if scalar_ops.needs_guard(values):
        # fast vectorized pass, noting elements outside the fast path's domain; if there
        # were any, redo the whole range with C library calls (outputs never alias
        # inputs, so running a kernel twice is harmless)
        flag = b.alloca(I1, name="needs_exact")
        b.store(ir.Constant(I1, 0), flag)
        emit(mb, b, step, ptrs, bounds, flag=flag)
        exact = fn.append_basic_block("exact")
        done = fn.append_basic_block("done")
        b.cbranch(b.load(flag), exact, done)
        b.position_at_end(exact)
        emit(mb, b, step, ptrs, bounds, exact=True)
        b.branch(done)
        b.position_at_end(done)
    else:
        emit(mb, b, step, ptrs, bounds)
    b.ret_void()
    mb.kernels[key] = mb.shared(fn)
    return mb.kernels[key], buffers


def call_kernel(mb, b: ir.IRBuilder, step, pointer):
    """Run ``step``'s kernel: directly, or in chunks of its outermost loop on the thread
    pool when the loop is large (see :func:`parallel_chunks`)."""
    if split_chunks(step) > 1:
        call_split_reduction(mb, b, step, pointer)
        return
    kernel_fn, buffers = build_kernel(mb, step)
    args = [pointer(buf) for buf in buffers]
    extent = step.shape[0] if step.shape else 1
    chunks = parallel_chunks(step, POOLED_MIN_ELEMENTS if mb.pool_in_use
                             else PARALLEL_MIN_ELEMENTS)
    if chunks <= 1:
        b.call(kernel_fn, args + [ir.Constant(I64, 0), ir.Constant(I64, extent)])
        return
    rows = -(-extent // chunks)
    run_on_pool(mb, b, kernel_fn, args, rows, extent)


def run_on_pool(mb, b: ir.IRBuilder, kernel_fn, args, rows: int, extent: int,
                out_stride: int = 0) -> None:
    """Call ``ft_parallel_for`` on ``kernel_fn``'s chunks of ``rows`` rows of ``extent``
    (the wrapper of :func:`chunk_function`, made once per kernel and cut)."""
    key = (kernel_fn.name, rows, extent, out_stride)
    chunk_fn = mb.chunk_functions.get(key)
    if chunk_fn is None:
        chunk_fn = chunk_function(mb, kernel_fn, args, rows, extent, out_stride=out_stride)
        mb.chunk_functions[key] = chunk_fn
    # the pointers travel to the workers in an array on this thread's stack
    ctx = mb.chunk_context(b, args)
    parallel_for = mb.math.declare(thread_pool.SYMBOL, ir.VoidType(), [I8P, I8P, I64])
    b.call(parallel_for, [b.bitcast(chunk_fn, I8P), ctx, ir.Constant(I64, -(-extent // rows))])


def split_chunks(step) -> int:
    """Into how many pieces of its outermost dimension a reduction over that dimension is
    cut (1: it is not), from its shape alone: a float sum, product, maximum or minimum over
    at least ``PARALLEL_MIN_ELEMENTS`` elements that keeps some dimension, in pieces of at
    least ``CHUNK_ELEMENTS``, whose partial results fit ``SPLIT_MAX_BYTES``. Otherwise such
    a reduction is one serial loop: its chunks would all add into the same outputs. (Not
    from ``POOLED_MIN_ELEMENTS`` in programs that use the pool: the cut would then depend
    on the program around the reduction, and a small one, a layer's bias gradient, is
    cheaper than waking the workers.)"""
    if not (isinstance(step, ReduceKernel) and step.shape and step.reduced[0]
            and not all(step.reduced) and step.monoid in ("add", "mul", "max", "min")
            and step.out.dtype in (np.float32, np.float64)):
        return 1
    size = math.prod(step.shape)
    if size < PARALLEL_MIN_ELEMENTS:
        return 1
    chunks = min(SPLIT_CHUNKS, step.shape[0], size // CHUNK_ELEMENTS)
    if chunks * step.out.size * step.out.dtype.itemsize > SPLIT_MAX_BYTES:
        return 1
    return int(chunks)


def call_split_reduction(mb, b: ir.IRBuilder, step: ReduceKernel, pointer):
    """Run a reduction over its outermost dimension in :func:`split_chunks` pieces, each
    into partial results of its own (on the thread pool when there is one), then combine
    the partial results in order into the output."""
    kernel_fn, buffers = build_kernel(mb, step, split=True)
    assert buffers[0].id == step.out.id  # written first: the argument chunks offset
    chunks, extent, size = split_chunks(step), step.shape[0], step.out.size
    rows = -(-extent // chunks)
    chunks = -(-extent // rows)
    ty = mem_type(step.out.dtype)
    partial = b.bitcast(mb.entry_alloca(b, ir.ArrayType(ty, chunks * size)), ty.as_pointer())
    args = [partial] + [pointer(buf) for buf in buffers[1:]]
    if thread_pool.compiled_threads() >= 2:
        run_on_pool(mb, b, kernel_fn, args, rows, extent, out_stride=size)
    else:
        def piece(c):
            start = b.mul(c, ir.Constant(I64, rows))
            end = b.add(start, ir.Constant(I64, rows))
            end = b.select(b.icmp_signed("<", end, ir.Constant(I64, extent)), end,
                           ir.Constant(I64, extent))
            out = b.gep(partial, [b.mul(c, ir.Constant(I64, size))], inbounds=True)
            b.call(kernel_fn, [out] + args[1:] + [start, end])
        mb.loop(b, chunks, piece, name="piece")
    out = pointer(step.out)

    def element(j):
        acc = b.load(b.gep(partial, [j], inbounds=True))
        for c in range(1, chunks):
            value = b.load(b.gep(partial, [b.add(j, ir.Constant(I64, c * size))], inbounds=True))
            acc = combine(mb, b, step.monoid, step.out.dtype, acc, value)
        b.store(acc, b.gep(out, [j], inbounds=True))
    mb.loop(b, size, element, name="partials")


def chunk_function(mb, kernel_fn, args, rows: int, extent: int, out_stride: int = 0):
    """The wrapper running chunk ``c`` (rows ``[c * rows, (c + 1) * rows)`` of
    ``extent``) of ``kernel_fn`` on the thread pool, its arguments in an array; with an
    ``out_stride``, chunk ``c`` writes its first argument from ``c * out_stride`` on (its
    partial results: see :func:`call_split_reduction`)."""
    mb.kernel_count += 1  # a fresh name: the kernel may be shared with another step
    chunk_fn = ir.Function(mb.module, CHUNK_FN,
                           name=f"{kernel_fn.name}_chunk{mb.kernel_count}")
    chunk_fn.linkage = "internal"
    chunk_fn.attributes.add("nounwind")
    calls_only_function(chunk_fn)
    cb = ir.IRBuilder(chunk_fn.append_basic_block("entry"))
    ctx = cb.bitcast(chunk_fn.args[0], I8P.as_pointer())
    mb.skip_chunk_if_interrupted(cb, ctx, len(args))  # the rest of the job is dropped
    loaded = [cb.bitcast(cb.load(cb.gep(ctx, [ir.Constant(I64, k)], inbounds=True)), a.type)
              for k, a in enumerate(args)]
    start = cb.mul(chunk_fn.args[1], ir.Constant(I64, rows), flags=["nuw", "nsw"])
    end = cb.add(start, ir.Constant(I64, rows), flags=["nuw", "nsw"])
    end = cb.select(cb.icmp_signed("<", end, ir.Constant(I64, extent)), end,
                    ir.Constant(I64, extent))
    if out_stride:
        offset = cb.mul(chunk_fn.args[1], ir.Constant(I64, out_stride), flags=["nuw", "nsw"])
        loaded[0] = cb.gep(loaded[0], [offset], inbounds=True)
    cb.call(kernel_fn, loaded + [start, end])
    cb.ret_void()
    return mb.shared(chunk_fn)


def emit_loop_kernel(mb, b, step: LoopKernel, ptrs, bounds, flag=None, exact=False):
    def body(indices):
        ev = Evaluator(mb, b, indices, ptrs, exact)
        values = [(buf, ev.index(off), ev.scalar(node)) for buf, off, node in step.outputs]
        for buf, off, value in values:
            ev.store(buf, off, value)
        ev.record_guards(flag)

    def value_at(indices):
        ev = Evaluator(mb, b, indices, ptrs, exact)
        value = ev.scalar(step.outputs[0][2])
        ev.record_guards(flag)
        return value
    # the exact path (rare: inputs outside the fast math's domain) keeps plain stores
    streamed = None if exact else streaming_stores.streamed_output(step)
    if streamed is not None:
        streaming_stores.emit_streamed_loops(mb, b, step, ptrs[streamed.id], value_at,
                                             bounds)
    elif step.shape:
        mb.loop_nest(b, list(step.shape), body, bounds=bounds,
                     interleave=vector_loops.interleave_count(step),
                     vectorize=not vector_loops.narrow(
                         step, [v for _, _, v in step.outputs]))
    else:
        body([])


def emit_row_group(mb, b, step: RowGroup, ptrs, bounds, flag=None, exact=False):
    """For each row (within ``bounds``), each part's loop over the row's columns in turn;
    internal buffers are stack slots of one row (see :mod:`row_fusion`)."""
    rows, width = step.shape
    ptrs = dict(ptrs)
    for buf in step.internal:
        slot = kernel_alloca(b, ir.ArrayType(mem_type(buf.dtype), step.row_slots(buf)))
        ptrs[buf.id] = b.gep(slot, [ir.Constant(I64, 0), ir.Constant(I64, 0)], inbounds=True)
    tiles = {buf.id: ptrs[buf.id] for buf in step.tiled}

    def row(r):
        if tiles:  # this row of each tile: r - start rows after its pointer
            offset = b.mul(b.sub(r, bounds[0]), ir.Constant(I64, width), flags=["nsw"])
            for buf_id, tile in tiles.items():
                ptrs[buf_id] = b.gep(tile, [offset], inbounds=True)
        for part in step.parts:
            vectorize = not vector_loops.narrow(step, [v for _, _, v in part.outputs]
                                                if isinstance(part, LoopKernel) else
                                                [part.value])
            if isinstance(part, LoopKernel):
                def element(j, part=part):
                    ev = Evaluator(mb, b, [r, j], ptrs, exact)
                    values = [(buf, ev.index(off), ev.scalar(node))
                              for buf, off, node in part.outputs]
                    for buf, off, value in values:
                        ev.store(buf, off, value)
                    ev.record_guards(flag)
                mb.loop(b, width, element, name="col", interleave=False,
                        vectorize=vectorize)
                continue

            def value_at(idx, part=part):
                ev = Evaluator(mb, b, idx, ptrs, exact)
                value = ev.scalar(part.value)
                ev.record_guards(flag)
                return ev, value
            dtype = part.out.dtype
            acc = accumulate(mb, b, part.monoid, dtype, monoid_identity(part.monoid, dtype), [r],
                             [width], value_at, vectorize)
            ev = Evaluator(mb, b, [r, ir.Constant(I64, 0)], ptrs)
            ev.store(part.out, ev.index(part.out_offset), acc)
    mb.loop(b, rows, row, name="row", bounds=bounds)


def emit_reduce_kernel(mb, b, step: ReduceKernel, ptrs, bounds, flag=None, exact=False,
                       split=False):
    shape, reduced = list(step.shape), list(step.reduced)
    kept = [d for d, r in enumerate(reduced) if not r]
    last_kept = kept[-1] if kept else -1
    outer, inner = shape[:last_kept + 1], shape[last_kept + 1:]
    accumulate_in_memory = any(reduced[:last_kept + 1])
    out, dtype, monoid = step.out, step.out.dtype, step.monoid
    identity = monoid_identity(monoid, dtype)
    vectorize = not vector_loops.narrow(step, [step.value])
    if accumulate_in_memory:
        def init(indices):
            ev = Evaluator(mb, b, [], ptrs)
            ev.store(out, indices[0], identity)
        mb.loop_nest(b, [out.size], init, interleave=False)

    def outer_body(outer_idx):
        def value_at(idx):
            ev = Evaluator(mb, b, idx, ptrs, exact)
            value = ev.scalar(step.value)
            ev.record_guards(flag)
            return ev, value

        if inner:
            acc = accumulate(mb, b, monoid, dtype, identity, list(outer_idx), inner, value_at,
                             vectorize)
            ev = Evaluator(mb, b, list(outer_idx) + [ir.Constant(I64, 0)] * len(inner), ptrs)
        else:
            ev, acc = value_at(list(outer_idx))
        off = ev.index(step.out_offset)
        if accumulate_in_memory:
            acc = combine(mb, b, monoid, dtype, ev.load(out, off), acc)
        ev.store(out, off, acc)

    if outer:
        # only a kept outermost dimension is ever split into chunks (each chunk then
        # owns its outputs), or a reduced one into partial results (``split``); otherwise
        # the bounds are the whole extent
        mb.loop_nest(b, outer, outer_body, bounds=bounds if split or not reduced[0] else None,
                     vectorize=vectorize or bool(inner))
    else:
        outer_body([])


def accumulate(mb, b, monoid, dtype, identity, prefix, extents, value_at, vectorize=True):
    """Reduce ``value_at(prefix + inner indices)`` over ``extents`` in a register; with
    ``vectorize=False`` the innermost extent is reduced in straight-line code (a narrow
    row's, see :func:`vector_loops.narrow`)."""
    if 0 in extents:
        return identity
    if not vectorize and len(extents) == 1:
        return combine(mb, b, monoid, dtype, identity, _tree(
            mb, b, monoid, dtype, [value_at(prefix + [ir.Constant(I64, j)])[1]
                                   for j in range(extents[0])]))
    fn = b.function
    pre = b.block
    level = len(prefix)
    head = fn.append_basic_block(f"r{level}.loop")
    done = fn.append_basic_block(f"r{level}.done")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name=f"r{level}")
    acc = b.phi(reg_type(dtype), name=f"acc{level}")
    i.add_incoming(ir.Constant(I64, 0), pre)
    acc.add_incoming(identity, pre)
    if len(extents) == 1:
        _, value = value_at(prefix + [i])
        new_acc = combine(mb, b, monoid, dtype, acc, value)
    else:
        new_acc = accumulate(mb, b, monoid, dtype, acc, prefix + [i], extents[1:], value_at,
                             vectorize)
    nxt = b.add(i, ir.Constant(I64, 1), flags=["nuw", "nsw"])
    i.add_incoming(nxt, b.block)
    acc.add_incoming(new_acc, b.block)
    b.cbranch(b.icmp_signed("<", nxt, ir.Constant(I64, extents[0])), head, done)
    b.position_at_end(done)
    return new_acc


def _tree(mb, b, monoid, dtype, values):
    """``values`` combined in pairs, then the pairs' results in pairs, and so on: a narrow
    row's reduction as straight-line code (no loop for LLVM to vectorize, see
    :func:`vector_loops.narrow`) whose dependent chain is log2 of the row, not the row."""
    while len(values) > 1:
        values = [combine(mb, b, monoid, dtype, values[k], values[k + 1])
                  if k + 1 < len(values) else values[k] for k in range(0, len(values), 2)]
    return values[0]


def kernel_structure(step, buffers) -> tuple:
    """A key equal for two kernels exactly when they compile to the same function: their
    loops, expressions and buffer types, with buffers named by their position among the
    function's arguments (``buffers``)."""
    position = {b.id: k for k, b in enumerate(buffers)}
    if isinstance(step, RowGroup):
        position.update((b.id, ("row", k)) for k, b in enumerate(step.internal))
        position.update((b.id, ("tile", position[b.id])) for b in step.tiled)
    ids: dict = {}
    nodes = []

    def canon(x):
        if isinstance(x, (E.IndexExpr, E.ScalarExpr)):
            return ids[x]
        if isinstance(x, Buffer):
            return ("buffer", position[x.id])
        if isinstance(x, (tuple, list)):
            return tuple(canon(y) for y in x)
        return (type(x).__name__, repr(x))  # repr: 0.0 and -0.0 differ, as do int and float

    def frame(part):
        if isinstance(part, LoopKernel):
            roots = [r for _, off, v in part.outputs for r in (off, v)]
            fields = ("loop", part.shape, tuple(position[b.id] for b, _, _ in part.outputs))
        elif isinstance(part, ReduceKernel):
            roots = [part.value, part.out_offset]
            fields = ("reduce", part.shape, part.reduced, part.monoid, position[part.out.id])
        else:
            return ("rows", part.shape, tuple(frame(p) for p in part.parts))
        for node in E.postorder(roots):
            if node not in ids:
                ids[node] = len(nodes)
                nodes.append((node.kind, canon(node.args), str(getattr(node, "dtype", ""))))
        return fields + (tuple(ids[r] for r in roots),)

    shape = frame(step)
    return (shape, tuple(nodes), tuple((b.dtype.str, b.shape) for b in buffers),
            tuple((b.dtype.str, b.shape) for b in getattr(step, "internal", ())))



def parallel_chunks(step, min_elements: int = PARALLEL_MIN_ELEMENTS) -> int:
    """How many chunks of its outermost loop a kernel is split into (1: run it serially):
    none below ``min_elements``.

    Only loops whose chunks write disjoint outputs qualify: an elementwise loop, or a
    reduction whose outermost dimension is kept and whose reduced dimensions all come after
    the kept ones (so each output element is finished by one thread)."""
    if not step.shape or step.shape[0] < 2 or thread_pool.compiled_threads() < 2:
        return 1
    size = math.prod(step.shape)
    if size < min_elements:
        return 1
    if isinstance(step, ReduceKernel):
        kept = [d for d, r in enumerate(step.reduced) if not r]
        if step.reduced[0] or any(step.reduced[:kept[-1] + 1]):
            return 1
    elif not isinstance(step, (LoopKernel, RowGroup)):  # a group's rows are independent
        return 1
    return int(min(step.shape[0], max(2, size // CHUNK_ELEMENTS)))
