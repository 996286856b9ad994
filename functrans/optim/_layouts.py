"""Changing the layout the inner transformation sees: :func:`flatten`."""
from __future__ import annotations

import numpy as np

from functrans import numpy as jnp
from functrans.optim._base import GradientTransformationExtraArgs, with_extra_args_support
from functrans.tree_util import tree_flatten, tree_unflatten

__all__ = ["flatten"]


def _flatten(tree):
    leaves, _ = tree_flatten(tree)
    return jnp.concatenate([jnp.reshape(leaf, [-1]) for leaf in leaves])


def _unflatten(like, flat):
    leaves, treedef = tree_flatten(like)
    offsets = np.cumsum([np.size(leaf) for leaf in leaves])[:-1]
    pieces = jnp.split(flat, [int(o) for o in offsets])
    return tree_unflatten(treedef, [jnp.reshape(piece, jnp.shape(leaf))
                                    for piece, leaf in zip(pieces, leaves)])


def flatten(inner) -> GradientTransformationExtraArgs:
    """Run ``inner`` on all leaves concatenated into one vector (fewer, larger operations;
    the state holds vectors).

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import scale_by_adam
        >>> opt = flatten(scale_by_adam())
        >>> state = opt.init({"a": jnp.zeros(2), "b": jnp.zeros(3)})
        >>> state.mu.shape
        (5,)
    """
    inner = with_extra_args_support(inner)

    def init(params):
        return inner.init(_flatten(params))

    def update(updates, state, params=None, **extra_args):
        if params is not None:
            params = _flatten(params)
        flat_updates, state = inner.update(_flatten(updates), state, params, **extra_args)
        return _unflatten(updates, flat_updates), state

    return GradientTransformationExtraArgs(init, update)
