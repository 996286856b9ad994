"""The CPU compiled code is for (``backends/llvm/targets.py``): the option's three forms
(``FUNCTRANS_LLVM_CPU`` / ``config.llvm_cpu``, ``jit(compiler_options=...)``,
``to_shared_library(target_cpu=...)``), the caches keeping targets apart, a library built for
x86-64-v3 holding no AVX-512 instruction, and docstring examples that print the same on an
old CPU as here."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import _config, export

pytest.importorskip("llvmlite")

from functrans.backends.llvm import cache, codegen, pipeline, targets  # noqa: E402

X86_64 = targets.host().triple.startswith(("x86_64", "amd64"))
needs_x86_64 = pytest.mark.skipif(not X86_64, reason="the x86-64 levels need an x86-64 host")


def runs_here(name: str) -> bool:
    return X86_64 and not targets.missing_features(targets.resolve(name))


def vector_widths(ir_text: str) -> set:
    """The lane counts of the float vectors in an LLVM module's text."""
    return {int(n) for n in re.findall(r"<(\d+) x float>", ir_text)}


def exp_loop(x):
    return jnp.exp(x) * 2.0 + 1.0


# ---- the option ------------------------------------------------------------------------------


def test_unknown_target_cpus_are_value_errors_that_name_the_known_ones():
    with pytest.raises(ValueError, match="unknown target CPU 'skylake'.*x86-64-v3"):
        functrans.config.update("llvm_cpu", "skylake")
    with pytest.raises(ValueError, match=r"compiler_options\['target_cpu'\].*'x86-64-v5'"):
        functrans.jit(exp_loop, compiler_options={"target_cpu": "x86-64-v5"})
    with pytest.raises(ValueError, match="'fast_math'.*'target_cpu'"):
        functrans.jit(exp_loop, compiler_options={"fast_math": True})
    with pytest.raises(ValueError, match="to_shared_library: target_cpu"):
        export.to_shared_library(None, "unused", target_cpu="avx2")


def test_the_environment_variable_is_checked_when_read(monkeypatch):
    monkeypatch.setenv("FUNCTRANS_LLVM_CPU", "x86-64-v3")
    assert _config.Config().llvm_cpu == "x86-64-v3"
    monkeypatch.setenv("FUNCTRANS_LLVM_CPU", "")
    assert _config.Config().llvm_cpu == "native"
    monkeypatch.setenv("FUNCTRANS_LLVM_CPU", "haswell")
    with pytest.raises(ValueError, match="FUNCTRANS_LLVM_CPU.*'haswell'"):
        _config.Config()


def test_a_backend_without_target_cpus_refuses_the_option():
    f = functrans.jit(exp_loop, backend="reference", compiler_options={"target_cpu": "native"})
    with pytest.raises(ValueError, match="reference backend has no option 'target_cpu'"):
        f(np.ones(3, np.float32))


@needs_x86_64
def test_levels_say_whether_they_have_avx512():
    assert [targets.resolve(n).has_avx512 for n in ("x86-64-v2", "x86-64-v3", "x86-64-v4")] \
        == [False, False, True]
    with targets.compiling_for("x86-64-v3"):
        assert targets.current().name == "x86-64-v3"
        with targets.compiling_for(None):  # a nested compilation keeps its parent's target
            assert targets.current().name == "x86-64-v3"
    assert targets.current().name == functrans.config.llvm_cpu


# ---- code for each target, cached apart -------------------------------------------------------


@pytest.mark.skipif(not (runs_here("x86-64-v2") and runs_here("x86-64-v3")),
                    reason="needs a host that runs x86-64-v3 code")
def test_each_target_gets_its_own_code_in_memory():
    x = np.linspace(-3, 3, 1000).astype(np.float32)
    f = functrans.jit(exp_loop)
    functrans.config.update("llvm_cpu", "x86-64-v2")
    sse = f.lower(x).compile()._executable
    functrans.config.update("llvm_cpu", "x86-64-v3")
    avx2 = f.lower(x).compile()._executable
    assert sse is not avx2
    assert max(vector_widths(sse.optimized_ir)) == 4       # SSE: 128-bit vectors
    assert max(vector_widths(avx2.optimized_ir)) == 8      # AVX2: 256-bit vectors
    np.testing.assert_allclose(f(x), np.exp(x) * 2 + 1, rtol=2e-6)
    # the per-function option wins over the configured one, through grad too
    g = functrans.jit(exp_loop, compiler_options={"target_cpu": "x86-64-v2"})
    assert max(vector_widths(g.lower(x).compile()._executable.optimized_ir)) == 4
    assert float(functrans.grad(lambda v: g(v).sum())(x)[0]) == pytest.approx(
        2 * np.exp(-3.0), rel=1e-6)
    assert max(vector_widths(f.lower(x).compile({"target_cpu": "x86-64-v2"})
                             ._executable.optimized_ir)) == 4


@needs_x86_64
def test_each_target_gets_its_own_entries_on_disk(tmp_path):
    functrans.config.update("cache_dir", str(tmp_path))
    closed = functrans.make_jaxpr(exp_loop)(np.ones(64, np.float32))
    keys = {name: cache.cache_key(closed, codegen.target_description(name))
            for name in ("native", "x86-64-v2", "x86-64-v3", "x86-64-v4")}
    assert len(set(keys.values())) == 4
    level = "x86-64-v3" if runs_here("x86-64-v3") else "x86-64-v2"
    before = dict(pipeline.stats)
    pipeline.compile_jaxpr(closed, target_cpu="native")
    pipeline.compile_jaxpr(closed, target_cpu=level)
    assert pipeline.stats["compiled"] == before["compiled"] + 2   # no entry of one serves both
    pipeline.compile_jaxpr(closed, target_cpu=level)
    assert pipeline.stats["cache_hits"] == before["cache_hits"] + 1


@needs_x86_64
def test_jit_refuses_a_level_this_cpu_lacks(monkeypatch):
    host = targets.host()
    old_cpu = targets.TargetCPU("native", host.triple, "nehalem",
                                "+cx16,+popcnt,+sahf,+sse3,+sse4.1,+sse4.2,+ssse3,-avx,-avx2")
    monkeypatch.setattr(targets, "_host", old_cpu)
    f = functrans.jit(exp_loop, compiler_options={"target_cpu": "x86-64-v3"})
    with pytest.raises(ValueError, match="'x86-64-v3' needs avx, avx2.*cannot run here"):
        f(np.ones(4, np.float32))


# ---- a library for another CPU ----------------------------------------------------------------

# EVEX-encoded (AVX-512) instructions: the 0x62 prefix (after an optional address-size
# prefix), or registers only AVX-512 has (zmm, xmm16-31/ymm16-31, the mask registers)
_AVX512_REGISTERS = re.compile(r"%zmm\d|%[xy]mm(1[6-9]|2\d|3[01])\b|%k[0-7]\b")


def avx512_instructions(library: str) -> list[str]:
    """The AVX-512 instructions in ``library``'s code, as objdump prints them."""
    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", library],
                             capture_output=True, text=True, check=True).stdout
    raw = subprocess.run(["objdump", "-d", library], capture_output=True, text=True,
                         check=True).stdout
    found = [line.strip() for line in listing.splitlines() if _AVX512_REGISTERS.search(line)]
    for line in raw.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and re.match(r"\s*(67 )?62 ", parts[1]):
            found.append(line.strip())
    return found


def _library_program(x, w):
    # vectorized math (exp, tanh: ldexp is one AVX-512 instruction), a reduction, a product
    h = jnp.tanh(x @ w) + jnp.exp(-x[:, :1] ** 2)
    return h / jnp.sum(h * h, axis=1, keepdims=True)


@pytest.mark.skipif(shutil.which("cc") is None or shutil.which("objdump") is None
                    or not X86_64, reason="needs cc and objdump on x86-64")
def test_a_library_for_x86_64_v3_has_no_avx512_instruction(tmp_path):
    import ctypes
    x = np.random.default_rng(0).standard_normal((64, 48)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((48, 48)).astype(np.float32)
    exported = export.export(functrans.jit(_library_program))(x, w)
    v3 = export.to_shared_library(exported, str(tmp_path / "v3" / "model"),
                                  target_cpu="x86-64-v3")
    v4 = export.to_shared_library(exported, str(tmp_path / "v4" / "model"),
                                  target_cpu="x86-64-v4")
    assert avx512_instructions(v3.library) == []
    assert avx512_instructions(v4.library)   # the check sees AVX-512 where there is some
    if not runs_here("x86-64-v3"):
        return
    library = ctypes.CDLL(v3.library)
    out = np.zeros((64, 48), np.float32)
    pointer = ctypes.c_void_p
    assert library.model(pointer(x.ctypes.data), pointer(w.ctypes.data),
                         pointer(out.ctypes.data), None) == 0
    np.testing.assert_allclose(out, _library_program(x, w), rtol=2e-5, atol=1e-6)


# ---- docstring examples -----------------------------------------------------------------------

# Runs every docstring example of the library and prints, per example, whether its output
# matched (with ELLIPSIS and NORMALIZE_WHITESPACE, as the suite's doctest runs use).
_RECORD_EXAMPLES = textwrap.dedent("""
    import doctest, importlib, json, pkgutil, sys
    import functrans, functrans.backends
    verdicts = {}

    class Recorder(doctest.DocTestRunner):
        def report_success(self, out, test, example, got):
            verdicts[test.name + "::" + example.source] = [True, got]
        def report_failure(self, out, test, example, got):
            verdicts[test.name + "::" + example.source] = [False, got]
        def report_unexpected_exception(self, out, test, example, exc_info):
            verdicts[test.name + "::" + example.source] = [False, repr(exc_info[1])]

    names = {"functrans"}
    for package in (functrans, functrans.backends):
        names.update(i.name for i in pkgutil.walk_packages(package.__path__,
                                                           package.__name__ + "."))
    for name in sorted(names):
        try:
            tests = doctest.DocTestFinder().find(importlib.import_module(name), name)
        except Exception:   # optional dependencies (cupy, mpi4py) absent
            continue
        runner = Recorder(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        for test in tests:
            runner.run(test, out=lambda text: None)
    print(json.dumps(verdicts))
""")


def _numpy_dispatch_targets() -> list[str]:
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__
    except ImportError:  # NumPy 1.x
        from numpy.core._multiarray_umath import __cpu_dispatch__
    return list(__cpu_dispatch__)


@pytest.mark.skipif(not runs_here("x86-64-v2"), reason="needs an x86-64 host")
def test_docstring_examples_print_the_same_on_an_old_cpu(tmp_path):
    # The last digits of a float32 result depend on the CPU: NumPy (eager evaluation) picks
    # AVX-512, AVX2 or SSE loops for exp and log at run time, and compiled code uses the
    # target's instructions (no FMA before x86-64-v3). An example that prints all of them
    # fails on some other machine. Here every example runs as on this CPU and as on an old
    # one (code for x86-64-v2, NumPy's baseline loops only): each passes on both or on
    # neither (one that fails on both is not run by the suite).
    def run(name, **env):  # each in a folder of its own (examples write files, the cache)
        folder = tmp_path / name
        folder.mkdir()
        environment = dict(os.environ, FUNCTRANS_CACHE_DIR=str(folder), **env)
        environment.pop("FUNCTRANS_CHECK_JAXPRS", None)  # the examples, not the checks
        return subprocess.Popen([sys.executable, "-c", _RECORD_EXAMPLES], cwd=folder,
                                env=environment, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    old_cpu = run("old", FUNCTRANS_LLVM_CPU="x86-64-v2",
                  NPY_DISABLE_CPU_FEATURES=" ".join(_numpy_dispatch_targets()))
    this_cpu = run("this", FUNCTRANS_LLVM_CPU="native")
    results = []
    for process in (this_cpu, old_cpu):
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr
        results.append(json.loads(stdout.splitlines()[-1]))
    here, old = results
    assert len(here) > 1000   # the examples of every module ran
    differ = {name: (here[name][1], old[name][1]) for name in here
              if here[name][0] != old[name][0]}
    assert not differ, f"examples whose printed digits depend on the CPU: {differ}"
