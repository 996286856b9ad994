"""Discrete draws: ``bernoulli``, ``randint``, ``permutation``, ``choice`` and
``categorical``, each with jax.random's algorithm and use of the key.
"""
from __future__ import annotations

import math

import numpy as np

import functrans.numpy as jnp
from functrans import _dtypes, lax
from functrans.primitives import elementwise as ew
from functrans.core import Tracer, get_aval
from functrans.random._arguments import (as_array, broadcast_shapes, broadcast_to, const,
                                         convert, shape_tuple)
from functrans.random._arguments import takes_out_sharding
from functrans.random._bits import random_bits, split_keys
from functrans.random._continuous import gumbel, gumbel_mode, uniform
from functrans.random._keys import as_key

_UNSIGNED = {8: _dtypes.uint8, 16: _dtypes.uint16, 32: _dtypes.uint32, 64: _dtypes.uint64}


@takes_out_sharding
def bernoulli(key, p=0.5, shape=None, mode="low"):
    """Booleans that are True with probability ``p`` (broadcast to ``shape``).

    ``mode="high"`` compares against two uniform draws, so that probabilities below the
    float's resolution (~1e-7 in float32) are still honoured.

        >>> bernoulli(PRNGKey(0), 0.3, (4,))
        Array([False, False, False, False], dtype=bool)
    """
    key = as_key("bernoulli", key)
    if mode not in ("low", "high"):
        raise ValueError(f"bernoulli: mode must be 'low' or 'high', got {mode!r}")
    p = as_array(p)
    dtype = get_aval(p).dtype
    if not _dtypes.is_float(dtype):
        dtype = _dtypes.default_float_dtype()
        p = convert(p, dtype)
    shape = get_aval(p).shape if shape is None else shape_tuple(shape, "bernoulli")
    p = broadcast_to(p, shape, "bernoulli")
    if mode == "high":
        draws = uniform(key, (2,) + shape, dtype)
        coarse, fine = (lax.index_in_dim(draws, i, keepdims=False) for i in (0, 1))
        # the second draw refines the first below its spacing, 2**-nmant
        fine = ew.mul(fine, const(2.0 ** -int(_dtypes.finfo(dtype).nmant), dtype, shape))
        return ew.lt(fine, ew.sub(p, coarse))
    return ew.lt(uniform(key, shape, dtype), p)


def _clip_to_dtype(value, dtype):
    """An integer array converted to ``dtype``, saturating at its bounds instead of wrapping."""
    source = get_aval(value).dtype
    lo = max(int(np.iinfo(dtype).min), int(np.iinfo(source).min))
    hi = min(int(np.iinfo(dtype).max), int(np.iinfo(source).max))
    return convert(ew.clamp(np.array(lo, source)[()], value, np.array(hi, source)[()]), dtype)


def _integer_bound(value):
    value = as_array(value)
    if not _dtypes.is_integer(get_aval(value).dtype):
        value = convert(value, _dtypes.default_int_dtype())
    return value


@takes_out_sharding
def randint(key, shape, minval, maxval, dtype=None):
    """Integers uniform on ``[minval, maxval)`` (bounds broadcast to ``shape``).

    Two draws of random bits are combined so that the bias for spans that are not powers of
    two is tiny; 8- and 16-bit results are drawn at 32 bits.

        >>> randint(PRNGKey(0), (5,), 0, 100)
        Array([89,  0, 12, 73, 71], dtype=int32)
    """
    key = as_key("randint", key)
    shape = shape_tuple(shape, "randint")
    dtype = _dtypes.default_int_dtype() if dtype is None else _dtypes.check_user_dtype(dtype)
    if not _dtypes.is_integer(dtype):
        raise TypeError(f"randint needs an integer dtype, got {dtype}")
    minval, maxval = _integer_bound(minval), _integer_bound(maxval)
    if dtype.itemsize < 4:
        # 8- and 16-bit results are drawn at 32 bits (far less modulo bias), then narrowed
        info, int32 = np.iinfo(dtype), _dtypes.int32

        def clip(v, lo, hi):
            return ew.clamp(np.int32(lo), convert(v, int32), np.int32(hi))
        wide = randint(key, shape, clip(minval, info.min, info.max),
                       clip(maxval, info.min, int(info.max) + 1), int32)
        return convert(wide, dtype)
    nbits = dtype.itemsize * 8
    # maxval may exceed the dtype (randint(k, s, 0, 256, uint8)): the span is then 2**nbits
    dtype_max = np.array(min(int(np.iinfo(dtype).max), int(np.iinfo(get_aval(maxval).dtype).max)),
                         get_aval(maxval).dtype)[()]
    maxval_beyond_dtype = ew.gt(maxval, lax.full(get_aval(maxval).shape, dtype_max))
    minval = broadcast_to(_clip_to_dtype(minval, dtype), shape, "randint")
    maxval = broadcast_to(_clip_to_dtype(maxval, dtype), shape, "randint")
    maxval_beyond_dtype = broadcast_to(maxval_beyond_dtype, shape, "randint")

    key_high, key_low = split_keys(key, 2)
    high_bits = random_bits(key_high, nbits, shape)
    low_bits = random_bits(key_low, nbits, shape)

    unsigned = _UNSIGNED[nbits]
    one = const(1, unsigned, shape)
    span = convert(ew.sub(maxval, minval), unsigned)
    empty = ew.le(maxval, minval)
    span = lax.select(empty, one, span)  # an empty range returns minval
    span = lax.select(ew.bitwise_and(maxval_beyond_dtype, lax.bitwise_not(empty)),
                      ew.add(span, one), span)
    # offset = (high * 2**nbits + low) mod span, computed without overflow
    multiplier = ew.rem(const(2 ** (nbits // 2), unsigned, shape), span)
    multiplier = ew.rem(ew.mul(multiplier, multiplier), span)
    offset = ew.add(ew.mul(ew.rem(high_bits, span), multiplier), ew.rem(low_bits, span))
    offset = ew.rem(offset, span)
    return ew.add(minval, convert(offset, dtype))


def _shuffle(key, x, axis: int):
    """``x`` shuffled along ``axis`` by sorting with random 32-bit keys of ``x``'s shape,
    repeated until key collisions are negligible (3 log(size) / log(2**32) rounds)."""
    size = get_aval(x).size
    rounds = int(np.ceil(3 * np.log(max(1, size)) / np.log(2 ** 32 - 1)))
    for _ in range(rounds):
        key, subkey = split_keys(key, 2)
        sort_keys = random_bits(subkey, 32, get_aval(x).shape)
        _, x = lax.sort_key_val(sort_keys, x, axis)
    return x


def _take(a, indices, axis):
    return jnp.take(a, indices, axis=axis)


@takes_out_sharding
def permutation(key, x, axis=0, independent=False):
    """A random permutation of ``range(x)`` (integer ``x``) or of ``x`` along ``axis``
    (with ``independent=True``, each slice along the other axes is shuffled separately).

        >>> permutation(PRNGKey(0), 8)
        Array([0, 1, 5, 6, 4, 3, 2, 7], dtype=int32)
    """
    key = as_key("permutation", key)
    if isinstance(x, Tracer) and x.ndim == 0:
        raise TypeError("permutation: x is a traced scalar; the length must be static")
    if not isinstance(x, Tracer) and np.ndim(x) == 0:
        if not np.issubdtype(np.asarray(x).dtype, np.integer):
            raise TypeError("permutation: x must be an integer or an array of at least 1 axis")
        return _shuffle(key, lax.iota(_dtypes.default_int_dtype(), int(np.asarray(x))), 0)
    x = as_array(x)
    shape = get_aval(x).shape
    axis = int(axis) % len(shape)
    if independent or len(shape) == 1:
        return _shuffle(key, x, axis)
    order = _shuffle(key, lax.iota(_dtypes.default_int_dtype(), shape[axis]), 0)
    return _take(x, order, axis)


@takes_out_sharding
def categorical(key, logits, axis=-1, shape=None, replace=True, mode=None):
    """Indices sampled from ``softmax(logits)`` along ``axis`` (Gumbel-max trick).

    ``shape`` (default: ``logits``' shape without ``axis``) may add leading sample axes and
    broadcast the batch axes. With ``replace=False``, the leading samples are distinct
    categories (Gumbel top-k). ``mode`` is :func:`gumbel`'s.

        >>> import functrans.numpy as jnp
        >>> categorical(PRNGKey(0), jnp.log(jnp.array([0.1, 0.2, 0.7])), shape=(4,))
        Array([1, 2, 2, 1], dtype=int32)
    """
    key = as_key("categorical", key)
    mode = gumbel_mode(mode, "categorical")
    logits = as_array(logits)
    logits_shape = get_aval(logits).shape
    dtype = get_aval(logits).dtype
    if not _dtypes.is_float(dtype):
        raise TypeError(f"categorical: logits must be floating point, got {dtype}")
    ndim = len(logits_shape)
    axis = int(axis) % ndim
    batch_shape = logits_shape[:axis] + logits_shape[axis + 1:]
    if shape is None:
        shape = batch_shape
    else:
        shape = shape_tuple(shape, "categorical")
        try:
            ok = broadcast_shapes(shape, batch_shape) == shape
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"categorical: shape {shape} must be broadcast-compatible with "
                             f"the logits' batch shape {batch_shape} and contain it")
    prefix = shape[:len(shape) - len(batch_shape)]
    index_dtype = _dtypes.default_int_dtype()
    if replace:
        batch = shape[len(prefix):]
        full_shape = prefix + batch[:axis] + logits_shape[axis:axis + 1] + batch[axis:]
        noisy = gumbel(key, full_shape, dtype, mode) + lax.expand_dims(
            logits, tuple(range(len(prefix))))
        return lax.argmax(noisy, len(prefix) + axis, index_dtype)
    draws = math.prod(prefix)
    if draws > logits_shape[axis]:
        raise ValueError(f"categorical: {draws} samples without replacement exceed the "
                         f"{logits_shape[axis]} categories")
    noisy = ew.add(logits, gumbel(key, logits_shape, dtype, mode))
    moved = lax.transpose(noisy, tuple(i for i in range(ndim) if i != axis) + (axis,))
    _, indices = lax.top_k(moved, draws)  # batch_shape + (draws,)
    indices = lax.transpose(indices, (len(batch_shape),) + tuple(range(len(batch_shape))))
    return convert(lax.reshape(indices, shape), index_dtype)


def choice(key, a, shape=(), replace=True, p=None, axis=0, mode=None):
    """Random samples from ``a`` (an int ``n`` stands for ``arange(n)``) along ``axis``,
    with or without replacement, uniform or with probabilities ``p``. ``mode`` is
    :func:`gumbel`'s (used with ``p`` and without replacement).

        >>> choice(PRNGKey(0), 10, (4,))
        Array([9, 0, 2, 3], dtype=int32)
    """
    key = as_key("choice", key)
    shape = shape_tuple(shape, "choice")
    arr = as_array(a)
    if get_aval(arr).ndim == 0:
        if isinstance(arr, Tracer):
            raise TypeError("choice: a is a traced scalar; the number of inputs must be static")
        n_inputs = int(np.asarray(arr))
    else:
        axis = int(axis) % get_aval(arr).ndim
        n_inputs = get_aval(arr).shape[axis]
    scalar = get_aval(arr).ndim == 0
    n_draws = math.prod(shape)
    if n_draws == 0:
        return lax.full(shape, 0, get_aval(arr).dtype)
    if n_inputs <= 0:
        raise ValueError("choice: a must be non-empty unless no samples are taken")
    if not replace and n_draws > n_inputs:
        raise ValueError(f"choice: cannot take {n_draws} samples without replacement from "
                         f"{n_inputs} elements")
    if p is None:
        if replace:
            indices = randint(key, shape, 0, n_inputs)
            result = indices if scalar else _take(arr, indices, axis)
        else:
            shuffled = permutation(key, n_inputs if scalar else arr, axis)
            result = lax.slice_in_dim(shuffled, 0, n_draws, axis=0 if scalar else axis)
    else:
        p = as_array(p)
        if not _dtypes.is_float(get_aval(p).dtype):
            p = convert(p, _dtypes.default_float_dtype())
        if get_aval(p).shape != (n_inputs,):
            raise ValueError(f"choice: p must have shape ({n_inputs},) (a's length along "
                             f"axis {axis}), got {get_aval(p).shape}")
        index_dtype = _dtypes.default_int_dtype()
        if replace:
            cumulative = jnp.cumsum(p)
            r = cumulative[-1] * (1 - uniform(key, shape, get_aval(p).dtype))
            indices = convert(jnp.searchsorted(cumulative, r), index_dtype)
        else:
            scores = gumbel(key, (n_inputs,), get_aval(p).dtype, mode) + jnp.log(p)
            indices = convert(lax.top_k(scores, n_draws)[1], index_dtype)
        result = indices if scalar else _take(arr, indices, axis)
    arr_shape = get_aval(arr).shape
    return lax.reshape(result, shape if scalar else arr_shape[:axis] + shape + arr_shape[axis + 1:])
