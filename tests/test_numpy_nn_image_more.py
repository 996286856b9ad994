"""The less common jax.numpy functions (functrans/numpy/_more.py), the extra jax.nn
activations and delta_orthogonal, and functrans.image, against NumPy, a float64 resampling
reference written from the kernel definitions, finite differences, and jit."""
from __future__ import annotations

import math

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import image, nn
from functrans import random as frandom
from functrans.test_util import check_grads, x64

RNG = np.random.default_rng(7)


def _close(actual, expected, tol=2e-5):
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol, equal_nan=True)


def _jit_equals_eager(f, *args, tol=1e-6):
    eager = f(*args)
    compiled = functrans.jit(f)(*args)
    _close(compiled, eager, tol)


# =============================================================================================
# functrans.numpy
# =============================================================================================

@pytest.mark.parametrize("coefficients", [
    [1.0, -3.0, 2.0], [2.0, 0.0, -8.0, 1.5, 1.0], [0.0, 0.0, 1.0, -1.0, 0.0, 0.0],
    [3.0], [0.0, 0.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]])
def test_roots_matches_numpy(coefficients):
    expected = np.sort_complex(np.roots(coefficients))
    got = np.sort_complex(np.asarray(jnp.roots(jnp.array(coefficients))))
    assert got.dtype == np.complex64
    _close(got, expected.astype(np.complex64), 1e-4)


def test_roots_without_stripping_marks_leading_zeros_nan():
    p = jnp.array([0.0, 1.0, -3.0, 2.0])
    got = np.asarray(jnp.roots(p, strip_zeros=False))
    assert got.shape == (3,) and np.isnan(got).sum() == 1
    _close(np.sort_complex(got[~np.isnan(got)]), np.array([1.0, 2.0], np.complex64), 1e-4)
    compiled = np.asarray(functrans.jit(lambda q: jnp.roots(q, strip_zeros=False))(p))
    _close(np.sort_complex(compiled), np.sort_complex(got), 1e-4)


def test_block_matches_numpy():
    a, b = RNG.normal(size=(2, 2)), RNG.normal(size=(2, 3))
    c, d = RNG.normal(size=(1, 2)), RNG.normal(size=(1, 3))
    _close(jnp.block([[a, b], [c, d]]), np.block([[a, b], [c, d]]))
    _close(jnp.block([1.0, np.arange(3.0)]), np.block([1.0, np.arange(3.0)]))
    _close(jnp.block([[[a]], [[a]]]), np.block([[[a]], [[a]]]))
    with pytest.raises(ValueError):
        jnp.block([[a], a])
    with pytest.raises(TypeError):
        jnp.block((a, a))
    with x64():
        check_grads(lambda x, y: jnp.block([[x, y]]), (a, b), order=1)


def test_piecewise_matches_numpy():
    x = np.linspace(-3, 3, 13)
    conds = [x < -1, x > 1]
    funcs = [lambda v: -v, lambda v: v ** 2, 0.5]
    expected = np.piecewise(x, conds, funcs)
    _close(jnp.piecewise(x, conds, funcs), expected)
    # one condition array, and funclist without a default
    _close(jnp.piecewise(x, x > 0, [jnp.sin]), np.piecewise(x, x > 0, [np.sin]))
    _close(jnp.piecewise(x, [x > 0, x > 2], [1.0, 2.0]), np.piecewise(x, [x > 0, x > 2], [1, 2]))
    fn = lambda v: jnp.piecewise(v, [v < 0], [lambda t: t * t, lambda t: jnp.exp(t)])  # noqa
    _jit_equals_eager(fn, x.astype(np.float32))
    with x64():
        check_grads(fn, (x + 0.01,), order=1)


@pytest.mark.parametrize("axis", [0, 1, -1, None])
def test_put_along_axis_matches_numpy(axis):
    arr = RNG.normal(size=(3, 4)).astype(np.float32)
    if axis is None:
        indices = np.array([0, 5, -1])
        values = np.array([1.0, 2.0, 3.0], np.float32)
    else:
        indices = np.argsort(arr, axis=axis).take([0, -1], axis=axis % 2)
        values = np.float32(9.0)
    expected = arr.copy()
    np.put_along_axis(expected, indices, values, axis)
    got = jnp.put_along_axis(arr, indices, values, axis, inplace=False)
    _close(got, expected)
    with pytest.raises(ValueError, match="inplace"):
        jnp.put_along_axis(arr, indices, values, axis)


def test_put_along_axis_grad_and_jit():
    indices = np.array([[1], [0], [2]])
    f = lambda a, v: jnp.put_along_axis(a, indices, v, axis=1, inplace=False)  # noqa: E731
    _jit_equals_eager(f, RNG.normal(size=(3, 3)).astype(np.float32),
                      RNG.normal(size=(3, 1)).astype(np.float32))
    with x64():
        check_grads(f, (RNG.normal(size=(3, 3)), RNG.normal(size=(3, 1))), order=1)


@pytest.mark.parametrize("shape,val,wrap", [((4, 4), 5.0, False), ((5, 2), [1.0, 2.0, 3.0], True),
                                            ((5, 2), [1.0, 2.0], False), ((2, 5), 7.0, False),
                                            ((3, 3, 3), [1.0, 2.0], False)])
def test_fill_diagonal_matches_numpy(shape, val, wrap):
    a = RNG.normal(size=shape)
    expected = a.copy()
    np.fill_diagonal(expected, val, wrap=wrap)
    _close(jnp.fill_diagonal(a, jnp.asarray(val), wrap=wrap, inplace=False), expected)
    with pytest.raises(ValueError, match="inplace"):
        jnp.fill_diagonal(a, val)


def test_fill_diagonal_grad_and_jit():
    f = lambda a, v: jnp.fill_diagonal(a, v, inplace=False)  # noqa: E731
    _jit_equals_eager(f, np.ones((3, 3), np.float32), np.float32(2.0))
    with x64():
        check_grads(f, (RNG.normal(size=(3, 4)), RNG.normal(size=(3,))), order=1)


def test_place_matches_numpy():
    arr = RNG.normal(size=(3, 4))
    mask = arr > 0
    vals = np.array([10.0, 20.0, 30.0])
    expected = arr.copy()
    np.place(expected, mask, vals)
    _close(jnp.place(arr, mask, vals, inplace=False), expected)
    _close(jnp.place(arr, np.zeros_like(mask), vals, inplace=False), arr)
    with pytest.raises(ValueError, match="inplace"):
        jnp.place(arr, mask, vals)
    with x64():
        check_grads(lambda a, v: jnp.place(a, mask, v, inplace=False), (arr, vals), order=1)


@pytest.mark.parametrize("axis,period,discont", [(-1, 2 * np.pi, None), (0, 2 * np.pi, 4.0),
                                                 (1, 6.0, None)])
def test_unwrap_matches_numpy(axis, period, discont):
    p = np.cumsum(RNG.uniform(-4, 4, size=(6, 7)), axis=axis)
    expected = np.unwrap(p, discont=discont, axis=axis, period=period)
    with x64():
        _close(jnp.unwrap(p, discont=discont, axis=axis, period=period), expected, 1e-10)
        check_grads(lambda q: jnp.unwrap(q, axis=axis), (p,), order=1)
    _jit_equals_eager(lambda q: jnp.unwrap(q, axis=axis), p.astype(np.float32), tol=1e-5)


def test_i0_matches_numpy():
    x = np.concatenate([np.linspace(-30, 30, 121), [19.99, 20.0, 20.01, 0.0, 85.0]])
    with x64():
        got = np.asarray(jnp.i0(x))
        np.testing.assert_allclose(got, np.i0(x), rtol=1e-13)
        # the derivative of I0 is I1 (checked here against a power series)
        pts = np.array([-3.0, -0.5, 0.0, 0.7, 2.5, 25.0])
        check_grads(jnp.i0, (pts,), order=2)
    got32 = jnp.i0(x.astype(np.float32))
    assert got32.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got32), np.i0(x), rtol=2e-6)
    assert jnp.i0(jnp.arange(3)).dtype == np.float32
    _jit_equals_eager(jnp.i0, x.astype(np.float32), tol=1e-6 * np.i0(85.0))


def test_spacing_matches_numpy():
    x = np.array([1.0, -1.0, 0.0, -0.0, 1e-30, 3e5, -7.5, np.inf, np.nan], np.float32)
    _close(jnp.spacing(x), np.spacing(x), 0)
    with x64():
        x64_values = x.astype(np.float64)
        got = jnp.spacing(x64_values)
        assert got.dtype == np.float64
        np.testing.assert_array_equal(np.asarray(got), np.spacing(x64_values))
    _jit_equals_eager(jnp.spacing, np.array([1.0, -2.5, 1e3], np.float32), tol=0)


@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("bitorder", ["big", "little"])
def test_packbits_unpackbits_match_numpy(axis, bitorder):
    a = RNG.integers(0, 2, size=(5, 11)).astype(np.uint8)
    packed = np.packbits(a, axis=axis, bitorder=bitorder)
    got = jnp.packbits(a, axis=axis, bitorder=bitorder)
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(np.asarray(got), packed)
    np.testing.assert_array_equal(np.asarray(jnp.packbits(a.astype(bool) * 3, axis=axis,
                                                          bitorder=bitorder)), packed)
    for count in (None, 3, -2, 200):
        if count == 200 and axis is not None:
            continue
        expected = np.unpackbits(packed, axis=axis, count=count, bitorder=bitorder)
        got = jnp.unpackbits(packed, axis=axis, count=count, bitorder=bitorder)
        np.testing.assert_array_equal(np.asarray(got), expected)
    _jit_equals_eager(lambda v: jnp.unpackbits(jnp.packbits(v, axis=axis), axis=axis), a, tol=0)


@pytest.mark.parametrize("subscripts,shapes", [
    ("ij,jk,kl->il", [(2, 3), (3, 40), (40, 5)]),
    ("bij,bjk->bik", [(4, 2, 3), (4, 3, 5)]),
    ("i,i->", [(7,), (7,)])])
def test_einsum_path_matches_numpy(subscripts, shapes):
    operands = [np.ones(s, np.float32) for s in shapes]
    path, text = jnp.einsum_path(subscripts, *operands)
    expected_path, expected_text = np.einsum_path(subscripts, *operands, optimize="greedy")
    assert path == expected_path and text == expected_text


def test_frompyfunc_ufunc_methods():
    add = jnp.frompyfunc(lambda x, y: x + y, 2, 1, identity=0)
    hyp = jnp.frompyfunc(lambda x, y: jnp.sqrt(x * x + y * y), nin=2, nout=1)
    a = RNG.normal(size=(3, 4)).astype(np.float32)
    b = RNG.normal(size=(4,)).astype(np.float32)
    _close(hyp(a, b), np.hypot(a, b))
    _close(add.reduce(a, axis=1), a.sum(axis=1))
    _close(add.reduce(a, axis=None), a.sum(), 1e-5)
    _close(add.reduce(a, axis=0, keepdims=True, initial=2.0), a.sum(0, keepdims=True) + 2)
    _close(hyp.reduce(a, axis=0), np.sqrt((a ** 2).sum(0)), 1e-5)
    _close(add.accumulate(a, axis=1), np.cumsum(a, axis=1), 1e-5)
    _close(add.outer(b, b[:3]), np.add.outer(b, b[:3]))
    expected = a.copy()
    np.add.at(expected, (np.array([0, 0, 2]), np.array([1, 1, 3])), 1.5)
    _close(add.at(a, (np.array([0, 0, 2]), np.array([1, 1, 3])), 1.5, inplace=False), expected)
    with pytest.raises(NotImplementedError, match="inplace"):
        add.at(a, 0, 1.0)  # arrays are immutable, as in JAX
    _jit_equals_eager(lambda v: add.reduce(v, axis=0), a, tol=1e-6)
    with x64():
        check_grads(lambda v: hyp.reduce(v, axis=1), (np.abs(a.astype(np.float64)) + 0.5,),
                    order=1)


# =============================================================================================
# functrans.nn
# =============================================================================================

def _np_softplus(x):
    return np.logaddexp(x, 0)


NN_CASES = [
    ("sparse_plus", nn.sparse_plus,
     lambda x: np.where(x <= -1, 0, np.where(x >= 1, x, (x + 1) ** 2 / 4))),
    ("sparse_sigmoid", nn.sparse_sigmoid, lambda x: np.clip((x + 1) / 2, 0, 1)),
    ("squareplus", nn.squareplus, lambda x: (x + np.sqrt(x * x + 4)) / 2),
    ("squareplus_b", lambda x: nn.squareplus(x, b=0.5), lambda x: (x + np.sqrt(x * x + 0.5)) / 2),
    ("mish", nn.mish, lambda x: x * np.tanh(_np_softplus(x))),
]


@pytest.mark.parametrize("name,fn,reference", NN_CASES, ids=[c[0] for c in NN_CASES])
def test_activation_matches_numpy(name, fn, reference):
    x = np.linspace(-3, 3, 25)
    got = fn(x.astype(np.float32))
    assert got.dtype == np.float32
    _close(got, reference(x), 2e-6)
    _jit_equals_eager(fn, x.astype(np.float32))
    # away from the kinks at +-1 of the sparse functions
    smooth = np.array([-2.3, -0.4, 0.3, 1.7])
    with x64():
        check_grads(fn, (smooth,), order=2 if name != "sparse_sigmoid" else 1)


def test_sparse_sigmoid_is_the_derivative_of_sparse_plus():
    x = np.array([-2.5, -0.5, 0.0, 0.4, 2.0], np.float32)
    derivative = functrans.vmap(functrans.grad(nn.sparse_plus))(x)
    _close(derivative, nn.sparse_sigmoid(x))


@pytest.mark.parametrize("axis,keepdims,masked", [(None, False, False), (1, False, False),
                                                  ((0, 2), True, False), (-1, False, True)])
def test_logmeanexp_matches_numpy(axis, keepdims, masked):
    x = RNG.normal(size=(3, 4, 5)) * 3
    where = RNG.random(size=x.shape) > 0.3 if masked else None
    if masked:
        where[..., 0] = True  # an empty slice has no mean
    weights = np.ones_like(x) if where is None else where.astype(float)
    expected = np.log(np.sum(np.exp(x) * weights, axis=axis, keepdims=keepdims)
                      / np.sum(weights, axis=axis, keepdims=keepdims))
    got = nn.logmeanexp(x.astype(np.float32), axis=axis, where=where, keepdims=keepdims)
    _close(got, expected, 1e-5)
    _close(nn.logmeanexp(np.array([1000.0, 1000.0], np.float32)), 1000.0)
    with x64():
        check_grads(lambda v: nn.logmeanexp(v, axis=axis, where=where, keepdims=keepdims),
                    (x,), order=1)


def test_delta_orthogonal():
    for shape in [(3, 2, 5), (3, 3, 4, 4), (3, 3, 3, 2, 6)]:
        w = np.asarray(nn.initializers.delta_orthogonal(scale=2.0)(frandom.PRNGKey(1), shape))
        assert w.shape == shape and w.dtype == np.float32
        centre = tuple((k - 1) // 2 for k in shape[:-2])
        matrix = w[centre]
        np.testing.assert_allclose(matrix @ matrix.T, 4 * np.eye(shape[-2]), atol=1e-5)
        # nothing outside the centre of the window
        assert np.abs(w).sum() == pytest.approx(np.abs(matrix).sum())
    with pytest.raises(ValueError):
        nn.initializers.delta_orthogonal()(frandom.PRNGKey(0), (3, 3))
    with pytest.raises(ValueError):
        nn.initializers.delta_orthogonal()(frandom.PRNGKey(0), (3, 5, 2))


# =============================================================================================
# functrans.image: a float64 reference written straight from the kernel definitions
# =============================================================================================

def _ref_kernel(method, x):
    x = abs(x)
    if method == "linear":
        return max(0.0, 1 - x)
    if method == "cubic":  # Keys, a = -0.5
        a = -0.5
        if x < 1:
            return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
        if x < 2:
            return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a
        return 0.0
    radius = 3 if method == "lanczos3" else 5
    if x == 0:
        return 1.0
    if x > radius:
        return 0.0
    return math.sin(math.pi * x) / (math.pi * x) * math.sin(math.pi * x / radius) / (
        math.pi * x / radius)


def _ref_weights(n_in, n_out, scale, translation, method, antialias):
    weights = np.zeros((n_in, n_out))
    stretch = max(1.0 / scale, 1.0) if antialias else 1.0
    for j in range(n_out):
        centre = (j + 0.5 - translation) / scale - 0.5
        if not -0.5 <= centre <= n_in - 0.5:
            continue
        column = np.array([_ref_kernel(method, (centre - i) / stretch) for i in range(n_in)])
        if abs(column.sum()) > 1000 * np.finfo(np.float32).eps:
            weights[:, j] = column / column.sum()
    return weights


def _ref_resample(x, out_shape, scales, translations, method, antialias=True):
    x = np.asarray(x, np.float64)
    for d in range(x.ndim):
        if scales[d] is None:
            continue
        w = _ref_weights(x.shape[d], out_shape[d], scales[d], translations[d], method, antialias)
        x = np.moveaxis(np.tensordot(x, w, axes=([d], [0])), -1, d)
    return x


def _ref_resize(x, shape, method, antialias=True):
    scales = [None if a == b else b / a for a, b in zip(x.shape, shape)]
    return _ref_resample(x, shape, scales, [0.0] * x.ndim, method, antialias)


METHODS = ["linear", "cubic", "lanczos3", "lanczos5"]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("in_shape,out_shape", [((6, 5, 2), (13, 9, 2)), ((16, 12, 3), (5, 7, 3)),
                                                ((7, 9), (7, 4)), ((4,), (11,))])
@pytest.mark.parametrize("antialias", [True, False])
def test_resize_matches_reference(method, in_shape, out_shape, antialias):
    x = RNG.normal(size=in_shape).astype(np.float32)
    got = image.resize(x, out_shape, method, antialias=antialias)
    assert got.dtype == np.float32 and got.shape == out_shape
    _close(got, _ref_resize(x, out_shape, method, antialias), 2e-5)


def test_resize_method_names_and_integers():
    x = RNG.integers(0, 255, size=(8, 8)).astype(np.uint8)
    for alias, method in [("bilinear", "linear"), ("bicubic", "cubic"),
                          ("trilinear", "linear"), (image.ResizeMethod.LANCZOS3, "lanczos3")]:
        got = image.resize(x, (5, 3), alias)
        assert got.dtype == np.float32
        _close(got, _ref_resize(x, (5, 3), method), 1e-3)
    with pytest.raises(ValueError):
        image.resize(x, (4, 4), "area")
    with pytest.raises(ValueError):
        image.resize(x, (4,), "linear")


@pytest.mark.parametrize("in_shape,out_shape", [((5, 7), (11, 3)), ((6,), (6,)), ((3, 8), (9, 8))])
def test_resize_nearest(in_shape, out_shape):
    x = RNG.normal(size=in_shape).astype(np.float32)
    expected = x
    for d, (m, n) in enumerate(zip(in_shape, out_shape)):
        sources = np.floor((np.arange(n) + 0.5) * m / n).astype(int)
        expected = np.take(expected, sources, axis=d)
    np.testing.assert_array_equal(np.asarray(image.resize(x, out_shape, "nearest")), expected)


@pytest.mark.parametrize("method", ["linear", "cubic", "lanczos3"])
def test_scale_and_translate_matches_reference(method):
    x = RNG.normal(size=(2, 9, 10)).astype(np.float32)
    scale, translation = np.array([1.7, 0.6]), np.array([-2.3, 1.4])
    out_shape = (2, 12, 7)
    got = image.scale_and_translate(x, out_shape, (1, 2), jnp.array(scale, jnp.float32),
                                    jnp.array(translation, jnp.float32), method)
    expected = _ref_resample(x, out_shape, [None, *scale], [0.0, *translation], method)
    _close(got, expected, 2e-5)
    # scale and translation may be traced
    compiled = functrans.jit(lambda s, t: image.scale_and_translate(x, out_shape, (1, 2), s, t,
                                                                    method))
    _close(compiled(scale.astype(np.float32), translation.astype(np.float32)), expected, 2e-5)
    with pytest.raises(ValueError):
        image.scale_and_translate(x, out_shape, (1, 2), scale, translation, "nearest")


def test_resize_grads_and_jit():
    x32 = RNG.normal(size=(5, 6)).astype(np.float32)
    for method in ["linear", "cubic", "lanczos5"]:
        f = lambda v: image.resize(v, (3, 9), method)  # noqa: E731
        _jit_equals_eager(f, x32, tol=1e-5)
        with x64():
            check_grads(f, (x32.astype(np.float64),), order=1)
    with x64():
        # differentiable in the scale and translation too
        check_grads(lambda s, t: image.scale_and_translate(
            x32.astype(np.float64), (5, 4), (1,), s, t, "cubic"),
            (np.array([0.8]), np.array([0.3])), order=1)


@pytest.mark.parametrize("method", ["nearest", "linear", "cubic", "lanczos3", "lanczos5"])
def test_resize_matches_jax(method):
    jax_image = pytest.importorskip("jax.image")
    x = RNG.normal(size=(9, 7, 2)).astype(np.float32)
    for shape in [(4, 11, 2), (17, 3, 2)]:
        for antialias in (True, False):
            expected = np.asarray(jax_image.resize(x, shape, method, antialias=antialias))
            _close(image.resize(x, shape, method, antialias=antialias), expected, 2e-5)
