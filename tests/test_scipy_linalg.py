"""functrans.scipy.linalg against SciPy: the decompositions, solves, inverses and expm in
float32 and float64 (x64), numerical gradients, and jit/vmap against eager."""


from __future__ import annotations

import doctest

import numpy as np
import pytest
import scipy.linalg as sla

import functrans
import functrans.numpy as jnp
import functrans.scipy  # noqa: F401
from functrans.scipy import linalg as fla
from functrans.test_util import check_grads
from assertions import close_in_float64 as _close, dtype, tolerance as _tol  # noqa: F401,F811


# =============================================================================================
# linalg
# =============================================================================================

def _spd(rng, n, dtype, batch=()):
    m = rng.normal(size=batch + (n, n))
    return (m @ np.swapaxes(m, -1, -2) + n * np.eye(n)).astype(dtype)


def test_cholesky_family(dtype):
    rng = np.random.default_rng(4)
    a = _spd(rng, 4, dtype)
    b = rng.normal(size=(4, 2)).astype(dtype)
    rtol = _tol(dtype, 2e-4, 1e-10)
    for lower in (False, True):
        _close(fla.cholesky(a, lower=lower), sla.cholesky(a.astype(np.float64), lower=lower), rtol,
               atol=rtol)
        c = fla.cho_factor(a, lower=lower)
        assert c[1] == lower
        _close(fla.cho_solve(c, b), np.linalg.solve(a.astype(np.float64), b), rtol, atol=rtol)
        _close(fla.cho_solve(c, b[:, 0]), np.linalg.solve(a.astype(np.float64), b[:, 0]), rtol,
               atol=rtol)


def test_solve_triangular(dtype):
    rng = np.random.default_rng(5)
    a = (np.tril(rng.normal(size=(4, 4))) + 4 * np.eye(4)).astype(dtype)
    b = rng.normal(size=(4, 3)).astype(dtype)
    rtol = _tol(dtype, 1e-4, 1e-11)
    for trans in (0, 1, 2, "N", "T"):
        for lower in (True, False):
            for unit_diagonal in (False, True):
                mat = a if lower else a.T
                expected = sla.solve_triangular(mat.astype(np.float64), b, trans=trans,
                                                lower=lower, unit_diagonal=unit_diagonal)
                _close(fla.solve_triangular(mat, b, trans=trans, lower=lower,
                                            unit_diagonal=unit_diagonal), expected, rtol,
                       atol=rtol)
    _close(fla.solve_triangular(a, b[:, 0], lower=True),
           sla.solve_triangular(a.astype(np.float64), b[:, 0], lower=True), rtol, atol=rtol)


def test_lu_family(dtype):
    rng = np.random.default_rng(6)
    a = rng.normal(size=(4, 4)).astype(dtype)
    b = rng.normal(size=(4, 2)).astype(dtype)
    rtol = _tol(dtype, 1e-4, 1e-11)
    p, l, u = fla.lu(a)
    ep, el, eu = sla.lu(a.astype(np.float64))
    _close(p, ep, 0)
    _close(l, el, rtol, atol=rtol)
    _close(u, eu, rtol, atol=rtol)
    pl, u2 = fla.lu(a, permute_l=True)
    _close(np.asarray(pl) @ np.asarray(u2), a, rtol, atol=rtol)
    rect = rng.normal(size=(3, 5)).astype(dtype)
    p, l, u = fla.lu(rect)
    _close(np.asarray(p) @ np.asarray(l) @ np.asarray(u), rect, rtol, atol=rtol)
    lu_, piv = fla.lu_factor(a)
    elu, epiv = sla.lu_factor(a.astype(np.float64))
    _close(lu_, elu, rtol, atol=rtol)
    np.testing.assert_array_equal(np.asarray(piv), epiv)
    for trans in (0, 1, 2):
        expected = sla.lu_solve((elu, epiv), b, trans=trans)
        _close(fla.lu_solve((lu_, piv), b, trans=trans), expected, rtol, atol=rtol)
    _close(fla.lu_solve((lu_, piv), b[:, 0]), np.linalg.solve(a.astype(np.float64), b[:, 0]),
           rtol, atol=rtol)


def test_decompositions(dtype):
    rng = np.random.default_rng(7)
    a = rng.normal(size=(4, 3)).astype(dtype)
    rtol = _tol(dtype, 1e-4, 1e-11)
    for mode in ("full", "economic"):
        q, r = fla.qr(a, mode=mode)
        eq, er = sla.qr(a.astype(np.float64), mode=mode)
        # QR is unique up to the signs of r's diagonal
        signs = np.sign(np.diag(np.asarray(r, np.float64))) * np.sign(np.diag(er))
        _close(np.asarray(r)[:3] * signs[:, None], er[:3], rtol, atol=rtol)
        _close(np.asarray(q) @ np.asarray(r), a, rtol, atol=rtol)
    (r,) = fla.qr(a, mode="r")
    assert r.shape == (4, 3)
    s = fla.svd(a, compute_uv=False)
    _close(s, sla.svd(a.astype(np.float64), compute_uv=False), rtol)
    u, s, vh = fla.svd(a, full_matrices=False)
    _close((np.asarray(u) * np.asarray(s)) @ np.asarray(vh), a, rtol, atol=rtol)
    h = _spd(rng, 3, dtype)
    w, v = fla.eigh(h)
    _close(w, sla.eigh(h.astype(np.float64), eigvals_only=True), rtol)
    _close(np.asarray(h) @ np.asarray(v), np.asarray(v) * np.asarray(w), rtol, atol=10 * rtol)
    _close(fla.eigh(h, eigvals_only=True), w, rtol)
    # only the lower triangle is read by default
    _close(fla.eigh(np.tril(h), eigvals_only=True), w, rtol)


def test_inv_det_solve(dtype):
    rng = np.random.default_rng(8)
    a = rng.normal(size=(3, 3)).astype(dtype) + 3 * np.eye(3, dtype=dtype)
    b = rng.normal(size=(3, 2)).astype(dtype)
    rtol = _tol(dtype, 1e-4, 1e-11)
    a64 = a.astype(np.float64)
    _close(fla.inv(a), sla.inv(a64), rtol, atol=rtol)
    _close(fla.det(a), sla.det(a64), rtol)
    _close(fla.solve(a, b), sla.solve(a64, b), rtol, atol=rtol)
    _close(fla.solve(a, b, transposed=True), sla.solve(a64, b, transposed=True), rtol, atol=rtol)
    spd = _spd(rng, 3, dtype)
    for lower in (False, True):
        # only one triangle of a positive-definite matrix is read
        half = np.tril(spd) if lower else np.triu(spd)
        _close(fla.solve(half, b, assume_a="pos", lower=lower),
               sla.solve(spd.astype(np.float64), b), rtol, atol=rtol)


def test_block_diag():
    out = fla.block_diag(np.ones((2, 2), np.float32), np.float32(3.0), np.arange(3.0, dtype=np.float32))
    expected = sla.block_diag(np.ones((2, 2)), 3.0, np.arange(3.0))
    _close(out, expected, 0)
    assert out.shape == expected.shape


def test_expm(dtype):
    rng = np.random.default_rng(9)
    rtol = _tol(dtype, 2e-4, 1e-11)
    for scale in (0.0, 1e-3, 1.0, 10.0, 60.0):
        a = (scale * rng.normal(size=(4, 4)) / 4).astype(dtype)
        expected = sla.expm(a.astype(np.float64))
        _close(fla.expm(a), expected, rtol, atol=rtol * np.abs(expected).max())
    # a stack of matrices, each with its own number of squarings
    stack = np.stack([0.1 * np.eye(3), 20 * np.eye(3), [[0, 1, 0], [-1, 0, 0], [0, 0, 0]]])
    stack = stack.astype(dtype)
    out = fla.expm(stack)
    for i in range(3):
        expected = sla.expm(stack[i].astype(np.float64))
        _close(out[i], expected, rtol, atol=rtol * np.abs(expected).max())


def test_linalg_grads(x64):
    rng = np.random.default_rng(10)
    a = rng.normal(size=(3, 3)) + 3 * np.eye(3)
    spd = _spd(rng, 3, np.float64)
    b = rng.normal(size=(3,))
    cases = [
        (lambda a: fla.expm(0.5 * a), (a,)),
        (fla.det, (a,)), (fla.inv, (a,)), (fla.solve, (a, b)),
        (lambda s, b: fla.cho_solve(fla.cho_factor(s), b), (spd, b)),
        (lambda a, b: fla.solve_triangular(a, b, lower=True), (np.tril(a), b)),
        (lambda a, b: fla.lu_solve(fla.lu_factor(a), b, trans=1), (a, b)),
    ]
    for f, args in cases:
        check_grads(f, args, order=1, modes=("fwd", "rev"), atol=1e-5, rtol=1e-5)


def test_linalg_jit_vmap():
    rng = np.random.default_rng(11)
    a = (rng.normal(size=(3, 4, 4)) + 4 * np.eye(4)).astype(np.float32)
    b = rng.normal(size=(3, 4)).astype(np.float32)
    for f in (lambda a, b: fla.expm(0.3 * a) @ b,
              lambda a, b: fla.lu_solve(fla.lu_factor(a), b),
              lambda a, b: fla.solve_triangular(a, b, lower=True, trans=1)):
        looped = np.stack([np.asarray(f(a[i], b[i])) for i in range(3)])
        _close(functrans.vmap(f)(a, b), looped, 1e-5, 1e-5)
        _close(functrans.jit(functrans.vmap(f))(a, b), looped, 1e-5, 1e-5)


def test_unsupported_options_raise():
    with pytest.raises(NotImplementedError, match="pivoting"):
        fla.qr(np.eye(2, dtype=np.float32), pivoting=True)
    with pytest.raises(NotImplementedError, match="generalized"):
        fla.eigh(np.eye(2, dtype=np.float32), np.eye(2, dtype=np.float32))
    with pytest.raises(ValueError, match="square"):
        fla.inv(np.ones((2, 3), np.float32))


# =============================================================================================
# docstring examples
# =============================================================================================


def _run_docstring_examples(module):
    # outputs are compared to float32 rounding: NUMBER matches the printed digits only
    result = doctest.testmod(module, extraglobs={"jnp": jnp},
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_docstring_examples():
    _run_docstring_examples(fla)
