"""An llvm executable's call specialized to its signature (``call_specialized``, which
``jit``'s fast path runs) checks and does what its ordinary call does."""
import threading

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import config


def _executable(f, *args):
    jitted = functrans.jit(f)
    jitted(*args)
    return jitted, next(iter(jitted._cache.values())).executable


def _program(x, y):
    return jnp.exp(jnp.sin(x) @ x.T).sum(axis=0) + 1.0, y * 2.0


@pytest.fixture(params=[False, True], ids=["plain", "poisoned"])
def poison(request):
    previous = config.read("poison_scratch")
    config.update("poison_scratch", request.param)
    yield request.param
    config.update("poison_scratch", previous)


def test_results_and_conversions_match_the_ordinary_call(poison):
    x, y = np.ones((32, 32), np.float32), np.arange(8, dtype=np.float32)
    _, exe = _executable(_program, jnp.asarray(x), jnp.asarray(y))
    call = exe.call_specialized
    for args in [(x, y),
                 (x.astype(np.float64), y),            # converted to float32
                 (np.asfortranarray(x), y[::1]),       # converted to C order
                 (x, np.arange(16, dtype=np.float32)[::2]),  # a strided view, converted
                 (x.tolist(), list(y))]:               # not arrays
        want, got = exe(*args), call(*args)
        assert len(got) == len(want)
        for w, g in zip(want, got):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)


def test_wrong_count_and_shape_raise_as_the_ordinary_call(poison):
    x, y = np.ones((32, 32), np.float32), np.ones(8, np.float32)
    _, exe = _executable(_program, jnp.asarray(x), jnp.asarray(y))
    for args in [(x,), (x, y, y), (np.ones((32, 31), np.float32), y), (x, np.ones(9, np.float32))]:
        with pytest.raises(TypeError) as ordinary:
            exe(*args)
        with pytest.raises(TypeError) as specialized:
            exe.call_specialized(*args)
        assert str(specialized.value) == str(ordinary.value)


def test_repeated_results_and_fresh_outputs():
    def f(x):
        y = x * 3.0
        return y, x + 1.0, y
    x = np.arange(4, dtype=np.float32)
    _, exe = _executable(f, jnp.asarray(x))
    first = exe.call_specialized(x)
    second = exe.call_specialized(x)
    np.testing.assert_array_equal(first[0], x * 3)
    np.testing.assert_array_equal(first[1], x + 1)
    assert first[0] is first[2]
    assert not np.shares_memory(first[0], second[0])


def test_threads_use_their_own_tables():
    x = np.arange(64 * 64, dtype=np.float32).reshape(64, 64) / 4096
    _, exe = _executable(lambda a, b: (jnp.tanh(a @ b) + a).sum(axis=1), jnp.asarray(x),
                         jnp.asarray(x))
    want = exe(x, x)[0]
    errors = []

    def work(k):
        a = x + np.float32(k)
        expected = exe(a, x)[0]
        for _ in range(50):
            got = exe.call_specialized(a, x)[0]
            if not np.array_equal(got, expected):
                errors.append(k)
                return

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    np.testing.assert_array_equal(exe.call_specialized(x, x)[0], want)


def test_lent_arena_executables_have_none():
    previous = config.read("arena_cache_threshold")
    config.update("arena_cache_threshold", 0)
    try:
        x = np.ones((32, 32), np.float32)
        jitted, exe = _executable(lambda a: jnp.exp(jnp.sin(a) @ a.T).sum(axis=0), jnp.asarray(x))
        assert not hasattr(exe, "call_specialized")
        np.testing.assert_allclose(np.asarray(jitted(jnp.asarray(x))), exe(x)[0])
    finally:
        config.update("arena_cache_threshold", previous)


def test_jit_fast_path_gives_the_same_results():
    x, y = np.ones((32, 32), np.float32), np.arange(8, dtype=np.float32)
    jitted, exe = _executable(_program, jnp.asarray(x), jnp.asarray(y))
    for _ in range(3):  # the first calls fill the fast path's cache
        got = jitted(jnp.asarray(x), jnp.asarray(y))
    for g, w in zip(got, exe(x, y)):
        np.testing.assert_array_equal(np.asarray(g), w)


@pytest.mark.parametrize("others", ["arrays", "numpy"])
def test_donated_buffers_are_reused_through_the_fast_path(others):
    """The fast path holds no reference of its own to an argument's buffer while the call
    judges whether a donated one is owned by its Array alone."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 48)).astype(np.float32)
    g = rng.standard_normal((32, 24)).astype(np.float32)
    if others == "arrays":
        x, g = jnp.asarray(x), jnp.asarray(g)
    step = functrans.jit(lambda w, x, g: w - 0.1 * (x.T @ g), donate_argnums=0)
    w = functrans.jit(lambda v: v + 0.0)(jnp.asarray(rng.standard_normal((48, 24)),
                                                     dtype=jnp.float32))
    for _ in range(3):  # the first call takes the full path, the others the fast one
        address = w._value.__array_interface__["data"][0]
        new = step(w, x, g)
        assert w.is_deleted()
        assert new._value.__array_interface__["data"][0] == address
        w = new
