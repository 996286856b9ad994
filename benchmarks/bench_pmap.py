"""pmap data-parallel MLP training step: N CPU devices against 1, functrans and JAX.

    python -m benchmarks --only pmap                     # in the suite's table (2 devices)
    python -m benchmarks.bench_pmap                      # this table, functrans, 2 devices
    python -m benchmarks.bench_pmap --devices 4 --impl jax

Each step = forward + backward + ``pmean`` of the gradients over the devices + SGD update,
of the suite's MLP (784-512-512-10, softmax cross-entropy; functrans and JAX run the same
source). Two views of scaling:

- weak scaling: every device gets the same per-device batch, so N devices do N times the
  work of one; efficiency = time(1 device) / time(N devices) (ideal 1.0);
- strong scaling: the global batch is fixed and split over the devices; efficiency =
  time(1 device, whole batch) / time(N devices) / N (ideal 1.0).

The device count is fixed when the library starts, so every measurement runs in a fresh
process: ``FUNCTRANS_CPU_DEVICES=N`` for functrans,
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` for JAX. functrans's CPU devices are
threads running native code with the GIL released: the speedup is bounded by the cores.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

from benchmarks import frameworks, mlp
from benchmarks.harness import Options, Row, max_error, time_round_robin, to_leaves

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_pmap_step(lib, axis_name: str = "batch"):
    """The data-parallel train step for ``lib`` (functrans or jax), ready to ``pmap``."""
    loss, _, _ = mlp.make_mlp(lib)

    def step(params, x, onehot):
        grads = lib.lax.pmean(lib.grad(loss)(params, x, onehot), axis_name)
        return lib.tree_util.tree_map(lambda p, g: p - mlp.LEARNING_RATE * g, params, grads)

    return step


def _setup(lib, ndev: int, per_device: int, sizes, seed: int = 1):
    """A pmapped step and its inputs already placed on ``ndev`` devices, plus the NumPy
    reference: one SGD step on the global batch (pmean of equal-sized per-device means is
    the global mean)."""
    params, x, onehot = mlp.make_data(sizes, ndev * per_device, seed)
    devices = lib.local_devices()[:ndev]
    step = lib.pmap(make_pmap_step(lib), axis_name="batch", devices=devices)
    # Place the inputs once (an identity pmap shards them), as a training loop keeps its
    # replicated parameters and prefetched batches on the devices.
    place = lib.pmap(lambda t: t, devices=devices)
    stacked = lib.tree_util.tree_map(lambda a: np.stack([a] * ndev), params)
    args = (place(stacked), place(x.reshape(ndev, per_device, -1)),
            place(onehot.reshape(ndev, per_device, -1)))
    run = lambda: lib.block_until_ready(step(*args))  # noqa: E731
    return run, params, mlp.numpy_train_step(params, x, onehot)


def _first_device(tree):
    return [leaf[0] for leaf in to_leaves(tree)]


def worker(impl: str, ndev: int, per_device: int, sizes, repeats: int) -> dict:
    """In this process (started with ``ndev`` devices): time 1 device x ``per_device``,
    1 device x ``ndev * per_device`` and ``ndev`` devices x ``per_device``."""
    lib = frameworks.load(impl)
    if lib is None:
        return {"error": f"{impl} is not importable"}
    if len(lib.local_devices()) < ndev:
        return {"error": f"{impl} sees {len(lib.local_devices())} devices, wants {ndev}"}
    configs = {"one": (1, per_device), "one_whole": (1, ndev * per_device), "many": (ndev, per_device)}
    runs, errors = {}, {}
    # the same step without pmap, so pmap's own overhead on one device shows
    params, x, onehot = mlp.make_data(sizes, per_device, 1)
    jitted = lib.jit(mlp.make_mlp(lib)[1])
    jit_args = lib.tree_util.tree_map(lib.numpy.asarray, (params, x, onehot))
    runs["jit"] = lambda: lib.block_until_ready(jitted(*jit_args))
    runs["jit"]()
    for name, (n, b) in configs.items():
        run, params, want = _setup(lib, n, b, sizes)
        got = run()
        before = to_leaves(params)
        # compare the applied gradients (p - p_new) / lr: p_new alone would hide them
        errors[name] = max_error(
            [(p - g) / mlp.LEARNING_RATE for p, g in zip(before, _first_device(got))],
            [(p - w) / mlp.LEARNING_RATE for p, w in zip(before, to_leaves(want))])
        runs[name] = run
    ok = all(e <= 2e-4 for e in errors.values())
    out = {"ok": ok, "max_error": max(errors.values()), "devices": ndev}
    if ok:
        stats = time_round_robin(runs, repeats, min_time=1.0)
        out.update({f"{name}_s": stats[name][0] for name in runs})
        out.update({f"{name}_spread": stats[name][1] for name in runs})
        out["weak_efficiency"] = out["one_s"] / out["many_s"]
        out["strong_efficiency"] = out["one_whole_s"] / out["many_s"] / ndev
    return out


def run_worker(impl: str, ndev: int, quick: bool, repeats: int) -> dict:
    """:func:`worker` in a fresh process with ``ndev`` CPU devices."""
    env = dict(os.environ)
    if impl == "jax":
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                            f" --xla_force_host_platform_device_count={ndev}").strip()
        env["JAX_PLATFORMS"] = "cpu"
    else:
        env["FUNCTRANS_CPU_DEVICES"] = str(ndev)
    cmd = [sys.executable, "-m", "benchmarks.bench_pmap", "--worker", "--impl", impl,
           "--devices", str(ndev), "--repeats", str(repeats)] + (["--quick"] if quick else [])
    proc = subprocess.run(cmd, cwd=_ROOT, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"worker exited {proc.returncode}: {tail[:100]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def pmap_scaling(options: Options) -> list[Row]:
    """The suite's rows: the step on 1 device and on 2 devices (weak scaling)."""
    ndev, per_device = 2, mlp.batch_for(options)
    results = {impl: run_worker(impl, ndev, options.quick, options.repeats)
               for impl in ("functrans", "jax") if impl in options.available}
    one = Row("pmap", f"pmap MLP step, 1 device x {per_device}")
    many = Row("pmap", f"pmap MLP step, {ndev} devices x {per_device}")
    notes = []
    for impl, r in results.items():
        check = r.get("error") or ("ok" if r["ok"] else f"disagrees: error {r['max_error']:.1e}")
        for row, key in ((one, "one"), (many, "many")):
            row.checks[impl] = check
            row.times[impl] = r.get(f"{key}_s") if check == "ok" else None
            if check == "ok":
                row.spread[impl] = r[f"{key}_spread"]
        if check == "ok":
            notes.append(f"{impl} weak {r['weak_efficiency']:.2f}, strong {r['strong_efficiency']:.2f}")
    many.notes = "scaling efficiency: " + "; ".join(notes) if notes else ""
    one.notes = "; ".join(f"{impl} jit without pmap {1e3 * r['jit_s']:.2f} ms"
                          for impl, r in results.items() if r.get("ok"))
    many.extra = one.extra = {"workers": results}
    return [one, many]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--impl", default="functrans", choices=("functrans", "jax"))
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", action="store_true", help="measure in this process, print JSON")
    args = parser.parse_args(argv)
    options = Options(quick=args.quick)
    sizes, per_device = mlp.sizes_for(options), mlp.batch_for(options)
    if args.worker:
        print(json.dumps(worker(args.impl, args.devices, per_device, sizes, args.repeats)))
        return
    r = run_worker(args.impl, args.devices, args.quick, args.repeats)
    if "error" in r or not r["ok"]:
        sys.exit(f"{args.impl}: {r.get('error') or 'results disagree with NumPy'}")
    n = args.devices
    print(f"{args.impl} pmap data-parallel MLP step {'-'.join(map(str, sizes))}, "
          f"{os.cpu_count()} CPU cores; median ms")
    print(f"  1 device,  batch {per_device:<5}       {1e3 * r['one_s']:9.2f}")
    print(f"  1 device,  batch {n * per_device:<5}       {1e3 * r['one_whole_s']:9.2f}")
    print(f"  {n} devices, {per_device}/device        {1e3 * r['many_s']:9.2f}")
    print(f"  jit, no pmap, batch {per_device:<5}  {1e3 * r['jit_s']:9.2f}")
    print(f"  weak-scaling efficiency {r['weak_efficiency']:.2f}, "
          f"strong-scaling efficiency {r['strong_efficiency']:.2f} (ideal 1.0)")


if __name__ == "__main__":
    main()
