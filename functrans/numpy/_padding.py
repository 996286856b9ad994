"""``pad``: an array extended along its axes (NumPy's padding modes).

Constant padding is the ``pad`` primitive; the edge modes (``edge``, ``reflect``,
``symmetric``, ``wrap``) copy static positions, lowered to slices, reversals and
concatenations; the statistic modes (``maximum``, ``minimum``, ``mean``) extend by a
reduction of the axis, so this module builds on the reductions.
"""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans.core import get_aval
from functrans.numpy import _reductions as red
from functrans.numpy._promotion import broadcast_to_shape, concrete_value, lax_fn, to_array
from functrans.numpy._shape import _concat, take_static
from functrans.numpy._ufuncs import round as round_
from functrans.primitives import elementwise as lax
from functrans.primitives import structural


def _pad_width(pad_width, ndim):
    value = concrete_value(pad_width)
    if value is None:
        raise TypeError("pad: pad_width must be static")
    widths = np.broadcast_to(np.asarray(value, dtype=np.int64), (ndim, 2))
    if (widths < 0).any():
        raise ValueError("pad: pad_width entries must be non-negative")
    return [(int(lo), int(hi)) for lo, hi in widths]


def _pad_source_indices(n, lo, hi, mode):
    """For each output position along an axis, the input position it copies (NumPy's pad
    applied to the positions themselves)."""
    return np.pad(np.arange(n), (lo, hi), mode=mode)


_INDEX_MODES = ("edge", "reflect", "symmetric", "wrap")


def pad(array, pad_width, mode="constant", **kwargs):
    """Pad an array (as ``np.pad``). Modes: ``constant`` (``constant_values``), ``edge``,
    ``reflect``, ``symmetric``, ``wrap``, ``empty``, ``maximum``, ``minimum``, ``mean``.

        >>> pad(arange(3), 1)
        Array([0, 0, 1, 2, 0], dtype=int32)
        >>> pad(arange(3), 2, mode="reflect")
        Array([2, 1, 0, 1, 2, 1, 0], dtype=int32)
    """
    array = to_array(array)
    aval = get_aval(array)
    widths = _pad_width(pad_width, aval.ndim)
    if callable(mode):
        raise NotImplementedError("pad: a callable mode is not supported")
    if mode in ("constant", "empty"):
        values = kwargs.get("constant_values", 0) if mode == "constant" else 0
        return _pad_constant(array, widths, values)
    if mode in ("reflect", "symmetric") and kwargs.get("reflect_type", "even") != "even":
        raise NotImplementedError("pad: reflect_type='odd' is not supported")
    if mode in _INDEX_MODES:
        for axis, (lo, hi) in enumerate(widths):
            if lo == hi == 0:
                continue
            n = aval.shape[axis]
            if n == 0:
                raise ValueError(f"pad: can't extend empty axis {axis} using mode {mode!r}")
            array = take_static(array, _pad_source_indices(n, lo, hi, mode), axis)
        return array
    if mode in ("maximum", "minimum", "mean"):
        stat = {"maximum": red.max, "minimum": red.min, "mean": red.mean}[mode]
        if kwargs.get("stat_length") is not None:
            raise NotImplementedError("pad: stat_length is not supported")
        for axis, (lo, hi) in enumerate(widths):
            if lo == hi == 0:
                continue
            value = stat(array, axis=axis, keepdims=True)
            if mode == "mean" and _dtypes.is_integer(get_aval(array).dtype):
                value = round_(value)
            value = lax.convert_element_type(value, get_aval(array).dtype)
            shape = list(get_aval(array).shape)
            pieces = []
            for width in (lo, hi):
                shape[axis] = width
                pieces.append(broadcast_to_shape(value, tuple(shape)))
            array = _concat([pieces[0], array, pieces[1]], axis)
        return array
    raise NotImplementedError(f"pad: mode {mode!r} is not supported")


def _pad_constant(array, widths, values):
    aval = get_aval(array)
    value = concrete_value(values)
    if value is not None and np.ndim(value) == 0:
        pad_value = structural.full((), value, aval.dtype)
        config = tuple((lo, hi, 0) for lo, hi in widths)
        return lax_fn("pad")(array, pad_value, config)
    # per-axis (before, after) values: pad one axis at a time
    per_axis = np.broadcast_to(np.asarray(value if value is not None else values),
                               (aval.ndim, 2)) if value is not None else None
    if per_axis is None:
        scalar = lax.convert_element_type(structural.reshape(to_array(values), ()), aval.dtype)
        config = tuple((lo, hi, 0) for lo, hi in widths)
        return lax_fn("pad")(array, scalar, config)
    for axis, (lo, hi) in enumerate(widths):
        for side, width in ((0, lo), (1, hi)):
            if width == 0:
                continue
            config = [(0, 0, 0)] * aval.ndim
            config[axis] = (width, 0, 0) if side == 0 else (0, width, 0)
            array = lax_fn("pad")(array, structural.full((), per_axis[axis, side], aval.dtype),
                                  tuple(config))
    return array
