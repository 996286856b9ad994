"""``jax.Ref`` / ``jax.new_ref``: mutable array references, which functrans does not have.

Every functrans array is immutable and state is passed in and out explicitly (see the
design notes), so no value is a ``Ref`` (``isinstance(x, Ref)`` is false for all of them)
and :func:`new_ref` raises ``NotImplementedError``.
"""
from __future__ import annotations

__all__ = ["Ref", "new_ref"]

_UNSUPPORTED = ("mutable array references (jax.new_ref / jax.Ref) are not supported by "
                "functrans: arrays are immutable; pass state in and out of functions instead")


class Ref:
    """The type of a mutable array reference; functrans makes none."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(_UNSUPPORTED)


def new_ref(init_val, *, memory_space=None, kind=None):
    """Make a mutable reference to an array: not supported (raises)."""
    raise NotImplementedError(_UNSUPPORTED)
