"""``functrans.scipy.cluster.vq``: vector quantization (as ``jax.scipy.cluster.vq``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.cluster.vq import vq
    >>> vq(jnp.array([[0.0, 0.0], [3.0, 3.0]]), jnp.array([[1.0, 1.0], [3.0, 4.0]]))[0]
    Array([0, 1], dtype=int32)
"""
from __future__ import annotations

from functrans import numpy as jnp
from functrans.core import get_aval
from functrans.numpy._promotion import promote_dtypes_inexact

__all__ = ["vq"]


def vq(obs, code_book, check_finite: bool = True):
    """Assign each observation to its nearest code in ``code_book``.

    Args:
      obs: observations, shape ``(N, D)`` or ``(N,)`` (one feature each).
      code_book: codes, shape ``(K, D)`` or ``(K,)``; the same number of features as ``obs``.
      check_finite: accepted for SciPy compatibility and ignored (nothing is checked at
        run time).

    Returns:
      ``(code, dist)``: for every observation the index of the nearest code (int32) and the
      Euclidean distance to it.

    Example::

        >>> code, dist = vq(jnp.array([0.0, 5.0]), jnp.array([1.0, 4.0]))
        >>> dist
        Array([1., 1.], dtype=float32)
    """
    del check_finite
    obs, code_book = promote_dtypes_inexact(obs, code_book)
    obs_shape, book_shape = get_aval(obs).shape, get_aval(code_book).shape
    if len(obs_shape) != len(book_shape) or len(obs_shape) not in (1, 2) or \
            obs_shape[1:] != book_shape[1:]:
        raise ValueError(f"vq: obs and code_book must both be 1-D or both 2-D with the same "
                         f"number of features, got shapes {obs_shape} and {book_shape}")
    if len(obs_shape) == 1:
        obs, code_book = obs[:, None], code_book[:, None]
    squared = jnp.sum(jnp.abs(obs[:, None, :] - code_book[None, :, :]) ** 2, axis=-1)
    code = jnp.argmin(squared, axis=1).astype(jnp.int32)
    dist = jnp.sqrt(jnp.take_along_axis(squared, code[:, None], axis=1)[:, 0])
    return code, dist
