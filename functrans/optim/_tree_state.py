"""Reading and changing optimizer states by name: find the ``learning_rate`` or ``count``
somewhere inside a nested state, set it, or map a function over the parts of a state that
mirror the parameters.

    >>> import functrans.numpy as jnp
    >>> from functrans import optim
    >>> opt = optim.inject_hyperparams(optim.sgd)(learning_rate=0.1)
    >>> state = opt.init({"w": jnp.zeros(2)})
    >>> round(float(tree_get(state, "learning_rate")), 6)
    0.1
    >>> state = tree_set(state, learning_rate=jnp.asarray(0.5))
    >>> float(tree_get(state, "learning_rate"))
    0.5
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Protocol, runtime_checkable

from functrans.tree_util import (DictKey, FlattenedIndexKey, GetAttrKey, SequenceKey,
                                 register_pytree_node_class, tree_flatten,
                                 tree_leaves_with_path, tree_map)

__all__ = ["NamedTupleKey", "tree_get", "tree_get_all_with_path", "tree_set",
           "tree_map_params"]


@register_pytree_node_class
class _ParamsPlaceholder:
    """A leafless stand-in for the parameters: ``init`` run on it marks where a state
    holds parameter-shaped trees."""

    def tree_flatten(self):
        return (), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        del aux, children
        return cls()


@dataclasses.dataclass(frozen=True)
class NamedTupleKey:
    """A key path entry for the field ``name`` of a NamedTuple of type ``tuple_name``."""
    tuple_name: str
    name: str

    def __str__(self):
        return f"{self.tuple_name}.{self.name}"


@runtime_checkable
class Initable(Protocol):
    """Anything with ``init(params) -> state`` (a gradient transformation)."""

    def init(self, params) -> Any: ...


def tree_map_params(initable, f: Callable, state, /, *rest, transform_non_params=None,
                    is_leaf=None):
    """Apply ``f`` to the parts of ``state`` that mirror the parameters (``mu``, ``nu``,
    traces, ...), leaving counts and other fields alone (or applying
    ``transform_non_params`` to them). ``initable`` is the transformation (or its ``init``)
    that made ``state``; ``rest`` are trees passed to ``f`` alongside.

        >>> import functrans.numpy as jnp
        >>> from functrans import optim
        >>> opt = optim.adam(0.1)
        >>> state = opt.init({"w": jnp.ones(2)})
        >>> halved = tree_map_params(opt, lambda p: p.shape, state)
        >>> halved[0].mu, int(halved[0].count)
        ({'w': (2,)}, 0)
    """
    placeholder = _ParamsPlaceholder()
    if isinstance(initable, Initable):
        marked = initable.init(placeholder)
    else:
        marked = initable(placeholder)

    def map_params(maybe_placeholder, value):
        if isinstance(maybe_placeholder, _ParamsPlaceholder):
            return tree_map(f, value, *rest, is_leaf=is_leaf)
        if transform_non_params is not None:
            return transform_non_params(value)
        return value

    return tree_map(map_params, marked, state,
                    is_leaf=lambda v: isinstance(v, _ParamsPlaceholder))


def _is_named_tuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _node_has_keys(node, keys) -> bool:
    """Whether ``node`` holds one of ``keys``: a NamedTuple field or type name, or a dict key."""
    if _is_named_tuple(node):
        return any(key in node._fields for key in keys) or type(node).__name__ in keys
    return isinstance(node, dict) and any(key in node for key in keys)


def _leaves_with_named_tuple_path(tree, is_leaf=None):
    """Like ``tree_leaves_with_path``, but NamedTuple fields are named by
    :class:`NamedTupleKey` entries instead of positions."""
    stop = is_leaf or (lambda _: False)
    out = []
    for path, node in tree_leaves_with_path(tree, is_leaf=lambda x: stop(x) or _is_named_tuple(x)):
        if stop(node) or not _is_named_tuple(node):
            out.append((path, node))
            continue
        for field in node._fields:
            key = NamedTupleKey(type(node).__name__, field)
            for child_path, child in _leaves_with_named_tuple_path(getattr(node, field), is_leaf):
                out.append(((*path, key, *child_path), child))
    return out


def _flatten_to_key(path, node, key):
    if _is_named_tuple(node):
        if key == type(node).__name__:
            return path, node
        return (*path, NamedTupleKey(type(node).__name__, key)), getattr(node, key)
    if isinstance(node, dict) and key in node:
        return (*path, DictKey(key)), node[key]
    return path, node


def _children_with_path(path, node):
    if _is_named_tuple(node):
        return [((*path, NamedTupleKey(type(node).__name__, field)), getattr(node, field))
                for field in node._fields]
    if isinstance(node, dict):
        return [((*path, DictKey(key)), value) for key, value in node.items()]
    raise ValueError(f"Subtree must be a dict or a NamedTuple. Got {type(node)}")


def _all_with_path(tree, key):
    has_key = functools.partial(_node_has_keys, keys=(key,))
    subtrees = [(path, node) for path, node in _leaves_with_named_tuple_path(tree, has_key)
                if has_key(node)]
    found = [_flatten_to_key(path, node, key) for path, node in subtrees]
    # a match may hold further matches below it
    for path, node in subtrees:
        for child_path, child in _children_with_path(path, node):
            found += [((*child_path, *sub_path), value)
                      for sub_path, value in _all_with_path(child, key)]
    return found


def tree_get_all_with_path(tree, key, filtering: Callable | None = None) -> list:
    """Every ``(path, value)`` in ``tree`` under ``key``: a NamedTuple field or type name,
    or a dict key. ``filtering(path, value)`` keeps only some.

        >>> import functrans.numpy as jnp
        >>> from functrans import optim
        >>> state = optim.adam(0.1).init({"w": jnp.zeros(1)})
        >>> [(str(path[-1]), int(v)) for path, v in tree_get_all_with_path(state, "count")]
        [('ScaleByAdamState.count', 0)]
    """
    found = _all_with_path(tree, key)
    if filtering:
        found = [(path, value) for path, value in found if filtering(path, value)]
    return found


def tree_get(tree, key, default=None, filtering: Callable | None = None):
    """The one value in ``tree`` under ``key`` (see :func:`tree_get_all_with_path`);
    ``default`` if there is none, a ``KeyError`` if there are several.

        >>> import functrans.numpy as jnp
        >>> from functrans import optim
        >>> int(tree_get(optim.adam(0.1).init(jnp.zeros(1)), "count"))
        0
    """
    found = tree_get_all_with_path(tree, key, filtering=filtering)
    if len(found) > 1:
        raise KeyError(f"Found multiple values for '{key}' in {tree}.")
    return found[0][1] if found else default


def _entry_key(entry):
    if isinstance(entry, DictKey):
        if isinstance(entry.key, (str, int)):
            return entry.key
        raise KeyError("Hashable keys not supported")
    if isinstance(entry, FlattenedIndexKey):
        return entry.key
    if isinstance(entry, GetAttrKey):
        return entry.name
    if isinstance(entry, SequenceKey):
        return entry.idx
    if isinstance(entry, NamedTupleKey):
        return entry.name
    raise KeyError(f"Tree key '{entry}' of type '{type(entry)}' not valid.")


def _set_children(node, children):
    if _is_named_tuple(node):
        return node._replace(**children)
    if isinstance(node, dict):
        return children
    raise ValueError(f"Subtree must be a dict or a NamedTuple. Got {type(node)}")


def tree_set(tree, filtering: Callable | None = None, /, **kwargs):
    """A copy of ``tree`` with the values under each keyword's name replaced (NamedTuple
    fields or types, dict keys); ``filtering(path, value)`` limits where. Every name must
    be found, or ``KeyError``.

        >>> import functrans.numpy as jnp
        >>> from functrans import optim
        >>> state = optim.adam(0.1).init(jnp.zeros(1))
        >>> int(tree_set(state, count=jnp.asarray(3))[0].count)
        3
    """
    for key in kwargs:
        if not tree_get_all_with_path(tree, key, filtering):
            where = " given the filtering operation" if filtering else ""
            raise KeyError(f"Found no values matching '{key}'{where} in {tree}")
    has_any_key = functools.partial(_node_has_keys, keys=tuple(kwargs))

    def replace(path, node):
        if not has_any_key(node):
            return node
        if (_is_named_tuple(node) and type(node).__name__ in kwargs
                and (filtering is None or filtering(path, node))):
            return kwargs[type(node).__name__]
        children = {}
        for child_path, child in _children_with_path(path, node):
            key = _entry_key(child_path[-1])
            if key in kwargs and (filtering is None or filtering(child_path, child)):
                children[key] = kwargs[key]
            elif isinstance(child, (dict, list, tuple)):
                children[key] = replace(child_path, child)
            else:
                children[key] = child
        return _set_children(node, children)

    _, treedef = tree_flatten(tree, is_leaf=has_any_key)
    leaves_with_path = _leaves_with_named_tuple_path(tree, is_leaf=has_any_key)
    return treedef.unflatten([replace(path, node) for path, node in leaves_with_path])
