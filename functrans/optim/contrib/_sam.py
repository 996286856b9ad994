"""Sharpness-aware minimization (SAM, Foret et al., 2021): step to the worst point nearby,
then update the original parameters with the gradient there."""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from functrans import lax
from functrans import numpy as jnp
from functrans.optim._base import EmptyState, GradientTransformation, \
    GradientTransformationExtraArgs
from functrans.optim._tree_math import tree_norm
from functrans.optim._update import apply_updates
from functrans.tree_util import tree_map

__all__ = ["NormalizeState", "normalize", "SAMState", "sam"]

NormalizeState = EmptyState


def normalize() -> GradientTransformation:
    """Divide the updates by their global norm.

        >>> import functrans.numpy as jnp
        >>> opt = normalize()
        >>> opt.update(jnp.array([3.0, 4.0]), opt.init(None))[0]
        Array([0.6, 0.8], dtype=float32)
    """
    def init(params):
        del params
        return NormalizeState()

    def update(updates, state, params=None):
        del params
        norm = tree_norm(updates)
        return tree_map(lambda g: g / norm, updates), state

    return GradientTransformation(init, update)


class SAMState(NamedTuple):
    """The state of :func:`sam`: the position in the ascent/descent cycle, both
    optimizers' states, and (transparent mode) the parameters at the cycle's start."""
    steps_since_sync: Any
    opt_state: Any
    adv_state: Any
    cache: Any


def sam(optimizer: GradientTransformation, adv_optimizer: GradientTransformation,
        sync_period: int = 2, reset_state: bool = True, opaque_mode: bool = False,
        batch_axis_name: str | None = None) -> GradientTransformationExtraArgs:
    """SAM: ``sync_period - 1`` ascent steps by ``adv_optimizer`` (its updates negated,
    e.g. ``chain(normalize(), sgd(rho))``), then one step of ``optimizer`` from the cached
    starting parameters with the gradient at the perturbed point.

    Transparent mode (default): each call is one of these steps, driven by the caller's
    gradients at the current parameters. Opaque mode: one call does the whole cycle,
    evaluating gradients with ``update(..., grad_fn=fn(params, i))``; ``batch_axis_name``
    averages them across that axis.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import sgd, chain
        >>> opt = sam(sgd(0.1), chain(normalize(), sgd(0.05)))
        >>> p = jnp.array([1.0, 1.0])
        >>> state = opt.init(p)
        >>> up, state = opt.update(2 * p, state, p)        # ascent to the perturbed point
        >>> p2 = p + up
        >>> down, state = opt.update(2 * p2, state, p2)    # descend from p with that gradient
        >>> p2 + down
        Array([0.79292893, 0.79292893], dtype=float32)
    """
    if sync_period < 1:
        raise ValueError("Synchronization period must be >= 1.")

    def init(params):
        return SAMState(jnp.zeros(shape=(), dtype=jnp.int32), optimizer.init(params),
                        adv_optimizer.init(params), None if opaque_mode else params)

    def pick(condition, if_true, if_false):
        return tree_map(lambda t, f: condition * t + (1 - condition) * f, if_true, if_false)

    def transparent_update(updates, state, params=None, *, grad_fn: Callable | None = None):
        del grad_fn
        first_step = state.steps_since_sync == 0
        last_step = state.steps_since_sync == sync_period - 1
        adv_updates, adv_state = adv_optimizer.update(updates, state.adv_state, params)
        adv_updates = tree_map(lambda x: -x, adv_updates)
        opt_updates, opt_state = optimizer.update(updates, state.opt_state, state.cache)
        # the descent step starts from the cached parameters, not the perturbed ones
        opt_updates = tree_map(lambda c, p, u: c - p + u, state.cache, params, opt_updates)
        cache = pick(first_step, params, state.cache)
        updates = pick(last_step, opt_updates, adv_updates)
        if reset_state:
            adv_state = pick(last_step, adv_optimizer.init(params), adv_state)
        else:
            adv_state = pick(last_step, state.adv_state, adv_state)
        opt_state = pick(last_step, opt_state, state.opt_state)
        return updates, SAMState((state.steps_since_sync + 1) % sync_period, opt_state,
                                 adv_state, cache)

    def opaque_update(updates, state, params=None, *, grad_fn: Callable | None = None):
        if grad_fn is None:
            raise ValueError("grad_fn must be provided when opaque_mode=True.")
        adv_params, adv_updates, adv_state = params, updates, state.adv_state
        for i in range(sync_period - 1):
            adv_updates, adv_state = adv_optimizer.update(adv_updates, adv_state, adv_params)
            adv_params = apply_updates(adv_params, tree_map(lambda x: -x, adv_updates))
            adv_updates = grad_fn(adv_params, i)
            if batch_axis_name is not None:
                adv_updates = lax.pmean(adv_updates, axis_name=batch_axis_name)
        if reset_state:
            adv_state = adv_optimizer.init(params)
        updates, opt_state = optimizer.update(adv_updates, state.opt_state, params)
        return updates, SAMState(jnp.zeros(shape=(), dtype=jnp.int32), opt_state, adv_state,
                                 None)

    return GradientTransformationExtraArgs(init, opaque_update if opaque_mode
                                           else transparent_update)
