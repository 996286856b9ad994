"""AdaBelief with asynchronous centering (ACProp, Zhuang et al., 2021)."""
from __future__ import annotations

from functrans import numpy as jnp
from functrans.optim._adaptive_moments import ScaleByBeliefState, zero_moments
from functrans.optim._adding import add_decayed_weights
from functrans.optim._base import GradientTransformation, GradientTransformationExtraArgs
from functrans.optim._combining import chain
from functrans.optim._numerics import safe_increment
from functrans.optim._scaling import scale_by_learning_rate
from functrans.optim._tree_math import (tree_bias_correction, tree_update_moment,
                                        tree_update_moment_per_elem_norm)
from functrans.tree_util import tree_map

__all__ = ["scale_by_acprop", "acprop"]


def scale_by_acprop(b1=0.9, b2=0.999, eps=1e-16, eps_root=1e-16) -> GradientTransformation:
    """ACProp's direction: the gradient (not its average) divided by the root of the
    *previous* second moment of the prediction error ``g - m`` (so numerator and
    denominator are independent); 1 at the first step::

        update = g / (sqrt(s_{t-1} / (1 - b2^(t-1))) + eps)
        s_t = b2 s_{t-1} + (1 - b2) (g - m_{t-1})^2 + eps_root

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_acprop()
        >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0]
        Array([2.], dtype=float32)
    """
    init = zero_moments(ScaleByBeliefState)

    def update(updates, state, params=None):
        del params
        mu = tree_update_moment(updates, state.mu, b1, 1)
        errors = tree_map(lambda g, m: g - m, updates, state.mu)
        nu = tree_map(lambda v: v + eps_root,
                      tree_update_moment_per_elem_norm(errors, state.nu, b2, 2))
        count = safe_increment(state.count)
        initial = state.count == 0
        t = jnp.where(initial, count, state.count)
        nu_hat = tree_map(lambda x: jnp.where(initial, 1, x),
                          tree_bias_correction(state.nu, b2, t))
        updates = tree_map(lambda g, v: g / (jnp.sqrt(v) + eps), updates, nu_hat)
        return updates, ScaleByBeliefState(count, mu, nu)

    return GradientTransformation(init, update)


def acprop(learning_rate, b1=0.9, b2=0.999, eps=1e-16, eps_root=1e-16, weight_decay=0.0,
           mask=None) -> GradientTransformationExtraArgs:
    """ACProp (Zhuang et al., 2021): :func:`scale_by_acprop`, decoupled weight decay, the
    learning rate.

        >>> import functrans.numpy as jnp
        >>> opt = acprop(0.1)
        >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)), jnp.zeros(1))[0]
        Array([-0.2], dtype=float32)
    """
    return chain(scale_by_acprop(b1, b2, eps, eps_root), add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))
