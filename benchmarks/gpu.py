"""GPU workloads: functrans's cuda backend beside CuPy (eager) and JAX on the same GPU.

    python -m benchmarks.gpu [--quick] [--json PATH] [--only NAME[,NAME]]

Needs CuPy and a GPU; JAX joins when it is installed with GPU support (JAX does not grab
most of the GPU's memory: this sets ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` before importing
it). Every implementation's result is checked against CuPy's before anything is timed.

Times are steady-state per call: after warm-up calls (compilation is not timed), a block of
calls is issued back to back and the GPU is synchronized once at its end, as in a training
loop; the median over several blocks is reported. functrans's arguments are GPU arrays
(``device_put`` to the GPU), so no call copies between host and GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from benchmarks.kernels import chain, logsumexp_rows_fn
from benchmarks.mlp import (LEARNING_RATE, make_data, make_mlp, numpy_per_example_grads,
                            numpy_train_step)

IMPLS = ("functrans", "cupy", "jax")


def _load_jax():
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax
        if not any(d.platform == "gpu" for d in jax.devices()):
            return None
        # float32 products in full float32, as cuBLAS does for functrans and CuPy (JAX's
        # default on a GPU rounds their inputs to tensor-float32)
        jax.config.update("jax_default_matmul_precision", "highest")
        return jax
    except Exception:
        return None


class Bench:
    def __init__(self, quick: bool):
        import cupy
        import functrans
        self.cp = cupy
        self.ft = functrans
        self.jax = _load_jax()
        self.quick = quick
        self.gpu = functrans.devices("gpu")[0]
        self.rows: list = []

    # ---- timing --------------------------------------------------------------------------

    def _finish(self, impl, out):
        if impl == "jax":
            self.jax.block_until_ready(out)
        else:
            self.cp.cuda.Device().synchronize()

    def time(self, impl, fn) -> float:
        """Median seconds per call of ``fn`` (see the module doc)."""
        for _ in range(3):
            self._finish(impl, fn())
        start = time.perf_counter()
        self._finish(impl, fn())
        once = max(time.perf_counter() - start, 1e-6)
        block = max(1, min(1000, int(0.02 / once)))
        samples = []
        for _ in range(5 if self.quick else 15):
            start = time.perf_counter()
            for _ in range(block):
                out = fn()
            self._finish(impl, out)
            samples.append((time.perf_counter() - start) / block)
        return statistics.median(samples)

    def row(self, name: str, title: str, impls: dict, reference: str = "cupy", tol: float = 1e-4,
            check=None, bytes_moved: float | None = None) -> dict:
        """Check every implementation against ``reference``, then time the ones that agree."""
        results = {k: _host_leaves(fn()) for k, fn in impls.items()}
        ref = results[reference]
        row = {"name": name, "title": title, "times": {}, "errors": {}}
        for impl, fn in impls.items():
            err = check(results[impl], ref) if check else _max_error(results[impl], ref)
            row["errors"][impl] = err
            if not err <= tol:
                print(f"  {name}: {impl} disagrees with {reference} (max error {err:.3g})")
                continue
            row["times"][impl] = self.time(impl, fn)
        if bytes_moved:
            row["bytes"] = bytes_moved
        self.rows.append(row)
        _print_row(row, self.rows[0].get("copy_bandwidth"))
        return row

    # ---- workloads -----------------------------------------------------------------------

    def copy_bandwidth(self):
        cp = self.cp
        n = (1 << 24) if self.quick else (1 << 27)
        src = cp.random.standard_normal(n, dtype=cp.float32)
        dst = cp.empty_like(src)

        def copy():
            dst[...] = src
            return dst
        t = self.time("cupy", copy)
        row = {"name": "copy", "title": f"device-to-device copy, {n >> 20}M f32",
               "times": {"cupy": t}, "copy_bandwidth": 2 * src.nbytes / t}
        self.rows.append(row)
        print(f"{row['title']:<52} {2 * src.nbytes / t / 1e9:8.0f} GB/s (read + write)")

    def _put(self, tree):
        return self.ft.device_put(tree, self.gpu)

    def _jitted(self, make, *args, jax_make=None):
        """functrans, CuPy and JAX callables of ``make(module)(*args)``."""
        cp, ft, jax = self.cp, self.ft, self.jax
        fn = ft.jit(make(ft.numpy))
        fargs = self._put(args)
        impls = {"functrans": lambda: fn(*fargs)}
        cargs = [cp.asarray(a) for a in args]
        cupy_fn = make(cp)
        impls["cupy"] = lambda: cupy_fn(*cargs)
        if jax is not None:
            jfn = jax.jit((jax_make or make)(jax.numpy))
            jargs = [jax.device_put(a) for a in args]
            impls["jax"] = lambda: jfn(*jargs)
        return impls

    def elementwise(self):
        n = (1 << 22) if self.quick else (1 << 26)
        x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        impls = self._jitted(lambda m: (lambda v: chain(m, v)), x)
        self.row("elementwise", f"8-op elementwise chain, {n >> 20}M f32", impls, tol=1e-5,
                 bytes_moved=2 * x.nbytes)

    def logsumexp(self):
        n = 1024 if self.quick else 4096
        x = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
        impls = self._jitted(lambda m: (lambda v: logsumexp_rows_fn(m, v)), x)
        self.row("logsumexp", f"logsumexp over rows, {n}x{n} f32", impls, tol=1e-4,
                 bytes_moved=x.nbytes)

    def matmul(self):
        n = 1024 if self.quick else 4096
        rng = np.random.default_rng(2)
        a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
        impls = self._jitted(lambda m: (lambda u, v: m.matmul(u, v)), a, b)
        self.row("matmul", f"matmul {n}^3 f32", impls, tol=1e-2 * np.sqrt(n))

    def _mlp(self, which: str, batch: int):
        cp, ft, jax = self.cp, self.ft, self.jax
        sizes = (784, 128, 128, 10) if self.quick else (784, 512, 512, 10)
        params, x, onehot = make_data(sizes, batch)
        _, step, per_example = make_mlp(ft)
        fn = ft.jit(step if which == "step" else per_example)
        fargs = self._put((params, x, onehot))
        impls = {"functrans": lambda: fn(*fargs)}
        # CuPy runs the hand-written NumPy backward pass: NumPy's functions dispatch to CuPy
        cargs = _tree(cp.asarray, (params, x, onehot))
        cupy_fn = numpy_train_step if which == "step" else numpy_per_example_grads
        impls["cupy"] = lambda: cupy_fn(*cargs)
        if jax is not None:
            _, jstep, jper_example = make_mlp(jax)
            jfn = jax.jit(jstep if which == "step" else jper_example)
            jargs = jax.device_put((params, x, onehot))
            impls["jax"] = lambda: jfn(*jargs)
        check = _step_as_gradients(params) if which == "step" else None
        title = (f"MLP {'-'.join(map(str, sizes))} train step, batch {batch}" if which == "step"
                 else f"per-example grads jit(vmap(grad)), batch {batch}")
        self.row(f"{which}_{batch}", title, impls, tol=5e-4, check=check)

    def mlp(self):
        for batch in ((32,) if self.quick else (128, 1024)):
            self._mlp("step", batch)

    def per_example(self):
        self._mlp("per_example", 32 if self.quick else 128)

    def dispatch(self):
        impls = self._jitted(lambda m: (lambda v: v + 1), np.ones(4, np.float32))
        self.row("dispatch", "dispatch: jitted x + 1 on 4 floats", impls, tol=0)


WORKLOADS = ("elementwise", "logsumexp", "matmul", "mlp", "per_example", "dispatch")


# ---- results ------------------------------------------------------------------------------------

def _tree(fn, tree):
    if isinstance(tree, (list, tuple)):
        return type(tree)(_tree(fn, t) for t in tree)
    if isinstance(tree, dict):
        return {k: _tree(fn, v) for k, v in tree.items()}
    return fn(tree)


def _host_leaves(x) -> list:
    if isinstance(x, dict):
        return [leaf for k in sorted(x) for leaf in _host_leaves(x[k])]
    if isinstance(x, (list, tuple)):
        return [leaf for item in x for leaf in _host_leaves(item)]
    if hasattr(x, "get") and hasattr(x, "__cuda_array_interface__") and not hasattr(x, "_value"):
        return [np.asarray(x.get(), np.float64)]
    return [np.asarray(x, np.float64)]


def _max_error(leaves, reference) -> float:
    """Largest error relative to the reference's scale, over every leaf."""
    worst = 0.0
    for a, b in zip(leaves, reference):
        if a.shape != b.shape:
            return float("inf")
        scale = max(1.0, float(np.max(np.abs(b))) if b.size else 1.0)
        worst = max(worst, float(np.max(np.abs(a - b))) / scale if a.size else 0.0)
    return worst


def _step_as_gradients(params):
    """Train steps are compared by the gradient they applied, not by the new parameters."""
    before = _host_leaves(params)

    def check(result, reference):
        grads = lambda new: [(b - n) / LEARNING_RATE for b, n in zip(before, new)]  # noqa: E731
        return _max_error(grads(result), grads(reference))
    return check


def _print_row(row, bandwidth):
    times = row["times"]
    cells = "  ".join(f"{impl} {times[impl] * 1e6:9.1f} us" if impl in times else f"{impl} {'-':>12}"
                      for impl in IMPLS)
    ft = times.get("functrans")
    ratios = []
    for other in ("jax", "cupy"):
        if ft and times.get(other):
            ratios.append(f"{ft / times[other]:.2f}x {other}")
    extra = ""
    if row.get("bytes") and bandwidth and ft:
        extra = f"  {row['bytes'] / ft / 1e9:.0f} GB/s = {100 * row['bytes'] / ft / bandwidth:.0f}% of copy"
    print(f"{row['title']:<52} {cells}  [{', '.join(ratios)}]{extra}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few samples")
    parser.add_argument("--only", default="", help=f"comma-separated subset of {WORKLOADS}")
    parser.add_argument("--json", default="", help="write the rows to this file")
    args = parser.parse_args(argv)
    from functrans.backends.cuda.runtime import is_available
    if not is_available():
        print("benchmarks.gpu needs CuPy and a CUDA GPU", file=sys.stderr)
        return 2
    bench = Bench(args.quick)
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(0)
    print(f"GPU: {props['name'].decode()}; CuPy {cupy.__version__}; "
          f"JAX {bench.jax.__version__ if bench.jax else 'not available'}")
    print("ratios are functrans time / other time: below 1 means functrans is faster")
    bench.copy_bandwidth()
    for name in (args.only.split(",") if args.only else WORKLOADS):
        getattr(bench, name)()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(bench.rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
