"""Schedules: functions from the step count (an int or an int32 array) to a value, for
learning rates and other hyperparameters. All are jnp-traceable, so they run inside ``jit``.

    >>> schedule = linear_schedule(1.0, 0.0, transition_steps=10)
    >>> float(schedule(5))
    0.5
"""
from __future__ import annotations

import math
from typing import Callable, Sequence


from functrans import _dtypes, lax
from functrans.numpy._promotion import to_array

__all__ = ["constant_schedule", "linear_schedule", "polynomial_schedule",
           "cosine_decay_schedule", "warmup_cosine_decay_schedule", "exponential_decay",
           "piecewise_constant_schedule", "join_schedules", "cosine_onecycle_schedule"]


def _float(count):
    return lax.convert_element_type(to_array(count), _dtypes.default_float_dtype())


def _f(value):
    return lax.full((), value, _dtypes.default_float_dtype())


def _clip(x, lo, hi):
    return lax.min(lax.max(x, _f(lo)), _f(hi))


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
        return constant_schedule(init_value)

    def schedule(count):
        steps = _clip(_float(count) - transition_begin, 0, transition_steps)
        remaining = 1 - steps / transition_steps
        return (init_value - end_value) * remaining ** power + end_value

    return schedule


def linear_schedule(init_value, end_value, transition_steps, transition_begin=0) -> Callable:
    """Linear interpolation from ``init_value`` to ``end_value`` over ``transition_steps``.

        >>> float(linear_schedule(0.0, 1.0, 4)(1))
        0.25
    """
    return polynomial_schedule(init_value, end_value, 1, transition_steps, transition_begin)


def cosine_decay_schedule(init_value, decay_steps, alpha=0.0, exponent=1.0) -> Callable:
    """``init_value * ((1 - alpha) * c ** exponent + alpha)`` with
    ``c = (1 + cos(pi * min(t, decay_steps) / decay_steps)) / 2`` (Loshchilov & Hutter).

        >>> float(cosine_decay_schedule(1.0, 10)(10))
        0.0
    """
    if decay_steps <= 0:
        raise ValueError(f"cosine_decay_schedule: decay_steps must be positive, got {decay_steps}")

    def schedule(count):
        t = lax.min(_float(count), _f(decay_steps))
        cosine = 0.5 * (1 + lax.cos(t * (math.pi / decay_steps)))
        return init_value * ((1 - alpha) * cosine ** exponent + alpha)

    return schedule


def join_schedules(schedules: Sequence[Callable], boundaries: Sequence[int]) -> Callable:
    """``schedules[i]`` between ``boundaries[i-1]`` and ``boundaries[i]``, each seeing the
    count since its own start.

        >>> s = join_schedules([constant_schedule(1.0), constant_schedule(2.0)], [3])
        >>> float(s(2)), float(s(3))
        (1.0, 2.0)
    """
    if len(boundaries) != len(schedules) - 1:
        raise ValueError("join_schedules: need exactly one boundary between each pair of "
                         "schedules")

    def schedule(count):
        count = to_array(count)
        out = to_array(schedules[0](count))
        for boundary, following in zip(boundaries, schedules[1:]):
            later = to_array(following(count - boundary))
            before = lax.lt(count, lax.full((), boundary, count.dtype))
            out_f, later_f = _float(out), _float(later)
            out = lax.select(before, out_f, later_f)
        return out

    return schedule


def warmup_cosine_decay_schedule(init_value, peak_value, warmup_steps, decay_steps,
                                 end_value=0.0, exponent=1.0) -> Callable:
    """Linear warmup from ``init_value`` to ``peak_value`` over ``warmup_steps``, then cosine
    decay to ``end_value`` at step ``decay_steps`` (counted from 0, warmup included).

        >>> s = warmup_cosine_decay_schedule(0.0, 1.0, 2, 10)
        >>> float(s(1)), float(s(2)), float(s(10))
        (0.5, 1.0, 0.0)
    """
    alpha = 0.0 if peak_value == 0 else end_value / peak_value
    return join_schedules(
        [linear_schedule(init_value, peak_value, warmup_steps),
         cosine_decay_schedule(peak_value, max(decay_steps - warmup_steps, 1), alpha, exponent)],
        [warmup_steps])


def exponential_decay(init_value, transition_steps, decay_rate, transition_begin=0,
                      staircase: bool = False, end_value=None) -> Callable:
    """``init_value * decay_rate ** ((t - transition_begin) / transition_steps)`` (the
    exponent floored with ``staircase``), ``init_value`` before ``transition_begin``, and
    bounded by ``end_value`` when given.

        >>> float(exponential_decay(1.0, 10, 0.5)(20))
        0.25
    """
    if transition_steps <= 0:
        return constant_schedule(init_value)

    def schedule(count):
        steps = _float(count) - transition_begin
        exponent = steps / transition_steps
        if staircase:
            exponent = lax.floor(exponent)
        value = init_value * decay_rate ** exponent
        value = lax.select(lax.le(steps, _f(0)), _f(init_value), value)
        if end_value is not None:
            bound = _f(end_value)
            value = lax.max(value, bound) if decay_rate < 1 else lax.min(value, bound)
        return value

    return schedule


def piecewise_constant_schedule(init_value, boundaries_and_scales: dict | None = None) -> Callable:
    """``init_value`` multiplied by ``scale`` for every ``(boundary, scale)`` with
    ``count >= boundary``.

        >>> s = piecewise_constant_schedule(1.0, {2: 0.5, 4: 0.5})
        >>> [float(s(t)) for t in (1, 2, 4)]
        [1.0, 0.5, 0.25]
    """
    items = sorted((boundaries_and_scales or {}).items())

    def schedule(count):
        count = _float(count)
        value = _f(init_value)
        for boundary, factor in items:
            reached = lax.ge(count, _f(boundary))
            value = lax.select(reached, value * factor, value)
        return value

    return schedule


def cosine_onecycle_schedule(transition_steps, peak_value, pct_start=0.3, div_factor=25.0,
                             final_div_factor=1e4) -> Callable:
    """One-cycle (Smith & Topin): cosine rise from ``peak/div_factor`` to ``peak`` over
    ``pct_start`` of the steps, then cosine fall to ``peak/(div_factor*final_div_factor)``."""
    start = peak_value / div_factor
    end = start / final_div_factor
    rise = int(pct_start * transition_steps)

    def half_cosine(a, b, steps):
        steps = max(steps, 1)

        def schedule(count):
            t = _clip(_float(count), 0, steps) / steps
            return b + (a - b) * 0.5 * (1 + lax.cos(t * math.pi))
        return schedule

    return join_schedules([half_cosine(start, peak_value, rise),
                           half_cosine(peak_value, end, transition_steps - rise)], [rise])


