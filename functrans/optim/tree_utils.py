"""``optim.tree_utils``: the pytree helpers of :mod:`functrans.optim.tree` under their
``tree_*`` names, and :class:`NamedTupleKey`, as optax's ``optax.tree_utils``.

    >>> import functrans.numpy as jnp
    >>> from functrans.optim import tree_utils
    >>> tree_utils.tree_sum({"a": jnp.ones(3)})
    Array(3., dtype=float32)
"""
from __future__ import annotations

import functools
import warnings

from functrans.optim._tree_casting import tree_cast, tree_cast_like, tree_dtype
from functrans.optim._tree_math import (tree_add, tree_add_scale, tree_allclose,
                                        tree_batch_shape, tree_bias_correction, tree_clip,
                                        tree_conj, tree_div, tree_full_like, tree_max, tree_min,
                                        tree_mul, tree_norm, tree_ones_like, tree_real,
                                        tree_scale, tree_size, tree_sub, tree_sum,
                                        tree_update_infinity_moment, tree_update_moment,
                                        tree_update_moment_per_elem_norm, tree_vdot, tree_where,
                                        tree_zeros_like)
from functrans.optim._tree_random import (tree_random_like, tree_split_key_like,
                                          tree_unwrap_random_key_data)
from functrans.optim._tree_state import (NamedTupleKey, tree_get, tree_get_all_with_path,
                                         tree_map_params, tree_set)

__all__ = ["NamedTupleKey", "tree_add", "tree_add_scale", "tree_allclose", "tree_batch_shape",
           "tree_bias_correction", "tree_cast", "tree_cast_like", "tree_clip", "tree_conj",
           "tree_div", "tree_dtype", "tree_full_like", "tree_get", "tree_get_all_with_path",
           "tree_map_params", "tree_max", "tree_min", "tree_mul", "tree_norm",
           "tree_ones_like", "tree_random_like", "tree_real", "tree_scale", "tree_set",
           "tree_size", "tree_split_key_like", "tree_sub", "tree_sum",
           "tree_unwrap_random_key_data", "tree_update_infinity_moment", "tree_update_moment",
           "tree_update_moment_per_elem_norm", "tree_vdot", "tree_where", "tree_zeros_like"]

# older names optax 0.2.8 still answers with a DeprecationWarning
_DEPRECATED = {
    "tree_scalar_mul": ("optax.tree_utils.tree_scalar_mul is deprecated: use "
                        "optax.tree_utils.tree_scale (optax v0.2.5 or newer).", tree_scale),
    "tree_add_scalar_mul": ("optax.tree_utils.tree_scalar_mul is deprecated: use "
                            "optax.tree_utils.tree_scale (optax v0.2.5 or newer).",
                            tree_add_scale),
    "tree_l1_norm": ("optax.tree_utils.tree_l1_norm is deprecated: use "
                     "optax.tree_utils.tree_norm(..., ord=1) (optax v0.2.5 or newer).",
                     functools.partial(tree_norm, ord=1)),
    "tree_l2_norm": ("optax.tree_utils.tree_l2_norm is deprecated: use "
                     "optax.tree_utils.tree_norm (optax v0.2.5 or newer).",
                     functools.partial(tree_norm, ord=2)),
    "tree_linf_norm": ("optax.tree_utils.tree_linf_norm is deprecated: use "
                       "optax.tree_utils.tree_norm(..., ord=jnp.inf) (optax v0.2.5 or newer).",
                       functools.partial(tree_norm, ord="inf")),
}


def __getattr__(name):
    if name in _DEPRECATED:
        message, replacement = _DEPRECATED[name]
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        return replacement
    raise AttributeError(f"module 'functrans.optim.tree_utils' has no attribute '{name}'")
