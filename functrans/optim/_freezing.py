"""Freezing parameters: their updates become zeros."""
from __future__ import annotations

from functrans.optim._base import GradientTransformationExtraArgs, set_to_zero
from functrans.optim._combining import partition
from functrans.optim._masking import masked
from functrans.tree_util import tree_map

__all__ = ["freeze", "selective_transform"]


def freeze(mask) -> GradientTransformationExtraArgs:
    """Zero the updates where ``mask`` (a pytree of bools, or a prefix of the parameters'
    structure) is True; chain it with an optimizer to freeze those parameters.

        >>> import functrans.numpy as jnp
        >>> opt = freeze({"a": True, "b": False})
        >>> params = {"a": jnp.ones(1), "b": jnp.ones(1)}
        >>> opt.update(params, opt.init(params))[0]
        {'a': Array([0.], dtype=float32), 'b': Array([1.], dtype=float32)}
    """
    return masked(set_to_zero(), mask)


def selective_transform(optimizer, *, freeze_mask) -> GradientTransformationExtraArgs:
    """Run ``optimizer`` only on the parameters not marked in ``freeze_mask``; frozen ones
    get zero updates and no optimizer state.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import sgd
        >>> opt = selective_transform(sgd(1.0), freeze_mask={"a": True, "b": False})
        >>> params = {"a": jnp.ones(1), "b": jnp.ones(1)}
        >>> opt.update(params, opt.init(params))[0]
        {'a': Array([0.], dtype=float32), 'b': Array([-1.], dtype=float32)}
    """
    def labels(params):
        del params
        return tree_map(lambda frozen: "freeze" if frozen else "train", freeze_mask)
    return partition({"train": optimizer, "freeze": set_to_zero()}, param_labels=labels)
