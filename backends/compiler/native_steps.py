"""The pass ``lower_native_steps``, shared by every compiled backend.

The fusion pass leaves each equation it cannot fuse as a :class:`~fusion.FallbackStep` (its
NumPy implementation, run between compiled parts). A backend that has code of its own for
some of those primitives (control flow, scatters, cumulative ops, sorts...) lists them in its
lowering table, ``target.native_steps``: primitive -> ``lowering(fallback_step, program,
target, in_body)``, which returns the native step or None when this instance stays on the
host (``in_body``: the program is a loop or branch body). This pass replaces every fallback
step the table lowers, in place, and gives the native step's results their memory.

    >>> program = lower_native_steps(program, target)       # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from functrans.backends.compiler.fusion import Buffer, FallbackStep, Program
from functrans.backends.compiler.passes import Pass

NAME = "lower_native_steps"


def lower_native_steps(program: Program, target, in_body: bool = False) -> Program:
    """Replace the fallback steps of ``program`` that ``target.native_steps`` lowers (in
    place; returns ``program``)."""
    table = target.native_steps
    output_ids = {b.id for b in program.outputs if isinstance(b, Buffer)}
    for index, step in enumerate(program.steps):
        if not isinstance(step, FallbackStep) or step.eqn.primitive not in table:
            continue
        native = table[step.eqn.primitive](step, program, target, in_body)
        if native is None:
            continue
        if not native.hands_over_results:
            # the native code writes the results: the executable allocates them, as for a
            # kernel's (a dropped result still needs memory to be written to)
            results = native.results()
            for k, out in enumerate(results):
                if out is None:
                    aval = step.eqn.outvars[k].aval
                    results[k] = program.new_buffer(aval.shape, aval.dtype, "temp")
                elif out.kind == "fallback":
                    out.kind = "output" if out.id in output_ids else "temp"
        program.steps[index] = native
    return program


def lowering_pass(target) -> Pass:
    """The pass of a backend whose lowering table is ``target.native_steps``."""
    return Pass(NAME, lambda program: lower_native_steps(program, target))


def outputs_in_buffers(program: Program) -> Program:
    """``program`` (a loop or branch body) with each literal output made a constant, so that
    every output is a buffer the body's caller reads from."""
    for k, out in enumerate(program.outputs):
        if not isinstance(out, Buffer):
            value = np.asarray(out, order="C")
            program.outputs[k] = program.new_buffer(value.shape, value.dtype, "const", value)
            program.consts.append(program.outputs[k])
    return program
