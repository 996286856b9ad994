"""Linear algebra for optimizers: norms of pytrees, the dominant eigenpair by power
iteration, inverse p-th roots of matrices (Shampoo's preconditioners), and non-negative
least squares.
"""
from __future__ import annotations

from functrans import lax
from functrans import numpy as jnp
from functrans import random
from functrans.optim._tree_math import tree_norm, tree_scale, tree_sub, tree_vdot

__all__ = ["global_norm", "power_iteration", "matrix_inverse_pth_root", "nnls"]


def global_norm(updates):
    """The L2 norm of all leaves of a pytree taken together (``tree.norm``).

        >>> import functrans.numpy as jnp
        >>> global_norm({"a": jnp.array([3.0]), "b": jnp.array([4.0])})
        Array(5., dtype=float32)
    """
    return tree_norm(updates)


def _normalize_tree(x):
    return tree_scale(1.0 / tree_norm(x), x)


def power_iteration(matrix, *, v0=None, num_iters: int = 100, error_tolerance=1e-6,
                    precision=lax.Precision.HIGHEST, key=None):
    """The dominant eigenvalue and its unit eigenvector of a symmetric ``matrix`` (or of a
    linear map given as a function of a pytree, then with a start ``v0``), by power
    iteration until the residual ``|A v - lambda v| / |lambda|`` is below
    ``error_tolerance`` or ``num_iters`` steps. Without ``v0`` the start is uniform in
    ``[-1, 1]`` drawn with ``key`` (``PRNGKey(0)`` by default).

        >>> import functrans.numpy as jnp
        >>> value, vector = power_iteration(jnp.array([[2.0, 0.0], [0.0, 1.0]]))
        >>> round(float(value), 4), [round(abs(float(x)), 4) for x in vector]
        (2.0, [1.0, 0.0])
    """
    if callable(matrix):
        mvp = matrix
        if v0 is None:
            raise ValueError("v0 must be provided when `matrix` is a callable.")
    else:
        matrix = jnp.asarray(matrix)

        def mvp(v):
            return jnp.matmul(matrix, v, precision=precision)

        if v0 is None:
            key = random.PRNGKey(0) if key is None else key
            v0 = random.uniform(key, shape=matrix.shape[-1:], dtype=matrix.dtype, minval=-1.0,
                                maxval=1.0)
    v0 = _normalize_tree(v0)

    def cond(loop_vars):
        eigvec, z, eig, iteration = loop_vars
        residual_norm = tree_norm(tree_sub(z, tree_scale(eig, eigvec)))
        converged = jnp.abs(residual_norm / eig) < error_tolerance
        return ~converged & (iteration < num_iters)

    def body(loop_vars):
        _, z, _, iteration = loop_vars
        eigvec = _normalize_tree(z)
        z = mvp(eigvec)
        return eigvec, z, tree_vdot(eigvec, z), iteration + 1

    init = (v0, mvp(v0), jnp.asarray(0.0), jnp.asarray(0))
    _, z, eig, _ = lax.while_loop(cond, body, init)
    return eig, _normalize_tree(z)


def matrix_inverse_pth_root(matrix, p: int, num_iters: int = 100, ridge_epsilon=1e-6,
                            error_tolerance=1e-6, precision=lax.Precision.HIGHEST):
    """``(matrix + ridge)^(-1/p)`` of a symmetric positive semi-definite matrix by the
    coupled Newton iteration (Shampoo, Gupta et al., 2018); ``p`` is 1, 2, 4 or 8 and the
    ridge is ``ridge_epsilon`` times the largest eigenvalue. Returns the root and the
    error ``max|M - I|`` of the iteration.

        >>> import functrans.numpy as jnp
        >>> root, error = matrix_inverse_pth_root(jnp.array([[4.0, 0.0], [0.0, 16.0]]), 2,
        ...                                       ridge_epsilon=0.0)
        >>> [round(float(x), 3) for x in jnp.diag(root)]
        [0.5, 0.25]
    """
    matrix = jnp.asarray(matrix)
    size = matrix.shape[0]
    alpha = jnp.asarray(-1.0 / p, jnp.float32)
    identity = jnp.eye(size, dtype=jnp.float32)
    max_ev, _ = power_iteration(matrix, num_iters=100, error_tolerance=1e-6, precision=precision)
    ridge_epsilon = ridge_epsilon * jnp.maximum(max_ev, 1e-16)

    def matmul(a, b):
        return jnp.matmul(a, b, precision=precision)

    def power_1(m):
        return m

    def power_2(m):
        return matmul(m, m)

    def power_4(m):
        return power_2(power_2(m))

    def power_8(m):
        return power_2(power_4(m))

    def mat_power(m):
        exponent = jnp.round(jnp.log2(p))
        return lax.switch(jnp.asarray(exponent, jnp.int32), [power_1, power_2, power_4, power_8], m)

    def cond(state):
        i, _, _, _, error, run_step = state
        return jnp.logical_and(i < num_iters, jnp.logical_and(error > error_tolerance, run_step))

    def body(state):
        i, mat_m, mat_h, _, error, _ = state
        mat_m_i = (1 - alpha) * identity + alpha * mat_m
        new_mat_m = matmul(mat_power(mat_m_i), mat_m)
        new_mat_h = matmul(mat_h, mat_m_i)
        new_error = jnp.max(jnp.abs(new_mat_m - identity))
        # stop when the error grows: the previous iterate is kept as the answer
        return i + 1, new_mat_m, new_mat_h, mat_h, new_error, new_error < error * 1.2

    if size == 1:
        return (matrix + ridge_epsilon) ** alpha, 0
    damped = matrix + ridge_epsilon * identity
    z = (1 + p) / (2 * jnp.linalg.norm(damped))
    mat_m_0 = damped * z
    error_0 = jnp.max(jnp.abs(mat_m_0 - identity))
    mat_h_0 = identity * jnp.power(z, 1.0 / p)
    init = (0, mat_m_0, mat_h_0, mat_h_0, error_0, True)
    _, mat_m, mat_h, old_mat_h, _, converging = lax.while_loop(cond, body, init)
    error = jnp.max(jnp.abs(mat_m - identity))
    converging = jnp.asarray(converging, old_mat_h.dtype)
    root = converging * mat_h + (1 - converging) * old_mat_h
    return jnp.asarray(root, matrix.dtype), error


def _spectral_radius_upper_bound(matrix):
    frobenius = jnp.linalg.matrix_norm(matrix, ord="fro")
    one_norm = jnp.linalg.matrix_norm(matrix, ord=1) if matrix.size != 0 else 0
    return jnp.minimum(frobenius, one_norm)


def nnls(A, b, iters: int, unroll=1, L=None):  # noqa: N803 (the usual names)
    """Non-negative least squares ``argmin_{x >= 0} |A x - b|^2`` by ``iters`` steps of
    accelerated projected gradient descent (FISTA) on the normal equations; ``L`` bounds
    the largest eigenvalue of ``A^T A`` (estimated if None). ``b`` may have a second axis
    of right-hand sides.

        >>> import functrans.numpy as jnp
        >>> A = jnp.array([[1.0, 0.0], [0.0, 1.0]])
        >>> nnls(A, jnp.array([2.0, -1.0]), iters=50)
        Array([2., 0.], dtype=float32)
    """
    A, b = jnp.asarray(A), jnp.asarray(b)
    if A.ndim != 2:
        raise ValueError(f"nnls: A must be a matrix, got shape {A.shape}")
    if b.ndim not in (1, 2) or b.shape[0] != A.shape[0]:
        raise ValueError(f"nnls: b must have shape ({A.shape[0]},) or ({A.shape[0]}, k), "
                         f"got {b.shape}")
    Q = A.mT @ A  # noqa: N806
    q = A.mT @ b
    if L is None:
        L = _spectral_radius_upper_bound(Q)
    L = jnp.where(L == 0, 1, L)

    def step(carry, _):
        x, y, c = carry
        c_next = (1 + jnp.sqrt(1 + 4 * c ** 2)) / 2
        momentum = (c - 1) / c_next
        x_next = jnp.clip(y - (Q @ y - q) / L, 0)
        return (x_next, x_next + momentum * (x_next - x), c_next), None

    x = jnp.zeros(A.shape[-1:] + b.shape[1:], b.dtype)
    (x, _, _), _ = lax.scan(step, (x, x, jnp.asarray(0.0)), length=iters, unroll=unroll)
    return x

