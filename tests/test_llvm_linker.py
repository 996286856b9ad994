"""The llvm backend's own linker (backends/llvm/linker.py): cached machine code loaded without
LLVM must run exactly as the same code loaded by LLVM's JIT, anything it cannot link must be
refused (and then loaded by LLVM), and malformed objects must never crash the process."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("llvmlite")

import functrans  # noqa: E402
import functrans.lax as lax  # noqa: E402
import functrans.numpy as jnp  # noqa: E402
from functrans import test_util  # noqa: E402
from functrans.backends.llvm import cache, linker, pipeline, thread_pool  # noqa: E402

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

needs_linker = pytest.mark.skipif(not linker.supported_host(),
                                  reason="the linker handles x86-64 Linux objects only")


@pytest.fixture(autouse=True)
def _private_cache_dir(tmp_path):
    old = functrans.config.cache_dir
    functrans.config.update("cache_dir", str(tmp_path))
    yield
    functrans.config.update("cache_dir", old)


def _loop_while(x):
    def body(carry):
        i, v = carry
        return i + 1, jnp.where(v > 2.0, v / 2.0, v * 3.0 + 1.0)
    return lax.while_loop(lambda c: c[0] < 7, body, (0, x))[1]


def _switch(i, x):
    branches = [lambda v: v + 1.0, lambda v: jnp.sin(v), lambda v: v * v, lambda v: -v,
                lambda v: jnp.exp(v)]
    return lax.switch(i, branches, x)


# (name, function, arguments): together they reach every kind of symbol and relocation the
# generated code uses — constants in .rodata, libm calls (float64 sin, lgamma), BLAS and the
# split matrix products (thread pool, per-thread BLAS threads), parallel loops, scatter,
# control flow and jump tables.
_rng = np.random.default_rng(0)
PROGRAMS = [
    ("elementwise", lambda x: jnp.tanh(x) * jnp.exp(-x * x) + jnp.log1p(jnp.abs(x)),
     (_rng.standard_normal(1000).astype(np.float32),)),
    ("libm", lambda x: jnp.sin(x) + lax.lgamma(jnp.abs(x) + 1.0),
     (_rng.standard_normal(257),)),
    ("matmul_split", lambda a, b: jnp.tanh(a @ b),
     (_rng.standard_normal((512, 384)).astype(np.float32),
      _rng.standard_normal((384, 512)).astype(np.float32))),
    ("parallel_reduction", lambda x: jnp.sum(jnp.exp(x) * 2.0, axis=1),
     (_rng.standard_normal((2048, 1024)).astype(np.float32),)),
    ("scatter_add", lambda x, i: jnp.zeros(16, x.dtype).at[i].add(x),
     (_rng.standard_normal(100).astype(np.float32), _rng.integers(0, 16, 100).astype(np.int32))),
    ("while", _loop_while, (_rng.standard_normal(64).astype(np.float32) * 10,)),
    ("switch", _switch, (np.int32(1), _rng.standard_normal(8).astype(np.float32))),
]


def _compile(fun, args, use_llvm: bool, monkeypatch):
    closed = functrans.make_jaxpr(fun)(*args)
    before = dict(linker.stats)
    with monkeypatch.context() as m:
        if use_llvm:
            def refuse(data):
                raise linker.UnsupportedObject("refused by the test")
            m.setattr(linker, "load_object", refuse)
        exe = pipeline.compile_jaxpr(closed, use_cache=False)
    used = {k: linker.stats[k] - before[k] for k in before}
    return exe, used


@needs_linker
@pytest.mark.parametrize("name,fun,args", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_linked_code_runs_as_llvm_loaded_code(name, fun, args, monkeypatch):
    thread_pool.ensure_started()  # loaded once per process: not counted below
    ours, used_ours = _compile(fun, args, False, monkeypatch)
    theirs, used_theirs = _compile(fun, args, True, monkeypatch)
    assert used_ours["linked"] == 1 and used_ours["llvm"] == 0
    assert used_theirs["llvm"] == 1
    assert ours.optimized_ir == theirs.optimized_ir  # the same machine code, loaded twice
    for a, b in zip(ours(*args), theirs(*args)):
        np.testing.assert_array_equal(a, b)
    expected = functrans.jit(fun, backend="reference")(*args)
    for a, b in zip(ours(*args), functrans.tree_util.tree_leaves(expected)):
        np.testing.assert_allclose(a, np.asarray(b), rtol=2e-5, atol=2e-5)


def _object_of(fun, *args) -> bytes:
    closed = functrans.make_jaxpr(fun)(*args)
    pipeline.compile_jaxpr(closed)
    entries = [p for p in cache.cache_dir().rglob("*.bin")]
    objects = [cache.load(p.stem) for p in entries]
    objects = [e[0]["object"] for e in objects if e is not None and "ir" in e[0]]
    assert len(objects) == 1
    return objects[0]


@pytest.fixture(scope="module")
def sample_object(tmp_path_factory):
    """A real object with .rodata constants, calls through stubs and BLAS symbols."""
    old = functrans.config.cache_dir
    functrans.config.update("cache_dir", str(tmp_path_factory.mktemp("sample")))
    try:
        with test_util.x64():  # a float64 part for real (with x64 off, astype would warn)
            return _object_of(lambda a, b: jnp.sin((a @ b).astype(jnp.float64)) * 0.5,
                              np.ones((8, 8), np.float32), np.ones((8, 8), np.float32))
    finally:
        functrans.config.update("cache_dir", old)


def _sections(data: bytes):
    shoff, = struct.unpack_from("<Q", data, 40)
    shnum, shstrndx = struct.unpack_from("<HH", data, 60)
    return [struct.unpack_from("<IIQQQQIIQQ", data, shoff + 64 * i) for i in range(shnum)]


@needs_linker
def test_the_sample_object_links(sample_object):
    loaded = linker.load_object(sample_object)
    assert any(name.startswith("ft_segment") for name in loaded._symbols)


@needs_linker
@pytest.mark.parametrize("damage", ["magic", "class", "machine", "type", "truncated",
                                    "relocation_type", "undefined_symbol"])
def test_objects_it_cannot_link_are_refused(sample_object, damage):
    data = bytearray(sample_object)
    if damage == "magic":
        data[:4] = b"\x7fELG"
    elif damage == "class":
        data[4] = 1  # 32-bit
    elif damage == "machine":
        struct.pack_into("<H", data, 18, 183)  # AArch64
    elif damage == "type":
        struct.pack_into("<H", data, 16, 3)  # a shared object
    elif damage == "truncated":
        data = data[:len(data) // 2]
    elif damage == "relocation_type":
        rela = [s for s in _sections(bytes(data)) if s[1] == 4 and s[5]]
        offset = rela[0][4]
        _, info, _ = struct.unpack_from("<QQq", data, offset)
        struct.pack_into("<Q", data, offset + 8, (info >> 32 << 32) | 19)  # R_X86_64_TLSGD
    elif damage == "undefined_symbol":
        at = bytes(data).index(b"ft_sgemm\0")
        data[at:at + 8] = b"ft_nosym"
    with pytest.raises(linker.UnsupportedObject):
        linker.load_object(bytes(data))


@needs_linker
@given(st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 255)), min_size=1, max_size=8))
def test_damaged_objects_never_crash_the_loader(sample_object, flips):
    """Any bytes at all: the loader links them or refuses them (it never runs them)."""
    data = bytearray(sample_object)
    for position, value in flips:
        data[position % len(data)] = value
    try:
        linker.load_object(bytes(data))
    except linker.UnsupportedObject:
        pass


def test_unsupported_objects_are_loaded_by_llvm(monkeypatch):
    def refuse(data):
        raise linker.UnsupportedObject("refused by the test")
    monkeypatch.setattr(linker, "load_object", refuse)
    before = linker.stats["llvm"]
    f = functrans.jit(lambda x: jnp.cos(x) * 3 + 1, backend="llvm")
    x = np.linspace(0, 2, 11).astype(np.float32)
    np.testing.assert_allclose(f(x), np.cos(x) * 3 + 1, rtol=1e-6)
    assert linker.stats["llvm"] == before + 1


def test_a_bad_host_description_is_recomputed(tmp_path):
    computed = []

    def compute():
        computed.append(1)
        return "x86_64-test|cpu|+feature"
    assert cache.host_target(compute) == "x86_64-test|cpu|+feature"
    files = list(cache.cache_dir().glob("host-*.json"))
    if cache._cpu_fingerprint() is None:
        assert not files  # nothing to key it by: asked every time
        return
    assert len(files) == 1 and computed == [1]
    assert cache.host_target(compute) == "x86_64-test|cpu|+feature" and computed == [1]
    for bad in ("", "{", "[]", json.dumps({"fingerprint": "other", "target": "wrong"})):
        files[0].write_text(bad)
        assert cache.host_target(compute) == "x86_64-test|cpu|+feature"
    assert len(computed) == 5
    assert json.loads(files[0].read_text())["target"] == "x86_64-test|cpu|+feature"


_WARM_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import functrans, functrans.numpy as jnp
    from functrans.backends.llvm import linker, pipeline
    rng = np.random.default_rng(1)
    a = rng.standard_normal((512, 300)).astype(np.float32)
    b = rng.standard_normal((300, 512)).astype(np.float32)
    f = functrans.jit(lambda a, b: jnp.sum(jnp.tanh(a @ b), axis=0)
                      + jnp.sin(jnp.arange(512.0, dtype=jnp.float64)).astype(jnp.float32))
    out = np.asarray(f(a, b))
    print(json.dumps({"stats": pipeline.stats, "linked": linker.stats,
                      "llvm_loaded": "llvmlite.binding" in sys.modules, "out": out.tolist()}))
""")


def test_a_warm_process_never_loads_llvm(tmp_path):
    """The second process finds the program (and the thread pool and the SIGINT handler) in
    the cache: it links them itself, and never imports llvmlite.binding."""
    env = dict(os.environ, FUNCTRANS_CACHE_DIR=str(tmp_path), FUNCTRANS_DEFAULT_BACKEND="",
               FUNCTRANS_NUM_THREADS="2")
    runs = []
    for _ in range(2):
        result = subprocess.run([sys.executable, "-c", _WARM_SCRIPT], env=env,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        runs.append(json.loads(result.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["stats"] == {"compiled": 1, "cache_hits": 0} and first["llvm_loaded"]
    assert second["stats"] == {"compiled": 0, "cache_hits": 1}
    assert first["out"] == second["out"]
    if linker.supported_host():
        assert not second["llvm_loaded"]
        # the program, the thread pool and the SIGINT handler
        assert second["linked"] == {"linked": 3, "llvm": 0}
