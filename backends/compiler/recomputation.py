"""Light values computed again in each kernel that reads them, not written out once.

The planner gives a value a buffer when several kernels read it: one kernel writes the
full array and each reader loads it back. When the value is a few additions,
multiplications, comparisons or selects of arrays that have buffers anyway, and those
arrays hold no more bytes per element than the value itself (``x - mean``, where ``x``
is a convolution's output and ``mean`` is broadcast; a gradient's ``g * scale``), each
reader loads the operands instead of the value and redoes the arithmetic: no reader reads
more bytes than before, and the write of the full array and its pass are gone.

Nothing expensive is repeated: only the operations in :data:`LIGHT_PRIMS`, at most
:data:`MAX_OPS` of them per element, and only for readers that read each element once
(not through a broadcast); and only values of at least :data:`MIN_ELEMENTS` elements. Values that a matrix product takes as an operand keep their
buffer (the product needs one), and so do values computed from a product's result (a
bias add: ``fuse_dot_epilogues`` folds it into the product). The same operations on the same operands give the same
bits in every reader (no floating-point contraction is allowed in generated code).
"""
from __future__ import annotations

import math

import numpy as np

from functrans.core import Var
from functrans.primitives import elementwise as ew

LIGHT_PRIMS = frozenset({ew.add_p, ew.sub_p, ew.mul_p, ew.neg_p, ew.max_p, ew.min_p,
                         ew.square_p, ew.abs_p, ew.select_n_p, ew.eq_p, ew.ne_p, ew.lt_p,
                         ew.le_p, ew.gt_p, ew.ge_p})
# arithmetic operations per element a reader may repeat
MAX_OPS = 4
# Smaller values stay in cache between their writer and their readers, so writing them
# costs little; and the row passes (softmax rows, attention) match their loops as written.
MIN_ELEMENTS = 1 << 16


def recomputed_values(eqns, kinds, live, materialized, consumers, outvars, matrix_kernels,
                      free_prims) -> set:
    """The values among ``materialized`` that each reader should compute itself.

    ``kinds``: the planner's kind of each equation; ``live``: the indices of the equations
    computed; ``consumers``: each value's readers as ``(kernel ids, repeats)`` or
    ``"buffer"``; ``matrix_kernels``: the kernel ids of matrix products' operands;
    ``free_prims``: data movement, which costs no arithmetic."""
    # for each value computed inside its readers: (operations, the buffers it loads), or
    # None when it is too heavy to repeat
    inline: dict = {}
    products = {v for i in live if kinds[i] == "dot" for v in eqns[i].outvars}
    chosen = set()
    for i in sorted(live):
        e = eqns[i]
        if kinds[i] not in ("fusible", "identity"):
            continue
        v = e.outvars[0]
        free = kinds[i] == "identity" or e.primitive in free_prims
        cost = None
        if free or e.primitive in LIGHT_PRIMS:
            cost = (0 if free else 1, frozenset())
            for x in e.invars:
                if not isinstance(x, Var):
                    continue
                if x in inline:
                    if inline[x] is None:
                        cost = None
                        break
                    cost = (cost[0] + inline[x][0], cost[1] | inline[x][1])
                elif x in products:
                    cost = None  # a loop on a product is left to fuse_dot_epilogues
                    break
                else:
                    cost = (cost[0], cost[1] | {x})
            if cost is not None and cost[0] > MAX_OPS:
                cost = None
        if v not in materialized:
            inline[v] = cost
        elif cost is not None and v not in outvars and \
                _worth_repeating(v, cost, consumers.get(v, []), matrix_kernels):
            chosen.add(v)
            inline[v] = cost
    return chosen


def _worth_repeating(v, cost, readers, matrix_kernels) -> bool:
    ops, loaded = cost
    size = value_size(v)
    if ops == 0 or size < MIN_ELEMENTS or not readers or "buffer" in readers:
        return False
    if any(repeats > 1.0 or kernels & matrix_kernels for kernels, repeats in readers):
        return False
    # bytes each reader loads per element instead of the value's own
    loads = sum(np.dtype(x.aval.dtype).itemsize for x in loaded if value_size(x) >= size)
    return loads <= np.dtype(v.aval.dtype).itemsize


def value_size(v) -> int:
    """The number of elements of variable ``v``'s value (1 for a value without a shape): the
    planner's measure of a value, for the choices here and for which values get buffers
    (``fusion``, which imports this module)."""
    return math.prod(v.aval.shape) if hasattr(v.aval, "shape") else 1
