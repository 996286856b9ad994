"""Parameter-free step sizes from the distance travelled: DoG (Ivgi et al., 2023) and DoWG
(Khaled et al., 2023)."""
from __future__ import annotations

from typing import Any, NamedTuple

from functrans import numpy as jnp
from functrans.optim._adding import add_decayed_weights
from functrans.optim._base import GradientTransformation, GradientTransformationExtraArgs, \
    identity
from functrans.optim._combining import chain
from functrans.optim._scaling import scale_by_learning_rate
from functrans.optim._tree_casting import tree_dtype
from functrans.optim._tree_math import tree_norm, tree_scale, tree_sub

__all__ = ["DoGState", "scale_by_dog", "dog", "DoWGState", "scale_by_dowg", "dowg"]


class DoGState(NamedTuple):
    """The state of :func:`scale_by_dog`."""
    is_init_step: Any
    init_params: Any
    max_dist: Any
    sum_sq_norm_grads: Any


def scale_by_dog(init_step=("heuristic", 1e-6), eps=1e-8) -> GradientTransformation:
    """DoG's step size ``max_dist / sqrt(sum |g|^2 + eps)``, with ``max_dist`` the largest
    distance from the initial parameters so far. ``init_step`` sets the first step:
    ``("distance", r)`` starts ``max_dist`` at ``r``, ``("heuristic", r)`` at
    ``r (1 + |p_0|)``, ``("learning_rate", lr)`` uses ``lr`` for the first step.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_dog(("distance", 1.0), eps=0.0)
        >>> p = jnp.zeros(2)
        >>> opt.update(jnp.array([3.0, 4.0]), opt.init(p), p)[0]
        Array([0.6, 0.8], dtype=float32)
    """
    kind, value = init_step
    if kind not in ("distance", "heuristic", "learning_rate"):
        raise ValueError(f"Invalid init_step specification for scale_by_dog: "
                         f"init_step_type={kind!r}")

    def init(params):
        dtype = tree_dtype(params, "lowest")
        if kind == "distance":
            r_epsilon = value
        elif kind == "heuristic":
            r_epsilon = value * (1 + tree_norm(params))
        else:
            r_epsilon = 0.0
        return DoGState(jnp.asarray(True), params, jnp.asarray(r_epsilon, dtype=dtype),
                        jnp.asarray(0.0, dtype=dtype))

    def update(updates, state, params=None):
        max_dist = jnp.maximum(state.max_dist, tree_norm(tree_sub(state.init_params, params)))
        sum_sq = state.sum_sq_norm_grads + tree_norm(updates, squared=True)
        learning_rate = max_dist / jnp.sqrt(sum_sq + eps)
        if kind == "learning_rate":
            learning_rate = jnp.where(state.is_init_step, value, learning_rate)
        return tree_scale(learning_rate, updates), DoGState(jnp.asarray(False), state.init_params,
                                                            max_dist, sum_sq)

    return GradientTransformation(init, update)


def dog(learning_rate=1.0, init_step=("heuristic", 1e-6), eps=1e-8, weight_decay=None,
        mask=None) -> GradientTransformationExtraArgs:
    """DoG (Ivgi et al., 2023): optional weight decay, :func:`scale_by_dog`, then
    ``-learning_rate`` (1 is the method as published)."""
    return chain(add_decayed_weights(weight_decay, mask) if weight_decay is not None
                 else identity(),
                 scale_by_dog(init_step, eps), scale_by_learning_rate(learning_rate))


class DoWGState(NamedTuple):
    """The state of :func:`scale_by_dowg`."""
    init_params: Any
    weighted_sq_norm_grads: Any
    estim_sq_dist: Any


def scale_by_dowg(init_estim_sq_dist=None, eps=1e-4) -> GradientTransformation:
    """DoWG's step size ``r^2 / sqrt(sum r_t^2 |g_t|^2)`` with ``r^2`` the largest squared
    distance from the initial parameters so far (at least ``init_estim_sq_dist``,
    default ``eps``).

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_dowg(init_estim_sq_dist=1.0, eps=0.0)
        >>> p = jnp.zeros(2)
        >>> opt.update(jnp.array([3.0, 4.0]), opt.init(p), p)[0]
        Array([0.6, 0.8], dtype=float32)
    """
    def init(params):
        dtype = tree_dtype(params, "lowest")
        start = eps if init_estim_sq_dist is None else init_estim_sq_dist
        return DoWGState(params, jnp.asarray(0.0, dtype=dtype), jnp.asarray(start, dtype=dtype))

    def update(updates, state, params=None):
        sq_dist = tree_norm(tree_sub(state.init_params, params), squared=True)
        estim_sq_dist = jnp.maximum(state.estim_sq_dist, sq_dist)
        weighted = estim_sq_dist * tree_norm(updates, squared=True) + state.weighted_sq_norm_grads
        learning_rate = estim_sq_dist / (jnp.sqrt(weighted) + eps)
        return tree_scale(learning_rate, updates), state._replace(
            estim_sq_dist=estim_sq_dist, weighted_sq_norm_grads=weighted)

    return GradientTransformation(init, update)


def dowg(learning_rate=1.0, init_estim_sq_dist=None, eps=1e-4, weight_decay=None, mask=None
         ) -> GradientTransformationExtraArgs:
    """DoWG (Khaled et al., 2023): optional weight decay, :func:`scale_by_dowg`, then
    ``-learning_rate``."""
    return chain(add_decayed_weights(weight_decay, mask) if weight_decay is not None
                 else identity(),
                 scale_by_dowg(init_estim_sq_dist, eps), scale_by_learning_rate(learning_rate))
