"""functrans.image against a float64 resampling reference written from the kernel
definitions, finite differences, jit, and JAX when it is installed."""


from __future__ import annotations

import math

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import image
from functrans.test_util import check_grads, x64
from assertions import assert_close as _close, jit_equals_eager as _jit_equals_eager

RNG = np.random.default_rng(7)


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
    # its own generator: finite differences are checked on fixed data, whichever tests ran
    # before this one in the process
    x32 = np.random.default_rng(7).normal(size=(5, 6)).astype(np.float32)
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
