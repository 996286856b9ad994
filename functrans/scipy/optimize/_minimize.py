"""``minimize``: SciPy's entry point to unconstrained minimization (as
``jax.scipy.optimize.minimize``)."""
from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple

from functrans.scipy.optimize._bfgs import minimize_bfgs

__all__ = ["minimize", "OptimizeResults"]


class OptimizeResults(NamedTuple):
    """The result of :func:`minimize`.

    ``x``: the solution; ``success``: whether it converged; ``status``: 0 converged,
    1 iteration limit reached, 3 the line search's zoom failed, 4 a saddle point (no descent
    direction), 5 the line search's iteration limit reached, -1 undefined; ``fun``,
    ``jac``: the objective and its gradient at ``x``; ``hess_inv``: the final inverse
    Hessian estimate; ``nfev``, ``njev``: objective and gradient evaluations; ``nit``:
    iterations.
    """
    x: Any
    success: Any
    status: Any
    fun: Any
    jac: Any
    hess_inv: Any
    nfev: Any
    njev: Any
    nit: Any


def minimize(fun: Callable, x0, args: tuple = (), *, method: str, tol: float | None = None,
             options: Mapping[str, Any] | None = None) -> OptimizeResults:
    """Minimize a scalar function of a 1-D array, with SciPy's signature.

    Gradients come from ``grad``, so ``fun`` must be differentiable. The only ``method`` is
    ``"BFGS"`` (any case). ``options`` are passed to the solver: ``maxiter`` (default
    ``200 * x0.size``), ``norm`` (default ``inf``), ``gtol`` (default ``1e-5``) and
    ``line_search_maxiter`` (default 10). ``tol``, when given and ``gtol`` is not, is
    used as ``gtol``, as SciPy's BFGS does. The iteration is a ``lax.while_loop``, so
    ``minimize`` works under ``jit`` and ``vmap``. Results can differ slightly from
    SciPy's, whose line search differs in details.

        >>> res = minimize(lambda x, c: jnp.sum((x - c) ** 2), jnp.zeros(2), (3.0,),
        ...                method="BFGS")
        >>> res.x
        Array([3., 3.], dtype=float32)
    """
    if not isinstance(args, tuple):
        raise TypeError(f"minimize: args must be a tuple, got {args!r}")
    options = dict(options or {})
    if tol is not None:
        options.setdefault("gtol", tol)

    def fun_with_args(x):
        return fun(x, *args)

    if method.lower() == "bfgs":
        r = minimize_bfgs(fun_with_args, x0, **options)
        return OptimizeResults(x=r.x_k, success=r.converged & ~r.failed, status=r.status,
                               fun=r.f_k, jac=r.g_k, hess_inv=r.H_k, nfev=r.nfev,
                               njev=r.ngev, nit=r.k)
    raise ValueError(f"minimize: method {method!r} is not recognized; the supported "
                     f"method is 'BFGS'")
