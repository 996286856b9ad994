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
import sys
import tempfile

from benchmarks.compile_time import write_bytecode, failures, median_total, run_worker, \
    time_compile
from benchmarks.harness import Options, Row

WIDTH, BATCH, INPUTS, CLASSES = 64, 32, 32, 10


def depths_for(options: Options) -> tuple[int, ...]:
    return (2, 4) if options.quick else (4, 16, 64)


def worker(impl: str, layers: int) -> dict:
    """Time lowering + compiling the ``layers``-layer train step with ``impl`` here."""
    from benchmarks import frameworks
    lib = frameworks.load(impl)
    if lib is None:
        return {"error": f"{impl} is not importable"}
    sizes = (INPUTS,) + (WIDTH,) * (layers - 1) + (CLASSES,)
    return {"layers": layers, **time_compile(lib, sizes, BATCH)}


def _run_worker(impl: str, layers: int, env_updates: dict) -> dict:
    return run_worker(["benchmarks.compile_scaling", impl, str(layers)], env_updates,
                      timeout=900)


def _cold(impl: str, layers: int) -> dict:
    if impl == "jax":
        return _run_worker(impl, layers, {"JAX_PLATFORMS": "cpu"})
    with tempfile.TemporaryDirectory(prefix="functrans-bench-cache-") as cache_dir:
        return _run_worker(impl, layers, {"FUNCTRANS_CACHE_DIR": cache_dir})


def compile_scaling(options: Options) -> list[Row]:
    runs = 1 if options.quick else max(1, options.rounds)
    impls = ["functrans"] + (["jax"] if "jax" in options.available else [])
    write_bytecode()
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
            total = median_total(found)
            row.times[impl], row.checks[impl] = total, failures(found)
            if total is not None:
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
