"""Step sizes the run sets for itself instead of a schedule: Polyak's, from the gap between
the loss and its minimum (:func:`scale_by_polyak`), and DoG's, from the distance travelled
from the initial parameters over the gradients' norms
(:func:`scale_by_distance_over_gradients`).

Both return the step as a positive multiple of the gradient; chain a negative scale to
descend.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from functrans import numpy as jnp
from functrans.optim._base import EmptyState  # noqa: F401 (the docstring examples use it)
from functrans.optim._base import NO_PARAMS_MSG, GradientTransformation, \
    GradientTransformationExtraArgs, init_empty_state
from functrans.optim._tree_casting import tree_cast
from functrans.optim._tree_math import tree_norm, tree_scale
from functrans.tree_util import tree_map

__all__ = ["scale_by_polyak", "ScaleByDistanceOverGradientsState",
           "scale_by_distance_over_gradients"]


def scale_by_polyak(f_min=0.0, max_learning_rate=1.0, eps=0.0, variant: str = "sps"
                    ) -> GradientTransformationExtraArgs:
    """Polyak's step size (Loizou et al., 2021): ``g * min((value - f_min) / (|g|^2 + eps),
    max_learning_rate)``, with the loss ``value`` passed to ``update``. ``variant="sps+"``
    clips a negative gap ``value - f_min`` to 0. (Chain with a negative scale to descend.)

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_polyak()
        >>> opt.update(jnp.array([2.0]), EmptyState(), value=jnp.array(1.0))[0]
        Array([0.5], dtype=float32)
    """
    if variant not in ("sps", "sps+"):
        raise ValueError(f"Invalid argument value for Polyak SGD: variant={variant!r}")

    def update(updates, state, params=None, *, value, **extra_args):
        del params, extra_args
        grad_sq_norm = tree_norm(updates, squared=True)
        gap = jnp.array(value - f_min).astype(grad_sq_norm.dtype)
        if variant == "sps+":
            gap = jnp.maximum(gap, 0.0)
        step = jnp.where(grad_sq_norm + eps <= jnp.finfo(float).eps, jnp.array(0.0),
                         jnp.minimum(gap / (grad_sq_norm + eps), max_learning_rate))
        return tree_scale(step, updates), state

    return GradientTransformationExtraArgs(init_empty_state, update)


class ScaleByDistanceOverGradientsState(NamedTuple):
    """The state of :func:`scale_by_distance_over_gradients`."""
    max_dist: Any
    grad_sum_of_squares: Any
    init_params: Any


def scale_by_distance_over_gradients(reps_rel=1e-6, eps=1e-8, param_dtype=jnp.float32,
                                     global_scale=1.0) -> GradientTransformation:
    """Distance over Gradients, layer-wise (DoG, Ivgi et al., 2023): per leaf the step
    size is ``global_scale * d / sqrt(G + eps)`` with ``d`` the largest distance from the
    initial parameters so far (at least ``reps_rel * (1 + |p_0|)``) and ``G`` the running
    sum of squared gradient norms. (Chain with a negative scale to descend.)

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_distance_over_gradients(reps_rel=0.5, eps=0.0)
        >>> p = jnp.array([3.0, 4.0])
        >>> opt.update(jnp.array([0.0, 2.0]), opt.init(p), p)[0]   # 3 / 2 * g
        Array([0., 3.], dtype=float32)
    """
    def l2(x, y=0.0):
        return jnp.sqrt(jnp.sum(jnp.square(x - y)))

    def init(params):
        return ScaleByDistanceOverGradientsState(
            tree_map(lambda x: reps_rel * (1 + l2(x)), params),
            tree_map(lambda x: jnp.zeros(1), params),
            tree_cast(params, param_dtype))

    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        max_dist = tree_map(lambda d, x, y: jnp.maximum(d, l2(x, y)), state.max_dist, params,
                            state.init_params)
        g_sos = tree_map(lambda s, g: s + jnp.sum(jnp.square(g)), state.grad_sum_of_squares,
                         updates)
        updates = tree_map(lambda g, d, s: global_scale * (d / jnp.sqrt(s + eps)) * g,
                           updates, max_dist, g_sos)
        return updates, ScaleByDistanceOverGradientsState(max_dist, g_sos, state.init_params)

    return GradientTransformation(init, update)
