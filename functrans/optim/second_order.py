"""``optim.second_order``: curvature of a loss ``loss(params, inputs, targets)``: the
Hessian-vector product and the diagonals of the Hessian and of the empirical Fisher
matrix, over the flattened parameters, as optax's ``optax.second_order``.

    >>> import functrans.numpy as jnp
    >>> from functrans.optim import second_order
    >>> loss = lambda p, x, y: jnp.sum((p["w"] * x - y) ** 2)
    >>> second_order.hessian_diag(loss, {"w": jnp.array([1.0, 2.0])}, jnp.array([1.0, 3.0]),
    ...                           jnp.zeros(2))
    Array([ 2., 18.], dtype=float32)
"""
from __future__ import annotations

from typing import Callable

from functrans import _api
from functrans import numpy as jnp
from functrans.flatten_util import ravel_pytree

__all__ = ["hvp", "hessian_diag", "fisher_diag"]


def _ravel(tree):
    return ravel_pytree(tree)[0]


def hvp(loss: Callable, v, params, inputs, targets):
    """The Hessian of ``loss`` in ``params`` times the flat vector ``v`` (a pytree like
    ``params``), by forward-over-reverse differentiation.

        >>> import functrans.numpy as jnp
        >>> loss = lambda p, x, y: jnp.sum(p ** 3)
        >>> hvp(loss, jnp.array([1.0, 0.0]), jnp.array([2.0, 1.0]), None, None)
        Array([12.,  0.], dtype=float32)
    """
    _, unravel = ravel_pytree(params)
    return _api.jvp(_api.grad(lambda p: loss(p, inputs, targets)), [params],
                         [unravel(v)])[1]


def hessian_diag(loss: Callable, params, inputs, targets):
    """The diagonal of the Hessian of ``loss`` in the flattened ``params`` (one
    Hessian-vector product per parameter, vmapped)."""
    basis = jnp.eye(_ravel(params).size)
    return _api.vmap(lambda v: jnp.vdot(v, _ravel(hvp(loss, v, params, inputs, targets))))(
        basis)


def fisher_diag(negative_log_likelihood: Callable, params, inputs, targets):
    """The diagonal of the empirical Fisher matrix: the squared gradient of
    ``negative_log_likelihood`` in the flattened ``params``.

        >>> import functrans.numpy as jnp
        >>> nll = lambda p, x, y: jnp.sum(p * x)
        >>> fisher_diag(nll, jnp.array([1.0, 2.0]), jnp.array([3.0, -1.0]), None)
        Array([9., 1.], dtype=float32)
    """
    return jnp.square(_ravel(_api.grad(negative_log_likelihood)(params, inputs, targets)))
