"""Schur-based parts of ``functrans.scipy.linalg`` (as ``jax.scipy.linalg``): ``schur``,
``hessenberg``, ``rsf2csf``, and the matrix functions built on the complex Schur form,
``sqrtm`` and ``funm``.

The decompositions come from the ``schur`` and ``hessenberg`` primitives (SciPy/LAPACK per
matrix, batched). The matrix functions work on the triangular Schur factor ``T`` one
superdiagonal at a time: every entry of superdiagonal ``p`` depends only on entries of lower
superdiagonals, so each of the ``n - 1`` steps is a handful of vectorized array operations
rather than a loop over entries.

    >>> import functrans.numpy as jnp
    >>> t, z = schur(jnp.array([[2.0, 1.0], [0.0, 3.0]]))
    >>> t[0, 0], t[1, 1]
    (Array(2., dtype=float32), Array(3., dtype=float32))
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from functrans import _api, lax
from functrans import numpy as jnp
from functrans.core import get_aval
from functrans.numpy._promotion import promote_dtypes_inexact
from functrans.primitives import decompositions as _prims

__all__ = ["schur", "hessenberg", "rsf2csf", "sqrtm", "funm"]


def _complex_dtype(dtype):
    return jnp.result_type(dtype, np.complex64)


def _H(x):
    return jnp.conj(jnp.swapaxes(x, -1, -2))


def _matmul(a, b):
    # The Schur vectors and factor are recombined at full precision, as JAX does.
    return jnp.matmul(a, b, precision=lax.Precision.HIGHEST)


def _square_2d(fname, a, message=None):
    shape = get_aval(a).shape
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(message or f"{fname}: expected a square 2-D matrix, got shape {shape}")


def _set_superdiagonal(x, values, p):
    """``x`` with ``values`` added on its ``p``-th superdiagonal (where ``x`` holds zeros)."""
    return x + jnp.diag(values, k=p).astype(x.dtype)


# =============================================================================================
# Decompositions
# =============================================================================================

def schur(a, output: str = "real"):
    """Schur decomposition ``a = Z T Z^H``: ``T`` is quasi-upper-triangular (2x2 diagonal
    blocks for complex eigenvalue pairs) for ``output="real"`` and a real ``a``, upper
    triangular for ``output="complex"``. Leading axes are batch axes. Returns ``(T, Z)``.

        >>> t, z = schur(jnp.array([[1.0, 2.0], [2.0, 1.0]]))
        >>> bool(jnp.allclose(z @ t @ z.T, jnp.array([[1.0, 2.0], [2.0, 1.0]]), atol=1e-5))
        True
    """
    if output not in ("real", "complex"):
        raise ValueError(f"schur: expected output to be 'real' or 'complex', got {output!r}")
    a = jnp.asarray(a)
    if output == "complex":
        a = a.astype(_complex_dtype(a.dtype))
    t, z = _prims.schur(a)
    return t, z


def _householder_q(packed, taus):
    """Accumulate ``Q = H_0 H_1 ... H_{n-2}`` from LAPACK's packed Hessenberg reflectors.

    Reflector ``i`` is ``I - taus[i] v v^H`` with ``v = e_{i+1} + packed[i+2:, i]`` (zero
    above row ``i + 1``); each one is a rank-one update of ``Q``.
    """
    n = get_aval(packed).shape[-1]
    rows = np.arange(n)
    q = jnp.broadcast_to(jnp.eye(n, dtype=packed.dtype), get_aval(packed).shape)
    for i in range(n - 1):
        v = jnp.where(rows > i + 1, packed[..., :, i], 0)
        v = v + jnp.asarray((rows == i + 1).astype(np.float32)).astype(packed.dtype)
        qv = _matmul(q, v[..., :, None])                      # [..., n, 1]
        q = q - taus[..., i, None, None] * qv * jnp.conj(v)[..., None, :]
    return q


def hessenberg(a, *, calc_q: bool = False, overwrite_a: bool = False,
               check_finite: bool = True):
    """Hessenberg form ``a = Q H Q^H`` (``H`` is zero below its first subdiagonal, ``Q``
    unitary). Returns ``H``, or ``(H, Q)`` with ``calc_q``. Leading axes are batch axes;
    ``overwrite_a`` and ``check_finite`` are accepted and ignored.

        >>> a = jnp.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 10.0]])
        >>> h, q = hessenberg(a, calc_q=True)
        >>> bool(jnp.allclose(q @ h @ q.T, a, atol=1e-4))
        True
    """
    del overwrite_a, check_finite
    a = jnp.asarray(a)
    if get_aval(a).ndim >= 2 and get_aval(a).shape[-1] == 0:
        zeros = jnp.zeros_like(a)
        return (zeros, zeros) if calc_q else zeros
    packed, taus = _prims.hessenberg(a)
    h = jnp.triu(packed, -1)
    if not calc_q:
        return h
    return h, _householder_q(packed, taus)


def _rsf2csf_2d(t, z):
    """Turn a real Schur form into a complex one by zeroing each nonzero subdiagonal entry
    with a complex Givens rotation, from the bottom up (as SciPy's ``rsf2csf``)."""
    n = get_aval(t).shape[-1]
    eps = float(jnp.finfo(t.dtype).eps)
    for m in range(n - 1, 0, -1):
        a, b, c, d = t[m - 1, m - 1], t[m - 1, m], t[m, m - 1], t[m, m]
        active = jnp.abs(c) > eps * (jnp.abs(a) + jnp.abs(d))
        # mu: an eigenvalue of the 2x2 block, shifted by d (the one with the larger
        # imaginary part, as LAPACK lists a conjugate pair).
        half = (a - d) / 2
        mu = half + jnp.sqrt(half * half + b * c)
        r = jnp.sqrt(jnp.abs(mu) ** 2 + jnp.abs(c) ** 2)
        r = jnp.where(active, r, 1)
        cos = jnp.where(active, mu / r, 1)
        sin = jnp.where(active, c / r, 0)
        g = jnp.stack([jnp.stack([jnp.conj(cos), sin]), jnp.stack([-sin, cos])])
        g_h = _H(g)
        t = t.at[m - 1:m + 1, m - 1:].set(_matmul(g, t[m - 1:m + 1, m - 1:]))
        t = t.at[:m + 1, m - 1:m + 1].set(_matmul(t[:m + 1, m - 1:m + 1], g_h))
        z = z.at[:, m - 1:m + 1].set(_matmul(z[:, m - 1:m + 1], g_h))
        t = t.at[m, m - 1].set(0)
    return t, z


def rsf2csf(T, Z, check_finite: bool = True):
    """Convert a real Schur form ``(T, Z)`` (from :func:`schur`) to the complex Schur form:
    ``T`` becomes upper triangular, ``Z`` stays unitary, ``Z T Z^H`` is unchanged. Batch
    axes of ``T`` and ``Z`` broadcast; ``check_finite`` is ignored.

        >>> a = jnp.array([[0.0, -1.0], [1.0, 0.0]])
        >>> t, z = rsf2csf(*schur(a))
        >>> t[1, 0]
        Array(0.+0.j, dtype=complex64)
    """
    del check_finite
    T, Z = jnp.asarray(T), jnp.asarray(Z)
    for name, x in (("T", T), ("Z", Z)):
        shape = get_aval(x).shape
        if len(shape) < 2 or shape[-1] != shape[-2]:
            raise ValueError(f"rsf2csf: input {name!r} must be square, got shape {shape}")
    if get_aval(T).shape[-1] != get_aval(Z).shape[-1]:
        raise ValueError(f"rsf2csf: input array shapes must match: Z: {get_aval(Z).shape} "
                         f"vs. T: {get_aval(T).shape}")
    T, Z = promote_dtypes_inexact(T, Z)
    dtype = _complex_dtype(T.dtype)
    T, Z = T.astype(dtype), Z.astype(dtype)
    batch = jnp.broadcast_shapes(get_aval(T).shape[:-2], get_aval(Z).shape[:-2])
    if not batch:
        return _rsf2csf_2d(T, Z)
    # the rotations depend on each matrix's entries: map the 2-D algorithm over the batch
    n = get_aval(T).shape[-1]
    flat = [jnp.broadcast_to(x, batch + (n, n)).reshape((-1, n, n)) for x in (T, Z)]
    t, z = _api.vmap(_rsf2csf_2d)(*flat)
    return t.reshape(batch + (n, n)), z.reshape(batch + (n, n))


# =============================================================================================
# Matrix functions
# =============================================================================================

def _sqrtm_triu(t):
    """The upper-triangular square root ``U`` of an upper-triangular ``t`` (``U @ U == t``),
    by the Björck–Hammarling recurrence
    ``U[i, j] = (t[i, j] - sum_{i<k<j} U[i, k] U[k, j]) / (U[i, i] + U[j, j])``."""
    n = get_aval(t).shape[-1]
    d = jnp.sqrt(jnp.diagonal(t))
    u = jnp.diag(d)
    for p in range(1, n):
        # sum over all k of U[i, k] U[k, i + p]: the terms outside i < k < i + p vanish,
        # since U is upper triangular and superdiagonal p is still zero.
        s = jnp.sum(u[:n - p, :] * u[:, p:].T, axis=-1)
        target = jnp.diagonal(t, p)
        den = d[:n - p] + d[p:]
        # an entry that needs no correction stays 0 even where den is 0 (singular t)
        value = jnp.where(target == s, 0, (target - s) / jnp.where(target == s, 1, den))
        u = _set_superdiagonal(u, value, p)
    return u


def sqrtm(A, blocksize: int = 1):
    """Principal matrix square root by the complex Schur method (Björck & Hammarling):
    ``sqrtm(A) @ sqrtm(A) == A``. The result is complex. ``A`` must be a 2-D square
    matrix; only ``blocksize=1`` is supported.

        >>> r = sqrtm(jnp.array([[4.0, 0.0], [0.0, 9.0]]))
        >>> r.real
        Array([[2., 0.],
               [0., 3.]], dtype=float32)
    """
    if blocksize > 1:
        raise NotImplementedError("sqrtm: the blocked algorithm (blocksize > 1) is not "
                                  "supported")
    A = jnp.asarray(A)
    _square_2d("sqrtm", A)
    (A,) = promote_dtypes_inexact(A)
    t, z = schur(A, output="complex")
    return _matmul(_matmul(z, _sqrtm_triu(t)), _H(z))


def _parlett(f_diag, t):
    """``F = f(t)`` for upper-triangular ``t`` given ``f`` on its diagonal, by Parlett's
    recurrence ``F[i, j] (t[j, j] - t[i, i]) = sum_k t[i, k] F[k, j] - F[i, k] t[k, j]``
    (the full sum over k gives SciPy's expression, since superdiagonal p of F is still 0).
    Returns ``F`` and the smallest |t[j, j] - t[i, i]| met (SciPy's ``minden``)."""
    n = get_aval(t).shape[-1]
    diag = jnp.diagonal(t)
    f = jnp.diag(f_diag)
    minden = jnp.abs(t[0, 0])
    for p in range(1, n):
        num = (jnp.sum(t[:n - p, :] * f[:, p:].T, axis=-1)
               - jnp.sum(f[:n - p, :] * t[:, p:].T, axis=-1))
        den = diag[p:] - diag[:n - p]
        # SciPy leaves the numerator as it is where the eigenvalues coincide
        value = jnp.where(den != 0, num / jnp.where(den != 0, den, 1), num)
        f = _set_superdiagonal(f, value, p)
        minden = jnp.minimum(minden, jnp.min(jnp.abs(den)))
    return f, minden


def funm(A, func: Callable, disp: bool = True):
    """Matrix function ``func(A)`` from a scalar function ``func`` applied to the
    eigenvalues (complex Schur form + Parlett's recurrence). The result is complex. With
    ``disp=False`` returns ``(F, err)`` where ``err`` estimates the relative error (no
    message is printed either way). ``A`` must be a 2-D square matrix.

        >>> f = funm(jnp.array([[1.0, 0.0], [0.0, 2.0]]), jnp.exp)
        >>> bool(jnp.allclose(f.real, jnp.diag(jnp.exp(jnp.array([1.0, 2.0])))))
        True
    """
    A = jnp.asarray(A)
    _square_2d("funm", A, "funm: expected square array_like input")
    t, z = rsf2csf(*schur(A))
    f_diag = jnp.asarray(func(jnp.diagonal(t))).astype(t.dtype)
    f, minden = _parlett(f_diag, t)
    f = _matmul(_matmul(z, f), _H(z))
    if disp:
        return f
    tol = float(jnp.finfo(f.dtype).eps)
    minden = jnp.where(minden == 0, tol, minden)
    norm1 = jnp.max(jnp.sum(jnp.abs(jnp.triu(t, 1)), axis=0))
    err = jnp.minimum(1, jnp.maximum(tol, (tol / minden) * norm1))
    err = jnp.where(jnp.any(jnp.isinf(f)), np.inf, err)
    return f, err
