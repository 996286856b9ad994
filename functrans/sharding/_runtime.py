"""Running a per-device program on every device of a mesh, with collectives over mesh axes.

The per-device program (a ``shard_map`` body, or the program the sharding propagation pass
makes of a jitted function) runs as pmap runs its programs (``functrans/_pmap.py``): cut at
its collectives into compiled segments, one thread per device of this process, the threads
meeting at a rendezvous for each collective, and MPI carrying collectives between processes.

What a mesh adds is axes: a collective names some of the mesh's axes, and combines the
devices that agree on every other axis. The devices of the mesh are numbered once, as the
*members* of one flat axis (process by process, in mesh order within a process, so that
each process's members are consecutive); a collective over some axes becomes the same
collective over the flat axis with ``axis_index_groups``: one group per combination of the
other axes' coordinates, each group listing its members in the order of their position
along the named axes (the first name major). The primitives' ``group_impl`` (and MPI,
and on GPUs NCCL when one group spans every member) then compute it as they do for pmap.
"""
from __future__ import annotations

import functools

from functrans import distributed
from functrans import _pmap
from functrans.primitives import collectives
from functrans.sharding._mesh import Mesh
from functrans.sharding._shardings import device_coords


class MeshMembers:
    """The devices of a mesh as the members of one flat axis, and the groups each
    collective runs over."""

    def __init__(self, mesh: Mesh):
        flat = list(mesh.devices.flat)
        order = sorted(range(len(flat)), key=lambda k: (flat[k].process_index, k))
        self.mesh = mesh
        self.devices = [flat[k] for k in order]
        coords = device_coords(mesh)
        self.coords = [coords[d] for d in self.devices]
        rank = distributed.process_index()
        local = [m for m, d in enumerate(self.devices) if d.process_index == rank]
        if distributed.process_count() > 1:
            counts = {}
            for d in self.devices:
                counts[d.process_index] = counts.get(d.process_index, 0) + 1
            if len(counts) != distributed.process_count() or len(set(counts.values())) != 1:
                raise ValueError(
                    f"a mesh used by several processes must hold the same number of devices "
                    f"of every process; {mesh!r} holds {counts} (process: devices)")
        self.local = local
        self.offset = local[0] if local else 0
        self.local_devices = [self.devices[m] for m in local]

    def index_along(self, member: int, names) -> int:
        position = 0
        for n in names:
            position = position * self.mesh.shape[n] + self.coords[member][n]
        return position

    @functools.lru_cache(maxsize=256)
    def groups(self, names: tuple):
        """The members of each group a collective over ``names`` combines, ordered along
        ``names``; None when one group holds every member in member order."""
        by_key: dict = {}
        others = [a for a in self.mesh.axis_names if a not in names]
        for m in range(len(self.devices)):
            key = tuple(self.coords[m][a] for a in others)
            by_key.setdefault(key, []).append(m)
        groups = tuple(tuple(sorted(g, key=lambda m: self.index_along(m, names)))
                       for g in by_key.values())
        if len(groups) == 1 and groups[0] == tuple(range(len(self.devices))):
            return None
        return groups

    def flat_params(self, primitive, params: dict) -> dict:
        """``params`` of a collective over mesh axes, as the same collective over the flat
        axis of members."""
        names = primitive.axis_names(params)
        groups = self.groups(tuple(names))
        if primitive is collectives.ppermute_p:
            whole = groups or (tuple(range(len(self.devices))),)
            perm = tuple((g[s], g[d]) for g in whole for s, d in params["perm"])
            return dict(params, perm=perm)
        inner = params.get("axis_index_groups")
        if inner is not None:  # the user's groups, inside each group of the mesh
            whole = groups or (tuple(range(len(self.devices))),)
            groups = tuple(tuple(g[i] for i in user) for g in whole for user in inner)
        return dict(params, axis_index_groups=groups)


class MeshContext:
    """What a collective executed by one device thread of a mesh program needs to know."""

    __slots__ = ("axis_sizes", "members", "member", "local_member", "rendezvous", "placement",
                 "_flat")

    def __init__(self, axis_sizes: dict, members: MeshMembers, local_member: int, rendezvous,
                 placement, flat_cache: dict):
        self.axis_sizes = axis_sizes
        self.members = members
        self.local_member = local_member
        self.member = members.local[local_member]
        self.rendezvous = rendezvous
        self.placement = placement
        self._flat = flat_cache

    def index_along(self, names) -> int:
        return self.members.index_along(self.member, names)

    def collective(self, primitive, args, params):
        key = (primitive, tuple(sorted(params.items())))
        flat = self._flat.get(key)
        if flat is None:
            flat = self._flat[key] = self.members.flat_params(primitive, params)
        value = self.placement.exchange_value(self.local_member, args[0])
        return self.rendezvous.exchange(self.local_member, primitive, flat, value)


class MeshProgram(_pmap._PmapProgram):
    """A per-device program over the manual axes ``axis_names`` of ``mesh``, compiled once,
    run on every device of the mesh in this process (see the module docstring)."""

    # A collective inside a loop or branch (a psum of each step's gradient in a scan, say):
    # the CPU compiler runs such a loop from Python around its compiled body, and the
    # collective's impl meets the other devices at the rendezvous on every iteration.
    nested_backend = "cpu"

    def __init__(self, closed, mesh: Mesh, axis_names, signature: str, backend=None):
        self.members = MeshMembers(mesh)
        self.mesh = mesh
        self.axis_sizes = {a: mesh.shape[a] for a in axis_names}
        super().__init__(closed, None, mesh.size, backend, signature, self.members.local_devices)
        self._flat_cache: dict = {}

    def run(self, per_member_inputs: list) -> list:
        """Run every device of this process; ``per_member_inputs[i]`` are the inputs of the
        i-th local device (in mesh order). Returns each device's outputs."""
        what = f"program over the mesh {dict(self.mesh.shape)}"
        if distributed.process_count() > 1:
            _pmap._check_same_program(self.signature, what)
        placement = self.placement
        rendezvous = _pmap._Rendezvous(len(per_member_inputs), self.members.offset, what,
                                       _pmap._compute_with(placement))

        def task(member):
            def run():
                ctx = MeshContext(self.axis_sizes, self.members, member, rendezvous, placement,
                                  self._flat_cache)
                try:
                    return self.run_member(member, per_member_inputs[member], ctx)
                except BaseException as err:
                    rendezvous.abort(err)
                    raise
            return run

        with _pmap._execution_lock:
            placement.prepare(self._needs_collectives)
            return _pmap._run_on_devices([task(m) for m in range(len(per_member_inputs))])


__all__ = ["MeshContext", "MeshMembers", "MeshProgram"]
