"""Gradient accumulation: apply an optimizer once every ``k`` micro-batches.

Both are written with selects rather than branches, so they jit and vmap; the inner
optimizer's update is computed every step and kept only on the steps that apply it.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from functrans import _dtypes, lax
from functrans.optim._base import (GradientTransformation, cast, count_zero, safe_increment,
                                   where, zeros_like)
from functrans.tree_util import tree_map

__all__ = ["ApplyEvery", "apply_every", "MultiStepsState", "MultiSteps"]


class ApplyEvery(NamedTuple):
    count: Any
    grad_acc: Any


def _int(value):
    return lax.full((), value, _dtypes.int32)


def apply_every(k: int = 1) -> GradientTransformation:
    """Sum updates over ``k`` steps; emit the sum on every ``k``-th step and zeros on the
    others. Chain it after the optimizer (``chain(sgd(0.1), apply_every(4))``).

        >>> import functrans.numpy as jnp
        >>> opt = apply_every(2)
        >>> state = opt.init(jnp.zeros(1))
        >>> u1, state = opt.update(jnp.ones(1), state)
        >>> u2, state = opt.update(jnp.ones(1), state)
        >>> u1, u2
        (Array([0.], dtype=float32), Array([2.], dtype=float32))
    """
    if k < 1:
        raise ValueError(f"apply_every: k must be at least 1, got {k}")

    def init(params):
        return ApplyEvery(count_zero(), tree_map(zeros_like, params))

    def update(updates, state, params=None):
        phase = lax.rem(state.count, _int(k))
        fresh = lax.eq(phase, _int(0))
        accumulated = tree_map(lambda g, acc: g + where(fresh, zeros_like(acc), acc),
                               updates, state.grad_acc)
        emit = lax.eq(phase, _int(k - 1))
        out = tree_map(lambda acc: where(emit, acc, zeros_like(acc)), accumulated)
        return out, ApplyEvery(lax.rem(state.count + 1, _int(k)), accumulated)

    return GradientTransformation(init, update)


class MultiStepsState(NamedTuple):
    mini_step: Any
    gradient_step: Any
    inner_opt_state: Any
    acc_grads: Any


class MultiSteps:
    """Accumulate gradients over ``every_k_schedule`` mini-steps (an int, or a function of the
    gradient step), then apply ``opt`` to their mean (``use_grad_mean=True``) or sum. Between
    applications the updates are zeros.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import sgd
        >>> opt = MultiSteps(sgd(1.0), every_k_schedule=2)
        >>> state = opt.init(jnp.zeros(1))
        >>> u1, state = opt.update(jnp.array([1.0]), state)
        >>> u2, state = opt.update(jnp.array([3.0]), state)
        >>> u1, u2
        (Array([0.], dtype=float32), Array([-2.], dtype=float32))
    """

    def __init__(self, opt: GradientTransformation, every_k_schedule: int | Callable,
                 use_grad_mean: bool = True):
        self._opt = opt
        if callable(every_k_schedule):
            self._every_k = every_k_schedule
        else:
            if every_k_schedule < 1:
                raise ValueError("MultiSteps: every_k_schedule must be at least 1")
            self._every_k = lambda step: every_k_schedule
        self._use_grad_mean = use_grad_mean

    @property
    def inner_opt(self) -> GradientTransformation:
        return self._opt

    def init(self, params) -> MultiStepsState:
        return MultiStepsState(count_zero(), count_zero(), self._opt.init(params),
                               tree_map(zeros_like, params))

    def update(self, updates, state: MultiStepsState, params=None):
        k = lax.convert_element_type(lax.full((), 0, _dtypes.int32) + self._every_k(
            state.gradient_step), _dtypes.int32)
        step = state.mini_step
        if self._use_grad_mean:
            # running mean: acc + (g - acc) / (step + 1)
            denominator = lax.convert_element_type(step + 1, _dtypes.default_float_dtype())
            acc = tree_map(lambda g, a: a + (cast(g, a) - a) / cast(denominator, a),
                           updates, state.acc_grads)
        else:
            acc = tree_map(lambda g, a: a + cast(g, a), updates, state.acc_grads)
        emit = lax.ge(step + 1, k)
        inner_updates, inner_state = self._opt.update(acc, state.inner_opt_state, params)
        out = tree_map(lambda u: where(emit, u, zeros_like(u)), inner_updates)
        new_inner = tree_map(lambda new, old: where(emit, new, old), inner_state,
                             state.inner_opt_state)
        new_acc = tree_map(lambda a: where(emit, zeros_like(a), a), acc)
        new_state = MultiStepsState(
            mini_step=where(emit, _int(0), step + 1),
            gradient_step=where(emit, safe_increment(state.gradient_step), state.gradient_step),
            inner_opt_state=new_inner, acc_grads=new_acc)
        return out, new_state

    def has_updated(self, state: MultiStepsState):
        """Whether the last ``update`` applied the inner optimizer."""
        return lax.eq(state.mini_step, _int(0))

    def gradient_transformation(self) -> GradientTransformation:
        return GradientTransformation(self.init, self.update)
