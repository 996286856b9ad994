"""The ``jax.tree`` namespace: short names for the pytree functions of :mod:`functrans.tree_util`.

    >>> import functrans.tree
    >>> functrans.tree.map(lambda x: x * 10, {"a": 1, "b": (2, None)})
    {'a': 10, 'b': (20, None)}
    >>> functrans.tree.leaves([3, {"z": 1, "y": 2}])
    [3, 2, 1]

Every function takes the same arguments as its ``tree_util`` counterpart (``is_leaf`` to
stop flattening early); the structures they return are :class:`tree_util.PyTreeDef`.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

from functrans import tree_util

__all__ = [
    "all", "broadcast", "flatten", "flatten_with_path", "leaves", "leaves_with_path", "map",
    "map_with_path", "reduce", "reduce_associative", "static", "structure", "transpose",
    "unflatten",
]


class _NotGiven:
    """Marks "no initializer / identity given", so ``None`` stays a legal value for them."""

    def __repr__(self):
        return "<not given>"


_NOT_GIVEN: Any = _NotGiven()


def all(tree, *, is_leaf: Callable[[Any], bool] | None = None) -> bool:  # noqa: A001 (JAX's name)
    """Whether every leaf of ``tree`` is truthy.

        >>> all([True, {"a": 1}])
        True
        >>> all([True, (0,)])
        False
    """
    return tree_util.tree_all(tree, is_leaf=is_leaf)


def flatten(tree, is_leaf: Callable[[Any], bool] | None = None):
    """Flatten ``tree`` to ``(leaves, treedef)``; ``None`` is an empty subtree, not a leaf.

        >>> leaves, treedef = flatten({"b": 2, "a": [1, None]})
        >>> leaves
        [1, 2]
    """
    return tree_util.tree_flatten(tree, is_leaf)


def unflatten(treedef: tree_util.PyTreeDef, leaves):
    """Rebuild a tree of structure ``treedef`` from ``leaves`` (in flattening order).

        >>> unflatten(structure((0, [0])), [5, 6])
        (5, [6])
    """
    return tree_util.tree_unflatten(treedef, leaves)


def leaves(tree, is_leaf: Callable[[Any], bool] | None = None) -> list:
    """The leaves of ``tree`` in flattening order (dict keys sorted).

        >>> leaves({"b": [2, 3], "a": 1})
        [1, 2, 3]
    """
    return tree_util.tree_leaves(tree, is_leaf)


def structure(tree, is_leaf: Callable[[Any], bool] | None = None) -> tree_util.PyTreeDef:
    """The :class:`PyTreeDef` of ``tree``.

        >>> structure((1, [2, None]))
        PyTreeDef((*, [*, None]))
    """
    return tree_util.tree_structure(tree, is_leaf)


def map(f: Callable, tree, *rest, is_leaf: Callable[[Any], bool] | None = None):  # noqa: A001
    """Apply ``f`` to corresponding leaves of ``tree`` and of each tree in ``rest``.

    The trees in ``rest`` must have ``tree``'s structure, or extend it (a leaf of ``tree``
    may stand over a whole subtree of another tree, which ``f`` then receives whole).

        >>> map(lambda x, y: x + y, (1, [2]), (10, [20]))
        (11, [22])
    """
    return tree_util.tree_map(f, tree, *rest, is_leaf=is_leaf)


def map_with_path(f: Callable, tree, *rest, is_leaf: Callable[..., bool] | None = None,
                  is_leaf_takes_path: bool = False):
    """Like :func:`map`, but ``f`` receives the key path of each leaf first. With
    ``is_leaf_takes_path=True``, ``is_leaf`` is called as ``is_leaf(path, x)``.

        >>> map_with_path(lambda path, x: (tree_util.keystr(path), x), {"a": 1})
        {'a': ("['a']", 1)}
    """
    keyed, treedef = flatten_with_path(tree, is_leaf, is_leaf_takes_path)
    rest_leaves = [treedef.flatten_up_to(r) for r in rest]
    return treedef.unflatten(
        f(path, leaf, *others) for (path, leaf), *others in zip(keyed, *rest_leaves))


def flatten_with_path(tree, is_leaf: Callable[..., bool] | None = None,
                      is_leaf_takes_path: bool = False):
    """Flatten to ``([(key_path, leaf), ...], treedef)``. With ``is_leaf_takes_path=True``,
    ``is_leaf`` is called as ``is_leaf(path, x)``, so flattening can stop at given depths.

        >>> flatten_with_path([7])[0]
        [((SequenceKey(idx=0),), 7)]
        >>> leaves, _ = flatten_with_path([[1, 2], [3]], lambda path, x: len(path) == 1,
        ...                               is_leaf_takes_path=True)
        >>> [leaf for _, leaf in leaves]
        [[1, 2], [3]]
    """
    if not is_leaf_takes_path or is_leaf is None:
        return tree_util.tree_flatten_with_path(tree, is_leaf)
    keyed: list = []
    treedef = _flatten_with_path_predicate(tree, is_leaf, (), keyed)
    return keyed, treedef


def _flatten_with_path_predicate(x, is_leaf, path, keyed):
    """Flatten ``x`` one container level at a time so ``is_leaf`` can see each node's path."""
    if is_leaf(path, x):
        keyed.append((path, x))
        return tree_util.tree_structure(0)
    # Everything below ``x`` counts as a leaf here: this splits off exactly one level.
    children, level = tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)
    if tree_util.treedef_is_leaf(level):
        keyed.append((path, x))
        return level
    child_defs = tuple(_flatten_with_path_predicate(child, is_leaf, path + child_path, keyed)
                       for child_path, child in children)
    return tree_util.PyTreeDef(level.kind, level.aux, child_defs)


def leaves_with_path(tree, is_leaf: Callable[..., bool] | None = None,
                     is_leaf_takes_path: bool = False) -> list:
    """The ``(key_path, leaf)`` pairs of ``tree``.

        >>> [tree_util.keystr(p) for p, _ in leaves_with_path({"a": [1, 2]})]
        ["['a'][0]", "['a'][1]"]
    """
    return flatten_with_path(tree, is_leaf, is_leaf_takes_path)[0]


def reduce(function: Callable, tree, initializer=_NOT_GIVEN,
           is_leaf: Callable[[Any], bool] | None = None):
    """Fold ``function`` over the leaves of ``tree`` from the left, starting from
    ``initializer`` when one is given.

        >>> reduce(lambda a, b: a + b, [1, (2, 3)])
        6
        >>> reduce(lambda a, b: a + b, [], 0)
        0
    """
    values = leaves(tree, is_leaf)
    if initializer is _NOT_GIVEN:
        return functools.reduce(function, values)
    return functools.reduce(function, values, initializer)


def reduce_associative(operation: Callable, tree, *, identity=_NOT_GIVEN,
                       is_leaf: Callable[[Any], bool] | None = None):
    """Combine the leaves of ``tree`` with an associative ``operation`` as a balanced tree of
    calls (depth log n rather than n), which keeps floating-point sums more accurate.

    ``identity`` is returned for a tree without leaves; without it, such a tree is an error.

        >>> reduce_associative(lambda a, b: a + b, [1, 2, 3, 4])
        10
    """
    values = leaves(tree, is_leaf)
    if not values:
        if identity is _NOT_GIVEN:
            raise TypeError("reduce_associative: the tree has no leaves and no identity was given")
        return identity
    return _reduce_halves(operation, values)


def _reduce_halves(operation, values):
    # Split at the middle (the shorter half first), so n leaves need depth ceil(log2 n).
    if len(values) == 1:
        return values[0]
    middle = len(values) // 2
    return operation(_reduce_halves(operation, values[:middle]),
                     _reduce_halves(operation, values[middle:]))


def transpose(outer_treedef: tree_util.PyTreeDef, inner_treedef: tree_util.PyTreeDef | None,
              pytree_to_transpose):
    """Turn an ``outer`` tree whose leaves are ``inner`` trees into an ``inner`` tree whose
    leaves are ``outer`` trees. With ``inner_treedef=None`` the inner structure is read off
    the first inner tree.

        >>> transpose(structure([0, 0]), structure((0, 0)), [(1, 2), (3, 4)])
        ([1, 3], [2, 4])
    """
    if inner_treedef is None:
        inner_trees = outer_treedef.flatten_up_to(pytree_to_transpose)
        if not inner_trees:
            raise ValueError("transpose: inner_treedef=None needs at least one inner tree "
                             "to read the inner structure from")
        inner_treedef = structure(inner_trees[0])
    return tree_util.tree_transpose(outer_treedef, inner_treedef, pytree_to_transpose)


def broadcast(prefix_tree, full_tree, is_leaf: Callable[[Any], bool] | None = None):
    """Copy each leaf of ``prefix_tree`` over the matching subtree of ``full_tree``, so the
    result has ``full_tree``'s structure.

    ``prefix_tree`` must be a prefix of ``full_tree``: the same containers down to its own
    leaves, where ``full_tree`` may continue with whole subtrees.

        >>> broadcast([1, 2], [(0, 0), {"a": 0}])
        [(1, 1), {'a': 2}]
    """
    prefix_leaves, prefix_treedef = flatten(prefix_tree, is_leaf)
    subtrees = prefix_treedef.flatten_up_to(full_tree)
    broadcast_subtrees = [map(functools.partial(_constant, value), subtree, is_leaf=is_leaf)
                          for value, subtree in zip(prefix_leaves, subtrees)]
    return prefix_treedef.unflatten(broadcast_subtrees)


def _constant(value, _ignored_leaf):
    return value


def static(**kwargs):
    """A :func:`dataclasses.field` marked static: with :func:`tree_util.register_dataclass`
    the field is part of the tree structure, not a leaf. Takes ``dataclasses.field``'s
    arguments.

        >>> @tree_util.register_dataclass
        ... @dataclasses.dataclass
        ... class Scaled:
        ...     x: float
        ...     name: str = static(default="scale")
        >>> leaves(Scaled(2.0))
        [2.0]
    """
    metadata = dict(kwargs.pop("metadata", None) or {})
    metadata["static"] = True
    return dataclasses.field(metadata=metadata, **kwargs)
