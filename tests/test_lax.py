"""functrans.lax beyond the generic primitive table: the enums, the small functions, the
convolution and scatter helpers, mulhi, bitcast_convert_type, reduce_precision, the rng
primitives and the special functions against NumPy/SciPy, under grad (finite differences in
x64), vmap (against a Python loop) and jit (against eager), and the ``*_p`` exports."""


from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.special as sp

import functrans as ft
import functrans.numpy as jnp
from functrans import lax
from functrans.test_util import check_grads, x64 as enable_x64

RNG = np.random.RandomState(0)


def _np(x):
    return np.asarray(x)


def _vmap_matches_loop(f, *args):
    batched = _np(ft.vmap(f)(*args))
    looped = np.stack([_np(f(*[a[i] for a in args])) for i in range(args[0].shape[0])])
    np.testing.assert_array_equal(batched, looped)


def _jit_matches_eager(f, *args):
    np.testing.assert_array_equal(_np(ft.jit(f)(*args)), _np(f(*args)))


# =============================================================================================
# Enums and types
# =============================================================================================


def test_precision_enum_and_strings():
    P = lax.Precision
    assert [p.value for p in P] == [0, 1, 2]
    assert P("highest") is P.HIGHEST and P("float32") is P.HIGHEST
    assert P("bfloat16") is P.DEFAULT and P("tensorfloat32") is P.HIGH and P(1) is P.HIGH
    assert str(P.HIGH) == "HIGH"
    with pytest.raises(ValueError):
        P("fast")


def test_other_enums():
    assert int(lax.RoundingMethod.TO_NEAREST_EVEN) == 1
    assert [int(a) for a in lax.RandomAlgorithm] == [0, 1, 2]
    assert str(lax.RandomAlgorithm.RNG_THREE_FRY) == "RNG_THREE_FRY"
    assert lax.DotAlgorithm(np.float32, np.float32, np.float32).lhs_component_count == 1
    assert "F64_F64_F64" in lax.DotAlgorithmPreset.__members__
    assert lax.Tolerance(atol=1e-3) == lax.Tolerance(atol=1e-3)
    with pytest.raises(ValueError):
        lax.Tolerance(rtol=-1)
    x = jnp.array([0.5, 1.5, 2.5, -0.5])
    np.testing.assert_array_equal(_np(lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)),
                                  [0, 2, 2, -0.0])
    np.testing.assert_array_equal(_np(lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO)),
                                  [1, 2, 3, -1])


A = RNG.randn(3, 3).astype(np.float32)
V = RNG.randn(3).astype(np.float32)
_PRECISIONS = [lax.Precision.DEFAULT, lax.Precision.HIGHEST, "highest", "bfloat16",
               (lax.Precision.HIGH, lax.Precision.DEFAULT), lax.DotAlgorithmPreset.BF16_BF16_F32,
               lax.DotAlgorithm(np.float32, np.float32, np.float32)]
_PRECISION_CALLS = {
    "lax.dot_general": lambda p: lax.dot_general(A, A, (((1,), (0,)), ((), ())), precision=p),
    "lax.dot": lambda p: lax.dot(A, A, precision=p),
    "lax.conv_general_dilated": lambda p: lax.conv_general_dilated(
        jnp.ones((1, 1, 5, 5)), jnp.ones((1, 1, 3, 3)), (1, 1), "SAME", precision=p),
    "lax.conv_transpose": lambda p: lax.conv_transpose(
        jnp.ones((1, 5, 5, 1)), jnp.ones((3, 3, 1, 1)), (1, 1), "SAME", precision=p),
    "lax.ragged_dot": lambda p: lax.ragged_dot(A, A[None], jnp.array([3]), precision=p),
    "jnp.matmul": lambda p: jnp.matmul(A, A, precision=p),
    "jnp.dot": lambda p: jnp.dot(A, A, precision=p),
    "jnp.vdot": lambda p: jnp.vdot(V, V, precision=p),
    "jnp.inner": lambda p: jnp.inner(V, V, precision=p),
    "jnp.tensordot": lambda p: jnp.tensordot(A, A, 1, precision=p),
    "jnp.einsum": lambda p: jnp.einsum("ij,jk->ik", A, A, precision=p),
    "jnp.linalg.multi_dot": lambda p: jnp.linalg.multi_dot([A, A, A], precision=p),
    "jnp.convolve": lambda p: jnp.convolve(V, V, precision=p),
}


@pytest.mark.parametrize("name", sorted(_PRECISION_CALLS))
def test_every_precision_is_accepted_and_changes_nothing(name):
    f = _PRECISION_CALLS[name]
    ref = _np(f(None))
    for p in _PRECISIONS:
        np.testing.assert_array_equal(_np(f(p)), ref)
    jitted = ft.jit(lambda: f(lax.Precision.HIGHEST))
    np.testing.assert_allclose(_np(jitted()), ref, rtol=1e-6, atol=1e-6)


def test_accuracy_keyword_accepted():
    x = jnp.array([0.3, 1.7])
    for fn in (lax.exp, lax.tanh, lax.log1p, lax.sqrt):
        ref = _np(fn(x))
        np.testing.assert_array_equal(_np(fn(x, accuracy=lax.Tolerance(rtol=1e-3))), ref)
        np.testing.assert_array_equal(_np(fn(x, accuracy=lax.AccuracyMode.HIGHEST)), ref)


# =============================================================================================
# Small functions
# =============================================================================================


def test_reciprocal():
    np.testing.assert_array_equal(_np(lax.reciprocal(jnp.array([2.0, 4.0]))), [0.5, 0.25])
    assert lax.reciprocal(2.0).dtype == np.float32
    with pytest.raises(TypeError):
        lax.reciprocal(jnp.arange(3))


def test_full_like_empty_broadcast_to_rank_collapse():
    out = lax.full_like(jnp.ones(3, jnp.int32), 2.7)
    assert out.dtype == np.int32 and _np(out).tolist() == [2, 2, 2]
    out = lax.full_like(jnp.ones(3), 3, dtype=jnp.bool_, shape=(2, 2))
    assert out.dtype == np.bool_ and out.shape == (2, 2)
    assert lax.full_like(2.0, 3).weak_type
    assert not lax.full_like(jnp.ones(2), 3).weak_type
    out = lax.empty((2, 3), jnp.int32)
    assert out.shape == (2, 3) and out.dtype == np.int32
    assert lax.broadcast_to_rank(jnp.ones(3), 3).shape == (1, 1, 3)
    assert lax.broadcast_to_rank(jnp.ones((2, 3)), 1).shape == (2, 3)
    x = np.arange(120.0).reshape(2, 3, 4, 5)
    for args, shape in [((1, 3), (2, 12, 5)), ((1,), (2, 60)), ((-2,), (2, 3, 20)),
                        ((1, -1), (2, 12, 5)), ((2, 2), (2, 3, 1, 4, 5))]:
        out = lax.collapse(jnp.asarray(x), *args)
        np.testing.assert_array_equal(_np(out), x.reshape(shape))
    with pytest.raises(ValueError):
        lax.collapse(jnp.asarray(x), 3, 1)


def test_index_take_matches_numpy():
    x = np.arange(24).reshape(2, 3, 4)
    i0, i2 = np.array([1, 0, 5, -1]), np.array([2, 0, 3, -2])
    out = lax.index_take(jnp.asarray(x), (jnp.asarray(i0), jnp.asarray(i2)), (0, 2))
    np.testing.assert_array_equal(_np(out), x[i0 % 2, :, i2 % 4])
    # the order of (axis, index) pairs does not matter
    out = lax.index_take(jnp.asarray(x), (jnp.asarray(i2), jnp.asarray(i0)), (2, 0))
    np.testing.assert_array_equal(_np(out), x[i0 % 2, :, i2 % 4])
    out = lax.index_take(jnp.asarray(x), (jnp.array([2, 0]),), (1,))
    np.testing.assert_array_equal(_np(out), np.moveaxis(x[:, [2, 0]], 1, 0))


def test_split_and_stack_family():
    x = np.arange(12).reshape(3, 4)
    pieces = lax.split(jnp.asarray(x), [1, 0, 3], axis=-1)
    for got, want in zip(pieces, np.split(x, [1, 1], axis=1)):
        np.testing.assert_array_equal(_np(got), want)
    with pytest.raises(ValueError):
        lax.split(jnp.arange(10), [3, 6])
    np.testing.assert_array_equal(_np(lax.stack([jnp.ones(2), jnp.zeros(2)], axis=-1)),
                                  np.stack([np.ones(2), np.zeros(2)], axis=-1))
    for got, want in zip(lax.unstack(jnp.asarray(x), axis=1), np.moveaxis(x, 1, 0)):
        np.testing.assert_array_equal(_np(got), want)
    np.testing.assert_array_equal(_np(lax.tile(jnp.asarray(x), (2, 3))), np.tile(x, (2, 3)))
    with pytest.raises(TypeError):
        lax.tile(jnp.arange(3), (2, 2))
    np.testing.assert_array_equal(_np(lax.broadcast_like(jnp.arange(3), jnp.ones((2, 3)))),
                                  np.broadcast_to(np.arange(3), (2, 3)))


def test_split_grad_and_vmap():
    f = lambda x: sum(jnp.sum(p ** (i + 1)) for i, p in enumerate(lax.split(x, [2, 3])))
    with enable_x64():
        check_grads(f, (jnp.asarray(RNG.randn(5)),), order=1)


def test_broadcast_shapes_dtype_shape_as_value():
    for shapes in [((2, 1), (3,)), ((1,), (4, 1, 5)), ((), (2,)), ((0, 1), (3,))]:
        assert lax.broadcast_shapes(*shapes) == np.broadcast_shapes(*shapes)
    with pytest.raises(ValueError):
        lax.broadcast_shapes((2, 1), (4, 3))
    assert lax.dtype(1.0) == np.float32 and lax.dtype(1) == np.int32
    assert lax.dtype(True) == np.bool_ and lax.dtype(1j) == np.complex64
    assert lax.dtype(np.float64) == np.float32 and lax.dtype("float64") == np.float32
    assert lax.dtype(np.arange(3, dtype=np.int64)) == np.int32
    with enable_x64():
        assert lax.dtype(np.float64) == np.float64
    with pytest.raises(TypeError):
        lax.dtype([1, 2])
    out = lax.shape_as_value((2, 3))
    assert out.dtype == np.int32 and out.tolist() == [2, 3]


def test_axis_size_under_vmap_and_nested():
    f = ft.vmap(lambda x: x * lax.axis_size("i"), axis_name="i")
    np.testing.assert_array_equal(_np(f(jnp.ones(3))), [3, 3, 3])
    g = ft.vmap(ft.vmap(lambda x: x + lax.axis_size(("i", "j")), axis_name="j"), axis_name="i")
    np.testing.assert_array_equal(_np(g(jnp.zeros((2, 5)))), np.full((2, 5), 10))
    with pytest.raises(NameError):
        lax.axis_size("nope")


def test_axis_size_under_pmap():
    n = ft.device_count()
    f = ft.pmap(lambda x: x * lax.axis_size("d"), axis_name="d")
    np.testing.assert_array_equal(_np(f(jnp.ones(n))), np.full(n, n))


def test_platform_dependent():
    assert lax.platform_dependent(1.0, cpu=lambda x: x + 1, default=lambda x: x - 1) == 2.0
    assert lax.platform_dependent(1.0, cuda=lambda x: x + 1, default=lambda x: x - 1) == 0.0
    with pytest.raises(NotImplementedError):
        lax.platform_dependent(1.0, cuda=lambda x: x + 1)
    with pytest.raises(ValueError):
        lax.platform_dependent(1.0, gpu=lambda x: x)
    out = ft.jit(lambda z: lax.platform_dependent(z, cpu=lambda x: x * 2,
                                                  default=lambda x: x))(3.0)
    assert float(out) == 6.0


# ---- scatter_sub / scatter_apply -------------------------------------------------------------

_DN = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                  scatter_dims_to_operand_dims=(0,))
_DN_ROWS = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                       scatter_dims_to_operand_dims=(0,))


def test_scatter_sub_matches_numpy():
    idx = np.array([[1], [3], [1]])
    for dtype in (np.float32, np.int32, np.uint8):
        x, u = np.arange(5).astype(dtype), np.array([1, 2, 3]).astype(dtype)
        want = x.copy()
        np.subtract.at(want, idx[:, 0], u)
        out = lax.scatter_sub(jnp.asarray(x), jnp.asarray(idx), jnp.asarray(u), _DN)
        assert out.dtype == dtype
        np.testing.assert_array_equal(_np(out), want)
    with enable_x64():
        f = lambda x, u: lax.scatter_sub(x, jnp.asarray(idx), u, _DN) ** 2
        check_grads(f, (jnp.asarray(RNG.randn(5)), jnp.asarray(RNG.randn(3))), order=1)


def test_scatter_apply_counts_repeats_and_modes():
    x = jnp.arange(5.0)
    idx = jnp.array([[1], [3], [1], [7]])
    out = lax.scatter_apply(x, idx, lambda v: v * 10 + 1, _DN, update_shape=(4,))
    np.testing.assert_array_equal(_np(out), [0, 111, 2, 31, 4])        # index 7 dropped
    out = lax.scatter_apply(x, idx, lambda v: v * 10 + 1, _DN, mode="clip", update_shape=(4,))
    np.testing.assert_array_equal(_np(out), [0, 111, 2, 31, 41])       # index 7 -> 4
    rows = jnp.arange(12.0).reshape(4, 3)
    out = lax.scatter_apply(rows, jnp.array([[1], [3]]), lambda v: -v, _DN_ROWS,
                            update_shape=(2, 2))
    want = np.arange(12.0).reshape(4, 3)
    want[[1, 3], :2] *= -1
    np.testing.assert_array_equal(_np(out), want)
    out = lax.scatter_apply(x, jnp.array([[0], [2]]), jnp.sin, _DN, update_shape=(2,),
                            unique_indices=True)
    np.testing.assert_allclose(_np(out), [0, 1, np.sin(2), 3, 4], rtol=1e-6)
    f = lambda o: lax.scatter_apply(o, idx, lambda v: v * 2.0, _DN, update_shape=(4,))
    _jit_matches_eager(f, x)
    _vmap_matches_loop(f, jnp.asarray(RNG.randn(3, 5).astype(np.float32)))
    g = ft.jvp(f, (x,), (jnp.ones(5),))[1]
    np.testing.assert_array_equal(_np(g), [1, 4, 1, 2, 1])


# ---- convolution helpers ----------------------------------------------------------------------


def _numpy_patches_nchw(x, filt, strides, pads, rdil):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple(pads))
    kh, kw = filt
    eh, ew_ = (kh - 1) * rdil[0] + 1, (kw - 1) * rdil[1] + 1
    oh = (xp.shape[2] - eh) // strides[0] + 1
    ow = (xp.shape[3] - ew_) // strides[1] + 1
    out = np.zeros((n, c * kh * kw, oh, ow), x.dtype)
    for i, j in itertools.product(range(oh), range(ow)):
        for ch, a, b in itertools.product(range(c), range(kh), range(kw)):
            out[:, ch * kh * kw + a * kw + b, i, j] = \
                xp[:, ch, i * strides[0] + a * rdil[0], j * strides[1] + b * rdil[1]]
    return out


def test_conv_general_dilated_patches_matches_numpy():
    x = RNG.randn(2, 3, 5, 4).astype(np.float32)
    out = lax.conv_general_dilated_patches(jnp.asarray(x), (2, 3), (1, 1), "VALID")
    np.testing.assert_array_equal(_np(out), _numpy_patches_nchw(x, (2, 3), (1, 1),
                                                                ((0, 0), (0, 0)), (1, 1)))
    out = lax.conv_general_dilated_patches(jnp.asarray(x), (2, 2), (2, 1), [(1, 0), (2, 1)],
                                           rhs_dilation=(1, 2))
    np.testing.assert_array_equal(_np(out), _numpy_patches_nchw(x, (2, 2), (2, 1),
                                                                ((1, 0), (2, 1)), (1, 2)))
    # NHWC in and out: the same patches, channels last
    nhwc = np.moveaxis(x, 1, -1)
    out = lax.conv_general_dilated_patches(jnp.asarray(nhwc), (2, 3), (1, 1), "VALID",
                                           dimension_numbers=("NHWC", "HWIO", "NHWC"))
    np.testing.assert_array_equal(_np(out), np.moveaxis(_numpy_patches_nchw(
        x, (2, 3), (1, 1), ((0, 0), (0, 0)), (1, 1)), 1, -1))
    assert lax.conv_general_dilated_patches(jnp.ones((1, 2, 4, 4), jnp.int32), (2, 2), (1, 1),
                                            "VALID").dtype == np.int32


def test_conv_general_dilated_local_matches_numpy():
    x = RNG.randn(2, 3, 5, 4).astype(np.float32)
    patches = _numpy_patches_nchw(x, (2, 3), (1, 1), ((0, 0), (0, 0)), (1, 1))  # N,18,4,2
    rhs = RNG.randn(7, 18, 4, 2).astype(np.float32)                            # O,I,H,W
    want = np.einsum("nihw,oihw->nohw", patches, rhs)
    out = lax.conv_general_dilated_local(jnp.asarray(x), jnp.asarray(rhs), (1, 1), "VALID",
                                         (2, 3))
    np.testing.assert_allclose(_np(out), want, rtol=1e-5, atol=1e-5)
    # NHWC / HWIO / NHWC
    rhs_hwio = np.transpose(rhs, (2, 3, 1, 0))
    out = lax.conv_general_dilated_local(jnp.asarray(np.moveaxis(x, 1, -1)),
                                         jnp.asarray(rhs_hwio), (1, 1), "VALID", (2, 3),
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
    np.testing.assert_allclose(_np(out), np.moveaxis(want, 1, -1), rtol=1e-5, atol=1e-5)
    with enable_x64():
        f = lambda l, r: lax.conv_general_dilated_local(l, r, (1, 1), "VALID", (2, 2))
        check_grads(f, (jnp.asarray(RNG.randn(1, 2, 3, 3)), jnp.asarray(RNG.randn(2, 8, 2, 2))),
                    order=1)


def test_shape_tuples_match_real_convolutions():
    for lhs, rhs, strides, pad, dn in [
            ((1, 5, 5, 3), (3, 3, 3, 8), (1, 1), "SAME", ("NHWC", "HWIO", "NHWC")),
            ((1, 3, 5, 5), (8, 3, 3, 3), (2, 2), [(1, 1), (0, 0)], ("NCHW", "OIHW", "NCHW")),
            ((2, 7, 3), (3, 3, 4), (2,), "VALID", ("NWC", "WIO", "NCW"))]:
        real = lax.conv_general_dilated(jnp.ones(lhs), jnp.ones(rhs), strides, pad,
                                        dimension_numbers=dn).shape
        assert lax.conv_general_shape_tuple(lhs, rhs, strides, pad, dn) == real
    assert lax.conv_shape_tuple((1, 3, 5, 5), (8, 3, 3, 3), (2, 2), [(1, 1), (0, 0)]) == \
        (1, 8, 3, 2)
    assert lax.conv_shape_tuple((1, 3, 5, 5), (8, 3, 3, 3), (2, 2), "SAME") == (1, 8, 3, 3)
    assert lax.conv_shape_tuple((4, 3, 5, 5), (8, 3, 3, 3), (2, 2), [(1, 1), (0, 0)], 2) == \
        (2, 8, 3, 2)
    assert lax.conv_general_permutations(("NHWC", "HWIO", "NHWC")) == \
        ((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
    with pytest.raises(TypeError):
        lax.conv_general_permutations(("NHW", "HWIO", "NHWC"))
    dn = ("NHWC", "HWIO", "NHWC")
    for strides, pad in [((2, 2), "SAME"), ((2, 2), "VALID"), ((2, 1), [(1, 1), (0, 2)])]:
        real = lax.conv_transpose(jnp.ones((1, 5, 5, 3)), jnp.ones((3, 3, 3, 8)), strides, pad,
                                  dimension_numbers=dn).shape
        assert lax.conv_transpose_shape_tuple((1, 5, 5, 3), (3, 3, 3, 8), strides, pad,
                                              dn) == real
    assert lax.reduce_window_shape_tuple((1, 5, 5, 3), (1, 3, 3, 1), (1, 2, 2, 1),
                                         [(0, 0), (1, 1), (0, 0), (0, 0)]) == (1, 3, 2, 3)
    real = lax.reduce_window(jnp.ones((1, 5, 5, 3)), 0.0, lax.add, (1, 3, 3, 1), (1, 2, 2, 1),
                             [(0, 0), (1, 1), (0, 0), (0, 0)], (1, 2, 1, 1), (1, 1, 2, 1)).shape
    assert lax.reduce_window_shape_tuple((1, 5, 5, 3), (1, 3, 3, 1), (1, 2, 2, 1),
                                         [(0, 0), (1, 1), (0, 0), (0, 0)], (1, 2, 1, 1),
                                         (1, 1, 2, 1)) == real == (1, 5, 1, 3)


# ---- approx_max_k / approx_min_k -------------------------------------------------------------


def test_approx_top_k_is_exact():
    x = RNG.randn(4, 9).astype(np.float32)
    values, indices = lax.approx_max_k(jnp.asarray(x), 3)
    order = np.argsort(-x, axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(_np(indices), order)
    np.testing.assert_array_equal(_np(values), np.take_along_axis(x, order, 1))
    values, indices = lax.approx_min_k(jnp.asarray(x), 3, reduction_dimension=0)
    order = np.argsort(x, axis=0, kind="stable")[:3]
    np.testing.assert_array_equal(_np(indices), order)
    np.testing.assert_array_equal(_np(values), np.take_along_axis(x, order, 0))
    values, _ = lax.approx_max_k(jnp.asarray(x), 3, aggregate_to_topk=False)
    assert values.shape == (4, 9)
    ties = jnp.array([3.0, 1, 4, 1, 5, 9, 2, 6])
    assert _np(lax.approx_min_k(ties, 3)[1]).tolist() == [1, 3, 6]
    v, i = lax.approx_min_k(jnp.array([1.0, np.nan, 3.0]), 2)
    assert _np(i).tolist() == [0, 2]
    assert _np(lax.approx_max_k(jnp.array([1.0, np.nan, 3.0]), 1)[1]).tolist() == [1]
    with pytest.raises(ValueError):
        lax.approx_max_k(jnp.arange(3), 2)
    with pytest.raises(ValueError):
        lax.approx_max_k(jnp.ones(3), 4)
    g = ft.grad(lambda z: lax.approx_min_k(z, 2)[0].sum())(jnp.array([1.0, 5.0, 3.0, 0.0]))
    np.testing.assert_array_equal(_np(g), [1, 0, 0, 1])
    _vmap_matches_loop(lambda z: lax.approx_max_k(z, 2)[0], jnp.asarray(x))


# ---- ragged_dot --------------------------------------------------------------------------------


def _ragged_dot_reference(lhs, rhs, sizes):
    out = np.zeros((lhs.shape[0], rhs.shape[2]), np.result_type(lhs, rhs))
    start = 0
    for g, s in enumerate(sizes):
        stop = min(start + s, lhs.shape[0])
        out[start:stop] = lhs[start:stop] @ rhs[g]
        start = stop
    return out


def test_ragged_dot():
    lhs, rhs = RNG.randn(6, 3).astype(np.float32), RNG.randn(3, 3, 2).astype(np.float32)
    for sizes in ([2, 1, 2], [0, 6, 0], [2, 1, 4]):
        out = lax.ragged_dot(jnp.asarray(lhs), jnp.asarray(rhs), jnp.array(sizes, jnp.int32))
        np.testing.assert_allclose(_np(out), _ragged_dot_reference(lhs, rhs, sizes), rtol=1e-5,
                                   atol=1e-6)
    ints = lax.ragged_dot(jnp.arange(12).reshape(6, 2), jnp.arange(12).reshape(3, 2, 2),
                          jnp.array([2, 1, 2]))
    assert ints.dtype == np.int32
    np.testing.assert_array_equal(_np(ints), _ragged_dot_reference(
        np.arange(12).reshape(6, 2), np.arange(12).reshape(3, 2, 2), [2, 1, 2]))
    with enable_x64():
        sizes = jnp.array([2, 3, 1])
        check_grads(lambda l, r: lax.ragged_dot(l, r, sizes),
                    (jnp.asarray(RNG.randn(6, 3)), jnp.asarray(RNG.randn(3, 3, 2))), order=1)
    with pytest.raises(NotImplementedError):
        lax.ragged_dot(jnp.asarray(lhs), jnp.asarray(rhs), jnp.array([2, 2, 2]),
                       group_offset=jnp.array([0]))


# =============================================================================================
# New primitives
# =============================================================================================

# ---- mulhi ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32",
                                   "int64", "uint64"])
def test_mulhi_matches_python_integers(dtype):
    with enable_x64():
        info = np.iinfo(dtype)
        rng = np.random.default_rng(1)
        x = rng.integers(info.min, info.max, 50, dtype=dtype, endpoint=True)
        y = rng.integers(info.min, info.max, 50, dtype=dtype, endpoint=True)
        x[:4] = [info.min, info.max, info.max, 0]
        y[:4] = [info.min, info.max, info.min, info.max]
        bits = info.bits
        want = np.array([(int(a) * int(b)) >> bits for a, b in zip(x, y)], dtype=dtype)
        out = lax.mulhi(jnp.asarray(x), jnp.asarray(y))
        assert out.dtype == dtype
        np.testing.assert_array_equal(_np(out), want)
        _vmap_matches_loop(lax.mulhi, jnp.asarray(x.reshape(5, 10)), jnp.asarray(y.reshape(5, 10)))
        _jit_matches_eager(lax.mulhi, jnp.asarray(x), jnp.asarray(y))


def test_mulhi_scalar_and_errors():
    np.testing.assert_array_equal(_np(lax.mulhi(jnp.array([2**30, -7], jnp.int32), 8)), [2, -1])
    with pytest.raises(TypeError):
        lax.mulhi(jnp.ones(2), jnp.ones(2))


# ---- bitcast_convert_type -----------------------------------------------------------------------


def test_bitcast_convert_type_matches_numpy_view():
    x = RNG.randn(2, 3).astype(np.float32)
    out = lax.bitcast_convert_type(jnp.asarray(x), jnp.int32)
    np.testing.assert_array_equal(_np(out), x.view(np.int32))
    out = lax.bitcast_convert_type(jnp.asarray(x), jnp.uint8)
    assert out.shape == (2, 3, 4)
    np.testing.assert_array_equal(_np(out), x.reshape(2, 3, 1).view(np.uint8))
    back = lax.bitcast_convert_type(out, jnp.float32)
    np.testing.assert_array_equal(_np(back), x)
    halves = lax.bitcast_convert_type(jnp.asarray(x), jnp.bfloat16)
    assert halves.shape == (2, 3, 2) and halves.dtype == jnp.bfloat16
    assert int(lax.bitcast_convert_type(jnp.float32(1.0), jnp.int32)) == 1065353216
    assert lax.bitcast_convert_type(1.0, jnp.int32).shape == ()
    for bad in [(jnp.ones((2, 3), jnp.uint8), jnp.float32), (jnp.array([True]), jnp.uint8),
                (jnp.ones(1, jnp.complex64), jnp.float32)]:
        with pytest.raises(TypeError):
            lax.bitcast_convert_type(*bad)
    with enable_x64():
        y = RNG.randn(4)
        np.testing.assert_array_equal(_np(lax.bitcast_convert_type(jnp.asarray(y), jnp.uint32)),
                                      y.reshape(4, 1).view(np.uint32))


def test_bitcast_convert_type_transforms():
    x = jnp.asarray(RNG.randn(3, 4).astype(np.float32))
    _vmap_matches_loop(lambda v: lax.bitcast_convert_type(v, jnp.uint16), x)
    u8 = lax.bitcast_convert_type(x, jnp.uint8)            # (3, 4, 4)
    _vmap_matches_loop(lambda v: lax.bitcast_convert_type(v, jnp.float32), u8)
    f = ft.vmap(lambda v: lax.bitcast_convert_type(v, jnp.float32), in_axes=1)
    np.testing.assert_array_equal(_np(f(u8)), _np(x).T)
    _jit_matches_eager(lambda v: lax.bitcast_convert_type(v, jnp.uint8), x)
    g = ft.grad(lambda v: lax.bitcast_convert_type(v, jnp.float32).sum())(jnp.ones(2))
    np.testing.assert_array_equal(_np(g), [0, 0])      # no derivative flows (as in JAX)


# ---- reduce_precision ------------------------------------------------------------------------


def test_reduce_precision_emulates_bfloat16_and_float16():
    import ml_dtypes
    x = (RNG.randn(2000) * np.exp(RNG.uniform(-20, 20, 2000))).astype(np.float32)
    out = lax.reduce_precision(jnp.asarray(x), 8, 7)
    np.testing.assert_array_equal(_np(out), x.astype(ml_dtypes.bfloat16).astype(np.float32))
    normal = x[(np.abs(x) >= np.finfo(np.float16).tiny)]
    out = lax.reduce_precision(jnp.asarray(normal), 5, 10)
    with np.errstate(over="ignore"):  # beyond float16's range both give infinities
        want = normal.astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(_np(out), want)
    special = jnp.array([65519.0, 65520.0, 1e-40, -3e-5, np.nan, -np.inf, -0.0])
    out = _np(lax.reduce_precision(special, 5, 10))
    assert out[0] == 65504 and out[1] == np.inf and out[2] == 0 and out[3] == 0
    assert np.isnan(out[4]) and out[5] == -np.inf and np.signbit(out[6])
    # ties round to even on the kept bits
    ties = jnp.array([1.00390625, 1.01171875], jnp.float32)
    np.testing.assert_array_equal(_np(lax.reduce_precision(ties, 8, 7)), [1.0, 1.015625])
    with enable_x64():
        y = RNG.randn(100)
        np.testing.assert_array_equal(_np(lax.reduce_precision(jnp.asarray(y), 8, 23)),
                                      y.astype(np.float32).astype(np.float64))
    bf = lax.reduce_precision(jnp.array([1.2345678], jnp.bfloat16), 5, 2)
    assert bf.dtype == jnp.bfloat16 and float(bf[0]) == 1.25
    with pytest.raises(ValueError):
        lax.reduce_precision(jnp.ones(2), 0, 3)
    with pytest.raises(TypeError):
        lax.reduce_precision(jnp.arange(2), 8, 7)


def test_reduce_precision_transforms():
    p, t = ft.jvp(lambda v: lax.reduce_precision(v, 8, 7), (1.3,), (1.2345678,))
    assert float(p) == 1.296875 and float(t) == 1.234375
    g = ft.grad(lambda v: lax.reduce_precision(v, 8, 7) * 3.0)(1.3)
    assert float(g) == 3.0
    x = jnp.asarray(RNG.randn(3, 5).astype(np.float32))
    _vmap_matches_loop(lambda v: lax.reduce_precision(v, 5, 4), x)
    _jit_matches_eager(lambda v: lax.reduce_precision(v, 5, 4), x)


# ---- rng_bit_generator (bits recorded from JAX 0.10 on CPU) ------------------------------------

_KEY = jnp.array([1, 2, 3, 4], jnp.uint32)
_THREEFRY = lax.RandomAlgorithm.RNG_THREE_FRY
_PHILOX = lax.RandomAlgorithm.RNG_PHILOX


def test_rng_bit_generator_threefry_bits():
    key, bits = lax.rng_bit_generator(_KEY, (3,), algorithm=_THREEFRY)
    assert _np(bits).tolist() == [1576285164, 2249660814, 740599976]
    assert _np(key).tolist() == [1, 2, 5, 4]
    _, bits = lax.rng_bit_generator(_KEY, (2, 3), algorithm=_THREEFRY)
    assert _np(bits).ravel().tolist() == [1576285164, 740599976, 2436392515, 2249660814,
                                          2425682526, 1497962777]
    _, bits = lax.rng_bit_generator(_KEY, (3, 2), algorithm=_THREEFRY)
    assert _np(bits).ravel().tolist() == [1576285164, 2249660814, 740599976, 2425682526,
                                          2436392515, 1497962777]
    key, bits = lax.rng_bit_generator(_KEY, (3, 3), algorithm=_THREEFRY)
    assert _np(bits).ravel().tolist() == [1576285164, 740599976, 2436392515, 2249660814,
                                          2425682526, 1497962777, 1335360347, 3981753173,
                                          3812192618]
    assert _np(key).tolist() == [1, 2, 9, 4]
    _, bits = lax.rng_bit_generator(_KEY, (3,), dtype=jnp.uint8, algorithm=_THREEFRY)
    assert _np(bits).tolist() == [236, 142, 168]
    with enable_x64():
        _, bits = lax.rng_bit_generator(_KEY, (3,), dtype=jnp.uint64, algorithm=_THREEFRY)
        assert bits.dtype == np.uint64
        assert _np(bits).tolist() == [9662219624799024108, 10418227120389269672,
                                      6433701140276733507]


def test_rng_bit_generator_philox_bits():
    for algorithm in (_PHILOX, lax.RandomAlgorithm.RNG_DEFAULT):
        key, bits = lax.rng_bit_generator(_KEY, (2, 3), algorithm=algorithm)
        assert _np(bits).tolist() == [[512747620, 1298009047, 1267190206],
                                      [761827841, 1383286907, 1639995030]]
        assert _np(key).tolist() == [1, 2, 5, 4]
    _, bits = lax.rng_bit_generator(_KEY, (2, 2), dtype=jnp.uint8)
    assert _np(bits).ravel().tolist() == [100, 215, 190, 1]
    # the 128-bit counter carries into the key words
    wrap = jnp.array([9, 9, 0xFFFFFFFF, 0xFFFFFFFF], jnp.uint32)
    key, bits = lax.rng_bit_generator(wrap, (5,))
    assert _np(bits).tolist() == [445097784, 2541304263, 875810708, 3226297691, 3663828508]
    assert _np(key).tolist() == [9, 9, 1, 0]
    with enable_x64():
        _, bits = lax.rng_bit_generator(_KEY, (3,), dtype=jnp.uint64)
        assert _np(bits).tolist() == [5574906407289874532, 3272025663544478142,
                                      7043725020835825787]


def test_rng_bit_generator_transforms_and_errors():
    keys = jnp.asarray(np.random.default_rng(0).integers(0, 2**32, (3, 4), dtype=np.uint32))
    for algorithm in (_THREEFRY, _PHILOX):
        f = lambda k: lax.rng_bit_generator(k, (2, 3), algorithm=algorithm)[1]
        _vmap_matches_loop(f, keys)
        _jit_matches_eager(f, keys[0])
        new_keys = ft.vmap(lambda k: lax.rng_bit_generator(k, (5,), algorithm=algorithm)[0])(keys)
        for i in range(3):
            np.testing.assert_array_equal(
                _np(new_keys[i]), _np(lax.rng_bit_generator(keys[i], (5,), algorithm=algorithm)[0]))
    with pytest.raises(TypeError):
        lax.rng_bit_generator(_KEY, (3,), dtype=jnp.int32)
    with pytest.raises(TypeError):
        lax.rng_bit_generator(jnp.array([1, 2], jnp.uint32), (3,))
    with pytest.raises(NotImplementedError):
        lax.rng_bit_generator(_KEY, (3,), algorithm=7)


def test_rng_uniform():
    x = _np(lax.rng_uniform(2.0, 3.0, (1000,)))
    assert x.dtype == np.float32 and x.shape == (1000,) and x.min() >= 2 and x.max() < 3
    assert x.std() > 0.2
    n = _np(lax.rng_uniform(jnp.int32(0), jnp.int32(10), (1000,)))
    assert n.dtype == np.int32 and set(n.tolist()) == set(range(10))
    y = _np(ft.jit(lambda: lax.rng_uniform(0.0, 1.0, (4,)))())
    assert y.shape == (4,) and ((0 <= y) & (y < 1)).all()
    with pytest.raises(TypeError):
        lax.rng_uniform(jnp.zeros(2), jnp.ones(2), (2,))


# ---- special functions --------------------------------------------------------------------------

_A = np.concatenate([RNG.gamma(1.0, 3.0, 60), [0.01, 0.5, 2, 10, 100, 1000]])
_X = np.concatenate([RNG.gamma(1.0, 3.0, 60), [0.001, 0.3, 3, 5, 120, 900]])


@pytest.mark.parametrize("name,ref", [("igamma", sp.gammainc), ("igammac", sp.gammaincc)])
def test_igamma_values(name, ref):
    fn = getattr(lax, name)
    with enable_x64():
        np.testing.assert_allclose(_np(fn(jnp.asarray(_A), jnp.asarray(_X))), ref(_A, _X),
                                   rtol=1e-12, atol=1e-300)
    out = fn(jnp.asarray(_A, jnp.float32), jnp.asarray(_X, jnp.float32))
    assert out.dtype == np.float32
    np.testing.assert_allclose(_np(out), ref(_A.astype(np.float32), _X.astype(np.float32)),
                               rtol=2e-6, atol=1e-30)
    assert fn(jnp.bfloat16(2), jnp.bfloat16(1)).dtype == jnp.bfloat16
    # edges as jax.lax on CPU: a<0, a=inf, NaN and (0, 0) are NaN
    a = jnp.array([0.0, -1, 1, np.inf, np.nan, 1, 0])
    x = jnp.array([1.0, 1, 0, 1, 1, np.inf, 0])
    p = [1, np.nan, 0, np.nan, np.nan, 1, np.nan]
    want = p if name == "igamma" else [1 - v for v in p]
    np.testing.assert_array_equal(_np(fn(a, x)), np.array(want, np.float32))


def test_igamma_grad_a_and_random_gamma_grad():
    with enable_x64():
        a, x = jnp.asarray(_A), jnp.asarray(_X)
        h = 1e-6
        fd = (sp.gammainc(_A + h, _X) - sp.gammainc(_A - h, _X)) / (2 * h)
        np.testing.assert_allclose(_np(lax.igamma_grad_a(a, x)), fd, rtol=1e-5, atol=1e-9)
        # dx/da at fixed CDF level, by differentiating the inverse CDF numerically
        level = sp.gammainc(_A, _X)
        ok = (level > 1e-6) & (level < 1 - 1e-6)
        fd = (sp.gammaincinv(_A + h, level) - sp.gammaincinv(_A - h, level)) / (2 * h)
        np.testing.assert_allclose(_np(lax.random_gamma_grad(a, x))[ok], fd[ok], rtol=1e-4)
        # values recorded from jax.lax
        np.testing.assert_allclose(
            _np(lax.igamma_grad_a(jnp.array([0.5, 2.0, 10.0, 100.0]),
                                  jnp.array([0.3, 3.0, 5.0, 120.0]))),
            [-0.77057035, -0.19742542, -0.025552, -0.00621319], rtol=1e-6)
        np.testing.assert_allclose(
            _np(lax.random_gamma_grad(jnp.array([0.5, 2.0, 10.0, 100.0]),
                                      jnp.array([0.3, 3.0, 5.0, 120.0]))),
            [1.00980195, 1.32179852, 0.70457992, 1.09575251], rtol=1e-6)
    edge = lax.igamma_grad_a(jnp.array([0.0, -1, 1, np.inf, 1]), jnp.array([1.0, 1, 0, 1, np.inf]))
    np.testing.assert_array_equal(_np(edge), np.array([np.nan, np.nan, 0, np.nan, np.nan],
                                                      np.float32))
    with pytest.raises(NotImplementedError):
        ft.grad(lambda v: lax.igamma_grad_a(v, 1.0))(2.0)


def test_betainc_bessel_zeta_values():
    a, b = RNG.uniform(0.1, 10, 50), RNG.uniform(0.1, 10, 50)
    x = RNG.uniform(0, 1, 50)
    with enable_x64():
        np.testing.assert_allclose(_np(lax.betainc(jnp.asarray(a), jnp.asarray(b),
                                                   jnp.asarray(x))), sp.betainc(a, b, x),
                                   rtol=1e-12)
        z = np.concatenate([RNG.randn(50) * 30, [0.0, np.inf, -np.inf]])
        np.testing.assert_allclose(_np(lax.bessel_i0e(jnp.asarray(z))), sp.i0e(z), rtol=1e-13)
        np.testing.assert_allclose(_np(lax.bessel_i1e(jnp.asarray(z))), sp.i1e(z), rtol=1e-13)
        q = RNG.uniform(0.5, 5, 20)
        s = RNG.uniform(1.5, 6, 20)
        np.testing.assert_allclose(_np(lax.zeta(jnp.asarray(s), jnp.asarray(q))), sp.zeta(s, q),
                                   rtol=1e-12)
    edge = lax.betainc(jnp.array([0.0, -1, 1, 1, 1, 2, 1]), jnp.array([1.0, 1, 0, 1, 1, 1, 1]),
                       jnp.array([0.5, 0.5, 0.5, 0, 1, 0.5, 1.5]))
    np.testing.assert_array_equal(_np(edge), np.array([1, np.nan, 0, 0, 1, 0.25, np.nan],
                                                      np.float32))
    with pytest.raises(TypeError):
        lax.bessel_i0e(jnp.int32(1))
    with pytest.raises(TypeError):
        lax.igamma(jnp.ones(2), jnp.ones(3))
    with pytest.raises(TypeError):
        lax.igamma(jnp.ones(3, jnp.float32), jnp.ones(3, jnp.bfloat16))
    assert lax.igamma(jnp.ones((1, 3)), jnp.ones((2, 3))).shape == (2, 3)


def test_special_gradients():
    with enable_x64():
        a, x = jnp.asarray(RNG.uniform(0.5, 4, 5)), jnp.asarray(RNG.uniform(0.2, 6, 5))
        check_grads(lax.igamma, (a, x), order=1, rtol=1e-5)
        check_grads(lax.igammac, (a, x), order=1, rtol=1e-5)
        check_grads(lambda x_: lax.betainc(2.5, 1.5, x_), (jnp.asarray(RNG.uniform(0.1, 0.9, 5)),),
                    order=1)
        z = jnp.asarray(np.concatenate([RNG.randn(6) * 3, [0.5, -0.5]]))
        check_grads(lax.bessel_i0e, (z,), order=2)
        check_grads(lax.bessel_i1e, (z,), order=2)
    assert float(ft.grad(lax.bessel_i1e)(0.0)) == 0.5
    assert float(ft.grad(lax.bessel_i0e)(0.0)) == 0.0
    with pytest.raises(NotImplementedError):
        ft.grad(lambda a: lax.betainc(a, 1.0, 0.3))(2.0)


@pytest.mark.parametrize("name", ["igamma", "igammac", "igamma_grad_a", "random_gamma_grad",
                                  "betainc", "zeta", "bessel_i0e", "bessel_i1e"])
def test_special_vmap_and_jit(name):
    fn = getattr(lax, name)
    arity = {"betainc": 3, "bessel_i0e": 1, "bessel_i1e": 1}.get(name, 2)
    args = [jnp.asarray(RNG.uniform(0.2, 0.9, (3, 4)).astype(np.float32)) + (1.0 if i == 0 and
            name == "zeta" else 0.0) for i in range(arity)]
    _vmap_matches_loop(fn, *args)
    _jit_matches_eager(fn, *args)
    # one operand unbatched
    f = ft.vmap(fn, in_axes=(0,) + (None,) * (arity - 1))
    np.testing.assert_array_equal(_np(f(args[0], *[a[0] for a in args[1:]])),
                                  np.stack([_np(fn(args[0][i], *[a[0] for a in args[1:]]))
                                            for i in range(3)]))


# =============================================================================================
# The primitive objects
# =============================================================================================


def test_primitive_exports_are_functrans_primitives():
    from functrans.core import Primitive
    from functrans.primitives import control_flow, elementwise, linalg
    assert lax.add_p is elementwise.add_p and lax.mul_p is elementwise.mul_p
    assert lax.dot_general_p is linalg.dot_general_p
    assert lax.scan_p is control_flow.scan_p and lax.cond_p is control_flow.cond_p
    assert lax.while_p is control_flow.while_p
    assert lax.igamma_p.name == "igamma" and lax.mulhi_p.name == "mulhi"
    for name in lax._exported_primitives:
        assert isinstance(getattr(lax, name), Primitive)
    assert not hasattr(lax, "create_token_p")
    jaxpr = ft.make_jaxpr(lambda x, y: lax.mul(lax.add(x, y), y))(1.0, 2.0)
    assert [e.primitive for e in jaxpr.eqns] == [lax.add_p, lax.mul_p]


def test_lax_linalg_is_importable_as_a_module():
    import importlib
    module = importlib.import_module("functrans.lax.linalg")
    assert module is lax.linalg
    from functrans.lax.linalg import cholesky
    np.testing.assert_allclose(np.asarray(cholesky(np.eye(2, dtype=np.float32) * 4.0)),
                               np.eye(2) * 2.0)
