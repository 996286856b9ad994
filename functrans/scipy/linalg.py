"""``functrans.scipy.linalg``: dense linear algebra with SciPy's signatures (as
``jax.scipy.linalg``).

Decompositions come from the ``functrans.lax.linalg`` primitives, so derivatives and
batching follow from their rules. Leading axes are batch axes throughout. SciPy's
performance flags (``overwrite_a``, ``check_finite``, ``lwork``, ...) are accepted and
ignored: arrays are immutable and nothing is checked at run time.

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.linalg import solve_triangular
    >>> solve_triangular(jnp.array([[2.0, 0.0], [1.0, 1.0]]), jnp.array([2.0, 3.0]), lower=True)
    Array([1., 2.], dtype=float32)
"""
from __future__ import annotations

from functrans import _lax_linalg as lax_linalg
from functrans import numpy as jnp
from functrans.core import get_aval
from functrans.numpy import linalg as np_linalg
from functrans.numpy._promotion import promote_dtypes_inexact
from functrans.scipy._matrix_exponential import expm  # noqa: F401

__all__ = [
    "cholesky", "cho_factor", "cho_solve", "solve_triangular", "lu", "lu_factor", "lu_solve",
    "qr", "svd", "eigh", "inv", "det", "solve", "block_diag", "expm",
]


def _matrix(fname, a, square=True):
    (a,) = promote_dtypes_inexact(a)
    shape = get_aval(a).shape
    if len(shape) < 2 or (square and shape[-1] != shape[-2]):
        kind = "a square matrix" if square else "a matrix"
        raise ValueError(f"{fname}: expected {kind} (or a stack of them), got shape {shape}")
    return a


def _H(x):
    return jnp.conj(jnp.swapaxes(x, -1, -2))


def _solve_with_vector(fname, a, b, solve_matrix):
    """Apply ``solve_matrix(a, B)`` to a matrix right-hand side; a 1-D ``b`` is a column."""
    a, b = promote_dtypes_inexact(a, b)
    vector = jnp.ndim(b) == 1
    if vector:
        b = b[:, None]
    if get_aval(b).shape[-2] != get_aval(a).shape[-1]:
        raise ValueError(f"{fname}: incompatible shapes {get_aval(a).shape} and "
                         f"{get_aval(b).shape}")
    batch = jnp.broadcast_shapes(get_aval(a).shape[:-2], get_aval(b).shape[:-2])
    a = jnp.broadcast_to(a, batch + get_aval(a).shape[-2:])
    b = jnp.broadcast_to(b, batch + get_aval(b).shape[-2:])
    x = solve_matrix(a, b)
    return x[..., 0] if vector else x


# =============================================================================================
# Cholesky
# =============================================================================================

def cholesky(a, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True):
    """The Cholesky factor of a Hermitian positive-definite matrix: upper ``U`` with
    ``a = U^H U`` (SciPy's default), or lower ``L`` with ``a = L L^H`` if ``lower``.

        >>> cholesky(jnp.array([[4.0, 2.0], [2.0, 3.0]]), lower=True)[0, 0]
        Array(2., dtype=float32)
    """
    del overwrite_a, check_finite
    a = _matrix("cholesky", a)
    factor = lax_linalg.cholesky(a)
    return factor if lower else _H(factor)


def cho_factor(a, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True):
    """``(c, lower)`` for :func:`cho_solve`: the Cholesky factor (the other triangle is
    zero, unlike SciPy's, which leaves it unspecified) and which triangle holds it.

        >>> c, low = cho_factor(jnp.array([[4.0, 2.0], [2.0, 3.0]]))
    """
    return cholesky(a, lower=lower, overwrite_a=overwrite_a, check_finite=check_finite), lower


def cho_solve(c_and_lower, b, overwrite_b: bool = False, check_finite: bool = True):
    """Solve ``a x = b`` given ``(c, lower) = cho_factor(a)``.

        >>> a = jnp.array([[4.0, 2.0], [2.0, 3.0]])
        >>> cho_solve(cho_factor(a), jnp.array([6.0, 5.0]))
        Array([1., 1.], dtype=float32)
    """
    del overwrite_b, check_finite
    c, lower = c_and_lower
    c = _matrix("cho_solve", c)

    def solve_matrix(c, b):
        # a = L L^H: solve L y = b, then L^H x = y (with L = U^H when the upper is stored)
        y = lax_linalg.triangular_solve(c, b, left_side=True, lower=lower,
                                        transpose_a=not lower, conjugate_a=not lower)
        return lax_linalg.triangular_solve(c, y, left_side=True, lower=lower,
                                           transpose_a=lower, conjugate_a=lower)

    return _solve_with_vector("cho_solve", c, b, solve_matrix)


def solve_triangular(a, b, trans=0, lower: bool = False, unit_diagonal: bool = False,
                     overwrite_b: bool = False, debug=None, check_finite: bool = True):
    """Solve ``op(a) x = b`` for triangular ``a``; ``trans`` is 0/'N' (``a``), 1/'T'
    (``a^T``) or 2/'C' (``a^H``). Only the ``lower`` (or upper) triangle is read.

        >>> solve_triangular(jnp.array([[2.0, 1.0], [0.0, 1.0]]), jnp.array([3.0, 1.0]))
        Array([1., 1.], dtype=float32)
    """
    del overwrite_b, debug, check_finite
    codes = {0: 0, 1: 1, 2: 2, "N": 0, "T": 1, "C": 2}
    if trans not in codes:
        raise ValueError(f"solve_triangular: trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")
    trans = codes[trans]
    a = _matrix("solve_triangular", a)

    def solve_matrix(a, b):
        return lax_linalg.triangular_solve(a, b, left_side=True, lower=lower,
                                           transpose_a=trans > 0, conjugate_a=trans == 2,
                                           unit_diagonal=unit_diagonal)

    return _solve_with_vector("solve_triangular", a, b, solve_matrix)


# =============================================================================================
# LU
# =============================================================================================

def _permutation_matrix(perm, dtype):
    """``P`` with ``P[i, perm[i]] = 1``, so ``(P @ x)[i] = x[perm[i]]``."""
    n = get_aval(perm).shape[-1]
    return (perm[..., :, None] == jnp.arange(n, dtype=perm.dtype)).astype(dtype)


def lu(a, permute_l: bool = False, overwrite_a: bool = False, check_finite: bool = True):
    """LU decomposition with partial pivoting: ``(p, l, u)`` with ``a = p @ l @ u``
    (``l`` unit lower triangular, ``u`` upper triangular), or ``(p @ l, u)`` with
    ``permute_l``. ``a`` may be rectangular.

        >>> p, l, u = lu(jnp.array([[1.0, 2.0], [3.0, 4.0]]))
        >>> l[1, 0]
        Array(0.33333334, dtype=float32)
    """
    del overwrite_a, check_finite
    a = _matrix("lu", a, square=False)
    m, n = get_aval(a).shape[-2:]
    k = min(m, n)
    packed, _, perm = lax_linalg.lu(a)
    l = jnp.tril(packed[..., :, :k], -1) + jnp.eye(m, k, dtype=a.dtype)
    u = jnp.triu(packed[..., :k, :])
    # a[perm] = l @ u, so a = P^T l u with P the permutation matrix of perm
    p = jnp.swapaxes(_permutation_matrix(perm, a.dtype), -1, -2)
    if permute_l:
        return jnp.matmul(p, l), u
    return p, l, u


def lu_factor(a, overwrite_a: bool = False, check_finite: bool = True):
    """``(lu, piv)`` as LAPACK's ``getrf``: ``lu`` packs ``L`` (unit diagonal implied)
    below the diagonal and ``U`` on and above it; row ``i`` was swapped with row ``piv[i]``.

        >>> lu_, piv = lu_factor(jnp.array([[1.0, 2.0], [3.0, 4.0]]))
        >>> piv
        Array([1, 1], dtype=int32)
    """
    del overwrite_a, check_finite
    a = _matrix("lu_factor", a)
    packed, pivots, _ = lax_linalg.lu(a)
    return packed, pivots


def _pivots_to_permutation(pivots, n):
    """The row order ``perm`` (``a[perm] = L U``) produced by the swaps ``i <-> piv[i]``."""
    positions = jnp.arange(n, dtype=pivots.dtype)
    perm = jnp.broadcast_to(positions, get_aval(pivots).shape[:-1] + (n,))
    for i in range(get_aval(pivots).shape[-1]):
        target = pivots[..., i:i + 1]
        at_target = jnp.take_along_axis(perm, target, axis=-1)
        at_i = perm[..., i:i + 1]
        perm = jnp.where(positions == target, at_i, perm)
        perm = jnp.where(positions == i, at_target, perm)
    return perm


def lu_solve(lu_and_piv, b, trans: int = 0, overwrite_b: bool = False,
             check_finite: bool = True):
    """Solve ``a x = b`` (``trans=0``), ``a^T x = b`` (1) or ``a^H x = b`` (2) given
    ``(lu, piv) = lu_factor(a)``.

        >>> a = jnp.array([[0.0, 2.0], [4.0, 0.0]])
        >>> lu_solve(lu_factor(a), jnp.array([2.0, 2.0]))
        Array([0.5, 1. ], dtype=float32)
    """
    del overwrite_b, check_finite
    if trans not in (0, 1, 2):
        raise ValueError(f"lu_solve: trans must be 0, 1 or 2, got {trans!r}")
    packed, pivots = lu_and_piv
    packed = _matrix("lu_solve", packed)
    n = get_aval(packed).shape[-1]
    perm = _pivots_to_permutation(pivots, n)

    def solve_matrix(packed, b):
        p = _permutation_matrix(jnp.broadcast_to(perm, get_aval(packed).shape[:-2] + (n,)),
                                b.dtype)
        if trans == 0:
            # P a = L U with P b = b[perm]
            y = lax_linalg.triangular_solve(packed, jnp.matmul(p, b), left_side=True,
                                            lower=True, unit_diagonal=True)
            return lax_linalg.triangular_solve(packed, y, left_side=True, lower=False)
        # a^T = U^T L^T P: solve U^T z = b, L^T w = z, then x = P^T w
        conj = trans == 2
        z = lax_linalg.triangular_solve(packed, b, left_side=True, lower=False,
                                        transpose_a=True, conjugate_a=conj)
        w = lax_linalg.triangular_solve(packed, z, left_side=True, lower=True,
                                        transpose_a=True, conjugate_a=conj, unit_diagonal=True)
        return jnp.matmul(jnp.swapaxes(p, -1, -2), w)

    return _solve_with_vector("lu_solve", packed, b, solve_matrix)


# =============================================================================================
# QR, SVD, eigh
# =============================================================================================

def qr(a, overwrite_a: bool = False, lwork=None, mode: str = "full", pivoting: bool = False,
       check_finite: bool = True):
    """QR decomposition ``a = q @ r``. ``mode`` is ``'full'`` (square ``q``),
    ``'economic'`` (``q`` with ``min(m, n)`` columns) or ``'r'`` (returns ``(r,)``).

        >>> q, r = qr(jnp.eye(2))
    """
    del overwrite_a, lwork, check_finite
    if pivoting:
        raise NotImplementedError("qr: pivoting=True (column-pivoted QR) is not supported")
    if mode not in ("full", "economic", "r"):
        raise ValueError(f"qr: mode must be 'full', 'economic' or 'r', got {mode!r}")
    a = _matrix("qr", a, square=False)
    q, r = lax_linalg.qr(a, full_matrices=(mode != "economic"))
    if mode == "r":
        return (r,)
    return q, r


def svd(a, full_matrices: bool = True, compute_uv: bool = True, overwrite_a: bool = False,
        check_finite: bool = True, lapack_driver: str = "gesdd"):
    """Singular value decomposition ``a = u @ diag(s) @ vh`` (``s`` descending); only ``s``
    when ``compute_uv`` is False.

        >>> svd(jnp.array([[3.0, 0.0], [0.0, 4.0]]), compute_uv=False)
        Array([4., 3.], dtype=float32)
    """
    del overwrite_a, check_finite, lapack_driver
    a = _matrix("svd", a, square=False)
    return lax_linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)


def eigh(a, b=None, lower: bool = True, eigvals_only: bool = False, overwrite_a: bool = False,
         overwrite_b: bool = False, turbo: bool = True, eigvals=None, type: int = 1,  # noqa: A002
         check_finite: bool = True):
    """Eigenvalues ``w`` (ascending) and eigenvectors ``v`` (columns) of a Hermitian matrix,
    ``a @ v = v * w``; only ``w`` with ``eigvals_only``. Only the ``lower`` (or upper)
    triangle is read.

        >>> eigh(jnp.array([[2.0, 1.0], [1.0, 2.0]]), eigvals_only=True)
        Array([1., 3.], dtype=float32)
    """
    del overwrite_a, overwrite_b, turbo, check_finite
    if b is not None:
        raise NotImplementedError("eigh: the generalized problem (b is not None) is not "
                                  "supported")
    if eigvals is not None:
        raise NotImplementedError("eigh: eigvals (a subset of eigenvalues) is not supported")
    del type
    a = _matrix("eigh", a)
    v, w = lax_linalg.eigh(a, lower=lower, symmetrize_input=False)
    return w if eigvals_only else (w, v)


# =============================================================================================
# inv, det, solve
# =============================================================================================

def inv(a, overwrite_a: bool = False, check_finite: bool = True):
    """The inverse of a square matrix (or of each in a stack).

        >>> inv(jnp.array([[2.0, 0.0], [0.0, 4.0]]))
        Array([[0.5 , 0.  ],
               [0.  , 0.25]], dtype=float32)
    """
    del overwrite_a, check_finite
    return np_linalg.inv(_matrix("inv", a))


def det(a, overwrite_a: bool = False, check_finite: bool = True):
    """The determinant of a square matrix (or of each in a stack).

        >>> det(jnp.array([[2.0, 0.0], [0.0, 4.0]]))
        Array(8., dtype=float32)
    """
    del overwrite_a, check_finite
    return np_linalg.det(_matrix("det", a))


def solve(a, b, lower: bool = False, overwrite_a: bool = False, overwrite_b: bool = False,
          check_finite: bool = True, assume_a: str = "gen", transposed: bool = False):
    """Solve ``a x = b`` (``a^T x = b`` if ``transposed``). ``assume_a='pos'`` uses a
    Cholesky factorization (reading the ``lower``/upper triangle); ``'sym'``, ``'her'`` and
    ``'gen'`` use LU.

        >>> solve(jnp.array([[2.0, 0.0], [0.0, 4.0]]), jnp.array([2.0, 2.0]))
        Array([1. , 0.5], dtype=float32)
    """
    del overwrite_a, overwrite_b, check_finite
    if assume_a not in ("gen", "sym", "her", "pos"):
        raise ValueError(f"solve: assume_a must be 'gen', 'sym', 'her' or 'pos', got "
                         f"{assume_a!r}")
    a = _matrix("solve", a)
    if assume_a == "pos":
        # a symmetric (Hermitian for 'pos'), so the transposed system only conjugates
        if transposed:
            a = jnp.conj(a)
        tri = jnp.tril(a) if lower else jnp.triu(a)
        eye = jnp.eye(get_aval(a).shape[-1], dtype=a.dtype)
        full = tri + _H(tri) - a * eye
        return cho_solve(cho_factor(full, lower=True), b)
    if transposed:
        a = jnp.swapaxes(a, -1, -2)
    return np_linalg.solve(a, b)


# =============================================================================================
# block_diag (expm is _matrix_exponential's)
# =============================================================================================

def block_diag(*arrs):
    """A block-diagonal matrix with the given arrays (scalars and 1-D arrays count as
    ``1 x n`` rows) on its diagonal.

        >>> block_diag(jnp.ones((1, 1)), 2 * jnp.ones((1, 2)))
        Array([[1., 0., 0.],
               [0., 2., 2.]], dtype=float32)
    """
    if not arrs:
        return jnp.zeros((1, 0))
    arrs = [jnp.atleast_2d(x) for x in promote_dtypes_inexact(*arrs)] \
        if any(jnp.issubdtype(jnp.result_type(x), jnp.inexact) for x in arrs) \
        else [jnp.atleast_2d(jnp.asarray(x)) for x in arrs]
    for x in arrs:
        if jnp.ndim(x) != 2:
            raise ValueError(f"block_diag: arguments must have at most 2 dimensions, got "
                             f"shape {get_aval(x).shape}")
    total_cols = sum(get_aval(x).shape[1] for x in arrs)
    rows, start = [], 0
    for x in arrs:
        r, c = get_aval(x).shape
        rows.append(jnp.pad(x, ((0, 0), (start, total_cols - start - c))))
        start += c
    return jnp.concatenate(rows, axis=0)


# matrix constructors and the functions built on the decompositions above
from functrans.scipy._special_matrices import *  # noqa: E402,F401,F403
from functrans.scipy import _special_matrices  # noqa: E402
__all__ += _special_matrices.__all__

# Schur and Hessenberg forms, and the matrix functions built on the Schur form
from functrans.scipy.linalg_schur import *  # noqa: E402,F401,F403
from functrans.scipy import linalg_schur as _linalg_schur  # noqa: E402
__all__ += _linalg_schur.__all__
