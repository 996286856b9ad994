"""``functrans.scipy.optimize``: unconstrained minimization (as ``jax.scipy.optimize``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.optimize import minimize
    >>> minimize(lambda x: jnp.sum((x - 1.0) ** 2), jnp.zeros(3), method="BFGS").x
    Array([1., 1., 1.], dtype=float32)

``line_search`` (a strong-Wolfe line search, the one BFGS uses) is importable from here too;
JAX keeps it private.
"""
from functrans.scipy.optimize._line_search import line_search  # noqa: F401
from functrans.scipy.optimize._minimize import OptimizeResults, minimize

__all__ = ["minimize", "OptimizeResults"]
