"""A mesh's devices as the members of the SPMD runtime (``functrans/_spmd.py``).

The per-device program of a ``shard_map`` body, or the one the sharding propagation pass
makes of a jitted function, runs on the runtime as pmap's programs do; what a mesh adds is
axes. Its devices are numbered process by process, in mesh order within a process (each
process's members consecutive), and a collective over some of the mesh's axes combines the
devices that agree on every other axis (``Members.flat_params``).
"""
from __future__ import annotations

from functrans import _spmd, distributed
from functrans.sharding._mesh import Mesh
from functrans.sharding._shardings import device_coords


def mesh_members(mesh: Mesh) -> _spmd.Members:
    """The devices of ``mesh`` as the runtime's members, the mesh's axes over them."""
    flat = list(mesh.devices.flat)
    order = sorted(range(len(flat)), key=lambda k: (flat[k].process_index, k))
    devices = [flat[k] for k in order]
    coords = device_coords(mesh)
    rank = distributed.process_index()
    local = [m for m, d in enumerate(devices) if d.process_index == rank]
    if distributed.process_count() > 1:
        counts: dict = {}
        for d in devices:
            counts[d.process_index] = counts.get(d.process_index, 0) + 1
        if len(counts) != distributed.process_count() or len(set(counts.values())) != 1:
            raise ValueError(
                f"a mesh used by several processes must hold the same number of devices "
                f"of every process; {mesh!r} holds {counts} (process: devices)")
    return _spmd.Members(dict(mesh.shape), [coords[d] for d in devices],
                         [devices[m] for m in local], local[0] if local else 0)


def mesh_program(closed, mesh: Mesh, signature: str, backend=None) -> _spmd.Program:
    """The per-device program ``closed`` over every axis of ``mesh``, compiled once for its
    devices in this process."""
    # A collective inside a loop or branch (a psum of each step's gradient in a scan, say):
    # the CPU compiler runs such a loop from Python around its compiled body, and the
    # collective's impl meets the other devices at the rendezvous on every iteration.
    return _spmd.Program(closed, mesh_members(mesh), backend, signature,
                         f"program over the mesh {dict(mesh.shape)}", nested_backend="cpu")


__all__ = ["mesh_members", "mesh_program"]
