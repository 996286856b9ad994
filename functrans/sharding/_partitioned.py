"""Programs partitioned over a mesh: planned per input layout, run on the mesh's devices.

A :class:`PartitionedExecutable` holds a program over global arrays (a jitted function with
sharded arguments or ``in_shardings``/``out_shardings``, a program holding ``shard_map``
regions or sharding constraints, or one ``shard_map`` called eagerly). Each call reads the
layout of every argument (its own sharding on the mesh, the one ``in_shardings`` asks for,
or replicated), and for each new combination runs the sharding propagation pass
(``_propagation.py``) once and compiles the per-device program for the mesh
(``_runtime.py``). The arguments' blocks go to their devices as they are (an argument split
another way is resharded), every device runs its program, and the results are arrays split
over the mesh as the pass decided (or as ``out_shardings`` say).
"""
from __future__ import annotations

import hashlib
import threading

import numpy as np

from functrans import core
from functrans._array import Array
from functrans.core import ClosedJaxpr, get_aval
from functrans.sharding._arrays import PartitionedArray, put
from functrans.sharding._mesh import Mesh
from functrans.sharding._shardings import NamedSharding, Sharding, spec_of


def _layout_of_array(x, mesh: Mesh):
    """The layout of ``x`` on ``mesh`` when it is an array split over that mesh, else None."""
    sharding = getattr(x, "_sharding", None) if isinstance(x, PartitionedArray) else None
    if sharding is not None and sharding.mesh == mesh:
        return sharding.layout(len(x.shape))
    return None


class _Plan:
    __slots__ = ("partitioned", "program", "in_shardings", "out_shardings")

    def __init__(self, partitioned, program, in_shardings, out_shardings):
        self.partitioned = partitioned
        self.program = program
        self.in_shardings = in_shardings
        self.out_shardings = out_shardings


class PartitionedExecutable:
    """``closed`` (a program over global arrays) partitioned over ``mesh``.

    ``in_layouts``/``out_layouts``: per input/output, a layout to place it in (None: an
    input keeps its own sharding on the mesh or, not split over it, is replicated; an
    output keeps the layout propagation gives it). ``preferred_in_layouts``: the layouts
    host inputs are placed in when no other is asked for.
    """

    def __init__(self, closed: ClosedJaxpr, mesh: Mesh, in_layouts=None, out_layouts=None,
                 preferred_in_layouts=None):
        from functrans.interpreters import partial_eval as pe
        from functrans.interpreters.decompose import decompose_closed
        from functrans.interpreters.inline import inline_calls
        self.closed = closed
        self._program = pe.dce_closed_jaxpr(inline_calls(decompose_closed(inline_calls(closed))))
        self.mesh = mesh
        n_in, n_out = len(closed.in_avals), len(closed.out_avals)
        self._in_layouts = list(in_layouts or [None] * n_in)
        self._out_layouts = list(out_layouts or [None] * n_out)
        self._preferred = list(preferred_in_layouts or [None] * n_in)
        self._plans: dict = {}
        self._lock = threading.Lock()

    # ---- planning ----------------------------------------------------------------------

    def _layouts_for(self, args) -> tuple:
        out = []
        for k, (x, aval) in enumerate(zip(args, self.closed.in_avals)):
            layout = self._in_layouts[k]
            if layout is None:
                layout = _layout_of_array(x, self.mesh)
            if layout is None:
                layout = self._preferred[k]
            if layout is None:
                layout = ((),) * aval.ndim
            out.append(tuple(layout))
        return tuple(out)

    def plan(self, in_layouts: tuple) -> _Plan:
        plan = self._plans.get(in_layouts)
        if plan is None:
            with self._lock:
                plan = self._plans.get(in_layouts)
                if plan is None:
                    plan = self._plans[in_layouts] = self._build(in_layouts)
        return plan

    def _build(self, in_layouts) -> _Plan:
        from functrans.sharding import _propagation
        from functrans.sharding._runtime import MeshProgram
        mesh = self.mesh
        partitioned = _propagation.partition(self._program, mesh, in_layouts,
                                             self._out_layouts)
        signature = hashlib.sha256((repr((mesh.axis_names, mesh.axis_sizes, in_layouts)) +
                                    partitioned.program.pretty_print()).encode()).hexdigest()
        program = MeshProgram(partitioned.program, mesh, mesh.axis_names, signature)
        in_shardings = [NamedSharding(mesh, spec_of(layout)) for layout in in_layouts]
        out_shardings = [NamedSharding(mesh, spec_of(layout))
                         for layout in partitioned.out_layouts]
        return _Plan(partitioned, program, in_shardings, out_shardings)

    def fallbacks(self, in_layouts=None) -> list:
        """(primitive, what was gathered) for each equation that ran replicated."""
        plans = [self.plan(in_layouts)] if in_layouts is not None else list(self._plans.values())
        return [f for plan in plans for f in plan.partitioned.fallbacks]

    # ---- calling -----------------------------------------------------------------------

    def call_arrays(self, args) -> list:
        """Run on eager values; returns arrays split over the mesh."""
        plan = self.plan(self._layouts_for(args))
        program = plan.program
        members = program.members
        blocks = []
        for x, aval, sharding in zip(args, self.closed.in_avals, plan.in_shardings):
            if not (isinstance(x, PartitionedArray) and x._sharding == sharding):
                x = put(x, sharding, aval if not isinstance(x, Array) else None)
            blocks.append(x._buffers)
        per_member = []
        for device in members.local_devices:
            coords = members.coords[members.devices.index(device)]
            per_member.append([np.int32(coords[a]) for a in self.mesh.axis_names] +
                              [b[device] for b in blocks])
        outs = program.run(per_member)
        results = []
        for k, (aval, sharding) in enumerate(zip(self.closed.out_avals, plan.out_shardings)):
            buffers = {d: program.output(m, outs[m][k], local)
                       for m, (d, local) in enumerate(
                           (d, plan.partitioned.program.out_avals[k])
                           for d in members.local_devices)}
            results.append(PartitionedArray(aval, sharding, buffers))
        return results

    def __call__(self, *args) -> list:
        """Host values in, host values out (for callers that speak NumPy)."""
        return [core.to_numpy(o) for o in self.call_arrays(list(args))]


def sharding_layout(sharding, ndim: int, what: str):
    """The layout a sharding asks for (None for None); only NamedShardings split arrays."""
    if sharding is None:
        return None
    if isinstance(sharding, NamedSharding):
        return sharding.layout(ndim)
    if isinstance(sharding, Sharding):
        if sharding.num_devices == 1:
            return None
    raise TypeError(f"{what}: expected a NamedSharding (or None), got {sharding!r}")


__all__ = ["PartitionedExecutable"]
