"""GaLore (Zhao et al., 2024): run the base optimizer on gradients projected onto their
top singular subspace (refreshed every ``update_proj_gap`` steps), which keeps its state
low-rank."""
from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence

from functrans import lax
from functrans import numpy as jnp
from functrans.optim._adaptive_moments import scale_by_adam
from functrans.optim._adding import add_decayed_weights
from functrans.optim._base import GradientTransformation, GradientTransformationExtraArgs
from functrans.optim._combining import chain
from functrans.optim._numerics import safe_increment
from functrans.optim._scaling import scale_by_learning_rate
from functrans.optim.contrib._muon import normalized_axes
from functrans.tree_util import tree_leaves, tree_map, tree_structure, tree_transpose

__all__ = ["GaLoreDimensionNumbers", "GaLoreState", "scale_by_galore", "galore"]


class GaLoreDimensionNumbers(NamedTuple):
    """Which axes of a weight are its input (``reduction_axis``) and output
    (``output_axis``) dimensions: together they must cover all axes."""
    reduction_axis: Sequence[int] | int = 0
    output_axis: Sequence[int] | int = 1


def _is_dim_nums(x) -> bool:
    return isinstance(x, GaLoreDimensionNumbers)


def _is_dim_nums_leaf(x) -> bool:
    return x is None or isinstance(x, GaLoreDimensionNumbers)


def _compute_galore_reshape(x, dim_nums):
    """Functions taking ``x`` to a ``(reduction, output)`` matrix and back."""
    if x.ndim < 2:
        raise ValueError(f"GaLore requires tensors with rank >= 2, got shape {x.shape}")
    reduction_axes, output_axes = normalized_axes(x, dim_nums)
    if set(reduction_axes) & set(output_axes):
        raise ValueError(f"Reduction axes {reduction_axes} and output axes {output_axes} must "
                         f"be disjoint. Got dim_nums={dim_nums} for shape {x.shape}")
    if len(set(reduction_axes) | set(output_axes)) != x.ndim:
        raise ValueError(f"All axes must be specified. Got reduction={reduction_axes}, "
                         f"output={output_axes} for tensor with {x.ndim} dimensions")
    order = reduction_axes + output_axes
    inverse_order = tuple(sorted(range(x.ndim), key=lambda i: order[i]))

    def shape_of(axes):
        return tuple(x.shape[ax] for ax in axes)

    matrix_shape = (math.prod(shape_of(reduction_axes)), math.prod(shape_of(output_axes)))
    transposed_shape = shape_of(reduction_axes) + shape_of(output_axes)
    return (lambda y: y.transpose(order).reshape(matrix_shape),
            lambda y: y.reshape(transposed_shape).transpose(inverse_order))


class GaLoreState(NamedTuple):
    """The state of :func:`scale_by_galore`: the step count, the base optimizer's state on
    the projected gradients, and the projection matrices."""
    count: Any
    base_optimizer_state: Any
    projector: Any


def scale_by_galore(rank: int = 128, update_proj_gap: int = 200, scale=1.0,
                    base_optimizer: GradientTransformation | None = None,
                    weight_dimension_numbers=None) -> GradientTransformation:
    """GaLore's direction: each matrix gradient ``G`` (2-D leaves, or as
    ``weight_dimension_numbers`` says) is projected to rank ``rank`` by its top singular
    vectors (left ``P^T G`` for tall, right ``G Q`` for wide matrices, recomputed every
    ``update_proj_gap`` steps), ``base_optimizer`` (default :func:`scale_by_adam`) runs on
    the projections, and its output is projected back and multiplied by ``scale``. Other
    leaves go through the base optimizer unprojected.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_galore(rank=1)
        >>> state = opt.init({"w": jnp.zeros((4, 3)), "b": jnp.zeros(3)})
        >>> state.projector["w"].shape, state.base_optimizer_state.mu["w"].shape
        ((4, 1), (1, 3))
    """
    if base_optimizer is None:
        base_optimizer = scale_by_adam()
    if not isinstance(rank, int):
        raise TypeError(f"`rank` must be an int, got {type(rank)}")
    if rank <= 0:
        raise ValueError(f"`rank` must be positive, got {rank}")

    def dims_of(params):
        if weight_dimension_numbers is None:
            return tree_map(lambda p: GaLoreDimensionNumbers() if jnp.ndim(p) == 2 else None,
                            params)
        if callable(weight_dimension_numbers):
            return weight_dimension_numbers(params)
        if _is_dim_nums(weight_dimension_numbers):
            return tree_map(lambda p: weight_dimension_numbers if jnp.ndim(p) >= 2 else None,
                            params)
        return weight_dimension_numbers

    def shapes(p, dims):
        """Zero projector and projected gradient shaped for leaf ``p``."""
        if dims is None:
            return jnp.zeros((0, 0), dtype=p.dtype), jnp.zeros_like(p)
        to_matrix, _ = _compute_galore_reshape(p, dims)
        m, n = to_matrix(p).shape
        r = min(rank, m, n)
        if m >= n:
            return jnp.zeros((m, r), dtype=p.dtype), jnp.zeros((r, n), dtype=p.dtype)
        return jnp.zeros((n, r), dtype=p.dtype), jnp.zeros((m, r), dtype=p.dtype)

    def init(params):
        if not tree_leaves(params):
            return GaLoreState(jnp.zeros([], jnp.int32), base_optimizer.init(params), params)
        results = tree_map(shapes, params, dims_of(params), is_leaf=_is_dim_nums_leaf)
        projectors, proxies = tree_transpose(tree_structure(params), tree_structure((0, 0)),
                                             results)
        return GaLoreState(jnp.zeros([], jnp.int32), base_optimizer.init(proxies), projectors)

    def update(updates, state, params=None):
        del params
        refresh = state.count % update_proj_gap == 0
        dims = dims_of(updates)

        def project(grad, projector, dim_nums):
            if dim_nums is None:
                return grad, projector
            to_matrix, _ = _compute_galore_reshape(grad, dim_nums)
            g = to_matrix(grad)
            m, n = g.shape
            r = min(rank, m, n)
            if m >= n:
                def left():
                    u, _, _ = jnp.linalg.svd(g.astype(jnp.float32), full_matrices=False)
                    return u[:, :r].astype(grad.dtype)
                projector = lax.cond(refresh, left, lambda: projector)
                return projector.T @ g, projector

            def right():
                _, _, vh = jnp.linalg.svd(g.astype(jnp.float32), full_matrices=False)
                return vh[:r, :].T.astype(grad.dtype)
            projector = lax.cond(refresh, right, lambda: projector)
            return g @ projector, projector

        def project_back(low_rank, projector, grad, dim_nums):
            if dim_nums is None:
                return low_rank
            to_matrix, from_matrix = _compute_galore_reshape(grad, dim_nums)
            m, n = to_matrix(grad).shape
            full = projector @ low_rank if m >= n else low_rank @ projector.T
            return (scale * from_matrix(full)).astype(grad.dtype)

        projected = tree_map(project, updates, state.projector, dims, is_leaf=_is_dim_nums_leaf)
        low_rank, projectors = tree_transpose(tree_structure(updates), tree_structure((0, 0)),
                                              projected)
        low_rank_updates, base_state = base_optimizer.update(low_rank, state.base_optimizer_state,
                                                             None)
        full = tree_map(project_back, low_rank_updates, projectors, updates, dims,
                        is_leaf=_is_dim_nums_leaf)
        return full, GaLoreState(safe_increment(state.count), base_state, projectors)

    return GradientTransformation(init, update)


def galore(learning_rate, rank: int = 128, update_proj_gap: int = 200, scale=1.0,
           base_optimizer: GradientTransformation | None = None, weight_decay=0.0, mask=None,
           weight_dimension_numbers=None) -> GradientTransformationExtraArgs:
    """GaLore (Zhao et al., 2024): :func:`scale_by_galore` (Adam by default), decoupled
    weight decay, the learning rate."""
    return chain(scale_by_galore(rank, update_proj_gap, scale, base_optimizer,
                                 weight_dimension_numbers),
                 add_decayed_weights(weight_decay, mask), scale_by_learning_rate(learning_rate))
