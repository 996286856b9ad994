"""The buffer-plan verifier: a static proof, for one compiled program, that every buffer is
written before it is read and that no two buffers alive at once share memory.

It checks the schedule as code generation will run it, independently of how the passes
built it (a pass that drops, moves or merges a step, or a planner that reuses a block too
early, fails here instead of reading stray memory at run time):

- every buffer a step reads is a program input, a constant, or written by an earlier step
  (an empty buffer excepted: it has no element to read);
- no step writes a program input or a constant, except a loop body's carry that is updated
  in its own buffer;
- every result of the program is written (or is an input or a constant);
- every scratch (``temp``) buffer a step touches has a block in the arena, inside the arena,
  and aligned; a buffer is alive from the first step that writes it to the last step that
  reads or writes it, and two buffers alive at one step never overlap;
- the same, recursively, for the bodies of control-flow steps, against their own plans.

The test suite runs it on every compilation (the config option ``verify_plans``, or
``FUNCTRANS_VERIFY_PLANS=1``); it costs a walk of the schedule.

    >>> verify_plan(program, plan)          # doctest: +SKIP
"""
from __future__ import annotations

import bisect

from functrans.backends.compiler.buffers import ALIGNMENT, BufferPlan
from functrans.backends.compiler.fusion import Buffer, Program


class PlanError(RuntimeError):
    """A compiled program's schedule or buffer plan breaks an invariant that code generation
    relies on: a compiler bug, reported instead of a wrong result."""


def verify_plan(program: Program, plan: BufferPlan, *, where: str = "program",
                writable_inputs=frozenset()) -> None:
    """Raise :class:`PlanError` unless ``program``'s schedule and ``plan`` keep the
    invariants of the module docstring. ``writable_inputs``: ids of input buffers the
    program may write (carries a loop body updates in place)."""
    _check_schedule(program, where, writable_inputs)
    _check_arena(program, plan, where)
    for step in program.steps:
        for k, body in enumerate(getattr(step, "bodies", ())):
            if not hasattr(body, "plan"):  # planned when it runs (the cuda backend's bodies)
                continue
            in_place = {body.program.outputs[j].id for j in getattr(body, "in_place", ())}
            verify_plan(body.program, body.plan, where=f"{where}, body {k} of {_name(step)}",
                        writable_inputs=frozenset(in_place))
            scratch = getattr(step, "scratch", None)
            if scratch is not None and scratch.nbytes < step.scratch_size:
                raise PlanError(f"{where}: {_name(step)} needs {step.scratch_size} bytes of "
                                f"scratch; its buffer {scratch!r} has {scratch.nbytes}")


def _name(step) -> str:
    return step.describe().splitlines()[0] if hasattr(step, "describe") else type(step).__name__


def _check_schedule(program: Program, where: str, writable_inputs) -> None:
    given = {b.id for b in program.inputs if isinstance(b, Buffer)}
    given |= {b.id for b in program.consts}
    read_only = given - set(writable_inputs)
    written = set(given)
    for k, step in enumerate(program.steps):
        for reads, writes in _phases(step):
            for b in reads:
                if b.id not in written and b.size > 0:
                    raise PlanError(f"{where}: step {k} ({_name(step)}) reads {b!r}, which no "
                                    f"earlier step writes")
            for b in writes:
                if b.id in read_only:
                    raise PlanError(f"{where}: step {k} ({_name(step)}) writes {b!r}, a "
                                    f"{'constant' if b.kind == 'const' else 'program input'}")
                written.add(b.id)
    for k, out in enumerate(program.outputs):
        if isinstance(out, Buffer) and out.id not in written and out.size > 0:
            raise PlanError(f"{where}: result {k} {out!r} is never written")


def _phases(step):
    """``(reads, writes)`` of ``step`` in the order it does them: one phase, or one per part
    of a step made of kernels run in order (a row group: its internal buffers are not in
    memory)."""
    parts = getattr(step, "parts", None)
    if parts is None:
        return [(step.reads(), step.writes())]
    internal = {b.id for b in getattr(step, "internal", ())}
    return [([b for b in part.reads() if b.id not in internal],
             [b for b in part.writes() if b.id not in internal]) for part in parts]


def _check_arena(program: Program, plan: BufferPlan, where: str) -> None:
    first: dict = {}
    last: dict = {}
    temps: dict = {}
    for k, step in enumerate(program.steps):
        for b in step.writes():
            if b.kind == "temp":
                first.setdefault(b.id, k)
        for b in step.reads() + step.writes():
            if b.kind == "temp" and b.size > 0:
                temps[b.id] = b
                last[b.id] = k
    for b in temps.values():
        offset = plan.offsets.get(b.id)
        if offset is None:
            raise PlanError(f"{where}: scratch buffer {b!r} has no place in the arena")
        if offset % ALIGNMENT or offset < 0 or offset + b.nbytes > plan.arena_size:
            raise PlanError(f"{where}: scratch buffer {b!r} at offset {offset} does not fit an "
                            f"arena of {plan.arena_size} bytes aligned to {ALIGNMENT}")
    # Sweep the steps in order: the blocks alive at a step, sorted by offset, never overlap,
    # so a new block need only be checked against its two neighbours.
    starting: dict = {}
    for bid, k in first.items():
        if bid in temps:
            starting.setdefault(k, []).append(temps[bid])
    ending: dict = {}
    for bid, k in last.items():
        ending.setdefault(k, []).append(temps[bid])
    live: list = []  # (offset, end, id), sorted
    for k in range(len(program.steps)):
        for b in starting.get(k, ()):
            start = plan.offsets[b.id]
            entry = (start, start + b.nbytes, b.id)
            i = bisect.bisect_left(live, entry)
            for neighbour in live[max(i - 1, 0):i + 1]:
                if neighbour[0] < entry[1] and entry[0] < neighbour[1]:
                    raise PlanError(f"{where}: step {k} ({_name(program.steps[k])}) writes "
                                    f"{b!r} at arena bytes [{entry[0]}, {entry[1]}), over "
                                    f"buffer %{neighbour[2]} at [{neighbour[0]}, "
                                    f"{neighbour[1]}), which is still in use")
            live.insert(i, entry)
        for b in ending.get(k, ()):
            start = plan.offsets[b.id]
            live.remove((start, start + b.nbytes, b.id))
