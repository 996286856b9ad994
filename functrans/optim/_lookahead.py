"""Lookahead (Zhang et al., 2019): a fast optimizer explores for ``sync_period`` steps,
then slow weights move part of the way towards where it got and the fast weights restart
from there.
"""
from __future__ import annotations

import logging
from typing import Any, NamedTuple

from functrans import numpy as jnp
from functrans.optim._base import GradientTransformation
from functrans.tree_util import tree_map

__all__ = ["LookaheadState", "LookaheadParams", "lookahead"]


class LookaheadState(NamedTuple):
    """The state of :func:`lookahead`: the fast optimizer's state and the steps since the
    last synchronisation."""
    fast_state: Any
    steps_since_sync: Any


class LookaheadParams(NamedTuple):
    """The parameters :func:`lookahead` works on: the fast and the slow copy."""
    fast: Any
    slow: Any

    @classmethod
    def init_synced(cls, params) -> "LookaheadParams":
        """Fast and slow parameters both equal to ``params``."""
        return cls(slow=params, fast=params)


def lookahead(fast_optimizer: GradientTransformation, sync_period: int, slow_step_size,
              reset_state: bool = False) -> GradientTransformation:
    """Wrap ``fast_optimizer`` in Lookahead. The parameters are a :class:`LookaheadParams`
    (``LookaheadParams.init_synced(params)``) and the gradients are those at
    ``params.fast``. On every ``sync_period``-th step the slow weights move
    ``slow_step_size`` of the way to the fast ones and the fast weights are set to the
    result (``reset_state`` also re-initializes the fast optimizer's state). Evaluate with
    ``params.slow``; apply the updates unchanged.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import sgd, apply_updates
        >>> opt = lookahead(sgd(1.0), sync_period=2, slow_step_size=0.5)
        >>> params = LookaheadParams.init_synced(jnp.zeros(1))
        >>> state = opt.init(params)
        >>> for _ in range(2):
        ...     grads = jnp.ones(1)          # the gradient at params.fast
        ...     updates, state = opt.update(grads, state, params)
        ...     params = apply_updates(params, updates)
        >>> params.fast, params.slow
        (Array([-1.], dtype=float32), Array([-1.], dtype=float32))
    """
    if sync_period < 1:
        raise ValueError("Synchronization period must be >= 1.")

    def init(params):
        fast_params = getattr(params, "fast", None)
        if fast_params is None:
            logging.warning("`params` has no attribute `fast`. Continuing by assuming that "
                            "only fast parameters were passed to lookahead init.")
            fast_params = params
        return LookaheadState(fast_optimizer.init(fast_params), jnp.zeros((), jnp.int32))

    def update(updates, state, params=None):
        # updates are the gradients at the fast parameters
        updates, fast_state = fast_optimizer.update(updates, state.fast_state, params.fast)
        sync_next = state.steps_since_sync == sync_period - 1
        updates = _lookahead_update(updates, sync_next, params, slow_step_size)
        if reset_state:
            initial = fast_optimizer.init(params.fast)
            fast_state = tree_map(lambda now, init: (1 - sync_next) * now + sync_next * init,
                                  fast_state, initial)
        return updates, LookaheadState(fast_state, (state.steps_since_sync + 1) % sync_period)

    return GradientTransformation(init, update)


def _lookahead_update(updates, sync_next, params, slow_step_size) -> LookaheadParams:
    """The fast update, and on a sync step the slow update plus the fast weights' jump to
    the new slow weights."""
    difference = tree_map(lambda f, u, s: f + u - s, params.fast, updates, params.slow)
    slow_updates = tree_map(lambda d: slow_step_size * sync_next * d, difference)
    fast_updates = tree_map(lambda u, d: u - sync_next * (1 - slow_step_size) * d, updates,
                            difference)
    return LookaheadParams(fast=fast_updates, slow=slow_updates)
