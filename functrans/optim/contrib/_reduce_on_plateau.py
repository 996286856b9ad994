"""Reduce the learning rate when the loss stops improving."""
from __future__ import annotations

from typing import Any, NamedTuple

from functrans import lax
from functrans import numpy as jnp
from functrans.optim._base import GradientTransformationExtraArgs
from functrans.optim._numerics import safe_increment
from functrans.optim._tree_casting import tree_dtype
from functrans.tree_util import tree_map

__all__ = ["ReduceLROnPlateauState", "reduce_on_plateau"]


class ReduceLROnPlateauState(NamedTuple):
    """The state of :func:`reduce_on_plateau`."""
    scale: Any
    best_value: Any
    plateau_count: Any
    cooldown_count: Any
    count: Any
    avg_value: Any


def reduce_on_plateau(factor: float = 0.1, patience=10, rtol: float = 1e-4, atol: float = 0.0,
                      cooldown=0, accumulation_size=1, min_scale=0.0
                      ) -> GradientTransformationExtraArgs:
    """Multiply the updates by a scale that drops by ``factor`` after ``patience``
    evaluations without improvement (the loss below ``(1 - rtol) * best - atol``), then
    waits ``cooldown`` evaluations; never below ``min_scale``. Each evaluation averages the
    ``value`` passed to ``update`` over ``accumulation_size`` steps.

        >>> import functrans.numpy as jnp
        >>> opt = reduce_on_plateau(factor=0.5, patience=1)
        >>> state = opt.init(jnp.zeros(1))
        >>> for loss in (1.0, 1.0, 1.0):    # no improvement after the first: halve twice
        ...     updates, state = opt.update(jnp.ones(1), state, value=jnp.asarray(loss))
        >>> updates
        Array([0.25], dtype=float32)
    """
    if factor <= 0.0 or factor >= 1.0:
        raise ValueError(f"Factor must be in the range (0, 1), got factor = {factor}.")
    if rtol < 0.0 or atol < 0.0:
        raise ValueError(f"Both rtol and atol must be non-negative, got rtol = {rtol} and "
                         f"atol = {atol}.")
    if rtol == 0.0 and atol == 0.0:
        raise ValueError(f"At least one of rtol or atol must be positive, got rtol = {rtol} "
                         f"and atol = {atol}.")
    if rtol > 1.0:
        raise ValueError(f"rtol must be less than or equal to 1.0, got rtol = {rtol}.")

    def init(params):
        lowest = tree_dtype(params, "lowest")
        highest = tree_dtype(params, "highest")
        return ReduceLROnPlateauState(
            scale=jnp.asarray(1.0, dtype=lowest), best_value=jnp.asarray(float("inf"), highest),
            plateau_count=jnp.asarray(0, jnp.int32), cooldown_count=jnp.asarray(0, jnp.int32),
            count=jnp.asarray(0, jnp.int32), avg_value=jnp.asarray(0.0, highest))

    def update_scale(state):
        improved = jnp.where(state.avg_value < (1 - rtol) * state.best_value - atol, 1, 0)
        best = jnp.where(improved, state.avg_value.astype(state.best_value.dtype),
                         state.best_value)
        plateau = jnp.where(improved, 0, safe_increment(state.plateau_count))

        def in_cooldown():
            return jnp.asarray(0, jnp.int32), state.scale, state.cooldown_count - 1

        def not_in_cooldown():
            reduce = plateau == patience
            return (jnp.where(reduce, 0, plateau),
                    jnp.maximum(jnp.where(reduce, state.scale * factor, state.scale), min_scale),
                    jnp.where(reduce, cooldown, 0).astype(jnp.int32))

        plateau, scale, cooldown_count = lax.cond(state.cooldown_count > 0, in_cooldown,
                                                  not_in_cooldown)
        return ReduceLROnPlateauState(scale, best.astype(state.best_value.dtype), plateau,
                                      cooldown_count, jnp.asarray(0, dtype=jnp.int32),
                                      jnp.asarray(0.0, state.avg_value.dtype))

    def update(updates, state, params=None, *, value, **extra_args):
        del params, extra_args
        count = safe_increment(state.count)
        avg = (state.count * state.avg_value
               + jnp.asarray(value).astype(state.avg_value.dtype)) / count
        state = state._replace(avg_value=avg.astype(state.avg_value.dtype), count=count)
        state = lax.cond(count == accumulation_size, update_scale, lambda s: s, state)
        return tree_map(lambda g: state.scale * g, updates), state

    return GradientTransformationExtraArgs(init, update)
