"""Sophia (Liu et al., 2023): clipped second-order steps ``m / max(gamma h, eps)`` with a
diagonal Hessian estimate ``h`` refreshed every few steps."""
from __future__ import annotations

from typing import Any, NamedTuple

from functrans import _api
from functrans import debug, lax, random
from functrans import numpy as jnp
from functrans.optim._adding import add_decayed_weights
from functrans.optim._base import GradientTransformationExtraArgs, canonicalize_dtype, \
    with_extra_args_support
from functrans.optim._combining import chain
from functrans.optim._numerics import safe_increment
from functrans.optim._scaling import scale_by_learning_rate
from functrans.optim._tree_casting import tree_cast, tree_dtype
from functrans.optim._tree_math import (tree_bias_correction, tree_size, tree_update_moment,
                                        tree_zeros_like)
from functrans.optim._tree_random import tree_random_like
from functrans.tree_util import tree_leaves, tree_map

__all__ = ["HutchinsonState", "hutchinson_estimator_diag_hessian", "SophiaState",
           "scale_by_sophia", "sophia"]


class HutchinsonState(NamedTuple):
    """The state of :func:`hutchinson_estimator_diag_hessian`: the PRNG key."""
    key: Any


def hutchinson_estimator_diag_hessian(random_seed=None) -> GradientTransformationExtraArgs:
    """Hutchinson's estimate of the Hessian diagonal of ``obj_fn`` (passed to ``update``)
    at ``params``: ``z * (H z)`` for a random sign vector ``z``. ``random_seed`` is a PRNG
    key (``PRNGKey(0)`` by default).

        >>> import functrans.numpy as jnp
        >>> est = hutchinson_estimator_diag_hessian()
        >>> p = jnp.ones(3)
        >>> est.update(None, est.init(p), p, obj_fn=lambda x: jnp.sum(2.0 * x ** 2))[0]
        Array([4., 4., 4.], dtype=float32)
    """
    def init(params):
        del params
        return HutchinsonState(random_seed if random_seed is not None else random.PRNGKey(0))

    def update(updates, state, params=None, obj_fn=None, **extra_args):
        del updates, extra_args
        if params is None:
            raise ValueError("params must be provided to hutchinson update function.")
        if obj_fn is None:
            raise ValueError("obj_fn must be provided to hutchinson update function.")
        key, subkey = random.split(state.key)
        signs = tree_random_like(subkey, params, random.rademacher, dtype=jnp.float32)
        signs = tree_cast(signs, tree_dtype(params, "lowest"))
        hvp = _api.jvp(_api.grad(obj_fn), (params,), (signs,))[1]
        return tree_map(lambda h, r: h * r, hvp, signs), HutchinsonState(key)

    return GradientTransformationExtraArgs(init, update)


class SophiaState(NamedTuple):
    """The state of :func:`scale_by_sophia`."""
    count: Any
    mu: Any
    nu: Any
    hessian_fn_state: Any


def scale_by_sophia(b1=0.965, b2=0.99, eps=1e-8, gamma=0.01, clip_threshold=1.0,
                    update_interval=10, hessian_diagonal_fn=hutchinson_estimator_diag_hessian(),
                    mu_dtype=None, verbose: bool = False, print_win_rate_every_n_steps=0
                    ) -> GradientTransformationExtraArgs:
    """Sophia's direction: ``clip(m_hat / max(gamma h, eps), clip_threshold)`` with ``m`` an
    EMA of the gradients and ``h`` an EMA (``b2``) of ``hessian_diagonal_fn``'s estimates,
    taken every ``update_interval`` steps (from step 0) with ``update``'s extra arguments
    (``obj_fn`` for the default estimator). ``verbose`` prints the fraction of unclipped
    coordinates every ``print_win_rate_every_n_steps`` steps.
    """
    mu_dtype = canonicalize_dtype(mu_dtype)
    hessian_diagonal_fn = with_extra_args_support(hessian_diagonal_fn)

    def init(params):
        return SophiaState(jnp.zeros([], jnp.int32), tree_zeros_like(params, dtype=mu_dtype),
                           tree_zeros_like(params), hessian_diagonal_fn.init(params))

    def update(updates, state, params=None, **hess_fn_kwargs):
        if params is None:
            raise ValueError("params must be provided to sophia's update function.")
        count = safe_increment(state.count)
        grads = updates
        mu = tree_update_moment(updates, state.mu, b1, 1)
        mu_hat = tree_bias_correction(mu, b1, count)
        updates = tree_map(lambda m, h: m / jnp.maximum(gamma * h, eps), mu_hat, state.nu)
        if clip_threshold is not None:
            if verbose:
                unclipped = sum(jnp.sum(jnp.abs(u) < clip_threshold) for u in tree_leaves(updates))
                win_rate = unclipped / tree_size(updates)
                lax.cond(count % print_win_rate_every_n_steps == 0,
                         lambda: debug.print("Sophia optimizer win rate: {}", win_rate),
                         lambda: None)
            updates = tree_map(lambda u: jnp.clip(u, -clip_threshold, clip_threshold), updates)

        def refresh(hess_state, nu):
            diag, hess_state = hessian_diagonal_fn.update(grads, hess_state, params=params,
                                                          **hess_fn_kwargs)
            return hess_state, tree_update_moment(diag, nu, b2, 1)

        hess_state, nu = lax.cond(jnp.equal(state.count % update_interval, 0), refresh,
                                  lambda h, n: (h, n), state.hessian_fn_state, state.nu)
        return updates, SophiaState(count, tree_cast(mu, mu_dtype), nu, hess_state)

    return GradientTransformationExtraArgs(init, update)


def sophia(learning_rate, b1=0.965, b2=0.99, eps=1e-8, weight_decay=1e-4,
           weight_decay_mask=None, gamma=0.01, clip_threshold=1.0, update_interval=10,
           hessian_diagonal_fn=hutchinson_estimator_diag_hessian(), mu_dtype=None,
           verbose: bool = False, print_win_rate_every_n_steps=0
           ) -> GradientTransformationExtraArgs:
    """Sophia (Liu et al., 2023): :func:`scale_by_sophia`, decoupled weight decay, the
    learning rate. Pass the objective as ``update(..., obj_fn=loss)`` for the default
    Hessian estimator.

        >>> import functrans.numpy as jnp
        >>> f = lambda x: jnp.sum(x ** 2)
        >>> opt = sophia(0.1)
        >>> p = jnp.ones(2)
        >>> updates, state = opt.update(2 * p, opt.init(p), p, obj_fn=f)
        >>> updates   # clipped at the first step (no curvature estimate yet)
        Array([-0.10001, -0.10001], dtype=float32)
    """
    return chain(scale_by_sophia(b1, b2, eps, gamma, clip_threshold, update_interval,
                                 hessian_diagonal_fn, mu_dtype, verbose,
                                 print_win_rate_every_n_steps),
                 add_decayed_weights(weight_decay, mask=weight_decay_mask),
                 scale_by_learning_rate(learning_rate))
