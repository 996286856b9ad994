"""Directions from signs: signSGD (:func:`scale_by_sign`), Lion (:func:`scale_by_lion`,
the sign of an interpolated momentum) and Rprop (:func:`scale_by_rprop`, per-element step
sizes that grow while the gradient's sign holds and shrink when it flips).

``g`` in the docstrings is the incoming update (a gradient).
"""
from __future__ import annotations

from typing import Any, NamedTuple

from functrans import numpy as jnp
from functrans.optim._base import EmptyState  # noqa: F401 (the docstring examples use it)
from functrans.optim._base import GradientTransformation, canonicalize_dtype, init_empty_state
from functrans.optim._numerics import safe_increment
from functrans.optim._tree_casting import tree_cast
from functrans.optim._tree_math import tree_full_like, tree_update_moment, tree_zeros_like
from functrans.tree_util import tree_map

__all__ = ["scale_by_sign", "ScaleByLionState", "scale_by_lion", "ScaleByRpropState",
           "scale_by_rprop"]


def scale_by_sign() -> GradientTransformation:
    """``sign(g)`` (signSGD, Bernstein et al., 2018).

        >>> import functrans.numpy as jnp
        >>> scale_by_sign().update(jnp.array([-3.0, 0.0, 2.0]), EmptyState())[0]
        Array([-1.,  0.,  1.], dtype=float32)
    """
    def update(updates, state, params=None):
        del params
        return tree_map(jnp.sign, updates), state
    return GradientTransformation(init_empty_state, update)


class ScaleByLionState(NamedTuple):
    """The state of :func:`scale_by_lion`: the step count and the momentum."""
    count: Any
    mu: Any


def scale_by_lion(b1=0.9, b2=0.99, mu_dtype=None, *, mode: str = "hard",
                  smooth_beta=1.0) -> GradientTransformation:
    """Lion's direction (Chen et al., 2023)::

        x = b1 m + (1 - b1) g;   update = sign(x);   m = b2 m + (1 - b2) g

    ``mode="smooth"`` uses ``tanh(smooth_beta * x)``, ``mode="refined"`` keeps ``x`` where
    ``|x| < 1`` and its sign elsewhere.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_lion()
        >>> opt.update(jnp.array([-0.5, 2.0]), opt.init(jnp.zeros(2)))[0]
        Array([-1.,  1.], dtype=float32)
    """
    if mode not in ("hard", "smooth", "refined"):
        raise ValueError(f"Unknown lion mode: {mode}. It needs to be one of "
                         "[\"hard\", \"smooth\", \"refined\"].")
    mu_dtype = canonicalize_dtype(mu_dtype)

    def direction(g, m):
        x = (1.0 - b1) * g + b1 * m
        if mode == "hard":
            return jnp.sign(x)
        if mode == "smooth":
            return jnp.tanh(smooth_beta * x)
        return jnp.where(jnp.abs(x) < 1.0, x, jnp.sign(x))

    def init(params):
        return ScaleByLionState(jnp.zeros([], jnp.int32), tree_zeros_like(params, dtype=mu_dtype))

    def update(updates, state, params=None):
        del params
        directions = tree_map(direction, updates, state.mu)
        mu = tree_cast(tree_update_moment(updates, state.mu, b2, 1), mu_dtype)
        return directions, ScaleByLionState(safe_increment(state.count), mu)

    return GradientTransformation(init, update)


class ScaleByRpropState(NamedTuple):
    """The state of :func:`scale_by_rprop`: per-element step sizes and the last update."""
    step_sizes: Any
    prev_updates: Any


def scale_by_rprop(learning_rate, eta_minus=0.5, eta_plus=1.2, min_step_size=1e-6,
                   max_step_size=50.0) -> GradientTransformation:
    """Rprop's direction (Riedmiller & Braun, 1993): each element moves by its own step
    size in the direction of its gradient's sign. The step size grows by ``eta_plus``
    while the sign holds and shrinks by ``eta_minus`` when it flips (clipped to
    ``[min_step_size, max_step_size]``); after a flip that element pauses for one step.
    Step sizes start at ``learning_rate``. (Chain with ``scale(-1)`` to descend.)

    As in optax 0.2.8, the direction emitted at step ``t`` is the one computed at step
    ``t - 1`` (kept in ``prev_updates``), so the first update is zero.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_rprop(0.1)
        >>> state = opt.init(jnp.zeros(2))
        >>> u1, state = opt.update(jnp.array([-3.0, 2.0]), state)
        >>> u2, state = opt.update(jnp.array([-1.0, 2.0]), state)
        >>> u1, u2
        (Array([0., 0.], dtype=float32), Array([-0.1,  0.1], dtype=float32))
    """
    def init(params):
        return ScaleByRpropState(tree_full_like(params, learning_rate), tree_zeros_like(params))

    def update(updates, state, params=None):
        del params
        agreement = tree_map(lambda g, prev: g * prev, updates, state.prev_updates)
        step_sizes = tree_map(
            lambda s, size: jnp.where(s == 0, size, jnp.clip(
                size * jnp.where(s > 0, eta_plus, eta_minus), min_step_size, max_step_size)),
            agreement, state.step_sizes)
        prev_updates = tree_map(
            lambda s, g, size: jnp.where(s < 0, jnp.zeros_like(g), size * jnp.sign(g)),
            agreement, updates, step_sizes)
        updates = tree_map(lambda s, prev: jnp.where(s < 0, jnp.zeros_like(prev), prev),
                           agreement, state.prev_updates)
        return updates, ScaleByRpropState(step_sizes, prev_updates)

    return GradientTransformation(init, update)
