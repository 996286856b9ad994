"""Adding to the updates: decoupled weight decay and annealed gradient noise."""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from functrans import numpy as jnp
from functrans import random
from functrans.optim._base import NO_PARAMS_MSG, EmptyState, GradientTransformation
from functrans.optim._masking import masked
from functrans.optim._numerics import safe_increment
from functrans.optim._tree_math import tree_add_scale
from functrans.optim._tree_random import tree_random_like
from functrans.tree_util import tree_map

__all__ = ["AddDecayedWeightsState", "WeightDecaySchedule", "add_decayed_weights",
           "AddNoiseState", "add_noise"]

# optax's name for the (empty) state of add_decayed_weights with a fixed rate
AddDecayedWeightsState = EmptyState


class WeightDecaySchedule(NamedTuple):
    """The state of :func:`add_decayed_weights` with a scheduled rate: the step count."""
    count: Any


def add_decayed_weights(weight_decay=0.0, mask=None) -> GradientTransformation:
    """``g + weight_decay * params`` (decoupled weight decay when chained before the learning
    rate). ``weight_decay`` may be a schedule of the step count (the state then counts steps:
    :class:`WeightDecaySchedule`). ``mask`` (a pytree of bools, or a function of params
    giving one) limits it to some leaves.

        >>> import functrans.numpy as jnp
        >>> add_decayed_weights(0.1).update(jnp.zeros(1), EmptyState(), jnp.ones(1))[0]
        Array([0.1], dtype=float32)
    """
    scheduled = callable(weight_decay)

    def init(params):
        del params
        return WeightDecaySchedule(jnp.zeros([], jnp.int32)) if scheduled else EmptyState()

    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        new_state = WeightDecaySchedule(safe_increment(state.count)) if scheduled else state
        if isinstance(weight_decay, (int, float)) and weight_decay == 0.0:
            return updates, new_state
        rate = weight_decay(state.count) if scheduled else weight_decay
        updates = tree_map(lambda g, p: None if g is None else g + rate * p, updates, params,
                           is_leaf=lambda x: x is None)
        return updates, new_state

    transform = GradientTransformation(init, update)
    return masked(transform, mask) if mask is not None else transform


class AddNoiseState(NamedTuple):
    """The state of :func:`add_noise`: the step count and the PRNG key for the next step."""
    count: Any
    rng_key: Any


def _as_key(key):
    """An int seed becomes ``random.key(seed)``; a key passes through."""
    if isinstance(key, (int, np.integer)):
        return random.key(int(key))
    return jnp.asarray(key)


def add_noise(eta, gamma, key=None, *, seed: int | None = None) -> GradientTransformation:
    """Annealed Gaussian gradient noise (Neelakantan et al., 2015)::

        update = g + sqrt(eta / t^gamma) * N(0, 1)

    ``key`` is a PRNG key or an int seed (``seed=`` is the older spelling; 0 when neither
    is given). Each step splits the key in the state: one half for the next step, the other
    split again into one key per leaf.

        >>> import functrans.numpy as jnp
        >>> opt = add_noise(eta=0.0, gamma=0.55, key=0)
        >>> opt.update(jnp.ones(2), opt.init(jnp.zeros(2)))[0]
        Array([1., 1.], dtype=float32)
    """
    if seed is not None:
        if key is not None:
            raise ValueError("Only one of seed or key can be specified.")
        key = seed
    if key is None:
        key = 0

    def init(params):
        del params
        return AddNoiseState(jnp.zeros([], jnp.int32), _as_key(key))

    def update(updates, state, params=None):
        del params
        count = safe_increment(state.count)
        stddev = jnp.sqrt(eta / count ** gamma)
        next_key, sample_key = random.split(state.rng_key)
        noise = tree_random_like(sample_key, updates, sampler=random.normal)
        return tree_add_scale(updates, stddev, noise), AddNoiseState(count, next_key)

    return GradientTransformation(init, update)
