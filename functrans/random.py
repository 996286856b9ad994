"""``functrans.random``: splittable, counter-based pseudo-random numbers (threefry2x32).

There is no hidden global state. A *key* is a ``uint32[2]`` array; every sampler takes a key
and returns the same numbers for the same key, so programs stay pure and reproducible under
``jit``, ``vmap`` and ``grad``. Use :func:`split` (or :func:`fold_in`) to derive independent
keys, and never reuse a key for two different draws::

    >>> import functrans.random as random
    >>> key = random.PRNGKey(0)
    >>> key, subkey = random.split(key)
    >>> random.uniform(subkey, (2,)).shape
    (2,)

The bits are those of JAX's default (non-partitionable) threefry implementation: the same
seed gives the same keys, bits, floats and integers as ``jax.random``.

How bits are made: ``bits(key, shape)`` hashes the counters ``0, 1, ..., n-1`` under the key
with the ``threefry2x32`` primitive. The counters are cut in half; counter ``i`` of the first
half and counter ``i`` of the second half form one 64-bit block, whose two output words land
at positions ``i`` and ``n/2 + i``. ``split`` is the same hash applied to ``2 * num``
counters, reshaped into ``num`` keys.
"""
from __future__ import annotations

import math

import numpy as np

from functrans import _dtypes
from functrans import lax
from functrans.core import Tracer, get_aval
from functrans.primitives.random_bits import threefry2x32

__all__ = [
    "PRNGKey", "key", "key_data", "wrap_key_data", "clone", "split", "fold_in", "bits",
    "threefry_2x32", "uniform", "normal", "bernoulli", "categorical", "randint", "permutation",
    "choice", "truncated_normal", "exponential", "laplace", "logistic", "gumbel", "rademacher",
    "multivariate_normal",
]

_UINT32 = _dtypes.uint32
_UNSIGNED = {8: _dtypes.uint8, 16: _dtypes.uint16, 32: _dtypes.uint32, 64: _dtypes.uint64}


# =============================================================================================
# Small array helpers (lax level: exact dtypes, static shapes)
# =============================================================================================

def _asarray(x):
    from functrans.numpy import asarray
    return asarray(x)


def _shape(shape, name: str) -> tuple:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    try:
        return tuple(int(s) for s in shape)
    except TypeError as err:
        raise TypeError(f"{name}: shape must be a tuple of ints, got {shape!r}") from err


def _broadcast_to(x, shape, name: str):
    from functrans.numpy._promotion import broadcast_to_shape
    try:
        return broadcast_to_shape(x, shape)
    except ValueError as err:
        raise ValueError(f"{name}: an argument of shape {get_aval(x).shape} does not "
                         f"broadcast to the requested shape {shape}") from err


def _const(value, dtype, shape=()):
    return lax.full(shape, value, dtype)


def _float_dtype(dtype, name: str):
    dtype = _dtypes.default_float_dtype() if dtype is None else _dtypes.canonicalize_dtype(dtype)
    if not _dtypes.is_float(dtype):
        raise ValueError(f"{name} needs a floating-point dtype, got {dtype}")
    return dtype


def _convert(x, dtype):
    return lax.convert_element_type(x, dtype)


# =============================================================================================
# Keys
# =============================================================================================

def _check_key(name: str, key):
    """``key`` as a ``uint32[2]`` array, with an error that says what went wrong."""
    if not isinstance(key, Tracer):
        key = _asarray(key)
    aval = get_aval(key)
    if aval.dtype != _UINT32 or aval.shape[-1:] != (2,):
        raise TypeError(f"{name}: a PRNG key is a uint32[2] array (from PRNGKey or split), "
                        f"got {aval.str_short()}")
    if aval.shape != (2,):
        raise ValueError(f"{name} takes a single key, got a batch of keys of shape "
                         f"{aval.shape[:-1]}; use functrans.vmap to map over keys")
    return key


def _key_words(key):
    """The two uint32 words of a key, as scalars."""
    return (lax.index_in_dim(key, 0, axis=0, keepdims=False),
            lax.index_in_dim(key, 1, axis=0, keepdims=False))


def _seed_words(seed):
    """(high, low) uint32 words of an integer seed, as JAX's threefry seeding splits it."""
    aval = get_aval(seed)
    if aval.shape != () or not _dtypes.is_integer(aval.dtype):
        raise TypeError(f"PRNGKey: the seed must be an integer scalar, got {aval.str_short()}")
    if aval.dtype.itemsize == 8:
        high = _convert(lax.shift_right_logical(seed, 32), _UINT32)
    else:
        high = _const(0, _UINT32)
    return high, _convert(seed, _UINT32)


def PRNGKey(seed) -> "Array":  # noqa: N802 (JAX's name)
    """A key from an integer seed: a ``uint32[2]`` array ``[high word, low word]``.

    With 64-bit mode off, a Python int seed keeps its low 32 bits (as JAX does).

        >>> PRNGKey(0)
        Array([0, 0], dtype=uint32)
        >>> PRNGKey(42)
        Array([ 0, 42], dtype=uint32)
    """
    if isinstance(seed, bool):
        raise TypeError("PRNGKey: the seed must be an integer, got a bool")
    if isinstance(seed, (int, np.integer)):
        seed = int(seed)
        if not -2 ** 63 <= seed < 2 ** 64:
            raise OverflowError(f"PRNGKey: seed {seed} does not fit in 64 bits")
        # Python ints are taken as int64 (wrapping above 2**63), then narrowed as the
        # default int dtype is when 64-bit mode is off.
        seed = np.array(seed & (2 ** 64 - 1), np.uint64).view(np.int64)
        if not _dtypes.x64_enabled():
            seed = seed.astype(np.int32)
        seed = _asarray(seed)
    elif not isinstance(seed, Tracer):
        seed = _asarray(seed)
    high, low = _seed_words(seed)
    return lax.concatenate([lax.reshape(high, (1,)), lax.reshape(low, (1,))], 0)


def key(seed, *, impl=None):
    """Same as :func:`PRNGKey` (keys are raw ``uint32[2]`` arrays in functrans).

        >>> key(1)
        Array([0, 1], dtype=uint32)
    """
    if impl not in (None, "threefry2x32"):
        raise NotImplementedError(f"PRNG implementation {impl!r}: only 'threefry2x32' exists")
    return PRNGKey(seed)


def key_data(keys):
    """The raw ``uint32`` data of keys (the keys themselves: they are raw already)."""
    return keys


def wrap_key_data(key_bits, *, impl=None):
    """Keys from raw ``uint32[..., 2]`` data (the identity for raw keys)."""
    if impl not in (None, "threefry2x32"):
        raise NotImplementedError(f"PRNG implementation {impl!r}: only 'threefry2x32' exists")
    return _asarray(key_bits) if not isinstance(key_bits, Tracer) else key_bits


def clone(key):
    """The same key (keys are immutable values)."""
    return key


# =============================================================================================
# Hashing counters
# =============================================================================================

def threefry_2x32(key, counts):
    """Hash the ``uint32`` array ``counts`` under ``key``: a ``uint32`` array of its shape.

    The flattened counts are padded to even length and cut in half; the halves are the two
    words of each counter block.

        >>> threefry_2x32(PRNGKey(0), lax.iota(np.uint32, 2)).shape
        (2,)
    """
    key = _check_key("threefry_2x32", key)
    aval = get_aval(counts)
    if aval.dtype != _UINT32:
        raise TypeError(f"threefry_2x32: counts must be uint32, got {aval.str_short()}")
    size = aval.size
    if size == 0:
        return _const(0, _UINT32, aval.shape)
    flat = lax.reshape(counts, (size,))
    odd = size % 2
    if odd:
        flat = lax.concatenate([flat, _const(0, _UINT32, (1,))], 0)
    half = (size + odd) // 2
    first = lax.slice_in_dim(flat, 0, half)
    second = lax.slice_in_dim(flat, half, 2 * half)
    key1, key2 = (lax.broadcast_in_dim(w, (half,), ()) for w in _key_words(key))
    out1, out2 = threefry2x32(key1, key2, first, second)
    out = lax.concatenate([out1, out2], 0)
    if odd:
        out = lax.slice_in_dim(out, 0, size)
    return lax.reshape(out, aval.shape)


def _counters(count: int):
    if count >= 2 ** 32 - 1:
        raise NotImplementedError(
            f"drawing {count} 32-bit words from one key: at most 2**32 - 2 are supported; "
            "split the key and draw in pieces")
    return lax.iota(_UINT32, count)


def split(key, num=2):
    """Split a key into ``num`` new keys (``num`` may be a shape): ``uint32[*num, 2]``.

        >>> split(PRNGKey(0))
        Array([[4146024105,  967050713],
               [2718843009, 1272950319]], dtype=uint32)
    """
    key = _check_key("split", key)
    shape = _shape(num, "split")
    count = math.prod(shape)
    return lax.reshape(threefry_2x32(key, _counters(2 * count)), shape + (2,))


def _split2(key):
    keys = split(key, 2)
    return (lax.index_in_dim(keys, 0, keepdims=False), lax.index_in_dim(keys, 1, keepdims=False))


def fold_in(key, data):
    """A new key from ``key`` and the integer ``data`` (e.g. a step or a device index).

        >>> fold_in(PRNGKey(0), 7)
        Array([2716826189,  292468403], dtype=uint32)
    """
    key = _check_key("fold_in", key)
    if isinstance(data, (int, np.integer)) and not isinstance(data, bool):
        if not 0 <= int(data) < 2 ** 32:
            raise OverflowError(f"fold_in: data {data} is not a uint32 value")
        data = _asarray(np.uint32(data))
    elif not isinstance(data, Tracer):
        data = _asarray(data)
    high, low = _seed_words(data)
    return threefry_2x32(key, lax.concatenate([lax.reshape(high, (1,)),
                                               lax.reshape(low, (1,))], 0))


def _random_bits(key, bit_width: int, shape: tuple):
    """``uint{bit_width}`` random bits of ``shape``."""
    size = math.prod(shape)
    word_count = -(-bit_width * size // 32)
    words = threefry_2x32(key, _counters(word_count))
    dtype = _UNSIGNED[bit_width]
    if bit_width == 64:
        # first half: high words, second half: low words
        high = _convert(lax.slice_in_dim(words, 0, size), dtype)
        low = _convert(lax.slice_in_dim(words, size, 2 * size), dtype)
        out = lax.bitwise_or(lax.shift_left(high, 32), low)
    elif bit_width == 32:
        out = words
    else:
        # each 32-bit word gives 32 // bit_width values, lowest bits first
        per_word = 32 // bit_width
        grid = (word_count, per_word)
        shifts = lax.mul(lax.broadcasted_iota(_UINT32, grid, 1), _const(bit_width, _UINT32, grid))
        parts = lax.bitwise_and(
            lax.shift_right_logical(lax.broadcast_in_dim(words, grid, (0,)), shifts),
            _const(2 ** bit_width - 1, _UINT32, grid))
        out = _convert(lax.slice_in_dim(lax.reshape(parts, (word_count * per_word,)), 0, size),
                       dtype)
    return lax.reshape(out, shape)


def bits(key, shape=(), dtype=None):
    """Uniformly random bits: an unsigned-integer array of ``shape`` (``uint32`` default).

        >>> bits(PRNGKey(0), (2,))
        Array([ 928981903, 3453687069], dtype=uint32)
    """
    key = _check_key("bits", key)
    dtype = _dtypes.default_uint_dtype() if dtype is None else _dtypes.canonicalize_dtype(dtype)
    if not _dtypes.is_unsigned(dtype):
        raise ValueError(f"bits needs an unsigned integer dtype, got {dtype}")
    return _random_bits(key, dtype.itemsize * 8, _shape(shape, "bits"))


# =============================================================================================
# Continuous distributions
# =============================================================================================

def _unit_floats(key, shape, dtype):
    """Floats uniform on [0, 1): random bits fill the mantissa of a number in [1, 2), minus 1.

    Written as ``mantissa_bits * 2**-nmant`` (exactly that number, no bit casting needed).
    """
    info = _dtypes.finfo(dtype)
    nbits, nmant = int(info.bits), int(info.nmant)
    rng_bits = nbits if nmant >= 8 else 8  # bfloat16: one byte of randomness suffices
    raw = _random_bits(key, rng_bits, shape)
    mantissa = lax.shift_right_logical(raw, _const(rng_bits - nmant, raw.dtype, shape))
    return lax.mul(_convert(mantissa, dtype), _const(2.0 ** -nmant, dtype, shape))


def uniform(key, shape=(), dtype=None, minval=0.0, maxval=1.0):
    """Floats uniform on ``[minval, maxval)``; ``minval``/``maxval`` broadcast to ``shape``.

        >>> uniform(PRNGKey(0), (3,))
        Array([0.9653214 , 0.31468165, 0.63302994], dtype=float32)
    """
    key = _check_key("uniform", key)
    shape = _shape(shape, "uniform")
    dtype = _float_dtype(dtype, "uniform")
    lo = _broadcast_to(_convert(_asarray(minval) if not isinstance(minval, Tracer) else minval,
                                dtype), shape, "uniform")
    hi = _broadcast_to(_convert(_asarray(maxval) if not isinstance(maxval, Tracer) else maxval,
                                dtype), shape, "uniform")
    floats = _unit_floats(key, shape, dtype)
    # the max guards against rounding below minval when the span is huge
    return lax.max(lo, lax.add(lax.mul(floats, lax.sub(hi, lo)), lo))


def _normal_real(key, shape, dtype):
    # inverse-CDF sampling: u uniform on (-1, 1), sqrt(2) * erfinv(u) ~ N(0, 1)
    lo = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = uniform(key, shape, dtype, lo, 1.0)
    return lax.mul(_const(math.sqrt(2.0), dtype, shape), lax.erf_inv(u))


def normal(key, shape=(), dtype=None):
    """Standard normal samples (complex dtypes: real and imaginary parts each of variance 1/2).

        >>> normal(PRNGKey(0), (2,))
        Array([-0.784766  ,  0.85644495], dtype=float32)
    """
    key = _check_key("normal", key)
    shape = _shape(shape, "normal")
    if dtype is not None and _dtypes.is_complex(_dtypes.canonicalize_dtype(dtype)):
        dtype = _dtypes.canonicalize_dtype(dtype)
        real_dtype = np.dtype(np.float64 if dtype == _dtypes.complex128 else np.float32)
        key_re, key_im = _split2(key)
        re = _normal_real(key_re, shape, real_dtype)
        im = _normal_real(key_im, shape, real_dtype)
        scale = _const(1 / math.sqrt(2.0), real_dtype, shape)
        return lax.complex(lax.mul(re, scale), lax.mul(im, scale))
    return _normal_real(key, shape, _float_dtype(dtype, "normal"))


def truncated_normal(key, lower, upper, shape=None, dtype=None):
    """Standard normal samples conditioned on ``lower < x < upper``.

        >>> x = truncated_normal(PRNGKey(0), -1.0, 1.0, (100,))
        >>> bool((x > -1).all() and (x < 1).all())
        True
    """
    key = _check_key("truncated_normal", key)
    dtype = _float_dtype(dtype, "truncated_normal")
    lower = _convert(lower if isinstance(lower, Tracer) else _asarray(lower), dtype)
    upper = _convert(upper if isinstance(upper, Tracer) else _asarray(upper), dtype)
    if shape is None:
        from functrans.numpy._promotion import broadcast_shapes
        shape = broadcast_shapes(get_aval(lower).shape, get_aval(upper).shape)
    shape = _shape(shape, "truncated_normal")
    lower, upper = _broadcast_to(lower, shape, "truncated_normal"), _broadcast_to(upper, shape, "truncated_normal")
    sqrt2 = _const(math.sqrt(2.0), dtype, shape)
    # sample the CDF's image of [lower, upper] uniformly and map back
    a = lax.erf(lax.div(lower, sqrt2))
    b = lax.erf(lax.div(upper, sqrt2))
    out = lax.mul(sqrt2, lax.erf_inv(uniform(key, shape, dtype, a, b)))
    # rounding may land exactly on a bound: clamp into the open interval
    inf = _const(np.inf, dtype, shape)
    low_bound = lax.nextafter(lax.stop_gradient(lower), inf)
    high_bound = lax.nextafter(lax.stop_gradient(upper), lax.neg(inf))
    return lax.min(lax.max(out, low_bound), high_bound)


def exponential(key, shape=(), dtype=None):
    """Exponential samples with rate 1: ``-log(1 - u)``.

        >>> exponential(PRNGKey(0), (2,)).shape
        (2,)
    """
    key = _check_key("exponential", key)
    shape = _shape(shape, "exponential")
    dtype = _float_dtype(dtype, "exponential")
    u = uniform(key, shape, dtype)
    return lax.neg(lax.log1p(lax.neg(u)))


def laplace(key, shape=(), dtype=None):
    """Laplace samples (location 0, scale 1).

        >>> laplace(PRNGKey(0), (2,)).shape
        (2,)
    """
    key = _check_key("laplace", key)
    shape = _shape(shape, "laplace")
    dtype = _float_dtype(dtype, "laplace")
    epsneg = float(_dtypes.finfo(dtype).epsneg)
    u = uniform(key, shape, dtype, -1.0 + epsneg, 1.0)
    return lax.mul(lax.sign(u), lax.log1p(lax.neg(lax.abs(u))))


def logistic(key, shape=(), dtype=None):
    """Standard logistic samples: ``log(u / (1 - u))``.

        >>> logistic(PRNGKey(0), (2,)).shape
        (2,)
    """
    key = _check_key("logistic", key)
    shape = _shape(shape, "logistic")
    dtype = _float_dtype(dtype, "logistic")
    u = uniform(key, shape, dtype, float(_dtypes.finfo(dtype).tiny), 1.0)
    return lax.sub(lax.log(u), lax.log1p(lax.neg(u)))


def gumbel(key, shape=(), dtype=None, mode="low"):
    """Standard Gumbel samples: ``-log(-log(u))``.

        >>> gumbel(PRNGKey(0), (2,)).shape
        (2,)
    """
    key = _check_key("gumbel", key)
    if mode != "low":
        raise NotImplementedError(f"gumbel: mode={mode!r}; only mode='low' is implemented")
    shape = _shape(shape, "gumbel")
    dtype = _float_dtype(dtype, "gumbel")
    u = uniform(key, shape, dtype, float(_dtypes.finfo(dtype).tiny), 1.0)
    return lax.neg(lax.log(lax.neg(lax.log(u))))


def multivariate_normal(key, mean, cov, shape=None, dtype=None, method="cholesky"):
    """Samples of N(mean, cov): ``mean + L @ z`` with ``cov = L L^T`` (Cholesky) and ``z``
    standard normal. ``shape`` is the batch shape (default: the broadcast of ``mean``'s and
    ``cov``'s batch shapes).

        >>> import functrans.numpy as jnp
        >>> multivariate_normal(PRNGKey(0), jnp.zeros(2), jnp.eye(2), (5,)).shape
        (5, 2)
    """
    import functrans.numpy as jnp
    key = _check_key("multivariate_normal", key)
    dtype = _float_dtype(dtype, "multivariate_normal")
    mean = lax.convert_element_type(_asarray(mean) if not isinstance(mean, Tracer) else mean, dtype)
    cov = lax.convert_element_type(_asarray(cov) if not isinstance(cov, Tracer) else cov, dtype)
    mean_shape, cov_shape = get_aval(mean).shape, get_aval(cov).shape
    if len(mean_shape) < 1 or len(cov_shape) < 2 or cov_shape[-2:] != mean_shape[-1:] * 2:
        raise ValueError(f"multivariate_normal: mean of shape {mean_shape} and cov of shape "
                         f"{cov_shape} do not describe one distribution (need (..., n) and "
                         "(..., n, n))")
    if shape is None:
        from functrans.numpy._promotion import broadcast_shapes
        shape = broadcast_shapes(mean_shape[:-1], cov_shape[:-2])
    shape = _shape(shape, "multivariate_normal")
    n = mean_shape[-1]
    if method == "cholesky":
        factor = jnp.linalg.cholesky(cov)
    elif method in ("eigh", "svd"):
        eigvals, eigvecs = jnp.linalg.eigh(cov)
        factor = eigvecs * jnp.sqrt(jnp.maximum(eigvals, 0.0))[..., None, :]
    else:
        raise ValueError(f"multivariate_normal: unknown method {method!r}")
    z = normal(key, shape + (n,), dtype)
    return mean + jnp.einsum("...ij,...j->...i", factor, z)


# =============================================================================================
# Discrete distributions
# =============================================================================================

def bernoulli(key, p=0.5, shape=None):
    """Booleans that are True with probability ``p`` (broadcast to ``shape``).

        >>> bernoulli(PRNGKey(0), 0.3, (4,))
        Array([False,  True, False,  True], dtype=bool)
    """
    key = _check_key("bernoulli", key)
    p = p if isinstance(p, Tracer) else _asarray(p)
    dtype = get_aval(p).dtype
    if not _dtypes.is_float(dtype):
        dtype = _dtypes.default_float_dtype()
    p = _convert(p, dtype)
    shape = get_aval(p).shape if shape is None else _shape(shape, "bernoulli")
    return lax.lt(uniform(key, shape, dtype), _broadcast_to(p, shape, "bernoulli"))


def rademacher(key, shape=(), dtype=None):
    """Random ``-1`` or ``+1`` with equal probability.

        >>> rademacher(PRNGKey(0), (3,)).dtype
        dtype('int32')
    """
    shape = _shape(shape, "rademacher")
    dtype = _dtypes.default_int_dtype() if dtype is None else _dtypes.canonicalize_dtype(dtype)
    coin = _convert(bernoulli(key, 0.5, shape), dtype)
    return lax.sub(lax.mul(coin, _const(2, dtype, shape)), _const(1, dtype, shape))


def _clip_to_dtype(value, dtype):
    """An integer array converted to ``dtype``, saturating at its bounds instead of wrapping."""
    source = get_aval(value).dtype
    lo = max(int(np.iinfo(dtype).min), int(np.iinfo(source).min))
    hi = min(int(np.iinfo(dtype).max), int(np.iinfo(source).max))
    return _convert(lax.clamp(np.array(lo, source)[()], value, np.array(hi, source)[()]), dtype)


def _integer_bound(value):
    value = value if isinstance(value, Tracer) else _asarray(value)
    if not _dtypes.is_integer(get_aval(value).dtype):
        value = _convert(value, _dtypes.default_int_dtype())
    return value


def randint(key, shape, minval, maxval, dtype=None):
    """Integers uniform on ``[minval, maxval)`` (bounds broadcast to ``shape``).

    Two draws of random bits are combined so that the bias for spans that are not powers of
    two is tiny (the same algorithm and bits as ``jax.random.randint``).

        >>> randint(PRNGKey(0), (4,), 0, 10)
        Array([8, 1, 7, 0], dtype=int32)
    """
    key = _check_key("randint", key)
    shape = _shape(shape, "randint")
    dtype = _dtypes.default_int_dtype() if dtype is None else _dtypes.canonicalize_dtype(dtype)
    if not _dtypes.is_integer(dtype):
        raise TypeError(f"randint needs an integer dtype, got {dtype}")
    minval, maxval = _integer_bound(minval), _integer_bound(maxval)
    if dtype.itemsize < 4:
        # 8- and 16-bit results are drawn at 32 bits (far less modulo bias), then narrowed
        info, int32 = np.iinfo(dtype), _dtypes.int32
        clip = lambda v, lo, hi: lax.clamp(np.int32(lo), _convert(v, int32), np.int32(hi))  # noqa: E731
        wide = randint(key, shape, clip(minval, info.min, info.max),
                       clip(maxval, info.min, int(info.max) + 1), int32)
        return _convert(wide, dtype)
    nbits = dtype.itemsize * 8
    # maxval may exceed the dtype (randint(k, s, 0, 256, uint8)): the span is then 2**nbits
    dtype_max = np.array(min(int(np.iinfo(dtype).max), int(np.iinfo(get_aval(maxval).dtype).max)),
                         get_aval(maxval).dtype)[()]
    maxval_beyond_dtype = lax.gt(maxval, lax.full(get_aval(maxval).shape, dtype_max))
    minval = _broadcast_to(_clip_to_dtype(minval, dtype), shape, "randint")
    maxval = _broadcast_to(_clip_to_dtype(maxval, dtype), shape, "randint")
    maxval_beyond_dtype = _broadcast_to(maxval_beyond_dtype, shape, "randint")

    key_high, key_low = _split2(key)
    high_bits = _random_bits(key_high, nbits, shape)
    low_bits = _random_bits(key_low, nbits, shape)

    unsigned = _UNSIGNED[nbits]
    one = _const(1, unsigned, shape)
    span = _convert(lax.sub(maxval, minval), unsigned)
    empty = lax.le(maxval, minval)
    span = lax.select(empty, one, span)  # an empty range returns minval
    span = lax.select(lax.bitwise_and(maxval_beyond_dtype, lax.bitwise_not(empty)),
                      lax.add(span, one), span)
    # offset = (high * 2**nbits + low) mod span, computed without overflow
    multiplier = lax.rem(_const(2 ** (nbits // 2), unsigned, shape), span)
    multiplier = lax.rem(lax.mul(multiplier, multiplier), span)
    offset = lax.add(lax.mul(lax.rem(high_bits, span), multiplier), lax.rem(low_bits, span))
    offset = lax.rem(offset, span)
    return lax.add(minval, _convert(offset, dtype))


def _shuffle(key, x, axis: int, keys_shape: tuple):
    """Shuffle ``x`` along ``axis`` by sorting with random 32-bit keys of ``keys_shape``
    (broadcast along the other axes when it is 1-D), repeated until key collisions are
    negligible (3 * log(n) / log(2**32) rounds)."""
    size = math.prod(keys_shape)
    rounds = int(np.ceil(3 * np.log(max(1, size)) / np.log(2 ** 32 - 1)))
    x_shape = get_aval(x).shape
    for _ in range(rounds):
        key, subkey = _split2(key)
        sort_keys = _random_bits(subkey, 32, keys_shape)
        if keys_shape != x_shape:
            # one permutation for every slice: each slice is sorted by the same keys
            sort_keys = lax.broadcast_in_dim(sort_keys, x_shape, (axis,))
        _, x = lax.sort_key_val(sort_keys, x, axis)
    return x


def permutation(key, x, axis=0, independent=False):
    """A random permutation of ``range(x)`` (integer ``x``) or of ``x`` along ``axis``
    (with ``independent=True``, each slice along the other axes is shuffled separately).

        >>> permutation(PRNGKey(0), 5).shape
        (5,)
    """
    key = _check_key("permutation", key)
    if isinstance(x, Tracer) and x.ndim == 0:
        raise TypeError("permutation: x is a traced scalar; the length must be static")
    if not isinstance(x, Tracer) and np.ndim(x) == 0:
        n = int(np.asarray(x))
        return _shuffle(key, lax.iota(_dtypes.default_int_dtype(), n), 0, (n,))
    x = x if isinstance(x, Tracer) else _asarray(x)
    shape = get_aval(x).shape
    axis = int(axis) % len(shape)
    if independent or len(shape) == 1:
        return _shuffle(key, x, axis, shape)
    return _shuffle(key, x, axis, (shape[axis],))


def _take(a, indices, axis):
    import functrans.numpy as jnp
    return jnp.take(a, indices, axis=axis)


def categorical(key, logits, axis=-1, shape=None, replace=True):
    """Indices sampled from ``softmax(logits)`` along ``axis`` (Gumbel-max trick).

    ``shape`` (default: ``logits``' shape without ``axis``) may add leading sample axes.
    With ``replace=False``, the leading samples are distinct categories (Gumbel top-k).

        >>> import functrans.numpy as jnp
        >>> categorical(PRNGKey(0), jnp.log(jnp.array([0.1, 0.2, 0.7])), shape=(4,))
        Array([2, 2, 2, 2], dtype=int32)
    """
    key = _check_key("categorical", key)
    logits = logits if isinstance(logits, Tracer) else _asarray(logits)
    logits_shape = get_aval(logits).shape
    dtype = get_aval(logits).dtype
    if not _dtypes.is_float(dtype):
        raise TypeError(f"categorical: logits must be floating point, got {dtype}")
    ndim = len(logits_shape)
    axis = int(axis) % ndim
    batch_shape = logits_shape[:axis] + logits_shape[axis + 1:]
    shape = batch_shape if shape is None else _shape(shape, "categorical")
    if shape[len(shape) - len(batch_shape):] != batch_shape:
        raise ValueError(f"categorical: shape {shape} must end with the logits' batch shape "
                         f"{batch_shape}")
    prefix = shape[:len(shape) - len(batch_shape)]
    index_dtype = _dtypes.default_int_dtype()
    if replace:
        full_shape = prefix + logits_shape
        noisy = lax.add(gumbel(key, full_shape, dtype),
                        lax.broadcast_in_dim(logits, full_shape,
                                             tuple(range(len(prefix), len(full_shape)))))
        return lax.argmax(noisy, len(prefix) + axis, index_dtype)
    draws = math.prod(prefix)
    if draws > logits_shape[axis]:
        raise ValueError(f"categorical: {draws} samples without replacement exceed the "
                         f"{logits_shape[axis]} categories")
    noisy = lax.add(logits, gumbel(key, logits_shape, dtype))
    moved = lax.transpose(noisy, tuple(i for i in range(ndim) if i != axis) + (axis,))
    _, indices = lax.top_k(moved, draws)  # batch_shape + (draws,)
    indices = lax.transpose(indices, (len(batch_shape),) + tuple(range(len(batch_shape))))
    return _convert(lax.reshape(indices, shape), index_dtype)


def _searchsorted_left(sorted_values, queries):
    """Index of the first element ``>= query`` (``side='left'``): the count of smaller ones."""
    n = get_aval(sorted_values).shape[0]
    q_shape = get_aval(queries).shape
    grid = q_shape + (n,)
    smaller = lax.lt(lax.broadcast_in_dim(sorted_values, grid, (len(q_shape),)),
                     lax.broadcast_in_dim(queries, grid, tuple(range(len(q_shape)))))
    return lax.reduce_sum(_convert(smaller, _dtypes.default_int_dtype()), (len(q_shape),))


def choice(key, a, shape=(), replace=True, p=None, axis=0):
    """Random samples from ``a`` (an int ``n`` stands for ``arange(n)``) along ``axis``,
    with or without replacement, uniform or with probabilities ``p``.

        >>> choice(PRNGKey(0), 10, (4,))
        Array([8, 1, 7, 0], dtype=int32)
    """
    key = _check_key("choice", key)
    shape = _shape(shape, "choice")
    if isinstance(a, (int, np.integer)) and not isinstance(a, bool):
        arr, n_inputs = None, int(a)
    else:
        arr = a if isinstance(a, Tracer) else _asarray(a)
        if get_aval(arr).ndim == 0:
            arr, n_inputs = None, int(arr)
        else:
            axis = int(axis) % get_aval(arr).ndim
            n_inputs = get_aval(arr).shape[axis]
    int_dtype = _dtypes.default_int_dtype()
    n_draws = math.prod(shape)
    if n_draws == 0:
        dtype = int_dtype if arr is None else get_aval(arr).dtype
        return lax.full(shape if arr is None else _choice_result_shape(arr, axis, shape), 0, dtype)
    if n_inputs <= 0:
        raise ValueError("choice: a must be non-empty unless no samples are taken")
    if not replace and n_draws > n_inputs:
        raise ValueError(f"choice: cannot take {n_draws} samples without replacement from "
                         f"{n_inputs} elements")
    if p is None:
        if replace:
            indices = randint(key, shape, 0, n_inputs)
        else:
            source = lax.iota(int_dtype, n_inputs) if arr is None else arr
            shuffled = permutation(key, source, 0 if arr is None else axis)
            picked = lax.slice_in_dim(shuffled, 0, n_draws, axis=0 if arr is None else axis)
            if arr is None:
                return lax.reshape(picked, shape)
            return lax.reshape(picked, _choice_result_shape(arr, axis, shape))
    else:
        p = p if isinstance(p, Tracer) else _asarray(p)
        p_dtype = get_aval(p).dtype
        if not _dtypes.is_float(p_dtype):
            p_dtype = _dtypes.default_float_dtype()
            p = _convert(p, p_dtype)
        if get_aval(p).shape != (n_inputs,):
            raise ValueError(f"choice: p must have shape ({n_inputs},), got {get_aval(p).shape}")
        if replace:
            cumulative = lax.cumsum(p, 0)
            total = lax.index_in_dim(cumulative, n_inputs - 1, keepdims=False)
            u = uniform(key, shape, p_dtype)
            r = lax.mul(lax.broadcast_in_dim(total, shape, ()),
                        lax.sub(_const(1, p_dtype, shape), u))
            indices = _searchsorted_left(cumulative, r)
        else:
            scores = lax.add(gumbel(key, (n_inputs,), p_dtype), lax.log(p))
            indices = _convert(lax.top_k(scores, n_draws)[1], int_dtype)
            indices = lax.reshape(indices, shape)
    if arr is None:
        return lax.reshape(indices, shape)
    return lax.reshape(_take(arr, indices, axis), _choice_result_shape(arr, axis, shape))


def _choice_result_shape(arr, axis, shape):
    arr_shape = get_aval(arr).shape
    return arr_shape[:axis] + tuple(shape) + arr_shape[axis + 1:]
