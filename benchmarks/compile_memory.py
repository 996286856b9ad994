"""Memory that compiling keeps: the resident size of a process that compiles one function for
many fresh shapes, then clears its caches. Each setting runs in a fresh process:

- ``capped``: the on-disk cache off and the in-memory caches at 8 entries, so every call
  compiles (LLVM included) and what the caches hold stays small: the growth is what
  compiling leaks;
- ``default``: the default settings (on-disk cache in a new empty directory, in-memory
  caches at their default sizes).

Each worker compiles ``f(x) = sum(tanh(x) * 2 + cos(x) ** 2)`` for ``x`` of ``compiles``
different lengths, then calls ``functrans.clear_caches()``, and prints the resident set
size (``VmRSS``) before, after the compiles and after clearing, as one JSON line.

    python -m benchmarks.compile_memory                   # 2000 compiles per setting
    python -m benchmarks.compile_memory --compiles 300    # fewer (a smoke test)
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SETTINGS = {
    "capped": {"FUNCTRANS_DISABLE_COMPILATION_CACHE": "1",
               "FUNCTRANS_JIT_CACHE_MAX_ENTRIES": "8",
               "FUNCTRANS_EXECUTABLE_CACHE_MAX_ENTRIES": "8"},
    "default": {},
}


def resident_mb() -> float:
    """This process's resident set size in MB (Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def worker(compiles: int) -> dict:
    """Compile for ``compiles`` fresh shapes in this process; the resident sizes."""
    import numpy as np

    import functrans
    import functrans.numpy as jnp

    f = functrans.jit(lambda x: jnp.sum(jnp.tanh(x) * 2 + jnp.cos(x) ** 2))
    for n in range(1, 21):  # LLVM, the thread pool and the caches' first entries
        f(np.ones(n, np.float32))
    gc.collect()
    start = resident_mb()
    began = time.perf_counter()
    for n in range(100, 100 + compiles):
        f(np.ones(n, np.float32))
    seconds = time.perf_counter() - began
    gc.collect()
    compiled = resident_mb()
    functrans.clear_caches()
    gc.collect()
    cleared = resident_mb()
    return {"compiles": compiles, "seconds": seconds, "start_mb": start,
            "compiled_mb": compiled, "cleared_mb": cleared}


def measure(setting: str, compiles: int) -> dict:
    """:func:`worker` in a fresh process with ``setting``'s environment."""
    with tempfile.TemporaryDirectory(prefix="functrans-bench-memory-") as cache:
        env = dict(os.environ, FUNCTRANS_CACHE_DIR=cache, **SETTINGS[setting])
        for name in ("FUNCTRANS_DISABLE_COMPILATION_CACHE", "FUNCTRANS_JIT_CACHE_MAX_ENTRIES",
                     "FUNCTRANS_EXECUTABLE_CACHE_MAX_ENTRIES"):
            if name not in SETTINGS[setting]:
                env.pop(name, None)
        run = subprocess.run([sys.executable, "-m", "benchmarks.compile_memory", "--worker",
                              "--compiles", str(compiles)], env=env, cwd=_ROOT,
                             capture_output=True, text=True, timeout=3600)
    if run.returncode != 0:
        raise RuntimeError(f"the {setting} worker failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compile_memory",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--compiles", type=int, default=2000,
                        help="fresh shapes compiled per setting (default 2000)")
    parser.add_argument("--settings", default=",".join(SETTINGS),
                        help=f"comma-separated, among {', '.join(SETTINGS)}")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.compiles)))
        return 0
    print(f"{'setting':<10}{'compiles':>9}{'seconds':>9}{'start MB':>10}{'growth MB':>11}"
          f"{'KB/compile':>12}{'after clear_caches MB':>23}")
    for setting in args.settings.split(","):
        r = measure(setting, args.compiles)
        growth = r["compiled_mb"] - r["start_mb"]
        print(f"{setting:<10}{r['compiles']:>9}{r['seconds']:>9.1f}{r['start_mb']:>10.1f}"
              f"{growth:>+11.1f}{growth * 1024 / r['compiles']:>12.1f}"
              f"{r['cleared_mb'] - r['start_mb']:>+23.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
