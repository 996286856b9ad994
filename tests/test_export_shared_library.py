"""functrans.export.to_shared_library: a C program linked against the generated .so and
.h computes what jit computes, from several threads at once."""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import functrans
import functrans.nn as nn
import functrans.numpy as jnp
from functrans import export, lax
from functrans.backends.llvm import standalone
from functrans.export import _container

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
    size_t size = arg ? (mlp_workspace_size() + 63) / 64 * 64 : 0;
    void *workspace = arg ? aligned_alloc(64, size) : NULL;
    if (mlp(x, expected, NULL, 0)) return (void *)1;
    for (int i = 0; i < 200; i++) {
        if (mlp(x, out, workspace, size) || memcmp(out, expected, sizeof out)) return (void *)1;
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
    int status = mlp(x, logits, NULL, 0);
    if (status) { fprintf(stderr, "mlp: %s\n", lib_error_message(status)); return 1; }
    snprintf(path, sizeof path, "%s/logits.bin", dir); save(path, logits, MLP_OUT_SIZE);

    float h[RNN_OUT_H_SIZE], again[RNN_OUT_H_AGAIN_SIZE], pooled[RNN_OUT_POOLED_SIZE];
    float w_out[RNN_OUT_W_SIZE];
    status = rnn(w, h0, xs, h, again, pooled, w_out, NULL, 0);
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
    assert "int mlp(const float *x, float *out, void *workspace, size_t workspace_size);" \
        in header
    assert "int rnn(const float *w, const float *h0, const float *xs, float *out_h, " \
           "float *out_h_again, float *out_pooled, float *out_w, void *workspace, " \
           "size_t workspace_size);" in header
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
    assert "int net(const float *x, float *out, void *workspace, size_t workspace_size);" \
        in header
    assert "#define NET_X_SIZE 32" in header


_SIZES_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "model.h"

int main(void) {
    static float x[MODEL_X_SIZE], out[MODEL_OUT_SIZE];
    size_t needed = model_workspace_size();
    size_t sizes[] = {0, 64, 4096, needed - 1, needed};
    char *workspace = aligned_alloc(64, (needed + 63) / 64 * 64);
    printf("%d", model(x, out, NULL, 0));  /* NULL: the library's own, whatever the size */
    for (int i = 0; i < 5; i++) printf(" %d", model(x, out, workspace, sizes[i]));
    printf(" %d\n", needed > 4096);
    free(workspace);
    return 0;
}
"""


def test_a_workspace_smaller_than_needed_is_refused(tmp_path):
    # a workspace of 0, 64 or 4096 bytes was written past its end (a crash)
    w = RNG.standard_normal((128, 128)).astype(F32)
    exp = export.export(functrans.jit(lambda x: jnp.tanh(jnp.tanh(x @ w) @ w) @ w))(
        np.ones((32, 128), F32))
    paths = export.to_shared_library(exp, str(tmp_path / "model"))
    (tmp_path / "main.c").write_text(_SIZES_DRIVER)
    build = subprocess.run(["cc", "-O1", "-Wall", "-Werror", "-o", "main", "main.c", "-I.",
                            "./model.so", f"-Wl,-rpath,{tmp_path}"], cwd=tmp_path,
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["0", "4", "4", "4", "4", "0", "1"]
    library = ctypes.CDLL(paths.library)
    library.model_error_message.restype = ctypes.c_char_p
    assert b"smaller than" in library.model_error_message(4)


# ---- names from the Exported are never C source --------------------------------------------

def _tampered(exported, **fields):
    """``exported`` as deserialized from a file whose document was rewritten (its checksum
    recomputed, as anyone writing such a file would)."""
    document, arrays = _container.unpack(exported.serialize())
    document.pop("tensors")
    document["exported"][0].update(fields)
    return export.deserialize(bytes(_container.pack(document, arrays)))


def test_a_function_name_cannot_inject_c(tmp_path):
    # the name closed the header's comment and defined a constructor, which ran (and here
    # crashed the process) when anything loaded the library
    evil = ('f */ __attribute__((constructor)) static void pwn(void) { __builtin_trap(); } '
            '/*')
    exp = _tampered(export.export(functrans.jit(lambda x: x * 2))(np.ones(4, F32)),
                    fun_name=evil)
    assert exp.fun_name == evil  # deserialize accepts any name
    paths = export.to_shared_library(exp, str(tmp_path / "model"))
    header = open(paths.header).read()
    assert "pwn" not in header.replace("pwn_void", "") and "*/ __attribute__" not in header
    loader = "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).model_workspace_size())"
    load = subprocess.run([sys.executable, "-c", loader, paths.library], capture_output=True,
                          text=True, timeout=60)
    assert load.returncode == 0, load.stderr


def test_names_that_clash_get_a_suffix(tmp_path):
    def kw(d, int, errno, linux):  # noqa: A002 - parameters named as C reserves
        return {"a": d["a"] + int, "A": d["A"] * errno, "out_a": linux}
    args = ({"a": np.ones(2, F32), "A": np.ones(3, F32)}, np.ones(2, F32), np.ones(3, F32),
            np.ones(1, F32))
    exp = export.export(functrans.jit(kw))(*args)
    paths = export.to_shared_library({"kw": exp, "KW": exp, "time": exp, "ft_parallel_for": exp},
                                     str(tmp_path / "lib"))
    header = open(paths.header).read()
    # keys sort as "A" < "a": the second of two names equal upper-cased gets the suffix
    assert "int kw(const float *d_A, const float *d_a_2, const float *int_2, " \
           "const float *errno_2, const float *linux_2, float *out_A, float *out_a_2, " \
           "float *out_out_a, void *workspace, size_t workspace_size);" in header
    assert "#define KW_D_A_SIZE 3" in header and "#define KW_D_A_2_SIZE 2" in header
    # entry names distinct upper-cased, from the C library's and from the library's own
    assert "int KW_2(" in header and "int time_2(" in header
    assert "int program_ft_parallel_for(" in header
    driver = tmp_path / "main.c"
    driver.write_text('#include <errno.h>\n#include <math.h>\n#include <stdio.h>\n'
                      '#include "lib.h"\nint main(void) {\n'
                      '    float upper[KW_D_A_SIZE] = {1, 2, 3}, lower[KW_D_A_2_SIZE] = {1, 2};\n'
                      '    float i[2] = {1, 1}, e[3] = {2, 2, 2}, l[1] = {5};\n'
                      '    float o1[KW_OUT_A_SIZE], o2[KW_OUT_A_2_SIZE], o3[KW_OUT_OUT_A_SIZE];\n'
                      '    int status = KW_2(upper, lower, i, e, l, o1, o2, o3, NULL, 0);\n'
                      '    printf("%d %g %g %g\\n", status, o1[2], o2[1], o3[0]);\n'
                      '    return status;\n}\n')
    build = subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", "main",
                            "main.c", "-I.", "./lib.so", f"-Wl,-rpath,{tmp_path}"],
                           cwd=tmp_path, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, timeout=60)
    assert run.stdout.split() == ["0", "6", "3", "5"], run.stdout + run.stderr


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fun_name=_TEXT, arg_name=_TEXT, keys=st.lists(_TEXT, min_size=1, max_size=3, unique=True),
       entries=st.lists(_TEXT, min_size=1, max_size=2, unique=True),
       library=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\0"),
                       min_size=1, max_size=8).filter(lambda t: t not in (".", "..")))
def test_any_names_give_sources_that_compile_warning_free(fun_name, arg_name, keys, entries,
                                                          library):
    def marked(text):  # raw text that no generated line could hold by chance
        return f"zq{text}qz"
    exp = export.export(functrans.jit(lambda d: {k: v * 2 for k, v in d.items()}))(
        {marked(k): np.ones(2, F32) for k in keys})
    exp = _tampered(exp, fun_name=marked(fun_name), arg_names=[marked(arg_name)])
    sources = []
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        for name in ("_header", "_c_source"):
            original = getattr(standalone, name)
            patch.setattr(standalone, name, lambda *a, _f=original, **k: sources.append(
                _f(*a, **k)) or sources[-1])
        patch.setenv("CC", "cc -Wall -Wextra -Werror")  # the library's own C file
        paths = export.to_shared_library({marked(e): exp for e in entries},
                                         os.path.join(tmp, marked(library)))
        user = os.path.join(tmp, "user.c")  # and a user's program that includes the header
        shutil.copyfile(paths.header, os.path.join(tmp, "library.h"))
        with open(user, "w") as f:
            f.write('#include "library.h"\nint main(void) { return 0; }\n')
        for compiler, flags in (("cc", ["-std=c11", "-pedantic"]), ("c++", [])):
            if shutil.which(compiler):
                check = subprocess.run([compiler, "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
                                        *flags, "-I", tmp] + (["-x", "c++"] if compiler == "c++"
                                                              else []) + [user],
                                       capture_output=True, text=True)
                assert check.returncode == 0, check.stderr
    assert len(sources) == 2
    raw = [marked(t) for t in [fun_name, arg_name, library, *keys, *entries]]
    for text in sources:
        assert text.isascii()
        for name in raw:
            assert re.fullmatch(r"[A-Za-z0-9_]+", name) or name not in text, name


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
            assert product(*(ctypes.c_void_p(v.ctypes.data) for v in (a, b, out)), None,
                           ctypes.c_size_t(0)) == 0
            assert _float_mode.mxcsr() & _float_mode.FLUSH_BITS == bits
            np.testing.assert_array_equal(out, np.float32([0.0, 1e-20, 2e-20, 3e-20]))
    finally:
        _float_mode._fenv[1](saved)
