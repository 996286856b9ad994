"""Direct convolution kernels: ``conv_general_dilated`` computed in registers, without a
patch matrix.

The compile-time rewrite (``decompose_closed(..., direct_convolutions=True)``, see
:func:`functrans.backends.compiler.decompose.is_direct_convolution`) brings every float32/float64
convolution, forward or either gradient, into one form: an already padded (and, for a
transposed convolution, dilated) input, and a kernel and an output whose feature axes are
innermost in memory, with each group's output features a whole number of 32-byte vectors.
Other axes keep the layout they have (a channels-last network's tensors are not copied);
the kernel reads every operand through its strides.

The kernel computes a tile of R outputs along one axis times V vectors of output features,
with its R x V accumulators in registers::

    for every tap t of the kernel window, for every input feature c of the group:
        wv[v] = w[t, c, f0 + v*W : f0 + (v+1)*W]                 (V vector loads)
        for r: acc[r][v] += x[position(r) + offset(t), c] * wv[v]  (a broadcast, V FMAs)

so each loaded weight vector feeds R multiply-adds and each input element V: the loop is
bound by the FMA units, not by memory. R, V and the vectors' width W follow the target CPU
(:func:`max_accumulators`, :func:`max_vectors`, :func:`vector_bytes`): 32-byte vectors in
tiles of up to 2 x 6 with AVX2's 16 registers; with AVX-512's 32, up to 4 x 6, and 64-byte
vectors where a group's features fill them. The tile runs along the last spatial axis of the
output; when the input's batch axis is innermost in memory (a kernel gradient, whose "batch"
is the forward input's feature axis) it runs along the batch axis instead, so the R inputs
of a step are adjacent. The reduction loops go from the largest input stride to the
smallest; when the outermost one is long (a kernel gradient sums over the whole batch) it
is cut into blocks whose slice of the kernel operand stays in cache while every tile of the
row uses it, the accumulators going through the output between blocks; the blocks are then
the outermost loop, so that every row of a chunk reuses a block's inputs from cache (a
kernel gradient's rows, its kernel taps, read the same slice of the batch). Rows of the
output (every other axis) are split among the thread pool's workers, a blocked
convolution's in one chunk per thread, its tile axis cut as well when that evens out the
rows. Feature groups read their slice of the input features, batch groups their slice of
the input batch.

    >>> step = lower_convolution(fallback_step)   # doctest: +SKIP
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from functrans.backends.llvm import targets, thread_pool
from functrans.backends.compiler.fusion import Buffer, FallbackStep, Step, unique_buffers
from functrans.backends.compiler.decompose import VECTOR_BYTES, is_direct_convolution
from functrans.backends.llvm.ir_builder import I32, I64, emits
from functrans.backends.llvm.kernels import run_on_pool
from functrans.backends.llvm.scalar_ops import mem_type

# The register tile, from the target's vector registers: accumulators in three quarters of
# them (the rest hold the tile's weight vectors and a broadcast input), in at most a sixth
# of that many output-feature vectors: 12 in up to 2 x 6 with AVX2's 16 registers (2 x 6
# beat 4 x 3), 24 in up to 4 x 6 with AVX-512's 32 (see docs/performance.md).
ACCUMULATOR_SHARE = 3 / 4
OUTPUTS_PER_VECTOR = 6
CHUNK_FLOPS = 4_000_000    # below this a convolution runs on the calling thread
BLOCK_BYTES = 96 * 1024    # a reduction block's slice of the kernel operand (L2-resident)
WIDE_VECTOR_BYTES = 64     # AVX-512's vectors: twice the multiply-adds per instruction
MIN_TILE_PART = 8          # outputs per part of a tile axis cut for the threads (tile_parts)


def max_accumulators() -> int:
    """Accumulators a tile may keep in registers on the target CPU."""
    return int(targets.current().vector_registers * ACCUMULATOR_SHARE)


def max_vectors() -> int:
    """Output-feature vectors a tile may span on the target CPU."""
    return max(1, max_accumulators() // OUTPUTS_PER_VECTOR)


def vector_bytes(group_features: int, dtype) -> int:
    """The width of the kernel's vectors: AVX-512's 64 bytes on targets that have it, when a
    group's output features fill such vectors (the direct form pads them to VECTOR_BYTES
    only, so that narrow layers are not padded twice as far), else VECTOR_BYTES."""
    lanes = WIDE_VECTOR_BYTES // np.dtype(dtype).itemsize
    if targets.current().has_avx512 and group_features % lanes == 0:
        return WIDE_VECTOR_BYTES
    return VECTOR_BYTES


def _c(value: int):
    return ir.Constant(I64, int(value))


class ConvolutionStep(Step):
    """``out = conv(x, w)`` in the direct form described in the module docstring."""

    def __init__(self, lhs: Buffer, rhs: Buffer, out: Buffer, params: dict):
        self.prims = ("conv_general_dilated",)
        self.inputs, self.out = [lhs, rhs], out
        lhs_spec, rhs_spec, out_spec = params["dimension_numbers"]
        x_strides, w_strides, o_strides = (_row_major_strides(b.shape) for b in (lhs, rhs, out))
        self.window_strides = tuple(params["window_strides"])
        self.dilation = tuple(params["rhs_dilation"])
        self.feature_groups = params["feature_group_count"]
        self.batch_groups = params["batch_group_count"]
        self.groups = max(self.feature_groups, self.batch_groups)
        self.kernel = tuple(rhs.shape[a] for a in rhs_spec[2:])
        self.in_features = rhs.shape[rhs_spec[1]]
        self.out_features = rhs.shape[rhs_spec[0]]
        self.group_features = self.out_features // self.groups
        self.width = vector_bytes(self.group_features, out.dtype) // out.dtype.itemsize
        self.batch = out.shape[out_spec[0]]
        self.out_spatial = tuple(out.shape[a] for a in out_spec[2:])
        # element strides: x (batch, feature, spatial...), w (in-feature, taps...), out
        # (batch, spatial...); the output-feature axes of w and out have stride 1
        self.x_batch, self.x_feature = x_strides[lhs_spec[0]], x_strides[lhs_spec[1]]
        self.x_spatial = tuple(x_strides[a] for a in lhs_spec[2:])
        self.w_in, self.w_taps = w_strides[rhs_spec[1]], tuple(w_strides[a] for a in rhs_spec[2:])
        self.o_batch, self.o_spatial = o_strides[out_spec[0]], tuple(o_strides[a] for a in out_spec[2:])
        # output axes as (extent, x step, out step): the tile's axis, then the rows' axes
        axes = [(self.batch, self.x_batch, self.o_batch)] + [
            (size, st * xs, os) for size, st, xs, os in
            zip(self.out_spatial, self.window_strides, self.x_spatial, self.o_spatial)]
        tile_axis = 0 if self.x_batch == 1 and self.batch > 1 else len(axes) - 1
        self.tile_axis = axes[tile_axis]
        self.row_axes = [a for k, a in enumerate(axes) if k != tile_axis]
        self.rows = int(np.prod([a[0] for a in self.row_axes], dtype=np.int64))
        # reduction axes as (extent, x stride, w stride), largest x stride first
        reduction = [(self.in_features, self.x_feature, self.w_in)] + [
            (k, d * xs, ws) for k, d, xs, ws in
            zip(self.kernel, self.dilation, self.x_spatial, self.w_taps)]
        self.reduction = sorted(reduction, key=lambda a: -a[1])

    def reads(self):
        return unique_buffers(self.inputs)

    def writes(self):
        return [self.out]

    def describe(self):
        x, w = self.inputs
        return (f"conv[direct, strides {list(self.window_strides)}, dilation "
                f"{list(self.dilation)}, groups {self.feature_groups}/{self.batch_groups}] "
                f"{x!r} * {w!r} -> {self.out!r}")

    def flops(self) -> int:
        return 2 * self.out.size * int(np.prod(self.kernel, dtype=np.int64)) * self.in_features

    def chunks(self, threads: int | None = None) -> int:
        """How many pieces of its rows (:meth:`work_rows`) the convolution is split into for
        the thread pool: more than the threads (a preempted worker's share is picked up by
        the others), or, when its reduction is blocked, one per thread (a piece runs every
        block over all its rows, which reuse the block's inputs from cache: the fewer
        pieces, the fewer times the inputs are read from memory)."""
        threads = thread_pool.compiled_threads() if threads is None else threads
        if threads < 2 or self.flops() < CHUNK_FLOPS:
            return 1
        if self.blocked():
            return int(min(self.work_rows(threads), threads))
        wanted = max(threads, min(8 * threads, self.flops() // CHUNK_FLOPS))
        return int(min(self.rows, wanted))

    def tile_parts(self, threads: int | None = None) -> int:
        """Into how many equal parts the tile axis is cut as rows of their own: a blocked
        convolution with few rows (a kernel gradient's rows are its kernel taps, 9 for a 3x3
        window) would leave a thread idle for the last row; cutting the tile axis makes
        the rows a multiple of the threads, as long as each part keeps ``MIN_TILE_PART``
        outputs to reuse a loaded weight vector for."""
        threads = thread_pool.compiled_threads() if threads is None else threads
        if threads < 2 or self.flops() < CHUNK_FLOPS or not self.blocked():
            return 1
        extent = self.tile_axis[0]
        parts = threads // np.gcd(self.rows, threads)
        if parts > 1 and extent % parts == 0 and extent // parts >= MIN_TILE_PART:
            return int(parts)
        return 1

    def work_rows(self, threads: int | None = None) -> int:
        """The rows the pool's chunks share out: output rows times tile parts."""
        return self.rows * self.tile_parts(threads)

    def blocked(self) -> bool:
        """Whether the outermost reduction axis is cut into blocks (:meth:`reduction_block`)."""
        return self.reduction_block() < self.reduction[0][0]

    def reduction_block(self) -> int:
        """How many steps of the outermost reduction axis one pass over a row's tiles takes:
        enough that their slice of w (all inner steps, one group's features) fits in
        ``BLOCK_BYTES``; the whole axis when it all does."""
        extent = self.reduction[0][0]
        inner = int(np.prod([a[0] for a in self.reduction[1:]], dtype=np.int64))
        per_step = inner * self.group_features * self.out.dtype.itemsize
        return int(max(1, min(extent, BLOCK_BYTES // max(per_step, 1))))

    # ---- code ----------------------------------------------------------------------------

    def emit(self, mb, b: ir.IRBuilder, pointer, table):
        if self.out.size == 0:
            return
        kernel = mb.shared(self._kernel_function(mb))
        args = [pointer(buf) for buf in (*self.inputs, self.out)]
        chunks, total = self.chunks(), self.work_rows()
        if chunks <= 1:
            b.call(kernel, args + [_c(0), _c(total)])
            return
        run_on_pool(mb, b, kernel, args, rows=-(-total // chunks), extent=total)

    def _kernel_function(self, mb) -> ir.Function:
        """``void conv(x*, w*, out*, i64 start, i64 end)``: rows [start, end) of
        :meth:`work_rows`."""
        ty = mem_type(self.out.dtype)
        mb.kernel_count += 1
        name = f"conv{mb.kernel_count}"
        mb.names[name] = f"a convolution {self.describe()}"
        fn = ir.Function(mb.module, ir.FunctionType(
            ir.VoidType(), [ty.as_pointer()] * 3 + [I64, I64]), name=name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        for arg in fn.args[:3]:
            arg.add_attribute("noalias")
        entry = fn.append_basic_block("entry")
        body = fn.append_basic_block("body")
        ir.IRBuilder(entry).branch(body)
        b = ir.IRBuilder(body)
        x, w, out, start, end = fn.args
        _Tiles(self, mb, b, ty, entry, x, w, out).rows(start, end)
        b.ret_void()
        return fn


emits(ConvolutionStep)(ConvolutionStep.emit)


def _row_major_strides(shape) -> list:
    return [int(np.prod(shape[k + 1:], dtype=np.int64)) for k in range(len(shape))]


class _Tiles:
    """The loops of one convolution kernel (see :class:`ConvolutionStep`)."""

    def __init__(self, step: ConvolutionStep, mb, b: ir.IRBuilder, ty, entry, x, w, out):
        self.step, self.mb, self.b, self.ty, self.entry = step, mb, b, ty, entry
        self.x, self.w, self.out = x, w, out
        self.vec = ir.VectorType(ty, step.width)
        suffix = f"v{step.width}f{8 * step.out.dtype.itemsize}"
        self.fma = mb.math.declare(f"llvm.fma.{suffix}", self.vec, [self.vec] * 3)
        self.align = step.out.dtype.itemsize

    # ---- rows: every output axis but the tile's -----------------------------------------

    def rows(self, start, end):
        """Rows [start, end) of the step's work rows. A blocked reduction goes block by
        block over all the rows, so the rows reuse a block's inputs from cache; each output
        still sums its blocks in order, so its value does not depend on the loop order."""
        step, b = self.step, self.b
        block, outer, parts = step.reduction_block(), step.reduction[0][0], step.tile_parts()

        def row(r, bounds):
            part, rest = b.urem(r, _c(parts)), b.udiv(r, _c(parts))
            x_base, o_base = _c(0), _c(0)
            for extent, x_step, o_step in reversed(step.row_axes):
                index = b.urem(rest, _c(extent))
                rest = b.udiv(rest, _c(extent))
                x_base = b.add(x_base, b.mul(index, _c(x_step)))
                o_base = b.add(o_base, b.mul(index, _c(o_step)))
            for g in range(step.groups):
                self.group(g, x_base, o_base, bounds, part, parts)
        if not step.blocked():
            self.mb.loop(b, step.work_rows(), lambda r: row(r, None), name="row",
                         bounds=(start, end))
            return

        def blocked(k):
            first = b.mul(k, _c(block))
            last = b.add(first, _c(block))
            last = b.select(b.icmp_signed("<", last, _c(outer)), last, _c(outer))
            self.mb.loop(b, step.work_rows(), lambda r: row(r, (first, last)), name="row",
                         bounds=(start, end))
        self.mb.loop(b, -(-outer // block), blocked, name="block")

    def group(self, g, x_base, o_base, block, part, parts):
        step, b = self.step, self.b
        extent, x_step, o_step = step.tile_axis
        extent //= parts  # this row's part of the tile axis
        x_base = b.add(x_base, b.mul(part, _c(extent * x_step)))
        o_base = b.add(o_base, b.mul(part, _c(extent * o_step)))
        if step.batch_groups > 1:  # batch groups are group-major slices of the input batch
            x_base = b.add(x_base, _c(g * step.batch * step.x_batch))
        else:
            x_base = b.add(x_base, _c(g * step.in_features * step.x_feature))
        width, vectors = step.width, step.group_features // step.width
        feature = g * step.group_features
        most_vectors, most_accumulators = max_vectors(), max_accumulators()
        blocks = []
        while vectors > 0:  # one more vector than a tile joins it, rather than go alone
            take = vectors if vectors == most_vectors + 1 else min(vectors, most_vectors)
            blocks.append((feature, take))
            feature += take * width
            vectors -= take
        for f0, v in blocks:
            r = max(1, min(extent, most_accumulators // v))
            full, tail = divmod(extent, r)

            def tiles(t, f0=f0, v=v, r=r):
                self.tile(r, v, b.add(x_base, b.mul(t, _c(r * x_step))),
                          b.add(o_base, b.add(b.mul(t, _c(r * o_step)), _c(f0))), f0, block)
            self.mb.loop(b, full, tiles, name="tile")
            if tail:
                self.tile(tail, v, b.add(x_base, _c(full * r * x_step)),
                          b.add(o_base, _c(full * r * o_step + f0)), f0, block)

    # ---- one tile: r outputs x v feature vectors ----------------------------------------------

    def tile(self, r, v, x_base, o_offset, f0, block):
        """``out[o_offset + i*o_step + j*W ...] (+)= the sum over the reduction axes`` (over
        ``block`` = (first, last) of the outermost one: the partial sums go through the
        output, starting from zero at the first block)."""
        step, b, vec = self.step, self.b, self.vec
        entry = ir.IRBuilder(self.entry)
        entry.position_at_start(self.entry)
        accs = [[entry.alloca(vec) for _ in range(v)] for _ in range(r)]
        _, x_step, o_step = step.tile_axis
        outs = [[b.add(o_offset, _c(i * o_step + j * step.width)) for j in range(v)]
                for i in range(r)]
        zero = ir.Constant(vec, [0.0] * step.width)
        first = None if block is None else b.icmp_signed("!=", block[0], _c(0))
        for i in range(r):
            for j in range(v):
                start = zero
                if first is not None:
                    start = b.select(first, self.load_vector(self.out, outs[i][j]), zero)
                b.store(start, accs[i][j])
        undef = ir.Constant(vec, ir.Undefined)
        splat_mask = ir.Constant(ir.VectorType(I32, step.width), [0] * step.width)
        axes = step.reduction

        def level(k, x_at, w_at):
            if k == len(axes):
                return self.accumulate(accs, r, v, x_at, w_at, x_step, undef, splat_mask)
            extent, xs, ws = axes[k]

            def body(i):
                level(k + 1, b.add(x_at, b.mul(i, _c(xs))), b.add(w_at, b.mul(i, _c(ws))))
            bounds = block if k == 0 and block is not None else None
            self.mb.loop(b, extent, body, name=f"red{k}", bounds=bounds)
        level(0, x_base, _c(f0))
        for i in range(r):
            for j in range(v):
                self.store_vector(self.out, outs[i][j], b.load(accs[i][j]))

    def accumulate(self, accs, r, v, x_at, w_at, x_step, undef, splat_mask):
        b, width = self.b, self.step.width
        weights = [self.load_vector(self.w, b.add(w_at, _c(j * width))) for j in range(v)]
        for i in range(r):
            scalar = b.load(b.gep(self.x, [b.add(x_at, _c(i * x_step))], inbounds=True))
            lanes = b.shuffle_vector(b.insert_element(undef, scalar, ir.Constant(I32, 0)),
                                     undef, splat_mask)
            for j in range(v):
                b.store(b.call(self.fma, [lanes, weights[j], b.load(accs[i][j])]), accs[i][j])

    def load_vector(self, base, offset):
        b = self.b
        ptr = b.bitcast(b.gep(base, [offset], inbounds=True), self.vec.as_pointer())
        return b.load(ptr, align=self.align)

    def store_vector(self, base, offset, value):
        b = self.b
        ptr = b.bitcast(b.gep(base, [offset], inbounds=True), self.vec.as_pointer())
        b.store(value, ptr, align=self.align)


def lower_convolution(step: FallbackStep, program=None, target=None,
                      in_body: bool = False) -> ConvolutionStep | None:
    """A native step for a ``conv_general_dilated`` fallback step already in the direct form,
    or None (the step then runs the NumPy implementation)."""
    eqn = step.eqn
    if not is_direct_convolution(eqn) or step.outputs[0] is None:
        return None
    if not all(isinstance(x, Buffer) and x.is_array for x in step.inputs):
        return None
    return ConvolutionStep(step.inputs[0], step.inputs[1], step.outputs[0], eqn.params)
