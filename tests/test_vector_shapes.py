"""Vector widths, interleave counts and convolution register tiles the llvm backend
chooses from the target CPU's features (backends/llvm/vector_loops.py,
backends/llvm/convolution.py): what each target gets, and that every choice computes the
same numbers as the plain code and the reference interpreter."""
from __future__ import annotations

import re

import numpy as np
import pytest

import functrans
from functrans import lax
from functrans.backends.llvm import convolution, targets, vector_loops
from llvm_setups import chain, compiled

LONG = vector_loops.LONG_CHAIN_MIN_ELEMENTS
TARGETS = ["x86-64-v3", "x86-64-v4", "native"]


def runnable(target: str) -> bool:
    return not targets.missing_features(targets.resolve(target))


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
    exe = compiled(lambda x: x * 2.0 + 1.0, x, target_cpu="native")
    assert interleave_counts(exe.ir_text) == {1}
    assert "prefer-vector-width" not in exe.ir_text


def test_a_streamed_long_chain_gives_the_plain_loops_bits():
    x = np.random.default_rng(2).standard_normal(LONG + 301).astype(np.float32)
    streamed = compiled(chain, x, streamed_above=1 << 14, target_cpu="native")
    plain = compiled(chain, x, target_cpu="native")
    assert "!nontemporal" in streamed.ir_text and "!nontemporal" not in plain.ir_text
    np.testing.assert_array_equal(streamed(x)[0].view(np.uint32), plain(x)[0].view(np.uint32))


@pytest.mark.parametrize("target", TARGETS)
def test_the_register_tile_follows_the_vector_registers(target):
    if not runnable(target):
        pytest.skip(f"the host cannot run {target} code")
    with targets.compiling_for(target) as resolved:
        registers = resolved.vector_registers
        assert convolution.max_accumulators() == 3 * registers // 4
        assert convolution.max_vectors() == registers // 8
        assert convolution.vector_bytes(32, np.float32) == (64 if resolved.has_avx512 else 32)
        assert convolution.vector_bytes(24, np.float32) == 32  # not whole 64-byte vectors
        assert convolution.vector_bytes(8, np.float64) == (64 if resolved.has_avx512 else 32)


# output features: one narrow vector, one wide, a tile's worth, one vector past a tile (it
# joins the tile), and several tiles; float64 vectors hold half as many
@pytest.mark.parametrize("features,dtype", [(8, np.float32), (16, np.float32), (40, np.float32),
                                            (72, np.float32), (80, np.float32),
                                            (12, np.float64), (20, np.float64),
                                            (40, np.float64)])
@pytest.mark.parametrize("target", TARGETS)
def test_every_tile_shape_matches_the_reference(target, features, dtype):
    if not runnable(target):
        pytest.skip(f"the host cannot run {target} code")
    rng = np.random.default_rng(features)
    x = rng.standard_normal((3, 9, 29, 5)).astype(dtype)   # 29 outputs: full tiles and a tail
    w = rng.standard_normal((3, 3, 5, features)).astype(dtype)

    def f(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))
    ct = rng.standard_normal((3, 9, 29, features)).astype(dtype)

    def grads(x, w):
        out, pullback = functrans.vjp(f, x, w)
        return (out,) + tuple(pullback(ct))

    before = functrans.config.jax_enable_x64
    functrans.config.update("jax_enable_x64", dtype == np.float64)
    try:
        program = functrans.jit(grads, compiler_options={"target_cpu": target})
        assert "conv[direct" in program.lower(x, w).compile()._executable.program.describe()
        got = program(x, w)
        want = functrans.jit(grads, backend="reference")(x, w)
    finally:
        functrans.config.update("jax_enable_x64", before)
    tol = 2e-4 if dtype == np.float32 else 1e-10
    for a, b in zip(got, want):
        a, b = np.asarray(a), np.asarray(b)
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, float(np.max(np.abs(b)))))
