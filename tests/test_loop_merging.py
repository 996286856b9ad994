"""Full-size values kept out of memory: a broadcast read by several kernels is repeated in
each (its small operand gets the buffer), a loop reading what an earlier loop of its
shape wrote computes that value itself (``backends/compiler/loop_merging.py``), and a
light value is computed again in each reader (``backends/compiler/recomputation.py``). Results
against the reference interpreter and NumPy, the same bits with the optimizations
switched off by name, and the kernels and buffers the plan holds."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llvmlite")

import functrans  # noqa: E402
import functrans.numpy as jnp  # noqa: E402
from functrans import nn  # noqa: E402
from functrans.backends.compiler import fusion  # noqa: E402
from functrans.backends.llvm import pipeline  # noqa: E402

rng = np.random.default_rng(7)
SHAPE = (64, 8)


def _steps(f, *args, disabled=""):
    with functrans.config.setting("disable_passes", disabled):
        return pipeline.plan_native(functrans.make_jaxpr(f)(*args)).program.steps


def _full_size_writes(steps, shape=SHAPE) -> list:
    """The full-size buffers the loops write, one list per loop."""
    return [[b for b, _, _ in s.outputs if b.shape == shape]
            for s in steps if isinstance(s, fusion.LoopKernel)
            if any(b.shape == shape for b, _, _ in s.outputs)]


def _run(f, args, disabled=""):
    with functrans.config.setting("disable_passes", disabled):
        return [np.asarray(v) for v in functrans.tree_util.tree_leaves(functrans.jit(f)(*args))]


def _check(f, args, numpy_result=None):
    got = _run(f, args)
    expected = [np.asarray(v) for v in
                functrans.tree_util.tree_leaves(functrans.jit(f, backend="reference")(*args))]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-5)
    if numpy_result is not None:
        for g, e in zip(got, numpy_result):
            np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-5)
    off = _run(f, args, "merged_loops, broadcast_operands, recomputed_values")
    for g, o in zip(got, off):
        np.testing.assert_array_equal(g, o)  # the same arithmetic: the same bits


def _norm_relu(x, scale, shift):
    """Batch normalization's output and ReLU, as the ResNet step writes them."""
    mean = jnp.mean(x, axis=0)
    var = jnp.mean(jnp.square(x - mean), axis=0)
    return nn.relu((x - mean) * (scale / jnp.sqrt(var + 1e-5)) + shift)


def _loss(x, scale, shift):
    return jnp.sum(_norm_relu(x, scale, shift) * x)


NORM_ARGS = (rng.standard_normal(SHAPE).astype(np.float32),
             rng.standard_normal(SHAPE[1]).astype(np.float32),
             rng.standard_normal(SHAPE[1]).astype(np.float32))


def test_relu_masks_and_select_are_one_loop():
    """The ReLU's comparison, NaN test and select (whose masks the gradient reads again)
    are one loop writing the two masks and the output, not three loops each reading the
    value back."""
    def f(x, scale, shift):
        return functrans.grad(_loss, argnums=(0, 1, 2))(x, scale, shift)
    merged = _full_size_writes(_steps(f, *NORM_ARGS))
    separate = _full_size_writes(_steps(f, *NORM_ARGS, disabled="merged_loops"))
    masks = [sum(b.dtype == np.bool_ for b in w) for w in merged]
    assert masks.count(2) == 1 and sum(masks) == 2       # both masks from one loop,
    assert any(b.dtype == np.float32 for b in merged[masks.index(2)])  # with the output
    assert [sum(b.dtype == np.bool_ for b in w) for w in separate].count(1) == 2
    assert len(merged) < len(separate)
    _check(f, NORM_ARGS)


def test_a_broadcast_read_by_several_kernels_is_not_written_out():
    """``x * c`` with ``c = a / sqrt(a * a + 1)`` broadcast over rows, read by two
    reductions: ``c`` (8 values) gets a buffer, the broadcast is loads in both."""
    def f(x, a):
        c = a / jnp.sqrt(a * a + 1.0)
        return jnp.sum(x * c, axis=0), jnp.max((x - 1.0) * c, axis=0)
    x, a = NORM_ARGS[:2]
    assert _full_size_writes(_steps(f, x, a)) == []
    assert len(_full_size_writes(_steps(f, x, a, disabled="broadcast_operands"))) == 1
    c = a / np.sqrt(a * a + 1)
    _check(f, (x, a), [np.sum(x * c, axis=0), np.max((x - 1) * c, axis=0)])


def test_a_loop_does_not_move_past_a_reduction_of_its_output():
    """``e = exp(x)`` is read by a sum and then by the division: its loop cannot move down
    into the division's (the sum between needs it written)."""
    def f(x):
        p = jnp.exp(x) / jnp.sum(jnp.exp(x), axis=0)
        return jnp.sum(p, axis=0), jnp.max(p, axis=1)
    x = NORM_ARGS[0]
    kinds = [type(s).__name__ for s in _steps(f, x)]
    assert kinds[:3] == ["LoopKernel", "ReduceKernel", "LoopKernel"]
    p = np.exp(x) / np.exp(x).sum(axis=0)
    _check(f, (x,), [p.sum(axis=0), p.max(axis=1)])


def test_a_value_read_at_other_elements_keeps_its_buffer():
    """A reader that takes the value reversed (at another element than the one it
    computes) reads it from memory; a reader at the same element computes it itself."""
    def f(x, reverse):
        y = jnp.sin(x) * x
        a = jnp.cos(y) + (y[::-1] if reverse else y)
        return jnp.sum(a, axis=0), jnp.sum(a, axis=1), jnp.sum(y, axis=0)
    x = NORM_ARGS[0]
    for reverse, loops in ((True, [1, 1]), (False, [2])):
        g = lambda x: f(x, reverse)  # noqa: E731
        assert [len(w) for w in _full_size_writes(_steps(g, x))] == loops
        y = np.sin(x) * x
        a = np.cos(y) + (y[::-1] if reverse else y)
        _check(g, (x,), [a.sum(axis=0), a.sum(axis=1), y.sum(axis=0)])


def test_merged_loops_give_the_same_bits_on_the_thread_pool():
    """Large enough to run in chunks on two threads: the merged loop writes each output's
    chunk from the value it computes once."""
    big = (rng.standard_normal((512, 512)).astype(np.float32),
           rng.standard_normal(512).astype(np.float32),
           rng.standard_normal(512).astype(np.float32))

    def f(x, scale, shift):
        return functrans.grad(_loss, argnums=(0, 1, 2))(x, scale, shift)
    _check(f, big)


# ---- light values computed again in each reader ---------------------------------------------

BIG = (256, 256)  # above recomputation.MIN_ELEMENTS: smaller values are written out


def test_a_light_value_with_several_readers_is_computed_in_each():
    """``d = x - mean`` read by the variance's sum, the output and a second sum: each
    loads ``x`` (which has a buffer anyway) and subtracts, and ``d`` is never written."""
    def f(x):
        d = x - jnp.mean(x, axis=0)
        return d * jnp.sum(d * d, axis=0), jnp.max(d, axis=1)
    x = rng.standard_normal(BIG).astype(np.float32)
    written = _full_size_writes(_steps(f, x), BIG)
    assert [b.kind for w in written for b in w] == ["output"]
    kept = _full_size_writes(_steps(f, x, disabled="recomputed_values"), BIG)
    assert any(b.kind == "temp" for w in kept for b in w)
    d = x - x.mean(axis=0)
    _check(f, (x,), [d * (d * d).sum(axis=0), d.max(axis=1)])


def test_expensive_or_wider_values_keep_their_buffer():
    """Each reader would repeat a transcendental function, or would load more bytes per
    element than the value holds (two float arrays for one float, a float for a mask):
    those values are written out once."""
    x, y = (rng.standard_normal(BIG).astype(np.float32) for _ in range(2))

    def transcendental(x):
        t = jnp.exp(x)
        return jnp.sum(t, axis=0), jnp.max(t, axis=1)

    def two_operands(x, y):
        t = x * y
        return jnp.sum(t, axis=0), jnp.max(t, axis=1)

    def mask(x):
        m = x > 0.5
        return jnp.sum(m, axis=0), jnp.any(m, axis=1)
    for f, args in ((transcendental, (x,)), (two_operands, (x, y)), (mask, (x,))):
        writes = _full_size_writes(_steps(f, *args), BIG)
        assert [b.kind for w in writes for b in w] == ["temp"], f.__name__
        _check(f, args)


def test_small_values_and_bias_adds_keep_their_buffer():
    """A value below ``MIN_ELEMENTS`` stays in cache and is written out; a bias add on a
    product stays for the product's epilogue (BLAS adds onto it)."""
    def small(x):
        d = x - jnp.mean(x, axis=0)
        return jnp.sum(d * d, axis=0), jnp.max(d, axis=1)
    x = NORM_ARGS[0]
    assert len(_full_size_writes(_steps(small, x))) == 1
    _check(small, (x,))

    def dense(x, w, b):
        h = x @ w + b
        return jnp.sum(jnp.maximum(h, 0.0), axis=0), jnp.max(h, axis=1)
    args = (rng.standard_normal(BIG).astype(np.float32),
            rng.standard_normal(BIG).astype(np.float32),
            rng.standard_normal(BIG[1]).astype(np.float32))
    assert any(isinstance(s, fusion.DotKernel) and s.accumulate for s in _steps(dense, *args))
    _check(dense, args)
