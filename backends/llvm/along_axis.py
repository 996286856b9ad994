"""Cumulative reductions in native code: ``cumsum``, ``cumprod``, ``cummax``, ``cummin``.

The operand is viewed as ``[outer, n, inner]`` with ``n`` the accumulated axis. Each output
row ``k`` along that axis is the previous output row combined with the operand's row ``k``
(from the end when ``reverse``), so the innermost loop walks contiguous memory and
vectorizes, and every element is combined in the reference's order (sequentially along the
axis, never reassociated), which gives its float results exactly.

Types are the ones the backend computes natively (not float16/bfloat16, whose reference
accumulates in float32), and ``cumlogsumexp`` stays in NumPy.

    >>> step = lower_cumulative(fallback_step, program, target)       # doctest: +SKIP
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from functrans.backends.llvm import scalar_ops
from functrans.backends.llvm.expressions import combine
from functrans.backends.llvm.ir_builder import I64, emits
from functrans.backends.compiler.fusion import AxisStep, Buffer, FallbackStep
from functrans.primitives import reductions

# cumulative primitive -> the monoid its loop combines with
CUMULATIVE = {reductions.cumsum_p: "add", reductions.cumprod_p: "mul",
              reductions.cummax_p: "max", reductions.cummin_p: "min"}


class CumulativeStep(AxisStep):
    """``out = primitive(operand)`` along ``axis`` (from the end if ``reverse``)."""

    def __init__(self, primitive, operand: Buffer, out: Buffer, axis: int, reverse: bool):
        super().__init__(primitive, operand, out, axis, reverse)
        self.monoid = CUMULATIVE[primitive]

    def emit(self, mb, b: ir.IRBuilder, pointer, table):
        if self.outer * self.n * self.inner == 0:
            return
        x, out = pointer(self.operand), pointer(self.out)
        n, inner = self.n, self.inner

        def row(o, k):  # the offset of row k (in accumulation order) of line o
            p = b.sub(ir.Constant(I64, n - 1), k) if self.reverse else k
            return b.mul(b.add(b.mul(o, ir.Constant(I64, n)), p), ir.Constant(I64, inner))

        def at(ptr, offset):
            return b.gep(ptr, [offset], inbounds=True)

        def first(idx):
            o, i = idx
            offset = b.add(row(o, ir.Constant(I64, 0)), i)
            b.store(b.load(at(x, offset)), at(out, offset))

        def rest(idx):
            o, k, i = idx
            k = b.add(k, ir.Constant(I64, 1))
            offset = b.add(row(o, k), i)
            previous = b.add(row(o, b.sub(k, ir.Constant(I64, 1))), i)
            value = self.combine(mb, b, b.load(at(out, previous)), b.load(at(x, offset)))
            b.store(value, at(out, offset))

        mb.loop_nest(b, [self.outer, inner], first)
        if n > 1:
            mb.loop_nest(b, [self.outer, n - 1, inner], rest)

    def combine(self, mb, b, acc, value):
        if self.out.dtype.kind == "f" and self.monoid in ("add", "mul"):
            # one IEEE operation per element, as the reference does (no reassociation)
            return b.fadd(acc, value) if self.monoid == "add" else b.fmul(acc, value)
        return combine(mb, b, self.monoid, self.out.dtype, acc, value)


emits(CumulativeStep)(CumulativeStep.emit)


def lower_cumulative(step: FallbackStep, program, target,
                     in_body: bool = False) -> CumulativeStep | None:
    """A :class:`CumulativeStep` for a cumulative fallback step, or None."""
    eqn = step.eqn
    if eqn.primitive not in CUMULATIVE or step.outputs[0] is None:
        return None
    operand = step.inputs[0]
    if not isinstance(operand, Buffer) or not operand.shape:
        return None
    if operand.dtype not in scalar_ops.SUPPORTED_DTYPES or operand.dtype == np.bool_ \
            or not target.dtype_supported(operand.dtype):
        return None
    return CumulativeStep(eqn.primitive, operand, step.outputs[0], int(eqn.params["axis"]),
                          bool(eqn.params["reverse"]))
