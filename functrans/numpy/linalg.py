"""``functrans.numpy.linalg``: norms, solves, decompositions and matrix functions.

Decompositions come from the ``lax`` linear-algebra primitives (cholesky, lu, qr, svd,
eigh, triangular_solve); everything else is composed from them, so derivatives and
batching follow from those primitives' rules. Leading axes are batch axes throughout.
"""
from __future__ import annotations

import builtins
import collections

import numpy as np

from functrans import _dtypes
from functrans.core import get_aval
from functrans.numpy import _reductions as red
from functrans.numpy import _ufuncs as uf
from functrans.numpy._contractions import (cross as _cross, matmul, outer, tensordot, vecdot,
                                           dot)
from functrans.numpy._promotion import (broadcast_shapes, broadcast_to_shape, canonicalize_axis,
                                        concrete_value, lax_fn, operator_index,
                                        promote_dtypes_inexact, to_array)
from functrans.numpy._shape import diagonal as _diagonal, matrix_transpose, swapaxes
from functrans.primitives import elementwise as lax
from functrans.primitives import structural
from functrans.numpy._creation import eye, iota
from functrans.numpy._shape import moveaxis

EighResult = collections.namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
QRResult = collections.namedtuple("QRResult", ["Q", "R"])
SlogdetResult = collections.namedtuple("SlogdetResult", ["sign", "logabsdet"])
SVDResult = collections.namedtuple("SVDResult", ["U", "S", "Vh"])


def _square(fname, a):
    a, = promote_dtypes_inexact(a)
    shape = get_aval(a).shape
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ValueError(f"{fname}: expected a square matrix (or a stack of them), got shape "
                         f"{shape}")
    return a


def _H(x):
    return uf.conjugate(swapaxes(x, -1, -2))


def _eye_like(a):
    n = get_aval(a).shape[-1]
    return broadcast_to_shape(eye(n, dtype=get_aval(a).dtype), get_aval(a).shape)


def _real_dtype(dtype):
    return np.dtype(np.real(np.zeros((), dtype)).dtype)


# ---- decompositions --------------------------------------------------------------------------

def cholesky(a, *, upper=False, symmetrize_input=True):
    """Cholesky factor of a Hermitian positive-definite matrix: lower ``L`` with
    ``a = L @ L^H`` (or upper ``U = L^H`` when ``upper``)."""
    a = _square("cholesky", a)
    L = lax_fn("cholesky")(a, symmetrize_input=symmetrize_input)
    return _H(L) if upper else L


def qr(a, mode="reduced"):
    """QR decomposition; ``mode`` is ``'reduced'``, ``'complete'`` or ``'r'``."""
    a, = promote_dtypes_inexact(a)
    if get_aval(a).ndim < 2:
        raise ValueError("qr: expected an array of at least two dimensions")
    if mode not in ("reduced", "complete", "r"):
        raise NotImplementedError(f"qr: mode {mode!r} is not supported")
    q, r = lax_fn("qr")(a, full_matrices=(mode == "complete"))
    return r if mode == "r" else QRResult(q, r)


def svd(a, full_matrices=True, compute_uv=True, hermitian=False, subset_by_index=None):
    """Singular value decomposition ``a = U @ diag(S) @ Vh`` (singular values descending)."""
    a, = promote_dtypes_inexact(a)
    if get_aval(a).ndim < 2:
        raise ValueError("svd: expected an array of at least two dimensions")
    if subset_by_index is not None:
        raise NotImplementedError("svd: subset_by_index is not supported")
    out = lax_fn("svd")(a, full_matrices=full_matrices, compute_uv=compute_uv)
    if not compute_uv:
        return out[0] if isinstance(out, (tuple, list)) else out
    u, s, vh = out
    return SVDResult(u, s, vh)


def svdvals(x, /):
    """The singular values of ``x``."""
    return svd(x, compute_uv=False)


def eigh(a, UPLO=None, symmetrize_input=True):
    """Eigenvalues (ascending) and eigenvectors (columns) of a Hermitian matrix."""
    a = _square("eigh", a)
    lower = UPLO in (None, "L")
    if UPLO not in (None, "L", "U"):
        raise ValueError(f"eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    first, second = lax_fn("eigh")(a, lower=lower, symmetrize_input=symmetrize_input)
    # the eigenvalues are the output with one dimension fewer
    if get_aval(first).ndim == get_aval(a).ndim - 1:
        w, v = first, second
    else:
        v, w = first, second
    return EighResult(w, v)


def eigvalsh(a, UPLO="L"):
    """Eigenvalues (ascending) of a Hermitian matrix."""
    return eigh(a, UPLO).eigenvalues


def eig(a):
    """General eigendecomposition: not available (no non-symmetric eigensolver)."""
    raise NotImplementedError("linalg.eig is not supported; use eigh for Hermitian matrices")


def eigvals(a):
    """General eigenvalues: not available (no non-symmetric eigensolver)."""
    raise NotImplementedError("linalg.eigvals is not supported; use eigvalsh for Hermitian "
                              "matrices")


# ---- LU-based: solve, inv, det ---------------------------------------------------------------

def _lu(a):
    lu_, pivots, perm = lax_fn("lu")(a)
    return lu_, pivots, perm


def _permutation_matrix(perm, n, dtype):
    """``P`` with ``(P @ b)[i] = b[perm[i]]``, batched over ``perm``'s leading axes."""
    shape = get_aval(perm).shape + (n,)
    cols = iota(get_aval(perm).dtype, shape, len(shape) - 1)
    rows = structural.broadcast_in_dim(perm, shape, tuple(range(len(shape) - 1)))
    return lax.convert_element_type(lax.eq(rows, cols), dtype)


def _lu_solve(lu_, perm, b):
    n = get_aval(lu_).shape[-1]
    b = matmul(_permutation_matrix(perm, n, get_aval(b).dtype), b)
    tri = lax_fn("triangular_solve")
    y = tri(lu_, b, left_side=True, lower=True, unit_diagonal=True)
    return tri(lu_, y, left_side=True, lower=False)


def solve(a, b):
    """The solution ``x`` of ``a @ x = b`` (``b`` a vector when 1-D, else a stack of
    matrices), by LU decomposition with partial pivoting.

        >>> solve(array([[2.0, 0.0], [0.0, 4.0]]), array([2.0, 2.0]))
        Array([1. , 0.5], dtype=float32)
    """
    a = _square("solve", a)
    a, b = promote_dtypes_inexact(a, b)
    a_shape, b_shape = get_aval(a).shape, get_aval(b).shape
    vector = len(b_shape) == 1
    if vector:
        b = structural.reshape(b, b_shape + (1,))
        b_shape = get_aval(b).shape
    if b_shape[-2] != a_shape[-1]:
        raise ValueError(f"solve: incompatible shapes {a_shape} and {b_shape}")
    batch = broadcast_shapes(a_shape[:-2], b_shape[:-2])
    a = broadcast_to_shape(a, batch + a_shape[-2:])
    b = broadcast_to_shape(b, batch + b_shape[-2:])
    lu_, _, perm = _lu(a)
    x = _lu_solve(lu_, perm, b)
    return structural.reshape(x, batch + (a_shape[-1],)) if vector else x


def inv(a):
    """The inverse of a square matrix (or of each in a stack)."""
    a = _square("inv", a)
    return solve(a, _eye_like(a))


def _lu_diagonal_and_parity(a):
    lu_, pivots, _ = _lu(a)
    d = _diagonal(lu_, 0, -2, -1)
    swapped = lax.ne(pivots, iota(get_aval(pivots).dtype, get_aval(pivots).shape,
                                  get_aval(pivots).ndim - 1))
    swaps = red.count_nonzero(swapped, axis=-1)
    odd = lax.eq(uf.remainder(swaps, 2), lax._weak_full(1, get_aval(swaps)))
    return d, odd


def det(a):
    """The determinant of a square matrix (or of each in a stack).

        >>> det(array([[2.0, 1.0], [0.0, 3.0]]))
        Array(6., dtype=float32)
    """
    a = _square("det", a)
    if get_aval(a).shape[-1] == 0:
        return structural.full(get_aval(a).shape[:-2], 1, get_aval(a).dtype)
    d, odd = _lu_diagonal_and_parity(a)
    p = red.prod(d, axis=-1)
    return uf.where(odd, lax.neg(p), p)


def slogdet(a, *, method=None):
    """Sign and natural log of the absolute value of the determinant."""
    a = _square("slogdet", a)
    dtype = get_aval(a).dtype
    if get_aval(a).shape[-1] == 0:
        batch = get_aval(a).shape[:-2]
        return SlogdetResult(structural.full(batch, 1, dtype),
                             structural.full(batch, 0, _real_dtype(dtype)))
    d, odd = _lu_diagonal_and_parity(a)
    abs_d = uf.absolute(d)
    logabsdet = red.sum(uf.log(abs_d), axis=-1)
    if _dtypes.is_complex(dtype):
        phase = uf.true_divide(d, lax.convert_element_type(abs_d, dtype))
        sign = red.prod(phase, axis=-1)
    else:
        sign = red.prod(uf.sign(d), axis=-1)
    sign = uf.where(odd, lax.neg(sign), sign)
    is_zero = red.any(lax.eq(abs_d, lax._weak_full(0, get_aval(abs_d))), axis=-1)
    sign = uf.where(is_zero, 0, sign)
    logabsdet = uf.where(is_zero, -np.inf, logabsdet)
    return SlogdetResult(sign, logabsdet)


# ---- SVD-based -------------------------------------------------------------------------------

def _default_rtol(a):
    m, n = get_aval(a).shape[-2:]
    return 10.0 * builtins.max(m, n) * float(_dtypes.finfo(_real_dtype(get_aval(a).dtype)).eps)


def pinv(a, rtol=None, hermitian=False, *, rcond=None):
    """The Moore-Penrose pseudo-inverse, dropping singular values below
    ``rtol * largest``."""
    a, = promote_dtypes_inexact(a)
    if rcond is not None:
        rtol = rcond
    m, n = get_aval(a).shape[-2:]
    if m == 0 or n == 0:
        return structural.full(get_aval(a).shape[:-2] + (n, m), 0, get_aval(a).dtype)
    u, s, vh = svd(a, full_matrices=False)
    rtol = _default_rtol(a) if rtol is None else rtol
    cutoff = uf.multiply(rtol, red.max(s, axis=-1, keepdims=True))
    big = uf.greater(s, cutoff)
    s_inv = uf.where(big, uf.true_divide(1, uf.where(big, s, 1)), 0)
    s_inv = lax.convert_element_type(s_inv, get_aval(a).dtype)
    return matmul(_H(vh), uf.multiply(structural.expand_dims(s_inv, (get_aval(s_inv).ndim,)),
                                      _H(u)))


def matrix_rank(M, rtol=None, *, tol=None):
    """Number of singular values above the tolerance (default ``S.max() * max(M, N) *
    eps``)."""
    M, = promote_dtypes_inexact(M)
    if get_aval(M).ndim < 2:
        return lax.convert_element_type(red.any(lax.ne(M, lax._weak_full(0, get_aval(M)))),
                                        _dtypes.default_int_dtype())
    s = svd(M, compute_uv=False)
    if tol is None:
        m, n = get_aval(M).shape[-2:]
        scale = rtol if rtol is not None else builtins.max(m, n) * float(
            _dtypes.finfo(get_aval(s).dtype).eps)
        tol = uf.multiply(red.max(s, axis=-1, keepdims=True), scale)
    else:
        tol = structural.expand_dims(to_array(tol), (get_aval(to_array(tol)).ndim,))
    return red.sum(uf.greater(s, tol), axis=-1)


def lstsq(a, b, rcond=None, *, numpy_resid=False):
    """Least-squares solution of ``a @ x = b``: ``(x, residuals, rank, singular_values)``."""
    a, b = promote_dtypes_inexact(a, b)
    if get_aval(a).ndim != 2:
        raise ValueError("lstsq: a must be 2-D")
    vector = get_aval(b).ndim == 1
    if vector:
        b = structural.reshape(b, get_aval(b).shape + (1,))
    m, n = get_aval(a).shape
    u, s, vh = svd(a, full_matrices=False)
    eps = float(_dtypes.finfo(get_aval(s).dtype).eps)
    rcond = eps * builtins.max(m, n) if rcond is None else rcond
    big = uf.greater(s, uf.multiply(rcond, red.max(s)) if builtins.min(m, n) else 0)
    s_inv = uf.where(big, uf.true_divide(1, uf.where(big, s, 1)), 0)
    rank = red.sum(big)
    uTb = matmul(_H(u), b)
    x = matmul(_H(vh), uf.multiply(structural.expand_dims(lax.convert_element_type(
        s_inv, get_aval(a).dtype), (1,)), uTb))
    resid = red.sum(uf.square(uf.absolute(uf.subtract(b, matmul(a, x)))), axis=0)
    if numpy_resid:
        r = concrete_value(rank)
        if r is None or int(r) != n or m <= n:
            resid = structural.full((0,), 0, get_aval(resid).dtype)
    if vector:
        x = structural.reshape(x, (n,))
        if get_aval(resid).shape == (1,):
            resid = structural.reshape(resid, (1,))
    return x, resid, rank, s


def cond(x, p=None):
    """Condition number (ratio of largest to smallest singular value for ``p`` None/2/-2;
    ``norm(x, p) * norm(inv(x), p)`` otherwise)."""
    x, = promote_dtypes_inexact(x)
    if p is None or p in (2, -2):
        s = svd(x, compute_uv=False)
        hi, lo = red.max(s, axis=-1), red.min(s, axis=-1)
        return uf.true_divide(lo, hi) if p == -2 else uf.true_divide(hi, lo)
    return uf.multiply(norm(x, p, axis=(-2, -1)), norm(inv(x), p, axis=(-2, -1)))


# ---- norms -----------------------------------------------------------------------------------

def _vector_norm(x, ord, axis, keepdims):
    abs_x = uf.absolute(x)
    if ord is None or ord == 2:
        return uf.sqrt(red.sum(uf.real(uf.multiply(x, uf.conjugate(x))), axis=axis,
                               keepdims=keepdims))
    if ord == np.inf:
        return red.max(abs_x, axis=axis, keepdims=keepdims)
    if ord == -np.inf:
        return red.min(abs_x, axis=axis, keepdims=keepdims)
    if ord == 0:
        return red.sum(lax.convert_element_type(lax.ne(abs_x, lax._weak_full(0, get_aval(abs_x))),
                                                get_aval(abs_x).dtype),
                       axis=axis, keepdims=keepdims)
    if ord == 1:
        return red.sum(abs_x, axis=axis, keepdims=keepdims)
    if isinstance(ord, str):
        raise ValueError(f"norm: invalid order {ord!r} for vectors")
    ord_value = float(ord)
    powered = uf.power(abs_x, ord_value)
    return uf.power(red.sum(powered, axis=axis, keepdims=keepdims), 1.0 / ord_value)


def _matrix_norm(x, ord, axes, keepdims):
    row, col = axes
    ndim = get_aval(x).ndim
    if ord in (None, "fro", "f"):
        out = uf.sqrt(red.sum(uf.real(uf.multiply(x, uf.conjugate(x))), axis=axes,
                              keepdims=keepdims))
        return out
    if ord in (1, -1):
        sums = red.sum(uf.absolute(x), axis=row, keepdims=True)
        f = red.max if ord == 1 else red.min
        out = f(sums, axis=col, keepdims=True)
    elif ord in (np.inf, -np.inf):
        sums = red.sum(uf.absolute(x), axis=col, keepdims=True)
        f = red.max if ord == np.inf else red.min
        out = f(sums, axis=row, keepdims=True)
    elif ord in (2, -2, "nuc"):
        moved = moveaxis(x, (row, col), (-2, -1))
        s = svd(moved, compute_uv=False)
        if ord == "nuc":
            red_s = red.sum(s, axis=-1)
        else:
            red_s = (red.max if ord == 2 else red.min)(s, axis=-1)
        if not keepdims:
            return red_s
        shape = list(get_aval(x).shape)
        shape[row] = shape[col] = 1
        return structural.reshape(red_s, tuple(shape))
    else:
        raise ValueError(f"norm: invalid order {ord!r} for matrices")
    if keepdims:
        return out
    return structural.squeeze(out, tuple(sorted((row % ndim, col % ndim))))


def norm(x, ord=None, axis=None, keepdims=False):
    """Vector or matrix norm. ``axis`` an int (or a 1-D input) gives vector norms (``ord``:
    None/2, 1, inf, -inf, 0, any p); a pair of axes (or a 2-D input) gives matrix norms
    (``ord``: None/'fro', 'nuc', 1, -1, 2, -2, inf, -inf).

        >>> norm(array([3.0, 4.0]))
        Array(5., dtype=float32)
    """
    x, = promote_dtypes_inexact(x)
    ndim = get_aval(x).ndim
    if axis is None:
        if ord is None:
            out = uf.sqrt(red.sum(uf.real(uf.multiply(x, uf.conjugate(x)))))
            return structural.reshape(out, (1,) * ndim) if keepdims else out
        if ndim == 1:
            axis = (0,)
        elif ndim == 2:
            axis = (0, 1)
        else:
            raise ValueError("norm: improper number of dimensions to norm (give axis)")
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(canonicalize_axis(a, ndim) for a in axes)
    if len(axes) == 1:
        return _vector_norm(x, ord, axes, keepdims)
    if len(axes) == 2:
        if axes[0] == axes[1]:
            raise ValueError("norm: duplicate axes")
        return _matrix_norm(x, ord, axes, keepdims)
    raise ValueError("norm: improper number of dimensions to norm")


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    """Array-API vector norm (over all elements when ``axis`` is None)."""
    x, = promote_dtypes_inexact(x)
    if axis is None:
        flat = structural.reshape(x, (get_aval(x).size,))
        out = _vector_norm(flat, ord, (0,), False)
        return structural.reshape(out, (1,) * get_aval(x).ndim) if keepdims else out
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(canonicalize_axis(a, get_aval(x).ndim) for a in axes)
    return _vector_norm(x, ord, axes, keepdims)


def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    """Array-API matrix norm over the last two axes."""
    x, = promote_dtypes_inexact(x)
    ndim = get_aval(x).ndim
    return _matrix_norm(x, ord, (ndim - 2, ndim - 1), keepdims)


# ---- matrix functions ------------------------------------------------------------------------

def matrix_power(a, n):
    """``a`` raised to the integer power ``n`` (``n < 0`` inverts first)."""
    a = to_array(a)
    shape = get_aval(a).shape
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ValueError(f"matrix_power: expected a square matrix, got shape {shape}")
    n = operator_index(n, "matrix_power: n")
    if n == 0:
        return lax.convert_element_type(_eye_like(a), get_aval(a).dtype)
    if n < 0:
        a = inv(a)
        n = -n
    result = None
    base = a
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result


def multi_dot(arrays, *, precision=None):
    """The product of a chain of matrices, multiplied in the order that needs the fewest
    flops (the first and last may be vectors)."""
    arrays = [to_array(a) for a in arrays]
    if len(arrays) < 2:
        raise ValueError("multi_dot: expecting at least two arrays")
    if len(arrays) == 2:
        return dot(arrays[0], arrays[1], precision=precision)
    first_vec = get_aval(arrays[0]).ndim == 1
    last_vec = get_aval(arrays[-1]).ndim == 1
    if first_vec:
        arrays[0] = structural.reshape(arrays[0], (1,) + get_aval(arrays[0]).shape)
    if last_vec:
        arrays[-1] = structural.reshape(arrays[-1], get_aval(arrays[-1]).shape + (1,))
    dims = [get_aval(arrays[0]).shape[0]] + [get_aval(a).shape[1] for a in arrays]
    k = len(arrays)
    cost = [[0] * k for _ in range(k)]
    split_at = [[0] * k for _ in range(k)]
    # classic matrix-chain dynamic program over the static shapes
    for length in range(1, k):
        for i in range(k - length):
            j = i + length
            cost[i][j] = None
            for s in range(i, j):
                c = cost[i][s] + cost[s + 1][j] + dims[i] * dims[s + 1] * dims[j + 1]
                if cost[i][j] is None or c < cost[i][j]:
                    cost[i][j], split_at[i][j] = c, s

    def product(i, j):
        if i == j:
            return arrays[i]
        s = split_at[i][j]
        return dot(product(i, s), product(s + 1, j), precision=precision)

    out = product(0, k - 1)
    if first_vec:
        out = structural.squeeze(out, (0,))
    if last_vec:
        out = structural.squeeze(out, (get_aval(out).ndim - 1,))
    return out


def tensorinv(a, ind=2):
    """Inverse of ``a`` viewed as a linear map from its last axes to its first ``ind``."""
    a = to_array(a)
    shape = get_aval(a).shape
    rows = int(np.prod(shape[:ind], dtype=np.int64))
    inv_a = inv(structural.reshape(a, (rows, get_aval(a).size // rows)))
    return structural.reshape(inv_a, shape[ind:] + shape[:ind])


def tensorsolve(a, b, axes=None):
    """Solve ``tensordot(a, x, x.ndim) = b`` for ``x``."""
    if axes is not None:
        raise NotImplementedError("tensorsolve: axes= is not supported")
    a, b = promote_dtypes_inexact(a, b)
    b_shape = get_aval(b).shape
    x_shape = get_aval(a).shape[len(b_shape):]
    rows = int(np.prod(b_shape, dtype=np.int64))
    x = solve(structural.reshape(a, (rows, int(np.prod(x_shape, dtype=np.int64)))),
              structural.reshape(b, (rows,)))
    return structural.reshape(x, x_shape)


def diagonal(x, /, *, offset=0):
    """The diagonal of the last two axes."""
    return _diagonal(x, offset, -2, -1)


def trace(x, /, *, offset=0, dtype=None):
    """Sum of the diagonal of the last two axes."""
    return red.sum(diagonal(x, offset=offset), axis=-1, dtype=dtype)


def cross(x1, x2, /, *, axis=-1):
    """Cross product of 3-vectors along ``axis``."""
    return _cross(x1, x2, axis=axis)


__all__ = ["EighResult", "QRResult", "SVDResult", "SlogdetResult", "cholesky", "cond", "cross",
           "det", "diagonal", "eig", "eigh", "eigvals", "eigvalsh", "inv", "lstsq", "matmul",
           "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "multi_dot",
           "norm", "outer", "pinv", "qr", "slogdet", "solve", "svd", "svdvals", "tensordot",
           "tensorinv", "tensorsolve", "trace", "vecdot", "vector_norm"]
