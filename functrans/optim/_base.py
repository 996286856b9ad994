"""The gradient-transformation interface: types, the empty state, and the trivial
transformations.

A :class:`GradientTransformation` is a pair of pure functions: ``init(params) -> state`` and
``update(updates, state, params=None) -> (updates, state)``. A
:class:`GradientTransformationExtraArgs` also accepts keyword arguments in ``update`` (the
loss ``value``, a ``value_fn`` for line searches, ...); :func:`chain` hands them to the parts
that take them. States are pytrees of arrays (NamedTuples), step counters are int32 arrays,
so ``init`` and ``update`` can be jitted, vmapped and checkpointed like any other function of
arrays.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, NamedTuple, Protocol, Union, \
    runtime_checkable

from functrans import _dtypes
from functrans import numpy as jnp
from functrans.tree_util import tree_map

__all__ = ["GradientTransformation", "GradientTransformationExtraArgs", "EmptyState",
           "TransformInitFn", "TransformUpdateFn", "TransformUpdateExtraArgsFn",
           "OptState", "Params", "Updates", "Schedule", "ScalarOrSchedule",
           "identity", "set_to_zero", "stateless", "stateless_with_tree_map",
           "init_empty_state", "with_extra_args_support"]

NO_PARAMS_MSG = ("You are using a transformation that requires the current value of "
                 "parameters, but you are not passing `params` when calling `update`.")

# ---- types ------------------------------------------------------------------------------------

PyTree = Any
ArrayTree = Union[Any, Iterable["ArrayTree"], Mapping[Any, "ArrayTree"]]
OptState = ArrayTree   # a pytree of arrays
Params = ArrayTree     # a pytree of parameters
Updates = Params       # gradient-shaped pytrees
Schedule = Callable[[Any], Any]   # step count -> value
ScalarOrSchedule = Union[float, Any, Schedule]


@runtime_checkable
class StatefulSchedule(Protocol):
    """A schedule that keeps state: ``init() -> state``, ``update(state, **extra_args) ->
    state`` and ``__call__(state, **extra_args) -> value``."""

    def init(self) -> Any: ...

    def update(self, state, **extra_args) -> Any: ...

    def __call__(self, state, **extra_args) -> Any: ...


class TransformInitFn(Protocol):
    """``init(params) -> state``."""

    def __call__(self, params) -> OptState: ...


class TransformUpdateFn(Protocol):
    """``update(updates, state, params=None) -> (updates, state)``."""

    def __call__(self, updates, state, params=None) -> tuple: ...


class TransformUpdateExtraArgsFn(Protocol):
    """``update(updates, state, params=None, **extra_args) -> (updates, state)``."""

    def __call__(self, updates, state, params=None, **extra_args) -> tuple: ...


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
    init: TransformInitFn
    update: TransformUpdateFn


class GradientTransformationExtraArgs(GradientTransformation):
    """A :class:`GradientTransformation` whose ``update`` also takes keyword arguments
    (``update(updates, state, params=None, **extra_args)``), e.g. the loss ``value`` for
    Polyak steps or ``value_fn`` for line searches.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import polyak_sgd
        >>> opt = polyak_sgd()
        >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)), value=jnp.array(1.0))[0]
        Array([-0.5], dtype=float32)
    """
    update: TransformUpdateExtraArgsFn


class EmptyState(NamedTuple):
    """The state of a stateless transformation."""


def init_empty_state(params) -> EmptyState:
    """The ``init`` of a stateless transformation: ignores ``params``.

        >>> init_empty_state({"w": 1.0})
        EmptyState()
    """
    del params
    return EmptyState()


def with_extra_args_support(tx: GradientTransformation) -> GradientTransformationExtraArgs:
    """``tx`` as a :class:`GradientTransformationExtraArgs`: its ``update`` accepts and
    ignores keyword arguments (unless it already takes them).

        >>> opt = with_extra_args_support(identity())
        >>> opt.update(1.0, EmptyState(), value=3.0)[0]
        1.0
    """
    if isinstance(tx, GradientTransformationExtraArgs):
        return tx

    def update(updates, state, params=None, **extra_args):
        del extra_args
        return tx.update(updates, state, params)

    return GradientTransformationExtraArgs(tx.init, update)


def identity() -> GradientTransformation:
    """Leave updates unchanged.

        >>> identity().update(1.0, EmptyState())[0]
        1.0
    """
    def update(updates, state, params=None):
        del params
        return updates, state
    return GradientTransformation(init_empty_state, update)


def set_to_zero() -> GradientTransformation:
    """Replace every update by zeros (freezes the parameters it applies to).

        >>> import functrans.numpy as jnp
        >>> set_to_zero().update(jnp.ones(2), EmptyState())[0]
        Array([0., 0.], dtype=float32)
    """
    def update(updates, state, params=None):
        del params
        return tree_map(jnp.zeros_like, updates), state
    return GradientTransformation(init_empty_state, update)


def stateless(f: Callable) -> GradientTransformation:
    """A transformation from ``f(updates, params) -> updates`` with no state.

        >>> import functrans.numpy as jnp
        >>> opt = stateless(lambda g, p: {"w": g["w"] + p["w"]})
        >>> opt.update({"w": jnp.ones(1)}, EmptyState(), {"w": jnp.ones(1)})[0]
        {'w': Array([2.], dtype=float32)}
    """
    def update(updates, state, params=None):
        del state
        return f(updates, params), EmptyState()
    return GradientTransformation(init_empty_state, update)


def stateless_with_tree_map(f: Callable) -> GradientTransformation:
    """A stateless transformation applying ``f(update_leaf, param_leaf)`` leafwise (``f``
    gets ``None`` for the parameter when ``update`` is called without params).

        >>> import functrans.numpy as jnp
        >>> opt = stateless_with_tree_map(lambda g, p: 2 * g)
        >>> opt.update({"w": jnp.ones(1)}, EmptyState())[0]
        {'w': Array([2.], dtype=float32)}
    """
    def update(updates, state, params=None):
        del state
        if params is not None:
            return tree_map(f, updates, params), EmptyState()
        return tree_map(lambda u: f(u, None), updates), EmptyState()
    return GradientTransformation(init_empty_state, update)


# ---- helpers ----------------------------------------------------------------------------------

def canonicalize_dtype(dtype):
    """``dtype`` as the dtype arrays get (float64 -> float32 without x64); None stays None."""
    return None if dtype is None else _dtypes.canonicalize_dtype(dtype)
