"""The compiler's defences against silent miscompiles: passes that can be left out by name
(to bisect a wrong result), the buffer-plan verifier, and poisoned scratch memory."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llvmlite")

import functrans  # noqa: E402
import functrans.numpy as jnp  # noqa: E402
from functrans import lax, nn  # noqa: E402
from functrans.backends.compiler import fusion, verify  # noqa: E402
from functrans.backends.llvm import pipeline  # noqa: E402

rng = np.random.default_rng(0)


def _program(w, x, xs):
    """Something for every pass: a convolution, products read by one sum, a softmax over
    rows, a scan accumulating products, reductions of one buffer."""
    conv = lax.conv_general_dilated(x[None, None], w[None, None, :3, :3], (1, 1), "SAME")[0, 0]
    h = conv.T @ x + conv @ x
    p = nn.softmax(h * 0.1, axis=-1)

    def step(acc, xt):
        g = jnp.tanh(xt @ w)
        return acc - 0.5 * (xt.T @ g), g.sum()

    acc, sums = lax.scan(step, jnp.zeros_like(w), xs)
    return p, acc, sums, jnp.sum(h, axis=0) * jnp.max(h, axis=0)


ARGS = (rng.standard_normal((6, 6)).astype(np.float32),
        rng.standard_normal((6, 6)).astype(np.float32),
        rng.standard_normal((5, 4, 6)).astype(np.float32))


@pytest.mark.parametrize("name", pipeline.optional_passes())
def test_each_optional_pass_can_be_disabled_by_name(name):
    expected = functrans.jit(_program, backend="reference")(*ARGS)
    functrans.config.update("disable_passes", name)
    got = functrans.jit(_program)(*ARGS)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=2e-5, atol=2e-5)


def test_a_disabled_pass_does_not_run():
    functrans.config.update("disable_passes", "fuse_dot_epilogues, carries_in_place")
    closed = functrans.make_jaxpr(_program)(*ARGS)
    native = pipeline.plan_native(closed)
    assert not any(isinstance(s, fusion.DotKernel) and s.accumulate
                   for s in native.program.steps)
    functrans.config.update("disable_passes", "")
    native = pipeline.plan_native(closed)
    assert any(isinstance(s, fusion.DotKernel) and s.accumulate for s in native.program.steps)


def test_disabled_passes_are_part_of_the_cache_key():
    f = lambda a, b: a.T @ b + a @ b  # noqa: E731
    compiled = pipeline.stats["compiled"]
    functrans.jit(f)(*ARGS[:2])
    functrans.config.update("disable_passes", "fuse_dot_epilogues")
    functrans.jit(f)(*ARGS[:2])
    assert pipeline.stats["compiled"] == compiled + 2


@pytest.mark.parametrize("names, message", [
    ("no_such_pass", "has no pass 'no_such_pass'"),
    ("inline", "cannot be disabled"),
    ("plan_buffers", "cannot be disabled"),
])
def test_passes_that_cannot_be_disabled_are_refused(names, message):
    functrans.config.update("disable_passes", names)
    with pytest.raises(ValueError, match=message):
        functrans.jit(lambda x: x + 1.0)(np.ones(3, np.float32))


# ---- the plan verifier ------------------------------------------------------------------------


def _native(fun, *args):
    return pipeline.plan_native(functrans.make_jaxpr(fun)(*args))


def test_the_verifier_accepts_what_the_compiler_plans():
    native = _native(_program, *ARGS)
    verify.verify_plan(native.program, native.plan)


def test_the_verifier_finds_a_read_of_a_buffer_no_step_writes():
    # the miscompile of a.T @ b + a @ b: a product dropped from the schedule
    a, b = ARGS[:2]
    native = _native(lambda a, b: jnp.tanh(a @ b) + a @ b.T, a, b)
    program = native.program
    dot = next(s for s in program.steps if isinstance(s, fusion.DotKernel))
    program.steps.remove(dot)
    with pytest.raises(verify.PlanError, match="which no earlier step writes"):
        verify.verify_plan(program, native.plan)


def test_the_verifier_finds_two_live_buffers_in_one_block():
    native = _native(lambda x: jnp.sum(jnp.tanh(x @ x) * jnp.exp(x @ x.T), axis=0), ARGS[0])
    temps = sorted(native.plan.offsets)
    assert len(temps) >= 2
    native.plan.offsets[temps[1]] = native.plan.offsets[temps[0]]
    with pytest.raises(verify.PlanError, match="still in use"):
        verify.verify_plan(native.program, native.plan)


def test_the_verifier_finds_a_write_to_an_input():
    native = _native(lambda x: jnp.tanh(x) * 2.0, ARGS[0])
    loop = native.program.steps[0]
    _, offset, value = loop.outputs[0]
    loop.outputs[0] = (native.program.inputs[0], offset, value)
    with pytest.raises(verify.PlanError, match="a program input"):
        verify.verify_plan(native.program, native.plan)


def test_the_verifier_checks_loop_bodies():
    native = _native(_program, *ARGS)
    scan = next(s for s in native.program.steps if getattr(s, "bodies", None))
    body = scan.bodies[0]
    body.program.steps.pop(0)
    with pytest.raises(verify.PlanError, match="body 0 of scan"):
        verify.verify_plan(native.program, native.plan)


def test_a_buffer_without_a_place_never_reaches_native_code():
    a, b = ARGS[:2]
    native = _native(lambda a, b: jnp.tanh(a @ b) + 1.0, a, b)
    dot = next(s for s in native.program.steps if isinstance(s, fusion.DotKernel))
    native.program.steps.remove(dot)
    del native.plan.offsets[dot.out.id]
    native.schedule = pipeline.codegen.split_segments(native.program)
    with pytest.raises(pipeline.codegen.LLVMCompileError, match="no place in the scratch arena"):
        pipeline.build_executable(native, use_cache=False)


# ---- poisoned scratch -------------------------------------------------------------------------


def _dropped_product_executable():
    """``tanh(a @ b) + 1`` with its product dropped but its block kept: the loop reads
    memory no step of the call writes."""
    a, b = ARGS[:2]
    native = _native(lambda a, b: jnp.tanh(a @ b) + 1.0, a, b)
    dot = next(s for s in native.program.steps if isinstance(s, fusion.DotKernel))
    native.program.steps.remove(dot)
    native.schedule = pipeline.codegen.split_segments(native.program)
    return pipeline.build_executable(native, use_cache=False)


def test_poisoned_scratch_turns_an_unwritten_read_into_nan():
    a, b = ARGS[:2]
    functrans.config.update("poison_scratch", True)
    exe = _dropped_product_executable()
    out, = exe(a, b)
    assert np.isnan(out).all()


def test_without_poison_an_unwritten_read_returns_whatever_was_there():
    # why the suite poisons: the arena still holds the last call's values, which may well
    # be right
    a, b = ARGS[:2]
    functrans.config.update("poison_scratch", False)
    exe = _dropped_product_executable()
    exe._thread_buffers()[1][:] = 0
    out, = exe(a, b)
    np.testing.assert_array_equal(out, np.ones_like(out))


def test_poisoned_outputs_and_integer_markers():
    from functrans.backends.llvm import runtime
    x = np.empty((3, 2), np.float32)
    runtime.poison(x)
    assert np.isnan(x).all()
    k = np.empty(5, np.int32)
    runtime.poison(k)
    assert (k == np.int32(np.uint32(0xA5A5A5A5).view(np.int32))).all()
    d = np.empty((), np.float64)
    runtime.poison(d)
    assert np.isnan(d)


def test_poisoned_programs_compute_the_same_results():
    functrans.config.update("poison_scratch", True)
    expected = functrans.jit(_program, backend="reference")(*ARGS)
    f = functrans.jit(_program)
    for _ in range(2):  # the second call finds the arena poisoned again
        for g, e in zip(f(*ARGS), expected):
            np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=2e-5, atol=2e-5)


def test_the_short_call_path_is_poisoned_too():
    # most programs are one native segment, called by the short path: poisoning must not
    # take them off it (the suite would stop testing it) nor skip them
    from functrans.backends.llvm import runtime
    functrans.config.update("poison_scratch", True)
    exe = _dropped_product_executable()
    assert type(exe) is runtime._PoisonedSingleSegmentExecutable
    functrans.config.update("poison_scratch", False)
    assert type(_dropped_product_executable()) is runtime._SingleSegmentExecutable
