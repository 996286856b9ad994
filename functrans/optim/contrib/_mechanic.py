"""Mechanic (Cutkosky et al., 2023): learn a global scale of any base optimizer's
updates by online betting."""
from __future__ import annotations

from typing import Any, NamedTuple

from functrans import lax
from functrans import numpy as jnp
from functrans.optim._base import NO_PARAMS_MSG, GradientTransformation, \
    GradientTransformationExtraArgs, with_extra_args_support
from functrans.optim._numerics import safe_increment
from functrans.optim._tree_casting import tree_dtype
from functrans.optim._tree_math import tree_norm, tree_vdot
from functrans.tree_util import tree_map

__all__ = ["MechanicState", "mechanize"]


class MechanicState(NamedTuple):
    """The state of :func:`mechanize`: the base optimizer's state, the step count, the
    betting variables (one per beta) and the initial parameters."""
    base_optimizer_state: Any
    count: Any
    r: Any
    m: Any
    v: Any
    s: Any
    x0: Any


def mechanize(base_optimizer: GradientTransformation, weight_decay=0.01, eps=1e-8,
              s_init=1e-6, num_betas: int = 6) -> GradientTransformationExtraArgs:
    """Wrap ``base_optimizer`` (whose learning rate should be about 1) so its updates
    ``u_t`` are applied as ``p_t = x0 + s * sum u``, with the scale ``s`` tuned online by
    ``num_betas`` coin-betting learners with decays ``1 - 0.1^i``.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import sgd
        >>> opt = mechanize(sgd(1.0))
        >>> p = jnp.ones(2)
        >>> updates, state = opt.update(jnp.ones(2), opt.init(p), p)
        >>> state.s.shape
        (6,)
    """
    base_optimizer = with_extra_args_support(base_optimizer)

    def init(params):
        dtype = tree_dtype(params, "lowest")
        zeros = jnp.zeros([num_betas], dtype=dtype)
        return MechanicState(base_optimizer.init(params), jnp.zeros([], jnp.int32), zeros,
                             zeros, zeros, jnp.ones([num_betas], dtype=dtype) * s_init, params)

    def update(updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        new_neg_updates, base_state = base_optimizer.update(updates, state.base_optimizer_state,
                                                            params, **extra_args)
        x0 = lax.cond(state.count == 0, lambda: params, lambda: state.x0)
        s_sum = jnp.sum(state.s)
        grad_norm = tree_norm(updates)
        param_norm = tree_norm(params)
        updates = tree_map(
            lambda g, p: g + weight_decay * s_sum * grad_norm / (param_norm + eps) * p,
            updates, params)
        delta_prev = tree_map(lambda xt, x0_: (x0_ - xt) / (s_sum + eps), params, x0)
        delta = tree_map(lambda d, u: d - u, delta_prev, new_neg_updates)
        h = tree_vdot(updates, delta_prev)
        clipped_h = lax.clamp(-state.m, jnp.ones_like(state.m) * h, state.m)
        betas = jnp.array([1.0 - 0.1 ** i for i in range(1, num_betas + 1)], dtype=state.s.dtype)
        m = jnp.maximum(betas * state.m, jnp.abs(h) + eps)
        v = betas ** 2 * state.v + h ** 2
        r = betas * state.r + clipped_h * state.s
        wealth = s_init / jnp.size(betas) * m + jnp.maximum(0.0, r)
        s = wealth / (jnp.sqrt(v) + eps)
        new_params = tree_map(lambda x0_, d: x0_ - jnp.sum(s) * d, x0, delta)
        out = tree_map(lambda new, old: new - old, new_params, params)
        return out, MechanicState(base_state, safe_increment(state.count), r, m, v, s, x0)

    return GradientTransformationExtraArgs(init, update)
