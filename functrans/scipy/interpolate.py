"""``functrans.scipy.interpolate``: interpolation on a rectilinear grid (as
``jax.scipy.interpolate``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.interpolate import RegularGridInterpolator
    >>> f = RegularGridInterpolator((jnp.array([0.0, 1.0, 2.0]),), jnp.array([0.0, 10.0, 40.0]))
    >>> f(jnp.array([0.5, 1.5]))
    Array([ 5., 25.], dtype=float32)
"""
from __future__ import annotations

import itertools

from functrans import numpy as jnp
from functrans.core import get_aval
from functrans.numpy._promotion import promote_dtypes_inexact
from functrans.tree_util import register_pytree_node_class

__all__ = ["RegularGridInterpolator"]

_METHODS = ("linear", "nearest")


def _points_array(xi, ndim):
    """The query points as an array of shape ``(..., ndim)``: a tuple of coordinate arrays is
    broadcast and stacked; a 1-D array is a flat list of points."""
    if isinstance(xi, (tuple, list)):
        arrays = [jnp.asarray(x) for x in xi]
        shape = jnp.broadcast_shapes(*(get_aval(x).shape for x in arrays))
        return jnp.stack([jnp.broadcast_to(x, shape) for x in arrays], axis=-1)
    xi = jnp.asarray(xi)
    if get_aval(xi).ndim == 1:
        size = get_aval(xi).shape[0]
        if size % ndim:
            raise ValueError(f"RegularGridInterpolator: {size} coordinates cannot be split "
                             f"into points of dimension {ndim}")
        xi = jnp.reshape(xi, (-1, ndim))
    return xi


@register_pytree_node_class
class RegularGridInterpolator:
    """Interpolate ``values`` given on the grid ``points`` at arbitrary query points.

    Args:
      points: a tuple of N strictly increasing 1-D arrays, the grid along each dimension.
      values: the data on the grid, shape ``(len(points[0]), ..., len(points[N-1]), ...)``;
        trailing axes beyond the N grid axes are carried along.
      method: ``"linear"`` (multilinear) or ``"nearest"``.
      bounds_error: must be ``False``: an error cannot depend on traced query points.
      fill_value: the result for points outside the grid; ``None`` extrapolates.

    Calling the interpolator with points of shape ``(..., N)`` (or a tuple of N coordinate
    arrays) returns an array of shape ``(...,) + values.shape[N:]``. The interpolator is a
    pytree, so it can be passed through ``jit`` and differentiated.

    Example::

        >>> grid = (jnp.array([0.0, 1.0]), jnp.array([0.0, 1.0]))
        >>> f = RegularGridInterpolator(grid, jnp.array([[0.0, 1.0], [2.0, 3.0]]))
        >>> f(jnp.array([[0.5, 0.5]]))
        Array([1.5], dtype=float32)
    """

    def __init__(self, points, values, method="linear", bounds_error=False,
                 fill_value=jnp.nan):
        if method not in _METHODS:
            raise ValueError(f"RegularGridInterpolator: method {method!r} is not defined; "
                             f"use one of {_METHODS}")
        if bounds_error:
            raise NotImplementedError("RegularGridInterpolator: bounds_error=True is not "
                                      "implemented (it cannot depend on traced points)")
        self.method = method
        self.bounds_error = bounds_error
        (values,) = promote_dtypes_inexact(values)
        if len(points) > get_aval(values).ndim:
            raise ValueError(f"RegularGridInterpolator: there are {len(points)} point arrays, "
                             f"but values has {get_aval(values).ndim} dimensions")
        for i, p in enumerate(points):
            if jnp.ndim(p) != 1 or jnp.shape(p)[0] != get_aval(values).shape[i]:
                raise ValueError(f"RegularGridInterpolator: points[{i}] of shape "
                                 f"{jnp.shape(p)} does not match values of shape "
                                 f"{get_aval(values).shape} along dimension {i}")
        self.grid = tuple(promote_dtypes_inexact(p)[0] for p in points)
        self.values = values
        self.fill_value = fill_value

    def __call__(self, xi, method=None):
        """Interpolate at ``xi``, with ``method`` overriding the one chosen at construction."""
        method = self.method if method is None else method
        if method not in _METHODS:
            raise ValueError(f"RegularGridInterpolator: method {method!r} is not defined")
        ndim = len(self.grid)
        xi = _points_array(xi, ndim)
        if get_aval(xi).shape[-1] != ndim:
            raise ValueError(f"RegularGridInterpolator: the requested sample points have "
                             f"dimension {get_aval(xi).shape[-1]}, but this interpolator has "
                             f"dimension {ndim}")
        point_shape = get_aval(xi).shape[:-1]
        xi = jnp.reshape(xi, (-1, ndim))
        cells, fractions, outside = [], [], None
        for axis, grid in enumerate(self.grid):
            x = xi[:, axis].astype(get_aval(grid).dtype)
            # the cell [grid[i], grid[i + 1]] holding x; points outside use the end cells so
            # that fill_value=None extrapolates the end segments
            cell = jnp.clip(jnp.searchsorted(grid, x) - 1, 0, max(get_aval(grid).shape[0] - 2, 0))
            upper = jnp.minimum(cell + 1, get_aval(grid).shape[0] - 1)
            width = grid[upper] - grid[cell]
            fraction = (x - grid[cell]) / jnp.where(width == 0, 1, width)
            cells.append(cell)
            fractions.append(fraction)
            out = (x < grid[0]) | (x > grid[-1])
            outside = out if outside is None else outside | out
        if method == "linear":
            result = self._linear(cells, fractions)
        else:
            result = self._nearest(cells, fractions)
        if self.fill_value is not None:
            trailing = (slice(None),) + (None,) * (get_aval(result).ndim - 1)
            result = jnp.where(outside[trailing], self.fill_value, result)
        return jnp.reshape(result, point_shape + get_aval(self.values).shape[ndim:])

    def _linear(self, cells, fractions):
        extra = (None,) * (get_aval(self.values).ndim - len(self.grid))
        result = None
        for corner in itertools.product((0, 1), repeat=len(self.grid)):
            index = []
            weight = None
            for step, cell, fraction, grid in zip(corner, cells, fractions, self.grid):
                index.append(jnp.minimum(cell + step, get_aval(grid).shape[0] - 1))
                w = fraction if step else 1 - fraction
                weight = w if weight is None else weight * w
            term = self.values[tuple(index)] * weight[(slice(None),) + extra]
            result = term if result is None else result + term
        return result

    def _nearest(self, cells, fractions):
        index = tuple(jnp.where(fraction <= 0.5, cell, cell + 1)
                      for cell, fraction in zip(cells, fractions))
        return self.values[index]

    def tree_flatten(self):
        return (self.grid, self.values, self.fill_value), (self.method, self.bounds_error)

    @classmethod
    def tree_unflatten(cls, aux, children):
        grid, values, fill_value = children
        interpolator = object.__new__(cls)
        interpolator.method, interpolator.bounds_error = aux
        interpolator.grid, interpolator.values, interpolator.fill_value = grid, values, fill_value
        return interpolator
