"""Loops that read what an earlier loop of the same shape wrote, merged into one loop.

The planner gives a value a buffer when kernels read it in several places (a comparison
whose mask a select reads now and the backward pass reads later, the value compared,
...), and each such value then is a loop of its own that writes a full array, which the
next loop reads back. When a later loop of the same shape reads that buffer element by
element, the earlier loop moves down into it: the merged loop computes the value once per
element, in registers, and writes it out only if a step after the merged loop still reads
it. ReLU's ``x > 0`` and ``x != x`` masks and its select, three loops that each wrote a
full array (and read the one before), become one loop.

The arithmetic is the same: each value is computed from the same operands by the same
operations, once (code generation computes a node of a kernel's expressions once for all
its outputs), so results are the same to the bit.

The merge runs on the program as the planner built it, before loop dimensions are
collapsed (so two loops over the same array have the same shape), and only moves a loop
down past steps that neither read what it writes nor write what it reads.
"""
from __future__ import annotations

import math

from functrans.backends.compiler import exprs as E
from functrans.backends.compiler.fusion import DotKernel, LoopKernel, Program

# How many steps a loop may move down to its reader: bounds the compile time of the scan
# (the loops worth merging are the value and its readers, a few steps apart).
MAX_DISTANCE = 16


def merge_loops(program: Program) -> Program:
    """Merge each loop into a later one of the same shape that reads its outputs at the
    elements it writes (see the module docstring). Changes ``program`` in place."""
    steps: list = list(program.steps)
    products = {s.out.id for s in steps if isinstance(s, DotKernel)}
    last_read = {b.id: len(steps) for b in program.outputs if hasattr(b, "id")}
    for k, step in enumerate(steps):
        for b in step.reads():
            last_read[b.id] = max(last_read.get(b.id, -1), k)
    writer: dict = {}  # buffer id -> position of the loop writing it
    with E.lock:
        for j, step in enumerate(steps):
            if _mergeable(step, products):
                while True:
                    merged = _merge_one(steps, j, writer, last_read, products)
                    if merged is None:
                        break
                    steps[j] = step = merged
            if isinstance(step, LoopKernel):
                for b, _, _ in step.outputs:
                    writer[b.id] = j
    program.steps = [s for s in steps if s is not None]
    return program


def _mergeable(step, products) -> bool:
    """A loop over its outputs' own elements (row-major), writing temporaries only, and
    reading no product (a loop on a product is left to ``fuse_dot_epilogues``)."""
    if not isinstance(step, LoopKernel) or not step.shape:
        return False
    identity = E.linearize(E.index_vars(step.shape), step.shape)
    return all(b.kind == "temp" and b.size == math.prod(step.shape) and offset is identity
               for b, offset, _ in step.outputs) and \
        not any(b.id in products for b in step.reads())


def _merge_one(steps, j, writer, last_read, products):
    """``steps[j]`` with one earlier loop merged into it (that loop's slot set to None),
    or None when no earlier loop qualifies."""
    reader = steps[j]
    identity = E.linearize(E.index_vars(reader.shape), reader.shape)
    loads = E.loads([v for _, _, v in reader.outputs])
    for i in sorted({writer.get(n.args[0].id, -1) for n in loads}, reverse=True):
        if i < 0 or j - i > MAX_DISTANCE or steps[i] is None:
            continue
        source = steps[i]
        if source.shape != reader.shape or not _mergeable(source, products):
            continue
        values = {b.id: v for b, _, v in source.outputs}
        if any(n.args[0].id in values and n.args[1] is not identity for n in loads):
            continue  # read at other elements than the one being computed
        if not _free_between(steps, i, j, source):
            continue

        def redirect(buffer, offset):
            return values[buffer.id] if buffer.id in values else E.load(buffer, offset)
        roots = E.substitute([v for _, _, v in reader.outputs], {}, redirect)
        # what a later step reads (nothing between i and j does) is still written
        kept = [(b, off, v) for b, off, v in source.outputs if last_read.get(b.id, -1) > j]
        for b, _, _ in source.outputs:
            if last_read.get(b.id, -1) <= j:
                writer.pop(b.id, None)
        for b in source.reads():
            last_read[b.id] = max(last_read.get(b.id, -1), j)
        steps[i] = None
        outputs = kept + [(b, off, v) for (b, off, _), v in zip(reader.outputs, roots)]
        return LoopKernel(reader.shape, outputs, tuple(dict.fromkeys(source.prims + reader.prims)))
    return None


def _free_between(steps, i, j, source) -> bool:
    """Whether no step between positions i and j reads or writes what ``source`` writes,
    or writes what it reads: then ``source`` may run at j instead."""
    written = {b.id for b in source.writes()}
    read = {b.id for b in source.reads()}
    for step in steps[i + 1:j]:
        if step is None:
            continue
        if any(b.id in written for b in step.reads() + step.writes()):
            return False
        if any(b.id in read for b in step.writes()):
            return False
    return True
