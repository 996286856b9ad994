"""Adafactor's rescaling: a running RMS of the gradient whose second moment is factored
into row and column statistics for matrices."""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from functrans import numpy as jnp
from functrans.optim._base import NO_PARAMS_MSG, GradientTransformation
from functrans.optim._numerics import abs_sq, safe_increment
from functrans.tree_util import tree_map

__all__ = ["FactoredState", "scale_by_factored_rms"]


class FactoredState(NamedTuple):
    """The state of :func:`scale_by_factored_rms`: per leaf the row and column statistics
    (factored leaves) or the full second moment (others); unused ones are zeros of shape
    ``(1,)``."""
    count: Any
    v_row: Any
    v_col: Any
    v: Any


def _decay_rate_pow(i, exponent=0.8):
    """Adafactor's second-moment decay ``1 - (i + 1)^(-exponent)`` (0 at step 0)."""
    t = jnp.array(i + 1, jnp.float32)
    return 1.0 - t ** (-exponent)


def _factored_dims(shape, factored: bool, min_dim_size_to_factor: int):
    """The two largest axes ``(d1, d0)`` (``d0`` the largest) when the second moment is
    factored over them, else None: only for >= 2-D leaves whose second-largest axis has at
    least ``min_dim_size_to_factor`` entries."""
    if not factored or len(shape) < 2:
        return None
    order = np.argsort(shape, kind="stable")
    if shape[order[-2]] < min_dim_size_to_factor:
        return None
    return int(order[-2]), int(order[-1])


def scale_by_factored_rms(factored: bool = True, decay_rate=0.8, step_offset=0,
                          min_dim_size_to_factor: int = 128, epsilon=1e-30,
                          decay_rate_fn: Callable = _decay_rate_pow) -> GradientTransformation:
    """Adafactor's rescaling (Shazeer & Stern, 2018): divide by a running RMS of the
    gradient whose second moment is, for >= 2-D leaves, factored into a row and a column
    statistic over the two largest axes ``d1, d0``::

        b_t = decay_rate_fn(t - 1 - step_offset, decay_rate)    # 1 - t^(-0.8) by default
        R = b_t R + (1 - b_t) mean(g^2 + epsilon, axis=d0)
        C = b_t C + (1 - b_t) mean(g^2 + epsilon, axis=d1)
        update = g / sqrt(R C / mean(R, axis=d1))              (factored)
        V = b_t V + (1 - b_t) (g^2 + epsilon);  update = g / sqrt(V)   (otherwise)

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_factored_rms()
        >>> opt.update(jnp.array([2.0, -3.0]), opt.init(jnp.zeros(2)), jnp.zeros(2))[0]
        Array([ 1., -1.], dtype=float32)
    """
    def dims_of(p):
        return _factored_dims(jnp.shape(p), factored, min_dim_size_to_factor)

    def placeholder(p):
        return jnp.zeros((1,), jnp.asarray(p).dtype)

    def init(params):
        def v_row(p):
            dims = dims_of(p)
            return placeholder(p) if dims is None else jnp.zeros(
                tuple(s for i, s in enumerate(jnp.shape(p)) if i != dims[1]), p.dtype)

        def v_col(p):
            dims = dims_of(p)
            return placeholder(p) if dims is None else jnp.zeros(
                tuple(s for i, s in enumerate(jnp.shape(p)) if i != dims[0]), p.dtype)

        def v(p):
            return jnp.zeros_like(p) if dims_of(p) is None else placeholder(p)

        return FactoredState(jnp.zeros([], jnp.int32), tree_map(v_row, params),
                             tree_map(v_col, params), tree_map(v, params))

    def one_leaf(g, row, col, v, p, decay):
        dtype = jnp.asarray(p).dtype
        squares = abs_sq(g) + epsilon
        dims = dims_of(p)
        if dims is None:
            new_v = (decay * v + (1.0 - decay) * squares).astype(dtype)
            return g * new_v ** (-0.5), placeholder(p), placeholder(p), new_v
        d1, d0 = dims
        new_row = (decay * row + (1.0 - decay) * jnp.mean(squares, axis=d0)).astype(dtype)
        new_col = (decay * col + (1.0 - decay) * jnp.mean(squares, axis=d1)).astype(dtype)
        row_axis = d1 - 1 if d1 > d0 else d1   # d1's position once d0 is dropped
        row_factor = (new_row / jnp.mean(new_row, axis=row_axis, keepdims=True)) ** (-0.5)
        col_factor = new_col ** (-0.5)
        out = g * jnp.expand_dims(row_factor, d0) * jnp.expand_dims(col_factor, d1)
        return out, new_row, new_col, placeholder(p)

    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        decay = decay_rate_fn(state.count - step_offset, decay_rate)
        results = tree_map(lambda *leaves: one_leaf(*leaves, decay), updates, state.v_row,
                           state.v_col, state.v, params)
        # each result is a 4-tuple; pull the four trees apart along the updates' structure
        pick = [tree_map(lambda _, r: r[i], updates, results) for i in range(4)]
        return pick[0], FactoredState(safe_increment(state.count), pick[1], pick[2], pick[3])

    return GradientTransformation(init, update)
