"""``optim.schedules``: step-size schedules and :func:`inject_hyperparams`, as optax's
``optax.schedules``.

    >>> from functrans.optim import schedules
    >>> float(schedules.linear_schedule(1.0, 0.0, transition_steps=4)(1))
    0.75
"""
from __future__ import annotations

from functrans.optim._base import Schedule, StatefulSchedule
from functrans.optim._inject import (InjectHyperparamsState, InjectStatefulHyperparamsState,
                                     WrappedSchedule, inject_hyperparams,
                                     inject_stateful_hyperparams)
from functrans.optim._schedules import (constant_schedule, cosine_decay_schedule,
                                        cosine_onecycle_schedule, exponential_decay,
                                        join_schedules, linear_onecycle_schedule,
                                        linear_schedule, piecewise_constant_schedule,
                                        piecewise_interpolate_schedule, polynomial_schedule,
                                        sgdr_schedule, warmup_constant_schedule,
                                        warmup_cosine_decay_schedule,
                                        warmup_exponential_decay_schedule)

__all__ = ["InjectHyperparamsState", "InjectStatefulHyperparamsState", "Schedule",
           "StatefulSchedule", "WrappedSchedule", "constant_schedule", "cosine_decay_schedule",
           "cosine_onecycle_schedule", "exponential_decay", "inject_hyperparams",
           "inject_stateful_hyperparams", "join_schedules", "linear_onecycle_schedule",
           "linear_schedule", "piecewise_constant_schedule", "piecewise_interpolate_schedule",
           "polynomial_schedule", "sgdr_schedule", "warmup_constant_schedule",
           "warmup_cosine_decay_schedule", "warmup_exponential_decay_schedule"]
