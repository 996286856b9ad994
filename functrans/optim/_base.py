"""The gradient-transformation interface, composition, and leafwise helpers.

A :class:`GradientTransformation` is a pair of pure functions: ``init(params) -> state`` and
``update(updates, state, params=None) -> (updates, state)``. States are pytrees of arrays
(NamedTuples), step counters are int32 arrays, so ``init`` and ``update`` can be jitted,
vmapped and checkpointed like any other function of arrays.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from functrans import _dtypes, lax
from functrans.core import get_aval
from functrans.numpy._promotion import to_array
from functrans.tree_util import tree_leaves, tree_map

__all__ = ["GradientTransformation", "EmptyState", "chain", "identity", "set_to_zero",
           "stateless", "apply_updates", "global_norm"]


class GradientTransformation(NamedTuple):
    """``init(params) -> state`` and ``update(updates, state, params=None) -> (updates,
    state)``: one step of turning gradients into parameter updates.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import scale
        >>> opt = scale(-0.1)
        >>> state = opt.init({"w": jnp.ones(2)})
        >>> opt.update({"w": jnp.ones(2)}, state)[0]
        {'w': Array([-0.1, -0.1], dtype=float32)}
    """
    init: Callable
    update: Callable


class EmptyState(NamedTuple):
    """The state of a stateless transformation."""


def chain(*transforms: GradientTransformation) -> GradientTransformation:
    """Apply ``transforms`` one after another; the state is the tuple of their states.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import clip, scale
        >>> opt = chain(clip(1.0), scale(-0.5))
        >>> opt.update(jnp.array([4.0]), opt.init(jnp.zeros(1)))[0]
        Array([-0.5], dtype=float32)
    """
    def init(params):
        return tuple(t.init(params) for t in transforms)

    def update(updates, state, params=None):
        if len(state) != len(transforms):
            raise ValueError(f"chain: the state has {len(state)} parts for "
                             f"{len(transforms)} transformations; was it made by this chain?")
        new_state = []
        for t, s in zip(transforms, state):
            updates, s = t.update(updates, s, params)
            new_state.append(s)
        return updates, tuple(new_state)

    return GradientTransformation(init, update)


def identity() -> GradientTransformation:
    """Leave updates unchanged.

        >>> identity().update(1.0, EmptyState())[0]
        1.0
    """
    return GradientTransformation(lambda params: EmptyState(),
                                  lambda updates, state, params=None: (updates, state))


def set_to_zero() -> GradientTransformation:
    """Replace every update by zeros (freezes the parameters it applies to)."""
    def update(updates, state, params=None):
        return tree_map(zeros_like, updates), state
    return GradientTransformation(lambda params: EmptyState(), update)


def stateless(fn: Callable) -> GradientTransformation:
    """A transformation from ``fn(updates, params) -> updates`` with no state."""
    def update(updates, state, params=None):
        return fn(updates, params), state
    return GradientTransformation(lambda params: EmptyState(), update)


def apply_updates(params, updates):
    """``params + updates`` leafwise, keeping each parameter's dtype.

        >>> import functrans.numpy as jnp
        >>> apply_updates({"w": jnp.ones(2)}, {"w": jnp.full(2, 0.5)})
        {'w': Array([1.5, 1.5], dtype=float32)}
    """
    def apply(p, u):
        p = to_array(p)
        return lax.convert_element_type(to_array(p) + u, get_aval(p).dtype)
    return tree_map(apply, params, updates)


def global_norm(updates):
    """The L2 norm of all leaves of a pytree taken together.

        >>> import functrans.numpy as jnp
        >>> global_norm({"a": jnp.array([3.0]), "b": jnp.array([4.0])})
        Array(5., dtype=float32)
    """
    total = None
    for leaf in tree_leaves(updates):
        leaf = to_array(leaf)
        squares = lax.reduce_sum(lax.mul(leaf, leaf), tuple(range(get_aval(leaf).ndim)))
        total = squares if total is None else total + squares
    if total is None:
        return lax.full((), 0.0, _dtypes.default_float_dtype())
    return lax.sqrt(total)


# ---- leafwise helpers used by the transformations ---------------------------------------------

def zeros_like(x, dtype=None):
    aval = get_aval(to_array(x))
    return lax.full(aval.shape, 0, aval.dtype if dtype is None else dtype)


def full_like(x, value, dtype=None):
    aval = get_aval(to_array(x))
    return lax.full(aval.shape, value, aval.dtype if dtype is None else dtype)


def where(condition, x, y):
    """``x`` where ``condition`` else ``y``; a scalar condition or scalar operands broadcast."""
    x, y = to_array(x), to_array(y)
    shape = np.broadcast_shapes(get_aval(x).shape, get_aval(y).shape, get_aval(condition).shape)
    dtype = get_aval(x).dtype
    x = _broadcast(lax.convert_element_type(x, dtype), shape)
    y = _broadcast(lax.convert_element_type(y, dtype), shape)
    condition = to_array(condition)
    if get_aval(condition).shape != ():
        condition = _broadcast(condition, shape)
    return lax.select(condition, x, y)


def _broadcast(x, shape):
    from functrans.numpy._promotion import broadcast_to_shape
    return broadcast_to_shape(x, shape)


def cast(x, like):
    """``x`` converted to the dtype of ``like``."""
    return lax.convert_element_type(to_array(x), get_aval(to_array(like)).dtype)


def sqrt(x):
    return lax.sqrt(to_array(x))


def count_zero():
    """A fresh int32 step counter."""
    return lax.full((), 0, _dtypes.int32)


def safe_increment(count):
    """``count + 1``, saturating at the int32 maximum instead of wrapping around."""
    limit = np.iinfo(np.int32).max
    return lax.select(lax.lt(count, lax.full((), limit, _dtypes.int32)),
                      lax.add(count, lax.full((), 1, _dtypes.int32)),
                      lax.full((), limit, _dtypes.int32))


