"""Scatter in native code (gather fuses through the shared rule,
:func:`functrans.backends.compiler.indexing.gather_rule`).

A :class:`ScatterLoop` copies the operand to the output, then visits the updates in the
reference's order and combines each into its target element; the loop is serial, since
updates may collide.

    >>> step = lower_scatter(fallback_step, program, LLVMTarget())    # doctest: +SKIP
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from functrans.backends.compiler import exprs as E
from functrans.backends.compiler.fusion import FallbackStep, Program
from functrans.backends.compiler.indexing import ScatterStep, scatter_operands
from functrans.backends.llvm.expressions import Evaluator, combine
from functrans.backends.llvm.ir_builder import emits
from functrans.primitives import indexing as indexing_prims

# scatters whose combine has no boolean code here: on booleans NumPy runs them
_NO_BOOL = (indexing_prims.scatter_mul_p, indexing_prims.scatter_min_p,
            indexing_prims.scatter_max_p)


class ScatterLoop(ScatterStep):
    """A :class:`ScatterStep` emitted as one serial loop over the updates."""

    def emit(self, mb, b: ir.IRBuilder, pointer, table):
        if self.out.id != self.operand.id:
            mb.memcpy(b, pointer(self.out), pointer(self.operand), self.out.nbytes)
        with E.lock:
            extents, offset, update, valid = self.expressions()
        if 0 in extents or self.out.size == 0:
            return
        ptrs = {buf.id: pointer(buf) for buf in (self.out, self.indices, self.updates)}

        def body(indices):
            ev = Evaluator(mb, b, indices, ptrs)
            off, value, ok = ev.index(offset), ev.scalar(update), ev.scalar(valid)
            old = ev.load(self.out, off)
            new = value if self.combine is None else combine(mb, b, self.combine,
                                                             self.out.dtype, old, value)
            ev.store(self.out, off, b.select(ok, new, old))
        mb.loop_nest(b, extents, body)


emits(ScatterLoop)(ScatterLoop.emit)


def lower_scatter(step: FallbackStep, program: Program, target, in_body: bool = False):
    """A :class:`ScatterLoop` for a scatter fallback step, or None."""
    eqn = step.eqn
    operands = scatter_operands(step)
    if operands is None:
        return None
    operand, indices, updates = operands
    if operand.dtype.kind not in "biuf" or not target.dtype_supported(operand.dtype) \
            or indices.dtype.kind not in "iu" or not target.dtype_supported(indices.dtype):
        return None
    if eqn.primitive in _NO_BOOL and operand.dtype == np.bool_:
        return None
    if len(operand.shape) == 0:
        return None
    return ScatterLoop(eqn.primitive, operand, indices, updates, step.outputs[0],
                       dict(eqn.params))
