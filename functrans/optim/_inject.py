"""Hyperparameters kept in the optimizer state: :func:`inject_hyperparams` rebuilds the
optimizer each step from values stored in (or scheduled by) its state, so they can be read
and changed between steps without recompiling.
"""
from __future__ import annotations

import functools
import inspect
import warnings
from typing import Any, Callable, Iterable, NamedTuple

import numpy as np

from functrans import numpy as jnp
from functrans._array import Array
from functrans.core import Tracer
from functrans.optim._base import GradientTransformationExtraArgs, StatefulSchedule, \
    with_extra_args_support
from functrans.optim._numerics import safe_increment
from functrans.optim._tree_casting import tree_dtype

__all__ = ["InjectHyperparamsState", "InjectStatefulHyperparamsState", "WrappedScheduleState",
           "WrappedSchedule", "inject_hyperparams", "inject_stateful_hyperparams"]


class InjectHyperparamsState(NamedTuple):
    """The state of the older, schedule-free form of :func:`inject_hyperparams`."""
    count: Any
    hyperparams: dict
    inner_state: Any


class InjectStatefulHyperparamsState(NamedTuple):
    """The state of :func:`inject_hyperparams`: the step count, the current
    hyperparameters by name, the schedules' states, and the inner optimizer's state."""
    count: Any
    hyperparams: dict
    hyperparams_states: dict
    inner_state: Any


class WrappedScheduleState(NamedTuple):
    """The state of a :class:`WrappedSchedule`: the step count."""
    count: Any


class WrappedSchedule:
    """A schedule of the step count seen as a stateful schedule (``init``, ``update``,
    ``__call__(state)``), the form :func:`inject_hyperparams` keeps in its state.

        >>> schedule = WrappedSchedule(lambda count: 0.5 * count)
        >>> state = schedule.update(schedule.init())
        >>> float(schedule(state))
        0.5
    """

    def __init__(self, schedule_fn: Callable):
        self.schedule_fn = schedule_fn

    def init(self) -> WrappedScheduleState:
        return WrappedScheduleState(jnp.zeros([], jnp.int32))

    def update(self, state: WrappedScheduleState, **extra_args) -> WrappedScheduleState:
        del extra_args
        return WrappedScheduleState(safe_increment(state.count))

    def __call__(self, state: WrappedScheduleState, **extra_args):
        return self.schedule_fn(state.count)


def _convert_floats(value, dtype):
    """Float hyperparameters (Python floats, NumPy floats, weakly typed arrays) become
    ``dtype`` arrays; strongly typed arrays, ints and everything else pass unchanged."""
    if isinstance(value, (Array, Tracer)) and not getattr(value, "weak_type", False):
        return value
    current = value.dtype if hasattr(value, "dtype") else type(value)
    if np.issubdtype(current, np.floating):
        return jnp.asarray(value, dtype=dtype)
    return value


def inject_hyperparams(inner_factory: Callable, static_args: str | Iterable[str] = (),
                       hyperparam_dtype=None) -> Callable:
    """Wrap an optimizer factory so its numeric hyperparameters live in the state, where
    they can be read or changed between steps; callable arguments are treated as
    schedules of the step count (or stateful schedules) and evaluated each step.

    ``inject_hyperparams(adam)(learning_rate=0.1)`` is a transformation whose state is an
    :class:`InjectStatefulHyperparamsState`; ``state.hyperparams["learning_rate"]`` holds
    the current value (set it to change the next steps). Booleans and ``static_args`` are
    passed to the factory unchanged. Floats are stored in ``hyperparam_dtype`` (default:
    the highest float dtype of the parameters).

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import sgd
        >>> opt = inject_hyperparams(sgd)(learning_rate=0.5)
        >>> state = opt.init(jnp.zeros(1))
        >>> state.hyperparams["learning_rate"] = jnp.array(2.0)
        >>> opt.update(jnp.ones(1), state)[0]
        Array([-2.], dtype=float32)
    """
    static_args = {static_args} if isinstance(static_args, str) else set(static_args)
    signature = inspect.signature(inner_factory)
    if not static_args.issubset(signature.parameters):
        raise ValueError("`static_args` must specify a subset of `inner_factory`'s parameters. "
                         f"Given `static_args`: {static_args}. `inner_factory` parameters: "
                         f"{set(signature.parameters)}")

    @functools.wraps(inner_factory)
    def wrapped(*args, **kwargs) -> GradientTransformationExtraArgs:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        schedules, numeric, other = {}, {}, {}
        for name, value in bound.arguments.items():
            if name in static_args or isinstance(value, bool):
                other[name] = value
            elif isinstance(value, StatefulSchedule):
                schedules[name] = value
            elif callable(value):
                schedules[name] = WrappedSchedule(value)
            elif isinstance(value, (int, float, Array, Tracer, np.ndarray)):
                numeric[name] = value
            else:
                other[name] = value

        def dtype_for(params):
            return hyperparam_dtype if hyperparam_dtype is not None else tree_dtype(
                params, "highest")

        def init(params):
            dtype = dtype_for(params)
            hyperparams = {k: jnp.asarray(_convert_floats(v, dtype)) for k, v in numeric.items()}
            schedule_states = {k: s.init() for k, s in schedules.items()}
            hyperparams.update({k: _convert_floats(s(schedule_states[k]), dtype)
                                for k, s in schedules.items()})
            inner = inner_factory(**other, **hyperparams)
            return InjectStatefulHyperparamsState(jnp.zeros([], jnp.int32), hyperparams,
                                                  schedule_states, inner.init(params))

        def update(updates, state, params=None, **extra_args):
            dtype = dtype_for(params)
            hyperparams = {k: _convert_floats(v, dtype) for k, v in state.hyperparams.items()}
            # scheduled values are recomputed from their own state, never read back
            hyperparams.update({
                k: _convert_floats(s(state.hyperparams_states[k], **extra_args), dtype)
                for k, s in schedules.items()})
            schedule_states = {k: s.update(state.hyperparams_states[k], **extra_args)
                               for k, s in schedules.items()}
            inner = with_extra_args_support(inner_factory(**other, **hyperparams))
            updates, inner_state = inner.update(updates, state.inner_state, params, **extra_args)
            return updates, InjectStatefulHyperparamsState(
                safe_increment(state.count), hyperparams, schedule_states, inner_state)

        return GradientTransformationExtraArgs(init, update)

    return wrapped


def inject_stateful_hyperparams(inner_factory: Callable, static_args: str | Iterable[str] = (),
                                hyperparam_dtype=None) -> Callable:
    """The older name of :func:`inject_hyperparams` (which takes stateful schedules too)."""
    warnings.warn("inject_stateful_hyperparams is deprecated, use inject_hyperparams instead",
                  DeprecationWarning, stacklevel=2)
    return inject_hyperparams(inner_factory, static_args, hyperparam_dtype)
