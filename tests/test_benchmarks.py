"""Smoke test of the benchmark suite: it runs, prints its table, and its checks bite.

No timings are asserted (timings live in benchmarks/, never in unit tests).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_suite(*args, tmp_path):
    out = tmp_path / "bench.json"
    env = dict(os.environ)
    env.pop("FUNCTRANS_CHECK_JAXPRS", None)   # set by conftest; only slows the staging here
    proc = subprocess.run([sys.executable, "-m", "benchmarks", *args, "--json", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def test_quick_run_prints_table_and_agrees_with_numpy(tmp_path):
    proc, results = run_suite("--quick", "--only", "dispatch,elementwise", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("workload"))
    # the CPU's vector extensions are named: the numbers depend on them
    assert any(line.startswith("vector extensions: ") for line in lines)
    assert results["machine"]["vector_extensions"] == report.vector_extensions()
    assert "functrans" in header and "numpy" in header and "ft/numpy" in header
    for title in ("dispatch: cached jitted call", "8-op elementwise chain"):
        row = next(line for line in lines if line.startswith(title))
        assert " ok " in row, row           # the agreement column
    rows = {r["name"]: r for r in results["rows"]}
    assert set(rows) == {"dispatch", "elementwise"}
    for row in rows.values():
        assert row["checks"]["functrans"] == "ok"
        assert row["checks"]["numpy"] == "ok"
        assert row["times"]["functrans"] > 0 and row["times"]["numpy"] > 0
    assert rows["elementwise"]["extra"]["memcpy_bytes_per_s"] > 0
    assert "GB/s" in rows["elementwise"]["notes"]


def test_unknown_workload_is_an_error(tmp_path):
    proc, _ = run_suite("--only", "no_such_workload", tmp_path=tmp_path)
    assert proc.returncode != 0 and "unknown workload" in proc.stderr


def test_a_wrong_result_gets_no_time():
    sys.path.insert(0, ROOT)
    try:
        from benchmarks.harness import Options, compare
    finally:
        sys.path.remove(ROOT)
    x = np.linspace(0, 1, 1000, dtype=np.float32)
    impls = {"numpy": lambda: np.tanh(x),
             "functrans": lambda: np.tanh(x) * np.float32(1.001),   # 0.1% off
             "torch": lambda: np.tanh(x).astype(np.float64)}        # right, other dtype
    row = compare("t", "t", impls, Options(repeats=2, min_time=0.0), tol=1e-5)
    assert row.times["functrans"] is None
    assert row.checks["functrans"].startswith("disagrees")
    assert row.checks["torch"] == "ok" and row.times["torch"] > 0


@pytest.mark.parametrize("failing", ["functrans", "jax"])
def test_a_failing_implementation_is_reported(failing):
    sys.path.insert(0, ROOT)
    try:
        from benchmarks.harness import Options, compare
    finally:
        sys.path.remove(ROOT)

    def boom():
        raise NotImplementedError("no rule")
    row = compare("t", "t", {"numpy": lambda: np.ones(3), failing: boom},
                  Options(repeats=2, min_time=0.0))
    assert row.times[failing] is None and "no rule" in row.checks[failing]


def test_gpu_benchmarks_say_what_they_need():
    from functrans.backends.cuda import runtime
    if runtime.is_available():
        pytest.skip("a GPU is present: the GPU benchmarks would run")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu", "--quick"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "needs CuPy and a CUDA GPU" in proc.stderr


@pytest.mark.parametrize("workload", ["cnn", "resnet", "transformer"])
def test_model_workloads_agree_with_the_reference(workload, tmp_path):
    proc, results = run_suite("--quick", "--only", workload, "--impls", "functrans,numpy",
                              tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = results["rows"][0]
    assert row["name"] == workload and row["checks"]["functrans"] == "ok"
    assert row["times"]["functrans"] > 0


def test_cumulative_grad_worker_reports_memory_and_agrees():
    env = dict(os.environ)
    env.pop("FUNCTRANS_CHECK_JAXPRS", None)
    proc = subprocess.run([sys.executable, "-m", "benchmarks.cumulative_grad", "functrans",
                           "--quick"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ok"] and result["max_error"] == 0.0
    assert result["n"] == 10_000 and result["seconds"] > 0 and result["extra_peak_rss_mb"] >= 0


def test_sharding_benchmark_agrees_and_runs_without_fallbacks():
    sys.path.insert(0, ROOT)
    try:
        from benchmarks import bench_sharding
    finally:
        sys.path.remove(ROOT)
    result = bench_sharding.run_worker("functrans", quick=True, repeats=1)
    assert result.get("ok"), result
    assert result["fallbacks"] == []
    assert result["sharded_s"] > 0 and result["pmap_s"] > 0


def test_contention_processes_run_for_the_block_and_stop_after_it():
    """--contention's busy processes spin while the workloads run and are gone afterwards,
    also when the run stops with an exception (as with Ctrl-C)."""
    from benchmarks import contention
    assert contention.count_for(2, cores=8) == 4 and contention.count_for(4, cores=2) == 1
    with pytest.raises(ValueError, match="cores per busy process"):
        contention.count_for(0)
    with pytest.raises(KeyboardInterrupt):
        with contention.busy_processes(2) as procs:
            assert len(procs) == 2 and all(p.poll() is None for p in procs)
            raise KeyboardInterrupt
    assert all(p.poll() is not None for p in procs)


def test_contention_flag_is_reported(tmp_path):
    proc, results = run_suite("--quick", "--only", "dispatch", "--impls", "functrans,numpy",
                              "--contention", "64", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "contention: 1 busy process(es)" in proc.stdout
    assert "--contention 64" in results["machine"]["contention"]


def test_large_transformer_agrees_and_reports_peak_memory(tmp_path):
    proc, results = run_suite("--quick", "--only", "transformer_large", "--impls",
                              "functrans,numpy", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = results["rows"][0]
    assert row["name"] == "transformer_large" and row["checks"]["functrans"] == "ok"
    assert row["extra"]["memory_errors"] == {}
    assert row["extra"]["peak_rss_growth_mb"]["functrans"] > 0
    assert "peak RSS growth: functrans" in row["notes"]


def test_compile_scaling_compiles_each_depth_cold(tmp_path):
    proc, results = run_suite("--quick", "--only", "compile_scaling", "--impls",
                              "functrans,numpy", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = results["rows"]
    assert [r["extra"]["layers"] for r in rows] == [2, 4]
    for row in rows:
        assert row["checks"]["functrans"] == "ok" and row["times"]["functrans"] > 0
        assert "ms/layer" in row["notes"]


def test_compile_memory_runs_each_setting_in_a_fresh_process():
    proc = subprocess.run([sys.executable, "-m", "benchmarks.compile_memory", "--compiles", "10",
                           "--settings", "capped"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    header, row = proc.stdout.strip().splitlines()
    assert "after clear_caches MB" in header
    assert row.split()[:2] == ["capped", "10"]


def test_mlp_in_fresh_processes_times_first_calls_and_steady_state(tmp_path):
    proc, results = run_suite("--quick", "--only", "mlp_processes", "--impls",
                              "functrans,numpy", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    steady, first = results["rows"]
    for row in (steady, first):
        assert row["checks"]["functrans"] == "ok" and row["times"]["functrans"] > 0
    (run,) = first["extra"]["functrans"]
    assert len(run["first_s"]) == 10 and run["ok"]
