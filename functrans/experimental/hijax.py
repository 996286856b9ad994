"""``jax.experimental.hijax``: user-defined "high-level" types and primitives (a type whose
values are lowered to ordinary arrays by rules the library writes).

functrans's transforms work on arrays and pytrees of arrays only; they have no notion of a
high-level type with its own lowering. This module lets a library *declare* such types and
primitives (so a library that defines them optionally, as flax.nnx's "hijax variables" do,
imports and runs its array-based paths), but binding a :class:`HiPrimitive` raises
``NotImplementedError``, and so does :func:`cur_qdd`.
"""
from __future__ import annotations

from typing import NamedTuple

from functrans.core import Primitive, ShapedArray
from functrans.interpreters.ad import Zero, instantiate_zeros, is_undefined_primal  # noqa: F401

__all__ = ["AbstractValue", "AvalMutableQDD", "AvalQDD", "HiPrimitive", "HiType",
           "MutableHiType", "Zero", "aval_method", "aval_property",
           "control_flow_allowed_effects", "cur_qdd", "instantiate_zeros",
           "is_undefined_primal", "register_hitype", "registered_hitypes"]

AbstractValue = ShapedArray

_UNSUPPORTED = ("high-level (hijax) types and primitives are not supported by functrans: its "
                "transforms work on arrays and pytrees of arrays")


class HiType:
    """The base of a high-level abstract type."""


class MutableHiType(HiType):
    """The base of a mutable high-level abstract type."""


class AvalQDD(NamedTuple):
    aval: object
    qdd: object


class AvalMutableQDD(NamedTuple):
    aval: object
    mutable_qdd: object


class HiPrimitive(Primitive):
    """A primitive over high-level types; declared here, never bound."""

    def __init__(self, name: str):
        super().__init__(name)
        self.multiple_results = False

    def bind(self, *args, **params):
        raise NotImplementedError(f"{self.name}: {_UNSUPPORTED}")


# high-level value class -> function giving its abstract type (declarations only)
registered_hitypes: dict = {}


def register_hitype(value_type: type, to_aval) -> None:
    """Declare ``value_type`` a high-level type whose abstract type is ``to_aval(value)``.
    functrans records the declaration; its transforms do not take such values."""
    registered_hitypes[value_type] = to_aval


class aval_property(property):  # noqa: N801 - JAX's name
    """A property of a high-level value that is also readable from its abstract type."""


def aval_method(method):
    """A method of a high-level value that is also callable on its abstract type."""
    return method


class _EffectTypes(set):
    def add_type(self, effect_type: type) -> None:
        self.add(effect_type)


# effect types control-flow bodies may carry (declarations: functrans's control flow keeps
# effectful equations in order whatever their type)
control_flow_allowed_effects = _EffectTypes()


def cur_qdd(x):
    """The current quasi-dynamic data of a high-level value: not supported."""
    raise NotImplementedError(f"cur_qdd: {_UNSUPPORTED}")
