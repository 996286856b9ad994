"""NCCL collectives over GPUs, through CuPy's bindings (``cupy.cuda.nccl``).

A :class:`DeviceGroup` holds one NCCL communicator per GPU of this process that takes part
in a group of ``size`` ranks. The group may span one process (every GPU is local:
:meth:`DeviceGroup.single_process`, built with ``ncclCommInitAll``) or several processes
launched by MPI (:meth:`DeviceGroup.from_mpi`: rank 0 makes the NCCL unique id, MPI
broadcasts it, every process joins with its global ranks). The collectives take one CuPy
array per local GPU (in the order of ``local_devices``) and return one per local GPU; all
calls of one collective are issued inside an NCCL group, so a single thread drives all local
GPUs without deadlock.

These are the entry points ``pmap`` uses for ``psum``/``pmean``/``pmax``/``pmin``
(:meth:`~DeviceGroup.all_reduce`), ``all_gather``, ``psum_scatter``
(:meth:`~DeviceGroup.reduce_scatter`), ``all_to_all`` and ``ppermute``.

    >>> group = DeviceGroup.single_process([0, 1])            # doctest: +SKIP
    >>> xs = [cupy.ones(4, cupy.float32) for _ in range(2)]    # doctest: +SKIP
    >>> [x.get() for x in group.all_reduce(xs)]                # doctest: +SKIP
    [array([2., 2., 2., 2.], dtype=float32), array([2., 2., 2., 2.], dtype=float32)]
"""
from __future__ import annotations

import contextlib

import numpy as np

from functrans import distributed
from functrans.backends.cuda.runtime import cupy_module

_REDUCE_OPS = ("sum", "prod", "max", "min", "avg")


def _nccl():
    cp = cupy_module()
    if cp is None:
        raise RuntimeError("NCCL collectives need CuPy: pip install functrans[cuda]")
    try:
        from cupy.cuda import nccl
    except ImportError as err:
        raise RuntimeError("this CuPy was built without NCCL; install a CuPy wheel with NCCL "
                           "support (cupy-cuda12x) and NCCL itself (pip install nvidia-nccl-cu12)"
                           ) from err
    if not getattr(cp.cuda, "nccl_enabled", True) or not getattr(nccl, "available", True):
        raise RuntimeError("CuPy cannot load the NCCL library: pip install nvidia-nccl-cu12")
    return cp, nccl


# NumPy dtypes NCCL reduces and moves natively, with the name of their NCCL constant (bool
# travels as uint8: its bytes are 0 or 1, so max/min over them are or/and). Kept free of CuPy
# so that pmap's plan of NCCL calls can be checked on any machine.
NCCL_TYPE_NAMES = {
    np.dtype(np.int8): "NCCL_INT8", np.dtype(np.uint8): "NCCL_UINT8",
    np.dtype(np.bool_): "NCCL_UINT8", np.dtype(np.int32): "NCCL_INT32",
    np.dtype(np.uint32): "NCCL_UINT32", np.dtype(np.int64): "NCCL_INT64",
    np.dtype(np.uint64): "NCCL_UINT64", np.dtype(np.float16): "NCCL_FLOAT16",
    np.dtype(np.float32): "NCCL_FLOAT32", np.dtype(np.float64): "NCCL_FLOAT64",
}


def nccl_dtype(dtype) -> int:
    """The NCCL datatype constant of a NumPy dtype (bool travels as uint8)."""
    _, nccl = _nccl()
    name = NCCL_TYPE_NAMES.get(np.dtype(dtype))
    if name is None:
        raise NotImplementedError(f"NCCL collectives: dtype {np.dtype(dtype).name} is not "
                                  "supported")
    return getattr(nccl, name)


def nccl_op(op: str) -> int:
    _, nccl = _nccl()
    if op not in _REDUCE_OPS:
        raise ValueError(f"NCCL reduction must be one of {_REDUCE_OPS}, got {op!r}")
    code = {"sum": nccl.NCCL_SUM, "prod": nccl.NCCL_PROD, "max": nccl.NCCL_MAX,
            "min": nccl.NCCL_MIN, "avg": getattr(nccl, "NCCL_AVG", None)}[op]
    if code is None:
        raise NotImplementedError("NCCL reduction 'avg' needs NCCL >= 2.10")
    return code


def get_unique_id():
    """A fresh NCCL unique id (made by one rank, then sent to the others)."""
    _, nccl = _nccl()
    return nccl.get_unique_id()


class DeviceGroup:
    """NCCL communicators of this process's GPUs in a group of ``size`` ranks.

    ``local_devices[i]`` (a CUDA device ordinal) has global rank ``ranks[i]`` and
    communicator ``comms[i]``."""

    def __init__(self, comms, local_devices, ranks, size: int):
        self.comms = list(comms)
        self.local_devices = [int(d) for d in local_devices]
        self.ranks = [int(r) for r in ranks]
        self.size = int(size)

    # ---- construction ------------------------------------------------------------------------

    @classmethod
    def single_process(cls, device_ids) -> "DeviceGroup":
        """Every rank is a GPU of this process: rank ``i`` is ``device_ids[i]``. One GPU is a
        valid group (its collectives are copies)."""
        _, nccl = _nccl()
        device_ids = [int(d) for d in device_ids]
        comms = nccl.NcclCommunicator.initAll(device_ids)
        return cls(comms, device_ids, range(len(device_ids)), len(device_ids))

    @classmethod
    def from_unique_id(cls, unique_id, size: int, local_devices, ranks) -> "DeviceGroup":
        """Join a group whose id another process made: one communicator per local GPU."""
        cp, nccl = _nccl()
        comms = []
        # NcclCommunicator() blocks until every rank joins: create ours inside a group
        nccl.groupStart()
        try:
            for device, rank in zip(local_devices, ranks):
                with cp.cuda.Device(int(device)):
                    comms.append(nccl.NcclCommunicator(int(size), unique_id, int(rank)))
        finally:
            nccl.groupEnd()
        return cls(comms, local_devices, ranks, size)

    @classmethod
    def from_mpi(cls, local_devices=None, mpi_comm=None) -> "DeviceGroup":
        """The group of every GPU of every MPI process (``mpirun -n N``). Process ``p`` with
        ``n`` local GPUs owns global ranks ``p * n .. p * n + n - 1`` (every process must see
        the same number). Rank 0 makes the unique id; MPI broadcasts it."""
        cp, _ = _nccl()
        if mpi_comm is None:
            mpi_comm = distributed._state.get("comm")
            if mpi_comm is None:
                from mpi4py import MPI  # an optional dependency, needed only under MPI
                mpi_comm = MPI.COMM_WORLD
        if local_devices is None:
            local_devices = list(range(cp.cuda.runtime.getDeviceCount()))
        local_devices = [int(d) for d in local_devices]
        counts = mpi_comm.allgather(len(local_devices))
        if len(set(counts)) != 1:
            raise RuntimeError(f"every process must use the same number of GPUs, got {counts}")
        n, process = len(local_devices), mpi_comm.Get_rank()
        unique_id = get_unique_id() if process == 0 else None
        unique_id = mpi_comm.bcast(unique_id, root=0)
        ranks = [process * n + i for i in range(n)]
        return cls.from_unique_id(unique_id, n * mpi_comm.Get_size(), local_devices, ranks)

    def close(self) -> None:
        for c in self.comms:
            c.destroy()
        self.comms = []

    # ---- plumbing ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _group(self):
        _, nccl = _nccl()
        nccl.groupStart()
        try:
            yield
        finally:
            nccl.groupEnd()

    def _check(self, arrays, what: str):
        cp, _ = _nccl()
        if len(arrays) != len(self.comms):
            raise ValueError(f"{what}: expected one array per local GPU ({len(self.comms)}), "
                             f"got {len(arrays)}")
        shapes = {(a.shape, a.dtype) for a in arrays}
        if len(shapes) != 1:
            raise ValueError(f"{what}: every GPU's array must have one shape and dtype, got {shapes}")
        out = []
        for a, device in zip(arrays, self.local_devices):
            if not isinstance(a, cp.ndarray) or a.device.id != device:
                raise ValueError(f"{what}: the array for GPU {device} must be a CuPy array on it")
            with cp.cuda.Device(device):  # a copy, if one is needed, runs on the array's GPU
                out.append(cp.ascontiguousarray(a))
        return cp, out

    @staticmethod
    def _stream(cp) -> int:
        return cp.cuda.get_current_stream().ptr

    def _issue(self, arrays, what: str, new_out, call) -> list:
        """One collective: for each local GPU, ``out = new_out(cp, a)`` on that GPU, then
        ``call(comm, a, out, rank, dtype, stream)`` issues its NCCL calls, all of them in one
        NCCL group (so this one thread drives every local GPU without deadlock)."""
        cp, arrays = self._check(arrays, what)
        dtype = nccl_dtype(arrays[0].dtype)
        outs = []
        with self._group():
            for comm, a, rank, device in zip(self.comms, arrays, self.ranks,
                                             self.local_devices):
                with cp.cuda.Device(device):
                    out = new_out(cp, a)
                    call(comm, a, out, rank, dtype, self._stream(cp))
                    outs.append(out)
        return outs

    def _check_rows(self, arrays, what: str) -> None:
        a0 = arrays[0]
        if a0.ndim == 0 or a0.shape[0] != self.size:
            raise ValueError(f"{what}: leading axis must be the group size {self.size}, "
                             f"got shape {a0.shape}")

    # ---- collectives -------------------------------------------------------------------------

    def all_reduce(self, arrays, op: str = "sum") -> list:
        """Every rank gets the elementwise ``op`` (sum, prod, max, min, avg) over all ranks."""
        return self._issue(arrays, "all_reduce", lambda cp, a: cp.empty_like(a),
                           lambda comm, a, out, rank, dtype, stream: comm.allReduce(
                               a.data.ptr, out.data.ptr, a.size, dtype, nccl_op(op), stream))

    def all_gather(self, arrays) -> list:
        """Every rank gets ``stack([x_0, ..., x_{size-1}])`` (shape ``(size, *x.shape)``)."""
        return self._issue(arrays, "all_gather",
                           lambda cp, a: cp.empty((self.size,) + a.shape, a.dtype),
                           lambda comm, a, out, rank, dtype, stream: comm.allGather(
                               a.data.ptr, out.data.ptr, a.size, dtype, stream))

    def reduce_scatter(self, arrays, op: str = "sum") -> list:
        """Input shape ``(size, *s)``; rank ``r`` gets ``op`` over ranks of ``x[r]`` (shape s)."""
        self._check_rows(arrays, "reduce_scatter")
        return self._issue(arrays, "reduce_scatter", lambda cp, a: cp.empty(a.shape[1:], a.dtype),
                           lambda comm, a, out, rank, dtype, stream: comm.reduceScatter(
                               a.data.ptr, out.data.ptr, out.size, dtype, nccl_op(op), stream))

    def broadcast(self, arrays, root: int = 0) -> list:
        """Every rank gets rank ``root``'s array."""
        return self._issue(arrays, "broadcast", lambda cp, a: cp.empty_like(a),
                           lambda comm, a, out, rank, dtype, stream: comm.broadcast(
                               a.data.ptr, out.data.ptr, a.size, dtype, int(root), stream))

    def all_to_all(self, arrays) -> list:
        """Input shape ``(size, *s)``: rank ``r`` sends ``x[j]`` to rank ``j`` and receives
        rank ``j``'s ``x[r]`` into ``out[j]`` (grouped sends and receives)."""
        self._check_rows(arrays, "all_to_all")
        chunk = arrays[0].size // self.size

        def exchange(comm, a, out, rank, dtype, stream):
            for peer in range(self.size):
                step = chunk * a.itemsize * peer
                comm.send(a.data.ptr + step, chunk, dtype, peer, stream)
                comm.recv(out.data.ptr + step, chunk, dtype, peer, stream)
        return self._issue(arrays, "all_to_all", lambda cp, a: cp.empty_like(a), exchange)

    def permute(self, arrays, perm) -> list:
        """``ppermute``: for each ``(source, destination)`` pair of global ranks, the source's
        array goes to the destination; ranks that receive nothing get zeros."""
        perm = [(int(s), int(d)) for s, d in perm]
        if len({d for _, d in perm}) != len(perm) or len({s for s, _ in perm}) != len(perm):
            raise ValueError(f"permute: sources and destinations must be unique, got {perm}")

        def exchange(comm, a, out, rank, dtype, stream):
            for source, dest in perm:
                if source == rank:
                    comm.send(a.data.ptr, a.size, dtype, dest, stream)
                if dest == rank:
                    comm.recv(out.data.ptr, a.size, dtype, source, stream)
        return self._issue(arrays, "permute", lambda cp, a: cp.zeros_like(a), exchange)
