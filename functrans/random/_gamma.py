"""The gamma family: ``gamma``, ``loggamma``, ``beta``, ``dirichlet``, ``chisquare``, ``f``,
``t``, ``generalized_normal``.

Gamma samples come from Marsaglia and Tsang's rejection method, run as jax.random runs it:
the key is split into one key per element, and each element repeats its own proposals (a
transformed normal, itself redrawn while nonpositive, and a uniform) with its own key until
it accepts. All elements run together under ``vmap``: the loops become masked loops over the
whole array, so the trip count is data-dependent but the shapes are static. Shapes ``a < 1``
are boosted: ``Gamma(a) = Gamma(a + 1) * U**(1/a)``, in logs for ``loggamma``, whose samples
stay exact where the gamma samples underflow. The samples are differentiable in their shape
parameters (see :mod:`functrans.random._gamma_derivative`).
"""
from __future__ import annotations

import functrans.numpy as jnp
from functrans import _dtypes, lax
from functrans.primitives import elementwise as ew
from functrans._api import vmap
from functrans.core import get_aval
from functrans.random._arguments import (broadcast_to, convert, float_dtype, float_param,
                                         sample_shape, shape_from_param_shapes)
from functrans.random._bits import split_key, split_keys
from functrans.random._continuous import exponential, normal, rademacher, uniform
from functrans.random._gamma_derivative import reparameterized_gamma, reparameterized_log_gamma
from functrans.random._keys import as_key


def _gamma_one(key, alpha, log_space: bool):
    """One standard-gamma sample (its log with ``log_space``) for the scalar shape ``alpha``
    from its own key; ``vmap`` runs it for every element."""
    dtype = get_aval(alpha).dtype
    c = lambda v: lax.full((), v, dtype)  # noqa: E731
    # shapes below 1 (and NaN) are boosted by 1
    unboosted = ew.ge(alpha, c(1))
    alpha_orig = alpha
    alpha = lax.select(unboosted, alpha, ew.add(alpha, c(1)))
    d = ew.sub(alpha, c(1 / 3))
    scale = ew.div(c(1 / 3), lax.sqrt(d))

    def rejected(state):
        _, x2, v, u = state
        # a proposal fails the cheap squeeze test and the full one (both are evaluated: the
        # loop runs vectorized); x2 is x**2, v is (1 + scale x)**3
        squeeze_fails = ew.ge(u, ew.sub(c(1), ew.mul(c(0.0331), ew.mul(x2, x2))))
        full_fails = ew.ge(lax.log(u), ew.add(ew.mul(x2, c(0.5)),
                                                ew.mul(d, ew.add(ew.sub(c(1), v), lax.log(v)))))
        return ew.bitwise_and(squeeze_fails, full_fails)

    def propose(state):
        key = state[0]
        key, normal_key, uniform_key = split_keys(key, 3)

        def redraw(kxv):
            k, sub = split_keys(kxv[0], 2)
            x = normal(sub, (), dtype)
            return k, x, ew.add(c(1), ew.mul(x, scale))

        # v = 1 + scale * x must be positive: redraw x until it is
        _, x, v = lax.while_loop(lambda kxv: ew.le(kxv[2], c(0)), redraw,
                                 (normal_key, c(0), c(-1)))
        return key, ew.mul(x, x), ew.mul(ew.mul(v, v), v), uniform(uniform_key, (), dtype)

    # the initial state is one the test rejects, so the loop makes at least one proposal
    key, boost_key = split_keys(key, 2)
    _, _, v, _ = lax.while_loop(rejected, propose, (key, c(0), c(1), c(2)))
    if log_space:
        log_u = lax.neg(exponential(boost_key, (), dtype))
        log_boost = lax.select(ew.bitwise_or(unboosted, ew.eq(log_u, c(0))),
                               c(0), ew.mul(log_u, ew.div(c(1), alpha_orig)))
        return ew.add(ew.add(lax.log(d), lax.log(v)), log_boost)
    u = ew.sub(c(1), uniform(boost_key, (), dtype))
    boost = lax.select(unboosted, c(1), ew.pow(u, ew.div(c(1), alpha_orig)))
    return ew.mul(ew.mul(d, v), boost)


def _gamma_draws(key, a, log_space: bool):
    """Gamma samples (or their logs) for every element of ``a``, with no gradient."""
    shape, size = get_aval(a).shape, get_aval(a).size
    if size == 0:
        return a
    keys = split_key(key, (size,))
    flat = lax.reshape(lax.stop_gradient(a), (size,))
    samples = vmap(lambda k, alpha: _gamma_one(k, alpha, log_space))(keys, flat)
    return lax.reshape(samples, shape)


def _differentiable(reparameterized, a, samples):
    """``samples`` given their derivative in ``a``, computed in float32 at least (the
    derivative's series need the range and precision)."""
    dtype = get_aval(a).dtype
    if dtype.itemsize >= 4:
        return reparameterized(a, samples)
    work = _dtypes.float32
    return convert(reparameterized(convert(a, work), convert(samples, work)), dtype)


def _gamma_samples(name, key, a, shape, dtype, log_space: bool):
    key, dtype = as_key(name, key), float_dtype(dtype, name)
    a = float_param(a, dtype)
    shape = sample_shape(name, shape, a)
    a = broadcast_to(a, shape, name)
    samples = _gamma_draws(key, a, log_space)
    return _differentiable(reparameterized_log_gamma if log_space else reparameterized_gamma,
                           a, samples)


def gamma(key, a, shape=None, dtype=None):
    """Standard-gamma samples (shape ``a``, scale 1): density ``x**(a-1) e**-x / Gamma(a)``.

    Drawn by Marsaglia and Tsang's rejection method. The samples are differentiable in ``a``
    by implicit reparameterization: ``dx/da = -(dCDF(x; a)/da) / pdf(x; a)``, the derivative
    of the inverse CDF at the sample's CDF level. Divide by a rate (or multiply by a scale)
    for other gamma distributions.

        >>> x = gamma(PRNGKey(0), 2.0, (1000,))
        >>> bool(abs(x.mean() - 2.0) < 0.2)
        True
    """
    return _gamma_samples("gamma", key, a, shape, dtype, log_space=False)


def loggamma(key, a, shape=None, dtype=None):
    """Logs of standard-gamma samples (density ``x**(a-1) e**-x / Gamma(a)``).

    Accurate where the samples themselves underflow (``a`` much below 1). Differentiable in
    ``a`` by implicit reparameterization, like :func:`gamma`.

        >>> loggamma(PRNGKey(0), 0.01, (2,)).shape
        (2,)
    """
    return _gamma_samples("loggamma", key, a, shape, dtype, log_space=True)


def beta(key, a, b, shape=None, dtype=None):
    """Beta samples: density proportional to ``x**(a-1) (1-x)**(b-1)`` on [0, 1].

    Built as ``X / (X + Y)`` from gamma samples ``X ~ Gamma(a)``, ``Y ~ Gamma(b)`` (in logs,
    so small ``a``, ``b`` stay exact); differentiable in ``a`` and ``b``.

        >>> beta(PRNGKey(0), 2.0, 3.0, (3,)).shape
        (3,)
    """
    key, dtype = as_key("beta", key), float_dtype(dtype, "beta")
    a, b = float_param(a, dtype), float_param(b, dtype)
    shape = sample_shape("beta", shape, a, b)
    key_a, key_b = split_keys(key, 2)
    log_x = loggamma(key_a, a, shape, dtype)
    log_y = loggamma(key_b, b, shape, dtype)
    # shifting both logs by the same amount leaves the ratio unchanged (so no gradient)
    shift = lax.stop_gradient(jnp.maximum(log_x, log_y))
    x, y = jnp.exp(log_x - shift), jnp.exp(log_y - shift)
    return x / (x + y)


def dirichlet(key, alpha, shape=None, dtype=None):
    """Dirichlet samples: points on the simplex with density proportional to
    ``prod_i x_i**(alpha_i - 1)``.

    ``alpha`` has shape ``(..., K)``; ``shape`` (default ``alpha.shape[:-1]``) is the batch
    shape, and the result has shape ``shape + (K,)``. Differentiable in ``alpha``.

        >>> import functrans.numpy as jnp
        >>> dirichlet(PRNGKey(0), jnp.array([1.0, 2.0, 3.0]), (5,)).shape
        (5, 3)
    """
    key = as_key("dirichlet", key)
    dtype = float_dtype(dtype, "dirichlet")
    alpha = float_param(alpha, dtype)
    alpha_shape = get_aval(alpha).shape
    if len(alpha_shape) < 1:
        raise ValueError(f"dirichlet: alpha must have at least one axis, got shape {alpha_shape}")
    batch = shape_from_param_shapes("dirichlet", shape, alpha_shape[:-1])
    log_g = loggamma(key, alpha, batch + alpha_shape[-1:], dtype)
    # softmax of the logs: the gamma samples normalized, without overflow or underflow
    shift = lax.stop_gradient(jnp.max(log_g, axis=-1, keepdims=True))
    g = jnp.exp(log_g - shift)
    return g / jnp.sum(g, axis=-1, keepdims=True)


def chisquare(key, df, shape=None, dtype=None):
    """Chi-square samples with ``df`` degrees of freedom (``2 * Gamma(df / 2)``).

        >>> chisquare(PRNGKey(0), 3.0, (2,)).shape
        (2,)
    """
    key, dtype = as_key("chisquare", key), float_dtype(dtype, "chisquare")
    df = float_param(df, dtype)
    shape = sample_shape("chisquare", shape, df)
    return jnp.exp(loggamma(key, df / 2.0, shape, dtype)) * 2.0


def f(key, dfnum, dfden, shape=None, dtype=None):
    """F-distribution samples: ``(chi2(dfnum) / dfnum) / (chi2(dfden) / dfden)``.

        >>> f(PRNGKey(0), 5.0, 10.0, (2,)).shape
        (2,)
    """
    key, dtype = as_key("f", key), float_dtype(dtype, "f")
    dfnum, dfden = float_param(dfnum, dtype), float_param(dfden, dtype)
    shape = sample_shape("f", shape, dfnum, dfden)
    key_den, key_num = split_keys(key, 2)
    num = chisquare(key_num, dfnum, shape, dtype) / dfnum
    den = chisquare(key_den, dfden, shape, dtype) / dfden
    return num / den


def t(key, df, shape=None, dtype=None):
    """Student's t samples with ``df`` degrees of freedom: ``z sqrt((df/2) / Gamma(df/2))``,
    ``z`` standard normal.

        >>> t(PRNGKey(0), 3.0, (2,)).shape
        (2,)
    """
    key, dtype = as_key("t", key), float_dtype(dtype, "t")
    df = float_param(df, dtype)
    shape = sample_shape("t", shape, df)
    key_normal, key_gamma = split_keys(key, 2)
    z = normal(key_normal, shape, dtype)
    half_df = df / 2.0
    return z * jnp.sqrt(half_df / gamma(key_gamma, half_df, shape, dtype))


def generalized_normal(key, p, shape=(), dtype=None):
    """Generalized normal samples, density proportional to ``exp(-|x|**p)``: a random sign
    times ``g**(1/p)`` with ``g ~ Gamma(1/p)`` (``p=2``: normal with variance 1/2;
    ``p=1``: Laplace).

        >>> generalized_normal(PRNGKey(0), 1.5, (2,)).shape
        (2,)
    """
    key, dtype = as_key("generalized_normal", key), float_dtype(dtype, "generalized_normal")
    p = float_param(p, dtype)
    shape = sample_shape("generalized_normal", shape, p)
    key_gamma, key_sign = split_keys(key, 2)
    g = gamma(key_gamma, 1.0 / p, shape, dtype)
    return rademacher(key_sign, shape, dtype) * g ** (1.0 / p)

