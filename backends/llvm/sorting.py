"""``sort`` in native code: a stable radix or merge sort of each line along the sorted
dimension.

The operands are viewed as ``[outer, n, inner]``. For every line, a permutation of ``0..n-1``
is merge-sorted bottom-up (runs of 1, 2, 4, ... merged between two halves of a scratch
buffer; ties keep the left run's element first, so the sort is stable) under the order of
the first ``num_keys`` operands, compared lexicographically; then every operand is gathered
through the permutation. Keys compare in the reference's total order: integers by value,
floats by their bits with the magnitude flipped for negatives, so -inf < ... < -0.0 < 0.0 <
... < inf, and every NaN above +inf (NaNs keep their order). That is the reference's
``lexsort`` result exactly.

Lines of ``RADIX_MIN_LENGTH`` elements or more are radix-sorted instead: each key is mapped
to an unsigned integer with the same order, and the permutation goes through one stable
counting pass per byte (least significant first, last key first): about five times as fast
as NumPy's sort on a million floats. Short lines merge-sort; that is used in loop and branch
bodies, where it keeps the loop native (the alternative is a loop driven from Python around
the body), while at a program's top level NumPy sorts short lines as fast. Types are the ones
the backend computes natively; float16/bfloat16/complex keys stay in NumPy.

    >>> step = lower_sort(fallback_step, program, target)     # doctest: +SKIP
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from functrans.backends.llvm import scalar_ops
from functrans.backends.llvm.ir_builder import I1, I64, emits
from functrans.backends.compiler.fusion import Buffer, FallbackStep, Program, Step, unique_buffers
from functrans.primitives.sorting import sort_p

RADIX = 256  # one byte per counting pass
RADIX_MIN_LENGTH = 256  # shorter lines merge-sort: a pass's 256 counters would dominate


def _c(v):
    return ir.Constant(I64, v)


class SortStep(Step):
    """``outputs = sort(operands)`` along ``dimension`` by the first ``num_keys`` operands;
    ``scratch`` (int64) holds two permutations, two key images and the radix counters."""

    def __init__(self, operands, outputs, dimension, num_keys, scratch):
        self.prims = ("sort",)
        self.operands, self.outputs = list(operands), list(outputs)
        self.dimension, self.num_keys, self.scratch = dimension, num_keys, scratch
        shape = operands[0].shape
        self.outer = int(np.prod(shape[:dimension], dtype=np.int64))
        self.n = shape[dimension]
        self.inner = int(np.prod(shape[dimension + 1:], dtype=np.int64))

    def reads(self):
        return unique_buffers(self.operands)

    def writes(self):
        return list(self.outputs) + [self.scratch]

    def results(self):
        return self.outputs

    def describe(self):
        return (f"sort[dim {self.dimension}, {self.num_keys} key(s)] {self.operands} -> "
                f"{self.outputs}")

    # ---- code ----------------------------------------------------------------------------

    def emit(self, mb, b: ir.IRBuilder, pointer, table):
        n, inner = self.n, self.inner
        if self.outer * n * inner == 0:
            return
        ins = [pointer(x) for x in self.operands]
        outs = [pointer(x) for x in self.outputs]
        scratch = b.bitcast(pointer(self.scratch), I64.as_pointer())
        halves = (scratch, b.gep(scratch, [_c(n)], inbounds=True))
        src_slot = mb.entry_alloca(b, I64.as_pointer())
        dst_slot = mb.entry_alloca(b, I64.as_pointer())
        keys = list(zip(self.operands[:self.num_keys], ins[:self.num_keys]))  # (buffer, pointer)

        def line(idx):
            o, i = idx
            base = b.add(b.mul(o, _c(n * inner)), i)

            def element(ptr, position):
                return b.gep(ptr, [b.add(base, b.mul(position, _c(inner)))], inbounds=True)

            mb.loop(b, n, lambda p: b.store(p, b.gep(halves[0], [p], inbounds=True)), name="iota")
            b.store(halves[0], src_slot)
            b.store(halves[1], dst_slot)

            def less(p, q):  # key(p) < key(q), lexicographically over the keys
                result = ir.Constant(I1, 0)
                for buf, ptr in reversed(keys):
                    x = _unsigned_image(b, buf.dtype, b.load(element(ptr, p)), widen=False)
                    y = _unsigned_image(b, buf.dtype, b.load(element(ptr, q)), widen=False)
                    lt, eq = b.icmp_unsigned("<", x, y), b.icmp_unsigned("==", x, y)
                    result = b.or_(lt, b.and_(eq, result))
                return result

            if n >= RADIX_MIN_LENGTH:
                self._radix_passes(mb, b, keys, scratch, element, src_slot, dst_slot)
            else:
                self._merge_passes(mb, b, less, src_slot, dst_slot)
            perm = b.load(src_slot)

            def gather(p):
                source = b.load(b.gep(perm, [p], inbounds=True))
                for x, y in zip(ins, outs):
                    b.store(b.load(element(x, source)), element(y, p))
            mb.loop(b, n, gather, name="gather")

        mb.loop_nest(b, [self.outer, inner], line)

    def _radix_passes(self, mb, b, keys, scratch, element, src_slot, dst_slot):
        """Least-significant-digit radix sort of the permutation at ``*src_slot`` by the
        keys' order-preserving unsigned images, one byte per pass, last key first. Every
        pass is a stable counting sort, so the result is the stable lexicographic order. A
        pass whose byte is the same for every element moves nothing and is skipped."""
        n = self.n
        keys_at = [b.gep(scratch, [_c(k * n)], inbounds=True) for k in (2, 3)]
        counts = b.gep(scratch, [_c(4 * n)], inbounds=True)
        key_src, key_dst = mb.entry_alloca(b, I64.as_pointer()), mb.entry_alloca(b, I64.as_pointer())
        for buf, ptr in reversed(keys):
            b.store(keys_at[0], key_src)
            b.store(keys_at[1], key_dst)
            perm = b.load(src_slot)
            target = keys_at[0]

            def image(p, buf=buf, ptr=ptr, perm=perm, target=target):
                source = b.load(b.gep(perm, [p], inbounds=True))
                value = _unsigned_image(b, buf.dtype, b.load(element(ptr, source)))
                b.store(value, b.gep(target, [p], inbounds=True))
            mb.loop(b, n, image, name="image")
            for byte in range(max(1, buf.dtype.itemsize)):
                self._counting_pass(mb, b, byte, counts, key_src, key_dst, src_slot, dst_slot)

    def _counting_pass(self, mb, b, byte, counts, key_src, key_dst, src_slot, dst_slot):
        n = self.n
        fn = b.function
        keys, perm = b.load(key_src), b.load(src_slot)

        def digit(p):
            return b.and_(b.lshr(b.load(b.gep(keys, [p], inbounds=True)), _c(8 * byte)), _c(255))

        mb.loop(b, RADIX, lambda d: b.store(_c(0), b.gep(counts, [d], inbounds=True)), name="zero")

        def count(p):
            slot = b.gep(counts, [digit(p)], inbounds=True)
            b.store(b.add(b.load(slot), _c(1)), slot)
        mb.loop(b, n, count, name="count")
        # all elements in one bucket: this byte orders nothing
        first = b.load(b.gep(counts, [digit(_c(0))], inbounds=True))
        move, skip = fn.append_basic_block("radix.move"), fn.append_basic_block("radix.next")
        b.cbranch(b.icmp_signed("==", first, _c(n)), skip, move)
        b.position_at_end(move)
        running = mb.entry_alloca(b, I64)
        b.store(_c(0), running)

        def offsets(d):
            slot = b.gep(counts, [d], inbounds=True)
            c = b.load(slot)
            total = b.load(running)
            b.store(total, slot)
            b.store(b.add(total, c), running)
        mb.loop(b, RADIX, offsets, name="offsets")
        keys_out, perm_out = b.load(key_dst), b.load(dst_slot)

        def scatter(p):
            slot = b.gep(counts, [digit(p)], inbounds=True)
            position = b.load(slot)
            b.store(b.add(position, _c(1)), slot)
            b.store(b.load(b.gep(keys, [p], inbounds=True)), b.gep(keys_out, [position], inbounds=True))
            b.store(b.load(b.gep(perm, [p], inbounds=True)), b.gep(perm_out, [position], inbounds=True))
        mb.loop(b, n, scatter, name="scatter")
        b.store(keys_out, key_src)
        b.store(keys, key_dst)
        b.store(perm_out, src_slot)
        b.store(perm, dst_slot)
        b.branch(skip)
        b.position_at_end(skip)

    def _merge_passes(self, mb, b, less, src_slot, dst_slot):
        """Bottom-up merge sort of the permutation at ``*src_slot`` (``*dst_slot`` is the
        other half); leaves the sorted permutation at ``*src_slot``."""
        n = self.n
        width_slot = mb.entry_alloca(b, I64)
        b.store(_c(1), width_slot)
        fn = b.function
        head, body, done = (fn.append_basic_block(f"sort.{s}") for s in ("width", "pass", "done"))
        b.branch(head)
        b.position_at_end(head)
        width = b.load(width_slot)
        b.cbranch(b.icmp_signed("<", width, _c(n)), body, done)
        b.position_at_end(body)
        src, dst = b.load(src_slot), b.load(dst_slot)
        runs = b.udiv(b.add(_c(n - 1), b.mul(width, _c(2))), b.mul(width, _c(2)))

        def merge(r):
            lo = b.mul(r, b.mul(width, _c(2)))
            mid = _min(b, b.add(lo, width), _c(n))
            hi = _min(b, b.add(mid, width), _c(n))
            left_slot, right_slot = mb.entry_alloca(b, I64), mb.entry_alloca(b, I64)
            b.store(lo, left_slot)
            b.store(mid, right_slot)

            def take(k):
                a, c = b.load(left_slot), b.load(right_slot)
                # loads stay inside the runs; the comparison decides what is used
                pa = b.load(b.gep(src, [_min(b, a, b.sub(mid, _c(1)))], inbounds=True))
                pc = b.load(b.gep(src, [_min(b, c, b.sub(hi, _c(1)))], inbounds=True))
                right_done = b.icmp_signed(">=", c, hi)
                left_open = b.icmp_signed("<", a, mid)
                take_left = b.and_(left_open, b.or_(right_done, b.not_(less(pc, pa))))
                b.store(b.select(take_left, pa, pc), b.gep(dst, [k], inbounds=True))
                b.store(b.add(a, b.zext(take_left, I64)), left_slot)
                b.store(b.add(c, b.zext(b.not_(take_left), I64)), right_slot)
            mb.loop(b, n, take, name="merge", bounds=(lo, hi))
        mb.loop(b, (n + 1) // 2, merge, name="run", bounds=(_c(0), runs))
        b.store(dst, src_slot)
        b.store(src, dst_slot)
        b.store(b.mul(width, _c(2)), width_slot)
        b.branch(head)
        b.position_at_end(done)


emits(SortStep)(SortStep.emit)


def _unsigned_image(b, dtype, x, widen: bool = True):
    """``x`` as an integer whose unsigned order is the sort's order of ``dtype`` (floats: the
    total order with every NaN largest): an i64 (the radix passes' digits), or with
    ``widen=False`` an integer of ``x``'s own width (enough to compare two keys)."""
    dtype = np.dtype(dtype)
    width = dtype.itemsize * 8
    ity = ir.IntType(width)
    top = ir.Constant(ity, 1 << (width - 1))
    if dtype.kind == "f":
        bits = b.bitcast(x, ity)
        negative = b.icmp_signed("<", bits, ir.Constant(ity, 0))
        image = b.select(negative, b.not_(bits), b.or_(bits, top))
        image = b.select(b.fcmp_unordered("uno", x, x), ir.Constant(ity, (1 << width) - 1), image)
    elif dtype.kind == "i":
        image = b.xor(x, top)
    else:
        image = x
    return image if width == 64 or not widen else b.zext(image, I64)


def _min(b, x, y):
    return b.select(b.icmp_signed("<", x, y), x, y)


def lower_sort(step: FallbackStep, program: Program, target,
               in_body: bool = False) -> SortStep | None:
    """A :class:`SortStep` for a ``sort`` fallback step, or None (also for lines shorter
    than ``RADIX_MIN_LENGTH`` outside a loop or branch body: at the top level NumPy sorts
    them as fast, while in a body a native sort keeps the whole loop native)."""
    short_lines = in_body
    eqn = step.eqn
    if eqn.primitive is not sort_p:
        return None
    operands = step.inputs
    if not all(isinstance(x, Buffer) and x.is_array for x in operands) or not operands[0].shape:
        return None
    if not all(x.dtype in scalar_ops.SUPPORTED_DTYPES and target.dtype_supported(x.dtype)
               for x in operands):
        return None
    dimension, num_keys = int(eqn.params["dimension"]), int(eqn.params["num_keys"])
    if not short_lines and operands[0].shape[dimension] < RADIX_MIN_LENGTH:
        return None
    outputs = []
    for k, out in enumerate(step.outputs):
        if out is None:  # a dropped result still needs memory to be written to
            aval = eqn.outvars[k].aval
            out = program.new_buffer(aval.shape, aval.dtype, "temp")
        outputs.append(out)
    n = operands[0].shape[dimension]
    # two permutations, two key images, the radix counters
    scratch = program.new_buffer((4 * max(n, 1) + RADIX,), np.int64, "temp")
    return SortStep(operands, outputs, dimension, num_keys, scratch)
