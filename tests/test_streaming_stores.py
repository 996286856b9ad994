"""Loop kernels larger than the cache write their output with non-temporal stores.

The threshold is lowered for these tests (it is the last-level cache's size, megabytes), so
small arrays take the streaming path; each program is compiled both ways and the results
must agree bit for bit.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import functrans.numpy as jnp
from functrans.backends.llvm import streaming_stores, targets
from llvm_setups import chain, compiled

THRESHOLD = 1 << 14   # bytes a kernel touches (inputs + outputs) before it streams


def both_ways(fn, *args, target_cpu=None):
    """(streamed executable, plain executable) for ``fn`` at ``args``."""
    return (compiled(fn, *args, streamed_above=THRESHOLD, target_cpu=target_cpu),
            compiled(fn, *args, streamed_above=1 << 62, target_cpu=target_cpu))


@pytest.mark.parametrize("n", [THRESHOLD // 8 - 16, THRESHOLD // 8, THRESHOLD // 8 + 1,
                               THRESHOLD // 8 + 7, THRESHOLD // 8 + 61, 3 * THRESHOLD + 5])
def test_results_are_bitwise_unchanged_around_the_threshold(n):
    # a float32 chain touches 8 bytes per element: n = THRESHOLD // 8 is the last size below
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    streamed, plain = both_ways(chain, x)
    assert ("!nontemporal" in streamed.ir_text) == (8 * n > THRESHOLD)
    assert "!nontemporal" not in plain.ir_text
    got, want = streamed(x)[0], plain(x)[0]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_allclose(got, chain(x), rtol=2e-6)


@pytest.mark.parametrize("start", range(0, 17, 3))
def test_misaligned_views_give_the_same_bits(start):
    base = np.random.default_rng(start).standard_normal(THRESHOLD + 64).astype(np.float32)
    x = base[start:start + THRESHOLD // 2 + 13]   # data 4 * start bytes past the allocation
    assert x.ctypes.data % 64 == (base.ctypes.data + 4 * start) % 64
    streamed, plain = both_ways(chain, np.empty_like(x))
    assert "!nontemporal" in streamed.ir_text
    got, want = streamed(x)[0], plain(x)[0]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("shape", [(37, 301), (5, 4099), (3, 7, 129)])
def test_rows_of_a_loop_nest_are_peeled_each(shape):
    # each row starts at its own alignment: the peel is computed per row
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    bias = rng.standard_normal(shape[-1]).astype(np.float32)
    fn = lambda x, b: jnp.sin(x) * 2 + b  # noqa: E731
    streamed, plain = both_ways(fn, x, bias)
    assert "!nontemporal" in streamed.ir_text
    got, want = streamed(x, bias)[0], plain(x, bias)[0]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_the_hint_survives_optimization_as_an_aligned_vector_store():
    x = np.ones(THRESHOLD, np.float32)
    streamed, _ = both_ways(chain, x)
    stores = [line for line in streamed.optimized_ir.splitlines()
              if "!nontemporal" in line and line.strip().startswith("store")]
    assert stores and all("x float>" in line and "align 32" in line for line in stores), stores


def test_each_block_computes_several_vectors_side_by_side():
    # a long chain per vector leaves the floating-point units idle unless several vectors'
    # chains are interleaved: the block of stores holds INTERLEAVE tanh divisions (in AVX2
    # code, of 8-lane vectors: compiled for x86-64-v3 whatever the host)
    if targets.missing_features(targets.resolve("x86-64-v3")):
        pytest.skip("the host cannot run AVX2 code")
    x = np.ones(THRESHOLD, np.float32)
    streamed, _ = both_ways(chain, x, target_cpu="x86-64-v3")
    blocks = re.split(r"\n(?=[\w.]+:)", streamed.optimized_ir)
    [block] = [text for text in blocks if "!nontemporal" in text]
    assert block.count("store <8 x float>") == streamed_count(block) == streaming_stores.INTERLEAVE
    assert len(re.findall(r"fdiv [a-z ]*<8 x float>", block)) == streaming_stores.INTERLEAVE


def streamed_count(block: str) -> int:
    return sum("!nontemporal" in line and line.strip().startswith("store")
               for line in block.splitlines())


def test_blocks_llvm_cannot_vectorize_compile_quietly(capfd, x64):
    # float64 tanh calls the C library: the block's loop stays scalar, and LLVM must not
    # print a remark about it (as it does for a loop whose vector width is forced)
    x = np.linspace(-3, 3, THRESHOLD // 8)
    streamed, plain = both_ways(jnp.tanh, x)
    assert "!nontemporal" in streamed.ir_text
    np.testing.assert_array_equal(streamed(x)[0], plain(x)[0])
    assert "remark" not in capfd.readouterr().err


def test_reductions_keep_plain_stores():
    y = np.ones(THRESHOLD, np.float32)
    streamed, _ = both_ways(lambda y: jnp.sum(y * y), y)
    assert "!nontemporal" not in streamed.ir_text


def test_the_threshold_is_the_last_level_cache():
    size = streaming_stores.last_level_cache_bytes()
    assert size >= 1 << 18 and streaming_stores.min_streamed_bytes() == size
