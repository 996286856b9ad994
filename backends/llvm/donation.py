"""Donated inputs: which outputs may be written into an input's memory.

``jit(f, donate_argnums=...)`` hands the arguments' buffers to the call. An output can then
live in a donated input's memory, with no allocation and no second copy of, say, a model's
parameters, when writing it there cannot change what the program reads:

* one kernel writes the output, an elementwise loop without a retried fast path (a kernel
  that may redo its range with exact library calls would read what it already wrote) — or
  such a loop writes its initial value and a matrix product adds onto it;
* that loop reads the input only at the element it is writing (``p - lr * g`` qualifies,
  a transpose or a broadcast of the input does not);
* no later step reads the input, and the input is not itself a result.

The code is the same either way: outputs are reached through a table of array pointers, so
the runtime decides per call whether to pass a donated input's array as an output's. It
does so only for arrays that nothing else shares (see ``functrans._jit``).

    >>> candidates = alias_candidates(program)       # doctest: +SKIP
    {2: [0]}   # output 2 may reuse input 0
"""
from __future__ import annotations

from functrans.backends.compiler import exprs as E
from functrans.backends.llvm import scalar_ops
from functrans.backends.compiler.fusion import Buffer, DotKernel, LoopKernel, Program


def alias_candidates(program: Program) -> dict:
    """``{output buffer id: [input positions]}``: the inputs whose memory may hold that
    output (same shape and dtype, and safe as the module doc says)."""
    inputs = [(i, b) for i, b in enumerate(program.inputs) if b.is_array and b.size > 0]
    if not inputs:
        return {}
    results = {b.id for b in program.outputs if isinstance(b, Buffer)}
    last_read: dict = {}
    writers: dict = {}
    for k, step in enumerate(program.steps):
        for b in step.reads():
            last_read[b.id] = k
        for b in step.writes():
            writers.setdefault(b.id, []).append(k)
    candidates: dict = {}
    for out in program.outputs:
        if not isinstance(out, Buffer) or out.kind != "output" or out.id in candidates:
            continue
        written_by = writers.get(out.id, [])
        if len(written_by) == 2 and _accumulates_into(program.steps[written_by[1]], out):
            written_by = written_by[:1]  # the loop writes the initial value, BLAS adds to it
        if len(written_by) != 1:
            continue
        k = written_by[0]
        step = program.steps[k]
        if not isinstance(step, LoopKernel):
            continue
        values = [v for _, _, v in step.outputs]
        if scalar_ops.needs_guard(values):
            continue
        offset = next(o for b, o, _ in step.outputs if b.id == out.id)
        loads = E.loads(values + [o for _, o, _ in step.outputs])
        fits = []
        for i, inp in inputs:
            if inp.id in results or inp.shape != out.shape or inp.dtype != out.dtype:
                continue
            if last_read.get(inp.id, -1) > k:
                continue
            if all(n.args[1] is offset for n in loads if n.args[0].id == inp.id):
                fits.append(i)
        if fits:
            candidates[out.id] = fits
    return candidates


def _accumulates_into(step, out: Buffer) -> bool:
    """Whether ``step`` is a matrix product adding onto ``out`` (a fused epilogue: see
    ``fusion.fuse_dot_epilogues``). It reads ``out`` only where it writes, and its operands
    are other buffers, which the ``last_read`` check covers."""
    return isinstance(step, DotKernel) and step.accumulate and step.out.id == out.id
