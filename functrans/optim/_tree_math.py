"""Arithmetic on pytrees of arrays, leaf by leaf: what optimizers compute with (the
``optim.tree`` functions, also under their ``tree_*`` names in ``optim.tree_utils``).

    >>> import functrans.numpy as jnp
    >>> tree_vdot({"a": jnp.array([1.0, 2.0])}, {"a": jnp.array([3.0, 4.0])})
    Array(11., dtype=float32)
"""
from __future__ import annotations

import functools
import operator

from functrans import numpy as jnp
from functrans.optim._numerics import abs_sq
from functrans.tree_util import tree_leaves, tree_map, tree_reduce

__all__ = ["tree_add", "tree_sub", "tree_mul", "tree_div", "tree_scale", "tree_add_scale",
           "tree_vdot", "tree_sum", "tree_max", "tree_min", "tree_size", "tree_conj",
           "tree_real", "tree_norm", "tree_batch_shape", "tree_zeros_like", "tree_ones_like",
           "tree_full_like", "tree_clip", "tree_update_moment", "tree_update_infinity_moment",
           "tree_update_moment_per_elem_norm", "tree_bias_correction", "tree_where",
           "tree_allclose"]


def _is_none(x) -> bool:
    return x is None


def tree_add(tree_x, tree_y, *other_trees):
    """The leafwise sum of two or more trees.

        >>> tree_add({"a": 1.0}, {"a": 2.0}, {"a": 3.0})
        {'a': 6.0}
    """
    return tree_map(lambda *leaves: sum(leaves[1:], leaves[0]), tree_x, tree_y, *other_trees)


def tree_sub(tree_x, tree_y):
    """``tree_x - tree_y`` leafwise.

        >>> tree_sub({"a": 3.0}, {"a": 1.0})
        {'a': 2.0}
    """
    return tree_map(operator.sub, tree_x, tree_y)


def tree_mul(tree_x, tree_y):
    """``tree_x * tree_y`` leafwise.

        >>> tree_mul({"a": 3.0}, {"a": 2.0})
        {'a': 6.0}
    """
    return tree_map(operator.mul, tree_x, tree_y)


def tree_div(tree_x, tree_y):
    """``tree_x / tree_y`` leafwise.

        >>> tree_div({"a": 3.0}, {"a": 2.0})
        {'a': 1.5}
    """
    return tree_map(operator.truediv, tree_x, tree_y)


def tree_scale(scalar, tree):
    """``scalar * tree`` leafwise.

        >>> tree_scale(2.0, {"a": 3.0})
        {'a': 6.0}
    """
    return tree_map(lambda x: scalar * x, tree)


def tree_add_scale(tree_x, scalar, tree_y):
    """``tree_x + scalar * tree_y`` leafwise (None leaves of ``tree_x`` stay None).

        >>> import functrans.numpy as jnp
        >>> tree_add_scale({"a": jnp.array(1.0)}, 2.0, {"a": jnp.array(3.0)})
        {'a': Array(7., dtype=float32, weak_type=True)}
    """
    scalar = jnp.asarray(scalar)
    return tree_map(lambda x, y: None if x is None else x + scalar * y, tree_x, tree_y,
                    is_leaf=_is_none)


def _vdot(a, b):
    """The inner product of two equally shaped arrays, conjugating ``a``."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"tree_vdot: leaves of shapes {a.shape} and {b.shape} differ")
    if jnp.iscomplexobj(a):
        a = jnp.conj(a)
    return jnp.tensordot(a, b, a.ndim)


def tree_vdot(tree_x, tree_y):
    """The inner product of two trees: the sum over leaves of ``vdot(x, y)`` (``x``
    conjugated).

        >>> import functrans.numpy as jnp
        >>> tree_vdot({"a": jnp.array([1.0, 2.0])}, {"a": jnp.array([3.0, 4.0])})
        Array(11., dtype=float32)
    """
    return tree_reduce(operator.add, tree_map(_vdot, tree_x, tree_y), initializer=0)


def tree_sum(tree, associative_reduction: bool = False):
    """The sum of all entries of all leaves (``associative_reduction`` adds the per-leaf
    sums pairwise, as a tree, instead of left to right).

        >>> import functrans.numpy as jnp
        >>> tree_sum({"a": jnp.ones(2), "b": jnp.ones(3)})
        Array(5., dtype=float32)
    """
    sums = tree_leaves(tree_map(jnp.sum, tree))
    if not associative_reduction:
        return functools.reduce(operator.add, sums, 0)
    while len(sums) > 1:
        sums = [a + b for a, b in zip(sums[::2], sums[1::2])] + sums[len(sums) // 2 * 2:]
    return sums[0] if sums else 0


def tree_max(tree):
    """The largest entry of all leaves (``-inf`` for a tree without entries).

        >>> import functrans.numpy as jnp
        >>> tree_max({"a": jnp.array([1.0, 5.0]), "b": jnp.array(3.0)})
        Array(5., dtype=float32)
    """
    maxes = [jnp.max(x) for x in tree_leaves(tree) if jnp.size(x)]
    return functools.reduce(jnp.maximum, maxes, -float("inf"))


def tree_min(tree):
    """The smallest entry of all leaves (``inf`` for a tree without entries).

        >>> import functrans.numpy as jnp
        >>> tree_min({"a": jnp.array([1.0, 5.0]), "b": jnp.array(3.0)})
        Array(1., dtype=float32)
    """
    mins = [jnp.min(x) for x in tree_leaves(tree) if jnp.size(x)]
    return functools.reduce(jnp.minimum, mins, float("inf"))


def tree_size(tree) -> int:
    """The number of entries in all leaves.

        >>> import functrans.numpy as jnp
        >>> tree_size({"a": jnp.ones((2, 3)), "b": jnp.ones(4)})
        10
    """
    return sum(int(jnp.size(leaf)) for leaf in tree_leaves(tree))


def tree_conj(tree):
    """The complex conjugate of every leaf."""
    return tree_map(jnp.conj, tree)


def tree_real(tree):
    """The real part of every leaf."""
    return tree_map(jnp.real, tree)


def tree_norm(tree, ord=None, squared: bool = False):  # noqa: A002 (numpy's name)
    """The norm of all leaves taken as one vector: ``ord`` None or 2 (Euclidean), 1, or
    ``inf``; ``squared`` returns its square.

        >>> import functrans.numpy as jnp
        >>> tree_norm({"a": jnp.array([3.0]), "b": jnp.array([4.0])})
        Array(5., dtype=float32)
    """
    if ord is None or ord == 2:
        squares = tree_sum(tree_map(abs_sq, tree))
        return jnp.array(squares if squared else jnp.sqrt(squares))
    if ord == 1:
        result = tree_sum(tree_map(jnp.abs, tree))
    elif ord == jnp.inf or ord in ("inf", "infinity"):
        result = tree_max(tree_map(jnp.abs, tree))
    else:
        raise ValueError(f"Unsupported ord: {ord}")
    return jnp.array(abs_sq(jnp.asarray(result)) if squared else result)


def tree_batch_shape(tree, shape: tuple = ()):
    """Every leaf broadcast to ``(*shape, *leaf.shape)``.

        >>> import functrans.numpy as jnp
        >>> tree_batch_shape({"a": jnp.ones(2)}, (3,))["a"].shape
        (3, 2)
    """
    return tree_map(lambda x: jnp.broadcast_to(x, (*shape, *jnp.shape(x))), tree)


def tree_zeros_like(tree, dtype=None):
    """A tree of zeros shaped like ``tree`` (of ``dtype`` if given)."""
    return tree_map(lambda x: jnp.zeros_like(x, dtype=dtype), tree)


def tree_ones_like(tree, dtype=None):
    """A tree of ones shaped like ``tree`` (of ``dtype`` if given)."""
    return tree_map(lambda x: jnp.ones_like(x, dtype=dtype), tree)


def tree_full_like(tree, fill_value, dtype=None):
    """A tree of ``fill_value`` shaped like ``tree`` (of ``dtype`` if given).

        >>> import functrans.numpy as jnp
        >>> tree_full_like({"a": jnp.zeros(2)}, 0.5)
        {'a': Array([0.5, 0.5], dtype=float32)}
    """
    return tree_map(lambda x: jnp.full_like(x, fill_value, dtype=dtype), tree)


def tree_clip(tree, min_value=None, max_value=None):
    """Every leaf clipped to ``[min_value, max_value]`` (None: unbounded on that side).

        >>> import functrans.numpy as jnp
        >>> tree_clip({"a": jnp.array([-2.0, 0.5, 2.0])}, -1.0, 1.0)
        {'a': Array([-1. ,  0.5,  1. ], dtype=float32)}
    """
    return tree_map(lambda g: jnp.clip(g, min_value, max_value), tree)


def tree_update_moment(updates, moments, decay, order):
    """The exponential moving average of ``updates ** order``:
    ``(1 - decay) * g**order + decay * m`` leafwise (None leaves stay None).

        >>> tree_update_moment({"a": 2.0}, {"a": 1.0}, 0.5, 2)
        {'a': 2.5}
    """
    return tree_map(lambda g, t: None if g is None else (1 - decay) * (g ** order) + decay * t,
                    updates, moments, is_leaf=_is_none)


def tree_update_infinity_moment(updates, moments, decay, eps):
    """The infinity-norm moment ``max(|g| + eps, decay * m)`` leafwise (AdaMax).

        >>> tree_update_infinity_moment({"a": -2.0}, {"a": 4.0}, 0.9, 0.0)
        {'a': Array(3.6, dtype=float32, weak_type=True)}
    """
    return tree_map(lambda g, t: g if g is None else jnp.maximum(jnp.abs(g) + eps, decay * t),
                    updates, moments, is_leaf=_is_none)


def _orderth_norm(g, order):
    """``g ** order`` for real ``g``; ``|g| ** order`` for complex ``g``."""
    if jnp.isrealobj(g):
        return g ** order
    half_order = order / 2
    if float(half_order).is_integer():
        half_order = int(half_order)
    return abs_sq(g) ** half_order


def tree_update_moment_per_elem_norm(updates, moments, decay, order):
    """The moving average of ``|g| ** order`` (real for complex ``g``):
    ``(1 - decay) * |g|**order + decay * m`` leafwise.

        >>> tree_update_moment_per_elem_norm({"a": 2.0}, {"a": 0.0}, 0.5, 2)
        {'a': 2.0}
    """
    return tree_map(
        lambda g, t: None if g is None else (1 - decay) * _orderth_norm(g, order) + decay * t,
        updates, moments, is_leaf=_is_none)


def tree_bias_correction(moment, decay, count):
    """``moment / (1 - decay ** count)``: Adam's correction of a zero-started average.

        >>> import functrans.numpy as jnp
        >>> tree_bias_correction({"a": jnp.array(0.5)}, 0.5, jnp.asarray(1))
        {'a': Array(1., dtype=float32)}
    """
    correction = 1 - decay ** jnp.asarray(count)
    return tree_map(lambda t: t / jnp.asarray(correction).astype(jnp.asarray(t).dtype), moment)


def tree_where(condition, tree_x, tree_y):
    """``tree_x`` where the scalar ``condition`` holds, else ``tree_y``, leafwise.

        >>> import functrans.numpy as jnp
        >>> tree_where(jnp.asarray(False), {"a": 1.0}, {"a": 2.0})
        {'a': Array(2., dtype=float32, weak_type=True)}
    """
    return tree_map(lambda x, y: jnp.where(condition, x, y), tree_x, tree_y)


def tree_allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan: bool = False):
    """Whether all leaves of ``a`` and ``b`` are close (``jnp.allclose``).

        >>> import functrans.numpy as jnp
        >>> bool(tree_allclose({"a": jnp.ones(2)}, {"a": jnp.ones(2) + 1e-9}))
        True
    """
    checks = tree_leaves(tree_map(
        lambda x, y: jnp.allclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan), a, b))
    return functools.reduce(operator.and_, checks, True)
