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

Every MPI operation waits at most :func:`collective_timeout` seconds
(``FUNCTRANS_COLLECTIVE_TIMEOUT``, default 300, or ``initialize(timeout=...)``), so a process
that died or took another path makes the others fail with :class:`DistributedTimeoutError`
instead of hanging.
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np

_state = {"process_index": 0, "process_count": 1, "comm": None, "timeout": None}
_mpi_lock = threading.Lock()


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
               timeout: float | None = None) -> None:
    """Join the processes of an MPI launch (``mpiexec -n N python prog.py``).

    Call it once, at the start of the program, before any device is used. The arguments of
    ``jax.distributed.initialize`` are accepted; MPI already knows the process count and
    ranks, so ``num_processes``/``process_id`` are only checked against it.
    ``coordinator_address`` and ``local_device_ids`` are ignored. Every process must have
    the same number of CPU devices (``FUNCTRANS_CPU_DEVICES``).

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
    from functrans import _devices
    from functrans._config import config
    count = int(config.cpu_device_count)
    counts = _gather_object(comm, count, "initialize")
    if len(set(counts)) != 1:
        raise ValueError("initialize: every process needs the same number of CPU devices "
                         f"(FUNCTRANS_CPU_DEVICES); the processes have {counts}")
    _state.update(process_index=rank, process_count=size, comm=comm)
    _devices._reset_cpu_devices()


def shutdown() -> None:
    """Leave the multi-process run (this process then acts alone again)."""
    comm = _state["comm"]
    if comm is not None:
        try:
            comm.Free()
        except Exception:
            pass
    _state.update(process_index=0, process_count=1, comm=None)
    from functrans import _devices
    _devices._reset_cpu_devices()


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
