"""shard_map and partitioned jit on GPU devices, over the emulated CuPy of test_cuda_pmap
(host arrays tagged with a GPU ordinal): every block lives on its own GPU, the per-device
program runs on the (emulated) cuda backend, and collectives go through the GPU placement
(NCCL's plan where one group spans every GPU, host copies for sub-axis groups)."""
from __future__ import annotations

import numpy as np

import functrans
import functrans.numpy as jnp
from functrans import lax
from functrans.sharding import Mesh, NamedSharding, PartitionSpec as P

from test_cuda_pmap import _on_emulated_gpu, emulated_gpus  # noqa: F401  (a fixture)


def _mesh(gpus):
    return Mesh(np.array(gpus, dtype=object).reshape(2, 2), ("data", "model"))


def _blocks_on_their_gpus(x):
    return all(_on_emulated_gpu(s.data, s.device) for s in x.addressable_shards)


def test_device_put_places_blocks_on_their_gpus(emulated_gpus):
    mesh = _mesh(emulated_gpus)
    value = np.arange(24.0, dtype=np.float32).reshape(4, 6)
    x = functrans.device_put(value, NamedSharding(mesh, P("data", "model")))
    assert _blocks_on_their_gpus(x)
    np.testing.assert_array_equal(np.asarray(x), value)


def test_shard_map_collectives_on_gpus(emulated_gpus):
    mesh = _mesh(emulated_gpus)
    value = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    f = functrans.shard_map(
        lambda b: (lax.psum(b, ("data", "model")), lax.psum(b, "model"),
                   lax.all_gather(b, "data", tiled=True)),
        mesh=mesh, in_specs=P("data", "model"), out_specs=(P(), P("data"), P(None, "model")))
    total, rows, cols = f(value)
    blocks = [np.split(r, 2, axis=1) for r in np.split(value, 2, axis=0)]
    np.testing.assert_allclose(np.asarray(total), sum(sum(r) for r in blocks), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(rows), np.concatenate([sum(r) for r in blocks]),
                               rtol=1e-5)
    np.testing.assert_allclose(np.asarray(cols), value, rtol=1e-6)
    assert all(_blocks_on_their_gpus(o) for o in (total, rows, cols))


def test_partitioned_jit_on_gpus(emulated_gpus):
    mesh = _mesh(emulated_gpus)
    x = np.random.default_rng(1).standard_normal((8, 4)).astype(np.float32)
    w = np.random.default_rng(2).standard_normal((4, 6)).astype(np.float32)
    xs = functrans.device_put(x, NamedSharding(mesh, P("data", "model")))
    out = functrans.jit(lambda a, b: jnp.tanh(a @ b).sum(0))(xs, w)
    np.testing.assert_allclose(np.asarray(out), np.tanh(x @ w).sum(0), rtol=1e-5)
    assert _blocks_on_their_gpus(out)
