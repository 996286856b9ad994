"""Buffer planning: place every intermediate in one scratch arena, reusing memory.

Each ``temp`` buffer lives from the step that writes it first to the step that reads it
last. Walking the schedule in order, a buffer takes the best-fitting free block of the
arena (or grows the arena) and gives its block back after its last reader, so buffers
whose lifetimes do not overlap share memory. A step's outputs are placed before its inputs
are released, so no step ever writes over memory it is reading. Outputs of the program are
never in the arena: the runtime allocates them per call and hands them to the user.

    >>> plan = plan_buffers(program)          # doctest: +SKIP
    >>> plan.offsets[buffer.id], plan.arena_size  # doctest: +SKIP
"""
from __future__ import annotations

import bisect

from functrans.backends.compiler.fusion import Program

ALIGNMENT = 64  # a cache line, and the widest vector register


class BufferPlan:
    """Arena offsets of the ``temp`` buffers and the arena's size in bytes."""

    def __init__(self, offsets: dict, arena_size: int):
        self.offsets = offsets
        self.arena_size = arena_size

    def __repr__(self):
        return f"BufferPlan({len(self.offsets)} buffers in {self.arena_size} bytes)"


def _round_up(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


class _Arena:
    """First-fit-by-size allocator over offsets, merging neighbouring free blocks."""

    def __init__(self):
        self.size = 0
        self.free: list[tuple[int, int]] = []  # (offset, size), sorted by offset

    def allocate(self, nbytes: int) -> int:
        nbytes = _round_up(max(nbytes, 1))
        best = None
        for i, (off, size) in enumerate(self.free):
            if size >= nbytes and (best is None or size < self.free[best][1]):
                best = i
        if best is not None:
            off, size = self.free.pop(best)
            if size > nbytes:
                bisect.insort(self.free, (off + nbytes, size - nbytes))
            return off
        # grow: extend a free block at the end of the arena if there is one
        if self.free and self.free[-1][0] + self.free[-1][1] == self.size:
            off, size = self.free.pop()
            self.size = off + nbytes
            return off
        off = self.size
        self.size += nbytes
        return off

    def release(self, off: int, nbytes: int) -> None:
        nbytes = _round_up(max(nbytes, 1))
        bisect.insort(self.free, (off, nbytes))
        merged: list[tuple[int, int]] = []
        for o, s in self.free:
            if merged and merged[-1][0] + merged[-1][1] == o:
                merged[-1] = (merged[-1][0], merged[-1][1] + s)
            else:
                merged.append((o, s))
        self.free = merged


def plan_buffers(program: Program) -> BufferPlan:
    """Assign arena offsets to the program's ``temp`` buffers by liveness."""
    last_use: dict[int, int] = {}
    for i, step in enumerate(program.steps):
        for b in step.reads() + step.writes():
            if b.kind == "temp":
                last_use[b.id] = i
    arena = _Arena()
    offsets: dict[int, int] = {}
    for i, step in enumerate(program.steps):
        for b in step.writes():
            if b.kind == "temp" and b.id not in offsets:
                offsets[b.id] = arena.allocate(b.nbytes)
        # release after this step: everything whose last reader or writer it was
        for b in {x.id: x for x in step.reads() + step.writes()}.values():
            # (an empty buffer may be read without ever being written: it has no block)
            if b.kind == "temp" and last_use.get(b.id) == i and b.id in offsets:
                arena.release(offsets[b.id], b.nbytes)
    return BufferPlan(offsets, arena.size)
