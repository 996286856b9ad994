"""L-BFGS (Nocedal, 1980; Liu & Nocedal, 1989): precondition the gradient by an inverse
Hessian estimate built from the last ``memory_size`` parameter and gradient differences
(the two-loop recursion), then take a step found by a line search.

    >>> import functrans, functrans.numpy as jnp
    >>> from functrans import optim
    >>> f = lambda x: jnp.sum((x - jnp.array([1.0, -2.0])) ** 2)
    >>> opt = lbfgs()
    >>> x = jnp.zeros(2)
    >>> state = opt.init(x)
    >>> value_and_grad = optim.value_and_grad_from_state(f)
    >>> for _ in range(3):
    ...     value, grad = value_and_grad(x, state=state)
    ...     updates, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=f)
    ...     x = optim.apply_updates(x, updates)
    >>> x
    Array([ 1., -2.], dtype=float32)
"""
from __future__ import annotations

from typing import Any, NamedTuple

from functrans import lax
from functrans import numpy as jnp
from functrans.optim._base import NO_PARAMS_MSG, GradientTransformation, \
    GradientTransformationExtraArgs, identity
from functrans.optim._combining import chain
from functrans.optim._linesearch import scale_by_zoom_linesearch
from functrans.optim._numerics import safe_increment
from functrans.optim._scaling import scale, scale_by_learning_rate
from functrans.optim._tree_casting import tree_cast_like
from functrans.optim._tree_math import (tree_add_scale, tree_norm, tree_real, tree_scale,
                                        tree_sub, tree_vdot, tree_zeros_like)
from functrans.tree_util import tree_map

__all__ = ["ScaleByLBFGSState", "scale_by_lbfgs", "lbfgs"]


class ScaleByLBFGSState(NamedTuple):
    """The state of :func:`scale_by_lbfgs`: the step count, the last parameters and
    updates, and the ring buffers of parameter differences, update differences and their
    inverse inner products."""
    count: Any
    params: Any
    updates: Any
    diff_params_memory: Any
    diff_updates_memory: Any
    weights_memory: Any


def _precondition_by_lbfgs(updates, diff_params_memory, diff_updates_memory, weights_memory,
                           identity_scale, memory_idx):
    """The two-loop recursion: ``H u`` for the inverse Hessian estimate ``H`` of the pairs
    in memory, visited from the newest (before ``memory_idx``) to the oldest and back."""
    rhos = weights_memory
    memory_size = weights_memory.shape[0]
    order = (memory_idx + jnp.arange(memory_size)) % memory_size

    def pair(idx):
        return tree_map(lambda x: x[idx], (diff_params_memory, diff_updates_memory))

    def right_product(vec, idx):
        dw, du = pair(idx)
        alpha = rhos[idx] * tree_real(tree_vdot(dw, vec))
        return tree_cast_like(tree_add_scale(vec, -alpha, du), vec), alpha

    vec, alphas = lax.scan(right_product, updates, order, reverse=True)
    vec = tree_scale(identity_scale, vec)

    def left_product(vec, idx_alpha):
        idx, alpha = idx_alpha
        dw, du = pair(idx)
        beta = rhos[idx] * tree_real(tree_vdot(du, vec))
        return tree_cast_like(tree_add_scale(vec, alpha - beta, dw), vec), beta

    vec, _ = lax.scan(left_product, vec, (order, alphas))
    return vec


def scale_by_lbfgs(memory_size: int = 10, scale_init_precond: bool = True
                   ) -> GradientTransformation:
    """L-BFGS's direction: the update preconditioned by the inverse Hessian estimate from
    the last ``memory_size`` pairs ``(p_k - p_{k-1}, g_k - g_{k-1})``. With
    ``scale_init_precond`` the initial estimate is ``<dg, dp> / |dg|^2`` times the identity
    (``min(1, 1/|g|)`` at the first step). (Chain with a negative scale and a line search
    to descend: see :func:`lbfgs`.)

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_lbfgs()
        >>> opt.update(jnp.array([3.0, 4.0]), opt.init(jnp.zeros(2)), jnp.zeros(2))[0]
        Array([0.6, 0.8], dtype=float32)
    """
    if memory_size < 1:
        raise ValueError("memory_size must be >= 1")

    def init(params):
        stacked = tree_map(lambda leaf: jnp.zeros((memory_size,) + jnp.shape(leaf),
                                                  dtype=jnp.asarray(leaf).dtype), params)
        return ScaleByLBFGSState(jnp.asarray(0, dtype=jnp.int32), tree_zeros_like(params),
                                 tree_zeros_like(params), stacked, stacked,
                                 jnp.zeros(memory_size))

    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        memory_idx = state.count % memory_size
        prev_memory_idx = (state.count - 1) % memory_size
        diff_params = tree_sub(params, state.params)
        diff_updates = tree_sub(updates, state.updates)
        curvature = tree_real(tree_vdot(diff_updates, diff_params))
        weight = jnp.where(curvature == 0.0, 0.0, 1.0 / curvature)
        # at the first step there is no previous pair: store zeros
        diff_params, diff_updates, weight = tree_map(
            lambda x: jnp.where(state.count > 0, x, jnp.zeros_like(x)),
            (diff_params, diff_updates, weight))
        diff_params_memory, diff_updates_memory, weights_memory = tree_map(
            lambda memory, new: memory.at[prev_memory_idx].set(new),
            (state.diff_params_memory, state.diff_updates_memory, state.weights_memory),
            (diff_params, diff_updates, weight))
        if scale_init_precond:
            numerator = tree_real(tree_vdot(diff_updates, diff_params))
            denominator = tree_norm(diff_updates, squared=True)
            identity_scale = jnp.where(denominator > 0.0, numerator / denominator, 1.0)
            capped_inverse_norm = jnp.minimum(1.0, 1.0 / tree_norm(lax.stop_gradient(updates)))
            identity_scale = jnp.where(state.count > 0, identity_scale, capped_inverse_norm)
        else:
            identity_scale = 1.0
        preconditioned = _precondition_by_lbfgs(updates, diff_params_memory,
                                                diff_updates_memory, weights_memory,
                                                identity_scale, memory_idx)
        return preconditioned, ScaleByLBFGSState(safe_increment(state.count), params, updates,
                                                 diff_params_memory, diff_updates_memory,
                                                 weights_memory)

    return GradientTransformation(init, update)


def lbfgs(learning_rate=None, memory_size: int = 10, scale_init_precond: bool = True,
          linesearch=scale_by_zoom_linesearch(max_linesearch_steps=20,
                                              initial_guess_strategy="one")
          ) -> GradientTransformationExtraArgs:
    """L-BFGS: :func:`scale_by_lbfgs`'s direction, negated (times ``learning_rate`` if
    given), then scaled by ``linesearch`` (by default a zoom line search for the strong
    Wolfe conditions starting from step 1; None for none). ``update`` takes the line
    search's extra arguments: ``value`` and ``grad`` at ``params`` and ``value_fn``; use
    :func:`value_and_grad_from_state` to reuse the ones the search computed.

        >>> import functrans.numpy as jnp
        >>> opt = lbfgs()
        >>> type(opt.init(jnp.zeros(2))[2]).__name__
        'ScaleByZoomLinesearchState'
    """
    if learning_rate is None:
        base_scaling = scale(-1.0)
    else:
        base_scaling = scale_by_learning_rate(learning_rate)
    if linesearch is None:
        linesearch = identity()
    return chain(scale_by_lbfgs(memory_size, scale_init_precond), base_scaling, linesearch)
