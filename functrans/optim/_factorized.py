"""Second moments kept per axis rather than per element, so a matrix costs its rows plus its
columns instead of their product: Adafactor's factored RMS (:func:`scale_by_factored_rms`,
row and column statistics) and SM3 (:func:`scale_by_sm3`, one cover vector per axis)."""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import numpy as np

from functrans import lax
from functrans import numpy as jnp
from functrans.optim._base import NO_PARAMS_MSG, GradientTransformation
from functrans.optim._numerics import abs_sq, safe_increment
from functrans.optim._tree_math import tree_update_moment, tree_zeros_like
from functrans.tree_util import tree_map

__all__ = ["FactoredState", "scale_by_factored_rms", "ScaleBySM3State", "scale_by_sm3"]


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


class ScaleBySM3State(NamedTuple):
    """The state of :func:`scale_by_sm3`: per leaf, one accumulator vector per axis, and
    the momentum."""
    mu: Any
    nu: Any


def scale_by_sm3(b1=0.9, b2=1.0, eps=1e-8) -> GradientTransformation:
    """SM3's direction (Anil et al., 2019): Adagrad whose accumulator is covered by one
    vector per axis (memory ``sum(shape)`` instead of ``prod(shape)``)::

        a = c g^2 + b2 * min_i(mu_i broadcast)    (c = 1 if b2 == 1 else 1 - b2)
        mu_i = max of a over all axes but i;   u = g / sqrt(a + eps) (0 where a = 0)
        update = nu = b1 nu + (1 - b1) u

    For a 1-D leaf ``mu`` is the full accumulator. ``mu`` holds a list of vectors per leaf.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_sm3(b1=0.0, eps=0.0)
        >>> opt.update(jnp.array([-2.0, 0.0]), opt.init(jnp.zeros(2)))[0]
        Array([-1.,  0.], dtype=float32)
    """
    def covers(p):
        p = jnp.asarray(p)
        if p.ndim == 0:
            raise NotImplementedError("scale_by_sm3: 0-d parameters have no axis to cover "
                                      "(reshape them to shape (1,))")
        if jnp.iscomplexobj(p):
            raise ValueError("scale_by_sm3 does not support complex parameters")
        return [jnp.zeros((size,), p.dtype) for size in p.shape]

    def init(params):
        return ScaleBySM3State(tree_map(covers, params), tree_zeros_like(params))

    def accumulate(g, vectors):
        # the paper's plain sum when b2 == 1, an exponential average otherwise
        c = 1.0 - b2 if b2 != 1.0 else 1.0
        if g.ndim < 2:
            return c * g ** 2 + b2 * vectors[0]
        expanded = [jnp.reshape(v, [1] * i + [g.shape[i]] + [1] * (g.ndim - i - 1))
                    for i, v in enumerate(vectors)]
        return c * g ** 2 + b2 * functools.reduce(jnp.minimum, expanded)

    def new_covers(a):
        if a.ndim < 2:
            return [a]
        return [jnp.max(a, axis=[j for j in range(a.ndim) if j != i]) for i in range(a.ndim)]

    def update(updates, state, params=None):
        del params
        # state.mu extends the updates' structure by a list per leaf; tree_map hands it whole
        accums = tree_map(accumulate, updates, state.mu)
        inverse = tree_map(lambda t: jnp.where(t > 0, lax.rsqrt(t + eps), 0.0), accums)
        directions = tree_map(lambda g, a: g * a, updates, inverse)
        nu = tree_update_moment(directions, state.nu, b1, 1)
        return nu, ScaleBySM3State(tree_map(new_covers, accums), nu)

    return GradientTransformation(init, update)
