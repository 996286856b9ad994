"""``logsumexp``, the stable ``log(sum(b * exp(a)))`` reduction, and the masked reductions it
shares with the softmax family.

It lives in the numpy layer (as JAX keeps it below both ``jax.nn`` and ``jax.scipy``):
``jnp.logaddexp.reduce`` is built on it, and ``functrans.nn`` and ``functrans.scipy.special``
export it.
"""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans.core import get_aval
from functrans.numpy._promotion import broadcast_to_shape, promote_args_inexact, to_array
from functrans.numpy._ufuncs import isfinite
from functrans.primitives import elementwise as ew
from functrans.primitives import reductions, structural


def full_like(x, value):
    """``value`` with ``x``'s shape and dtype; a constant takes ``x``'s weak type too, so
    ``relu(1.0)`` stays weakly typed, as in JAX."""
    aval = get_aval(x)
    return structural.full(aval.shape, value, aval.dtype, weak_type=aval.weak_type)


def reduced_axes(axis, ndim: int) -> tuple:
    """``axis`` (None, an int or a sequence) as sorted non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (axis,)
    return tuple(sorted(int(a) % ndim for a in axis)) if ndim else ()


def keep(reduced, shape, axes):
    """Broadcast a reduction back to ``shape`` (as if computed with keepdims)."""
    kept = tuple(i for i in range(len(shape)) if i not in axes)
    return structural.broadcast_in_dim(reduced, shape, kept)


def keep_dims(x, shape, axes):
    """A reduction with its reduced axes put back as length-one axes."""
    return structural.reshape(x, tuple(1 if i in axes else s for i, s in enumerate(shape)))


def mask_of(where, shape):
    """The boolean mask ``where`` (None for none) broadcast to ``shape``."""
    if where is None:
        return None
    mask = to_array(where)
    if get_aval(mask).dtype != _dtypes.bool_:
        mask = ew.ne(mask, full_like(mask, 0))
    return broadcast_to_shape(mask, shape)


def masked_max(x, axes, mask):
    if mask is not None:
        x = ew.select(mask, x, full_like(x, -np.inf))
    return reductions.reduce_max(x, axes)


def masked_sum(x, axes, mask):
    if mask is not None:
        x = ew.select(mask, x, full_like(x, 0))
    return reductions.reduce_sum(x, axes)


def logsumexp(a, axis=None, b=None, keepdims: bool = False, return_sign: bool = False,
              where=None):
    """``log(sum(b * exp(a)))`` over ``axis``, stable for large ``a``.

    With ``return_sign=True`` returns ``(log|s|, sign(s))`` so negative weights ``b`` work;
    otherwise a negative sum gives NaN.

        >>> import functrans.numpy as jnp
        >>> logsumexp(jnp.array([1000.0, 1000.0]))
        Array(1000.6932, dtype=float32)
    """
    if b is None:
        (a,) = promote_args_inexact("logsumexp", a)
    else:
        a, b = promote_args_inexact("logsumexp", a, b)
    shape = get_aval(a).shape
    axes = reduced_axes(axis, len(shape))
    mask = mask_of(where, shape)
    peak = masked_max(a, axes, mask)
    # an all -inf (or empty) slice would give inf - inf: shift by 0 there
    peak = ew.stop_gradient(ew.select(isfinite(peak), peak, full_like(peak, 0)))
    terms = ew.exp(ew.sub(a, keep(peak, shape, axes)))
    if b is not None:
        terms = ew.mul(terms, b)
    total = masked_sum(terms, axes, mask)
    sign = ew.sign(total)
    out = ew.add(ew.log(ew.abs(total)), peak)
    if keepdims:
        out = keep_dims(out, shape, axes)
        sign = keep_dims(sign, shape, axes)
    if return_sign:
        return out, sign
    if b is not None:
        out = ew.select(ew.lt(sign, full_like(sign, 0)), full_like(out, np.nan), out)
    return out
