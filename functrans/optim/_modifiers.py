"""Transformations that adjust updates without adapting to their history: averaging,
gradient noise, NaN handling, per-block clipping, constraints and centralization.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from functrans import _dtypes, lax, random
from functrans import numpy as jnp
from functrans.core import get_aval
from functrans.numpy._promotion import to_array
from functrans.optim._base import (EmptyState, GradientTransformation, cast, count_zero,
                                   safe_increment, where, zeros_like)
from functrans.optim._transforms import _bias_correct, _moment
from functrans.tree_util import tree_flatten, tree_map, tree_unflatten

__all__ = ["EmaState", "AddNoiseState", "ZeroNansState", "NonNegativeParamsState",
           "ema", "add_noise", "zero_nans", "clip_by_block_rms", "keep_params_nonnegative",
           "centralize"]


class EmaState(NamedTuple):
    count: Any
    ema: Any


def ema(decay, debias: bool = True, accumulator_dtype=None) -> GradientTransformation:
    """Exponential moving average of the updates: ``e = decay e + (1 - decay) g``; the
    update is ``e``, or ``e / (1 - decay^t)`` with ``debias``.

        >>> import functrans.numpy as jnp
        >>> opt = ema(0.5)
        >>> opt.update(jnp.array([4.0]), opt.init(jnp.zeros(1)))[0]
        Array([4.], dtype=float32)
    """
    accumulator_dtype = None if accumulator_dtype is None else \
        _dtypes.canonicalize_dtype(accumulator_dtype)

    def init(params):
        return EmaState(count_zero(), tree_map(lambda p: zeros_like(p, accumulator_dtype), params))

    def update(updates, state, params=None):
        new_ema = tree_map(lambda g, e: _moment(g, e, decay, 1), updates, state.ema)
        count = safe_increment(state.count)
        out = _bias_correct(new_ema, decay, count) if debias else new_ema
        out = tree_map(lambda u, g: cast(u, g), out, updates)
        return out, EmaState(count, new_ema)

    return GradientTransformation(init, update)


class AddNoiseState(NamedTuple):
    count: Any
    rng_key: Any


def _as_key(key):
    """An int seed becomes ``PRNGKey(seed)``; a key passes through."""
    if isinstance(key, (int, np.integer)):
        return random.PRNGKey(int(key))
    return to_array(key)


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
            raise ValueError("add_noise: give either key or seed, not both")
        key = seed
    if key is None:
        key = 0

    def init(params):
        return AddNoiseState(count_zero(), _as_key(key))

    def update(updates, state, params=None):
        count = safe_increment(state.count)
        t = lax.convert_element_type(count, _dtypes.default_float_dtype())
        stddev = jnp.sqrt(eta / t ** gamma)
        next_key, sample_key = random.split(state.rng_key)
        leaves, treedef = tree_flatten(updates)
        leaf_keys = random.split(sample_key, len(leaves)) if leaves else []
        noisy = []
        for i, g in enumerate(leaves):
            g = to_array(g)
            aval = get_aval(g)
            noise = random.normal(leaf_keys[i], aval.shape, aval.dtype)
            noisy.append(g + cast(stddev, g) * noise)
        return tree_unflatten(treedef, noisy), AddNoiseState(count, next_key)

    return GradientTransformation(init, update)


class ZeroNansState(NamedTuple):
    found_nan: Any


def zero_nans() -> GradientTransformation:
    """Replace NaNs in the updates by 0. The state holds one bool per leaf: whether the
    last update had a NaN there.

        >>> import functrans.numpy as jnp
        >>> opt = zero_nans()
        >>> updates, state = opt.update(jnp.array([1.0, jnp.nan]), opt.init(jnp.zeros(2)))
        >>> updates, state.found_nan
        (Array([1., 0.], dtype=float32), Array(True, dtype=bool))
    """
    def init(params):
        return ZeroNansState(tree_map(lambda p: lax.full((), False, np.dtype(np.bool_)), params))

    def update(updates, state, params=None):
        found = tree_map(lambda g: jnp.any(jnp.isnan(g)), updates)
        cleaned = tree_map(lambda g: where(jnp.isnan(g), zeros_like(g), g), updates)
        return cleaned, ZeroNansState(found)

    return GradientTransformation(init, update)


def clip_by_block_rms(threshold) -> GradientTransformation:
    """Clip each leaf so its root mean square is at most ``threshold``:
    ``g / max(1, rms(g) / threshold)``.

        >>> import functrans.numpy as jnp
        >>> clip_by_block_rms(1.0).update(jnp.array([3.0, -3.0]), EmptyState())[0]
        Array([ 1., -1.], dtype=float32)
    """
    def update(updates, state, params=None):
        def clipped(g):
            g = to_array(g)
            rms = jnp.sqrt(jnp.mean(g * g))
            return g / cast(jnp.maximum(1.0, rms / threshold), g)
        return tree_map(clipped, updates), state
    return GradientTransformation(lambda params: EmptyState(), update)


class NonNegativeParamsState(NamedTuple):
    """The (empty) state of :func:`keep_params_nonnegative`."""


def keep_params_nonnegative() -> GradientTransformation:
    """Change updates so that ``params + updates >= 0``: where the sum would be negative
    the update becomes ``-params`` (landing on 0). Put it last in a chain.

        >>> import functrans.numpy as jnp
        >>> opt = keep_params_nonnegative()
        >>> opt.update(jnp.array([-2.0, 0.5]), opt.init(None), jnp.array([1.0, 1.0]))[0]
        Array([-1. ,  0.5], dtype=float32)
    """
    def update(updates, state, params=None):
        if params is None:
            raise ValueError("keep_params_nonnegative needs params: call update(updates, "
                             "state, params)")
        return tree_map(lambda u, p: where(cast(p, u) + u < 0, -cast(p, u), u),
                        updates, params), state
    return GradientTransformation(lambda params: NonNegativeParamsState(), update)


def centralize() -> GradientTransformation:
    """Gradient centralization (Yong et al., 2020): from every leaf of rank >= 2 subtract
    its mean over all axes but the first; vectors and scalars pass unchanged.

        >>> import functrans.numpy as jnp
        >>> centralize().update(jnp.array([[1.0, 2.0, 3.0], [4.0, 5.0, 9.0]]), EmptyState())[0]
        Array([[-1.,  0.,  1.],
               [-2., -1.,  3.]], dtype=float32)
    """
    def centered(g):
        g = to_array(g)
        ndim = get_aval(g).ndim
        if ndim < 2:
            return g
        return g - jnp.mean(g, axis=tuple(range(1, ndim)), keepdims=True)

    def update(updates, state, params=None):
        return tree_map(centered, updates), state
    return GradientTransformation(lambda params: EmptyState(), update)
