"""Continuous distributions drawn from uniform and normal samples by a closed-form transform:
``uniform``, ``normal``, ``truncated_normal``, ``exponential``, ``laplace``, ``logistic``,
``gumbel``, ``cauchy``, ``pareto``, ``lognormal``, ``rayleigh``, ``rademacher``, ``maxwell``,
``double_sided_maxwell``, ``weibull_min``, ``triangular``, ``wald``.

Each follows jax.random's formula step by step (the same operations in the same order), so a
key gives JAX's numbers up to the rounding of the transcendental functions.
"""
from __future__ import annotations

import math

import numpy as np

import functrans.numpy as jnp
from functrans import _dtypes, lax
from functrans.primitives import elementwise as ew
from functrans._config import config
from functrans.core import get_aval
from functrans.random._arguments import (as_array, broadcast_shapes, broadcast_to, const,
                                         convert, float_dtype, float_param, sample_shape,
                                         shape_tuple, tiny)
from functrans.random._arguments import takes_out_sharding
from functrans.random._bits import random_bits, split_keys
from functrans.random._keys import as_key


def _float_args(name, key, shape, dtype):
    """The checked key, shape and float dtype of sampler ``name``."""
    return as_key(name, key), shape_tuple(shape, name), float_dtype(dtype, name)


def _param_args(name, key, shape, dtype, *params):
    """The checked key, the sample shape (``shape``, or the parameters' broadcast shape), the
    float dtype and the parameters as arrays of it, for sampler ``name``."""
    key, dtype = as_key(name, key), float_dtype(dtype, name)
    params = tuple(float_param(p, dtype) for p in params)
    return key, sample_shape(name, shape, *params), dtype, params


def unit_floats(key, shape, dtype):
    """Floats uniform on [0, 1): random bits fill the mantissa of a number in [1, 2), minus 1.

    Written as ``mantissa_bits * 2**-nmant`` (exactly that number, no bit casting needed).
    """
    info = _dtypes.finfo(dtype)
    nbits, nmant = int(info.bits), int(info.nmant)
    rng_bits = nbits if nmant >= 8 else 8  # bfloat16: one byte of randomness suffices
    raw = random_bits(key, rng_bits, shape)
    mantissa = ew.shift_right_logical(raw, const(rng_bits - nmant, raw.dtype, shape))
    return ew.mul(convert(mantissa, dtype), const(2.0 ** -nmant, dtype, shape))


@takes_out_sharding
def uniform(key, shape=(), dtype=None, minval=0.0, maxval=1.0):
    """Floats uniform on ``[minval, maxval)``; ``minval``/``maxval`` broadcast to ``shape``.

        >>> uniform(PRNGKey(0), (3,))
        Array([0.947667  , 0.9785799 , 0.33229148], dtype=float32)
    """
    key, shape, dtype = _float_args("uniform", key, shape, dtype)
    lo = broadcast_to(convert(as_array(minval), dtype), shape, "uniform")
    hi = broadcast_to(convert(as_array(maxval), dtype), shape, "uniform")
    floats = unit_floats(key, shape, dtype)
    # the max guards against rounding below minval when the span is huge
    return ew.max(lo, ew.add(ew.mul(floats, ew.sub(hi, lo)), lo))


def _normal_real(key, shape, dtype):
    # inverse-CDF sampling: u uniform on (-1, 1), sqrt(2) * erfinv(u) ~ N(0, 1)
    lo = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = uniform(key, shape, dtype, lo, 1.0)
    return ew.mul(const(math.sqrt(2.0), dtype, shape), lax.erf_inv(u))


@takes_out_sharding
def normal(key, shape=(), dtype=None):
    """Standard normal samples (complex dtypes: real and imaginary parts each of variance 1/2).

        >>> normal(PRNGKey(42), (2,))
        Array([-0.02830462,  0.46713176], dtype=float32)
    """
    key = as_key("normal", key)
    shape = shape_tuple(shape, "normal")
    if dtype is not None and _dtypes.is_complex(_dtypes.canonicalize_dtype(dtype)):
        dtype = _dtypes.canonicalize_dtype(dtype)
        real_dtype = np.dtype(np.float64 if dtype == _dtypes.complex128 else np.float32)
        key_re, key_im = split_keys(key, 2)
        z = ew.complex(_normal_real(key_re, shape, real_dtype),
                        _normal_real(key_im, shape, real_dtype))
        return ew.div(z, const(math.sqrt(2.0), dtype, shape))
    return _normal_real(key, shape, float_dtype(dtype, "normal"))


@takes_out_sharding
def truncated_normal(key, lower, upper, shape=None, dtype=None):
    """Standard normal samples conditioned on ``lower < x < upper``.

        >>> x = truncated_normal(PRNGKey(0), -1.0, 1.0, (100,))
        >>> bool((x > -1).all() and (x < 1).all())
        True
    """
    key = as_key("truncated_normal", key)
    dtype = float_dtype(dtype, "truncated_normal")
    lower, upper = float_param(lower, dtype), float_param(upper, dtype)
    shape = sample_shape("truncated_normal", shape, lower, upper)
    lower = broadcast_to(lower, shape, "truncated_normal")
    upper = broadcast_to(upper, shape, "truncated_normal")
    sqrt2 = const(math.sqrt(2.0), dtype, shape)
    # sample the CDF's image of [lower, upper] uniformly and map back
    a = lax.erf(ew.div(lower, sqrt2))
    b = lax.erf(ew.div(upper, sqrt2))
    out = ew.mul(sqrt2, lax.erf_inv(uniform(key, shape, dtype, a, b)))
    # rounding may land exactly on a bound: clamp into the open interval
    inf = const(np.inf, dtype, shape)
    low_bound = ew.nextafter(lax.stop_gradient(lower), inf)
    high_bound = ew.nextafter(lax.stop_gradient(upper), lax.neg(inf))
    return ew.min(ew.max(out, low_bound), high_bound)


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
    return ew.mul(lax.sign(u), lax.log1p(lax.neg(lax.abs(u))))


def logistic(key, shape=(), dtype=None):
    """Standard logistic samples: ``log(u / (1 - u))``.

        >>> logistic(PRNGKey(0), (2,)).shape
        (2,)
    """
    key, shape, dtype = _float_args("logistic", key, shape, dtype)
    u = uniform(key, shape, dtype, tiny(dtype), 1.0)
    return ew.sub(lax.log(u), lax.log1p(lax.neg(u)))


def gumbel_mode(mode, name: str) -> str:
    """The gumbel mode asked for: ``None`` means the configured default."""
    if mode is None:
        return "high" if config.use_high_dynamic_range_gumbel else "low"
    if mode not in ("low", "high", "highest"):
        raise ValueError(f"{name}: mode must be 'low', 'high' or 'highest', got {mode!r}")
    return mode


def _floats_from_64_bits(words):
    """Float32 numbers in (0, 1) from pairs of uint32 words ``(high, low)`` (a leading axis of
    2) read as a 64-bit binary fraction: the leading zeros pick the exponent, the next 23 bits
    the mantissa, so values near 0 keep full relative precision."""
    u32 = _dtypes.uint32
    shape = get_aval(words).shape[1:]
    high, low = (lax.index_in_dim(words, i, keepdims=False) for i in (0, 1))
    high_zeros, low_zeros = lax.clz(high), lax.clz(low)
    c = lambda v: const(v, u32, shape)  # noqa: E731
    all_high_zero = ew.eq(high_zeros, c(32))
    # left-align the fraction's first set bit (shifts of 32 and more give 0)
    mantissa = ew.bitwise_or(
        ew.shift_left(high, high_zeros),
        lax.select(all_high_zero, ew.shift_left(low, low_zeros),
                   ew.shift_right_logical(low, ew.sub(c(32), high_zeros))))
    mantissa = ew.bitwise_and(ew.shift_right_logical(mantissa, c(8)), c((1 << 23) - 1))
    leading = lax.select(all_high_zero, ew.add(c(32), low_zeros), high_zeros)
    exponent = ew.shift_left(ew.sub(c(126), leading), c(23))
    exponent = ew.bitwise_and(exponent, c((1 << 30) - (1 << 22)))
    return lax.bitcast_convert_type(ew.bitwise_or(exponent, mantissa), _dtypes.float32)


@takes_out_sharding
def gumbel(key, shape=(), dtype=None, mode=None):
    """Standard Gumbel samples: ``-log(-log(u))``.

    ``mode="high"`` resolves the upper tail better: below 1/2, a second uniform draw fills the
    bits under the first one's spacing, and the sample is ``-log(-log1p(-x))``.
    ``mode="highest"`` (float32) reads 64 random bits as a binary fraction instead.
    ``None`` is ``config.use_high_dynamic_range_gumbel``'s choice ("low" unless set).

        >>> gumbel(PRNGKey(0), (2,)).shape
        (2,)
    """
    key, shape, dtype = _float_args("gumbel", key, shape, dtype)
    mode = gumbel_mode(mode, "gumbel")
    info = _dtypes.finfo(dtype)
    if mode == "highest" and dtype == _dtypes.float32:
        u32 = _dtypes.uint32
        raw = random_bits(key, 32, (2,) + shape)
        high, low = (lax.index_in_dim(raw, i, keepdims=False) for i in (0, 1))
        # 1 - bits as a 64-bit two's complement: ~bits + 1, carrying into the high word
        carry = convert(ew.eq(low, const(0, u32, shape)), u32)
        negated = jnp.stack([ew.add(lax.bitwise_not(high), carry),
                             ew.add(lax.bitwise_not(low), const(1, u32, shape))])
        lower_half = ew.lt(high, const(1 << 31, u32, shape))
        x = _floats_from_64_bits(jnp.where(lower_half, raw, negated))
        # log1p near 0 and log near 1 keep the precision x has there
        return jnp.where(lower_half, -jnp.log(-jnp.log1p(-x)), -jnp.log(-jnp.log(x)))
    if mode in ("high", "highest"):
        draws = uniform(key, (2,) + shape, dtype)
        high, low = (lax.index_in_dim(draws, i, keepdims=False) for i in (0, 1))
        # below 1/2 a float has room for the bits under the first draw's spacing
        x = jnp.where(high >= 0.5, high, high + 2.0 ** -int(info.nmant) * low + float(info.tiny))
        return -jnp.log(-jnp.log1p(-x))
    u = uniform(key, shape, dtype, float(info.tiny), 1.0)
    return lax.neg(lax.log(lax.neg(lax.log(u))))


def cauchy(key, shape=(), dtype=None):
    """Standard Cauchy samples: ``tan(pi (u - 1/2))`` for ``u`` uniform on ``[eps, 1)``.

        >>> cauchy(PRNGKey(0), (2,)).shape
        (2,)
    """
    key, shape, dtype = _float_args("cauchy", key, shape, dtype)
    u = uniform(key, shape, dtype, float(_dtypes.finfo(dtype).eps), 1.0)
    return lax.tan(ew.mul(const(math.pi, dtype, shape), ew.sub(u, const(0.5, dtype, shape))))


def pareto(key, b, shape=None, dtype=None):
    """Pareto samples on ``[1, inf)`` with density ``b / x**(b+1)``: ``exp(e / b)`` for a
    standard exponential ``e``.

        >>> x = pareto(PRNGKey(0), 3.0, (4,))
        >>> bool((x >= 1).all())
        True
    """
    key, shape, dtype, (b,) = _param_args("pareto", key, shape, dtype, b)
    return jnp.exp(exponential(key, shape, dtype) / b)


def lognormal(key, sigma=1.0, shape=None, dtype=None):
    """Log-normal samples: ``exp(sigma * z)`` for a standard normal ``z``.

        >>> lognormal(PRNGKey(0), 0.5, (2,)).shape
        (2,)
    """
    key, shape, dtype, (sigma,) = _param_args("lognormal", key, shape, dtype, sigma)
    return jnp.exp(normal(key, shape, dtype) * sigma)


def rayleigh(key, scale, shape=None, dtype=None):
    """Rayleigh samples, density ``x / scale**2 * exp(-x**2 / (2 scale**2))``:
    ``scale * sqrt(-2 log u)``.

        >>> rayleigh(PRNGKey(0), 2.0, (2,)).shape
        (2,)
    """
    key, shape, dtype, (scale,) = _param_args("rayleigh", key, shape, dtype, scale)
    u = uniform(key, shape, dtype)
    scale = broadcast_to(scale, shape, "rayleigh")
    return ew.mul(scale, lax.sqrt(ew.mul(lax.log(u), const(-2.0, dtype, shape))))


def rademacher(key, shape=(), dtype=None):
    """Random ``-1`` or ``+1`` with equal probability: ``2 * (u < 1/2) - 1``, the sign of a
    fair coin (``bernoulli(key, 0.5)``).

        >>> rademacher(PRNGKey(0), (3,)).dtype
        dtype('int32')
    """
    key, shape = as_key("rademacher", key), shape_tuple(shape, "rademacher")
    dtype = _dtypes.default_int_dtype() if dtype is None else _dtypes.canonicalize_dtype(dtype)
    float_type = _dtypes.default_float_dtype()
    heads = ew.lt(uniform(key, shape, float_type), const(0.5, float_type, shape))
    return ew.sub(ew.mul(const(2, dtype, shape), convert(heads, dtype)), const(1, dtype, shape))


def maxwell(key, shape=(), dtype=None):
    """Maxwell (Maxwell-Boltzmann) samples, density ``sqrt(2/pi) x**2 exp(-x**2/2)``: the
    length of a standard normal 3-vector.

        >>> maxwell(PRNGKey(0), (2,)).shape
        (2,)
    """
    key, shape, dtype = _float_args("maxwell", key, shape, dtype)
    z = normal(key, shape + (3,), dtype)
    return jnp.sqrt(jnp.sum(z * z, axis=-1))


def double_sided_maxwell(key, loc, scale, shape=(), dtype=None):
    """Samples with density proportional to ``z**2 exp(-z**2 / 2)``, ``z = (x - loc) / scale``:
    a Maxwell sample with a random sign, scaled and shifted.

    As in jax.random, the result has shape ``shape + broadcast(loc, scale).shape`` (with
    ``shape=()`` standing for the parameters' shape itself).

        >>> double_sided_maxwell(PRNGKey(0), 0.0, 1.0, (3,)).shape
        (3,)
    """
    key = as_key("double_sided_maxwell", key)
    dtype = float_dtype(dtype, "double_sided_maxwell")
    loc, scale = float_param(loc, dtype), float_param(scale, dtype)
    param_shape = broadcast_shapes(get_aval(loc).shape, get_aval(scale).shape)
    shape = shape_tuple(shape, "double_sided_maxwell") or param_shape
    shape = shape + param_shape
    key_size, key_sign = split_keys(key, 2)
    size = maxwell(key_size, shape, dtype)
    sign = rademacher(key_sign, shape, dtype)
    return sign * size * scale + loc


def weibull_min(key, scale, concentration, shape=(), dtype=None):
    """Weibull samples, density proportional to ``x**(c-1) exp(-(x/scale)**c)`` with
    ``c = concentration``: ``(-log(1 - u))**(1/c) * scale``.

    As in jax.random, ``u`` has shape ``shape`` and the parameters broadcast against it.

        >>> weibull_min(PRNGKey(0), 1.0, 2.0, (2,)).shape
        (2,)
    """
    key = as_key("weibull_min", key)
    dtype = float_dtype(dtype, "weibull_min")
    scale, concentration = float_param(scale, dtype), float_param(concentration, dtype)
    u = uniform(key, shape_tuple(shape, "weibull_min"), dtype)
    return jnp.power(-jnp.log1p(-u), 1.0 / concentration) * scale


def triangular(key, left, mode, right, shape=None, dtype=None):
    """Triangular samples on ``[left, right]`` peaking at ``mode``, by inverting the CDF.

        >>> x = triangular(PRNGKey(0), 0.0, 1.0, 3.0, (4,))
        >>> bool(((x >= 0) & (x <= 3)).all())
        True
    """
    key, shape, dtype, params = _param_args("triangular", key, shape, dtype, left, mode, right)
    left, mode, right = (broadcast_to(p, shape, "triangular") for p in params)
    split_point = ew.div(ew.sub(mode, left), ew.sub(right, left))
    u = uniform(key, shape, dtype)
    width = ew.sub(right, left)
    low = ew.add(left, lax.sqrt(ew.mul(ew.mul(u, width), ew.sub(mode, left))))
    high = ew.sub(right, lax.sqrt(ew.mul(ew.mul(ew.sub(const(1.0, dtype, shape), u), width),
                                           ew.sub(right, mode))))
    return lax.select(ew.lt(u, split_point), low, high)


def wald(key, mean, shape=None, dtype=None):
    """Wald (inverse Gaussian) samples with the given ``mean`` and scale 1: density
    ``(2 pi x**3)**-1/2 exp(-(x - mean)**2 / (2 mean**2 x))``.

    Michael, Schucany and Haas's method: a root of the quadratic that a chi-square(1) draw
    defines, picked with the right probability by a uniform draw.

        >>> wald(PRNGKey(0), 2.0, (3,)).shape
        (3,)
    """
    key, shape, dtype, (mean,) = _param_args("wald", key, shape, dtype, mean)
    key_normal, key_uniform = split_keys(key, 2)
    mean = broadcast_to(mean, shape, "wald")
    v = normal(key_normal, shape, dtype)
    z = uniform(key_uniform, shape, dtype)
    y = lax.integer_pow(v, 2)
    mean_sq = lax.integer_pow(mean, 2)
    sqrt_term = lax.sqrt(4.0 * mean * y + mean_sq * lax.integer_pow(y, 2))
    x = mean + mean_sq * y / 2.0 - mean / 2.0 * sqrt_term
    return lax.select(ew.le(z, mean / (mean + x)), x, mean_sq / x)
