"""Bit packing: ``packbits`` and ``unpackbits`` (the bitwise ufuncs are in ``_ufuncs``).

    >>> import functrans.numpy as jnp
    >>> jnp.packbits(jnp.array([1, 0, 1, 1, 0, 0, 0, 1], dtype=jnp.uint8))
    Array([177], dtype=uint8)
"""
from __future__ import annotations

import builtins

import numpy as np

from functrans import _dtypes
from functrans.numpy._creation import asarray
from functrans.numpy._reductions import sum as sum_
from functrans.numpy._padding import pad
from functrans.numpy._shape import moveaxis, ravel, reshape
from functrans.numpy._ufuncs import left_shift, right_shift


def _bit_weights(bitorder, name):
    if bitorder not in ("big", "little"):
        raise ValueError(f"jnp.{name}: bitorder must be 'big' or 'little', got {bitorder!r}")
    shifts = np.arange(8, dtype=np.uint8)
    return shifts[::-1].copy() if bitorder == "big" else shifts


def packbits(a, axis=None, bitorder: str = "big"):
    """Pack the elements of a boolean or integer array (nonzero = 1) into the bits of uint8s
    along ``axis`` (the flattened array when ``None``), padding the end with zero bits.

        >>> import functrans.numpy as jnp
        >>> jnp.packbits(jnp.array([True, False, True]))
        Array([160], dtype=uint8)
    """
    a = asarray(a)
    if not (_dtypes.is_integer(a.dtype) or a.dtype == np.bool_):
        raise TypeError(f"jnp.packbits: expected an integer or boolean array, got {a.dtype}")
    shifts = _bit_weights(bitorder, "packbits")
    if axis is None:
        a, axis = ravel(a), 0
    axis = int(axis) % builtins.max(a.ndim, 1)
    bits = moveaxis((a != 0).astype(np.uint8), axis, -1)
    n = bits.shape[-1]
    padded = -(-n // 8) * 8
    bits = pad(bits, [(0, 0)] * (bits.ndim - 1) + [(0, padded - n)])
    bits = reshape(bits, bits.shape[:-1] + (padded // 8, 8))
    packed = sum_(left_shift(bits, asarray(shifts)), axis=-1, dtype=np.uint8)
    return moveaxis(packed, -1, axis)


def unpackbits(a, axis=None, count=None, bitorder: str = "big"):
    """Unpack each uint8 of ``a`` into 8 bits (0 or 1) along ``axis`` (the flattened array when
    ``None``). ``count`` keeps that many bits (negative: drops that many from the end; more
    than available: pads with zeros).

        >>> import functrans.numpy as jnp
        >>> jnp.unpackbits(jnp.array([160], dtype=jnp.uint8), count=3)
        Array([1, 0, 1], dtype=uint8)
    """
    a = asarray(a)
    if a.dtype != np.uint8:
        raise TypeError(f"jnp.unpackbits: expected a uint8 array, got {a.dtype}")
    shifts = _bit_weights(bitorder, "unpackbits")
    if axis is None:
        a, axis = ravel(a), 0
    axis = int(axis) % builtins.max(a.ndim, 1)
    moved = moveaxis(a, axis, -1)
    bits = right_shift(moved[..., None], asarray(shifts)) & np.uint8(1)
    bits = reshape(bits, moved.shape[:-1] + (moved.shape[-1] * 8,))
    if count is not None:
        count = int(count)
        total = bits.shape[-1]
        keep = count if count >= 0 else builtins.max(total + count, 0)
        if keep > total:
            bits = pad(bits, [(0, 0)] * (bits.ndim - 1) + [(0, keep - total)])
        else:
            bits = bits[..., :keep]
    return moveaxis(bits, -1, axis)
