"""functrans.profiler records jitted calls, tracing, compilation and annotations, and
writes them as a Chrome trace-event file in TensorBoard's layout."""
from __future__ import annotations

import gzip
import json
import threading

import pytest

import functrans
import functrans.numpy as jnp
from functrans import profiler


def _events(log_dir):
    (path,) = log_dir.glob("plugins/profile/*/*.trace.json.gz")
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def test_a_trace_records_calls_compilation_and_annotations(tmp_path):
    def step(x):
        return jnp.tanh(x) * 2

    f = functrans.jit(step)
    f(jnp.ones(3))  # compiled before the trace: the trace shows calls only

    @profiler.annotate_function
    def load():
        return jnp.ones(4)

    with profiler.trace(tmp_path):
        with profiler.StepTraceAnnotation("train", step_num=7):
            f(jnp.ones(3)).block_until_ready()
            f(load()).block_until_ready()  # a new shape: traced and compiled in the trace
        worker = threading.Thread(target=lambda: f(jnp.ones(3)), name="worker")
        worker.start()
        worker.join()
    events = _events(tmp_path)
    calls = [e for e in events if e.get("cat") == "jit call"]
    assert [e["name"] for e in calls] == ["step"] * 3
    assert len({e["tid"] for e in calls}) == 2
    thread_names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {"MainThread", "worker"} <= thread_names
    assert [e["name"] for e in events if e.get("cat") == "tracing"] == ["trace step"]
    assert sum(e.get("cat") == "compilation" for e in events) == 1
    (train,) = [e for e in events if e["name"] == "train"]
    assert train["args"] == {"step_num": "7"}
    (loaded,) = [e for e in events if e.get("cat") == "annotation" and "load" in e["name"]]
    # the annotation spans the calls made inside it
    inside = [e for e in calls if e["tid"] == train["tid"]]
    assert all(train["ts"] <= e["ts"] and e["ts"] + e["dur"] <= train["ts"] + train["dur"]
               for e in inside) and loaded["dur"] >= 0


def test_only_one_trace_at_a_time_and_stop_needs_a_start(tmp_path):
    profiler.start_trace(tmp_path, create_perfetto_trace=True)
    with pytest.raises(RuntimeError, match="already been started"):
        profiler.start_trace(tmp_path)
    profiler.stop_trace()
    assert list(tmp_path.glob("plugins/profile/*/perfetto_trace.json.gz"))
    with pytest.raises(RuntimeError, match="No profile started"):
        profiler.stop_trace()


def test_nothing_is_recorded_outside_a_trace_and_jit_keeps_its_fast_path(tmp_path):
    f = functrans.jit(lambda x: x + 1)
    x = jnp.ones(2)
    f(x)
    with profiler.TraceAnnotation("outside"):
        f(x)
    assert not profiler.is_tracing()
    with profiler.trace(tmp_path):
        f(x)
    assert f._fast_cache  # calls outside traces still take the cached fast path
    assert [e["name"] for e in _events(tmp_path) if e.get("cat") == "jit call"] == ["<lambda>"]


def test_unavailable_parts_say_so():
    with pytest.raises(NotImplementedError, match="profiler.trace"):
        profiler.start_server(9999)
    with pytest.raises(NotImplementedError, match="live_arrays"):
        profiler.device_memory_profile()
