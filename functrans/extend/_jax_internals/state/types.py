"""``jax._src.state.types``: the abstract type of a mutable array reference.

functrans has no mutable array references (``jax.new_ref`` raises): no value is ever of this
type, so ``isinstance(x, AbstractRef)`` is false for everything a program holds.
"""
from __future__ import annotations


class AbstractRef:
    """The type of a mutable array reference; functrans makes none."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("mutable array references (jax.new_ref / jax.Ref) are not "
                                  "supported by functrans")


__all__ = ["AbstractRef"]
