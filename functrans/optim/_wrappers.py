"""Wrappers around whole optimizers: hyperparameters kept in the state, and skipping
non-finite steps.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Iterable, NamedTuple

import numpy as np

from functrans import _dtypes, lax
from functrans import numpy as jnp
from functrans._array import Array
from functrans.core import Tracer, get_aval
from functrans.numpy._promotion import to_array
from functrans.optim._base import (GradientTransformation, count_zero, safe_increment, where,
                                   zeros_like)
from functrans.tree_util import tree_leaves, tree_map

__all__ = ["InjectStatefulHyperparamsState", "InjectHyperparamsState", "WrappedScheduleState",
           "WrappedSchedule", "inject_hyperparams", "ApplyIfFiniteState", "apply_if_finite"]


# =============================================================================================
# inject_hyperparams
# =============================================================================================

class InjectStatefulHyperparamsState(NamedTuple):
    count: Any
    hyperparams: Any
    hyperparams_states: Any
    inner_state: Any


# the name older code uses for the same state
InjectHyperparamsState = InjectStatefulHyperparamsState


class WrappedScheduleState(NamedTuple):
    count: Any


class WrappedSchedule:
    """A schedule of the step count seen as a stateful schedule (``init``, ``update``,
    ``__call__(state)``), the form :func:`inject_hyperparams` keeps in its state."""

    def __init__(self, schedule_fn: Callable):
        self.schedule_fn = schedule_fn

    def init(self) -> WrappedScheduleState:
        return WrappedScheduleState(count_zero())

    def update(self, state: WrappedScheduleState, **extra_args) -> WrappedScheduleState:
        return WrappedScheduleState(safe_increment(state.count))

    def __call__(self, state: WrappedScheduleState, **extra_args):
        return self.schedule_fn(state.count)


def _is_stateful_schedule(value) -> bool:
    return all(callable(getattr(value, name, None)) for name in ("init", "update", "__call__")) \
        and not isinstance(value, type)


def _highest_float_dtype(tree):
    dtypes = [get_aval(to_array(x)).dtype for x in tree_leaves(tree)]
    floats = [d for d in dtypes if _dtypes.is_inexact(d)]
    return np.result_type(*floats) if floats else _dtypes.default_float_dtype()


def _is_array(value) -> bool:
    return isinstance(value, (Array, Tracer, np.ndarray, np.number))


def _convert_floats(value, dtype):
    """Float hyperparameters (Python floats, NumPy floats, weakly typed arrays) become
    ``dtype`` arrays; strongly typed arrays, ints and everything else pass unchanged."""
    if isinstance(value, bool):
        return value
    if isinstance(value, float):
        return jnp.asarray(value, dtype=dtype)
    if not _is_array(value):
        return value
    aval = get_aval(to_array(value))
    strongly_typed = isinstance(value, (Array, Tracer)) and not aval.weak_type
    if strongly_typed or not np.issubdtype(aval.dtype, np.floating):
        return value
    return jnp.asarray(value, dtype=dtype)


def inject_hyperparams(inner_factory: Callable, static_args: str | Iterable[str] = (),
                       hyperparam_dtype=None) -> Callable:
    """Wrap an optimizer factory so its numeric hyperparameters live in the state, where
    they can be read or changed between steps; callable arguments are treated as
    schedules of the step count and evaluated each step.

    ``inject_hyperparams(adam)(learning_rate=0.1)`` is a transformation whose state is an
    :class:`InjectStatefulHyperparamsState`; ``state.hyperparams["learning_rate"]`` holds
    the current value (set it to change the next steps). Booleans and ``static_args`` are
    passed to the factory unchanged. Each step rebuilds the inner optimizer from the state's
    values, so jit sees them as arrays and never recompiles for a new value.

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
    if not static_args <= set(signature.parameters):
        raise ValueError(f"inject_hyperparams: static_args {sorted(static_args)} must name "
                         f"parameters of {getattr(inner_factory, '__name__', inner_factory)}; "
                         f"it has {list(signature.parameters)}")

    def wrapped(*args, **kwargs) -> GradientTransformation:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        schedules, numeric, other = {}, {}, {}
        for name, value in bound.arguments.items():
            if name in static_args or isinstance(value, bool):
                other[name] = value
            elif _is_stateful_schedule(value):
                schedules[name] = value
            elif callable(value):
                schedules[name] = WrappedSchedule(value)
            elif isinstance(value, (int, float)) or _is_array(value):
                numeric[name] = value
            else:
                other[name] = value

        def dtype_for(tree):
            return hyperparam_dtype if hyperparam_dtype is not None else _highest_float_dtype(tree)

        def init(params):
            dtype = dtype_for(params)
            hyperparams = {k: jnp.asarray(_convert_floats(v, dtype)) for k, v in numeric.items()}
            schedule_states = {k: s.init() for k, s in schedules.items()}
            hyperparams.update({k: _convert_floats(s(schedule_states[k]), dtype)
                                for k, s in schedules.items()})
            inner = inner_factory(**other, **hyperparams)
            return InjectStatefulHyperparamsState(count_zero(), hyperparams, schedule_states,
                                                  inner.init(params))

        def update(updates, state, params=None):
            dtype = dtype_for(params if params is not None else updates)
            hyperparams = {k: _convert_floats(v, dtype) for k, v in state.hyperparams.items()}
            # scheduled values are recomputed from their own state, never read back
            hyperparams.update({k: _convert_floats(s(state.hyperparams_states[k]), dtype)
                                for k, s in schedules.items()})
            schedule_states = {k: s.update(state.hyperparams_states[k])
                               for k, s in schedules.items()}
            inner = inner_factory(**other, **hyperparams)
            updates, inner_state = inner.update(updates, state.inner_state, params)
            return updates, InjectStatefulHyperparamsState(
                safe_increment(state.count), hyperparams, schedule_states, inner_state)

        return GradientTransformation(init, update)

    wrapped.__name__ = getattr(inner_factory, "__name__", "wrapped")
    wrapped.__doc__ = inner_factory.__doc__
    return wrapped


# =============================================================================================
# apply_if_finite
# =============================================================================================

class ApplyIfFiniteState(NamedTuple):
    notfinite_count: Any
    last_finite: Any
    total_notfinite: Any
    inner_state: Any


def apply_if_finite(inner: GradientTransformation,
                    max_consecutive_errors: int) -> GradientTransformation:
    """Skip steps whose updates hold a NaN or an infinity: the update is zeros and
    ``inner``'s state is kept. After more than ``max_consecutive_errors`` bad steps in a
    row the bad update goes through. The state counts consecutive (``notfinite_count``)
    and total (``total_notfinite``) bad steps and records whether the last was finite.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import sgd
        >>> opt = apply_if_finite(sgd(1.0), max_consecutive_errors=2)
        >>> state = opt.init(jnp.zeros(1))
        >>> updates, state = opt.update(jnp.array([jnp.nan]), state)
        >>> updates, state.total_notfinite
        (Array([0.], dtype=float32), Array(1, dtype=int32))
    """
    def init(params):
        return ApplyIfFiniteState(count_zero(), lax.full((), True, np.dtype(np.bool_)),
                                  count_zero(), inner.init(params))

    def update(updates, state, params=None):
        finite = lax.full((), True, np.dtype(np.bool_))
        for leaf in tree_leaves(updates):
            finite = jnp.logical_and(finite, jnp.all(jnp.isfinite(leaf)))
        notfinite_count = where(finite, count_zero(), safe_increment(state.notfinite_count))
        accept = jnp.logical_or(finite, notfinite_count > max_consecutive_errors)
        # both outcomes are computed and one selected, so this jits and vmaps like any step
        new_updates, new_inner = inner.update(updates, state.inner_state, params)
        out = tree_map(lambda u: where(accept, u, zeros_like(u)), new_updates)
        inner_state = tree_map(lambda new, old: where(accept, new, old), new_inner,
                               state.inner_state)
        total = where(finite, state.total_notfinite, safe_increment(state.total_notfinite))
        return out, ApplyIfFiniteState(notfinite_count, finite, total, inner_state)

    return GradientTransformation(init, update)
