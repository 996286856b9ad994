"""Code generation: a fused :class:`~fusion.Program` becomes one LLVM module.

Layout of the module:

* one ``internal`` function per kernel, named after the primitives it fuses
  (``k3_exp_mul_add``), whose buffer arguments are ``noalias`` pointers: the buffer plan
  guarantees a kernel never writes memory it reads through another argument, and telling
  LLVM so lets it vectorize without runtime overlap checks;
* one exported *segment* function ``i32 ft_segment_<i>(i8** table)`` per run of native
  steps between NumPy fallbacks (usually exactly one). ``table[0]`` is the scratch arena;
  ``table[slot]`` is the NumPy array object (its address) of each input, constant, output
  or fallback-produced array; the segment reads the arrays' data pointers itself. It
  returns 0, or a status for the runtime if its code polls for SIGINT (see
  :mod:`interrupts`);
* a kernel's function takes the bounds of its outermost loop; a large kernel is called
  through ``ft_parallel_for`` (see :mod:`thread_pool`) with a small ``_chunk`` wrapper that
  runs one chunk of rows (see :mod:`kernels`);
* one internal function per control-flow body (see :mod:`control_flow`), called from the
  loops and branches the control steps emit.

This module builds the segments; each step's code comes from the emitter its kind
registered (see :mod:`ir_builder`): loop kernels (:mod:`kernels`), matrix products
(:mod:`matrix_products`), and the native steps of the lowering table (:mod:`lowering`).
LLVM itself (setup, optimization, machine code) is :mod:`machine_code`.

    >>> module = ModuleBuilder(program, plan, slots).build()   # doctest: +SKIP
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from functrans.backends.compiler import exprs as E
from functrans.backends.compiler.buffers import BufferPlan
from functrans.backends.compiler.fusion import (DotKernel, FallbackStep, LoopKernel, Program,
                                                ReduceKernel)
from functrans.backends.llvm import float_mode, machine_code, thread_pool
# the modules of the lowering table's native steps register their emitters on import, as
# does that of blocked attention
from functrans.backends.llvm import attention_code, lowering  # noqa: F401
from functrans.backends.llvm.attention import AttentionStep
from functrans.backends.llvm.ir_builder import I8P, I32, ModuleIR, calls_only_function
from functrans.backends.llvm.row_fusion import RowGroup
from functrans.backends.llvm.libm import register_libm_symbols
# what the rest of the backend, its tools and its tests find here
from functrans.backends.llvm.blas import (  # noqa: F401
    BLAS_ROUTINES, GEMM_FOR_SYMBOL, GEMM_JOINED_FOR_SYMBOL, GEMM_RANGE_FOR_SYMBOL,
    LAPACK_ROUTINES, _openblas_library,
    _scipy_openblas, blas_threads, needs_blas, register_blas_symbols, register_gemm_symbols,
    splits_gemms)
from functrans.backends.llvm.ir_builder import array_data_offset  # noqa: F401
from functrans.backends.llvm.kernels import (  # noqa: F401
    CHUNK_ELEMENTS, PARALLEL_MIN_ELEMENTS, POOLED_MIN_ELEMENTS, parallel_chunks)
from functrans.backends.llvm.machine_code import (  # noqa: F401
    LLVMCompileError, _llvm_lock, create_target_machine, optimize_and_emit, support_object,
    target_machine)
from functrans.backends.llvm.matrix_products import (  # noqa: F401
    GEMM_FINE_SPLIT_FLOPS, gemm_split, matrix_vector, splits_products)
from functrans.backends.llvm.program_cache import target_description  # noqa: F401


def initialize() -> None:
    """Set LLVM up (once per process) and make libm's functions resolvable by the JIT
    linker."""
    machine_code.initialize()
    register_libm_symbols()


class Segment:
    """A run of native steps compiled into one exported function."""

    def __init__(self, index: int, steps: list):
        self.index = index
        self.steps = steps
        self.name = f"ft_segment_{index}"


def split_segments(program: Program) -> list:
    """Steps grouped into native segments and fallback steps, in order."""
    out, current = [], []
    for step in program.steps:
        if isinstance(step, FallbackStep):
            if current:
                out.append(Segment(len([s for s in out if isinstance(s, Segment)]), current))
                current = []
            out.append(step)
        else:
            current.append(step)
    if current:
        out.append(Segment(len([s for s in out if isinstance(s, Segment)]), current))
    return out


class ModuleBuilder(ModuleIR):
    """Builds the LLVM module of a program: its segment entry points, and through them the
    functions of kernels, products and bodies."""

    def __init__(self, program: Program, plan: BufferPlan, slots: dict, schedule: list):
        initialize()
        super().__init__()
        self.program = program
        self.plan = plan
        self.slots = slots  # buffer id -> index in the pointer table
        self.schedule = schedule
        self.pool_in_use = thread_pool.compiled_threads() > 1 and splits_products(program)
        # subnormals flushed to zero while its segments run (see float_mode.py)
        self.flush = float_mode.flushes()

    def build(self) -> str:
        with E.lock:
            for item in self.schedule:
                if isinstance(item, Segment):
                    self.build_segment(item)
        text = self.with_function_attributes(str(self.module))
        return float_mode.mark_functions(text) if self.flush else text

    def build_segment(self, segment: Segment):
        # with subnormals flushed, the exported name is a small entry around this function
        # that sets the floating-point mode (see float_mode.py)
        flush = self.flush
        name = f"{segment.name}_code" if flush else segment.name
        fn = ir.Function(self.module, ir.FunctionType(I32, [I8P.as_pointer()]), name=name)
        fn.attributes.add("nounwind")
        if all(calls_only(step) for step in segment.steps):
            # straight-line calls of kernels and BLAS, as long as the program: optimizing
            # them gains nothing, and took most of LLVM's time for large programs
            calls_only_function(fn)
        prologue, b = self.prologue_and_body(fn)
        self.baseline_sources[fn.name] = lambda: self.epoch(prologue)
        table = fn.args[0]
        arena = self.array_data(prologue, table, 0)
        arena.name = "arena"
        pointer = self.pointer_resolver(
            prologue, lambda buf: self.array_data(prologue, table, self.slots[buf.id]), arena,
            self.plan)
        self.emit_steps(b, segment.steps, pointer, table)
        b.ret(self.interrupt_status(b))
        start = b.function.basic_blocks[1]
        if fn.name in self.baselines:
            self.check_handler_when_due(prologue, start)
        else:
            prologue.branch(start)
        self.names[name] = "a program segment"
        if flush:
            float_mode.flushing_entry(self.module, segment.name, fn)
            self.names[segment.name] = "a program segment's entry"


def calls_only(step) -> bool:
    """Whether ``step``'s code in a segment is only a call: a kernel (run by
    :func:`kernels.call_kernel`) or a floating-point product (BLAS)."""
    if isinstance(step, DotKernel):
        return step.k > 0 and step.out.dtype in (np.float32, np.float64)
    return isinstance(step, (LoopKernel, ReduceKernel, RowGroup, AttentionStep))
