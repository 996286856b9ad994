"""Counts: ``geometric``, ``poisson``, ``binomial``, ``multinomial``.

The Poisson and binomial samplers are jax.random's (which follow TensorFlow's): small means
count events of a uniform stream (Knuth's product of uniforms; geometric waiting times),
large ones use Hormann's transformed rejection with squeeze (PTRS, BTRS, 1993). Each runs as
one ``while_loop`` over the whole array that draws a fresh uniform array per round from a
key split off the loop's key, until every element is done; the rejection loops keep the
*last* accepted proposal of every element, as JAX's do. Both methods run on every element
and a select picks the right one, so the keys, and the numbers, are JAX's.
"""
from __future__ import annotations

import numpy as np

import functrans.numpy as jnp
from functrans import _dtypes, lax
from functrans.core import get_aval
from functrans.random._arguments import (any_true, as_array, broadcast_to, const, convert,
                                         inexact_param, int_dtype, sample_shape, shape_tuple)
from functrans.random._bits import split_key, split_keys
from functrans.random._continuous import uniform
from functrans.random._keys import as_key


def _loop_limit(dtype) -> int:
    """Rounds after which jax.random's count loops give up: the largest value of the result
    dtype (never reached in practice), capped to the int32 round counter."""
    info = np.iinfo(dtype) if _dtypes.is_integer(dtype) else None
    return int(min(info.max, 2 ** 31 - 1)) if info is not None else 2 ** 31 - 1


def geometric(key, p, shape=None, dtype=None):
    """Geometric samples: the number of Bernoulli(``p``) trials up to and including the first
    success (values 1, 2, ...), ``floor(log(u) / log(1 - p)) + 1``.

        >>> x = geometric(PRNGKey(0), 0.3, (4,))
        >>> bool((x >= 1).all())
        True
    """
    key = as_key("geometric", key)
    dtype = int_dtype(dtype, "geometric")
    p = inexact_param(p)
    shape = sample_shape("geometric", shape, p)
    u = uniform(key, shape, get_aval(p).dtype)
    # u = 0 is mapped to 1 (jax.random's choice): the log stays finite
    log_u = jnp.log(jnp.where(u == 0, 1.0, u))
    log_q = broadcast_to(jnp.log1p(-p), shape, "geometric")
    # the conversion saturates (an infinite wait for p = 0 gives the dtype's maximum)
    return convert(jnp.floor(log_u / log_q) + 1.0, dtype)


def _poisson_knuth(key, lam, dtype):
    """Poisson counts for small rates: multiply uniforms while the product stays above
    ``exp(-lam)``; the count is the number of factors minus one. ~lam + 1 rounds."""
    shape, limit = get_aval(lam).shape, _loop_limit(dtype)

    def more(state):
        i, _, _, log_product = state
        return any_true(log_product > -lam) & (i < limit)

    def step(state):
        i, count, key, log_product = state
        key, subkey = split_keys(key, 2)
        count = jnp.where(log_product > -lam, count + 1, count)
        log_product = log_product + jnp.log(uniform(subkey, shape, _dtypes.float32))
        return i + 1, count, key, log_product

    init = (jnp.array(0, _dtypes.int32), const(0, dtype, shape), key,
            const(0.0, _dtypes.float32, shape))
    count = lax.while_loop(more, step, init)[1]
    return count - const(1, dtype, shape)


def _poisson_rejection(key, lam, dtype):
    """Poisson counts for rates >= 10 by Hormann's transformed rejection with squeeze
    (PTRS): a few rounds, whatever the rate."""
    shape, limit = get_aval(lam).shape, _loop_limit(dtype)
    log_lam = jnp.log(lam)
    b = 0.931 + 2.53 * jnp.sqrt(lam)
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    v_r = 0.9277 - 3.6224 / (b - 2.0)

    def more(state):
        i, _, accepted, _ = state
        return any_true(~accepted) & (i < limit)

    def step(state):
        i, count, accepted, key = state
        key, key_u, key_v = split_keys(key, 3)
        u = uniform(key_u, shape, _dtypes.float32) - 0.5
        v = uniform(key_v, shape, _dtypes.float32)
        us = 0.5 - jnp.abs(u)
        k = jnp.floor((2.0 * a / us + b) * u + lam + 0.43)
        s = jnp.log(v * inv_alpha / (a / (us * us) + b))
        t = -lam + k * log_lam - lax.lgamma(k + 1.0)
        quick = (us >= 0.07) & (v <= v_r)
        reject = (k < 0) | ((us < 0.013) & (v > us))
        accept = quick | (~reject & (s <= t))
        return i + 1, jnp.where(accept, k, count), accepted | accept, key

    init = (jnp.array(0, _dtypes.int32), const(-1.0, _dtypes.float32, shape),
            const(False, _dtypes.bool_, shape), key)
    return convert(lax.while_loop(more, step, init)[1], dtype)


def poisson(key, lam, shape=None, dtype=None):
    """Poisson samples with rate ``lam`` (broadcast to ``shape``), computed in float32.

    Rates below 10 multiply uniforms (Knuth); larger rates use Hormann's transformed
    rejection (PTRS). A rate of 0 gives 0; a negative or NaN rate gives -1.

        >>> x = poisson(PRNGKey(0), 3.0, (1000,))
        >>> bool(abs(x.mean() - 3.0) < 0.3)
        True
    """
    key = as_key("poisson", key)
    dtype = int_dtype(dtype, "poisson")
    lam = as_array(lam)
    shape = get_aval(lam).shape if shape is None else shape_tuple(shape, "poisson")
    lam = lax.stop_gradient(convert(broadcast_to(lam, shape, "poisson"), _dtypes.float32))
    knuth = jnp.isnan(lam) | (lam < 10.0)
    counts = jnp.where(knuth, _poisson_knuth(key, jnp.where(knuth, lam, 0.0), dtype),
                       _poisson_rejection(key, jnp.where(knuth, 1e5, lam), dtype))
    return jnp.where(lam == 0, const(0, dtype, shape), counts)


def _stirling_tail(k):
    """``lgamma(k + 1) - ((k + 1/2) log(k + 1) - (k + 1) + log(2 pi) / 2)`` as jax.random's
    BTRS computes it: tabulated for ``k <= 9``; otherwise the series at ``k`` clamped to 9
    (JAX's formula, kept so that the acceptance tests, and the samples, are JAX's)."""
    table = jnp.array([0.0810614667953272, 0.0413406959554092, 0.0276779256849983,
                       0.02079067210376509, 0.0166446911898211, 0.0138761288230707,
                       0.0118967099458917, 0.0104112652619720, 0.00925546218271273,
                       0.00833056343336287], dtype=get_aval(k).dtype)
    tabulated = k <= 9
    k = jnp.clip(k, 0.0, 9.0)
    kp1sq = (k + 1) * (k + 1)
    series = (1.0 / 12 - (1.0 / 360 - 1.0 / 1260 / kp1sq) / kp1sq) / (k + 1)
    return jnp.where(tabulated, table[convert(jnp.floor(k), _dtypes.int32)], series)


def _binomial_inversion(key, count, prob, dtype, limit):
    """Binomial counts for small means: successes are the geometric waiting times that fit
    in ``count`` trials. ~count * prob + 1 rounds."""
    shape, work = get_aval(prob).shape, get_aval(prob).dtype
    log_q = jnp.log1p(-prob)

    def more(state):
        i, _, total, _ = state
        return any_true(total <= count) & (i < limit)

    def step(state):
        i, waits, total, key = state
        subkey, key = split_keys(key, 2)
        waits = jnp.where(total <= count, waits + 1.0, waits)
        total = total + jnp.ceil(jnp.log(uniform(subkey, shape, work)) / log_q)
        return i + 1, waits, total, key

    init = (jnp.array(0, _dtypes.int32), const(0, work, shape), const(0, work, shape), key)
    return convert(lax.while_loop(more, step, init)[1] - 1.0, dtype)


def _binomial_rejection(key, count, prob, dtype, limit):
    """Binomial counts for means ``count * prob > 10`` (``prob <= 1/2``) by Hormann's
    transformed rejection with squeeze (BTRS): a few rounds, whatever ``count``."""
    shape, work = get_aval(prob).shape, get_aval(prob).dtype
    stddev = jnp.sqrt(count * prob * (1.0 - prob))
    b = 1.15 + 2.53 * stddev
    a = -0.0873 + 0.0248 * b + 0.01 * prob
    c = count * prob + 0.5
    v_r = 0.92 - 4.2 / b
    r = prob / (1.0 - prob)
    alpha = (2.83 + 5.1 / b) * stddev
    m = jnp.floor((count + 1) * prob)

    def more(state):
        i, _, accepted, _ = state
        return any_true(~accepted) & (i < limit)

    def step(state):
        i, out, accepted, key = state
        key, key_u, key_v = split_keys(key, 3)
        u = uniform(key_u, shape, work)
        v = uniform(key_v, shape, work)
        u = u - 0.5
        us = 0.5 - jnp.abs(u)
        quick = (us >= 0.07) & (v <= v_r)
        k = jnp.floor((2.0 * a / us + b) * u + c)
        reject = (k < 0) | (k > count)
        log_v = jnp.log(v * alpha / (a / (us * us) + b))
        bound = ((m + 0.5) * jnp.log((m + 1) / (r * (count - m + 1)))
                 + (count + 1) * jnp.log((count - m + 1) / (count - k + 1))
                 + (k + 0.5) * jnp.log(r * (count - k + 1) / (k + 1))
                 + _stirling_tail(m) + _stirling_tail(count - m)
                 - _stirling_tail(k) - _stirling_tail(count - k))
        accept = quick | (~reject & (log_v <= bound))
        return i + 1, jnp.where(accept, k, out), accepted | accept, key

    init = (jnp.array(0, _dtypes.int32), const(-1, work, shape),
            const(False, _dtypes.bool_, shape), key)
    return convert(lax.while_loop(more, step, init)[1], dtype)


def binomial(key, n, p, shape=None, dtype=None):
    """Binomial samples: successes in ``n`` trials of probability ``p`` (floats, as in
    jax.random; ``n`` and ``p`` broadcast to ``shape``).

    Small means (``n min(p, 1-p) <= 10``) count geometric waiting times; larger ones use
    Hormann's transformed rejection (BTRS). ``p > 1/2`` samples the failures. Invalid
    parameters (``n < 0``, ``p`` outside [0, 1], NaN) give NaN; ``n = inf`` gives inf.

        >>> x = binomial(PRNGKey(0), 20.0, 0.3, (1000,))
        >>> bool(abs(x.mean() - 6.0) < 0.5)
        True
    """
    key = as_key("binomial", key)
    dtype = _dtypes.default_float_dtype() if dtype is None else _dtypes.canonicalize_dtype(dtype)
    if not _dtypes.is_float(dtype):
        raise ValueError(f"binomial needs a floating-point dtype, got {dtype}")
    prob = lax.stop_gradient(inexact_param(p))
    work = get_aval(prob).dtype
    count = lax.stop_gradient(convert(as_array(n), work))
    shape = sample_shape("binomial", shape, count, prob)
    count, prob = broadcast_to(count, shape, "binomial"), broadcast_to(prob, shape, "binomial")
    p_below_half = prob < 0.5
    q = jnp.where(p_below_half, prob, 1.0 - prob)
    count_nan_or_negative = jnp.isnan(count) | (count < 0.0)
    count_inf = jnp.isinf(count)
    q_nan, q_negative = jnp.isnan(q), q < 0.0
    q = jnp.where(q_nan | q_negative, 0.01, q)
    inversion = count_nan_or_negative | (count * q <= 10.0)
    count = jnp.floor(count)
    limit = 2 ** 31 - 1
    samples = jnp.where(
        inversion,
        _binomial_inversion(key, jnp.where(inversion, count, 0.0), q, dtype, limit),
        _binomial_rejection(key, jnp.where(inversion, 1e4, count),
                            jnp.where(inversion, 0.5, q), dtype, limit))
    invalid = q_negative | q_nan | count_nan_or_negative
    samples = jnp.where(invalid, const(np.nan, dtype, shape), samples)
    samples = jnp.where(count_inf & ~invalid, const(np.inf, dtype, shape), samples)
    return jnp.where(p_below_half | count_nan_or_negative | q_nan | count_inf, samples,
                     convert(count, dtype) - samples)


def multinomial(key, n, p, *, shape=None, dtype=None, unroll=1):
    """Multinomial counts: ``n`` trials over the categories on the last axis of ``p``.

    Drawn as a chain of binomials (category ``i`` gets ``Binomial(n - previous counts,
    p_i / remaining mass)``) in a ``scan`` over the categories, so the counts sum to ``n``.
    As in jax.random, ``shape`` is the full result shape, categories last (default
    ``p.shape``); ``n`` broadcasts to ``shape[:-1]``. ``unroll`` is passed to the scan.

        >>> import functrans.numpy as jnp
        >>> counts = multinomial(PRNGKey(0), 10.0, jnp.array([0.2, 0.3, 0.5]))
        >>> float(counts.sum())
        10.0
    """
    key = as_key("multinomial", key)
    n, p = inexact_param(n), inexact_param(p)
    work = _dtypes.promote_types(get_aval(n).dtype, get_aval(p).dtype)
    n, p = convert(n, work), convert(p, work)
    if get_aval(p).ndim < 1:
        raise ValueError(f"multinomial: p must have a category axis, got shape {get_aval(p).shape}")
    shape = get_aval(p).shape if shape is None else shape_tuple(shape, "multinomial")
    n = broadcast_to(n, shape[:-1], "multinomial")
    p = jnp.moveaxis(broadcast_to(p, shape, "multinomial"), -1, 0)
    remaining = lax.cumsum(p, 0, reverse=True)
    ratios = p / jnp.where(remaining == 0, 1.0, remaining)

    def draw(left, ratio_and_key):
        ratio, category_key = ratio_and_key
        count = binomial(category_key, left, jnp.clip(ratio, 0.0, 1.0), dtype=work)
        return left - count, count

    _, counts = lax.scan(draw, n, (ratios, split_key(key, (shape[-1],))), unroll=unroll)
    counts = jnp.moveaxis(counts, 0, -1)
    return counts if dtype is None else convert(counts, _dtypes.canonicalize_dtype(dtype))
