"""jit caches by function: ``jit(f)(x)`` written in a loop, or two ``jit(f)`` of one ``f``
with the same options, trace ``f`` once per signature; the caches go with the function."""
from __future__ import annotations

import gc
import weakref

import numpy as np

import functrans
import functrans.numpy as jnp


def _counting():
    traces = []

    def f(x, n=2):
        traces.append(1)
        return x * n

    return f, traces


def test_jit_inside_a_loop_traces_once():
    f, traces = _counting()
    for _ in range(5):
        np.testing.assert_array_equal(functrans.jit(f)(jnp.ones(3)), [2, 2, 2])
    assert len(traces) == 1
    functrans.jit(f)(jnp.ones(4))  # a new signature traces again
    assert len(traces) == 2


def test_wrappers_share_a_cache_only_with_the_same_options():
    f, traces = _counting()
    functrans.jit(f)(jnp.ones(3))
    functrans.jit(f, static_argnums=())(jnp.ones(3))
    assert len(traces) == 1
    functrans.jit(f, static_argnums=1)(jnp.ones(3), 3)  # other options: its own cache
    functrans.jit(f, donate_argnums=0)(jnp.ones(3))
    assert len(traces) == 3
    g, g_traces = _counting()
    functrans.jit(g)(jnp.ones(3))  # another function (same code): its own cache
    assert len(g_traces) == 1 and len(traces) == 3


def test_clear_cache_of_one_wrapper_clears_the_shared_cache():
    f, traces = _counting()
    first, second = functrans.jit(f), functrans.jit(f)
    first(jnp.ones(3))
    second.clear_cache()
    first(jnp.ones(3))
    assert len(traces) == 2


def test_a_collected_function_takes_its_caches_with_it():
    f, _ = _counting()
    functrans.jit(f)(jnp.ones(3))
    ref = weakref.ref(f)
    del f
    gc.collect()
    assert ref() is None


def test_callables_that_cannot_be_weakly_referenced_still_jit():
    class Scale:
        __slots__ = ()  # no __weakref__

        def __call__(self, x):
            return x * 3

    scale = Scale()
    np.testing.assert_array_equal(functrans.jit(scale)(jnp.ones(2)), [3, 3])
    np.testing.assert_array_equal(functrans.jit(scale)(jnp.ones(2)), [3, 3])
