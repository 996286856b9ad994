"""Scaling updates by numbers that keep no running statistics: a fixed or scheduled step
size (:func:`scale`, :func:`scale_by_schedule`, :func:`scale_by_learning_rate`), the
parameters' norms (:func:`scale_by_param_block_norm`, :func:`scale_by_param_block_rms`,
LARS/LAMB's :func:`scale_by_trust_ratio`), and the updates' own statistics
(:func:`normalize_by_update_norm`, gradient :func:`centralize`).

``g`` in the docstrings is the incoming update (a gradient).
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from functrans import numpy as jnp
from functrans.optim._base import NO_PARAMS_MSG, EmptyState, GradientTransformation, \
    identity, init_empty_state
from functrans.optim._numerics import safe_increment, safe_norm, safe_root_mean_squares
from functrans.optim._tree_math import tree_norm
from functrans.tree_util import tree_map

__all__ = ["ScaleState", "ScaleByScheduleState", "ScaleByTrustRatioState", "scale",
           "scale_by_schedule", "scale_by_learning_rate", "scale_by_param_block_norm",
           "scale_by_param_block_rms", "scale_by_trust_ratio", "normalize_by_update_norm",
           "centralize"]

# optax's names for the (empty) states of scale and scale_by_trust_ratio
ScaleState = EmptyState
ScaleByTrustRatioState = EmptyState


# =============================================================================================
# Fixed and scheduled scales
# =============================================================================================

def scale(step_size) -> GradientTransformation:
    """``step_size * g``.

        >>> import functrans.numpy as jnp
        >>> scale(2.0).update(jnp.ones(1), EmptyState())[0]
        Array([2.], dtype=float32)
    """
    def update(updates, state, params=None):
        del params
        return tree_map(lambda g: step_size * g, updates), state
    return GradientTransformation(init_empty_state, update)


class ScaleByScheduleState(NamedTuple):
    """The state of :func:`scale_by_schedule`: the number of updates done so far."""
    count: Any


def scale_by_schedule(step_size_fn: Callable) -> GradientTransformation:
    """``step_size_fn(count) * g`` with ``count`` the number of updates done so far (from 0).

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_schedule(lambda count: 1.0 / (count + 1))
        >>> opt.update(jnp.ones(1), opt.init(jnp.ones(1)))[0]
        Array([1.], dtype=float32)
    """
    def init(params):
        del params
        return ScaleByScheduleState(jnp.zeros([], jnp.int32))

    def update(updates, state, params=None):
        del params
        step_size = step_size_fn(state.count)
        updates = tree_map(lambda g: jnp.array(step_size, dtype=jnp.asarray(g).dtype) * g,
                           updates)
        return updates, ScaleByScheduleState(safe_increment(state.count))

    return GradientTransformation(init, update)


def scale_by_learning_rate(learning_rate=None, *, flip_sign: bool = True
                           ) -> GradientTransformation:
    """``-learning_rate * g`` (a number, or a schedule of the step count); None is no
    scaling at all (not even the sign flip).

        >>> import functrans.numpy as jnp
        >>> scale_by_learning_rate(0.1).update(jnp.ones(1), EmptyState())[0]
        Array([-0.1], dtype=float32)
    """
    if learning_rate is None:
        return identity()
    sign = -1 if flip_sign else 1
    if callable(learning_rate):
        return scale_by_schedule(lambda count: sign * learning_rate(count))
    return scale(sign * learning_rate)


# =============================================================================================
# Scales from the parameters' norms
# =============================================================================================

def scale_by_param_block_norm(min_scale=1e-3) -> GradientTransformation:
    """Scale each leaf's update by ``max(|p|, min_scale)``, the L2 norm of its parameter.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_param_block_norm()
        >>> opt.update(jnp.ones(2), EmptyState(), jnp.array([3.0, 4.0]))[0]
        Array([5., 5.], dtype=float32)
    """
    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        return tree_map(lambda u, p: u * safe_norm(p, min_scale), updates, params), state
    return GradientTransformation(init_empty_state, update)


def scale_by_param_block_rms(min_scale=1e-3) -> GradientTransformation:
    """Scale each leaf's update by ``max(rms(p), min_scale)``, the root mean square of its
    parameter (Adafactor's relative step size).

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_param_block_rms()
        >>> opt.update(jnp.ones(2), EmptyState(), jnp.array([1.0, -1.0]))[0]
        Array([1., 1.], dtype=float32)
    """
    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        return tree_map(lambda u, p: u * safe_root_mean_squares(p, min_scale), updates,
                        params), state
    return GradientTransformation(init_empty_state, update)


def scale_by_trust_ratio(min_norm=0.0, trust_coefficient=1.0, eps=0.0) -> GradientTransformation:
    """LARS/LAMB's layer-wise trust ratio (You et al.): each leaf's update is scaled by
    ``trust_coefficient * |param| / (|update| + eps)``, or left alone when either norm is 0.
    Norms below ``min_norm`` count as ``min_norm``.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_trust_ratio()
        >>> opt.update(jnp.array([0.3, 0.4]), EmptyState(), jnp.array([6.0, 8.0]))[0]
        Array([6., 8.], dtype=float32)
    """
    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)

        def scaled(u, p):
            param_norm = safe_norm(p, min_norm)
            update_norm = safe_norm(u, min_norm)
            ratio = trust_coefficient * param_norm / (update_norm + eps)
            zero_norm = jnp.logical_or(param_norm == 0.0, update_norm == 0.0)
            safe_ratio = jnp.where(zero_norm, jnp.array(1.0, dtype=jnp.asarray(p).dtype), ratio)
            return u * safe_ratio

        return tree_map(scaled, updates, params), state

    return GradientTransformation(init_empty_state, update)


# =============================================================================================
# Normalizing the updates
# =============================================================================================

def normalize_by_update_norm(scale_factor=1.0, eps=1e-06) -> GradientTransformation:
    """``scale_factor * g / (|g| + eps)`` with ``|g|`` the global norm of all updates.

        >>> import functrans.numpy as jnp
        >>> normalize_by_update_norm(eps=0.0).update(jnp.array([3.0, 4.0]), EmptyState())[0]
        Array([0.6, 0.8], dtype=float32)
    """
    def update(updates, state, params=None):
        del params
        g_norm = (tree_norm(updates) + eps) / scale_factor
        return tree_map(lambda g: g / g_norm, updates), state
    return GradientTransformation(init_empty_state, update)


def centralize() -> GradientTransformation:
    """Gradient centralization (Yong et al., 2020): from every leaf of rank >= 2 subtract
    its mean over all axes but the first; vectors and scalars pass unchanged.

        >>> import functrans.numpy as jnp
        >>> centralize().update(jnp.array([[1.0, 2.0, 3.0], [4.0, 5.0, 9.0]]), EmptyState())[0]
        Array([[-1.,  0.,  1.],
               [-2., -1.,  3.]], dtype=float32)
    """
    def centered(g):
        g = jnp.asarray(g)
        if g.ndim < 2:
            return g
        return g - jnp.mean(g, axis=tuple(range(1, g.ndim)), keepdims=True)

    def update(updates, state, params=None):
        del params
        return tree_map(centered, updates), state
    return GradientTransformation(init_empty_state, update)
