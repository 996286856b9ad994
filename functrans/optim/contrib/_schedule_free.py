"""Schedule-free optimization (Defazio et al., 2024): interpolate between a base
optimizer's iterates ``z`` and their running average ``x``, so no decaying schedule is
needed; evaluate at :func:`schedule_free_eval_params`."""
from __future__ import annotations

from typing import Any, NamedTuple

from functrans import numpy as jnp
from functrans.optim._adding import add_decayed_weights
from functrans.optim._aliases import sgd
from functrans.optim._base import GradientTransformation, GradientTransformationExtraArgs, \
    with_extra_args_support
from functrans.optim._combining import chain
from functrans.optim._numerics import safe_increment
from functrans.optim._schedules import warmup_constant_schedule
from functrans.optim._scaling import scale_by_learning_rate
from functrans.optim._second_moments import scale_by_rms
from functrans.optim._tree_casting import tree_cast, tree_dtype
from functrans.tree_util import tree_map

__all__ = ["ScheduleFreeState", "schedule_free", "schedule_free_eval_params",
           "schedule_free_sgd", "schedule_free_adamw"]


class ScheduleFreeState(NamedTuple):
    """The state of :func:`schedule_free`."""
    b1: Any
    weight_sum: Any
    step_count: Any
    max_lr: Any
    base_optimizer_state: Any
    z: Any


def schedule_free_eval_params(state: ScheduleFreeState, params):
    """The averaged parameters ``x`` to evaluate the model at (the optimizer's parameters
    ``y`` are an interpolation used for the gradients).

        >>> import functrans.numpy as jnp
        >>> opt = schedule_free_sgd(learning_rate=0.1)
        >>> p = jnp.ones(2)
        >>> updates, state = opt.update(jnp.ones(2), opt.init(p), p)
        >>> schedule_free_eval_params(state, p + updates)
        Array([0.8999999, 0.8999999], dtype=float32)
    """
    b1, z = getattr(state, "b1", None), getattr(state, "z", None)
    if b1 is None or z is None:
        raise ValueError("schedule_free_eval_params requires a ScheduleFreeState as input.")
    return tree_map(lambda y, z_: (y - (1.0 - b1) * z_) / b1, params, z)


def schedule_free(base_optimizer: GradientTransformation, learning_rate, b1=0.9,
                  weight_lr_power=2.0, state_dtype=None) -> GradientTransformationExtraArgs:
    """Turn ``base_optimizer`` (with constant ``learning_rate``, also given here to weight
    the average by ``lr^weight_lr_power``) schedule-free: ``z`` takes the base steps,
    ``x`` is their weighted running average, and the parameters are ``y = b1 x + (1 - b1)
    z``. ``state_dtype`` stores ``z`` in another dtype.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import sgd
        >>> opt = schedule_free(sgd(0.1), learning_rate=0.1)
        >>> p = jnp.ones(1)
        >>> opt.update(jnp.ones(1), opt.init(p), p)[0]
        Array([-0.10000008], dtype=float32)
    """
    base_optimizer = with_extra_args_support(base_optimizer)

    def init(params):
        dtype = tree_dtype(params, "lowest")
        z = tree_cast(params, state_dtype) if state_dtype is not None else params
        z = tree_map(lambda t: jnp.array(t, copy=True), z)
        return ScheduleFreeState(jnp.asarray(b1, dtype=dtype), jnp.zeros([], dtype=dtype),
                                 jnp.ones([], dtype=jnp.int32), jnp.zeros([], dtype=dtype),
                                 base_optimizer.init(params), z)

    def update(grads, state, params=None, **extra_args):
        lr = learning_rate
        if callable(learning_rate):
            lr = jnp.asarray(learning_rate(state.step_count), dtype=state.max_lr.dtype)
        max_lr = jnp.maximum(state.max_lr, lr)
        weight = max_lr ** weight_lr_power
        total_weight = state.weight_sum + weight
        # the averaging weight of this step; NaN weights propagate, 0/0 is 0
        ck = jnp.where(jnp.logical_or(jnp.isnan(weight), jnp.isnan(total_weight)),
                       jnp.full(weight.shape, jnp.nan),
                       jnp.nan_to_num(weight / total_weight, nan=0.0, posinf=jnp.inf))
        base_updates, base_state = base_optimizer.update(grads, state.base_optimizer_state,
                                                         params, **extra_args)
        z = tree_map(lambda p, u: jnp.asarray(p + u).astype(jnp.asarray(p).dtype), state.z,
                     base_updates)
        prev_x = tree_map(lambda y, z_: (y - (1.0 - b1) * z_) / b1, params, state.z)
        x = tree_map(lambda x_, z_: (1.0 - ck) * x_ + ck * z_, prev_x, z)
        new_params = tree_map(lambda x_, z_: b1 * x_ + (1.0 - b1) * z_, x, z)
        updates = tree_map(lambda new, old: new - old, new_params, params)
        return updates, ScheduleFreeState(state.b1, total_weight,
                                          safe_increment(state.step_count), max_lr, base_state, z)

    return GradientTransformationExtraArgs(init, update)


def schedule_free_sgd(learning_rate=1.0, warmup_steps: int | None = None, b1=0.9,
                      weight_decay=None, weight_lr_power=2.0, state_dtype=None
                      ) -> GradientTransformationExtraArgs:
    """Schedule-free SGD: :func:`schedule_free` around SGD (with optional weight decay),
    with an optional linear warmup of ``warmup_steps``."""
    if warmup_steps is not None:
        learning_rate = warmup_constant_schedule(0, learning_rate, warmup_steps)
    optimizer = sgd(learning_rate)
    if weight_decay is not None:
        optimizer = chain(add_decayed_weights(weight_decay), optimizer)
    return schedule_free(optimizer, learning_rate=learning_rate, b1=b1,
                         weight_lr_power=weight_lr_power, state_dtype=state_dtype)


def schedule_free_adamw(learning_rate=0.0025, warmup_steps: int | None = None, b1=0.9,
                        b2=0.999, eps=1e-8, weight_decay=0.0, weight_lr_power=2.0,
                        state_dtype=None) -> GradientTransformationExtraArgs:
    """Schedule-free AdamW: :func:`schedule_free` around RMS scaling with bias correction
    (the momentum is the schedule-free averaging), weight decay and the learning rate,
    with an optional linear warmup of ``warmup_steps``."""
    if warmup_steps is not None:
        learning_rate = warmup_constant_schedule(0, learning_rate, warmup_steps)
    optimizer = chain(scale_by_rms(decay=b2, eps=eps, eps_in_sqrt=False, bias_correction=True),
                      add_decayed_weights(weight_decay), scale_by_learning_rate(learning_rate))
    return schedule_free(optimizer, learning_rate=learning_rate, b1=b1,
                         weight_lr_power=weight_lr_power, state_dtype=state_dtype)
