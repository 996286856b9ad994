"""Blocked attention: the products around a softmax's row group run block by block (see
backends/llvm/attention.py), and give what the reference interpreter gives — with masks
and without, float32 and float64, at sizes that are not multiples of a block, under grad
and vmap, and where skipping masked columns would change an inf into a finite number."""
from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import export, nn

pytest.importorskip("llvmlite")

from functrans.backends.llvm import attention, pipeline  # noqa: E402
from functrans.backends.llvm.attention import AttentionStep  # noqa: E402
from functrans.interpreters.inline import inline_calls  # noqa: E402


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of a few rows, and blocking at any size: small programs take the paths large
    ones do (several blocks per batch element, a last block of fewer rows)."""
    monkeypatch.setattr(attention, "MIN_ROWS_BYTES", 0)
    monkeypatch.setattr(attention, "BLOCK_BYTES", 1200)


def make_attention(mask: str, fill=-1e9):
    def attend(q, k, v, keep=None):
        t, d = q.shape[-2], q.shape[-1]
        scores = jnp.einsum("...qd,...kd->...qk", q, k) / np.sqrt(d).astype(q.dtype)
        i, j = jnp.arange(t)[:, None], jnp.arange(t)[None, :]
        if mask == "causal":
            scores = jnp.where(j <= i, scores, fill)
        elif mask == "window":  # each query sees itself and the four keys before it
            scores = jnp.where((j <= i) & (j > i - 5), scores, -jnp.inf)
        elif mask == "padding":  # keys switched off by an input
            scores = jnp.where(keep[..., None, :], scores, fill)
        return jnp.einsum("...qk,...kd->...qd", nn.softmax(scores, axis=-1), v)
    return attend


def planned(fn, *args):
    closed = inline_calls(functrans.make_jaxpr(fn)(*args))
    with pipeline._compile_lock:
        return pipeline.plan_native(closed).program


def arrays(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for _ in range(4)]


def agree(fn, args, dtype):
    got = functrans.tree_util.tree_leaves(functrans.jit(fn)(*args))
    want = functrans.tree_util.tree_leaves(functrans.jit(fn, backend="reference")(*args))
    tol = dict(rtol=2e-4, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), **tol)


def test_forward_and_backward_each_run_as_one_blocked_step(small_blocks):
    q, k, v, g = arrays((2, 3, 37, 5), np.float32)
    attend = make_attention("causal")
    grad = functrans.grad(lambda q, k, v: jnp.sum(attend(q, k, v) * g), argnums=(0, 1, 2))
    program = planned(grad, q, k, v)
    steps = [s for s in program.steps if isinstance(s, AttentionStep)]
    assert len(steps) == 2, program.describe()
    forward, backward = steps
    # forward: the scores, computed where the causal mask lets them count (the loss is
    # linear in p @ v: its value is not needed); backward: the probabilities' cotangent,
    # then dsᵀ @ q and ds @ k; pᵀ @ do reads the probabilities, which either step has in
    # cache
    assert len(forward.producers) == 1 and forward.producers[0][2] is not None
    assert len(backward.producers) == 1 and backward.producers[0][2] is None
    consumers = [dot for s in steps for dot, _ in s.consumers]
    assert len(consumers) == 3 and sum(dot.lhs_transposed for dot in consumers) == 2
    assert forward.blocks > 1 and 37 % forward.block_rows
    # the only score-sized buffer left in memory: the probabilities, kept for the backward
    scores = [b for s in program.steps for b in s.writes() if b.shape == (2, 3, 37, 37)]
    assert len(scores) == 1, program.describe()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mask", ["none", "causal", "window", "padding"])
@pytest.mark.parametrize("shape", [(2, 3, 37, 5), (1, 2, 50, 7)])
def test_blocks_agree_with_the_reference(small_blocks, dtype, mask, shape):
    if dtype == np.float64:
        functrans.config.update("enable_x64", True)
    q, k, v, g = arrays(shape, dtype, seed=shape[2])
    keep = np.random.default_rng(1).random(shape[:2] + (shape[2],)) < 0.7
    keep[..., 0] = True
    attend = make_attention(mask)

    def loss(q, k, v, keep):
        return jnp.sum(attend(q, k, v, keep) * g)
    args = (q, k, v, keep)
    agree(attend, args, dtype)
    agree(functrans.grad(loss, argnums=(0, 1, 2)), args, dtype)
    agree(functrans.vmap(attend, in_axes=(1, 1, 1, 1)), args, dtype)
    per_example = functrans.vmap(functrans.grad(loss, argnums=(0, 1, 2)), in_axes=(0, 0, 0, 0))
    agree(per_example, args, dtype)


def test_an_inf_behind_the_mask_still_makes_nan(small_blocks):
    # The masked weights are exact zeros, and 0 * inf is NaN: a block may only leave the
    # zeros out where the values (and, backward, the keys and queries) are finite.
    q, k, v, g = arrays((2, 2, 29, 4), np.float32, seed=3)
    v[1, 0, 20] = np.inf      # a key only queries 20 and later see
    q[0, 1, 25] = np.nan
    attend = make_attention("causal")
    grad = functrans.grad(lambda q, k, v: jnp.sum(attend(q, k, v) * g), argnums=(0, 1, 2))
    for fn in (attend, grad):
        got = functrans.tree_util.tree_leaves(functrans.jit(fn)(q, k, v))
        want = functrans.tree_util.tree_leaves(functrans.jit(fn, backend="reference")(q, k, v))
        for gv, wv in zip(got, want):
            gv, wv = np.asarray(gv), np.asarray(wv)
            np.testing.assert_array_equal(np.isnan(gv), np.isnan(wv))
            np.testing.assert_allclose(gv, wv, rtol=2e-4, atol=2e-5)
        assert any(np.isnan(np.asarray(x)).any() for x in got)


def test_a_mask_that_leaves_small_weights_is_not_skipped(small_blocks):
    # With a fill of -8 the masked weights are small but not zero: every column counts.
    q, k, v, g = arrays((2, 2, 33, 6), np.float32, seed=4)
    attend = make_attention("causal", fill=-8.0)
    agree(attend, (q, k, v), np.float32)
    agree(functrans.grad(lambda q, k, v: jnp.sum(attend(q, k, v) * g), argnums=(0, 1, 2)),
          (q, k, v), np.float32)


def test_blocking_keeps_the_scores_out_of_the_arena():
    # Large enough to block with the default sizes: 8 heads of 256 keys, 2 MiB per
    # score-sized buffer. Unblocked, the scores and the probabilities are in the arena;
    # blocked, only the tiles of the blocks in flight.
    q, k, v, _ = arrays((1, 8, 256, 16), np.float32)
    attend = make_attention("causal")
    program = planned(attend, q, k, v)
    assert any(isinstance(s, AttentionStep) for s in program.steps), program.describe()
    arena = functrans.jit(attend).lower(q, k, v).compile().memory_analysis().temp_size_in_bytes
    assert arena < 8 * 256 * 256 * 4, arena
    agree(attend, (q, k, v), np.float32)


def test_small_attention_is_left_to_the_unblocked_steps():
    q, k, v, _ = arrays((2, 3, 64, 16), np.float32)
    program = planned(make_attention("causal"), q, k, v)
    assert not any(isinstance(s, AttentionStep) for s in program.steps)


def test_the_pass_can_be_disabled(small_blocks):
    q, k, v, _ = arrays((2, 3, 20, 4), np.float32)
    attend = make_attention("causal")
    functrans.config.update("disable_passes", "block_attention")
    try:
        program = planned(attend, q, k, v)
        agree(attend, (q, k, v), np.float32)
    finally:
        functrans.config.update("disable_passes", "")
    assert not any(isinstance(s, AttentionStep) for s in program.steps)


def test_a_product_with_a_large_shared_operand_stays_whole(small_blocks):
    # A dense layer's softmax (x @ w, w 256 x 640: 640 KiB read again by every block) is no
    # attention: blocking would re-read and re-pack w once per block of rows.
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    w = (rng.standard_normal((256, 640)) / 16).astype(np.float32)
    u = rng.standard_normal((640, 8)).astype(np.float32)

    def fn(x, w, u):
        return nn.softmax(x @ w, axis=-1) @ u
    program = planned(fn, x, w, u)
    assert not any(isinstance(s, AttentionStep) for s in program.steps), program.describe()
    agree(fn, (x, w, u), np.float32)
    narrow = planned(fn, x, w[:, :96], u[:96])  # w of 96 KiB: blocked
    assert any(isinstance(s, AttentionStep) for s in narrow.steps)
    agree(fn, (x, w[:, :96], u[:96]), np.float32)


def test_attention_inside_a_scan_body(small_blocks):
    # Loop bodies are compiled without row fusion, so without blocks (docs/performance.md):
    # a scan over attention layers, and its gradient, agree with the reference.
    q, k, v, g = arrays((3, 2, 2, 23, 4), np.float32, seed=6)
    attend = make_attention("causal")

    def layers(q, k, v):
        def body(x, kv):
            y = attend(x, *kv)
            return x + y, jnp.sum(y)
        return functrans.lax.scan(body, q[0], (k, v))
    agree(layers, (q, k, v), np.float32)
    agree(functrans.grad(lambda q, k, v: jnp.sum(layers(q, k, v)[0] * g[0]), argnums=(0, 1, 2)),
          (q, k, v), np.float32)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to link a library with")
def test_an_exported_library_runs_the_blocks(small_blocks, tmp_path):
    # the library's runtime has the pool, BLAS's hold and memset the blocked step calls
    q, k, v, _ = arrays((2, 3, 23, 4), np.float32, seed=7)
    jitted = functrans.jit(make_attention("causal"))
    exp = export.export(jitted)(q, k, v)
    library = ctypes.CDLL(export.to_shared_library(exp, str(tmp_path / "attend")).library)
    out = np.empty_like(q)
    assert library.attend(*(ctypes.c_void_p(x.ctypes.data) for x in (q, k, v, out)), None,
                          ctypes.c_size_t(0)) == 0
    np.testing.assert_array_equal(out, np.asarray(jitted(q, k, v)))
