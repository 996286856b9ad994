"""What a compiled program costs, read from the compiler's own schedule and buffer plan:
``Compiled.cost_analysis()`` and ``Compiled.memory_analysis()``.

Counts follow XLA's conventions where they exist. A *flop* is one arithmetic operation on
one element (a multiply-add of a matrix product is two); a *transcendental* is one
evaluation of ``exp``, ``log``, ``sin``, ``tanh`` and their kin (counted apart from flops);
*bytes accessed* adds, per step of the schedule, the bytes of every buffer it reads and
writes (a fused loop reads each operand once, however often its expression loads it).
A scan body counts once per iteration; a while loop's body counts once (its trip count is
not known when compiling); a cond counts its most expensive branch. Steps run by NumPy
(fallbacks) count their memory traffic only.
"""
from __future__ import annotations

import numpy as np

from functrans.backends.compiler import exprs as E
from functrans.backends.compiler.fusion import DotKernel, LoopKernel, ReduceKernel

# evaluations of these count as transcendentals, not flops
TRANSCENDENTAL = frozenset({
    "exp", "exp2", "expm1", "log", "log1p", "sin", "cos", "tan", "asin", "acos", "atan",
    "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "logistic", "erf", "erfc",
    "erf_inv", "lgamma", "digamma", "pow", "sqrt", "rsqrt", "cbrt",
})
# scalar functions that move or reinterpret a value and compute nothing
_FREE = frozenset({"convert_element_type", "bitcast_convert_type", "copy", "reduce_precision",
                   "stop_gradient", "real", "imag"})


def _elements(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _expression_ops(values) -> tuple[int, int]:
    """(flops, transcendentals) of evaluating the scalar expressions ``values`` once."""
    flops = transcendentals = 0
    for node in E.postorder(values):
        if not isinstance(node, E.ScalarExpr) or node.kind != "op":
            continue
        name = getattr(node.args[0], "name", str(node.args[0]))
        if name in TRANSCENDENTAL:
            transcendentals += 1
        elif name not in _FREE:
            flops += 1
    return flops, transcendentals


def _step_bytes(step) -> int:
    buffers = {}
    for b in list(step.reads()) + list(step.writes()):
        if b is not None and getattr(b, "is_array", True):
            buffers[b.id] = b
    return sum(b.nbytes for b in buffers.values())


def program_cost(program) -> dict:
    """``{"flops", "transcendentals", "bytes accessed"}`` of one run of ``program`` (a fused
    schedule: see :class:`functrans.backends.compiler.fusion.Program`)."""
    total = {"flops": 0.0, "transcendentals": 0.0, "bytes accessed": 0.0}
    for step in program.steps:
        flops = transcendentals = 0
        if isinstance(step, DotKernel):
            flops = 2 * step.batch * step.m * step.n * step.k
        elif isinstance(step, LoopKernel):
            per_element = _expression_ops([v for _, _, v in step.outputs])
            flops, transcendentals = (n * _elements(step.shape) for n in per_element)
        elif isinstance(step, ReduceKernel):
            per_element = _expression_ops([step.value])
            size = _elements(step.shape)
            flops, transcendentals = (per_element[0] + 1) * size, per_element[1] * size
        bodies = getattr(step, "bodies", None)
        if bodies:
            costs = [program_cost(body.program) for body in bodies]
            if step.prims[0] == "cond":
                inner = max(costs, key=lambda c: c["flops"] + c["transcendentals"])
            else:  # scan: every iteration; while: condition and body once each
                repeat = getattr(step, "length", 1)
                inner = {k: repeat * sum(c[k] for c in costs) for k in total}
            for k in total:
                total[k] += inner[k]
        total["flops"] += flops
        total["transcendentals"] += transcendentals
        total["bytes accessed"] += _step_bytes(step)
    return total


def memory_sizes(program, plan) -> dict:
    """The bytes of a program's arguments, outputs and scratch arena (``plan.arena_size``,
    which control-flow steps' carries and bodies' arenas live in)."""
    inputs = {b.id: b for b in program.inputs if getattr(b, "is_array", True)}
    outputs = {b.id: b for b in program.outputs
               if hasattr(b, "kind") and b.kind == "output"}
    return {
        "argument_size_in_bytes": sum(b.nbytes for b in inputs.values()),
        "output_size_in_bytes": sum(b.nbytes for b in outputs.values()),
        "temp_size_in_bytes": int(plan.arena_size),
        "constant_size_in_bytes": sum(b.nbytes for b in program.consts),
    }
