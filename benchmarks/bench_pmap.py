"""pmap data-parallel MLP training step: N CPU devices against 1.

    python benchmarks/bench_pmap.py                 # 2 devices vs 1
    python benchmarks/bench_pmap.py --devices 4 --hidden 512

Two views of scaling, each step = forward + backward + pmean of the gradients + SGD update:

- weak scaling: every device gets the same per-device batch, so N devices do N times the
  work of one; efficiency = time(1 device) / time(N devices) (ideal 1.0);
- strong scaling: the global batch is fixed and split over the devices; efficiency =
  speedup / N (ideal 1.0).

Also printed: the same step without pmap (jit on one device), so pmap's own overhead shows.
Devices are threads of this process: the speedup is bounded by the CPU cores and by how
much of the step runs with the GIL released (the backend's kernels).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import functrans
import functrans.numpy as jnp
from functrans import lax, tree_util
from functrans._pmap import device_put_replicated, pmap


def init_params(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [{"w": (rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32),
             "b": np.zeros(n, np.float32)} for m, n in zip(sizes[:-1], sizes[1:])]


def loss_fn(params, x, y):
    for layer in params[:-1]:
        x = lax.tanh(lax.dot(x, layer["w"]) + layer["b"])
    err = lax.dot(x, params[-1]["w"]) + params[-1]["b"] - y
    return jnp.sum(err * err) / x.shape[0]


def sgd_step(params, x, y, lr=1e-3):
    grads = functrans.grad(loss_fn)(params, x, y)
    return tree_util.tree_map(lambda p, g: p - lr * g, params, grads)


def pmapped_step(params, x, y):
    grads = lax.pmean(functrans.grad(loss_fn)(params, x, y), "batch")
    return tree_util.tree_map(lambda p, g: p - 1e-3 * g, params, grads)


def time_it(fn, repeats: int) -> float:
    fn()  # compile / warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_pmap(sizes, ndev: int, per_device: int, repeats: int) -> float:
    rng = np.random.default_rng(1)
    devices = functrans.local_devices()[:ndev]
    params = device_put_replicated(init_params(sizes), devices)
    x = rng.standard_normal((ndev, per_device, sizes[0])).astype(np.float32)
    y = rng.standard_normal((ndev, per_device, sizes[-1])).astype(np.float32)
    step = pmap(pmapped_step, axis_name="batch")

    def run():
        out = step(params, x, y)
        np.asarray(tree_util.tree_leaves(out)[0])
    return time_it(run, repeats)


def bench_jit(sizes, batch: int, repeats: int) -> float:
    rng = np.random.default_rng(1)
    params = init_params(sizes)
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    y = rng.standard_normal((batch, sizes[-1])).astype(np.float32)
    step = functrans.jit(sgd_step)

    def run():
        out = step(params, x, y)
        np.asarray(tree_util.tree_leaves(out)[0])
    return time_it(run, repeats)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch", type=int, default=256, help="per-device batch (weak scaling)")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    functrans.config.update("cpu_device_count", args.devices)
    sizes = [64, args.hidden, args.hidden, 8]
    n = args.devices
    rows = []
    t_jit = bench_jit(sizes, args.batch, args.repeats)
    t1 = bench_pmap(sizes, 1, args.batch, args.repeats)
    tn = bench_pmap(sizes, n, args.batch, args.repeats)
    rows.append(("weak: jit, 1 device, batch %d" % args.batch, t_jit, None))
    rows.append(("weak: pmap, 1 device, batch %d" % args.batch, t1, None))
    rows.append((f"weak: pmap, {n} devices, {args.batch}/device", tn, t1 / tn))
    global_batch = args.batch * n
    s1 = bench_pmap(sizes, 1, global_batch, args.repeats)
    sn = bench_pmap(sizes, n, args.batch, args.repeats)
    rows.append((f"strong: pmap, 1 device, batch {global_batch}", s1, None))
    rows.append((f"strong: pmap, {n} devices, batch {global_batch}", sn, s1 / sn / n))

    backend = functrans._backends.get_backend().name
    print(f"pmap data-parallel MLP step {sizes}, backend {backend}, {os.cpu_count()} CPU cores")
    print(f"{'configuration':<42} {'ms/step':>9} {'efficiency':>11}")
    for name, t, eff in rows:
        print(f"{name:<42} {1e3 * t:9.2f} {'' if eff is None else f'{eff:11.2f}'}")
    print(f"pmap overhead on 1 device vs jit: {1e3 * (t1 - t_jit):+.2f} ms/step")


if __name__ == "__main__":
    main()
