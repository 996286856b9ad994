"""Data-parallel MLP training step with jit + NamedSharding on 2 CPU devices: functrans
against its own pmap and against JAX's jit + NamedSharding.

    python -m benchmarks --only sharding                     # in the suite's table
    python -m benchmarks.bench_sharding                      # this table
    python -m benchmarks.bench_sharding --jax-python /path/to/jax-env/bin/python

The step is the suite's MLP (784-512-512-10, softmax cross-entropy, SGD; functrans and JAX
run the same source): ``jit(train_step)`` called with the batch placed by
``device_put(x, NamedSharding(mesh, P('data')))`` on a 2-device mesh and the parameters
replicated (``P()``), so the compiler partitions it: each device runs the forward and
backward pass on its half of the batch, the gradients are summed with ``psum``, and every
device applies the same update. Beside it: the same step written with ``pmap`` and
``pmean`` (``bench_pmap``), and ``jit`` on one device with the whole batch.

The device count is fixed when a library starts, so each library is measured in a fresh
process (``FUNCTRANS_CPU_DEVICES=2``; JAX with
``XLA_FLAGS=--xla_force_host_platform_device_count=2`` set before it is imported). JAX may
live in another environment (it is never a dependency): ``--jax-python`` (or
``FUNCTRANS_BENCH_JAX_PYTHON``) names its interpreter; its worker needs only JAX and this
``benchmarks`` package. The functrans worker also lists the equations of the partitioned
step that fell back to replicated computation (there should be none).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

from benchmarks import bench_pmap, frameworks, mlp
from benchmarks.harness import Options, Row, max_error, time_round_robin, to_leaves

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NDEV = 2
# JAX 0.10 on CPU sums the bias gradients (sums of 256 terms that cancel to a small total) in
# another order than NumPy: up to ~1.3% of that total on the last layer, in every variant,
# sharded or not (its weight gradients agree to 1e-6); it is checked at that scale.
_TOLERANCE = {"functrans": 2e-4, "jax": 3e-2}


def _sharded_step(lib, ndev: int, per_device: int, sizes, seed: int = 1):
    """The jitted step and its arguments placed on an ``ndev``-device mesh (the batch split,
    the parameters replicated), plus the NumPy reference step on the whole batch."""
    params, x, onehot = mlp.make_data(sizes, ndev * per_device, seed)
    mesh = lib.sharding.Mesh(np.array(lib.local_devices()[:ndev]), ("data",))
    batch = lib.sharding.NamedSharding(mesh, lib.sharding.PartitionSpec("data"))
    whole = lib.sharding.NamedSharding(mesh, lib.sharding.PartitionSpec())
    step = lib.jit(mlp.make_mlp(lib)[1])
    args = (lib.device_put(params, whole), lib.device_put(x, batch),
            lib.device_put(onehot, batch))
    run = lambda: lib.block_until_ready(step(*args))  # noqa: E731
    return run, params, mlp.numpy_train_step(params, x, onehot)


def _fallbacks(lib) -> list:
    """The equations functrans ran replicated in the partitioned programs it compiled."""
    if getattr(lib, "__name__", "") != "functrans":
        return []
    from functrans.sharding import _partitioned
    return sorted({f"{name}: {what}" for name, what in _partitioned.recorded_fallbacks()})


def worker(impl: str, ndev: int, per_device: int, sizes, repeats: int) -> dict:
    lib = frameworks.load(impl)
    if lib is None:
        return {"error": f"{impl} is not importable"}
    if len(lib.local_devices()) < ndev:
        return {"error": f"{impl} sees {len(lib.local_devices())} devices, wants {ndev}"}
    runs, errors = {}, {}
    sharded, params, want = _sharded_step(lib, ndev, per_device, sizes)
    pmapped, pmap_params, pmap_want = bench_pmap._setup(lib, ndev, per_device, sizes)
    one = lib.jit(mlp.make_mlp(lib)[1])
    one_args = lib.tree_util.tree_map(lib.numpy.asarray, mlp.make_data(sizes, ndev * per_device, 1))
    checks = {"sharded": (sharded, params, want, lambda r: r),
              "pmap": (pmapped, pmap_params, pmap_want, bench_pmap._first_device),
              "jit_one_device": (lambda: lib.block_until_ready(one(*one_args)), params, want,
                                 lambda r: r)}
    for name, (run, p, w, unwrap) in checks.items():
        got = unwrap(run())
        before = to_leaves(p)
        errors[name] = max_error(
            [(b - g) / mlp.LEARNING_RATE for b, g in zip(before, to_leaves(got))],
            [(b - r) / mlp.LEARNING_RATE for b, r in zip(before, to_leaves(w))])
        runs[name] = run
    ok = all(e <= _TOLERANCE.get(impl, 2e-4) for e in errors.values())
    out = {"ok": ok, "max_error": max(errors.values()), "devices": ndev,
           "fallbacks": _fallbacks(lib)}
    if ok:
        stats = time_round_robin(runs, repeats, min_time=1.0)
        out.update({f"{name}_s": stats[name][0] for name in runs})
        out.update({f"{name}_spread": stats[name][1] for name in runs})
    return out


def _python_for(impl: str, jax_python: str | None) -> str:
    if impl == "jax":
        return jax_python or os.environ.get("FUNCTRANS_BENCH_JAX_PYTHON") or sys.executable
    return sys.executable


def run_worker(impl: str, quick: bool, repeats: int, jax_python: str | None = None,
               ndev: int = NDEV) -> dict:
    """:func:`worker` in a fresh process with ``ndev`` CPU devices."""
    env = dict(os.environ, PYTHONPATH=_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if impl == "jax":
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                            f" --xla_force_host_platform_device_count={ndev}").strip()
        env["JAX_PLATFORMS"] = "cpu"
    else:
        env["FUNCTRANS_CPU_DEVICES"] = str(ndev)
    cmd = [_python_for(impl, jax_python), "-m", "benchmarks.bench_sharding", "--worker",
           "--impl", impl, "--devices", str(ndev), "--repeats", str(repeats)] + \
        (["--quick"] if quick else [])
    proc = subprocess.run(cmd, cwd=_ROOT, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"worker exited {proc.returncode}: {tail[:100]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_rounds(impls, quick: bool, repeats: int, rounds: int, jax_python=None,
               ndev: int = NDEV) -> dict:
    """Each library's worker ``rounds`` times, alternating (in reversed order every other
    round), so that a change in the machine's load reaches both; per library, the median of
    each timing over the rounds (the first failing round's result, if any fails)."""
    runs: dict = {impl: [] for impl in impls}
    for r in range(rounds):
        for impl in (impls if r % 2 == 0 else impls[::-1]):
            runs[impl].append(run_worker(impl, quick, repeats, jax_python, ndev))
    out = {}
    for impl, results in runs.items():
        bad = [res for res in results if "error" in res or not res.get("ok")]
        if bad:
            out[impl] = bad[0]
            continue
        merged = dict(results[0])
        for key in merged:
            if key.endswith("_s") or key.endswith("_spread"):
                merged[key] = float(np.median([res[key] for res in results]))
        merged["max_error"] = max(res["max_error"] for res in results)
        out[impl] = merged
    return out


def sharding_data_parallel(options: Options) -> list[Row]:
    """The suite's row: the jit + NamedSharding step on 2 devices, with pmap beside it."""
    per_device = mlp.batch_for(options)
    impls = [i for i in ("functrans", "jax") if i in options.available or
             (i == "jax" and os.environ.get("FUNCTRANS_BENCH_JAX_PYTHON"))]
    results = run_rounds(impls, options.quick, max(3, options.repeats // 3), options.rounds)
    row = Row("sharding", f"jit+NamedSharding MLP step, {NDEV} devices x {per_device}")
    notes = []
    for impl, r in results.items():
        check = r.get("error") or ("ok" if r["ok"] else f"disagrees: error {r['max_error']:.1e}")
        row.checks[impl] = check
        row.times[impl] = r.get("sharded_s") if check == "ok" else None
        if check == "ok":
            row.spread[impl] = r["sharded_spread"]
            notes.append(f"{impl} pmap {1e3 * r['pmap_s']:.2f} ms")
    fallbacks = results.get("functrans", {}).get("fallbacks")
    if fallbacks is not None:
        notes.append("fallbacks: " + (", ".join(fallbacks) or "none"))
    row.notes = "; ".join(notes)
    row.extra = {"workers": results}
    return [row]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=NDEV)
    parser.add_argument("--impl", default="functrans", choices=("functrans", "jax"))
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--jax-python", help="the Python of an environment with JAX")
    parser.add_argument("--rounds", type=int, default=3,
                        help="worker processes per library, alternating (default 3)")
    parser.add_argument("--worker", action="store_true", help="measure in this process, print JSON")
    args = parser.parse_args(argv)
    options = Options(quick=args.quick)
    sizes, per_device = mlp.sizes_for(options), mlp.batch_for(options)
    if args.worker:
        print(json.dumps(worker(args.impl, args.devices, per_device, sizes, args.repeats)))
        return
    results = run_rounds(("functrans", "jax"), args.quick, args.repeats, args.rounds,
                         args.jax_python, args.devices)
    print(f"data-parallel MLP step {'-'.join(map(str, sizes))}, batch {per_device} per device, "
          f"{args.devices} CPU devices, {os.cpu_count()} cores; median ms over {args.rounds} "
          "alternating worker processes per library")
    print(f"  {'':28}{'functrans':>12}{'jax':>12}{'functrans/jax':>15}")
    for key, label in (("sharded", "jit + NamedSharding"), ("pmap", "pmap + pmean"),
                       ("jit_one_device", "jit, 1 device, whole batch")):
        cells = []
        for impl in ("functrans", "jax"):
            r = results[impl]
            cells.append(r.get(f"{key}_s") if r.get("ok") else None)
        text = [f"{1e3 * c:12.2f}" if c is not None else f"{'-':>12}" for c in cells]
        ratio = f"{cells[0] / cells[1]:14.2f}x" if None not in cells else f"{'-':>15}"
        print(f"  {label:28}{text[0]}{text[1]}{ratio}")
    for impl, r in results.items():
        if "error" in r or not r.get("ok"):
            print(f"  {impl}: {r.get('error') or 'results disagree with NumPy'}")
    fallbacks = results["functrans"].get("fallbacks")
    if fallbacks is not None:
        print("  functrans equations run replicated (fallbacks): " + (", ".join(fallbacks) or
                                                                      "none"))
    if "error" in results["functrans"] or not results["functrans"].get("ok"):
        sys.exit(1)


if __name__ == "__main__":
    main()
