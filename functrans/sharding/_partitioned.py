"""Programs partitioned over a mesh: planned per input layout, run on the mesh's devices.

A :class:`PartitionedExecutable` holds a program over global arrays (a jitted function with
sharded arguments or ``in_shardings``/``out_shardings``, a program holding ``shard_map``
regions or sharding constraints, or one ``shard_map`` called eagerly). Each call reads the
layout of every argument (its own sharding on the mesh, the one ``in_shardings`` asks for,
or replicated), and for each new combination runs the sharding propagation pass
(``_propagation.py``) once and compiles the per-device program for the mesh (``_runtime.py``,
on the SPMD runtime ``functrans/_spmd.py``). The arguments' blocks go to their devices as
they are (an argument split another way is resharded), every device runs its program, and
the results are arrays split over the mesh as the pass decided (or as ``out_shardings``
say).
"""
from __future__ import annotations

import hashlib
import logging
import threading
import time
import weakref

import numpy as np

from functrans import _jit, core, tree_util
from functrans._array import is_concrete_array
from functrans._config import config
from functrans.core import ClosedJaxpr
from functrans.sharding._arrays import PartitionedArray, put
from functrans.sharding._mesh import get_mesh, Mesh
from functrans.sharding._shardings import NamedSharding, Sharding, spec_of
from functrans.interpreters import partial_eval as pe
from functrans.interpreters.inline import inline_calls
from functrans.sharding._constraints import sharding_constraint_p
from functrans.sharding._partition_spec import PartitionSpec
from functrans.sharding._runtime import mesh_program
from functrans.sharding import _propagation
from functrans.sharding._shard_map import global_aval, one_equation, shard_map_p

logger = logging.getLogger("functrans")


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
                 preferred_in_layouts=None, out_shardings=None):
        self.closed = closed
        # the shardings jit's out_shardings asked for: results report them as given (a
        # spec's trailing Nones kept or left out as written), as JAX's do
        self._out_shardings = list(out_shardings or [None] * len(closed.out_avals))
        # (convolutions and pooling are partitioned as they are; the backends decompose
        # them when they compile the per-device program)
        self._program = pe.dce_closed_jaxpr(inline_calls(closed))
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
        mesh = self.mesh
        start = time.perf_counter()
        partitioned = _propagation.partition(self._program, mesh, in_layouts,
                                             self._out_layouts)
        if config.log_compiles:
            logger.warning("partitioned a program of %d equations over the mesh %s in %.1f ms "
                           "(%d equations fell back to replicated computation)",
                           len(self._program.eqns), dict(mesh.shape),
                           1e3 * (time.perf_counter() - start), len(partitioned.fallbacks))
        signature = hashlib.sha256((repr((mesh.axis_names, mesh.axis_sizes, in_layouts)) +
                                    partitioned.program.pretty_print()).encode()).hexdigest()
        program = mesh_program(partitioned.program, mesh, signature)
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
        for x, aval, layout, sharding in zip(args, self.closed.in_avals,
                                             plan.partitioned.in_layouts, plan.in_shardings):
            if _layout_of_array(x, self.mesh) != layout:
                x = put(x, sharding, aval if not is_concrete_array(x) else None)
            blocks.append(x._buffers)
        per_member = []
        for m, device in zip(members.local, members.local_devices):
            coords = members.coords[m]
            per_member.append([np.int32(coords[a]) for a in self.mesh.axis_names] +
                              [b[device] for b in blocks])
        outs = program.run(per_member)
        results = []
        for k, (aval, sharding) in enumerate(zip(self.closed.out_avals, plan.out_shardings)):
            buffers = {d: program.output(m, outs[m][k], local)
                       for m, (d, local) in enumerate(
                           (d, plan.partitioned.program.out_avals[k])
                           for d in members.local_devices)}
            asked = self._out_shardings[k]
            results.append(PartitionedArray(aval, sharding if asked is None else asked,
                                            buffers))
        return results

    def __call__(self, *args) -> list:
        """Host values in, host values out (for callers that speak NumPy)."""
        return [core.to_numpy(o) for o in self.call_arrays(list(args))]




# =============================================================================================
# jit's side: which calls are partitioned, and over which mesh
# =============================================================================================


def _region_primitives():
    return shard_map_p, sharding_constraint_p


def _region_meshes(jaxpr, found: list) -> list:
    """The meshes of the shard_map regions and sharding constraints in ``jaxpr`` (nested
    programs included)."""
    shard_map_p, constraint_p = _region_primitives()
    for eqn in jaxpr.eqns:
        if eqn.primitive is shard_map_p:
            found.append(eqn.params["mesh"])
            continue
        if eqn.primitive is constraint_p:
            found.append(eqn.params["sharding"].mesh)
        for sub in core.subjaxprs(eqn):
            _region_meshes(sub, found)
    return found


def _one_mesh(meshes, what: str):
    distinct = []
    for m in meshes:
        if m not in distinct:
            distinct.append(m)
    if len(distinct) > 1:
        raise ValueError(f"{what}: shardings over different meshes {distinct} in one "
                         "program; use one mesh")
    return distinct[0] if distinct else None


def _as_named(s, what: str):
    if isinstance(s, PartitionSpec):
        mesh = get_mesh()
        if mesh.empty:
            raise ValueError(f"jit: {what} holds the PartitionSpec {s}, which needs a mesh: "
                             "pass a NamedSharding or set one with functrans.set_mesh(mesh)")
        return NamedSharding(mesh, s)
    if s is None or isinstance(s, NamedSharding):
        return s
    if isinstance(s, Sharding):
        return None if s.num_devices == 1 else s
    raise TypeError(f"jit: {what} must hold shardings (NamedSharding, a PartitionSpec under "
                    f"set_mesh, or None), got {s!r}")


def _is_spec_leaf(x) -> bool:
    return x is None or isinstance(x, (Sharding, PartitionSpec))


def _broadcast_shardings(shardings, tree, what: str) -> list:
    try:
        full = tree_util.tree_broadcast(shardings, tree, is_leaf=_is_spec_leaf)
    except (ValueError, TypeError) as err:
        raise ValueError(f"jit: {what} {shardings} must be a pytree prefix of the "
                         f"{'arguments' if what == 'in_shardings' else 'outputs'} "
                         f"{tree_util.tree_structure(tree)}") from err
    leaves = tree_util.tree_flatten(full, is_leaf=_is_spec_leaf)[0]
    return [_as_named(s, what) for s in leaves]


class JitPartitioner:
    """Installed as ``functrans._jit.partitioner``: jit asks it whether a call is
    partitioned and hands such calls (and programs with shard_map regions or sharding
    constraints) to it."""

    def __init__(self):
        self._executables: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    @staticmethod
    def check(shardings) -> None:
        """``jit``'s in_shardings/out_shardings hold shardings, PartitionSpecs or None."""
        for what, tree in zip(("in_shardings", "out_shardings"), shardings):
            for leaf in tree_util.tree_leaves(tree, is_leaf=_is_spec_leaf):
                if not _is_spec_leaf(leaf):
                    raise TypeError(f"jit: {what} must hold shardings (NamedSharding, "
                                    f"SingleDeviceSharding, a PartitionSpec under set_mesh) "
                                    f"or None, got {leaf!r}")

    @staticmethod
    def wants(leaves) -> bool:
        """Whether an argument lives on a mesh (its results then do too)."""
        for x in leaves:
            if type(x) is PartitionedArray:
                return True
        return False

    @staticmethod
    def holds_regions(closed: ClosedJaxpr) -> bool:
        return bool(_region_meshes(closed.jaxpr, []))

    def compile(self, closed: ClosedJaxpr) -> PartitionedExecutable:
        """The executable of a program holding shard_map regions or sharding constraints."""
        mesh = _one_mesh(_region_meshes(closed.jaxpr, []), "jit")
        return PartitionedExecutable(closed, mesh)

    def call(self, shardings, entry, leaves, in_tree) -> list:
        """A jitted call with split arguments or in/out shardings (``shardings``: the jit's
        ``(in_shardings, out_shardings)`` or None)."""
        closed = entry.closed
        per_key = self._executables.get(closed)
        if per_key is None:
            per_key = self._executables[closed] = {}
        key = (id(shardings), next((x._sharding.mesh for x in leaves
                                    if type(x) is PartitionedArray), None))
        executable = per_key.get(key)
        if executable is None:
            executable = per_key[key] = self._executable(closed, shardings, leaves, in_tree,
                                                         entry.out_tree)
        if executable is None:  # nothing to partition: one device
            return None
        return executable.call_arrays(leaves)

    def _executable(self, closed, shardings, leaves, in_tree, out_tree):
        in_s = out_s = None
        if shardings is not None:
            in_shardings, out_shardings = shardings
            if in_shardings is not None:
                args, kwargs = tree_util.tree_unflatten(in_tree, leaves)
                in_s = _broadcast_shardings(tuple(in_shardings) if isinstance(
                    in_shardings, list) else in_shardings, tuple(args), "in_shardings")
                in_s += [None] * len(tree_util.tree_leaves(kwargs))
            if out_shardings is not None:
                outs = tree_util.tree_unflatten(out_tree, [0] * out_tree.num_leaves)
                out_s = _broadcast_shardings(out_shardings, outs, "out_shardings")
        explicit = [s.mesh for s in (in_s or []) + (out_s or []) if s is not None]
        arrays = [x._sharding.mesh for x in leaves if type(x) is PartitionedArray]
        mesh = _one_mesh(explicit + _region_meshes(closed.jaxpr, []), "jit") or \
            (arrays[0] if arrays else None)
        if mesh is None:
            return None
        for s, a in zip((in_s or []) + (out_s or []),
                        list(closed.in_avals)[:len(in_s or [])] + list(closed.out_avals)):
            if s is not None:
                s.shard_shape(a.shape)  # a split that does not divide: ValueError
        in_layouts = [None if s is None else s.layout(a.ndim)
                      for s, a in zip(in_s or [None] * len(leaves), closed.in_avals)]
        out_layouts = [None if s is None else s.layout(a.ndim)
                       for s, a in zip(out_s or [None] * len(closed.out_avals),
                                       closed.out_avals)]
        return PartitionedExecutable(closed, mesh, in_layouts, out_layouts,
                                     out_shardings=out_s)


def recorded_fallbacks() -> list:
    """(primitive, what was gathered) of every equation that ran replicated in the
    partitioned programs jit has compiled in this process."""
    out = []
    if _jit.partitioner is not None:
        for per_key in list(_jit.partitioner._executables.values()):
            for executable in per_key.values():
                if executable is not None:
                    out.extend(executable.fallbacks())
    return out


_shard_map_programs: "weakref.WeakKeyDictionary[ClosedJaxpr, PartitionedExecutable]" = \
    weakref.WeakKeyDictionary()


@shard_map_p.def_impl
def _shard_map_impl(*args, jaxpr, mesh, in_specs, out_specs, axis_names, check_vma):
    # An eager shard_map runs as a one-equation program through this runtime, which places
    # (and reshards) the arguments and runs the per-device program on the mesh.
    executable = _shard_map_programs.get(jaxpr)
    if executable is None:
        params = dict(jaxpr=jaxpr, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                      axis_names=axis_names, check_vma=check_vma)
        in_avals = [global_aval(a, layout, mesh) for a, layout in zip(jaxpr.in_avals, in_specs)]
        closed = one_equation(shard_map_p, params, in_avals)
        executable = _shard_map_programs[jaxpr] = PartitionedExecutable(
            closed, mesh, preferred_in_layouts=in_specs)
    return executable.call_arrays(list(args))


def install() -> None:
    _jit.partitioner = JitPartitioner()


__all__ = ["JitPartitioner", "PartitionedExecutable", "install", "recorded_fallbacks"]
