"""Constraining updates: keep parameters non-negative, replace NaNs."""
from __future__ import annotations

from typing import Any, NamedTuple

from functrans import numpy as jnp
from functrans.optim._base import NO_PARAMS_MSG, EmptyState, GradientTransformation
from functrans.tree_util import tree_map

__all__ = ["NonNegativeParamsState", "keep_params_nonnegative", "ZeroNansState", "zero_nans"]

NonNegativeParamsState = EmptyState


def keep_params_nonnegative() -> GradientTransformation:
    """Change updates so that ``params + updates >= 0``: where the sum would be negative
    the update becomes ``-params`` (landing on 0). Put it last in a chain.

        >>> import functrans.numpy as jnp
        >>> opt = keep_params_nonnegative()
        >>> opt.update(jnp.array([-2.0, 0.5]), opt.init(None), jnp.array([1.0, 1.0]))[0]
        Array([-1. ,  0.5], dtype=float32)
    """
    def init(params):
        del params
        return NonNegativeParamsState()

    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        updates = tree_map(lambda p, u: None if p is None else jnp.where(p + u < 0.0, -p, u),
                           params, updates, is_leaf=lambda x: x is None)
        return updates, state

    return GradientTransformation(init, update)


class ZeroNansState(NamedTuple):
    """The state of :func:`zero_nans`: per leaf, whether the last update had a NaN."""
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
        return ZeroNansState(tree_map(lambda p: jnp.array(False, dtype=jnp.bool_), params))

    def update(updates, state, params=None):
        del params, state
        found = tree_map(lambda p: jnp.any(jnp.isnan(p)), updates)
        cleaned = tree_map(lambda p: jnp.where(jnp.isnan(p), jnp.zeros_like(p), p), updates)
        return cleaned, ZeroNansState(found)

    return GradientTransformation(init, update)
