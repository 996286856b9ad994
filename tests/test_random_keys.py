"""Typed PRNG keys (``random.key``): a key array of dtype ``key<fry>``, as in JAX.

Keys are values of their own type: they have a shape, index and reshape like arrays, pass
through every transform, pytree utility and checkpoint, and refuse arithmetic. Raw keys
(``PRNGKey``, ``uint32[2]``) keep working everywhere, with the same numbers.
"""
from __future__ import annotations

import numpy as np
import pytest

import functrans
import functrans.dtypes as dtypes
import functrans.numpy as jnp
import functrans.random as random
from functrans import checkpoint, lax, tree_util


def _data(keys):
    return np.asarray(random.key_data(keys))


# =============================================================================================
# What a key is
# =============================================================================================

def test_a_key_is_a_scalar_of_an_extended_dtype():
    k = random.key(0)
    assert k.shape == () and k.ndim == 0 and k.size == 1
    assert str(k.dtype) == "key<fry>" and k.dtype == random.key_dtype() == random.key_dtype(
        "threefry2x32")
    assert jnp.issubdtype(k.dtype, dtypes.prng_key)
    assert dtypes.issubdtype(k.dtype, dtypes.extended)
    assert not jnp.issubdtype(k.dtype, np.integer) and not jnp.issubdtype(k.dtype, np.uint32)
    assert not jnp.issubdtype(np.uint32, dtypes.prng_key)
    aval = functrans.typeof(k)
    assert isinstance(aval, functrans.core.ShapedArray)
    assert aval.shape == () and aval.dtype == k.dtype and repr(aval) == "ShapedArray(key<fry>[])"
    assert repr(functrans.typeof(random.split(k, 3))) == "ShapedArray(key<fry>[3])"
    assert repr(k).startswith("Array((), dtype=key<fry>) overlaying:")


def test_key_data_and_wrap_key_data():
    assert _data(random.key(0)).tolist() == [0, 0]
    assert _data(random.key(42)).tolist() == [0, 42]
    np.testing.assert_array_equal(_data(random.key(7)), np.asarray(random.PRNGKey(7)))
    raw = random.split(random.PRNGKey(5), 4)
    wrapped = random.wrap_key_data(raw)
    assert wrapped.shape == (4,) and wrapped.dtype == random.key_dtype()
    np.testing.assert_array_equal(_data(wrapped), np.asarray(raw))
    # raw keys are their own data; the implementation is known for both forms
    np.testing.assert_array_equal(_data(raw), np.asarray(raw))
    assert random.key_impl(wrapped) == random.key_impl(raw) == "threefry2x32"
    assert bool(random.wrap_key_data(random.key_data(random.key(3))) == random.key(3))
    assert bool(random.clone(random.key(3)) == random.key(3))
    with pytest.raises(TypeError, match="typed keys"):
        random.wrap_key_data(random.key(0))
    with pytest.raises(TypeError, match="uint32"):
        random.wrap_key_data(jnp.zeros((3, 2), jnp.int32))
    with pytest.raises(NotImplementedError, match="rbg"):
        random.key(0, impl="rbg")


def test_equality_compares_both_words():
    keys = random.split(random.key(0), 3)
    assert bool(random.key(1) == random.key(1)) and not bool(random.key(1) == random.key(2))
    assert bool(random.key(1) != random.key(2))
    np.testing.assert_array_equal(np.asarray(keys == keys[1]), [False, True, False])
    # keys that share a word are still different keys
    assert not bool(random.wrap_key_data(jnp.array([0, 1], jnp.uint32))
                    == random.wrap_key_data(jnp.array([0, 2], jnp.uint32)))


@pytest.mark.parametrize("op", [
    lambda k: k + 1, lambda k: 1 + k, lambda k: k * 2, lambda k: -k, lambda k: k < k,
    lambda k: k ^ k, lambda k: jnp.add(k, 1), lambda k: jnp.sin(k), lambda k: jnp.asarray(k),
    lambda k: np.asarray(k), lambda k: k.astype(jnp.uint32), lambda k: jnp.ones(2) + k,
    lambda k: float(k), lambda k: bool(k),
])
def test_arithmetic_on_keys_raises_type_error(op):
    with pytest.raises(TypeError, match="key"):
        op(random.key(0))


def test_seeds_that_are_not_integer_scalars_are_refused():
    with pytest.raises(TypeError, match="scalar seed"):
        random.key(jnp.arange(2))
    with pytest.raises(TypeError, match="PRNG key"):
        random.key(random.key(0))
    with pytest.raises(TypeError, match="integer"):
        random.key(1.5)


# =============================================================================================
# Deriving keys and drawing from them
# =============================================================================================

def test_split_and_fold_in_keep_the_form_of_their_key():
    typed, raw = random.key(0), random.PRNGKey(0)
    keys = random.split(typed)
    assert isinstance(keys, random.PRNGKeyArray) and keys.shape == (2,)
    np.testing.assert_array_equal(_data(keys), np.asarray(random.split(raw)))
    assert _data(keys).tolist() == [[1797259609, 2579123966], [928981903, 3453687069]]
    assert random.split(typed, (2, 3)).shape == (2, 3)
    assert random.split(raw, (2, 3)).shape == (2, 3, 2)
    folded = random.fold_in(typed, 7)
    assert isinstance(folded, random.PRNGKeyArray) and folded.shape == ()
    assert _data(folded).tolist() == [2716826189, 292468403]
    with pytest.raises(ValueError, match="single key"):
        random.split(keys)


SAMPLERS = {
    "uniform": lambda k: random.uniform(k, (3,)),
    "normal": lambda k: random.normal(k, (2, 2)),
    "randint": lambda k: random.randint(k, (4,), -3, 7),
    "bits": lambda k: random.bits(k, (3,)),
    "permutation": lambda k: random.permutation(k, 6),
    "gamma": lambda k: random.gamma(k, 1.5, (3,)),
    "poisson": lambda k: random.poisson(k, 4.0, (3,)),
    "categorical": lambda k: random.categorical(k, jnp.zeros(4), shape=(3,)),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_every_sampler_takes_typed_and_raw_keys_alike(name):
    sample = SAMPLERS[name]
    for seed in (0, 42):
        np.testing.assert_array_equal(np.asarray(sample(random.key(seed))),
                                      np.asarray(sample(random.PRNGKey(seed))))
    with pytest.raises(ValueError, match="single key"):
        sample(random.split(random.key(0), 2))


# =============================================================================================
# Key arrays as arrays: shape, indexing, reshaping
# =============================================================================================

def test_indexing_and_reshaping_act_on_keys():
    keys = random.split(random.key(3), 6)
    data = _data(keys)
    assert len(keys) == 6 and keys[2].shape == () and keys[1:4].shape == (3,)
    np.testing.assert_array_equal(_data(keys[2]), data[2])
    np.testing.assert_array_equal(_data(keys[::2]), data[::2])
    np.testing.assert_array_equal(_data(keys[jnp.array([5, 0])]), data[[5, 0]])
    grid = keys.reshape(2, 3)
    assert grid.shape == (2, 3) and keys.reshape((3, 2)).shape == (3, 2)
    np.testing.assert_array_equal(_data(grid[1, 2]), data[5])
    np.testing.assert_array_equal(_data(grid.T), data.reshape(2, 3, 2).transpose(1, 0, 2))
    assert grid.ravel().shape == (6,) and grid.flatten().shape == (6,)
    assert keys[None].shape == (1, 6) and keys[None].squeeze(0).shape == (6,)
    assert grid.swapaxes(0, 1).shape == (3, 2)
    assert [k.shape for k in keys] == [()] * 6
    first, second = random.split(random.key(0))          # unpacking iterates
    np.testing.assert_array_equal(_data(second), _data(random.split(random.key(0)))[1])


# =============================================================================================
# Transforms
# =============================================================================================

def test_vmap_makes_and_consumes_key_arrays():
    keys = functrans.vmap(random.key)(jnp.arange(4))
    assert isinstance(keys, random.PRNGKeyArray) and keys.shape == (4,)
    np.testing.assert_array_equal(_data(keys), [[0, s] for s in range(4)])
    draws = functrans.vmap(lambda k: random.normal(k, (3,)))(keys)
    np.testing.assert_array_equal(np.asarray(draws),
                                  np.stack([np.asarray(random.normal(k, (3,))) for k in keys]))
    # axes mean the same for the key array and its words
    grid = random.split(random.key(1), (2, 3))
    by_column = functrans.vmap(functrans.vmap(lambda k: random.bits(k, (2,))),
                               in_axes=1, out_axes=1)(grid)
    assert by_column.shape == (2, 3, 2)
    np.testing.assert_array_equal(np.asarray(by_column[1, 2]),
                                  np.asarray(random.bits(grid[1, 2], (2,))))
    split_each = functrans.vmap(random.split, out_axes=-1)(random.split(random.key(2), 5))
    assert split_each.shape == (2, 5)
    np.testing.assert_array_equal(_data(split_each[:, 3]),
                                  _data(random.split(random.split(random.key(2), 5)[3])))


def test_jit_takes_and_returns_key_arrays():
    @functrans.jit
    def step(state):
        key, subkey = random.split(state["key"])
        return {"key": key, "x": random.uniform(subkey, (2,))}

    state = {"key": random.key(0)}
    out = step(state)
    assert isinstance(out["key"], random.PRNGKeyArray) and out["key"].shape == ()
    key, subkey = random.split(random.key(0))
    np.testing.assert_array_equal(_data(out["key"]), _data(key))
    np.testing.assert_array_equal(np.asarray(out["x"]), np.asarray(random.uniform(subkey, (2,))))
    made = functrans.jit(random.key)(3)
    assert isinstance(made, random.PRNGKeyArray) and _data(made).tolist() == [0, 3]
    assert isinstance(step(out)["key"], random.PRNGKeyArray)          # the cached program


def test_scan_carries_keys_and_slices_key_arrays():
    def body(key, _):
        key, subkey = random.split(key)
        return key, random.bits(subkey)

    last, draws = lax.scan(body, random.key(0), None, length=4)
    key, expected = random.key(0), []
    for _ in range(4):
        key, subkey = random.split(key)
        expected.append(int(random.bits(subkey)))
    assert np.asarray(draws).tolist() == expected and bool(last == key)
    keys = random.split(random.key(1), 3)
    _, per_key = lax.scan(lambda c, k: (c, random.uniform(k)), 0.0, keys)
    np.testing.assert_array_equal(np.asarray(per_key), [float(random.uniform(k)) for k in keys])
    final = lax.while_loop(lambda s: s[1] < 3, lambda s: (random.fold_in(s[0], s[1]), s[1] + 1),
                           (random.key(0), 0))[0]
    assert isinstance(final, random.PRNGKeyArray)


def test_pmap_maps_over_key_arrays():
    functrans.config.update("cpu_device_count", 2)
    keys = random.split(random.key(0), 2)
    draws = functrans.pmap(lambda k: random.normal(k, (3,)))(keys)
    # compiled: erf_inv may round differently by an ulp
    np.testing.assert_allclose(np.asarray(draws),
                               np.stack([np.asarray(random.normal(k, (3,))) for k in keys]),
                               rtol=1e-6)
    new_keys = functrans.pmap(lambda k: random.fold_in(k, lax.axis_index("i")),
                              axis_name="i")(keys)
    assert isinstance(new_keys, random.PRNGKeyArray) and new_keys.shape == (2,)
    np.testing.assert_array_equal(_data(new_keys[1]), _data(random.fold_in(keys[1], 1)))


def test_grad_and_remat_take_typed_keys():
    k = random.key(0)
    expected = float(jnp.sum(random.normal(k, (3,))))
    grad = functrans.grad(lambda m: jnp.sum(m * random.normal(k, (3,))))(2.0)
    np.testing.assert_allclose(float(grad), expected, rtol=1e-6)
    # a key as an argument of a rematerialized function (functrans.checkpoint as a decorator)
    noisy = functrans.checkpoint(lambda m, key: jnp.sum(m * random.normal(key, (3,))))
    np.testing.assert_allclose(float(functrans.grad(noisy)(2.0, k)), expected, rtol=1e-6)


# =============================================================================================
# Pytrees, device_put, checkpoints
# =============================================================================================

def test_key_arrays_are_pytrees_of_their_two_words():
    keys = random.split(random.key(0), 3)
    leaves, treedef = tree_util.tree_flatten({"keys": keys})
    assert [leaf.shape for leaf in leaves] == [(3,), (3,)]
    assert all(leaf.dtype == np.uint32 for leaf in leaves)
    rebuilt = tree_util.tree_unflatten(treedef, leaves)["keys"]
    assert isinstance(rebuilt, random.PRNGKeyArray) and bool(jnp.all(rebuilt == keys))
    firsts = tree_util.tree_map(lambda x: x[0], {"keys": keys, "w": jnp.arange(3.0)})
    assert bool(firsts["keys"] == keys[0]) and float(firsts["w"]) == 0.0
    assert functrans.eval_shape(random.key, 0).shape == ()
    assert functrans.eval_shape(lambda: random.split(random.key(0), 4)).dtype == keys.dtype


def test_device_put_keeps_key_arrays():
    keys = random.split(random.key(0), 3)
    placed = functrans.device_put(keys)
    assert isinstance(placed, random.PRNGKeyArray) and bool(jnp.all(placed == keys))


def test_checkpoints_save_and_restore_key_arrays(tmp_path):
    state = {"key": random.key(7), "keys": random.split(random.key(1), 4),
             "raw": random.PRNGKey(2), "w": jnp.ones(2)}
    path = tmp_path / "state.safetensors"
    checkpoint.save(path, state)
    for restored in (checkpoint.restore(path), checkpoint.restore(path, target=state)):
        assert isinstance(restored["key"], random.PRNGKeyArray)
        assert bool(restored["key"] == state["key"])
        assert restored["keys"].shape == (4,) and bool(jnp.all(restored["keys"] == state["keys"]))
        np.testing.assert_array_equal(np.asarray(restored["raw"]), np.asarray(state["raw"]))
        # the restored key draws what the saved one did
        np.testing.assert_array_equal(np.asarray(random.normal(restored["key"], (2,))),
                                      np.asarray(random.normal(state["key"], (2,))))


def test_key_impl_and_key_dtype():
    assert random.key_impl(random.PRNGKey(0)) == "threefry2x32"
    assert random.key_impl(random.split(random.PRNGKey(0), 3)) == "threefry2x32"
    assert random.key_impl(random.key(1)) == "threefry2x32"
    with pytest.raises(TypeError, match="uint32"):
        random.key_impl(jnp.zeros(3))
    # the dtype of typed keys (random.key), as in JAX; raw keys stay uint32
    assert random.key_dtype() == random.key(0).dtype and str(random.key_dtype()) == "key<fry>"
    assert random.key_dtype("threefry2x32") == random.key_dtype() != np.uint32
    assert random.PRNGKey(0).dtype == np.uint32
    with pytest.raises(NotImplementedError):
        random.key_dtype("rbg")
    with pytest.raises(ValueError):
        random.key_dtype("nonsense")
