"""``functrans.scipy.ndimage``: resampling an array at arbitrary coordinates (as
``jax.scipy.ndimage``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.ndimage import map_coordinates
    >>> map_coordinates(jnp.array([0.0, 10.0, 20.0]), [jnp.array([0.5, 1.25])], order=1)
    Array([ 5. , 12.5], dtype=float32)
"""
from __future__ import annotations

import itertools

from functrans import numpy as jnp
from functrans.core import get_aval

__all__ = ["map_coordinates"]


# How an integer sample position outside ``[0, size)`` maps back into the array, per mode;
# each returns (index in range, whether the sample is a real one).
def _constant(index, size):
    return jnp.clip(index, 0, size - 1), (index >= 0) & (index < size)


def _nearest(index, size):
    return jnp.clip(index, 0, size - 1), None


def _wrap(index, size):
    return jnp.mod(index, size), None


def _mirror(index, size):
    # reflect about the first and last samples themselves: period 2 * (size - 1)
    if size == 1:
        return jnp.zeros_like(index), None
    period = 2 * (size - 1)
    index = jnp.mod(index, period)
    return jnp.where(index >= size, period - index, index), None


def _reflect(index, size):
    # reflect about the edges of the first and last samples: period 2 * size
    period = 2 * size
    index = jnp.mod(index, period)
    return jnp.where(index >= size, period - 1 - index, index), None


_MODES = {"constant": _constant, "nearest": _nearest, "wrap": _wrap, "mirror": _mirror,
          "reflect": _reflect}


def _taps(coordinate, order):
    """The integer sample positions and their weights for one axis."""
    if order == 0:
        # round half up, as JAX does (not NumPy's round-half-to-even)
        return [(jnp.floor(coordinate + 0.5).astype(jnp.int32), None)]
    lower = jnp.floor(coordinate)
    upper_weight = coordinate - lower
    lower = lower.astype(jnp.int32)
    return [(lower, 1 - upper_weight), (lower + 1, upper_weight)]


def map_coordinates(input, coordinates, order: int, mode: str = "constant", cval=0.0):
    """Sample ``input`` at the points ``coordinates`` by spline interpolation of order 0
    (nearest sample) or 1 (linear).

    Args:
      input: the N-D array to sample.
      coordinates: a sequence of N arrays of one shape (or an array whose leading axis has
        length N): the position of every output point along each axis of ``input``.
      order: 0 or 1.
      mode: how points outside the array are handled: ``"constant"`` (samples outside read
        ``cval``), ``"nearest"``, ``"wrap"``, ``"mirror"`` or ``"reflect"``.
      cval: the value outside the array for ``mode="constant"``.

    Returns:
      an array of the coordinates' shape and the input's dtype (integer results are rounded
      half away from zero).

    Example::

        >>> map_coordinates(jnp.arange(4.0), [jnp.array([-1.0, 3.5])], order=1, mode="wrap")
        Array([3. , 1.5], dtype=float32)
    """
    input = jnp.asarray(input)
    coordinates = [jnp.asarray(c) for c in coordinates]
    shape = get_aval(input).shape
    if len(coordinates) != len(shape):
        raise ValueError(f"map_coordinates: expected {len(shape)} coordinate arrays for an "
                         f"input of shape {shape}, got {len(coordinates)}")
    if order not in (0, 1):
        raise NotImplementedError(f"map_coordinates: only order 0 and 1 are implemented, "
                                  f"got order={order}")
    if mode not in _MODES:
        raise NotImplementedError(f"map_coordinates: mode {mode!r} is not implemented; "
                                  f"supported modes are {sorted(_MODES)}")
    coordinate_shape = jnp.broadcast_shapes(*(get_aval(c).shape for c in coordinates))
    coordinates = [jnp.broadcast_to(c, coordinate_shape) for c in coordinates]
    if not jnp.issubdtype(get_aval(coordinates[0]).dtype, jnp.inexact):
        coordinates = [c.astype(jnp.float32) for c in coordinates]
    fold = _MODES[mode]
    per_axis = []
    for coordinate, size in zip(coordinates, shape):
        taps = []
        for position, weight in _taps(coordinate, order):
            index, valid = fold(position, size)
            taps.append((index, valid, weight))
        per_axis.append(taps)

    input_dtype = get_aval(input).dtype
    integer_input = not jnp.issubdtype(input_dtype, jnp.inexact)
    # integer inputs are interpolated in the coordinates' floating dtype, then rounded back
    work = input.astype(get_aval(coordinates[0]).dtype) if integer_input and order else input
    total = None
    # every corner of the cell around each point contributes its sample times the product of
    # its per-axis weights
    for corner in itertools.product(*per_axis):
        indices = tuple(index for index, _, _ in corner)
        value = work[indices]
        valid = [v for _, v, _ in corner if v is not None]
        if valid:
            all_valid = valid[0]
            for v in valid[1:]:
                all_valid = all_valid & v
            value = jnp.where(all_valid, value, jnp.asarray(cval, get_aval(value).dtype))
        for _, _, weight in corner:
            if weight is not None:
                value = value * weight.astype(get_aval(value).dtype)
        total = value if total is None else total + value
    if integer_input and order:
        total = jnp.where(total < 0, -jnp.floor(0.5 - total), jnp.floor(total + 0.5))
    return total.astype(input_dtype)
