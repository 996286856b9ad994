"""The argument and result structures of an exported function (PyTreeDefs) as JSON.

Tuples, lists, dicts (with str, int, float, bool or None keys), ``OrderedDict`` and None
are built in. A named tuple or a custom pytree node must be registered for serialization
(in the exporting and in the loading process) under a name of the user's choosing, as in
JAX: :func:`register_namedtuple_serialization`, :func:`register_pytree_node_serialization`.

    >>> from functrans.tree_util import tree_structure
    >>> tree = tree_structure(((1, 2), {"lr": 0.1}))
    >>> decode_tree(encode_tree(tree)) == tree
    True
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from functrans import tree_util
from functrans.tree_util import PyTreeDef

# serialized name -> (node type, serialize aux data, deserialize aux data)
_by_name: dict[str, tuple] = {}
_by_type: dict[type, str] = {}


def register_pytree_node_serialization(nodetype: type, *, serialized_name: str,
                                       serialize_auxdata: Callable[[Any], bytes],
                                       deserialize_auxdata: Callable[[bytes], Any]):
    """Let ``Exported.serialize`` write trees with nodes of the registered pytree type
    ``nodetype`` (as ``serialized_name``, with its aux data as the bytes
    ``serialize_auxdata`` returns); ``deserialize`` rebuilds them. Returns ``nodetype``.

        >>> class Pair:
        ...     def __init__(self, a, b): self.a, self.b = a, b
        >>> _ = tree_util.register_pytree_node(Pair, lambda p: ((p.a, p.b), None),
        ...                                    lambda _, c: Pair(*c))
        >>> register_pytree_node_serialization(
        ...     Pair, serialized_name="docs.Pair", serialize_auxdata=lambda _: b"",
        ...     deserialize_auxdata=lambda _: None) is Pair
        True
    """
    if serialized_name in _by_name and _by_name[serialized_name][0] is not nodetype:
        raise ValueError(f"a different type is registered for serialization as "
                         f"{serialized_name!r}")
    if nodetype in _by_type and _by_type[nodetype] != serialized_name:
        raise ValueError(f"{nodetype.__name__} is already registered for serialization as "
                         f"{_by_type[nodetype]!r}")
    _by_name[serialized_name] = (nodetype, serialize_auxdata, deserialize_auxdata)
    _by_type[nodetype] = serialized_name
    return nodetype


def register_namedtuple_serialization(nodetype: type, *, serialized_name: str):
    """Let ``Exported.serialize`` write trees holding the named tuple class ``nodetype``
    (as ``serialized_name``). Returns ``nodetype``.

        >>> from typing import NamedTuple
        >>> class Point(NamedTuple):
        ...     x: float
        ...     y: float
        >>> register_namedtuple_serialization(Point, serialized_name="docs.Point") is Point
        True
    """
    if not (issubclass(nodetype, tuple) and hasattr(nodetype, "_fields")):
        raise ValueError(f"{nodetype.__name__} is not a named tuple class")
    return register_pytree_node_serialization(
        nodetype, serialized_name=serialized_name, serialize_auxdata=lambda _: b"",
        deserialize_auxdata=lambda _: None)


def _encode_key(key):
    if key is None or isinstance(key, (bool, int, str)):
        return [type(key).__name__, key]
    if isinstance(key, float):
        return ["float", repr(key)]
    raise ValueError(f"a dictionary key of type {type(key).__name__} ({key!r}) cannot be "
                     "serialized; use str or int keys")


def _decode_key(doc):
    if not (isinstance(doc, list) and len(doc) == 2):
        raise ValueError(f"malformed dictionary key {doc!r}")
    kind, value = doc
    expected = {"NoneType": type(None), "bool": bool, "int": int, "str": str}.get(kind)
    if kind == "float" and isinstance(value, str):
        return float(value)
    if expected is None or type(value) is not expected:
        raise ValueError(f"malformed dictionary key {doc!r}")
    return value


def encode_tree(tree: PyTreeDef):
    """``tree`` as JSON; ``ValueError`` for a node type that is not registered."""
    kind = tree.kind
    children = [encode_tree(c) for c in tree.children]
    if kind in ("leaf", "none"):
        return kind
    if kind in ("tuple", "list"):
        return {kind: children}
    if kind in ("dict", "odict"):
        return {kind: [[_encode_key(k), c] for k, c in zip(tree.aux, children)]}
    nodetype = tree.aux if kind == "namedtuple" else tree.aux[0] if kind == "custom" else None
    name = _by_type.get(nodetype)
    if name is None:
        what = nodetype.__name__ if isinstance(nodetype, type) else kind
        raise ValueError(f"Cannot serialize a pytree node of type {what}: register it with "
                         "functrans.export.register_namedtuple_serialization or "
                         "register_pytree_node_serialization (in the exporting and in the "
                         "loading process)")
    aux = b"" if kind == "namedtuple" else _by_name[name][1](tree.aux[1])
    if not isinstance(aux, (bytes, bytearray)):
        raise ValueError(f"serialize_auxdata of {name!r} must return bytes, got "
                         f"{type(aux).__name__}")
    return {"node": name, "aux": bytes(aux).hex(), "children": children}


def decode_tree(doc) -> PyTreeDef:
    """The PyTreeDef written by :func:`encode_tree`; ``ValueError`` if malformed or if a
    node's type is not registered in this process."""
    if doc == "leaf":
        return tree_util.tree_structure(0)
    if doc == "none":
        return tree_util.tree_structure(None)
    if not (isinstance(doc, dict) and doc):
        raise ValueError(f"malformed pytree structure {str(doc)[:80]}")
    if "node" in doc:
        return _decode_registered(doc)
    if len(doc) != 1:
        raise ValueError(f"malformed pytree structure {str(doc)[:80]}")
    (kind, body), = doc.items()
    if not isinstance(body, list):
        raise ValueError(f"malformed pytree structure {str(doc)[:80]}")
    if kind in ("tuple", "list"):
        children = tuple(decode_tree(c) for c in body)
        return PyTreeDef(kind, len(children), children)
    if kind in ("dict", "odict"):
        if not all(isinstance(e, list) and len(e) == 2 for e in body):
            raise ValueError(f"malformed {kind} structure")
        keys = tuple(_decode_key(k) for k, _ in body)
        if kind == "dict" and len(set(keys)) != len(keys):
            raise ValueError("malformed dict structure: repeated keys")
        return PyTreeDef(kind, keys, tuple(decode_tree(c) for _, c in body))
    raise ValueError(f"malformed pytree structure: unknown node kind {kind!r}")


def _decode_registered(doc) -> PyTreeDef:
    name, children = doc.get("node"), doc.get("children")
    if not isinstance(children, list) or not isinstance(doc.get("aux"), str):
        raise ValueError("malformed pytree node")
    entry = _by_name.get(name) if isinstance(name, str) else None
    if entry is None:
        raise ValueError(f"Cannot deserialize a pytree node serialized as {name!r}: register "
                         "its type with functrans.export.register_namedtuple_serialization "
                         "or register_pytree_node_serialization before deserializing")
    nodetype, _, deserialize_aux = entry
    children = tuple(decode_tree(c) for c in children)
    if issubclass(nodetype, tuple) and hasattr(nodetype, "_fields") \
            and nodetype not in tree_util._registry:
        if len(children) != len(nodetype._fields):
            raise ValueError(f"malformed {name} node: {len(children)} children")
        return PyTreeDef("namedtuple", nodetype, children)
    return PyTreeDef("custom", (nodetype, deserialize_aux(bytes.fromhex(doc["aux"]))), children)


def flat_names(tree: PyTreeDef, top: Sequence[str] = ("args", "kwargs")) -> list[str]:
    """A name per leaf of an ``(args, kwargs)`` tree, as JAX writes them: ``args[0]``,
    ``kwargs['w']``, ``args[1]['b'][0]``."""
    leaves = tree_util.tree_unflatten(tree, [None] * tree.num_leaves)
    names = []
    for path, _ in tree_util.tree_flatten_with_path(leaves, is_leaf=lambda x: x is None)[0]:
        head = top[getattr(path[0], "idx", 0)] if path else "args"
        names.append(head + tree_util.keystr(path[1:]))
    return names
