"""Differentially private SGD (Abadi et al., 2016): clip per-example gradients and add
Gaussian noise."""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from functrans import numpy as jnp
from functrans import random
from functrans.optim._base import GradientTransformation, GradientTransformationExtraArgs, \
    identity
from functrans.optim._clipping import per_example_global_norm_clip
from functrans.optim._combining import chain
from functrans.optim._momentum import trace
from functrans.optim._scaling import scale_by_learning_rate
from functrans.tree_util import tree_flatten, tree_unflatten

__all__ = ["DifferentiallyPrivateAggregateState", "differentially_private_aggregate", "dpsgd"]


class DifferentiallyPrivateAggregateState(NamedTuple):
    """The state of :func:`differentially_private_aggregate`: the PRNG key."""
    rng_key: Any


def _as_key(key_or_seed):
    if isinstance(key_or_seed, (int, np.integer)):
        return random.key(int(key_or_seed))
    return jnp.asarray(key_or_seed)


def differentially_private_aggregate(l2_norm_clip, noise_multiplier, key=None, *,
                                     seed: int | None = None) -> GradientTransformation:
    """Aggregate per-example gradients (axis 0 of every leaf) privately: clip each
    example's gradient to global norm ``l2_norm_clip``, sum, add Gaussian noise of standard
    deviation ``l2_norm_clip * noise_multiplier`` and divide by the batch size. ``key`` is
    a PRNG key or int seed (``seed=`` the older spelling; 0 when neither is given).

        >>> import functrans.numpy as jnp
        >>> opt = differentially_private_aggregate(1.0, 0.0, key=0)
        >>> grads = jnp.array([[3.0, 4.0], [0.3, 0.4]])
        >>> opt.update(grads, opt.init(None))[0]    # mean of the clipped gradients
        Array([0.45000002, 0.6       ], dtype=float32)
    """
    if seed is not None:
        if key is not None:
            raise ValueError("Only one of seed or key can be specified.")
        key = seed
    key = _as_key(0 if key is None else key)
    noise_std = l2_norm_clip * noise_multiplier

    def init(params):
        del params
        return DifferentiallyPrivateAggregateState(key)

    def update(updates, state, params=None):
        del params
        leaves, treedef = tree_flatten(updates)
        batch_size = leaves[0].shape[0]
        clipped, _ = per_example_global_norm_clip(leaves, l2_norm_clip)
        new_key, *keys = random.split(state.rng_key, len(leaves) + 1)
        noised = [(g + noise_std * random.normal(k, g.shape, g.dtype)) / batch_size
                  for g, k in zip(clipped, keys)]
        return tree_unflatten(treedef, noised), DifferentiallyPrivateAggregateState(new_key)

    return GradientTransformation(init, update)


def dpsgd(learning_rate, l2_norm_clip, noise_multiplier, seed: int, momentum=None,
          nesterov: bool = False) -> GradientTransformationExtraArgs:
    """DP-SGD: :func:`differentially_private_aggregate` of per-example gradients, optional
    (Nesterov) momentum, the learning rate."""
    return chain(differentially_private_aggregate(l2_norm_clip=l2_norm_clip,
                                                  noise_multiplier=noise_multiplier, seed=seed),
                 trace(decay=momentum, nesterov=nesterov) if momentum is not None
                 else identity(),
                 scale_by_learning_rate(learning_rate))
