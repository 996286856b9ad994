"""Applying updates to parameters, and moving averages of parameters."""
from __future__ import annotations

from functrans import lax
from functrans import numpy as jnp
from functrans.tree_util import tree_map

__all__ = ["apply_updates", "incremental_update", "periodic_update"]


def _is_none(x) -> bool:
    return x is None


def apply_updates(params, updates):
    """``params + updates`` leafwise, keeping each parameter's dtype (None leaves of
    ``params`` stay None).

        >>> import functrans.numpy as jnp
        >>> apply_updates({"w": jnp.ones(2)}, {"w": jnp.full(2, 0.5)})
        {'w': Array([1.5, 1.5], dtype=float32)}
    """
    return tree_map(
        lambda p, u: None if p is None else jnp.asarray(p + u).astype(jnp.asarray(p).dtype),
        params, updates, is_leaf=_is_none)


def incremental_update(new_tensors, old_tensors, step_size):
    """The moving average ``step_size * new + (1 - step_size) * old`` leafwise (Polyak
    averaging of target-network parameters).

        >>> import functrans.numpy as jnp
        >>> incremental_update({"w": jnp.ones(2)}, {"w": jnp.zeros(2)}, 0.25)
        {'w': Array([0.25, 0.25], dtype=float32)}
    """
    return tree_map(
        lambda new, old: None if new is None else step_size * new + (1.0 - step_size) * old,
        new_tensors, old_tensors, is_leaf=_is_none)


def periodic_update(new_tensors, old_tensors, steps, update_period: int):
    """``new_tensors`` on every ``update_period``-th step (``steps % update_period == 0``),
    else ``old_tensors`` (periodic target-network refresh).

        >>> import functrans.numpy as jnp
        >>> periodic_update({"w": jnp.ones(1)}, {"w": jnp.zeros(1)}, jnp.asarray(4), 2)
        {'w': Array([1.], dtype=float32)}
    """
    return lax.cond(jnp.mod(steps, update_period) == 0, lambda _: new_tensors,
                    lambda _: old_tensors, None)
