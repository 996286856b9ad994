"""shard_map on CPU devices: every collective over one mesh axis and over several, against
NumPy references computed here from the devices' blocks; composition with jit, grad, vmap and
scan; the tensor-parallel MLP (column- then row-sharded weights, one psum) against the
unsharded one, forward and gradients; and the errors."""
from __future__ import annotations

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import lax
from functrans.sharding import NamedSharding, PartitionSpec as P


@pytest.fixture
def mesh22():
    functrans.config.update("cpu_device_count", 4)
    return functrans.make_mesh((2, 2), ("data", "model"))


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _grid(x, rows=2, cols=2):
    """The blocks B[i][j] of x split as P('data', 'model') on a 2x2 mesh."""
    return [np.split(r, cols, axis=1) for r in np.split(x, rows, axis=0)]


X = _rand(4, 6)
B = _grid(X)
SPEC_IN = P("data", "model")
perm_data = [(0, 1), (1, 0)]


def _a2a(i):
    # device (i, j): chunk j (along 0) of each B[i][j'], concatenated along 1 in j' order
    return np.concatenate([np.concatenate([np.split(B[i][jj], 2, 0)[j] for jj in range(2)], 1)
                           for j in range(2)], 1)


CASES = {
    "psum_data": (lambda b: lax.psum(b, "data"), P(None, "model"),
                  np.concatenate([B[0][j] + B[1][j] for j in range(2)], 1)),
    "psum_both": (lambda b: lax.psum(b, ("data", "model")), P(), sum(sum(r) for r in B)),
    "pmean_data": (lambda b: lax.pmean(b, "data"), P(None, "model"),
                   np.concatenate([(B[0][j] + B[1][j]) / 2 for j in range(2)], 1)),
    "pmax_model": (lambda b: lax.pmax(b, "model"), P("data", None),
                   np.concatenate([np.maximum(*B[i]) for i in range(2)], 0)),
    "pmin_model": (lambda b: lax.pmin(b, "model"), P("data", None),
                   np.concatenate([np.minimum(*B[i]) for i in range(2)], 0)),
    "all_gather_model": (lambda b: lax.all_gather(b, "model"), P("data"),
                         np.concatenate([np.stack(B[i]) for i in range(2)], 0)),
    "all_gather_tiled_both": (lambda b: lax.all_gather(b, ("data", "model"), axis=1,
                                                       tiled=True), P(),
                              np.concatenate([B[i][j] for i in range(2) for j in range(2)], 1)),
    "psum_scatter_model": (lambda b: lax.psum_scatter(b, "model", scatter_dimension=0,
                                                      tiled=True), P(("data", "model")),
                           np.concatenate([B[i][0] + B[i][1] for i in range(2)], 0)),
    "psum_scatter_both": (lambda b: lax.psum_scatter(jnp.concatenate([b, b]),
                                                     ("data", "model")),
                          P(("data", "model")),
                          np.concatenate([sum(sum(r) for r in B)] * 2).reshape(-1)),
    "ppermute_data": (lambda b: lax.ppermute(b, "data", perm_data), SPEC_IN,
                      np.concatenate([np.concatenate(B[1 - i], 1) for i in range(2)], 0)),
    "all_to_all_model": (lambda b: lax.all_to_all(b, "model", 0, 1, tiled=True), SPEC_IN,
                         np.concatenate([_a2a(i) for i in range(2)], 0)),
    "axis_index_model": (lambda b: lax.axis_index("model")[None] + 0 * b[:1, 0], P("data"),
                         np.array([0, 0], np.float32)),  # (data block) of device j=0
    "axis_index_both": (lambda b: jnp.full((1,), lax.axis_index(("data", "model")), b.dtype),
                        P(("data", "model")), np.arange(4, dtype=np.float32)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_collective_against_numpy(mesh22, name):
    body, out_spec, expected = CASES[name]
    check = name not in ("axis_index_model",)
    f = functrans.shard_map(body, mesh=mesh22, in_specs=SPEC_IN, out_specs=out_spec,
                            check_vma=check)
    out = f(X)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-6)
    assert out.sharding.is_equivalent_to(NamedSharding(mesh22, out_spec), out.ndim)
    # the same under jit
    np.testing.assert_allclose(np.asarray(functrans.jit(f)(X)), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ndev", [1, 2, 4, 8])
def test_one_axis_meshes_of_every_size(ndev):
    functrans.config.update("cpu_device_count", ndev)
    mesh = functrans.make_mesh((ndev,), ("i",))
    x = _rand(ndev * 2, 3, seed=ndev)
    blocks = np.split(x, ndev)
    f = functrans.shard_map(
        lambda b: (lax.psum(b, "i"), lax.all_gather(b, "i", tiled=True),
                   lax.ppermute(b, "i", [(k, (k + 1) % ndev) for k in range(ndev)]),
                   b + lax.axis_index("i")),
        mesh=mesh, in_specs=P("i"), out_specs=(P(), P(), P("i"), P("i")))
    total, gathered, shifted, indexed = f(x)
    np.testing.assert_allclose(np.asarray(total), sum(blocks), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(gathered), x)
    np.testing.assert_allclose(np.asarray(shifted), np.concatenate(blocks[-1:] + blocks[:-1]))
    np.testing.assert_allclose(np.asarray(indexed),
                               x + np.repeat(np.arange(ndev), 2)[:, None])


def test_axis_index_groups_inside_a_mesh_axis():
    functrans.config.update("cpu_device_count", 4)
    mesh = functrans.make_mesh((4,), ("i",))
    f = functrans.shard_map(lambda b: lax.psum(b, "i", axis_index_groups=[[0, 1], [2, 3]]),
                            mesh=mesh, in_specs=P("i"), out_specs=P("i"), check_vma=False)
    np.testing.assert_allclose(np.asarray(f(np.arange(4.0, dtype=np.float32))), [1, 1, 5, 5])


def test_inputs_already_split_another_way_are_resharded(mesh22):
    x = functrans.device_put(X, NamedSharding(mesh22, P(None, "data")))
    f = functrans.shard_map(lambda b: b * 2, mesh=mesh22, in_specs=SPEC_IN, out_specs=SPEC_IN)
    np.testing.assert_allclose(np.asarray(f(x)), X * 2)


def test_set_mesh_and_inferred_in_specs(mesh22):
    x = functrans.device_put(X, NamedSharding(mesh22, P("data")))
    with functrans.set_mesh(mesh22):
        f = functrans.shard_map(lambda b: lax.psum(b.sum(0), "data"), out_specs=P())
        np.testing.assert_allclose(np.asarray(f(x)), X.sum(0), rtol=1e-5)


def test_partial_manual_axes_replicate_over_the_others(mesh22):
    f = functrans.shard_map(lambda b: lax.psum(b, "data"), mesh=mesh22, in_specs=P("data"),
                            out_specs=P(), axis_names={"data"})
    np.testing.assert_allclose(np.asarray(f(X)), X[:2] + X[2:], rtol=1e-5)
    with pytest.raises(ValueError, match="not among the manual axis_names"):
        functrans.shard_map(lambda b: b, mesh=mesh22, in_specs=P("model"), out_specs=P(),
                            axis_names={"data"})(X)


# ---- composition ------------------------------------------------------------------------------


def test_grad_vmap_jit_of_shard_map(mesh22):
    f = functrans.shard_map(lambda b: lax.psum(jnp.sin(b).sum(), ("data", "model")),
                            mesh=mesh22, in_specs=SPEC_IN, out_specs=P())
    np.testing.assert_allclose(float(f(X)), np.sin(X).sum(), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(functrans.grad(f)(X)), np.cos(X), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(functrans.jit(functrans.grad(f))(X)), np.cos(X),
                               rtol=1e-5)
    xs = np.stack([X, 2 * X])
    np.testing.assert_allclose(np.asarray(functrans.vmap(f)(xs)), np.sin(xs).sum((1, 2)),
                               rtol=1e-5)
    np.testing.assert_allclose(np.asarray(functrans.vmap(functrans.grad(f))(xs)), np.cos(xs),
                               rtol=1e-5)


def test_grad_through_replicated_inputs_and_outputs(mesh22):
    # w is replicated (its cotangent sums over the devices), the output replicated too
    def body(w, b):
        return lax.psum((b * w).sum(), ("data", "model")) * w

    f = functrans.shard_map(body, mesh=mesh22, in_specs=(P(), SPEC_IN), out_specs=P())
    w = np.float32(1.5)
    value, (gw, gx) = functrans.value_and_grad(lambda w, x: f(w, x), argnums=(0, 1))(w, X)
    np.testing.assert_allclose(float(value), (X * w).sum() * w, rtol=1e-5)
    np.testing.assert_allclose(float(gw), 2 * w * X.sum(), rtol=1e-4)
    np.testing.assert_allclose(np.asarray(gx), np.full_like(X, w * w), rtol=1e-5)


def test_scan_over_shard_map(mesh22):
    step = functrans.shard_map(lambda c, b: (c + lax.psum(b.sum(), ("data", "model")), c),
                               mesh=mesh22, in_specs=(P(), SPEC_IN), out_specs=(P(), P()))
    xs = np.stack([X, 2 * X, 3 * X])
    total, history = lax.scan(step, np.float32(0), xs)
    np.testing.assert_allclose(float(total), 6 * X.sum(), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(history), [0, X.sum(), 3 * X.sum()], rtol=1e-5)


def test_shard_map_inside_jit_with_other_ops(mesh22):
    f = functrans.shard_map(lambda b: b * lax.axis_index("data"), mesh=mesh22,
                            in_specs=SPEC_IN, out_specs=SPEC_IN)
    g = functrans.jit(lambda x: jnp.tanh(f(x + 1.0)).sum(axis=1))
    expected = np.tanh((X + 1) * np.repeat([0, 1], 2)[:, None]).sum(1)
    np.testing.assert_allclose(np.asarray(g(X)), expected, rtol=1e-5)


def test_closed_over_values_become_replicated_operands(mesh22):
    scale = jnp.arange(6.0)

    @functrans.jit
    def g(x, s):
        return functrans.shard_map(lambda b: b * s, mesh=mesh22, in_specs=P("data"),
                                   out_specs=P("data"))(x)

    np.testing.assert_allclose(np.asarray(g(X, scale)), X * np.arange(6.0), rtol=1e-6)


# ---- the tensor-parallel MLP ----------------------------------------------------------------


def _mlp_params(d=8, h=16, o=4, seed=3):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((d, h)).astype(np.float32) / 3,
            rng.standard_normal(h).astype(np.float32) / 3,
            rng.standard_normal((h, o)).astype(np.float32) / 3,
            rng.standard_normal(o).astype(np.float32) / 3)


def _mlp(params, x):
    w1, b1, w2, b2 = params
    return jnp.dot(jnp.maximum(jnp.dot(x, w1) + b1, 0.0), w2) + b2


@pytest.mark.parametrize("shape,data_axis", [((4,), None), ((2, 2), "data")])
def test_tensor_parallel_mlp_equals_unsharded(shape, data_axis):
    functrans.config.update("cpu_device_count", 4)
    names = ("model",) if len(shape) == 1 else ("data", "model")
    mesh = functrans.make_mesh(shape, names)

    def tp_block(w1, b1, w2, b2, x):
        h = jnp.maximum(jnp.dot(x, w1) + b1, 0.0)        # columns of w1 on each device
        return lax.psum(jnp.dot(h, w2), "model") + b2     # rows of w2: one psum

    tp = functrans.shard_map(
        tp_block, mesh=mesh,
        in_specs=(P(None, "model"), P("model"), P("model", None), P(), P(data_axis)),
        out_specs=P(data_axis))
    params = _mlp_params()
    x = _rand(8, 8, seed=4)
    target = _rand(8, 4, seed=5)

    def loss_tp(params, x):
        return jnp.mean((tp(*params, x) - target) ** 2)

    def loss_ref(params, x):
        return jnp.mean((_mlp(params, x) - target) ** 2)

    np.testing.assert_allclose(np.asarray(tp(*params, x)), np.asarray(_mlp(params, x)),
                               rtol=1e-5, atol=1e-6)
    got = functrans.value_and_grad(loss_tp, argnums=(0, 1))(params, x)
    want = functrans.value_and_grad(loss_ref, argnums=(0, 1))(params, x)
    np.testing.assert_allclose(float(got[0]), float(want[0]), rtol=1e-5)
    for g, w in zip(functrans.tree_util.tree_leaves(got[1]),
                    functrans.tree_util.tree_leaves(want[1])):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-6)
    jitted = functrans.jit(functrans.grad(loss_tp))(params, x)
    for g, w in zip(jitted, want[1][0]):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-6)


# ---- errors -----------------------------------------------------------------------------------


def test_not_divisible_dimension_is_a_clear_error(mesh22):
    f = functrans.shard_map(lambda b: b, mesh=mesh22, in_specs=P("data"), out_specs=P("data"))
    with pytest.raises(ValueError, match=r"maps array axis 0 \(of size 3\) to mesh axis "
                                         r"'data' \(of size 2\), but 2 does not evenly divide 3"):
        f(np.ones((3, 4), np.float32))


def test_out_specs_replication_is_checked(mesh22):
    f = functrans.shard_map(lambda b: b, mesh=mesh22, in_specs=P("data"), out_specs=P())
    with pytest.raises(ValueError, match="same on every device along mesh axis 'data'"):
        f(X)
    # allowed without the check (each device's block is taken as the value)
    g = functrans.shard_map(lambda b: b, mesh=mesh22, in_specs=P("data"), out_specs=P(),
                            check_vma=False)
    assert g(X).shape == (2, 6)


def test_spec_and_mesh_errors(mesh22):
    with pytest.raises(ValueError, match="too long"):
        functrans.shard_map(lambda b: b, mesh=mesh22, in_specs=P("data", "model", None),
                            out_specs=P())(X)
    with pytest.raises(ValueError, match="needs a mesh"):
        functrans.shard_map(lambda b: b, in_specs=P(), out_specs=P())(X)
    with pytest.raises(ValueError, match="Resource axis: batch"):
        functrans.shard_map(lambda b: b, mesh=mesh22, in_specs=P("batch"), out_specs=P())(X)
    with pytest.raises(ValueError, match="tree prefix"):
        functrans.shard_map(lambda a, b: a, mesh=mesh22, in_specs=(P(), P(), P()),
                            out_specs=P())(X, X)


def test_docstring_examples():
    import doctest
    from functrans.sharding import _shard_map
    functrans.config.update("cpu_device_count", 1)
    result = doctest.testmod(_shard_map)
    assert result.attempted > 0 and result.failed == 0


def test_collectives_inside_loops_and_branches(mesh22):
    def body(b):
        c = lax.fori_loop(0, 3, lambda i, c: lax.psum(c, "data") * 0.5, b)
        return lax.cond(lax.axis_index("model") == 0, lambda v: lax.pmax(v, "model"),
                        lambda v: lax.pmax(v, "model") + 0.0, c)

    # (the loop's carry is typed as varying along 'data', as JAX types it: the check
    # cannot see that the first psum already made it equal along 'data')
    f = functrans.shard_map(body, mesh=mesh22, in_specs=SPEC_IN, out_specs=P(None, None),
                            check_vma=False)
    c = [[B[0][j] + B[1][j] for j in range(2)]] * 2   # psum over data, then * 0.5, 3 times
    for _ in range(2):
        c = [[(c[0][j] + c[1][j]) * 0.5 for j in range(2)]] * 2
    expected = np.maximum(c[0][0] * 0.5, c[0][1] * 0.5)
    np.testing.assert_allclose(np.asarray(f(X)), expected, rtol=1e-5)
