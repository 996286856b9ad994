"""Compilation stays linear in the program: kernels are optimized as separate functions."""
from __future__ import annotations

import re

import numpy as np

import functrans
import functrans.numpy as jnp
from functrans.backends.llvm import pipeline


def mlp_step(params, x):
    def loss(params):
        h = x
        for w in params:
            h = jnp.tanh(h @ w + 1.0)
        return jnp.sum(h * h)
    grads = functrans.grad(loss)(params)
    return [w - 0.1 * g for w, g in zip(params, grads)]


def test_kernels_are_not_inlined_into_the_segment():
    rng = np.random.default_rng(0)
    params = [rng.standard_normal((8, 8)).astype(np.float32) for _ in range(6)]
    x = rng.standard_normal((4, 8)).astype(np.float32)
    exe = pipeline.compile_jaxpr(functrans.make_jaxpr(mlp_step)(params, x), use_cache=False)
    kernels = re.findall(r"^define internal .*@\"?(k\d+_\w+)", exe.optimized_ir, re.M)
    segments = re.findall(r"^define .*@\"?(ft_segment_\d+)", exe.optimized_ir, re.M)
    assert len(segments) == 1 and len(kernels) >= 3, (segments, kernels)
    got = exe(*params, x)
    want = functrans.jit(mlp_step, backend="reference")(params, x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-5, atol=1e-6)


def kernel_names(exe):
    return re.findall(r"^define internal .*@\"?(k\d+_\w+)\"?\(", exe.optimized_ir, re.M)


def test_kernels_of_the_same_structure_share_one_function():
    x, y = np.ones((3, 50), np.float32), np.zeros((3, 50), np.float32)
    same = pipeline.compile_jaxpr(functrans.make_jaxpr(
        lambda x, y: (jnp.tanh(x) * 2 + 1, jnp.tanh(y) * 2 + 1))(x, y), use_cache=False)
    assert len(kernel_names(same)) == 1, same.optimized_ir
    other = pipeline.compile_jaxpr(functrans.make_jaxpr(
        lambda x, y: (jnp.tanh(x) * 2 + 1, jnp.tanh(y) * 3 + 1))(x, y), use_cache=False)
    assert len(kernel_names(other)) == 2


def test_kernels_differing_in_the_sign_of_a_zero_stay_apart():
    x = np.full(40, -0.0, np.float32)
    exe = pipeline.compile_jaxpr(functrans.make_jaxpr(
        lambda x, y: (jnp.maximum(x, 0.0), jnp.maximum(y, -0.0)))(x, x), use_cache=False)
    positive, negative = exe(x, x)
    assert not np.signbit(positive).any() and np.signbit(negative).all()
