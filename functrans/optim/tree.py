"""``optim.tree``: arithmetic, casting, randomness and lookups on pytrees, as optax's
``optax.tree`` (the same functions as ``optim.tree_utils.tree_*``).

    >>> import functrans.numpy as jnp
    >>> from functrans.optim import tree
    >>> params = {"a": jnp.array([3.0]), "b": jnp.array([4.0])}
    >>> tree.norm(params), tree.add_scale(params, 0.5, params)["a"]
    (Array(5., dtype=float32), Array([4.5], dtype=float32))
"""
from __future__ import annotations

from functrans.optim import _tree_casting, _tree_math, _tree_random, _tree_state

cast = _tree_casting.tree_cast
cast_like = _tree_casting.tree_cast_like
dtype = _tree_casting.tree_dtype
random_like = _tree_random.tree_random_like
split_key_like = _tree_random.tree_split_key_like
unwrap_random_key_data = _tree_random.tree_unwrap_random_key_data
get = _tree_state.tree_get
get_all_with_path = _tree_state.tree_get_all_with_path
map_params = _tree_state.tree_map_params
set = _tree_state.tree_set  # noqa: A001 (optax's name)
add = _tree_math.tree_add
add_scale = _tree_math.tree_add_scale
allclose = _tree_math.tree_allclose
batch_shape = _tree_math.tree_batch_shape
bias_correction = _tree_math.tree_bias_correction
clip = _tree_math.tree_clip
conj = _tree_math.tree_conj
div = _tree_math.tree_div
full_like = _tree_math.tree_full_like
max = _tree_math.tree_max  # noqa: A001 (optax's name)
min = _tree_math.tree_min  # noqa: A001 (optax's name)
mul = _tree_math.tree_mul
norm = _tree_math.tree_norm
ones_like = _tree_math.tree_ones_like
real = _tree_math.tree_real
scale = _tree_math.tree_scale
size = _tree_math.tree_size
sub = _tree_math.tree_sub
sum = _tree_math.tree_sum  # noqa: A001 (optax's name)
update_infinity_moment = _tree_math.tree_update_infinity_moment
update_moment = _tree_math.tree_update_moment
update_moment_per_elem_norm = _tree_math.tree_update_moment_per_elem_norm
vdot = _tree_math.tree_vdot
where = _tree_math.tree_where
zeros_like = _tree_math.tree_zeros_like

__all__ = ["add", "add_scale", "allclose", "batch_shape", "bias_correction", "cast",
           "cast_like", "clip", "conj", "div", "dtype", "full_like", "get",
           "get_all_with_path", "map_params", "max", "min", "mul", "norm", "ones_like",
           "random_like", "real", "scale", "set", "size", "split_key_like", "sub", "sum",
           "unwrap_random_key_data", "update_infinity_moment", "update_moment",
           "update_moment_per_elem_norm", "vdot", "where", "zeros_like"]
