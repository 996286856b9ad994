"""Index tricks: ``s_``, ``index_exp``, ``mgrid``, ``ogrid``, ``r_`` and ``c_``.

Their bounds set output shapes, so slice bounds and steps must be concrete values.

    >>> import functrans.numpy as jnp
    >>> jnp.r_[1:4, 0, jnp.array([7, 8])]
    Array([1, 2, 3, 0, 7, 8], dtype=int32)
"""
from __future__ import annotations

import builtins

import numpy as np

from functrans import _dtypes
from functrans.core import Tracer
from functrans.numpy._promotion import concrete_or_error
from functrans.numpy._creation import asarray, meshgrid, zeros
from functrans.numpy._shape import atleast_2d, concatenate, reshape, stack, transpose


# Index expressions are plain Python values (tuples of slices), so NumPy's helpers serve.
s_ = np.s_
index_exp = np.index_exp


def _concrete_scalar(value, where):
    if isinstance(value, Tracer):
        value = concrete_or_error(value, where, "Slice bounds and steps must be static.")
    return np.asarray(value).item() if hasattr(value, "shape") else value


def _slice_values(s: slice, where) -> np.ndarray:
    """The 1-D host array a slice of an index trick stands for: ``arange(start, stop, step)``,
    or ``num`` evenly spaced points from ``start`` to ``stop`` inclusive when the step is an
    imaginary number ``num * 1j``."""
    start = _concrete_scalar(s.start, where)
    stop = _concrete_scalar(s.stop, where)
    step = _concrete_scalar(s.step, where)
    start = 0 if start is None else start
    step = 1 if step is None else step
    if isinstance(step, complex):
        return np.linspace(start, stop, int(builtins.abs(step)))
    return np.arange(start, stop, step)


def _host_to_array(values: np.ndarray):
    """A host array as a functrans Array of the default int or float dtype."""
    if values.dtype.kind in "iu":
        return asarray(values, dtype=_dtypes.default_int_dtype())
    return asarray(values, dtype=_dtypes.default_float_dtype())


class _Grid:
    """``mgrid[...]`` (dense) and ``ogrid[...]`` (open) grids from slices."""

    def __init__(self, sparse: builtins.bool, name: str):
        self.sparse, self.name = sparse, name

    def __getitem__(self, key):
        where = f"jnp.{self.name}"
        if isinstance(key, slice):
            return _host_to_array(_slice_values(key, where))
        if not isinstance(key, tuple) or not all(isinstance(k, slice) for k in key):
            raise TypeError(f"{where}[...] takes slices, e.g. {self.name}[0:3, 0:1:5j]; got "
                            f"{key!r}")
        axes = [_slice_values(k, where) for k in key]
        # every axis takes the common dtype, as NumPy's grids do
        dtype = np.result_type(*axes) if axes else np.dtype(int)
        axes = [_host_to_array(a.astype(dtype)) for a in axes]
        if self.sparse:
            return list(meshgrid(*axes, indexing="ij", sparse=True))
        if not axes:
            return zeros((0,), _host_to_array(np.zeros(0, dtype)).dtype)
        return stack(meshgrid(*axes, indexing="ij"), axis=0)

    def __repr__(self):
        return f"functrans.numpy.{self.name}"


mgrid = _Grid(sparse=False, name="mgrid")
ogrid = _Grid(sparse=True, name="ogrid")


class _Concatenator:
    """``r_[...]`` and ``c_[...]``: concatenate slices, scalars and arrays along an axis.

    A leading string sets the layout: ``"axis"``, ``"axis,ndmin"`` or
    ``"axis,ndmin,trans1d"`` (pieces are raised to ``ndmin`` dimensions, a 1-D piece placed
    along axis ``trans1d``), or ``"r"``/``"c"`` for a 2-D row/column result.
    """

    def __init__(self, axis, ndmin, trans1d, name):
        self.axis, self.ndmin, self.trans1d, self.name = axis, ndmin, trans1d, name

    def _parse_directive(self, text):
        if text in ("r", "c"):
            return self.axis, self.ndmin, self.trans1d, text
        try:
            numbers = [int(part) for part in text.split(",")]
        except ValueError:
            raise ValueError(f"jnp.{self.name}: unknown directive {text!r}; expected 'r', "
                             f"'c' or 'axis[,ndmin[,trans1d]]'") from None
        if len(numbers) > 3:
            raise ValueError(f"jnp.{self.name}: a directive has at most three numbers, got "
                             f"{text!r}")
        axis, ndmin, trans1d = numbers + [self.ndmin, self.trans1d][len(numbers) - 1:]
        return axis, ndmin, trans1d, None

    @staticmethod
    def _raise_dims(piece, ndmin, trans1d):
        """``piece`` with leading axes of 1 up to ``ndmin``; with ``trans1d`` its own axes
        are moved to start at position ``trans1d`` instead of the end."""
        original = piece.ndim
        if original >= ndmin:
            return piece
        piece = reshape(piece, (1,) * (ndmin - original) + piece.shape)
        if trans1d != -1:
            added = ndmin - original
            start = trans1d + added + 1 if trans1d < 0 else trans1d
            order = list(range(ndmin))
            # the original axes (now last) go to `start`, the added ones fill the rest
            order = order[:start] + order[added:] + order[start:added]
            piece = transpose(piece, order)
        return piece

    def __getitem__(self, key):
        items = key if isinstance(key, tuple) else (key,)
        axis, ndmin, trans1d, matrix = self.axis, self.ndmin, self.trans1d, None
        if items and isinstance(items[0], str):
            axis, ndmin, trans1d, matrix = self._parse_directive(items[0])
            items = items[1:]
        pieces = []
        for item in items:
            if isinstance(item, str):
                raise ValueError(f"jnp.{self.name}: a directive string may only come first")
            if isinstance(item, slice):
                piece = _host_to_array(_slice_values(item, f"jnp.{self.name}"))
            else:
                piece = asarray(item)
                if piece.ndim == 0:
                    piece = reshape(piece, (1,))
            pieces.append(self._raise_dims(piece, ndmin, trans1d))
        if not pieces:
            return zeros((0,), _dtypes.default_float_dtype())
        out = concatenate(pieces, axis=axis)
        if matrix is not None:
            out = atleast_2d(out)
            if matrix == "c":
                out = out.T
        return out

    def __len__(self):
        return 0

    def __repr__(self):
        return f"functrans.numpy.{self.name}"


r_ = _Concatenator(axis=0, ndmin=1, trans1d=-1, name="r_")
c_ = _Concatenator(axis=-1, ndmin=2, trans1d=0, name="c_")
