"""Numerically safe helpers: a saturating step counter, and norms with finite gradients at
zero.
"""
from __future__ import annotations

from functrans import numpy as jnp

__all__ = ["safe_increment", "safe_int32_increment", "safe_norm", "safe_root_mean_squares"]


def abs_sq(x):
    """``|x|^2`` elementwise, real for complex ``x``."""
    x = jnp.asarray(x)
    if jnp.iscomplexobj(x):
        return (x.conj() * x).real
    return x * x


def safe_increment(count):
    """``count + 1``, saturating at the largest value of ``count``'s dtype (integer or
    float) instead of wrapping around.

        >>> import functrans.numpy as jnp
        >>> safe_increment(jnp.asarray(1, jnp.int32)), safe_increment(jnp.iinfo(jnp.int32).max)
        (Array(2, dtype=int32), Array(2147483647, dtype=int32))
    """
    count = jnp.asarray(count)
    if jnp.issubdtype(count.dtype, jnp.integer):
        max_value = jnp.iinfo(count.dtype).max
    elif jnp.issubdtype(count.dtype, jnp.floating):
        max_value = jnp.finfo(count.dtype).max
    else:
        raise ValueError(f"Cannot safely increment count with dtype {count.dtype}, valid "
                         "dtypes are subdtypes of \"jnp.integer\" or \"jnp.floating\".")
    max_value = jnp.array(max_value, count.dtype)
    return jnp.where(count < max_value, count + jnp.array(1, count.dtype), max_value)


safe_int32_increment = safe_increment


def safe_norm(x, min_norm, ord=None, axis=None, keepdims=False):  # noqa: A002 (numpy's name)
    """``max(norm(x), min_norm)`` whose gradient is 0, not NaN, where the norm is at most
    ``min_norm`` (there ``x`` is replaced by ones before the norm is differentiated).

        >>> import functrans, functrans.numpy as jnp
        >>> functrans.grad(lambda x: safe_norm(x, 0.0))(jnp.zeros(2))
        Array([0., 0.], dtype=float32)
    """
    x = jnp.asarray(x)
    norm = jnp.linalg.norm(x, ord=ord, axis=axis, keepdims=True)
    x = jnp.where(norm <= min_norm, jnp.ones_like(x), x)
    norm = norm if keepdims else jnp.squeeze(norm, axis=axis)
    masked_norm = jnp.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)
    return jnp.where(norm <= min_norm, min_norm, masked_norm)


def safe_root_mean_squares(x, min_rms):
    """``max(rms(x), min_rms)`` with a finite gradient where the RMS is at most ``min_rms``.

        >>> import functrans.numpy as jnp
        >>> safe_root_mean_squares(jnp.array([3.0, 4.0]), 1.0)
        Array(3.535534, dtype=float32)
    """
    x = jnp.asarray(x)
    rms = jnp.sqrt(jnp.mean(abs_sq(x)))
    x = jnp.where(rms <= min_rms, jnp.ones_like(x), x)
    return jnp.where(rms <= min_rms, min_rms, jnp.sqrt(jnp.mean(abs_sq(x))))
