"""The cuda backend's gather, scatter, cumulative ops, argmax/argmin and control flow.

These used to run their reference implementation on host copies (a fallback step); now they
are CUDA kernels (gather fused into its consumer, scatters with atomic combines, one thread
per line for cumulative ops) and host-driven loops around compiled bodies. Three layers, as
in ``test_cuda_backend.py``:

* always: the schedule of every case has no fallback step (or exactly the expected one);
* with ``nvcc``: all cases in one translation unit, compiled once, each schedule run on the
  CPU with the kernels' code compiled as host code, against the reference interpreter;
* with CuPy and a GPU: the same cases on the device (scatter-set with repeated indices may
  keep any one of the colliding updates there, and is checked as such).
"""
from __future__ import annotations

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import lax
from functrans.test_util import x64
from functrans.backends.cuda import host_emulation, runtime, scalar_ops
from functrans.backends.cuda.along_axis import AxisStep
from functrans.backends.cuda.control_flow import ControlLaunch
from functrans.backends.cuda.indexing import ScatterStep, update_kind
from functrans.backends.compiler.fusion import FallbackStep
from functrans.backends.reference.interpreter import eval_jaxpr_numpy

BF16 = scalar_ops.BFLOAT16

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")

needs_nvcc = pytest.mark.skipif(host_emulation.nvcc_path() is None,
                                reason="nvcc is not on PATH: CUDA C compile checks skipped")
needs_gpu = pytest.mark.skipif(not runtime.is_available(),
                               reason="CuPy with a CUDA GPU is not available: GPU execution skipped")

GSM = lax.GatherScatterMode


class Case:
    """A program, its inputs, the primitives allowed to stay fallbacks, and (for the GPU) a
    check of results that may legitimately differ from the serial reference."""

    def __init__(self, label, fn, args, fallbacks=(), gpu_check=None):
        self.label, self.fn, self.args = label, fn, list(args)
        self.fallbacks = set(fallbacks)
        self.gpu_check = gpu_check


# =============================================================================================
# The cases
# =============================================================================================


def _rng():
    return np.random.default_rng(7)


def _row_scatter(x, idx, updates, op="add", mode=GSM.FILL_OR_DROP):
    """``op`` of ``updates[k]`` into ``x[idx[k]]`` through the lax primitive (any mode)."""
    dn = lax.ScatterDimensionNumbers(update_window_dims=tuple(range(1, x.ndim)),
                                     inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,))
    fn = {"set": lax.scatter, "add": lax.scatter_add, "mul": lax.scatter_mul,
          "min": lax.scatter_min, "max": lax.scatter_max}[op]
    return fn(x, idx[:, None], updates, dn, mode=mode)


def _row_gather(x, idx, mode, fill_value=None):
    dn = lax.GatherDimensionNumbers(offset_dims=tuple(range(1, x.ndim)), collapsed_slice_dims=(0,),
                                    start_index_map=(0,))
    return lax.gather(x, idx[:, None], dn, (1,) + x.shape[1:], mode=mode, fill_value=fill_value)


def _special_floats(rng, shape, dtype=np.float32):
    x = rng.normal(size=shape) * 3
    flat = x.reshape(-1)
    flat[:4] = [np.nan, np.inf, -np.inf, 0.0][:flat.size]
    return x.astype(dtype)


def gather_cases():
    rng = _rng()
    x = _special_floats(rng, (6, 4))
    idx = np.array([5, 0, 9, -12, 2, 2], np.int32)  # out of range both ways, repeated
    cases = [
        Case("getitem", lambda x, i: x[i] * 2, [x, np.array([3, -1, 0, 5], np.int32)]),
        Case("getitem_clamped", lambda x, i: x[i], [x, idx]),
        Case("take_axis1", lambda x, i: jnp.take(x, i, axis=1, mode="clip"),
             [x, np.array([3, 0, 7], np.int32)]),
        Case("take_fill", lambda x, i: jnp.take(x, i, axis=0, mode="fill", fill_value=-1.0), [x, idx]),
        Case("take_along_axis", lambda x, i: jnp.take_along_axis(x, i, axis=1),
             [x, rng.integers(0, 4, (6, 3)).astype(np.int32)]),
        Case("one_hot_rows", lambda i: jnp.eye(5, dtype=jnp.float32)[i], [np.array([4, 0, 2, 2], np.int32)]),
        Case("pairs", lambda x, i, j: x[i, j] + x[j % 6, i % 4], [x, np.array([1, 5, 0], np.int32),
                                                                  np.array([3, 3, 0], np.int32)]),
        Case("gather_clip", lambda x, i: _row_gather(x, i, GSM.CLIP), [x, idx]),
        Case("gather_promise", lambda x, i: _row_gather(x, i, GSM.PROMISE_IN_BOUNDS), [x, idx]),
        Case("gather_fill_default", lambda x, i: _row_gather(x, i, GSM.FILL_OR_DROP), [x, idx]),
        Case("gather_fill_int", lambda x, i: _row_gather(x, i, GSM.FILL_OR_DROP),
             [rng.integers(-50, 50, (6, 2)).astype(np.int8), idx]),
        Case("gather_fill_value", lambda x, i: _row_gather(x, i, GSM.FILL_OR_DROP, 7.5), [x, idx]),
        Case("gather_bf16", lambda x, i: x[i] * 2, [x.astype(BF16), idx % 6]),
        Case("gather_bool_u8_index", lambda x, i: x[i], [x > 0, np.array([5, 1, 200], np.uint8)]),
        Case("gather_f64_i64", lambda x, i: x[i], [x.astype(np.float64), np.array([3, -7, 40], np.int64)]),
        Case("gather_empty_index", lambda x, i: _row_gather(x, i, GSM.CLIP), [x, np.zeros(0, np.int32)]),
        Case("gather_vmap", functrans.vmap(lambda r, i: r[i]),
             [x, rng.integers(0, 4, (6, 2)).astype(np.int32)]),
        Case("gather_then_reduce", lambda x, i: jnp.sum(x[i] ** 2, axis=1),
             [np.nan_to_num(x, posinf=2, neginf=-2), idx % 6]),
    ]
    return cases


def _any_update_check(op_args):
    """For scatter-set with repeated rows on the GPU: each written row holds one of the
    updates aimed at it (any one), every other row is unchanged."""
    x, idx, updates = op_args

    def check(out, ref, label):
        out = np.asarray(out[0])
        n = x.shape[0]
        for row in range(n):
            hits = [k for k, i in enumerate(idx) if i == row]
            if not hits:
                np.testing.assert_array_equal(out[row], x[row], err_msg=label)
            else:
                assert any(np.array_equal(out[row], updates[k]) for k in hits), (label, row)
    return check


def scatter_cases():
    rng = _rng()
    x = _special_floats(rng, (5, 3))
    dup = np.array([1, 3, 1, 1, 9, -2, 0], np.int32)  # repeated, and out of range both ways
    upd = rng.normal(size=(7, 3)).astype(np.float32)
    cases = []
    for op in ("set", "add", "mul", "min", "max"):
        for mode in (GSM.FILL_OR_DROP, GSM.CLIP, GSM.PROMISE_IN_BOUNDS):
            check = _any_update_check([x, np.clip(dup, 0, 4) if mode == GSM.CLIP else dup, upd]) \
                if op == "set" else None
            cases.append(Case(f"scatter_{op}_{mode.name.lower()}",
                              (lambda o, m: lambda x, i, u: _row_scatter(x, i, u, o, m))(op, mode),
                              [x, dup, upd], gpu_check=check))
    for dtype in (np.float64, np.int32, np.int64, np.uint32, np.int8, np.uint8, np.int16,
                  np.float16, BF16):
        if scalar_ops.is_float(dtype):
            # small integers: sums and products are exact, so the GPU's atomics may apply
            # the updates in any order and still match
            values = rng.integers(-4, 5, (5, 3)).astype(dtype)
            updates = rng.integers(-4, 5, (7, 3)).astype(dtype)
        else:  # integers wrap, in any order alike
            values = (rng.normal(size=(5, 3)) * 40).astype(dtype)
            updates = (rng.normal(size=(7, 3)) * 40).astype(dtype)
        for op in ("add", "max", "mul"):
            cases.append(Case(f"scatter_{op}_{np.dtype(dtype).name}",
                              (lambda o: lambda x, i, u: _row_scatter(x, i, u, o))(op),
                              [values, dup, updates]))
    cases += [
        Case("scatter_add_bool", lambda x, i, u: _row_scatter(x, i, u, "add"),
             [rng.random((5, 3)) < 0.3, dup, rng.random((7, 3)) < 0.3]),
        Case("at_add", lambda x, i: x.at[i].add(1.0), [x, np.array([0, 0, 2, 4, 4, 4], np.int32)]),
        Case("at_set_unique", lambda x, i: x.at[i].set(-1.0), [x, np.array([4, 0], np.int32)]),
        Case("at_columns", lambda x, i, u: x.at[:, i].add(u),
             [x, np.array([2, 0, 2], np.int32), rng.normal(size=(5, 3)).astype(np.float32)]),
        Case("segment_sum", lambda v, seg: jnp.zeros(4, jnp.float32).at[seg].add(v * 2),
             [rng.normal(size=50).astype(np.float32), rng.integers(0, 4, 50).astype(np.int32)]),
        Case("histogram_int", lambda seg: jnp.zeros(6, jnp.int32).at[seg].add(1),
             [rng.integers(0, 6, 300).astype(np.int32)]),
        Case("scatter_max_nan", lambda x, i, u: _row_scatter(x, i, u, "max"),
             [np.zeros((3, 2), np.float32), np.array([0, 0, 1], np.int32),
              np.array([[1, np.nan], [np.nan, 2], [3, -np.inf]], np.float32)]),
        Case("scatter_empty_updates", lambda x, i, u: _row_scatter(x, i, u, "add"),
             [x, np.zeros(0, np.int32), np.zeros((0, 3), np.float32)]),
        Case("scatter_vmap", functrans.vmap(lambda r, i: r.at[i].add(10.0)),
             [x, np.array([[0, 0], [1, 2], [2, 2], [0, 1], [2, 0]], np.int32)]),
        Case("scatter_then_gather", lambda x, i: x.at[i].mul(3.0)[i[::-1]].sum(axis=0),
             [np.nan_to_num(x, posinf=2, neginf=-2), np.array([4, 1, 1], np.int32)]),
        Case("dynamic_update_oob", lambda x, u, i: lax.dynamic_update_slice(x, u, (i, 1)),
             [x, np.ones((2, 2), np.float32), np.int32(9)]),
    ]
    return cases


def axis_cases():
    rng = _rng()
    x = _special_floats(rng, (4, 5))
    ints = rng.integers(-100, 100, (3, 6)).astype(np.int8)
    cases = []
    for name, fn in (("cumsum", lax.cumsum), ("cumprod", lax.cumprod), ("cummax", lax.cummax),
                     ("cummin", lax.cummin)):
        for axis in (0, 1):
            for reverse in (False, True):
                tag = f"{name}_ax{axis}{'_rev' if reverse else ''}"
                f = (lambda g, a, r: lambda v: g(v, axis=a, reverse=r))(fn, axis, reverse)
                cases.append(Case(tag, f, [x]))
                cases.append(Case(tag + "_int8", f, [ints]))
        for dtype in (np.float16, BF16, np.int32, np.uint8, np.float64, np.int64):
            cases.append(Case(f"{name}_{np.dtype(dtype).name}", (lambda g: lambda v: g(v, axis=1))(fn),
                              [(rng.normal(size=(3, 7)) * 3).astype(dtype)]))
    cases += [
        Case("cumsum_3d", lambda v: jnp.cumsum(v, axis=1), [rng.normal(size=(2, 5, 3)).astype(np.float32)]),
        Case("cumsum_empty", lambda v: jnp.cumsum(v, axis=0), [np.zeros((0, 3), np.float32)]),
        Case("cumsum_flat", lambda v: jnp.cumsum(v), [rng.normal(size=(300,)).astype(np.float32)]),
    ]
    ties = np.array([[1, 7, 7, 2], [np.nan, 3, np.nan, 9], [-np.inf, -np.inf, 0, 5]], np.float32)
    for name, fn in (("argmax", jnp.argmax), ("argmin", jnp.argmin)):
        for axis in (0, 1):
            cases.append(Case(f"{name}_ax{axis}", (lambda g, a: lambda v: g(v, axis=a))(fn, axis), [ties]))
        for dtype in (np.int32, np.uint8, np.bool_, BF16, np.float16, np.float64, np.int64):
            values = rng.integers(0, 4, (5, 6)).astype(dtype)
            cases.append(Case(f"{name}_{np.dtype(dtype).name}", (lambda g: lambda v: g(v, axis=1))(fn),
                              [values]))
        cases.append(Case(f"{name}_flat", lambda v, g=fn: g(v), [x]))
        cases.append(Case(f"{name}_3d", lambda v, g=fn: g(v, axis=1),
                          [rng.normal(size=(2, 9, 3)).astype(np.float32)]))
    return cases


def control_cases():
    rng = _rng()
    v = rng.normal(size=6).astype(np.float32)
    m = rng.normal(size=(3, 4)).astype(np.float32)

    def while_count(v):
        return lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 1.5 + 1), (0, v))

    def while_zero_trips(v):
        return lax.while_loop(lambda c: jnp.sum(c) > 1e9, lambda c: c * 2, v)

    def while_data_dependent(x):
        # Collatz steps of each element: the trip count depends on the data
        def body(c):
            n, steps = c
            odd = n % 2 == 1
            n = jnp.where(n > 1, jnp.where(odd, 3 * n + 1, n // 2), n)
            return n, steps + (n > 1)
        return lax.while_loop(lambda c: jnp.any(c[0] > 1), body, (x, jnp.zeros_like(x)))

    def fori(v, w):
        return lax.fori_loop(0, 5, lambda i, c: c * w + i, v)

    def scan_rnn(h, xs, w):
        def cell(h, x):
            h = jnp.tanh(h @ w + x)
            return h, jnp.sum(h)
        return lax.scan(cell, h, xs)

    def scan_reverse(xs):
        return lax.scan(lambda c, x: (c + x, c * x), 0.0, xs, reverse=True)

    def scan_no_xs(c):
        return lax.scan(lambda c, _: (c * 2, c), c, None, length=4)

    def scan_empty(c, xs):
        return lax.scan(lambda c, x: (c + x, x * 2), c, xs)

    def scan_literal_out(xs):
        return lax.scan(lambda c, x: (c + x, 1.0), 0.0, xs)

    def cond_pred(v):
        return lax.cond(v[0] > 0, lambda y: y + 1, lambda y: y * -2, v)

    def cond_literal():
        return lax.cond(True, lambda: jnp.ones(3), lambda: jnp.zeros(3))

    def switch(i, v):
        return lax.switch(i, [lambda y: y + 1, lambda y: y - 1, jnp.sin], v)

    def nested(v):
        def outer(c, x):
            c = lax.while_loop(lambda d: jnp.max(d) < x * 10, lambda d: d * 2 + 0.5, c)
            return lax.cond(x > 0.5, lambda d: d - 1, lambda d: d, c), jnp.sum(c)
        return lax.scan(outer, jnp.abs(v) + 0.1, jnp.array([0.2, 0.9, 1.5], jnp.float32))

    def scan_scatter(counts, idx):
        return lax.scan(lambda c, i: (c.at[i].add(1.0), c[i]), counts, idx)

    def scan_with_fallback(xs):
        # sort has no kernel: it runs inside the compiled body as a fallback
        return lax.scan(lambda c, x: (c + jnp.sort(x)[0], jnp.sort(x)), 0.0, xs)

    def scan_bf16(c, xs):
        return lax.scan(lambda c, x: (c * 0.5 + x, c), c, xs)

    return [
        Case("while_count", while_count, [v]),
        Case("while_zero_trips", while_zero_trips, [v]),
        Case("while_empty_carry", lambda e: lax.while_loop(
            lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2), (0, e)), [np.zeros((0, 2), np.float32)]),
        Case("scan_empty_slices", lambda xs: lax.scan(lambda c, x: (c + 1, x * 2), 0, xs),
             [np.zeros((3, 0), np.float32)]),
        Case("while_collatz", while_data_dependent, [np.array([1, 6, 7, 27], np.int32)]),
        Case("fori", fori, [v, np.float32(0.5)]),
        Case("scan_rnn", scan_rnn, [np.zeros(4, np.float32), rng.normal(size=(5, 4)).astype(np.float32),
                                    rng.normal(size=(4, 4)).astype(np.float32) * 0.5]),
        Case("scan_reverse", scan_reverse, [v]),
        Case("scan_no_xs", scan_no_xs, [m]),
        Case("scan_empty", scan_empty, [m[0], np.zeros((0, 4), np.float32)]),
        Case("scan_literal_out", scan_literal_out, [v]),
        Case("cond_pred_true", cond_pred, [np.abs(v)]),
        Case("cond_pred_false", cond_pred, [-np.abs(v)]),
        Case("cond_literal", cond_literal, []),
        Case("switch_in_range", switch, [np.int32(2), v]),
        Case("switch_clamped_low", switch, [np.int32(-4), v]),
        Case("switch_clamped_high", switch, [np.int32(40), v]),
        Case("nested", nested, [v]),
        Case("scan_scatter", scan_scatter, [np.zeros(4, np.float32), np.array([1, 1, 3, 0, 1], np.int32)]),
        Case("scan_with_fallback", scan_with_fallback, [m], fallbacks={"sort"}),
        Case("scan_bf16", scan_bf16, [np.ones(3, BF16), rng.normal(size=(4, 3)).astype(BF16)]),
    ]


def all_cases():
    return gather_cases() + scatter_cases() + axis_cases() + control_cases()


# =============================================================================================
# Helpers
# =============================================================================================


def _tolerance(dtype):
    dtype = np.dtype(dtype)
    if dtype == BF16:
        return dict(rtol=1.6e-2, atol=1e-2)
    if dtype == np.float16:
        return dict(rtol=2e-3, atol=2e-3)
    if dtype == np.float32:
        return dict(rtol=3e-5, atol=3e-5)
    return dict(rtol=1e-10, atol=1e-12)


def assert_matches(out, ref, label):
    out, ref = np.asarray(out), np.asarray(ref)
    assert out.shape == ref.shape, (label, out.shape, ref.shape)
    assert out.dtype == ref.dtype, (label, out.dtype, ref.dtype)
    if scalar_ops.is_float(ref.dtype):
        np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), equal_nan=True,
                                   err_msg=label, **_tolerance(ref.dtype))
    else:
        np.testing.assert_array_equal(out, ref, err_msg=label)


def _all_schedules(module):
    """Every schedule item of ``module``, the bodies of its control flow included."""
    for item in module.schedule:
        yield item
        if isinstance(item, ControlLaunch):
            for m in item.modules:
                yield from _all_schedules(m)


@pytest.fixture(scope="module")
def staged():
    """Every case traced (with x64, for the 64-bit dtypes), compiled, and its reference."""
    from functrans.backends.cuda import codegen
    out = []
    with x64():
        for i, case in enumerate(all_cases()):
            closed = functrans.make_jaxpr(case.fn)(*case.args)
            exe = runtime.compile_jaxpr(closed)
            exe.module = codegen.generate(exe.program, prefix=f"o{i}_")  # unique kernel names
            ref = eval_jaxpr_numpy(closed.jaxpr, [functrans.core.to_numpy(c) for c in closed.consts],
                                   [np.asarray(a) for a in case.args])
            out.append((case, closed, exe, ref))
    return out


def _compare(case, outs, ref, failures, check=None):
    assert len(outs) == len(ref), case.label
    if check is not None:
        try:
            check(outs, ref, case.label)
        except AssertionError as err:
            failures.append(" ".join(str(err).split())[:300])
        return
    for k, (o, r) in enumerate(zip(outs, ref)):
        try:
            assert_matches(o, r, f"{case.label}[{k}]")
        except AssertionError as err:
            failures.append(" ".join(str(err).split())[:300])


# =============================================================================================
# Without a GPU or nvcc: what runs natively
# =============================================================================================


def test_no_fallbacks_left(staged):
    for case, _, exe, _ in staged:
        left = {item.eqn.primitive.name for item in _all_schedules(exe.module)
                if isinstance(item, FallbackStep)}
        assert left == case.fallbacks, (case.label, exe.program.describe())


def test_gather_fuses_into_its_consumer(staged):
    case, _, exe, _ = next(s for s in staged if s[0].label == "gather_then_reduce")
    # (the normalized indices get a buffer of their own: every row reads them 4 times)
    gathers = [k for k in exe.module.kernels if "gather" in k.step.prims]
    assert len(gathers) == 1 and gathers[0].strategy in ("thread", "block", "split")
    assert "reduce_sum" in gathers[0].step.prims


def test_scatter_update_kinds(staged):
    kinds = {}
    for case, _, exe, _ in staged:
        for step in exe.program.steps:
            if isinstance(step, ScatterStep):
                kinds[case.label] = update_kind(step)
    assert kinds["scatter_set_clip"] == "store"
    assert kinds["scatter_add_fill_or_drop"] == "atomic_add"
    assert kinds["scatter_add_int64"] == "atomic_add"
    assert kinds["scatter_add_float16"] == "cas"
    assert kinds["scatter_add_int8"] == "cas"
    assert kinds["scatter_max_fill_or_drop"] == "cas"
    assert kinds["scatter_mul_float64"] == "cas"


def test_generated_code_shape(staged):
    by_label = {case.label: exe for case, _, exe, _ in staged}
    source = by_label["scatter_add_fill_or_drop"].module.source
    assert "ft_atomic_add(" in source and "if (" in source
    assert "ft_atomic_update(" in by_label["scatter_max_int8"].module.source
    assert "atomicCAS" in by_label["scatter_max_int8"].module.source  # the prelude's helper
    names = [k.name for k in by_label["at_add"].module.kernels]
    assert [n.split("_", 2)[-1] for n in names[-2:]] == ["scatter_add_copy", "scatter_add"]
    cumsum = by_label["cumsum_ax0"].module
    assert [type(s).__name__ for s in cumsum.schedule] == ["KernelLaunch"]
    assert isinstance(cumsum.schedule[0].step, AxisStep)
    loop = by_label["while_count"].module
    launch, = [s for s in loop.schedule if isinstance(s, ControlLaunch)]
    assert len(launch.modules) == 2 and all(m.kernels for m in launch.modules)
    # the bodies' kernels are in the enclosing translation unit
    for m in launch.modules:
        for k in m.kernels:
            assert f"__launch_bounds__(256) {k.name}(" in loop.source


def test_unsupported_control_flow_stays_a_fallback():
    # complex numbers have no CUDA code: a loop carrying them keeps its fallback
    closed = functrans.make_jaxpr(lambda v: lax.fori_loop(0, 3, lambda i, c: c + 1, v))(
        np.ones(2, np.complex64))
    exe = runtime.compile_jaxpr(closed)
    assert [type(s).__name__ for s in exe.module.schedule] == ["FallbackStep"]


# =============================================================================================
# With nvcc: the kernels' code run on the CPU
# =============================================================================================


@pytest.fixture(scope="module")
def host_library(staged, tmp_path_factory):
    return host_emulation.build_library([exe.module for _, _, exe, _ in staged],
                                        str(tmp_path_factory.mktemp("cuda-ops")))


@needs_nvcc
def test_cases_match_reference_on_host(host_library, staged):
    failures = []
    with x64():
        for case, _, exe, ref in staged:
            _compare(case, host_emulation.run(exe, host_library, *case.args), ref, failures)
    assert not failures, "\n".join(failures)


@needs_nvcc
def test_scatter_serial_order_matches_reference_exactly(host_library, staged):
    # the host emulation visits updates in the reference's order: float sums agree to the bit
    case, _, exe, ref = next(s for s in staged if s[0].label == "segment_sum")
    out, = host_emulation.run(exe, host_library, *case.args)
    np.testing.assert_array_equal(out, ref[0])


# =============================================================================================
# With a GPU
# =============================================================================================


@needs_gpu
def test_cases_on_gpu(staged):
    failures = []
    with x64():
        for case, closed, _, ref in staged:
            outs = runtime.compile_jaxpr(closed)(*case.args)
            _compare(case, outs, ref, failures, case.gpu_check)
    assert not failures, "\n".join(failures)


@needs_gpu
def test_large_scatter_add_on_gpu():
    # many colliding atomic adds: every update is counted
    rng = np.random.default_rng(11)
    seg = rng.integers(0, 7, 1 << 20).astype(np.int32)
    for dtype in (np.int32, np.float32, np.int8, np.float64, np.float16):
        with x64():
            closed = functrans.make_jaxpr(
                lambda s: jnp.zeros(7, dtype).at[s].add(jnp.ones_like(s, dtype)))(seg)
            out, = runtime.compile_jaxpr(closed)(seg)
        counts = np.bincount(seg, minlength=7)
        if dtype == np.float16:  # float16 counting saturates at 2048 (2048 + 1 rounds back)
            expected = np.minimum(counts, 2048).astype(dtype)
        else:
            expected = counts.astype(dtype)  # int8 wraps, as the reference does
        assert out.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(out, expected)


@needs_gpu
def test_loops_under_jit_on_gpu():
    f = functrans.jit(lambda x: lax.fori_loop(0, 100, lambda i, c: c * 0.99 + jnp.sin(c), x),
                      backend="cuda")
    x = np.linspace(-1, 1, 1000, dtype=np.float32)
    ref = x.copy()
    for _ in range(100):
        ref = ref * np.float32(0.99) + np.sin(ref)
    np.testing.assert_allclose(np.asarray(f(x)), ref, rtol=1e-4, atol=1e-5)
