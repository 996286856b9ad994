"""Clipping updates: elementwise, by the global norm, per leaf (block RMS), per unit
relative to the parameters (adaptive gradient clipping), and per example.
"""
from __future__ import annotations

from functrans import _api
from functrans import numpy as jnp
from functrans.optim._base import NO_PARAMS_MSG, EmptyState, GradientTransformation, \
    init_empty_state
from functrans.optim._numerics import abs_sq
from functrans.optim._tree_math import tree_clip, tree_norm
from functrans.tree_util import tree_leaves, tree_map, tree_structure, tree_transpose

__all__ = ["clip", "clip_by_global_norm", "clip_by_block_rms", "adaptive_grad_clip",
           "unitwise_norm", "unitwise_clip", "per_example_global_norm_clip",
           "per_example_layer_norm_clip", "ClipState", "ClipByGlobalNormState",
           "AdaptiveGradClipState"]

# optax names the (empty) state of each stateless clipping
ClipState = EmptyState
ClipByGlobalNormState = EmptyState
AdaptiveGradClipState = EmptyState


def clip(max_delta) -> GradientTransformation:
    """Clip each update element to ``[-max_delta, max_delta]``.

        >>> import functrans.numpy as jnp
        >>> clip(1.0).update(jnp.array([-3.0, 0.5]), EmptyState())[0]
        Array([-1. ,  0.5], dtype=float32)
    """
    def update(updates, state, params=None):
        del params
        return tree_clip(updates, -max_delta, max_delta), state
    return GradientTransformation(init_empty_state, update)


def clip_by_global_norm(max_norm) -> GradientTransformation:
    """Rescale all updates together so their global L2 norm is at most ``max_norm``:
    ``g * max_norm / norm`` where ``norm > max_norm``.

        >>> import functrans.numpy as jnp
        >>> clip_by_global_norm(1.0).update(jnp.array([3.0, 4.0]), EmptyState())[0]
        Array([0.6, 0.8], dtype=float32)
    """
    def update(updates, state, params=None):
        del params
        norm = tree_norm(updates)
        within = jnp.squeeze(norm < max_norm)
        if within.ndim != 0:
            raise ValueError(f"clip_by_global_norm: the norm has shape {within.shape}, "
                             "expected a scalar")

        def clipped(t):
            # both sides are computed; the division is only taken where norm >= max_norm
            return jnp.where(within, t, t / norm.astype(jnp.asarray(t).dtype) * max_norm)
        return tree_map(clipped, updates), state
    return GradientTransformation(init_empty_state, update)


def clip_by_block_rms(threshold) -> GradientTransformation:
    """Clip each leaf so its root mean square is at most ``threshold``:
    ``g / max(1, rms(g) / threshold)``.

        >>> import functrans.numpy as jnp
        >>> clip_by_block_rms(1.0).update(jnp.array([3.0, -3.0]), EmptyState())[0]
        Array([ 1., -1.], dtype=float32)
    """
    def update(updates, state, params=None):
        del params

        def clipped(u):
            return u / jnp.maximum(1.0, jnp.sqrt(jnp.mean(abs_sq(u))) / threshold)
        return tree_map(clipped, updates), state
    return GradientTransformation(init_empty_state, update)


def unitwise_norm(x, axis=None):
    """The L2 norm of each output unit of a parameter, broadcast to its shape: over all
    entries of vectors and scalars, over axis 0 of matrices and 3-D arrays (dense
    layers), over all but the last axis of 4-D and 5-D arrays (convolutions), or over
    ``axis`` when given.

        >>> import functrans.numpy as jnp
        >>> unitwise_norm(jnp.array([[3.0, 0.0], [4.0, 1.0]]))
        Array([[5., 1.],
               [5., 1.]], dtype=float32)
    """
    x = jnp.asarray(x)
    if axis is not None:
        squares = jnp.sum(abs_sq(x), axis=axis, keepdims=True)
    elif jnp.squeeze(x).ndim <= 1:
        squares = jnp.sum(abs_sq(x), keepdims=True)
    elif x.ndim in (2, 3):
        squares = jnp.sum(abs_sq(x), axis=0, keepdims=True)
    elif x.ndim == 4:
        squares = jnp.sum(abs_sq(x), axis=(0, 1, 2), keepdims=True)
    elif x.ndim == 5:
        squares = jnp.sum(abs_sq(x), axis=(0, 1, 2, 3), keepdims=True)
    else:
        raise ValueError(f"Expected parameter with shape in {(1, 2, 3, 4, 5)}, got {x.shape}. "
                         "Use axis parameter to specify reduction axes for other shapes.")
    return jnp.broadcast_to(jnp.sqrt(squares), x.shape)


def unitwise_clip(g_norm, max_norm, grad, div_eps=1e-06):
    """``grad`` rescaled to norm ``max_norm`` where its unit norm ``g_norm`` exceeds it.

        >>> import functrans.numpy as jnp
        >>> unitwise_clip(jnp.array([2.0, 0.5]), jnp.array([1.0, 1.0]), jnp.array([2.0, 0.5]))
        Array([1. , 0.5], dtype=float32)
    """
    g_norm, max_norm, grad = jnp.asarray(g_norm), jnp.asarray(max_norm), jnp.asarray(grad)
    for other in (max_norm, grad):
        if g_norm.shape != other.shape:
            raise ValueError(f"Shape mismatch: got {g_norm.shape} and {other.shape}.")
    clipped = grad * (max_norm / jnp.maximum(g_norm, div_eps))
    return jnp.where(g_norm < max_norm, grad, clipped)


def adaptive_grad_clip(clipping, eps=0.001, axis=None) -> GradientTransformation:
    """Adaptive gradient clipping (Brock et al., 2021): clip each unit's gradient norm to
    ``clipping * max(|unit of param|, eps)`` (units as in :func:`unitwise_norm`).

        >>> import functrans.numpy as jnp
        >>> opt = adaptive_grad_clip(0.1)
        >>> opt.update(jnp.array([3.0, 4.0]), EmptyState(), jnp.array([0.0, 10.0]))[0]
        Array([0.6, 0.8], dtype=float32)
    """
    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        g_norm = tree_map(lambda x: unitwise_norm(x, axis=axis), updates)
        p_norm = tree_map(lambda x: unitwise_norm(x, axis=axis), params)
        max_norm = tree_map(lambda x: clipping * jnp.maximum(x, eps), p_norm)
        return tree_map(unitwise_clip, g_norm, max_norm, updates), state
    return GradientTransformation(init_empty_state, update)


def _have_batch_dim(grads) -> bool:
    leaves = [jnp.asarray(g) for g in tree_leaves(grads)]
    return all(g.ndim >= 1 and g.shape[0] == leaves[0].shape[0] for g in leaves)


def per_example_global_norm_clip(grads, l2_norm_clip):
    """Clip each example's gradient (axis 0 of every leaf) to global norm
    ``l2_norm_clip`` and sum over examples (DP-SGD). Returns the summed tree and the
    number of clipped examples.

        >>> import functrans.numpy as jnp
        >>> per_example_global_norm_clip([jnp.array([[3.0, 4.0], [0.3, 0.4]])], 1.0)
        ([Array([0.90000004, 1.2       ], dtype=float32)], Array(1, dtype=int32))
    """
    if not _have_batch_dim(grads):
        raise ValueError("Unlike other transforms, `per_example_global_norm_clip` expects "
                         "`grads` to have a batch dimension in the 0th axis.")
    norms = _api.vmap(tree_norm)(grads)
    multipliers = jnp.nan_to_num(jnp.minimum(l2_norm_clip / norms, 1.0), nan=1.0)
    num_clipped = jnp.sum(multipliers < 1.0)
    clipped_sum = tree_map(lambda g: jnp.tensordot(multipliers, g, axes=1), grads)
    return clipped_sum, num_clipped


def per_example_layer_norm_clip(grads, global_l2_norm_clip, uniform: bool = True):
    """Clip each example's gradient layer by layer and sum over examples: each leaf gets
    the clip norm ``global_l2_norm_clip / sqrt(number of leaves)`` (``uniform``) or a share
    proportional to the square root of its size. Returns a tree of
    ``(clipped sum, number clipped)`` pairs.

        >>> import functrans.numpy as jnp
        >>> sums, counts = per_example_layer_norm_clip({"a": jnp.array([[3.0, 4.0]])}, 1.0)
        >>> sums["a"], counts["a"]
        (Array([0.6, 0.8], dtype=float32), Array(1, dtype=int32))
    """
    if not _have_batch_dim(grads):
        shapes = tree_map(jnp.shape, grads)
        raise ValueError("Unlike other transforms, `per_example_layer_norm_clip` expects "
                         f"`grads` to have a batch dimension in the 0th axis; got shapes: "
                         f"{shapes}.")
    if uniform:
        num_layers = len(tree_leaves(grads))
        clip_norms = tree_map(lambda _: global_l2_norm_clip * (1.0 / num_layers) ** 0.5, grads)
    else:
        total = sum(jnp.asarray(g)[0].size for g in tree_leaves(grads))
        clip_norms = tree_map(
            lambda g: global_l2_norm_clip * (jnp.asarray(g)[0].size / total) ** 0.5, grads)
    result = tree_map(per_example_global_norm_clip, grads, clip_norms)
    return tree_transpose(tree_structure(grads), tree_structure((0, 0)), result)
