"""``sort`` in native code: a stable merge sort of each line along the sorted dimension.

The operands are viewed as ``[outer, n, inner]``. For every line, a permutation of ``0..n-1``
is merge-sorted bottom-up (runs of 1, 2, 4, ... merged between two halves of a scratch
buffer; ties keep the left run's element first, so the sort is stable) under the order of
the first ``num_keys`` operands, compared lexicographically; then every operand is gathered
through the permutation. Keys compare in the reference's total order: integers by value,
floats by their bits with the magnitude flipped for negatives, so -inf < ... < -0.0 < 0.0 <
... < inf, and every NaN above +inf (NaNs keep their order). That is the reference's
``lexsort`` result exactly.

It is used in loop and branch bodies, where it keeps the loop native (the alternative is a
loop driven from Python around the body); a sort at a program's top level runs in NumPy,
whose sort is faster than this merge sort. Types are the ones the backend computes natively;
float16/bfloat16/complex keys stay in NumPy.

    >>> step = lower_sort(fallback_step, program, target)     # doctest: +SKIP
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from functrans.backends.llvm import scalar_ops
from functrans.backends.llvm.fusion import Buffer, FallbackStep, Program, Step

I1, I64 = ir.IntType(1), ir.IntType(64)


def _c(v):
    return ir.Constant(I64, v)


class SortStep(Step):
    """``outputs = sort(operands)`` along ``dimension`` by the first ``num_keys`` operands;
    ``scratch`` holds the permutation and its merge buffer (2n int64)."""

    def __init__(self, operands, outputs, dimension, num_keys, scratch):
        self.prims = ("sort",)
        self.operands, self.outputs = list(operands), list(outputs)
        self.dimension, self.num_keys, self.scratch = dimension, num_keys, scratch
        shape = operands[0].shape
        self.outer = int(np.prod(shape[:dimension], dtype=np.int64))
        self.n = shape[dimension]
        self.inner = int(np.prod(shape[dimension + 1:], dtype=np.int64))

    def reads(self):
        seen, out = set(), []
        for b in self.operands:
            if b.id not in seen:
                seen.add(b.id)
                out.append(b)
        return out

    def writes(self):
        return list(self.outputs) + [self.scratch]

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

        def line(idx):
            o, i = idx
            base = b.add(b.mul(o, _c(n * inner)), i)

            def element(ptr, position):
                return b.gep(ptr, [b.add(base, b.mul(position, _c(inner)))], inbounds=True)

            mb.loop(b, n, lambda p: b.store(p, b.gep(halves[0], [p], inbounds=True)), name="iota")
            b.store(halves[0], src_slot)
            b.store(halves[1], dst_slot)
            keys = ins[:self.num_keys]
            key_bufs = self.operands[:self.num_keys]

            def less(p, q):  # key(p) < key(q), lexicographically over the keys
                result = ir.Constant(I1, 0)
                for buf, ptr in reversed(list(zip(key_bufs, keys))):
                    x, y = b.load(element(ptr, p)), b.load(element(ptr, q))
                    lt, eq = _compare(b, buf.dtype, x, y)
                    result = b.or_(lt, b.and_(eq, result))
                return result

            self._merge_passes(mb, b, less, src_slot, dst_slot)
            perm = b.load(src_slot)

            def gather(p):
                source = b.load(b.gep(perm, [p], inbounds=True))
                for x, y in zip(ins, outs):
                    b.store(b.load(element(x, source)), element(y, p))
            mb.loop(b, n, gather, name="gather")

        mb.loop_nest(b, [self.outer, inner], line)

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


def _min(b, x, y):
    return b.select(b.icmp_signed("<", x, y), x, y)


def _compare(b, dtype, x, y):
    """(x < y, x == y) in the sort's total order."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        x, y = _ordered_bits(b, dtype, x), _ordered_bits(b, dtype, y)
        return b.icmp_signed("<", x, y), b.icmp_signed("==", x, y)
    if dtype.kind == "i":
        return b.icmp_signed("<", x, y), b.icmp_signed("==", x, y)
    return b.icmp_unsigned("<", x, y), b.icmp_unsigned("==", x, y)  # unsigned and bool


def _ordered_bits(b, dtype, x):
    """An integer whose signed order is the float total order (every NaN largest)."""
    width = dtype.itemsize * 8
    ity = ir.IntType(width)
    bits = b.bitcast(x, ity)
    flipped = b.xor(bits, ir.Constant(ity, (1 << (width - 1)) - 1))
    ordered = b.select(b.icmp_signed("<", bits, ir.Constant(ity, 0)), flipped, bits)
    is_nan = b.fcmp_unordered("uno", x, x)
    return b.select(is_nan, ir.Constant(ity, (1 << (width - 1)) - 1), ordered)


def lower_sort(step: FallbackStep, program: Program, target) -> SortStep | None:
    """A :class:`SortStep` for a ``sort`` fallback step, or None."""
    from functrans.backends.llvm.control_flow import _new_buffer
    eqn = step.eqn
    if eqn.primitive.name != "sort":
        return None
    operands = step.inputs
    if not all(isinstance(x, Buffer) and x.is_array for x in operands) or not operands[0].shape:
        return None
    if not all(x.dtype in scalar_ops.SUPPORTED_DTYPES and target.dtype_supported(x.dtype)
               for x in operands):
        return None
    dimension, num_keys = int(eqn.params["dimension"]), int(eqn.params["num_keys"])
    outputs = []
    for k, out in enumerate(step.outputs):
        if out is None:  # a dropped result still needs memory to be written to
            aval = eqn.outvars[k].aval
            out = _new_buffer(program, aval.shape, aval.dtype, "temp")
        outputs.append(out)
    n = operands[0].shape[dimension]
    scratch = _new_buffer(program, (2 * max(n, 1),), np.int64, "temp")
    return SortStep(operands, outputs, dimension, num_keys, scratch)
