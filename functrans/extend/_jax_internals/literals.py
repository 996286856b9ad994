"""``jax._src.literals``: the Python and NumPy values that act as array literals."""
from __future__ import annotations

import numpy as np

# what jax.typing.ArrayLike adds to arrays: NumPy arrays and scalars, Python numbers
LiteralArray = np.ndarray | np.bool_ | np.number | bool | int | float | complex

__all__ = ["LiteralArray"]
