"""The collective interface of the SPMD runtime (``_spmd.py``): communicators.

When the device threads of a program meet at a collective, the last one to arrive hands
every local member's operand to a *communicator*, which returns every local member's
result. ``communicator.collective(primitive, params, arrays)`` is the one entry point; a
communicator builds it from the transfers its transport offers (``all_reduce``,
``all_gather``, ...), one array per member of this process in, one per member out. Three
implementations:

- :class:`LocalCommunicator`: the CPU devices of one process. Every member's operand is
  already here, so a collective is its reference semantics, the primitive's
  ``group_impl``.
- :class:`MpiCommunicator`: this process's members of a run of several processes
  (``functrans.distributed``). Reductions reduce locally, then one MPI Allreduce; the
  other collectives gather every member's operand (one MPI Allgather) and each process
  computes its own members' results.
- GPUs, over NCCL: ``functrans.backends.cuda.nccl.DeviceGroup`` is the transport (the same
  ``all_reduce``/``all_gather``/``reduce_scatter``/``all_to_all``/``permute``/``broadcast``,
  one CuPy array per local GPU), and ``pmap_support.run_collective`` turns a collective
  primitive into its calls (the GPU placement's ``collective``). It returns None for what
  NCCL cannot carry (a dtype it cannot reduce, ``axis_index_groups``); the runtime then
  computes that collective on host copies with one of the two above.
"""
from __future__ import annotations

import numpy as np

from functrans import distributed

_REDUCERS = {"sum": np.add, "max": np.maximum, "min": np.minimum}


class LocalCommunicator:
    """Every member of the program runs in this process (``size`` of them)."""

    def __init__(self, size: int):
        self.size = size

    def collective(self, primitive, params: dict, arrays: list) -> list:
        return primitive.group_impl(arrays, **params)


class MpiCommunicator:
    """This process's members (``offset .. offset + len(arrays) - 1``) of a program whose
    other members run in the other processes of the MPI run; ``what`` names the program in
    timeout errors."""

    def __init__(self, offset: int, what: str):
        self.offset = offset
        self.what = what

    def all_reduce(self, arrays: list, op: str) -> list:
        """Elementwise ``op`` ("sum", "max", "min") over every member, in member order
        within this process."""
        local = arrays[0]
        for a in arrays[1:]:
            local = _REDUCERS[op](local, a)
        total = distributed.allreduce(np.asarray(local, arrays[0].dtype), op, self.what)
        return [total] * len(arrays)

    def all_gather(self, arrays: list) -> np.ndarray:
        """Every member's array (one shape and dtype), stacked in member order."""
        everyone = distributed.allgather(np.stack(arrays), self.what)
        return everyone.reshape((-1,) + everyone.shape[2:])

    def collective(self, primitive, params: dict, arrays: list) -> list:
        # With axis_index_groups a group may span processes: those gather every member.
        if primitive.reduce_op is not None and params.get("axis_index_groups") is None:
            return self.all_reduce(arrays, primitive.reduce_op)
        members = list(self.all_gather(arrays))
        outs = primitive.group_impl(members, **params)
        return outs[self.offset:self.offset + len(arrays)]


def compute_on_host(primitive, params: dict, local_inputs: list, offset: int) -> list:
    """Every local member's result of ``primitive`` from the local members' host operands
    (``offset``: this process's first member), across processes with MPI when several run."""
    if distributed.process_count() == 1:
        return LocalCommunicator(len(local_inputs)).collective(primitive, params, local_inputs)
    communicator = MpiCommunicator(offset, f"pmap {primitive.name}")
    return communicator.collective(primitive, params, local_inputs)


__all__ = ["LocalCommunicator", "MpiCommunicator", "compute_on_host"]
