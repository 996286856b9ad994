"""Per-element step sizes from running second moments of the gradient, without momentum:
RMSProp (:func:`scale_by_rms`), centered RMSProp (:func:`scale_by_stddev`), Adagrad
(:func:`scale_by_rss`) and AdaDelta (:func:`scale_by_adadelta`).

Adam-style rules, which also keep a first moment as the direction, are in
:mod:`functrans.optim._adaptive_moments`; the second moments kept per axis rather than per
element (Adafactor, SM3) in :mod:`functrans.optim._factorized`. ``g`` in the docstrings is
the incoming update, ``t`` the step count starting at 1.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from functrans import lax
from functrans import numpy as jnp
from functrans.optim._base import GradientTransformation
from functrans.optim._numerics import abs_sq, safe_increment
from functrans.optim._tree_math import (tree_bias_correction, tree_full_like, tree_mul,
                                        tree_update_moment, tree_update_moment_per_elem_norm,
                                        tree_zeros_like)
from functrans.tree_util import tree_map

__all__ = ["ScaleByRmsState", "ScaleByRmsWithCountState", "scale_by_rms",
           "ScaleByRStdDevState", "ScaleByRStdDevWithCountState", "scale_by_stddev",
           "ScaleByRssState", "scale_by_rss", "ScaleByAdaDeltaState", "scale_by_adadelta"]


class ScaleByRmsState(NamedTuple):
    """The state of :func:`scale_by_rms`: the running mean of ``g^2``."""
    nu: Any


class ScaleByRmsWithCountState(NamedTuple):
    """The state of :func:`scale_by_rms` with ``bias_correction``."""
    count: Any
    nu: Any


def scale_by_rms(decay=0.9, eps=1e-8, initial_scale=0.0, eps_in_sqrt: bool = True,
                 bias_correction: bool = False) -> GradientTransformation:
    """RMSProp's scaling (Tieleman & Hinton, 2012)::

        v = decay v + (1 - decay) g^2
        update = g / sqrt(v + eps)        (eps_in_sqrt=True, the default)
        update = g / (sqrt(v) + eps)      (eps_in_sqrt=False)

    ``v`` starts at ``initial_scale``; with ``bias_correction`` it is divided by
    ``1 - decay^t`` first.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_rms(decay=0.0, eps=0.0)
        >>> opt.update(jnp.array([-2.0]), opt.init(jnp.zeros(1)))[0]
        Array([-1.], dtype=float32)
    """
    def init(params):
        nu = tree_full_like(params, initial_scale)
        if bias_correction:
            return ScaleByRmsWithCountState(jnp.zeros([], jnp.int32), nu)
        return ScaleByRmsState(nu)

    def update(updates, state, params=None):
        del params
        nu = tree_update_moment_per_elem_norm(updates, state.nu, decay, 2)
        nu_hat = nu
        if bias_correction:
            count = safe_increment(state.count)
            nu_hat = tree_bias_correction(nu, decay, count)
        if eps_in_sqrt:
            scaling = tree_map(lambda n: lax.rsqrt(n + eps), nu_hat)
        else:
            scaling = tree_map(lambda n: 1 / (jnp.sqrt(n) + eps), nu_hat)
        updates = tree_map(lambda s, g: s * g, scaling, updates)
        if bias_correction:
            return updates, ScaleByRmsWithCountState(count, nu)
        return updates, ScaleByRmsState(nu)

    return GradientTransformation(init, update)


class ScaleByRStdDevState(NamedTuple):
    """The state of :func:`scale_by_stddev`: running means of ``g`` and ``g^2``."""
    mu: Any
    nu: Any


class ScaleByRStdDevWithCountState(NamedTuple):
    """The state of :func:`scale_by_stddev` with ``bias_correction``."""
    count: Any
    mu: Any
    nu: Any


def scale_by_stddev(decay=0.9, eps=1e-8, initial_scale=0.0, eps_in_sqrt: bool = True,
                    bias_correction: bool = False) -> GradientTransformation:
    """Centered RMSProp's scaling (Graves, 2013): divide by the running standard deviation::

        m = decay m + (1 - decay) g;  v = decay v + (1 - decay) g^2
        update = g / sqrt(v - m^2 + eps)

    (``g / (sqrt(v - m^2) + eps)`` with ``eps_in_sqrt=False``; ``m`` and ``v`` divided by
    ``1 - decay^t`` first with ``bias_correction``.)

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_stddev(decay=0.5, eps=0.0)
        >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0]   # 2 / sqrt(2 - 1)
        Array([2.], dtype=float32)
    """
    def init(params):
        mu = tree_zeros_like(params)
        nu = tree_full_like(params, initial_scale)
        if bias_correction:
            return ScaleByRStdDevWithCountState(jnp.zeros([], jnp.int32), mu, nu)
        return ScaleByRStdDevState(mu, nu)

    def update(updates, state, params=None):
        del params
        mu = tree_update_moment(updates, state.mu, decay, 1)
        nu = tree_update_moment_per_elem_norm(updates, state.nu, decay, 2)
        mu_hat, nu_hat = mu, nu
        if bias_correction:
            count = safe_increment(state.count)
            mu_hat = tree_bias_correction(mu, decay, count)
            nu_hat = tree_bias_correction(nu, decay, count)
        if eps_in_sqrt:
            scaling = tree_map(lambda m, n: lax.rsqrt(n - abs_sq(m) + eps), mu_hat, nu_hat)
        else:
            scaling = tree_map(lambda m, n: 1 / (jnp.sqrt(n - abs_sq(m)) + eps), mu_hat, nu_hat)
        updates = tree_map(lambda s, g: s * g, scaling, updates)
        if bias_correction:
            return updates, ScaleByRStdDevWithCountState(count, mu, nu)
        return updates, ScaleByRStdDevState(mu, nu)

    return GradientTransformation(init, update)


class ScaleByRssState(NamedTuple):
    """The state of :func:`scale_by_rss`: the running sum of ``g^2``."""
    sum_of_squares: Any


def scale_by_rss(initial_accumulator_value=0.1, eps=1e-7) -> GradientTransformation:
    """Adagrad's scaling (Duchi et al., 2011): ``s += g^2; update = g / sqrt(s + eps)``
    (0 where ``s`` is 0).

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_rss(initial_accumulator_value=0.0, eps=0.0)
        >>> opt.update(jnp.array([-2.0, 0.0]), opt.init(jnp.zeros(2)))[0]
        Array([-1.,  0.], dtype=float32)
    """
    def init(params):
        return ScaleByRssState(tree_full_like(params, initial_accumulator_value))

    def update(updates, state, params=None):
        del params
        sums = tree_map(lambda g, t: abs_sq(g) + t, updates, state.sum_of_squares)
        inverse = tree_map(lambda t: jnp.where(t > 0, lax.rsqrt(t + eps), 0.0), sums)
        return tree_mul(inverse, updates), ScaleByRssState(sums)

    return GradientTransformation(init, update)


class ScaleByAdaDeltaState(NamedTuple):
    """The state of :func:`scale_by_adadelta`: running means of ``g^2`` and ``update^2``."""
    e_g: Any
    e_x: Any


def scale_by_adadelta(rho=0.9, eps=1e-6) -> GradientTransformation:
    """AdaDelta's direction (Zeiler, 2012): the ratio of running RMS of past updates to the
    running RMS of gradients::

        E[g^2] = rho E[g^2] + (1 - rho) g^2
        update = sqrt(E[dx^2] + eps) / sqrt(E[g^2] + eps) * g
        E[dx^2] = rho E[dx^2] + (1 - rho) update^2

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_adadelta(rho=0.0, eps=1.0)
        >>> opt.update(jnp.array([0.0]), opt.init(jnp.zeros(1)))[0]
        Array([0.], dtype=float32)
    """
    def init(params):
        return ScaleByAdaDeltaState(tree_zeros_like(params), tree_zeros_like(params))

    def update(updates, state, params=None):
        del params
        e_g = tree_update_moment(updates, state.e_g, rho, 2)
        updates = tree_map(lambda g, eg, ex: jnp.sqrt(ex + eps) / jnp.sqrt(eg + eps) * g,
                           updates, e_g, state.e_x)
        e_x = tree_update_moment(updates, state.e_x, rho, 2)
        return updates, ScaleByAdaDeltaState(e_g, e_x)

    return GradientTransformation(init, update)
