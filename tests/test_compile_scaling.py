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
    segments = re.findall(r"^define .*@\"?(ft_segment_\d+)\"?\(", exe.optimized_ir, re.M)
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


def function_headers(ir_text: str) -> dict:
    """Function name -> its ``define`` line."""
    return {m.group(1): m.group(0) for m in
            re.finditer(r'^define .*@"?([\w.]+)"?\(.*$', ir_text, re.M)}


def test_call_only_wrappers_are_compiled_unoptimized(monkeypatch):
    """The functions that run a chunk of a kernel or of a matrix product on the thread pool
    are calls with a little arithmetic around them: LLVM compiles them unoptimized."""
    monkeypatch.setenv("FUNCTRANS_NUM_THREADS", "2")
    rng = np.random.default_rng(3)
    x = rng.normal(size=(600, 700)).astype(np.float32)
    a = rng.normal(size=(128, 300)).astype(np.float32)
    b = rng.normal(size=(300, 640)).astype(np.float32)

    def f(x, a, b):
        return jnp.tanh(x) * 2 + 1, a @ b

    exe = pipeline.compile_jaxpr(functrans.make_jaxpr(f)(x, a, b), use_cache=False)
    headers = function_headers(exe.ir_text)
    chunks = {name: line for name, line in headers.items() if "chunk" in name}
    assert any(name.startswith("gemm") for name in chunks), headers
    assert any(name.startswith("k") for name in chunks), headers
    for line in chunks.values():
        assert "optnone" in line and "noinline" in line, line
    kernels = [line for name, line in headers.items() if name.startswith("k") and name not in chunks]
    assert kernels and not any("optnone" in line for line in kernels)
    got = exe(x, a, b)
    np.testing.assert_allclose(got[0], np.tanh(x) * 2 + 1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def segment_allocas(exe) -> int:
    body = re.search(r'^define i32 @"?ft_segment_0"?\(.*?^}', exe.ir_text, re.M | re.S)
    return body.group(0).count("= alloca")


def test_products_share_the_slots_of_their_constant_arguments():
    """BLAS takes its sizes and scalars by reference: products of the same shapes pass the
    same stack slots, so a segment's prologue does not grow with its products."""
    rng = np.random.default_rng(4)
    ws = [rng.normal(size=(8, 8)).astype(np.float32) for _ in range(6)]
    x = rng.normal(size=(4, 8)).astype(np.float32)

    def chain(x, *ws):
        for w in ws:
            x = x @ w
        return x

    one, six = (pipeline.compile_jaxpr(functrans.make_jaxpr(chain)(x, *ws[:n]),
                                       use_cache=False) for n in (1, 6))
    assert segment_allocas(six) == segment_allocas(one) > 0
    want = x.astype(np.float64)
    for w in ws:
        want = want @ w
    np.testing.assert_allclose(six(x, *ws)[0], want, rtol=1e-4, atol=1e-4)


def test_products_with_different_constants_keep_them_apart():
    """Two products whose constant arguments differ (sizes, transposes, a scale of -0.0
    against 0.0) each pass their own."""
    rng = np.random.default_rng(5)
    a = rng.normal(size=(5, 3)).astype(np.float32)
    b = rng.normal(size=(3, 7)).astype(np.float32)
    c = rng.normal(size=(7, 4)).astype(np.float32)

    def f(a, b, c):
        ab = a @ b
        return ab, ab @ c, (a.T.T * -1.0) @ b, b.T @ a.T

    got = functrans.jit(f, backend="llvm")(a, b, c)
    a64, b64, c64 = (v.astype(np.float64) for v in (a, b, c))
    for g, w in zip(got, (a64 @ b64, a64 @ b64 @ c64, -a64 @ b64, b64.T @ a64.T)):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-5)
