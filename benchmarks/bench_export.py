"""Exported programs: one MLP forward through each way of running a saved model.

    python -m benchmarks --only export                 # in the suite's table
    python -m benchmarks.bench_export                  # this workload alone
    python -m benchmarks.bench_export --batches 1,128 --repeats 20
    python -m benchmarks.bench_export --batches 1 --gemm   # and without gemv (ft-gemm)

The network is the MLP of :mod:`benchmarks.mlp` (784-512-512-10, ReLU, log-softmax), its
parameters baked in as constants. Per batch size, three rows:

* ``jit``: functrans's and JAX's ``jit`` of the forward function (NumPy's forward is the
  reference every row is checked against);
* ``Exported.call``: ``export(jit(f))``, ``serialize()``, ``deserialize()`` and
  ``Exported.call`` in functrans; in JAX the same with ``jax.export`` (without the
  serialization round trip when JAX's serializer, which needs ``flatbuffers``, is
  missing: the note says so);
* ``.so from C``: the Exported compiled by ``to_shared_library`` and called from a C
  program, timed there (median of blocks of calls, with ``clock_gettime``); its outputs
  are checked against NumPy's like every other number. Skipped without a C compiler.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile

import numpy as np

from benchmarks import frameworks
from benchmarks.harness import Options, Row, compare, max_error, skipped
from benchmarks.mlp import make_data, sizes_for


def forward(lib_numpy, params, x):
    """The MLP's log-probabilities, written against a NumPy-like module."""
    h = x
    for i, layer in enumerate(params):
        h = lib_numpy.dot(h, layer["w"]) + layer["b"]
        if i < len(params) - 1:
            h = lib_numpy.maximum(h, 0.0)
    m = lib_numpy.max(h, axis=1, keepdims=True)
    return h - m - lib_numpy.log(lib_numpy.sum(lib_numpy.exp(h - m), axis=1, keepdims=True))


def _jax_round_trip(jax, f, x):
    """JAX's exported forward: deserialized from its bytes when JAX can serialize here."""
    from jax import export as jax_export
    exported = jax_export.export(jax.jit(f))(x)
    try:
        return jax_export.deserialize(exported.serialize()), ""
    except ImportError as err:  # jax's serializer needs flatbuffers
        return exported, f"jax: Exported.call without serialize/deserialize ({err})"


_C_TIMER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "mlp.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int compare_doubles(const void *a, const void *b) {
    double d = *(const double *)a - *(const double *)b;
    return (d > 0) - (d < 0);
}

int main(int argc, char **argv) {
    int samples = atoi(argv[3]);
    double min_time = atof(argv[4]);
    float *x = malloc(sizeof(float) * MLP_X_SIZE), *out = malloc(sizeof(float) * MLP_OUT_SIZE);
    FILE *f = fopen(argv[1], "rb");
    if (!f || fread(x, sizeof(float), MLP_X_SIZE, f) != MLP_X_SIZE) return 2;
    fclose(f);
    int status = mlp(x, out, NULL, 0);  /* the first call starts the library */
    if (status) { fprintf(stderr, "%s\n", mlp_error_message(status)); return 1; }
    int calls = 1;  /* calls per sample: about 2 ms */
    for (double t0 = now(); now() - t0 < 2e-3; calls++) mlp(x, out, NULL, 0);
    double *times = malloc(sizeof(double) * samples * 10);
    int n = 0;
    double spent = 0;
    while (n < samples || (n < 10 * samples && spent < min_time)) {
        double t0 = now();
        for (int i = 0; i < calls; i++) mlp(x, out, NULL, 0);
        double elapsed = now() - t0;
        times[n++] = elapsed / calls;
        spent += elapsed;
    }
    qsort(times, n, sizeof(double), compare_doubles);
    f = fopen(argv[2], "wb");
    fwrite(out, sizeof(float), MLP_OUT_SIZE, f);
    fclose(f);
    printf("%.9e %.9e %.9e\n", times[n / 2], times[n / 4], times[3 * n / 4]);
    return 0;
}
"""


def _so_from_c(exported, x: np.ndarray, reference: np.ndarray, options: Options, title: str,
               name: str) -> Row:
    """The row of the standalone library, timed by a C program."""
    if shutil.which("cc") is None:
        return skipped(title, name, "no C compiler (cc)")
    from functrans import export
    row = Row(name, title)
    with tempfile.TemporaryDirectory(prefix="functrans-bench-so-") as tmp:
        export.to_shared_library(exported, os.path.join(tmp, "mlp"))
        with open(os.path.join(tmp, "timer.c"), "w") as f:
            f.write(_C_TIMER)
        x.tofile(os.path.join(tmp, "x.bin"))
        subprocess.run(["cc", "-O2", "-o", "timer", "timer.c", "-I.", "./mlp.so",
                        f"-Wl,-rpath,{tmp}"], cwd=tmp, check=True, capture_output=True)
        run = subprocess.run([os.path.join(tmp, "timer"), "x.bin", "out.bin",
                              str(options.repeats), str(options.min_time)], cwd=tmp,
                             capture_output=True, text=True, timeout=600)
        if run.returncode != 0:
            row.checks["functrans"] = f"failed: {run.stderr.strip()[:100]}"
            row.times["functrans"] = None
            return row
        out = np.fromfile(os.path.join(tmp, "out.bin"), np.float32).reshape(reference.shape)
    error = max_error(out, reference)
    row.extra["max_error"] = {"functrans": error}
    if error > 1e-4:
        row.checks["functrans"] = f"disagrees: error {error:.2e} > 1e-04"
        row.times["functrans"] = None
        return row
    median, low, high = map(float, run.stdout.split())
    row.checks["functrans"] = "ok"
    row.times["functrans"] = median
    row.spread["functrans"] = (high - low) / median
    row.notes = "timed in C (clock_gettime), workspace per thread"
    return row


def _compiled_with_gemm(ft, f, x):
    """``f`` compiled ahead with the optimization ``matrix_vector`` off: products with one
    row call BLAS's gemm, as before gemv was used for them."""
    previous = ft.config.read("disable_passes")
    ft.config.update("disable_passes", ",".join(filter(None, [previous, "matrix_vector"])))
    try:
        return f.lower(x).compile()
    finally:
        ft.config.update("disable_passes", previous)


def export_latency(options: Options, batches=None, gemm: bool = False) -> list[Row]:
    """The rows per batch size; ``gemm``: the jit row also times ``ft-gemm`` (functrans
    without gemv for one-row products)."""
    ft = frameworks.load("functrans")
    from functrans import export
    sizes = sizes_for(options)
    rows = []
    for batch in batches or ((1, 32) if options.quick else (1, 128)):
        params, x, _ = make_data(sizes, batch)
        reference = forward(np, params, x)
        net = "-".join(map(str, sizes))
        f_ft = ft.jit(lambda x: forward(ft.numpy, params, x))
        exported = export.export(f_ft)(x)
        loaded = export.deserialize(exported.serialize())
        xa = ft.numpy.asarray(x)
        jit_impls = {"functrans": lambda: ft.block_until_ready(f_ft(xa)),
                     "numpy": lambda: forward(np, params, x)}
        if gemm:
            with_gemm = _compiled_with_gemm(ft, f_ft, xa)
            jit_impls["ft-gemm"] = lambda: ft.block_until_ready(with_gemm(xa))
        call_impls = {"functrans": lambda: ft.block_until_ready(loaded.call(xa)),
                      "numpy": lambda: forward(np, params, x)}
        note = ""
        jax = frameworks.load("jax") if "jax" in options.available else None
        if jax is not None:
            f_jax = jax.jit(lambda x: forward(jax.numpy, params, x))
            xj = jax.numpy.asarray(x)
            jit_impls["jax"] = lambda: jax.block_until_ready(f_jax(xj))
            jax_loaded, note = _jax_round_trip(jax, lambda x: forward(jax.numpy, params, x), xj)
            call_impls["jax"] = lambda: jax.block_until_ready(jax_loaded.call(xj))
        prefix = f"MLP {net} forward, batch {batch}"
        rows.append(compare(f"export_jit_b{batch}", f"{prefix}: jit", jit_impls, options,
                            tol=1e-4))
        call_row = compare(f"export_call_b{batch}", f"{prefix}: deserialized Exported.call",
                           call_impls, options, tol=1e-4)
        call_row.notes = note
        rows.append(call_row)
        rows.append(_so_from_c(exported, x, reference, options, f"{prefix}: .so called from C",
                               f"export_so_b{batch}"))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,128")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--gemm", action="store_true",
                        help="add ft-gemm: functrans's jit without gemv for one-row products")
    args = parser.parse_args(argv)
    options = Options(quick=args.quick, repeats=args.repeats, min_time=0.5,
                      available=frameworks.available())
    rows = export_latency(options, [int(b) for b in args.batches.split(",")], gemm=args.gemm)
    impls = [i for i in ("functrans", "ft-gemm", "jax", "numpy")
             if any(r.times.get(i) for r in rows)]
    print(f"{'workload':<58}" + "".join(f"{i:>12}" for i in impls) + "  notes")
    for row in rows:
        cells = "".join(f"{1e6 * row.times[i]:>9.1f} us" if row.times.get(i) else f"{'-':>12}"
                        for i in impls)
        print(f"{row.title:<58}{cells}  {row.notes}")
    return rows


if __name__ == "__main__":
    main()
