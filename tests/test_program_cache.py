"""Programs served by the on-disk cache without the compiler (backends/llvm/program_cache.py):
a warm start links the stored object and builds the executable from the stored layout; a
layout that does not fit its program, or a damaged entry, is never trusted (the program is
compiled again); constants always come from the program, never from the cache."""
from __future__ import annotations

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp

pytest.importorskip("llvmlite")

from functrans.backends.llvm import cache, pipeline, program_cache  # noqa: E402
from llvm_setups import miscompile_dot_epilogues, run_with_cache_dir  # noqa: E402


def _program(x):
    h = jnp.tanh(x @ x.T) * 2.0
    return h.sum(axis=1), jnp.exp(x) + 1.0


X = np.linspace(-1, 1, 48, dtype=np.float32).reshape(6, 8)


def _expected(x):
    h = np.tanh(x @ x.T) * 2.0
    return h.sum(axis=1), np.exp(x) + 1.0


def _check(outs, x=X):
    for got, want in zip(outs, _expected(x)):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)



_SCRIPT = """
    import sys, numpy as np
    import functrans, functrans.numpy as jnp
    x = np.linspace(-1, 1, 48, dtype=np.float32).reshape(6, 8)
    def f(x):
        h = jnp.tanh(x @ x.T) * 2.0
        return h.sum(axis=1), jnp.exp(x) + 1.0
    compiled = functrans.jit(f).lower(x).compile()
    outs = compiled(x)
    from functrans.backends.llvm import program_cache
    print(program_cache.stats["cache_hits"],
          "functrans.backends.llvm.pipeline" in sys.modules,
          "llvmlite.binding" in sys.modules, "llvmlite.ir" in sys.modules)
    print(repr([np.asarray(o).tolist() for o in outs]))
    executable = compiled._executable
    print(repr((executable.description, executable.plan.arena_size,
                compiled.cost_analysis()["flops"])))
"""


def test_a_warm_start_runs_without_the_compiler(tmp_path):
    cold = run_with_cache_dir(_SCRIPT, tmp_path).splitlines()
    warm = run_with_cache_dir(_SCRIPT, tmp_path).splitlines()
    assert cold[0] == "0 True True True"
    # served by the cache: neither the compiler's passes and code generator nor LLVM (nor
    # llvmlite's IR builder) loaded
    assert warm[0] == "1 False False False"
    assert warm[1] == cold[1]  # the same results
    # what the executable was compiled from, planned again when it is asked for
    assert warm[2] == cold[2]


def _key_and_entry(closed):
    key = program_cache.program_key(closed)
    entry = cache.load(key)
    assert entry is not None and "layout" in entry[1]
    return key, entry


def _tampered(layout: dict, change) -> dict:
    import copy
    layout = copy.deepcopy(layout)
    change(layout)
    return layout


def _set(path, value):
    def change(layout):
        target = layout
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
    return change


@pytest.mark.parametrize("change", [
    _set(["outputs", 0, 1], [7]),                   # an output of another shape
    _set(["outputs", 0, 2], "float64"),             # ... of another dtype
    _set(["inputs", 0, 1], "int32"),                # an input of another dtype
    _set(["inputs", 0, 0], 10 ** 6),                # a slot past the table
    _set(["outputs", 1, 0], 1),                     # two buffers in one slot
    _set(["aliases"], [[0, [0]]]),                  # an output into an input of other shape
    _set(["results", 0], ["array", 3]),             # a result of a NumPy step
    _set(["results"], [["output", 0]]),             # a result missing
    _set(["segments"], ["ft_segment_9"]),           # an entry point the object lacks
    _set(["segments"], ["memcpy"]),                 # ... or not a segment at all
    _set(["num_slots"], True),                      # not an integer
    _set(["arena_size"], -1),
    _set(["poison"], [[[0, 10 ** 9]], []]),         # past the arena
    _set(["version"], 0),
    _set(["inputs"], "nothing"),
], ids=lambda change: repr(change.__closure__[1].cell_contents)[:40])
def test_a_layout_that_does_not_fit_its_program_is_not_trusted(cache_in, change, caplog):
    closed = functrans.make_jaxpr(_program)(X)
    pipeline.compile_jaxpr(closed)
    key, (sections, meta) = _key_and_entry(closed)
    bad = dict(meta, layout=_tampered(meta["layout"], change))
    cache.store(key, sections, bad)  # with a valid checksum: only the layout is wrong
    before = dict(pipeline.stats)
    _check(pipeline.compile_jaxpr(closed)(X))
    assert pipeline.stats["compiled"] == before["compiled"] + 1
    assert "discarding the compilation cache entry" in caplog.text
    assert cache.load(key)[1]["layout"] == meta["layout"]  # stored again, as it was


def test_damaged_entries_are_compiled_again_through_jit(cache_in):
    f = functrans.jit(_program)
    _check(f(X))
    [entry] = list(cache_in.rglob("*.bin"))
    good = entry.read_bytes()
    for damaged in (good[:len(good) // 2], good[:-10] + b"x" * 10, b""):
        entry.write_bytes(damaged)
        functrans.clear_caches()
        before = dict(pipeline.stats)
        _check(f(X))
        assert pipeline.stats["compiled"] == before["compiled"] + 1
        assert entry.read_bytes() != damaged
    functrans.clear_caches()
    before = dict(pipeline.stats)
    _check(f(X))
    assert pipeline.stats["cache_hits"] == before["cache_hits"] + 1


def test_constants_come_from_the_program_not_the_cache(cache_in):
    # two closures of one shape share a key: the second must read its own constant
    def closed_over(w):
        return functrans.make_jaxpr(lambda x: (jnp.sin(x) * w + w, w))(X)
    first = closed_over(np.full((6, 8), 2.0, np.float32))
    pipeline.compile_jaxpr(first)
    assert _key_and_entry(first)[1][1]["layout"]["consts"]  # stored, naming the constant
    w = np.arange(48, dtype=np.float32).reshape(6, 8)
    second = closed_over(w)
    assert program_cache.program_key(second) == program_cache.program_key(first)
    before = dict(pipeline.stats)
    out, same = pipeline.compile_jaxpr(second)(X)
    assert pipeline.stats["cache_hits"] == before["cache_hits"] + 1
    np.testing.assert_allclose(out, np.sin(X) * w + w, rtol=1e-6)
    np.testing.assert_array_equal(same, w)


def test_a_program_with_numpy_steps_is_planned_on_a_hit(cache_in):
    # a NumPy step is no part of a layout: such a program plans again and skips only LLVM
    def f(x):
        return jnp.sort(jnp.exp(x), axis=0) + 1.0
    closed = functrans.make_jaxpr(f)(X)
    first = pipeline.compile_jaxpr(closed)
    entry = cache.load(program_cache.program_key(closed))
    assert any(kind == "numpy" for kind, _ in first.layout.schedule)
    assert "layout" not in entry[1] and "plan" in entry[1]
    before = dict(pipeline.stats)
    np.testing.assert_allclose(pipeline.compile_jaxpr(closed)(X)[0],
                               np.sort(np.exp(X), axis=0) + 1.0, rtol=1e-6)
    assert pipeline.stats["cache_hits"] == before["cache_hits"] + 1


def test_a_compiler_replaced_at_run_time_neither_stores_nor_trusts_layouts(cache_in,
                                                                           monkeypatch):
    # a miscompile put into a pass, as the fuzzer's own test does: its code must not serve
    # a process with the real compiler, nor the real compiler's code serve it
    from functrans.backends.compiler import fusion
    a = np.arange(9, dtype=np.float32).reshape(3, 3)
    b = np.ones((3, 2), np.float32)
    closed = functrans.make_jaxpr(lambda a, b: a.T @ b + a @ b)(a, b)
    right = a.T @ b + a @ b
    np.testing.assert_array_equal(pipeline.compile_jaxpr(closed)(a, b)[0], right)
    assert "layout" in cache.load(program_cache.program_key(closed))[1]
    real = miscompile_dot_epilogues(monkeypatch)
    assert program_cache.compiler_replaced()
    wrong = pipeline.compile_jaxpr(closed)(a, b)[0]
    assert not np.array_equal(wrong, right)  # compiled by the replaced pass, not read
    assert "layout" not in cache.load(program_cache.program_key(closed))[1]
    monkeypatch.setattr(fusion, "fuse_dot_epilogues", real)
    assert not program_cache.compiler_replaced()
    np.testing.assert_array_equal(pipeline.compile_jaxpr(closed)(a, b)[0], right)
    functrans.clear_caches()
    np.testing.assert_array_equal(functrans.jit(lambda a, b: a.T @ b + a @ b)(a, b), right)


def test_a_program_the_printer_fails_on_compiles_uncached(cache_in, monkeypatch):
    def fails(closed):
        raise KeyError("V")
    monkeypatch.setattr(cache, "program_digest", fails)
    f = functrans.jit(lambda x: jnp.exp(x) * 3.0)
    np.testing.assert_allclose(f(X), np.exp(X) * 3.0, rtol=1e-6)
    assert not list(cache_in.rglob("*.bin"))
