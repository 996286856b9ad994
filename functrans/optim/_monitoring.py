"""Recording quantities of the updates in the state: :func:`snapshot`, :func:`monitor`,
:func:`measure_with_ema`.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from functrans.optim._base import GradientTransformation, GradientTransformationExtraArgs, \
    stateless, with_extra_args_support
from functrans.optim._combining import chain
from functrans.optim._momentum import ema

__all__ = ["SnapshotState", "snapshot", "MonitorState", "monitor", "measure_with_ema"]


class SnapshotState(NamedTuple):
    """The state of :func:`snapshot`: ``{measure_name: measurement}``."""
    measurement: dict


def snapshot(measure_name: str, measure: Callable) -> GradientTransformation:
    """Keep ``measure(updates)`` of the last updates in the state under ``measure_name``
    (``measure(params)`` after ``init``); updates pass unchanged.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import tree
        >>> opt = snapshot("norm", tree.norm)
        >>> _, state = opt.update(jnp.array([3.0, 4.0]), opt.init(jnp.zeros(2)))
        >>> state.measurement["norm"]
        Array(5., dtype=float32)
    """
    def init(params):
        return SnapshotState({measure_name: measure(params)})

    def update(updates, state, params=None):
        del params, state
        return updates, SnapshotState({measure_name: measure(updates)})

    return GradientTransformation(init, update)


class MonitorState(NamedTuple):
    """The state of :func:`monitor`: the last measurements, and each measure's state."""
    measurements: dict
    measure_states: tuple


def monitor(measures: dict) -> GradientTransformationExtraArgs:
    """Record several measures of the incoming updates; updates pass unchanged. Each
    measure is a function of the updates, or a transformation whose output updates are the
    measurement (so it may keep state, like :func:`measure_with_ema`).

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import tree
        >>> opt = monitor({"norm": tree.norm})
        >>> _, state = opt.update(jnp.array([3.0, 4.0]), opt.init(jnp.zeros(2)))
        >>> state.measurements["norm"]
        Array(5., dtype=float32)
    """
    transforms = {}
    for name, measure in measures.items():
        if callable(measure):   # a plain function; transformations are tuples
            measure = stateless(lambda u, _, m=measure: m(u))
        transforms[name] = with_extra_args_support(measure)
    names = tuple(transforms)

    def init(params):
        return MonitorState({}, tuple(transforms[name].init(params) for name in names))

    def update(updates, state, params=None, **extra_args):
        measurements, new_states = {}, []
        for i, name in enumerate(names):
            measurements[name], s = transforms[name].update(updates, state.measure_states[i],
                                                            params, **extra_args)
            new_states.append(s)
        return updates, MonitorState(measurements, tuple(new_states))

    return GradientTransformationExtraArgs(init, update)


def measure_with_ema(measure: Callable, decay, debias: bool = True,
                     accumulator_dtype: Any = None) -> GradientTransformationExtraArgs:
    """A transformation whose output is the moving average of ``measure(updates)``: use it
    inside :func:`monitor`.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import tree
        >>> opt = measure_with_ema(tree.norm, decay=0.5)
        >>> opt.update(jnp.array([3.0, 4.0]), opt.init(jnp.zeros(2)))[0]
        Array(5., dtype=float32)
    """
    averaging = ema(decay, debias, accumulator_dtype)
    # the average is of measurements, so it starts from the measurement of the params
    of_measurements = averaging._replace(init=lambda params: averaging.init(measure(params)))
    return chain(stateless(lambda updates, _: measure(updates)), of_measurements)
