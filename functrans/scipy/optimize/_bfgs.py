"""BFGS quasi-Newton minimization (Nocedal & Wright, *Numerical Optimization*, Alg. 6.1).

The whole iteration is one ``lax.while_loop``, so ``jit`` stages it once and ``vmap``
solves a batch of problems in lock step (finished members simply stop changing).
"""
from __future__ import annotations

from typing import NamedTuple

from functrans import _api
from functrans import lax
from functrans import numpy as jnp
from functrans.scipy.optimize._line_search import line_search

__all__ = ["minimize_bfgs", "BFGSResults"]


class BFGSResults(NamedTuple):
    """The state of (and finally the result of) a BFGS run.

    ``converged``: the gradient norm fell below ``gtol``; ``failed``: a line search failed;
    ``k``: iterations; ``nfev``/``ngev``/``nhev``: function, gradient and Hessian
    evaluations; ``x_k``, ``f_k``, ``g_k``, ``H_k``: the point, value, gradient and inverse
    Hessian estimate; ``old_old_fval``: the previous value; ``status``: 0 converged,
    1 iteration limit, ``2 + s`` for a line search that failed with status ``s``;
    ``line_search_status``: the last line search's status.
    """
    converged: object
    failed: object
    k: object
    nfev: object
    ngev: object
    nhev: object
    x_k: object
    f_k: object
    g_k: object
    H_k: object
    old_old_fval: object
    status: object
    line_search_status: object


def minimize_bfgs(fun, x0, maxiter=None, norm=jnp.inf, gtol=1e-5, line_search_maxiter=10):
    """Minimize ``fun`` from ``x0`` by BFGS with a strong-Wolfe line search.

    Args:
      fun: a real scalar function of a 1-D array, differentiable with ``grad``.
      x0: the starting point, a 1-D floating-point array.
      maxiter: the most iterations (default ``200 * x0.size``).
      norm: the ``ord`` of the gradient norm tested against ``gtol``.
      gtol: stop when ``norm(grad) < gtol``.
      line_search_maxiter: the most objective evaluations per line search.

        >>> minimize_bfgs(lambda x: jnp.sum((x - 2.0) ** 2), jnp.zeros(2)).x_k
        Array([2., 2.], dtype=float32)
    """
    x0 = jnp.asarray(x0)
    if jnp.ndim(x0) != 1:
        raise ValueError(f"minimize: x0 must be a 1-D array, got shape {jnp.shape(x0)}")
    if not jnp.issubdtype(x0.dtype, jnp.floating):
        raise TypeError(f"minimize: x0 must have a real floating-point dtype (as grad needs), "
                        f"got {x0.dtype}")
    if maxiter is None:
        maxiter = 200 * x0.shape[0]
    value_and_grad = _api.value_and_grad(fun)
    n = x0.shape[0]
    f0, g0 = value_and_grad(x0)
    eye = jnp.eye(n, dtype=x0.dtype)

    state = BFGSResults(
        converged=jnp.linalg.norm(g0, ord=norm) < gtol,
        failed=jnp.array(False), k=jnp.int32(0), nfev=jnp.int32(1), ngev=jnp.int32(1),
        nhev=jnp.int32(0), x_k=x0, f_k=f0, g_k=g0, H_k=eye,
        # SciPy's choice: makes the first line search try a step that would decrease f
        # by about half the gradient norm
        old_old_fval=f0 + jnp.linalg.norm(g0) / 2,
        status=jnp.int32(0), line_search_status=jnp.int32(0),
    )

    def keep_going(s):
        return ~s.converged & ~s.failed & (s.k < maxiter)

    def step(s):
        p = -(s.H_k @ s.g_k)
        search = line_search(fun, s.x_k, p, old_fval=s.f_k, old_old_fval=s.old_old_fval,
                             gfk=s.g_k, maxiter=line_search_maxiter)
        step_vec = search.a_k.astype(x0.dtype) * p
        x_new = s.x_k + step_vec
        g_new = search.g_k
        y = g_new - s.g_k
        # inverse-Hessian update H <- (I - rho s y^T) H (I - rho y s^T) + rho s s^T; skipped
        # when y.s = 0 (rho infinite), which would destroy positive definiteness
        rho = 1.0 / jnp.real(jnp.vdot(y, step_vec))
        left = eye - rho * jnp.outer(step_vec, y)
        H_new = left @ s.H_k @ jnp.swapaxes(left, 0, 1) + rho * jnp.outer(step_vec, step_vec)
        H_new = jnp.where(jnp.isfinite(rho), H_new, s.H_k)
        return BFGSResults(
            converged=jnp.linalg.norm(g_new, ord=norm) < gtol,
            failed=search.failed,
            k=s.k + 1,
            nfev=s.nfev + search.nfev, ngev=s.ngev + search.ngev, nhev=s.nhev,
            x_k=x_new, f_k=search.f_k, g_k=g_new, H_k=H_new,
            old_old_fval=s.f_k,
            status=s.status,
            line_search_status=search.status,
        )

    s = lax.while_loop(keep_going, step, state)
    status = jnp.where(s.converged, 0,
                       jnp.where(s.k >= maxiter, 1,
                                 jnp.where(s.failed, 2 + s.line_search_status, -1)))
    status = status.astype(jnp.int32)
    return s._replace(status=status)
