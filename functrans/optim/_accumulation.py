"""Accumulating gradients over micro-batches: sum them and apply every ``k`` steps
(:func:`apply_every`), or average them inside the optimizer state (:class:`MultiSteps`,
which can drop a step by :func:`skip_not_finite` / :func:`skip_large_updates`).

Momentum and moving averages, which carry updates across every step, are in
:mod:`functrans.optim._momentum`.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Protocol

from functrans import _api
from functrans import lax
from functrans import numpy as jnp
from functrans._array import Array
from functrans.core import Tracer
from functrans.optim._base import GradientTransformation, canonicalize_dtype, \
    with_extra_args_support
from functrans.optim._numerics import safe_increment
from functrans.optim._tree_casting import tree_cast_like
from functrans.optim._tree_math import tree_zeros_like
from functrans.tree_util import tree_leaves, tree_map

__all__ = ["ApplyEvery", "apply_every", "ShouldSkipUpdateFunction", "skip_not_finite",
           "skip_large_updates", "MultiStepsState", "MultiSteps"]


class ApplyEvery(NamedTuple):
    """The state of :func:`apply_every`: the phase and the running sum."""
    count: Any
    grad_acc: Any


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
        return ApplyEvery(jnp.zeros([], jnp.int32), tree_zeros_like(params))

    def update(updates, state, params=None):
        del params
        fresh = state.count == 0
        grad_acc = tree_map(lambda g, acc: g + jnp.where(fresh, jnp.zeros_like(acc), acc),
                            updates, state.grad_acc)
        emit = state.count == k - 1
        updates = tree_map(lambda acc: jnp.where(emit, acc, jnp.zeros_like(acc)), grad_acc)
        return updates, ApplyEvery((state.count + 1) % k, grad_acc)

    return GradientTransformation(init, update)


class ShouldSkipUpdateFunction(Protocol):
    """``fn(updates, gradient_step, params) -> (should_skip, skip_state)`` for
    :class:`MultiSteps`: a scalar bool, and a pytree of diagnostics kept in the state."""

    def __call__(self, updates, gradient_step, params) -> tuple: ...


def skip_not_finite(updates, gradient_step, params):
    """Skip a step whose updates hold a NaN or an infinity (for :class:`MultiSteps`).

        >>> import functrans.numpy as jnp
        >>> skip, info = skip_not_finite([jnp.array([1.0, jnp.inf])], 0, None)
        >>> bool(skip), int(info["num_not_finite"])
        (True, 1)
    """
    del gradient_step, params
    counts = [jnp.sum(jnp.logical_not(jnp.isfinite(p))) for p in tree_leaves(updates)]
    num_not_finite = jnp.sum(jnp.array(counts))
    should_skip = num_not_finite > 0
    return should_skip, {"should_skip": should_skip, "num_not_finite": num_not_finite}


def skip_large_updates(updates, gradient_step, params, max_squared_norm):
    """Skip a step whose updates' squared global norm is at least ``max_squared_norm`` (or
    NaN); bind ``max_squared_norm`` with ``functools.partial`` for :class:`MultiSteps`.

        >>> import functrans.numpy as jnp
        >>> skip, info = skip_large_updates([jnp.array([3.0, 4.0])], 0, None, 10.0)
        >>> bool(skip), float(info["norm_squared"])
        (True, 25.0)
    """
    del gradient_step, params
    norm_sq = jnp.sum(jnp.array([jnp.sum(p ** 2) for p in tree_leaves(updates)]))
    # "not (a < b)" so that a NaN norm also skips
    should_skip = jnp.logical_not(norm_sq < max_squared_norm)
    return should_skip, {"should_skip": should_skip, "norm_squared": norm_sq}


class MultiStepsState(NamedTuple):
    """The state of :class:`MultiSteps`."""
    mini_step: Any
    gradient_step: Any
    inner_opt_state: Any
    acc_grads: Any
    skip_state: Any = ()


def _never_skip(*args, **kwargs):
    del args, kwargs
    return jnp.array(False, dtype=jnp.bool_), ()


class MultiSteps:
    """Accumulate gradients over ``every_k_schedule`` mini-steps (an int, or a function of the
    gradient step), then apply ``opt`` to their mean (``use_grad_mean=True``) or sum. Between
    applications the updates are zeros. ``should_skip_update_fn`` (e.g.
    :func:`skip_not_finite`) drops a mini-step entirely; the accumulator is kept in
    ``accumulator_dtype``.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import sgd
        >>> opt = MultiSteps(sgd(1.0), every_k_schedule=2)
        >>> state = opt.init(jnp.zeros(1))
        >>> u1, state = opt.update(jnp.array([1.0]), state)
        >>> u2, state = opt.update(jnp.array([3.0]), state)
        >>> u1, u2
        (Array([-0.], dtype=float32), Array([-2.], dtype=float32))
    """

    def __init__(self, opt: GradientTransformation, every_k_schedule: int | Callable,
                 use_grad_mean: bool = True,
                 should_skip_update_fn: ShouldSkipUpdateFunction | None = None,
                 accumulator_dtype=jnp.float32):
        self._opt = with_extra_args_support(opt)
        if isinstance(every_k_schedule, int):
            if every_k_schedule < 1:
                raise ValueError(f"MultiSteps: every_k_schedule must be at least 1, got "
                                 f"{every_k_schedule}")
            self._every_k_schedule = lambda step: every_k_schedule
        else:
            self._every_k_schedule = every_k_schedule
        self._use_grad_mean = use_grad_mean
        self._accumulator_dtype = canonicalize_dtype(accumulator_dtype)
        self._should_skip_update_fn = should_skip_update_fn or _never_skip

    @property
    def inner_opt(self) -> GradientTransformation:
        return self._opt

    def _accumulate(self, grad, acc, n_acc):
        if self._use_grad_mean:
            return acc + (grad - acc) / (n_acc + 1)   # the running mean
        return grad + acc

    def init(self, params) -> MultiStepsState:
        gradient_step = jnp.zeros([], dtype=jnp.int32)
        _, skip_state = self._should_skip_update_fn(tree_zeros_like(params), gradient_step,
                                                    params)
        return MultiStepsState(
            mini_step=jnp.zeros([], dtype=jnp.int32), gradient_step=gradient_step,
            inner_opt_state=self._opt.init(params),
            acc_grads=tree_zeros_like(params, dtype=self._accumulator_dtype),
            skip_state=skip_state)

    def update(self, updates, state: MultiStepsState, params=None, **extra_args):
        k_steps = self._every_k_schedule(state.gradient_step)
        should_skip, skip_state = self._should_skip_update_fn(updates, state.gradient_step,
                                                              params)
        should_skip = jnp.asarray(should_skip)
        if (should_skip.dtype, should_skip.shape) != (jnp.bool_, ()):
            raise ValueError("The `should_skip_update_fn` function should return a boolean "
                             f"scalar array, but it returned an array of dtype "
                             f"{should_skip.dtype} and shape {should_skip.shape}")

        def do_update(updates, state, params):
            acc_grads = tree_map(lambda u, acc: self._accumulate(u, acc, state.mini_step),
                                 updates, state.acc_grads)
            final_updates, new_inner = self._opt.update(tree_cast_like(acc_grads, updates),
                                                        state.inner_opt_state, params=params,
                                                        **extra_args)
            emit = state.mini_step == k_steps - 1
            new_state = MultiStepsState(
                mini_step=safe_increment(state.mini_step) % k_steps,
                gradient_step=(emit * safe_increment(state.gradient_step)
                               + (1 - emit) * state.gradient_step),
                inner_opt_state=tree_map(
                    lambda old, new: jnp.where(emit, new, old).astype(jnp.asarray(old).dtype),
                    state.inner_opt_state, new_inner),
                acc_grads=tree_map(lambda acc: ((1 - emit) * acc).astype(self._accumulator_dtype),
                                   acc_grads),
                skip_state=skip_state)
            return tree_map(lambda u: emit * u, final_updates), new_state

        def skip_update(updates, state, params):
            # the zeros must be shaped like what the inner optimizer would emit
            arrays = (Array, Tracer)
            static = {k: v for k, v in extra_args.items() if not isinstance(v, arrays)}
            dynamic = {k: v for k, v in extra_args.items() if isinstance(v, arrays)}
            shapes, _ = _api.eval_shape(
                functools.partial(self._opt.update, **static),
                tree_cast_like(state.acc_grads, updates), state.inner_opt_state,
                params=params, **dynamic)
            zeros = tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
            return zeros, state._replace(skip_state=skip_state)

        return lax.cond(should_skip, skip_update, do_update, updates, state, params)

    def has_updated(self, state: MultiStepsState):
        """Whether the last ``update`` applied the inner optimizer."""
        return jnp.logical_and(state.mini_step == 0, state.gradient_step > 0)

    def gradient_transformation(self) -> GradientTransformation:
        return GradientTransformation(init=self.init, update=self.update)
