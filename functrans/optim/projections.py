"""``optim.projections``: Euclidean projections of pytrees onto convex sets (boxes, balls,
spheres, the simplex, hyperplanes, half-spaces), for projected gradient methods, as optax's
``optax.projections``.

    >>> import functrans.numpy as jnp
    >>> from functrans.optim import projections
    >>> projections.projection_simplex(jnp.array([0.5, 1.5, -1.0]))
    Array([0., 1., 0.], dtype=float32)
"""
from __future__ import annotations

from functrans import _custom_derivatives
from functrans import lax, nn
from functrans import numpy as jnp
from functrans.flatten_util import ravel_pytree
from functrans.optim._tree_math import (tree_add_scale, tree_full_like, tree_mul, tree_norm,
                                        tree_scale, tree_vdot)
from functrans.tree_util import tree_map

__all__ = ["projection_non_negative", "projection_box", "projection_hypercube",
           "projection_simplex", "projection_l1_sphere", "projection_l1_ball",
           "projection_l2_sphere", "projection_l2_ball", "projection_linf_ball",
           "projection_vector", "projection_hyperplane", "projection_halfspace"]


def projection_non_negative(tree):
    """Onto the non-negative orthant: ``max(x, 0)`` leafwise.

        >>> import functrans.numpy as jnp
        >>> projection_non_negative(jnp.array([-1.0, 2.0]))
        Array([0., 2.], dtype=float32)
    """
    return tree_map(nn.relu, tree)


def projection_box(tree, lower, upper):
    """Onto the box ``lower <= x <= upper`` (trees like ``tree``, or scalars for a
    single-array ``tree``).

        >>> import functrans.numpy as jnp
        >>> projection_box(jnp.array([-2.0, 0.5, 3.0]), -1.0, 1.0)
        Array([-1. ,  0.5,  1. ], dtype=float32)
    """
    return tree_map(jnp.clip, tree, lower, upper)


def projection_hypercube(tree, scale=1):
    """Onto the hypercube ``0 <= x <= scale``.

        >>> import functrans.numpy as jnp
        >>> projection_hypercube(jnp.array([-2.0, 0.5, 3.0]))
        Array([0. , 0.5, 1. ], dtype=float32)
    """
    return projection_box(tree, lower=0, upper=scale)


@_custom_derivatives.custom_jvp
def _projection_unit_simplex(values):
    """Onto ``{x >= 0, sum(x) = 1}`` (Held et al.; Michelot): shift by the threshold that
    makes the positive part sum to one, found from the sorted values."""
    n_features = values.shape[0]
    u = jnp.sort(values)[::-1]
    cumsum_u = jnp.cumsum(u)
    ind = jnp.arange(n_features) + 1
    support = 1 / ind + (u - cumsum_u / ind) > 0
    idx = jnp.count_nonzero(support)
    return nn.relu(1 / idx + (values - cumsum_u[idx - 1] / idx))


@_projection_unit_simplex.defjvp
def _projection_unit_simplex_jvp(primals, tangents):
    # inside the support the projection is the identity minus the mean over the support
    values, = primals
    values_dot, = tangents
    out = _projection_unit_simplex(values)
    support = out > 0
    card = jnp.count_nonzero(support)
    return out, support * values_dot - jnp.dot(support, values_dot) / card * support


def projection_simplex(tree, scale=1):
    """Onto the simplex ``{x >= 0, sum(x) = scale}``, all leaves taken as one vector.

        >>> import functrans.numpy as jnp
        >>> projection_simplex(jnp.array([1.0, 2.0]), scale=2)
        Array([0.5, 1.5], dtype=float32)
    """
    values, unravel = ravel_pytree(tree)
    return unravel(scale * _projection_unit_simplex(values / scale))


def projection_l1_sphere(tree, scale=1):
    """Onto the L1 sphere ``{sum |x| = scale}``.

        >>> import functrans.numpy as jnp
        >>> projection_l1_sphere(jnp.array([-2.0, 1.0]))
        Array([-1.,  0.], dtype=float32)
    """
    signs = tree_map(jnp.sign, tree)
    return tree_mul(signs, projection_simplex(tree_map(jnp.abs, tree), scale))


def projection_l1_ball(tree, scale=1):
    """Onto the L1 ball ``{sum |x| <= scale}``.

        >>> import functrans.numpy as jnp
        >>> projection_l1_ball(jnp.array([0.2, -0.3]))
        Array([ 0.2, -0.3], dtype=float32)
    """
    return lax.cond(tree_norm(tree, ord=1) <= scale, lambda t: t,
                    lambda t: projection_l1_sphere(t, scale), tree)


def projection_l2_sphere(tree, scale=1):
    """Onto the L2 sphere ``{|x| = scale}``.

        >>> import functrans.numpy as jnp
        >>> projection_l2_sphere(jnp.array([3.0, 4.0]))
        Array([0.6, 0.8], dtype=float32)
    """
    return tree_scale(scale / tree_norm(tree), tree)


def projection_l2_ball(tree, scale=1):
    """Onto the L2 ball ``{|x| <= scale}``.

        >>> import functrans.numpy as jnp
        >>> projection_l2_ball(jnp.array([3.0, 4.0]), scale=10)
        Array([3., 4.], dtype=float32)
    """
    factor = scale / jnp.sqrt(jnp.maximum(tree_norm(tree, squared=True), scale ** 2))
    return tree_scale(factor, tree)


def projection_linf_ball(tree, scale=1):
    """Onto the infinity-norm ball ``{max |x| <= scale}``.

        >>> import functrans.numpy as jnp
        >>> projection_linf_ball({"a": jnp.array([-3.0, 0.5])})
        {'a': Array([-1. ,  0.5], dtype=float32)}
    """
    return projection_box(tree, tree_full_like(tree, -scale), tree_full_like(tree, scale))


def projection_vector(x, a):
    """Onto the line spanned by ``a``: ``(<x, a> / <a, a>) a``.

        >>> import functrans.numpy as jnp
        >>> projection_vector(jnp.array([1.0, 2.0]), jnp.array([1.0, 0.0]))
        Array([1., 0.], dtype=float32)
    """
    return tree_scale(tree_vdot(x, a) / tree_vdot(a, a), a)


def projection_hyperplane(x, a, b):
    """Onto the hyperplane ``{<a, x> = b}``.

        >>> import functrans.numpy as jnp
        >>> projection_hyperplane(jnp.array([1.0, 2.0]), jnp.array([0.0, 1.0]), 1.0)
        Array([1., 1.], dtype=float32)
    """
    return tree_add_scale(x, (b - tree_vdot(x, a)) / tree_vdot(a, a), a)


def projection_halfspace(x, a, b):
    """Onto the half-space ``{<a, x> <= b}``.

        >>> import functrans.numpy as jnp
        >>> projection_halfspace(jnp.array([1.0, 2.0]), jnp.array([0.0, 1.0]), 3.0)
        Array([1., 2.], dtype=float32)
    """
    scalar = jnp.clip((b - tree_vdot(x, a)) / tree_vdot(a, a), max=0)
    return tree_add_scale(x, scalar, a)
