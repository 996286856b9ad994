"""Shape and indexing primitives (rev, pad, concatenate, slice, iota, dynamic_slice,
dynamic_update_slice, gather, scatter*) and NumPy-style indexing (``x[idx]``, ``x.at[idx]``).

Each primitive is a row of ``CASES``: a hypothesis strategy giving the functrans function, an
independent NumPy reference and an argument generator. Every row is checked against NumPy,
under ``jit``, under ``vmap`` (random ``in_axes``) against a Python loop, and (for the
differentiable arguments) with forward- and reverse-mode numerical gradient checks in float64.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import functrans
import functrans.numpy as jnp
from functrans import lax
from functrans.test_util import x64

SETTINGS = settings(max_examples=15, deadline=None)


def assert_close(actual, expected, rtol=1e-6, atol=1e-6):
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)


# =============================================================================================
# Numerical gradient checks (float64)
# =============================================================================================


def check_grads(fun, args, argnums, eps=1e-6, tol=1e-6, seed=0):
    """Forward mode: jvp against central differences along a random direction. Reverse mode:
    <u, J v> from jvp equals <vjp(u), v> (so vjp is checked against the same differences)."""
    rng = np.random.default_rng(seed)
    args = [np.asarray(a) for a in args]

    def partial(*diff_args):
        full = list(args)
        for i, a in zip(argnums, diff_args):
            full[i] = a
        return fun(*full)

    primals = [args[i] for i in argnums]
    directions = [rng.standard_normal(p.shape) for p in primals]
    plus = np.asarray(partial(*[p + eps * v for p, v in zip(primals, directions)]))
    minus = np.asarray(partial(*[p - eps * v for p, v in zip(primals, directions)]))
    numeric = (plus - minus) / (2 * eps)
    _, tangent = functrans.jvp(partial, tuple(primals), tuple(directions))
    np.testing.assert_allclose(np.asarray(tangent), numeric, rtol=tol * 10, atol=tol * 10)

    out, vjp_fun = functrans.vjp(partial, *primals)
    u = rng.standard_normal(np.shape(out))
    cotangents = vjp_fun(u)
    lhs = float(np.sum(u * numeric))
    rhs = float(sum(np.sum(np.asarray(c) * v) for c, v in zip(cotangents, directions)))
    np.testing.assert_allclose(rhs, lhs, rtol=tol * 10, atol=tol * 10)


# =============================================================================================
# The primitive table
# =============================================================================================


class Case(NamedTuple):
    fun: Callable              # functrans function of the arguments
    ref: Callable              # NumPy reference
    make_args: Callable        # (rng, float_dtype) -> list of NumPy arguments
    diff: tuple                # argument numbers that are differentiable


def shapes(min_rank=1, max_rank=3, min_size=1, max_size=4):
    return st.lists(st.integers(min_size, max_size), min_size=min_rank, max_size=max_rank).map(tuple)


def floats(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


@st.composite
def rev_case(draw):
    shape = draw(shapes())
    dims = tuple(d for d in range(len(shape)) if draw(st.booleans()))
    return Case(lambda x: lax.rev(x, dims), lambda x: np.flip(x, dims),
                lambda rng, dt: [floats(rng, shape, dt)], (0,))


def pad_reference(x, value, config):
    """Pad one axis at a time: output position j reads x[(j - lo) / (interior + 1)] when that
    is a whole in-range number, else the padding value."""
    for axis, (lo, hi, interior) in enumerate(config):
        n = x.shape[axis]
        size = lo + hi + n + max(n - 1, 0) * interior
        src = np.arange(size) - lo
        valid = (src >= 0) & (src % (interior + 1) == 0) & (src // (interior + 1) < n)
        shape = list(x.shape)
        shape[axis] = size
        if n == 0:
            x = np.full(shape, value, x.dtype)
            continue
        taken = np.take(x, np.clip(src // (interior + 1), 0, n - 1), axis=axis)
        along = [1] * x.ndim
        along[axis] = size
        x = np.where(valid.reshape(along), taken, np.asarray(value, x.dtype))
    return x


@st.composite
def pad_case(draw):
    shape = draw(shapes(min_size=0))
    config = []
    for n in shape:
        interior = draw(st.integers(0, 2))
        full = n + max(n - 1, 0) * interior
        lo = draw(st.integers(-min(full, 2), 2))
        hi = draw(st.integers(-min(full + lo, 2) if full + lo > 0 else 0, 2))
        config.append((lo, hi, interior))
    return Case(lambda x, v: lax.pad(x, v, config), lambda x, v: pad_reference(x, v, config),
                lambda rng, dt: [floats(rng, shape, dt), floats(rng, (), dt)], (0, 1))


@st.composite
def concatenate_case(draw):
    shape = draw(shapes())
    axis = draw(st.integers(0, len(shape) - 1))
    sizes = draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
    part_shapes = [shape[:axis] + (s,) + shape[axis + 1:] for s in sizes]
    return Case(lambda *xs: lax.concatenate(xs, axis), lambda *xs: np.concatenate(xs, axis),
                lambda rng, dt: [floats(rng, s, dt) for s in part_shapes],
                tuple(range(len(sizes))))


@st.composite
def slice_case(draw):
    shape = draw(shapes(max_size=6))
    starts, limits, strides = [], [], []
    for n in shape:
        lo = draw(st.integers(0, n))
        starts.append(lo)
        limits.append(draw(st.integers(lo, n)))
        strides.append(draw(st.integers(1, 3)))
    ref_index = tuple(slice(a, b, c) for a, b, c in zip(starts, limits, strides))
    return Case(lambda x: lax.slice(x, starts, limits, strides), lambda x: x[ref_index],
                lambda rng, dt: [floats(rng, shape, dt)], (0,))


def clamp_start(i, n, size):
    i = int(i)
    i = i + n if i < 0 else i
    return min(max(i, 0), n - size)


def int_scalars(rng, shape):
    return [np.asarray(rng.integers(-n - 2, n + 3), np.int32) for n in shape]


@st.composite
def dynamic_slice_case(draw):
    shape = draw(shapes(max_size=5))
    sizes = [draw(st.integers(0, n)) for n in shape]

    def ref(x, *idx):
        starts = [clamp_start(i, n, s) for i, n, s in zip(idx, shape, sizes)]
        return x[tuple(slice(b, b + s) for b, s in zip(starts, sizes))]

    return Case(lambda x, *idx: lax.dynamic_slice(x, idx, sizes), ref,
                lambda rng, dt: [floats(rng, shape, dt)] + int_scalars(rng, shape), (0,))


@st.composite
def dynamic_update_slice_case(draw):
    shape = draw(shapes(max_size=5))
    sizes = tuple(draw(st.integers(0, n)) for n in shape)

    def ref(x, update, *idx):
        out = x.copy()
        starts = [clamp_start(i, n, s) for i, n, s in zip(idx, shape, sizes)]
        out[tuple(slice(b, b + s) for b, s in zip(starts, sizes))] = update
        return out

    return Case(lambda x, u, *idx: lax.dynamic_update_slice(x, u, idx), ref,
                lambda rng, dt: [floats(rng, shape, dt), floats(rng, sizes, dt)]
                + int_scalars(rng, shape), (0, 1))


# ---- gather / scatter with random dimension numbers -----------------------------------------

class GatherSpec(NamedTuple):
    shape: tuple
    batch_shape: tuple
    dnums: lax.GatherDimensionNumbers
    slice_sizes: tuple
    mode: str
    out_shape: tuple


@st.composite
def gather_specs(draw, allow_fill=True):
    batch_shape = draw(shapes(0, 2, 1, 3))
    rank = draw(st.integers(1, 3))
    shape = [draw(st.integers(1, 4)) for _ in range(rank)]
    dims = list(draw(st.permutations(range(rank))))
    # optionally pair one operand axis with one index batch axis
    operand_batching, indices_batching = (), ()
    if batch_shape and rank > 1 and draw(st.booleans()):
        d, b = dims.pop(), draw(st.integers(0, len(batch_shape) - 1))
        shape[d] = batch_shape[b]
        operand_batching, indices_batching = (d,), (b,)
    index_map = tuple(dims[:draw(st.integers(0, len(dims)))])
    collapsed = tuple(sorted(d for d in index_map if draw(st.booleans())))
    slice_sizes = tuple(1 if d in collapsed + operand_batching else draw(st.integers(0, shape[d]))
                        for d in range(rank))
    kept = [d for d in range(rank) if d not in collapsed + operand_batching]
    out_rank = len(kept) + len(batch_shape)
    offset_dims = tuple(sorted(draw(st.permutations(range(out_rank)))[:len(kept)]))
    dnums = lax.GatherDimensionNumbers(offset_dims, collapsed, index_map, operand_batching,
                                       indices_batching)
    sizes, batch = iter(slice_sizes[d] for d in kept), iter(batch_shape)
    out_shape = tuple(next(sizes) if i in offset_dims else next(batch) for i in range(out_rank))
    mode = draw(st.sampled_from(["clip", "fill"] if allow_fill else ["clip"]))
    return GatherSpec(tuple(shape), batch_shape, dnums, slice_sizes, mode, out_shape)


def random_indices(rng, spec):
    columns = [rng.integers(-1, spec.shape[d] + 1, size=spec.batch_shape)
               for d in spec.dnums.start_index_map]
    return np.stack(columns, -1).astype(np.int32) if columns else \
        np.zeros(spec.batch_shape + (0,), np.int32)


def window_start(spec, vector, batch_index, sizes):
    start = [0] * len(spec.shape)
    for k, d in enumerate(spec.dnums.start_index_map):
        start[d] = int(vector[k])
    for od, idim in zip(spec.dnums.operand_batching_dims, spec.dnums.start_indices_batching_dims):
        start[od] = batch_index[idim]
    oob = any(s < 0 or s > n - z for s, n, z in zip(start, spec.shape, sizes))
    clamped = [min(max(s, 0), n - z) for s, n, z in zip(start, spec.shape, sizes)]
    return clamped, oob


def gather_reference(x, indices, spec, fill_value):
    dn = spec.dnums
    kept = [d for d in range(x.ndim)
            if d not in dn.collapsed_slice_dims + dn.operand_batching_dims]
    out = np.empty(spec.batch_shape + tuple(spec.slice_sizes[d] for d in kept), x.dtype)
    for b in np.ndindex(*spec.batch_shape):
        start, oob = window_start(spec, indices[b], b, spec.slice_sizes)
        window = x[tuple(slice(s, s + z) for s, z in zip(start, spec.slice_sizes))]
        window = window.reshape([spec.slice_sizes[d] for d in kept])
        out[b] = np.full_like(window, fill_value) if oob and spec.mode == "fill" else window
    nb = len(spec.batch_shape)
    return np.moveaxis(out, list(range(nb, nb + len(kept))), list(dn.offset_dims))


def scatter_dnums(spec):
    dn = spec.dnums
    return lax.ScatterDimensionNumbers(dn.offset_dims, dn.collapsed_slice_dims,
                                       dn.start_index_map, dn.operand_batching_dims,
                                       dn.start_indices_batching_dims)


def scatter_reference(x, indices, updates, spec, combine):
    dn = spec.dnums
    out = x.copy()
    scatter_axes = [i for i in range(updates.ndim) if i not in dn.offset_dims]
    for b in np.ndindex(*spec.batch_shape):
        start, oob = window_start(spec, indices[b], b, spec.slice_sizes)
        if oob and spec.mode != "clip":
            continue
        select = [slice(None)] * updates.ndim
        for axis, i in zip(scatter_axes, b):
            select[axis] = i
        window = updates[tuple(select)].reshape(spec.slice_sizes)
        region = tuple(slice(s, s + z) for s, z in zip(start, spec.slice_sizes))
        out[region] = combine(out[region], window)
    return out


@st.composite
def gather_case(draw):
    spec = draw(gather_specs())
    return Case(lambda x, i: lax.gather(x, i, spec.dnums, spec.slice_sizes, mode=spec.mode,
                                        fill_value=0.5),
                lambda x, i: gather_reference(x, i, spec, 0.5),
                lambda rng, dt: [floats(rng, spec.shape, dt), random_indices(rng, spec)], (0,))


SCATTERS = {
    "scatter": (lax.scatter, lambda old, new: new, (0, 2)),
    "scatter_add": (lax.scatter_add, np.add, (0, 2)),
    "scatter_mul": (lax.scatter_mul, np.multiply, (0,)),
    "scatter_min": (lax.scatter_min, np.minimum, (0, 2)),
    "scatter_max": (lax.scatter_max, np.maximum, (0, 2)),
}


def scatter_case(name):
    fn, combine, diff = SCATTERS[name]

    @st.composite
    def case(draw):
        spec = draw(gather_specs())
        mode = "clip" if spec.mode == "clip" else "drop"
        dnums = scatter_dnums(spec)
        return Case(lambda x, i, u: fn(x, i, u, dnums, mode=mode),
                    lambda x, i, u: scatter_reference(x, i, u, spec, combine),
                    lambda rng, dt: [floats(rng, spec.shape, dt), random_indices(rng, spec),
                                     floats(rng, spec.out_shape, dt)], diff)
    return case()


CASES = {
    "rev": rev_case(),
    "pad": pad_case(),
    "concatenate": concatenate_case(),
    "slice": slice_case(),
    "dynamic_slice": dynamic_slice_case(),
    "dynamic_update_slice": dynamic_update_slice_case(),
    "gather": gather_case(),
    **{name: scatter_case(name) for name in SCATTERS},
}
NAMES = sorted(CASES)
seeds = st.integers(0, 2 ** 31 - 1)


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_matches_numpy(name, data):
    case = data.draw(CASES[name])
    args = case.make_args(np.random.default_rng(data.draw(seeds)), np.float32)
    out = case.fun(*args)
    expected = case.ref(*args)
    assert np.asarray(out).dtype == expected.dtype
    assert_close(out, expected)


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_jit_matches_eager(name, data):
    case = data.draw(CASES[name])
    args = case.make_args(np.random.default_rng(data.draw(seeds)), np.float32)
    assert_close(functrans.jit(case.fun)(*args), case.fun(*args))


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_vmap_matches_loop(name, data):
    case = data.draw(CASES[name])
    rng = np.random.default_rng(data.draw(seeds))
    batch = 3
    per_example = [case.make_args(rng, np.float32) for _ in range(batch)]
    num_args = len(per_example[0])
    in_axes = [data.draw(st.sampled_from([None] + list(range(per_example[0][i].ndim + 1))))
               for i in range(num_args)]
    if all(a is None for a in in_axes):
        in_axes[0] = 0
    batched = [per_example[0][i] if ax is None else
               np.stack([ex[i] for ex in per_example], axis=ax) for i, ax in enumerate(in_axes)]
    examples = [[per_example[0][i] if ax is None else ex[i] for i, ax in enumerate(in_axes)]
                for ex in per_example]
    expected = np.stack([np.asarray(case.fun(*ex)) for ex in examples])
    assert_close(functrans.vmap(case.fun, in_axes=tuple(in_axes))(*batched), expected)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_numerical_gradients(name, data):
    with x64():
        case = data.draw(CASES[name])
        args = case.make_args(np.random.default_rng(data.draw(seeds)), np.float64)
        check_grads(case.fun, args, case.diff)


# =============================================================================================
# Primitive-specific checks
# =============================================================================================


@SETTINGS
@given(shape=shapes(), data=st.data())
def test_iota_matches_numpy(shape, data):
    dimension = data.draw(st.integers(0, len(shape) - 1))
    dtype = data.draw(st.sampled_from([np.int32, np.float32, np.uint8]))
    along = [1] * len(shape)
    along[dimension] = shape[dimension]
    expected = np.broadcast_to(np.arange(shape[dimension], dtype=dtype).reshape(along), shape)
    out = lax.broadcasted_iota(dtype, shape, dimension)
    assert np.asarray(out).dtype == np.dtype(dtype)
    assert_close(out, expected)
    assert_close(functrans.jit(lambda: lax.broadcasted_iota(dtype, shape, dimension))(), expected)
    assert_close(lax.iota(np.int32, 5), np.arange(5))


def test_lax_helpers_in_dim():
    x = np.arange(24.0, dtype=np.float32).reshape(4, 6)
    assert_close(lax.slice_in_dim(x, 1, -1, 2, axis=1), x[:, 1:-1:2])
    assert_close(lax.index_in_dim(x, -1, axis=0, keepdims=False), x[-1])
    assert_close(lax.index_in_dim(x, 2, axis=1), x[:, 2:3])
    assert_close(lax.dynamic_slice_in_dim(x, -2, 2, axis=1), x[:, 4:6])
    assert_close(lax.dynamic_slice_in_dim(x, 5, 3, axis=0), x[1:4])  # clamped start
    assert_close(lax.dynamic_index_in_dim(x, 1, axis=1, keepdims=False), x[:, 1])
    expected = x.copy()
    expected[:, 2:4] = -1
    assert_close(lax.dynamic_update_slice_in_dim(x, -np.ones((4, 2), np.float32), 2, 1), expected)
    expected = x.copy()
    expected[3] = 7
    assert_close(lax.dynamic_update_index_in_dim(x, np.full(6, 7, np.float32), -1, 0), expected)


def test_dynamic_slice_with_batched_indices_becomes_one_gather():
    x = np.arange(20.0, dtype=np.float32).reshape(4, 5)
    starts = np.array([0, 2, 7, -1], np.int32)
    f = functrans.vmap(lambda i: lax.dynamic_slice(x, (i, 1), (1, 3)))
    jaxpr = functrans.make_jaxpr(f)(starts)
    names = [e.primitive.name for e in jaxpr.jaxpr.eqns]
    assert names.count("gather") == 1 and "dynamic_slice" not in names
    expected = np.stack([x[clamp_start(i, 4, 1):clamp_start(i, 4, 1) + 1, 1:4] for i in starts])
    assert_close(f(starts), expected)
    g = functrans.vmap(lambda i, u: lax.dynamic_update_slice(x, u, (i, 0)))
    jaxpr = functrans.make_jaxpr(g)(starts, np.ones((4, 1, 5), np.float32))
    names = [e.primitive.name for e in jaxpr.jaxpr.eqns]
    assert "scatter" in names and "dynamic_update_slice" not in names


def test_gather_default_fill_values():
    dn = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
    idx = np.array([[1], [5], [-1]], np.int32)
    assert_close(lax.gather(np.arange(3.0, dtype=np.float32), idx, dn, (1,)), [1, np.nan, np.nan])
    assert_close(lax.gather(np.arange(3, dtype=np.int32), idx, dn, (1,)),
                 [1, np.iinfo(np.int32).min, np.iinfo(np.int32).min])
    assert_close(lax.gather(np.arange(3, dtype=np.uint8), idx, dn, (1,)), [1, 255, 255])
    assert_close(lax.gather(np.zeros(3, bool), idx, dn, (1,)), [False, True, True])
    assert_close(lax.gather(np.arange(3.0, dtype=np.float32), idx, dn, (1,), mode="clip"), [1, 2, 0])


def test_scatter_mul_gradient_for_unique_indices_and_error_otherwise():
    dn = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                     scatter_dims_to_operand_dims=(0,))
    with x64():
        rng = np.random.default_rng(0)
        x, u = rng.standard_normal((4, 3)), rng.standard_normal((2, 3))
        unique = np.array([[2], [0]])
        check_grads(lambda x, u: lax.scatter_mul(x, unique, u, dn, unique_indices=True),
                    [x, u], (0, 1))
        repeated = np.array([[2], [2]])
        with pytest.raises(NotImplementedError, match="scatter_mul"):
            functrans.grad(lambda u: lax.scatter_mul(x, repeated, u, dn).sum())(u)


def test_scatter_max_ties_share_the_tangent():
    dn = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                     scatter_dims_to_operand_dims=(0,))
    x = np.array([1.0, 5.0], np.float32)
    idx = np.array([[0], [0]])
    grads = functrans.grad(lambda x, u: lax.scatter_max(x, idx, u, dn).sum(), argnums=(0, 1))(
        x, np.array([3.0, 3.0], np.float32))
    assert_close(grads[0], [0.0, 1.0])
    assert_close(grads[1], [0.5, 0.5])


def test_shape_errors_name_the_primitive():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(TypeError, match="pad"):
        lax.pad(x, 0.0, [(0, 0, 0)])
    with pytest.raises(TypeError, match="concatenate"):
        lax.concatenate([x, np.zeros((2, 4), np.float32)], 0)
    with pytest.raises(TypeError, match="slice"):
        lax.slice(x, (0, 0), (3, 3))
    with pytest.raises(TypeError, match="dynamic_slice"):
        lax.dynamic_slice(x, (0, 0), (3, 1))
    with pytest.raises(TypeError, match="gather"):
        dn = lax.GatherDimensionNumbers((1,), (0,), (0,))
        lax.gather(x, np.zeros((2, 1), np.float32), dn, (1, 3))
    with pytest.raises(TypeError, match="scatter_add"):
        dn = lax.ScatterDimensionNumbers((1,), (0,), (0,))
        lax.scatter_add(x, np.zeros((2, 1), np.int32), np.zeros((2, 4), np.float32), dn)


# =============================================================================================
# NumPy-style indexing
# =============================================================================================

X = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
B = np.arange(5 * 4, dtype=np.float32).reshape(5, 4)

INDEX_TABLE = [
    0, -1, 2, (1, 2), (1, -2, 3), slice(None), slice(1, None), slice(None, None, -1),
    slice(None, None, 2), (slice(1, 3), slice(None, None, -2)), (Ellipsis, 1), (0, Ellipsis),
    (Ellipsis, slice(1, 4), 0), None, (None, 1), (slice(None), None, 2, None), (Ellipsis, None),
    (slice(5, 1, -1), slice(-1, -5, -1)), (slice(10, 20),), (slice(-10, 2),),
    (slice(None), slice(3, 1)), (), True, False, (0, True), (Ellipsis, False),
    [0, 2], [-1, 0, -3], [[0, 1], [2, 2]], np.array([2, 0]), (slice(None), [3, 1]),
    (Ellipsis, [4, 0, 4]), ([0, 2], [1, 3]), ([0, 2], slice(None), [1, 3]),
    (slice(None), [0, 1], [1, 2]), (0, slice(None), [1, 2]), ([0, 1], 0),
    ([[0], [2]], [1, 3], slice(None, None, -1)), (slice(None, None, 2), [[1], [2]], [[0, 4]]),
    (1, [0, 3], slice(1, 4)), ([1], None, [2]), (slice(None), [1, 2], None, [3, 4]),
    (None, [0, 1], Ellipsis, -1), ([True, False, True],), (X[:, :, 0] > 20,),
    (slice(None), np.array([True, False, False, True])), ([True, False, True], 1, [2, 3]),
    ([0, 1], True), np.array(1), (np.array(-1), slice(None), np.array([0, 1])),
    np.zeros((0,), np.int32), (slice(None), np.zeros((2, 0), np.int32)),
]


@pytest.mark.parametrize("idx", INDEX_TABLE, ids=[repr(i)[:40] for i in INDEX_TABLE])
def test_getitem_matches_numpy(idx):
    expected = X[idx]
    assert_close(jnp.asarray(X)[idx], expected)
    assert_close(functrans.jit(lambda x: x[idx])(X), expected)


@pytest.mark.parametrize("idx", [(0, 1), (slice(1, 3), slice(None, None, -1), 2), (None, -1),
                                 (Ellipsis, slice(None, None, -2))])
def test_static_basic_indexing_is_cheap(idx):
    names = {e.primitive.name for e in functrans.make_jaxpr(lambda x: x[idx])(X).jaxpr.eqns}
    assert names <= {"slice", "rev", "squeeze", "reshape"}, names


def test_traced_integer_indexes_with_dynamic_slice():
    f = functrans.jit(lambda x, i, j: x[i, 1:3, j])
    names = [e.primitive.name for e in functrans.make_jaxpr(lambda x, i: x[i, 1:3])(X, 1).jaxpr.eqns]
    assert "dynamic_slice" in names and "gather" not in names
    for i, j in [(0, 0), (2, -1), (-3, 4), (7, 9), (-9, -9)]:
        ci, cj = min(max(i + 3 if i < 0 else i, 0), 2), min(max(j + 5 if j < 0 else j, 0), 4)
        assert_close(f(X, np.int32(i), np.int32(j)), X[ci, 1:3, cj])


def test_traced_index_arrays():
    f = functrans.jit(lambda x, i, j: x[i, :, j])
    i, j = np.array([[0, 2], [1, -1]], np.int32), np.array([4, -5], np.int32)
    assert_close(f(X, i, j), X[i, :, j])
    g = functrans.jit(lambda x, i: x[1:, i])
    assert_close(g(X, np.array([3, 0], np.int32)), X[1:, [3, 0]])


@pytest.mark.parametrize("idx, clamped", [
    ([5, -7, 1], [2, 0, 1]),
    (([0, 9], slice(None), [-8, 6]), ([0, 2], slice(None), [0, 4])),
    ((7,), (2,)),
    ((Ellipsis, 10), (Ellipsis, 4)),
    ((1, [-20, 20]), (1, [0, 3])),
])
def test_out_of_bounds_reads_are_clamped(idx, clamped):
    assert_close(jnp.asarray(X)[idx], X[clamped])
    assert_close(functrans.jit(lambda x: x[idx])(X), X[clamped])


def test_fill_mode_reads():
    x = jnp.asarray(B)
    out = x.at[np.array([0, 7, -1, -6])].get(mode="fill", fill_value=-1.0)
    expected = np.stack([B[0], np.full(4, -1.0), B[-1], np.full(4, -1.0)])
    assert_close(out, expected)
    assert_close(x.at[9, 1].get(mode="fill"), np.nan)
    assert_close(x.at[2, 1].get(mode="fill"), B[2, 1])


def test_traced_boolean_mask_is_a_clear_error():
    with pytest.raises(IndexError, match="jnp.where"):
        functrans.jit(lambda x: x[lax.gt(x, 3.0)])(B)
    with pytest.raises(IndexError):
        jnp.asarray(B)[1.5]


# ---- x.at[idx].op(values) -------------------------------------------------------------------

UPDATE_TABLE = [
    # (index, values shape) -- duplicates included for the accumulating ops
    ([0, 2, 0, 4], (4, 4)),
    ([1, 1, 1], (4,)),
    ((slice(None), [1, 3, 1]), (3,)),
    ((slice(1, 4), 2), ()),
    ((slice(None, None, -2), slice(1, 3)), (3, 2)),
    (([0, 4, 0], [1, 2, 1]), (3,)),
    ((2,), (4,)),
    ((-1, -1), ()),
    ((None, [3, 3]), (1, 2, 4)),
    ((Ellipsis, [0, 0]), (5, 2)),
    (([[0], [4]], [1, 1, 3]), (2, 3)),
]
UFUNCS = {"add": np.add, "mul": np.multiply, "min": np.minimum, "max": np.maximum}


def _at(x, idx, op):
    ref = x.at[idx]
    return {"set": ref.set, "add": ref.add, "mul": ref.multiply, "min": ref.min,
            "max": ref.max}[op]


@pytest.mark.parametrize("op", ["add", "mul", "min", "max"])
@pytest.mark.parametrize("idx, vshape", UPDATE_TABLE, ids=[repr(i)[:40] for i, _ in UPDATE_TABLE])
def test_accumulating_updates_match_ufunc_at(op, idx, vshape):
    values = np.random.default_rng(0).standard_normal(vshape).astype(np.float32)
    expected = B.copy()
    target = np.broadcast_to(values, B[idx].shape)
    UFUNCS[op].at(expected, idx, target)
    assert_close(_at(jnp.asarray(B), idx, op)(values), expected, rtol=1e-5)
    assert_close(functrans.jit(lambda b, v: _at(b, idx, op)(v))(B, values), expected, rtol=1e-5)


@pytest.mark.parametrize("idx", [[3, 0], (slice(None), [2, 0]), (slice(1, None, 2), -1), (4,),
                                 (Ellipsis, slice(None, None, -1)), ([1, 3], [0, 2])])
def test_set_matches_numpy(idx):
    values = np.random.default_rng(1).standard_normal(B[idx].shape).astype(np.float32)
    expected = B.copy()
    expected[idx] = values
    assert_close(jnp.asarray(B).at[idx].set(values), expected)
    assert_close(jnp.asarray(B).at[idx].set(2.5), _set_scalar(idx, 2.5))


def _set_scalar(idx, value):
    out = B.copy()
    out[idx] = value
    return out


def test_updates_cast_to_the_array_dtype_and_drop_out_of_bounds():
    x = jnp.asarray(np.arange(5, dtype=np.int32))
    out = x.at[np.array([0, 9, -1, -7])].add(2.7)
    assert np.asarray(out).dtype == np.int32
    assert_close(out, [2, 1, 2, 3, 6])
    assert_close(x.at[9].set(100), np.arange(5))
    assert_close(x.at[9].set(100, mode="clip"), [0, 1, 2, 3, 100])


def test_traced_index_updates():
    f = functrans.jit(lambda b, i, v: b.at[i, 1:3].add(v))
    i = np.array([0, 4, 0], np.int32)
    v = np.ones((3, 2), np.float32)
    expected = B.copy()
    np.add.at(expected, (i, slice(1, 3)), v)
    assert_close(f(B, i, v), expected)
    g = functrans.jit(lambda b, i: b.at[i].set(0.0))
    assert_close(g(B, np.int32(-2)), _set_scalar(-2, 0.0))


# ---- transforms through indexing ------------------------------------------------------------

GRAD_INDICES = [1, (slice(None, None, -1), 2), [0, 3, 3], (slice(1, 4), [2, 2, 0]),
                ([4, 0], [1, -1]), (None, Ellipsis, [0, 0])]


@pytest.mark.parametrize("idx", GRAD_INDICES, ids=[repr(i) for i in GRAD_INDICES])
def test_gradients_through_getitem_and_at_add(idx):
    with x64():
        rng = np.random.default_rng(2)
        b = rng.standard_normal(B.shape)
        check_grads(lambda b: jnp.asarray(b)[idx] ** 2, [b], (0,))
        v = rng.standard_normal(b[idx].shape)
        check_grads(lambda b, v: jnp.asarray(b).at[idx].add(v * v) ** 2, [b, v], (0, 1))
        check_grads(lambda b, v: jnp.asarray(b).at[idx].set(v) * b, [b, v], (0, 1))
        check_grads(lambda b, v: jnp.asarray(b).at[idx].max(v), [b, v], (0, 1))


def test_grad_of_at_add_with_duplicates_accumulates():
    grad = functrans.grad(lambda v: (jnp.zeros(3).at[np.array([0, 0, 2])].add(v) ** 2).sum())
    # out = [v0 + v1, 0, v2]; d/dv = [2(v0+v1), 2(v0+v1), 2 v2]
    assert_close(grad(np.array([1.0, 2.0, 3.0], np.float32)), [6.0, 6.0, 6.0])


def test_vmap_of_indexing_matches_loop():
    rng = np.random.default_rng(3)
    xs = rng.standard_normal((6, 5, 4)).astype(np.float32)
    idx = np.array([0, -1, 3, 7, 2, -9], np.int32)
    # traced integer index (dynamic_slice) with batched operand and batched index
    f = functrans.vmap(lambda x, i: x[i, 1:])
    assert_close(f(xs, idx), np.stack([np.asarray(jnp.asarray(x)[int(i), 1:]) for x, i in zip(xs, idx)]))
    # unbatched operand, batched index arrays
    arrays = rng.integers(-4, 4, size=(6, 2, 3)).astype(np.int32)
    g = functrans.vmap(lambda i: jnp.asarray(B)[:, i], in_axes=0)
    assert_close(g(arrays), np.stack([B[:, np.where(a < 0, a + 4, a)] for a in arrays]))
    # batched update at a batched index, operand batched along axis 1
    h = functrans.vmap(lambda x, i, v: x.at[i].add(v), in_axes=(1, 0, 0))
    vs = rng.standard_normal((6, 4)).astype(np.float32)
    expected = []
    for k in range(6):
        e = xs[k].copy()
        if -5 <= idx[k] < 5:
            e[idx[k]] += vs[k]
        expected.append(e)
    assert_close(h(np.moveaxis(xs, 0, 1), idx, vs), np.stack(expected), rtol=1e-5)


def test_per_example_gradients_through_gather():
    rng = np.random.default_rng(4)
    table = rng.standard_normal((5, 3)).astype(np.float32)
    ids = np.array([[0, 4], [4, 4], [1, 2]], np.int32)

    def loss(t, i):
        return (jnp.asarray(t)[i] ** 2).sum()

    per_example = functrans.vmap(functrans.grad(loss), in_axes=(None, 0))(table, ids)
    for k in range(3):
        expected = np.zeros_like(table)
        np.add.at(expected, ids[k], 2 * table[ids[k]])
        assert_close(per_example[k], expected, rtol=1e-5)


@pytest.mark.parametrize("operand_axis, indices_axis, updates_axis",
                         [(0, 0, 0), (2, 1, None), (None, 2, 1), (1, None, 3), (0, None, None)])
def test_vmap_of_gather_and_scatter_with_batching_dims(operand_axis, indices_axis, updates_axis):
    # operand [4, 3, 5]: axis 1 pairs with indices axis 0 (size 3); the index vector
    # addresses axis 0; axis 2 is a window of 2.
    gdn = lax.GatherDimensionNumbers(offset_dims=(2,), collapsed_slice_dims=(0,),
                                     start_index_map=(0,), operand_batching_dims=(1,),
                                     start_indices_batching_dims=(0,))
    sdn = lax.ScatterDimensionNumbers(update_window_dims=(2,), inserted_window_dims=(0,),
                                      scatter_dims_to_operand_dims=(0,),
                                      operand_batching_dims=(1,), scatter_indices_batching_dims=(0,))
    rng = np.random.default_rng(5)
    batch = 2
    xs = rng.standard_normal((batch, 4, 3, 5)).astype(np.float32)
    idx = rng.integers(-1, 5, size=(batch, 3, 2, 1)).astype(np.int32)
    ups = rng.standard_normal((batch, 3, 2, 2)).astype(np.float32)

    def pick(a, axis, k):
        return a[0] if axis is None else a[k]

    def put(a, axis):
        return a[0] if axis is None else np.moveaxis(a, 0, axis)

    gather = lambda x, i: lax.gather(x, i, gdn, (1, 1, 2), mode="clip")
    scatter = lambda x, i, u: lax.scatter_add(x, i, u, sdn)
    expected = np.stack([np.asarray(gather(pick(xs, operand_axis, k), pick(idx, indices_axis, k)))
                         for k in range(batch)])
    out = functrans.vmap(gather, in_axes=(operand_axis, indices_axis))(
        put(xs, operand_axis), put(idx, indices_axis))
    assert_close(out, expected)
    expected = np.stack([np.asarray(scatter(pick(xs, operand_axis, k), pick(idx, indices_axis, k),
                                            pick(ups, updates_axis, k))) for k in range(batch)])
    out = functrans.vmap(scatter, in_axes=(operand_axis, indices_axis, updates_axis))(
        put(xs, operand_axis), put(idx, indices_axis), put(ups, updates_axis))
    assert_close(out, expected, rtol=1e-5)
    # the unbatched results themselves against the loop references
    spec = GatherSpec((4, 3, 5), (3, 2), gdn, (1, 1, 2), "clip", (3, 2, 2))
    assert_close(gather(xs[0], idx[0]), gather_reference(xs[0], idx[0], spec, 0.0))
    spec = spec._replace(mode="drop")
    assert_close(scatter(xs[0], idx[0], ups[0]),
                 scatter_reference(xs[0], idx[0], ups[0], spec, np.add), rtol=1e-5)


def test_zero_dimensional_arrays():
    x = jnp.asarray(np.float32(3.0))
    for idx in [(), Ellipsis, None, True, False, (None, Ellipsis, None)]:
        assert_close(x[idx], np.float32(3.0)[idx])
    assert_close(x.at[()].set(5.0), 5.0)
    assert_close(x.at[None].multiply(2.0), 6.0)
    assert_close(functrans.grad(lambda x: x.at[()].add(x * x))(x), 7.0)
    assert_close(functrans.grad(lambda x: x.at[...].set(x * x))(x), 6.0)


def test_transpose_of_unique_scatter():
    from functrans.core import ShapedArray
    from functrans.interpreters.ad import UndefinedPrimal
    from functrans.primitives import indexing
    dn = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                     scatter_dims_to_operand_dims=(0,))
    idx = np.array([[3], [0], [9]], np.int32)  # the last update is dropped
    ct = np.arange(8.0, dtype=np.float32).reshape(4, 2) + 1
    operand_ct, _, updates_ct = indexing.scatter_p.transpose(
        ct, UndefinedPrimal(ShapedArray((4, 2), np.float32)), idx,
        UndefinedPrimal(ShapedArray((3, 2), np.float32)), dimension_numbers=dn,
        indices_are_sorted=False, unique_indices=True, mode=lax.GatherScatterMode.FILL_OR_DROP)
    assert_close(operand_ct, ct * np.array([[0], [1], [1], [0]], np.float32))
    assert_close(updates_ct, np.stack([ct[3], ct[0], np.zeros(2, np.float32)]))
