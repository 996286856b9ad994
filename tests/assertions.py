"""Assertions the test files share: values against NumPy or SciPy, compiled against eager,
and the float32/float64 fixture of the SciPy tests."""
from __future__ import annotations

import numpy as np
import pytest

import functrans


def assert_same(actual, expected, dtype=None, atol=1e-6, rtol=1e-6):
    """Values, shape and (when given) dtype of ``actual`` against NumPy's ``expected``."""
    actual_np = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual_np.shape == expected.shape, (actual_np.shape, expected.shape)
    if dtype is not None:
        assert actual.dtype == np.dtype(dtype), (actual.dtype, dtype)
    np.testing.assert_allclose(actual_np, expected, atol=atol, rtol=rtol)


def assert_close(actual, expected, tol=2e-5):
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol, equal_nan=True)


def jit_equals_eager(f, *args, tol=1e-6):
    eager = f(*args)
    compiled = functrans.jit(f)(*args)
    assert_close(compiled, eager, tol)


def close_in_float64(actual, expected, rtol, atol=0.0):
    actual = np.asarray(actual)
    expected = np.asarray(expected, dtype=np.float64)
    np.testing.assert_allclose(actual.astype(np.float64), expected, rtol=rtol, atol=atol,
                               equal_nan=True)


@pytest.fixture(params=["float32", "float64"])
def dtype(request):
    """Run a test in float32, and in float64 with x64 mode on."""
    if request.param == "float64":
        from functrans.test_util import x64
        with x64():
            yield np.float64
    else:
        yield np.float32


def tolerance(dtype, f32=2e-5, f64=1e-12):
    return f32 if dtype == np.float32 else f64
