"""The cuda backend.

Three layers, each skipped with its reason when the machine lacks what it needs:

* always: the backend imports and registers itself as unavailable without CuPy, the code
  generator covers the elementwise table and picks index types and reduction strategies;
* with ``nvcc``: every case below (each elementwise primitive on several dtypes, fused
  programs, seeded random programs) is generated into ONE translation unit, compiled once
  with ``nvcc -shared`` (device code included), and each program's schedule is run on the CPU
  with the kernel bodies compiled as host code, against the reference interpreter;
* with CuPy and a GPU: the same cases through ``jit(f, backend="cuda")``, device-array
  inputs, CUDA graphs, and NCCL collectives on a one-GPU group.
"""
from __future__ import annotations

import numpy as np
import pytest

import functrans
from functrans import test_util
import functrans.numpy as jnp
from functrans import _backends, lax
from functrans.backends.cuda import codegen, host_emulation, runtime, scalar_ops
from functrans.backends.reference.interpreter import eval_jaxpr_numpy
from functrans.primitives import elementwise as ew

BF16 = scalar_ops.BFLOAT16
F16 = np.dtype(np.float16)
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
I8, I32, I64 = np.dtype(np.int8), np.dtype(np.int32), np.dtype(np.int64)
U8, U32, U64 = np.dtype(np.uint8), np.dtype(np.uint32), np.dtype(np.uint64)
BOOL = np.dtype(np.bool_)

needs_nvcc = pytest.mark.skipif(host_emulation.nvcc_path() is None,
                                reason="nvcc is not on PATH: CUDA C compile checks skipped")
needs_gpu = pytest.mark.skipif(not runtime.is_available(),
                               reason="CuPy with a CUDA GPU is not available: GPU execution skipped")


# =============================================================================================
# The cases: (name, function, args) — programs with their inputs
# =============================================================================================

_FLOAT_DTYPES = (F32, F16, BF16, F64)
_INT_DTYPES = (I32, U8, I64, U32, I8)
# inputs kept inside each function's well-conditioned domain (the reference is the oracle,
# not a second implementation of the special functions)
_POSITIVE = {"log", "sqrt", "rsqrt", "lgamma", "digamma", "acosh", "log1p"}
_UNIT = {"asin", "acos", "atanh", "erf_inv"}


def _float_values(rng, dtype, n, name=""):
    if name in _POSITIVE:
        x = rng.uniform(0.1 if name != "acosh" else 1.0, 6.0, n)
    elif name in _UNIT:
        x = rng.uniform(-0.95, 0.95, n)
    elif name in ("exp", "exp2", "expm1", "sinh", "cosh", "pow"):
        x = rng.uniform(-4, 4, n)
    else:
        x = rng.normal(0, 3, n)
        if n > 4:
            x[:4] = [0.0, -0.0, 2.5, -2.5]  # ties for round
        if n > 8 and name not in ("tan",):
            x[4:8] = [np.inf, -np.inf, np.nan, 1e30]
    with np.errstate(over="ignore"):
        return np.asarray(x).astype(dtype)


def _int_values(rng, dtype, n):
    info = np.iinfo(dtype)
    x = rng.integers(int(info.min), int(info.max), n, dtype=dtype, endpoint=True)
    special = [0, 1, -1 if info.min < 0 else 2, int(info.min), int(info.max), 3, 7]
    if n > len(special):
        x[:len(special)] = np.array(special).astype(dtype)
    return x


def _values(rng, dtype, n, name=""):
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return rng.random(n) < 0.5
    if scalar_ops.is_float(dtype):
        return _float_values(rng, dtype, n, name)
    return _int_values(rng, dtype, n)


def _accepts(prim, dtypes, params) -> bool:
    try:
        prim.abstract_eval(*[functrans.core.ShapedArray((3,), d) for d in dtypes], **params)
        return True
    except TypeError:
        return False


def _elementwise_cases():
    rng = np.random.default_rng(0)
    cases = []
    n = 24
    table = {**ew.ELEMENTWISE_UNARY, **ew.ELEMENTWISE_BINARY}
    for name, prim in sorted(table.items()):
        arity = 1 if name in ew.ELEMENTWISE_UNARY else 2
        param_sets = [{}]
        if name == "integer_pow":
            param_sets = [{"y": 0}, {"y": 3}, {"y": -2}]
        if name == "round":
            param_sets = [{"rounding_method": 0}, {"rounding_method": 1}]
        for dtype in _FLOAT_DTYPES + _INT_DTYPES + (BOOL,):
            for params in param_sets:
                if not _accepts(prim, [dtype] * arity, params):
                    continue
                if name == "integer_pow" and params["y"] < 0 and not scalar_ops.is_float(dtype):
                    continue
                args = [_values(rng, dtype, n, name) for _ in range(arity)]
                if name in ("shift_left", "shift_right_logical", "shift_right_arithmetic"):
                    bits = 8 * dtype.itemsize
                    counts = rng.integers(0, bits, n)
                    counts[:3] = [bits, bits + 3, 255 if dtype.kind == "u" else -1]
                    args[1] = counts.astype(dtype)
                if name == "div" and dtype.kind == "u":
                    continue  # the reference fails on every unsigned division (np.array(-1, u8))
                if name == "complex" and dtype != F32:
                    continue  # the reference's complex of half precision is not complex
                if name in ("div", "rem") and dtype.kind in "iu":
                    # the reference cannot divide unsigned integers by zero (it fails making
                    # the -1 result); signed ones give -1, and the CUDA code all ones for both
                    zero = 0 if dtype.kind == "i" else 5
                    args[1][:4] = np.array([zero, 1, zero, 3]).astype(dtype)
                    args[1][args[1] == 0] = 1 if dtype.kind == "u" else 0
                    # the reference takes abs(INT_MIN), which overflows: keep INT_MIN out
                    args[0][args[0] == np.iinfo(dtype).min] = 5
                    if dtype.kind == "i":
                        args[1][4] = -1
                        args[0][4] = np.iinfo(dtype).min
                if name == "population_count" and dtype.kind == "i":
                    # np.bitwise_count counts the bits of |x|: negative values differ from
                    # JAX's two's-complement count (which the CUDA code gives)
                    args[0] = np.abs(args[0] // 2).astype(dtype)
                fn = (lambda p, ps: lambda *xs: p.bind(*xs, **ps))(prim, params)
                label = f"{name}-{dtype.name}" + "".join(f"-{k}{v}" for k, v in params.items())
                cases.append((label, fn, args))
    # select_n, clamp and conversions
    for dtype in (F32, BF16, I32, U8):
        a, b, c = (_values(rng, dtype, n) for _ in range(3))
        cases.append((f"select_n-bool-{dtype.name}", lambda p, x, y: lax.select_n(p, x, y),
                      [rng.random(n) < 0.5, a, b]))
        cases.append((f"select_n-int-{dtype.name}", lambda w, x, y, z: lax.select_n(w, x, y, z),
                      [rng.integers(-1, 4, n).astype(np.int32), a, b, c]))
        lo, hi = np.sort(_values(rng, dtype, 2))
        cases.append((f"clamp-{dtype.name}", lambda x, lo=lo, hi=hi: lax.clamp(lo, x, hi), [a]))
    conversions = [(F32, I32), (F32, U8), (F64, I64), (F64, U64), (F32, I8), (I32, F32),
                   (U32, F32), (BOOL, F32), (F32, BOOL), (I64, I8), (I8, U32), (F32, F16),
                   (F16, BF16), (BF16, F32), (I32, BF16), (U8, BOOL), (F16, I32)]
    for src, dst in conversions:
        x = _values(rng, src, n)
        if scalar_ops.is_float(src):
            with np.errstate(over="ignore"):
                x[8:12] = np.array([3e9, -3e9, 255.7, -0.9]).astype(src)
        cases.append((f"convert-{src.name}-{dst.name}",
                      (lambda d: lambda v: lax.convert_element_type(v, d))(dst), [x]))
    return cases


def _fused_cases():
    rng = np.random.default_rng(1)
    f32 = lambda *shape: rng.normal(size=shape).astype(np.float32)  # noqa: E731

    def softmax(x):
        z = x - jnp.max(x, axis=-1, keepdims=True)
        e = jnp.exp(z)
        return e / jnp.sum(e, axis=-1, keepdims=True)

    def mlp(x, w, b):
        return jnp.tanh(x @ w + b), (x @ w).T

    def column_and_total(x):
        return jnp.sum(x * 2, axis=0), jnp.sum(x), jnp.min(x, axis=(0, 2))

    def where_convert(x, y):
        m = x > y
        return jnp.where(m, x, y * 2), m.astype(jnp.int32).sum(), (x * 100).astype(jnp.int8)

    def movement(x):
        t = jnp.transpose(x, (1, 0, 2)).reshape(4, -1)
        p = lax.pad(x[0], np.float32(-1), [(1, 2, 1), (0, 1, 0)])
        c = jnp.concatenate([x[0], x[1] * 3], axis=1)
        return t + 1, p, c, lax.rev(x, (2,)) - x

    def dynamic(x, i, j):
        # out-of-range starts are clamped, never read out of bounds
        return (lax.dynamic_slice(x, (i, j), (2, 3)),
                lax.dynamic_update_slice(x, jnp.ones((2, 2), jnp.float32), (j, i)))

    def iota_stuff(x):
        return x + lax.iota(np.float32, x.shape[0])[:, None], lax.broadcasted_iota(np.int32, (3, 4), 1)

    def half_precision(x):
        h = x.astype(jnp.bfloat16)
        return (h * h).sum(axis=1), jnp.exp(x.astype(jnp.float16)), jnp.max(h, axis=0)

    def big_reductions(x, y):
        # row sums (block), a long total (split), columns of a tall array (thread)
        return jnp.sum(x, axis=1), jnp.sum(x * x), jnp.max(y, axis=0), jnp.sum(y, axis=1)

    def int_reductions(x):
        return jnp.sum(x, axis=0), jnp.prod(x[:3], axis=1), jnp.max(x), jnp.min(x, axis=1)

    def bool_reductions(x):
        return jnp.any(x > 1, axis=1), jnp.all(x > -3, axis=0), jnp.any(x > 10)

    def with_fallback(x):
        # sort has no kernel: it runs its reference implementation between kernels
        return jnp.exp(jnp.sort(jnp.sin(x), axis=0)) * 2

    def cumulative(x):
        return jnp.exp(jnp.cumsum(jnp.sin(x), axis=0)) * 2, jnp.argmax(x, axis=1)

    def scan_loop(x):
        return lax.fori_loop(0, 3, lambda i, c: c * 2 + 1, jnp.sin(x))

    def scalar_and_literal(x):
        return x.sum() * 3.0, jnp.float32(2.0) + 0 * x[0]

    def gather(x, idx):
        # fused into the multiplication's kernel; out-of-range indices are clamped
        return jnp.take(x, idx, axis=0, mode="clip") * 2

    def empty_and_identity(x, e):
        return x, jnp.sum(e, axis=0), e * 2

    ints = rng.integers(-5, 6, (6, 5)).astype(np.int32)
    return [
        ("softmax", softmax, [f32(5, 7)]),
        ("mlp", mlp, [f32(4, 6), f32(6, 3), f32(3)]),
        ("column_and_total", column_and_total, [f32(6, 5, 4)]),
        ("where_convert", where_convert, [f32(5, 6), f32(5, 6)]),
        ("movement", movement, [f32(2, 4, 3)]),
        ("dynamic_in_range", dynamic, [f32(5, 6), np.int32(1), np.int32(2)]),
        ("dynamic_clamped", dynamic, [f32(5, 6), np.int32(-7), np.int32(100)]),
        ("iota", iota_stuff, [f32(3, 4)]),
        ("half_precision", half_precision, [f32(8, 33)]),
        ("big_reductions", big_reductions, [f32(300, 700), f32(9000, 3)]),
        ("int_reductions", int_reductions, [ints]),
        ("bool_reductions", bool_reductions, [f32(4, 6)]),
        ("with_fallback", with_fallback, [f32(5, 3)]),
        ("cumulative", cumulative, [f32(5, 3)]),
        ("scan_loop", scan_loop, [f32(4)]),
        ("scalar_and_literal", scalar_and_literal, [f32(3)]),
        ("gather", gather, [f32(5, 3), np.array([4, 0, 9, -12], np.int32)]),
        ("empty_and_identity", empty_and_identity, [f32(3), np.zeros((0, 4), np.float32)]),
    ]


_UNARY_POOL = [jnp.sin, jnp.tanh, jnp.abs, lambda x: x * x, jnp.exp, lambda x: -x,
               lambda x: jnp.maximum(x, 0.0)]
_BINARY_POOL = [jnp.add, jnp.subtract, jnp.multiply, jnp.maximum, lambda a, b: jnp.where(a > b, a, b)]


def _random_program(seed: int):
    """A small random program: elementwise ops over broadcast operands, then reductions
    and transposes, built from a seed (so the cases are fixed for the one nvcc build)."""
    rng = np.random.default_rng(100 + seed)
    shape = tuple(int(s) for s in rng.integers(1, 6, size=int(rng.integers(1, 4))))
    plan = []
    for _ in range(int(rng.integers(2, 7))):
        kind = rng.choice(["unary", "binary", "binary_row", "reduce", "transpose"])
        plan.append((str(kind), int(rng.integers(0, 1000))))

    def f(x, row):
        vals = [x]
        for kind, k in plan:
            v = vals[-1]
            if kind == "unary":
                vals.append(_UNARY_POOL[k % len(_UNARY_POOL)](v))
            elif kind == "binary":
                other = vals[k % len(vals)]
                other = other if other.shape == v.shape else v
                vals.append(_BINARY_POOL[k % len(_BINARY_POOL)](v, other))
            elif kind == "binary_row" and v.ndim and v.shape[-1] == row.shape[0]:
                vals.append(_BINARY_POOL[k % len(_BINARY_POOL)](v, row))
            elif kind == "reduce" and v.ndim:
                vals.append(jnp.sum(v, axis=k % v.ndim, keepdims=bool(k % 2)))
            elif kind == "transpose" and v.ndim > 1:
                vals.append(jnp.swapaxes(v, 0, v.ndim - 1))
        return vals[-1], vals[len(vals) // 2]

    args = [rng.normal(size=shape).astype(np.float32),
            rng.normal(size=shape[-1:]).astype(np.float32)]
    return (f"random{seed}", f, args)


def all_cases():
    return _elementwise_cases() + _fused_cases() + [_random_program(s) for s in range(12)]


# =============================================================================================
# Helpers
# =============================================================================================


def _tolerance(dtype):
    dtype = np.dtype(dtype)
    if dtype == BF16:
        return dict(rtol=1.6e-2, atol=1e-2)
    if dtype == F16:
        return dict(rtol=2e-3, atol=2e-3)
    if dtype == F32:
        return dict(rtol=3e-5, atol=3e-5)
    return dict(rtol=1e-10, atol=1e-12)


# a float32 sum of 210,000 squares, accumulated serially by the host emulation
_CASE_RTOL = {"big_reductions": 2e-4}


def assert_matches(out, ref, label):
    out, ref = np.asarray(out), np.asarray(ref)
    tolerance = _tolerance(ref.dtype)
    tolerance["rtol"] = max(tolerance["rtol"], _CASE_RTOL.get(label.split("[")[0], 0))
    assert out.shape == ref.shape, (label, out.shape, ref.shape)
    assert out.dtype == ref.dtype, (label, out.dtype, ref.dtype)
    if scalar_ops.is_float(ref.dtype):
        np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64),
                                   equal_nan=True, err_msg=label, **tolerance)
    else:
        np.testing.assert_array_equal(out, ref, err_msg=label)


@pytest.fixture(scope="module")
def staged_cases():
    """Every case traced (64-bit dtypes need x64 on while tracing) and compiled to CUDA C."""
    saved = functrans.config.enable_x64
    functrans.config.update("enable_x64", True)
    staged = []
    try:
        for i, (label, fn, args) in enumerate(all_cases()):
            closed = functrans.make_jaxpr(fn)(*args)
            exe = runtime.compile_jaxpr(closed)
            exe.module = codegen.generate(exe.program, prefix=f"c{i}_")  # unique kernel names
            ref = eval_jaxpr_numpy(closed.jaxpr, [functrans.core.to_numpy(c) for c in closed.consts],
                                   [np.asarray(a) for a in args])
            staged.append((label, fn, args, closed, exe, ref))
    finally:
        functrans.config.update("enable_x64", saved)
    return staged


# =============================================================================================
# Without a GPU or nvcc
# =============================================================================================


def test_registered_and_importable():
    backend = _backends.backends()["cuda"]
    assert backend.platform == "gpu" and backend.priority == 20
    assert backend.available() == runtime.is_available()


@pytest.mark.skipif(runtime.is_available(), reason="a GPU is present")
def test_unavailable_without_gpu_is_a_clear_error():
    with pytest.raises(RuntimeError, match="gpu"):
        functrans.jit(jnp.sin, backend="cuda")(np.ones(3, np.float32))
    exe = runtime.compile_jaxpr(functrans.make_jaxpr(jnp.sin)(np.ones(3, np.float32)))
    with pytest.raises(RuntimeError, match="CuPy"):
        exe(np.ones(3, np.float32))


def test_every_elementwise_primitive_has_cuda_code():
    table = set(ew.ELEMENTWISE_UNARY.values()) | set(ew.ELEMENTWISE_BINARY.values())
    # polygamma and complex have no CUDA row: they run their reference implementation
    assert table - set(scalar_ops.EMITTERS) == {ew.polygamma_p, ew.complex_p}


def test_cases_generate_kernels(staged_cases):
    for label, _, _, _, exe, _ in staged_cases:
        kinds = {type(s).__name__ for s in exe.module.schedule}
        if label.startswith("with_fallback"):
            assert "FallbackStep" in kinds, label
        elif label.startswith("scan_loop"):
            assert kinds == {"KernelLaunch", "ControlLaunch"}, label
        elif label.startswith("mlp"):
            assert "DotKernel" in kinds, label
        elif not label.startswith(("empty_and_identity", "polygamma", "complex",
                                   "nextafter-float16", "nextafter-bfloat16")):
            assert "FallbackStep" not in kinds, (label, exe.program.describe())
            assert exe.module.kernels, label
        assert 'extern "C" __global__' in exe.module.source or not exe.module.kernels


def test_fusion_makes_one_kernel_for_a_chain():
    closed = functrans.make_jaxpr(lambda x, y: jnp.exp(x) * 2 + y[None, :])(
        np.ones((4, 8), np.float32), np.ones(8, np.float32))
    exe = runtime.compile_jaxpr(closed)
    assert [k.strategy for k in exe.module.kernels] == ["loop"]
    assert "expf(" in exe.module.source
    assert "__global__" in exe.as_text()


def test_index_type_widens_for_large_shapes():
    import functrans.backends.compiler.exprs as E
    i = E.ivar(0, 2 ** 20)
    j = E.ivar(1, 2 ** 12)
    assert codegen.index_type([E.linearize([i, j], (2 ** 20, 2 ** 12))], [2 ** 32]) == "long long"
    assert codegen.index_type([E.linearize([i], (2 ** 20,))], [2 ** 20]) == "int"


def test_reduction_strategies():
    assert codegen.choose_strategy((10, 8), (0, 1), 10, 8) == ("thread", 1)
    assert codegen.choose_strategy((1000, 500), (0, 1), 1000, 500) == ("block", 1)
    assert codegen.choose_strategy((100000, 4), (1, 0), 4, 100000)[0] == "split"
    assert codegen.choose_strategy((100, 10000), (1, 0), 10000, 100) == ("thread", 1)
    assert codegen.choose_strategy((1 << 20,), (1,), 1, 1 << 20)[0] == "split"
    parts = codegen.choose_strategy((1 << 20,), (1,), 1, 1 << 20)[1]
    launch = codegen.KernelLaunch("k", None, [], "split", 1, 1 << 20, parts, np.float32)
    plan = runtime.launch_plan(launch, sm_count=100)
    assert [name for name, _, _ in plan] == ["k_partial", "k_finish"]
    assert plan[0][1] == parts and launch.scratch_bytes == 4 * parts


def test_literals_are_exact():
    assert scalar_ops.literal(np.inf, F32) == "ft_f32(0x7f800000u)"
    assert scalar_ops.literal(-2 ** 63, I64) == "(-9223372036854775807LL - 1)"
    for v in (0.1, 1e-45, 3.4e38, -2.5):
        text = scalar_ops.literal(v, F32)
        assert np.float32(float(text[:-1])) == np.float32(v)


# =============================================================================================
# With nvcc: compile everything once, run the kernels' code on the CPU
# =============================================================================================


@pytest.fixture(scope="module")
def host_library(staged_cases, tmp_path_factory):
    modules = [exe.module for *_, exe, _ in staged_cases]
    return host_emulation.build_library(modules, str(tmp_path_factory.mktemp("cuda-host")))


@needs_nvcc
def test_generated_cuda_compiles_with_nvcc(host_library, staged_cases):
    # one symbol per generated kernel, device and host side
    for *_, exe, _ in staged_cases:
        for k in exe.module.kernels:
            assert hasattr(host_library, f"host_{k.name}")


def assert_cases_match(staged_cases, run):
    """Every staged case run by ``run(closed, executable, args)`` matches its reference
    (in 64-bit mode, as the cases were staged); all mismatches are reported together."""
    failures = []
    with test_util.x64():
        for label, _, args, closed, exe, ref in staged_cases:
            out = run(closed, exe, args)
            assert len(out) == len(ref), label
            for k, (o, r) in enumerate(zip(out, ref)):
                try:
                    assert_matches(o, r, f"{label}[{k}]")
                except AssertionError as err:
                    failures.append(" ".join(str(err).split())[:300])
    assert not failures, "\n".join(failures)


@needs_nvcc
def test_kernels_match_reference_on_host(host_library, staged_cases):
    assert_cases_match(staged_cases,
                       lambda closed, exe, args: host_emulation.run(exe, host_library, *args))


@needs_nvcc
def test_unfused_schedule_matches_too(tmp_path):
    # one kernel per equation: isolates fusion from code generation
    x = np.random.default_rng(3).normal(size=(6, 5)).astype(np.float32)

    def f(x):
        return jnp.sum(jnp.tanh(x) * x.T.T, axis=0) + jnp.max(x)
    closed = functrans.make_jaxpr(f)(x)
    exe = runtime.compile_jaxpr(closed, fuse=False)
    assert len(exe.module.kernels) > 3
    lib = host_emulation.build_library([exe.module], str(tmp_path))
    out, = host_emulation.run(exe, lib, x)
    assert_matches(out, f(x), "unfused")


# =============================================================================================
# With a GPU
# =============================================================================================


@needs_gpu
def test_cases_on_gpu(staged_cases):
    assert_cases_match(staged_cases,
                       lambda closed, exe, args: runtime.compile_jaxpr(closed)(*args))


@needs_gpu
def test_jit_with_cuda_backend():
    x = np.linspace(-2, 2, 1000, dtype=np.float32).reshape(10, 100)

    @functrans.jit
    def ref(x):
        return jnp.sum(jnp.sin(x) ** 2, axis=1)
    got = functrans.jit(lambda x: jnp.sum(jnp.sin(x) ** 2, axis=1), backend="cuda")(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref(x)), rtol=1e-5)
    # grad through a cuda-compiled function
    g = functrans.jit(functrans.grad(lambda x: jnp.sum(jnp.tanh(x))), backend="cuda")(x)
    np.testing.assert_allclose(np.asarray(g), 1 - np.tanh(x) ** 2, rtol=1e-5, atol=1e-6)


@needs_gpu
def test_large_reductions_on_gpu():
    rng = np.random.default_rng(5)
    for shape, axis in [((1 << 20,), 0), ((64, 70000), 1), ((70000, 3), 0), ((300, 5000), 0)]:
        x = rng.normal(size=shape).astype(np.float32)
        closed = functrans.make_jaxpr(lambda x: (jnp.sum(x, axis=axis), jnp.max(x, axis=axis)))(x)
        s, m = runtime.compile_jaxpr(closed)(x)
        np.testing.assert_allclose(s, x.astype(np.float64).sum(axis=axis), rtol=1e-4, atol=1e-2)
        np.testing.assert_array_equal(m, x.max(axis=axis))


@needs_gpu
def test_device_arrays_stay_on_device():
    import cupy
    x = cupy.arange(12, dtype=cupy.float32).reshape(3, 4)
    exe = runtime.compile_jaxpr(functrans.make_jaxpr(lambda x: x * 2 + 1)(np.zeros((3, 4), np.float32)))
    out, = exe(x)
    assert isinstance(out, cupy.ndarray)
    np.testing.assert_allclose(out.get(), np.arange(12).reshape(3, 4) * 2 + 1)


@needs_gpu
def test_cuda_graph_replay():
    closed = functrans.make_jaxpr(lambda x: (jnp.exp(x).sum(), x * 3))(np.zeros(100, np.float32))
    exe = runtime.compile_jaxpr(closed, use_cuda_graph=True)
    assert exe.use_cuda_graph
    for k in range(3):
        x = np.full(100, k, np.float32)
        s, y = exe(x)
        np.testing.assert_allclose(s, 100 * np.exp(k), rtol=1e-5)
        np.testing.assert_allclose(y, 3 * x)


@needs_gpu
def test_gpu_devices_listed():
    devices = functrans.devices("gpu")
    assert len(devices) == runtime.gpu_count() and devices[0].platform == "gpu"


@needs_gpu
def test_nccl_collectives_on_one_gpu():
    import cupy
    from functrans.backends.cuda import nccl
    try:
        group = nccl.DeviceGroup.single_process([0])
    except RuntimeError as err:
        pytest.skip(f"NCCL unavailable: {err}")
    with cupy.cuda.Device(0):
        x = cupy.arange(6, dtype=cupy.float32).reshape(1, 6)
        np.testing.assert_array_equal(group.all_reduce([x])[0].get(), x.get())
        np.testing.assert_array_equal(group.all_reduce([x], "max")[0].get(), x.get())
        assert group.all_gather([x])[0].shape == (1, 1, 6)
        np.testing.assert_array_equal(group.reduce_scatter([x])[0].get(), x.get()[0])
        np.testing.assert_array_equal(group.all_to_all([x])[0].get(), x.get())
        np.testing.assert_array_equal(group.permute([x], [(0, 0)])[0].get(), x.get())
        np.testing.assert_array_equal(group.permute([x], [])[0].get(), np.zeros((1, 6)))
        np.testing.assert_array_equal(group.broadcast([x])[0].get(), x.get())
    group.close()
