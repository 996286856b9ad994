"""Direct convolution kernels: ``conv_general_dilated`` in its channels-last form, computed
in registers without a patch matrix.

The compile-time rewrite (``decompose_closed(..., direct_convolutions=True)``, see
:func:`functrans.interpreters.decompose.is_direct_convolution`) brings every float32/float64
convolution, forward or either gradient, into one form: an already padded (and, for a
transposed convolution, dilated) input ``x[N, *S, C]``, a kernel ``w[*K, I, O]`` and an output
``out[N', *OS, O]`` whose features per group are a whole number of 32-byte vectors. The
padding, dilation and layout changes fuse into the loops that produce ``x`` and ``w`` and
consume ``out``.

The kernel computes a tile of R output positions along the last spatial axis times V
vectors of output features at a time, with its R x V accumulators in registers::

    for every tap t of the kernel window, for every input feature c of the group:
        wv[v] = w[t, c, o0 + v*W : o0 + (v+1)*W]          (V vector loads)
        for r: acc[r][v] += x[position(r) + offset(t), c] * wv[v]   (a broadcast, V FMAs)

so each loaded weight vector feeds R multiply-adds and each input element V: the loop is
bound by the FMA units, not by memory, and the input is read from cache once per tile.
Rows of the output (batch x all spatial axes but the last) are split among the thread pool's
workers. Feature groups read their slice of the input channels; batch groups their slice of
the input batch.

    >>> step = lower_convolution(fallback_step, program)   # doctest: +SKIP
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from functrans.backends.llvm import thread_pool
from functrans.backends.llvm.fusion import Buffer, FallbackStep, Step, unique_buffers
from functrans.interpreters.decompose import is_direct_convolution

I32, I64 = ir.IntType(32), ir.IntType(64)
I8P = ir.IntType(8).as_pointer()
VECTOR_BYTES = 32          # AVX2 registers; the rewrite pads output features to this
MAX_VECTORS = 4            # output-feature vectors per tile
MAX_ACCUMULATORS = 12      # of 16 vector registers: the rest hold weights and a broadcast
CHUNK_FLOPS = 4_000_000    # below this a convolution runs on the calling thread


def _c(value: int):
    return ir.Constant(I64, int(value))


class ConvolutionStep(Step):
    """``out = conv(x, w)`` in the direct form described in the module docstring."""

    def __init__(self, lhs: Buffer, rhs: Buffer, out: Buffer, params: dict):
        self.prims = ("conv_general_dilated",)
        self.inputs, self.out = [lhs, rhs], out
        nsp = len(lhs.shape) - 2
        self.strides = tuple(params["window_strides"])
        self.dilation = tuple(params["rhs_dilation"])
        self.feature_groups = params["feature_group_count"]
        self.batch_groups = params["batch_group_count"]
        self.groups = max(self.feature_groups, self.batch_groups)
        self.kernel = tuple(rhs.shape[:nsp])
        self.in_features, out_features = rhs.shape[nsp], rhs.shape[-1]
        self.group_features = out_features // self.groups
        self.width = VECTOR_BYTES // out.dtype.itemsize
        self.rows = int(np.prod(out.shape[:-2], dtype=np.int64))

    def reads(self):
        return unique_buffers(self.inputs)

    def writes(self):
        return [self.out]

    def describe(self):
        x, w = self.inputs
        return (f"conv[direct, strides {list(self.strides)}, dilation {list(self.dilation)}, "
                f"groups {self.feature_groups}/{self.batch_groups}] {x!r} * {w!r} -> "
                f"{self.out!r}")

    def flops(self) -> int:
        return 2 * self.out.size * int(np.prod(self.kernel, dtype=np.int64)) * self.in_features

    def chunks(self, threads: int | None = None) -> int:
        """How many pieces of its rows the convolution is split into for the thread pool
        (more than the threads: a preempted worker's share is picked up by the others)."""
        threads = thread_pool.num_threads() if threads is None else threads
        if threads < 2 or self.flops() < CHUNK_FLOPS:
            return 1
        wanted = max(threads, min(8 * threads, self.flops() // CHUNK_FLOPS))
        return int(min(self.rows, wanted))

    # ---- code ----------------------------------------------------------------------------

    def emit(self, mb, b: ir.IRBuilder, pointer, table):
        if self.out.size == 0:
            return
        kernel = mb.shared(self._kernel_function(mb))
        args = [pointer(buf) for buf in (*self.inputs, self.out)]
        chunks = self.chunks()
        if chunks <= 1:
            b.call(kernel, args + [_c(0), _c(self.rows)])
            return
        rows = -(-self.rows // chunks)
        chunks = -(-self.rows // rows)
        mb.kernel_count += 1
        chunk_fn = ir.Function(mb.module, thread_pool.CHUNK_FN,
                               name=f"{kernel.name}_chunk{mb.kernel_count}")
        chunk_fn.linkage = "internal"
        chunk_fn.attributes.add("nounwind")
        cb = ir.IRBuilder(chunk_fn.append_basic_block("entry"))
        ctx = cb.bitcast(chunk_fn.args[0], I8P.as_pointer())
        mb.skip_chunk_if_interrupted(cb, ctx, len(args))
        loaded = [cb.bitcast(cb.load(cb.gep(ctx, [_c(k)], inbounds=True)), a.type)
                  for k, a in enumerate(args)]
        start = cb.mul(chunk_fn.args[1], _c(rows), flags=["nuw", "nsw"])
        end = cb.add(start, _c(rows), flags=["nuw", "nsw"])
        end = cb.select(cb.icmp_signed("<", end, _c(self.rows)), end, _c(self.rows))
        cb.call(kernel, loaded + [start, end])
        cb.ret_void()
        chunk_fn = mb.shared(chunk_fn)
        ctx = mb.chunk_context(b, args)
        parallel_for = mb.math.declare(thread_pool.SYMBOL, ir.VoidType(), [I8P, I8P, I64])
        b.call(parallel_for, [b.bitcast(chunk_fn, I8P), ctx, _c(chunks)])

    def _kernel_function(self, mb) -> ir.Function:
        """``void conv(x*, w*, out*, i64 start, i64 end)``: output rows [start, end)."""
        from functrans.backends.llvm.scalar_ops import mem_type
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
        _Tile(self, mb, b, ty, entry, x, w).rows(out, start, end)
        b.ret_void()
        return fn


class _Tile:
    """The loops of one convolution kernel (see :class:`ConvolutionStep`)."""

    def __init__(self, step: ConvolutionStep, mb, b: ir.IRBuilder, ty, entry, x, w):
        self.step, self.mb, self.b, self.ty, self.entry = step, mb, b, ty, entry
        self.x, self.w = x, w
        lhs, rhs = step.inputs
        self.vec = ir.VectorType(ty, step.width)
        suffix = f"v{step.width}f{8 * step.out.dtype.itemsize}"
        self.fma = mb.math.declare(f"llvm.fma.{suffix}", self.vec, [self.vec] * 3)
        shape = lhs.shape
        # element strides of x: batch, each spatial axis, feature
        self.x_strides = [int(np.prod(shape[k + 1:], dtype=np.int64)) for k in range(len(shape))]
        self.out_features = rhs.shape[-1]
        self.align = step.out.dtype.itemsize

    # ---- row loop: batch and every spatial axis but the last -------------------------------

    def rows(self, out, start, end):
        step, b = self.step, self.b
        out_shape = step.out.shape
        nsp = len(out_shape) - 2
        out_row = out_shape[-2] * out_shape[-1]

        def row(r):
            # r = ((n * OS_1 + o_1) * OS_2 + o_2) ... over the spatial axes but the last
            coords, rest = [], r
            for size in reversed(out_shape[1:nsp]):
                coords.append(b.urem(rest, _c(size)))
                rest = b.udiv(rest, _c(size))
            coords.reverse()
            n = rest
            base = _c(0)
            for k, o in enumerate(coords):
                base = b.add(base, b.mul(o, _c(step.strides[k] * self.x_strides[k + 1])))
            out_base = b.mul(r, _c(out_row))
            for g in range(step.groups):
                self.group(n, g, base, out_base, out)
        self.mb.loop(b, step.rows, row, name="row", bounds=(start, end))

    def group(self, n, g, base, out_base, out):
        step, b = self.step, self.b
        if step.batch_groups > 1:  # batch groups are group-major slices of the input batch
            n = b.add(n, _c(g * step.out.shape[0]))
            channel = 0
        else:
            channel = g * step.in_features
        x_base = b.add(b.add(b.mul(n, _c(self.x_strides[0])), base), _c(channel))
        width, vectors = step.width, step.group_features // step.width
        feature = g * step.group_features
        blocks = []
        while vectors > 0:
            take = min(vectors, MAX_VECTORS) if vectors != MAX_VECTORS + 1 else 3
            blocks.append((feature, take))
            feature += take * width
            vectors -= take
        positions = step.out.shape[-2]
        x_step = step.strides[-1] * self.x_strides[-2]
        for f0, v in blocks:
            r = max(1, MAX_ACCUMULATORS // v)
            full, tail = divmod(positions, r)

            def tiles(t, f0=f0, v=v, r=r):
                self.tile(r, v, b.add(x_base, b.mul(t, _c(r * x_step))), f0,
                          out, b.add(out_base, b.add(b.mul(t, _c(r * self.out_features)), _c(f0))))
            self.mb.loop(b, full, tiles, name="tile")
            if tail:
                self.tile(tail, v, b.add(x_base, _c(full * r * x_step)), f0, out,
                          b.add(out_base, _c(full * r * self.out_features + f0)))

    # ---- one tile: r positions x v feature vectors -------------------------------------------

    def tile(self, r, v, x_base, f0, out, out_offset):
        step, b, vec = self.step, self.b, self.vec
        entry = ir.IRBuilder(self.entry)
        entry.position_at_start(self.entry)
        accs = [[entry.alloca(vec) for _ in range(v)] for _ in range(r)]
        zero = ir.Constant(vec, [0.0] * step.width)
        for row in accs:
            for acc in row:
                b.store(zero, acc)
        nsp = len(step.kernel)
        x_step = step.strides[-1] * self.x_strides[-2]
        in_features, o = step.in_features, self.out_features
        undef = ir.Constant(vec, ir.Undefined)
        splat_mask = ir.Constant(ir.VectorType(I32, step.width), [0] * step.width)

        def taps(t):
            x_tap, w_tap = x_base, _c(0)
            for k in range(nsp):
                x_tap = b.add(x_tap, b.mul(t[k], _c(step.dilation[k] * self.x_strides[k + 1])))
                w_tap = b.add(b.mul(w_tap, _c(step.kernel[k])), t[k])
            w_tap = b.add(b.mul(w_tap, _c(in_features * o)), _c(f0))

            def feature(c):
                w_at = b.add(w_tap, b.mul(c, _c(o)))
                weights = [self.load_vector(self.w, b.add(w_at, _c(j * step.width)))
                           for j in range(v)]
                x_at = b.add(x_tap, c)
                for i in range(r):
                    scalar = b.load(b.gep(self.x, [b.add(x_at, _c(i * x_step))], inbounds=True))
                    lanes = b.shuffle_vector(b.insert_element(undef, scalar, ir.Constant(I32, 0)),
                                             undef, splat_mask)
                    for j in range(v):
                        b.store(b.call(self.fma, [lanes, weights[j], b.load(accs[i][j])]),
                                accs[i][j])
            self.mb.loop(b, in_features, feature, name="c")
        self.mb.loop_nest(b, list(step.kernel), taps)
        for i in range(r):
            for j in range(v):
                at = b.add(out_offset, _c(i * o + j * step.width))
                self.store_vector(out, at, b.load(accs[i][j]))

    def load_vector(self, base, offset):
        b = self.b
        ptr = b.bitcast(b.gep(base, [offset], inbounds=True), self.vec.as_pointer())
        return b.load(ptr, align=self.align)

    def store_vector(self, base, offset, value):
        b = self.b
        ptr = b.bitcast(b.gep(base, [offset], inbounds=True), self.vec.as_pointer())
        b.store(value, ptr, align=self.align)


def lower_convolution(step: FallbackStep, program) -> ConvolutionStep | None:
    """A native step for a ``conv_general_dilated`` fallback step already in the direct form,
    or None (the step then runs the NumPy implementation)."""
    eqn = step.eqn
    if not is_direct_convolution(eqn) or step.outputs[0] is None:
        return None
    if not all(isinstance(x, Buffer) and x.is_array for x in step.inputs):
        return None
    return ConvolutionStep(step.inputs[0], step.inputs[1], step.outputs[0], eqn.params)
