"""ADOPT (Taniguchi et al., 2024): Adam that normalizes by the *previous* second moment,
which converges for any ``b2``."""
from __future__ import annotations

from typing import Callable

from functrans import numpy as jnp
from functrans.optim._adaptive_moments import ScaleByAdamState, zero_moments
from functrans.optim._base import GradientTransformation, GradientTransformationExtraArgs, \
    canonicalize_dtype
from functrans.optim._combining import chain
from functrans.optim._numerics import safe_increment
from functrans.optim._scaling import scale_by_learning_rate
from functrans.optim._tree_casting import tree_cast
from functrans.optim._tree_math import tree_update_moment, tree_update_moment_per_elem_norm
from functrans.tree_util import tree_map

__all__ = ["scale_by_adopt", "adopt"]


def _quarter_power(count):
    return count ** 0.25


def scale_by_adopt(b1=0.9, b2=0.9999, eps=1e-6, mu_dtype=None, *, nesterov: bool = False,
                   use_clipping: bool = True, clip_value_fn: Callable = _quarter_power
                   ) -> GradientTransformation:
    """ADOPT's direction::

        d = clip(g / max(sqrt(v_{t-1}), eps), clip_value_fn(t - 1))
        m = b1 m + (1 - b1) d;   update = m   (b1 m + (1 - b1) d with nesterov)
        v = b2 v + (1 - b2) g^2

    At the first step ``v = g^2`` and ``m = d`` (the first direction is 0, as ``v_0 = 0``
    clips it). The state is a :class:`ScaleByAdamState`.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_adopt()
        >>> state = opt.init(jnp.zeros(1))
        >>> u1, state = opt.update(jnp.array([2.0]), state)
        >>> u2, state = opt.update(jnp.array([2.0]), state)
        >>> u1, u2
        (Array([0.], dtype=float32), Array([0.10000002], dtype=float32))
    """
    mu_dtype = canonicalize_dtype(mu_dtype)

    init = zero_moments(ScaleByAdamState, mu_dtype)

    def update(updates, state, params=None):
        del params
        b2_ = jnp.where(state.count > 0, b2, 0)
        b1_ = jnp.where(state.count > 0, b1, 1)
        nu = tree_update_moment_per_elem_norm(updates, state.nu, b2_, 2)
        if use_clipping:
            clip_value = clip_value_fn(state.count)
            directions = tree_map(lambda g, v: jnp.clip(g / jnp.maximum(jnp.sqrt(v), eps),
                                                        -clip_value, clip_value),
                                  updates, state.nu)
        else:
            directions = tree_map(lambda g, v: g / jnp.maximum(jnp.sqrt(v), eps), updates,
                                  state.nu)
        mu = tree_update_moment(directions, state.mu, b1_, 1)
        out = tree_update_moment(directions, mu, b1_, 1) if nesterov else mu
        return out, ScaleByAdamState(safe_increment(state.count), tree_cast(mu, mu_dtype), nu)

    return GradientTransformation(init, update)


def adopt(learning_rate, b1=0.9, b2=0.9999, eps=1e-6, mu_dtype=None, *, nesterov: bool = False,
          use_clipping: bool = True, clip_value_fn: Callable = _quarter_power
          ) -> GradientTransformationExtraArgs:
    """ADOPT (Taniguchi et al., 2024): :func:`scale_by_adopt` and the learning rate."""
    return chain(scale_by_adopt(b1, b2, eps, mu_dtype, nesterov=nesterov,
                                use_clipping=use_clipping, clip_value_fn=clip_value_fn),
                 scale_by_learning_rate(learning_rate))
