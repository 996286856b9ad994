"""MADGRAD (Defazio & Jelassi, 2021): momentumized, adaptive, dual-averaged gradients."""
from __future__ import annotations

from typing import Any, NamedTuple

from functrans import numpy as jnp
from functrans.optim._adding import add_decayed_weights
from functrans.optim._base import NO_PARAMS_MSG, GradientTransformation, \
    GradientTransformationExtraArgs
from functrans.optim._combining import chain
from functrans.optim._numerics import safe_increment
from functrans.optim._tree_math import tree_zeros_like
from functrans.tree_util import tree_map

__all__ = ["MadgradState", "scale_by_madgrad", "madgrad"]


class MadgradState(NamedTuple):
    """The state of :func:`scale_by_madgrad`: the step count, the weighted sums of ``g^2``
    and ``g``, and the initial parameters."""
    count: Any
    grad_sum_sq: Any
    s: Any
    x0: Any


def scale_by_madgrad(learning_rate, momentum=0.9, eps=1e-6) -> GradientTransformation:
    """MADGRAD's update (the step, already descending).

    Per step::

        lambda = (lr + eps) sqrt(t);   v += lambda g^2;   s += lambda g
        z = x0 - s / (cbrt(v) + eps);   p_new = (1 - momentum) z + momentum p

    For example:

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_madgrad(1.0, momentum=0.0, eps=0.0)
        >>> p = jnp.zeros(1)
        >>> opt.update(jnp.array([8.0]), opt.init(p), p)[0]    # -8 / cbrt(64)
        Array([-2.], dtype=float32)
    """
    def init(params):
        return MadgradState(jnp.zeros([], jnp.int32), tree_zeros_like(params),
                            tree_zeros_like(params), tree_map(lambda x: x, params))

    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        lr = learning_rate(state.count) if callable(learning_rate) else learning_rate
        lamb = (lr + eps) * jnp.sqrt(state.count + 1)
        grad_sum_sq = tree_map(lambda v, g: v + (lamb * g ** 2).astype(g.dtype),
                               state.grad_sum_sq, updates)
        s = tree_map(lambda s_, g: s_ + (lamb * g).astype(g.dtype), state.s, updates)
        z = tree_map(lambda x0, s_, v: x0 - s_ / (jnp.cbrt(v) + eps), state.x0, s, grad_sum_sq)
        new_params = tree_map(lambda z_, p: (1 - momentum) * z_ + momentum * p, z, params)
        out = tree_map(lambda new, old: new - old, new_params, params)
        return out, MadgradState(safe_increment(state.count), grad_sum_sq, s, state.x0)

    return GradientTransformation(init, update)


def madgrad(learning_rate, momentum=0.9, weight_decay=0.0, eps=1e-6
            ) -> GradientTransformationExtraArgs:
    """MADGRAD (Defazio & Jelassi, 2021): weight decay added to the gradient, then
    :func:`scale_by_madgrad`."""
    return chain(add_decayed_weights(weight_decay),
                 scale_by_madgrad(learning_rate=learning_rate, momentum=momentum, eps=eps))
