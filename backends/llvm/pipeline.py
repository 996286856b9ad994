"""The compiler driver: the shared passes (decompose, inline, fuse, buffer plan; see
:func:`passes`), then LLVM IR → machine code → Executable.

    >>> import functrans, functrans.numpy as jnp, numpy as np
    >>> closed = functrans.make_jaxpr(lambda x: jnp.tanh(x) * 2)(jnp.ones(3))
    >>> exe = compile_jaxpr(closed)
    >>> exe(np.zeros(3, np.float32))
    [array([0., 0., 0.], dtype=float32)]
"""
from __future__ import annotations

import functools
import hashlib
import logging
import threading

import numpy as np

from functrans._config import config
from functrans.backends.compiler import (buffers, common_subexpressions, fusion, loop_merging,
                                         native_steps, scan_sums, verify)
from functrans.backends.compiler import passes as compiler_passes
from functrans.backends.compiler.indexing import gather_rule
from functrans.backends.compiler.passes import Pass, run_passes
from functrans.backends.llvm import (attention, cache, codegen, control_flow, donation,
                                     host_loops, interrupts, lowering, parallel_compile,
                                     program_cache, row_fusion, scalar_ops, targets, thread_pool)
from functrans.backends.llvm.codegen import Segment
from functrans.backends.compiler.decompose import decompose_closed
from functrans.backends.llvm.runtime import Executable
from functrans.core import ClosedJaxpr

logger = logging.getLogger("functrans")

_compile_lock = threading.RLock()

# How compilations were served in this process (read by tests and benchmarks).
stats = program_cache.stats


class LLVMTarget(fusion.ScalarTableTarget):
    """What the generated code supports: the fusion pass sends everything else to NumPy."""

    scalar_ops = scalar_ops
    native_steps = lowering.STEPS

    def dot_supported(self, lhs_dtype, rhs_dtype, out_dtype) -> bool:
        dtypes = {np.dtype(lhs_dtype), np.dtype(rhs_dtype), np.dtype(out_dtype)}
        if len(dtypes) != 1:
            return False
        d = dtypes.pop()
        return d.kind in "fiu" and d in scalar_ops.SUPPORTED_DTYPES

    def movement_rule(self, eqn):
        return gather_rule(eqn)


TARGET = LLVMTarget()


def _assign_slots(program: fusion.Program) -> tuple[dict, list]:
    """Pointer-table slots (from 1; slot 0 is the arena) for every buffer not in the arena,
    then for the constants of control-flow bodies (whose buffer ids are their own: each
    body records its slots in ``const_slots``). Returns the slots of ``program``'s buffers
    and the (slot, array) pairs of the bodies' constants."""
    slots: dict = {}
    for b in program.buffers:
        if b.kind != "temp":
            slots[b.id] = len(slots) + 1
    nested = []
    next_slot = len(slots) + 1
    for body in control_flow.nested_programs(program):
        body.const_slots = {}
        for b in body.program.consts:
            body.const_slots[b.id] = next_slot
            nested.append((next_slot, np.asarray(b.value, dtype=b.dtype, order="C")))
            next_slot += 1
    return slots, nested


def _plan_digest(program, plan, slots) -> str:
    text = program.describe() + repr(sorted(plan.offsets.items())) + repr(plan.arena_size) \
        + repr(sorted(slots.items())) + repr([sorted(body.const_slots.items()) for body in
                                              control_flow.nested_programs(program)])
    return hashlib.sha256(text.encode()).hexdigest()


class NativePlan:
    """A program planned for code generation: the fused steps, the buffer plan, the
    pointer-table slots, the constants of control-flow bodies and the schedule."""

    def __init__(self, closed, program, plan, slots, nested_consts, schedule, fuse=True):
        self.closed = closed  # as compiled, before any pass
        self.fuse = fuse
        self.program, self.plan, self.slots = program, plan, slots
        self.nested_consts, self.schedule = nested_consts, schedule

    def describe(self) -> str:
        segments = [getattr(s, "name", type(s).__name__) for s in self.schedule]
        return (f"{self.program.describe()}\narena {self.plan.arena_size} bytes, offsets "
                f"{sorted(self.plan.offsets.items())}\nslots {sorted(self.slots.items())}\n"
                f"schedule {segments}")


def _fuse(fuse: bool):
    def run(closed: ClosedJaxpr) -> fusion.Program:
        program = fusion.plan_program(closed.jaxpr, TARGET, closed.consts, fuse=fuse)
        if fuse and compiler_passes.enabled("merged_loops"):
            # before the loop dimensions are collapsed, while loops over one array agree
            program = loop_merging.merge_loops(program)
        return fusion.normalize(program)
    return run


def _run_loops_on_host(program: fusion.Program) -> fusion.Program:
    """Control flow left to NumPy because of its bodies runs its loop in Python around
    bodies compiled on their own (:mod:`host_loops`)."""
    for step in program.steps:
        if isinstance(step, fusion.FallbackStep) and \
                step.eqn.primitive in host_loops.DRIVERS:
            step.driver = host_loops.driver_for(step.eqn, compile_jaxpr)
    return program


def _plan(closed: ClosedJaxpr, fuse: bool):
    def run(program: fusion.Program) -> NativePlan:
        plan = buffers.plan_buffers(program)
        if config.verify_plans:
            verify.verify_plan(program, plan)
        slots, nested_consts = _assign_slots(program)
        return NativePlan(closed, program, plan, slots, nested_consts,
                          codegen.split_segments(program), fuse)
    return run


def _flat_and_merged(closed: ClosedJaxpr | None):
    """The inlining pass, followed by merging common subexpressions (part of the same pass:
    the passes' names and order are what ``disable_passes`` and the dumps refer to; the
    merge is the inner switch ``common_subexpressions``)."""
    if common_subexpressions.has_remat(closed):
        return fusion.flat_closed

    def run(program):
        flat = fusion.flat_closed(program)
        if not compiler_passes.enabled("common_subexpressions"):
            return flat
        return common_subexpressions.merge_closed(flat)

    return run


def passes(closed: ClosedJaxpr, fuse: bool = True) -> list[Pass]:
    """The llvm compiler before code generation, as named passes (see
    :mod:`functrans.backends.compiler.passes` for dumping them, and for disabling the
    optional ones by name)."""
    return [
        # convolutions in the forms the direct kernels run (see convolution.py)
        Pass("decompose", functools.partial(decompose_closed, direct_convolutions=True)),
        # the planner takes a flat program in SSA form, with equal equations computed once
        # (a program with checkpoints keeps its recomputation)
        Pass("inline", _flat_and_merged(closed), required=True),
        Pass("hoist_scan_sums", scan_sums.hoist_closed),
        # disabled, every elementwise op is a loop of its own
        Pass("fuse", _fuse(fuse), off=_fuse(False)),
        *([Pass("fuse_dot_epilogues", fusion.fuse_dot_epilogues),
           Pass("fuse_rows", row_fusion.fuse_rows),
           # the products around a row group block by block (see attention.py)
           Pass("block_attention", attention.block_attention)] if fuse else []),
        native_steps.lowering_pass(TARGET),
        Pass("run_loops_on_host", _run_loops_on_host),
        Pass("plan_buffers", _plan(closed, fuse), required=True),
    ]


def optional_passes() -> list:
    """The names that the config option ``disable_passes`` may list for this backend."""
    return compiler_passes.optional_names(passes(None))


def plan_native(closed: ClosedJaxpr, fuse: bool = True) -> NativePlan:
    """Every step of compilation before LLVM (:func:`passes`). The caller holds
    ``_compile_lock``."""
    return run_passes("llvm", passes(closed, fuse), closed)


def compile_jaxpr(closed: ClosedJaxpr, devices=None, *, use_cache: bool = True,
                  fuse: bool = True, target_cpu: str | None = None) -> Executable:
    """Compile ``closed`` for ``target_cpu`` (see :mod:`targets`; default: the CPU of the
    compilation this one is nested in, else ``config.llvm_cpu``), to run on this machine:
    from the on-disk cache when an earlier compile stored it (see :mod:`program_cache`)."""
    target = targets.resolve(target_cpu)
    targets.check_runs_here(target)
    with _compile_lock, targets.compiling_for(target):
        key = program_cache.program_key(closed, fuse) if use_cache else None
        entry = cache.load(key) if key else None
        # cores free for the support objects and the program's parts, read once: this
        # compile's own threads would count as load later
        spare = thread_pool.free_cores() if entry is None else None
        if spare and _runs_on_the_pool(closed):
            _prepare_support_objects()
        if entry is not None:
            executable = program_cache.cached_executable(
                closed, key, entry, functools.partial(plan_for_inspection, closed, fuse, target))
            if executable is not None:
                return executable
            if "layout" in entry[1] and not program_cache.compiler_replaced():
                entry = None  # its layout did not fit: deleted, compiled again
        return build_executable(plan_native(closed, fuse), key is not None, key, entry,
                                spare)


def _runs_on_the_pool(closed: ClosedJaxpr) -> bool:
    """Whether ``closed`` is likely to run loops on the thread pool: it makes an array as
    large as a loop split for the pool (see :func:`kernels.parallel_chunks`)."""
    return any(getattr(v.aval, "size", 0) >= codegen.POOLED_MIN_ELEMENTS
               for eqn in closed.jaxpr.eqns for v in eqn.outvars)


_support_objects_prepared = threading.Event()


def _prepare_support_objects() -> None:
    """Start making the runtime's support objects (the SIGINT handler, the thread pool) on
    a thread of their own, once per process, for a program that will need them, when a
    core is free: on a cold cache LLVM emits them while this thread plans the program and
    builds its IR; loading them later waits for that (see
    :func:`machine_code.support_object`)."""
    if not _support_objects_prepared.is_set():
        _support_objects_prepared.set()
        pool_text = threading.Event()
        threading.Thread(target=_make_support_objects, args=(pool_text,), daemon=True,
                         name="functrans-support-objects").start()
        # The pool's IR is built in Python (6-7 ms), which would take turns for the GIL
        # with this thread's planning, and LLVM would then emit it while the program's
        # parts take both cores. Waiting for the text lets LLVM emit it beside the planning.
        pool_text.wait(_POOL_TEXT_WAIT_S)


# a bound on that wait, should the thread not get its core
_POOL_TEXT_WAIT_S = 0.05


def _make_support_objects(pool_text: threading.Event) -> None:
    try:
        thread_pool.pool_object(built=pool_text.set)
        interrupts.handler_object()
    except Exception as err:  # noqa: BLE001 (made again, and raised, where a program loads it)
        logger.debug("functrans: preparing the support objects failed: %s", err)
    finally:
        pool_text.set()


def plan_for_inspection(closed: ClosedJaxpr, fuse: bool, target) -> NativePlan:
    """:func:`plan_native` of a program read from the disk cache, planned again when it is
    inspected (its executable was built from the layout stored with its code)."""
    with _compile_lock, targets.compiling_for(target):
        return plan_native(closed, fuse)


def build_executable(native: NativePlan, use_cache: bool = True, key=None,
                     entry=None, spare: int | None = None) -> Executable:
    """The executable of a planned program: LLVM code generation (or the disk cache), then
    linking. ``key`` and ``entry``: the program's cache key and the entry read under it, if
    the caller has them; ``spare``: the cores free for compiling the program in parts, read
    as the compile started (see :func:`thread_pool.free_cores`; default: the load
    average's, :func:`thread_pool.spare_cores`). The caller holds ``_compile_lock`` and is
    inside ``targets.compiling_for``."""
    closed, program, plan, slots = native.closed, native.program, native.plan, native.slots
    nested_consts, schedule = native.nested_consts, native.schedule
    segments = [s for s in schedule if isinstance(s, Segment)]
    description = program.describe()
    if not segments:
        return Executable(program, plan, schedule, slots, {}, description=description)
    digest = _plan_digest(program, plan, slots)
    if use_cache and key is None:
        key = program_cache.program_key(closed, native.fuse)
        entry = cache.load(key)
    if entry is not None and entry[1].get("plan") != digest:
        entry = None  # planned otherwise when it was stored: its code is not for this plan
    if entry is not None:
        program_cache.stats["cache_hits"] += 1
        sections, _ = entry
        objects, ir_text = program_cache.entry_objects(sections), sections["ir"].decode()
        optimized = sections["optimized_ir"].decode()
    else:
        program_cache.stats["compiled"] += 1
        builder = codegen.ModuleBuilder(program, plan, slots, schedule)
        ir_text = builder.build()
        objects, optimized = parallel_compile.optimize_and_emit(ir_text, builder.names,
                                                                spare=spare)
    try:
        engine, entry_points = program_cache.load_object(objects, [s.name for s in segments])
    except KeyError as err:
        raise codegen.LLVMCompileError(f"llvm backend: {err}") from None
    aliases = donation.alias_candidates(program) if compiler_passes.enabled("donation") \
        else {}
    executable = Executable(program, plan, schedule, slots, entry_points, ir_text, optimized,
                            engine, description, nested_consts, aliases)
    executable.object_size = sum(map(len, objects))  # reported by memory_analysis
    if key and entry is None:
        meta = {"plan": digest}
        layout = None if program_cache.compiler_replaced() else \
            program_cache.layout_to_json(executable.layout, closed)
        if layout is not None:
            meta["layout"] = layout
        cache.store(key, {**program_cache.object_sections(objects), "ir": ir_text.encode(),
                          "optimized_ir": optimized.encode()}, meta)
    return executable
