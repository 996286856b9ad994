"""functrans.sharding's objects (Mesh, PartitionSpec, NamedSharding, SingleDeviceSharding) and
arrays split over CPU devices: device_put, Array.sharding, addressable_shards, the
make_array_from_* constructors and visualize_array_sharding, each against NumPy slicing."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, strategies as st

import functrans
from functrans.sharding import (AxisType, DuplicateSpecError, Mesh, NamedSharding,
                                PartitionSpec as P, SingleDeviceSharding)


@pytest.fixture
def mesh22():
    functrans.config.update("cpu_device_count", 4)
    return functrans.make_mesh((2, 2), ("data", "model"))


def _blocks_match(x, value):
    """Every addressable shard holds exactly value[shard.index]."""
    for shard in x.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), value[shard.index])


def test_partition_spec_canonical_forms():
    assert P(("x",)) == P("x") and P(["y", "z"]) == P(("y", "z"))
    assert P("x") != P("x", None)
    assert repr(P("x", ("y", "z"), None)) == "P('x', ('y', 'z'), None)"
    assert len(P("x", None)) == 2 and P("x", None)[0] == "x" and list(P(None, "a")) == [None, "a"]
    assert P("a") + (None,) == P("a", None) and (None,) + P("a") == P(None, "a")
    assert hash(P("a", None)) == hash(P(("a",), None))
    assert functrans.P is P
    assert pickle.loads(pickle.dumps(P("a", ("b", "c")))) == P("a", ("b", "c"))
    # a spec is a pytree leaf, not a tuple
    assert functrans.tree_util.tree_leaves([P("a"), P()]) == [P("a"), P()]
    with pytest.raises(NotImplementedError, match="unreduced"):
        P("a", unreduced={"b"})


def test_mesh_properties(mesh22):
    devs = functrans.devices()
    assert mesh22.axis_names == ("data", "model")
    assert dict(mesh22.shape) == {"data": 2, "model": 2} and mesh22.size == 4
    assert mesh22.axis_types == (AxisType.Explicit,) * 2
    np.testing.assert_array_equal(mesh22.device_ids, [[0, 1], [2, 3]])
    assert mesh22.local_devices == devs[:4] and not mesh22.is_multi_process
    assert mesh22 == Mesh(np.array(devs[:4]).reshape(2, 2), ("data", "model"),
                          (AxisType.Explicit,) * 2)
    assert repr(mesh22) == ("Mesh(axis_sizes=(2, 2), axis_names=('data', 'model'), "
                            "axis_types=(Explicit, Explicit))")
    assert str(mesh22) == "Mesh('data': 2, 'model': 2, axis_types=(Explicit, Explicit))"
    assert Mesh(devs[:2], "i").axis_types == (AxisType.Auto,)
    with pytest.raises(ValueError, match="ndim"):
        Mesh(np.array(devs[:4]), ("a", "b"))
    with pytest.raises(ValueError, match="Number of devices 4 must be >="):
        functrans.make_mesh((8,), ("i",))
    for names in (("",), ("data", "")):  # '' was accepted as an axis name
        with pytest.raises(ValueError, match="empty strings"):
            Mesh(np.array(devs[:len(names) * 2]).reshape((2,) * len(names)), names)
        with pytest.raises(ValueError, match="empty strings"):
            functrans.make_mesh((2,) * len(names), names)


def test_set_mesh_as_context_and_setter(mesh22):
    from functrans.sharding import get_mesh
    assert get_mesh().empty
    with functrans.set_mesh(mesh22):
        assert get_mesh() == mesh22
    assert get_mesh().empty
    previous = functrans.set_mesh(mesh22)
    try:
        assert get_mesh() == mesh22
    finally:
        previous.__exit__(None, None, None)
    assert get_mesh().empty


def test_named_sharding_indices_and_errors(mesh22):
    s = NamedSharding(mesh22, P("data"))
    assert s.shard_shape((8, 4)) == (4, 4) and not s.is_fully_replicated
    assert s.num_devices == 4 and s.device_set == set(functrans.devices()[:4])
    idx = s.devices_indices_map((8, 4))
    d = functrans.devices()
    assert idx[d[0]] == idx[d[1]] == (slice(0, 4), slice(None))
    assert idx[d[2]] == (slice(4, 8), slice(None))
    assert NamedSharding(mesh22, P()).is_fully_replicated
    assert s != NamedSharding(mesh22, P("data", None))
    assert s.is_equivalent_to(NamedSharding(mesh22, P("data", None)), 2)
    assert repr(s) == ("NamedSharding(mesh=Mesh('data': 2, 'model': 2, axis_types=(Explicit, "
                       "Explicit)), spec=P('data',), memory_kind=device)")
    with pytest.raises(ValueError, match="Resource axis: foo"):
        NamedSharding(mesh22, P("foo"))
    with pytest.raises(DuplicateSpecError):
        NamedSharding(mesh22, P("data", "data"))
    with pytest.raises(ValueError, match="does not evenly divide the dimension size 3"):
        s.shard_shape((3, 4))
    with pytest.raises(ValueError, match="rank at least 2"):
        NamedSharding(mesh22, P("data", "model")).shard_shape((4,))


SPECS = [P(), P("data"), P(None, "model"), P("data", "model"), P("model", "data"),
         P(("data", "model")), P(None, ("model", "data"))]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_device_put_blocks_equal_numpy_slices(mesh22, spec):
    value = np.arange(8 * 12, dtype=np.float32).reshape(8, 12)
    x = functrans.device_put(value, NamedSharding(mesh22, spec))
    assert isinstance(x, functrans.Array) and x.sharding == NamedSharding(mesh22, spec)
    assert x.shape == (8, 12) and x.dtype == np.float32
    _blocks_match(x, value)
    np.testing.assert_array_equal(np.asarray(x), value)
    assert len(x.addressable_shards) == 4
    # the caller's array stays theirs: later writes change nothing
    value[:] = -1
    assert float(np.asarray(x)[0, 1]) == 1.0


@pytest.mark.parametrize("source", SPECS, ids=str)
def test_reshard_between_specs_from_blocks(mesh22, source):
    value = np.arange(8 * 12, dtype=np.int32).reshape(8, 12)
    x = functrans.device_put(value, NamedSharding(mesh22, source))
    for target in SPECS:
        y = functrans.device_put(x, NamedSharding(mesh22, target))
        _blocks_match(y, value)
        assert y.sharding.spec == target


def test_replica_ids_and_fully_replicated(mesh22):
    x = functrans.device_put(np.ones((4, 2)), NamedSharding(mesh22, P("model")))
    assert sorted(s.replica_id for s in x.addressable_shards) == [0, 0, 1, 1]
    r = functrans.device_put(np.ones(3), NamedSharding(mesh22, P()))
    assert r.is_fully_replicated and {s.replica_id for s in r.addressable_shards} == {0, 1, 2, 3}
    assert not x.is_fully_replicated


def test_plain_arrays_have_a_single_device_sharding():
    x = functrans.numpy.arange(3.0)
    assert isinstance(x.sharding, SingleDeviceSharding) and x.is_fully_replicated
    (shard,) = x.addressable_shards
    assert shard.index == (slice(None),) and shard.replica_id == 0
    np.testing.assert_array_equal(np.asarray(shard.data), [0, 1, 2])
    d = functrans.devices()[0]
    assert functrans.device_put(np.ones(2), SingleDeviceSharding(d)).sharding == \
        SingleDeviceSharding(d)


def test_device_put_tree_prefix_of_shardings(mesh22):
    a, b = np.ones((4, 2), np.float32), np.zeros(4, np.float32)
    out = functrans.device_put({"a": a, "b": b}, {"a": NamedSharding(mesh22, P("data")),
                                                  "b": NamedSharding(mesh22, P())})
    assert out["a"].sharding.spec == P("data") and out["b"].sharding.spec == P()


def test_eager_ops_and_jit_see_the_whole_array(mesh22):
    value = np.arange(16.0, dtype=np.float32).reshape(4, 4)
    x = functrans.device_put(value, NamedSharding(mesh22, P("data", "model")))
    np.testing.assert_allclose(np.asarray(x * 2 + 1), value * 2 + 1)
    np.testing.assert_allclose(float(x.sum()), value.sum())
    assert pickle.loads(pickle.dumps(x)).sharding == x.sharding


def test_make_array_from_callback_calls_once_per_block(mesh22):
    value = np.arange(32.0, dtype=np.float32).reshape(8, 4)
    seen = []

    def block(index):
        seen.append(index)
        return value[index]

    s = NamedSharding(mesh22, P("data"))
    a = functrans.make_array_from_callback((8, 4), s, block)
    assert len(seen) == 2  # one call per distinct block, not per device
    _blocks_match(a, value)
    with pytest.raises(ValueError, match="expects"):
        functrans.make_array_from_callback((8, 4), s, lambda index: np.ones((3, 4)))


def test_make_array_from_single_device_arrays_by_device(mesh22):
    devs = list(mesh22.devices.flat)
    s = NamedSharding(mesh22, P("data", "model"))
    pieces = [functrans.device_put(np.full((2, 3), i, np.float32), d) for i, d in enumerate(devs)]
    a = functrans.make_array_from_single_device_arrays((4, 6), s, pieces[::-1])
    expected = np.block([[np.full((2, 3), 0), np.full((2, 3), 1)],
                         [np.full((2, 3), 2), np.full((2, 3), 3)]])
    np.testing.assert_array_equal(np.asarray(a), expected)
    with pytest.raises(ValueError, match="expects blocks of shape"):
        functrans.make_array_from_single_device_arrays((4, 4), s, pieces)


def test_make_array_from_process_local_data_single_process(mesh22):
    local = np.arange(24.0, dtype=np.float32).reshape(8, 3)
    a = functrans.make_array_from_process_local_data(NamedSharding(mesh22, P("data")), local)
    assert a.shape == (8, 3)
    _blocks_match(a, local)


def test_visualize_array_sharding_table(mesh22, capsys):
    x = functrans.device_put(np.zeros((4, 4)), NamedSharding(mesh22, P("data", "model")))
    functrans.debug.visualize_array_sharding(x)
    assert capsys.readouterr().out.splitlines() == [
        "┌───────┬───────┐", "│ CPU 0 │ CPU 1 │", "├───────┼───────┤",
        "│ CPU 2 │ CPU 3 │", "└───────┴───────┘"]
    functrans.debug.visualize_array_sharding(
        functrans.device_put(np.zeros(4), NamedSharding(mesh22, P("model"))))
    assert capsys.readouterr().out.splitlines()[1] == "│ CPU 0,2 │ CPU 1,3 │"
    with pytest.raises(ValueError, match="1 or 2 dimensions"):
        functrans.debug.visualize_sharding((2, 2, 2), NamedSharding(mesh22, P()))


def test_pmap_outputs_have_a_named_sharding():
    functrans.config.update("cpu_device_count", 2)
    y = functrans.pmap(lambda v: v * 2)(np.ones((2, 3), np.float32))
    assert y.sharding.spec == P("_internal_pmap_axis_name") and y.sharding.num_devices == 2


@given(st.data())
def test_random_shapes_and_specs_round_trip(data):
    functrans.config.update("cpu_device_count", 4)
    mesh = functrans.make_mesh((2, 2), ("a", "b"))
    ndim = data.draw(st.integers(1, 3))
    names = data.draw(st.permutations(["a", "b", None, None, None]))
    entries = []
    for name in names[:ndim]:
        entries.append(name)
    spec = P(*entries)
    shape = [data.draw(st.integers(1, 3)) * (2 if e else 1) for e in entries]
    value = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x = functrans.device_put(value, NamedSharding(mesh, spec))
    _blocks_match(x, value)
    np.testing.assert_array_equal(np.asarray(x), value)


@pytest.mark.parametrize("module", ["functrans.sharding", "functrans.sharding._mesh",
                                    "functrans.sharding._partition_spec",
                                    "functrans.sharding._shardings",
                                    "functrans.sharding._arrays",
                                    "functrans.sharding._visualize"])
def test_docstring_examples(module):
    import doctest
    import importlib
    functrans.config.update("cpu_device_count", 1)
    result = doctest.testmod(importlib.import_module(module),
                             optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
