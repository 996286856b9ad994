"""More ``jax.nn`` functions: the sparse (piecewise quadratic) softplus and sigmoid,
squareplus, mish, ``logmeanexp`` and ``log1mexp``.

Like the other activations, they take arrays or Python numbers and compute integer inputs
in the default float dtype.
"""
from __future__ import annotations

import functrans.numpy as jnp
from functrans.nn._activations import _inexact, logsumexp, softplus

__all__ = ["sparse_plus", "sparse_sigmoid", "squareplus", "mish", "logmeanexp", "log1mexp"]


def sparse_plus(x):
    """A smooth ReLU made of three pieces: 0 for ``x <= -1``, ``(x + 1)**2 / 4`` between -1
    and 1, and ``x`` for ``x >= 1`` (its derivative is :func:`sparse_sigmoid`).

        >>> import functrans.numpy as jnp
        >>> sparse_plus(jnp.array([-2.0, 0.0, 2.0]))
        Array([0.  , 0.25, 2.  ], dtype=float32)
    """
    x = _inexact("sparse_plus", x)
    quadratic = (x + 1) ** 2 / 4
    return jnp.where(x <= -1, jnp.zeros_like(x), jnp.where(x >= 1, x, quadratic))


def sparse_sigmoid(x):
    """The piecewise-linear sigmoid ``clip((x + 1) / 2, 0, 1)``: the derivative of
    :func:`sparse_plus`.

        >>> import functrans.numpy as jnp
        >>> sparse_sigmoid(jnp.array([-2.0, 0.0, 0.5]))
        Array([0.  , 0.5 , 0.75], dtype=float32)
    """
    x = _inexact("sparse_sigmoid", x)
    return 0.5 * jnp.clip(x + 1, 0, 2)


def squareplus(x, b=4):
    """``(x + sqrt(x**2 + b)) / 2``: a softplus-like curve made of algebraic operations only.

        >>> import functrans.numpy as jnp
        >>> squareplus(jnp.array([0.0, 1.5]))
        Array([1., 2.], dtype=float32)
    """
    x = _inexact("squareplus", x)
    return (x + jnp.sqrt(x * x + b)) / 2


def mish(x):
    """Mish, ``x * tanh(softplus(x))``.

        >>> import functrans.numpy as jnp
        >>> mish(jnp.array([0.0, 1.0]))
        Array([0.       , 0.8650984], dtype=float32)
    """
    x = _inexact("mish", x)
    return x * jnp.tanh(softplus(x))


def logmeanexp(x, axis=None, where=None, keepdims: bool = False):
    """``log(mean(exp(x)))`` over ``axis``, computed stably as ``logsumexp(x) - log(n)``
    (``n`` counts only the entries with ``where`` True when a mask is given).

        >>> import functrans.numpy as jnp
        >>> logmeanexp(jnp.array([1000.0, 1000.0]))
        Array(1000., dtype=float32)
    """
    x = _inexact("logmeanexp", x)
    total = logsumexp(x, axis=axis, keepdims=keepdims, where=where)
    if where is None:
        axes = range(x.ndim) if axis is None else (axis if isinstance(axis, (tuple, list))
                                                   else (axis,))
        count = 1
        for a in axes:
            count *= x.shape[int(a) % x.ndim] if x.ndim else 1
        return total - jnp.log(jnp.asarray(count, total.dtype))
    mask = jnp.broadcast_to(jnp.asarray(where, bool), x.shape)
    count = jnp.sum(mask, axis=axis, keepdims=keepdims, dtype=total.dtype)
    return total - jnp.log(count)


def log1mexp(x):
    """``log(1 - exp(-x))`` for ``x >= 0``, accurate at both ends (NaN for ``x < 0``).

    Near 0, ``1 - exp(-x)`` cancels, so it is computed as ``log(-expm1(-x))``; for large
    ``x``, ``exp(-x)`` is tiny, so ``log1p(-exp(-x))`` keeps its digits. The switch point
    ``log(2)`` is where both forms lose the least (Maechler, 2012).

        >>> import functrans.numpy as jnp
        >>> log1mexp(jnp.array([1e-8, 1.0, 50.0]))
        Array([-1.8420681e+01, -4.5867509e-01, -1.9287499e-22], dtype=float32)
    """
    x = _inexact("log1mexp", x)
    log2 = jnp.log(jnp.asarray(2.0, x.dtype))
    small = x < log2
    # the large-x form sees only large x: at x = 0 its derivative is infinite, and a zero
    # cotangent times that infinity would turn the gradient there into NaN
    large_x = jnp.where(small, log2, x)
    return jnp.where(small, jnp.log(-jnp.expm1(-x)), jnp.log1p(-jnp.exp(-large_x)))
