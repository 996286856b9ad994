"""Learning-rate-free Adam from an online estimate of the distance to the solution:
D-Adaptation (Defazio & Mishchenko, 2023) and Prodigy (Mishchenko & Defazio, 2023)."""
from __future__ import annotations

from typing import Any, NamedTuple

from functrans import numpy as jnp
from functrans.optim._base import NO_PARAMS_MSG, GradientTransformationExtraArgs
from functrans.optim._numerics import safe_increment
from functrans.optim._tree_casting import tree_dtype
from functrans.optim._tree_math import tree_sum, tree_vdot, tree_zeros_like
from functrans.tree_util import tree_map

__all__ = ["DAdaptAdamWState", "dadapt_adamw", "ProdigyState", "prodigy"]


class DAdaptAdamWState(NamedTuple):
    """The state of :func:`dadapt_adamw`."""
    exp_avg: Any
    exp_avg_sq: Any
    grad_sum: Any
    estim_lr: Any
    numerator_weighted: Any
    count: Any


def dadapt_adamw(learning_rate=1.0, betas=(0.9, 0.999), eps=1e-8, estim_lr0=1e-6,
                 weight_decay=0.0) -> GradientTransformationExtraArgs:
    """AdamW with D-Adaptation: the step size ``d`` (starting at ``estim_lr0``) grows to a
    lower bound on the distance to the solution, estimated from the weighted sum of
    ``<g, s>`` over the L1 norm of ``s`` (``s`` an average of ``d``-scaled gradients);
    ``learning_rate`` multiplies it (a number or a schedule).

        >>> import functrans.numpy as jnp
        >>> opt = dadapt_adamw()
        >>> p = jnp.ones(2)
        >>> updates, state = opt.update(jnp.ones(2), opt.init(p), p)
        >>> round(float(state.estim_lr), 9)     # grows once the distance estimate does
        1e-06
    """
    beta1, beta2 = betas
    sb2 = beta2 ** 0.5

    def init(params):
        dtype = tree_dtype(params, "lowest")
        return DAdaptAdamWState(tree_zeros_like(params), tree_zeros_like(params),
                                tree_zeros_like(params), jnp.asarray(estim_lr0, dtype=dtype),
                                jnp.zeros([], dtype=dtype), jnp.zeros([], jnp.int32))

    def update(updates, state, params=None, **extra_args):
        del extra_args
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        schedule = learning_rate(state.count) if callable(learning_rate) else learning_rate
        count = safe_increment(state.count)
        bias_correction = (1 - beta2 ** count) ** 0.5 / (1 - beta1 ** count)
        dlr = (state.estim_lr * schedule * bias_correction).astype(
            state.numerator_weighted.dtype)
        s_weighted = tree_map(lambda sk, eas: sk / (jnp.sqrt(eas) + eps), state.grad_sum,
                              state.exp_avg_sq)
        numerator_acum = tree_vdot(updates, s_weighted)
        exp_avg = tree_map(lambda ea, g: beta1 * ea + (1 - beta1) * dlr * g, state.exp_avg,
                           updates)
        exp_avg_sq = tree_map(lambda eas, g: beta2 * eas + (1 - beta2) * g * g,
                              state.exp_avg_sq, updates)
        grad_sum = tree_map(lambda sk, g: sb2 * sk + (1 - sb2) * dlr * g, state.grad_sum,
                            updates)
        grad_sum_l1 = tree_sum(tree_map(jnp.abs, grad_sum))
        numerator_weighted = sb2 * state.numerator_weighted + (1 - sb2) * dlr * numerator_acum
        d_estimate = numerator_weighted / ((1 - sb2) * grad_sum_l1)
        estim_lr = jnp.maximum(state.estim_lr, d_estimate)
        out = tree_map(lambda ea, eas, p: -weight_decay * dlr * p - ea / (jnp.sqrt(eas) + eps),
                       exp_avg, exp_avg_sq, params)
        return out, DAdaptAdamWState(exp_avg, exp_avg_sq, grad_sum, estim_lr,
                                     numerator_weighted, count)

    return GradientTransformationExtraArgs(init, update)


class ProdigyState(NamedTuple):
    """The state of :func:`prodigy`."""
    exp_avg: Any
    exp_avg_sq: Any
    grad_sum: Any
    params0: Any
    estim_lr: Any
    numerator_weighted: Any
    count: Any


def prodigy(learning_rate=1.0, betas=(0.9, 0.999), beta3=None, eps=1e-8, estim_lr0=1e-6,
            estim_lr_coef=1.0, weight_decay=0.0, safeguard_warmup: bool = False
            ) -> GradientTransformationExtraArgs:
    """Prodigy: Adam whose step size ``d`` (starting at ``estim_lr0``) is raised to
    ``estim_lr_coef * sum_k d_k <g_k, p_0 - p_k> / |sum_k d_k g_k|_1`` (averaged with
    ``beta3``, default ``sqrt(beta2)``), an estimate of the distance to the solution;
    ``learning_rate`` multiplies it.

        >>> import functrans.numpy as jnp
        >>> opt = prodigy()
        >>> p = jnp.ones(2)
        >>> updates, state = opt.update(jnp.ones(2), opt.init(p), p)
        >>> round(float(state.estim_lr), 9)
        1e-06
    """
    beta1, beta2 = betas
    beta3 = beta2 ** 0.5 if beta3 is None else beta3

    def init(params):
        dtype = tree_dtype(params, "lowest")
        zeros = tree_zeros_like(params)
        return ProdigyState(zeros, zeros, zeros, params, jnp.asarray(estim_lr0, dtype=dtype),
                            jnp.zeros((), dtype=dtype), jnp.zeros((), jnp.int32))

    def update(updates, state, params=None, **extra_args):
        del extra_args
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        count = safe_increment(state.count)
        schedule = learning_rate(state.count) if callable(learning_rate) else learning_rate
        estim_lr = state.estim_lr
        bias_correction = (1 - beta2 ** count) ** 0.5 / (1 - beta1 ** count)
        dlr = jnp.asarray(estim_lr * schedule * bias_correction, dtype=estim_lr.dtype)
        dg = tree_map(lambda g: estim_lr * g, updates)
        param_diff = tree_map(lambda p0, p: p0 - p, state.params0, params)
        numerator_acum = tree_vdot(updates, param_diff)
        exp_avg = tree_map(lambda ea, d: beta1 * ea + (1 - beta1) * d, state.exp_avg, dg)
        exp_avg_sq = tree_map(lambda eas, d: beta2 * eas + (1 - beta2) * d * d,
                              state.exp_avg_sq, dg)
        weight = estim_lr if safeguard_warmup else dlr
        grad_sum = tree_map(lambda sk, d: beta3 * sk + weight * d / estim_lr0, state.grad_sum, dg)
        numerator_weighted = (beta3 * state.numerator_weighted
                              + estim_lr / estim_lr0 * dlr * numerator_acum)
        denominator = tree_sum(tree_map(jnp.abs, grad_sum))
        estim_lr = jnp.maximum(state.estim_lr, estim_lr_coef * numerator_weighted / denominator)
        out = tree_map(lambda ea, eas, p: -weight_decay * dlr * p
                       - dlr * ea / (jnp.sqrt(eas) + estim_lr * eps),
                       exp_avg, exp_avg_sq, params)
        return out, ProdigyState(exp_avg, exp_avg_sq, grad_sum, state.params0, estim_lr,
                                 numerator_weighted, count)

    return GradientTransformationExtraArgs(init, update)
