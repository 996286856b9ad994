"""The MLP train step with each library alone in a fresh process.

The harness (:mod:`benchmarks.mlp`) runs every library in one process, round-robin: their
thread pools share the cores there, and each library's first calls are long gone by the
time it is timed. Here each measurement is a fresh process that loads one library,
compiles the step, then times

- its *first calls*: the 10 calls after the compiling one, each timed alone (what a short
  script or a test sees: thread pools starting, pages of new buffers touched, caches cold);
- its *steady state*: the median of the calls after those, in blocks timed together.

Processes alternate between the libraries (functrans, JAX, functrans, ...), so a drift in
the machine's speed moves both alike.

    python -m benchmarks.mlp_processes functrans     # one worker run, prints JSON
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np

from benchmarks.compile_time import run_worker, write_bytecode
from benchmarks.harness import Options, Row, max_error

FIRST_CALLS = 10


def worker(impl: str, quick: bool) -> dict:
    """Compile the train step with ``impl`` in this (fresh) process and time its calls."""
    from benchmarks import frameworks, mlp
    options = Options(quick=quick)
    lib = frameworks.load(impl)
    if lib is None:
        return {"error": f"{impl} is not importable"}
    params, x, onehot = mlp.make_data(mlp.sizes_for(options), mlp.batch_for(options))
    _, step, _ = mlp.make_mlp(lib)
    args = lib.tree_util.tree_map(lib.numpy.asarray, (params, x, onehot))
    fn = lib.jit(step)
    result = lib.block_until_ready(fn(*args))           # compiles
    first = []
    for _ in range(FIRST_CALLS):
        start = time.perf_counter()
        lib.block_until_ready(fn(*args))
        first.append(time.perf_counter() - start)
    blocks = []
    for _ in range(5 if quick else 40):
        start = time.perf_counter()
        for _ in range(5):
            result = lib.block_until_ready(fn(*args))
        blocks.append((time.perf_counter() - start) / 5)
    err = max_error(result, mlp.numpy_train_step(params, x, onehot))
    return {"first_s": first, "steady_s": float(np.median(blocks)), "max_error": err,
            "ok": bool(err <= 2e-4)}


def _failures(results: list[dict]) -> str:
    bad = [r.get("error") or f"disagrees: error {r['max_error']:.1e}"
           for r in results if not r.get("ok")]
    return bad[0] if bad else "ok"


def mlp_in_processes(options: Options) -> list[Row]:
    runs = 1 if options.quick else 5
    impls = ["functrans"] + (["jax"] if "jax" in options.available else [])
    results = {impl: [] for impl in impls}
    write_bytecode()
    for _ in range(runs):
        for impl in impls:
            env = {"JAX_PLATFORMS": "cpu"} if impl == "jax" else {}
            results[impl].append(run_worker(
                ["benchmarks.mlp_processes", impl] + (["--quick"] if options.quick else []), env))

    def good(impl):
        return [r for r in results[impl] if r.get("ok")]

    steady = Row("mlp_processes", "MLP train step, fresh process each, steady state")
    first = Row("mlp_processes", f"MLP train step, fresh process each, first {FIRST_CALLS} calls")
    for impl in impls:
        for row in (steady, first):
            row.checks[impl] = _failures(results[impl])
        if good(impl):
            steady.times[impl] = float(np.median([r["steady_s"] for r in good(impl)]))
            first.times[impl] = float(np.median([np.median(r["first_s"]) for r in good(impl)]))
    steady.notes = f"median of {runs} processes per library, alternating"
    first.notes = "median over processes of each one's median call"
    if good("functrans"):
        slowest = np.median([max(r["first_s"]) for r in good("functrans")])
        first.notes += f"; functrans's slowest of them {1e3 * slowest:.1f} ms"
    steady.extra = first.extra = {impl: results[impl] for impl in impls}
    return [steady, first]


if __name__ == "__main__":
    print(json.dumps(worker(sys.argv[1], "--quick" in sys.argv[2:])))
