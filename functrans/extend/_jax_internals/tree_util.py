"""``jax._src.tree_util``: the public pytree functions (``functrans.tree_util``) and the
registry of node types, ``_registry``, which (as JAX's) holds the built-in containers too.
"""
from __future__ import annotations

import collections
from collections.abc import Mapping

from functrans import tree_util as _tree_util
from functrans.tree_util import *  # noqa: F401,F403

_BUILTIN_NODES = (tuple, list, dict, type(None), collections.OrderedDict,
                  collections.defaultdict)


class _NodeTypes(Mapping):
    """Every pytree node type: the built-in containers, then the registered types (a live
    view of ``functrans.tree_util``'s registry)."""

    def __getitem__(self, node_type):
        if node_type in _BUILTIN_NODES:
            return node_type
        return _tree_util._registry[node_type]

    def __contains__(self, node_type):
        return node_type in _BUILTIN_NODES or node_type in _tree_util._registry

    def __iter__(self):
        yield from _BUILTIN_NODES
        yield from list(_tree_util._registry)

    def __len__(self):
        return len(_BUILTIN_NODES) + len(_tree_util._registry)


_registry = _NodeTypes()
