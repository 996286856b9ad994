"""Typed key arrays (random.key) are pytree nodes; jit's fast dispatch serves them as it
serves arrays: no retrace, and no trip through the full call path after the first call."""
import numpy as np

import functrans
from functrans import _jit, random


def test_typed_key_argument_takes_the_fast_path_without_retracing(monkeypatch):
    traces = []

    def draw(k):
        traces.append(1)
        return random.uniform(k, (3,))

    f = functrans.jit(draw)
    first = f(random.key(0))
    slow_calls = []
    full_path = _jit.JitWrapped._call
    monkeypatch.setattr(_jit.JitWrapped, "_call",
                        lambda self, *a: slow_calls.append(1) or full_path(self, *a))
    again = f(random.key(0))
    other = f(random.key(1))
    assert len(traces) == 1 and slow_calls == []
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    np.testing.assert_array_equal(other, random.uniform(random.key(1), (3,)))


def test_typed_keys_in_containers_and_split_keys_keep_their_signature(monkeypatch):
    f = functrans.jit(lambda ks, x: (random.normal(ks["a"][0], x.shape) + x, ks["b"]))
    keys = {"a": random.split(random.key(0), 2), "b": random.key(7)}
    out, b = f(keys, np.float32(1) * functrans.numpy.ones(2))
    slow_calls = []
    full_path = _jit.JitWrapped._call
    monkeypatch.setattr(_jit.JitWrapped, "_call",
                        lambda self, *a: slow_calls.append(1) or full_path(self, *a))
    out2, b2 = f({"a": random.split(random.key(0), 2), "b": random.key(7)},
                 functrans.numpy.ones(2))
    assert slow_calls == []
    np.testing.assert_array_equal(out, out2)
    assert b2.dtype == random.key(0).dtype
    np.testing.assert_array_equal(random.key_data(b2), random.key_data(b))
    # another key shape is another signature: the full path traces it
    f({"a": random.split(random.key(0), 3), "b": random.key(7)}, functrans.numpy.ones(2))
    assert slow_calls == [1]
