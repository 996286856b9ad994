"""The machine description, the printed table and the JSON file of a benchmark run."""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform

from benchmarks import frameworks
from benchmarks.harness import IMPLEMENTATIONS, Row

# Spread (IQR / median) above which a number is flagged as noisy.
NOISY = 0.10


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# The x86-64 vector extensions the code generators can use, in the order they appeared, as
# /proc/cpuinfo spells them; the table names the ones the CPU has.
VECTOR_EXTENSIONS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq",
                     "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni",
                     "amx_tile")


def vector_extensions() -> list[str]:
    """The CPU's vector extensions from :data:`VECTOR_EXTENSIONS` (empty where
    /proc/cpuinfo cannot be read or lists no flags)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return [e for e in VECTOR_EXTENSIONS if e in flags]
    except OSError:
        pass
    return []


def load_average() -> str:
    """The 1, 5 and 15 minute load averages: other processes on the cores move every time."""
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "?"


def blas_info() -> list[str]:
    """The BLAS libraries loaded (NumPy's; SciPy's, which functrans's llvm backend calls),
    with the kernel OpenBLAS picked for this CPU and the thread count."""
    try:
        import importlib
        importlib.import_module("scipy.linalg.cython_blas")   # loaded, so it is listed
        import threadpoolctl
    except ImportError:
        return ["(install threadpoolctl to see the BLAS kernels)"]
    out = []
    for lib in threadpoolctl.threadpool_info():
        if lib.get("user_api") != "blas":
            continue
        owner = "numpy" if "numpy" in lib["filepath"] else (
            "scipy" if "scipy" in lib["filepath"] else os.path.basename(lib["filepath"]))
        out.append(f"{owner}: {lib['internal_api']} {lib.get('version')}, kernel "
                   f"{lib.get('architecture')}, {lib['num_threads']} threads")
    return out


def machine() -> dict:
    env = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS",
                                       "OPENBLAS_NUM_THREADS") if k in os.environ}
    return {"cpu": cpu_model(), "vector_extensions": vector_extensions(),
            "cores": os.cpu_count(), "load_average": load_average(),
            "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "python": platform.python_version(), "versions": frameworks.versions(),
            "blas": blas_info(), "environment": env}


def format_time(t) -> str:
    if t is None:
        return "-"
    if t < 1e-3:
        return f"{t * 1e6:.1f} us"
    if t < 1:
        return f"{t * 1e3:.2f} ms"
    return f"{t:.2f} s"


def format_table(rows: list[Row], info: dict) -> str:
    """The table: one row per workload, a column per implementation that ran, the ratios
    functrans / other, whether every implementation agreed, and notes."""
    impls = [i for i in IMPLEMENTATIONS if any(r.times.get(i) or i in r.checks for r in rows)]
    others = [i for i in ("jax", "numpy", "torch") if i in impls]
    width = max([len(r.title) for r in rows] + [20])
    lines = [
        f"functrans benchmarks, {info['date']}: {info['cpu']}, {info['cores']} cores, "
        f"Python {info['python']}",
        "vector extensions: " + (" ".join(info.get("vector_extensions") or []) or "unknown")
        + f"; load average at the start: {info.get('load_average', '?')}",
        "versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()),
        "BLAS: " + "; ".join(info["blas"]) + f"; threads: {info.get('threads', '?')}",
    ]
    if info.get("contention"):
        lines.append("contention: " + info["contention"])
    if info["environment"]:
        lines.append("environment: " + " ".join(f"{k}={v}" for k, v in info["environment"].items()))
    lines.append("median times; ft/X = functrans time / X time (below 1: functrans faster); "
                 "'*' = noisy (IQR > 10% of median)")
    header = f"{'workload':<{width}}" + "".join(f"{i:>14}" for i in impls)
    header += "".join(f"{'ft/' + o:>10}" for o in others) + f"  {'agree':<6} notes"
    lines += ["", header, "-" * len(header)]
    problems = []
    for row in rows:
        cells = ""
        for impl in impls:
            t = row.times.get(impl)
            mark = "*" if t is not None and row.spread.get(impl, 0) > NOISY else " "
            cells += f"{format_time(t) + mark:>14}"
        ft = row.times.get("functrans")
        for other in others:
            t = row.times.get(other)
            cells += f"{ft / t:>9.2f}x" if ft and t else f"{'-':>10}"
        bad = {k: v for k, v in row.checks.items() if v != "ok"}
        agree = "ok" if row.checks and not bad else ("FAIL" if "functrans" in bad else "ok*")
        problems += [f"{row.title}: {k}: {v}" for k, v in bad.items()]
        lines.append(f"{row.title:<{width}}{cells}  {agree:<6} {row.notes}")
    if problems:
        lines += ["", "not timed (failed, or disagreed with the reference, or skipped):"]
        lines += ["  " + p for p in problems]
    return "\n".join(lines)


def write_json(path: str, rows: list[Row], info: dict, argv: list[str]) -> None:
    with open(path, "w") as f:
        json.dump({"machine": info, "argv": argv, "rows": [dataclasses.asdict(r) for r in rows]},
                  f, indent=1, default=str)
