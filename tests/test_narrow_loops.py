"""Narrow kernels (rows of a handful of elements, like a classifier's 10 logits): their
loops over the row stay scalar and their reductions are straight-line trees, which LLVM
compiles in a fraction of the time of a vectorized loop (see ``vector_loops.narrow``)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans.backends.llvm import pipeline, vector_loops


def compiled(fn, *args):
    closed = functrans.make_jaxpr(fn)(*args)
    return pipeline.compile_jaxpr(closed, use_cache=False)


def cross_entropy(h, onehot):
    m = jnp.max(h, axis=1, keepdims=True)
    logp = h - m - jnp.log(jnp.sum(jnp.exp(h - m), axis=1, keepdims=True))
    return -jnp.mean(jnp.sum(logp * onehot, axis=1))


def functions(ir_text: str) -> dict:
    """Each defined function's name -> its body."""
    return {m.group(1): m.group(2) for m in
            re.finditer(r'define [^@]*@"([^"]+)"\(.*?\n\{\n(.*?)\n\}', ir_text, re.S)}


def test_the_softmax_row_group_of_ten_logits_has_no_reduction_loop():
    rng = np.random.default_rng(0)
    h = rng.standard_normal((128, 10)).astype(np.float32)
    onehot = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 128)]
    exe = compiled(functrans.value_and_grad(cross_entropy), h, onehot)
    group = [body for name, body in functions(exe.ir_text).items()
             if "reduce_max" in name and "_chunk" not in name]
    assert len(group) == 1
    # the four row reductions are trees, the maps scalar loops: only the exponentials'
    # loop (inline math) is left to the vectorizer
    assert not re.search(r"^r\d+\.loop", group[0], re.M)
    hint = re.search(r'^!(\d+) = !\{ !"llvm.loop.vectorize.enable", i32 0 \}',
                     exe.ir_text, re.M)
    scalar_id = re.search(rf"^!(\d+) = distinct !\{{ !\1, !{hint.group(1)} \}}",
                          exe.ir_text, re.M).group(1)
    # two maps: the comparison with the maximum (scalar) and the exponentials (vectors)
    loops = re.findall(r"!llvm.loop !(\d+)", group[0])
    assert sorted(loop == scalar_id for loop in loops) == [False, True]
    value, grad = exe(h, onehot)
    want = functrans.jit(functrans.value_and_grad(cross_entropy), backend="reference")(h, onehot)
    np.testing.assert_allclose(np.asarray(value), np.asarray(want[0]), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(want[1]), rtol=1e-5, atol=1e-7)


def test_a_wide_or_large_kernel_stays_vectorized():
    x = np.ones((128, 16), np.float32)
    exe = compiled(lambda a: jnp.sum(a * 2.0, axis=1), x)
    assert "llvm.loop.vectorize.enable" not in exe.ir_text
    x = np.ones((1024, 10), np.float32)  # 10K elements: a scalar loop could cost more
    exe = compiled(lambda a: jnp.sum(a * 2.0, axis=1), x)
    assert "llvm.loop.vectorize.enable" not in exe.ir_text


@pytest.mark.parametrize("width", [2, 3, 7, 10, 15])
@pytest.mark.parametrize("monoid", ["sum", "max", "min", "prod"])
def test_narrow_reductions_agree_with_numpy(width, monoid):
    rng = np.random.default_rng(width)
    x = rng.standard_normal((37, width)).astype(np.float32)
    x[3, width // 2] = np.nan  # a NaN anywhere in the row is the row's maximum, minimum, sum
    x[5, 0] = np.inf
    fn = getattr(jnp, monoid)
    exe = compiled(lambda a: (fn(a, axis=1), fn(a * 3.0 - 1.0, axis=1)), x)
    assert not re.search(r"^r\d+\.loop", exe.ir_text, re.M)  # trees, no loops
    got = exe(x)
    want = [getattr(np, monoid)(x, axis=1), getattr(np, monoid)(x * 3.0 - 1.0, axis=1)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64, np.bool_])
def test_narrow_reductions_of_other_types(dtype):
    rng = np.random.default_rng(1)
    x = (rng.integers(-50, 50, (20, 6)) if dtype != np.bool_ else
         rng.integers(0, 2, (20, 6))).astype(dtype)
    exe = compiled(lambda a: (jnp.sum(a, axis=1), jnp.max(a, axis=1), jnp.min(a, axis=1)), x)
    got = exe(x)
    want = [np.sum(x, axis=1), np.max(x, axis=1), np.min(x, axis=1)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)


def test_narrow_depends_on_the_row_bytes_and_the_kernel_size():
    from functrans.backends.compiler.fusion import Buffer, LoopKernel
    from functrans.backends.compiler import exprs as E

    def loop(shape, dtype):
        out = Buffer(0, shape, dtype, "temp")
        return LoopKernel(shape, [(out, E.linearize(E.index_vars(shape), shape),
                                   E.constant(1, dtype))], ("add",))
    with E.lock:
        assert vector_loops.narrow(loop((128, 10), np.float32), [])
        assert not vector_loops.narrow(loop((128, 16), np.float32), [])
        assert vector_loops.narrow(loop((128, 7), np.float64), [])
        assert not vector_loops.narrow(loop((128, 8), np.float64), [])
        assert not vector_loops.narrow(loop((1024, 10), np.float32), [])
