"""Regression losses: squared error, Huber, log-cosh, cosine similarity."""
from __future__ import annotations

import math

from functrans import numpy as jnp
from functrans.optim.losses._inputs import _errors, _floating

__all__ = ["squared_error", "l2_loss", "huber_loss", "log_cosh", "cosine_similarity",
           "cosine_distance"]


def squared_error(predictions, targets=None):
    """``(predictions - targets)^2`` elementwise (targets default to 0).

        >>> import functrans.numpy as jnp
        >>> squared_error(jnp.array([1.0, -2.0]), jnp.array([0.0, 1.0]))
        Array([1., 9.], dtype=float32)
    """
    errors = _errors("squared_error", predictions, targets)
    return errors * errors


def l2_loss(predictions, targets=None):
    """``0.5 * (predictions - targets)^2`` elementwise, whose gradient is the error itself.

        >>> import functrans.numpy as jnp
        >>> l2_loss(jnp.array([2.0]))
        Array([2.], dtype=float32)
    """
    return 0.5 * squared_error(predictions, targets)


def huber_loss(predictions, targets=None, *, delta=1.0):
    """Quadratic near zero, linear beyond ``delta``: ``0.5 e^2`` for ``|e| <= delta``,
    ``delta (|e| - 0.5 delta)`` otherwise (Huber, 1964).

        >>> import functrans.numpy as jnp
        >>> huber_loss(jnp.array([0.5, 3.0]))
        Array([0.125, 2.5  ], dtype=float32)
    """
    errors = jnp.abs(_errors("huber_loss", predictions, targets))
    quadratic = jnp.minimum(errors, delta)
    return 0.5 * quadratic * quadratic + delta * (errors - quadratic)


def log_cosh(predictions, targets=None):
    """``log(cosh(e))`` elementwise, computed as ``logaddexp(e, -e) - log 2`` so large
    errors do not overflow: about ``e^2 / 2`` near 0 and ``|e| - log 2`` far away.

        >>> import functrans.numpy as jnp
        >>> log_cosh(jnp.array([0.0, 100.0]))
        Array([ 0.      , 99.306854], dtype=float32)
    """
    errors = _errors("log_cosh", predictions, targets)
    return jnp.logaddexp(errors, -errors) - jnp.asarray(math.log(2.0), errors.dtype)


def cosine_similarity(predictions, targets, *, epsilon=0.0, axis=-1, where=None):
    """Cosine of the angle between ``predictions`` and ``targets`` along ``axis``; the
    squared norms are clipped below at ``epsilon``. ``where`` masks entries out.

        >>> import functrans.numpy as jnp
        >>> a, b = jnp.array([[1.0, 0.0], [0.0, 1.0]]), jnp.array([[2.0, 0.0], [1.0, 0.0]])
        >>> cosine_similarity(a, b)
        Array([1., 0.], dtype=float32)
    """
    a = _floating("cosine_similarity", predictions)
    b = _floating("cosine_similarity", targets, "targets")
    a_norm = jnp.sqrt(jnp.maximum(jnp.sum(a * a, axis=axis, where=where, keepdims=True), epsilon))
    b_norm = jnp.sqrt(jnp.maximum(jnp.sum(b * b, axis=axis, where=where, keepdims=True), epsilon))
    return jnp.sum((a / a_norm) * (b / b_norm), axis=axis, where=where)


def cosine_distance(predictions, targets, *, epsilon=0.0, axis=-1, where=None):
    """``1 - cosine_similarity(predictions, targets)``.

        >>> import functrans.numpy as jnp
        >>> cosine_distance(jnp.array([1.0, 0.0]), jnp.array([0.0, 3.0]))
        Array(1., dtype=float32)
    """
    return 1.0 - cosine_similarity(predictions, targets, epsilon=epsilon, axis=axis, where=where)
