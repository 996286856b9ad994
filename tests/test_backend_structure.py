"""How the compiled backends are put together: no import cycle among their modules (imports
in function bodies included), one ``lower_native_steps`` pass shared by both, and step
emitters found by the step's class."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import lax
from functrans.backends.compiler import native_steps
from functrans.backends.cuda import codegen as cuda_codegen
from functrans.backends.cuda import runtime as cuda_runtime
from module_graph import Graph, cycles


def test_no_import_cycle_inside_the_backends_even_through_function_bodies():
    graph = Graph(pathlib.Path(__file__).resolve().parents[1]).edges
    backends = {m: {i for i in imported if i.startswith("functrans.backends")}
                for m, imported in graph.items() if m.startswith("functrans.backends")}
    assert cycles(backends) == []


def _program_with_native_steps(x):
    def body(carry, row):
        return carry + jnp.cumsum(row), carry.sum()
    carry, ys = lax.scan(body, jnp.zeros(x.shape[1]), x)
    return carry, ys, x.at[0].add(1.0)


def test_both_backends_lower_native_steps_with_the_shared_pass():
    x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    closed = functrans.make_jaxpr(_program_with_native_steps)(x)
    llvm = pytest.importorskip("functrans.backends.llvm.pipeline")
    for backend_passes in (llvm.passes(closed), cuda_runtime.passes()):
        lowering = [p for p in backend_passes if p.name == native_steps.NAME]
        assert len(lowering) == 1 and not lowering[0].required
    assert native_steps.NAME in cuda_runtime.optional_passes()
    assert native_steps.NAME in llvm.optional_passes()
    # the cuda program: the scan and the scatter are native steps, none left to NumPy
    program = cuda_codegen.plan(closed.jaxpr, closed.consts)
    kinds = {type(step).__name__ for step in program.steps}
    assert "FallbackStep" not in kinds and "ControlStep" in kinds and "ScatterStep" in kinds


def test_disabling_the_shared_pass_by_name_leaves_the_steps_to_numpy():
    llvm = pytest.importorskip("functrans.backends.llvm.pipeline")
    from functrans.backends.compiler.fusion import FallbackStep
    x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    closed = functrans.make_jaxpr(_program_with_native_steps)(x)
    try:
        functrans.config.update("disable_passes", native_steps.NAME)
        left = llvm.plan_native(closed).program.steps
    finally:
        functrans.config.update("disable_passes", "")
    assert sum(isinstance(s, FallbackStep) for s in left) == 2  # the scan and the scatter
    assert not any(isinstance(s, FallbackStep) for s in llvm.plan_native(closed).program.steps)


def test_llvm_steps_are_emitted_by_the_emitter_their_class_registered():
    ir_builder = pytest.importorskip("functrans.backends.llvm.ir_builder")
    from functrans.backends.compiler.fusion import DotKernel, LoopKernel, ReduceKernel
    from functrans.backends.llvm import codegen  # noqa: F401 (registers every emitter)
    from functrans.backends.llvm.control_flow import CondStep, ScanStep, WhileStep
    from functrans.backends.llvm.row_fusion import RowGroup
    from functrans.backends.llvm.sorting import SortStep
    for step_type in (LoopKernel, ReduceKernel, RowGroup, DotKernel, WhileStep, ScanStep,
                      CondStep, SortStep):
        assert step_type in ir_builder.STEP_EMITTERS, step_type
