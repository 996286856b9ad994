"""Control flow compiled natively: ``while``, ``scan`` and ``cond`` as real loops and branches.

Fusion leaves every control-flow equation as a NumPy fallback step. This pass replaces such
a step with a native one when every sub-jaxpr (loop body, condition, branch) compiles to
native code without fallbacks. Each sub-jaxpr becomes a *body*: a fused
:class:`~fusion.Program` with its own buffer plan, emitted once as an internal function

    void body(i8** table, i8** io, i8* arena, i64 baseline)

where ``io`` holds the data pointers of the body's inputs, then of its outputs, ``arena``
its scratch memory and ``baseline`` the SIGINT counter's value when the segment started.
The loop or branch around it is emitted in the caller; it never unrolls. Every loop polls
that counter at its back-edge and stops early when it has moved (see :mod:`interrupts`).
Loop-carried values live in two copies (the body reads one and writes the other, then they
swap), so a body never writes memory it reads, which is what lets its kernels assume their
arguments do not alias. A carry the body can update in place (see
:func:`run_carries_in_place`: passed through, or rewritten element by element, or
accumulated onto by a matrix product) keeps one copy instead: the body reads and writes it
through the same buffer, and no copy is made per iteration.

The step's scratch (both carry copies, the condition's result, the bodies' arenas) is one
``temp`` buffer of the enclosing program, placed by the ordinary buffer plan.

    >>> step = lower_control(fallback_step, program, target)      # doctest: +SKIP
"""
from __future__ import annotations

import copy

import llvmlite.ir as ir
import numpy as np

from functrans.backends.compiler import buffers as buffer_planning
from functrans.backends.compiler import fusion, passes
from functrans.backends.compiler.fusion import (Buffer, DotKernel, FallbackStep, LoopKernel,
                                                Program, Step, unique_buffers)
from functrans.backends.compiler.native_steps import (NAME as LOWER_NATIVE_STEPS,
                                                      lower_native_steps, outputs_in_buffers)
from functrans.backends.llvm import donation
from functrans.backends.llvm.ir_builder import I1, I8, I8P, I32, I64, emits
from functrans.backends.llvm.scalar_ops import mem_type
from functrans.core import ClosedJaxpr, ShapedArray
from functrans.primitives import control_flow as control_prims

ALIGNMENT = buffer_planning.ALIGNMENT


def _round_up(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


class Body:
    """A sub-jaxpr compiled as a function of the module: its program and buffer plan."""

    def __init__(self, program: Program, plan):
        self.program = program
        self.plan = plan
        self.n_in = len(program.inputs)
        self.n_out = len(program.outputs)
        self.in_place = frozenset()  # outputs that are carries updated in their input's buffer

    def describe(self) -> str:
        inner = self.program.describe().replace("\n", "\n    ")
        return f"body (arena {self.plan.arena_size} bytes, offsets " \
               f"{sorted(self.plan.offsets.items())}):\n    {inner}"


def compile_body(closed: ClosedJaxpr, target) -> Body | None:
    """``closed`` as a :class:`Body`, or None when some part of it needs a NumPy fallback."""
    jaxpr, consts = fusion.flat_program(closed)
    if not all(isinstance(v.aval, ShapedArray) for v in list(jaxpr.invars) + list(jaxpr.outvars)):
        return None
    # the pipeline's passes, on the body, as the pipeline runs them (some may be disabled)
    disabled = passes.disabled_passes()
    program = fusion.normalize(fusion.plan_program(jaxpr, target, consts,
                                                   fuse="fuse" not in disabled))
    if "fuse_dot_epilogues" not in disabled:
        program = fusion.fuse_dot_epilogues(program)
    if LOWER_NATIVE_STEPS not in disabled:
        lower_native_steps(program, target, in_body=True)
    if any(isinstance(s, FallbackStep) for s in program.steps):
        return None
    outputs_in_buffers(program)  # every output a buffer the body copies from
    return Body(program, buffer_planning.plan_buffers(program))


def run_carries_in_place(body: Body, first: int, count: int) -> frozenset:
    """Rewrite ``body`` so that carries it can update in place are written into their input
    buffers (carry ``k`` is input ``first + k`` and output ``k``); returns their indices.

    A carry qualifies when it is passed through unchanged, or when its output may share its
    input's memory as a donated input's may (see :func:`donation.alias_candidates`: one
    elementwise loop, or a loop and a matrix product accumulating onto it, writes it, reading
    the input only at the element written, and nothing reads the input later), and no other
    step reads the new value. Its writers
    then write the input buffer itself, so every kernel reads and writes it through one
    pointer, and a loop that only copied the input into the output disappears (a product
    accumulates onto the carry directly)."""
    program = body.program
    if not passes.enabled("carries_in_place"):
        return frozenset()
    candidates = donation.alias_candidates(program)
    in_place = set()
    for k in range(count):
        inp, out = program.inputs[first + k], program.outputs[k]
        if out is inp:
            in_place.add(k)
            continue
        if not isinstance(out, Buffer) or out.kind != "output" or \
                (first + k) not in candidates.get(out.id, ()):
            continue
        if any(b is out for step in program.steps for b in step.reads()
               if not (isinstance(step, DotKernel) and step.accumulate and step.out is out)) \
                or sum(o is out for o in program.outputs) > 1:
            continue  # the new value is read in the body, or is also another output
        steps = []
        for step in program.steps:
            if isinstance(step, LoopKernel) and any(b is out for b, _, _ in step.outputs):
                outputs = [(inp if b is out else b, o, v) for b, o, v in step.outputs]
                if len(outputs) == 1 and _loads_itself(outputs[0]):
                    continue  # inp[i] = inp[i]
                step = LoopKernel(step.shape, outputs, step.prims)
            elif isinstance(step, DotKernel) and step.out is out:
                step = copy.copy(step)
                step.out = inp
            steps.append(step)
        program.steps = steps
        program.outputs[k] = inp
        in_place.add(k)
    body.in_place = frozenset(in_place)
    return body.in_place


def _loads_itself(output) -> bool:
    buffer, offset, value = output
    return value.kind == "load" and value.args[0] is buffer and value.args[1] is offset


# =============================================================================================
# The steps
# =============================================================================================


class ControlStep(Step):
    """A control-flow equation run natively. ``inputs``/``outputs`` are buffers of the
    enclosing program; ``scratch`` is its temp buffer for carries and body arenas."""

    def __init__(self, name, inputs, outputs, bodies, carry_avals, scratch_extra=0):
        self.prims = (name,)
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.bodies = list(bodies)
        # scratch layout: carry copy A, carry copy B, extra bytes, then the body arena
        self.carry_offsets = []
        offset = 0
        for a in carry_avals:
            self.carry_offsets.append(offset)
            offset += _round_up(_nbytes(a))
        self.carry_bytes = offset
        self.extra_offset = 2 * offset
        self.arena_offset = self.extra_offset + _round_up(scratch_extra)
        arena = max([b.plan.arena_size for b in self.bodies], default=0)
        self.scratch = None
        self.scratch_size = self.arena_offset + _round_up(arena)
        self.in_place = frozenset()  # carries with one copy (see run_carries_in_place)

    def reads(self):
        return unique_buffers(b for b in self.inputs)

    def writes(self):
        return unique_buffers(list(self.outputs) + [self.scratch])

    def results(self):
        return self.outputs

    def describe(self):
        bodies = "\n  ".join(b.describe().replace("\n", "\n  ") for b in self.bodies)
        in_place = f" in_place={sorted(self.in_place)}" if self.in_place else ""
        return (f"{self.prims[0]} {self.inputs} -> {self.outputs} scratch={self.scratch!r}"
                f"{in_place}\n  {bodies}")

    # ---- code generation helpers ------------------------------------------------------------

    def carry_pointers(self, b, scratch_ptr, parity):
        """(current, next) carry pointers: copy A then B when ``parity`` is 0, else swapped;
        copy A for both when the body updates the carry in place."""
        current, following = [], []
        for k, off in enumerate(self.carry_offsets):
            a = b.gep(scratch_ptr, [ir.Constant(I64, off)], inbounds=True)
            if k in self.in_place:
                current.append(a)
                following.append(a)
                continue
            bb = b.gep(scratch_ptr, [ir.Constant(I64, off + self.carry_bytes)], inbounds=True)
            current.append(b.select(parity, bb, a))
            following.append(b.select(parity, a, bb))
        return current, following

    def arena(self, b, scratch_ptr):
        return b.gep(scratch_ptr, [ir.Constant(I64, self.arena_offset)], inbounds=True)


def _nbytes(aval) -> int:
    return int(np.prod(aval.shape, dtype=np.int64)) * np.dtype(aval.dtype).itemsize


class WhileStep(ControlStep):
    def __init__(self, inputs, outputs, carry_avals, cond, body, cond_nconsts, body_nconsts):
        super().__init__("while", inputs, outputs, [cond, body], carry_avals, scratch_extra=1)
        self.cond, self.body = cond, body
        self.cond_nconsts, self.body_nconsts = cond_nconsts, body_nconsts
        self.in_place = run_carries_in_place(body, body_nconsts, len(carry_avals))

    def emit(self, mb, b: ir.IRBuilder, pointer, table):
        cond_consts = self.inputs[:self.cond_nconsts]
        body_consts = self.inputs[self.cond_nconsts:self.cond_nconsts + self.body_nconsts]
        carry_in = self.inputs[self.cond_nconsts + self.body_nconsts:]
        scratch = pointer(self.scratch, I8)
        first, _ = self.carry_pointers(b, scratch, ir.Constant(I1, 0))
        for dst, src in zip(first, carry_in):
            mb.memcpy(b, dst, pointer(src, I8), src.nbytes)
        pred = b.gep(scratch, [ir.Constant(I64, self.extra_offset)], inbounds=True)
        arena = self.arena(b, scratch)
        cond_io = mb.entry_alloca(b, ir.ArrayType(I8P, max(1, self.cond.n_in + 1)))
        body_io = mb.entry_alloca(b, ir.ArrayType(I8P, max(1, self.body.n_in + self.body.n_out)))
        fn = b.function
        pre = b.block
        head = fn.append_basic_block("while.cond")
        step = fn.append_basic_block("while.body")
        done = fn.append_basic_block("while.done")
        b.branch(head)
        b.position_at_end(head)
        parity = b.phi(I1)
        parity.add_incoming(ir.Constant(I1, 0), pre)
        current, following = self.carry_pointers(b, scratch, parity)
        _fill(b, cond_io, [pointer(x, I8) for x in cond_consts] + current + [pred])
        call_body(mb, b, self.cond, table, _first(b, cond_io), arena)
        go_on = b.icmp_unsigned("!=", b.load(pred), ir.Constant(I8, 0))
        b.cbranch(b.and_(go_on, b.not_(mb.interrupted(b))), step, done)
        b.position_at_end(step)
        _fill(b, body_io, [pointer(x, I8) for x in body_consts] + current + following)
        call_body(mb, b, self.body, table, _first(b, body_io), arena)
        parity.add_incoming(b.not_(parity), b.block)
        b.branch(head)
        b.position_at_end(done)
        for out, src in zip(self.outputs, current):
            mb.memcpy(b, pointer(out, I8), src, out.nbytes)


class ScanStep(ControlStep):
    def __init__(self, inputs, outputs, carry_avals, body, num_consts, num_carry, length,
                 reverse):
        super().__init__("scan", inputs, outputs, [body], carry_avals)
        self.body = body
        self.num_consts, self.num_carry = num_consts, num_carry
        self.length, self.reverse = length, reverse
        self.in_place = run_carries_in_place(body, num_consts, num_carry)

    def emit(self, mb, b: ir.IRBuilder, pointer, table):
        nc, nk = self.num_consts, self.num_carry
        consts, carry_in, xs = self.inputs[:nc], self.inputs[nc:nc + nk], self.inputs[nc + nk:]
        carry_out, ys = self.outputs[:nk], self.outputs[nk:]
        scratch = pointer(self.scratch, I8)
        first, _ = self.carry_pointers(b, scratch, ir.Constant(I1, 0))
        for dst, src in zip(first, carry_in):
            mb.memcpy(b, dst, pointer(src, I8), src.nbytes)
        arena = self.arena(b, scratch)
        io = mb.entry_alloca(b, ir.ArrayType(I8P, max(1, self.body.n_in + self.body.n_out)))
        const_ptrs = [pointer(x, I8) for x in consts]
        xs_ptrs = [(pointer(x, I8), x.nbytes // max(self.length, 1)) for x in xs]
        ys_ptrs = [(pointer(y, I8), y.nbytes // max(self.length, 1)) for y in ys]
        final = first
        if self.length > 0:
            fn = b.function
            pre = b.block
            head = fn.append_basic_block("scan.body")
            done = fn.append_basic_block("scan.done")
            b.branch(head)
            b.position_at_end(head)
            k = b.phi(I64)
            parity = b.phi(I1)
            k.add_incoming(ir.Constant(I64, 0), pre)
            parity.add_incoming(ir.Constant(I1, 0), pre)
            i = b.sub(ir.Constant(I64, self.length - 1), k) if self.reverse else k
            current, following = self.carry_pointers(b, scratch, parity)

            def sliced(ptrs):
                return [b.gep(p, [b.mul(i, ir.Constant(I64, size))], inbounds=True)
                        for p, size in ptrs]
            _fill(b, io, const_ptrs + current + sliced(xs_ptrs) + following + sliced(ys_ptrs))
            call_body(mb, b, self.body, table, _first(b, io), arena)
            k_next = b.add(k, ir.Constant(I64, 1))
            flipped = b.not_(parity)
            k.add_incoming(k_next, b.block)
            parity.add_incoming(flipped, b.block)
            go_on = b.icmp_signed("<", k_next, ir.Constant(I64, self.length))
            b.cbranch(b.and_(go_on, b.not_(mb.interrupted(b))), head, done)
            b.position_at_end(done)
            final, _ = self.carry_pointers(b, scratch, flipped)
        for out, src in zip(carry_out, final):
            mb.memcpy(b, pointer(out, I8), src, out.nbytes)


class CondStep(ControlStep):
    def __init__(self, inputs, outputs, branches):
        super().__init__("cond", inputs, outputs, branches, [])
        self.branches = branches

    def emit(self, mb, b: ir.IRBuilder, pointer, table):
        index_buf, operands = self.inputs[0], self.inputs[1:]
        index = b.load(pointer(index_buf, mem_type(index_buf.dtype)))
        if index.type.width < 64:
            index = (b.sext if index_buf.dtype.kind == "i" else b.zext)(index, I64)
        scratch = pointer(self.scratch, I8)
        arena = self.arena(b, scratch)
        n = self.branches[0].n_in + self.branches[0].n_out
        io = mb.entry_alloca(b, ir.ArrayType(I8P, max(1, n)))
        _fill(b, io, [pointer(x, I8) for x in operands] + [pointer(y, I8) for y in self.outputs])
        # the index is clamped into range, as the reference does
        last = ir.Constant(I64, len(self.branches) - 1)
        if index_buf.dtype.kind == "i":
            index = b.select(b.icmp_signed("<", index, ir.Constant(I64, 0)), ir.Constant(I64, 0),
                             index)
        index = b.select(b.icmp_unsigned(">", index, last), last, index)
        fn = b.function
        done = fn.append_basic_block("cond.done")
        blocks = [fn.append_basic_block(f"cond.branch{k}") for k in range(len(self.branches))]
        switch = b.switch(index, blocks[0])
        for k in range(1, len(blocks)):
            switch.add_case(ir.Constant(I64, k), blocks[k])
        for block, body in zip(blocks, self.branches):
            b.position_at_end(block)
            call_body(mb, b, body, table, _first(b, io), arena)
            b.branch(done)
        b.position_at_end(done)


# each control step emits its own loop or branch around calls of its bodies
for _step_type in (WhileStep, ScanStep, CondStep):
    emits(_step_type)(_step_type.emit)


def call_body(mb, b: ir.IRBuilder, body: Body, table, io, arena):
    """Call ``body``'s function, with the segment's SIGINT baseline when it polls."""
    fn = body_function(mb, body)
    start = mb.baseline(b) if fn.name in mb.baselines else ir.Constant(I64, 0)
    b.call(fn, [table, io, arena, start])


def body_function(mb, body: Body) -> ir.Function:
    """``void body(i8** table, i8** io, i8* arena, i64 baseline)``: a control-flow body,
    built once (``baseline``: see :meth:`ir_builder.ModuleIR.baseline`)."""
    fn = mb.bodies.get(id(body))
    if fn is not None:
        return fn
    mb.kernel_count += 1
    name = f"body{mb.kernel_count}"
    mb.names[name] = "a control-flow body"
    fn = ir.Function(mb.module, ir.FunctionType(ir.VoidType(), [I8P.as_pointer(),
                                                                I8P.as_pointer(), I8P, I64]),
                     name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    mb.bodies[id(body)] = fn
    table, io, arena, _ = fn.args
    prologue, b = mb.prologue_and_body(fn)
    mb.baseline_sources[name] = lambda: fn.args[3]
    program = body.program
    position = {}
    for k, buf in enumerate(program.inputs):
        position.setdefault(buf.id, k)
    for k, buf in enumerate(program.outputs):
        if buf.kind == "output":
            position.setdefault(buf.id, body.n_in + k)

    def io_pointer(k):
        return prologue.load(prologue.gep(io, [ir.Constant(I64, k)], inbounds=True))

    def external(buf):
        if buf.id in position:
            return io_pointer(position[buf.id])
        return mb.array_data(prologue, table, body.const_slots[buf.id])

    pointer = mb.pointer_resolver(prologue, external, arena, body.plan)
    mb.emit_steps(b, program.steps, pointer, table)
    # outputs no kernel wrote in place: inputs passed through, constants, repeats (a
    # carry updated in its input's buffer is already where the loop reads it)
    for k, buf in enumerate(program.outputs):
        if position.get(buf.id) != body.n_in + k and k not in body.in_place:
            mb.memcpy(b, io_pointer(body.n_in + k), pointer(buf, I8), buf.nbytes)
    b.ret_void()
    prologue.branch(fn.basic_blocks[1])
    return fn


def _fill(b, array, pointers):
    for k, p in enumerate(pointers):
        b.store(b.bitcast(p, I8P), b.gep(array, [ir.Constant(I32, 0), ir.Constant(I32, k)],
                                         inbounds=True))


def _first(b, array):
    return b.gep(array, [ir.Constant(I32, 0), ir.Constant(I32, 0)], inbounds=True)


# =============================================================================================
# Lowering
# =============================================================================================


def _operand_buffers(step: FallbackStep, program: Program):
    inputs = []
    for x in step.inputs:
        if isinstance(x, Buffer):
            if not x.is_array:
                return None
            inputs.append(x)
        else:  # a literal operand: a constant of the program
            value = np.asarray(x, order="C")
            c = program.new_buffer(value.shape, value.dtype, "const", value)
            program.consts.append(c)
            inputs.append(c)
    return inputs


def lower_control(step: FallbackStep, program: Program, target, in_body: bool = False):
    """A :class:`ControlStep` for a ``while``, ``scan`` or ``cond`` fallback step whose
    bodies compile natively, or None."""
    eqn = step.eqn
    if not all(isinstance(v.aval, ShapedArray) and target.dtype_supported(v.aval.dtype)
               for v in list(eqn.invars) + list(eqn.outvars)):
        return None
    primitive, p = eqn.primitive, eqn.params
    if primitive is control_prims.while_p:
        bodies = [compile_body(p["cond_jaxpr"], target), compile_body(p["body_jaxpr"], target)]
    elif primitive is control_prims.scan_p:
        bodies = [compile_body(p["jaxpr"], target)]
    else:
        bodies = [compile_body(branch, target) for branch in p["branches"]]
    if any(body is None for body in bodies):
        return None
    inputs = _operand_buffers(step, program)
    if inputs is None:
        return None
    outputs = list(step.outputs)
    avals = [v.aval for v in eqn.outvars]
    if primitive is control_prims.while_p:
        native = WhileStep(inputs, outputs, avals, *bodies, p["cond_nconsts"], p["body_nconsts"])
    elif primitive is control_prims.scan_p:
        native = ScanStep(inputs, outputs, avals[:p["num_carry"]], *bodies, p["num_consts"],
                          p["num_carry"], int(p["length"]), bool(p["reverse"]))
    else:
        native = CondStep(inputs, outputs, bodies)
    native.scratch = program.new_buffer((native.scratch_size,), np.uint8, "temp")
    return native


def nested_programs(program: Program):
    """Every body program inside ``program``'s control steps, depth first."""
    for step in program.steps:
        if isinstance(step, ControlStep):
            for body in step.bodies:
                yield body
                yield from nested_programs(body.program)
