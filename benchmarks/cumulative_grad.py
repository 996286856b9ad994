"""Time and memory of ``jit(grad(lambda x: cummax(x).sum()))`` on 1M float32, each
implementation in a fresh process.

The derivative of a cumulative max is a linear map whose dense form is an [n, n] matrix (4
TB at n = 1M); it must run in O(n) memory. Each worker lowers and compiles the gradient,
reads its resident memory (``/proc/self/statm``; the peak so far where that is missing),
runs the compiled gradient once, and reports the peak resident memory from
``resource.getrusage`` minus that baseline: an upper bound of the call's extra memory (the
compile's own peak counts if it was higher). Then it times the call and checks the result
against NumPy: for distinct values the gradient at j counts the prefixes whose maximum is
x[j].

    python -m benchmarks.cumulative_grad functrans      # one worker run, prints JSON
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

from benchmarks.harness import Options, Row, max_error, median_time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def size_for(quick: bool) -> int:
    return 10_000 if quick else 1_000_000


def make_data(n: int) -> np.ndarray:
    # a permutation: distinct values, so the gradient is the same under any tie rule
    return (np.random.default_rng(0).permutation(n) - n / 2).astype(np.float32)


def numpy_gradient(x: np.ndarray) -> np.ndarray:
    """d/dx sum(cummax(x)) for distinct values: how many prefixes have their maximum at j."""
    records = np.where(x == np.maximum.accumulate(x), np.arange(x.size), 0)
    return np.bincount(np.maximum.accumulate(records), minlength=x.size).astype(np.float32)


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return _peak_bytes()


def _peak_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024   # bytes on macOS, KiB on Linux


def worker(impl: str, quick: bool) -> dict:
    """Compile, measure and time the gradient with ``impl`` in this (fresh) process."""
    from benchmarks import frameworks
    lib = frameworks.load(impl)
    if lib is None:
        return {"error": f"{impl} is not importable"}
    x = make_data(size_for(quick))
    args = lib.numpy.asarray(x)
    start = time.perf_counter()
    compiled = lib.jit(lib.grad(lambda x: lib.lax.cummax(x).sum())).lower(args).compile()
    compile_s = time.perf_counter() - start
    before = _resident_bytes()
    out = lib.block_until_ready(compiled(args))
    # (the kernel's peak can trail the current resident size by a page or two)
    extra = max(_peak_bytes() - before, 0)
    err = max_error(out, numpy_gradient(x))
    seconds = median_time(lambda: lib.block_until_ready(compiled(args)), 1 if quick else 7)
    return {"n": int(x.size), "compile_s": compile_s, "seconds": seconds,
            "extra_peak_rss_mb": extra / 2 ** 20, "max_error": err, "ok": bool(err == 0.0)}


def _run_worker(impl: str, quick: bool) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.cumulative_grad", impl]
    cmd += ["--quick"] if quick else []
    proc = subprocess.run(cmd, cwd=_ROOT, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"worker exited {proc.returncode}: {tail[:100]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cumulative_grad(options: Options) -> list[Row]:
    n = size_for(options.quick)
    row = Row("cumulative_grad", f"grad of sum(cummax(x)), {n // 1000}K f32 (jit)")
    x = make_data(n)
    row.times["numpy"] = median_time(lambda: numpy_gradient(x), options.repeats)
    row.checks["numpy"] = "ok"
    notes = []
    for impl in ("functrans", "jax"):
        if impl not in options.available:
            continue
        result = _run_worker(impl, options.quick)
        row.extra[impl] = result
        if "error" in result:
            row.checks[impl] = "failed: " + result["error"]
            continue
        if not result["ok"]:
            row.checks[impl] = f"disagrees: error {result['max_error']:.2e}"
            continue
        row.times[impl], row.checks[impl] = result["seconds"], "ok"
        notes.append(f"{impl}: extra peak RSS {result['extra_peak_rss_mb']:.0f} MB, "
                     f"compile {result['compile_s']:.2f} s")
    row.notes = "; ".join(notes) + "; numpy: bincount of the running argmax"
    return [row]


if __name__ == "__main__":
    print(json.dumps(worker(sys.argv[1], "--quick" in sys.argv[2:])))
