"""``python -m benchmarks``: run the workloads and print one table (see benchmarks/README.md)."""
from __future__ import annotations

import argparse
import os
import sys
import time

# names for --only, in table order: "module:function" returning a list of rows. The modules
# are imported after the command line is read, because --single-thread must set the thread
# variables before NumPy, SciPy, JAX or PyTorch load their thread pools.
WORKLOADS = {
    "mlp": "mlp:mlp_train_step",
    "mlp_processes": "mlp_processes:mlp_in_processes",
    "per_example": "mlp:per_example_gradients",
    "cnn": "cnn:cnn_train_step",
    "resnet": "resnet:resnet_train_step",
    "transformer": "transformer:transformer_train_step",
    "transformer_large": "transformer_large:transformer_large_train_step",
    "elementwise": "kernels:elementwise_chain",
    "logsumexp": "kernels:logsumexp_rows",
    "sort": "kernels:sort_rows",
    "cumulative_grad": "cumulative_grad:cumulative_grad",
    "matmul": "kernels:matmul",
    "dispatch": "kernels:dispatch",
    "compile": "compile_time:compile_times",
    "compile_scaling": "compile_scaling:compile_scaling",
    "rnn": "bench_rnn:rnn",
    "pmap": "bench_pmap:pmap_scaling",
    "export": "bench_export:export_latency",
    "sharding": "bench_sharding:sharding_data_parallel",
}

SINGLE_THREAD_ENV = {
    "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    "FUNCTRANS_NUM_THREADS": "1",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false",
}


def _workload(name: str):
    import importlib
    module, function = WORKLOADS[name].split(":")
    return getattr(importlib.import_module(f"benchmarks.{module}"), function)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="functrans against NumPy, JAX and PyTorch (when importable): one table "
                    "of median times and ratios.")
    parser.add_argument("--quick", action="store_true",
                        help="smaller sizes and fewer repeats (a smoke test, not a measurement)")
    parser.add_argument("--only", default="",
                        help="comma-separated workloads: " + ",".join(WORKLOADS))
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--repeats", type=int, help="samples per implementation (default 15, quick 3)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="interleaved rounds per workload: more rounds cancel more of a "
                             "drifting machine's speed (default 3)")
    parser.add_argument("--impls", default="functrans,jax,numpy,torch",
                        help="implementations to run, among those importable")
    parser.add_argument("--single-thread", action="store_true",
                        help="one thread per library (BLAS, OpenMP, XLA, PyTorch): steadier "
                             "numbers on a loaded machine, and pmap devices get a core each")
    parser.add_argument("--contention", type=int, nargs="?", const=2, default=None,
                        metavar="CORES",
                        help="run beside busy CPU-bound processes, one per CORES cores "
                             "(default 2, at least one), started before the first workload "
                             "and stopped at the end (see benchmarks/contention.py)")
    parser.add_argument("--torch-compile", action=argparse.BooleanOptionalAction, default=None,
                        help="also time torch.compile (default: on, off with --quick)")
    args = parser.parse_args(argv)
    names = [n.strip().replace("-", "_") for n in args.only.split(",") if n.strip()] or list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    if args.contention is not None and args.contention < 1:
        parser.error(f"--contention takes cores per busy process (>= 1), got {args.contention}")
    return args, names


def main(argv=None) -> int:
    args, names = parse_args(sys.argv[1:] if argv is None else argv)
    if args.single_thread:
        # inherited by the compile-time and pmap worker processes too
        for key, value in SINGLE_THREAD_ENV.items():
            os.environ[key] = (os.environ.get(key, "") + " " + value).strip() \
                if key == "XLA_FLAGS" else value
    from benchmarks import contention, frameworks, report
    from benchmarks.harness import Options
    wanted = set(args.impls.split(",")) | {"functrans", "numpy"}
    options = Options(
        quick=args.quick,
        repeats=args.repeats or (3 if args.quick else 15),
        min_time=0.05 if args.quick else 1.0,
        rounds=args.rounds or 3,
        torch_compile=(not args.quick) if args.torch_compile is None else args.torch_compile,
        available=tuple(i for i in frameworks.available() if i in wanted),
    )
    if args.single_thread and "torch" in options.available:
        frameworks.load("torch").set_num_threads(1)
    info = report.machine()
    info["threads"] = "1 per library (--single-thread)" if args.single_thread else "library defaults"
    busy = 0
    if args.contention is not None:
        busy = contention.count_for(args.contention)
        info["contention"] = f"{busy} busy process(es) beside this one (--contention {args.contention})"
    rows = []
    with contention.busy_processes(busy):
        for name in names:
            start = time.perf_counter()
            print(f"[{name}] running...", file=sys.stderr, flush=True)
            rows += _workload(name)(options)
            print(f"[{name}] done in {time.perf_counter() - start:.1f} s", file=sys.stderr,
                  flush=True)
    print(report.format_table(rows, info))
    if args.json:
        report.write_json(args.json, rows, info, sys.argv[1:] if argv is None else argv)
    # a functrans result that disagrees with the reference fails the run
    return 1 if any(r.checks.get("functrans", "ok") != "ok" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
