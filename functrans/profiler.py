"""Profiling: a timeline of what functrans runs, for Perfetto, ``chrome://tracing`` or
TensorBoard's profile plugin (as ``jax.profiler``).

While a trace is running, every call of a jitted function (with its name and the time it
took), every tracing and compilation, and every :class:`TraceAnnotation` span is recorded
with the thread that ran it. :func:`stop_trace` writes them as a Chrome trace-event file,
``<log_dir>/plugins/profile/<run>/<host>.trace.json.gz`` (the layout TensorBoard reads;
``ui.perfetto.dev`` opens the file directly).

    >>> import functrans, functrans.numpy as jnp, tempfile
    >>> f = functrans.jit(lambda x: jnp.sin(x) * 2)
    >>> with functrans.profiler.trace(tempfile.mkdtemp()):
    ...     with functrans.profiler.TraceAnnotation("step"):
    ...         _ = f(jnp.ones(3)).block_until_ready()

Compiled code is one event per call: the loops inside a program are not broken down.
"""
from __future__ import annotations

import contextlib
import functools
import gzip
import json
import os
import pathlib
import socket
import threading
import time

__all__ = ["StepTraceAnnotation", "TraceAnnotation", "annotate_function",
           "device_memory_profile", "save_device_memory_profile", "start_server",
           "start_trace", "stop_server", "stop_trace", "trace"]


class _Recorder:
    """The events of one running trace (complete events: a name, a start and a length)."""

    def __init__(self, log_dir: pathlib.Path, perfetto_trace: bool, perfetto_link: bool):
        self.log_dir = log_dir
        self.perfetto_trace = perfetto_trace
        self.perfetto_link = perfetto_link
        self.origin_ns = time.perf_counter_ns()
        self.events: list[dict] = []
        self.threads: dict[int, str] = {}
        self.lock = threading.Lock()

    def add(self, name: str, category: str, start_ns: int, end_ns: int, args=None) -> None:
        thread = threading.current_thread()
        event = {"name": name, "cat": category, "ph": "X", "pid": os.getpid(),
                 "tid": thread.ident, "ts": (start_ns - self.origin_ns) / 1e3,
                 "dur": max(end_ns - start_ns, 0) / 1e3}
        if args:
            event["args"] = {k: str(v) for k, v in args.items()}
        with self.lock:
            self.events.append(event)
            self.threads.setdefault(thread.ident, thread.name)

    def document(self) -> dict:
        pid = os.getpid()
        names = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": "functrans"}}]
        names += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                   "args": {"name": name}} for tid, name in self.threads.items()]
        return {"displayTimeUnit": "ns", "traceEvents": names + self.events}


_recorder: _Recorder | None = None
_lock = threading.Lock()


def is_tracing() -> bool:
    """Whether a trace is being recorded (the jit call path asks before timing a call)."""
    return _recorder is not None


def record(name: str, category: str, start_ns: int, end_ns: int, args=None) -> None:
    """Add an event (times from ``time.perf_counter_ns``) to the running trace, if any."""
    recorder = _recorder
    if recorder is not None:
        recorder.add(name, category, start_ns, end_ns, args)


def start_trace(log_dir, create_perfetto_link: bool = False, create_perfetto_trace: bool = False,
                profiler_options=None) -> None:
    """Start recording a trace, written to ``log_dir`` by :func:`stop_trace`.

    ``create_perfetto_trace`` also writes ``perfetto_trace.json.gz`` beside it;
    ``create_perfetto_link`` prints where the file is and how to open it in the Perfetto UI
    (nothing is uploaded). ``profiler_options`` (device tracer levels) has no meaning here
    and must be None."""
    global _recorder
    if profiler_options is not None:
        raise ValueError("start_trace: profiler_options are not supported (functrans records "
                         "host events only); pass None")
    with _lock:
        if _recorder is not None:
            raise RuntimeError("Profile has already been started. Only one profile may be run "
                               "at a time.")
        _recorder = _Recorder(pathlib.Path(os.fspath(log_dir)), bool(create_perfetto_trace),
                              bool(create_perfetto_link))


def stop_trace() -> None:
    """Stop the running trace and write it (see the module docstring)."""
    global _recorder
    with _lock:
        recorder, _recorder = _recorder, None
    if recorder is None:
        raise RuntimeError("No profile started")
    run = time.strftime("%Y_%m_%d_%H_%M_%S")
    folder = recorder.log_dir / "plugins" / "profile" / run
    folder.mkdir(parents=True, exist_ok=True)
    payload = json.dumps(recorder.document()).encode()
    path = folder / f"{socket.gethostname()}.trace.json.gz"
    path.write_bytes(gzip.compress(payload))
    if recorder.perfetto_trace or recorder.perfetto_link:
        perfetto = folder / "perfetto_trace.json.gz"
        perfetto.write_bytes(gzip.compress(payload))
        if recorder.perfetto_link:
            print(f"functrans.profiler: the trace is {perfetto}; open it at "
                  "https://ui.perfetto.dev (Open trace file).")


@contextlib.contextmanager
def trace(log_dir, create_perfetto_link: bool = False, create_perfetto_trace: bool = False,
          profiler_options=None):
    """Record a trace of the ``with`` block (:func:`start_trace` ... :func:`stop_trace`)."""
    start_trace(log_dir, create_perfetto_link, create_perfetto_trace, profiler_options)
    try:
        yield
    finally:
        stop_trace()


class TraceAnnotation:
    """A named span of the host timeline: ``with TraceAnnotation("load batch"): ...``.
    Keyword arguments are shown with the event. Costs nothing when no trace runs."""

    def __init__(self, name: str, **kwargs):
        self.name = name
        self.kwargs = kwargs
        self._start = 0

    def __enter__(self):
        self._start = time.perf_counter_ns()
        return self

    def __exit__(self, *exc):
        record(self.name, "annotation", self._start, time.perf_counter_ns(), self.kwargs)
        return False


class StepTraceAnnotation(TraceAnnotation):
    """A :class:`TraceAnnotation` for one training step: ``StepTraceAnnotation("train",
    step_num=step)``."""

    def __init__(self, name: str, **kwargs):
        super().__init__(name, **kwargs)


def annotate_function(func, name: str | None = None, **decorator_kwargs):
    """``func`` with each call recorded as a :class:`TraceAnnotation` (named after it)."""
    label = name or getattr(func, "__qualname__", None) or getattr(func, "__name__", "function")

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with TraceAnnotation(label, **decorator_kwargs):
            return func(*args, **kwargs)
    return wrapper


def start_server(port: int, requires_backend: bool = True):
    """JAX's remote profiling server (for TensorBoard's capture button) is not available:
    record a trace with :func:`trace` instead."""
    raise NotImplementedError("functrans.profiler.start_server: there is no profiling server; "
                              "record a trace with functrans.profiler.trace(log_dir) and open "
                              "the file it writes in TensorBoard or Perfetto")


def stop_server() -> None:
    raise NotImplementedError("functrans.profiler.stop_server: there is no profiling server "
                              "(see start_server)")


def device_memory_profile(backend: str | None = None) -> bytes:
    """JAX's pprof-format device memory profile is not available; ``functrans.live_arrays()``
    lists the arrays that hold memory."""
    raise NotImplementedError("functrans.profiler.device_memory_profile: no pprof memory "
                              "profile is produced; use functrans.live_arrays() to see which "
                              "arrays hold memory")


def save_device_memory_profile(filename, backend: str | None = None) -> None:
    device_memory_profile(backend)
