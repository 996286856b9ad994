"""Pytrees: nested containers of arrays, flattened to leaves and a hashable structure.

Containers are tuples, lists, dicts (flattened in sorted key order), namedtuples, ``None``
(a tree with no leaves), and classes registered with :func:`register_pytree_node` or
:func:`register_dataclass`.

    >>> leaves, treedef = tree_flatten({"b": 2, "a": [1, None]})
    >>> leaves
    [1, 2]
    >>> tree_unflatten(treedef, [10, 20])
    {'a': [10, None], 'b': 20}
"""
from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Any, Callable, NamedTuple

__all__ = [
    "PyTreeDef", "tree_flatten", "tree_unflatten", "tree_leaves", "tree_structure", "tree_map",
    "tree_all", "tree_reduce", "tree_transpose", "register_pytree_node", "register_dataclass",
    "register_pytree_node_class", "tree_flatten_with_path", "tree_leaves_with_path",
    "tree_map_with_path", "keystr", "DictKey", "SequenceKey", "GetAttrKey", "FlattenedIndexKey",
    "treedef_is_leaf", "all_leaves", "Partial",
]


class _NodeType(NamedTuple):
    flatten: Callable      # node -> (children, aux_data)
    unflatten: Callable    # (aux_data, children) -> node
    flatten_with_keys: Callable | None  # node -> (((key, child), ...), aux_data)


_registry: dict[type, _NodeType] = {}


def register_pytree_node(nodetype: type, flatten_func, unflatten_func, flatten_with_keys_func=None):
    """Register ``nodetype`` as a container: ``flatten_func(x) -> (children, aux)`` and
    ``unflatten_func(aux, children) -> x``."""
    if nodetype in _registry:
        raise ValueError(f"{nodetype.__name__} is already registered as a pytree node")
    _registry[nodetype] = _NodeType(flatten_func, unflatten_func, flatten_with_keys_func)
    return nodetype


def register_pytree_node_class(cls):
    """Class decorator: ``cls.tree_flatten()`` and ``cls.tree_unflatten(aux, children)``."""
    register_pytree_node(cls, lambda x: x.tree_flatten(), cls.tree_unflatten)
    return cls


def register_dataclass(nodetype=None, data_fields=None, meta_fields=None):
    """Register a dataclass: ``data_fields`` are children, ``meta_fields`` are static.
    Without field lists, every field is data unless marked ``field(metadata={"static": True})``."""
    if nodetype is None:
        return functools.partial(register_dataclass, data_fields=data_fields, meta_fields=meta_fields)
    if data_fields is None:
        fields = dataclasses.fields(nodetype)
        meta_fields = [f.name for f in fields if f.metadata.get("static", False)]
        data_fields = [f.name for f in fields if not f.metadata.get("static", False)]
    data_fields, meta_fields = tuple(data_fields), tuple(meta_fields or ())

    def flatten(x):
        return [getattr(x, n) for n in data_fields], tuple(getattr(x, n) for n in meta_fields)

    def unflatten(aux, children):
        kwargs = dict(zip(data_fields, children))
        kwargs.update(zip(meta_fields, aux))
        obj = object.__new__(nodetype)
        for k, v in kwargs.items():
            object.__setattr__(obj, k, v)
        return obj

    def flatten_with_keys(x):
        return [(GetAttrKey(n), getattr(x, n)) for n in data_fields], tuple(getattr(x, n) for n in meta_fields)

    register_pytree_node(nodetype, flatten, unflatten, flatten_with_keys)
    return nodetype


# ---- keys for key paths -----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class DictKey:
    key: Any

    def __str__(self):
        return f"[{self.key!r}]"


@dataclasses.dataclass(frozen=True)
class SequenceKey:
    idx: int

    def __str__(self):
        return f"[{self.idx}]"


@dataclasses.dataclass(frozen=True)
class GetAttrKey:
    name: str

    def __str__(self):
        return f".{self.name}"


@dataclasses.dataclass(frozen=True)
class FlattenedIndexKey:
    key: int

    def __str__(self):
        return f"[<flat index {self.key}>]"


def keystr(keys) -> str:
    """Render a key path, e.g. ``['params'][0].w``."""
    return "".join(str(k) for k in keys)


# ---- built-in containers ----------------------------------------------------------------------

def _sorted_keys(d):
    try:
        return sorted(d)
    except TypeError:
        return sorted(d, key=repr)


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _builtin_node(x):
    """(kind, children, aux, keys) for built-in containers, or None for a leaf or registered node."""
    t = type(x)
    if t is tuple:
        return "tuple", list(x), len(x), [SequenceKey(i) for i in range(len(x))]
    if t is list:
        return "list", list(x), len(x), [SequenceKey(i) for i in range(len(x))]
    if t is dict:
        keys = _sorted_keys(x)
        return "dict", [x[k] for k in keys], tuple(keys), [DictKey(k) for k in keys]
    if x is None:
        return "none", [], None, []
    if t is collections.OrderedDict:
        keys = list(x)
        return "odict", [x[k] for k in keys], tuple(keys), [DictKey(k) for k in keys]
    if t is collections.defaultdict:
        keys = _sorted_keys(x)
        return "ddict", [x[k] for k in keys], (x.default_factory, tuple(keys)), [DictKey(k) for k in keys]
    if _is_namedtuple(x) and t not in _registry:
        return "namedtuple", list(x), t, [GetAttrKey(f) for f in t._fields]
    return None


class PyTreeDef:
    """The structure of a pytree: hashable and comparable, so it can key caches."""

    __slots__ = ("kind", "aux", "children", "num_leaves", "num_nodes", "_hash")

    def __init__(self, kind, aux, children: tuple):
        self.kind = kind
        self.aux = aux
        self.children = children
        if kind == "leaf":
            self.num_leaves, self.num_nodes = 1, 1
        else:
            self.num_leaves = sum(c.num_leaves for c in children)
            self.num_nodes = 1 + sum(c.num_nodes for c in children)
        self._hash = None

    def _key(self):
        aux = self.aux
        if self.kind == "custom":
            aux = (aux[0], _hashable(aux[1]))
        return (self.kind, aux, self.children)

    def __hash__(self):
        if self._hash is None:
            self._hash = hash(self._key())
        return self._hash

    def __eq__(self, other):
        return isinstance(other, PyTreeDef) and (self is other or self._key() == other._key())

    def __ne__(self, other):
        return not self == other

    def unflatten(self, leaves):
        return tree_unflatten(self, leaves)

    def flatten_up_to(self, tree):
        return _flatten_up_to(self, tree)

    @property
    def num_children(self):
        return len(self.children)

    def __repr__(self):
        return f"PyTreeDef({self._pretty()})"

    def _pretty(self) -> str:
        inner = [c._pretty() for c in self.children]
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        if self.kind == "tuple":
            return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"
        if self.kind == "list":
            return "[" + ", ".join(inner) + "]"
        if self.kind in ("dict", "odict"):
            return "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(self.aux, inner)) + "}"
        if self.kind == "ddict":
            return "defaultdict({" + ", ".join(f"{k!r}: {v}" for k, v in zip(self.aux[1], inner)) + "})"
        if self.kind == "namedtuple":
            return f"{self.aux.__name__}(" + ", ".join(f"{f}={v}" for f, v in zip(self.aux._fields, inner)) + ")"
        return f"CustomNode({self.aux[0].__name__}[{self.aux[1]!r}], [" + ", ".join(inner) + "])"


def _hashable(aux):
    try:
        hash(aux)
        return aux
    except TypeError:
        return repr(aux)


_LEAF = PyTreeDef("leaf", None, ())


def _flatten(x, leaves, is_leaf, with_path=None, path=()):
    if is_leaf is not None and is_leaf(x):
        leaves.append((path, x) if with_path else x)
        return _LEAF
    builtin = _builtin_node(x)
    if builtin is not None:
        kind, children, aux, keys = builtin
    else:
        node = _registry.get(type(x))
        if node is None:
            leaves.append((path, x) if with_path else x)
            return _LEAF
        if with_path and node.flatten_with_keys is not None:
            keyed, aux_data = node.flatten_with_keys(x)
            keys, children = [k for k, _ in keyed], [c for _, c in keyed]
        else:
            children, aux_data = node.flatten(x)
            children = list(children)
            keys = [FlattenedIndexKey(i) for i in range(len(children))]
        kind, aux = "custom", (type(x), aux_data)
    child_defs = tuple(
        _flatten(c, leaves, is_leaf, with_path, path + (k,)) for c, k in zip(children, keys))
    return PyTreeDef(kind, aux, child_defs)


def tree_flatten(tree, is_leaf: Callable[[Any], bool] | None = None):
    """Flatten ``tree`` to ``(leaves, treedef)``."""
    leaves: list = []
    treedef = _flatten(tree, leaves, is_leaf)
    return leaves, treedef


def tree_flatten_with_path(tree, is_leaf=None):
    """Flatten to ``([(key_path, leaf), ...], treedef)``."""
    leaves: list = []
    treedef = _flatten(tree, leaves, is_leaf, with_path=True)
    return leaves, treedef


def tree_leaves_with_path(tree, is_leaf=None):
    return tree_flatten_with_path(tree, is_leaf)[0]


def _build(treedef: PyTreeDef, it):
    kind = treedef.kind
    if kind == "leaf":
        return next(it)
    children = [_build(c, it) for c in treedef.children]
    if kind == "tuple":
        return tuple(children)
    if kind == "list":
        return children
    if kind == "dict":
        return dict(zip(treedef.aux, children))
    if kind == "none":
        return None
    if kind == "odict":
        return collections.OrderedDict(zip(treedef.aux, children))
    if kind == "ddict":
        return collections.defaultdict(treedef.aux[0], zip(treedef.aux[1], children))
    if kind == "namedtuple":
        return treedef.aux(*children)
    nodetype, aux_data = treedef.aux
    return _registry[nodetype].unflatten(aux_data, children)


def tree_unflatten(treedef: PyTreeDef, leaves):
    """Rebuild a tree of structure ``treedef`` from ``leaves``."""
    leaves = list(leaves)
    if len(leaves) != treedef.num_leaves:
        raise ValueError(
            f"tree_unflatten: the structure {treedef} has {treedef.num_leaves} leaves "
            f"but {len(leaves)} were given")
    return _build(treedef, iter(leaves))


def tree_leaves(tree, is_leaf=None) -> list:
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree, is_leaf=None) -> PyTreeDef:
    return tree_flatten(tree, is_leaf)[1]


def treedef_is_leaf(treedef: PyTreeDef) -> bool:
    return treedef.kind == "leaf"


def all_leaves(iterable, is_leaf=None) -> bool:
    return all(treedef_is_leaf(tree_structure(x, is_leaf)) for x in iterable)


def _flatten_up_to(treedef: PyTreeDef, tree) -> list:
    """Leaves of ``tree`` cut at the leaves of ``treedef`` (a prefix of its structure)."""
    out: list = []

    def walk(td, x, path):
        if td.kind == "leaf":
            out.append(x)
            return
        builtin = _builtin_node(x)
        if builtin is not None:
            kind, children, aux, keys = builtin
        else:
            node = _registry.get(type(x))
            if node is None:
                raise ValueError(_mismatch_message(td, x, path))
            children, aux_data = node.flatten(x)
            children = list(children)
            kind, aux, keys = "custom", (type(x), aux_data), [FlattenedIndexKey(i) for i in range(len(children))]
        same = kind == td.kind and (aux == td.aux if kind != "custom" else
                                    (aux[0] is td.aux[0] and _hashable(aux[1]) == _hashable(td.aux[1])))
        if not same or len(children) != len(td.children):
            raise ValueError(_mismatch_message(td, x, path))
        for c_td, c, k in zip(td.children, children, keys):
            walk(c_td, c, path + (k,))

    walk(treedef, tree, ())
    return out


def _mismatch_message(treedef, x, path) -> str:
    where = keystr(path) or "the root"
    return (f"pytree structures do not match at {where}: expected {treedef}, "
            f"got {tree_structure(x)}")


def tree_map(f: Callable, tree, *rest, is_leaf=None):
    """Apply ``f`` leafwise; ``rest`` trees must have ``tree``'s structure (or extend it)."""
    leaves, treedef = tree_flatten(tree, is_leaf)
    all_leaves_ = [leaves] + [_flatten_up_to(treedef, r) for r in rest]
    return treedef.unflatten(f(*xs) for xs in zip(*all_leaves_))


def tree_map_with_path(f: Callable, tree, *rest, is_leaf=None):
    keyed, treedef = tree_flatten_with_path(tree, is_leaf)
    rest_leaves = [_flatten_up_to(treedef, r) for r in rest]
    return treedef.unflatten(
        f(path, leaf, *others) for (path, leaf), *others in zip(keyed, *rest_leaves))


def tree_all(tree, is_leaf=None) -> bool:
    return all(tree_leaves(tree, is_leaf))


def tree_reduce(function: Callable, tree, initializer=..., is_leaf=None):
    leaves = tree_leaves(tree, is_leaf)
    if initializer is ...:
        return functools.reduce(function, leaves)
    return functools.reduce(function, leaves, initializer)


def tree_transpose(outer_treedef: PyTreeDef, inner_treedef: PyTreeDef, pytree_to_transpose):
    """Turn a tree of trees (outer of inner) into an inner-of-outer tree."""
    flat = outer_treedef.flatten_up_to(pytree_to_transpose)
    inner_lists = [inner_treedef.flatten_up_to(x) for x in flat]
    columns = zip(*inner_lists) if inner_lists else [[] for _ in range(inner_treedef.num_leaves)]
    return inner_treedef.unflatten(outer_treedef.unflatten(col) for col in columns)


class Partial(functools.partial):
    """A ``functools.partial`` that is a pytree: its bound arguments are leaves, so it can be
    passed through ``jit`` and other transforms."""

    def __new__(cls, func, *args, **kw):
        if isinstance(func, functools.partial):
            original = func
            func = func.func
            args = original.args + args
            kw = {**original.keywords, **kw}
        return super().__new__(cls, func, *args, **kw)


register_pytree_node(
    Partial,
    lambda p: ((p.args, p.keywords), p.func),
    lambda func, children: Partial(func, *children[0], **children[1]),
)
