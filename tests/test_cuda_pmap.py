"""pmap over GPUs, with collectives through NCCL.

Three layers, each skipped with its reason when the machine lacks what it needs:

* anywhere: the plan that turns a collective's params into NCCL calls
  (``pmap_support.run_collective``) runs on NumPy arrays against a simulated NCCL group
  (which accepts only NCCL's dtypes) and must equal the primitive's ``group_impl`` bit for bit,
  on 1 to 4 members, for every axis parameter and many dtypes;
* anywhere: pmap's placement wiring (values kept on their device between segments,
  collectives on the device or on host copies, sharded outputs, no-copy inputs) runs over a
  fake device platform whose "device buffers" are tagged host arrays and whose collectives
  go through the same plan;
* with CuPy and a GPU: every collective, dtypes and the host fallback, a data-parallel
  training step, ``ShardedArray`` round trips and ``device_put_sharded`` over every GPU.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import _backends, _dtypes, _pmap, lax
from functrans._array import Array
from functrans._devices import Device
from functrans._pmap import PmapFunction, ShardedArray, device_put_replicated, \
    device_put_sharded, pmap
from functrans.backends.cuda import pmap_support, runtime
from functrans.backends.cuda.nccl import NCCL_TYPE_NAMES

from gpu_emulation import EmulatedCupy, EmulatedDeviceArray, _EmulatedCuda  # noqa: E402

BF16 = np.dtype(_dtypes.bfloat16)

needs_gpu = pytest.mark.skipif(not runtime.is_available(),
                               reason="CuPy with a CUDA GPU is not available: GPU pmap skipped")


# =============================================================================================
# A simulated NCCL group: NCCL's semantics on NumPy arrays, and only NCCL's dtypes
# =============================================================================================


class HostGroup:
    """``size`` ranks, all local, with the collectives of ``nccl.DeviceGroup``. ``max``/
    ``min`` drop NaNs (as fmax/fmin do), the rule least like NumPy's, so that the plan must
    restore NaN propagation itself."""

    def __init__(self, size: int):
        self.size = size
        self.ranks = list(range(size))
        self.calls: list = []

    def _check(self, arrays, what):
        self.calls.append(what)
        assert len(arrays) == self.size
        assert len({(a.shape, a.dtype) for a in arrays}) == 1
        assert arrays[0].dtype in NCCL_TYPE_NAMES, f"{what} got dtype {arrays[0].dtype}"
        assert all(a.flags.c_contiguous for a in arrays)

    @staticmethod
    def _reduce(arrays, op):
        fn = {"sum": np.add, "max": np.fmax, "min": np.fmin}[op]
        out = arrays[0]
        for a in arrays[1:]:
            out = fn(out, a)
        return np.asarray(out, arrays[0].dtype)

    def all_reduce(self, arrays, op="sum"):
        self._check(arrays, "all_reduce")
        total = self._reduce(arrays, op)
        return [total.copy() for _ in arrays]

    def all_gather(self, arrays):
        self._check(arrays, "all_gather")
        return [np.stack(arrays) for _ in arrays]

    def reduce_scatter(self, arrays, op="sum"):
        self._check(arrays, "reduce_scatter")
        assert arrays[0].shape[0] == self.size
        total = self._reduce(arrays, op)
        return [total[r].copy() for r in range(self.size)]

    def all_to_all(self, arrays):
        self._check(arrays, "all_to_all")
        assert arrays[0].shape[0] == self.size
        return [np.stack([arrays[j][r] for j in range(self.size)]) for r in range(self.size)]

    def permute(self, arrays, perm):
        self._check(arrays, "permute")
        outs = [np.zeros_like(a) for a in arrays]
        for src, dst in perm:
            outs[dst] = arrays[src].copy()
        return outs


def _collective_eqn(fun, operand, n):
    """The collective equation (primitive and params) that ``fun`` stages on one member's
    operand, in an axis 'i' of size ``n``: the real params, not hand-written ones."""
    closed = functrans.make_jaxpr(fun, axis_env=[("i", n)])(operand)
    eqns = [e for e in closed.jaxpr.eqns if e.primitive.is_collective]
    assert len(eqns) == 1, closed
    return eqns[0].primitive, eqns[0].params


def _members(rng, n, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return [rng.random(shape) < 0.5 for _ in range(n)]
    if dtype.kind in "iu":
        return [rng.integers(-50 if dtype.kind == "i" else 0, 50, shape).astype(dtype)
                for _ in range(n)]
    if dtype.kind == "c":
        return [(rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
                for _ in range(n)]
    return [rng.standard_normal(shape).astype(dtype) for _ in range(n)]


def _plan_matches_group_impl(fun, shape, dtype, n, rng):
    arrays = _members(rng, n, shape, dtype)
    primitive, params = _collective_eqn(fun, arrays[0], n)
    expected = primitive.group_impl([a.copy() for a in arrays], **params)
    assert pmap_support.nccl_supports(primitive.name, dtype, arrays[0].size), primitive.name
    group = HostGroup(n)
    got = pmap_support.run_collective(primitive.name, params, arrays, group, np)
    assert group.calls, "no NCCL call was planned"
    assert len(got) == n
    for g, e in zip(got, expected):
        e = np.asarray(e)
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, e.shape, g.dtype, e.dtype)
        np.testing.assert_array_equal(g, e)


# (function of one member's operand, operand shape as a function of n)
PLAN_CASES = {
    "psum": (lambda v: lax.psum(v, "i"), lambda n: (3, 2)),
    "psum_scalar": (lambda v: lax.psum(v, "i"), lambda n: ()),
    "pmax": (lambda v: lax.pmax(v, "i"), lambda n: (4,)),
    "pmin": (lambda v: lax.pmin(v, "i"), lambda n: (2, 3)),
    "all_gather": (lambda v: lax.all_gather(v, "i"), lambda n: (2, 3)),
    "all_gather_scalar": (lambda v: lax.all_gather(v, "i"), lambda n: ()),
    "all_gather_axis1": (lambda v: lax.all_gather(v, "i", axis=1), lambda n: (2, 3)),
    "all_gather_axis2": (lambda v: lax.all_gather(v, "i", axis=2), lambda n: (2, 3)),
    "all_gather_tiled0": (lambda v: lax.all_gather(v, "i", tiled=True), lambda n: (2, 3)),
    "all_gather_tiled1": (lambda v: lax.all_gather(v, "i", axis=1, tiled=True),
                          lambda n: (2, 3, 2)),
    "psum_scatter": (lambda v: lax.psum_scatter(v, "i"), lambda n: (n, 3)),
    "psum_scatter_dim1": (lambda v: lax.psum_scatter(v, "i", scatter_dimension=1),
                          lambda n: (2, n, 3)),
    "psum_scatter_tiled": (lambda v: lax.psum_scatter(v, "i", tiled=True),
                           lambda n: (2 * n, 3)),
    "psum_scatter_tiled_dim1": (
        lambda v: lax.psum_scatter(v, "i", scatter_dimension=1, tiled=True),
        lambda n: (3, 2 * n, 2)),
    "all_to_all_0_0": (lambda v: lax.all_to_all(v, "i", 0, 0), lambda n: (n, 3)),
    "all_to_all_0_1": (lambda v: lax.all_to_all(v, "i", 0, 1), lambda n: (n, 3)),
    "all_to_all_1_0": (lambda v: lax.all_to_all(v, "i", 1, 0), lambda n: (2, n, 3)),
    "all_to_all_2_1": (lambda v: lax.all_to_all(v, "i", 2, 1), lambda n: (2, 3, n)),
    "all_to_all_tiled_0_1": (lambda v: lax.all_to_all(v, "i", 0, 1, tiled=True),
                             lambda n: (2 * n, 3)),
    "all_to_all_tiled_1_0": (lambda v: lax.all_to_all(v, "i", 1, 0, tiled=True),
                             lambda n: (3, 2 * n)),
    "all_to_all_tiled_2_0": (lambda v: lax.all_to_all(v, "i", 2, 0, tiled=True),
                             lambda n: (2, 3, 2 * n)),
    "all_to_all_tiled_1_1": (lambda v: lax.all_to_all(v, "i", 1, 1, tiled=True),
                             lambda n: (2, 2 * n, 3)),
}


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("case", sorted(PLAN_CASES))
def test_nccl_plan_equals_group_impl(case, n):
    fun, shape = PLAN_CASES[case]
    rng = np.random.default_rng(abs(hash((case, n))) % 2 ** 32)
    for dtype in (np.float32, np.int32, np.float16):
        _plan_matches_group_impl(fun, shape(n), dtype, n, rng)


@pytest.mark.parametrize("n", [1, 3])
def test_nccl_plan_ppermute(n):
    rng = np.random.default_rng(n)
    perms = [[(i, (i + 1) % n) for i in range(n)], [(0, n - 1)], []]
    for perm in perms:
        for dtype in (np.float32, np.int8, np.bool_):
            _plan_matches_group_impl(lambda v, p=perm: lax.ppermute(v, "i", p), (2, 3),
                                     dtype, n, rng)


@pytest.mark.parametrize("case", ["all_gather_tiled1", "all_to_all_tiled_1_0", "psum",
                                  "psum_scatter_dim1"])
def test_nccl_plan_other_dtypes(case):
    """Data moves as bytes (every dtype); sums of complex numbers as sums of their parts."""
    fun, shape = PLAN_CASES[case]
    rng = np.random.default_rng(7)
    dtypes = [np.complex64, np.float64, np.uint8, np.int64]
    if not case.startswith("psum"):
        dtypes += [np.bool_, np.int16, BF16]
    for dtype in dtypes:
        _plan_matches_group_impl(fun, shape(3), dtype, 3, rng)


def test_nccl_plan_max_min_propagate_nan_and_handle_bool():
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(4).astype(np.float32) for _ in range(3)]
    arrays[1][2] = np.nan
    for fun, ref in ((lambda v: lax.pmax(v, "i"), np.maximum),
                     (lambda v: lax.pmin(v, "i"), np.minimum)):
        prim, params = _collective_eqn(fun, arrays[0], 3)
        got = pmap_support.run_collective(prim.name, params, arrays, HostGroup(3), np)
        want = ref(ref(arrays[0], arrays[1]), arrays[2])
        assert np.isnan(want[2])
        for g in got:
            np.testing.assert_array_equal(g, want)
    for fun in ("pmax", "pmin"):
        _plan_matches_group_impl(lambda v, f=fun: getattr(lax, f)(v, "i"), (5,), np.bool_, 3,
                                 rng)


def test_nccl_supports_says_which_collectives_fall_back_to_the_host():
    yes, no = pmap_support.nccl_supports, lambda *a: not pmap_support.nccl_supports(*a)
    assert yes("psum", np.float32, 4) and yes("psum", np.float16, 4)
    assert yes("psum", np.complex64, 4) and yes("reduce_scatter", np.complex128, 4)
    assert yes("pmax", np.int8, 4) and yes("pmin", np.bool_, 4)
    for name in ("all_gather", "all_to_all", "ppermute"):
        for dtype in (BF16, np.bool_, np.int16, np.complex64):
            assert yes(name, dtype, 4)
    assert no("psum", BF16, 4) and no("psum", np.int16, 4) and no("psum", np.bool_, 4)
    assert no("reduce_scatter", BF16, 4) and no("pmax", BF16, 4) and no("pmax", np.complex64, 4)
    assert no("psum", np.float32, 0) and no("all_gather", np.float32, 0)
    assert no("axis_index", np.int32, 1) and no("some_new_collective", np.float32, 4)


def test_nccl_plan_rejects_a_group_of_another_size():
    prim, params = _collective_eqn(lambda v: lax.all_gather(v, "i"), np.zeros(2, np.float32), 2)
    with pytest.raises(ValueError, match="NCCL group has 3 ranks"):
        pmap_support.run_collective(prim.name, params, [np.zeros(2, np.float32)] * 3,
                                    HostGroup(3), np)


# =============================================================================================
# pmap's placement wiring, over a fake device platform
# =============================================================================================


class FakeArray(Array):
    """A "device buffer": a host array tagged with the fake device it lives on."""

    __slots__ = ("home",)
    _platform = "fake"

    def __init__(self, value, device, weak_type=False):
        super().__init__(np.array(value), weak_type, device)
        self.home = device


class FakeDevice(Device):
    __slots__ = ()

    def __init__(self, id):
        super().__init__("fake", id)

    def put(self, leaf):
        if isinstance(leaf, FakeArray) and leaf.home == self:
            return leaf
        return FakeArray(functrans.core.to_numpy(leaf), self)


class FakePlacement:
    """What the GPU placement does, with FakeArrays for GPU buffers and the NCCL plan run by
    a HostGroup. Counts copies onto devices and where each collective ran."""

    log: list = []

    def __init__(self, devices):
        self.devices = list(devices)
        self.group = None

    def prepare(self, needs_collectives):
        if needs_collectives and self.group is None:
            self.group = HostGroup(len(self.devices))

    def put(self, member, x, aval=None):
        device = self.devices[member]
        if isinstance(x, FakeArray) and x.home == device:
            return x
        self.log.append(("copy", member))
        return device.put(np.asarray(functrans.core.to_numpy(x, aval)))

    def to_host(self, member, x):
        return np.asarray(x._value if isinstance(x, Array) else x)

    def run_segment(self, member, executable, args, out_avals):
        for a in args:
            assert not isinstance(a, FakeArray) or a.home == self.devices[member]
        host = [a._value if isinstance(a, FakeArray) else a for a in args]
        return [FakeArray(o, self.devices[member]) for o in executable(*host)]

    def exchange_value(self, member, x):
        return self.put(member, x)

    def collective(self, primitive, params, values, offset):
        first = values[0]
        if not pmap_support.nccl_supports(primitive.name, first.dtype, first.size):
            self.log.append(("host", primitive.name))
            return None
        self.log.append(("device", primitive.name))
        outs = pmap_support.run_collective(primitive.name, params,
                                           [v._value for v in values], self.group, np)
        return [FakeArray(o, d) for o, d in zip(outs, self.devices)]

    def collective_result(self, member, x, aval):
        return x if isinstance(x, FakeArray) else np.asarray(x, aval.dtype)

    def output_shard(self, member, x, aval):
        return x if isinstance(x, FakeArray) else self.put(member, np.asarray(x, aval.dtype))


@pytest.fixture
def fake_devices(monkeypatch):
    """Four fake devices whose segments the llvm backend compiles."""
    llvm = _backends.get_backend("cpu")
    monkeypatch.setitem(_backends._registry, "fake",
                        _backends.Backend("fake", "fake", llvm.compile, priority=0))
    monkeypatch.setitem(_pmap._placements, "fake", FakePlacement)
    FakePlacement.log = []
    return [FakeDevice(i) for i in range(4)]


def _vmap_reference(fun, *args, **kw):
    return functrans.vmap(fun, axis_name="i", **kw)(*args)


# (function, the primitive that must have run on the "device")
FAKE_CASES = {
    "psum": (lambda v: lax.psum(v, "i") * 2.0, "psum"),
    "pmean": (lambda v: lax.pmean(v, "i"), "psum"),
    "pmax": (lambda v: lax.pmax(v, "i"), "pmax"),
    "pmin": (lambda v: lax.pmin(v, "i"), "pmin"),
    "all_gather_tiled_axis1": (lambda v: lax.all_gather(v, "i", axis=1, tiled=True),
                               "all_gather"),
    "psum_scatter_tiled": (lambda v: lax.psum_scatter(v, "i", scatter_dimension=1, tiled=True),
                           "reduce_scatter"),
    "all_to_all": (lambda v: lax.all_to_all(v, "i", 1, 0, tiled=True), "all_to_all"),
    "ppermute": (lambda v: lax.ppermute(v, "i", [(0, 1), (1, 2), (2, 3), (3, 0)]), "ppermute"),
    "axis_index": (lambda v: v * lax.axis_index("i"), None),
    # the operand is a host value (axis_index is a per-member constant): put on the device
    "psum_of_axis_index": (lambda v: v + lax.psum(lax.axis_index("i"), "i"), "psum"),
    "chain": (lambda v: jnp.sin(lax.psum(v, "i")) + lax.all_gather(v, "i").sum(0), "psum"),
}


@pytest.mark.parametrize("case", sorted(FAKE_CASES))
def test_fake_platform_collectives_equal_vmap(fake_devices, case):
    fun, primitive = FAKE_CASES[case]
    x = np.random.default_rng(1).standard_normal((4, 3, 8)).astype(np.float32)
    out = pmap(fun, axis_name="i", devices=fake_devices)(x)
    assert isinstance(out, ShardedArray)
    assert all(isinstance(s, FakeArray) and s.home == d
               for s, d in zip(out._shards, fake_devices))
    np.testing.assert_allclose(np.asarray(out), np.asarray(_vmap_reference(fun, x)),
                               rtol=1e-6, atol=1e-6)
    if primitive is not None:
        assert ("device", primitive) in FakePlacement.log
    assert not [e for e in FakePlacement.log if e[0] == "host"]


def test_fake_platform_falls_back_to_host_for_dtypes_nccl_cannot_reduce(fake_devices):
    x = (np.arange(8).reshape(4, 2) % 3).astype(np.int16)
    out = pmap(lambda v: lax.psum(v, "i"), axis_name="i", devices=fake_devices)(x)
    np.testing.assert_array_equal(np.asarray(out), np.broadcast_to(x.sum(0), x.shape))
    assert ("host", "psum") in FakePlacement.log
    b = np.array([[True, False], [False, False], [True, True], [False, True]])
    out = pmap(lambda v: lax.all_gather(v, "i"), axis_name="i", devices=fake_devices)(b)
    np.testing.assert_array_equal(np.asarray(out), np.broadcast_to(b, (4, 4, 2)))
    assert ("device", "all_gather") in FakePlacement.log
    assert all(isinstance(s, FakeArray) for s in out._shards)


def test_fake_platform_outputs_stay_on_devices_and_feed_back_without_copies(fake_devices):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    f = pmap(lambda v: lax.psum(v, "i") + v, axis_name="i", devices=fake_devices)
    y = f(x)
    assert y.sharding_devices == fake_devices
    np.testing.assert_allclose(np.asarray(y), x.sum(0) + x)
    FakePlacement.log.clear()
    z = f(y)
    assert not [e for e in FakePlacement.log if e[0] == "copy"], FakePlacement.log
    np.testing.assert_allclose(np.asarray(z), 6 * x.sum(0) + x)  # psum(y) + y, n = 4
    per_member = PmapFunction._shard_inputs([y], [0], fake_devices)
    assert all(m[0] is s for m, s in zip(per_member, y._shards))
    # host inputs are copied to each device once
    FakePlacement.log.clear()
    f(x)
    assert sorted(e for e in FakePlacement.log if e[0] == "copy") == [("copy", m) for m in range(4)]


def test_fake_platform_out_axes_and_broadcast_inputs(fake_devices):
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    w = fake_devices[0].put(np.float32(3.0))
    f = pmap(lambda v, s: (lax.psum(v, "i") * s, v * s), axis_name="i", in_axes=(0, None),
             out_axes=(None, 1), devices=fake_devices)
    total, per = f(x, w)
    assert isinstance(total, FakeArray) and total.home == fake_devices[0]
    np.testing.assert_allclose(np.asarray(total), x.sum(0) * 3)
    assert type(per) is Array and per.shape == (2, 4)
    np.testing.assert_allclose(np.asarray(per), (x * 3).T)


def test_fake_platform_device_put_sharded_and_replicated(fake_devices):
    shards = [np.full(2, i, np.float32) for i in range(4)]
    sh = device_put_sharded(shards, fake_devices)
    rep = device_put_replicated({"b": np.float32(0.5)}, fake_devices)
    assert all(isinstance(s, FakeArray) and s.home == d for s, d in zip(sh._shards, fake_devices))
    assert all(isinstance(s, FakeArray) for s in rep["b"]._shards)
    assert all(isinstance(b, FakeArray) for b in sh.device_buffers)
    FakePlacement.log.clear()
    out = pmap(lambda s, p: s + p["b"], devices=fake_devices)(sh, rep)
    assert not FakePlacement.log  # both inputs were already on the devices
    np.testing.assert_allclose(np.asarray(out), np.stack(shards) + 0.5)
    assert out.block_until_ready() is out


def test_fake_platform_collectives_inside_control_flow_run_on_host_copies(fake_devices):
    x = np.arange(8.0, dtype=np.float32).reshape(4, 2)

    def loop(v):
        return lax.fori_loop(0, 3, lambda i, c: lax.psum(c, "i") * 0.5, v)

    out = pmap(loop, axis_name="i", devices=fake_devices)(device_put_sharded(list(x),
                                                                             fake_devices))
    np.testing.assert_allclose(np.asarray(out), np.asarray(_vmap_reference(loop, x)))
    assert all(isinstance(s, FakeArray) and s.home == d for s, d in zip(out._shards, fake_devices))
    assert not [e for e in FakePlacement.log if e[0] == "device"]


def test_platform_checks(fake_devices):
    functrans.config.update("cpu_device_count", 2)
    mixed = [fake_devices[0], functrans.devices("cpu")[0]]
    with pytest.raises(ValueError, match="one platform"):
        pmap(lambda v: v, devices=mixed)(np.zeros((2, 1), np.float32))
    with pytest.raises(ValueError, match="compiles for cpu devices"):
        pmap(lambda v: v + 1, devices=fake_devices, backend="llvm")(np.zeros((4, 1), np.float32))
    nowhere = [Device("nowhere", i) for i in range(2)]
    with pytest.raises(NotImplementedError, match="nowhere"):
        pmap(lambda v: v + 1, devices=nowhere)(np.zeros((2, 1), np.float32))


# =============================================================================================
# The GPU placement itself, on an emulated CuPy (host arrays tagged with a GPU ordinal)
# =============================================================================================


class EmulatedDeviceGroup(HostGroup):
    """A HostGroup that, like nccl.DeviceGroup, takes one array per GPU, on that GPU, and
    returns each result on its GPU."""

    def __init__(self, local_ids):
        super().__init__(len(local_ids))
        self.local_devices = list(local_ids)

    def _check(self, arrays, what):
        for a, gpu in zip(arrays, self.local_devices):
            assert isinstance(a, EmulatedDeviceArray) and a.gpu == gpu, (what, gpu)
        super()._check([np.asarray(a) for a in arrays], what)

    def _on_devices(self, outs):
        placed = []
        for o, gpu in zip(outs, self.local_devices):
            with _EmulatedCuda.Device(gpu):
                placed.append(EmulatedCupy._new(np.asarray(o)))
        return placed

    def all_reduce(self, arrays, op="sum"):
        return self._on_devices(super().all_reduce(arrays, op))

    def all_gather(self, arrays):
        return self._on_devices(super().all_gather(arrays))

    def reduce_scatter(self, arrays, op="sum"):
        return self._on_devices(super().reduce_scatter(arrays, op))

    def all_to_all(self, arrays):
        return self._on_devices(super().all_to_all(arrays))

    def permute(self, arrays, perm):
        return self._on_devices(super().permute(arrays, perm))


def _emulated_cuda_compile(closed, devices=None):
    """Segments compiled for the CPU, called like a CudaExecutable with device_outputs: device
    arguments (bfloat16 as uint16 bits) on the current GPU in, device results out."""
    executable = _backends.get_backend("cpu").compile(closed, devices)
    in_avals = closed.in_avals

    def run(*args):
        host = []
        for a, aval in zip(args, in_avals):
            if isinstance(a, EmulatedDeviceArray):
                a._checked()
                a = np.asarray(a).view(aval.dtype) if aval.dtype == BF16 else np.asarray(a)
            host.append(a)
        outs = []
        for o in executable(*host):
            o = np.asarray(o)
            outs.append(EmulatedCupy._new(o.view(np.uint16) if o.dtype == BF16 else o))
        return outs

    return run


@pytest.fixture
def emulated_gpus(monkeypatch):
    """Four GpuDevices on the emulated CuPy: the real GpuPlacement, GpuArray and
    GpuDevice.put run; segments and NCCL are emulated."""
    from functrans.backends.cuda import arrays
    from functrans.backends.cuda.arrays import GpuDevice
    monkeypatch.setattr(runtime, "cupy_module", lambda: EmulatedCupy)
    monkeypatch.setattr(arrays, "cupy_module", lambda: EmulatedCupy)
    monkeypatch.setitem(_backends._registry, "emulated_cuda",
                        _backends.Backend("emulated_cuda", "gpu", _emulated_cuda_compile,
                                          priority=100))
    monkeypatch.setattr(pmap_support, "device_group", EmulatedDeviceGroup)
    return [GpuDevice(i, 0, i) for i in range(4)]


def _on_emulated_gpu(s, device) -> bool:
    from functrans.backends.cuda.arrays import GpuArray
    return isinstance(s, GpuArray) and s.device_buffer.gpu == device.local_id and \
        s.device == device


@pytest.mark.parametrize("case", sorted(FAKE_CASES))
def test_emulated_gpu_collectives_equal_vmap(emulated_gpus, case, monkeypatch):
    fun, primitive = FAKE_CASES[case]
    x = np.random.default_rng(4).standard_normal((4, 3, 8)).astype(np.float32)
    with _count_paths(monkeypatch) as counts:
        out = pmap(fun, axis_name="i", devices=emulated_gpus)(x)
    assert all(_on_emulated_gpu(s, d) for s, d in zip(out._shards, emulated_gpus))
    np.testing.assert_allclose(np.asarray(out), np.asarray(_vmap_reference(fun, x)),
                               rtol=1e-6, atol=1e-6)
    assert counts["host"] == 0 and counts["nccl"] == (0 if primitive is None else
                                                      1 + (case == "chain")), counts


@pytest.mark.parametrize("dtype", [BF16, np.int16, np.bool_, np.complex64, np.float16])
def test_emulated_gpu_dtypes_and_host_fallback(emulated_gpus, dtype, monkeypatch):
    base = np.random.default_rng(5).standard_normal((4, 2, 4))
    x = (base > 0) if dtype == np.bool_ else (base * 8).astype(dtype)
    reduce = (lambda v: lax.pmax(v, "i")) if dtype == np.bool_ else \
        (lambda v: lax.psum(v, "i"))

    def fun(v):
        return reduce(v), lax.all_gather(v, "i", axis=1, tiled=True)

    with _count_paths(monkeypatch) as counts:
        total, gathered = pmap(fun, axis_name="i", devices=emulated_gpus)(x)
    want_total, want_gathered = _vmap_reference(fun, x)
    assert total.dtype == dtype and gathered.dtype == dtype
    np.testing.assert_array_equal(np.asarray(gathered), np.asarray(want_gathered))
    np.testing.assert_allclose(np.asarray(total).astype(np.complex128),
                               np.asarray(want_total).astype(np.complex128), rtol=1e-2)
    for out in (total, gathered):
        assert all(_on_emulated_gpu(s, d) for s, d in zip(out._shards, emulated_gpus))
    host_reduced = dtype in (BF16, np.int16)
    assert counts == {"nccl": 1 + (not host_reduced), "host": int(host_reduced)}


def test_emulated_gpu_round_trips_device_put_and_control_flow(emulated_gpus):
    from functrans.backends.cuda.arrays import GpuArray
    gpus = emulated_gpus
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    f = pmap(lambda v, w: lax.psum(v, "i") * w + v, axis_name="i", in_axes=(0, None),
             devices=gpus)
    w = gpus[2].put(np.float32(2.0))
    y = f(x, w)
    np.testing.assert_allclose(np.asarray(y), 2 * x.sum(0) + x)
    program = next(iter(f._cache.values()))[0]
    per_member = PmapFunction._shard_inputs([y], [0], gpus)
    for m, shard in enumerate(y._shards):
        assert _on_emulated_gpu(shard, gpus[m])
        assert per_member[m][0] is shard and program.placement.put(m, shard) is shard
    np.testing.assert_allclose(np.asarray(f(y, w)), 2 * (2 * x.sum(0) * 4 + x.sum(0)) + y)

    g = pmap(lambda v: (lax.pmean(v, "i"), v.T), axis_name="i", out_axes=(None, 1),
             devices=gpus)
    mean, per = g(device_put_sharded(list(x), gpus))
    assert isinstance(mean, GpuArray) and mean.device_buffer.gpu == 0
    np.testing.assert_allclose(np.asarray(mean), x.mean(0))
    assert type(per) is Array and per.shape == (3, 4)
    rep = device_put_replicated({"w": np.ones(3, BF16), "s": np.float32(1.5), "k": 2}, gpus)
    for leaf in rep.values():
        assert all(_on_emulated_gpu(s, d) for s, d in zip(leaf._shards, gpus))
        assert np.asarray(leaf).shape == leaf.shape
    assert rep["w"].dtype == BF16 and np.asarray(rep["w"]).dtype == BF16
    assert rep["s"].shape == (4,) and rep["k"].weak_type
    # scalars per member keep their shape () on the device (inputs, outputs, collectives)
    scalars = pmap(lambda v, s: (v, lax.psum(v, "i") * s), axis_name="i", in_axes=(0, None),
                   devices=gpus)(np.arange(4.0, dtype=np.float32), np.float32(2.0))
    for out in scalars:
        assert out.shape == (4,) and np.asarray(out).shape == (4,)
        assert all(s.shape == () for s in out._shards)
    np.testing.assert_array_equal(np.asarray(scalars[1]), np.full(4, 12.0))

    def loop(v):
        return lax.fori_loop(0, 2, lambda i, c: lax.psum(c, "i") * 0.5, v)

    out = pmap(loop, axis_name="i", devices=gpus)(y)
    np.testing.assert_allclose(np.asarray(out), np.asarray(_vmap_reference(loop, np.asarray(y))))
    assert all(_on_emulated_gpu(s, d) for s, d in zip(out._shards, gpus))


# =============================================================================================
# On GPUs
# =============================================================================================


@pytest.fixture
def gpus():
    if not runtime.is_available():
        pytest.skip("CuPy with a CUDA GPU is not available")
    return functrans.devices("gpu")


def _is_gpu_shard(s, device) -> bool:
    from functrans.backends.cuda.arrays import GpuArray
    return isinstance(s, GpuArray) and int(s.device_buffer.device.id) == device.local_id


@contextlib.contextmanager
def _count_paths(monkeypatch):
    """Counts collectives computed by the NCCL plan and on host copies."""
    counts = {"nccl": 0, "host": 0}
    plan, host = pmap_support.run_collective, _pmap._compute_collective

    def via_nccl(*args, **kwargs):
        counts["nccl"] += 1
        return plan(*args, **kwargs)

    def on_host(*args, **kwargs):
        counts["host"] += 1
        return host(*args, **kwargs)

    monkeypatch.setattr(pmap_support, "run_collective", via_nccl)
    monkeypatch.setattr(_pmap, "_compute_collective", on_host)
    yield counts


def _nccl_available(gpus) -> bool:
    return pmap_support.device_group([d.local_id for d in gpus]) is not None


GPU_CASES = {
    "psum": lambda v: lax.psum(v, "i"),
    "pmean": lambda v: lax.pmean(v, "i"),
    "pmax": lambda v: lax.pmax(v, "i"),
    "pmin": lambda v: lax.pmin(v, "i"),
    "all_gather": lambda v: lax.all_gather(v, "i"),
    "all_gather_axis1": lambda v: lax.all_gather(v, "i", axis=1),
    "all_gather_tiled": lambda v: lax.all_gather(v, "i", axis=1, tiled=True),
    "psum_scatter": lambda v: lax.psum_scatter(v, "i", scatter_dimension=2),
    "psum_scatter_tiled": lambda v: lax.psum_scatter(v, "i", scatter_dimension=1, tiled=True),
    "all_to_all": lambda v: lax.all_to_all(v, "i", 2, 0),
    "all_to_all_tiled": lambda v: lax.all_to_all(v, "i", 1, 0, tiled=True),
    "ppermute": None,  # a ring over the GPUs present, built in the test
    "axis_index": lambda v: v + lax.axis_index("i").astype(v.dtype),
}


@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "int32", "float16"])
@pytest.mark.parametrize("case", sorted(GPU_CASES))
def test_gpu_collectives_equal_vmap(gpus, case, dtype, monkeypatch):
    n = len(gpus)
    fun = GPU_CASES[case]
    if fun is None:
        fun = lambda v: lax.ppermute(v, "i", [(i, (i + 1) % n) for i in range(n)])  # noqa: E731
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((n, 2, 2 * n, n)) * 4).astype(dtype)
    with _count_paths(monkeypatch) as counts:
        out = pmap(fun, axis_name="i", devices=gpus)(x)
    want = np.asarray(_vmap_reference(fun, x))
    assert isinstance(out, ShardedArray) and all(_is_gpu_shard(s, d)
                                                 for s, d in zip(out._shards, gpus))
    tol = 1e-2 if dtype == "float16" else 1e-6
    np.testing.assert_allclose(np.asarray(out).astype(np.float64), want.astype(np.float64),
                               rtol=tol, atol=tol)
    if case != "axis_index" and _nccl_available(gpus):
        assert counts["nccl"] == 1 and counts["host"] == 0, counts


@needs_gpu
@pytest.mark.parametrize("case", ["bool_all_gather", "bool_pmax", "bf16_psum", "bf16_all_gather",
                                  "int16_psum", "complex_psum"])
def test_gpu_fallback_and_byte_moved_dtypes(gpus, case, monkeypatch):
    n = len(gpus)
    rng = np.random.default_rng(1)
    kind, op = case.split("_", 1)
    base = rng.standard_normal((n, 3, 4))
    x = {"bool": base > 0, "bf16": base.astype(BF16), "int16": (base * 10).astype(np.int16),
         "complex": (base + 1j * base[::-1]).astype(np.complex64)}[kind]
    fun = {"all_gather": lambda v: lax.all_gather(v, "i", axis=1),
           "pmax": lambda v: lax.pmax(v, "i"), "psum": lambda v: lax.psum(v, "i")}[op]
    with _count_paths(monkeypatch) as counts:
        out = pmap(fun, axis_name="i", devices=gpus)(x)
    want = np.asarray(_vmap_reference(fun, x))
    assert out.dtype == want.dtype

    def as_complex(a):
        return a.astype(np.complex128) if a.dtype.kind == "c" else \
            a.astype(np.float64).astype(np.complex128)
    np.testing.assert_allclose(as_complex(np.asarray(out)), as_complex(want), rtol=1e-2,
                               atol=1e-2)
    assert all(_is_gpu_shard(s, d) for s, d in zip(out._shards, gpus))
    if case in ("bf16_psum", "int16_psum"):
        assert counts["host"] == 1 and counts["nccl"] == 0, counts
    elif _nccl_available(gpus):
        assert counts["nccl"] == 1 and counts["host"] == 0, counts


def _mlp_loss(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    err = h @ params["w2"] - y
    return jnp.mean(err * err)


@needs_gpu
def test_gpu_data_parallel_training_step_matches_one_device(gpus):
    n = len(gpus)
    rng = np.random.default_rng(2)
    params = {"w1": rng.standard_normal((4, 8)).astype(np.float32) * 0.5,
              "b1": np.zeros(8, np.float32),
              "w2": rng.standard_normal((8, 2)).astype(np.float32) * 0.5}
    batches = [(rng.standard_normal((4 * n, 4)).astype(np.float32),
                rng.standard_normal((4 * n, 2)).astype(np.float32)) for _ in range(3)]

    def sgd(p, g):
        return functrans.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g)

    def step(p, x, y):
        loss, grads = functrans.value_and_grad(_mlp_loss)(p, x, y)
        return sgd(p, lax.pmean(grads, "batch")), lax.pmean(loss, "batch")

    def single_step(p, x, y):
        loss, grads = functrans.value_and_grad(_mlp_loss)(p, x, y)
        return sgd(p, grads), loss

    train = pmap(step, axis_name="batch", devices=gpus)
    replicated = device_put_replicated(params, gpus)
    assert all(_is_gpu_shard(s, d) for s, d in zip(replicated["w1"]._shards, gpus))
    single = functrans.jit(single_step, backend="cpu")
    reference = params
    for x, y in batches:
        replicated, loss = train(replicated, x.reshape(n, 4, 4), y.reshape(n, 4, 2))
        reference, ref_loss = single(reference, x, y)
        np.testing.assert_allclose(np.asarray(loss), np.full(n, float(ref_loss)), rtol=1e-4)
    for k in params:
        assert all(_is_gpu_shard(s, d) for s, d in zip(replicated[k]._shards, gpus))
        for m in range(n):
            np.testing.assert_allclose(np.asarray(replicated[k])[m], np.asarray(reference[k]),
                                       rtol=1e-4, atol=1e-5)


@needs_gpu
def test_gpu_sharded_outputs_stay_on_gpus_and_feed_back_without_copies(gpus):
    n = len(gpus)
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    f = pmap(lambda v: lax.psum(v, "i") + v, axis_name="i", devices=gpus)
    y = f(x)
    assert all(_is_gpu_shard(s, d) for s, d in zip(y._shards, gpus))
    assert all(_is_gpu_shard(s.data, s.device) for s in y.addressable_shards)
    np.testing.assert_allclose(np.asarray(y), x.sum(0) + x)       # the host view
    np.testing.assert_allclose(np.asarray(y[n - 1]), x.sum(0) + x[-1])
    per_member = PmapFunction._shard_inputs([y], [0], gpus)
    program = next(iter(f._cache.values()))[0]
    for m, shard in enumerate(y._shards):
        assert per_member[m][0] is shard
        assert program.placement.put(m, shard) is shard          # no copy onto its GPU
    z = f(y)
    np.testing.assert_allclose(np.asarray(z), (n + 2) * x.sum(0) + x)  # psum(y) + y
    same = pmap(lambda v: v, devices=gpus)(y)
    assert all(a is b for a, b in zip(same._shards, y._shards))
    assert y.block_until_ready() is y


@needs_gpu
def test_gpu_device_put_sharded_and_replicated(gpus):
    n = len(gpus)
    shards = [np.full(2, i, np.float32) for i in range(n)]
    sh = device_put_sharded(shards, gpus)
    rep = device_put_replicated({"b": np.float32(0.5)}, gpus)
    assert all(_is_gpu_shard(s, d) for s, d in zip(sh._shards, gpus))
    assert all(_is_gpu_shard(s, d) for s, d in zip(rep["b"]._shards, gpus))
    np.testing.assert_array_equal(np.asarray(sh), np.stack(shards))
    out = pmap(lambda s, p: s + p["b"], devices=gpus)(sh, rep)
    np.testing.assert_allclose(np.asarray(out), np.stack(shards) + 0.5)


@needs_gpu
def test_gpu_out_axes_backend_names_and_control_flow(gpus):
    from functrans.backends.cuda.arrays import GpuArray
    n = len(gpus)
    x = np.arange(2 * n, dtype=np.float32).reshape(n, 2)
    f = pmap(lambda v: (lax.psum(v, "i"), v * 2), axis_name="i", out_axes=(None, 1),
             devices=gpus)
    total, per = f(x)
    assert isinstance(total, GpuArray) and total.device == gpus[0]
    np.testing.assert_allclose(np.asarray(total), x.sum(0))
    assert type(per) is Array and per.shape == (2, n)
    np.testing.assert_allclose(np.asarray(per), (x * 2).T)
    for backend in ("cuda", "gpu"):
        out = pmap(lambda v: jnp.sin(v), backend=backend)(x[:1])
        assert _is_gpu_shard(out._shards[0], gpus[0])
        np.testing.assert_allclose(np.asarray(out), np.sin(x[:1]), rtol=1e-6)

    def loop(v):
        return lax.fori_loop(0, 3, lambda i, c: lax.psum(c, "i") * 0.5, v)

    out = pmap(loop, axis_name="i", devices=gpus)(x)
    np.testing.assert_allclose(np.asarray(out), np.asarray(_vmap_reference(loop, x)))
    assert all(_is_gpu_shard(s, d) for s, d in zip(out._shards, gpus))
