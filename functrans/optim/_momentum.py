"""Carrying past updates into the current one: momentum (:func:`trace`, heavy-ball or
Nesterov), exponential moving averages (:func:`ema`), and optimistic gradients
(:func:`scale_by_optimistic_gradient`, which extrapolate from the previous gradient).

``g`` in the docstrings is the incoming update (a gradient).
"""
from __future__ import annotations

from typing import Any, NamedTuple

from functrans import numpy as jnp
from functrans.optim._base import GradientTransformation, canonicalize_dtype
from functrans.optim._numerics import safe_increment
from functrans.optim._tree_casting import tree_cast
from functrans.optim._tree_math import tree_bias_correction, tree_update_moment, \
    tree_zeros_like
from functrans.tree_util import tree_map

__all__ = ["TraceState", "trace", "EmaState", "ema", "ScaleByOptimisticGradientState",
           "scale_by_optimistic_gradient"]


class TraceState(NamedTuple):
    """The state of :func:`trace`: the momentum buffer."""
    trace: Any


def trace(decay, nesterov: bool = False, accumulator_dtype=None) -> GradientTransformation:
    """Momentum: ``t = g + decay * t``; the update is ``t``, or ``g + decay * t`` with
    ``nesterov=True`` (Sutskever et al., 2013).

        >>> import functrans.numpy as jnp
        >>> opt = trace(0.9)
        >>> opt.update(jnp.ones(1), opt.init(jnp.zeros(1)))[0]
        Array([1.], dtype=float32)
    """
    accumulator_dtype = canonicalize_dtype(accumulator_dtype)

    def init(params):
        return TraceState(tree_zeros_like(params, dtype=accumulator_dtype))

    def update(updates, state, params=None):
        del params

        def momentum(g, t):
            return g + decay * t

        new_trace = tree_map(lambda g, t: None if g is None else momentum(g, t), updates,
                             state.trace, is_leaf=lambda g: g is None)
        updates = tree_map(momentum, updates, new_trace) if nesterov else new_trace
        return updates, TraceState(tree_cast(new_trace, accumulator_dtype))

    return GradientTransformation(init, update)


class EmaState(NamedTuple):
    """The state of :func:`ema`: the step count and the average."""
    count: Any
    ema: Any


def ema(decay, debias: bool = True, accumulator_dtype=None) -> GradientTransformation:
    """Exponential moving average of the updates: ``e = decay e + (1 - decay) g``; the
    update is ``e``, or ``e / (1 - decay^t)`` with ``debias``.

        >>> import functrans.numpy as jnp
        >>> opt = ema(0.5)
        >>> opt.update(jnp.array([4.0]), opt.init(jnp.zeros(1)))[0]
        Array([4.], dtype=float32)
    """
    accumulator_dtype = canonicalize_dtype(accumulator_dtype)

    def init(params):
        return EmaState(jnp.zeros([], jnp.int32),
                        tree_zeros_like(params, dtype=accumulator_dtype))

    def update(updates, state, params=None):
        del params
        updates = new_ema = tree_update_moment(updates, state.ema, decay, order=1)
        count = safe_increment(state.count)
        if debias:
            updates = tree_bias_correction(new_ema, decay, count)
        return updates, EmaState(count, tree_cast(new_ema, accumulator_dtype))

    return GradientTransformation(init, update)


class ScaleByOptimisticGradientState(NamedTuple):
    """The state of :func:`scale_by_optimistic_gradient`."""
    is_initial_step: Any
    previous_gradient: Any


def scale_by_optimistic_gradient(alpha=1.0, beta=1.0) -> GradientTransformation:
    """Optimistic gradients (Mokhtari et al., 2019)::

        update = (alpha + beta) g_t - beta g_{t-1}

    with ``g_0`` taken to be ``g_1`` on the first step (so the first update is ``alpha g``).

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_optimistic_gradient()
        >>> state = opt.init(jnp.zeros(1))
        >>> u1, state = opt.update(jnp.array([1.0]), state)
        >>> u2, state = opt.update(jnp.array([3.0]), state)
        >>> u1, u2
        (Array([1.], dtype=float32), Array([5.], dtype=float32))
    """
    def init(params):
        return ScaleByOptimisticGradientState(jnp.array(True), tree_zeros_like(params))

    def update(updates, state, params=None):
        del params

        def optimistic(g, previous):
            previous = jnp.where(state.is_initial_step, g, previous)
            return (alpha + beta) * g - beta * previous

        out = tree_map(optimistic, updates, state.previous_gradient)
        return out, ScaleByOptimisticGradientState(jnp.array(False), updates)

    return GradientTransformation(init, update)
