"""Schedules: functions from the step count (an int or an int32 array) to a value, for
learning rates and other hyperparameters. All are jnp-traceable, so they run inside ``jit``.

    >>> schedule = linear_schedule(1.0, 0.0, transition_steps=10)
    >>> float(schedule(5))
    0.5
"""
from __future__ import annotations

import logging
from typing import Callable, Sequence

from functrans import numpy as jnp

__all__ = ["constant_schedule", "polynomial_schedule", "linear_schedule",
           "piecewise_constant_schedule", "exponential_decay", "cosine_decay_schedule",
           "piecewise_interpolate_schedule", "linear_onecycle_schedule",
           "cosine_onecycle_schedule", "warmup_constant_schedule",
           "warmup_cosine_decay_schedule", "warmup_exponential_decay_schedule",
           "sgdr_schedule", "join_schedules"]


def constant_schedule(value) -> Callable:
    """Always ``value``.

        >>> constant_schedule(0.1)(100)
        0.1
    """
    return lambda count: value


def polynomial_schedule(init_value, end_value, power, transition_steps,
                        transition_begin=0) -> Callable:
    """From ``init_value`` to ``end_value`` over ``transition_steps`` steps (after
    ``transition_begin``) along ``(1 - fraction) ** power``; constant afterwards.

        >>> float(polynomial_schedule(1.0, 0.0, 2, 10)(5))
        0.25
    """
    if transition_steps <= 0:
        logging.info("A polynomial schedule was set with a non-positive `transition_steps` "
                     "value; this results in a constant schedule with value `init_value`.")
        return lambda count: init_value
    if transition_begin < 0:
        logging.info("A polynomial schedule was set with a negative `transition_begin` value; "
                     "this will result in `transition_begin` falling back to `0`.")
        transition_begin = 0

    def schedule(count):
        count = jnp.clip(count - transition_begin, 0, transition_steps)
        fraction = 1 - count / transition_steps
        return (init_value - end_value) * fraction ** power + end_value

    return schedule


def linear_schedule(init_value, end_value, transition_steps, transition_begin=0) -> Callable:
    """Linear interpolation from ``init_value`` to ``end_value`` over ``transition_steps``.

        >>> float(linear_schedule(0.0, 1.0, 4)(1))
        0.25
    """
    return polynomial_schedule(init_value, end_value, 1, transition_steps, transition_begin)


def piecewise_constant_schedule(init_value, boundaries_and_scales: dict | None = None
                                ) -> Callable:
    """``init_value`` multiplied by ``scale`` for every ``(boundary, scale)`` with
    ``count >= boundary``.

        >>> s = piecewise_constant_schedule(1.0, {2: 0.5, 4: 0.5})
        >>> [float(s(t)) for t in (1, 2, 4)]
        [1.0, 0.5, 0.25]
    """
    if boundaries_and_scales is not None:
        if not all(scale >= 0.0 for scale in boundaries_and_scales.values()):
            raise ValueError("`piecewise_constant_schedule` expects non-negative scale factors")

    def schedule(count):
        value = init_value
        for threshold, scale in sorted((boundaries_and_scales or {}).items()):
            before = jnp.maximum(0.0, jnp.sign(threshold - count))   # 1 before, 0 from it on
            value = value * before + (1 - before) * scale * value
        return value

    return schedule


def exponential_decay(init_value, transition_steps, decay_rate, transition_begin=0,
                      staircase: bool = False, end_value=None) -> Callable:
    """``init_value * decay_rate ** ((t - transition_begin) / transition_steps)`` (the
    exponent floored with ``staircase``), ``init_value`` before ``transition_begin``, and
    bounded by ``end_value`` when given.

        >>> float(exponential_decay(1.0, 10, 0.5)(20))
        0.25
    """
    if transition_steps <= 0:
        logging.info("An exponential schedule was set with a non-positive `transition_steps` "
                     "value; this will result in a constant schedule with value `init_value`.")
        return lambda count: init_value
    if decay_rate == 0:
        logging.info("An exponential schedule was set with a zero `decay_rate` value; this "
                     "will result in a constant schedule with value `init_value`.")
        return lambda count: init_value
    if transition_begin < 0:
        logging.info("An exponential schedule was set with a negative `transition_begin` "
                     "value; this will result in `transition_begin` falling back to `0`.")
        transition_begin = 0
    clip = jnp.maximum if decay_rate < 1.0 else jnp.minimum

    def schedule(count):
        decreased_count = count - transition_begin
        exponent = decreased_count / transition_steps
        if staircase:
            exponent = jnp.floor(exponent)
        value = jnp.where(decreased_count <= 0, init_value,
                          init_value * jnp.power(decay_rate, exponent))
        return value if end_value is None else clip(value, end_value)

    return schedule


def cosine_decay_schedule(init_value, decay_steps, alpha=0.0, exponent=1.0) -> Callable:
    """``init_value * ((1 - alpha) * c ** exponent + alpha)`` with
    ``c = (1 + cos(pi * min(t, decay_steps) / decay_steps)) / 2`` (Loshchilov & Hutter).

        >>> float(cosine_decay_schedule(1.0, 10)(10))
        0.0
    """
    if not decay_steps > 0:
        raise ValueError("The cosine_decay_schedule requires positive decay_steps, got "
                         f"decay_steps={decay_steps!r}.")

    def schedule(count):
        steps = float(decay_steps) if isinstance(decay_steps, int) else decay_steps
        count = float(count) if isinstance(count, int) else count
        count = jnp.minimum(count, steps)
        cosine = 0.5 * (1 + jnp.cos(jnp.pi * count / steps))
        return init_value * ((1 - alpha) * cosine ** exponent + alpha)

    return schedule


def _linear_interpolate(start, end, fraction):
    return (end - start) * fraction + start


def _cosine_interpolate(start, end, fraction):
    return end + (start - end) / 2.0 * (jnp.cos(jnp.pi * fraction) + 1)


def piecewise_interpolate_schedule(interpolate_type: str, init_value,
                                   boundaries_and_scales: dict | None = None) -> Callable:
    """Interpolate (``"linear"`` or ``"cosine"``) between the values ``init_value``,
    ``init_value * s1``, ``init_value * s1 * s2``, ... reached at the boundaries of
    ``boundaries_and_scales`` (``{boundary: scale}``); constant after the last boundary.

        >>> s = piecewise_interpolate_schedule("linear", 1.0, {4: 0.5})
        >>> [float(s(t)) for t in (0, 2, 4, 9)]
        [1.0, 0.75, 0.5, 0.5]
    """
    if interpolate_type == "linear":
        interpolate = _linear_interpolate
    elif interpolate_type == "cosine":
        interpolate = _cosine_interpolate
    else:
        raise ValueError("`interpolate_type` must be either 'cosine' or 'linear'")
    if boundaries_and_scales:
        boundaries, scales = zip(*sorted(boundaries_and_scales.items()))
        if not all(scale >= 0.0 for scale in scales):
            raise ValueError("`piecewise_interpolate_schedule` expects non-negative scale "
                             "factors")
    else:
        boundaries, scales = (), ()

    def schedule(count):
        bounds = jnp.stack((0,) + boundaries)
        values = jnp.cumprod(jnp.stack((init_value,) + scales))
        interval_sizes = jnp.maximum(bounds[1:] - bounds[:-1], 1)
        inside = jnp.logical_and(bounds[:-1] <= count, count < bounds[1:])
        fraction = (count - bounds[:-1]) / interval_sizes
        interpolated = interpolate(values[:-1], values[1:], fraction)
        return inside.dot(interpolated) + (bounds[-1] <= count) * values[-1]

    return schedule


def linear_onecycle_schedule(transition_steps, peak_value, pct_start=0.3, pct_final=0.85,
                             div_factor=25.0, final_div_factor=1e4) -> Callable:
    """One-cycle with linear pieces (Smith & Topin, 2017): from ``peak/div_factor`` up to
    ``peak`` at ``pct_start`` of the steps, back down at ``pct_final``, then to
    ``peak/(div_factor*final_div_factor)`` at the end.

        >>> s = linear_onecycle_schedule(100, 1.0)
        >>> [round(float(s(t)), 4) for t in (0, 30, 85, 100)]
        [0.04, 1.0, 0.04, 0.0]
    """
    if transition_steps <= 0:
        raise ValueError("A linear onecycle schedule was set with a non-positive "
                         "`transition_steps`")
    return piecewise_interpolate_schedule(
        "linear", peak_value / div_factor,
        {int(pct_start * transition_steps): div_factor,
         int(pct_final * transition_steps): 1.0 / div_factor,
         transition_steps: 1.0 / final_div_factor})


def cosine_onecycle_schedule(transition_steps, peak_value, pct_start=0.3, div_factor=25.0,
                             final_div_factor=1e4) -> Callable:
    """One-cycle (Smith & Topin, 2017): cosine rise from ``peak/div_factor`` to ``peak`` over
    ``pct_start`` of the steps, then cosine fall to ``peak/(div_factor*final_div_factor)``.

        >>> s = cosine_onecycle_schedule(10, 1.0)
        >>> [round(float(s(t)), 4) for t in (0, 3, 10)]
        [0.04, 1.0, 0.0]
    """
    if transition_steps <= 0:
        raise ValueError("A linear onecycle schedule was set with a non-positive "
                         "`transition_steps`")
    return piecewise_interpolate_schedule(
        "cosine", peak_value / div_factor,
        {int(pct_start * transition_steps): div_factor,
         int(transition_steps): 1.0 / (div_factor * final_div_factor)})


def join_schedules(schedules: Sequence[Callable], boundaries: Sequence[int]) -> Callable:
    """``schedules[i]`` between ``boundaries[i-1]`` and ``boundaries[i]``, each seeing the
    count since its own start.

        >>> s = join_schedules([constant_schedule(1.0), constant_schedule(2.0)], [3])
        >>> float(s(2)), float(s(3))
        (1.0, 2.0)
    """
    def schedule(step):
        output = schedules[0](step)
        for boundary, following in zip(boundaries, schedules[1:]):
            output = jnp.where(step < boundary, output, following(step - boundary))
        return output

    return schedule


def warmup_constant_schedule(init_value, peak_value, warmup_steps) -> Callable:
    """Linear warmup from ``init_value`` to ``peak_value`` over ``warmup_steps``, then
    constant.

        >>> s = warmup_constant_schedule(0.0, 1.0, 4)
        >>> float(s(2)), float(s(10))
        (0.5, 1.0)
    """
    return linear_schedule(init_value, peak_value, warmup_steps)


def warmup_cosine_decay_schedule(init_value, peak_value, warmup_steps, decay_steps,
                                 end_value=0.0, exponent=1.0) -> Callable:
    """Linear warmup from ``init_value`` to ``peak_value`` over ``warmup_steps``, then cosine
    decay to ``end_value`` at step ``decay_steps`` (counted from 0, warmup included).

        >>> s = warmup_cosine_decay_schedule(0.0, 1.0, 2, 10)
        >>> float(s(1)), float(s(2)), float(s(10))
        (0.5, 1.0, 0.0)
    """
    alpha = 0.0 if peak_value == 0.0 else end_value / peak_value
    return join_schedules(
        [linear_schedule(init_value, peak_value, warmup_steps),
         cosine_decay_schedule(peak_value, decay_steps - warmup_steps, alpha, exponent)],
        [warmup_steps])


def warmup_exponential_decay_schedule(init_value, peak_value, warmup_steps, transition_steps,
                                      decay_rate, transition_begin=0, staircase: bool = False,
                                      end_value=None) -> Callable:
    """Linear warmup from ``init_value`` to ``peak_value`` over ``warmup_steps``, then
    :func:`exponential_decay` from ``peak_value`` (its count starting after the warmup).

        >>> s = warmup_exponential_decay_schedule(0.0, 1.0, 2, 10, 0.5)
        >>> float(s(1)), float(s(12))
        (0.5, 0.5)
    """
    return join_schedules(
        [linear_schedule(init_value, peak_value, warmup_steps),
         exponential_decay(peak_value, transition_steps, decay_rate, transition_begin,
                           staircase, end_value)],
        [warmup_steps])


def sgdr_schedule(cosine_kwargs: Sequence[dict]) -> Callable:
    """Warm restarts (SGDR, Loshchilov & Hutter, 2017): one
    :func:`warmup_cosine_decay_schedule` per dict of its arguments, run one after another.

        >>> s = sgdr_schedule([dict(init_value=0.0, peak_value=1.0, warmup_steps=1,
        ...                         decay_steps=4)] * 2)
        >>> [round(float(s(t)), 3) for t in (1, 3, 4, 5)]
        [1.0, 0.25, 0.0, 1.0]
    """
    boundaries, schedules, step = [], [], 0
    for kwargs in cosine_kwargs:
        schedules.append(warmup_cosine_decay_schedule(**kwargs))
        step += kwargs["decay_steps"]
        boundaries.append(step)
    return join_schedules(schedules, boundaries[:-1])
