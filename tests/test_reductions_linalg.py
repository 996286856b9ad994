"""Reductions, cumulative reductions, sorting, dot_general, conv_general_dilated and the
matrix decompositions: reference vs NumPy/SciPy (or a direct loop definition), numerical
JVP/VJP in float64, vmap vs a Python loop, and jit vs eager."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.linalg
from hypothesis import given, settings
from hypothesis import strategies as st

import functrans
from functrans import lax
from functrans.test_util import check_grads, x64
from primitive_table import naive_conv


@pytest.fixture
def f64():
    with x64():
        yield


def _np(x):
    return np.asarray(x)


def _shape_and_axes(min_dims=1, max_dims=3):
    @st.composite
    def strategy(draw):
        shape = tuple(draw(st.lists(st.integers(1, 4), min_size=min_dims, max_size=max_dims)))
        axes = draw(st.lists(st.integers(0, len(shape) - 1), unique=True, max_size=len(shape)))
        return shape, tuple(sorted(axes)), draw(st.integers(0, 2 ** 31 - 1))
    return strategy()


def _check_vmap(f, args, seed, size=3):
    """vmap over random in_axes (some args unbatched) equals a Python loop."""
    rng = np.random.default_rng(seed)
    in_axes = []
    batched = []
    for a in args:
        a = np.asarray(a)
        if rng.random() < 0.3 and in_axes.count(None) < len(args) - 1:
            in_axes.append(None)
            batched.append(a)
            continue
        axis = int(rng.integers(0, a.ndim + 1))
        noise = rng.standard_normal((size,) + a.shape).astype(a.dtype) if a.dtype.kind == "f" \
            else rng.permutation(np.broadcast_to(a, (size,) + a.shape))
        stacked = np.moveaxis(a[None] + noise * 0.1 if a.dtype.kind == "f" else noise, 0, axis)
        in_axes.append(axis)
        batched.append(stacked)
    out = functrans.vmap(f, in_axes=tuple(in_axes))(*batched)
    for i in range(size):
        example = [b if ax is None else np.take(b, i, axis=ax) for b, ax in zip(batched, in_axes)]
        expected = f(*example)
        got = functrans.tree_util.tree_map(lambda o: _np(o)[i], out)
        for g, e in zip(functrans.tree_util.tree_leaves(got), functrans.tree_util.tree_leaves(expected)):
            np.testing.assert_allclose(g, _np(e), rtol=1e-5, atol=1e-5)


# =============================================================================================
# Reductions
# =============================================================================================

def test_empty_max_is_identity():
    assert _np(lax.reduce_max(np.zeros((0, 3), np.float32), (0,))).tolist() == [-np.inf] * 3
    assert _np(lax.reduce_min(np.zeros((0,), np.int32), (0,))) == np.iinfo(np.int32).max


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@settings(max_examples=15, deadline=None)
@given(case=_shape_and_axes(), nan=st.booleans())
def test_argmax_argmin(name, case, nan):
    shape, _, seed = case
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 3, shape).astype(np.float32)   # ties are common
    if nan:
        x.flat[rng.integers(0, x.size)] = np.nan
    axis = int(rng.integers(0, len(shape)))
    out = getattr(lax, name)(x, axis, np.int32)
    assert _np(out).dtype == np.int32
    np.testing.assert_array_equal(_np(out), getattr(np, name)(x, axis=axis))


def test_reduce_max_ties_average_the_tangent(f64):
    x = np.array([1.0, 3.0, 3.0])
    _, t = functrans.jvp(lambda x: lax.reduce_max(x, (0,)), (x,), (np.array([5.0, 2.0, 4.0]),))
    assert float(t) == pytest.approx(3.0)


@pytest.mark.parametrize("x", [[2.0, 0.0, 3.0, -1.5], [0.0, 2.0, 0.0, 1.5], [1.0, 2.0, -3.0, 0.5]])
def test_reduce_prod_grad_with_zeros(x, f64):
    x = np.array(x)
    g = functrans.grad(lambda x: lax.reduce_prod(x, (0,)))(x)
    expected = [np.prod(np.delete(x, i)) for i in range(len(x))]
    np.testing.assert_allclose(_np(g), expected)
    check_grads(lambda x: lax.reduce_prod(x, (0,)), (x,), order=1)


def test_cumulative_grads_extreme_values(f64):
    # zeros in cumprod; a wide dynamic range in cumlogsumexp (no NaN from rescaling)
    x = np.array([1.5, 0.0, 2.0, 0.0, -1.0])
    check_grads(lambda x: lax.cumprod(x), (x,), order=1)
    y = np.array([-800.0, 0.0, -900.0, 1.0])
    _, t = functrans.jvp(lax.cumlogsumexp, (y,), (np.ones(4),))
    np.testing.assert_allclose(_np(t), np.ones(4))
    check_grads(lax.cumlogsumexp, (y,), order=1)


def test_cumsum_transpose_is_reverse_cumsum(f64):
    jaxpr = functrans.make_jaxpr(functrans.grad(lambda x: (lax.cumsum(x) * x).sum()))(np.ones(3))
    reversed_ = [e for e in jaxpr.eqns if e.primitive.name == "cumsum" and e.params["reverse"]]
    assert reversed_


@pytest.mark.parametrize("fn", [
    lambda x: lax.reduce_max(x, (1,)),
    lambda x: lax.reduce_prod(x, (0, 2)),
    lambda x: lax.argmin(x, 2, np.int32),
    lambda x: lax.cumsum(x, axis=1, reverse=True),
    lambda x: lax.cummax(x, axis=2),
    lambda x: lax.cumlogsumexp(x, axis=0),
])
def test_reductions_vmap(fn):
    x = np.random.default_rng(2).standard_normal((3, 4, 2)).astype(np.float32)
    for seed in range(3):
        _check_vmap(fn, (x,), seed)


def test_per_example_gradient_of_cumulative_ops():
    x = np.random.default_rng(3).standard_normal((4, 5)).astype(np.float32)
    f = lambda x: (lax.cumprod(x) * lax.cummax(x)).sum()  # noqa: E731
    batched = functrans.vmap(functrans.grad(f))(x)
    for i in range(4):
        np.testing.assert_allclose(_np(batched)[i], _np(functrans.grad(f)(x[i])), rtol=1e-5)


# =============================================================================================
# Sorting
# =============================================================================================


@settings(max_examples=15, deadline=None)
@given(case=_shape_and_axes(), nan=st.booleans())
def test_sort_matches_numpy(case, nan):
    shape, _, seed = case
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 3, shape).astype(np.float32)
    if nan:
        x.flat[rng.integers(0, x.size)] = np.nan
    dim = int(rng.integers(0, len(shape)))
    np.testing.assert_array_equal(_np(lax.sort(x, dimension=dim)), np.sort(x, axis=dim))


def test_sort_total_order_of_floats():
    x = np.array([3.0, np.nan, 0.0, -0.0, -np.inf, np.inf, -np.nan, -2.0], np.float32)
    out = _np(lax.sort(x))
    np.testing.assert_array_equal(out[:6], [-np.inf, -2.0, -0.0, 0.0, 3.0, np.inf])
    assert np.signbit(out[2]) and not np.signbit(out[3])
    assert np.isnan(out[6:]).all()


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 8), seed=st.integers(0, 1000))
def test_sort_multi_operand_is_stable_lexicographic(n, seed):
    rng = np.random.default_rng(seed)
    k1, k2 = rng.integers(0, 2, (2, 3, n)).astype(np.int32)
    vals = rng.standard_normal((3, n)).astype(np.float32)
    o1, o2, ov = lax.sort((k1, k2, vals), dimension=1, num_keys=2)
    order = np.stack([np.lexsort((k2[i], k1[i])) for i in range(3)])
    np.testing.assert_array_equal(_np(ov), np.take_along_axis(vals, order, 1))
    # one key: ties keep their original order
    _, ov1 = lax.sort_key_val(k1, vals, dimension=1)
    np.testing.assert_array_equal(_np(ov1), np.take_along_axis(vals, np.argsort(k1, 1, kind="stable"), 1))


@settings(max_examples=15, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), seed=st.integers(0, 1000))
def test_top_k_matches_numpy(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-4, 4, shape).astype(np.float32)
    k = int(rng.integers(0, shape[-1] + 1))
    values, indices = lax.top_k(x, k)
    order = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    np.testing.assert_array_equal(_np(indices), order)
    assert _np(indices).dtype == np.int32
    np.testing.assert_array_equal(_np(values), np.take_along_axis(x, order, -1))


def test_sort_and_top_k_grads(f64):
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((2, 3, 5))
    check_grads(lambda x: lax.sort(x, dimension=0), (x,), order=2)
    check_grads(lambda x, y: lax.sort((x, y), dimension=1, num_keys=1), (x, y), order=2)
    check_grads(lambda x: lax.top_k(x, 3)[0], (x,), order=2)


def test_sort_vmap():
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((2, 3, 4)).astype(np.float32)
    for seed in range(3):
        _check_vmap(lambda x, y: lax.sort((x, y), dimension=1, num_keys=1), (x, y), seed)
        _check_vmap(lambda x: lax.top_k(x, 2), (x,), seed)


# =============================================================================================
# dot_general
# =============================================================================================


@st.composite
def _dot_case(draw):
    nb, nc, nlf, nrf = (draw(st.integers(0, 2)) for _ in range(4))
    sizes = [draw(st.integers(1, 3)) for _ in range(nb + nc + nlf + nrf)]
    batch, contract = sizes[:nb], sizes[nb:nb + nc]
    lfree, rfree = sizes[nb + nc:nb + nc + nlf], sizes[nb + nc + nlf:]
    seed = draw(st.integers(0, 10 ** 6))
    rng = np.random.default_rng(seed)
    # random placement of each group's axes inside lhs and rhs
    lhs_axes = ["b"] * nb + ["c"] * nc + ["l"] * nlf
    rhs_axes = ["b"] * nb + ["c"] * nc + ["r"] * nrf
    lhs_perm, rhs_perm = rng.permutation(len(lhs_axes)), rng.permutation(len(rhs_axes))
    return batch, contract, lfree, rfree, lhs_perm, rhs_perm, seed


def _build_dot(case):
    batch, contract, lfree, rfree, lhs_perm, rhs_perm, seed = case
    letters = iter("abcdefghijklmnop")
    b_l = [next(letters) for _ in batch]
    c_l = [next(letters) for _ in contract]
    lf_l = [next(letters) for _ in lfree]
    rf_l = [next(letters) for _ in rfree]
    size = dict(zip(b_l + c_l + lf_l + rf_l, batch + contract + lfree + rfree))
    lhs_letters = [(b_l + c_l + lf_l)[i] for i in lhs_perm]
    rhs_letters = [(b_l + c_l + rf_l)[i] for i in rhs_perm]
    rng = np.random.default_rng(seed)
    lhs = rng.standard_normal([size[c] for c in lhs_letters])
    rhs = rng.standard_normal([size[c] for c in rhs_letters])
    dn = ((tuple(lhs_letters.index(c) for c in c_l), tuple(rhs_letters.index(c) for c in c_l)),
          (tuple(lhs_letters.index(c) for c in b_l), tuple(rhs_letters.index(c) for c in b_l)))
    out_letters = b_l + [c for c in lhs_letters if c in lf_l] + [c for c in rhs_letters if c in rf_l]
    spec = f"{''.join(lhs_letters)},{''.join(rhs_letters)}->{''.join(out_letters)}"
    return lhs, rhs, dn, spec


@settings(max_examples=25, deadline=None)
@given(case=_dot_case())
def test_dot_general_matches_einsum(case):
    lhs, rhs, dn, spec = _build_dot(case)
    lhs, rhs = lhs.astype(np.float32), rhs.astype(np.float32)
    out = lax.dot_general(lhs, rhs, dn)
    np.testing.assert_allclose(_np(out), np.einsum(spec, lhs, rhs), rtol=1e-5, atol=1e-5)


@settings(max_examples=10, deadline=None)
@given(case=_dot_case())
def test_dot_general_grads(case):
    with x64():
        lhs, rhs, dn, _ = _build_dot(case)
        check_grads(lambda a, b: lax.dot_general(a, b, dn), (lhs, rhs), order=2)


@settings(max_examples=10, deadline=None)
@given(case=_dot_case(), seed=st.integers(0, 1000))
def test_dot_general_vmap(case, seed):
    lhs, rhs, dn, _ = _build_dot(case)
    args = (lhs.astype(np.float32), rhs.astype(np.float32))
    _check_vmap(lambda a, b: lax.dot_general(a, b, dn), args, seed)


def test_dot_general_ints_and_preferred_type():
    a = np.arange(6, dtype=np.int8).reshape(2, 3)
    out = lax.dot_general(a, a.T.copy(), (((1,), (0,)), ((), ())), preferred_element_type=np.int32)
    assert _np(out).dtype == np.int32
    np.testing.assert_array_equal(_np(out), a.astype(np.int32) @ a.T.astype(np.int32))


def _eqns(jaxpr, name):
    return [e for e in jaxpr.eqns if e.primitive.name == name]


def test_vmap_of_matmul_is_one_batched_dot_general():
    x = np.ones((7, 2, 3), np.float32)
    y = np.ones((7, 3, 4), np.float32)
    jaxpr = functrans.make_jaxpr(functrans.vmap(lax.dot))(x, y)
    dots = _eqns(jaxpr, "dot_general")
    assert len(dots) == 1 and len(jaxpr.eqns) == 1
    (_, _), (lhs_batch, rhs_batch) = dots[0].params["dimension_numbers"]
    assert lhs_batch == (0,) and rhs_batch == (0,)
    assert jaxpr.out_avals[0].shape == (7, 2, 4)


def test_per_example_gradients_are_batched_matmuls():
    w = np.ones((3, 4), np.float32)
    xs = np.ones((5, 2, 3), np.float32)
    loss = lambda w, x: lax.square(lax.dot(x, w)).sum()  # noqa: E731
    jaxpr = functrans.make_jaxpr(functrans.vmap(functrans.grad(loss), in_axes=(None, 0)))(w, xs)
    assert _eqns(jaxpr, "dot_general")
    out = functrans.vmap(functrans.grad(loss), in_axes=(None, 0))(w, xs)
    for i in range(5):
        np.testing.assert_allclose(_np(out)[i], _np(functrans.grad(loss)(w, xs[i])), rtol=1e-5)


def test_dot_general_shape_errors():
    with pytest.raises(TypeError, match="dot_general"):
        lax.dot_general(np.ones((2, 3)), np.ones((4, 5)), (((1,), (0,)), ((), ())))
    with pytest.raises(TypeError, match="dot"):
        lax.dot(np.ones((2, 3, 4)), np.ones(4))


def test_dot_helpers():
    rng = np.random.default_rng(6)
    a, b, v = rng.standard_normal((3, 4)), rng.standard_normal((4, 2)), rng.standard_normal(4)
    np.testing.assert_allclose(_np(lax.dot(a, b)), a @ b, rtol=1e-5)
    np.testing.assert_allclose(_np(lax.dot(a, v)), a @ v, rtol=1e-5)
    np.testing.assert_allclose(_np(lax.dot(v, v)), v @ v, rtol=1e-5)
    x, y = rng.standard_normal((2, 5, 3, 4)), rng.standard_normal((2, 5, 4, 2))
    np.testing.assert_allclose(_np(lax.batch_matmul(x, y)), x @ y, rtol=1e-5)


# =============================================================================================
# conv_general_dilated
# =============================================================================================


CONV_CASES = [
    # strides, padding, lhs_dilation, rhs_dilation, feature groups, batch groups
    ((1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1), 1, 1),
    ((2, 1), ((1, 2), (-1, 1)), (1, 1), (1, 2), 1, 1),
    ((1, 2), ((1, 1), (0, 0)), (2, 1), (1, 1), 2, 1),
    ((2, 2), ((0, 1), (2, 0)), (1, 2), (2, 1), 1, 2),
    ((1, 1), ((2, 2), (1, 1)), (2, 2), (1, 1), 1, 1),
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_matches_definition_and_grads(case, f64):
    strides, padding, lhs_dil, rhs_dil, fgc, bgc = case
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4, 5, 4))
    w = rng.standard_normal((4, 4 // fgc, 3, 2))
    f = lambda a, b: lax.conv_general_dilated(a, b, strides, padding, lhs_dil, rhs_dil,  # noqa: E731
                                              feature_group_count=fgc, batch_group_count=bgc)
    np.testing.assert_allclose(_np(f(x, w)), naive_conv(x, w, strides, padding, lhs_dil, rhs_dil, fgc, bgc),
                               rtol=1e-10, atol=1e-10)
    check_grads(f, (x, w), order=2 if case is CONV_CASES[1] else 1)


@pytest.mark.parametrize("padding", ["SAME", "VALID", "SAME_LOWER"])
def test_conv_layouts_and_padding_strings(padding, f64):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 6, 5))           # NCHW
    w = rng.standard_normal((4, 3, 3, 2))           # OIHW
    strides = (2, 1)
    pads = lax.padtype_to_pads((6, 5), (3, 2), strides, padding)
    if padding == "SAME":
        assert pads == ((0, 1), (0, 1))
    expected = naive_conv(x, w, strides, pads, (1, 1), (1, 1))
    xh, wh = np.transpose(x, (0, 2, 3, 1)), np.transpose(w, (2, 3, 1, 0))
    f = lambda a, b: lax.conv_general_dilated(a, b, strides, padding,  # noqa: E731
                                              dimension_numbers=("NHWC", "HWIO", "NHWC"))
    np.testing.assert_allclose(_np(f(xh, wh)), np.transpose(expected, (0, 2, 3, 1)), rtol=1e-10)
    check_grads(f, (xh, wh), order=2 if padding == "SAME" else 1)


def test_conv_1d_and_3d(f64):
    rng = np.random.default_rng(9)
    x1, w1 = rng.standard_normal((2, 3, 7)), rng.standard_normal((2, 3, 3))
    np.testing.assert_allclose(_np(lax.conv(x1, w1, (2,), "VALID")),
                               naive_conv(x1, w1, (2,), ((0, 0),), (1,), (1,)), rtol=1e-10)
    x3, w3 = rng.standard_normal((1, 2, 3, 4, 3)), rng.standard_normal((2, 2, 2, 2, 2))
    f = lambda a, b: lax.conv_general_dilated(a, b, (1, 2, 1), "SAME")  # noqa: E731
    check_grads(f, (x3, w3), order=1)


@pytest.mark.parametrize("groups", [(1, 1), (2, 1), (1, 2)])
def test_conv_vmap(groups):
    fgc, bgc = groups
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 4, 5, 4)).astype(np.float32)
    w = rng.standard_normal((4, 4 // fgc, 3, 2)).astype(np.float32)
    f = lambda a, b: lax.conv_general_dilated(  # noqa: E731
        a, b, (2, 1), "SAME", rhs_dilation=(1, 2), dimension_numbers=("NCHW", "OIHW", "NHWC"),
        feature_group_count=fgc, batch_group_count=bgc)
    for seed in range(4):
        _check_vmap(f, (x, w), seed)


def test_conv_shape_errors():
    with pytest.raises(TypeError, match="conv_general_dilated"):
        lax.conv(np.ones((1, 3, 5, 5)), np.ones((2, 4, 3, 3)), (1, 1), "VALID")


# =============================================================================================
# Matrix decompositions
# =============================================================================================


def _spd(rng, shape):
    a = rng.standard_normal(shape)
    return a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])


@settings(max_examples=10, deadline=None)
@given(batch=st.lists(st.integers(1, 3), max_size=2), n=st.integers(1, 5), seed=st.integers(0, 999))
def test_cholesky_and_eigh_match_numpy(batch, n, seed):
    s = _spd(np.random.default_rng(seed), tuple(batch) + (n, n)).astype(np.float32)
    np.testing.assert_allclose(_np(lax.cholesky(s)), np.linalg.cholesky(s), rtol=1e-4, atol=1e-4)
    v, w = lax.eigh(s)
    np.testing.assert_allclose(_np(w), np.linalg.eigvalsh(s), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(s @ _np(v), _np(v) * _np(w)[..., None, :], rtol=1e-3, atol=1e-3)


def test_cholesky_of_indefinite_matrix_is_nan():
    assert np.isnan(_np(lax.cholesky(np.array([[1.0, 2.0], [2.0, 1.0]], np.float32)))).all()


@pytest.mark.parametrize("left_side,lower,transpose_a,unit_diagonal",
                         list(itertools.product([True, False], repeat=4)))
def test_triangular_solve(left_side, lower, transpose_a, unit_diagonal, f64):
    rng = np.random.default_rng(11)
    a = rng.standard_normal((2, 4, 4)) + 4 * np.eye(4)
    b = rng.standard_normal((2, 4, 3) if left_side else (2, 3, 4))
    f = lambda a, b: lax.triangular_solve(a, b, left_side=left_side, lower=lower,  # noqa: E731
                                          transpose_a=transpose_a, unit_diagonal=unit_diagonal)
    op = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        op[:, range(4), range(4)] = 1
    if transpose_a:
        op = np.swapaxes(op, -1, -2)
    x = _np(f(a, b))
    np.testing.assert_allclose(op @ x if left_side else x @ op, b, atol=1e-10)
    check_grads(f, (a, b), order=2 if not unit_diagonal else 1)


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 4, 4)])
def test_lu(shape, f64):
    m = np.random.default_rng(12).standard_normal(shape)
    lu, pivots, perm = (_np(o) for o in lax.lu(m))
    rows, cols = shape[-2:]
    k = min(rows, cols)
    lower = np.tril(lu, -1)[..., :, :k] + np.eye(rows, k)
    upper = np.triu(lu)[..., :k, :]
    np.testing.assert_allclose(lower @ upper, np.take_along_axis(m, perm[..., :, None], -2), atol=1e-10)
    # the pivots (row swaps) produce the permutation
    for idx in np.ndindex(*shape[:-2]):
        p = np.arange(rows)
        for i, j in enumerate(pivots[idx]):
            p[[i, j]] = p[[j, i]]
        np.testing.assert_array_equal(p, perm[idx])
    # partial pivoting: every multiplier in L is at most 1 in magnitude
    assert np.abs(lower).max() <= 1 + 1e-12
    if rows == cols:
        check_grads(lambda a: lax.lu(a)[0], (m,), order=1)


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (2, 5, 3)])
def test_qr(shape, f64):
    m = np.random.default_rng(13).standard_normal(shape)
    q, r = (_np(o) for o in lax.qr(m, full_matrices=False))
    np.testing.assert_allclose(q @ r, m, atol=1e-10)
    eye = np.broadcast_to(np.eye(shape[-1]), r.shape[:-2] + (shape[-1],) * 2)
    np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, eye, atol=1e-10)
    np.testing.assert_allclose(r, np.triu(r))
    qf, rf = lax.qr(m, full_matrices=True)
    assert _np(qf).shape == shape[:-2] + (shape[-2], shape[-2])
    np.testing.assert_allclose(_np(qf) @ _np(rf), m, atol=1e-10)
    check_grads(lambda a: lax.qr(a, full_matrices=False), (m,), order=2)


def test_eigh_grads(f64):
    rng = np.random.default_rng(14)
    a = rng.standard_normal((2, 4, 4))
    check_grads(lambda a: lax.eigh(a), (a + np.swapaxes(a, -1, -2),), order=2, modes=("fwd",))
    check_grads(lambda a: lax.eigh(a)[1], (a,), order=2)
    check_grads(lambda a: lax.cholesky(a), (_spd(rng, (2, 3, 3)),), order=2)


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 4, 3)])
def test_svd(shape, f64):
    m = np.random.default_rng(15).standard_normal(shape)
    u, s, vh = (_np(o) for o in lax.svd(m, full_matrices=False))
    np.testing.assert_allclose((u * s[..., None, :]) @ vh, m, atol=1e-10)
    np.testing.assert_allclose(_np(lax.svd(m, compute_uv=False)), np.linalg.svd(m, compute_uv=False))
    uf, _, vhf = lax.svd(m, full_matrices=True)
    assert _np(uf).shape[-1] == shape[-2] and _np(vhf).shape[-2] == shape[-1]
    check_grads(lambda a: lax.svd(a, compute_uv=False), (m,), order=2)
    check_grads(lambda a: lax.svd(a, full_matrices=False), (m,), order=1, modes=("fwd",))


@pytest.mark.parametrize("fn", [
    lambda a: lax.cholesky(a),
    lambda a: lax.eigh(a)[1],
    lambda a: lax.qr(a, full_matrices=False),
    lambda a: lax.svd(a, compute_uv=False),
    lambda a: lax.lu(a)[0],
    lambda a: lax.triangular_solve(a, a, left_side=True, lower=True),
])
def test_decompositions_vmap(fn):
    a = _spd(np.random.default_rng(16), (3, 3)).astype(np.float32)
    for seed in range(3):
        _check_vmap(fn, (a,), seed)


def test_triangular_solve_vmap_mixed():
    rng = np.random.default_rng(17)
    a = (rng.standard_normal((3, 3)) + 3 * np.eye(3)).astype(np.float32)
    b = rng.standard_normal((3, 2)).astype(np.float32)
    for seed in range(4):
        _check_vmap(lambda a, b: lax.triangular_solve(a, b, left_side=True, lower=False), (a, b), seed)


# =============================================================================================
# jit vs eager
# =============================================================================================


@pytest.mark.parametrize("fn", [
    lambda x: lax.reduce_max(x, (0,)) + lax.reduce_prod(x, (1,)).sum(),
    lambda x: lax.argmax(x, 1, np.int32),
    lambda x: lax.cumlogsumexp(x, axis=1, reverse=True),
    lambda x: lax.sort(x, dimension=0),
    lambda x: lax.top_k(x, 2),
    lambda x: lax.dot_general(x, x, (((1,), (1,)), ((), ()))),
    lambda x: lax.qr(x, full_matrices=False),
    lambda x: functrans.grad(lambda y: lax.cummax(y, axis=1).sum() * lax.sort(y).sum())(x),
])
def test_jit_matches_eager(fn):
    x = np.random.default_rng(18).standard_normal((4, 3)).astype(np.float32)
    eager = fn(x)
    compiled = functrans.jit(fn)(x)
    for a, b in zip(functrans.tree_util.tree_leaves(compiled), functrans.tree_util.tree_leaves(eager)):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-5, atol=1e-6)


def test_jit_conv_grad_matches_eager():
    rng = np.random.default_rng(19)
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    loss = lambda x, w: lax.square(lax.conv(x, w, (1, 1), "SAME")).sum()  # noqa: E731
    g_eager = functrans.grad(loss, argnums=(0, 1))(x, w)
    g_jit = functrans.jit(functrans.grad(loss, argnums=(0, 1)))(x, w)
    for a, b in zip(g_jit, g_eager):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape,axes", [((2, 0), (0, 1)), ((2, 0, 3), (0, 1)), ((2, 0, 3), (1,)),
                                        ((0, 3), (0,)), ((3, 0, 0), (0, 2))])
@pytest.mark.parametrize("op,ufunc", [(lax.reduce_xor, np.bitwise_xor), (lax.reduce_sum, np.add)])
def test_compiled_reductions_of_empty_operands(shape, axes, op, ufunc):
    # the compiler's loop merging divided by the empty extent
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    got = functrans.jit(lambda x: op(x, axes))(x)
    np.testing.assert_array_equal(np.asarray(got), ufunc.reduce(x, axis=axes))


def test_products_of_integers_differentiate_to_float0():
    # an integer operand's tangent and cotangent are float0 zeros, never multiplied
    f = lambda x, y: lax.dot_general(x, y, (((0,), (0,)), ((), ())))  # noqa: E731
    x, y = np.arange(3, dtype=np.int32), np.ones(3, np.int32)
    out, vjp_fun = functrans.vjp(f, x, y)
    ct_x, ct_y = vjp_fun(np.zeros((), functrans.dtypes.float0))
    assert ct_x.dtype == functrans.dtypes.float0 and ct_x.shape == (3,)
    assert ct_y.dtype == functrans.dtypes.float0
    _, t = functrans.jvp(f, (x, y), (np.zeros(3, functrans.dtypes.float0),) * 2)
    assert int(out) == 3 and t.dtype == functrans.dtypes.float0
