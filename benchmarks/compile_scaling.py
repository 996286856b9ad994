"""How compile time grows with the program: an N-layer MLP train step, N = 4, 16, 64.

Each measurement is a cold compile in a fresh process (as in :mod:`compile_time`: for
functrans an empty ``FUNCTRANS_CACHE_DIR``, for JAX no persistent cache), timing
``jit(step).lower(*args)`` plus ``.compile()``; the compiled step is run once and checked
against the NumPy step. A compiler whose passes are linear in the program's size takes
about the same time per layer at every N.

    python -m benchmarks.compile_scaling functrans 16      # one worker run, prints JSON
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks.compile_time import _write_bytecode
from benchmarks.harness import Options, Row, max_error

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDTH, BATCH, INPUTS, CLASSES = 64, 32, 32, 10


def depths_for(options: Options) -> tuple[int, ...]:
    return (2, 4) if options.quick else (4, 16, 64)


def worker(impl: str, layers: int) -> dict:
    """Time lowering + compiling the ``layers``-layer train step with ``impl`` here."""
    from benchmarks import frameworks, mlp
    lib = frameworks.load(impl)
    if lib is None:
        return {"error": f"{impl} is not importable"}
    sizes = (INPUTS,) + (WIDTH,) * (layers - 1) + (CLASSES,)
    params, x, onehot = mlp.make_data(sizes, BATCH)
    _, step, _ = mlp.make_mlp(lib)
    args = lib.tree_util.tree_map(lib.numpy.asarray, (params, x, onehot))
    start = time.perf_counter()
    lowered = lib.jit(step).lower(*args)
    traced = time.perf_counter()
    compiled = lowered.compile()
    done = time.perf_counter()
    err = max_error(compiled(*args), mlp.numpy_train_step(params, x, onehot))
    return {"layers": layers, "trace_s": traced - start, "compile_s": done - traced,
            "total_s": done - start, "max_error": err, "ok": bool(err <= 2e-4)}


def _run_worker(impl: str, layers: int, env_updates: dict) -> dict:
    env = dict(os.environ)
    for name in ("JAX_COMPILATION_CACHE_DIR", "FUNCTRANS_DISABLE_COMPILATION_CACHE",
                 "PYTHONDONTWRITEBYTECODE", "FUNCTRANS_CHECK_JAXPRS"):
        env.pop(name, None)
    env.update(env_updates)
    cmd = [sys.executable, "-m", "benchmarks.compile_scaling", impl, str(layers)]
    proc = subprocess.run(cmd, cwd=_ROOT, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"worker exited {proc.returncode}: {tail[:100]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _cold(impl: str, layers: int) -> dict:
    if impl == "jax":
        return _run_worker(impl, layers, {"JAX_PLATFORMS": "cpu"})
    with tempfile.TemporaryDirectory(prefix="functrans-bench-cache-") as cache_dir:
        return _run_worker(impl, layers, {"FUNCTRANS_CACHE_DIR": cache_dir})


def compile_scaling(options: Options) -> list[Row]:
    runs = 1 if options.quick else max(1, options.rounds)
    impls = ["functrans"] + (["jax"] if "jax" in options.available else [])
    _write_bytecode()
    rows, previous = [], {}
    for layers in depths_for(options):
        results = {impl: [] for impl in impls}
        for _ in range(runs):  # interleaved, so a burst of load hits both
            for impl in impls:
                results[impl].append(_cold(impl, layers))
        row = Row("compile_scaling", f"cold compile, {layers}-layer MLP step (w{WIDTH})",
                  unit="compile")
        per_layer = []
        for impl, found in results.items():
            good = [r["total_s"] for r in found if r.get("ok")]
            bad = [r.get("error") or f"disagrees: error {r['max_error']:.1e}"
                   for r in found if not r.get("ok")]
            row.times[impl] = float(np.median(good)) if good else None
            row.checks[impl] = bad[0] if bad else "ok"
            if good:
                total = float(np.median(good))
                text = f"{impl} {1e3 * total / layers:.0f} ms/layer"
                if impl in previous:  # the cost of the added layers, without the fixed part
                    depth, before = previous[impl]
                    text += f" (+{1e3 * (total - before) / (layers - depth):.0f} ms per added layer)"
                previous[impl] = (layers, total)
                per_layer.append(text)
        row.notes = ", ".join(per_layer) + f"; median of {runs} process{'es' if runs > 1 else ''}"
        row.extra = {"layers": layers, **results}
        rows.append(row)
    return rows


if __name__ == "__main__":
    print(json.dumps(worker(sys.argv[1], int(sys.argv[2]))))
