"""Random pytrees: one PRNG key per leaf, and random leaves shaped like a target tree."""
from __future__ import annotations

from functrans import numpy as jnp
from functrans import random
from functrans.tree_util import tree_map, tree_structure, tree_unflatten

__all__ = ["tree_split_key_like", "tree_random_like", "tree_unwrap_random_key_data"]


def tree_split_key_like(rng_key, target_tree):
    """``rng_key`` split into one key per leaf of ``target_tree``, in a tree of its shape.

        >>> import functrans.numpy as jnp
        >>> from functrans import random
        >>> keys = tree_split_key_like(random.key(0), {"a": jnp.ones(1), "b": jnp.ones(1)})
        >>> sorted(keys)
        ['a', 'b']
    """
    treedef = tree_structure(target_tree)
    keys = random.split(rng_key, treedef.num_leaves)
    return tree_unflatten(treedef, list(keys))


def tree_random_like(rng_key, target_tree, sampler=random.normal, dtype=None):
    """A tree like ``target_tree`` whose leaves are ``sampler(key, leaf.shape, dtype)``
    with an independent key per leaf (``dtype`` defaults to each leaf's).

        >>> import functrans.numpy as jnp
        >>> from functrans import random
        >>> tree_random_like(random.key(0), {"a": jnp.ones(3)})["a"].shape
        (3,)
    """
    keys = tree_split_key_like(rng_key, target_tree)
    return tree_map(
        lambda leaf, key: sampler(key, jnp.shape(leaf), dtype or jnp.asarray(leaf).dtype),
        target_tree, keys)


def tree_unwrap_random_key_data(input_tree):
    """The tree with typed PRNG keys (``random.key``) replaced by their raw ``uint32`` key
    data (``random.key_data``); other leaves are returned as they are.

        >>> from functrans import random
        >>> tree_unwrap_random_key_data({"k": random.key(0)})["k"].dtype
        dtype('uint32')
    """
    def is_key(x):
        return isinstance(x, random.PRNGKeyArray)

    return tree_map(lambda x: random.key_data(x) if is_key(x) else x, input_tree, is_leaf=is_key)
