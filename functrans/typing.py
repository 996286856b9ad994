"""Type annotations for functrans programs, as ``jax.typing``.

``ArrayLike``: anything a functrans function accepts as an array (a functrans array or
traced value, a NumPy array or scalar, a Python scalar). ``DTypeLike``: anything that names
a dtype (a string, a scalar type, a NumPy dtype, an object with a ``dtype`` attribute).

    >>> import functrans.numpy as jnp
    >>> from functrans.typing import ArrayLike
    >>> def double(x: ArrayLike):
    ...     return jnp.asarray(x) * 2
    >>> double(3)
    Array(6, dtype=int32, weak_type=True)
"""
from __future__ import annotations

from typing import Any, Protocol, Union

import numpy as np

from functrans._array import Array
from functrans.core import Tracer

__all__ = ["ArrayLike", "DTypeLike"]


class SupportsDType(Protocol):
    """An object with a ``dtype`` attribute (an array, a ``ShapeDtypeStruct``)."""

    @property
    def dtype(self) -> np.dtype: ...


ArrayLike = Union[Array, Tracer, np.ndarray, np.bool_, np.number, bool, int, float, complex]

DTypeLike = Union[str, type[Any], np.dtype, SupportsDType]
