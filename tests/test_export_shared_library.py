"""functrans.export.to_shared_library: a C program linked against the generated .so and
.h computes what jit computes, from several threads at once."""
from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest

import functrans
import functrans.nn as nn
import functrans.numpy as jnp
from functrans import export, lax

pytestmark = pytest.mark.skipif(
    shutil.which("cc") is None, reason="no C compiler (cc) to link the shared library with")

RNG = np.random.default_rng(1)
F32 = np.float32
PARAMS = {"w1": RNG.standard_normal((8, 64)).astype(F32), "b1": RNG.standard_normal(64).astype(F32),
          "w2": RNG.standard_normal((64, 5)).astype(F32)}


def mlp(x):  # the trained parameters baked in as constants
    return nn.log_softmax(nn.relu(x @ PARAMS["w1"] + PARAMS["b1"]) @ PARAMS["w2"])


def rnn_and_pool(w, h0, xs):
    def step(h, x):
        h = jnp.tanh(h @ w + x)
        return h, h.max(axis=-1)
    h, ys = lax.scan(step, h0, xs)
    pooled = lax.reduce_window(ys, -jnp.inf, lax.max, (2, 1), (2, 1), "VALID")
    return {"h": h, "pooled": pooled, "h_again": h, "w": w}


def _entries():
    b, = export.symbolic_shape("b")
    return {
        "mlp": (export.export(functrans.jit(mlp))(functrans.ShapeDtypeStruct((b, 8), F32)),
                [RNG.standard_normal((3, 8)).astype(F32)]),
        "rnn": (export.export(functrans.jit(rnn_and_pool))(
            np.ones((6, 6), F32), np.ones((2, 6), F32), np.ones((4, 2, 6), F32)),
            [0.3 * RNG.standard_normal((6, 6)).astype(F32),
             RNG.standard_normal((2, 6)).astype(F32),
             RNG.standard_normal((4, 2, 6)).astype(F32)]),
    }


_DRIVER = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib.h"

static float *load(const char *path, size_t n) {
    float *data = malloc(n * sizeof(float));
    FILE *f = fopen(path, "rb");
    if (!f || fread(data, sizeof(float), n, f) != n) {
        fprintf(stderr, "read %s\n", path);
        exit(2);
    }
    fclose(f);
    return data;
}

static void save(const char *path, const float *data, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(data, sizeof(float), n, f);
    fclose(f);
}

static float *x, *w, *h0, *xs;

/* every thread computes the same results as the main thread, with its own workspace or
   with the library's per-thread one */
static void *worker(void *arg) {
    float out[MLP_OUT_SIZE], expected[MLP_OUT_SIZE];
    void *workspace = arg ? aligned_alloc(64, (mlp_workspace_size() + 63) / 64 * 64) : NULL;
    if (mlp(x, expected, NULL)) return (void *)1;
    for (int i = 0; i < 200; i++) {
        if (mlp(x, out, workspace) || memcmp(out, expected, sizeof out)) return (void *)1;
    }
    free(workspace);
    return NULL;
}

int main(int argc, char **argv) {
    const char *dir = argv[1];
    char path[4096];
    snprintf(path, sizeof path, "%s/x.bin", dir); x = load(path, MLP_X_SIZE);
    snprintf(path, sizeof path, "%s/w.bin", dir); w = load(path, RNN_W_SIZE);
    snprintf(path, sizeof path, "%s/h0.bin", dir); h0 = load(path, RNN_H0_SIZE);
    snprintf(path, sizeof path, "%s/xs.bin", dir); xs = load(path, RNN_XS_SIZE);

    float logits[MLP_OUT_SIZE];
    int status = mlp(x, logits, NULL);
    if (status) { fprintf(stderr, "mlp: %s\n", lib_error_message(status)); return 1; }
    snprintf(path, sizeof path, "%s/logits.bin", dir); save(path, logits, MLP_OUT_SIZE);

    float h[RNN_OUT_H_SIZE], again[RNN_OUT_H_AGAIN_SIZE], pooled[RNN_OUT_POOLED_SIZE];
    float w_out[RNN_OUT_W_SIZE];
    status = rnn(w, h0, xs, h, again, pooled, w_out, NULL);
    if (status) { fprintf(stderr, "rnn: %s\n", lib_error_message(status)); return 1; }
    snprintf(path, sizeof path, "%s/h.bin", dir); save(path, h, RNN_OUT_H_SIZE);
    snprintf(path, sizeof path, "%s/again.bin", dir); save(path, again, RNN_OUT_H_AGAIN_SIZE);
    snprintf(path, sizeof path, "%s/pooled.bin", dir); save(path, pooled, RNN_OUT_POOLED_SIZE);
    snprintf(path, sizeof path, "%s/w_out.bin", dir); save(path, w_out, RNN_OUT_W_SIZE);

    pthread_t threads[4];
    for (long i = 0; i < 4; i++) pthread_create(&threads[i], NULL, worker, (void *)(i % 2));
    int failures = 0;
    for (int i = 0; i < 4; i++) {
        void *result;
        pthread_join(threads[i], &result);
        failures += result != NULL;
    }
    printf("threads_failed=%d error2=%s\n", failures, lib_error_message(2));
    return failures != 0;
}
"""


def test_c_driver_matches_python(tmp_path):
    entries = _entries()
    paths = export.to_shared_library({k: e for k, (e, _) in entries.items()},
                                     str(tmp_path / "lib"), dimensions={"b": 3})
    header = open(paths.header).read()
    assert "int mlp(const float *x, float *out, void *workspace);" in header
    assert "int rnn(const float *w, const float *h0, const float *xs, float *out_h, " \
           "float *out_h_again, float *out_pooled, float *out_w, void *workspace);" in header
    (x,), (w, h0, xs) = entries["mlp"][1], entries["rnn"][1]
    for name, value in (("x", x), ("w", w), ("h0", h0), ("xs", xs)):
        value.tofile(tmp_path / f"{name}.bin")
    (tmp_path / "driver.c").write_text(_DRIVER)
    build = subprocess.run(["cc", "-O1", "-o", "driver", "driver.c", "-I.", "./lib.so",
                            "-lpthread", f"-Wl,-rpath,{tmp_path}"], cwd=tmp_path,
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(tmp_path / "driver"), str(tmp_path)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr + run.stdout
    assert "threads_failed=0 error2=out of memory" in run.stdout

    def read(name, shape):
        return np.fromfile(tmp_path / f"{name}.bin", F32).reshape(shape)
    np.testing.assert_array_equal(read("logits", (3, 5)), functrans.jit(mlp)(x))
    expected = functrans.jit(rnn_and_pool)(w, h0, xs)
    for name, key in (("h", "h"), ("again", "h_again"), ("pooled", "pooled"), ("w_out", "w")):
        np.testing.assert_array_equal(read(name, expected[key].shape), expected[key])


def test_the_library_runs_without_python_names(tmp_path):
    exp = export.export(functrans.jit(mlp))(np.ones((2, 8), F32))
    paths = export.to_shared_library(exp, str(tmp_path / "model"))
    symbols = subprocess.run(["nm", "-D", "--defined-only", paths.library],
                             capture_output=True, text=True)
    if symbols.returncode != 0:
        pytest.skip("no nm to list the library's symbols")
    exported = sorted(line.split()[-1] for line in symbols.stdout.splitlines()
                      if " T " in line)
    assert exported == ["model", "model_error_message", "model_workspace_size"]
    needed = subprocess.run(["ldd", paths.library], capture_output=True, text=True).stdout
    assert "python" not in needed.lower()


def test_numpy_steps_are_refused_naming_the_primitives(tmp_path):
    def f(x):
        spectrum = jnp.fft.fft(x).real
        return lax.scan(lambda c, r: (c + jnp.linalg.eigh(jnp.outer(r, r))[0], None),
                        spectrum[0], x)[0]
    exp = export.export(functrans.jit(f))(np.ones((4, 4), F32))
    with pytest.raises(NotImplementedError, match=r"fft.*scan \(whose body runs eigh in NumPy\)"):
        export.to_shared_library(exp, str(tmp_path / "f"))


def test_polymorphic_exports_need_sizes(tmp_path):
    exp = _entries()["mlp"][0]
    with pytest.raises(ValueError, match=r"polymorphic in \['b'\].*dimensions=\{'b': \.\.\.\}"):
        export.to_shared_library(exp, str(tmp_path / "m"))
    with pytest.raises(ValueError, match="positive integer"):
        export.to_shared_library(exp, str(tmp_path / "m"), dimensions={"b": 0})
    with pytest.raises(TypeError, match="Exported or a mapping"):
        export.to_shared_library(mlp, str(tmp_path / "m"))


def test_command_line(tmp_path, capsys):
    from functrans.export.__main__ import main
    exp = _entries()["mlp"][0]
    saved = tmp_path / "model.exported"
    saved.write_bytes(exp.serialize())
    assert main([str(saved), "--info"]) == 0
    assert "mlp: (float32[b,8]) -> (float32[b,5])" in capsys.readouterr().out
    assert main([str(saved)]) == 1
    assert "dimensions=" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.exported")]) == 1
    assert "cannot read" in capsys.readouterr().err
    # the module's entry point, as a user runs it
    built = subprocess.run([sys.executable, "-m", "functrans.export", str(saved), "-d", "b=4",
                            "-o", str(tmp_path / "out" / "net")], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    header = (tmp_path / "out" / "net.h").read_text()
    assert "int net(const float *x, float *out, void *workspace);" in header
    assert "#define NET_X_SIZE 32" in header


def test_the_library_flushes_subnormals_and_restores_the_callers_mode(tmp_path):
    """An entry point of the library computes with subnormals flushed to zero, as jit does,
    and returns with the caller's FTZ and DAZ bits as they were, set or not."""
    import ctypes

    from functrans import _float_mode
    if not _float_mode.supported():
        pytest.skip("the flush bits are x86-64 Linux's MXCSR")
    exp = export.export(functrans.jit(lambda a, b: a * b))(np.ones(4, F32), np.ones(4, F32))
    product = ctypes.CDLL(export.to_shared_library(exp, str(tmp_path / "product")).library).product
    a, b = np.full(4, 1e-20, F32), np.float32([1e-20, 1.0, 2.0, 3.0])
    saved = _float_mode._Env()
    _float_mode._fenv[0](saved)
    try:
        for bits in (0, _float_mode.FLUSH_BITS):
            env = _float_mode._Env()
            _float_mode._fenv[0](env)
            env[_float_mode._MXCSR_WORD] = (env[_float_mode._MXCSR_WORD]
                                            & ~_float_mode.FLUSH_BITS) | bits
            _float_mode._fenv[1](env)
            out = np.empty(4, F32)
            assert product(*(ctypes.c_void_p(v.ctypes.data) for v in (a, b, out)), None) == 0
            assert _float_mode.mxcsr() & _float_mode.FLUSH_BITS == bits
            np.testing.assert_array_equal(out, np.float32([0.0, 1e-20, 2e-20, 3e-20]))
    finally:
        _float_mode._fenv[1](saved)
