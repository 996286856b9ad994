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
import inspect
from typing import Any, Callable, NamedTuple, TypeVar

__all__ = [
    "PyTreeDef", "tree_flatten", "tree_unflatten", "tree_leaves", "tree_structure", "tree_map",
    "tree_all", "tree_reduce", "tree_transpose", "register_pytree_node", "register_dataclass",
    "register_pytree_node_class", "tree_flatten_with_path", "tree_leaves_with_path",
    "tree_map_with_path", "keystr", "DictKey", "SequenceKey", "GetAttrKey", "FlattenedIndexKey",
    "treedef_is_leaf", "all_leaves", "Partial",
    "register_pytree_with_keys", "register_pytree_with_keys_class", "register_static",
    "KeyEntry", "KeyPath", "default_registry", "treedef_children", "treedef_tuple",
    "tree_broadcast", "flatten_one_level", "flatten_one_level_with_keys", "is_tree_node",
    "tree_reduce_associative",
]


class _NodeType(NamedTuple):
    flatten: Callable      # node -> (children, aux_data)
    unflatten: Callable    # (aux_data, children) -> node
    flatten_with_keys: Callable | None  # node -> (((key, child), ...), aux_data)


_registry: dict[type, _NodeType] = {}


def register_pytree_node(nodetype: type, flatten_func, unflatten_func, flatten_with_keys_func=None):
    """Register ``nodetype`` as a container: ``flatten_func(x) -> (children, aux)`` and
    ``unflatten_func(aux, children) -> x``. Returns None, as JAX's does (the class
    decorators below return the class)."""
    if nodetype in _registry:
        raise ValueError(f"{nodetype.__name__} is already registered as a pytree node")
    _registry[nodetype] = _NodeType(flatten_func, unflatten_func, flatten_with_keys_func)


def register_pytree_node_class(cls):
    """Class decorator: ``cls.tree_flatten()`` and ``cls.tree_unflatten(aux, children)``."""
    register_pytree_node(cls, lambda x: x.tree_flatten(), cls.tree_unflatten)
    return cls


def register_pytree_with_keys(nodetype: type, flatten_with_keys, unflatten_func,
                              flatten_func=None):
    """Register ``nodetype`` as a container whose children have keys (for key paths).

    ``flatten_with_keys(x) -> (((key, child), ...), aux)`` and ``unflatten_func(aux,
    children) -> x``; ``flatten_func`` (children without keys) is derived when omitted.

        >>> class Pair:
        ...     def __init__(self, a, b): self.a, self.b = a, b
        >>> register_pytree_with_keys(
        ...     Pair, lambda p: (((GetAttrKey("a"), p.a), (GetAttrKey("b"), p.b)), None),
        ...     lambda aux, children: Pair(*children))
        >>> [keystr(path) for path, _ in tree_flatten_with_path(Pair(1, [2]))[0]]
        ['.a', '.b[0]']
    """
    if flatten_func is None:
        def flatten_func(x):
            keyed, aux = flatten_with_keys(x)
            return [child for _, child in keyed], aux
    register_pytree_node(nodetype, flatten_func, unflatten_func, flatten_with_keys)


def register_pytree_with_keys_class(cls):
    """Class decorator: ``cls.tree_flatten_with_keys()`` gives ``(((key, child), ...), aux)``
    and ``cls.tree_unflatten(aux, children)`` rebuilds; a ``tree_flatten`` method, if the
    class has one, is used where keys are not needed."""
    flatten = getattr(cls, "tree_flatten", None)
    register_pytree_with_keys(cls, lambda x: x.tree_flatten_with_keys(), cls.tree_unflatten,
                              (lambda x: x.tree_flatten()) if flatten is not None else None)
    return cls


def register_static(cls):
    """Class decorator: instances of ``cls`` become part of the tree *structure* (a node with
    no children whose auxiliary data is the instance), so they are never leaves and never
    traced. Instances must be hashable and comparable, like ``jit`` static arguments.

        >>> @register_static
        ... class Tag:
        ...     def __init__(self, name): self.name = name
        ...     def __hash__(self): return hash(self.name)
        ...     def __eq__(self, other): return isinstance(other, Tag) and other.name == self.name
        >>> tree_leaves([Tag("x"), 1.0])
        [1.0]
    """
    register_pytree_node(cls, lambda x: ((), x), lambda aux, _: aux, lambda x: ((), x))
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


# A key path is the tuple of keys from the root to a leaf; an entry is any hashable key
# (the classes above for the built-in containers, anything a custom node chooses).
KeyEntry = TypeVar("KeyEntry", bound=Any)
KeyPath = tuple[KeyEntry, ...]


def _simple_key(k) -> str:
    for field in ("key", "idx", "name"):
        if hasattr(k, field) and type(k) in (DictKey, SequenceKey, GetAttrKey,
                                              FlattenedIndexKey):
            return str(getattr(k, field))
    return str(k)


def keystr(keys, *, simple: bool = False, separator: str = "") -> str:
    """Render a key path, e.g. ``['params'][0].w``; ``simple``: each key bare
    (``params``, ``0``, ``w``), joined with ``separator`` (e.g. ``"/"``)."""
    return separator.join(_simple_key(k) if simple else str(k) for k in keys)


def _argument_paths(fun, args, kwargs) -> list[str]:
    """A name per leaf of the flattened ``(args, kwargs)``, for error messages: the parameter
    the leaf binds (from ``fun``'s signature) and its path inside it, ``x``, ``p['w']``, or
    ``args[1]`` when the signature cannot be read. Keyword arguments come in sorted order,
    after the positional ones, as ``tree_flatten`` orders them."""
    try:
        bound = inspect.signature(fun).bind(*args, **kwargs)
    except (TypeError, ValueError):
        bound = None
    if bound is not None:
        var_kw = next((n for n, p in bound.signature.parameters.items()
                       if p.kind is inspect.Parameter.VAR_KEYWORD), None)
        named = [(n, x) for n, x in bound.arguments.items() if n not in kwargs and n != var_kw]
        named += [(k if k in bound.arguments else f"{var_kw}['{k}']", kwargs[k])
                  for k in sorted(kwargs)]
    else:
        named = [("args", tuple(args))] + [(f"kwargs['{k}']", kwargs[k]) for k in sorted(kwargs)]
    return [f"{name}{keystr(path)}" for name, x in named
            for path, _ in tree_flatten_with_path(x)[0]]


# ---- built-in containers ----------------------------------------------------------------------

def _sorted_keys(d):
    # a dict's children are in sorted key order, so its keys must be mutually comparable
    try:
        return sorted(d)
    except TypeError as err:
        raise ValueError("Comparator raised exception while sorting pytree dictionary keys: "
                         f"{sorted(map(repr, d))} ({err})") from None


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
            self.num_leaves = sum([c.num_leaves for c in children])
            self.num_nodes = 1 + sum([c.num_nodes for c in children])
        self._hash = None

    def _node_key(self):
        """This node's type and auxiliary data, without its children."""
        aux = self.aux
        if self.kind == "custom":
            aux = (aux[0], _hashable(aux[1]))
        return (self.kind, aux)

    def _key(self):
        return self._node_key() + (self.children,)

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
        if self.kind == "dict":
            return "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(self.aux, inner)) + "}"
        # the other nodes as JAX prints them: CustomNode(type[auxiliary data], [children])
        children = "[" + ", ".join(inner) + "]"
        if self.kind == "odict":
            return f"CustomNode(OrderedDict[{self.aux!r}], {children})"
        if self.kind == "ddict":
            return f"CustomNode(defaultdict[{self.aux!r}], {children})"
        if self.kind == "namedtuple":
            return f"CustomNode(namedtuple[{self.aux.__name__}], {children})"
        return f"CustomNode({self.aux[0].__name__}[{self.aux[1]}], {children})"


def _hashable(aux):
    try:
        hash(aux)
        return aux
    except TypeError:
        return repr(aux)


_LEAF = PyTreeDef("leaf", None, ())


def _flatten(x, leaves, is_leaf, with_path=None, path=(), leaf_takes_path=False):
    if is_leaf is not None and (is_leaf(path, x) if leaf_takes_path else is_leaf(x)):
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
        _flatten(c, leaves, is_leaf, with_path, path + (k,), leaf_takes_path)
        for c, k in zip(children, keys))
    return PyTreeDef(kind, aux, child_defs)


_NONE = PyTreeDef("none", None, ())


def _plain_leaf(x, t) -> bool:
    """Whether ``x`` (of type ``t``, not a list, tuple, dict or None) is a leaf: cheaper than
    :func:`_builtin_node` for the leaves that make up nearly every tree."""
    return t not in _registry and t is not collections.OrderedDict \
        and t is not collections.defaultdict and not isinstance(x, tuple)


def _flatten_plain(x, leaves):
    """:func:`_flatten` without ``is_leaf`` or paths: the common case (every jit call, tree
    map and ``block_until_ready``), with lists, tuples and dicts handled inline."""
    t = type(x)
    if t is list or t is tuple:
        return PyTreeDef("list" if t is list else "tuple", len(x),
                         tuple([_flatten_plain(c, leaves) for c in x]))
    if t is dict:
        keys = _sorted_keys(x)
        return PyTreeDef("dict", tuple(keys), tuple([_flatten_plain(x[k], leaves) for k in keys]))
    if x is None:
        return _NONE
    if _plain_leaf(x, t):
        leaves.append(x)
        return _LEAF
    return _flatten(x, leaves, None)


def _leaves_plain(x, leaves) -> None:
    """The leaves of ``x`` in :func:`_flatten_plain`'s order, without building its treedef."""
    t = type(x)
    if t is list or t is tuple:
        for c in x:
            _leaves_plain(c, leaves)
    elif t is dict:
        for k in _sorted_keys(x):
            _leaves_plain(x[k], leaves)
    elif x is None:
        return
    elif _plain_leaf(x, t):
        leaves.append(x)
    else:
        _flatten(x, leaves, None)


def tree_flatten(tree, is_leaf: Callable[[Any], bool] | None = None):
    """Flatten ``tree`` to ``(leaves, treedef)``."""
    leaves: list = []
    treedef = _flatten_plain(tree, leaves) if is_leaf is None else _flatten(tree, leaves, is_leaf)
    return leaves, treedef


def tree_flatten_with_path(tree, is_leaf=None, is_leaf_takes_path: bool = False):
    """Flatten to ``([(key_path, leaf), ...], treedef)``. ``is_leaf_takes_path``: ``is_leaf``
    is called as ``is_leaf(key_path, x)``."""
    leaves: list = []
    treedef = _flatten(tree, leaves, is_leaf, with_path=True,
                       leaf_takes_path=is_leaf_takes_path)
    return leaves, treedef


def tree_leaves_with_path(tree, is_leaf=None, is_leaf_takes_path: bool = False):
    return tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)[0]


def _build(treedef: PyTreeDef, it):
    kind = treedef.kind
    if kind == "leaf":
        return next(it)
    children = [next(it) if c.kind == "leaf" else _build(c, it) for c in treedef.children]
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
    if is_leaf is not None:
        return tree_flatten(tree, is_leaf)[0]
    leaves: list = []
    _leaves_plain(tree, leaves)
    return leaves


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


def broadcast_prefix_to(treedef: PyTreeDef, prefix_tree, is_leaf=None) -> list:
    """The leaves of ``prefix_tree`` (a pytree whose structure is a prefix of ``treedef``),
    each repeated for every leaf of ``treedef`` below it. Works on the structure alone: no
    node of ``treedef`` is rebuilt, so user classes never see placeholder children.
    Raises ValueError when ``prefix_tree`` is not a prefix of ``treedef``.

        >>> broadcast_prefix_to(tree_structure(((1, 2), [3])), (0, None),
        ...                     is_leaf=lambda x: x is None)
        [0, 0, None]
    """
    leaves, prefix_def = tree_flatten(prefix_tree, is_leaf)
    it = iter(leaves)
    out: list = []

    def walk(prefix, full):
        if prefix.kind == "leaf":
            out.extend([next(it)] * full.num_leaves)
            return
        if prefix._node_key() != full._node_key() or len(prefix.children) != len(full.children):
            raise ValueError(f"pytree structure {prefix_def} is not a prefix of {treedef}")
        for p, f in zip(prefix.children, full.children):
            walk(p, f)

    walk(prefix_def, treedef)
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


def tree_map_with_path(f: Callable, tree, *rest, is_leaf=None,
                       is_leaf_takes_path: bool = False):
    keyed, treedef = tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)
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


# ---- one level at a time, treedef surgery, broadcasting, balanced reduction ------------------

def _one_level(tree, with_keys: bool):
    """``(children, aux)`` or ``((key, child) pairs, aux)`` of the top node; None for a leaf."""
    t = type(tree)
    builtin = _builtin_node(tree)
    if builtin is not None:
        kind, children, aux, keys = builtin
        if kind in ("tuple", "list"):
            aux = None  # the length is implied by the children
        elif kind == "none":
            aux = None
        if with_keys:
            return list(zip(keys, children)), aux
        if kind in ("tuple", "dict", "none"):
            return tuple(children), aux
        return list(children), aux
    node = _registry.get(t)
    if node is None:
        return None
    if with_keys:
        if node.flatten_with_keys is not None:
            keyed, aux = node.flatten_with_keys(tree)
            return list(keyed), aux
        children, aux = node.flatten(tree)
        return [(FlattenedIndexKey(i), c) for i, c in enumerate(children)], aux
    return node.flatten(tree)


def flatten_one_level(tree):
    """The children of the top node of ``tree`` and its auxiliary data (dict keys, the
    namedtuple class, a registered node's aux); raises ValueError for a leaf.

        >>> flatten_one_level({"b": 1, "a": [2, 3]})
        (([2, 3], 1), ('a', 'b'))
    """
    out = _one_level(tree, with_keys=False)
    if out is None:
        raise ValueError(f"can't tree-flatten type: {type(tree)}")
    return out


def flatten_one_level_with_keys(tree):
    """As :func:`flatten_one_level`, with each child paired with its key.

        >>> flatten_one_level_with_keys([1, 2])
        ([(SequenceKey(idx=0), 1), (SequenceKey(idx=1), 2)], None)
    """
    out = _one_level(tree, with_keys=True)
    if out is None:
        raise ValueError(f"can't tree-flatten type: {type(tree)}")
    return out


def is_tree_node(typ: type) -> bool:
    """Whether values of type ``typ`` are containers (built-in or registered) rather than
    leaves.

        >>> is_tree_node(list), is_tree_node(int)
        (True, False)
    """
    if not isinstance(typ, type):
        raise TypeError(f"is_tree_node takes a type, got {typ!r}; use is_tree_node(type(x))")
    if typ in (tuple, list, dict, type(None), collections.OrderedDict,
               collections.defaultdict) or typ in _registry:
        return True
    return issubclass(typ, tuple) and hasattr(typ, "_fields")


def treedef_children(treedef: PyTreeDef) -> list:
    """The structures of the top node's children (empty for a leaf).

        >>> treedef_children(tree_structure({"a": [1, 2], "b": 3}))
        [PyTreeDef([*, *]), PyTreeDef(*)]
    """
    return list(treedef.children)


def treedef_tuple(treedefs) -> PyTreeDef:
    """The structure of a tuple whose elements have the given structures.

        >>> treedef_tuple([tree_structure([1, 2]), tree_structure(3)])
        PyTreeDef(([*, *], *))
    """
    children = tuple(treedefs)
    for c in children:
        if not isinstance(c, PyTreeDef):
            raise TypeError(f"treedef_tuple expects PyTreeDefs, got {type(c).__name__}")
    return PyTreeDef("tuple", len(children), children)


def tree_broadcast(prefix_tree, full_tree, is_leaf=None):
    """``prefix_tree`` expanded to the structure of ``full_tree``: each leaf of the prefix is
    repeated at every leaf of the matching subtree of ``full_tree``.

        >>> tree_broadcast([1, {"a": 2}], [(3, 4), {"a": [5, 6]}])
        [(1, 1), {'a': [2, 2]}]
    """
    prefix_leaves, prefix_def = tree_flatten(prefix_tree, is_leaf)
    subtrees = _flatten_up_to(prefix_def, full_tree)
    leaves = []
    for leaf, subtree in zip(prefix_leaves, subtrees):
        leaves.extend([leaf] * len(tree_leaves(subtree, is_leaf)))
    return tree_structure(full_tree, is_leaf).unflatten(leaves)


def tree_reduce_associative(operation: Callable, tree, *, identity=..., is_leaf=None):
    """Reduce the leaves of ``tree`` with an associative ``operation``, combining them in a
    balanced binary tree (depth log n rather than n). ``identity`` is returned for a tree
    without leaves (an error without it).

        >>> tree_reduce_associative(lambda a, b: a + b, [1, 2, 3, 4, 5])
        15
    """
    leaves = tree_leaves(tree, is_leaf)
    if not leaves:
        if identity is ...:
            raise TypeError("tree_reduce_associative: the tree has no leaves; pass identity= "
                            "for the result of an empty reduction")
        return identity

    def reduce(items):
        if len(items) == 1:
            return items[0]
        half = len(items) // 2
        return operation(reduce(items[:half]), reduce(items[half:]))

    return reduce(leaves)


class PyTreeRegistry:
    """The table of container types that flattening consults (JAX's ``default_registry``):
    a method-style face of this module's functions over the one global registry."""

    def flatten(self, tree, leaf_predicate=None):
        return tree_flatten(tree, leaf_predicate)

    def flatten_with_path(self, tree, leaf_predicate=None):
        return tree_flatten_with_path(tree, leaf_predicate)

    def flatten_one_level(self, tree):
        """``(children, aux)`` of the top node, or None for a leaf."""
        return _one_level(tree, with_keys=False)

    def flatten_one_level_with_keys(self, tree):
        return _one_level(tree, with_keys=True)

    def is_node(self, type):  # noqa: A002 (JAX's argument name)
        return is_tree_node(type)

    def register_node(self, type, to_iterable, from_iterable,  # noqa: A002
                      to_iterable_with_keys=None):
        register_pytree_node(type, to_iterable, from_iterable, to_iterable_with_keys)

    def register_dataclass_node(self, type, data_fields, meta_fields, /):  # noqa: A002
        register_dataclass(type, data_fields=data_fields, meta_fields=meta_fields)

    def __repr__(self):
        return "<functrans.tree_util default pytree registry>"


default_registry = PyTreeRegistry()
