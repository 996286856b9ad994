"""``optim.experimental.aggregating``: transformations of *per-example* gradients (a
leading example axis on every leaf): a pre-processor on the individual gradients, an
aggregator that combines them (averages, accumulates over steps, or gathers their
variance), and an optimizer on the result, as optax's ``optax.experimental.aggregating``.

    >>> import functrans.numpy as jnp
    >>> from functrans.optim import sgd, identity
    >>> from functrans.optim.experimental import aggregating
    >>> opt = aggregating.process(identity(), aggregating.average_per_element_updates(),
    ...                           sgd(1.0))
    >>> per_example = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    >>> opt.update(per_example, opt.init(jnp.zeros(2)), jnp.zeros(2))[0]
    Array([-2., -3.], dtype=float32)
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple, Protocol, Sequence

from functrans import lax
from functrans import numpy as jnp
from functrans.optim._base import GradientTransformation, GradientTransformationExtraArgs, \
    TransformInitFn, identity, init_empty_state
from functrans.optim._combining import chain
from functrans.optim._numerics import safe_int32_increment
from functrans.optim._tree_math import tree_scale, tree_where, tree_zeros_like
from functrans.optim._tree_state import tree_get
from functrans.tree_util import tree_leaves, tree_map

__all__ = ["PerElementUpdates", "AggregatedUpdates", "MaybeAxis", "AggregatorUpdateFn",
           "Aggregator", "process", "average_per_element_updates", "AccumulateAvgUpdatesState",
           "accumulate_avg_updates", "average_incrementally_updates",
           "get_batch_size_from_per_elt_updates", "PerElementMeanAndSumSqDiffGradsState",
           "get_per_element_mean_and_sum_sq_diff_grads", "PerElementMeanAndVarianceEMAState",
           "track_per_element_mean_and_variance_with_ema", "get_unbiased_mean_and_variance_ema",
           "add_mean_variance_to_opt"]

PerElementUpdates = Any   # a pytree whose leaves carry the example axis
AggregatedUpdates = Any   # a pytree shaped like the parameters
MaybeAxis = int | Sequence[int] | None


class AggregatorUpdateFn(Protocol):
    """``update(per_elt_updates, state, params=None, **extra_args) -> (aggregated,
    state)``."""

    def __call__(self, per_elt_updates, state, params=None, **extra_args) -> tuple: ...


class Aggregator(GradientTransformationExtraArgs):
    """A transformation taking per-example updates to aggregated ones."""
    init: TransformInitFn
    update: AggregatorUpdateFn


def process(preprocessor: GradientTransformation, aggregator: GradientTransformation,
            postprocessor: GradientTransformation, aggregator_has_aux: bool = False
            ) -> GradientTransformationExtraArgs:
    """``preprocessor`` on the per-example gradients, ``aggregator`` to combine them, then
    ``postprocessor`` (the optimizer) on the result — only on steps where the
    aggregator's state says it is ``ready`` (zeros otherwise). With
    ``aggregator_has_aux`` the aggregator returns ``(updates, aux)`` and ``aux`` is passed
    to the postprocessor as keyword arguments. The result is an :class:`Aggregator` when
    ``aggregator`` is one.
    """
    def init(params):
        return (preprocessor.init(params), aggregator.init(params), postprocessor.init(params))

    def update(per_elt_grads, states, params=None, **extra_args):
        pre_state, agg_state, post_state = states
        per_elt_updates, pre_state = preprocessor.update(per_elt_grads, pre_state, params,
                                                         **extra_args)
        aggregated, agg_state = aggregator.update(per_elt_updates, agg_state, params,
                                                  **extra_args)
        if aggregator_has_aux:
            aggregated, aux = aggregated
            extra_args = extra_args | aux
        ready = tree_get(agg_state, "ready", True)
        updates, post_state = lax.cond(
            ready, lambda g, s, p, kw: postprocessor.update(g, s, p, **kw),
            lambda g, s, *_: (tree_zeros_like(aggregated), s),
            aggregated, post_state, params, extra_args)
        return updates, (pre_state, agg_state, post_state)

    if isinstance(aggregator, Aggregator):
        return Aggregator(init, update)
    return GradientTransformationExtraArgs(init, update)


def average_per_element_updates(per_elt_axis: MaybeAxis = 0) -> Aggregator:
    """The mean over the example axis ``per_elt_axis``.

        >>> import functrans.numpy as jnp
        >>> agg = average_per_element_updates()
        >>> agg.update(jnp.array([[1.0], [3.0]]), agg.init(None))[0]
        Array([2.], dtype=float32)
    """
    def update(per_elt_updates, state, params=None):
        del params
        return tree_map(lambda x: jnp.mean(x, axis=per_elt_axis), per_elt_updates), state
    return Aggregator(init_empty_state, update)


class AccumulateAvgUpdatesState(NamedTuple):
    """The state of :func:`accumulate_avg_updates`."""
    micro_step: Any
    ready: Any
    avg_grad: Any


def accumulate_avg_updates(accumulation_steps: int) -> GradientTransformation:
    """Average the updates over ``accumulation_steps`` calls; emit the average on the last
    (state ``ready``) and zeros before.

        >>> import functrans.numpy as jnp
        >>> acc = accumulate_avg_updates(2)
        >>> state = acc.init(jnp.zeros(1))
        >>> u1, state = acc.update(jnp.array([1.0]), state)
        >>> u2, state = acc.update(jnp.array([3.0]), state)
        >>> u1, u2
        (Array([0.], dtype=float32), Array([2.], dtype=float32))
    """
    if accumulation_steps < 1:
        raise ValueError("accumulation_steps must be larger than or equal to 1.")
    if accumulation_steps == 1:
        return identity()

    def init(params):
        return AccumulateAvgUpdatesState(jnp.asarray(0), jnp.asarray(False),
                                         tree_zeros_like(params))

    def update(updates, state, params=None):
        del params
        step = state.micro_step + 1
        avg = tree_map(lambda u, a: a + (u - a) / step, updates, state.avg_grad)
        ready_state = AccumulateAvgUpdatesState(jnp.asarray(0), jnp.asarray(True),
                                                tree_zeros_like(avg))
        waiting_state = AccumulateAvgUpdatesState(step, jnp.asarray(False), avg)
        return tree_where(step == accumulation_steps, (avg, ready_state),
                          (tree_zeros_like(avg), waiting_state))

    return GradientTransformation(init, update)


def average_incrementally_updates(per_elt_axis: MaybeAxis, accumulation_steps: int):
    """The per-example mean (unless ``per_elt_axis`` is None), averaged again over
    ``accumulation_steps`` calls."""
    if per_elt_axis is None:
        return accumulate_avg_updates(accumulation_steps)
    combined = chain(average_per_element_updates(per_elt_axis),
                     accumulate_avg_updates(accumulation_steps))
    return Aggregator(combined.init, combined.update)


def get_batch_size_from_per_elt_updates(per_elt_updates, per_elt_axis: MaybeAxis) -> int:
    """The number of examples: the size of ``per_elt_axis`` (the product for several
    axes), which must agree across leaves.

        >>> import functrans.numpy as jnp
        >>> get_batch_size_from_per_elt_updates({"a": jnp.zeros((4, 2))}, 0)
        4
    """
    def batch_size(u):
        if isinstance(per_elt_axis, int):
            return u.shape[per_elt_axis]
        return math.prod(u.shape[i] for i in per_elt_axis)

    sizes = tree_leaves(tree_map(batch_size, per_elt_updates))
    if not all(b == sizes[0] for b in sizes):
        raise ValueError(f"Per-element updates must have the same batch size. Got: {sizes}")
    return sizes[0]


class PerElementMeanAndSumSqDiffGradsState(NamedTuple):
    """The state of :func:`get_per_element_mean_and_sum_sq_diff_grads` when accumulating."""
    micro_step: Any
    ready: Any
    mean_grads: Any
    sum_sq_diff_grads: Any


def get_per_element_mean_and_sum_sq_diff_grads(per_elt_axis: MaybeAxis = 0,
                                               accumulation_steps: int = 1) -> Aggregator:
    """An aggregator giving the mean gradient and, as aux ``{"sum_sq_diff_grads",
    "sample_size"}``, the sum of squared deviations from it (merged across
    ``accumulation_steps`` calls by Chan et al.'s parallel update).

        >>> import functrans.numpy as jnp
        >>> agg = get_per_element_mean_and_sum_sq_diff_grads()
        >>> (mean, aux), _ = agg.update(jnp.array([[1.0], [3.0]]), agg.init(None))
        >>> mean, aux["sum_sq_diff_grads"], aux["sample_size"]
        (Array([2.], dtype=float32), Array([2.], dtype=float32), 2)
    """
    def mean_and_sum_sq(per_elt_updates):
        means = tree_map(lambda x: jnp.mean(x, axis=per_elt_axis, keepdims=True),
                         per_elt_updates)
        sums = tree_map(lambda x, a: jnp.sum(jnp.square(x - a), axis=per_elt_axis),
                        per_elt_updates, means)
        return tree_map(lambda x: x.squeeze(axis=per_elt_axis), means), sums

    if accumulation_steps == 1:
        def update_once(per_elt_updates, state, params=None):
            del params
            size = get_batch_size_from_per_elt_updates(per_elt_updates, per_elt_axis)
            mean, sums = mean_and_sum_sq(per_elt_updates)
            return (mean, {"sum_sq_diff_grads": sums, "sample_size": size}), state
        return Aggregator(init_empty_state, update_once)

    def init(params):
        return PerElementMeanAndSumSqDiffGradsState(
            jnp.asarray(0, dtype=jnp.int32), jnp.asarray(False), tree_zeros_like(params),
            tree_zeros_like(params))

    def update(per_elt_updates, state, params=None):
        del params
        size = get_batch_size_from_per_elt_updates(per_elt_updates, per_elt_axis)
        step = state.micro_step + 1
        batch_mean, batch_sums = mean_and_sum_sq(per_elt_updates)
        delta = tree_map(lambda u, a: u - a, batch_mean, state.mean_grads)
        mean = tree_map(lambda a, d: a + d / step, state.mean_grads, delta)
        size_factor = state.micro_step * size / step
        sums = tree_map(lambda a, s, d: a + s + d ** 2 * size_factor, state.sum_sq_diff_grads,
                        batch_sums, delta)
        outputs = (mean, {"sum_sq_diff_grads": sums, "sample_size": size * step})
        ready_state = PerElementMeanAndSumSqDiffGradsState(
            jnp.asarray(0, dtype=jnp.int32), jnp.asarray(True), tree_zeros_like(mean),
            tree_zeros_like(sums))
        waiting_state = PerElementMeanAndSumSqDiffGradsState(step, jnp.asarray(False), mean, sums)
        return tree_where(step == accumulation_steps, (outputs, ready_state),
                          (tree_zeros_like(outputs), waiting_state))

    return Aggregator(init, update)


class PerElementMeanAndVarianceEMAState(NamedTuple):
    """The state of :func:`track_per_element_mean_and_variance_with_ema`."""
    count: Any
    ema_decay: Any
    mean_grads_ema: Any
    variance_grads_ema: Any


def track_per_element_mean_and_variance_with_ema(ema_decay=0.9
                                                 ) -> GradientTransformationExtraArgs:
    """Keep moving averages of the mean gradient and of the per-example gradient variance
    (from the ``sum_sq_diff_grads`` and ``sample_size`` keyword arguments an aggregator
    provides); updates pass unchanged. Read them with
    :func:`get_unbiased_mean_and_variance_ema`."""
    def init(params):
        return PerElementMeanAndVarianceEMAState(jnp.zeros([], jnp.int32), jnp.asarray(ema_decay),
                                                 tree_zeros_like(params), tree_zeros_like(params))

    def update(updates, state, params=None, *, sum_sq_diff_grads, sample_size):
        del params
        mean_ema = tree_map(lambda x, y: (1.0 - ema_decay) * x + ema_decay * y, updates,
                            state.mean_grads_ema)
        variance = tree_scale(1 / (sample_size - 1), sum_sq_diff_grads)
        variance_ema = tree_map(lambda x, y: (1.0 - ema_decay) * x + ema_decay * y, variance,
                                state.variance_grads_ema)
        return updates, state._replace(count=safe_int32_increment(state.count),
                                       mean_grads_ema=mean_ema, variance_grads_ema=variance_ema)

    return GradientTransformationExtraArgs(init, update)


def get_unbiased_mean_and_variance_ema(state):
    """The bias-corrected moving averages of the mean gradient and of the per-example
    variance, from a state holding a :class:`PerElementMeanAndVarianceEMAState`."""
    ema_state = tree_get(state, "PerElementMeanAndVarianceEMAState", None)
    if ema_state is None:
        raise ValueError("State must have PerElementMeanAndVarianceEMAState to compute "
                         "unbiased mean and variance EMA.")
    correction = 1 - ema_state.ema_decay ** ema_state.count
    return (tree_map(lambda x: x / correction, ema_state.mean_grads_ema),
            tree_map(lambda x: x / correction, ema_state.variance_grads_ema))


def add_mean_variance_to_opt(opt: GradientTransformation, ema_decay=0.9,
                             per_elt_axis: MaybeAxis = 0, accumulation_steps: int = 1
                             ) -> GradientTransformationExtraArgs:
    """``opt`` on the mean of per-example gradients, tracking the moving averages of that
    mean and of the gradient variance in the state.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import sgd
        >>> opt = add_mean_variance_to_opt(sgd(1.0))
        >>> per_example = jnp.array([[1.0], [3.0]])
        >>> updates, state = opt.update(per_example, opt.init(jnp.zeros(1)), jnp.zeros(1))
        >>> updates
        Array([-2.], dtype=float32)
        >>> get_unbiased_mean_and_variance_ema(state)   # of the mean and of the variance
        (Array([1.9999995], dtype=float32), Array([1.9999995], dtype=float32))
    """
    return process(preprocessor=identity(),
                   aggregator=get_per_element_mean_and_sum_sq_diff_grads(per_elt_axis,
                                                                         accumulation_steps),
                   postprocessor=chain(track_per_element_mean_and_variance_with_ema(ema_decay),
                                       opt),
                   aggregator_has_aux=True)
