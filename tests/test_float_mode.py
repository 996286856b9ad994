"""Subnormal floats are flushed to zero while functrans computes, as on JAX's CPU backend
(see functrans/_float_mode.py and backends/llvm/float_mode.py).

The expected values are what JAX 0.10.2 returns on an x86-64 CPU, eagerly and under
``jax.jit`` (written down from a run of each case; docs/differences.md lists the cases
where the two differ). A subnormal operand of arithmetic reads as zero (DAZ), a result
that would be subnormal is zero (FTZ), and operations that only move bits keep it."""
from __future__ import annotations

import ctypes
import threading
import time

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import _float_mode, lax
from functrans.test_util import x64 as enable_x64

pytestmark = pytest.mark.skipif(not _float_mode.supported(),
                                reason="the flush bits are x86-64 Linux's MXCSR")

TINY = np.float32(1e-40)  # subnormal in float32 (the smallest normal is 1.2e-38)
X = np.array([1e-40, -1e-40, 1e-30], np.float32)


def _bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}").tolist()


def both(fn, *args):
    """(eager result, jitted result) as NumPy arrays."""
    eager = fn(*[jnp.asarray(a) for a in args])
    jitted = functrans.jit(fn)(*args)
    return np.asarray(eager), np.asarray(jitted)


# (name, function, arguments, JAX's result): eager and jit agree in JAX for all of these
CASES = [
    ("product of normals, subnormal result", lambda a, b: a * b,
     (np.float32([1e-20]), np.float32([1e-20])), np.float32([0.0])),
    ("quotient, subnormal result", lambda a, b: a / b,
     (np.float32([1e-30]), np.float32([1e10])), np.float32([0.0])),
    ("x * 2", lambda a: a * 2, (X,), np.float32([0.0, -0.0, 2e-30])),
    ("x * y, y = 1 an argument", lambda a, b: a * b, (X, np.float32(1)),
     np.float32([0.0, -0.0, 1e-30])),
    ("x + y, y = 0 an argument", lambda a, b: a + b, (X, np.float32(0)),
     np.float32([0.0, 0.0, 1e-30])),
    ("x == 0", lambda a: a == 0, (X,), np.array([True, True, False])),
    ("x > 0", lambda a: a > 0, (X,), np.array([False, False, True])),
    ("where(x != 0, x, 7)", lambda a: jnp.where(a != 0, a, 7.0), (X,),
     np.float32([7.0, 7.0, 1e-30])),
    ("sqrt", jnp.sqrt, (X,), np.float32([0.0, -0.0, 1e-15])),
    ("exp, subnormal results", jnp.exp, (np.float32([-100.0, -87.5]),), np.float32([0, 0])),
    ("sum", jnp.sum, (np.full(4, TINY),), np.float32(0.0)),
    ("sum, many", jnp.sum, (np.full(100_000, TINY),), np.float32(0.0)),
    ("max", jnp.max, (np.float32([1e-40, -1.0]),), np.float32(0.0)),
    ("maximum(x, 0)", jnp.maximum, (X, np.float32(0)), np.float32([0.0, 0.0, 1e-30])),
    ("sign", jnp.sign, (np.float32([1e-40, 1e-30]),), np.float32([0.0, 1.0])),
    ("floor", jnp.floor, (X,), np.float32([0.0, -0.0, 0.0])),
    ("to int32", lambda a: a.astype(jnp.int32), (X,), np.int32([0, 0, 0])),
    ("ldexp to a subnormal", lambda a: jnp.ldexp(a, np.int32(-130)), (np.float32([1.5, -2.0]),),
     np.float32([0.0, -0.0])),
    ("matrix product", jnp.dot, (np.full((4, 8), 1e-20, np.float32), np.ones((8, 3), np.float32) * np.float32(1e-20)),
     np.zeros((4, 3), np.float32)),
    ("matrix-vector product, subnormal operand", jnp.dot,
     (np.full((64, 64), TINY), np.ones(64, np.float32)), np.zeros(64, np.float32)),
    ("bfloat16 product", lambda a, b: a * b,
     (jnp.asarray(np.float32([1e-39])).astype(jnp.bfloat16),
      jnp.asarray(np.float32([1.0])).astype(jnp.bfloat16)), None),
    # bits only: kept
    ("neg", jnp.negative, (X,), -X),
    ("abs", jnp.abs, (X,), np.abs(X)),
    ("reshape and transpose", lambda a: a.reshape(3, 1).T, (X,), X.reshape(1, 3)),
    ("bitcast", lambda a: lax.bitcast_convert_type(a, jnp.int32), (X,), X.view(np.int32)),
    ("nextafter(0, 1)", jnp.nextafter, (np.float32([0.0]), np.float32([1.0])),
     np.float32([1e-45])),
    ("float16 product (float16's subnormals are float32's normals)", lambda a, b: a * b,
     (np.float16([1e-7]), np.float16([1.0])), np.float16([1e-7])),
]


@pytest.mark.parametrize("name,fn,args,expected", CASES, ids=[c[0] for c in CASES])
def test_subnormals_as_jax_computes_them(name, fn, args, expected):
    eager, jitted = both(fn, *args)
    if expected is None:  # bfloat16: compare as float32
        eager, jitted, expected = (np.asarray(eager, np.float32), np.asarray(jitted, np.float32),
                                   np.float32([0.0]))
    expected = np.asarray(expected)
    assert eager.dtype == jitted.dtype == expected.dtype, name
    assert _bits(eager) == _bits(expected), (name, eager, expected)
    assert _bits(jitted) == _bits(expected), (name, jitted, expected)


def test_scalar_comparisons_and_literals():
    assert bool(jnp.float32(3e-45) == 0)
    assert not bool(jnp.float32(3e-45) > 0)
    # the value itself is kept: flushing happens in arithmetic, not on the way in or out
    assert float(jnp.float32(3e-45)) > 0
    assert _bits(jnp.asarray(X)) == _bits(X)
    assert _bits(functrans.device_put(X)) == _bits(X)
    assert _bits(jnp.array([1e-40], jnp.float32) * 1) == [0]  # eager: a real product
    # jit of x * 1 with the literal 1: LLVM, as XLA, drops the product and returns x
    assert _bits(functrans.jit(lambda x: x * 1)(TINY)) == _bits(TINY)


def test_float64_subnormals_under_x64():
    with enable_x64():
        d = np.array([1e-310, -1e-310, 1e-300])
        for got in both(lambda v: v * 2, d):
            assert _bits(got) == _bits(np.array([0.0, -0.0, 2e-300]))
        for got in both(lambda a, b: a * b, np.array([1e-160]), np.array([1e-160])):
            assert got.tolist() == [0.0]
        for got in both(jnp.sum, np.array([1e-310] * 3)):
            assert got == 0.0
        # conversions read and write in the mode too
        for got in both(lambda v: v.astype(jnp.float32), np.array([1e-40, 1e-39, 1.0])):
            assert got.tolist() == [0.0, 0.0, 1.0]
        for got in both(lambda v: v.astype(jnp.float64), np.float32([1e-40, 1.0])):
            assert got.tolist() == [0.0, 1.0]


def test_reference_backend_flushes_too():
    f = functrans.jit(lambda a, b: a * b, backend="reference")
    assert np.asarray(f(np.float32([1e-20]), np.float32([1e-20]))).tolist() == [0.0]


def test_option_off_computes_ieee_subnormals():
    f = functrans.jit(lambda a, b: a * b)
    assert np.asarray(f(np.float32([1e-20]), np.float32([1e-20]))).tolist() == [0.0]
    functrans.config.update("flush_denormals", False)
    want = np.float32(1e-20) * np.float32(1e-20)
    assert want != 0
    # the option is part of what a program is compiled for: the same function compiles again
    assert np.asarray(f(np.float32([1e-20]), np.float32([1e-20]))).tolist() == [want]
    assert not bool(jnp.float32(3e-45) == 0)
    assert float(np.asarray(jnp.sum(jnp.full(4, TINY)))) > 0
    functrans.config.update("flush_denormals", True)
    assert np.asarray(f(np.float32([1e-20]), np.float32([1e-20]))).tolist() == [0.0]


# ---- the caller's floating-point mode ---------------------------------------------------------

def _set_mxcsr_bits(on: bool):
    """Set or clear FTZ and DAZ on this thread (as a user's own code might)."""
    env = _float_mode._Env()
    _float_mode._fenv[0](env)
    if on:
        env[_float_mode._MXCSR_WORD] |= _float_mode.FLUSH_BITS
    else:
        env[_float_mode._MXCSR_WORD] &= ~_float_mode.FLUSH_BITS
    _float_mode._fenv[1](env)


@pytest.fixture
def caller_bits():
    saved = _float_mode._Env()
    _float_mode._fenv[0](saved)
    yield _set_mxcsr_bits
    _float_mode._fenv[1](saved)


@pytest.mark.parametrize("caller_flushes", [False, True])
def test_compiled_and_eager_calls_leave_the_callers_mode(caller_bits, caller_flushes):
    caller_bits(caller_flushes)
    before = _float_mode.mxcsr() & _float_mode.FLUSH_BITS
    assert before == (_float_mode.FLUSH_BITS if caller_flushes else 0)
    x = np.linspace(-1, 1, 1 << 19, dtype=np.float32)  # split over the thread pool
    w = np.ones((64, 64), np.float32)
    f = functrans.jit(lambda x, w: (jnp.tanh(x) * 2.0, w @ w, jnp.sort(x[:300])))
    for _ in range(3):
        f(x, w)
        assert _float_mode.mxcsr() & _float_mode.FLUSH_BITS == before
    jnp.asarray(X) * 2  # eager
    assert _float_mode.mxcsr() & _float_mode.FLUSH_BITS == before
    # ... also when the computation raises
    with pytest.raises(TypeError):
        lax.add(jnp.ones(2), jnp.ones(2, jnp.int32))
    with pytest.raises(ZeroDivisionError):
        with _float_mode.flushing():
            assert _float_mode.mxcsr() & _float_mode.FLUSH_BITS == _float_mode.FLUSH_BITS
            1 / 0
    assert _float_mode.mxcsr() & _float_mode.FLUSH_BITS == before


def test_the_mode_is_per_thread():
    """A thread computing eagerly leaves another thread's mode alone."""
    seen, inside, done = {}, threading.Event(), threading.Event()

    def other():
        inside.wait(30)
        seen["other"] = _float_mode.mxcsr() & _float_mode.FLUSH_BITS
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with _float_mode.flushing():
        inside.set()
        done.wait(30)
        seen["inside"] = _float_mode.mxcsr() & _float_mode.FLUSH_BITS
    thread.join()
    assert seen == {"other": 0, "inside": _float_mode.FLUSH_BITS}


def test_pool_workers_run_chunks_in_the_callers_mode():
    """Every chunk of a job, on whichever thread runs it, sees the mode of the thread that
    started the job: flushing or not."""
    from functrans.backends.llvm import thread_pool
    thread_pool.ensure_started()
    if thread_pool.workers() == 0:
        pytest.skip("one CPU: the pool runs jobs on the calling thread")
    parallel_for = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        thread_pool._state["address"])
    seen = []

    @ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)
    def chunk(ctx, index):
        seen.append((threading.get_ident(), _float_mode.mxcsr() & _float_mode.FLUSH_BITS))
        time.sleep(0.002)  # lets a worker claim chunks too

    caller = threading.get_ident()
    for flush, want in ((True, _float_mode.FLUSH_BITS), (False, 0), (True, _float_mode.FLUSH_BITS)):
        for attempt in range(20):  # until a worker took part (a busy machine may pause it)
            seen.clear()
            if flush:
                with _float_mode.flushing():
                    parallel_for(ctypes.cast(chunk, ctypes.c_void_p), None, 16)
            else:
                parallel_for(ctypes.cast(chunk, ctypes.c_void_p), None, 16)
            assert len(seen) == 16 and {mode for _, mode in seen} == {want}, (flush, seen)
            if any(thread != caller for thread, _ in seen):
                break
        else:
            pytest.skip("no pool worker ran a chunk (the machine is busy)")


def test_a_pool_worker_flushes_in_compiled_code():
    """A parallel loop's chunks flush on the workers as on the calling thread: no element
    of a large product of subnormal-producing factors survives, wherever its chunk ran."""
    n = 1 << 20
    a = np.full(n, 1e-20, np.float32)
    f = functrans.jit(lambda a, b: a * b)
    assert "ft_parallel_for" in f.lower(a, a).as_text()
    for _ in range(5):
        assert not np.asarray(f(a, a)).any()
