"""``checkpoint(prevent_cse=True)``: the backward pass's recomputation reads its inputs through
an ``optimization_barrier``, so the compiler's common-subexpression elimination never merges
it with the forward pass (which would keep the forward values alive until the backward
pass), however close the two are; the barrier itself costs no step and no copy."""
from __future__ import annotations

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import lax
from functrans.backends.compiler import fusion
from functrans.backends.compiler.common_subexpressions import MAX_EXTENSION, merge_closed

pytest.importorskip("llvmlite")

from functrans.backends.llvm import pipeline  # noqa: E402

LINKS = 6
X = np.linspace(-0.5, 1.5, 64, dtype=np.float32)


def _chain(x):
    for _ in range(LINKS):
        x = jnp.sin(x) * 1.5
    return x


def _step(prevent_cse):
    """The loss and its gradient, the whole chain checkpointed: the recomputation starts a
    few equations after the forward pass ends."""
    return functrans.value_and_grad(
        lambda x: functrans.checkpoint(_chain, prevent_cse=prevent_cse)(x).sum())


def _inlined(closed):
    inline = next(p for p in pipeline.passes(closed) if p.name == "inline")
    return [e.primitive.name for e in inline.run(closed).jaxpr.eqns]


def test_the_recomputation_is_close_enough_to_be_merged():
    """Without the barrier the recomputed values are within the merge window of their
    originals: the window alone would not keep them apart."""
    names = [e.primitive.name for e in
             fusion.flat_closed(functrans.make_jaxpr(_step(False))(X)).jaxpr.eqns]
    sines = [at for at, name in enumerate(names) if name == "sin"]
    forward, again = sines[:LINKS], sines[LINKS:]
    assert len(again) == LINKS - 1
    assert max(b - a for a, b in zip(forward, again)) <= MAX_EXTENSION


def test_the_recomputation_is_not_merged_with_the_forward_pass():
    # the forward pass's LINKS sines, and all but the last again in the backward pass
    assert _inlined(functrans.make_jaxpr(_step(True))(X)).count("sin") == 2 * LINKS - 1
    # prevent_cse=False: the compiler may read the forward pass's values instead
    assert _inlined(functrans.make_jaxpr(_step(False))(X)).count("sin") == LINKS


def test_merge_never_crosses_a_barrier_whatever_the_distance():
    def f(x):
        y, = lax.optimization_barrier((x,))
        return jnp.sin(x) * 2 + jnp.sin(y)
    merged = merge_closed(fusion.flat_closed(functrans.make_jaxpr(f)(X)))
    assert [e.primitive.name for e in merged.jaxpr.eqns].count("sin") == 2

    def twice(x):  # two barriers of one value stay two values
        a, = lax.optimization_barrier((x,))
        b, = lax.optimization_barrier((x,))
        return jnp.sin(a) + jnp.sin(b)
    merged = merge_closed(fusion.flat_closed(functrans.make_jaxpr(twice)(X)))
    assert [e.primitive.name for e in merged.jaxpr.eqns].count("sin") == 2


def test_forward_values_are_not_kept_for_the_backward_pass():
    """The plan shows the memory the barrier saves: with it, every forward value is fused
    away and nothing waits in scratch for the backward pass; merged, the forward pass's
    values are written to scratch and kept until the backward pass reads them."""
    kept = pipeline.plan_native(functrans.make_jaxpr(_step(True))(X))
    merged = pipeline.plan_native(functrans.make_jaxpr(_step(False))(X))
    assert kept.plan.arena_size < merged.plan.arena_size
    assert kept.plan.arena_size == 0


@pytest.mark.parametrize("prevent_cse", [True, False, (True,), (False,)])
def test_the_numbers_are_the_plain_gradient(prevent_cse):
    value, grad = functrans.jit(_step(prevent_cse))(X)
    want_value, want_grad = functrans.value_and_grad(lambda x: _chain(x).sum())(X)
    np.testing.assert_allclose(np.asarray(value), np.asarray(want_value), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(want_grad), rtol=1e-5, atol=1e-6)


def test_the_barrier_is_in_the_gradient_program_and_under_transforms():
    closed = functrans.make_jaxpr(_step(True))(X)
    assert "optimization_barrier" in [e.primitive.name for e in closed.jaxpr.eqns]
    closed = functrans.make_jaxpr(_step(False))(X)
    assert "optimization_barrier" not in [e.primitive.name for e in closed.jaxpr.eqns]
    # per-example gradients and forward-over-reverse keep the same numbers
    batch = np.stack([X, X[::-1]])
    per_example = functrans.jit(functrans.vmap(functrans.grad(
        lambda x: functrans.checkpoint(_chain)(x).sum())))(batch)
    want = functrans.vmap(functrans.grad(lambda x: _chain(x).sum()))(batch)
    np.testing.assert_allclose(np.asarray(per_example), np.asarray(want), rtol=1e-5, atol=1e-6)
    hvp = functrans.jit(lambda x, v: functrans.jvp(functrans.grad(
        lambda y: functrans.checkpoint(_chain)(y).sum()), (x,), (v,))[1])(X, X)
    want = functrans.jvp(functrans.grad(lambda y: _chain(y).sum()), (X,), (X,))[1]
    np.testing.assert_allclose(np.asarray(hvp), np.asarray(want), rtol=1e-4, atol=1e-5)


def test_the_barrier_costs_no_step_and_no_copy():
    """A barrier's results are its operands' buffers: no NumPy step, no kernel, no scratch."""
    def f(v):
        a, b = lax.optimization_barrier((jnp.sin(v), v * 2.0))
        return a * b, b
    plan = pipeline.plan_native(functrans.make_jaxpr(f)(X))
    assert not any(isinstance(s, fusion.FallbackStep) for s in plan.program.steps)
    assert len(plan.program.steps) == 2 and plan.plan.arena_size == 0
    kept = pipeline.plan_native(functrans.make_jaxpr(_step(True))(X))
    assert not any(isinstance(s, fusion.FallbackStep) for s in kept.program.steps)
    out = functrans.jit(f)(X)
    np.testing.assert_allclose(np.asarray(out[0]), np.sin(X) * X * 2, rtol=1e-6)


def test_the_cuda_planner_runs_the_barrier_as_the_identity():
    from functrans.backends.cuda import runtime
    for fn in (_step(True), lambda v: lax.optimization_barrier((jnp.sin(v), v * 2.0))):
        exe = runtime.compile_jaxpr(functrans.make_jaxpr(fn)(X))
        assert not any(isinstance(s, fusion.FallbackStep) for s in exe.program.steps)
