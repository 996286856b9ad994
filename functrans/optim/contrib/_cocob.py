"""COCOB-Backprop (Orabona & Tommasi, 2017): learning-rate-free steps from coin betting."""
from __future__ import annotations

from typing import Any, NamedTuple

from functrans import numpy as jnp
from functrans.optim._adding import add_decayed_weights
from functrans.optim._base import GradientTransformation, GradientTransformationExtraArgs
from functrans.optim._combining import chain
from functrans.optim._scaling import scale_by_learning_rate
from functrans.optim._tree_math import tree_ones_like, tree_scale, tree_zeros_like
from functrans.tree_util import tree_map

__all__ = ["COCOBState", "scale_by_cocob", "cocob"]


class COCOBState(NamedTuple):
    """The state of :func:`scale_by_cocob`: the starting point, ``-sum(g)``, the largest
    ``|g|`` so far, ``sum |g|`` and the betting reward, per element."""
    init_particles: Any
    cumulative_gradients: Any
    scale: Any
    subgradients: Any
    reward: Any


def scale_by_cocob(alpha=100.0, eps=1e-8) -> GradientTransformation:
    """COCOB's step: bet a fraction of the reward on the sign of ``-sum(g)``::

        L = max(L, |g|);  G += |g|;  R = max(R - g (p - p0), 0);  C -= g
        p_new = p0 + C / (L max(G + L, alpha L)) (L + R)

    (the update is ``p_new - p``). ``L`` starts at ``eps``.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_cocob()
        >>> p = jnp.zeros(1)
        >>> opt.update(jnp.array([2.0]), opt.init(p), p)[0]
        Array([-0.01], dtype=float32)
    """
    def init(params):
        zeros = tree_zeros_like(params)
        return COCOBState(params, zeros, tree_scale(eps, tree_ones_like(params)), zeros, zeros)

    def update(updates, state, params=None):
        p0, cumulative, scale, subgradients, reward = state
        scale = tree_map(lambda L, c: jnp.maximum(L, jnp.abs(c)), scale, updates)
        subgradients = tree_map(lambda G, c: G + jnp.abs(c), subgradients, updates)
        reward = tree_map(lambda R, c, p, p0: jnp.maximum(R - c * (p - p0), 0), reward, updates,
                          params, p0)
        cumulative = tree_map(lambda C, c: C - c, cumulative, updates)
        new_updates = tree_map(
            lambda p, p0, C, L, G, R: -p + (p0 + C / (L * jnp.maximum(G + L, alpha * L)) * (L + R)),
            params, p0, cumulative, scale, subgradients, reward)
        return new_updates, COCOBState(p0, cumulative, scale, subgradients, reward)

    return GradientTransformation(init, update)


def cocob(learning_rate=1.0, alpha=100.0, eps=1e-8, weight_decay=0.0, mask=None
          ) -> GradientTransformationExtraArgs:
    """COCOB-Backprop: weight decay, the gradients scaled by ``learning_rate`` (no sign
    flip: 1 is the method as published), then :func:`scale_by_cocob`."""
    return chain(add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate, flip_sign=False),
                 scale_by_cocob(alpha, eps))
