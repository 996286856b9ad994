"""The garbage collector's pause around tracing and compiling (functrans._collector)."""
import gc

import numpy as np

import functrans
from functrans import _collector


def test_paused_turns_the_collector_back_on():
    assert gc.isenabled()
    with _collector.paused():
        assert not gc.isenabled()
        with _collector.paused():  # nested: left to the outer block
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_paused_leaves_a_disabled_collector_off():
    gc.disable()
    try:
        with _collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_paused_turns_it_back_on_after_an_error():
    try:
        with _collector.paused():
            raise ValueError("x")
    except ValueError:
        pass
    assert gc.isenabled()


def test_jit_leaves_the_collector_on():
    seen = []

    def f(x):
        seen.append(gc.isenabled())
        return x * 2

    out = functrans.jit(f)(np.ones(3, np.float32))
    np.testing.assert_allclose(np.asarray(out), 2.0)
    assert seen == [False]  # traced with the collector paused
    assert gc.isenabled()
