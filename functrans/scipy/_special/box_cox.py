"""The Box-Cox power transforms :func:`boxcox` and :func:`boxcox1p`.

    >>> import functrans.numpy as jnp
    >>> boxcox(jnp.float32(1.0), jnp.float32(2.0))
    Array(0., dtype=float32)
"""
from __future__ import annotations

from functrans import numpy as jnp
from functrans.numpy._promotion import promote_args_inexact

__all__ = ["boxcox", "boxcox1p"]


# =============================================================================================
# Box-Cox transforms
# =============================================================================================

def _boxcox_of_log(log_x, lmbda):
    """``(exp(lmbda log_x) - 1) / lmbda``, and its limit ``log_x`` at ``lmbda == 0``."""
    nonzero = lmbda != 0
    safe_lmbda = jnp.where(nonzero, lmbda, 1.0).astype(lmbda.dtype)
    # expm1 keeps accuracy for small lmbda * log_x, where x**lmbda - 1 would cancel
    return jnp.where(nonzero, jnp.expm1(safe_lmbda * log_x) / safe_lmbda, log_x)


def boxcox(x, lmbda):
    """The Box-Cox transform ``(x**lmbda - 1) / lmbda``, ``log(x)`` for ``lmbda == 0``;
    NaN for ``x < 0``.

        >>> boxcox(jnp.float32(4.0), jnp.float32(0.5))
        Array(2., dtype=float32)
    """
    x, lmbda = promote_args_inexact("boxcox", x, lmbda)
    return _boxcox_of_log(jnp.log(x), lmbda)


def boxcox1p(x, lmbda):
    """The Box-Cox transform of ``1 + x``, accurate for small ``x``; NaN for ``x < -1``.

        >>> boxcox1p(jnp.float32(3.0), jnp.float32(0.5))
        Array(2., dtype=float32)
    """
    x, lmbda = promote_args_inexact("boxcox1p", x, lmbda)
    return _boxcox_of_log(jnp.log1p(x), lmbda)
