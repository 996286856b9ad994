"""Matrix decompositions and solves, the primitives behind ``jnp.linalg`` and
``jax.lax.linalg``: ``cholesky``, ``triangular_solve``, ``lu``, ``qr``, ``eigh``, ``svd``,
``schur`` and ``hessenberg``.

Operands are [..., m, n]: leading axes are batch axes. Each primitive's shape rule, reference
implementation (NumPy/SciPy, once per matrix of a batch), JVP and batching rule are declared
together below it. As in JAX, the Schur and Hessenberg decompositions have no derivative rule
(the Schur form is not a smooth function of the matrix where eigenvalues cross), so
differentiating through them raises.
"""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans.core import Primitive, ShapedArray, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters.ad import Zero, is_undefined_primal
from functrans.primitives import reductions, structural
from functrans.primitives import elementwise as ew
from functrans.primitives.dot import dot_general

# =============================================================================================
# Shared rule helpers. Leading axes are batch axes, so a batching rule only moves the
# vmapped axis to the front.
# =============================================================================================


def _matrix_rule_check(name, operand, square=True, inexact=True):
    if operand.ndim < 2 or (square and operand.shape[-1] != operand.shape[-2]):
        kind = "a (batch of) square matrices" if square else "a (batch of) matrices"
        raise TypeError(f"{name}: operand {operand.str_short()} must be {kind}")
    if inexact and not _dtypes.is_inexact(operand.dtype):
        raise TypeError(f"{name}: operand {operand.str_short()} must have a float or complex "
                        "dtype")


def _real_dtype(dtype):
    return {_dtypes.complex64: _dtypes.float32, _dtypes.complex128: _dtypes.float64}.get(
        np.dtype(dtype), np.dtype(dtype))


def _per_matrix(fn, *arrays):
    """Apply ``fn`` to each matrix of a batch (NumPy/SciPy routines without batching);
    returns a list of stacked outputs."""
    batch = arrays[0].shape[:-2]
    results = [fn(*[a.reshape((-1,) + a.shape[-2:])[i] for a in arrays])
               for i in range(int(np.prod(batch, dtype=np.int64)))]
    if not results:
        return None
    return [np.stack([r[j] for r in results]).reshape(batch + np.shape(results[0][j]))
            for j in range(len(results[0]))]


def _decomposition_batch(primitive):
    def rule(vals, dims, **params):
        size = batching.batch_size_of(vals, dims)
        vals = [batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims)]
        outs = primitive.bind(*vals, **params)
        if primitive.multiple_results:
            return outs, [0] * len(outs)
        return outs, 0
    primitive.batch = rule
    return rule


# ---- small helpers on traced values ---------------------------------------------------------

def _mT(x):
    nd = get_aval(x).ndim
    return structural.transpose(x, tuple(range(nd - 2)) + (nd - 1, nd - 2))


def _H(x):
    x = _mT(x)
    return ew.conj(x) if _dtypes.is_complex(get_aval(x).dtype) else x


def _matmul(a, b):
    nd = get_aval(a).ndim
    batch = tuple(range(nd - 2))
    return dot_general(a, b, (((nd - 1,), (nd - 2,)), (batch, batch)))


def _const_matrix(value: np.ndarray, like):
    """A constant [m, n] matrix broadcast over ``like``'s batch axes, in its dtype."""
    aval = get_aval(like)
    shape = aval.shape[:-2] + value.shape
    return structural.broadcast_in_dim(value.astype(aval.dtype), shape,
                                       (aval.ndim - 2, aval.ndim - 1))


def _masked(x, mask: np.ndarray):
    return ew.mul(x, _const_matrix(mask, x))


def _diagonal(x):
    """The diagonal of each square matrix: [..., n, n] -> [..., n]."""
    n = get_aval(x).shape[-1]
    return reductions.reduce_sum(_masked(x, np.eye(n)), (get_aval(x).ndim - 1,))


def _row_scale(x, d):
    """``x * d[..., None, :]`` (scale the columns of each matrix)."""
    aval, daval = get_aval(x), get_aval(d)
    b = structural.broadcast_in_dim(d, aval.shape, tuple(range(daval.ndim - 1)) + (aval.ndim - 1,))
    return ew.mul(x, ew.convert_element_type(b, aval.dtype) if get_aval(b).dtype != aval.dtype else b)


def _col_scale(x, d):
    """``x * d[..., :, None]`` (scale the rows of each matrix)."""
    aval, daval = get_aval(x), get_aval(d)
    b = structural.broadcast_in_dim(d, aval.shape, tuple(range(daval.ndim - 1)) + (aval.ndim - 2,))
    return ew.mul(x, ew.convert_element_type(b, aval.dtype) if get_aval(b).dtype != aval.dtype else b)


# =============================================================================================
# cholesky
# =============================================================================================

cholesky_p = Primitive("cholesky")


@cholesky_p.def_abstract_eval
def _cholesky_rule(operand):
    _matrix_rule_check("cholesky", operand)
    return ShapedArray(operand.shape, operand.dtype)


@cholesky_p.def_impl
def _cholesky_impl(operand):
    # A matrix that is not positive definite gives NaNs (as in JAX), not an exception.
    def one(a):
        try:
            return (np.linalg.cholesky(a),)
        except np.linalg.LinAlgError:
            return (np.full(a.shape, np.nan, a.dtype),)
    if operand.size == 0:
        return operand.copy()
    return _per_matrix(one, operand)[0].astype(operand.dtype)


def _cholesky_jvp(primals, tangents):
    # dL = L Phi(L^-1 dA L^-H), Phi = lower triangle with the diagonal halved.
    (a,), (da,) = primals, tangents
    l = cholesky_p.bind(a)
    if isinstance(da, Zero):
        return l, Zero.from_value(l)
    n = get_aval(a).shape[-1]
    tmp = triangular_solve(l, da, left_side=True, lower=True)
    tmp = triangular_solve(l, tmp, left_side=False, lower=True, transpose_a=True,
                           conjugate_a=True)
    phi = _masked(tmp, np.tril(np.ones((n, n)), -1) + 0.5 * np.eye(n))
    return l, _matmul(l, phi)


cholesky_p.jvp = _cholesky_jvp
_decomposition_batch(cholesky_p)


def cholesky(x, symmetrize_input: bool = True):
    """Lower Cholesky factor ``L`` with ``x = L L^H`` (NaNs if ``x`` is not positive
    definite). Only the lower triangle is read unless ``symmetrize_input``.

    Example::

        cholesky(jnp.array([[4., 2.], [2., 3.]]))   # [[2, 0], [1, 1.414]]
    """
    if symmetrize_input:
        x = ew.mul(ew.add(x, _H(x)), _const_scalar(0.5, x))
    return cholesky_p.bind(x)


def _const_scalar(value, like):
    aval = get_aval(like)
    return structural.full(aval.shape, value, aval.dtype)


# =============================================================================================
# triangular_solve
# =============================================================================================

triangular_solve_p = Primitive("triangular_solve")


@triangular_solve_p.def_abstract_eval
def _triangular_solve_rule(a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    _matrix_rule_check("triangular_solve", a)
    if b.ndim != a.ndim or b.shape[:-2] != a.shape[:-2] or a.dtype != b.dtype:
        raise TypeError(f"triangular_solve: a {a.str_short()} and b {b.str_short()} need the "
                        "same dtype and batch axes")
    m = a.shape[-1]
    if (b.shape[-2] if left_side else b.shape[-1]) != m:
        raise TypeError(f"triangular_solve: b {b.str_short()} does not match a "
                        f"{a.str_short()} (left_side={left_side})")
    return ShapedArray(b.shape, b.dtype)


def _op_a(a, lower, transpose_a, conjugate_a, unit_diagonal):
    """The effective matrix op(A) read from the stored triangle."""
    tri = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        tri = tri.copy()
        idx = np.arange(a.shape[-1])
        tri[..., idx, idx] = 1
    if conjugate_a:
        tri = np.conj(tri)
    if transpose_a:
        tri = np.swapaxes(tri, -1, -2)
    return tri


@triangular_solve_p.def_impl
def _triangular_solve_impl(a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    op = _op_a(a, lower, transpose_a, conjugate_a, unit_diagonal)
    if b.size == 0:
        return b.copy()
    upper_after_op = (not lower) ^ bool(transpose_a)
    import scipy.linalg  # imported on use: it is slow to import

    def one(t, rhs):
        if left_side:
            return (scipy.linalg.solve_triangular(t, rhs, lower=not upper_after_op,
                                                  check_finite=False),)
        # x t = rhs  <=>  t^T x^T = rhs^T
        return (scipy.linalg.solve_triangular(t.T, rhs.T, lower=upper_after_op,
                                              check_finite=False).T,)
    with np.errstate(all="ignore"):
        return _per_matrix(one, op, b)[0].astype(b.dtype)


def _tri_mask(n, lower, unit_diagonal):
    mask = np.tril(np.ones((n, n))) if lower else np.triu(np.ones((n, n)))
    return mask - np.eye(n) if unit_diagonal else mask


def _triangular_solve_jvp_a(da, a, b, *, left_side, lower, transpose_a, conjugate_a,
                            unit_diagonal):
    # X = op(A)^-1 B  =>  dX = -op(A)^-1 op(dA) X   (left; mirrored for right side)
    params = dict(left_side=left_side, lower=lower, transpose_a=transpose_a,
                  conjugate_a=conjugate_a, unit_diagonal=unit_diagonal)
    x = triangular_solve_p.bind(a, b, **params)
    n = get_aval(a).shape[-1]
    dop = _masked(da, _tri_mask(n, lower, unit_diagonal))
    if conjugate_a and _dtypes.is_complex(get_aval(a).dtype):
        dop = ew.conj(dop)
    if transpose_a:
        dop = _mT(dop)
    rhs = _matmul(dop, x) if left_side else _matmul(x, dop)
    return ew.neg(triangular_solve_p.bind(a, rhs, **params))


def _triangular_solve_transpose(ct, a, b, *, left_side, lower, transpose_a, conjugate_a,
                                unit_diagonal):
    if is_undefined_primal(a):
        raise NotImplementedError("triangular_solve is not linear in the triangular matrix")
    if isinstance(ct, Zero):
        return [None, Zero(b.aval)]
    ct_b = triangular_solve_p.bind(a, ct, left_side=left_side, lower=lower,
                                   transpose_a=not transpose_a, conjugate_a=conjugate_a,
                                   unit_diagonal=unit_diagonal)
    return [None, ct_b]


ad.defjvp(triangular_solve_p, _triangular_solve_jvp_a,
          lambda db, a, b, **params: triangular_solve_p.bind(a, db, **params))
triangular_solve_p.transpose = _triangular_solve_transpose
_decomposition_batch(triangular_solve_p)


def triangular_solve(a, b, left_side: bool = False, lower: bool = False,
                     transpose_a: bool = False, conjugate_a: bool = False,
                     unit_diagonal: bool = False):
    """Solve ``op(a) @ x = b`` (``left_side``) or ``x @ op(a) = b`` for triangular ``a``;
    ``op`` transposes and/or conjugates as asked. Only the ``lower`` (or upper) triangle of
    ``a`` is read.

    Example::

        a = jnp.array([[2., 0.], [1., 1.]])
        triangular_solve(a, jnp.array([[2.], [3.]]), left_side=True, lower=True)  # [[1],[2]]
    """
    return triangular_solve_p.bind(a, b, left_side=bool(left_side), lower=bool(lower),
                                   transpose_a=bool(transpose_a), conjugate_a=bool(conjugate_a),
                                   unit_diagonal=bool(unit_diagonal))


# =============================================================================================
# lu
# =============================================================================================

lu_p = Primitive("lu", multiple_results=True)


@lu_p.def_abstract_eval
def _lu_rule(operand):
    _matrix_rule_check("lu", operand, square=False)
    m, n = operand.shape[-2:]
    batch = operand.shape[:-2]
    return [ShapedArray(operand.shape, operand.dtype),
            ShapedArray(batch + (min(m, n),), _dtypes.int32),
            ShapedArray(batch + (m,), _dtypes.int32)]


def _pivots_to_permutation(pivots, m):
    perm = np.arange(m)
    for i, p in enumerate(pivots):
        perm[i], perm[p] = perm[p], perm[i]
    return perm


@lu_p.def_impl
def _lu_impl(operand):
    m, n = operand.shape[-2:]
    import scipy.linalg  # imported on use: it is slow to import

    def one(a):
        p, l, u = scipy.linalg.lu(a)           # a = p @ l @ u
        k = min(m, n)
        packed = np.zeros_like(a)
        packed[:, :k] += np.tril(l, -1)[:, :k]
        packed[:k, :] += np.triu(u)[:k, :]
        permutation = np.argmax(p, axis=0)     # row i of p.T @ a is a[permutation[i]]
        # pivots: the row swaps (LAPACK style) that produce this permutation
        current = np.arange(m)
        where = np.arange(m)
        pivots = np.zeros(k, np.int64)
        for i in range(k):
            j = where[permutation[i]]
            pivots[i] = j
            ri, rj = current[i], current[j]
            current[i], current[j] = rj, ri
            where[rj], where[ri] = i, j
        return packed, pivots, permutation
    if operand.size == 0:
        batch = operand.shape[:-2]
        return [operand.copy(), np.zeros(batch + (min(m, n),), np.int32),
                np.broadcast_to(np.arange(m, dtype=np.int32), batch + (m,)).copy()]
    with np.errstate(all="ignore"):
        lu, pivots, perm = _per_matrix(one, operand)
    return [lu.astype(operand.dtype), pivots.astype(np.int32), perm.astype(np.int32)]


def _lu_jvp(primals, tangents):
    # For square A: P A = L U. With X = L^-1 P dA U^-1, dL = L strict_lower(X) and
    # dU = upper(X) U; the packed output's tangent is dL + dU.
    (a,), (da,) = primals, tangents
    lu, pivots, perm = lu_p.bind(a)
    outs = [lu, pivots, perm]
    zero_ints = [Zero.from_value(pivots), Zero.from_value(perm)]
    if isinstance(da, Zero):
        return outs, [Zero.from_value(lu)] + zero_ints
    m, n = get_aval(a).shape[-2:]
    if m != n:
        raise NotImplementedError("differentiation of lu for non-square matrices is not "
                                  "supported")
    # P dA as a product with the one-hot permutation matrix P[i, j] = (perm[i] == j)
    nd = get_aval(a).ndim
    rows = structural.broadcast_in_dim(perm, get_aval(a).shape, tuple(range(nd - 1)))
    cols = structural.broadcast_in_dim(np.arange(m, dtype=np.int32), get_aval(a).shape, (nd - 1,))
    p = ew.convert_element_type(ew.eq(rows, cols), get_aval(a).dtype)
    l = ew.add(_masked(lu, np.tril(np.ones((m, m)), -1)), _const_matrix(np.eye(m), lu))
    x = triangular_solve(l, _matmul(p, da), left_side=True, lower=True, unit_diagonal=True)
    x = triangular_solve(lu, x, left_side=False, lower=False)
    dl = _matmul(l, _masked(x, np.tril(np.ones((m, m)), -1)))
    du = _matmul(_masked(x, np.triu(np.ones((m, m)))), _masked(lu, np.triu(np.ones((m, m)))))
    return outs, [ew.add(dl, du)] + zero_ints


lu_p.jvp = _lu_jvp
_decomposition_batch(lu_p)


def lu(x):
    """LU decomposition with partial pivoting: returns ``(lu, pivots, permutation)`` where
    ``lu`` packs the unit-lower ``L`` (below the diagonal) and ``U``, and
    ``x[permutation] == L @ U``.

    Example::

        lu_, piv, perm = lu(jnp.array([[1., 2.], [3., 4.]]))   # perm == [1, 0]
    """
    return tuple(lu_p.bind(x))


# =============================================================================================
# qr
# =============================================================================================

qr_p = Primitive("qr", multiple_results=True)


@qr_p.def_abstract_eval
def _qr_rule(operand, *, full_matrices):
    _matrix_rule_check("qr", operand, square=False)
    m, n = operand.shape[-2:]
    batch = operand.shape[:-2]
    k = m if full_matrices else min(m, n)
    return [ShapedArray(batch + (m, k), operand.dtype), ShapedArray(batch + (k, n), operand.dtype)]


@qr_p.def_impl
def _qr_impl(operand, *, full_matrices):
    q, r = np.linalg.qr(operand, mode="complete" if full_matrices else "reduced")
    return [q.astype(operand.dtype), r.astype(operand.dtype)]


def _qr_jvp(primals, tangents, *, full_matrices):
    # A = QR. With M = Q^H dA R^-1 and w = strict_lower(M) - strict_lower(M)^H
    # (Q^H dQ is skew): dQ = Q w + (dA - Q Q^H dA) R^-1, dR = (Q^H dA - w R).
    (a,), (da,) = primals, tangents
    q, r = qr_p.bind(a, full_matrices=full_matrices)
    if isinstance(da, Zero):
        return [q, r], [Zero.from_value(q), Zero.from_value(r)]
    m, n = get_aval(a).shape[-2:]
    if m < n or (full_matrices and m > n):
        raise NotImplementedError("differentiation of qr is supported for m >= n with "
                                  "reduced matrices (full_matrices=False, or square inputs)")
    qt_da = _matmul(_H(q), da)
    da_rinv = triangular_solve(r, da, left_side=False, lower=False)
    m_mat = triangular_solve(r, qt_da, left_side=False, lower=False)
    low = _masked(m_mat, np.tril(np.ones((n, n)), -1))
    w = ew.sub(low, _H(low))
    dq = ew.add(_matmul(q, w), ew.sub(da_rinv, _matmul(q, _matmul(_H(q), da_rinv))))
    dr = ew.sub(qt_da, _matmul(w, r))
    return [q, r], [dq, dr]


qr_p.jvp = _qr_jvp
_decomposition_batch(qr_p)


def qr(x, full_matrices: bool = True):
    """QR decomposition ``x = q @ r`` (``q`` with orthonormal columns, ``r`` upper
    triangular).

    Example::

        q, r = qr(jnp.eye(3), full_matrices=False)
    """
    return tuple(qr_p.bind(x, full_matrices=bool(full_matrices)))


# =============================================================================================
# eigh
# =============================================================================================

eigh_p = Primitive("eigh", multiple_results=True)


@eigh_p.def_abstract_eval
def _eigh_rule(operand, *, lower, sort_eigenvalues=True):
    _matrix_rule_check("eigh", operand)
    return [ShapedArray(operand.shape, operand.dtype),
            ShapedArray(operand.shape[:-1], _real_dtype(operand.dtype))]


@eigh_p.def_impl
def _eigh_impl(operand, *, lower, sort_eigenvalues=True):
    w, v = np.linalg.eigh(operand, UPLO="L" if lower else "U")
    return [v.astype(operand.dtype), w.astype(_real_dtype(operand.dtype))]


def _eigh_jvp(primals, tangents, *, lower, sort_eigenvalues=True):
    # With S = V^H dA V: dw = real(diag(S)); dV = V (F * S), F_ij = 1 / (w_j - w_i) off the
    # diagonal (distinct eigenvalues assumed) and 0 on it.
    (a,), (da,) = primals, tangents
    v, w = eigh_p.bind(a, lower=lower, sort_eigenvalues=sort_eigenvalues)
    if isinstance(da, Zero):
        return [v, w], [Zero.from_value(v), Zero.from_value(w)]
    n = get_aval(a).shape[-1]
    s = _matmul(_H(v), _matmul(da, v))
    aval_w = get_aval(w)
    w_i = structural.broadcast_in_dim(w, aval_w.shape + (n,), tuple(range(aval_w.ndim)))
    w_j = structural.broadcast_in_dim(w, aval_w.shape + (n,),
                                      tuple(range(aval_w.ndim - 1)) + (aval_w.ndim,))
    eye = _const_matrix(np.eye(n), w_i)
    f = ew.sub(ew.div(_const_scalar(1.0, w_i), ew.add(eye, ew.sub(w_j, w_i))), eye)
    f = ew.convert_element_type(f, get_aval(a).dtype) if get_aval(a).dtype != aval_w.dtype else f
    dv = _matmul(v, ew.mul(f, s))
    dw = _diagonal(s)
    if _dtypes.is_complex(get_aval(dw).dtype):
        dw = ew.real(dw)
    return [v, w], [dv, dw]


eigh_p.jvp = _eigh_jvp
_decomposition_batch(eigh_p)


def eigh(x, lower: bool = True, symmetrize_input: bool = True, sort_eigenvalues: bool = True):
    """Eigendecomposition of a Hermitian matrix: returns ``(v, w)`` with ``x @ v = v * w``,
    eigenvalues ascending. Only one triangle is read unless ``symmetrize_input``.

    Example::

        v, w = eigh(jnp.array([[2., 1.], [1., 2.]]))   # w == [1., 3.]
    """
    if symmetrize_input:
        x = ew.mul(ew.add(x, _H(x)), _const_scalar(0.5, x))
    return tuple(eigh_p.bind(x, lower=bool(lower), sort_eigenvalues=bool(sort_eigenvalues)))


# =============================================================================================
# svd
# =============================================================================================

svd_p = Primitive("svd", multiple_results=True)


@svd_p.def_abstract_eval
def _svd_rule(operand, *, full_matrices, compute_uv):
    _matrix_rule_check("svd", operand, square=False)
    m, n = operand.shape[-2:]
    batch, k = operand.shape[:-2], min(m, n)
    s = ShapedArray(batch + (k,), _real_dtype(operand.dtype))
    if not compute_uv:
        return [s]
    u_cols, vt_rows = (m, n) if full_matrices else (k, k)
    return [s, ShapedArray(batch + (m, u_cols), operand.dtype),
            ShapedArray(batch + (vt_rows, n), operand.dtype)]


@svd_p.def_impl
def _svd_impl(operand, *, full_matrices, compute_uv):
    real = _real_dtype(operand.dtype)
    if not compute_uv:
        return [np.linalg.svd(operand, compute_uv=False).astype(real)]
    u, s, vt = np.linalg.svd(operand, full_matrices=full_matrices)
    return [s.astype(real), u.astype(operand.dtype), vt.astype(operand.dtype)]


def _svd_jvp(primals, tangents, *, full_matrices, compute_uv):
    # A = U S V^H (reduced). With P = U^H dA V: dS = real(diag(P));
    # dU = U (F * (P S + S P^H)) + (I - U U^H) dA V S^-1,
    # dV = V (F * (S P + P^H S)) + (I - V V^H) dA^H U S^-1, F_ij = 1 / (s_j^2 - s_i^2).
    (a,), (da,) = primals, tangents
    outs = svd_p.bind(a, full_matrices=full_matrices, compute_uv=compute_uv)
    if isinstance(da, Zero):
        return outs, [Zero.from_value(o) for o in outs]
    m, n = get_aval(a).shape[-2:]
    s, u, vt = svd_p.bind(a, full_matrices=False, compute_uv=True)
    v = _H(vt)
    p = _matmul(_H(u), _matmul(da, v))
    ds = _diagonal(p)
    if _dtypes.is_complex(get_aval(ds).dtype):
        ds = ew.real(ds)
    if not compute_uv:
        return outs, [ds]
    if full_matrices and m != n:
        raise NotImplementedError("differentiation of the singular vectors of svd with "
                                  "full_matrices=True is supported only for square matrices")
    if _dtypes.is_complex(get_aval(a).dtype):
        raise NotImplementedError("differentiation of the singular vectors of a complex svd "
                                  "is not supported")
    k = min(m, n)
    aval_s = get_aval(s)
    s_sq = ew.mul(s, s)
    s_i = structural.broadcast_in_dim(s_sq, aval_s.shape + (k,), tuple(range(aval_s.ndim)))
    s_j = structural.broadcast_in_dim(s_sq, aval_s.shape + (k,),
                                      tuple(range(aval_s.ndim - 1)) + (aval_s.ndim,))
    eye = _const_matrix(np.eye(k), s_i)
    f = ew.sub(ew.div(_const_scalar(1.0, s_i), ew.add(eye, ew.sub(s_j, s_i))), eye)
    p_s = _row_scale(p, s)           # P S
    s_p = _col_scale(p, s)           # S P
    du = _matmul(u, ew.mul(f, ew.add(p_s, _mT(p_s))))   # S P^H = (P S)^H
    dv = _matmul(v, ew.mul(f, ew.add(s_p, _mT(s_p))))   # P^H S = (S P)^H
    inv_s = ew.div(_const_scalar(1.0, s), s)
    if m > k:
        da_v = _row_scale(_matmul(da, v), inv_s)
        du = ew.add(du, ew.sub(da_v, _matmul(u, _matmul(_H(u), da_v))))
    if n > k:
        dat_u = _row_scale(_matmul(_H(da), u), inv_s)
        dv = ew.add(dv, ew.sub(dat_u, _matmul(v, _matmul(_H(v), dat_u))))
    return outs, [ds, du, _H(dv)]


svd_p.jvp = _svd_jvp
_decomposition_batch(svd_p)


def svd(x, full_matrices: bool = True, compute_uv: bool = True):
    """Singular value decomposition. Returns ``(u, s, vh)`` with ``x = u @ diag(s) @ vh``
    (``s`` descending), or only ``s`` when ``compute_uv`` is False.

    Example::

        svd(jnp.array([[3., 0.], [0., 4.]]), compute_uv=False)   # [4., 3.]
    """
    outs = svd_p.bind(x, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv))
    if not compute_uv:
        return outs[0]
    s, u, vh = outs
    return u, s, vh


# =============================================================================================
# Shared by schur and hessenberg (which, as in JAX, have no derivative)
# =============================================================================================


def _check_square(name, operand):
    if operand.ndim < 2 or operand.shape[-1] != operand.shape[-2]:
        raise ValueError(f"{name}: the operand must be a (batch of) square matrices, got "
                         f"{operand.str_short()}")
    if not _dtypes.is_inexact(operand.dtype):
        raise TypeError(f"{name}: the operand must have a float or complex dtype, got "
                        f"{operand.str_short()}")


def _no_jvp(name):
    def rule(primals, tangents, **params):
        raise NotImplementedError(f"differentiation rule for '{name}' is not implemented "
                                  "(as in JAX, the decomposition has no derivative)")
    return rule


# =============================================================================================
# schur
# =============================================================================================

schur_p = Primitive("schur", multiple_results=True)


@schur_p.def_abstract_eval
def _schur_rule(operand, *, compute_schur_vectors):
    _check_square("schur", operand)
    out = ShapedArray(operand.shape, operand.dtype)
    return [out, out] if compute_schur_vectors else [out]


@schur_p.def_impl
def _schur_impl(operand, *, compute_schur_vectors):
    import scipy.linalg  # imported on use: it is slow to import

    # A real matrix gets the real (quasi-triangular) form, a complex one the triangular form:
    # the output dtype is always the input dtype.
    output = "complex" if _dtypes.is_complex(operand.dtype) else "real"
    if operand.size == 0:
        outs = [operand.copy(), operand.copy()]
    else:
        outs = _per_matrix(lambda a: scipy.linalg.schur(a, output=output), operand)
    outs = [np.asarray(o).astype(operand.dtype, copy=False) for o in outs]
    return outs if compute_schur_vectors else outs[:1]


schur_p.jvp = _no_jvp("schur")
_decomposition_batch(schur_p)


def schur(x, *, compute_schur_vectors: bool = True, sort_eig_vals: bool = False,
          select_callable=None):
    """Schur decomposition ``x = Z T Z^H`` of a (batch of) square matrices, as
    ``jax.lax.linalg.schur``. Returns ``[T, Z]`` (``[T]`` without Schur vectors); ``T`` is
    quasi-upper-triangular for real input (2x2 blocks for complex eigenvalue pairs) and
    upper triangular for complex input.

    Example::

        t, z = schur(jnp.array([[1., 2.], [3., 4.]]))   # z @ t @ z.T == x
    """
    if sort_eig_vals or select_callable is not None:
        raise NotImplementedError("schur: sorting the eigenvalues (sort_eig_vals, "
                                  "select_callable) is not supported")
    return schur_p.bind(x, compute_schur_vectors=bool(compute_schur_vectors))


# =============================================================================================
# hessenberg
# =============================================================================================

hessenberg_p = Primitive("hessenberg", multiple_results=True)


@hessenberg_p.def_abstract_eval
def _hessenberg_rule(operand):
    _check_square("hessenberg", operand)
    n = operand.shape[-1]
    return [ShapedArray(operand.shape, operand.dtype),
            ShapedArray(operand.shape[:-2] + (max(n - 1, 0),), operand.dtype)]


@hessenberg_p.def_impl
def _hessenberg_impl(operand):
    from scipy.linalg import lapack  # imported on use: it is slow to import

    n = operand.shape[-1]

    def one(a):
        # LAPACK gehrd's packed output, as XLA returns it: the Hessenberg matrix on and above
        # the first subdiagonal, the Householder vectors below it, and their scales ``tau``.
        gehrd, gehrd_lwork = lapack.get_lapack_funcs(("gehrd", "gehrd_lwork"), (a,))
        lwork = int(np.real(gehrd_lwork(n)[0])) if n > 1 else 1
        packed, tau, info = gehrd(a, lwork=max(lwork, 1), overwrite_a=False)
        if info != 0:
            raise RuntimeError(f"hessenberg: LAPACK gehrd failed (info={info})")
        return packed, tau[: n - 1]

    if operand.size == 0:
        return [operand.copy(), np.zeros(operand.shape[:-2] + (max(n - 1, 0),), operand.dtype)]
    packed, tau = _per_matrix(one, operand)
    return [packed.astype(operand.dtype, copy=False), tau.astype(operand.dtype, copy=False)]


hessenberg_p.jvp = _no_jvp("hessenberg")
_decomposition_batch(hessenberg_p)


def hessenberg(a):
    """Reduce a (batch of) square matrices to upper Hessenberg form, as
    ``jax.lax.linalg.hessenberg``. Returns ``(packed, taus)`` in LAPACK's layout: the
    Hessenberg matrix on and above the first subdiagonal, and below it the Householder
    vectors ``v_i`` (with an implicit leading 1) of ``Q = prod_i (I - taus[i] v_i v_i^H)``.

    Example::

        packed, taus = hessenberg(jnp.eye(3))   # jnp.triu(packed, -1) is the Hessenberg form
    """
    return tuple(hessenberg_p.bind(a))


# schur and hessenberg are public as jax.lax.linalg's (functrans.lax.linalg), not jax.lax's
__all__ = ["cholesky", "eigh", "lu", "qr", "svd", "triangular_solve"]
