"""MoMo (Schaipp et al., 2023): momentum with model-based adaptive (Polyak-like) steps,
which need the loss ``value`` in ``update``."""
from __future__ import annotations

from typing import Any, NamedTuple

from functrans import lax
from functrans import numpy as jnp
from functrans.optim._base import NO_PARAMS_MSG, GradientTransformationExtraArgs
from functrans.optim._numerics import safe_increment
from functrans.optim._tree_casting import tree_dtype
from functrans.optim._tree_math import tree_norm, tree_vdot, tree_zeros_like
from functrans.tree_util import tree_map

__all__ = ["MomoState", "momo", "MomoAdamState", "momo_adam"]

_NO_VALUE = ("You need to pass the latest loss value to Momo.\n"
             "                       Use ``jax.value_and_grad`` for this.")


class MomoState(NamedTuple):
    """The state of :func:`momo`."""
    exp_avg: Any
    barf: Any
    gamma: Any
    lb: Any
    count: Any


def momo(learning_rate=1.0, beta=0.9, lower_bound=0.0, weight_decay=0.0,
         adapt_lower_bound: bool = False) -> GradientTransformationExtraArgs:
    """MoMo (SGD with momentum): the step is the minimum of ``learning_rate`` and the
    truncated model's Polyak step ``max(f_bar - lower_bound - gamma + <d, p>, 0) / |d|^2``
    along the momentum ``d``, with ``f_bar`` and ``gamma`` the averaged losses and
    ``<g, p>``. Pass ``value=loss`` to ``update``; ``adapt_lower_bound`` estimates the
    lower bound online.

        >>> import functrans.numpy as jnp
        >>> opt = momo()
        >>> p = jnp.array([2.0])
        >>> opt.update(jnp.array([4.0]), opt.init(p), p, value=jnp.array(4.0))[0]  # x^2: to 1
        Array([-1.], dtype=float32)
    """
    def init(params):
        dtype = tree_dtype(params, "lowest")
        return MomoState(tree_zeros_like(params), jnp.zeros([], dtype=dtype),
                         jnp.zeros([], dtype=dtype), jnp.array(lower_bound, dtype=dtype),
                         jnp.zeros([], jnp.int32))

    def update(updates, state, params=None, *, value, **extra_args):
        del extra_args
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        if value is None:
            raise ValueError(_NO_VALUE)
        bt = jnp.where(state.count == 0, 0.0, beta)
        barf = bt * state.barf + (1 - bt) * jnp.asarray(value, dtype=state.barf.dtype)
        exp_avg = tree_map(lambda ea, g: bt * ea + (1 - bt) * g, state.exp_avg, updates)
        gamma = bt * state.gamma + (1 - bt) * tree_vdot(updates, params)
        exp_avg_norm = tree_norm(exp_avg, squared=True)
        iprod = tree_vdot(exp_avg, params)
        alpha = learning_rate(state.count) if callable(learning_rate) else learning_rate
        decay = 1 + alpha * weight_decay
        if adapt_lower_bound:
            cap = decay * (barf - gamma) + iprod
            this_lb = lax.cond(cap < decay * state.lb,
                               lambda: jnp.maximum(cap / (2 * decay), lower_bound),
                               lambda: state.lb)
        else:
            this_lb = state.lb
        t1 = jnp.maximum(decay * (barf - this_lb - gamma) + iprod, 0.0) / exp_avg_norm
        t1 = jnp.where(exp_avg_norm <= jnp.finfo(float).eps, 0.0, t1)
        tau = jnp.minimum(alpha, t1)
        out = tree_map(lambda ea, p: -(alpha * weight_decay) / decay * p - tau * ea, exp_avg,
                       params)
        if adapt_lower_bound:
            new_lb = jnp.maximum(barf + iprod - gamma - 1 / 2 * tau * exp_avg_norm, lower_bound)
        else:
            new_lb = state.lb
        return out, MomoState(exp_avg, barf, gamma, new_lb, safe_increment(state.count))

    return GradientTransformationExtraArgs(init, update)


class MomoAdamState(NamedTuple):
    """The state of :func:`momo_adam`."""
    exp_avg: Any
    exp_avg_sq: Any
    barf: Any
    gamma: Any
    lb: Any
    count: Any


def momo_adam(learning_rate=1e-2, b1=0.9, b2=0.999, eps=1e-8, lower_bound=0.0,
              weight_decay=0.0, adapt_lower_bound: bool = False
              ) -> GradientTransformationExtraArgs:
    """MoMo-Adam: :func:`momo` with Adam's preconditioning (the step along
    ``m / (sqrt(v_hat) + eps)``, measured in that metric). Pass ``value=loss`` to
    ``update``."""
    def init(params):
        dtype = tree_dtype(params, "lowest")
        return MomoAdamState(tree_zeros_like(params), tree_zeros_like(params),
                             jnp.zeros([], dtype=dtype), jnp.zeros([], dtype=dtype),
                             jnp.array(lower_bound, dtype=dtype), jnp.zeros([], jnp.int32))

    def update(updates, state, params=None, *, value, **extra_args):
        del extra_args
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        if value is None:
            raise ValueError(_NO_VALUE)
        count = safe_increment(state.count)
        barf = b1 * state.barf + (1 - b1) * jnp.asarray(value, dtype=state.barf.dtype)
        exp_avg = tree_map(lambda ea, g: b1 * ea + (1 - b1) * g, state.exp_avg, updates)
        exp_avg_sq = tree_map(lambda eas, g: b2 * eas + (1 - b2) * g * g, state.exp_avg_sq,
                              updates)
        bc2 = jnp.asarray(1 - b2 ** count, dtype=barf.dtype)
        precond = tree_map(lambda eas: eps + jnp.sqrt(eas / bc2), exp_avg_sq)
        exp_avg_weighted = tree_map(lambda ea, pr: ea / pr, exp_avg, precond)
        exp_avg_norm = tree_vdot(exp_avg, exp_avg_weighted)
        gamma = b1 * state.gamma + (1 - b1) * tree_vdot(updates, params)
        iprod = tree_vdot(exp_avg, params)
        alpha = learning_rate(state.count) if callable(learning_rate) else learning_rate
        bc1 = jnp.asarray(1 - b1 ** count, dtype=barf.dtype)
        decay = 1 + alpha * weight_decay
        if adapt_lower_bound:
            cap = decay * (barf - gamma) + iprod
            this_lb = jnp.where(cap < decay * bc1 * state.lb,
                                jnp.maximum(cap / (2 * bc1 * decay), lower_bound), state.lb)
        else:
            this_lb = state.lb
        t1 = jnp.maximum(decay * (barf - bc1 * this_lb - gamma) + iprod, 0.0) / exp_avg_norm
        t1 = jnp.where(exp_avg_norm <= jnp.finfo(float).eps, 0.0, t1)
        tau = jnp.minimum(alpha / bc1, t1)
        out = tree_map(lambda ea, pr, p: -(alpha * weight_decay) / decay * p - tau * ea / pr,
                       exp_avg, precond, params)
        if adapt_lower_bound:
            new_lb = jnp.maximum((barf + iprod - gamma - 1 / 2 * tau * exp_avg_norm) / bc1,
                                 lower_bound)
        else:
            new_lb = state.lb
        return out, MomoAdamState(exp_avg, exp_avg_sq, barf, gamma, new_lb, count)

    return GradientTransformationExtraArgs(init, update)
