"""Control flow on the GPU: ``while``, ``scan`` and ``cond`` driven from the host around
compiled bodies.

Each sub-jaxpr (loop condition, loop body, branch) is planned and generated like a whole
program (the fusion and ``lower_native_steps`` passes), with its kernels in the enclosing program's translation
unit (one NVRTC module, one host-emulation library). At run time the host calls the body's
schedule once per iteration with :meth:`~runtime.CudaExecutable.run_schedule` on the same
:class:`~runtime.ArrayBackend`, so the carries stay where the arrays live (the GPU, or NumPy
for the emulation). Per iteration the host reads back one scalar: the loop predicate of a
``while``; a ``cond`` reads its branch index once; a ``scan`` reads nothing (its trip count
is static), slices ``xs`` and writes ``ys`` in place on the device. Bodies never unroll
(``unroll`` is ignored), nested control flow nests the same way, and a body may itself hold
fallback steps.

    >>> step = lower_control(fallback_step, program, CudaTarget())        # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from functrans.backends.compiler.fusion import (Buffer, FallbackStep, Program, Step,
                                                flat_program, normalize, plan_program)
from functrans.backends.compiler.native_steps import lower_native_steps, outputs_in_buffers
from functrans.backends.cuda.scalar_ops import storage_dtype
from functrans.core import ShapedArray, to_numpy
from functrans.primitives import control_flow as control_prims


# =============================================================================================
# Control steps
# =============================================================================================


class ControlStep(Step):
    """A control-flow equation whose bodies are compiled programs.

    ``inputs`` are buffers of the enclosing program (or NumPy arrays for literal operands);
    ``outputs`` are buffers of kind ``fallback`` (arrays the step hands over, as a fallback
    does) or None for dropped results; ``bodies`` the compiled sub-programs: the condition
    and the body of a ``while``, the body of a ``scan``, the branches of a ``cond``."""

    # the runtime hands its results over as a fallback step's, arrays of the step's own
    hands_over_results = True

    def __init__(self, primitive, inputs, outputs, bodies, params: dict):
        self.prims = (primitive.name,)
        self.primitive, self.name = primitive, primitive.name
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.bodies = list(bodies)
        self.params = dict(params)

    def reads(self):
        seen, out = set(), []
        for b in self.inputs:
            if isinstance(b, Buffer) and b.id not in seen:
                seen.add(b.id)
                out.append(b)
        return out

    def writes(self):
        return [b for b in self.outputs if b is not None]

    def describe(self):
        bodies = "\n".join("  body:\n    " + b.describe().replace("\n", "\n    ") for b in self.bodies)
        return f"{self.name} {self.inputs} -> {self.outputs} {self.params}\n{bodies}"


def compile_body(closed, target) -> Program | None:
    """``closed`` planned for ``target`` (CUDA), every output a buffer; None when it cannot
    be."""
    jaxpr, consts = flat_program(closed)
    consts = [to_numpy(c) for c in consts]
    if not all(isinstance(v.aval, ShapedArray) for v in list(jaxpr.invars) + list(jaxpr.outvars)):
        return None
    program = lower_native_steps(normalize(plan_program(jaxpr, target, consts)), target,
                                 in_body=True)
    # a literal output becomes a constant, so every body result is an array on the device
    return outputs_in_buffers(program)


def lower_control(step: FallbackStep, program, target,
                  in_body: bool = False) -> ControlStep | None:
    """A :class:`ControlStep` for a ``while``/``scan``/``cond`` fallback step, or None."""
    eqn = step.eqn
    avals = [v.aval for v in list(eqn.invars) + list(eqn.outvars)]
    if not all(isinstance(a, ShapedArray) and target.dtype_supported(a.dtype) for a in avals):
        return None
    if any(isinstance(x, Buffer) and not x.is_array for x in step.inputs):
        return None
    primitive, p = eqn.primitive, eqn.params
    if primitive is control_prims.while_p:
        closed = [p["cond_jaxpr"], p["body_jaxpr"]]
        params = {"cond_nconsts": int(p["cond_nconsts"]), "body_nconsts": int(p["body_nconsts"])}
    elif primitive is control_prims.scan_p:
        closed = [p["jaxpr"]]
        params = {"num_consts": int(p["num_consts"]), "num_carry": int(p["num_carry"]),
                  "length": int(p["length"]), "reverse": bool(p["reverse"])}
    else:
        closed = list(p["branches"])
        params = {}
    try:
        bodies = [compile_body(c, target) for c in closed]
    except NotImplementedError:
        return None
    if any(b is None for b in bodies):
        return None
    return ControlStep(primitive, step.inputs, step.outputs, bodies, params)


# =============================================================================================
# Running them
# =============================================================================================


class ControlLaunch:
    """A :class:`ControlStep` in a module's schedule, with the generated module of each body
    (its kernels live in the enclosing translation unit)."""

    def __init__(self, step: ControlStep, modules):
        self.step = step
        self.modules = list(modules)
        self._executables = None

    def __repr__(self):
        return f"ControlLaunch({self.step.name}, {len(self.modules)} bodies)"

    def executables(self, executable_type) -> list:
        """The bodies' executables (``executable_type(module)``: the runtime's), made on
        first use."""
        if self._executables is None:
            self._executables = [executable_type(m) for m in self.modules]
        return self._executables

    def run(self, backend, array_of, arrays, key, executable_type) -> None:
        """Run the step on ``backend``: read the inputs with ``array_of``, put the results in
        ``arrays`` (buffer id -> array), as a fallback step does; the bodies run as
        ``executable_type``s (the runtime's executable)."""
        inputs = []
        for x in self.step.inputs:
            if isinstance(x, Buffer):
                inputs.append(array_of(x))
            else:  # a literal operand
                value = np.ascontiguousarray(np.asarray(x))
                inputs.append(backend.from_host(value.view(storage_dtype(value.dtype))))
        runner = _Runner(backend, self.executables(executable_type), key)
        results = _RUNS[self.step.primitive](runner, inputs, self.step.params)
        for buf, value in zip(self.step.outputs, results):
            if buf is not None:
                arrays[buf.id] = value


class _Runner:
    """One execution of a control step: each body's arena is allocated once and reused by
    every iteration."""

    def __init__(self, backend, executables, key):
        self.backend = backend
        self.executables = executables
        self.key = key
        self.arenas: dict = {}

    def call(self, k: int, inputs: list) -> list:
        exe = self.executables[k]
        arena = self.arenas.get(k)
        if arena is None:
            arena = self.arenas[k] = self.backend.empty((exe.arena_bytes,), np.uint8)
        return exe.run_schedule(self.backend, inputs, key=self.key, arena=arena)

    def run_while(self, inputs, params) -> list:
        nc, nb = params["cond_nconsts"], params["body_nconsts"]
        cond_consts, body_consts, carry = inputs[:nc], inputs[nc:nc + nb], inputs[nc + nb:]
        iterations = 0
        while True:
            predicate, = self.call(0, cond_consts + carry)
            if not bool(np.asarray(self.backend.to_host(predicate))):  # the one read back
                break
            carry = self.call(1, body_consts + carry)
            iterations += 1
        # results are the step's own arrays, never the (possibly arena) inputs
        return carry if iterations else [c.copy() for c in carry]

    def run_scan(self, inputs, params) -> list:
        nc, nk = params["num_consts"], params["num_carry"]
        length, reverse = params["length"], params["reverse"]
        consts, carry, xs = inputs[:nc], inputs[nc:nc + nk], inputs[nc + nk:]
        body = self.executables[0].program
        ys = [self.backend.empty((length,) + b.shape, storage_dtype(b.dtype))
              for b in body.outputs[nk:]]
        for step in range(length):
            i = length - 1 - step if reverse else step
            outs = self.call(0, consts + carry + [x[i, ...] for x in xs])  # views, 0-d too
            carry = outs[:nk]
            for y, out in zip(ys, outs[nk:]):
                y[i] = out
        return (carry if length else [c.copy() for c in carry]) + ys

    def run_cond(self, inputs, params) -> list:
        index = int(np.asarray(self.backend.to_host(inputs[0])).item())
        k = min(max(index, 0), len(self.executables) - 1)  # clamped, as the reference does
        return self.call(k, inputs[1:])


# control primitive -> how its step runs
_RUNS = {control_prims.while_p: _Runner.run_while, control_prims.scan_p: _Runner.run_scan,
         control_prims.cond_p: _Runner.run_cond}
