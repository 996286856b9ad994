"""More of ``functrans.scipy.linalg``: SciPy's special-matrix constructors, the polar
decomposition, the Frechet derivative of ``expm``, Sylvester equations, tridiagonal
eigenproblems and ``qr_multiply`` (as in ``jax.scipy.linalg``).

Constructors whose argument is an array accept leading batch axes. Constructors that take
only a size are computed exactly in NumPy (integers and binomials, no rounding on the way)
and returned as arrays of the default floating (or integer) dtype.

    >>> import functrans.numpy as jnp
    >>> toeplitz(jnp.array([1.0, 2.0, 3.0]))
    Array([[1., 2., 3.],
           [2., 1., 2.],
           [3., 2., 1.]], dtype=float32)
"""
from __future__ import annotations

import math

import numpy as np

from functrans import _lax_linalg as lax_linalg
from functrans import numpy as jnp
from functrans.core import get_aval
from functrans.numpy._promotion import promote_dtypes_inexact
from functrans.scipy._matrix_exponential import expm_frechet  # noqa: F401

__all__ = [
    "toeplitz", "hankel", "circulant", "companion", "convolution_matrix", "dft", "hadamard",
    "helmert", "hilbert", "invhilbert", "leslie", "pascal", "invpascal", "fiedler",
    "fiedler_companion", "polar", "expm_frechet", "solve_sylvester", "eigh_tridiagonal",
    "qr_multiply",
]


def _float_array(value: np.ndarray):
    """An exact NumPy result as an array of the default float dtype."""
    return jnp.asarray(value, dtype=jnp.result_type(float))


def _vector(fname, x):
    x = jnp.asarray(x)
    if jnp.ndim(x) < 1:
        raise ValueError(f"{fname}: expected an array with at least 1 dimension, got a scalar")
    return x


def _gather_last(v, index: np.ndarray):
    """``v[..., index]`` for a (static) integer index array of any shape."""
    return jnp.take(v, jnp.asarray(index.reshape(-1)), axis=-1).reshape(
        get_aval(v).shape[:-1] + index.shape)


def _broadcast_batches(*arrays):
    """Broadcast the leading (batch) axes of arrays whose last axis is their own."""
    batch = jnp.broadcast_shapes(*(get_aval(x).shape[:-1] for x in arrays))
    return [jnp.broadcast_to(x, batch + get_aval(x).shape[-1:]) for x in arrays]


# =============================================================================================
# matrices with constant diagonals
# =============================================================================================

def toeplitz(c, r=None):
    """The Toeplitz matrix with first column ``c`` and first row ``r`` (default ``c``);
    ``r[0]`` is ignored in favour of ``c[0]``. Leading axes of ``c`` and ``r`` are batch
    axes.

        >>> toeplitz(jnp.array([1, 2]), jnp.array([1, 5, 6]))
        Array([[1, 5, 6],
               [2, 1, 5]], dtype=int32)
    """
    c = _vector("toeplitz", c)
    r = c if r is None else _vector("toeplitz", r)
    dtype = jnp.result_type(c, r)
    c, r = _broadcast_batches(c.astype(dtype), r.astype(dtype))
    m, n = c.shape[-1], r.shape[-1]
    # entry (i, j) is c[i - j] below the diagonal and r[j - i] above it; laid end to end
    # as [r[n-1], ..., r[1], c[0], ..., c[m-1]] it is entry n - 1 + i - j
    values = jnp.concatenate([jnp.flip(r[..., 1:], axis=-1), c], axis=-1)
    index = n - 1 + np.arange(m)[:, None] - np.arange(n)[None, :]
    return _gather_last(values, index)


def hankel(c, r=None):
    """The Hankel matrix with first column ``c`` and last row ``r`` (default zeros);
    ``r[0]`` is ignored in favour of ``c[-1]``. Leading axes are batch axes.

        >>> hankel(jnp.array([1, 2, 3]))
        Array([[1, 2, 3],
               [2, 3, 0],
               [3, 0, 0]], dtype=int32)
    """
    c = _vector("hankel", c)
    r = jnp.zeros_like(c) if r is None else _vector("hankel", r)
    dtype = jnp.result_type(c, r)
    c, r = _broadcast_batches(c.astype(dtype), r.astype(dtype))
    m, n = c.shape[-1], r.shape[-1]
    values = jnp.concatenate([c, r[..., 1:]], axis=-1)
    return _gather_last(values, np.arange(m)[:, None] + np.arange(n)[None, :])


def circulant(c):
    """The circulant matrix with first column ``c``: each column is the previous one
    rolled down by one. Leading axes are batch axes.

        >>> circulant(jnp.array([1, 2, 3]))
        Array([[1, 3, 2],
               [2, 1, 3],
               [3, 2, 1]], dtype=int32)
    """
    c = _vector("circulant", c)
    n = c.shape[-1]
    return _gather_last(c, (np.arange(n)[:, None] - np.arange(n)[None, :]) % n)


def convolution_matrix(a, n: int, mode: str = "full"):
    """The matrix ``A`` with ``A @ v == convolve(a, v, mode)`` for any ``v`` of length
    ``n``. ``mode`` is ``'full'``, ``'same'`` or ``'valid'``. Leading axes of ``a`` are
    batch axes.

        >>> convolution_matrix(jnp.array([1, 2]), 2)
        Array([[1, 0],
               [2, 1],
               [0, 2]], dtype=int32)
    """
    a = _vector("convolution_matrix", a)
    n = int(n)
    m = a.shape[-1]
    if n <= 0:
        raise ValueError(f"convolution_matrix: n must be positive, got {n}")
    if m == 0:
        raise ValueError("convolution_matrix: a must not be empty")
    if mode not in ("full", "same", "valid"):
        raise ValueError(f"convolution_matrix: mode must be 'full', 'same' or 'valid', got "
                         f"{mode!r}")
    # the full matrix has a[i - j] at (i, j) for 0 <= i - j < m; 'same' and 'valid' keep
    # the rows numpy.convolve keeps
    values = jnp.concatenate([jnp.zeros_like(a[..., :1]), a], axis=-1)
    shift = np.arange(m + n - 1)[:, None] - np.arange(n)[None, :]
    index = np.where((shift >= 0) & (shift < m), shift + 1, 0)
    full = _gather_last(values, index)
    if mode == "full":
        return full
    short, long = min(m, n), max(m, n)
    if mode == "same":
        start, rows = (short - 1) // 2, long
    else:
        start, rows = short - 1, long - short + 1
    return full[..., start:start + rows, :]


# =============================================================================================
# companion and other structured matrices built from a vector
# =============================================================================================

def companion(a):
    """The companion matrix of the polynomial with coefficients ``a`` (highest degree
    first, ``a[0] != 0``): its eigenvalues are the polynomial's roots. Leading axes are
    batch axes.

        >>> companion(jnp.array([1.0, -3.0, 2.0]))
        Array([[ 3., -2.],
               [ 1.,  0.]], dtype=float32)
    """
    (a,) = promote_dtypes_inexact(_vector("companion", a))
    n = a.shape[-1]
    if n < 2:
        raise ValueError(f"companion: a must have at least 2 coefficients, got {n}")
    first_row = -a[..., 1:] / a[..., :1]
    below = jnp.broadcast_to(jnp.eye(n - 2, n - 1, dtype=a.dtype),
                             get_aval(a).shape[:-1] + (n - 2, n - 1))
    return jnp.concatenate([first_row[..., None, :], below], axis=-2)


def fiedler(a):
    """The symmetric Fiedler matrix ``F[i, j] = |a[i] - a[j]|``. Leading axes are batch
    axes.

        >>> fiedler(jnp.array([1, 4, 12]))
        Array([[ 0,  3, 11],
               [ 3,  0,  8],
               [11,  8,  0]], dtype=int32)
    """
    a = _vector("fiedler", a)
    return jnp.abs(a[..., :, None] - a[..., None, :])


def fiedler_companion(a):
    """The Fiedler companion matrix of the polynomial with coefficients ``a`` (highest
    degree first): a pentadiagonal matrix with the same characteristic polynomial as
    :func:`companion`. Leading axes are batch axes.

        >>> fiedler_companion(jnp.array([1.0, -3.0, 2.0]))
        Array([[ 3., -2.],
               [ 1.,  0.]], dtype=float32)
    """
    (a,) = promote_dtypes_inexact(_vector("fiedler_companion", a))
    batch = get_aval(a).shape[:-1]
    if a.shape[-1] <= 1:
        return jnp.zeros(batch + (0, 0), a.dtype)
    a = a / a[..., :1]
    n = a.shape[-1] - 1
    if n == 1:
        return -a[..., 1:, None]
    # the product of Fiedler's elementary factors: a pentadiagonal matrix whose entries
    # are 1, 0 or minus a coefficient; listed as (row, column, source), source -1 = one
    rows, cols, sources = [0, 1], [0, 0], [1, -1]
    for k in range(2, n + 1):
        # coefficient a[k] sits beside the diagonal: above it for even k, below for odd k
        if k % 2 == 0:
            rows += [k - 2, k - 2]
            cols += [k - 1, k]
            sources += [k, -1]
        else:
            rows += [k - 1, k]
            cols += [k - 2, k - 2]
            sources += [k, -1]
    rows, cols, sources = np.array(rows), np.array(cols), np.array(sources)
    keep = (rows < n) & (cols < n)
    rows, cols, sources = rows[keep], cols[keep], sources[keep]
    # values: -a[source] for a coefficient, 1 for a one (index n + 1 of the padded vector)
    padded = jnp.concatenate([-a, jnp.ones_like(a[..., :1])], axis=-1)
    values = _gather_last(padded, np.where(sources < 0, n + 1, sources))
    index = np.full((n, n), -1)
    index[rows, cols] = np.arange(len(rows))
    values = jnp.concatenate([values, jnp.zeros_like(values[..., :1])], axis=-1)
    return _gather_last(values, np.where(index < 0, len(rows), index))


def leslie(f, s):
    """The Leslie matrix of a population model: first row the fecundities ``f`` (length
    ``n``), subdiagonal the survival rates ``s`` (length ``n - 1``). Leading axes are batch
    axes.

        >>> leslie(jnp.array([0.1, 2.0, 1.0]), jnp.array([0.2, 0.8]))
        Array([[0.1, 2. , 1. ],
               [0.2, 0. , 0. ],
               [0. , 0.8, 0. ]], dtype=float32)
    """
    f, s = _vector("leslie", f), _vector("leslie", s)
    n = f.shape[-1]
    if s.shape[-1] != n - 1:
        raise ValueError(f"leslie: s must have one entry fewer than f, got lengths "
                         f"{s.shape[-1]} and {n}")
    dtype = jnp.result_type(f, s)
    f, s = _broadcast_batches(f.astype(dtype), s.astype(dtype))
    below = s[..., :, None] * jnp.eye(n - 1, n, dtype=dtype)
    return jnp.concatenate([f[..., None, :], below], axis=-2)


# =============================================================================================
# matrices given by their size
# =============================================================================================

def dft(n: int, scale: str | None = None, *, dtype=None):
    """The ``n x n`` discrete Fourier transform matrix ``exp(-2 pi i j k / n)``, so
    ``dft(n) @ x == fft(x)``; ``scale`` is ``None``, ``'sqrtn'`` or ``'n'``.

        >>> dft(2).real
        Array([[ 1.,  1.],
               [ 1., -1.]], dtype=float32)
    """
    n = int(n)
    if scale not in (None, "sqrtn", "n"):
        raise ValueError(f"dft: scale must be None, 'sqrtn' or 'n', got {scale!r}")
    # (j k) mod n keeps the angle small, so large n loses no precision
    phase = (np.arange(n)[:, None] * np.arange(n)[None, :]) % max(n, 1)
    m = np.exp(-2j * np.pi * phase / max(n, 1))
    if scale == "sqrtn":
        m = m / math.sqrt(n)
    elif scale == "n":
        m = m / n
    return jnp.asarray(m, dtype=dtype if dtype is not None else jnp.result_type(complex))


def hadamard(n: int, dtype=int):
    """The ``n x n`` Hadamard matrix of Sylvester's construction (``n`` a power of 2).

        >>> hadamard(2)
        Array([[ 1,  1],
               [ 1, -1]], dtype=int32)
    """
    n = int(n)
    if n < 1 or n & (n - 1):
        raise ValueError(f"hadamard: n must be a positive power of 2, got {n}")
    h = np.ones((1, 1), dtype=np.int64)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return jnp.asarray(h, dtype=jnp.result_type(dtype))


def helmert(n: int, full: bool = False):
    """The Helmert matrix: orthonormal rows, the ``k``-th (``k >= 1``) contrasting element
    ``k`` with the mean of the elements before it. Without ``full`` the first row (the
    constant one) is dropped, giving shape ``(n - 1, n)``.

        >>> helmert(2)
        Array([[ 0.70710677, -0.70710677]], dtype=float32)
    """
    n = int(n)
    h = np.tril(np.ones((n, n)), -1) - np.diag(np.arange(n, dtype=np.float64))
    h[0] = 1.0
    h = h / np.sqrt(np.sum(h * h, axis=1, keepdims=True))
    return _float_array(h if full else h[1:])


def hilbert(n: int):
    """The ``n x n`` Hilbert matrix ``1 / (i + j + 1)``.

        >>> hilbert(2)
        Array([[1.        , 0.5       ],
               [0.5       , 0.33333334]], dtype=float32)
    """
    i = np.arange(int(n))
    return _float_array(1.0 / (i[:, None] + i[None, :] + 1))


def invhilbert(n: int):
    """The inverse of the ``n x n`` Hilbert matrix, from its exact integer formula. Its
    entries grow fast: beyond ``n = 14`` (float64) or ``n = 7`` (float32) they are not
    exactly representable.

        >>> invhilbert(2)
        Array([[ 4., -6.],
               [-6., 12.]], dtype=float32)
    """
    n = int(n)
    c = math.comb
    values = [[(-1) ** (i + j) * (i + j + 1) * c(n + i, n - j - 1) * c(n + j, n - i - 1)
               * c(i + j, i) ** 2 for j in range(n)] for i in range(n)]
    return _float_array(np.array(values, dtype=np.float64).reshape(n, n))


def _pascal_lower(n):
    return np.array([[math.comb(i, j) for j in range(n)] for i in range(n)],
                    dtype=object).reshape(n, n)


def _pascal_kind(kind, fname):
    if kind is None:
        kind = "symmetric"
    if kind not in ("symmetric", "lower", "upper"):
        raise ValueError(f"{fname}: kind must be 'symmetric', 'lower' or 'upper', got "
                         f"{kind!r}")
    return kind


def pascal(n: int, kind: str | None = None):
    """The ``n x n`` Pascal matrix of binomial coefficients: ``'symmetric'`` (default,
    ``C(i + j, i)``), ``'lower'`` (``C(i, j)``) or ``'upper'``.

        >>> pascal(3)
        Array([[1., 1., 1.],
               [1., 2., 3.],
               [1., 3., 6.]], dtype=float32)
    """
    n = int(n)
    kind = _pascal_kind(kind, "pascal")
    lower = _pascal_lower(n)
    if kind == "lower":
        exact = lower
    elif kind == "upper":
        exact = lower.T
    else:
        exact = lower.dot(lower.T)
    return _float_array(exact.astype(np.float64))


def invpascal(n: int, kind: str | None = None):
    """The inverse of :func:`pascal` (an integer matrix), computed exactly.

        >>> invpascal(3, kind="lower")
        Array([[ 1.,  0.,  0.],
               [-1.,  1.,  0.],
               [ 1., -2.,  1.]], dtype=float32)
    """
    n = int(n)
    kind = _pascal_kind(kind, "invpascal")
    # the lower Pascal matrix's inverse is itself with alternating signs
    i = np.arange(n)
    signs = np.where((i[:, None] + i[None, :]) % 2 == 0, 1, -1).astype(object)
    inverse_lower = _pascal_lower(n) * signs
    if kind == "lower":
        exact = inverse_lower
    elif kind == "upper":
        exact = inverse_lower.T
    else:
        # symmetric = L L^T, so its inverse is L^-T L^-1
        exact = inverse_lower.T.dot(inverse_lower)
    return _float_array(np.asarray(exact, dtype=np.float64).reshape(n, n))


# =============================================================================================
# decompositions and matrix functions built on existing ones
# =============================================================================================

def polar(a, side: str = "right", *, method: str = "qdwh", eps: float | None = None,
          max_iterations: int | None = None):
    """The polar decomposition ``a = u p`` (``side='right'``) or ``a = p u``
    (``'left'``): ``u`` has orthonormal columns (or rows) and ``p`` is Hermitian positive
    semidefinite. Computed from the SVD for every ``method`` (``'qdwh'`` names JAX's
    iterative algorithm; the result is the same decomposition), so ``eps`` and
    ``max_iterations`` are unused. Leading axes are batch axes; any shape is accepted.

        >>> u, p = polar(jnp.array([[2.0, 0.0], [0.0, -3.0]]))
        >>> p
        Array([[2., 0.],
               [0., 3.]], dtype=float32)
    """
    del eps, max_iterations
    if side not in ("right", "left"):
        raise ValueError(f"polar: side must be 'right' or 'left', got {side!r}")
    if method not in ("qdwh", "svd"):
        raise ValueError(f"polar: method must be 'qdwh' or 'svd', got {method!r}")
    (a,) = promote_dtypes_inexact(a)
    if jnp.ndim(a) < 2:
        raise ValueError(f"polar: expected a matrix (or a stack of them), got shape "
                         f"{jnp.shape(a)}")
    w, s, vh = lax_linalg.svd(a, full_matrices=False, compute_uv=True)
    u = w @ vh
    s = s.astype(a.dtype)
    if side == "right":
        p = (jnp.conj(jnp.swapaxes(vh, -1, -2)) * s[..., None, :]) @ vh
    else:
        p = (w * s[..., None, :]) @ jnp.conj(jnp.swapaxes(w, -1, -2))
    return u, p


def solve_sylvester(A, B, C, *, method: str = "schur", tol: float = 1e-8):
    """Solve the Sylvester equation ``A X + X B = C`` for ``X`` (``A`` is ``m x m``, ``B``
    ``n x n``, ``C`` ``m x n``).

    There is no Schur decomposition here, so the equation is solved as the linear system
    ``(I_n (x) A + B^T (x) I_m) vec(X) = vec(C)`` of size ``m n``: exact for any ``method``,
    but ``O((m n)^3)``, meant for small matrices. ``tol`` is unused. A singular system (``A``
    and ``-B`` sharing an eigenvalue) gives non-finite values.

        >>> solve_sylvester(jnp.eye(2), jnp.eye(2), 4 * jnp.eye(2))
        Array([[2., 0.],
               [0., 2.]], dtype=float32)
    """
    del tol
    if method not in ("schur", "eigen"):
        raise ValueError(f"solve_sylvester: method must be 'schur' or 'eigen', got "
                         f"{method!r}")
    A, B, C = promote_dtypes_inexact(A, B, C)
    m, n = jnp.shape(A)[-1], jnp.shape(B)[-1]
    if jnp.ndim(A) != 2 or jnp.ndim(B) != 2 or jnp.shape(A) != (m, m) \
            or jnp.shape(B) != (n, n) or jnp.shape(C) != (m, n):
        raise ValueError(f"solve_sylvester: expected A (m, m), B (n, n) and C (m, n), got "
                         f"{jnp.shape(A)}, {jnp.shape(B)} and {jnp.shape(C)}")
    # with row-major vec, vec(A X) = (A (x) I_n) vec(X) and vec(X B) = (I_m (x) B^T) vec(X)
    system = jnp.kron(A, jnp.eye(n, dtype=A.dtype)) + jnp.kron(jnp.eye(m, dtype=A.dtype),
                                                                 B.T)
    return jnp.linalg.solve(system, C.reshape(m * n)).reshape(m, n)


def eigh_tridiagonal(d, e, *, eigvals_only: bool = False, select: str = "a",
                     select_range=None, tol: float | None = None, key=None):
    """Eigenvalues (ascending) and, unless ``eigvals_only``, eigenvectors of the real
    symmetric tridiagonal matrix with diagonal ``d`` and off-diagonal ``e``.

    Solved as a dense ``eigh`` of that matrix (``O(n^3)``; ``tol`` and ``key`` are unused).
    ``select='a'`` gives all eigenvalues, ``'i'`` those with indices ``select_range =
    (lo, hi)`` (inclusive). ``'v'`` (a value range) would give a data-dependent number of
    eigenvalues and is not supported.

        >>> eigh_tridiagonal(jnp.array([2.0, 2.0]), jnp.array([1.0]), eigvals_only=True)
        Array([1., 3.], dtype=float32)
    """
    del tol, key
    d, e = promote_dtypes_inexact(d, e)
    if jnp.ndim(d) != 1 or jnp.ndim(e) != 1 or e.shape[0] != max(d.shape[0] - 1, 0):
        raise ValueError(f"eigh_tridiagonal: expected d of shape (n,) and e of shape "
                         f"(n - 1,), got {jnp.shape(d)} and {jnp.shape(e)}")
    if jnp.iscomplexobj(d) or jnp.iscomplexobj(e):
        raise NotImplementedError("eigh_tridiagonal: complex inputs are not supported")
    if select not in ("a", "i", "v"):
        raise ValueError(f"eigh_tridiagonal: select must be 'a', 'i' or 'v', got {select!r}")
    if select == "v":
        raise NotImplementedError("eigh_tridiagonal: select='v' (eigenvalues in a value "
                                  "range) has a data-dependent size and is not supported")
    n = d.shape[0]
    matrix = jnp.diag(d) + jnp.diag(e, 1) + jnp.diag(e, -1)
    v, w = lax_linalg.eigh(matrix, lower=True, symmetrize_input=False)
    if select == "i":
        lo, hi = (int(x) for x in select_range)
        if not 0 <= lo <= hi < n:
            raise ValueError(f"eigh_tridiagonal: select_range must be 0 <= lo <= hi < {n}, "
                             f"got {select_range!r}")
        w, v = w[lo:hi + 1], v[:, lo:hi + 1]
    return w if eigvals_only else (w, v)


def qr_multiply(a, c, mode: str = "right", pivoting: bool = False, conjugate: bool = False,
                overwrite_a: bool = False, overwrite_c: bool = False):
    """``Q`` of the (economic) QR decomposition of ``a``, multiplied into ``c``: returns
    ``(c @ Q, R)`` for ``mode='right'`` or ``(Q @ c, R)`` for ``'left'`` (``Q`` conjugated
    with ``conjugate``). A 1-D ``c`` is treated as a row (``'right'``) or a column
    (``'left'``).

        >>> cq, r = qr_multiply(jnp.eye(2), jnp.array([[1.0, 2.0]]))
        >>> jnp.abs(cq)
        Array([[1., 2.]], dtype=float32)
    """
    del overwrite_a, overwrite_c
    if pivoting:
        raise NotImplementedError("qr_multiply: pivoting=True (column-pivoted QR) is not "
                                  "supported")
    if mode not in ("right", "left"):
        raise ValueError(f"qr_multiply: mode must be 'right' or 'left', got {mode!r}")
    a, c = promote_dtypes_inexact(a, c)
    if jnp.ndim(a) < 2:
        raise ValueError(f"qr: expected a matrix (or a stack of them), got shape "
                         f"{jnp.shape(a)}")
    q, r = lax_linalg.qr(a, full_matrices=False)
    if conjugate:
        q = jnp.conj(q)
    vector = jnp.ndim(c) == 1
    if mode == "right":
        out = (c[None, :] if vector else c) @ q
    else:
        out = q @ (c[:, None] if vector else c)
    if vector:
        out = out.reshape(-1)
    return out, r
