"""functrans.tree (= jax.tree), functrans.flatten_util.ravel_pytree and functrans.dtypes.

Each function is checked against the tree_util / NumPy computation it must equal, against
hand-checked JAX results, and (when ``jax`` is importable) against JAX itself.
"""
from __future__ import annotations

import collections
import dataclasses
import doctest
import inspect
import itertools

import ml_dtypes
import numpy as np
import pytest

import functrans
import functrans.dtypes as dtypes
import functrans.flatten_util as flatten_util
import functrans.numpy as jnp
import functrans.tree as tree
from functrans import _dtypes, tree_util
from functrans.flatten_util import ravel_pytree
from functrans.test_util import check_grads
import operator

# ---- pytrees used throughout -------------------------------------------------------------------


class Box:
    """A registered custom node with static aux data."""

    def __init__(self, label, a, b):
        self.label, self.a, self.b = label, a, b

    def __eq__(self, other):
        return type(other) is Box and (self.label, self.a, self.b) == (other.label, other.a,
                                                                      other.b)

    def __repr__(self):
        return f"Box({self.label!r}, {self.a!r}, {self.b!r})"


tree_util.register_pytree_node(Box, lambda x: ((x.a, x.b), x.label),
                               lambda label, children: Box(label, *children))


@tree_util.register_dataclass
@dataclasses.dataclass
class Layer:
    w: object
    b: object
    name: str = tree.static(default="dense")


Point = collections.namedtuple("Point", "x y")

TREES = [
    1.5,
    None,
    (),
    [1, None, (2, 3)],
    {"b": [4, 5], "a": None, "c": {"z": 6, "y": (7,)}},
    Point(1, [2, None]),
    collections.OrderedDict(z=1, a=[2, 3]),
    Box("tag", [1, 2], {"k": None, "v": 3}),
    Layer(w=[1, 2], b=3),
    [Box("outer", Box("inner", 1, 2), None), Point(3, 4)],
]

IS_LEAF_CASES = [None, lambda x: isinstance(x, tuple), lambda x: x is None,
                 lambda x: isinstance(x, Box)]


def _add(a, b):
    return a + b


# ---- functrans.tree ----------------------------------------------------------------------------

# Argument names and kinds, as in jax.tree
EXPECTED_SIGNATURES = {
    "all": "(tree, *, is_leaf=None)",
    "flatten": "(tree, is_leaf=None)",
    "unflatten": "(treedef, leaves)",
    "leaves": "(tree, is_leaf=None)",
    "structure": "(tree, is_leaf=None)",
    "map": "(f, tree, *rest, is_leaf=None)",
    "map_with_path": "(f, tree, *rest, is_leaf=None, is_leaf_takes_path=False)",
    "flatten_with_path": "(tree, is_leaf=None, is_leaf_takes_path=False)",
    "leaves_with_path": "(tree, is_leaf=None, is_leaf_takes_path=False)",
    "reduce": "(function, tree, initializer=<not given>, is_leaf=None)",
    "reduce_associative": "(operation, tree, *, identity=<not given>, is_leaf=None)",
    "transpose": "(outer_treedef, inner_treedef, pytree_to_transpose)",
    "broadcast": "(prefix_tree, full_tree, is_leaf=None)",
    "static": "(**kwargs)",
}


@pytest.mark.parametrize("name", sorted(EXPECTED_SIGNATURES))
def test_tree_signatures(name):
    signature = inspect.signature(getattr(tree, name))
    stripped = signature.replace(parameters=[p.replace(annotation=inspect.Parameter.empty)
                                             for p in signature.parameters.values()],
                                 return_annotation=inspect.Signature.empty)
    assert str(stripped) == EXPECTED_SIGNATURES[name]
    assert set(tree.__all__) == set(EXPECTED_SIGNATURES)


@pytest.mark.parametrize("is_leaf", IS_LEAF_CASES)
@pytest.mark.parametrize("index", range(len(TREES)))
def test_tree_matches_tree_util(index, is_leaf):
    t = TREES[index]
    leaves, treedef = tree.flatten(t, is_leaf)
    assert (leaves, treedef) == tree_util.tree_flatten(t, is_leaf)
    assert tree.leaves(t, is_leaf) == leaves
    assert tree.structure(t, is_leaf) == treedef
    assert tree.unflatten(treedef, leaves) == t
    assert tree.flatten_with_path(t, is_leaf) == tree_util.tree_flatten_with_path(t, is_leaf)
    assert tree.leaves_with_path(t, is_leaf) == tree_util.tree_leaves_with_path(t, is_leaf)
    marked = tree.map(lambda x: ("seen", x), t, is_leaf=is_leaf)
    assert tree.leaves(marked, lambda x: isinstance(x, tuple) and x[:1] == ("seen",)) == \
        [("seen", x) for x in leaves]
    assert marked == tree_util.tree_map(lambda x: ("seen", x), t, is_leaf=is_leaf)
    with_path = tree.map_with_path(lambda p, x: tree_util.keystr(p), t, is_leaf=is_leaf)
    assert tree.leaves(with_path) == [tree_util.keystr(p) for p, _ in
                                      tree_util.tree_leaves_with_path(t, is_leaf)]
    assert tree.all(tree.map(lambda x: True, t, is_leaf=is_leaf), is_leaf=is_leaf)
    assert tree.reduce(lambda acc, x: acc + [x], t, [], is_leaf=is_leaf) == leaves


def test_map_several_trees_and_prefix_leaves():
    a = {"x": [1, 2], "y": Box("b", 3, None)}
    b = {"x": [10, 20], "y": Box("b", 30, None)}
    assert tree.map(_add, a, b) == {"x": [11, 22], "y": Box("b", 33, None)}
    # a leaf of the first tree may stand over a whole subtree of the others
    assert tree.map(lambda x, sub: (x, sub), [1, 2], [(5, 6), {"k": 7}]) == \
        [(1, (5, 6)), (2, {"k": 7})]
    with pytest.raises(ValueError, match="do not match"):
        tree.map(_add, [1, 2], [1, (2, 3), 4])
    with pytest.raises(ValueError):
        tree.map(_add, Box("a", 1, 2), Box("other aux", 1, 2))
    assert tree.map_with_path(lambda p, x, y: (tree_util.keystr(p), x + y), {"a": 1}, {"a": 2}) == \
        {"a": ("['a']", 3)}


def test_none_is_an_empty_subtree_unless_is_leaf_says_otherwise():
    t = [None, 1, {"a": None}]
    assert tree.leaves(t) == [1]
    assert tree.map(lambda x: x * 2, t) == [None, 2, {"a": None}]
    is_none = lambda x: x is None  # noqa: E731
    assert tree.leaves(t, is_none) == [None, 1, None]
    assert tree.map(lambda x: 0 if x is None else x, t, is_leaf=is_none) == [0, 1, {"a": 0}]
    assert tree.leaves(None) == [] and tree.structure(None).num_leaves == 0


def test_all_and_reduce():
    assert tree.all([True, {"a": 1, "b": (2,)}])
    assert not tree.all([True, {"a": 0}])
    assert tree.all([])  # no leaves: vacuously true
    assert not tree.all([(1, 0)], is_leaf=lambda x: x == (1, 0) and False)
    assert tree.all([(1, 0)], is_leaf=lambda x: isinstance(x, tuple))  # the tuple is truthy
    t = {"a": [1, 2], "b": Box("x", 3, 4)}
    assert tree.reduce(_add, t) == 10
    assert tree.reduce(_add, t, 100) == 110
    assert tree.reduce(lambda acc, x: acc, [], None) is None  # None is a real initializer
    with pytest.raises(TypeError):
        tree.reduce(_add, [])
    is_tuple = lambda x: isinstance(x, tuple)  # noqa: E731
    assert tree.reduce(_add, [(1, 2), (3,)], (), is_leaf=is_tuple) == (1, 2, 3)


def test_reduce_associative():
    letters = list("abcdefg")
    assert tree.reduce_associative(_add, letters) == "abcdefg"
    # balanced: the middle split puts the shorter half first, like jax.tree.reduce_associative
    assert tree.reduce_associative(lambda a, b: f"({a}{b})", list("abcde")) == "((ab)(c(de)))"
    values = {"a": np.float32(1e8), "b": [np.float32(1.0)] * 7}
    assert tree.reduce_associative(_add, values) == sum(tree.leaves(values))
    assert tree.reduce_associative(_add, [], identity=0) == 0
    assert tree.reduce_associative(_add, [5], identity=0) == 5
    with pytest.raises(TypeError, match="identity"):
        tree.reduce_associative(_add, {"a": None})


def test_transpose():
    outer, inner = tree.structure([0, 0]), tree.structure((0, 0, 0))
    t = [(1, 2, 3), (4, 5, 6)]
    expected = ([1, 4], [2, 5], [3, 6])
    assert tree.transpose(outer, inner, t) == expected
    assert tree.transpose(outer, None, t) == expected
    assert tree.transpose(outer, inner, t) == tree_util.tree_transpose(outer, inner, t)
    # round trip with custom inner nodes
    boxes = {"p": Box("l", 1, 2), "q": Box("l", 3, 4)}
    flipped = tree.transpose(tree.structure({"p": 0, "q": 0}), None, boxes)
    assert flipped == Box("l", {"p": 1, "q": 3}, {"p": 2, "q": 4})
    with pytest.raises(ValueError):
        tree.transpose(tree.structure([0, 0]), None, [])


def test_broadcast():
    assert tree.broadcast([1, 2], [(0, 0), {"a": 0}]) == [(1, 1), {"a": 2}]
    assert tree.broadcast(7, {"a": [0, None], "b": Box("t", 0, 0)}) == \
        {"a": [7, None], "b": Box("t", 7, 7)}
    assert tree.broadcast({"a": 1, "b": None}, {"a": (0, [0]), "b": None}) == \
        {"a": (1, [1]), "b": None}
    full = [(0, 0), (0, 0)]
    assert tree.broadcast(["x", "y"], full, is_leaf=lambda x: isinstance(x, tuple)) == ["x", "y"]
    assert tree.structure(tree.broadcast([1, 2], full)) == tree.structure(full)
    with pytest.raises(ValueError):
        tree.broadcast([1, 2], [0])


def test_is_leaf_takes_path():
    t = {"a": [1, (2, 3)], "b": Box("k", [4], 5)}
    depth2 = lambda path, x: len(path) == 2  # noqa: E731
    got = tree.leaves_with_path(t, depth2, is_leaf_takes_path=True)
    assert [(tree_util.keystr(p), x) for p, x in got] == [
        ("['a'][0]", 1), ("['a'][1]", (2, 3)),
        ("['b'][<flat index 0>]", [4]), ("['b'][<flat index 1>]", 5)]
    keyed, treedef = tree.flatten_with_path(t, depth2, is_leaf_takes_path=True)
    assert treedef == tree.structure(t, lambda x: x in ((2, 3), [4]))
    assert tree.unflatten(treedef, [x for _, x in keyed]) == t
    doubled = tree.map_with_path(lambda p, x: x * 2, t, is_leaf=depth2, is_leaf_takes_path=True)
    assert doubled == {"a": [2, (2, 3, 2, 3)], "b": Box("k", [4, 4], 10)}
    # with a path-free predicate the flag is just not used
    assert tree.leaves_with_path(t) == tree_util.tree_leaves_with_path(t)


def test_static_dataclass_field():
    layer = Layer(w=1.0, b=2.0, name="head")
    leaves, treedef = tree.flatten(layer)
    assert leaves == [1.0, 2.0]
    assert tree.unflatten(treedef, [3.0, 4.0]) == Layer(3.0, 4.0, "head")
    assert treedef != tree.structure(Layer(1.0, 2.0, "other"))
    field = tree.static(default=1, metadata={"doc": "kept"})
    assert field.metadata["static"] and field.metadata["doc"] == "kept"


def test_tree_works_on_arrays_under_transforms():
    params = {"w": jnp.ones((2, 3)), "b": [jnp.zeros(3), None]}
    loss = lambda p: tree.reduce(_add, tree.map(lambda x: jnp.sum(x ** 2), p))  # noqa: E731
    grads = functrans.grad(loss)(params)
    assert tree.structure(grads) == tree.structure(params)
    np.testing.assert_allclose(grads["w"], 2 * np.ones((2, 3)))
    np.testing.assert_allclose(functrans.jit(loss)(params), 6.0)


# ---- ravel_pytree ------------------------------------------------------------------------------

def _np_ravel(pytree, dtype):
    leaves = [np.asarray(x) for x in tree_util.tree_leaves(pytree)]
    return np.concatenate([x.ravel().astype(dtype) for x in leaves]) if leaves else np.zeros(0)


MIXED_TREES = [
    # (tree, expected dtype of the flat vector under 32-bit, under x64): hand-checked JAX results
    ({"a": np.arange(3, dtype=np.int8), "b": (np.ones((2, 2), np.float16), 2.5), "c": None,
      "d": True}, np.float32, np.float64),
    ((np.arange(2, dtype=np.uint8), np.arange(2, dtype=np.int8)), np.int16, np.int16),
    ((np.ones(2, np.float16), np.ones((1, 1), ml_dtypes.bfloat16)), np.float32, np.float32),
    ((np.arange(2, dtype=np.int32), np.ones(1, np.float16)), np.float16, np.float16),
    ((np.ones(2, np.complex64) * (1 + 2j), np.ones(1, np.float32)), np.complex64, np.complex64),
    ([np.float64(1.5), 1], np.float32, np.float64),
    (Box("b", np.arange(6).reshape(2, 3).astype(np.int16), np.uint8(4)), np.int16, np.int16),
    ((np.ones((0, 3)), np.ones(1, np.int16)), np.float32, np.float64),
    ((True, False), np.bool_, np.bool_),
]


@pytest.mark.parametrize("use_x64", [False, True])
@pytest.mark.parametrize("index", range(len(MIXED_TREES)))
def test_ravel_round_trip_mixed_dtypes(index, use_x64):
    functrans.config.update("enable_x64", use_x64)
    t, dtype32, dtype64 = MIXED_TREES[index]
    expected_dtype = np.dtype(dtype64 if use_x64 else dtype32)
    flat, unravel = ravel_pytree(t)
    assert flat.dtype == expected_dtype and flat.ndim == 1
    np.testing.assert_array_equal(np.asarray(flat), _np_ravel(t, expected_dtype))
    back = unravel(flat)
    assert tree.structure(back) == tree.structure(t)
    for original, restored in zip(tree.leaves(t), tree.leaves(back)):
        want = _dtypes.canonicalize_dtype(np.asarray(original).dtype)
        if isinstance(original, (int, float)) and not isinstance(original, bool):
            want = _dtypes.canonicalize_dtype(np.dtype(type(original)))
        assert restored.dtype == want and restored.shape == np.shape(original)
        np.testing.assert_array_equal(np.asarray(restored), np.asarray(original).astype(want))


def test_ravel_edge_cases():
    for empty in [{}, [], None, [None, ()], Box("e", None, {})]:
        flat, unravel = ravel_pytree(empty)
        assert flat.shape == (0,) and flat.dtype == np.float32
        assert unravel(flat) == empty
    flat, unravel = ravel_pytree(3.0)
    assert flat.shape == (1,) and float(flat[0]) == 3.0
    assert unravel(flat).shape == ()
    flat, unravel = ravel_pytree(jnp.asarray(2))
    assert flat.dtype == np.int32 and unravel(flat).shape == ()


def test_ravel_keeps_weak_types_only_without_casts():
    flat, unravel = ravel_pytree((1.0, 2.0))  # one dtype: nothing cast, weak types flow through
    assert flat.aval.weak_type and all(x.aval.weak_type for x in unravel(flat))
    flat, unravel = ravel_pytree((1.0, jnp.ones(2)))
    assert not flat.aval.weak_type
    flat, unravel = ravel_pytree((np.float16(1), 1.0))  # cast: everything strong
    assert not flat.aval.weak_type and [x.dtype for x in unravel(flat)] == [np.float16, np.float32]


def test_unravel_checks_its_input(x64):
    flat, unravel = ravel_pytree((np.ones(2, np.float32), np.ones(1, np.int64)))
    assert flat.dtype == np.float32  # unlike NumPy, int64 joined with float32 is float32
    with pytest.raises(TypeError, match="dtype"):
        unravel(flat.astype(np.float64))
    with pytest.raises(ValueError, match="shape"):
        unravel(jnp.ones(4, np.float32))
    # one dtype: any vector dtype is accepted and kept (JAX's dtype-polymorphic unravel)
    flat, unravel = ravel_pytree({"a": np.ones(2, np.float32)})
    assert unravel(jnp.ones(2, np.float64))["a"].dtype == np.float64


def test_unravel_is_hashable_and_a_static_argument():
    t1 = {"a": jnp.ones(2), "b": jnp.zeros((1, 2), jnp.int8)}
    t2 = {"a": jnp.zeros(2), "b": jnp.ones((1, 2), jnp.int8)}
    (_, u1), (flat2, u2) = ravel_pytree(t1), ravel_pytree(t2)
    assert u1 == u2 and hash(u1) == hash(u2)
    assert u1 != ravel_pytree({"a": jnp.ones(3), "b": jnp.zeros((1, 2), jnp.int8)})[1]
    apply = functrans.jit(lambda unravel, v: unravel(v)["b"], static_argnums=0)
    np.testing.assert_array_equal(apply(u1, flat2), np.ones((1, 2), np.int8))


def _params():
    return {"w": jnp.asarray(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)),
            "b": (jnp.asarray([0.5, -0.25], dtype=jnp.float32), None),
            "box": Box("s", jnp.asarray(1.5), jnp.asarray([2.0]))}


def _loss(p):
    return (jnp.sum(jnp.sin(p["w"]) * 2.0) + jnp.sum(p["b"][0] ** 3)
            + p["box"].a * jnp.sum(p["box"].b ** 2))


def test_grad_through_ravel_and_unravel():
    params = _params()
    flat, unravel = ravel_pytree(params)
    flat_grad = functrans.grad(lambda v: _loss(unravel(v)))(flat)
    tree_grad = functrans.grad(_loss)(params)
    np.testing.assert_allclose(flat_grad, ravel_pytree(tree_grad)[0], rtol=1e-6)
    # the other way: a loss of the flat vector, differentiated w.r.t. the tree
    g = functrans.grad(lambda p: jnp.sum(jnp.cos(ravel_pytree(p)[0])))(params)
    np.testing.assert_allclose(ravel_pytree(g)[0], -np.sin(np.asarray(flat)), rtol=1e-6)


def test_numerical_gradient_through_unravel(x64):
    params = tree.map(lambda x: jnp.asarray(x, jnp.float64), _params())
    flat, unravel = ravel_pytree(params)
    check_grads(lambda v: _loss(unravel(v)), (flat,), order=2)
    check_grads(lambda w, b: ravel_pytree({"w": w, "b": b})[0] ** 2,
                (params["w"], params["b"][0]), order=1)


def test_grad_through_mixed_dtype_unravel():
    t = {"x": jnp.asarray([1.0, 2.0], jnp.float16), "n": jnp.asarray([3], jnp.int32)}
    flat, unravel = ravel_pytree(t)
    assert flat.dtype == np.float16
    loss = lambda v: jnp.sum(unravel(v)["x"].astype(jnp.float32) ** 2)  # noqa: E731
    # keys in sorted order: the int leaf "n" comes first, and gets a zero gradient
    np.testing.assert_allclose(functrans.grad(loss)(flat).astype(np.float32), [0.0, 2.0, 4.0])


def test_jit_and_vmap_through_ravel():
    params = _params()
    ravel_only = lambda p: ravel_pytree(p)[0]  # noqa: E731
    np.testing.assert_allclose(functrans.jit(ravel_only)(params), ravel_only(params))
    flat, unravel = ravel_pytree(params)
    jitted = functrans.jit(lambda v: unravel(v))(flat)
    for a, b in zip(tree.leaves(jitted), tree.leaves(unravel(flat))):
        np.testing.assert_allclose(a, b)

    batch = {"x": jnp.asarray(np.arange(12.0, dtype=np.float32).reshape(4, 3)),
             "y": jnp.asarray(np.arange(4, dtype=np.int32))}
    batched = functrans.vmap(ravel_only)(batch)
    looped = np.stack([np.asarray(ravel_only({"x": batch["x"][i], "y": batch["y"][i]}))
                       for i in range(4)])
    assert batched.shape == (4, 4)
    np.testing.assert_allclose(batched, looped)
    _, unravel_one = ravel_pytree({"x": batch["x"][0], "y": batch["y"][0]})
    rebuilt = functrans.vmap(unravel_one)(batched)
    np.testing.assert_allclose(rebuilt["x"], batch["x"])
    assert rebuilt["y"].dtype == np.int32
    np.testing.assert_array_equal(rebuilt["y"], batch["y"])
    # per-example gradients, flattened
    square_x = lambda v: jnp.sum(unravel_one(v)["x"] ** 2)  # noqa: E731
    per_example = functrans.vmap(functrans.grad(square_x))(batched)
    np.testing.assert_allclose(per_example[:, :3], 2 * np.asarray(batch["x"]))
    np.testing.assert_allclose(per_example[:, 3], 0.0)


# ---- functrans.dtypes --------------------------------------------------------------------------

ALL_DTYPES = [np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8,
                                    np.uint16, np.uint32, np.uint64, np.float16, np.float32,
                                    np.float64, np.complex64, np.complex128)] + [_dtypes.bfloat16]
ABSTRACT_KINDS = [np.generic, np.number, np.inexact, np.floating, np.complexfloating, np.integer,
                  np.signedinteger, np.unsignedinteger, np.bool_]


@pytest.mark.parametrize("use_x64", [False, True])
def test_canonicalize_dtype(use_x64):
    functrans.config.update("enable_x64", use_x64)
    narrow = {np.int64: np.int32, np.uint64: np.uint32, np.float64: np.float32,
              np.complex128: np.complex64}
    for dtype in ALL_DTYPES:
        want = dtype if use_x64 else np.dtype(narrow.get(dtype.type, dtype))
        assert dtypes.canonicalize_dtype(dtype) == want
        assert dtypes.canonicalize_dtype(dtype.name) == want
    assert dtypes.canonicalize_dtype(float) == (np.float64 if use_x64 else np.float32)
    assert dtypes.canonicalize_dtype(int) == (np.int64 if use_x64 else np.int32)
    assert dtypes.canonicalize_dtype(jnp.float64) == (np.float64 if use_x64 else np.float32)
    assert dtypes.canonicalize_dtype(dtypes.bfloat16) == _dtypes.bfloat16
    with pytest.raises(TypeError):
        dtypes.canonicalize_dtype("not a dtype")


def test_float0_bfloat16_and_extended_kinds():
    assert dtypes.float0 == _dtypes.float0 and dtypes.float0.itemsize == 0
    assert np.dtype(dtypes.bfloat16) == _dtypes.bfloat16 and dtypes.bfloat16 is ml_dtypes.bfloat16
    assert dtypes.issubdtype(dtypes.prng_key, dtypes.extended)
    assert dtypes.issubdtype(dtypes.prng_key, np.generic)
    assert not dtypes.issubdtype(dtypes.extended, dtypes.prng_key)
    assert not dtypes.issubdtype(np.uint32, dtypes.prng_key)  # keys are raw uint32 arrays
    assert not dtypes.issubdtype(functrans.random.PRNGKey(0).dtype, dtypes.extended)
    assert dtypes.canonicalize_dtype(dtypes.prng_key, allow_extended_dtype=True) is dtypes.prng_key
    with pytest.raises(TypeError):
        dtypes.canonicalize_dtype(dtypes.prng_key)


def test_issubdtype_matches_numpy_with_bfloat16_as_a_float():
    for a, b in itertools.product(ALL_DTYPES, ALL_DTYPES + ABSTRACT_KINDS):
        if _dtypes.bfloat16 in (a, b):
            want = a == b if isinstance(b, np.dtype) else b in (np.generic, np.number,
                                                                np.inexact, np.floating)
        else:
            want = np.issubdtype(a, b)
        assert dtypes.issubdtype(a, b) == want, (a, b)
    assert dtypes.issubdtype(jnp.bfloat16, jnp.floating)
    assert dtypes.issubdtype(jnp.float32, jnp.inexact)
    assert not dtypes.issubdtype(jnp.int8, jnp.floating)
    assert dtypes.issubdtype(int, jnp.integer) and dtypes.issubdtype(float, jnp.floating)
    assert not dtypes.issubdtype(jnp.float32, jnp.bfloat16)


# The JAX promotion table (x64 on), hand-checked: weak kinds written "i*", "f*", "c*".
JAX_PROMOTIONS = [
    ("bool", "i*", "i*"), ("bool", "uint8", "uint8"), ("i*", "uint8", "uint8"),
    ("i*", "int8", "int8"), ("uint8", "int8", "int16"), ("uint16", "int16", "int32"),
    ("uint32", "int32", "int64"), ("uint64", "int8", "f*"), ("uint64", "int64", "f*"),
    ("int8", "bfloat16", "bfloat16"), ("int64", "float16", "float16"),
    ("bfloat16", "float16", "float32"), ("f*", "bfloat16", "bfloat16"), ("f*", "int64", "f*"),
    ("f*", "float16", "float16"), ("c*", "float32", "complex64"), ("c*", "float64", "complex128"),
    ("c*", "int32", "c*"), ("float16", "c*", "complex64"), ("float64", "complex64", "complex128"),
    ("i*", "f*", "f*"), ("f*", "c*", "c*"), ("bool", "bool", "bool"),
    ("bfloat16", "f*", "bfloat16"),
]
_WEAK = {"i*": int, "f*": float, "c*": complex}
_WEAK_DEFAULT = {"i*": ("int64", "int32"), "f*": ("float64", "float32"),
                 "c*": ("complex128", "complex64")}


@pytest.mark.parametrize("use_x64", [False, True])
def test_result_type_against_jax_table(use_x64):
    functrans.config.update("enable_x64", use_x64)
    for a, b, want in JAX_PROMOTIONS:
        if not use_x64 and "64" in a + b:
            continue  # 64-bit inputs narrow first in 32-bit mode: checked below
        args = [_WEAK.get(x) or np.dtype(ml_dtypes.bfloat16 if x == "bfloat16" else x)
                for x in (a, b)]
        if want in _WEAK:
            want_dtype, want_weak = np.dtype(_WEAK_DEFAULT[want][0 if use_x64 else 1]), True
        else:
            want_dtype, want_weak = dtypes.canonicalize_dtype(
                ml_dtypes.bfloat16 if want == "bfloat16" else want), False
        for pair in (args, args[::-1]):
            assert dtypes.result_type(*pair, return_weak_type_flag=True) == \
                (want_dtype, want_weak), (a, b)


def test_result_type_narrows_64_bit_inputs_first():
    # JAX (32-bit mode): uint64 is taken as uint32 before joining, so with int8 it gives int32
    assert dtypes.result_type(np.uint64, np.int8, return_weak_type_flag=True) == (np.int32, False)
    assert dtypes.result_type(np.int64, np.float16) == np.float16
    assert dtypes.result_type(np.float64, np.complex64) == np.complex64


@pytest.mark.parametrize("use_x64", [False, True])
def test_result_type_agrees_with_the_lattice(use_x64):
    functrans.config.update("enable_x64", use_x64)
    canonical = dtypes.canonicalize_dtype
    for a, b in itertools.product(ALL_DTYPES, repeat=2):
        weak_join = _dtypes.promote_types_weak((canonical(a), False), (canonical(b), False))
        assert dtypes.result_type(a, b, return_weak_type_flag=True) == weak_join
        assert dtypes.result_type(b, a, return_weak_type_flag=True) == weak_join
        # a join of three is the join of the first two (weak flag kept) with the third
        for c in (np.int8, np.float16, _dtypes.bfloat16):
            three = dtypes.result_type(a, b, c, return_weak_type_flag=True)
            assert three == _dtypes.promote_types_weak(weak_join, (np.dtype(c), False))


def test_result_type_values_and_weak_types():
    i32 = jnp.ones(3, jnp.int32)
    # the hand-checked JAX result: an int32 array with a Python float is a *weak* float32
    assert dtypes.result_type(i32, 1.0, return_weak_type_flag=True) == (np.float32, True)
    assert dtypes.result_type(jnp.ones(2, jnp.int8), 1) == np.int8
    assert dtypes.result_type(jnp.ones(2, jnp.float16), 2.0) == np.float16
    assert dtypes.result_type(jnp.ones(2, jnp.bfloat16), 2.0) == _dtypes.bfloat16
    assert dtypes.result_type(jnp.asarray(1.0), jnp.ones(2, jnp.float16)) == np.float16
    assert dtypes.result_type(1, 2.0, return_weak_type_flag=True) == (np.float32, True)
    assert dtypes.result_type(True, return_weak_type_flag=True) == (np.bool_, False)
    assert dtypes.result_type(np.float32(1), 1j) == np.complex64
    assert dtypes.result_type(np.ones(2), np.int8(1)) == np.float32  # float64 narrows
    assert dtypes.result_type(jnp.float64, return_weak_type_flag=True) == (np.float32, False)
    assert dtypes.result_type("int16", jnp.uint8) == np.int16
    with pytest.raises(ValueError):
        dtypes.result_type()
    with pytest.raises(dtypes.TypePromotionError):
        dtypes.result_type(dtypes.float0, np.float32)


def test_result_type_under_jit():
    seen = []

    def f(x):
        seen.append(dtypes.result_type(x, 1.0, return_weak_type_flag=True))
        return x

    functrans.jit(f)(jnp.ones(2, jnp.int16))
    assert seen == [(np.float32, True)]


def test_is_weakly_typed():
    assert dtypes.is_weakly_typed(1) and dtypes.is_weakly_typed(1.0) and dtypes.is_weakly_typed(1j)
    assert not dtypes.is_weakly_typed(True)
    assert not dtypes.is_weakly_typed(np.float32(1.0)) and not dtypes.is_weakly_typed(np.ones(2))
    assert dtypes.is_weakly_typed(jnp.asarray(1.0))
    assert not dtypes.is_weakly_typed(jnp.ones(2))
    assert not dtypes.is_weakly_typed(jnp.ones(2) * 2.0)  # strong wins
    flags = []
    functrans.jit(lambda x: flags.append((dtypes.is_weakly_typed(x), dtypes.is_weakly_typed(x * 2)))
                  or x)(jnp.asarray(3.0))
    assert flags == [(True, True)]


def test_scalar_type_of_finfo_iinfo_itemsize_bits():
    kinds = {"b": bool, "i": int, "u": int, "f": float, "c": complex}
    for dtype in ALL_DTYPES:
        want = float if dtype == _dtypes.bfloat16 else kinds[dtype.kind]
        assert dtypes.scalar_type_of(np.zeros((), dtype)) is want
        assert dtypes.scalar_type_of(dtype) is want
        assert dtypes.itemsize_bits(dtype) == 8 * dtype.itemsize
    assert dtypes.scalar_type_of(jnp.ones(2, jnp.uint8)) is int
    assert dtypes.scalar_type_of(2.0) is float
    with pytest.raises(TypeError):
        dtypes.scalar_type_of(dtypes.float0)
    with pytest.raises(ValueError):
        dtypes.itemsize_bits(dtypes.float0)
    for dtype in (np.float16, np.float32, np.float64, np.complex64):
        assert dtypes.finfo(dtype).eps == np.finfo(dtype).eps
    assert dtypes.finfo(jnp.ones(2)).eps == np.finfo(np.float32).eps
    assert float(dtypes.finfo(dtypes.bfloat16).eps) == 2.0 ** -7
    assert float(dtypes.finfo(jnp.bfloat16).max) == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    for dtype in (np.int8, np.uint16, np.int32, np.uint64):
        assert (dtypes.iinfo(dtype).min, dtypes.iinfo(dtype).max) == \
            (np.iinfo(dtype).min, np.iinfo(dtype).max)
    assert dtypes.iinfo(jnp.ones(2, jnp.int16)).max == 32767


def test_dtypes_public_names():
    assert set(dtypes.__all__) >= {"bfloat16", "canonicalize_dtype", "float0", "issubdtype",
                                   "result_type", "finfo", "iinfo", "scalar_type_of", "prng_key",
                                   "extended", "is_weakly_typed", "itemsize_bits",
                                   "TypePromotionError"}
    assert issubclass(dtypes.TypePromotionError, ValueError)


@pytest.mark.parametrize("module", [tree, flatten_util, dtypes])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0


# ---- against JAX itself, where it is installed -------------------------------------------------

def _jax():
    jax = pytest.importorskip("jax")
    pytest.importorskip("jax.flatten_util")
    return jax


@pytest.mark.parametrize("use_x64", [False, True])
def test_dtypes_against_jax(use_x64):
    jax = _jax()
    import warnings
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", use_x64)
    functrans.config.update("enable_x64", use_x64)
    try:
        specs = ALL_DTYPES + [int, float, complex, bool]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # JAX warns when it narrows 64-bit requests
            for a, b in itertools.product(specs, repeat=2):
                assert dtypes.result_type(a, b, return_weak_type_flag=True) == \
                    jax.dtypes.result_type(a, b, return_weak_type_flag=True), (a, b)
            for a in specs:
                assert dtypes.canonicalize_dtype(a) == jax.dtypes.canonicalize_dtype(a)
            for a, b in itertools.product(ALL_DTYPES, ALL_DTYPES + ABSTRACT_KINDS):
                assert dtypes.issubdtype(a, b) == jax.dtypes.issubdtype(a, b), (a, b)
    finally:
        jax.config.update("jax_enable_x64", previous)


def test_tree_and_ravel_against_jax():
    jax = _jax()
    from jax.flatten_util import ravel_pytree as jax_ravel_pytree
    t = {"a": [1, (2, None)], "b": Point(3, [4]), "c": collections.OrderedDict(z=5, y=6)}
    assert tree.leaves(t) == jax.tree.leaves(t)
    assert [(tree_util.keystr(p), x) for p, x in tree.leaves_with_path(t)] == \
        [(jax.tree_util.keystr(p), x) for p, x in jax.tree.leaves_with_path(t)]
    full = [(0, 0), {"a": 0}]
    assert tree.broadcast([1, 2], full) == jax.tree.broadcast([1, 2], full)
    assert tree.reduce_associative(lambda a, b: f"({a}{b})", list("abcdefg")) == \
        jax.tree.reduce_associative(lambda a, b: f"({a}{b})", list("abcdefg"))
    for case, _, _ in MIXED_TREES:
        if isinstance(case, Box):
            continue  # registered with functrans only
        ours, theirs = ravel_pytree(case)[0], jax_ravel_pytree(case)[0]
        assert ours.dtype == theirs.dtype
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


# =============================================================================================
# tree_util
# =============================================================================================

class _Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def __eq__(self, other):
        return isinstance(other, _Pair) and (self.a, self.b) == (other.a, other.b)

    def __repr__(self):
        return f"_Pair({self.a!r}, {self.b!r})"


tree_util.register_pytree_with_keys(
    _Pair, lambda p: (((tree_util.GetAttrKey("a"), p.a), (tree_util.GetAttrKey("b"), p.b)), "aux"),
    lambda aux, children: _Pair(*children))


@tree_util.register_pytree_with_keys_class
class _Boxed:
    def __init__(self, items):
        self.items = items

    def tree_flatten_with_keys(self):
        return (((tree_util.DictKey("items"), self.items),), None)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


@tree_util.register_static
class _Tag:
    def __init__(self, name):
        self.name = name

    def __hash__(self):
        return hash(self.name)

    def __eq__(self, other):
        return isinstance(other, _Tag) and other.name == self.name


def test_register_pytree_with_keys():
    tree = _Pair(1, [2, 3])
    leaves, treedef = tree_util.tree_flatten(tree)
    assert leaves == [1, 2, 3]
    assert treedef.unflatten([4, 5, 6]) == _Pair(4, [5, 6])
    paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(tree)[0]]
    assert paths == [".a", ".b[0]", ".b[1]"]
    boxed_paths = tree_util.tree_flatten_with_path(_Boxed([7, 8]))[0]
    assert [(tree_util.keystr(p), v) for p, v in boxed_paths] == [("['items'][0]", 7),
                                                                   ("['items'][1]", 8)]
    assert tree_util.tree_leaves(_Boxed([7, 8])) == [7, 8]
    with pytest.raises(ValueError):
        tree_util.register_pytree_with_keys(_Pair, lambda p: ((), None), lambda a, c: None)


def test_register_static():
    tree = [_Tag("x"), 1.0]
    leaves, treedef = tree_util.tree_flatten(tree)
    assert leaves == [1.0]
    assert tree_util.tree_map(lambda v: v * 10, tree)[0] == _Tag("x")
    assert tree_util.tree_structure(_Tag("x")) == tree_util.tree_structure(_Tag("x"))
    assert tree_util.tree_structure(_Tag("x")) != tree_util.tree_structure(_Tag("y"))
    assert tree_util.flatten_one_level(_Tag("z")) == ((), _Tag("z"))
    # a static node reaches a jitted function as part of the structure, not as a tracer
    seen = []

    def f(t):
        seen.append(type(t[0]))
        return t[1] * 2

    assert float(functrans.jit(f)((_Tag("k"), jnp.float32(3.0)))) == 6.0
    assert seen == [_Tag]


def test_flatten_one_level():
    assert tree_util.flatten_one_level({"b": 1, "a": [2, 3]}) == (([2, 3], 1), ("a", "b"))
    assert tree_util.flatten_one_level([1, (2,)]) == ([1, (2,)], None)
    assert tree_util.flatten_one_level((1, 2)) == ((1, 2), None)
    assert tree_util.flatten_one_level(None) == ((), None)
    point = collections.namedtuple("Point", "x y")
    assert tree_util.flatten_one_level(point(1, 2)) == ([1, 2], point)
    assert tree_util.flatten_one_level(_Pair(1, 2)) == ([1, 2], "aux")
    with pytest.raises(ValueError, match="float"):
        tree_util.flatten_one_level(1.0)
    keyed, aux = tree_util.flatten_one_level_with_keys({"b": 1, "a": 2})
    assert keyed == [(tree_util.DictKey("a"), 2), (tree_util.DictKey("b"), 1)] and aux == ("a", "b")
    keyed, _ = tree_util.flatten_one_level_with_keys(point(1, 2))
    assert keyed == [(tree_util.GetAttrKey("x"), 1), (tree_util.GetAttrKey("y"), 2)]
    keyed, _ = tree_util.flatten_one_level_with_keys(tree_util.Partial(operator.add, 1))
    assert [k for k, _ in keyed] == [tree_util.FlattenedIndexKey(0), tree_util.FlattenedIndexKey(1)]
    with pytest.raises(ValueError):
        tree_util.flatten_one_level_with_keys(3)


def test_is_tree_node():
    point = collections.namedtuple("Point", "x y")
    for typ in (list, tuple, dict, type(None), collections.OrderedDict, point, _Pair, _Tag,
                tree_util.Partial):
        assert tree_util.is_tree_node(typ), typ
    for typ in (int, float, np.ndarray, functrans.Array, str):
        assert not tree_util.is_tree_node(typ), typ
    with pytest.raises(TypeError):
        tree_util.is_tree_node([1])


def test_treedef_children_and_tuple():
    treedef = tree_util.tree_structure({"a": [1, 2], "b": (3,)})
    children = tree_util.treedef_children(treedef)
    assert children == [tree_util.tree_structure([0, 0]), tree_util.tree_structure((0,))]
    assert tree_util.treedef_children(tree_util.tree_structure(1)) == []
    joined = tree_util.treedef_tuple([treedef, tree_util.tree_structure(1)])
    assert joined == tree_util.tree_structure(({"a": [0, 0], "b": (0,)}, 0))
    assert joined.unflatten([1, 2, 3, 4]) == ({"a": [1, 2], "b": (3,)}, 4)
    assert tree_util.treedef_tuple([]) == tree_util.tree_structure(())
    assert tree_util.treedef_tuple(iter([treedef])).num_leaves == 3


def test_tree_broadcast():
    assert tree_util.tree_broadcast([1, {"a": 2}], [(3, 4), {"a": [5, 6]}]) == \
        [(1, 1), {"a": [2, 2]}]
    assert tree_util.tree_broadcast(1, {"a": 2, "b": [3, 4]}) == {"a": 1, "b": [1, 1]}
    assert tree_util.tree_broadcast({"a": 1, "b": 2}, {"a": [1, 2], "b": None}) == \
        {"a": [1, 1], "b": None}
    assert tree_util.tree_broadcast([1, None], [[1, 2], [3]], is_leaf=lambda x: x is None) == \
        [[1, 1], [None]]
    with pytest.raises(ValueError):
        tree_util.tree_broadcast([1, 2], [1, 2, 3])
    with pytest.raises(ValueError):
        tree_util.tree_broadcast((1, None), ((1, 2), 5))


def test_tree_reduce_associative():
    assert tree_util.tree_reduce_associative(operator.add, [1, 2, 3, 4, 5]) == 15
    joined = tree_util.tree_reduce_associative(lambda a, b: f"({a}+{b})",
                                               ["a", "b", "c", "d", "e"])
    assert joined == "((a+b)+(c+(d+e)))"  # balanced, as JAX pairs them
    assert tree_util.tree_reduce_associative(operator.add, [], identity=0) == 0
    assert tree_util.tree_reduce_associative(operator.add, {"x": 5}) == 5
    with pytest.raises(TypeError, match="identity"):
        tree_util.tree_reduce_associative(operator.add, [])


def test_key_types_and_default_registry():
    assert tree_util.KeyPath == tuple[tree_util.KeyEntry, ...]
    registry = tree_util.default_registry
    leaves, treedef = registry.flatten([1, {"a": 2}])
    assert leaves == [1, 2] and treedef == tree_util.tree_structure([0, {"a": 0}])
    keyed, _ = registry.flatten_with_path([1, {"a": 2}])
    assert [tree_util.keystr(p) for p, _ in keyed] == ["[0]", "[1]['a']"]
    assert registry.flatten_one_level(3) is None
    assert registry.flatten_one_level([1, 2]) == ([1, 2], None)
    assert registry.is_node(list) and not registry.is_node(int)

    class Fresh:
        def __init__(self, v):
            self.v = v

    registry.register_node(Fresh, lambda f: ([f.v], None), lambda aux, c: Fresh(*c))
    assert tree_util.tree_leaves(Fresh(9)) == [9]
