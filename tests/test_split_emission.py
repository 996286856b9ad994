"""A program's machine code emitted as several objects on several threads
(backends/llvm/split_emission.py): the module is optimized as one, so the code is the same;
the objects link together (by our linker and by LLVM's), are cached and read back; errors
and Ctrl-C in any thread reach the caller; one thread means one object."""
from __future__ import annotations

import re
import threading

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import lax

pytest.importorskip("llvmlite")

from functrans.backends.llvm import (cache, linker, machine_code, pipeline,  # noqa: E402
                                     program_cache, split_emission, thread_pool)

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
    """Every program split into three parts (two more threads), however small."""
    monkeypatch.setattr(split_emission, "MIN_PART_LINES", 1)
    monkeypatch.setattr(thread_pool, "num_threads", lambda: 3)
    emitted = []
    real = split_emission._emit_in_parallel

    def counting(texts, machines):
        objects = real(texts, machines)
        emitted.append(len(objects))
        return objects
    monkeypatch.setattr(split_emission, "_emit_in_parallel", counting)
    return emitted


@pytest.mark.parametrize("name,fun,args", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_a_program_split_runs_as_it_does_whole(name, fun, args, split_everything):
    closed = functrans.make_jaxpr(fun)(*args)
    split = pipeline.compile_jaxpr(closed, use_cache=False)
    assert split_everything and split_everything[-1] == 3
    parts = len(split_everything)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(thread_pool, "num_threads", lambda: 1)  # one thread: one object
        whole = pipeline.compile_jaxpr(closed, use_cache=False)
    assert len(split_everything) == parts
    # optimized as one module: the same code, only emitted in parts
    assert split.optimized_ir == whole.optimized_ir
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


def test_split_objects_are_cached_and_read_back(split_everything, tmp_path):
    old = functrans.config.cache_dir
    functrans.config.update("cache_dir", str(tmp_path))
    try:
        name, fun, args = PROGRAMS[0]
        closed = functrans.make_jaxpr(fun)(*args)
        first = pipeline.compile_jaxpr(closed)
        sections, meta = cache.load(program_cache.program_key(closed))
        assert {"object", "object.1", "object.2"} <= set(sections) and "layout" in meta
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


def test_partitions_define_each_function_once():
    name, fun, args = PROGRAMS[0]
    text = _optimized(fun, *args)
    defined = set(re.findall(r"^define [^\n]*?@([\w.]+)\(", text, re.MULTILINE))
    parts = split_emission.partition(text, 3)
    owned = [set(re.findall(r"^define [^\n]*?@([\w.]+)\(", p, re.MULTILINE)) for p in parts]
    assert set().union(*owned) == defined and sum(map(len, owned)) == len(defined)
    for part in parts:
        # what a partition uses from another is declared there, and visible to it
        for declared in re.findall(r"^declare hidden [^\n]*?@([\w.]+)\(", part, re.MULTILINE):
            assert declared in defined
            assert any(re.search(rf"^define hidden [^\n]*@{re.escape(declared)}\(", p,
                                 re.MULTILINE) for p in parts)
    assert split_emission.partition(text, 1) is None


def test_a_module_with_a_variable_of_its_own_is_not_split():
    text = ('@counter = internal global i64 0\n\ndefine void @f() {\n  ret void\n}\n\n'
            'define void @g() {\n  ret void\n}\n')
    assert split_emission.partition(text, 2) is None
    assert split_emission.partition(text.replace("internal global", "external global")
                                    .replace(" 0\n", "\n", 1), 2) is not None


def test_one_thread_or_a_small_program_is_one_object(monkeypatch):
    name, fun, args = PROGRAMS[0]
    text = _optimized(fun, *args)
    monkeypatch.setenv("FUNCTRANS_NUM_THREADS", "1")
    assert split_emission.parts_for(text) == 1
    monkeypatch.setenv("FUNCTRANS_NUM_THREADS", "64")
    assert split_emission.parts_for(text) <= split_emission.MAX_PARTS
    assert split_emission.parts_for("define void @f() {\n  ret void\n}\n") == 1


def _failing_worker(monkeypatch, error):
    real = split_emission._emit

    def emit(text, tm):
        if threading.current_thread() is not threading.main_thread():
            raise error
        return real(text, tm)
    monkeypatch.setattr(split_emission, "_emit", emit)


@pytest.mark.parametrize("error", [ValueError("a bug"), KeyboardInterrupt()])
def test_an_error_in_a_worker_reaches_the_caller(split_everything, monkeypatch, error):
    _failing_worker(monkeypatch, error)
    name, fun, args = PROGRAMS[1]
    closed = functrans.make_jaxpr(fun)(*args)
    with pytest.raises(type(error)):
        pipeline.compile_jaxpr(closed, use_cache=False)
    with machine_code._llvm_lock:  # released: the next compile goes on
        pass


def test_a_part_llvm_refuses_is_emitted_whole(split_everything, monkeypatch, caplog):
    _failing_worker(monkeypatch, RuntimeError("LLVM refused the part"))
    name, fun, args = PROGRAMS[1]
    closed = functrans.make_jaxpr(fun)(*args)
    exe = pipeline.compile_jaxpr(closed, use_cache=False)
    assert "emitting it whole" in caplog.text
    expected = functrans.tree_util.tree_leaves(functrans.jit(fun, backend="reference")(*args))
    for a, b in zip(exe(*args), expected):
        np.testing.assert_allclose(a, np.asarray(b), rtol=2e-5, atol=2e-5)
