"""Vector widths and interleave counts the llvm backend chooses from the target CPU's
features (backends/llvm/vector_loops.py): what each target gets, and that every choice
computes the same numbers as the plain code and the reference interpreter."""
from __future__ import annotations

import re

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans.backends.llvm import pipeline, streaming_stores, targets, vector_loops

LONG = vector_loops.LONG_CHAIN_MIN_ELEMENTS
TARGETS = ["x86-64-v3", "x86-64-v4", "native"]


def runnable(target: str) -> bool:
    return not targets.missing_features(targets.resolve(target))


def chain(x):
    y = jnp.tanh(x * 1.5 + 0.5)
    return jnp.maximum(jnp.abs(jnp.exp(-y * y) + x) * 0.5, 0.1)


def compiled(fn, *args, target_cpu="native", streamed_above=1 << 62):
    closed = functrans.make_jaxpr(fn)(*args)
    original = streaming_stores.min_streamed_bytes
    streaming_stores.min_streamed_bytes = lambda: streamed_above
    try:
        return pipeline.compile_jaxpr(closed, use_cache=False, target_cpu=target_cpu)
    finally:
        streaming_stores.min_streamed_bytes = original


def interleave_counts(text: str) -> set:
    return {int(n) for n in re.findall(r'"llvm.loop.interleave.count", i32 (\d+)', text)}


@pytest.mark.parametrize("target", TARGETS)
def test_long_chains_interleave_by_the_registers_and_widen_with_avx512(target):
    if not runnable(target):
        pytest.skip(f"the host cannot run {target} code")
    x = np.random.default_rng(1).standard_normal(LONG + 37).astype(np.float32)
    exe = compiled(chain, x, target_cpu=target)
    avx512 = targets.resolve(target).has_avx512
    assert interleave_counts(exe.ir_text) == {8 if avx512 else 4}
    assert ('"prefer-vector-width"="512"' in exe.ir_text) == avx512
    if avx512:
        assert "<16 x float>" in exe.optimized_ir
    # the same elements computed by the plain loop of a short kernel, bit for bit
    short = compiled(chain, x[:1000], target_cpu=target)
    assert interleave_counts(short.ir_text) == {1}
    assert "prefer-vector-width" not in short.ir_text
    got, want = exe(x)[0], short(x[:1000])[0]
    np.testing.assert_array_equal(got[:1000].view(np.uint32), want.view(np.uint32))
    reference = functrans.jit(chain, backend="reference")(x)
    np.testing.assert_allclose(got, np.asarray(reference), rtol=2e-6, atol=1e-7)


def test_cheap_loops_keep_one_vector_per_iteration():
    x = np.ones(4 * LONG, np.float32)
    exe = compiled(lambda x: x * 2.0 + 1.0, x)
    assert interleave_counts(exe.ir_text) == {1}
    assert "prefer-vector-width" not in exe.ir_text


def test_a_streamed_long_chain_gives_the_plain_loops_bits():
    x = np.random.default_rng(2).standard_normal(LONG + 301).astype(np.float32)
    streamed = compiled(chain, x, streamed_above=1 << 14)
    plain = compiled(chain, x)
    assert "!nontemporal" in streamed.ir_text and "!nontemporal" not in plain.ir_text
    np.testing.assert_array_equal(streamed(x)[0].view(np.uint32), plain(x)[0].view(np.uint32))
