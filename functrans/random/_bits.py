"""From a key to random bits, and to new keys: ``bits``, ``split``, ``fold_in``.

Two schemes derive them, both JAX's, chosen by ``config.threefry_partitionable``:

* **partitionable** (the default, JAX >= 0.5): output element ``i`` (in row-major order) is
  the threefry2x32 hash of the 64-bit counter ``i``, given as the word pair
  ``(i >> 32, i & 0xffffffff)``. The hash's two output words ``(y0, y1)`` make the element:
  ``y0 ^ y1`` for 32 bits (truncated for 8 and 16), ``y0 << 32 | y1`` for 64 bits, and the
  key ``(y0, y1)`` for ``split``. Every element depends only on its own index, so any slice
  of the output can be computed on its own.
* **original** (``config.update("jax_threefry_partitionable", False)``): the counters
  ``0 .. n-1`` (``n`` 32-bit words in all) are cut in half, counter ``i`` of the first half
  and counter ``i`` of the second half form one block, and the block's two output words land
  at positions ``i`` and ``n/2 + i``; 8- and 16-bit values are cut from the words, lowest
  bits first; 64-bit values take their high word from the first half. ``split(key, k)``
  hashes ``2k`` counters into ``k`` keys.

``fold_in(key, d)`` is the same in both: the key ``(y0, y1)`` hashed from the counter pair
``(0, uint32(d))``.
"""
from __future__ import annotations

import math

import numpy as np

from functrans import _dtypes, lax
from functrans.primitives import elementwise as ew
from functrans._config import config
from functrans.core import Tracer, get_aval
from functrans.primitives.random_bits import threefry2x32
from functrans.random._arguments import asarray, const, convert, shape_tuple
from functrans.random._keys import PRNGKeyArray, as_key, check_key, returned_keys

_UINT32 = _dtypes.uint32
_UNSIGNED = {8: _dtypes.uint8, 16: _dtypes.uint16, 32: _dtypes.uint32, 64: _dtypes.uint64}


def _hash(key: PRNGKeyArray, x0, x1):
    """threefry2x32 of the counter words ``(x0, x1)`` under one key: two uint32 arrays."""
    shape = get_aval(x0).shape
    k0, k1 = (lax.broadcast_in_dim(w, shape, ()) for w in key._words)
    return threefry2x32(k0, k1, x0, x1)


def threefry_2x32(key, counts):
    """Hash the ``uint32`` array ``counts`` under ``key`` (typed or raw): a ``uint32`` array
    of its shape. The flattened counts are padded to even length and cut in half; the halves
    are the two words of each counter block.

        >>> threefry_2x32(PRNGKey(0), lax.iota(np.uint32, 2))
        Array([ 928981903, 3453687069], dtype=uint32)
    """
    key = as_key("threefry_2x32", key)
    aval = get_aval(counts)
    if aval.dtype != _UINT32:
        raise TypeError(f"threefry_2x32: counts must be uint32, got {aval.str_short()}")
    size = aval.size
    if size == 0:
        return const(0, _UINT32, aval.shape)
    flat = lax.reshape(counts, (size,))
    odd = size % 2
    if odd:
        flat = lax.concatenate([flat, const(0, _UINT32, (1,))], 0)
    half = (size + odd) // 2
    out = lax.concatenate(_hash(key, lax.slice_in_dim(flat, 0, half),
                                lax.slice_in_dim(flat, half, 2 * half)), 0)
    if odd:
        out = lax.slice_in_dim(out, 0, size)
    return lax.reshape(out, aval.shape)


# =============================================================================================
# The partitionable scheme: one 64-bit counter per output element
# =============================================================================================

def _element_counters(shape: tuple):
    """The (high, low) uint32 words of each element's row-major index, of ``shape``."""
    size = math.prod(shape)
    if size > 2 ** 32:
        # the high words would be nonzero: 2**32 elements is 16 GiB of uint32 already
        raise NotImplementedError(f"random bits for {size} elements from one key: at most "
                                  "2**32 are supported; split the key and draw in pieces")
    low = lax.reshape(lax.iota(_UINT32, size), shape)
    return const(0, _UINT32, shape), low


def _split_partitionable(key: PRNGKeyArray, shape: tuple) -> PRNGKeyArray:
    return PRNGKeyArray(*_hash(key, *_element_counters(shape)), key._impl)


def _bits_partitionable(key: PRNGKeyArray, bit_width: int, shape: tuple):
    y0, y1 = _hash(key, *_element_counters(shape))
    dtype = _UNSIGNED[bit_width]
    if bit_width == 64:
        high = convert(y0, dtype)
        return ew.bitwise_or(ew.shift_left(high, const(32, dtype, shape)), convert(y1, dtype))
    # narrower widths keep the low bits of the 32-bit value
    return convert(ew.bitwise_xor(y0, y1), dtype)


# =============================================================================================
# The original scheme: the counters 0 .. n-1 cut in half
# =============================================================================================

def _counters(count: int):
    if count >= 2 ** 32 - 1:
        raise NotImplementedError(
            f"drawing {count} 32-bit words from one key: at most 2**32 - 2 are supported; "
            "split the key and draw in pieces")
    return lax.iota(_UINT32, count)


def _split_original(key: PRNGKeyArray, shape: tuple) -> PRNGKeyArray:
    count = math.prod(shape)
    words = lax.reshape(threefry_2x32(key, _counters(2 * count)), (count, 2))
    return PRNGKeyArray(*(lax.reshape(lax.index_in_dim(words, i, 1, keepdims=False), shape)
                          for i in (0, 1)), key._impl)


def _bits_original(key: PRNGKeyArray, bit_width: int, shape: tuple):
    size = math.prod(shape)
    word_count = -(-bit_width * size // 32)
    words = threefry_2x32(key, _counters(word_count))
    dtype = _UNSIGNED[bit_width]
    if bit_width == 64:
        # first half: high words, second half: low words
        high = convert(lax.slice_in_dim(words, 0, size), dtype)
        low = convert(lax.slice_in_dim(words, size, 2 * size), dtype)
        out = ew.bitwise_or(ew.shift_left(high, const(32, dtype, (size,))), low)
    elif bit_width == 32:
        out = words
    else:
        # each 32-bit word gives 32 // bit_width values, lowest bits first
        per_word = 32 // bit_width
        grid = (word_count, per_word)
        shifts = ew.mul(lax.broadcasted_iota(_UINT32, grid, 1), const(bit_width, _UINT32, grid))
        parts = ew.bitwise_and(
            ew.shift_right_logical(lax.broadcast_in_dim(words, grid, (0,)), shifts),
            const(2 ** bit_width - 1, _UINT32, grid))
        out = convert(lax.slice_in_dim(lax.reshape(parts, (word_count * per_word,)), 0, size),
                      dtype)
    return lax.reshape(out, shape)


# =============================================================================================
# What the samplers use, and the public functions
# =============================================================================================

def split_key(key: PRNGKeyArray, shape=(2,)) -> PRNGKeyArray:
    """Typed keys of ``shape`` derived from the single typed ``key``."""
    shape = shape_tuple(shape, "split")
    if config.threefry_partitionable:
        return _split_partitionable(key, shape)
    return _split_original(key, shape)


def split_keys(key: PRNGKeyArray, count: int) -> list:
    """``count`` typed keys derived from ``key``, as a list (for unpacking)."""
    keys = split_key(key, (count,))
    return [keys[i] for i in range(count)]


def random_bits(key: PRNGKeyArray, bit_width: int, shape: tuple):
    """``uint{bit_width}`` random bits of ``shape`` from the single typed ``key``."""
    if config.threefry_partitionable:
        return _bits_partitionable(key, bit_width, shape)
    return _bits_original(key, bit_width, shape)


def split(key, num=2):
    """Split a key into new keys: ``num`` of them, or an array of shape ``num``.

    Typed keys give typed keys of shape ``num``; a raw ``uint32[2]`` key gives raw keys,
    ``uint32[*num, 2]``.

        >>> split(PRNGKey(0))
        Array([[1797259609, 2579123966],
               [ 928981903, 3453687069]], dtype=uint32)
        >>> split(key(0), (2, 3)).shape
        (2, 3)
    """
    typed, raw = check_key("split", key)
    return returned_keys(split_key(typed, num), raw)


def fold_in(key, data):
    """A new key from ``key`` and the integer scalar ``data`` (e.g. a step or a device
    index), converted to uint32 (a Python int must be in ``[0, 2**32)``).

        >>> fold_in(PRNGKey(0), 7)
        Array([2716826189,  292468403], dtype=uint32)
    """
    typed, raw = check_key("fold_in", key)
    if isinstance(data, (int, np.integer)) and not isinstance(data, bool):
        if not 0 <= int(data) < 2 ** 32:
            raise OverflowError(f"fold_in: data {data} is out of bounds for uint32")
        data = asarray(np.uint32(data))
    elif not isinstance(data, Tracer):
        data = asarray(data)
    aval = get_aval(data)
    if aval.shape != ():
        raise TypeError(f"fold_in takes a scalar, but was given an array of shape {aval.shape}; "
                        "use functrans.vmap for batches")
    if not (_dtypes.is_integer(aval.dtype) or _dtypes.is_bool(aval.dtype)):
        raise TypeError(f"fold_in: data must be an integer scalar, got {aval.str_short()}")
    low = lax.reshape(convert(data, _UINT32), (1,))
    folded = _hash(typed, const(0, _UINT32, (1,)), low)
    return returned_keys(PRNGKeyArray(*(lax.reshape(w, ()) for w in folded), typed._impl), raw)


def bits(key, shape=(), dtype=None):
    """Uniformly random bits: an unsigned-integer array of ``shape`` (``uint32`` default,
    ``uint64`` in 64-bit mode).

        >>> bits(PRNGKey(0), (2,))
        Array([4070199207, 4202968722], dtype=uint32)
    """
    key = as_key("bits", key)
    dtype = _dtypes.default_uint_dtype() if dtype is None else _dtypes.check_user_dtype(dtype)
    if not _dtypes.is_unsigned(dtype):
        raise ValueError(f"bits needs an unsigned integer dtype, got {dtype}")
    return random_bits(key, dtype.itemsize * 8, shape_tuple(shape, "bits"))
