"""The llvm backend against the reference backend (and NumPy).

Compilation dominates the cost of these tests, so most tests compile one program that
applies many primitives at once and compare each output separately.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

pytest.importorskip("llvmlite")

import functrans  # noqa: E402
import functrans.lax as lax  # noqa: E402
import functrans.numpy as jnp  # noqa: E402
from functrans import _backends  # noqa: E402
from functrans.backends.compiler import exprs, fusion  # noqa: E402
from functrans.backends.llvm import codegen, pipeline, thread_pool  # noqa: E402
from functrans.primitives import elementwise as ew  # noqa: E402

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _private_cache_dir(tmp_path_factory):
    """Compile into a cache of our own, so results never depend on earlier runs."""
    old = functrans.config.cache_dir
    functrans.config.update("cache_dir", str(tmp_path_factory.mktemp("ftcache")))
    yield
    functrans.config.update("cache_dir", old)



def run_both(f, *args):
    """``f`` jitted with the llvm and the reference backends, as flat lists of arrays."""
    ours = functrans.jit(f, backend="llvm")(*args)
    ref = functrans.jit(f, backend="reference")(*args)
    leaves = functrans.tree_util.tree_leaves
    return [np.asarray(a) for a in leaves(ours)], [np.asarray(b) for b in leaves(ref)]


def assert_close(actual, expected, rtol, atol=0.0, what=""):
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if actual.dtype.kind == "f":
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=what)
        # infinities and NaNs must sit in the same places with the same signs
        np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected), err_msg=what)
        inf = np.isinf(expected)
        np.testing.assert_array_equal(actual[inf], expected[inf], err_msg=what)
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=what)


def _tolerance(dtype):
    return (2e-6, 1e-6) if dtype == np.float32 else (1e-12, 1e-14)


# =============================================================================================
# Elementwise primitives, every one, against the reference implementations
# =============================================================================================

SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, 1e-30, -1e-30, 1e30,
           -1e30, 88.0, -88.0, 100.0, 3.0, 1e-40]


def _special(dtype):
    """SPECIAL, without the values subnormal in ``dtype`` while subnormals are flushed: what
    a function computes from a subnormal argument read as zero depends on its
    implementation (NumPy's C library tests the argument's bits, as XLA's code sometimes
    does; see docs/differences.md). They are compared with the option off."""
    if not functrans.config.flush_denormals:
        return SPECIAL
    tiny = np.finfo(dtype).tiny
    return [v for v in SPECIAL if v == 0 or abs(v) >= tiny or not np.isfinite(v)]


def _float_inputs(dtype, rng, n=2000):
    parts = [np.array(_special(dtype)), rng.normal(size=n) * 3, rng.uniform(-1, 1, n),
             np.exp(rng.uniform(-20, 20, n)) * rng.choice([-1, 1], n)]
    with np.errstate(over="ignore"):
        return np.concatenate(parts).astype(dtype)


def _int_inputs(dtype, rng, n=500):
    info = np.iinfo(dtype)
    edge = [0, 1, -1, 2, 3, 7, 8, info.min, info.max, info.min + 1, info.max - 1, 31, 32, 63, 64]
    edge = np.array([v for v in edge if info.min <= v <= info.max], dtype=dtype)
    rand = rng.integers(info.min, info.max, n, endpoint=True, dtype=dtype)
    small = rng.integers(max(info.min, -40), min(info.max, 40), n, endpoint=True, dtype=np.int64)
    return np.concatenate([edge, rand, small.astype(dtype)])


def _inputs(dtype, rng):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return _float_inputs(dtype, rng)
    if dtype == np.bool_:
        return rng.integers(0, 2, 64).astype(bool)
    return _int_inputs(dtype, rng)


def _accepts(prim, *avals, **params):
    try:
        prim.abstract_eval(*avals, **params)
        return True
    except (TypeError, ValueError):
        return False


UNARY_PARAMS = {"round": [{"rounding_method": 0}, {"rounding_method": 1}],
                "integer_pow": [{"y": 0}, {"y": 1}, {"y": 2}, {"y": 3}, {"y": 7}, {"y": -2}]}

DTYPES_32 = ["float32", "int32", "int8", "uint8", "uint32", "int16", "bool"]
DTYPES_64 = ["float64", "int64", "uint64"]


def _unary_cases(dtype):
    aval = functrans.core.ShapedArray((3,), dtype)
    cases = []
    for name, prim in sorted(ew.ELEMENTWISE_UNARY.items()):
        for params in UNARY_PARAMS.get(name, [{}]):
            if _accepts(prim, aval, **params):
                cases.append((name, prim, params))
    return cases


def _check_unary_family(dtype):
    rng = np.random.default_rng(0)
    x = _inputs(dtype, rng)
    cases = _unary_cases(dtype)
    assert cases

    def f(x):
        return [prim.bind(x, **params) for _, prim, params in cases]

    ours, ref = run_both(f, x)
    rtol, atol = _tolerance(np.dtype(dtype))
    for (name, _, params), a, b in zip(cases, ours, ref):
        if name == "population_count" and np.dtype(dtype).kind == "i":
            # JAX counts the bits of the two's-complement pattern; np.bitwise_count (used by
            # the reference) counts those of the absolute value
            b = np.bitwise_count(x.view(f"u{x.dtype.itemsize}")).astype(x.dtype)
        assert_close(a, b, rtol, atol, what=f"{name}{params or ''} on {dtype}")


@pytest.mark.parametrize("dtype", DTYPES_32)
def test_unary_elementwise(dtype):
    _check_unary_family(dtype)


@pytest.mark.parametrize("dtype", DTYPES_64)
def test_unary_elementwise_64bit(dtype, x64):
    _check_unary_family(dtype)


def test_elementwise_with_ieee_subnormals():
    """With subnormals not flushed (the option off), every function of a subnormal float32
    argument agrees with the reference too."""
    functrans.config.update("flush_denormals", False)
    assert 1e-40 in _special(np.float32)
    _check_unary_family("float32")
    _check_binary_family("float32")


def _binary_inputs(dtype, rng):
    x = _inputs(dtype, rng)
    if np.dtype(dtype).kind == "f":
        special = np.array(_special(dtype), dtype)
        grid_x, grid_y = np.meshgrid(special, special)
        y = rng.permutation(x)
        return (np.concatenate([grid_x.ravel(), x]), np.concatenate([grid_y.ravel(), y]))
    if np.dtype(dtype) == np.bool_:
        return x, rng.permutation(x)
    y = rng.permutation(x)
    y[:40] = np.arange(-3, 37).astype(dtype)  # shift counts, zero and -1 divisors
    return x, y


def _check_binary_family(dtype):
    rng = np.random.default_rng(1)
    x, y = _binary_inputs(dtype, rng)
    aval = functrans.core.ShapedArray((3,), dtype)
    cases = [(n, p) for n, p in sorted(ew.ELEMENTWISE_BINARY.items()) if _accepts(p, aval, aval)]

    def f(x, y):
        return [p.bind(x, y) for _, p in cases]

    # the reference cannot divide unsigned integers (it builds -1 in the unsigned dtype):
    # there NumPy's floor division with the -1 (all ones) result for y == 0 is the oracle
    unsigned = np.dtype(dtype).kind == "u"

    def reference(x, y):
        return [x if (unsigned and n == "div") else p.bind(x, y) for n, p in cases]

    ours = [np.asarray(o) for o in functrans.jit(f, backend="llvm")(x, y)]
    ref = [np.asarray(o) for o in functrans.jit(reference, backend="reference")(x, y)]
    rtol, atol = _tolerance(np.dtype(dtype))
    for (name, _), a, b in zip(cases, ours, ref):
        if name == "div" and np.dtype(dtype).kind == "i":
            b = _c_integer_division(x, y)
        if name == "div" and unsigned:
            b = np.where(y == 0, np.iinfo(x.dtype).max, x // np.where(y == 0, 1, y)).astype(x.dtype)
        assert_close(a, b, rtol, atol, what=f"{name} on {dtype}")


def _c_integer_division(x, y):
    """Quotients rounded toward zero, wrapping on overflow, -1 for division by zero (the
    reference's abs()-based formula goes wrong at the most negative integer)."""
    q = [(-1 if b == 0 else (abs(a) // abs(b)) * (1 if (a < 0) == (b < 0) else -1))
         for a, b in zip(x.tolist(), y.tolist())]
    bits = 8 * x.dtype.itemsize
    wrapped = [((v + 2 ** (bits - 1)) % 2 ** bits) - 2 ** (bits - 1) for v in q]
    return np.array(wrapped, dtype=x.dtype)


@pytest.mark.parametrize("dtype", DTYPES_32)
def test_binary_elementwise(dtype):
    _check_binary_family(dtype)


@pytest.mark.parametrize("dtype", DTYPES_64)
def test_binary_elementwise_64bit(dtype, x64):
    _check_binary_family(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_power_one_half_is_a_square_root_with_the_special_cases_of_pow(dtype, x64):
    """``x ** 0.5`` (Adam's denominator) compiles to a square root, not a libm ``pow`` call
    per element, and keeps pow's results: +0 for -0, +inf for -inf, NaN below zero."""
    rng = np.random.default_rng(3)
    x = _float_inputs(np.dtype(dtype), rng)
    f = lambda x: (x ** 0.5, jnp.power(x, 0.5))  # noqa: E731
    assert "ft_libm_pow" not in functrans.jit(f, backend="llvm").lower(x).as_text()
    ours, ref = run_both(f, x)
    rtol, atol = _tolerance(np.dtype(dtype))
    for a, b in zip(ours, ref):
        assert_close(a, b, rtol, atol, what=f"x ** 0.5 on {dtype}")
        number = ~np.isnan(b)
        np.testing.assert_array_equal(np.signbit(a[number]), np.signbit(b[number]))
    assert ours[0][list(x).index(-np.inf)] == np.inf
    negative_zero = np.flatnonzero((x == 0) & np.signbit(x))[0]
    assert ours[0][negative_zero] == 0 and not np.signbit(ours[0][negative_zero])


def test_convert_element_type_every_pair(x64):
    dtypes = ["bool", "int8", "uint8", "int16", "int32", "uint32", "int64", "uint64", "float32",
              "float64"]
    values = np.array([0, 1, -1, 2.5, -2.5, 127.9, 128, 255.5, 256, -129, 1e10, -1e10, 3e38,
                       np.inf, -np.inf, np.nan, 2 ** 31, -2 ** 31, 2 ** 63, 0.3])
    with np.errstate(invalid="ignore", over="ignore"):
        inputs = [values.astype(d) if np.dtype(d).kind == "f" else
                  np.nan_to_num(values, posinf=0, neginf=0).astype(np.int64).astype(d)
                  for d in dtypes]

    def f(*xs):
        return [lax.convert_element_type(x, d) for x in xs for d in dtypes]

    with np.errstate(invalid="ignore", over="ignore"):
        ours, ref = run_both(f, *inputs)
    names = [(s, d) for s in dtypes for d in dtypes]
    for (s, d), a, b in zip(names, ours, ref):
        assert_close(a, b, 0, 0, what=f"convert {s} -> {d}")


def test_select_n_clamp_and_empty_arrays():
    rng = np.random.default_rng(2)
    x, y, z = (rng.normal(size=(4, 5)).astype(np.float32) for _ in range(3))
    which = rng.integers(-1, 4, size=(4, 5)).astype(np.int32)

    def f(x, y, z, which):
        return [lax.select_n(x > 0, y, z), lax.select_n(which, x, y, z),
                lax.clamp(np.float32(-0.5), x, np.float32(0.5)), lax.clamp(y, x, y + 1),
                lax.select_n(True, x, y), lax.exp(x[:0]) + 1, lax.reduce_sum(x[:, :0], (1,)),
                lax.reduce_max(x[:0], (0,)), lax.reduce_min(x[:0], (0,))]

    ours, ref = run_both(f, x, y, z, which)
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert_close(a, b, 1e-6, 0, what=f"output {i}")


# =============================================================================================
# Broadcasts, reductions, data movement
# =============================================================================================


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_reductions_over_random_axes(data):
    ndim = data.draw(st.integers(1, 4))
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=ndim, max_size=ndim)))
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, ndim - 1), min_size=1))))
    dtype = data.draw(st.sampled_from(["float32", "int32", "bool"]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    x = (rng.normal(size=shape) * 4).astype(dtype) if dtype != "bool" else rng.random(shape) > 0.5
    prims = ["reduce_sum", "reduce_max", "reduce_min"] + (["reduce_prod"] if dtype != "bool" else [])
    if dtype == "float32":
        x = (x / 4).astype(np.float32)  # keep products tame

    def f(x):
        outs = [getattr(lax, p)(x, axes) for p in prims]
        # a reduction's operand fused with a broadcast of another reduction
        m = lax.reduce_max(x, axes)
        kept = [d for d in range(ndim) if d not in axes]
        back = lax.broadcast_in_dim(m, shape, tuple(kept))
        return outs + [lax.reduce_sum(lax.convert_element_type(back, np.float32), axes)]

    ours, ref = run_both(f, x)
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert_close(a, b, 1e-5, 1e-5, what=f"{(prims + ['sum(max)'])[i]} over {axes} of {shape}")


@settings(max_examples=20, deadline=None)
@given(st.data())
def test_broadcast_transpose_reshape(data):
    ndim = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    perm = tuple(data.draw(st.permutations(range(ndim))))
    extra = data.draw(st.integers(1, 3))
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape).astype(np.float32)

    def f(x):
        t = lax.transpose(jnp.sin(x), perm)
        b = lax.broadcast_in_dim(t, (extra,) + t.shape, tuple(range(1, ndim + 1)))
        flat = lax.reshape(b, (b.size,))
        return [t, b * 2, lax.reshape(flat, (extra, t.size)), flat]

    ours, ref = run_both(f, x)
    for a, b in zip(ours, ref):
        assert_close(a, b, 2e-6, 1e-6)


def test_data_movement_primitives():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(5, 6)).astype(np.float32)
    idx = np.array([-3, 0, 2, 4, 9], np.int32)

    def f(x, idx):
        outs = [x[1:4, ::2], x[::-1, 1:], jnp.concatenate([x, x * 2, x[:, :1]], axis=1),
                lax.pad(x, np.float32(7.0), ((1, 2, 1), (-1, 3, 0))),
                lax.rev(x, (0, 1)), lax.broadcasted_iota(np.int32, (3, 4), 1) * 2,
                lax.broadcasted_iota(np.float32, (3, 4), 0)]
        for i in range(idx.shape[0]):
            outs.append(lax.dynamic_slice(x, (idx[i], idx[-1 - i]), (3, 2)))
            outs.append(lax.dynamic_update_slice(x, jnp.full((2, 3), -1.0), (idx[i], idx[i])))
        return outs

    ours, ref = run_both(f, x, idx)
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert_close(a, b, 1e-6, 0, what=f"output {i}")


# =============================================================================================
# dot_general
# =============================================================================================

DOT_CASES = [
    ((4, 5), (5, 3), (((1,), (0,)), ((), ()))),          # plain matmul
    ((5, 4), (5, 3), (((0,), (0,)), ((), ()))),          # lhs transposed
    ((4, 5), (3, 5), (((1,), (1,)), ((), ()))),          # rhs transposed
    ((2, 4, 5), (2, 5, 3), (((2,), (1,)), ((0,), (0,)))),  # batched
    ((4, 2, 5), (5, 2, 3), (((2,), (0,)), ((1,), (1,)))),  # batch dim in the middle
    ((3, 4, 5), (4, 5, 2), (((1, 2), (0, 1)), ((), ()))),  # two contracting dims
    ((3, 5, 4), (4, 5, 2), (((1, 2), (1, 0)), ((), ()))),  # contracting dims out of order
    ((5,), (5,), (((0,), (0,)), ((), ()))),              # vector dot
    ((4, 0), (0, 3), (((1,), (0,)), ((), ()))),          # empty contraction
    ((2, 3), (4,), (((), ()), ((), ()))),                # outer product
]


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_dot_general(dtype):
    rng = np.random.default_rng(4)
    operands = []
    for ls, rs, _ in DOT_CASES:
        operands += [(rng.normal(size=ls) * 3).astype(dtype), (rng.normal(size=rs) * 3).astype(dtype)]

    def f(*ops):
        return [lax.dot_general(ops[2 * i], ops[2 * i + 1], dn) for i, (_, _, dn) in enumerate(DOT_CASES)]

    ours = functrans.jit(f, backend="llvm")(*operands)
    for i, ((ls, rs, ((lc, rc), (lb, rb))), out) in enumerate(zip(DOT_CASES, ours)):
        lhs, rhs = operands[2 * i], operands[2 * i + 1]
        letters = iter("abcdefghij")
        lsub = [next(letters) for _ in ls]
        rsub = [next(letters) for _ in rs]
        for a, b in zip(lc + lb, rc + rb):
            rsub[b] = lsub[a]
        lfree = [lsub[d] for d in range(len(ls)) if d not in lc + lb]
        rfree = [rsub[d] for d in range(len(rs)) if d not in rc + rb]
        spec = f"{''.join(lsub)},{''.join(rsub)}->{''.join([lsub[d] for d in lb] + lfree + rfree)}"
        expected = np.einsum(spec, lhs.astype(np.float64), rhs.astype(np.float64)).astype(dtype)
        assert_close(np.asarray(out), expected, 1e-5, 1e-4, what=f"dot case {i}: {spec}")


# products large enough to be split across the thread pool (codegen.gemm_split), every layout
SPLIT_GEMMS = [
    ("n", (128, 300), (300, 640), "ij,jk->ik"),        # columns of C, B as stored
    ("n", (128, 300), (640, 300), "ij,kj->ik"),        # columns of C, B transposed
    ("m", (700, 200), (200, 130), "ij,jk->ik"),        # rows of C, A as stored
    ("m", (200, 700), (200, 130), "ji,jk->ik"),        # rows of C, A transposed
    ("m", (515, 257), (257, 300), "ij,jk->ik"),        # an uneven last chunk
    ("batch", (8, 128, 160), (8, 160, 128), "bij,bjk->bik"),
    ("n", (32, 256), (256, 256), "ij,jk->ik"),          # two chunks of GEMM_CHUNK_EXTENT
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_split_matrix_products(dtype, x64):
    rng = np.random.default_rng(6)
    for axis, ls, rs, spec in SPLIT_GEMMS:
        lhs, rhs = rng.normal(size=ls).astype(dtype), rng.normal(size=rs).astype(dtype)
        fn = functrans.jit(lambda a, b, spec=spec: jnp.einsum(spec, a, b), backend="llvm")
        step = next(s for s in fn.lower(lhs, rhs).compile()._executable.program.steps
                    if isinstance(s, fusion.DotKernel))
        split, chunks = codegen.gemm_split(step)
        assert (split, chunks > 1) == (axis, True), (spec, split, chunks)
        expected = np.einsum(spec, lhs.astype(np.float64), rhs.astype(np.float64)).astype(dtype)
        tol = 1e-4 if dtype == "float32" else 1e-10
        assert_close(np.asarray(fn(lhs, rhs)), expected, tol, tol * ls[-1], what=spec)
    small = fusion.DotKernel(None, None, None, 1, 16, 128, 128, False, False)  # 0.5 MFLOP
    assert codegen.gemm_split(small, threads=2) == (None, 1)
    batched = fusion.DotKernel(None, None, None, 4, 32, 64, 256, False, False)  # 4 MFLOP
    assert codegen.gemm_split(batched, threads=2) == ("batch", 2)
    # one chunk per thread below GEMM_FINE_SPLIT_FLOPS, and the same split whatever the
    # load: it depends on the shape and thread count alone
    mlp = fusion.DotKernel(None, None, None, 1, 128, 512, 784, False, False)
    assert codegen.gemm_split(mlp, threads=2) == ("n", 2)
    assert codegen.gemm_split(mlp, threads=1) == (None, 1)


# products with one row or one column of C: BLAS's gemv (codegen.matrix_vector), every
# layout, scaled and accumulating ones (fused epilogues), batches, and one split in chunks
MATRIX_VECTOR = [
    ("m", (1, 300), (300, 70), "ij,jk->ik"),            # x @ w
    ("m", (1, 300), (70, 300), "ij,kj->ik"),            # x @ w.T
    ("m", (300, 1), (300, 70), "ji,jk->ik"),            # x.T @ w
    ("n", (70, 300), (300, 1), "ij,jk->ik"),            # w @ x
    ("n", (300, 70), (300, 1), "ji,jk->ik"),            # w.T @ x
    ("n", (70, 300), (1, 300), "ij,kj->ik"),            # w @ x.T
    ("m", (1, 300), (300, 1), "ij,jk->ik"),             # a dot product
    ("m", (5, 1, 64), (5, 64, 40), "bij,bjk->bik"),     # a batch of them
    ("m", (1, 2048), (2048, 1024), "ij,jk->ik"),        # split over the pool by columns
    ("n", (1024, 2048), (2048, 1), "ij,jk->ik"),        # ... by rows
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matrix_vector_products(dtype, x64):
    rng = np.random.default_rng(7)
    for kind, ls, rs, spec in MATRIX_VECTOR:
        lhs, rhs = rng.normal(size=ls).astype(dtype), rng.normal(size=rs).astype(dtype)
        out_shape = np.einsum(spec, lhs, rhs).shape
        base = rng.normal(size=out_shape).astype(dtype)
        fns = {"plain": lambda a, b, c, spec=spec: jnp.einsum(spec, a, b),
               "scaled and accumulated": lambda a, b, c, spec=spec: c - 0.5 * jnp.einsum(spec, a, b)}
        exact = np.einsum(spec, lhs.astype(np.float64), rhs.astype(np.float64))
        tol = 1e-4 if dtype == "float32" else 1e-10
        for name, fn in fns.items():
            jitted = functrans.jit(fn, backend="llvm")
            steps = jitted.lower(lhs, rhs, base).compile()._executable.program.steps
            step = next(s for s in steps if isinstance(s, fusion.DotKernel))
            assert codegen.matrix_vector(step) == kind, (spec, step.m, step.n)
            want = exact if name == "plain" else base - 0.5 * exact
            assert_close(np.asarray(jitted(lhs, rhs, base)), want.astype(dtype), tol,
                         tol * ls[-1], what=f"{spec} {name}")
    big = fusion.DotKernel(None, None, None, 1, 1, 1024, 2048, False, False)
    assert codegen.gemm_split(big, threads=2) == ("n", 2)


def test_dot_with_fused_operands_and_grad():
    rng = np.random.default_rng(5)
    w = rng.normal(size=(6, 4)).astype(np.float32)
    x = rng.normal(size=(3, 6)).astype(np.float32)

    def loss(w, x):
        h = jnp.tanh(x @ w + 1.0)
        return jnp.sum(h.T @ h)

    ours, ref = run_both(lambda w, x: functrans.value_and_grad(loss)(w, x), w, x)
    for a, b in zip(ours, ref):
        assert_close(a, b, 2e-5, 1e-5)


# =============================================================================================
# Random programs
# =============================================================================================

_UNARY_SAFE = ["tanh", "sin", "abs", "neg", "logistic", "square", "exp_tanh", "cos", "log1p_abs"]


def _apply_unary(name, x):
    if name == "exp_tanh":
        return jnp.exp(jnp.tanh(x))
    if name == "log1p_abs":
        return jnp.log1p(jnp.abs(x))
    return getattr(lax, name)(x)


@st.composite
def random_programs(draw):
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    steps = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["unary", "binary", "reduce", "bcast", "transpose", "dot",
                                     "reshape", "cond", "scan", "while", "gather",
                                     "scatter"]))
        steps.append((kind, draw(st.sampled_from(_UNARY_SAFE)),
                      draw(st.sampled_from(["add", "mul", "sub", "max", "min"])),
                      draw(st.integers(0, 100))))
    return shape, steps


def _build_program(steps):
    def f(x, y):
        values = [x, y]
        for kind, unary, binary, seed in steps:
            v = values[seed % len(values)]
            w = values[(seed // 7) % len(values)]
            if kind == "unary":
                out = _apply_unary(unary, v)
            elif kind == "binary":
                if v.shape != w.shape:
                    w = jnp.broadcast_to(jnp.sum(w), v.shape)
                out = getattr(lax, binary)(v, w)
            elif kind == "reduce" and v.ndim:
                axes = tuple(d for d in range(v.ndim) if (seed >> d) & 1) or (0,)
                out = getattr(lax, ["reduce_sum", "reduce_max", "reduce_min"][seed % 3])(v, axes)
            elif kind == "bcast":
                out = lax.broadcast_in_dim(v, (2,) + v.shape, tuple(range(1, v.ndim + 1)))
            elif kind == "transpose" and v.ndim:
                out = lax.transpose(v, tuple(reversed(range(v.ndim))))
            elif kind == "dot" and v.ndim >= 1:
                out = lax.dot_general(v, v, (((v.ndim - 1,), (v.ndim - 1,)), ((), ())))
            elif kind == "reshape":
                out = lax.reshape(v, (v.size,))
            elif kind == "cond":
                out = lax.cond(jnp.sum(v) > 0, lambda a, b: _apply_unary(unary, a) + b,
                               lambda a, b: getattr(lax, binary)(a, a) * 0.5, v, jnp.sum(w))
            elif kind == "scan" and v.ndim:
                def step(c, x):
                    c = getattr(lax, binary)(c, _apply_unary(unary, x))
                    return c, c * 0.5 + x
                carry, ys = lax.scan(step, jnp.zeros(v.shape[1:], v.dtype), v,
                                     reverse=bool(seed & 1))
                out = ys + carry
            elif kind == "gather" and v.ndim:
                # data-dependent positions, some out of range (clamped, as the reference)
                positions = lax.convert_element_type(jnp.floor(w * 3), np.int32)
                positions = jnp.reshape(positions, (-1,))[: 2 * v.shape[0] + 1]
                out = v[positions]
            elif kind == "scatter" and v.ndim:
                positions = lax.convert_element_type(jnp.floor(jnp.reshape(w, (-1,)) * 3),
                                                     np.int32)
                rows = jnp.broadcast_to(
                    jnp.reshape(_apply_unary(unary, w), (-1,) + (1,) * (v.ndim - 1)),
                    (positions.shape[0],) + v.shape[1:])
                out = v.at[positions].add(rows) if seed & 1 else v.at[positions].max(rows)
            elif kind == "while":
                def body(i, c):
                    return jnp.tanh(getattr(lax, binary)(c, c)) + lax.convert_element_type(
                        i, np.float32) * 0.1
                out = lax.fori_loop(0, seed % 4, body, v)
            else:
                out = lax.tanh(v)
            if out.size > 4096:
                out = lax.reduce_sum(out, tuple(range(out.ndim)))
            values.append(out)
        return values[2:]
    return f


@settings(max_examples=25, deadline=None)
@given(random_programs(), st.integers(0, 2 ** 16))
def test_random_programs_match_reference(program, seed):
    shape, steps = program
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(np.float32)
    y = rng.normal(size=shape).astype(np.float32)
    f = _build_program(steps)
    ours, ref = run_both(f, x, y)
    for i, (a, b) in enumerate(zip(ours, ref)):
        scale = max(1.0, float(np.max(np.abs(b[np.isfinite(b)]), initial=0)))
        assert_close(a, b, 1e-4, 1e-5 * scale, what=f"value {i} of {steps}")


def _level_this_machine_runs():
    """x86-64-v2 (no fused multiply-add: its float32 math rounds differently), else
    x86-64-v3, when this machine runs code for it; else None."""
    from functrans.backends.llvm import targets
    if not targets.host().triple.startswith(("x86_64", "amd64")):
        return None
    for name in ("x86-64-v2", "x86-64-v3"):
        if not targets.missing_features(targets.resolve(name)):
            return name
    return None


@settings(max_examples=10, deadline=None)
@given(random_programs(), st.integers(0, 2 ** 16))
def test_random_programs_agree_across_target_cpus(program, seed):
    # the same program compiled for this CPU and for an x86-64 level: each within the
    # functions' ulp bounds of exact (primitive_table.FLOAT32_MATH_ULPS), so within the
    # tolerance the reference comparison above allows of each other
    level = _level_this_machine_runs()
    if level is None:
        pytest.skip("this machine runs code for one target CPU only")
    shape, steps = program
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(np.float32)
    y = rng.normal(size=shape).astype(np.float32)
    f = _build_program(steps)
    leaves = functrans.tree_util.tree_leaves
    here = leaves(functrans.jit(f, compiler_options={"target_cpu": "native"})(x, y))
    there = leaves(functrans.jit(f, compiler_options={"target_cpu": level})(x, y))
    for i, (a, b) in enumerate(zip(there, here)):
        a, b = np.asarray(a), np.asarray(b)
        scale = max(1.0, float(np.max(np.abs(b[np.isfinite(b)]), initial=0)))
        assert_close(a, b, 1e-4, 1e-5 * scale, what=f"value {i} of {steps} ({level})")


# =============================================================================================
# Control flow: native loops and branches
# =============================================================================================


def _native_kinds(f, *args):
    exe = pipeline.compile_jaxpr(functrans.make_jaxpr(f)(*args))
    return [kind for kind, _ in exe._schedule]


def _check_against_reference(f, *args, rtol=2e-6, atol=1e-6):
    ours, ref = run_both(f, *args)
    assert len(ours) == len(ref)
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert_close(a, b, rtol, atol, what=f"result {i}")


def test_while_scan_cond_compile_to_one_native_segment():
    rng = np.random.default_rng(11)
    x = rng.normal(size=(3, 4)).astype(np.float32)
    xs = rng.normal(size=(6, 3, 4)).astype(np.float32)

    def while_f(x):
        def body(c):
            i, v, total = c
            return i + 1, jnp.sin(v) + 1.0, total + jnp.sum(v)
        return lax.while_loop(lambda c: c[0] < 7, body, (0, x, np.float32(0)))

    def scan_f(x, xs):
        def step(c, xi):
            h = jnp.tanh(c @ jnp.ones((4, 4), np.float32) * 0.1 + xi)
            return h, (h * 2, c)  # ys: a new value and the incoming carry passed through
        return lax.scan(step, x, xs), lax.scan(lambda c, xi: (c + xi, c), x, xs, reverse=True)

    def cond_f(p, i, x):
        a = lax.cond(p > 0, lambda x: jnp.exp(x), lambda x: x * 2, x)
        b = lax.switch(i, [lambda x: x + 1, lambda x: x * 3, lambda x: -x], x)
        return a, b

    def nested_f(x, xs):
        def step(c, xi):
            c = lax.cond(jnp.sum(xi) > 0, lambda c: c + xi, lambda c: c - xi, c)
            c = lax.fori_loop(0, 3, lambda k, c: c * 0.5 + 1.0, c)
            return c, jnp.max(c)
        return lax.scan(step, x, xs)

    cases = [(while_f, x), (scan_f, x, xs), (nested_f, x, xs)]
    for p in (1.0, -1.0):
        for i in (-5, 0, 1, 2, 9):  # out-of-range indices are clamped
            cases.append((cond_f, np.float32(p), np.int32(i), x))
    for f, *args in cases:
        assert _native_kinds(f, *args) == ["native"], f.__name__
        _check_against_reference(f, *args)


def _control_steps(f, *args):
    from functrans.backends.llvm import control_flow
    program = functrans.jit(f, backend="llvm").lower(*args).compile()._executable.program
    return [s for s in program.steps if isinstance(s, control_flow.ControlStep)]


def test_carries_updated_in_place_only_when_nothing_else_reads_them():
    """A carry that is passed through, rewritten element by element or accumulated onto by a
    product keeps one buffer (no copy per iteration); one that is also a per-step output,
    read after its update, swapped with another or read at other elements keeps two."""
    rng = np.random.default_rng(13)
    x, w = rng.normal(size=(6, 5)).astype(np.float32), rng.normal(size=(5, 5)).astype(np.float32)
    xs = rng.normal(size=(7, 6, 5)).astype(np.float32)

    def in_place(x, w, xs):
        def step(carry, xi):
            acc, h, fixed = carry
            g = jnp.tanh(xi @ w + fixed)
            return (acc - 0.5 * (xi.T @ g), h * 0.9 + g, fixed), jnp.sum(g)
        zero = jnp.zeros_like(w)
        out = lax.scan(step, (zero, x, x + 1.0), xs)
        loop = lax.fori_loop(0, 5, lambda i, c: (c[0] * 0.5 + c[1], c[1]), (x, x * 2.0))
        return out, loop

    def kept(x, xs):
        def step(carry, xi):
            a, b, c, d = carry
            a2 = a * 2.0 + xi
            return (a2, c, b, jnp.roll(d, 1, axis=1) + xi), (a2, jnp.sum(d))
        return lax.scan(step, (x, x + 1.0, x - 1.0, x * 3.0), xs)

    scan, loop = _control_steps(in_place, x, w, xs)
    assert scan.in_place == {0, 1, 2} and loop.in_place == {0, 1}
    accumulating = [s for s in scan.body.program.steps if isinstance(s, fusion.DotKernel)
                    and s.accumulate]
    assert [d.out for d in accumulating] == [scan.body.program.inputs[scan.num_consts]]
    _check_against_reference(in_place, x, w, xs, rtol=2e-5, atol=2e-5)
    (scan,) = _control_steps(kept, x, xs)
    assert scan.in_place == set()
    _check_against_reference(kept, x, xs)
    # reverse mode through the in-place scan (its transpose accumulates gradients in place)
    loss = lambda w, x, xs: jnp.sum(in_place(x, w, xs)[0][0][0] ** 2)  # noqa: E731
    gw = functrans.jit(functrans.grad(loss), backend="llvm")(w, x, xs)
    gw_ref = functrans.jit(functrans.grad(loss), backend="reference")(w, x, xs)
    assert_close(np.asarray(gw), np.asarray(gw_ref), rtol=1e-4, atol=1e-4)


_CARRY_UPDATES = ["pass", "scale", "accumulate", "swap", "roll", "also_y", "read_after"]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(_CARRY_UPDATES), min_size=1, max_size=4),
       st.booleans(), st.integers(0, 2 ** 16))
def test_random_scan_carries_match_reference(updates, use_while, seed):
    """Scans and fori loops whose carries are passed through, rewritten, accumulated onto by
    products, swapped, shifted, emitted and read after their update, in any mix: whichever
    of them run in place, the numbers are the reference's."""
    rng = np.random.default_rng(seed)
    xs = rng.normal(size=(5, 3, 4)).astype(np.float32)
    init = [rng.normal(size=(4, 4) if u == "accumulate" else (3, 4)).astype(np.float32)
            for u in updates]

    def step(carry, x):
        new, ys = [], [jnp.sum(x)]
        for k, (u, c) in enumerate(zip(updates, carry)):
            if u == "pass":
                new.append(c)
            elif u == "scale":
                new.append(c * 0.5 + x)
            elif u == "accumulate":
                new.append(c - 0.25 * (x.T @ jnp.tanh(x)))
            elif u == "swap":  # takes the next carry of the same shape, if any
                j = next((j for j in range(k + 1, len(carry)) if carry[j].shape == c.shape), k)
                new.append(carry[j] + 0.0 if j == k else carry[j])
            elif u == "roll":
                new.append(jnp.roll(c, 1, axis=1) + x)
            elif u == "also_y":
                c2 = c * 1.5 - x
                new.append(c2)
                ys.append(jnp.sum(c2))
            else:  # read_after: the old value is read after the new one exists
                c2 = c + x
                new.append(c2)
                ys.append(jnp.sum(c2 * c))
        return tuple(new), jnp.stack(ys)

    def f(init, xs):
        if use_while:
            return lax.fori_loop(0, xs.shape[0], lambda i, c: step(c, xs[i])[0], tuple(init))
        return lax.scan(step, tuple(init), xs)

    ours, ref = run_both(f, init, xs)
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert_close(a, b, 1e-5, 1e-5, what=f"value {i} of {updates}")


def test_empty_scan_and_loop_that_never_runs():
    x = np.arange(4, dtype=np.float32)

    def f(x):
        c, ys = lax.scan(lambda c, xi: (c + xi, c * xi), x, jnp.zeros((0, 4), np.float32))
        w = lax.while_loop(lambda v: v[0] > 100.0, lambda v: v * 2.0, x)
        return c, ys, w

    assert _native_kinds(f, x) == ["native"]
    _check_against_reference(f, x)


def test_control_flow_with_unsupported_body_falls_back():
    x = np.random.default_rng(3).normal(size=(4, 5)).astype(np.float32)

    def f(x):  # eigvalsh has no kernel: the scan runs in Python around compiled bodies
        def body(c, xi):
            w = jnp.linalg.eigvalsh(jnp.outer(xi, xi) + 5.0 * jnp.eye(5))
            return c + w, c
        return lax.scan(body, x[0], x)

    assert "numpy" in _native_kinds(f, x)
    description = functrans.jit(f).lower(x).compile()._executable.description
    assert "around compiled bodies scan" in description
    _check_against_reference(f, x)


def _rnn_loss(params, xs, targets):
    wx, wh, b, wo = params
    h0 = jnp.zeros((xs.shape[1], wh.shape[0]), np.float32)

    def step(h, x):
        return jnp.tanh(x @ wx + h @ wh + b), None
    h, _ = lax.scan(step, h0, xs)
    err = (h @ wo)[:, 0] - targets
    return jnp.sum(err * err) / err.shape[0]


def test_rnn_value_and_grad_is_one_native_call():
    rng = np.random.default_rng(5)
    params = (rng.normal(size=(3, 8)).astype(np.float32) * 0.5,
              rng.normal(size=(8, 8)).astype(np.float32) * 0.3,
              np.zeros(8, np.float32), rng.normal(size=(8, 1)).astype(np.float32))
    xs = rng.normal(size=(12, 2, 3)).astype(np.float32)
    targets = rng.normal(size=2).astype(np.float32)
    f = functrans.value_and_grad(_rnn_loss)
    assert _native_kinds(f, params, xs, targets) == ["native"]
    _check_against_reference(f, params, xs, targets, rtol=2e-5, atol=1e-6)


# =============================================================================================
# Gather and scatter
# =============================================================================================


def test_gather_and_scatter_are_native_and_match_the_reference():
    rng = np.random.default_rng(12)
    x = rng.normal(size=(7, 5)).astype(np.float32)
    idx = np.array([0, 6, -1, 3, 9, -10, 3], np.int32)  # out of range and repeated

    def indexing(x, i):
        return (x[i], x[:, i % 5] * 2, jnp.take(x, i, axis=0, mode="fill", fill_value=-1.0),
                x[i, i % 5], functrans.vmap(lambda r, j: r[j])(x, i % 5))

    def updates(x, i):  # out-of-range updates are dropped
        return (x.at[i].add(1.0), x.at[i].set(5.0), x.at[i].max(0.5), x.at[i].min(0.0),
                x.at[i].mul(2.0), x.at[i, i % 5].add(3.0),
                x.at[i].add(jnp.ones((7, 5), np.float32), mode="clip"))

    def gradient(x, i):  # the transpose of a gather is a scatter-add
        return functrans.grad(lambda x: jnp.sum(jnp.sin(x[i]) * x[i]))(x)

    for f in (indexing, updates, gradient):
        closed = functrans.make_jaxpr(f)(x, idx)
        assert {"gather", "scatter", "scatter_add"} & {e.primitive.name for e in closed.eqns}
        assert _native_kinds(f, x, idx) == ["native"], f.__name__
        _check_against_reference(f, x, idx)


def test_integer_and_dynamic_update_slice_indexing():
    x = np.arange(24, dtype=np.int32).reshape(6, 4)
    idx = np.array([5, 0, 2, 2, 7], np.int64)

    def f(x, i):
        y = lax.dynamic_update_slice(x, x[:2] * 10, (i[0], np.int64(1)))
        return y, x[i].sum(axis=0), x.at[i].add(x[:5]), x.at[i].set(-x[:5])

    assert _native_kinds(f, x, idx) == ["native"]
    _check_against_reference(f, x, idx)


# =============================================================================================
# Parallel loops
# =============================================================================================


def test_large_loops_run_in_parallel_chunks():
    rng = np.random.default_rng(8)
    x = rng.normal(size=(600, 700)).astype(np.float32)
    x[5, 7] = 1e9  # far outside sin's fast range: that chunk reruns the exact path

    def f(x):
        m = jnp.max(x, axis=1, keepdims=True)
        lse = jnp.log(jnp.sum(jnp.exp(x - m), axis=1)) + m[:, 0]
        return jnp.sin(x) * 2 + jnp.tanh(x), lse, jnp.sum(x, axis=0)

    text = functrans.jit(f, backend="llvm").lower(x).compile().as_text()
    assert codegen.PARALLEL_MIN_ELEMENTS <= x.size and "ft_parallel_for" in text
    _check_against_reference(f, x, rtol=2e-5, atol=1e-5)


def test_mid_sized_loops_use_the_pool_only_beside_split_products(monkeypatch):
    """A 64K-element loop runs on the pool in a program whose large product is split there
    (the workers are awake anyway), and that product holds BLAS to one thread; a program
    without split products keeps its loop to the calling thread, and its small product
    (which BLAS runs on one thread anyway) takes no hold."""
    monkeypatch.setenv("FUNCTRANS_NUM_THREADS", "2")
    rng = np.random.default_rng(12)
    x = rng.normal(size=(256, 256)).astype(np.float32)
    small = rng.normal(size=(4, 256)).astype(np.float32)  # a product too small to split
    a = rng.normal(size=(128, 784)).astype(np.float32)
    w = rng.normal(size=(784, 512)).astype(np.float32)
    assert codegen.POOLED_MIN_ELEMENTS <= x.size < codegen.PARALLEL_MIN_ELEMENTS

    def with_split(x, small, a, w):
        return jnp.tanh(x) * 2 + 1, jnp.dot(small, x), jnp.dot(a, w)

    def without_split(x, small):
        return jnp.tanh(x) * 2 + 1, jnp.dot(small, x)

    pooled = functrans.jit(with_split, backend="llvm").lower(x, small, a, w).compile().as_text()
    plain = functrans.jit(without_split, backend="llvm").lower(x, small).compile().as_text()
    for name in (codegen.GEMM_FOR_SYMBOL, "ft_parallel_for", thread_pool.BLAS_HOLD_SYMBOL):
        assert name in pooled, name
    for name in (codegen.GEMM_FOR_SYMBOL, "ft_parallel_for", thread_pool.BLAS_HOLD_SYMBOL):
        assert name not in plain, name
    _check_against_reference(with_split, x, small, a, w, rtol=2e-5, atol=2e-4)
    _check_against_reference(without_split, x, small, rtol=2e-5, atol=1e-4)


def test_parallel_loops_from_several_python_threads():
    """Threads that find the pool busy run their chunks themselves: same numbers, no hang."""
    f = functrans.jit(lambda x, s: jnp.tanh(x * s) + jnp.sum(x, axis=1, keepdims=True),
                      backend="llvm")
    x = np.random.default_rng(9).normal(size=(256, 512)).astype(np.float32)
    expected = {s: np.asarray(f(x, np.float32(s))) for s in range(4)}
    failures = []

    def worker(s):
        for _ in range(20):
            if not np.array_equal(np.asarray(f(x, np.float32(s))), expected[s]):
                failures.append(s)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and not failures


def test_pool_with_a_busy_thread_on_its_cores():
    """A CPU-bound thread sharing the cores: workers that see it take their time sleep
    between jobs instead of spinning against it (thread_pool's contention check); every
    call still finishes with the same numbers."""
    rng = np.random.default_rng(10)
    x = rng.normal(size=(512, 512)).astype(np.float32)
    w = rng.normal(size=(512, 512)).astype(np.float32)
    f = functrans.jit(lambda x, w: (jnp.tanh(x) * 2.0 + 1.0, x @ w), backend="llvm")
    expected = [np.asarray(a) for a in f(x, w)]
    stop = threading.Event()

    def hog():
        if hasattr(os, "sched_setaffinity"):
            try:
                os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
            except OSError:
                pass
        while not stop.is_set():
            sum(range(1000))

    thread = threading.Thread(target=hog, daemon=True)
    thread.start()
    try:
        for _ in range(30):
            got = [np.asarray(a) for a in f(x, w)]
            assert all(np.array_equal(a, b) for a, b in zip(got, expected))
    finally:
        stop.set()
        thread.join(timeout=10)


_SHARED_CORE_SCRIPT = textwrap.dedent("""
    import os, sys
    if sys.argv[1] == "shared":  # the caller and the worker on one core: the worker starves
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    import numpy as np, functrans, functrans.numpy as jnp
    from functrans.backends.llvm import thread_pool
    rng = np.random.default_rng(3)
    x = rng.normal(size=(512, 512)).astype(np.float32)
    w = rng.normal(size=(512, 256)).astype(np.float32)
    f = functrans.jit(lambda x, w: (jnp.tanh(x) * 2.0 + 1.0, x @ w))
    first = [np.asarray(a).tobytes() for a in f(x, w)]
    same = all([np.asarray(a).tobytes() for a in f(x, w)] == first for _ in range(300))
    print(same, first[0].hex()[:64], first[1].hex()[:64], thread_pool.stats())
""")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_a_starved_worker_pauses_the_pool(tmp_path):
    """Two pool threads on one core: the worker notices it does not get its core, and the
    next parallel loops run on the calling thread alone (``contended_jobs``) for a pause
    that has grown; the numbers are those of an unshared run, bitwise."""
    runs = {}
    for mode in ("shared", "unshared"):
        env = dict(os.environ, FUNCTRANS_NUM_THREADS="2", FUNCTRANS_CACHE_DIR=str(tmp_path))
        out = subprocess.run([sys.executable, "-c", _SHARED_CORE_SCRIPT, mode], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        same, a, b, stats = out.stdout.strip().split(" ", 3)
        runs[mode] = (same, a, b, eval(stats))
    shared, unshared = runs["shared"], runs["unshared"]
    assert shared[0] == unshared[0] == "True"
    assert shared[1:3] == unshared[1:3]
    assert shared[3]["contended_jobs"] > 0 and shared[3]["pause_ns"] > 0, shared[3]
    assert shared[3]["pooled_jobs"] + shared[3]["contended_jobs"] >= 300


_THREADS_SCRIPT = textwrap.dedent("""
    import numpy as np, functrans, functrans.numpy as jnp
    from functrans.backends.llvm import thread_pool
    x = np.linspace(-3, 3, 1 << 18, dtype=np.float32).reshape(512, 512)
    f = functrans.jit(lambda x: (jnp.tanh(x) * jnp.exp(-x * x), jnp.sum(jnp.sin(x), axis=1)))
    a, b = f(x)
    print(thread_pool.workers(), float(np.asarray(a).sum()), np.asarray(b).tobytes().hex())
""")


def test_thread_count_follows_the_environment(tmp_path):
    results = []
    for n in ("1", "3"):
        env = dict(os.environ, FUNCTRANS_NUM_THREADS=n, FUNCTRANS_CACHE_DIR=str(tmp_path))
        out = subprocess.run([sys.executable, "-c", _THREADS_SCRIPT], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        results.append(out.stdout.split())
    assert [r[0] for r in results] == ["0", "2"]  # workers besides the calling thread
    assert results[0][1:] == results[1][1:]  # chunking never changes the numbers


# =============================================================================================
# Fallbacks, inlined calls, errors, text
# =============================================================================================


def test_unsupported_primitives_run_between_compiled_segments():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(4, 5)).astype(np.float32)

    def f(x):
        s = jnp.sort(jnp.exp(x), axis=1)  # sort has no kernel: NumPy, between two segments
        return jnp.sum(s * 2, axis=0), lax.digamma(jnp.abs(x) + 1.0) + 1.0

    ours, ref = run_both(f, x)
    for a, b in zip(ours, ref):
        assert_close(a, b, 2e-6, 1e-6)
    exe = pipeline.compile_jaxpr(functrans.make_jaxpr(f)(x))
    kinds = [kind for kind, _ in exe._schedule]
    assert "numpy" in kinds and "native" in kinds


def test_nested_jit_is_inlined_and_fused():
    inner = functrans.jit(lambda x: jnp.exp(x) * 2)
    x = np.linspace(-1, 1, 7).astype(np.float32)
    closed = functrans.make_jaxpr(lambda x: inner(x) + inner(x + 1))(x)
    assert [e.primitive.name for e in closed.eqns].count("jit") == 2
    exe = pipeline.compile_jaxpr(closed)
    np.testing.assert_allclose(exe(x)[0], np.exp(x) * 2 + np.exp(x + 1) * 2, rtol=2e-6)
    assert exe.as_text().count("loop[") == 1  # one fused kernel across both calls


def test_rebound_variables_read_the_latest_binding():
    a = functrans.core.Var(functrans.core.ShapedArray((3,), np.float32))
    b = functrans.core.Var(functrans.core.ShapedArray((3,), np.float32))
    exp, neg = ew.exp_p, ew.neg_p
    eqns = [functrans.core.Eqn(exp, [a], [b], {}), functrans.core.Eqn(neg, [b], [b], {})]
    closed = functrans.core.ClosedJaxpr(functrans.core.Jaxpr([], [a], [b], eqns), [])
    x = np.array([0.0, 1.0, 2.0], np.float32)
    np.testing.assert_allclose(pipeline.compile_jaxpr(closed)(x)[0], -np.exp(x), rtol=2e-6)


def test_as_text_is_llvm_ir():
    f = functrans.jit(lambda x: jnp.tanh(x) + 1, backend="llvm")
    text = f.lower(np.ones(3, np.float32)).compile().as_text()
    assert "define i32 @\"ft_segment_0\"" in text and "tanh" in text


def test_elementwise_loops_are_not_interleaved_reductions_are():
    """Loops whose iterations are independent ask LLVM for one vector per iteration (an
    interleaved loop compiles to several times the code for no speed); a reduction's loop,
    whose several interleaved accumulators do shorten its chain, keeps the default."""
    import re

    def f(x, y):
        return jnp.tanh(x) * y + 1, jnp.sum(x * y, axis=1)

    x = np.random.default_rng(13).normal(size=(64, 96)).astype(np.float32)
    y = np.random.default_rng(14).normal(size=(64, 96)).astype(np.float32)
    text = functrans.jit(f, backend="llvm").lower(x, y).compile().as_text()
    hint = re.search(r'^(!\d+) = !{ !"llvm.loop.interleave.count", i32 1 }$', text, re.M)
    assert hint, "no interleave hint in the module"
    loop_id = re.search(rf"^(!\d+) = distinct !{{ \1, {hint.group(1)} }}$", text, re.M)
    assert loop_id, "the loop ID must be distinct and name itself first"
    functions = dict(re.findall(r'define [^@]*@"?([\w.]+)"?\(.*?\n(.*?)\n}', text, re.S))
    tagged = {name for name, body in functions.items() if f"!llvm.loop {loop_id.group(1)}" in body}
    elementwise = [name for name in functions if name.startswith("k") and "tanh" in name]
    reductions = [name for name in functions if name.startswith("k") and "reduce_sum" in name]
    assert elementwise and reductions, sorted(functions)
    assert set(elementwise) <= tagged
    assert not set(reductions) & tagged
    _check_against_reference(f, x, y, rtol=2e-5, atol=1e-5)


def test_llvm_errors_name_the_primitive_and_dump_the_ir():
    bad_ir = textwrap.dedent("""
        define internal void @"k1_exp_mul"(float* %a) {
        entry:
          %x = fadd float 1.0, i32 2
          ret void
        }
    """)
    with pytest.raises(codegen.LLVMCompileError) as info:
        codegen.optimize_and_emit(bad_ir, {"k1_exp_mul": "the kernel fusing [exp, mul]"})
    message = str(info.value)
    assert "exp, mul" in message
    path = message.rsplit("written to ", 1)[1].strip()
    assert os.path.exists(path) and "k1_exp_mul" in open(path).read()
    os.unlink(path)


def test_index_simplification_removes_reshape_divisions():
    i, j = exprs.ivar(0, 6), exprs.ivar(1, 4)
    flat = exprs.linearize([i, j], [6, 4])
    f = exprs.ivar(0, 24)
    back = exprs.substitute([flat], dict(zip([i, j], exprs.delinearize(f, [6, 4]))))[0]
    assert back is f
    shape, _, roots = fusion.collapse_dims((6, 4), (0, 0), [flat])
    assert shape == (24,) and roots[0].kind == "var"


def test_default_backend_is_llvm():
    assert _backends.get_backend(None).name == "llvm"


# =============================================================================================
# The persistent cache
# =============================================================================================

_CACHE_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import functrans, functrans.numpy as jnp
    from functrans.backends.llvm import pipeline
    f = functrans.jit(lambda x: jnp.sum(jnp.exp(x) * jnp.sin(x), axis=0), backend="llvm")
    out = f(np.arange(12, dtype=np.float32).reshape(3, 4) / 10)
    print(json.dumps({"stats": pipeline.stats, "out": np.asarray(out).tolist()}))
""")


def _run_cache_script(cache_dir):
    env = dict(os.environ, FUNCTRANS_CACHE_DIR=str(cache_dir), FUNCTRANS_DEFAULT_BACKEND="")
    result = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_cache_hit_in_a_second_process(tmp_path):
    first = _run_cache_script(tmp_path)
    second = _run_cache_script(tmp_path)
    assert first["stats"] == {"compiled": 1, "cache_hits": 0}
    assert second["stats"] == {"compiled": 0, "cache_hits": 1}
    assert first["out"] == second["out"]


def test_corrupt_cache_entries_are_recompiled(cache_in):
    tmp_path = cache_in
    closed = functrans.make_jaxpr(lambda x: jnp.cos(x) * 3)(np.ones(5, np.float32))
    x = np.linspace(0, 1, 5).astype(np.float32)
    expected = np.cos(x) * 3
    pipeline.compile_jaxpr(closed)
    entries = list(tmp_path.rglob("*.bin"))
    assert len(entries) == 1
    good = entries[0].read_bytes()
    for corrupt in (good[: len(good) // 2], good[:-10] + b"x" * 10, b"", b"garbage"):
        entries[0].write_bytes(corrupt)
        before = dict(pipeline.stats)
        exe = pipeline.compile_jaxpr(closed)
        np.testing.assert_allclose(exe(x)[0], expected, rtol=2e-6)
        assert pipeline.stats["compiled"] == before["compiled"] + 1
        assert entries[0].read_bytes() != corrupt  # rewritten with a good entry
    assert not list(tmp_path.rglob(".tmp-*"))  # no half-written files left behind


# =============================================================================================
# The GIL is released during compiled calls
# =============================================================================================


def test_compiled_calls_release_the_gil():
    """While one thread is inside a compiled call, another thread keeps running Python."""

    def heavy(x):
        for _ in range(60):
            x = jnp.sin(x) * 1.01 + jnp.tanh(x)
        return x

    f = functrans.jit(heavy, backend="llvm")
    x = np.random.default_rng(7).normal(size=1 << 18).astype(np.float32)
    f(x)
    started, done = threading.Event(), threading.Event()
    window = []
    # A long switch interval: the main thread only runs while the worker has released the GIL
    # on its own, so stamps inside the call window prove the native call released it.
    previous_interval = sys.getswitchinterval()
    sys.setswitchinterval(0.2)

    def worker():
        started.set()
        t0 = time.perf_counter()
        f(x)
        window.extend([t0, time.perf_counter()])
        done.set()

    try:
        thread = threading.Thread(target=worker)
        thread.start()
        started.wait()
        stamps = []
        while not done.is_set():
            stamps.append(time.perf_counter())
        thread.join()
    finally:
        sys.setswitchinterval(previous_interval)
    t0, t1 = window
    inside = sum(t0 < t < t1 for t in stamps)
    # with the GIL held during the native call, this thread could not run inside the window
    assert inside > 100, (inside, t1 - t0)
