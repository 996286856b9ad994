"""AdEMAMix (Pagliardini et al., 2024): Adam with a second, slow momentum mixed in."""
from __future__ import annotations

from typing import Any, NamedTuple

from functrans import numpy as jnp
from functrans.optim._adding import add_decayed_weights
from functrans.optim._base import GradientTransformation, GradientTransformationExtraArgs, \
    canonicalize_dtype
from functrans.optim._combining import chain
from functrans.optim._numerics import safe_increment
from functrans.optim._scaling import scale_by_learning_rate
from functrans.optim._tree_math import (tree_add_scale, tree_bias_correction, tree_div,
                                        tree_mul, tree_sub, tree_update_moment,
                                        tree_update_moment_per_elem_norm, tree_zeros_like)
from functrans.tree_util import tree_map

__all__ = ["ScaleByAdemamixState", "scale_by_ademamix", "ademamix",
           "ScaleBySimplifiedAdEMAMixState", "scale_by_simplified_ademamix",
           "simplified_ademamix"]


class ScaleByAdemamixState(NamedTuple):
    """The state of :func:`scale_by_ademamix`."""
    count: Any
    count_m2: Any
    m1: Any
    m2: Any
    nu: Any


def scale_by_ademamix(b1=0.9, b2=0.999, b3=0.9999, alpha=6.0, eps=1e-8, eps_root=0.0,
                      mu_dtype=None) -> GradientTransformation:
    """AdEMAMix's direction: a fast (``b1``, bias-corrected) and a slow (``b3``, not
    corrected) momentum, mixed ``m1_hat + alpha m2`` and divided like Adam. ``b3`` and
    ``alpha`` may be schedules of the step count.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_ademamix(alpha=0.0, eps=0.0)
        >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0]
        Array([0.9999933], dtype=float32)
    """
    mu_dtype = canonicalize_dtype(mu_dtype)

    def init(params):
        zeros = tree_zeros_like(params, dtype=mu_dtype)
        return ScaleByAdemamixState(jnp.zeros([], jnp.int32), jnp.zeros([], jnp.int32), zeros,
                                    zeros, zeros)

    def update(updates, state, params=None):
        del params
        c_b3 = b3(state.count_m2) if callable(b3) else b3
        c_alpha = alpha(state.count_m2) if callable(alpha) else alpha
        m1 = tree_update_moment(updates, state.m1, b1, order=1)
        m2 = tree_update_moment(updates, state.m2, c_b3, order=1)
        nu = tree_update_moment_per_elem_norm(updates, state.nu, b2, order=2)
        count = safe_increment(state.count)
        count_m2 = safe_increment(state.count_m2)
        m1_hat = tree_bias_correction(m1, b1, count)
        nu_hat = tree_bias_correction(nu, b2, count)
        updates = tree_map(lambda a, b, v: (a + c_alpha * b) / (jnp.sqrt(v + eps_root) + eps),
                           m1_hat, m2, nu_hat)
        return updates, ScaleByAdemamixState(count, count_m2, m1, m2, nu)

    return GradientTransformation(init, update)


def ademamix(learning_rate, b1=0.9, b2=0.999, b3=0.9999, alpha=5.0, eps=1e-8, eps_root=0.0,
             mu_dtype=None, weight_decay=0.0, mask=None) -> GradientTransformationExtraArgs:
    """AdEMAMix (Pagliardini et al., 2024): :func:`scale_by_ademamix`, decoupled weight
    decay, the learning rate."""
    return chain(scale_by_ademamix(b1, b2, b3, alpha, eps, eps_root, mu_dtype),
                 add_decayed_weights(weight_decay, mask), scale_by_learning_rate(learning_rate))


class ScaleBySimplifiedAdEMAMixState(NamedTuple):
    """The state of :func:`scale_by_simplified_ademamix`."""
    t: Any
    m: Any
    n: Any


def scale_by_simplified_ademamix(b1=0.99, b2=0.95, alpha=0.0, eps=1e-8, eps_root=0.0
                                 ) -> GradientTransformation:
    """Simplified AdEMAMix's direction (Morwani et al., 2024): an undamped momentum
    ``m = b1 m + g`` plus ``alpha g``, over Adam's bias-corrected second moment.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_simplified_ademamix(eps=0.0)
        >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0]
        Array([1.], dtype=float32)
    """
    def init(params):
        return ScaleBySimplifiedAdEMAMixState(jnp.array(0, jnp.int32), tree_zeros_like(params),
                                              tree_zeros_like(params))

    def update(updates, state, params=None):
        del params
        c_alpha = alpha(state.t) if callable(alpha) else alpha
        g = updates
        m = tree_add_scale(g, b1, state.m)
        square = tree_mul(g, g)
        n = tree_add_scale(square, b2, tree_sub(state.n, square))   # lerp(b2, g^2, n)
        t = safe_increment(state.t)
        n_hat = tree_bias_correction(n, b2, t)
        numerator = tree_add_scale(m, c_alpha, g)
        denominator = tree_map(lambda v: jnp.sqrt(v + eps_root) + eps, n_hat)
        return tree_div(numerator, denominator), ScaleBySimplifiedAdEMAMixState(t, m, n)

    return GradientTransformation(init, update)


def simplified_ademamix(learning_rate, b1=0.99, b2=0.95, alpha=0.0, eps=1e-8, eps_root=0.0,
                        weight_decay=0.0, mask=None) -> GradientTransformationExtraArgs:
    """Simplified AdEMAMix: :func:`scale_by_simplified_ademamix`, decoupled weight decay,
    the learning rate."""
    return chain(scale_by_simplified_ademamix(b1, b2, alpha, eps, eps_root),
                 add_decayed_weights(weight_decay, mask), scale_by_learning_rate(learning_rate))
