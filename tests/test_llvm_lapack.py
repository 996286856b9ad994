"""cholesky and triangular_solve through LAPACK/BLAS in generated code
(backends/llvm/lapack.py), against the reference interpreter."""
from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("llvmlite")

import functrans  # noqa: E402
import functrans.numpy as jnp  # noqa: E402
from functrans import lax  # noqa: E402
from functrans.primitives.linalg import triangular_solve  # noqa: E402
from functrans.test_util import x64  # noqa: E402

rng = np.random.default_rng(21)


def _spd(batch, n, dtype):
    a = rng.standard_normal(batch + (n, n))
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dtype)


def _description(fun, *args):
    return functrans.jit(fun).lower(*args).compile()._executable.description


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [((), 1), ((), 6), ((3,), 5), ((2, 2), 4), ((0,), 3)])
def test_cholesky(dtype, shape):
    batch, n = shape
    with x64():
        m = _spd(batch, n, dtype)
        if m.size:
            m.reshape(-1, n, n)[0] = -np.eye(n)  # not positive definite: NaNs
        assert "LAPACK potrf" in _description(jnp.linalg.cholesky, m)
        got = np.asarray(functrans.jit(jnp.linalg.cholesky)(m))
        expected = np.asarray(functrans.jit(jnp.linalg.cholesky, backend="reference")(m))
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)
    matrices = got.reshape(-1, n, n)
    if len(matrices) > 1:  # the first one failed; the others are lower triangular
        assert np.all(np.triu(matrices[-1], 1) == 0) and not np.isnan(matrices[-1]).any()


@pytest.mark.parametrize("left_side,lower,transpose_a,unit_diagonal",
                         list(itertools.product([True, False], repeat=4)))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_triangular_solve_every_flag(left_side, lower, transpose_a, unit_diagonal, dtype):
    with x64():
        a = np.linalg.cholesky(_spd((2,), 5, np.float64)).astype(dtype)
        if not lower:
            a = np.swapaxes(a, -1, -2).copy()
        a += np.triu(np.ones(5, dtype), 1) * 7 if lower else np.tril(np.ones(5, dtype), -1) * 7
        b = rng.standard_normal((2, 5, 3) if left_side else (2, 3, 5)).astype(dtype)
        fun = lambda a, b: triangular_solve(a, b, left_side=left_side, lower=lower,  # noqa: E731
                                            transpose_a=transpose_a, unit_diagonal=unit_diagonal)
        assert "BLAS trsm" in _description(fun, a, b)
        got = np.asarray(functrans.jit(fun)(a, b))
        expected = np.asarray(functrans.jit(fun, backend="reference")(a, b))
    tol = 2e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


def test_a_kalman_like_scan_is_one_native_loop():
    def step(p, x):
        s = p + jnp.eye(4) * 2.0 + jnp.outer(x, x)
        chol = jnp.linalg.cholesky(s)
        gain = triangular_solve(chol, p, left_side=True, lower=True)
        return p - 0.1 * gain @ gain.T, jnp.sum(chol)
    p0, xs = np.eye(4, dtype=np.float32), rng.standard_normal((20, 4)).astype(np.float32)
    fun = lambda p, xs: lax.scan(step, p, xs)  # noqa: E731
    description = _description(fun, p0, xs)
    assert "numpy" not in description and "around compiled bodies" not in description
    for g, e in zip(functrans.jit(fun)(p0, xs), functrans.jit(fun, backend="reference")(p0, xs)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-4, atol=1e-5)


def test_gradients_through_native_cholesky():
    m = _spd((), 4, np.float32)
    loss = lambda m: jnp.sum(jnp.linalg.cholesky(m) ** 2)  # noqa: E731
    np.testing.assert_allclose(np.asarray(functrans.jit(functrans.grad(loss))(m)),
                               np.asarray(functrans.grad(loss)(m)), rtol=1e-4, atol=1e-5)


def test_complex_matrices_stay_in_numpy():
    m = (_spd((), 3, np.float32) + 0j).astype(np.complex64)
    assert "numpy cholesky" in _description(jnp.linalg.cholesky, m)


def test_routines_from_scipys_cython_modules():
    """Where SciPy's OpenBLAS is not found, the routines come from cython_blas/lapack."""
    script = textwrap.dedent("""
        import numpy as np
        import functrans, functrans.numpy as jnp
        from functrans.backends.llvm import codegen
        codegen._openblas_library[:] = [None]
        m = np.array([[4.0, 2.0], [2.0, 3.0]], np.float32)
        out = functrans.jit(lambda m: jnp.linalg.cholesky(m) @ m)(m)
        np.testing.assert_allclose(np.asarray(out), np.linalg.cholesky(m) @ m, rtol=1e-6)
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120, env={**__import__("os").environ,
                                              "FUNCTRANS_DISABLE_COMPILATION_CACHE": "1"})
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr
