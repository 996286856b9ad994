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
    "PRNGKey", "key", "key_data", "wrap_key_data", "key_impl", "key_dtype", "clone", "split",
    "fold_in", "bits",
    "threefry_2x32", "uniform", "normal", "bernoulli", "categorical", "randint", "permutation",
    "choice", "truncated_normal", "exponential", "laplace", "logistic", "gumbel", "rademacher",
    "multivariate_normal",
    # the gamma family
    "gamma", "loggamma", "beta", "dirichlet", "chisquare", "f", "t",
    # transforms of uniform and normal draws
    "cauchy", "pareto", "lognormal", "rayleigh", "maxwell", "double_sided_maxwell",
    "weibull_min", "generalized_normal", "triangular", "wald", "ball", "orthogonal",
    # counts
    "geometric", "poisson", "binomial", "multinomial",
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


def _float_args(name, key, shape, dtype):
    """The checked key, shape and float dtype of sampler ``name``."""
    return _check_key(name, key), _shape(shape, name), _float_dtype(dtype, name)


def _param_args(name, key, shape, dtype, *params):
    """The checked key, the sample shape (``shape``, or the parameters' broadcast shape), the
    float dtype and the parameters as arrays of it, for sampler ``name``."""
    key, dtype = _check_key(name, key), _float_dtype(dtype, name)
    params = tuple(_float_param(p, dtype) for p in params)
    return key, _sample_shape(name, shape, *params), dtype, params


def _convert(x, dtype):
    return lax.convert_element_type(x, dtype)


# =============================================================================================
# Keys
# =============================================================================================

def _check_key(name: str, key, single: bool = True):
    """``key`` as a ``uint32[2]`` array (or, unless ``single``, a batch of them), with an
    error that says what went wrong."""
    if not isinstance(key, Tracer):
        key = _asarray(key)
    aval = get_aval(key)
    if aval.dtype != _UINT32 or aval.shape[-1:] != (2,):
        what = ("a uint32[2] array (from PRNGKey or split)" if single else
                "a uint32 array whose last axis has size 2 (from PRNGKey, key or split)")
        raise TypeError(f"{name}: a PRNG key is {what}, got {aval.str_short()}")
    if single and aval.shape != (2,):
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


# JAX's implementation names; only threefry2x32 exists here, the others are known by name
# so that asking for one fails with "not implemented" rather than "unknown".
_KNOWN_IMPLS = ("threefry2x32", "rbg", "unsafe_rbg", "philox2x32", "philox4x32",
                "threefry4x32")


def key_impl(keys) -> str:
    """The name of the PRNG implementation behind ``keys`` (a key or a batch of keys):
    always ``"threefry2x32"`` in functrans.

        >>> key_impl(PRNGKey(0))
        'threefry2x32'
    """
    _check_key("key_impl", keys, single=False)
    return "threefry2x32"


def key_dtype(impl_spec=None):
    """The dtype of key data for PRNG implementation ``impl_spec`` (default threefry2x32).

    functrans keys are raw ``uint32[..., 2]`` arrays rather than JAX's typed key arrays, so
    this is ``uint32``: a key of shape ``s`` is stored as data of shape ``s + (2,)``.

        >>> key_dtype()
        dtype('uint32')
    """
    if impl_spec not in (None, "threefry2x32"):
        if impl_spec in _KNOWN_IMPLS:
            raise NotImplementedError(f"key_dtype: PRNG implementation {impl_spec!r}: only "
                                      f"'threefry2x32' exists in functrans")
        raise ValueError(f"key_dtype: unrecognized PRNG implementation {impl_spec!r}; the "
                         f"available one is 'threefry2x32'")
    return np.dtype(np.uint32)


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
    key, shape, dtype = _float_args("uniform", key, shape, dtype)
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
    key, shape, dtype = _float_args("exponential", key, shape, dtype)
    u = uniform(key, shape, dtype)
    return lax.neg(lax.log1p(lax.neg(u)))


def laplace(key, shape=(), dtype=None):
    """Laplace samples (location 0, scale 1).

        >>> laplace(PRNGKey(0), (2,)).shape
        (2,)
    """
    key, shape, dtype = _float_args("laplace", key, shape, dtype)
    epsneg = float(_dtypes.finfo(dtype).epsneg)
    u = uniform(key, shape, dtype, -1.0 + epsneg, 1.0)
    return lax.mul(lax.sign(u), lax.log1p(lax.neg(lax.abs(u))))


def logistic(key, shape=(), dtype=None):
    """Standard logistic samples: ``log(u / (1 - u))``.

        >>> logistic(PRNGKey(0), (2,)).shape
        (2,)
    """
    key, shape, dtype = _float_args("logistic", key, shape, dtype)
    u = uniform(key, shape, dtype, float(_dtypes.finfo(dtype).tiny), 1.0)
    return lax.sub(lax.log(u), lax.log1p(lax.neg(u)))


def gumbel(key, shape=(), dtype=None, mode="low"):
    """Standard Gumbel samples: ``-log(-log(u))``. ``mode="high"`` resolves the upper tail
    better: it draws ``x = 1 - u`` with extra low-order bits near 0 (from a second uniform
    draw) and returns ``-log(-log1p(-x))``.

        >>> gumbel(PRNGKey(0), (2,)).shape
        (2,)
    """
    key = _check_key("gumbel", key)
    if mode not in ("low", "high"):
        raise ValueError(f"gumbel: mode must be 'low' or 'high', got {mode!r}")
    shape = _shape(shape, "gumbel")
    dtype = _float_dtype(dtype, "gumbel")
    info = _dtypes.finfo(dtype)
    if mode == "low":
        u = uniform(key, shape, dtype, float(info.tiny), 1.0)
        return lax.neg(lax.log(lax.neg(lax.log(u))))
    coarse_key, fine_key = split(key)
    coarse = uniform(coarse_key, shape, dtype)
    fine = uniform(fine_key, shape, dtype)
    # below 1/2 a float has room for the bits under the coarse draw's spacing (eps)
    x = lax.select(coarse >= 0.5, coarse, coarse + float(info.eps) * fine)
    x = lax.max(x, lax.full(shape, float(info.tiny), dtype))
    return lax.neg(lax.log(lax.neg(lax.log1p(lax.neg(x)))))


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


# =============================================================================================
# Parameters of the distributions below
# =============================================================================================
#
# The samplers below are compositions of the ones above and of lax/jnp operations, so every
# transform (jit, vmap, grad) and every backend handles them with no rules of their own.
# Rejection samplers run as one ``while_loop`` over the whole array: each round draws a fresh
# proposal for every element, and an element keeps the first proposal it accepts. The loop
# ends when every element has accepted, so the trip count is data-dependent but the shapes
# are static; under ``vmap`` the loop runs until every example is done.

def _split_n(key, count: int):
    keys = split(key, count)
    return [lax.index_in_dim(keys, i, keepdims=False) for i in range(count)]


def _float_param(value, dtype):
    """A distribution parameter as an array of the sample dtype."""
    value = value if isinstance(value, Tracer) else _asarray(value)
    return _convert(value, dtype)


def _sample_shape(name: str, shape, *params):
    """The result shape as jax.random fixes it: ``shape`` when given (every parameter must
    broadcast to it), else the broadcast shape of the parameters."""
    return _shape_from_param_shapes(name, shape, *(get_aval(p).shape for p in params))


def _shape_from_param_shapes(name: str, shape, *param_shapes):
    from functrans.numpy._promotion import broadcast_shapes
    param_shapes = list(param_shapes)
    try:
        joint = broadcast_shapes(*param_shapes)
    except ValueError as err:
        raise ValueError(f"{name}: parameter shapes {param_shapes} do not broadcast "
                         "together") from err
    if shape is None:
        return joint
    shape = _shape(shape, name)
    try:
        ok = broadcast_shapes(shape, joint) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{name}: parameters of shapes {param_shapes} do not broadcast to "
                         f"the requested shape {shape}")
    return shape


def _compute_dtype(dtype):
    """Samplers that take logs and run loops work in at least float32; 16-bit results are
    rounded from float32 samples."""
    return dtype if dtype.itemsize >= 4 else _dtypes.float32


def _tiny(dtype) -> float:
    return float(_dtypes.finfo(dtype).tiny)


def _any(mask):
    return lax.reduce_or(mask, tuple(range(get_aval(mask).ndim)))


# =============================================================================================
# The gamma family
# =============================================================================================

def _log_gamma_draws(key, a, dtype):
    """``log`` of standard-gamma samples, one per element of ``a``, by Marsaglia and Tsang's
    rejection method (a transformed normal proposal, accepted ~95% of the time or more).

    The method needs ``a >= 1``; smaller shapes are boosted: with Y ~ Gamma(a + 1) and
    U ~ U(0, 1), ``Y * U**(1/a) ~ Gamma(a)``. Working in logs keeps tiny shapes, whose samples
    underflow to 0, exact. ``a <= 0`` (or NaN) gives NaN. No gradient flows to ``a`` here.
    """
    import functrans.numpy as jnp
    shape = get_aval(a).shape
    a = lax.stop_gradient(a)
    valid = a > 0
    safe_a = jnp.where(valid, a, 1.0)
    boosted = safe_a < 1
    d = jnp.where(boosted, safe_a + 1.0, safe_a) - 1.0 / 3.0
    c = lax.rsqrt(9.0 * d)
    loop_key, boost_key = _split2(key)

    def not_done(state):
        return _any(lax.bitwise_not(state[1]))

    def propose(state):
        key, done, log_v = state
        key, normal_key, uniform_key = _split_n(key, 3)
        z = normal(normal_key, shape, dtype)
        u = uniform(uniform_key, shape, dtype)
        v = 1.0 + c * z
        positive = v > 0
        log_v3 = 3.0 * jnp.log(jnp.where(positive, v, 1.0))
        # accept when log u < z^2/2 + d - d v^3 + d log v^3 (the squeeze step is skipped: it
        # only saves work, and here every element pays for the full test anyway)
        accept = positive & (jnp.log(u) < 0.5 * z * z + d - d * (v * v * v) + d * log_v3)
        log_v = jnp.where(accept & ~done, log_v3, log_v)
        return key, done | accept, log_v

    _, _, log_v = lax.while_loop(not_done, propose,
                                 (loop_key, lax.bitwise_not(valid), jnp.zeros(shape, dtype)))
    log_x = jnp.log(d) + log_v
    boost = jnp.log(uniform(boost_key, shape, dtype, _tiny(dtype), 1.0)) / safe_a
    log_x = log_x + jnp.where(boosted, boost, 0.0)
    return jnp.where(valid, log_x, np.nan)


def _log_gamma_sample_derivative(a, log_x):
    """``d log(x) / d a`` for a standard-gamma sample ``x`` held at its CDF level ``P(a, x)``
    (implicit reparameterization: ``dx/da = -(dP/da) / pdf(x)``).

    ``P`` is the regularized lower incomplete gamma function. With
    ``G = x**a e**-x / Gamma(a)`` (which equals ``x * pdf(x)``):

    * for ``x < a + 1``: ``P = (G / a) * S`` with the series ``S = sum_n x**n / ((a+1)...(a+n))``,
      so ``dlog x/da = -(S (log x - digamma(a+1)) + dS/da) / a``;
    * otherwise ``Q = 1 - P = G * F`` with the continued fraction
      ``F = 1/(x+1-a - 1(1-a)/(x+3-a - 2(2-a)/(x+5-a - ...)))``,
      so ``dlog x/da = F (log x - digamma(a)) + dF/da``.

    ``G`` cancels analytically, so nothing here under- or overflows even where the density
    does; both sums are differentiated term by term alongside their values, and both terms
    of each bracket have the same sign (no cancellation).

    Both sums need ~sqrt(a) terms near the mode, so large shapes use the derivative of the
    Wilson-Hilferty approximation ``x = a (1 - 1/(9a) + z/(3 sqrt(a)))**3`` at fixed ``z``
    instead (relative error ~0.03 / a**1.5: below 1e-6 from ``a = 1e4``, 3e-8 at ``1e5``).
    """
    import functrans.numpy as jnp
    dtype = get_aval(a).dtype
    eps = float(_dtypes.finfo(dtype).eps)
    max_terms = 4000
    x = jnp.exp(log_x)
    large = a >= (1e4 if dtype.itemsize <= 4 else 1e5)
    use_series = (x < a + 1.0) & ~large
    use_fraction = ~((x < a + 1.0) | large)

    # --- series: term_n = term_{n-1} * x / (a + n), carried with its a-derivative
    def series_not_done(state):
        n, done = state[0], state[1]
        return _any(lax.bitwise_not(done)) & (n < max_terms)

    def series_step(state):
        n, done, term, dterm, total, dtotal = state
        n = n + 1
        denom = a + n.astype(dtype)
        new_term = term * x_series / denom
        new_dterm = dterm * x_series / denom - new_term / denom
        new_total, new_dtotal = total + new_term, dtotal + new_dterm
        converged = ((new_term <= eps * new_total)
                     & (jnp.abs(new_dterm) <= eps * jnp.abs(new_dtotal)))
        keep = lambda new, old: jnp.where(done, old, new)  # noqa: E731
        return (n, done | converged, keep(new_term, term), keep(new_dterm, dterm),
                keep(new_total, total), keep(new_dtotal, dtotal))

    ones, zeros = jnp.ones_like(a), jnp.zeros_like(a)
    x_series = jnp.where(use_series, x, 0.0)  # elements outside the series' region idle
    _, _, _, _, s, ds = lax.while_loop(
        series_not_done, series_step,
        (jnp.array(0, _dtypes.int32), ~use_series, ones, zeros, ones, zeros))
    series_grad = -(s * (log_x - lax.digamma(a + 1.0)) + ds) / a

    # --- continued fraction: convergents P_n / Q_n with
    # P_n = b_n P_{n-1} + c_n P_{n-2}, b_n = x + 2n + 1 - a, c_n = -n (n - a),
    # carried with their a-derivatives (db_n/da = -1, dc_n/da = n)
    x_cf = jnp.maximum(x, a + 1.0)  # elements outside the fraction's region idle
    big = 1e15 if dtype.itemsize <= 4 else 1e100

    def fraction_not_done(state):
        n, done = state[0], state[1]
        return _any(lax.bitwise_not(done)) & (n < max_terms)

    def fraction_step(state):
        n, done, p2, p1, q2, q1, dp2, dp1, dq2, dq1, frac, dfrac = state
        n = n + 1
        nf = n.astype(dtype)
        b = x_cf + 2.0 * nf + 1.0 - a
        cn = -nf * (nf - a)
        p = b * p1 + cn * p2
        q = b * q1 + cn * q2
        dp = -p1 + b * dp1 + nf * p2 + cn * dp2
        dq = -q1 + b * dq1 + nf * q2 + cn * dq2
        new_frac = p / q
        new_dfrac = (dp - new_frac * dq) / q
        converged = ((jnp.abs(new_frac - frac) <= eps * jnp.abs(new_frac))
                     & (jnp.abs(new_dfrac - dfrac) <= eps * jnp.abs(new_dfrac)))
        # rescale the convergents (their ratio is all that matters) before they overflow
        scale = jnp.where(jnp.abs(q) > big, 1.0 / big, 1.0)
        keep = lambda new, old: jnp.where(done, old, new)  # noqa: E731
        return (n, done | converged,
                keep(p1 * scale, p2), keep(p * scale, p1), keep(q1 * scale, q2),
                keep(q * scale, q1), keep(dp1 * scale, dp2), keep(dp * scale, dp1),
                keep(dq1 * scale, dq2), keep(dq * scale, dq1),
                keep(new_frac, frac), keep(new_dfrac, dfrac))

    b0 = x_cf + 1.0 - a
    init = (jnp.array(0, _dtypes.int32), ~use_fraction,
            zeros, ones, ones, b0, zeros, zeros, zeros, -ones, 1.0 / b0, -1.0 / (b0 * b0))
    state = lax.while_loop(fraction_not_done, fraction_step, init)
    frac, dfrac = state[-2], state[-1]
    fraction_grad = frac * (log_x - lax.digamma(a)) + dfrac

    a_large = jnp.where(large, a, 1.0)
    w = jnp.exp((log_x - jnp.log(a_large)) / 3.0)
    z = 3.0 * jnp.sqrt(a_large) * (w - 1.0 + 1.0 / (9.0 * a_large))
    asymptotic_grad = (1.0 / a_large
                       + 3.0 * (1.0 / (9.0 * a_large * a_large)
                                - z / (6.0 * a_large * jnp.sqrt(a_large))) / w)
    return jnp.where(large, asymptotic_grad,
                     jnp.where(use_series, series_grad, fraction_grad))


_reparameterized_log_gamma_fn = None


def _reparameterized_log_gamma(a, log_x):
    """``log_x`` (drawn with no gradient) given the implicit-reparameterization derivative
    with respect to ``a`` through a custom JVP rule."""
    global _reparameterized_log_gamma_fn
    if _reparameterized_log_gamma_fn is None:
        from functrans._custom_derivatives import custom_jvp

        @custom_jvp
        def reparameterized(a, log_x):
            return log_x

        @reparameterized.defjvp
        def reparameterized_jvp(primals, tangents):
            a, log_x = primals
            a_dot, log_x_dot = tangents
            # the output goes through this same rule, so that differentiating the rule
            # (second derivatives) sees the sample move with ``a`` as well
            out = reparameterized(a, log_x)
            derivative = _log_gamma_sample_derivative(a, out)
            return out, derivative * a_dot + log_x_dot

        _reparameterized_log_gamma_fn = reparameterized
    return _reparameterized_log_gamma_fn(a, log_x)


def _loggamma_samples(key, a, shape, dtype):
    """Log standard-gamma samples of ``shape`` (``a`` broadcast to it), differentiable in
    ``a``, in ``dtype``."""
    work = _compute_dtype(dtype)
    a = _broadcast_to(_convert(a, work), shape, "gamma")
    log_x = _reparameterized_log_gamma(a, _log_gamma_draws(key, a, work))
    return _convert(log_x, dtype)


def loggamma(key, a, shape=None, dtype=None):
    """Logs of standard-gamma samples (density ``x**(a-1) e**-x / Gamma(a)``).

    Accurate where the samples themselves underflow (``a`` much below 1). Differentiable in
    ``a`` by implicit reparameterization, like :func:`gamma`.

        >>> loggamma(PRNGKey(0), 0.01, (2,)).shape
        (2,)
    """
    key, shape, dtype, (a,) = _param_args("loggamma", key, shape, dtype, a)
    return _loggamma_samples(key, a, shape, dtype)


def gamma(key, a, shape=None, dtype=None):
    """Standard-gamma samples (shape ``a``, scale 1): density ``x**(a-1) e**-x / Gamma(a)``.

    Drawn by Marsaglia and Tsang's rejection method (vectorized as one ``while_loop``, so it
    works under ``jit`` and ``vmap``). The samples are differentiable in ``a`` by implicit
    reparameterization: ``dx/da = -(dCDF(x; a)/da) / pdf(x; a)``, the derivative of the
    inverse CDF at the sample's CDF level. Divide by a rate (or multiply by a scale) for other
    gamma distributions.

        >>> x = gamma(PRNGKey(0), 2.0, (1000,))
        >>> bool(abs(x.mean() - 2.0) < 0.2)
        True
    """
    import functrans.numpy as jnp
    key, shape, dtype, (a,) = _param_args("gamma", key, shape, dtype, a)
    work = _compute_dtype(dtype)
    return _convert(jnp.exp(_loggamma_samples(key, a, shape, work)), dtype)


def beta(key, a, b, shape=None, dtype=None):
    """Beta samples: density proportional to ``x**(a-1) (1-x)**(b-1)`` on [0, 1].

    Built as ``X / (X + Y)`` from gamma samples ``X ~ Gamma(a)``, ``Y ~ Gamma(b)`` (in logs,
    so small ``a``, ``b`` stay exact); differentiable in ``a`` and ``b``.

        >>> beta(PRNGKey(0), 2.0, 3.0, (3,)).shape
        (3,)
    """
    import functrans.numpy as jnp
    key, shape, dtype, (a, b) = _param_args("beta", key, shape, dtype, a, b)
    work = _compute_dtype(dtype)
    key_a, key_b = _split2(key)
    log_x = _loggamma_samples(key_a, a, shape, work)
    log_y = _loggamma_samples(key_b, b, shape, work)
    # shifting both logs by the same amount leaves the ratio unchanged (so no gradient)
    shift = lax.stop_gradient(jnp.maximum(log_x, log_y))
    x, y = jnp.exp(log_x - shift), jnp.exp(log_y - shift)
    return _convert(x / (x + y), dtype)


def dirichlet(key, alpha, shape=None, dtype=None):
    """Dirichlet samples: points on the simplex with density proportional to
    ``prod_i x_i**(alpha_i - 1)``.

    ``alpha`` has shape ``(..., K)``; ``shape`` (default ``alpha.shape[:-1]``) is the batch
    shape, and the result has shape ``shape + (K,)``. Differentiable in ``alpha``.

        >>> import functrans.numpy as jnp
        >>> dirichlet(PRNGKey(0), jnp.array([1.0, 2.0, 3.0]), (5,)).shape
        (5, 3)
    """
    import functrans.numpy as jnp
    key = _check_key("dirichlet", key)
    dtype = _float_dtype(dtype, "dirichlet")
    alpha = _float_param(alpha, dtype)
    alpha_shape = get_aval(alpha).shape
    if len(alpha_shape) < 1:
        raise ValueError(f"dirichlet: alpha must have at least one axis, got shape {alpha_shape}")
    batch = _shape_from_param_shapes("dirichlet", shape, alpha_shape[:-1])
    work = _compute_dtype(dtype)
    log_g = _loggamma_samples(key, alpha, batch + alpha_shape[-1:], work)
    shift = lax.stop_gradient(jnp.max(log_g, axis=-1, keepdims=True))
    g = jnp.exp(log_g - shift)
    return _convert(g / jnp.sum(g, axis=-1, keepdims=True), dtype)


def chisquare(key, df, shape=None, dtype=None):
    """Chi-square samples with ``df`` degrees of freedom (``2 * Gamma(df / 2)``).

        >>> chisquare(PRNGKey(0), 3.0, (2,)).shape
        (2,)
    """
    import functrans.numpy as jnp
    key, shape, dtype, (df,) = _param_args("chisquare", key, shape, dtype, df)
    work = _compute_dtype(dtype)
    log_g = _loggamma_samples(key, _convert(df, work) / 2.0, shape, work)
    return _convert(jnp.exp(log_g + math.log(2.0)), dtype)


def f(key, dfnum, dfden, shape=None, dtype=None):
    """F-distribution samples: ``(chi2(dfnum) / dfnum) / (chi2(dfden) / dfden)``.

        >>> f(PRNGKey(0), 5.0, 10.0, (2,)).shape
        (2,)
    """
    import functrans.numpy as jnp
    key, shape, dtype, (dfnum, dfden) = _param_args("f", key, shape, dtype, dfnum, dfden)
    work = _compute_dtype(dtype)
    dfnum, dfden = _convert(dfnum, work), _convert(dfden, work)
    key_num, key_den = _split2(key)
    log_num = _loggamma_samples(key_num, dfnum / 2.0, shape, work)
    log_den = _loggamma_samples(key_den, dfden / 2.0, shape, work)
    return _convert(jnp.exp(log_num - log_den + jnp.log(dfden / dfnum)), dtype)


def t(key, df, shape=(), dtype=None):
    """Student's t samples with ``df`` degrees of freedom: ``z / sqrt(chi2(df) / df)``.

        >>> t(PRNGKey(0), 3.0, (2,)).shape
        (2,)
    """
    import functrans.numpy as jnp
    key, shape, dtype, (df,) = _param_args("t", key, shape, dtype, df)
    work = _compute_dtype(dtype)
    half_df = _convert(df, work) / 2.0
    key_normal, key_gamma = _split2(key)
    z = normal(key_normal, shape, work)
    log_g = _loggamma_samples(key_gamma, half_df, shape, work)
    return _convert(z * jnp.exp(0.5 * (jnp.log(half_df) - log_g)), dtype)


# =============================================================================================
# Transforms of uniform and normal draws
# =============================================================================================

def _open_uniform(key, shape, dtype):
    """Uniform on the open interval (0, 1): logs and tangents of it stay finite."""
    return uniform(key, shape, dtype, _tiny(dtype), 1.0)


def cauchy(key, shape=(), dtype=None):
    """Standard Cauchy samples: ``tan(pi (u - 1/2))``.

        >>> cauchy(PRNGKey(0), (2,)).shape
        (2,)
    """
    import functrans.numpy as jnp
    key, shape, dtype = _float_args("cauchy", key, shape, dtype)
    u = _open_uniform(key, shape, dtype)
    return jnp.tan(math.pi * (u - 0.5))


def pareto(key, b, shape=None, dtype=None):
    """Pareto samples on ``[1, inf)`` with density ``b / x**(b+1)``: ``exp(e / b)`` for a
    standard exponential ``e``.

        >>> x = pareto(PRNGKey(0), 3.0, (4,))
        >>> bool((x >= 1).all())
        True
    """
    import functrans.numpy as jnp
    key, shape, dtype, (b,) = _param_args("pareto", key, shape, dtype, b)
    return jnp.exp(exponential(key, shape, dtype) / b)


def lognormal(key, sigma=1.0, shape=None, dtype=None):
    """Log-normal samples: ``exp(sigma * z)`` for a standard normal ``z``.

        >>> lognormal(PRNGKey(0), 0.5, (2,)).shape
        (2,)
    """
    import functrans.numpy as jnp
    key, shape, dtype, (sigma,) = _param_args("lognormal", key, shape, dtype, sigma)
    return jnp.exp(sigma * normal(key, shape, dtype))


def rayleigh(key, scale, shape=None, dtype=None):
    """Rayleigh samples, density ``x / scale**2 * exp(-x**2 / (2 scale**2))``:
    ``scale * sqrt(2 e)`` for a standard exponential ``e``.

        >>> rayleigh(PRNGKey(0), 2.0, (2,)).shape
        (2,)
    """
    import functrans.numpy as jnp
    key, shape, dtype, (scale,) = _param_args("rayleigh", key, shape, dtype, scale)
    return scale * jnp.sqrt(2.0 * exponential(key, shape, dtype))


def maxwell(key, shape=(), dtype=None):
    """Maxwell (Maxwell-Boltzmann) samples, density ``sqrt(2/pi) x**2 exp(-x**2/2)``: the
    length of a standard normal 3-vector.

        >>> maxwell(PRNGKey(0), (2,)).shape
        (2,)
    """
    import functrans.numpy as jnp
    key, shape, dtype = _float_args("maxwell", key, shape, dtype)
    z = normal(key, shape + (3,), dtype)
    return jnp.sqrt(jnp.sum(z * z, axis=-1))


def double_sided_maxwell(key, loc, scale, shape=(), dtype=None):
    """Samples with density proportional to ``z**2 exp(-z**2 / 2)``, ``z = (x - loc) / scale``:
    a Maxwell sample with a random sign, scaled and shifted.

    The result has shape ``shape + broadcast(loc, scale).shape`` (``shape`` is prepended to
    the parameters' shape).

        >>> double_sided_maxwell(PRNGKey(0), 0.0, 1.0, (3,)).shape
        (3,)
    """
    from functrans.numpy._promotion import broadcast_shapes
    key = _check_key("double_sided_maxwell", key)
    dtype = _float_dtype(dtype, "double_sided_maxwell")
    loc, scale = _float_param(loc, dtype), _float_param(scale, dtype)
    shape = _shape(shape, "double_sided_maxwell") + broadcast_shapes(get_aval(loc).shape,
                                                                      get_aval(scale).shape)
    key_size, key_sign = _split2(key)
    size = maxwell(key_size, shape, dtype)
    sign = rademacher(key_sign, shape, dtype)
    return sign * size * scale + loc


def weibull_min(key, scale, concentration, shape=(), dtype=None):
    """Weibull samples, density proportional to ``x**(c-1) exp(-(x/scale)**c)`` with
    ``c = concentration``: ``scale * e**(1/c)`` for a standard exponential ``e``. ``shape``
    broadcasts with the parameters' shapes.

        >>> weibull_min(PRNGKey(0), 1.0, 2.0, (2,)).shape
        (2,)
    """
    import functrans.numpy as jnp
    from functrans.numpy._promotion import broadcast_shapes
    key = _check_key("weibull_min", key)
    dtype = _float_dtype(dtype, "weibull_min")
    scale, concentration = _float_param(scale, dtype), _float_param(concentration, dtype)
    shape = broadcast_shapes(_shape(shape, "weibull_min"), get_aval(scale).shape,
                             get_aval(concentration).shape)
    e = exponential(key, shape, dtype)
    return scale * jnp.power(e, 1.0 / concentration)


def generalized_normal(key, p, shape=(), dtype=None):
    """Generalized normal samples, density proportional to ``exp(-|x|**p)``: a random sign
    times ``g**(1/p)`` with ``g ~ Gamma(1/p)`` (``p=2``: normal with variance 1/2;
    ``p=1``: Laplace).

        >>> generalized_normal(PRNGKey(0), 1.5, (2,)).shape
        (2,)
    """
    import functrans.numpy as jnp
    key, shape, dtype, (p,) = _param_args("generalized_normal", key, shape, dtype, p)
    work = _compute_dtype(dtype)
    p = _convert(p, work)
    key_gamma, key_sign = _split2(key)
    log_g = _loggamma_samples(key_gamma, 1.0 / p, shape, work)
    sign = rademacher(key_sign, shape, work)
    return _convert(sign * jnp.exp(log_g / p), dtype)


def triangular(key, left, mode, right, shape=None, dtype=None):
    """Triangular samples on ``[left, right]`` peaking at ``mode``, by inverting the CDF.

        >>> x = triangular(PRNGKey(0), 0.0, 1.0, 3.0, (4,))
        >>> bool(((x >= 0) & (x <= 3)).all())
        True
    """
    import functrans.numpy as jnp
    key, shape, dtype, (left, mode, right) = _param_args("triangular", key, shape, dtype,
                                                         left, mode, right)
    u = uniform(key, shape, dtype)
    width = right - left
    split_point = (mode - left) / width
    # both branches are computed everywhere; the maxima keep the unused one's root real
    low = left + jnp.sqrt(jnp.maximum(u * width * (mode - left), 0.0))
    high = right - jnp.sqrt(jnp.maximum((1.0 - u) * width * (right - mode), 0.0))
    return jnp.where(u < split_point, low, high)


def wald(key, mean, shape=None, dtype=None):
    """Wald (inverse Gaussian) samples with the given ``mean`` and scale 1: density
    ``(2 pi x**3)**-1/2 exp(-(x - mean)**2 / (2 mean**2 x))``.

    Michael, Schucany and Haas's method: a root of the quadratic that a chi-square(1) draw
    defines, picked with the right probability by a uniform draw.

        >>> wald(PRNGKey(0), 2.0, (3,)).shape
        (3,)
    """
    import functrans.numpy as jnp
    key, shape, dtype, (mean,) = _param_args("wald", key, shape, dtype, mean)
    key_normal, key_uniform = _split2(key)
    z = normal(key_normal, shape, dtype)
    u = uniform(key_uniform, shape, dtype)
    y = z * z
    my = mean * y
    # the smaller root of the quadratic is mean + mean*my/2 - mean/2 sqrt(my (4 + my)); as
    # the roots multiply to mean**2 it equals mean**2 / (the larger root), which is free of
    # cancellation when my is large
    root = jnp.sqrt(my * (4.0 + my))
    x = mean * 2.0 / (2.0 + my + root)
    return jnp.where(u <= mean / (mean + x), x, mean * mean / x)


def ball(key, d, p=2, shape=(), dtype=None):
    """Points uniform in the unit ``p``-norm ball of dimension ``d``: shape ``shape + (d,)``.

    Barthe, Guedon, Mendelson and Naor: generalized-normal coordinates ``g`` and a standard
    exponential ``e`` give ``g / (sum |g|**p + e)**(1/p)``.

        >>> import functrans.numpy as jnp
        >>> x = ball(PRNGKey(0), 3, shape=(10,))
        >>> x.shape, bool((jnp.linalg.norm(x, axis=-1) <= 1).all())
        ((10, 3), True)
    """
    import functrans.numpy as jnp
    key = _check_key("ball", key)
    if not isinstance(d, (int, np.integer)) or d < 0:
        raise ValueError(f"ball: d must be a nonnegative int, got {d!r}")
    shape = _shape(shape, "ball")
    dtype = _float_dtype(dtype, "ball")
    key_g, key_e = _split2(key)
    g = generalized_normal(key_g, p, shape + (int(d),), dtype)
    e = exponential(key_e, shape, dtype)
    norm = jnp.sum(jnp.abs(g) ** p, axis=-1) + e
    return g / (norm ** (1.0 / p))[..., None]


def orthogonal(key, n, shape=(), dtype=None, m=None):
    """Haar-random orthogonal matrices (unitary for complex dtypes): shape
    ``shape + (n, m)`` (``m`` defaults to ``n``; if ``n != m`` the rows or the columns,
    whichever are fewer, are orthonormal).

    The Q factor of a Gaussian matrix, with each column's sign (phase) fixed by the R
    factor's diagonal: without the fix, QR's sign convention would bias the distribution.

        >>> import functrans.numpy as jnp
        >>> q = orthogonal(PRNGKey(0), 3)
        >>> bool(jnp.allclose(q @ q.T, jnp.eye(3), atol=1e-5))
        True
    """
    import functrans.numpy as jnp
    key = _check_key("orthogonal", key)
    shape = _shape(shape, "orthogonal")
    m = n if m is None else m
    n, m = int(n), int(m)
    dtype = _dtypes.default_float_dtype() if dtype is None else _dtypes.canonicalize_dtype(dtype)
    if not (_dtypes.is_float(dtype) or _dtypes.is_complex(dtype)):
        raise ValueError(f"orthogonal needs a floating-point or complex dtype, got {dtype}")
    tall, wide = max(n, m), min(n, m)
    z = normal(key, shape + (tall, wide), dtype)
    q, r = jnp.linalg.qr(z)
    diag = jnp.diagonal(r, axis1=-2, axis2=-1)
    if _dtypes.is_complex(dtype):
        magnitude = jnp.abs(diag)
        phase = diag / jnp.where(magnitude == 0, 1.0, magnitude).astype(dtype)
    else:
        phase = jnp.where(diag < 0, -1.0, 1.0).astype(dtype)
    q = q * phase[..., None, :]
    return q if n >= m else jnp.swapaxes(q, -1, -2)


# =============================================================================================
# Counts
# =============================================================================================

def _int_dtype(dtype, name: str):
    dtype = _dtypes.default_int_dtype() if dtype is None else _dtypes.canonicalize_dtype(dtype)
    if not _dtypes.is_integer(dtype):
        raise ValueError(f"{name} needs an integer dtype, got {dtype}")
    return dtype


def _float_to_int(x, dtype):
    """A float count converted to an integer dtype, saturating at the dtype's maximum."""
    import functrans.numpy as jnp
    top = float(np.iinfo(dtype).max)
    # the float nearest below the integer maximum, so that the conversion cannot overflow
    top = float(np.nextafter(np.array(top, get_aval(x).dtype), np.array(0, get_aval(x).dtype)))
    return _convert(jnp.clip(x, 0.0, top), dtype)


def _stirling_tail(k):
    """``lgamma(k + 1) - ((k + 1/2) log(k + 1) - (k + 1) + log(2 pi) / 2)``: the small
    correction to Stirling's formula, computed without forming ``lgamma`` of a large number
    (whose rounding would swamp the differences the rejection tests below need)."""
    import functrans.numpy as jnp
    y = jnp.maximum(k, 10.0) + 1.0
    series = (1.0 / 12.0 - (1.0 / 360.0 - 1.0 / (1260.0 * y * y)) / (y * y)) / y
    small = jnp.minimum(k, 10.0)
    exact = lax.lgamma(small + 1.0) - ((small + 0.5) * jnp.log(small + 1.0) - (small + 1.0)
                                       + 0.5 * math.log(2.0 * math.pi))
    return jnp.where(k >= 10.0, series, exact)


def _lgamma1p_difference(m, k):
    """``lgamma(m + 1) - lgamma(k + 1)`` for counts ``m, k >= 0``, accurate when both are
    large and close (Stirling's main terms are combined before they are rounded)."""
    import functrans.numpy as jnp
    diff = m - k
    return (diff * jnp.log(m + 1.0) + (k + 0.5) * jnp.log1p(diff / (k + 1.0)) - diff
            + _stirling_tail(m) - _stirling_tail(k))


def _transformed_rejection_draw(key, shape, dtype):
    """One round of Hormann's transformed rejection (PTRS, BTRS): the next key, ``u``
    uniform on [-1/2, 1/2), ``v`` uniform on [0, 1) and ``us = 1/2 - |u|``."""
    import functrans.numpy as jnp
    key, key_u, key_v = _split_n(key, 3)
    u = uniform(key_u, shape, dtype) - 0.5
    return key, u, uniform(key_v, shape, dtype), 0.5 - jnp.abs(u)


def _rate_in_compute_dtype(value):
    """A count distribution's parameter as an array of the float dtype its sampler computes
    in (the parameter's own float dtype, else the default one), and that dtype."""
    value = value if isinstance(value, Tracer) else _asarray(value)
    dtype = get_aval(value).dtype
    work = _compute_dtype(dtype if _dtypes.is_float(dtype) else _dtypes.default_float_dtype())
    return _convert(value, work), work


def geometric(key, p, shape=None, dtype=None):
    """Geometric samples: the number of Bernoulli(``p``) trials up to and including the first
    success (values 1, 2, ...), by inverting the CDF.

        >>> x = geometric(PRNGKey(0), 0.3, (4,))
        >>> bool((x >= 1).all())
        True
    """
    import functrans.numpy as jnp
    key = _check_key("geometric", key)
    dtype = _int_dtype(dtype, "geometric")
    p, work = _rate_in_compute_dtype(p)
    shape = _sample_shape("geometric", shape, p)
    u = uniform(key, shape, work)
    trials = jnp.floor(jnp.log1p(-u) / jnp.log1p(-p)) + 1.0
    return _float_to_int(trials, dtype)


def _poisson_knuth(key, lam, active):
    """Poisson counts for small rates: multiply uniforms until the product drops below
    ``exp(-lam)``; the count is the number of factors before that. ~lam + 1 rounds."""
    import functrans.numpy as jnp
    shape, dtype = get_aval(lam).shape, get_aval(lam).dtype

    def not_done(state):
        return _any(lax.bitwise_not(state[1]))

    def step(state):
        key, done, count, log_product = state
        key, subkey = _split2(key)
        log_product = log_product + jnp.log(uniform(subkey, shape, dtype))
        finished = log_product < -lam
        count = jnp.where(done | finished, count, count + 1.0)
        return key, done | finished, count, log_product

    zeros = jnp.zeros(shape, dtype)
    _, _, count, _ = lax.while_loop(not_done, step, (key, ~active, zeros, zeros))
    return count


def _poisson_rejection(key, lam, active):
    """Poisson counts for rates >= 10 by Hormann's transformed rejection with squeeze (PTRS,
    1993): a few rounds, whatever the rate."""
    import functrans.numpy as jnp
    shape, dtype = get_aval(lam).shape, get_aval(lam).dtype
    lam = jnp.where(active, lam, 10.0)
    b = 0.931 + 2.53 * jnp.sqrt(lam)
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    v_r = 0.9277 - 3.6224 / (b - 2.0)

    def not_done(state):
        return _any(lax.bitwise_not(state[1]))

    def step(state):
        key, done, count = state
        key, u, v, us = _transformed_rejection_draw(key, shape, dtype)
        k = jnp.floor((2.0 * a / us + b) * u + lam + 0.43)
        quick = (us >= 0.07) & (v <= v_r)
        reject = (k < 0) | ((us < 0.013) & (v > us))
        safe_k = jnp.maximum(k, 0.0)
        # log(k! e^-lam lam^-k) written with the large terms combined (see _stirling_tail)
        log_ratio = (-safe_k * jnp.log1p((safe_k + 1.0 - lam) / lam)
                     - 0.5 * jnp.log(safe_k + 1.0) + (safe_k + 1.0 - lam)
                     - 0.5 * math.log(2.0 * math.pi) - _stirling_tail(safe_k))
        full = jnp.log(v) + jnp.log(inv_alpha) - jnp.log(a / (us * us) + b) <= log_ratio
        accept = quick | (~reject & full)
        count = jnp.where(done, count, jnp.where(accept, k, count))
        return key, done | accept, count

    _, _, count = lax.while_loop(not_done, step, (key, ~active, jnp.zeros(shape, dtype)))
    return count


def poisson(key, lam, shape=None, dtype=None):
    """Poisson samples with rate ``lam`` (broadcast to ``shape``).

    Rates below 10 multiply uniforms (Knuth); larger rates use Hormann's transformed
    rejection (PTRS). Both run as ``while_loop``s over the whole array, so they work under
    ``jit`` and ``vmap``. A rate of 0 gives 0; a negative or NaN rate gives -1.

        >>> x = poisson(PRNGKey(0), 3.0, (1000,))
        >>> bool(abs(x.mean() - 3.0) < 0.3)
        True
    """
    import functrans.numpy as jnp
    key = _check_key("poisson", key)
    dtype = _int_dtype(dtype, "poisson")
    lam, work = _rate_in_compute_dtype(lam)
    lam = lax.stop_gradient(lam)
    shape = _sample_shape("poisson", shape, lam)
    lam = _broadcast_to(lam, shape, "poisson")
    valid = lam >= 0
    small = valid & (lam < 10.0)
    large = valid & (lam >= 10.0)
    key_small, key_large = _split2(key)
    counts = jnp.where(small, _poisson_knuth(key_small, jnp.where(small, lam, 0.0), small),
                       _poisson_rejection(key_large, lam, large))
    counts = _float_to_int(counts, dtype)
    return jnp.where(valid, counts, jnp.array(-1, dtype))


def _binomial_inversion(key, n, p, active):
    """Binomial counts for small means ``n p < 10``: successes are the geometric waiting
    times that fit in ``n`` trials. ~n p + 1 rounds."""
    import functrans.numpy as jnp
    shape, dtype = get_aval(n).shape, get_aval(n).dtype
    log_q = jnp.log1p(-jnp.where(active, p, 0.5))

    def not_done(state):
        return _any(lax.bitwise_not(state[1]))

    def step(state):
        key, done, successes, trials = state
        key, subkey = _split2(key)
        u = _open_uniform(subkey, shape, dtype)
        trials = trials + jnp.ceil(jnp.log(u) / log_q)
        finished = trials > n
        successes = jnp.where(done | finished, successes, successes + 1.0)
        return key, done | finished, successes, trials

    zeros = jnp.zeros(shape, dtype)
    _, _, successes, _ = lax.while_loop(not_done, step, (key, ~active, zeros, zeros))
    return successes


def _binomial_rejection(key, n, p, active):
    """Binomial counts for means ``n p >= 10`` (``p <= 1/2``) by Hormann's transformed
    rejection with squeeze (BTRS, 1993): a few rounds, whatever ``n``."""
    import functrans.numpy as jnp
    shape, dtype = get_aval(n).shape, get_aval(n).dtype
    n = jnp.where(active, n, 100.0)
    p = jnp.where(active, p, 0.5)
    q = 1.0 - p
    spq = jnp.sqrt(n * p * q)
    b = 1.15 + 2.53 * spq
    a = -0.0873 + 0.0248 * b + 0.01 * p
    c = n * p + 0.5
    v_r = 0.92 - 4.2 / b
    alpha = (2.83 + 5.1 / b) * spq
    log_odds = jnp.log(p / q)
    mode = jnp.floor((n + 1.0) * p)

    def not_done(state):
        return _any(lax.bitwise_not(state[1]))

    def step(state):
        key, done, count = state
        key, u, v, us = _transformed_rejection_draw(key, shape, dtype)
        k = jnp.floor((2.0 * a / us + b) * u + c)
        in_range = (k >= 0) & (k <= n)
        quick = in_range & (us >= 0.07) & (v <= v_r)
        safe_k = jnp.clip(k, 0.0, n)
        # log(P(k) / P(mode)) with the lgamma differences taken in cancellation-free form
        log_ratio = (_lgamma1p_difference(mode, safe_k)
                     + _lgamma1p_difference(n - mode, n - safe_k)
                     + (safe_k - mode) * log_odds)
        full = jnp.log(v * alpha / (a / (us * us) + b)) <= log_ratio
        accept = quick | (in_range & full)
        count = jnp.where(done, count, jnp.where(accept, k, count))
        return key, done | accept, count

    _, _, count = lax.while_loop(not_done, step, (key, ~active, jnp.zeros(shape, dtype)))
    return count


def binomial(key, n, p, shape=None, dtype=None):
    """Binomial samples: successes in ``n`` trials of probability ``p`` (floats, as in
    jax.random; ``n`` and ``p`` broadcast to ``shape``).

    Small means (``n min(p, 1-p) < 10``) count geometric waiting times; larger ones use
    Hormann's transformed rejection (BTRS). ``p > 1/2`` samples the failures. Invalid
    parameters (``n < 0``, ``p`` outside [0, 1], NaN) give NaN.

        >>> x = binomial(PRNGKey(0), 20.0, 0.3, (1000,))
        >>> bool(abs(x.mean() - 6.0) < 0.5)
        True
    """
    import functrans.numpy as jnp
    key, shape, dtype, (n, p) = _param_args("binomial", key, shape, dtype, n, p)
    work = _compute_dtype(dtype)
    n = lax.stop_gradient(_broadcast_to(_convert(n, work), shape, "binomial"))
    p = lax.stop_gradient(_broadcast_to(_convert(p, work), shape, "binomial"))
    valid = (n >= 0) & (p >= 0) & (p <= 1)
    flip = p > 0.5
    p_low = jnp.where(flip, 1.0 - p, p)
    n = jnp.floor(n)
    trivial = valid & ((p_low == 0) | (n == 0))
    small = valid & ~trivial & (n * p_low < 10.0)
    large = valid & ~trivial & ~small
    key_small, key_large = _split2(key)
    count = jnp.where(small, _binomial_inversion(key_small, jnp.where(small, n, 0.0), p_low, small),
                      _binomial_rejection(key_large, n, p_low, large))
    count = jnp.where(trivial, 0.0, count)
    count = jnp.where(flip, n - count, count)
    return _convert(jnp.where(valid, count, np.nan), dtype)


def multinomial(key, n, p, shape=None, dtype=None, unroll=1):
    """Multinomial counts: ``n`` trials over the categories of the last axis of ``p``.

    Drawn as a chain of binomials (category ``i`` gets ``Binomial(n - previous counts,
    p_i / remaining mass)``), so the counts always sum to ``n``. ``shape`` (default: the
    broadcast of ``n``'s shape and ``p``'s batch shape) is the batch shape; the result has
    shape ``shape + p.shape[-1:]``. ``unroll`` is accepted for compatibility and ignored.

        >>> import functrans.numpy as jnp
        >>> counts = multinomial(PRNGKey(0), 10.0, jnp.array([0.2, 0.3, 0.5]))
        >>> float(counts.sum())
        10.0
    """
    import functrans.numpy as jnp
    key = _check_key("multinomial", key)
    dtype = _float_dtype(dtype, "multinomial")
    n, p = _float_param(n, dtype), _float_param(p, dtype)
    p_shape = get_aval(p).shape
    if len(p_shape) < 1:
        raise ValueError(f"multinomial: p must have a category axis, got shape {p_shape}")
    categories = p_shape[-1]
    batch = _shape_from_param_shapes("multinomial", shape, get_aval(n).shape, p_shape[:-1])
    work = _compute_dtype(dtype)
    n = _broadcast_to(_convert(n, work), batch, "multinomial")
    p = _broadcast_to(_convert(p, work), batch + (categories,), "multinomial")
    remaining_n = n
    remaining_mass = jnp.sum(p, axis=-1)
    counts = []
    keys = _split_n(key, max(categories - 1, 1))
    for i in range(categories - 1):
        p_i = p[..., i]
        share = jnp.clip(p_i / jnp.where(remaining_mass > 0, remaining_mass, 1.0), 0.0, 1.0)
        count = binomial(keys[i], remaining_n, share, batch, work)
        counts.append(count)
        remaining_n = remaining_n - count
        remaining_mass = remaining_mass - p_i
    counts.append(remaining_n)
    return _convert(jnp.stack(counts, axis=-1), dtype)
