"""Row fusion: the passes of a softmax over each row run as one loop over rows.

Attention's softmax, ``softmax(where(mask, scores * scale, -inf))`` over the last axis, and
its derivative fuse (see :mod:`fusion`) into several kernels over the ``[batch, heads,
query, key]`` scores: the scaled and masked scores, their row maxima, the exponentials, the
row sums and the probabilities. Each pass writes a buffer as large as the scores, only for
the next pass to read it back: four score-sized buffers forward, where one (the
probabilities) is needed.

This pass finds runs of such kernels that agree on their rows — loops over ``[rows, n]``
and reductions over the last axis ``n`` — and in which each kernel reads what an earlier one
of the run wrote only within the same row. The run becomes one :class:`RowGroup`: for each
row, the kernels run in order over the row's ``n`` elements. A buffer written and read only
inside the group lives in a row-sized stack buffer (a reduction's result in one element),
so it stays in the L1 cache and never reaches memory; rows are independent, so the group
splits over threads by rows.

    >>> program = fuse_rows(program)          # doctest: +SKIP
    >>> [s.describe() for s in program.steps if isinstance(s, RowGroup)]  # doctest: +SKIP
    ['rows[16384, 256] -> %68 (internal %64 %65 %66 %67) [...]']
"""
from __future__ import annotations

import functools
import math

from functrans import _caches
from functrans.backends.compiler import exprs as E
from functrans.backends.compiler.fusion import (Buffer, LoopKernel, Program, ReduceKernel, Step,
                                            unique_buffers)

# a row's internal buffers live on the stack of the thread running it
MAX_ROW_BYTES = 1 << 15


class RowGroup(Step):
    """Loop and reduce kernels over the rows of ``[rows, width]``, run row by row.

    ``parts`` are the kernels in that two-dimensional view (index 0 the row, 1 the column);
    ``internal`` are the buffers only they use, addressed within the row (``j`` for a
    row-sized buffer, 0 for a reduction's result): code generation gives each a stack slot.
    ``tiled`` are buffers of whole rows addressed within the row too (``j``), whose row
    ``r`` lies ``r - start`` rows after the pointer the kernel is given, ``start`` being
    the first row it runs: the tiles of a block of rows (see :mod:`attention`)."""

    def __init__(self, rows: int, width: int, parts: list, internal: list, tiled=()):
        self.shape = (rows, width)
        self.parts = parts
        self.internal = internal
        self.tiled = list(tiled)
        self.prims = tuple(p for part in parts for p in part.prims)

    def _external(self, buffers):
        inside = {b.id for b in self.internal}
        return [b for b in unique_buffers(buffers) if b.id not in inside]

    def reads(self):
        return self._external([b for part in self.parts for b in part.reads()])

    def writes(self):
        return self._external([b for part in self.parts for b in part.writes()])

    def values(self) -> list:
        """Every scalar expression the parts compute."""
        return [v for part in self.parts for v in
                ([v for _, _, v in part.outputs] if isinstance(part, LoopKernel) else [part.value])]

    def row_slots(self, buf: Buffer) -> int:
        """Elements of the stack slot of internal buffer ``buf``."""
        return self.shape[1] if buf.size == self.shape[0] * self.shape[1] else 1

    def describe(self):
        outs = " ".join(repr(b) for b in self.writes())
        inner = " ".join(f"%{b.id}" for b in self.internal)
        tiles = f" (tiles {' '.join(f'%{b.id}' for b in self.tiled)})" if self.tiled else ""
        return (f"rows{list(self.shape)} -> {outs} (internal {inner}){tiles}  "
                f"[{'; '.join(p.describe() for p in self.parts)}]")


# =============================================================================================
# Kernels as rows
# =============================================================================================


@functools.lru_cache(maxsize=1024)
def _row_major(shape: tuple):
    """The row-major offset of the loop indices of ``shape`` (callers hold ``E.lock``)."""
    return E.linearize(E.index_vars(shape), shape)


_caches.on_clear(_row_major.cache_clear)  # its expressions outlive every program otherwise


def _row_shape(step, rows_width=None):
    """``(rows, width)`` of ``step`` viewed as rows (see :func:`_row_view`), or None; cheap:
    nothing is built."""
    if isinstance(step, LoopKernel):
        shape = step.shape
        if not shape or any(off is not _row_major(shape) for _, off, _ in step.outputs):
            return None
        if rows_width is not None and shape[-1] != rows_width[1] and \
                math.prod(shape) == rows_width[0] * rows_width[1]:
            return tuple(rows_width)
    elif isinstance(step, ReduceKernel):
        shape = step.shape
        if len(shape) < 2 or step.reduced != (False,) * (len(shape) - 1) + (True,) or \
                step.out_offset is not _row_major(shape[:-1]):
            return None
    else:
        return None
    width, rows = shape[-1], math.prod(shape[:-1])
    return (rows, width) if width >= 2 and rows >= 1 else None


def _row_view(step, rows_width=None):
    """``(rows, width, step in the [rows, width] view)``, or None if ``step`` is not a
    row-major loop over rows or a reduction of each row's last axis. A row-major loop of
    another shape with as many elements is viewed as ``rows_width`` when given (fusion
    flattens elementwise loops to one dimension)."""
    found = _row_shape(step, rows_width)
    if found is None:
        return None
    if isinstance(step, LoopKernel) and step.shape[-1] != found[1]:
        return _reshaped_loop(step, *found)
    shape = step.shape
    rows, width = found
    row, col = E.ivar(0, rows), E.ivar(1, width)
    mapping = dict(zip(E.index_vars(shape[:-1]), E.delinearize(row, shape[:-1])))
    mapping[E.ivar(len(shape) - 1, width)] = col
    flat = E.linearize([row, col], (rows, width))
    if isinstance(step, LoopKernel):
        values = E.substitute([v for _, _, v in step.outputs], mapping)
        view = LoopKernel((rows, width), [(buf, flat, v) for (buf, _, _), v
                                          in zip(step.outputs, values)], step.prims)
    else:
        value, = E.substitute([step.value], mapping)
        view = ReduceKernel((rows, width), (False, True), step.monoid, value, step.out,
                            row, step.prims)
    return rows, width, view


def _reshaped_loop(step: LoopKernel, rows: int, width: int):
    """The row-major loop ``step`` as a loop over ``[rows, width]`` (as many elements)."""
    row, col = E.ivar(0, rows), E.ivar(1, width)
    flat = E.linearize([row, col], (rows, width))
    mapping = dict(zip(E.index_vars(step.shape), E.delinearize(flat, step.shape)))
    values = E.substitute([v for _, _, v in step.outputs], mapping)
    view = LoopKernel((rows, width), [(buf, flat, v) for (buf, _, _), v
                                      in zip(step.outputs, values)], step.prims)
    return rows, width, view


def _rebuilt(view, rebuild_load):
    """``view`` with each load rebuilt by ``rebuild_load(buffer, offset)``."""
    if isinstance(view, LoopKernel):
        values = E.substitute([v for _, _, v in view.outputs], {}, rebuild_load)
        return LoopKernel(view.shape, [(b, off, v) for (b, off, _), v
                                       in zip(view.outputs, values)], view.prims)
    value, = E.substitute([view.value], {}, rebuild_load)
    return ReduceKernel(view.shape, view.reduced, view.monoid, value, view.out,
                        view.out_offset, view.prims)


def _reads_within_row(view, written: set, rows: int, width: int) -> bool:
    """Whether ``view`` reads the buffers in ``written`` (ids) only in its own row."""
    row, flat = E.ivar(0, rows), E.linearize([E.ivar(0, rows), E.ivar(1, width)], (rows, width))
    for node in E.loads(view.values() if isinstance(view, RowGroup) else
                        [v for _, _, v in view.outputs] if isinstance(view, LoopKernel)
                        else [view.value]):
        buf, offset = node.args
        if buf.id in written and not ((buf.size == rows * width and offset is flat)
                                      or (buf.size == rows and offset is row)):
            return False
    return True


def _within_row(part, internal: set, rows: int, width: int):
    """``part`` reading and writing the ``internal`` buffers (ids) at their place in the
    row's stack slot: ``j`` for a row-sized buffer, 0 for a reduction's result."""
    col = E.ivar(1, width)

    def rebuild(buf, offset):
        if buf.id not in internal:
            return E.load(buf, offset)
        return E.load(buf, col if buf.size == rows * width else E.const(0))
    part = _rebuilt(part, rebuild)
    if isinstance(part, LoopKernel):
        return LoopKernel(part.shape, [(b, col if b.id in internal else off, v)
                                       for b, off, v in part.outputs], part.prims)
    offset = E.const(0) if part.out.id in internal else part.out_offset
    return ReduceKernel(part.shape, part.reduced, part.monoid, part.value, part.out, offset,
                        part.prims)


# =============================================================================================
# The pass
# =============================================================================================


def fuse_rows(program: Program) -> Program:
    """``program`` with runs of row-wise kernels merged into :class:`RowGroup` steps (see
    the module docstring). Steps keep their order; nothing else changes."""
    readers: dict = {}
    for k, step in enumerate(program.steps):
        for b in step.reads():
            readers.setdefault(b.id, set()).add(k)
    results = {b.id for b in program.outputs if isinstance(b, Buffer)}
    steps, k = [], 0
    with E.lock:
        while k < len(program.steps):
            group, end = _grow_group(program.steps, k, readers, results)
            if group is None:
                steps.append(program.steps[k])
                k += 1
            else:
                steps.append(group)
                k = end
    program.steps = steps
    return program


def _grow_group(steps, start: int, readers: dict, results: set):
    """The group of the longest run of row kernels from ``steps[start]`` that read what the
    run wrote only within the row: (RowGroup, index after it), or (None, start + 1) when
    no buffer would stay inside the group."""
    shape = _row_shape(steps[start])
    after = _row_shape(steps[start + 1]) if start + 1 < len(steps) else None
    if shape is not None and after is not None and after != shape:  # e.g. a flattened loop
        shape = _row_shape(steps[start], after)
        shape = shape if shape == after else None
    if shape is None:
        return None, start + 1
    rows, width = shape
    run = start + 1
    while run < len(steps) and _row_shape(steps[run], shape) == shape:
        run += 1
    if not any(isinstance(s, ReduceKernel) for s in steps[start:run]):
        return None, start + 1
    parts, written, end = [], {}, start
    while end < run:
        view = _row_view(steps[end], shape)[2]
        if not _reads_within_row(view, set(written), rows, width):
            break
        parts.append(view)
        written.update((b.id, b) for b in steps[end].writes())
        end += 1
    members = set(range(start, end))
    internal = [b for b in written.values()
                if b.kind == "temp" and b.id not in results and readers.get(b.id)
                and readers[b.id] <= members]
    if not internal or not any(isinstance(p, ReduceKernel) for p in parts) \
            or width * max(b.dtype.itemsize for b in internal) > MAX_ROW_BYTES:
        return None, start + 1
    ids = {b.id for b in internal}
    return RowGroup(rows, width, [_within_row(p, ids, rows, width) for p in parts],
                    internal), end
