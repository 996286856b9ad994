"""Applying a transformation to some of the parameters: :func:`masked`.

Masked-out leaves are replaced by :class:`MaskedNode` (a pytree node without leaves) before
the inner transformation sees the tree, so its state keeps the parameters' structure with
``MaskedNode()`` where nothing is stored.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from functrans.optim._base import GradientTransformationExtraArgs, with_extra_args_support
from functrans.optim._tree_state import _ParamsPlaceholder
from functrans.tree_util import tree_leaves, tree_map, tree_structure

__all__ = ["MaskedState", "MaskedNode", "masked"]


class MaskedState(NamedTuple):
    """The state of :func:`masked`: the inner transformation's state."""
    inner_state: Any


class MaskedNode(NamedTuple):
    """Stands for a masked-out subtree: a node with no leaves, so it takes no state."""


def _mask_callable(mask) -> bool:
    flags = tree_leaves(tree_map(callable, mask))
    return len(flags) > 0 and all(flags)


def masked(inner, mask, *, mask_compatible_extra_args: bool = False
           ) -> GradientTransformationExtraArgs:
    """Apply ``inner`` only where ``mask`` is True; other updates pass through unchanged and
    get no state. ``mask`` is a pytree of bools with the parameters' structure (or a prefix
    of it), or a function of the params/updates giving one. With
    ``mask_compatible_extra_args`` extra arguments shaped like the updates are masked too.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import scale
        >>> opt = masked(scale(0.0), {"frozen": True, "trained": False})
        >>> params = {"frozen": jnp.ones(1), "trained": jnp.ones(1)}
        >>> opt.update(params, opt.init(params))[0]
        {'frozen': Array([0.], dtype=float32), 'trained': Array([1.], dtype=float32)}
    """
    inner = with_extra_args_support(inner)

    def mask_pytree(pytree, mask_tree):
        return tree_map(lambda m, p: p if m else MaskedNode(), mask_tree, pytree)

    def mask_extra_args(extra_args, updates, mask_tree):
        structure = tree_structure(updates)

        def maybe_mask(value):
            if mask_compatible_extra_args and tree_structure(value) == structure:
                return mask_pytree(value, mask_tree)
            return value
        return {k: maybe_mask(v) for k, v in extra_args.items()}

    def init(params):
        if isinstance(params, _ParamsPlaceholder):   # tree_map_params marks, nothing to mask
            return MaskedState(inner.init(params))
        mask_tree = mask(params) if _mask_callable(mask) else mask
        return MaskedState(inner.init(mask_pytree(params, mask_tree)))

    def update(updates, state, params=None, **extra_args):
        mask_tree = mask(updates) if _mask_callable(mask) else mask
        masked_extra_args = mask_extra_args(extra_args, updates, mask_tree)
        masked_params = None if params is None else mask_pytree(params, mask_tree)
        new_masked, inner_state = inner.update(mask_pytree(updates, mask_tree),
                                               state.inner_state, masked_params,
                                               **masked_extra_args)
        new_updates = tree_map(lambda m, new, old: new if m else old, mask_tree, new_masked,
                               updates)
        return new_updates, MaskedState(inner_state)

    return GradientTransformationExtraArgs(init, update)
