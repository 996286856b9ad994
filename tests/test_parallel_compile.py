"""A program compiled as several parts on several threads (backends/llvm/parallel_compile.py):
every kernel's optimized code is what one module gives; the objects link together (by our
linker and by LLVM's), are cached and read back; errors and Ctrl-C in any thread reach the
caller; one thread means one object."""
from __future__ import annotations

import os
import re
import threading

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import lax

pytest.importorskip("llvmlite")

from functrans.backends.llvm import (cache, linker, machine_code, pipeline,  # noqa: E402
                                     program_cache, parallel_compile, thread_pool)

_rng = np.random.default_rng(3)


def _mlp(w1, w2, x):
    h = jnp.maximum(x @ w1 + 0.5, 0.0)
    logits = h @ w2
    return _softmax(logits).sum(axis=0), jnp.tanh(h).mean()


def _softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = jnp.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _scan(h, xs):
    def step(h, x):
        h = jnp.tanh(h * 0.9 + x)
        return h, h.sum()
    return lax.scan(step, h, xs)


def _loop(x):
    return lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, jnp.sin(c[1]) * 1.5),
                          (0, x))[1]


PROGRAMS = [
    ("mlp", _mlp, (_rng.standard_normal((32, 64)).astype(np.float32),
                   _rng.standard_normal((64, 10)).astype(np.float32),
                   _rng.standard_normal((16, 32)).astype(np.float32))),
    ("chain", lambda x, y: (jnp.exp(-x * x) + jnp.log1p(y * y), jnp.cumsum(x * y, axis=1)),
     (_rng.standard_normal((8, 300)).astype(np.float32),
      _rng.standard_normal((8, 300)).astype(np.float32))),
    ("scan", _scan, (_rng.standard_normal(32).astype(np.float32),
                     _rng.standard_normal((6, 32)).astype(np.float32))),
    ("while", _loop, (_rng.standard_normal(100).astype(np.float32),)),
    ("sort", lambda x: jnp.sort(jnp.exp(x), axis=0) * 2.0,
     (_rng.standard_normal((12, 5)).astype(np.float32),)),
]


@pytest.fixture
def split_everything(monkeypatch):
    """Every program split into two parts (one more thread), however small; the list of
    (parts before optimization or not, objects) of each compile in parts."""
    monkeypatch.setattr(parallel_compile, "MIN_PART_LINES", 1)
    monkeypatch.setattr(thread_pool, "num_threads", lambda: 2)
    monkeypatch.setattr(thread_pool, "spare_cores", lambda: 1)  # however busy the machine
    made = []
    real = parallel_compile._in_parallel

    def counting(work, texts, machines):
        results = real(work, texts, machines)
        made.append((work is parallel_compile._compile_part, len(results)))
        return results
    monkeypatch.setattr(parallel_compile, "_in_parallel", counting)
    return made


def _functions(optimized_ir: str) -> dict:
    """The optimized functions of a module (or of its parts' modules, one after another),
    by name, with metadata and attribute-group numbers (which each module counts on its
    own) left out."""
    found = {}
    for m in re.finditer(r"^define [^\n]*?@([\w.]+)\(.*?^\}$", optimized_ir,
                         re.MULTILINE | re.DOTALL):
        found[m.group(1)] = re.sub(r"[!#]\d+", "", m.group(0))
    return found


@pytest.mark.parametrize("name,fun,args", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_a_program_in_parts_runs_as_it_does_whole(name, fun, args, split_everything):
    closed = functrans.make_jaxpr(fun)(*args)
    split = pipeline.compile_jaxpr(closed, use_cache=False)
    before_optimization, objects = split_everything[-1]
    assert objects == 2
    assert before_optimization or name != "mlp"  # its kernels move, with trampolines
    parts = len(split_everything)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(thread_pool, "num_threads", lambda: 1)  # one thread: one object
        whole = pipeline.compile_jaxpr(closed, use_cache=False)
    assert len(split_everything) == parts
    # every function the whole module has is optimized to the same code in its part, but
    # the segments, whose calls of the kernels that moved go through trampolines
    ours, theirs = _functions(split.optimized_ir), _functions(whole.optimized_ir)
    for function, code in theirs.items():
        if not function.startswith("ft_segment_"):
            assert ours[function] == code, function
    for a, b in zip(split(*args), whole(*args)):
        np.testing.assert_array_equal(a, b)
    expected = functrans.tree_util.tree_leaves(functrans.jit(fun, backend="reference")(*args))
    for a, b in zip(split(*args), expected):
        np.testing.assert_allclose(a, np.asarray(b), rtol=2e-5, atol=2e-5)


def test_split_objects_load_through_llvm_too(split_everything, monkeypatch):
    name, fun, args = PROGRAMS[0]
    closed = functrans.make_jaxpr(fun)(*args)
    ours = pipeline.compile_jaxpr(closed, use_cache=False)

    def refuse(data):
        raise linker.UnsupportedObject("refused by the test")
    monkeypatch.setattr(linker, "load_object", refuse)
    before = linker.stats["llvm"]
    theirs = pipeline.compile_jaxpr(closed, use_cache=False)
    assert linker.stats["llvm"] == before + 1
    for a, b in zip(ours(*args), theirs(*args)):
        np.testing.assert_array_equal(a, b)


def test_split_objects_are_cached_and_read_back(monkeypatch, tmp_path):
    # two threads by the environment (a function of the compiler replaced by the test
    # would keep the layout out of the cache, see program_cache.compiler_replaced)
    monkeypatch.setattr(parallel_compile, "MIN_PART_LINES", 1)
    monkeypatch.setenv("FUNCTRANS_NUM_THREADS", "2")
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # a quiet machine
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    old = functrans.config.cache_dir
    functrans.config.update("cache_dir", str(tmp_path))
    try:
        name, fun, args = PROGRAMS[0]
        closed = functrans.make_jaxpr(fun)(*args)
        first = pipeline.compile_jaxpr(closed)
        sections, meta = cache.load(program_cache.program_key(closed))
        assert {"object", "object.1"} <= set(sections) and "layout" in meta
        before = dict(pipeline.stats)
        again = pipeline.compile_jaxpr(closed)
        assert pipeline.stats["cache_hits"] == before["cache_hits"] + 1
        assert again.object_size == first.object_size
        for a, b in zip(again(*args), first(*args)):
            np.testing.assert_array_equal(a, b)
    finally:
        functrans.config.update("cache_dir", old)


def _optimized(fun, *args) -> str:
    closed = functrans.make_jaxpr(fun)(*args)
    return pipeline.compile_jaxpr(closed, use_cache=False).optimized_ir


def _ir(fun, *args) -> str:
    closed = functrans.make_jaxpr(fun)(*args)
    return pipeline.compile_jaxpr(closed, use_cache=False).ir_text


def _defines(text: str) -> list:
    return re.findall(r"^define [^\n]*?@\"?([\w.]+)\"?\(", text, re.MULTILINE)


def test_a_kernel_moves_with_its_wrappers_and_trampolines():
    name, fun, args = PROGRAMS[0]
    text = _ir(fun, *args)
    parts = parallel_compile.partition_program(text, 2)
    assert parts is not None
    first, second = (set(_defines(p)) for p in parts)
    moved = {f for f in second if f.startswith("k") and ".call" not in f}
    assert moved and not moved & first
    for kernel in moved:
        # every call of a kernel that moved is in its own part: its wrappers, or a
        # trampoline the segment calls instead
        callers = [f for f in _defines(text) if re.search(
            rf'^define [^\n]*@"{f}"\(.*?call [^\n]*@"{kernel}"\(', text,
            re.MULTILINE | re.DOTALL)]
        assert all(c in second or c.startswith("ft_segment") for c in callers)
        assert f'@"{kernel}"(' not in parts[0]
    assert parallel_compile.partition_program(text, 1) is None


def test_optimized_parts_define_each_function_once():
    name, fun, args = PROGRAMS[0]
    closed = functrans.make_jaxpr(fun)(*args)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(thread_pool, "num_threads", lambda: 1)
        text = pipeline.compile_jaxpr(closed, use_cache=False).optimized_ir
    defined = set(_defines(text))
    parts = parallel_compile.partition_optimized(text, 3)
    owned = [set(_defines(p)) for p in parts]
    assert set().union(*owned) == defined and sum(map(len, owned)) == len(defined)
    for part in parts:
        # what a part uses from another is declared there, and visible to it
        for declared in re.findall(r"^declare hidden [^\n]*?@([\w.]+)\(", part, re.MULTILINE):
            assert declared in defined
            assert any(re.search(rf"^define hidden [^\n]*@{re.escape(declared)}\(", p,
                                 re.MULTILINE) for p in parts)
    assert parallel_compile.partition_optimized(text, 1) is None


def test_a_module_with_a_variable_of_its_own_is_not_split():
    text = ('@counter = internal global i64 0\n\ndefine void @f() {\n  ret void\n}\n\n'
            'define void @g() {\n  ret void\n}\n')
    assert parallel_compile.partition_optimized(text, 2) is None
    assert parallel_compile.partition_optimized(
        text.replace("internal global i64 0", "external global i64"), 2) is not None


def test_one_thread_or_a_small_program_is_one_object(monkeypatch):
    name, fun, args = PROGRAMS[0]
    text = _ir(fun, *args)
    monkeypatch.setenv("FUNCTRANS_NUM_THREADS", "1")
    assert parallel_compile.parts_for(text) == 1
    monkeypatch.setenv("FUNCTRANS_NUM_THREADS", "64")
    assert parallel_compile.parts_for(text) <= parallel_compile.MAX_THREADS
    assert parallel_compile.parts_for("define void @f() {\n  ret void\n}\n") == 1


def _failing_worker(monkeypatch, error):
    for name in ("_compile_part", "_emit_part"):
        real = getattr(parallel_compile, name)

        def work(text, tm, real=real):
            if threading.current_thread() is not threading.main_thread():
                raise error
            return real(text, tm)
        monkeypatch.setattr(parallel_compile, name, work)


@pytest.mark.parametrize("error", [ValueError("a bug"), KeyboardInterrupt()])
def test_an_error_in_a_worker_reaches_the_caller(split_everything, monkeypatch, error):
    _failing_worker(monkeypatch, error)
    name, fun, args = PROGRAMS[0]
    closed = functrans.make_jaxpr(fun)(*args)
    with pytest.raises(type(error)):
        pipeline.compile_jaxpr(closed, use_cache=False)
    with machine_code._llvm_lock:  # released: the next compile goes on
        pass


def test_a_part_llvm_refuses_makes_the_program_compile_whole(split_everything, monkeypatch,
                                                              caplog):
    _failing_worker(monkeypatch, RuntimeError("LLVM refused the part"))
    name, fun, args = PROGRAMS[0]
    closed = functrans.make_jaxpr(fun)(*args)
    exe = pipeline.compile_jaxpr(closed, use_cache=False)
    assert "compiling it whole" in caplog.text
    expected = functrans.tree_util.tree_leaves(functrans.jit(fun, backend="reference")(*args))
    for a, b in zip(exe(*args), expected):
        np.testing.assert_allclose(a, np.asarray(b), rtol=2e-5, atol=2e-5)


def test_a_support_object_is_made_once_for_threads_that_ask_at_once():
    made = []
    started = threading.Event()

    def build(triple):
        made.append(triple)
        started.set()
        return f'target triple = "{triple}"\n\ndefine void @ft_test_support() {{\n  ret void\n}}\n'

    label = f"functrans-test-{threading.get_ident()}-{len(PROGRAMS)}"
    results = []
    first = threading.Thread(target=lambda: results.append(
        machine_code.support_object(label, build)))
    first.start()
    started.wait(60)
    results.append(machine_code.support_object(label, build))  # waits for the first
    first.join()
    assert len(made) == 1 and results[0] == results[1]
    assert linker.load(results[0]).address("ft_test_support")


def test_a_large_program_prepares_the_support_objects_while_it_compiles(tmp_path):
    # in a fresh process with an empty cache: made on their own thread, loaded once
    import subprocess
    import sys
    script = (
        "import os\n"
        "os.getloadavg = lambda: (0.0, 0.0, 0.0)  # a quiet machine with two cores\n"
        "os.sched_getaffinity = lambda pid: {0, 1}\n"
        "import numpy as np, functrans, functrans.numpy as jnp\n"
        "from functrans.backends.llvm import machine_code, pipeline\n"
        "x = np.ones((512, 512), np.float32)\n"
        "out = functrans.jit(lambda x: jnp.tanh(x @ x) + 1.0)(x)\n"
        "assert np.allclose(out, np.tanh(x @ x) + 1.0, atol=1e-5)\n"
        "assert pipeline._support_objects_prepared.is_set()\n"
        "print(sorted(label for label, _ in machine_code._support_objects))\n")
    environment = dict(os.environ, FUNCTRANS_CACHE_DIR=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", script], env=environment,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['functrans-interrupts', 'functrans-thread-pool']"


def test_a_busy_machine_compiles_on_one_thread(monkeypatch):
    name, fun, args = PROGRAMS[0]
    text = _ir(fun, *args)
    monkeypatch.setattr(parallel_compile, "MIN_PART_LINES", 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setenv("FUNCTRANS_NUM_THREADS", "2")
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.2, 0.2))
    assert thread_pool.spare_cores() == 1 and parallel_compile.parts_for(text) == 2
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 1.0, 1.0))  # the other core is taken
    assert thread_pool.spare_cores() == 0 and parallel_compile.parts_for(text) == 1
