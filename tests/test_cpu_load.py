"""The machine's load now (backends/llvm/cpu_load.py) and the cores a compile takes from it
(thread_pool.free_cores): a core counts free when no other thread is runnable on it now and
it sat idle since the previous reading; the load average, a minute behind, still frees a
core it leaves free; a compile reads once, as it starts."""
from __future__ import annotations

import os
import types

import pytest

pytest.importorskip("llvmlite")

from functrans.backends.llvm import cpu_load, parallel_compile, pipeline, thread_pool  # noqa: E402


def _machine(monkeypatch, running, idle, cpus=2):
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    monkeypatch.setattr(cpu_load, "runnable_threads", lambda: running)
    monkeypatch.setattr(cpu_load, "idle_cores", lambda chosen: idle)


@pytest.mark.parametrize("running,idle,free", [
    (1, 1.0, 1),    # only the caller runs, the other core idle: free
    (1, None, 1),   # the window too short to read: the runnable threads decide
    (2, 1.0, 0),    # a neighbour runnable now
    (1, 0.3, 0),    # a neighbour between bursts, busy most of the window
    (1, 0.6, 1),    # counted at half a core
    (5, 2.0, 0),
])
def test_a_core_is_free_when_nothing_else_runs_on_it_now(monkeypatch, running, idle, free):
    _machine(monkeypatch, running, idle)
    assert cpu_load.free_cores_now({0, 1}) == free


def test_no_more_cores_than_this_process_may_use(monkeypatch):
    _machine(monkeypatch, 1, 7.0, cpus=8)
    assert cpu_load.free_cores_now(set(range(8))) == 7
    assert cpu_load.free_cores_now({2, 3}) == 1
    assert cpu_load.free_cores_now({5}) == 0


def test_without_proc_there_is_no_reading(monkeypatch):
    real_open = open

    def no_proc(path, *args, **kwargs):
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr("builtins.open", no_proc)
    assert cpu_load.runnable_threads() is None and cpu_load.idle_ticks() is None
    assert cpu_load.free_cores_now({0, 1}) is None
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.2, 0.2))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert thread_pool.free_cores() == thread_pool.spare_cores() == 1  # the load average


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="Linux's /proc")
def test_the_readings_of_this_machine(monkeypatch):
    ticks = cpu_load.idle_ticks()
    assert set(os.sched_getaffinity(0)) <= set(ticks) and all(t >= 0 for t in ticks.values())
    assert cpu_load.runnable_threads() >= 1  # this thread
    monkeypatch.setattr(cpu_load, "_previous", [(0.0, ticks)])  # a long window, ending now
    idle = cpu_load.idle_cores(set(ticks))
    assert idle is not None and 0 <= idle <= len(ticks) + 0.1


def test_idle_time_is_read_over_windows_of_at_least_two_ticks(monkeypatch):
    clock = types.SimpleNamespace(now=10.0)
    monkeypatch.setattr(cpu_load, "time", types.SimpleNamespace(monotonic=lambda: clock.now))
    readings = iter([{0: 100, 1: 500}, {0: 100, 1: 502}, {0: 100, 1: 504}, {0: 101, 1: 506}])
    monkeypatch.setattr(cpu_load, "idle_ticks", lambda: next(readings))
    monkeypatch.setattr(cpu_load, "_previous", [])
    assert cpu_load.idle_cores({0, 1}) is None  # the first reading starts the window
    clock.now += 0.01
    assert cpu_load.idle_cores({0, 1}) is None  # too short: kept open
    clock.now += 0.03  # 40 ms in all, CPU 1 idle for 4 ticks of them
    assert cpu_load.idle_cores({0, 1}) == pytest.approx(1.0)
    clock.now += 0.04
    assert cpu_load.idle_cores({1}) == pytest.approx(0.5)  # from the last reading kept


@pytest.mark.parametrize("load,now,free", [
    (1.9, 1, 1),     # quiet now, though the average remembers a busy minute
    (1.9, 0, 0),
    (0.2, 0, 1),     # a core the average leaves free is used as before
    (0.2, None, 1),  # no /proc
    (1.0, None, 0),
])
def test_free_cores_is_the_load_average_or_more_when_the_machine_is_quiet_now(
        monkeypatch, load, now, free):
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(cpu_load, "free_cores_now", lambda cpus: now)
    assert thread_pool.free_cores() == free


def test_a_compile_reads_the_free_cores_once_and_its_parts_follow(monkeypatch):
    import numpy as np
    import functrans
    import functrans.numpy as jnp
    reads, decided = [], []
    monkeypatch.setattr(thread_pool, "free_cores", lambda: reads.append(1) or 0)
    real = parallel_compile._threads_and_parts

    def deciding(text, spare=None):
        decided.append(spare)
        return real(text, spare)
    monkeypatch.setattr(parallel_compile, "_threads_and_parts", deciding)
    monkeypatch.setattr(thread_pool, "spare_cores", lambda: 1)  # not asked again
    x = np.ones((64, 64), np.float32)
    closed = functrans.make_jaxpr(lambda x: jnp.tanh(x @ x).sum(axis=0))(x)
    pipeline.compile_jaxpr(closed, use_cache=False)
    assert reads == [1] and decided == [0]
