"""Dtypes of pytrees: cast every leaf, or find the one dtype of a tree."""
from __future__ import annotations

import functools

from functrans import numpy as jnp
from functrans.tree_util import tree_leaves, tree_leaves_with_path, keystr, tree_map

__all__ = ["tree_cast", "tree_cast_like", "tree_dtype"]


def tree_cast(tree, dtype):
    """Every leaf converted to ``dtype`` (None: unchanged).

        >>> import functrans.numpy as jnp
        >>> tree_cast({"a": jnp.ones(2)}, jnp.int32)
        {'a': Array([1, 1], dtype=int32)}
    """
    if dtype is None:
        return tree
    return tree_map(lambda t: jnp.asarray(t).astype(dtype), tree)


def tree_cast_like(tree, other_tree):
    """Every leaf of ``tree`` converted to the dtype of the matching leaf of ``other_tree``
    (leaves without a dtype, like Python numbers, are left as they are).

        >>> import functrans.numpy as jnp
        >>> tree_cast_like({"a": jnp.ones(2)}, {"a": jnp.zeros(2, jnp.int32)})
        {'a': Array([1, 1], dtype=int32)}
    """
    return tree_map(lambda t, o: jnp.asarray(t).astype(o.dtype) if hasattr(o, "dtype") else t,
                    tree, other_tree)


def _lower_dtype(dtype1, dtype2):
    if jnp.promote_types(dtype1, dtype2) == dtype1:
        return dtype2
    if jnp.promote_types(dtype1, dtype2) == dtype2:
        return dtype1
    raise ValueError(f"Cannot compare dtype of dtype1={dtype1!r} and dtype2={dtype2!r}. "
                     f"Neither {dtype1} nor {dtype2} can be promoted to the other.")


def _higher_dtype(dtype1, dtype2):
    return dtype2 if _lower_dtype(dtype1, dtype2) == dtype1 else dtype1


def tree_dtype(tree, mixed_dtype_handler=None):
    """The dtype of the leaves of ``tree``. With leaves of several dtypes,
    ``mixed_dtype_handler`` decides: None raises, ``"promote"`` gives their promotion,
    ``"highest"`` / ``"lowest"`` the one the others promote to / from.

        >>> import functrans.numpy as jnp
        >>> tree_dtype({"a": jnp.ones(2), "b": jnp.ones(2, jnp.bfloat16)}, "lowest")
        dtype(bfloat16)
    """
    leaves = tree_leaves(tree)
    if not leaves:
        return jnp.asarray(leaves).dtype
    dtypes = [jnp.asarray(x).dtype for x in leaves]
    if mixed_dtype_handler is None:
        errors = [f"Expected dtype={dtypes[0]!r} for {keystr(path)} but got "
                  f"{jnp.asarray(x).dtype}." for path, x in tree_leaves_with_path(tree)
                  if jnp.asarray(x).dtype != dtypes[0]]
        if errors:
            raise ValueError("\n".join(errors))
        return dtypes[0]
    if mixed_dtype_handler == "promote":
        return functools.reduce(jnp.promote_types, dtypes)
    if mixed_dtype_handler == "highest":
        return functools.reduce(_higher_dtype, dtypes)
    if mixed_dtype_handler == "lowest":
        return functools.reduce(_lower_dtype, dtypes)
    raise ValueError(f"Invalid value for mixed_dtype_handler={mixed_dtype_handler!r}, "
                     "possible values are: None, \"promote\", \"highest\", \"lowest\".")
