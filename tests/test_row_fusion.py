"""Row fusion: a softmax's passes (and attention's, forward and backward) run row by row,
their score-sized intermediates in a row-sized stack buffer instead of memory."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import functrans
import functrans.numpy as jnp
from functrans import nn
from functrans.backends.llvm import pipeline
from functrans.backends.llvm.row_fusion import RowGroup
from functrans.interpreters.inline import inline_calls


def planned(fn, *args):
    closed = inline_calls(functrans.make_jaxpr(fn)(*args))
    with pipeline._compile_lock:
        return pipeline.plan_native(closed).program


def attention_loss(q, k, v):
    t = q.shape[-2]
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.float32(np.sqrt(q.shape[-1]))
    causal = jnp.tril(jnp.ones((t, t), bool))
    weights = nn.softmax(jnp.where(causal, scores, -1e9), axis=-1)
    return jnp.sum(jnp.einsum("bhqk,bhkd->bhqd", weights, v) ** 2)


def qkv(shape, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]


def score_sized_writes(program, scores_shape):
    return [b for s in program.steps for b in s.writes() if b.shape == scores_shape]


def test_attention_keeps_one_score_sized_buffer_per_pass():
    q, k, v = qkv((2, 3, 64, 16))
    program = planned(functrans.grad(attention_loss, argnums=(0, 1, 2)), q, k, v)
    groups = [s for s in program.steps if isinstance(s, RowGroup)]
    assert len(groups) == 2, program.describe()   # the softmax, and its derivative
    # forward: the scores (a product) and the probabilities; backward: the probabilities'
    # cotangent (a product) and the scores' — before row fusion there were six
    assert len(score_sized_writes(program, (2, 3, 64, 64))) == 4, program.describe()
    for group in groups:
        assert all(b.shape in ((2, 3, 64, 64), (2, 3, 64)) for b in group.internal)
        assert len(group.writes()) == 1


@pytest.mark.parametrize("shape", [(2, 3, 64, 16), (4, 4, 128, 8)])
def test_attention_gradients_agree_with_the_reference(shape):
    q, k, v = qkv(shape, seed=shape[2])
    grad = functrans.grad(attention_loss, argnums=(0, 1, 2))
    got = functrans.jit(grad)(q, k, v)
    want = functrans.jit(grad, backend="reference")(q, k, v)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-4, atol=2e-5)


def numpy_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@settings(max_examples=12, deadline=None)
@given(rows=st.lists(st.integers(1, 9), min_size=0, max_size=2), width=st.integers(2, 300),
       seed=st.integers(0, 2 ** 16))
def test_softmax_logsumexp_and_their_gradients_over_rows(rows, width, seed):
    x = np.random.default_rng(seed).standard_normal(tuple(rows) + (width,)).astype(np.float32)
    weights = np.linspace(-1, 1, width, dtype=np.float32)

    def loss(x):
        return jnp.sum(nn.softmax(x) * weights) + jnp.sum(nn.logsumexp(x, axis=-1))
    np.testing.assert_allclose(np.asarray(functrans.jit(nn.softmax)(x)), numpy_softmax(x),
                               rtol=1e-5, atol=1e-6)
    got = functrans.jit(functrans.grad(loss))(x)
    want = functrans.jit(functrans.grad(loss), backend="reference")(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)


def test_rows_split_across_threads_agree():
    # 1024 rows of 512: large enough for the thread pool to take chunks of rows
    x = np.random.default_rng(1).standard_normal((1024, 512)).astype(np.float32)
    program = planned(nn.softmax, x)
    assert any(isinstance(s, RowGroup) for s in program.steps)
    np.testing.assert_allclose(np.asarray(functrans.jit(nn.softmax)(x)), numpy_softmax(x),
                               rtol=1e-5, atol=1e-7)


def test_a_kernel_reading_another_row_is_not_grouped_with_its_writer():
    x = np.random.default_rng(2).standard_normal((6, 40)).astype(np.float32)

    def fn(x):
        top = jnp.max(x, axis=-1, keepdims=True)
        return jnp.exp(x - top[::-1])        # each row shifted by another row's maximum
    program = planned(fn, x)
    for group in (s for s in program.steps if isinstance(s, RowGroup)):
        assert all(b.shape != (6,) and b.shape != (6, 1) for b in group.internal)
    np.testing.assert_allclose(np.asarray(functrans.jit(fn)(x)),
                               np.exp(x - x.max(-1, keepdims=True)[::-1]), rtol=1e-5)
