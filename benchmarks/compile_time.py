"""Compile time of the MLP train step, each measurement in a fresh process.

- functrans cold: ``FUNCTRANS_CACHE_DIR`` points at a new empty directory, so nothing is
  cached on disk or in memory;
- functrans warm: a second process with the same directory, so the machine code comes from
  the on-disk cache (tracing and the front-end passes still run);
- JAX cold: ``jax.jit(step).lower(...).compile()`` in a fresh process (JAX's persistent
  cache is not configured).

Every process imports from Python's bytecode caches (written once before timing), as an
installed package does.

Each worker times ``jit(step).lower(*args)`` (tracing) plus ``.compile()``, then runs the
compiled step once and checks it against the NumPy step, and prints one JSON line.

    python -m benchmarks.compile_time functrans      # one worker run, prints JSON
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks.harness import Options, Row, max_error

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(impl: str, quick: bool) -> dict:
    """Time lowering + compiling the train step with ``impl`` in this (fresh) process."""
    from benchmarks import frameworks, mlp
    options = Options(quick=quick)
    lib = frameworks.load(impl)
    if lib is None:
        return {"error": f"{impl} is not importable"}
    return time_compile(lib, mlp.sizes_for(options), mlp.batch_for(options))


def time_compile(lib, sizes, batch: int) -> dict:
    """Time ``lib.jit(step).lower(*args)`` and ``.compile()`` of the MLP train step with
    layer ``sizes``, then run it once and check it against the NumPy step."""
    from benchmarks import mlp
    params, x, onehot = mlp.make_data(sizes, batch)
    _, step, _ = mlp.make_mlp(lib)
    args = lib.tree_util.tree_map(lib.numpy.asarray, (params, x, onehot))
    start = time.perf_counter()
    lowered = lib.jit(step).lower(*args)
    traced = time.perf_counter()
    compiled = lowered.compile()
    done = time.perf_counter()
    err = max_error(compiled(*args), mlp.numpy_train_step(params, x, onehot))
    return {"trace_s": traced - start, "compile_s": done - traced, "total_s": done - start,
            "max_error": err, "ok": bool(err <= 2e-4)}


def run_worker(module_args: list, env_updates: dict, timeout: float = 600) -> dict:
    """Run ``python -m <module_args>`` in a fresh process without persistent compilation
    caches or checking options, with ``env_updates``; its last output line, as JSON."""
    env = dict(os.environ)
    # Python's own bytecode caches are used, as in any installed package: without them each
    # process would compile functrans's sources, while JAX's come precompiled by pip
    for name in ("JAX_COMPILATION_CACHE_DIR", "FUNCTRANS_DISABLE_COMPILATION_CACHE",
                 "PYTHONDONTWRITEBYTECODE", "FUNCTRANS_CHECK_JAXPRS"):
        env.pop(name, None)
    env.update(env_updates)
    proc = subprocess.run([sys.executable, "-m", *module_args], cwd=_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"worker exited {proc.returncode}: {tail[:100]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _run_worker(impl: str, quick: bool, env_updates: dict) -> dict:
    return run_worker(["benchmarks.compile_time", impl] + (["--quick"] if quick else []),
                      env_updates)


def failures(results: list[dict]) -> str:
    """The first failed measurement's error, or "ok"."""
    bad = [r.get("error") or f"disagrees: error {r['max_error']:.1e}"
           for r in results if not r.get("ok")]
    return bad[0] if bad else "ok"


def median_total(results: list[dict]):
    good = [r["total_s"] for r in results if r.get("ok")]
    return float(np.median(good)) if good else None


def write_bytecode() -> None:
    """Compile functrans's and the benchmarks' sources to bytecode once, before timing."""
    import compileall
    for folder in ("functrans", "backends", "benchmarks"):
        compileall.compile_dir(os.path.join(_ROOT, folder), quiet=1)


def compile_times(options: Options) -> list[Row]:
    runs = 1 if options.quick else 3
    cold, warm, jax_cold = [], [], []
    write_bytecode()
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="functrans-bench-cache-") as cache_dir:
            env = {"FUNCTRANS_CACHE_DIR": cache_dir}
            cold.append(_run_worker("functrans", options.quick, env))
            warm.append(_run_worker("functrans", options.quick, env))
        if "jax" in options.available:
            jax_cold.append(_run_worker("jax", options.quick, {"JAX_PLATFORMS": "cpu"}))

    step = "MLP train step" + (" (quick sizes)" if options.quick else "")
    rows = []
    row = Row("compile", f"compile {step}, cold", unit="compile")
    row.times["functrans"], row.checks["functrans"] = median_total(cold), failures(cold)
    if jax_cold:
        row.times["jax"], row.checks["jax"] = median_total(jax_cold), failures(jax_cold)
    good = [r for r in cold if r.get("ok")]
    if good:
        row.notes = (f"functrans: trace {1e3 * np.median([r['trace_s'] for r in good]):.0f} ms + "
                     f"compile {np.median([r['compile_s'] for r in good]):.2f} s; "
                     f"median of {runs} process{'es' if runs > 1 else ''}")
    row.extra = {"functrans": cold, "jax": jax_cold}
    rows.append(row)
    row = Row("compile", f"compile {step}, warm (disk cache)", unit="compile")
    row.times["functrans"], row.checks["functrans"] = median_total(warm), failures(warm)
    row.notes = "second process, same FUNCTRANS_CACHE_DIR"
    row.extra = {"functrans": warm}
    rows.append(row)
    return rows


if __name__ == "__main__":
    print(json.dumps(worker(sys.argv[1], "--quick" in sys.argv[2:])))
