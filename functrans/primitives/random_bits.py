"""Random bits: the ``threefry2x32`` counter-based hash as a primitive.

Threefry-2x32 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) maps a
64-bit key and a 64-bit counter, each given as two uint32 words, to 64 pseudo-random bits.
It is a pure elementwise function of its four uint32 operands, so it jits, vmaps and
differentiates (its outputs are integers: zero tangents) like any other elementwise op.
``functrans.random`` builds keys, splitting and every distribution on top of it.

The primitive takes four uint32 arrays of one shape ``(key1, key2, x1, x2)`` and returns two
uint32 arrays of that shape. Backends that lower it key their code by the name
``threefry2x32`` and use :data:`ROTATIONS`, :data:`KEY_SCHEDULE_PARITY` and the 20-round
schedule documented in :func:`threefry2x32_reference`.
"""
from __future__ import annotations

import enum
import math
import operator

import numpy as np

from functrans import _dtypes
from functrans.core import Primitive, ShapedArray, get_aval
from functrans.interpreters import ad, batching
from functrans.primitives import elementwise as ew

# Rotation distances of the 2x32 variant: rounds alternate between the two groups of four.
ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
# The third key word is key1 ^ key2 ^ this constant (Skein's key-schedule parity).
KEY_SCHEDULE_PARITY = 0x1BD11BDA

threefry2x32_p = Primitive("threefry2x32", multiple_results=True)


def _rotate_left(x: np.ndarray, distance: int) -> np.ndarray:
    return (x << np.uint32(distance)) | (x >> np.uint32(32 - distance))


def threefry2x32_reference(key1, key2, x1, x2):
    """Threefry-2x32 with 20 rounds on NumPy uint32 arrays of one shape.

    Five groups of four mix rounds (``x1 += x2; x2 = rotl(x2, r) ^ x1``); before the first
    group and after each one, the key schedule (``ks = key1, key2, key1^key2^parity``) is
    injected with the group index added to the second word.

        >>> [hex(int(v[0])) for v in threefry2x32_reference(*np.zeros((4, 1), np.uint32))]
        ['0x6b200159', '0x99ba4efe']
    """
    key1, key2, x1, x2 = (np.asarray(a, dtype=np.uint32) for a in (key1, key2, x1, x2))
    schedule = (key1, key2, key1 ^ key2 ^ np.uint32(KEY_SCHEDULE_PARITY))
    # uint32 arithmetic wraps by design; NumPy warns on 0-d overflow unless told not to
    with np.errstate(over="ignore"):
        x1 = x1 + schedule[0]
        x2 = x2 + schedule[1]
        for group in range(5):
            for distance in ROTATIONS[group % 2]:
                x1 = x1 + x2
                x2 = _rotate_left(x2, distance) ^ x1
            x1 = x1 + schedule[(group + 1) % 3]
            x2 = x2 + schedule[(group + 2) % 3] + np.uint32(group + 1)
    return [np.asarray(x1, dtype=np.uint32), np.asarray(x2, dtype=np.uint32)]


@threefry2x32_p.def_impl
def _threefry2x32_impl(key1, key2, x1, x2):
    return threefry2x32_reference(key1, key2, x1, x2)


@threefry2x32_p.def_abstract_eval
def _threefry2x32_rule(key1, key2, x1, x2):
    avals = (key1, key2, x1, x2)
    if any(a.dtype != _dtypes.uint32 for a in avals):
        raise TypeError("threefry2x32 requires uint32 operands (key1, key2, x1, x2), got "
                        + ", ".join(a.str_short() for a in avals))
    if len({a.shape for a in avals}) != 1:
        raise TypeError("threefry2x32 requires operands of one shape (broadcast the key to the "
                        "counters' shape first), got " + ", ".join(a.str_short() for a in avals))
    out = ShapedArray(x1.shape, _dtypes.uint32)
    return [out, out]


# Integer outputs: derivatives through random bits are zero (a key carries no gradient).
ad.defjvp_zero(threefry2x32_p)
# Elementwise in all four operands: batch dims line up like any binary op's.
batching.broadcast_batcher(threefry2x32_p)


def threefry2x32(key1, key2, x1, x2):
    """Hash counters ``(x1, x2)`` under key ``(key1, key2)``: two uint32 arrays of the
    counters' shape. All four operands are uint32 arrays of one shape.

        >>> import numpy as np
        >>> z = np.zeros(2, np.uint32)
        >>> threefry2x32(z, z, z, np.arange(2, dtype=np.uint32))[0].shape
        (2,)
    """
    return threefry2x32_p.bind(key1, key2, x1, x2)


class RandomAlgorithm(enum.IntEnum):
    """The bit generator of :func:`rng_bit_generator`. ``RNG_DEFAULT`` is Philox on this
    backend (as on XLA:CPU)."""
    RNG_DEFAULT = 0
    RNG_THREE_FRY = 1
    RNG_PHILOX = 2

    def __str__(self):
        return self.name


# =============================================================================================
# rng_uniform: stateful uniform numbers (no key)
# =============================================================================================

_stateful_generator = np.random.default_rng()

rng_uniform_p = Primitive("rng_uniform")


@rng_uniform_p.def_impl
def _rng_uniform_impl(a, b, *, shape):
    if _dtypes.is_integer(a.dtype):
        return _stateful_generator.integers(a, b, size=shape, dtype=a.dtype, endpoint=False)
    u = _stateful_generator.random(size=shape)
    return (a + (b - a) * u).astype(a.dtype)


@rng_uniform_p.def_abstract_eval
def _rng_uniform_rule(a, b, *, shape):
    if a.shape != () or b.shape != () or a.dtype != b.dtype:
        raise TypeError(f"rng_uniform: a and b must be scalars of one dtype, got "
                        f"{a.str_short()} and {b.str_short()}")
    if _dtypes.is_bool(a.dtype) or _dtypes.is_complex(a.dtype):
        raise TypeError(f"rng_uniform: unsupported dtype {a.dtype.name}")
    return ShapedArray(shape, a.dtype, a.weak_type and b.weak_type)


def rng_uniform(a, b, shape):
    """Stateful pseudo-random numbers uniform in ``[a, b)`` (floats or integers), from a
    process-wide generator: every call (and every run of a compiled function) draws new
    numbers. Prefer :mod:`functrans.random`, whose keys make results reproducible.

        >>> rng_uniform(0.0, 1.0, (3,)).shape
        (3,)
    """
    a, b = _same_dtype_scalars(a, b)
    return rng_uniform_p.bind(a, b, shape=tuple(int(s) for s in shape))


def _same_dtype_scalars(a, b):
    """Python scalars take the other operand's dtype (both Python: their own, weakly)."""
    if _dtypes.is_python_scalar(a):
        a = ew.convert_element_type(a, get_aval(b).dtype, weak_type=get_aval(b).weak_type)
    if _dtypes.is_python_scalar(b):
        b = ew.convert_element_type(b, get_aval(a).dtype, weak_type=get_aval(a).weak_type)
    return a, b


# =============================================================================================
# rng_bit_generator: XLA's counter-based bit generators, bit for bit
# =============================================================================================

_PHILOX_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
_PHILOX_KEY_STEPS = (0x9E3779B9, 0xBB67AE85)


def _philox4x32(key, counter):
    """Philox-4x32 with 10 rounds (Salmon et al., SC 2011). ``key``: two uint32 arrays;
    ``counter``: four uint32 arrays (low word first). Returns four uint32 arrays."""
    c = [w.astype(np.uint64) for w in counter]
    k0, k1 = (w.astype(np.uint64) for w in key)
    mask = np.uint64(0xFFFFFFFF)
    m0, m1 = (np.uint64(m) for m in _PHILOX_MULTIPLIERS)
    s0, s1 = (np.uint64(s) for s in _PHILOX_KEY_STEPS)
    for _ in range(10):
        p0, p1 = m0 * c[0], m1 * c[2]   # 32 x 32 -> 64 bits: no overflow in uint64
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & mask,
             (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & mask]
        k0, k1 = (k0 + s0) & mask, (k1 + s1) & mask
    return [w.astype(np.uint32) for w in c]


def _counters(start: int, count: int, words: int):
    """``count`` consecutive counters from ``start`` as ``words`` (2 or 4) uint32 arrays, low
    word first, wrapping modulo ``2**(32 * words)``."""
    low = np.uint64(start & 0xFFFFFFFFFFFFFFFF)
    with np.errstate(over="ignore"):
        lo = low + np.arange(count, dtype=np.uint64)       # wraps modulo 2**64
        carry = (lo < low).astype(np.uint64)
        hi = np.uint64((start >> 64) & 0xFFFFFFFFFFFFFFFF) + carry
    mask, s32 = np.uint64(0xFFFFFFFF), np.uint64(32)
    out = [lo & mask, lo >> s32, hi & mask, hi >> s32]
    return [w.astype(np.uint32) for w in out[:words]]


def _threefry_split_axis(shape) -> int:
    """XLA's ThreeFry pairs up the outputs along one axis: the first even one, else the
    largest (first among equals) longer than 1, else axis 0."""
    for i, d in enumerate(shape):
        if d % 2 == 0:
            return i
    best = -1
    for i, d in enumerate(shape):
        if d > 1 and (best < 0 or d > shape[best]):
            best = i
    return max(best, 0)


def _threefry_words(key, counter, shape):
    """32-bit words laid out as XLA's ThreeFry lays them out, and the blocks used."""
    if not shape:
        words, blocks = _threefry_words(key, counter, (1,))
        return words.reshape(()), blocks
    axis = _threefry_split_axis(shape)
    half = list(shape)
    half[axis] = -(-shape[axis] // 2)
    blocks = math.prod(half)
    lo, hi = _counters(counter, blocks, 2)
    w0, w1 = threefry2x32_reference(np.full(blocks, key[0], np.uint32),
                                    np.full(blocks, key[1], np.uint32), lo, hi)
    # each block's two words sit next to each other along the split axis' new inner pair
    pairs = np.stack([w0.reshape(half), w1.reshape(half)], axis=axis + 1)
    full = pairs.reshape(half[:axis] + [2 * half[axis]] + half[axis + 1:])
    return full[tuple(slice(0, d) for d in shape)], blocks


def _threefry_u64(key, counter, shape):
    blocks = math.prod(shape)
    lo, hi = _counters(counter, blocks, 2)
    w0, w1 = threefry2x32_reference(np.full(blocks, key[0], np.uint32),
                                    np.full(blocks, key[1], np.uint32), lo, hi)
    out = w0.astype(np.uint64) | (w1.astype(np.uint64) << np.uint64(32))
    return out.reshape(shape), blocks


def _philox_words(key, counter, count):
    """``count`` 32-bit words from consecutive 128-bit counters whose high half starts at
    the key (XLA's layout for a 128-bit state), and the blocks used."""
    blocks = -(-count // 4)
    start = counter | (int(key[0]) << 64) | (int(key[1]) << 96)
    ctr = _counters(start, blocks, 4)
    keys = [np.full(blocks, k, np.uint32) for k in key[:2]]
    words = np.stack(_philox4x32(keys, ctr), axis=1).reshape(-1)
    return words[:count], blocks


def _rng_bit_generator_one(key, shape, dtype, algorithm):
    key = [int(k) for k in key]
    counter = key[2] | (key[3] << 32)
    dtype = np.dtype(dtype)
    size = math.prod(shape)
    if algorithm == RandomAlgorithm.RNG_THREE_FRY:
        if dtype.itemsize == 8:
            bits, blocks = _threefry_u64(key, counter, shape)
        else:
            bits, blocks = _threefry_words(key, counter, shape)
    else:  # RNG_DEFAULT is Philox on CPU
        per_element = 2 if dtype.itemsize == 8 else 1
        words, blocks = _philox_words(key, counter, size * per_element)
        if per_element == 2:
            pairs = words.reshape(-1, 2).astype(np.uint64)
            bits = (pairs[:, 0] | (pairs[:, 1] << np.uint64(32))).reshape(shape)
        else:
            bits = words.reshape(shape)
    new_counter = (counter + blocks) % (1 << 64)
    new_key = np.array([key[0], key[1], new_counter & 0xFFFFFFFF, new_counter >> 32], np.uint32)
    # narrower types keep the low bits of each 32-bit word
    return new_key, np.asarray(bits).astype(dtype)


rng_bit_generator_p = Primitive("rng_bit_generator", multiple_results=True)


@rng_bit_generator_p.def_impl
def _rng_bit_generator_impl(key, *, shape, dtype, algorithm):
    batch = key.shape[:-1]
    flat = key.reshape(-1, 4)
    new_keys, outs = [], []
    for k in flat:
        nk, bits = _rng_bit_generator_one(k, shape, dtype, algorithm)
        new_keys.append(nk)
        outs.append(bits)
    new_keys = np.stack(new_keys).reshape(batch + (4,)) if flat.shape[0] else \
        np.zeros(batch + (4,), np.uint32)
    outs = np.stack(outs).reshape(batch + shape) if flat.shape[0] else \
        np.zeros(batch + shape, dtype)
    return [new_keys, outs]


@rng_bit_generator_p.def_abstract_eval
def _rng_bit_generator_rule(key, *, shape, dtype, algorithm):
    # keys may carry leading batch axes (from vmap): (..., 4) -> (..., *shape)
    if key.dtype != np.uint32 or not key.shape or key.shape[-1] != 4:
        raise TypeError(f"rng_bit_generator: the key must be uint32[4], got {key.str_short()}")
    batch = key.shape[:-1]
    return [ShapedArray(key.shape, key.dtype), ShapedArray(batch + tuple(shape), dtype)]


def _rng_bit_generator_batch(vals, dims, **params):
    (key,), (d,) = vals, dims
    return rng_bit_generator_p.bind(batching.moveaxis(key, d, 0), **params), [0, 0]


rng_bit_generator_p.batch = _rng_bit_generator_batch
ad.defjvp_zero(rng_bit_generator_p)

_BIT_GENERATOR_DTYPES = ("uint8", "uint16", "uint32", "uint64")


def rng_bit_generator(key, shape, dtype=np.uint32, algorithm=RandomAlgorithm.RNG_DEFAULT, *,
                      out_sharding=None):
    """Random bits of ``shape`` and unsigned ``dtype`` from a uint32[4] state ``key``;
    returns ``(new_key, bits)``. Bit-for-bit the generators of XLA:CPU (and so of JAX on CPU):
    ``RNG_THREE_FRY`` (Threefry-2x32: key words 0-1 are the key, words 2-3 a 64-bit counter)
    and ``RNG_PHILOX`` (Philox-4x32-10), which ``RNG_DEFAULT`` means here. Narrower dtypes
    keep the low bits of 32-bit words; uint64 needs x64.

        >>> key = jnp.array([1, 2, 3, 4], jnp.uint32)
        >>> rng_bit_generator(key, (2,), algorithm=RandomAlgorithm.RNG_THREE_FRY)[1]
        Array([1576285164, 2249660814], dtype=uint32)
    """
    dtype = _dtypes.canonicalize_dtype(dtype)
    if dtype.name not in _BIT_GENERATOR_DTYPES:
        raise TypeError(f"rng_bit_generator: unsupported dtype {dtype.name} (use one of "
                        f"{', '.join(_BIT_GENERATOR_DTYPES)})")
    try:
        algorithm = RandomAlgorithm(int(algorithm))
    except (TypeError, ValueError):
        raise NotImplementedError(f"rng_bit_generator: unknown algorithm {algorithm!r}; "
                                  "RNG_DEFAULT, RNG_THREE_FRY and RNG_PHILOX are "
                                  "supported") from None
    key_aval = get_aval(key)
    if key_aval.shape != (4,) or key_aval.dtype != np.uint32:
        raise TypeError(f"rng_bit_generator: the key must be uint32[4], got "
                        f"{key_aval.str_short()}")
    shape = tuple(operator.index(s) for s in shape)
    return tuple(rng_bit_generator_p.bind(key, shape=shape, dtype=dtype,
                                          algorithm=int(algorithm)))


__all__ = ["RandomAlgorithm", "rng_bit_generator", "rng_uniform", "threefry2x32"]
