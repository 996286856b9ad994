"""Running a transformation only on some steps: by a condition on the step count
(:func:`conditionally_transform`, :func:`conditionally_mask`) or when the updates are
finite (:func:`apply_if_finite`). The choice is a ``lax.cond``, so it jits; under ``vmap``
it becomes a select of both outcomes.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Protocol

from functrans import lax
from functrans import numpy as jnp
from functrans.optim._base import GradientTransformationExtraArgs, with_extra_args_support
from functrans.optim._numerics import safe_increment
from functrans.optim._tree_math import tree_zeros_like
from functrans.tree_util import tree_leaves

__all__ = ["ConditionFn", "ConditionallyTransformState", "conditionally_transform",
           "ConditionallyMaskState", "conditionally_mask", "ApplyIfFiniteState",
           "apply_if_finite"]


class ConditionFn(Protocol):
    """``fn(step, **extra_args) -> bool``: whether to run the inner transformation."""

    def __call__(self, step, **extra_args) -> Any: ...


class ConditionallyTransformState(NamedTuple):
    """The state of :func:`conditionally_transform`."""
    inner_state: Any
    step: Any


def conditionally_transform(inner, should_transform_fn: ConditionFn,
                            forward_extra_args: bool = False
                            ) -> GradientTransformationExtraArgs:
    """Apply ``inner`` on the steps where ``should_transform_fn(step)`` holds; on the
    others the updates pass through unchanged and ``inner``'s state is kept.
    ``forward_extra_args`` also passes ``update``'s keyword arguments to the condition.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import scale
        >>> opt = conditionally_transform(scale(10.0), lambda step: step >= 1)
        >>> state = opt.init(jnp.zeros(1))
        >>> u1, state = opt.update(jnp.ones(1), state)
        >>> u2, state = opt.update(jnp.ones(1), state)
        >>> u1, u2
        (Array([1.], dtype=float32), Array([10.], dtype=float32))
    """
    inner = with_extra_args_support(inner)

    def init(params):
        return ConditionallyTransformState(inner.init(params), jnp.zeros([], dtype=jnp.int32))

    def update(updates, state, params=None, **extra_args):
        condition_kwargs = extra_args if forward_extra_args else {}
        updates, new_inner = lax.cond(
            should_transform_fn(state.step, **condition_kwargs),
            lambda _: inner.update(updates, state.inner_state, params, **extra_args),
            lambda _: (updates, state.inner_state), None)
        return updates, ConditionallyTransformState(new_inner, safe_increment(state.step))

    return GradientTransformationExtraArgs(init, update)


class ConditionallyMaskState(NamedTuple):
    """The state of :func:`conditionally_mask`."""
    step: Any
    inner_state: Any


def conditionally_mask(inner, should_transform_fn: ConditionFn,
                       forward_extra_args: bool = False) -> GradientTransformationExtraArgs:
    """Apply ``inner`` on the steps where ``should_transform_fn(step)`` holds; on the
    others the updates are zeros and ``inner``'s state is kept.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import scale
        >>> opt = conditionally_mask(scale(10.0), lambda step: step >= 1)
        >>> state = opt.init(jnp.zeros(1))
        >>> u1, state = opt.update(jnp.ones(1), state)
        >>> u2, state = opt.update(jnp.ones(1), state)
        >>> u1, u2
        (Array([0.], dtype=float32), Array([10.], dtype=float32))
    """
    inner = with_extra_args_support(inner)

    def init(params):
        return ConditionallyMaskState(jnp.zeros([], jnp.int32), inner.init(params))

    def update(updates, state, params=None, **extra_args):
        condition_kwargs = extra_args if forward_extra_args else {}
        updates, new_inner = lax.cond(
            should_transform_fn(state.step, **condition_kwargs),
            lambda _: inner.update(updates, state.inner_state, params, **extra_args),
            lambda _: (tree_zeros_like(updates), state.inner_state), None)
        return updates, ConditionallyMaskState(safe_increment(state.step), new_inner)

    return GradientTransformationExtraArgs(init, update)


class ApplyIfFiniteState(NamedTuple):
    """The state of :func:`apply_if_finite`: consecutive and total non-finite steps,
    whether the last step was finite, and ``inner``'s state."""
    notfinite_count: Any
    last_finite: Any
    total_notfinite: Any
    inner_state: Any


def apply_if_finite(inner, max_consecutive_errors: int) -> GradientTransformationExtraArgs:
    """Skip steps whose updates hold a NaN or an infinity: the update is zeros and
    ``inner``'s state is kept. After more than ``max_consecutive_errors`` bad steps in a
    row the bad update goes through.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import sgd
        >>> opt = apply_if_finite(sgd(1.0), max_consecutive_errors=2)
        >>> state = opt.init(jnp.zeros(1))
        >>> updates, state = opt.update(jnp.array([jnp.nan]), state)
        >>> updates, state.total_notfinite
        (Array([0.], dtype=float32), Array(1, dtype=int32))
    """
    inner = with_extra_args_support(inner)

    def init(params):
        return ApplyIfFiniteState(jnp.zeros([], jnp.int32), jnp.array(True, jnp.bool_),
                                  jnp.zeros([], jnp.int32), inner.init(params))

    def update(updates, state, params=None, **extra_args):
        isfinite = jnp.all(jnp.array([jnp.all(jnp.isfinite(p)) for p in tree_leaves(updates)]))
        notfinite_count = jnp.where(isfinite, jnp.zeros([], jnp.int32),
                                    safe_increment(state.notfinite_count))
        new_updates, new_inner = lax.cond(
            jnp.logical_or(isfinite, notfinite_count > max_consecutive_errors),
            lambda _: inner.update(updates, state.inner_state, params, **extra_args),
            lambda _: (tree_zeros_like(updates), state.inner_state), None)
        total = jnp.where(isfinite, state.total_notfinite,
                          safe_increment(state.total_notfinite))
        return new_updates, ApplyIfFiniteState(notfinite_count, isfinite, total, new_inner)

    return GradientTransformationExtraArgs(init, update)
