"""Multi-process runs: ``initialize()`` under ``mpirun``/``mpiexec`` joins the processes.

Every process runs the same program (SPMD). After ``initialize()``, ``functrans.devices()``
lists every process's CPU devices (process ``p`` owns global ids ``p * n .. p * n + n - 1``
for ``n`` local devices), and a ``pmap`` spans them all: each process passes its local
shards (leading axis = ``local_device_count()``), its device threads meet at a rendezvous
for each collective, and one thread per process carries the collective across processes
with MPI (Allreduce for psum/pmax/pmin, Allgather for the rest).

    $ FUNCTRANS_CPU_DEVICES=2 mpiexec -n 2 python train.py

    >>> import functrans
    >>> functrans.distributed.initialize()        # doctest: +SKIP
    >>> functrans.device_count()                  # doctest: +SKIP
    4

A process that fails ends the whole job within seconds: an uncaught exception (in any
thread) or an exit with a non-zero status (``sys.exit(n)``, ``raise SystemExit(n)``) makes
it call ``MPI_Abort`` on ``COMM_WORLD``
after printing what went wrong with its rank (``initialize(abort_on_failure=False)`` or
``FUNCTRANS_ABORT_ON_FAILURE=0`` turns this off). Every MPI operation also waits at most
:func:`collective_timeout` seconds (``FUNCTRANS_COLLECTIVE_TIMEOUT``, default 300, or
``initialize(timeout=...)``), so a process that hangs, exits with status 0 early, or takes
another path makes the others fail with :class:`DistributedTimeoutError` instead of hanging.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
import time

import numpy as np
from functrans._config import config

_state = {"process_index": 0, "process_count": 1, "comm": None, "timeout": None}
_mpi_lock = threading.Lock()
# called when this process joins or leaves a multi-process run (functrans._devices drops
# its device list then: the devices of every process are listed)
_membership_listeners: list = []


def on_membership_change(callback) -> None:
    """Call ``callback()`` whenever :func:`initialize` or :func:`shutdown` changes which
    processes take part."""
    _membership_listeners.append(callback)


def _membership_changed() -> None:
    for callback in _membership_listeners:
        callback()


class DistributedTimeoutError(RuntimeError):
    """Another process (or device thread) did not reach a collective in time."""


def process_index() -> int:
    """This process's rank (0 when not running distributed)."""
    return _state["process_index"]


def process_count() -> int:
    """How many processes take part (1 when not running distributed)."""
    return _state["process_count"]


def is_initialized() -> bool:
    """Whether :func:`initialize` has joined this process to an MPI run."""
    return _state["comm"] is not None


def collective_timeout() -> float:
    """Seconds a collective waits for the other participants before failing."""
    if _state["timeout"] is not None:
        return float(_state["timeout"])
    value = os.environ.get("FUNCTRANS_COLLECTIVE_TIMEOUT", "").strip()
    return float(value) if value else 300.0


def _mpi():
    try:
        from mpi4py import MPI
    except Exception as err:  # mpi4py raises RuntimeError when no MPI library is found
        raise RuntimeError(
            "functrans.distributed needs mpi4py and an MPI library; install them with "
            "`pip install mpi4py mpich` and launch with `mpiexec -n N python prog.py`") from err
    return MPI


def initialize(coordinator_address=None, num_processes: int | None = None,
               process_id: int | None = None, local_device_ids=None, *,
               timeout: float | None = None, abort_on_failure: bool | None = None) -> None:
    """Join the processes of an MPI launch (``mpiexec -n N python prog.py``).

    Call it once, at the start of the program, before any device is used. The arguments of
    ``jax.distributed.initialize`` are accepted; MPI already knows the process count and
    ranks, so ``num_processes``/``process_id`` are only checked against it.
    ``coordinator_address`` and ``local_device_ids`` are ignored. Every process must have
    the same number of CPU devices (``FUNCTRANS_CPU_DEVICES``).

    ``timeout`` sets :func:`collective_timeout`. With ``abort_on_failure`` (the default;
    ``FUNCTRANS_ABORT_ON_FAILURE=0`` changes it) and more than one process, a process that
    fails takes the whole job down at once instead of leaving the others waiting in their
    next collective until the timeout: an exception that reaches ``sys.excepthook`` or
    ``threading.excepthook``, or a ``SystemExit`` with a non-zero status that ends the
    program (``sys.exit(n)``, ``raise SystemExit(n)``, ``exit(n)``), prints the process's
    rank (and the traceback) and calls ``MPI_Abort`` on ``COMM_WORLD`` with the exit status
    (1 for an exception), so every process exits with a non-zero status. Exceptions the
    program catches, an exit with status 0 and a normal end change nothing.
    The hooks chain to the ones installed before; a hook installed later should call the
    one it replaces. See docs/pmap.md, "When a process fails".

        >>> import functrans
        >>> functrans.distributed.initialize()     # doctest: +SKIP
        >>> functrans.process_index(), functrans.process_count()   # doctest: +SKIP
        (0, 2)
    """
    if _state["comm"] is not None:
        raise RuntimeError("functrans.distributed.initialize() should only be called once")
    MPI = _mpi()
    comm = MPI.COMM_WORLD.Dup()
    rank, size = comm.Get_rank(), comm.Get_size()
    if num_processes is not None and int(num_processes) != size:
        raise ValueError(f"initialize: num_processes={num_processes} but MPI launched {size}")
    if process_id is not None and int(process_id) != rank:
        raise ValueError(f"initialize: process_id={process_id} but this MPI rank is {rank}")
    if timeout is not None:
        _state["timeout"] = float(timeout)
    count = int(config.cpu_device_count)
    counts = _gather_object(comm, count, "initialize")
    if len(set(counts)) != 1:
        raise ValueError("initialize: every process needs the same number of CPU devices "
                         f"(FUNCTRANS_CPU_DEVICES); the processes have {counts}")
    _state.update(process_index=rank, process_count=size, comm=comm)
    _membership_changed()
    if abort_on_failure is None:
        abort_on_failure = _env_abort_on_failure()
    # (one process alone has nobody waiting for it)
    if abort_on_failure and size > 1:
        _failure_guard.install()


def shutdown() -> None:
    """Leave the multi-process run (this process then acts alone again)."""
    _failure_guard.uninstall()
    comm = _state["comm"]
    if comm is not None:
        try:
            comm.Free()
        except Exception:
            pass
    _state.update(process_index=0, process_count=1, comm=None)
    _membership_changed()


# =============================================================================================
# One failing process ends the job
# =============================================================================================
#
# Without this, a process that raises prints its traceback and then blocks in MPI_Finalize
# (mpi4py calls it at exit) until the others finalize too, while they wait for it in their
# next collective: the job ends only when their collective timeout passes. MPI_Abort instead
# makes the launcher kill every process at once. (A process killed by a signal never reaches
# MPI_Finalize, and the launcher already ends the job when it sees that.)


# how long a process that aborts the job from a thread waits for its output to be forwarded
_FORWARD_SECONDS = 0.25


def _env_abort_on_failure() -> bool:
    value = os.environ.get("FUNCTRANS_ABORT_ON_FAILURE", "").strip().lower()
    return value not in ("0", "false", "no", "off")


def _exit_status(code) -> int:
    """The status a process exits with for ``SystemExit(code)``, as the interpreter computes it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    return 1        # the interpreter prints a non-integer code and exits with 1


class _FailureGuard:
    """The hooks that turn this process's uncaught failure into ``MPI_Abort`` of the job."""

    def __init__(self):
        self.installed = False
        self._aborting = False
        self._previous_excepthook = None
        self._previous_threading_excepthook = None
        self._previous_exit = None
        self._exit_status_watch = None

    def install(self) -> None:
        self._aborting = False
        self._previous_excepthook, sys.excepthook = sys.excepthook, self._excepthook
        self._previous_threading_excepthook = threading.excepthook
        threading.excepthook = self._threading_excepthook
        self._previous_exit, sys.exit = sys.exit, self._exit
        self._exit_status_watch = _ExitStatusWatch.install(self)
        atexit.register(self._at_exit)
        self.installed = True

    def uninstall(self) -> None:
        if not self.installed:
            return
        self.installed = False
        # Put back only what is still ours: a hook installed later stays (and, chaining to
        # ours, reaches the previous one through it).
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._previous_excepthook
        if threading.excepthook == self._threading_excepthook:
            threading.excepthook = self._previous_threading_excepthook
        if sys.exit == self._exit:
            sys.exit = self._previous_exit
        if self._exit_status_watch is not None:
            self._exit_status_watch.uninstall()
            self._exit_status_watch = None
        atexit.unregister(self._at_exit)

    def _excepthook(self, exc_type, exc, tb) -> None:
        """An uncaught exception in the main thread: the program is ending."""
        if not self.installed:
            return self._previous_excepthook(exc_type, exc, tb)
        _announce_abort(f"stopped by an uncaught {exc_type.__name__}")
        try:
            self._previous_excepthook(exc_type, exc, tb)
        finally:
            self._abort_at_exit(130 if issubclass(exc_type, KeyboardInterrupt) else 1)

    def _threading_excepthook(self, args) -> None:
        """An uncaught exception in another thread. The main thread goes on (and may wait
        forever for that thread's work), so the job is aborted now."""
        if not self.installed or issubclass(args.exc_type, SystemExit):
            # (SystemExit ends only its thread, and the default hook ignores it)
            return self._previous_threading_excepthook(args)
        thread = args.thread.name if args.thread is not None else "a thread"
        _announce_abort(f"had an uncaught {args.exc_type.__name__} in thread {thread!r}")
        try:
            self._previous_threading_excepthook(args)
        finally:
            _flush_std_streams()
            # the launcher forwards output asynchronously and stops forwarding when the job
            # is aborted: a moment for the traceback just written to reach the user
            time.sleep(_FORWARD_SECONDS)
            _mpi().COMM_WORLD.Abort(1)

    def _exit(self, status=None):
        """``sys.exit`` while the guard is installed: the same exit. The C function leaves
        its status unwrapped, which the interpreter would read without asking
        ``SystemExit.code``; caught and raised again here, it is a ``SystemExit`` instance
        that :class:`_ExitStatusWatch` sees if it ends the program."""
        try:
            self._previous_exit(status)
        except SystemExit:
            raise

    def _exiting_with(self, status: int) -> None:
        if self.installed and status != 0 and not self._aborting:
            _announce_abort(f"is exiting with status {status}")
            self._abort_at_exit(status)

    def _at_exit(self) -> None:
        # A hook installed after ours that does not chain to it still leaves the uncaught
        # exception in sys.last_value.
        if self.installed and not self._aborting and getattr(sys, "last_value", None) is not None:
            _announce_abort(f"stopped by an uncaught {type(sys.last_value).__name__}")
            self._abort_at_exit(1)

    def _abort_at_exit(self, status: int) -> None:
        """Have mpi4py call MPI_Abort instead of MPI_Finalize as the process exits, after the
        atexit handlers have run (``mpi4py.run.set_abort_status``)."""
        self._aborting = True
        from mpi4py import run
        run.set_abort_status(status)


class _ExitStatusWatch:
    """``SystemExit.code`` while the guard is installed: the status a program ends with.

    The interpreter tells Python code the status only in one place: when a ``SystemExit``
    ends the program, the interpreter reads its ``code`` attribute, from C, with no Python
    frame left, before the ``atexit`` handlers run. ``sys.exit(n)``, ``raise SystemExit(n)``
    and the ``exit(n)`` builtin all end there, and a ``SystemExit`` a program catches never
    does. So this descriptor takes the place of ``SystemExit``'s own ``code`` member (in the
    type's dictionary, which Python code cannot assign to) and hands every read to it,
    reporting the status of a read with no Python caller in the main thread.
    """

    # held by the class: the read comes late, when module globals may be going away
    _getframe = staticmethod(sys._getframe)

    def __init__(self, guard: _FailureGuard, previous):
        self.guard, self.previous = guard, previous
        self.__doc__ = getattr(previous, "__doc__", None)

    @classmethod
    def install(cls, guard: _FailureGuard):
        """Put a watch in place of ``SystemExit.code``; None where the interpreter does not
        allow it (then only exceptions and the thread hook abort the job)."""
        try:
            watch = cls(guard, _type_namespace(SystemExit)["code"])
            _set_type_attribute(SystemExit, "code", watch)
        except Exception:  # noqa: BLE001 - not CPython: no watch, nothing else changes
            return None
        return watch

    def uninstall(self) -> None:
        namespace = _type_namespace(SystemExit)
        if namespace.get("code") is self:  # a watch installed after ours stays
            _set_type_attribute(SystemExit, "code", self.previous)

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        code = self.previous.__get__(instance, owner)
        if self._getframe(0).f_back is None and \
                threading.current_thread() is threading.main_thread():
            self.guard._exiting_with(_exit_status(code))
        return code

    def __set__(self, instance, value) -> None:
        self.previous.__set__(instance, value)

    def __delete__(self, instance) -> None:
        self.previous.__delete__(instance)


def _type_namespace(cls: type) -> dict:
    """The dictionary behind ``cls.__dict__`` (a read-only view for built-in types)."""
    import gc  # deferred: needed only while the guard is installed
    namespaces = [d for d in gc.get_referents(cls.__dict__) if isinstance(d, dict)]
    if len(namespaces) != 1:
        raise RuntimeError(f"cannot reach the namespace of {cls.__name__}")
    return namespaces[0]


def _set_type_attribute(cls: type, name: str, value) -> None:
    import ctypes  # deferred: needed only while the guard is installed
    _type_namespace(cls)[name] = value
    ctypes.pythonapi.PyType_Modified(ctypes.py_object(cls))  # drops cached look-ups


def _flush_std_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:   # a closed or replaced stream must not stop the abort
            pass


def _announce_abort(what: str) -> None:
    rank, count = process_index(), process_count()
    _flush_std_streams()
    if sys.stderr is not None:
        sys.stderr.write(f"functrans.distributed: process {rank} of {count} {what}; aborting "
                         f"all {count} processes (MPI_Abort)\n")
        _flush_std_streams()


_failure_guard = _FailureGuard()


# =============================================================================================
# MPI operations with a deadline (used by the pmap runtime)
# =============================================================================================


def _wait(request, what: str) -> None:
    """Poll a non-blocking MPI request until it completes or the timeout passes."""
    timeout = collective_timeout()
    deadline = time.monotonic() + timeout
    spins = 0
    while not request.Test():
        spins += 1
        if spins > 200:
            if time.monotonic() > deadline:
                raise DistributedTimeoutError(
                    f"{what}: process {process_index()} of {process_count()} waited more than "
                    f"{timeout:g} s for the other processes; one of them failed, exited, or "
                    "took a different path through the program")
            time.sleep(0.0002 if spins < 5000 else 0.002)


def _gather_object(comm, value, what: str) -> list:
    """All processes' ``value`` (a small picklable object) in rank order."""
    import pickle
    # A fixed-size exchange of the pickled lengths, then the bytes themselves.
    payload = np.frombuffer(pickle.dumps(value), dtype=np.uint8)
    sizes = np.empty(comm.Get_size(), np.int64)
    _wait(comm.Iallgather(np.array([payload.size], np.int64), sizes), what)
    buffer = np.empty(int(sizes.sum()), np.uint8)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    _wait(comm.Iallgatherv(payload, [buffer, (sizes, offsets)]), what)
    return [pickle.loads(buffer[o:o + s].tobytes()) for o, s in zip(offsets, sizes)]


_REDUCE_VIA_F32 = ("float16", "bfloat16")


def allreduce(x: np.ndarray, op: str, what: str = "allreduce") -> np.ndarray:
    """Elementwise ``op`` ("sum", "max" or "min") of ``x`` over all processes."""
    comm = _state["comm"]
    if comm is None:
        return x
    MPI = _mpi()
    mpi_op = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]
    dtype = x.dtype
    send = np.ascontiguousarray(x)
    if dtype.name in _REDUCE_VIA_F32:
        send = send.astype(np.float32)
    elif dtype == np.bool_:
        send = send.astype(np.uint8)
    recv = np.empty_like(send)
    with _mpi_lock:
        _wait(comm.Iallreduce(send, recv, op=mpi_op), what)
    # (ascontiguousarray makes 0-d arrays 1-d: restore the shape)
    return recv.astype(dtype, copy=False).reshape(x.shape)


def allgather(x: np.ndarray, what: str = "allgather") -> np.ndarray:
    """Every process's ``x`` (same shape and dtype everywhere) stacked along a new axis 0."""
    comm = _state["comm"]
    if comm is None:
        return x[None]
    count = comm.Get_size()
    send = np.ascontiguousarray(x)
    if send.nbytes == 0:
        return np.broadcast_to(send, (count,) + send.shape).copy()
    raw = send.view(np.uint8).reshape(-1)
    recv = np.empty(count * raw.size, np.uint8)
    with _mpi_lock:
        _wait(comm.Iallgather(raw, recv), what)
    return recv.view(x.dtype).reshape((count,) + x.shape)
