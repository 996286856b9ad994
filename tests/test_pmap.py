"""pmap and collectives on several CPU devices in one process.

Every collective is checked against a NumPy reference written here (independent of the
library's own group semantics), under pmap and under vmap with the same axis name (the two
implementations share nothing but the primitive), on 1, 2, 4 and 8 devices.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import functrans
from functrans import distributed, lax
from functrans._pmap import ShardedArray, device_put_replicated, device_put_sharded, pmap

DEVICE_COUNTS = [1, 2, 4, 8]


@pytest.fixture(params=DEVICE_COUNTS, ids=lambda n: f"{n}dev")
def ndev(request):
    """Run the test with this many CPU devices (conftest restores the setting)."""
    functrans.config.update("cpu_device_count", request.param)
    return request.param


def _rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def _both(fun, x, **kw):
    """``fun`` under pmap and under vmap with the axis name 'i'."""
    by_pmap = np.asarray(pmap(fun, axis_name="i", **kw)(x))
    by_vmap = np.asarray(functrans.vmap(fun, axis_name="i", **kw)(x))
    return by_pmap, by_vmap


# =============================================================================================
# NumPy references (one row per device)
# =============================================================================================

def _ref_all_to_all(x, split, concat, tiled):
    n = x.shape[0]
    out = []
    for j in range(n):
        chunks = [np.split(x[i], n, axis=split)[j] for i in range(n)]
        if tiled:
            out.append(np.concatenate(chunks, axis=concat))
        else:
            out.append(np.stack([np.squeeze(c, split) for c in chunks], axis=concat))
    return np.stack(out)


COLLECTIVE_CASES = {
    "psum": (lambda v: lax.psum(v, "i"), lambda x: np.broadcast_to(x.sum(0), x.shape)),
    "pmean": (lambda v: lax.pmean(v, "i"), lambda x: np.broadcast_to(x.mean(0), x.shape)),
    "pmax": (lambda v: lax.pmax(v, "i"), lambda x: np.broadcast_to(x.max(0), x.shape)),
    "pmin": (lambda v: lax.pmin(v, "i"), lambda x: np.broadcast_to(x.min(0), x.shape)),
    "all_gather": (lambda v: lax.all_gather(v, "i"),
                   lambda x: np.broadcast_to(x, (x.shape[0],) + x.shape)),
    "all_gather_axis1": (lambda v: lax.all_gather(v, "i", axis=1),
                         lambda x: np.stack([np.stack(list(x), axis=1)] * x.shape[0])),
    "all_gather_tiled": (lambda v: lax.all_gather(v, "i", tiled=True),
                         lambda x: np.stack([np.concatenate(list(x), 0)] * x.shape[0])),
    "axis_index": (lambda v: lax.axis_index("i"), lambda x: np.arange(x.shape[0])),
    "psum_of_constant": (lambda v: lax.psum(2.0, "i"), lambda x: np.full(x.shape[0], 2.0 * x.shape[0])),
    "shift_right": (None, None),  # ppermute, built per device count below
    "psum_scatter_tiled": (lambda v: lax.psum_scatter(v, "i", tiled=True),
                           lambda x: np.stack(np.split(x.sum(0), x.shape[0], axis=0))),
}


@pytest.mark.parametrize("name", sorted(COLLECTIVE_CASES))
def test_collective_matches_numpy(ndev, name):
    rng = np.random.default_rng(0)
    x = _rand(rng, ndev, 2 * ndev, 3)
    fun, ref = COLLECTIVE_CASES[name]
    if name == "shift_right":
        perm = [(i, (i + 1) % ndev) for i in range(ndev)]
        fun = lambda v: lax.ppermute(v, "i", perm)  # noqa: E731
        ref = lambda x: np.roll(x, 1, axis=0)  # noqa: E731
    expected = ref(x)
    by_pmap, by_vmap = _both(fun, x)
    np.testing.assert_allclose(by_pmap, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(by_vmap, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("split,concat", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("tiled", [False, True])
def test_all_to_all(ndev, split, concat, tiled):
    rng = np.random.default_rng(1)
    shape = [3, 3]
    shape[split] = 2 * ndev if tiled else ndev
    x = _rand(rng, ndev, *shape)
    fun = lambda v: lax.all_to_all(v, "i", split, concat, tiled=tiled)  # noqa: E731
    expected = _ref_all_to_all(x, split, concat, tiled)
    by_pmap, by_vmap = _both(fun, x)
    np.testing.assert_allclose(by_pmap, expected)
    np.testing.assert_allclose(by_vmap, expected)


def test_psum_scatter_untiled_and_partial_ppermute(ndev):
    rng = np.random.default_rng(2)
    x = _rand(rng, ndev, 3, ndev)
    by_pmap, by_vmap = _both(lambda v: lax.psum_scatter(v, "i", scatter_dimension=1), x)
    expected = np.stack([x.sum(0)[:, j] for j in range(ndev)])
    np.testing.assert_allclose(by_pmap, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(by_vmap, expected, rtol=1e-5, atol=1e-5)
    # Only device 0 sends (to the last device); everyone else receives zeros.
    perm = [(0, ndev - 1)]
    by_pmap, by_vmap = _both(lambda v: lax.ppermute(v, "i", perm), x)
    expected = np.zeros_like(x)
    expected[ndev - 1] = x[0]
    np.testing.assert_array_equal(by_pmap, expected)
    np.testing.assert_array_equal(by_vmap, expected)


def test_integer_and_multi_output_program(ndev):
    x = np.arange(ndev * 3, dtype=np.int32).reshape(ndev, 3)

    def f(v):
        total = lax.psum(v, "i")
        return {"total": total, "biggest": lax.pmax(v, "i"), "idx": lax.axis_index("i") + total[0]}

    out = pmap(f, axis_name="i")(x)
    np.testing.assert_array_equal(np.asarray(out["total"]), np.broadcast_to(x.sum(0), x.shape))
    np.testing.assert_array_equal(np.asarray(out["biggest"]), np.broadcast_to(x.max(0), x.shape))
    np.testing.assert_array_equal(np.asarray(out["idx"]), np.arange(ndev) + x.sum(0)[0])
    assert np.asarray(out["total"]).dtype == np.int32


@given(st.integers(0, 3), st.sampled_from([1, 2, 4]), st.integers(1, 3))
def test_random_programs_pmap_equals_vmap(seed, ndev_, width):
    functrans.config.update("cpu_device_count", ndev_)
    rng = np.random.default_rng(seed)
    x = _rand(rng, ndev_, width)

    def f(v):
        a = lax.tanh(v) * 2.0
        b = lax.psum(a, "i") - lax.pmax(v, "i")
        c = lax.all_gather(b * v, "i").sum(0)
        return lax.pmean(c * a, "i") + lax.axis_index("i")

    by_pmap, by_vmap = _both(f, x)
    np.testing.assert_allclose(by_pmap, by_vmap, rtol=1e-5, atol=1e-5)


# =============================================================================================
# Transformations: grad, vjp transposes, nested vmap, jit inside
# =============================================================================================

def _loss(w, x, y):
    pred = lax.tanh(x * w[0]) * w[1]
    return ((pred - y) ** 2).sum()


def test_pmap_of_grad_with_pmean_matches_single_device(ndev):
    rng = np.random.default_rng(3)
    w = _rand(rng, 2, 5)
    x = _rand(rng, ndev, 4, 5)
    y = _rand(rng, ndev, 4, 5)
    full_grad = np.asarray(functrans.grad(lambda w: _loss(w, x.reshape(-1, 5), y.reshape(-1, 5)) / ndev)(w))

    def step(w, xb, yb):
        return lax.pmean(functrans.grad(_loss)(w, xb, yb), "i")

    got = pmap(step, axis_name="i", in_axes=(None, 0, 0))(w, x, y)
    for d in range(ndev):
        np.testing.assert_allclose(np.asarray(got)[d], full_grad, rtol=1e-4, atol=1e-5)


def test_grad_of_pmapped_loss_matches_single_device(ndev):
    rng = np.random.default_rng(4)
    w = _rand(rng, 2, 5)
    x = _rand(rng, ndev, 4, 5)
    y = _rand(rng, ndev, 4, 5)
    per_device = pmap(lambda w, xb, yb: lax.psum(_loss(w, xb, yb), "i"), axis_name="i",
                      in_axes=(None, 0, 0))
    g = functrans.grad(lambda w: per_device(w, x, y)[0])(w)
    expected = functrans.grad(lambda w: _loss(w, x.reshape(-1, 5), y.reshape(-1, 5)))(w)
    np.testing.assert_allclose(np.asarray(g), np.asarray(expected), rtol=1e-4, atol=1e-5)


LINEAR_COLLECTIVES = {
    "psum": lambda v: lax.psum(v, "i"),
    "all_gather": lambda v: lax.all_gather(v, "i", axis=1),
    "all_gather_tiled": lambda v: lax.all_gather(v, "i", tiled=True),
    "psum_scatter": lambda v: lax.psum_scatter(v, "i", tiled=True),
    "all_to_all": lambda v: lax.all_to_all(v, "i", 0, 1, tiled=True),
    "ppermute": lambda v: lax.ppermute(v, "i", [(0, 1), (1, 0)]),
}


@pytest.mark.parametrize("name", sorted(LINEAR_COLLECTIVES))
@pytest.mark.parametrize("mapper", ["pmap", "vmap"])
def test_transpose_rules_dot_product(name, mapper):
    """For a linear map L over the axis, sum_i <L(x)_i, y_i> == sum_i <x_i, L^T(y)_i>,
    with L^T from vjp (the transpose rule) and L from the forward rule."""
    ndev = 2
    functrans.config.update("cpu_device_count", ndev)
    rng = np.random.default_rng(5)
    fun = LINEAR_COLLECTIVES[name]
    x = _rand(rng, ndev, 2 * ndev, 2)
    mapped = (lambda f, **kw: pmap(f, axis_name="i", **kw)) if mapper == "pmap" else \
        (lambda f, **kw: functrans.vmap(f, axis_name="i", **kw))
    lx = np.asarray(mapped(fun)(x))
    y = _rand(rng, *lx.shape)
    lty = np.asarray(mapped(lambda xi, yi: functrans.vjp(fun, xi)[1](yi)[0])(x, y))
    assert lty.shape == x.shape
    np.testing.assert_allclose(np.vdot(lx, y), np.vdot(x, lty), rtol=1e-4)


def test_pmax_derivative():
    functrans.config.update("cpu_device_count", 3)
    x = np.array([[1.0, 5.0], [3.0, 5.0], [2.0, 0.0]], np.float32)
    t = np.array([[10.0, 1.0], [20.0, 2.0], [30.0, 3.0]], np.float32)
    f = pmap(lambda a, b: functrans.jvp(lambda v: lax.pmax(v, "i"), (a,), (b,))[1], axis_name="i")
    out = np.asarray(f(x, t))
    # column 0: device 1 holds the max; column 1: a tie between devices 0 and 1, averaged
    np.testing.assert_allclose(out, np.array([[20.0, 1.5]] * 3))


def test_vmap_inside_pmap_with_two_axis_names(ndev):
    rng = np.random.default_rng(6)
    x = _rand(rng, ndev, 3, 2)

    def inner(v):
        return lax.psum(v, "j") + lax.psum(v, ("i", "j")) + lax.axis_index("j") * lax.axis_index("i")

    out = np.asarray(pmap(functrans.vmap(inner, axis_name="j"), axis_name="i")(x))
    expected = (x.sum(1, keepdims=True) + x.sum((0, 1))
                + np.arange(ndev)[:, None, None] * np.arange(3)[None, :, None])
    np.testing.assert_allclose(out, np.broadcast_to(expected, x.shape), rtol=1e-5, atol=1e-5)


def test_jit_inside_pmap_and_jit_of_pmap():
    functrans.config.update("cpu_device_count", 4)
    x = np.arange(8.0, dtype=np.float32).reshape(4, 2)
    inner = functrans.jit(lambda v: lax.psum(v * 2.0, "i") + 1.0)
    out = pmap(lambda v: inner(v) * v, axis_name="i")(x)
    np.testing.assert_allclose(np.asarray(out), (2 * x.sum(0) + 1.0) * x)
    outer = functrans.jit(pmap(lambda v: lax.psum(v, "i"), axis_name="i"))
    np.testing.assert_allclose(np.asarray(outer(x)), np.broadcast_to(x.sum(0), x.shape))


# =============================================================================================
# Arguments, outputs and sharded arrays
# =============================================================================================

def test_in_axes_out_axes_static_and_kwargs():
    functrans.config.update("cpu_device_count", 4)
    x = np.arange(12.0, dtype=np.float32).reshape(3, 4)   # mapped along axis 1
    b = np.float32(10.0)

    def f(v, scale, power, *, offset):
        return {"a": v * scale + offset, "b": lax.psum(v, "i") ** power}

    g = pmap(f, axis_name="i", in_axes=(1, None, None), out_axes={"a": 1, "b": None},
             static_broadcasted_argnums=(2,))
    out = g(x, b, 2, offset=np.ones(4, np.float32))
    np.testing.assert_allclose(np.asarray(out["a"]), x * 10.0 + 1.0)
    np.testing.assert_allclose(np.asarray(out["b"]), x.sum(1) ** 2)
    g(x, b, 2, offset=np.ones(4, np.float32))
    g(x, b, 3, offset=np.ones(4, np.float32))
    assert g._cache_size() == 2


def test_sharded_array_round_trip_and_no_copy(ndev):
    x = np.arange(ndev * 3, dtype=np.float32).reshape(ndev, 3)
    y = pmap(lambda v: v + 1.0)(x)
    assert isinstance(y, ShardedArray) and y.shape == (ndev, 3) and y.dtype == np.float32
    assert len(y.addressable_shards) == ndev
    np.testing.assert_array_equal(np.asarray(y), x + 1)
    np.testing.assert_array_equal(np.asarray(y[ndev - 1]), x[-1] + 1)
    assert repr(y).startswith("ShardedArray([[") and str(y) == str(x + 1)
    # A second pmap takes the per-device buffers as they are.
    z = pmap(lambda v: v * 2.0)(y)
    np.testing.assert_array_equal(np.asarray(z), (x + 1) * 2)
    from functrans._pmap import PmapFunction
    per_member = PmapFunction._shard_inputs([y], [0], functrans.local_devices()[:ndev])
    seen = [m[0] for m in per_member]
    assert all(a is b for a, b in zip(seen, y._shards))
    # ordinary array ops work on a sharded array too
    np.testing.assert_allclose(np.asarray(y * 2.0), (x + 1) * 2)


def test_device_put_replicated_and_sharded(ndev):
    devices = functrans.local_devices()
    params = {"w": np.ones((2, 3), np.float32), "b": np.float32(0.5)}
    rep = device_put_replicated(params, devices)
    assert rep["w"].shape == (ndev, 2, 3) and rep["b"].shape == (ndev,)
    shards = [np.full(2, i, np.float32) for i in range(ndev)]
    sh = device_put_sharded(shards, devices)
    out = pmap(lambda p, s: p["w"].sum() * s + p["b"], in_axes=(0, 0))(rep, sh)
    np.testing.assert_allclose(np.asarray(out), 6.0 * np.stack(shards) + 0.5)
    assert sh.devices() == set(devices)


# =============================================================================================
# Errors, raised before any device runs
# =============================================================================================

def test_too_many_entries_for_devices():
    functrans.config.update("cpu_device_count", 2)
    with pytest.raises(ValueError, match="only 2 devices"):
        pmap(lambda v: v)(np.zeros((3, 2), np.float32))


def test_inconsistent_mapped_sizes():
    functrans.config.update("cpu_device_count", 4)
    with pytest.raises(ValueError, match="inconsistent sizes"):
        pmap(lambda a, b: a + b)(np.zeros((2, 2), np.float32), np.zeros((3, 2), np.float32))


def test_unbound_axis_name():
    functrans.config.update("cpu_device_count", 2)
    ran = []

    def f(v):
        ran.append(1)
        return lax.psum(v, "j")

    with pytest.raises(NameError, match="unbound axis name: 'j'"):
        pmap(f, axis_name="i")(np.zeros((2, 2), np.float32))
    with pytest.raises(NameError, match="unbound axis name"):
        lax.psum(np.float32(1.0), "i")
    with pytest.raises(NameError, match="unbound axis name"):
        functrans.vmap(lambda v: lax.all_gather(v, "k"), axis_name="i")(np.zeros(2, np.float32))


def test_bad_shapes_and_params():
    functrans.config.update("cpu_device_count", 2)
    devices = functrans.local_devices()
    with pytest.raises(ValueError, match="differ in shape"):
        device_put_sharded([np.zeros(2, np.float32), np.zeros(3, np.float32)], devices)
    with pytest.raises(ValueError, match="one shard per device"):
        device_put_sharded([np.zeros(2, np.float32)], devices)
    with pytest.raises(ValueError, match="rank should be at least"):
        pmap(lambda v: v)(np.float32(1.0))
    with pytest.raises(TypeError, match="psum_scatter"):
        pmap(lambda v: lax.psum_scatter(v, "i"), axis_name="i")(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="more than once"):
        pmap(lambda v: lax.ppermute(v, "i", [(0, 1), (1, 1)]), axis_name="i")(np.zeros((2, 1), np.float32))


def test_rendezvous_timeout_and_peer_failure(monkeypatch):
    from functrans._pmap import _DeviceContext, _PeerFailed, _Rendezvous
    from functrans.primitives.collectives import psum_p
    monkeypatch.setitem(distributed._state, "timeout", 0.2)
    rv = _Rendezvous(2, 0, "test")
    ctx = _DeviceContext("i", 2, 0, 0, rv)
    params = dict(axes=("i",), axis_index_groups=None)
    with pytest.raises(distributed.DistributedTimeoutError, match="only 1 of 2 devices"):
        ctx.collective(psum_p, [np.ones(2, np.float32)], params)
    # after a failure every later arrival fails at once instead of waiting
    with pytest.raises(_PeerFailed):
        _DeviceContext("i", 2, 1, 1, rv).collective(psum_p, [np.ones(2, np.float32)], params)


def test_collectives_inside_control_flow():
    """A collective inside a loop body cannot be cut out of the program: the devices meet
    at the rendezvous from inside the loop, and the result equals vmap's."""
    if not all(hasattr(lax, n) for n in ("fori_loop", "scan")):
        pytest.skip("control flow is not available")
    functrans.config.update("cpu_device_count", 4)
    x = np.arange(8.0, dtype=np.float32).reshape(4, 2)

    def loop(v):
        return lax.fori_loop(0, 3, lambda i, c: lax.psum(c, "i") * 0.5, v)

    def scanned(v):
        def body(c, xs):
            c = c + lax.all_gather(xs, "i").sum(0)
            return c, lax.ppermute(c, "i", [(0, 1), (1, 2), (2, 3), (3, 0)])
        return lax.scan(body, v[0], v)

    expected = x.copy()
    for _ in range(3):
        expected = np.broadcast_to(expected.sum(0), x.shape) * 0.5
    by_pmap, by_vmap = _both(loop, x)
    np.testing.assert_allclose(by_pmap, expected)
    np.testing.assert_allclose(by_vmap, expected)
    got = pmap(scanned, axis_name="i")(x)
    want = functrans.vmap(scanned, axis_name="i")(x)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b))


def test_devices_argument_and_axis_size():
    functrans.config.update("cpu_device_count", 4)
    devices = functrans.local_devices()[2:]
    out = pmap(lambda v: lax.psum(v, "i"), axis_name="i", devices=devices)(np.ones((2, 3), np.float32))
    np.testing.assert_allclose(np.asarray(out), np.full((2, 3), 2.0))
    assert out.devices() == set(devices)
    with pytest.raises(ValueError, match="devices= lists 2 devices"):
        pmap(lambda v: v, devices=devices)(np.ones((3, 1), np.float32))
    counted = pmap(lambda: lax.axis_index("i"), axis_name="i", axis_size=3)()
    np.testing.assert_array_equal(np.asarray(counted), [0, 1, 2])


@pytest.mark.parametrize("collective", ["all_gather", "psum_scatter", "all_to_all"])
def test_collective_under_an_inner_vmap_of_another_axis(collective):
    """The inner vmap ('j') batches a collective over the outer axis ('i'): its axis
    parameters shift past the batch axis, and the result equals a loop over 'j'."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 3, 2, 4)).astype(np.float32)   # i=2, j=3, then the operand (2, 4)

    def op(v):
        if collective == "all_gather":
            return lax.all_gather(v, "i", axis=1)
        if collective == "psum_scatter":
            return lax.psum_scatter(v, "i", scatter_dimension=0, tiled=True)
        return lax.all_to_all(v, "i", split_axis=0, concat_axis=1)

    batched = functrans.vmap(functrans.vmap(op, axis_name="j"), axis_name="i")(x)
    looped = np.stack([functrans.vmap(op, axis_name="i")(x[:, j]) for j in range(3)], axis=1)
    np.testing.assert_allclose(np.asarray(batched), np.asarray(looped), rtol=1e-6)
