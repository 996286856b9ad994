"""Sharding propagation: a program over global arrays -> the per-device program of a mesh.

This is the idea of XLA's SPMD partitioner, written for our IR. The input is a closed jaxpr
over whole arrays and the layout of each input (one tuple of mesh axes per dimension: which
axes split it, see ``_shardings.py``); the output is the program each device runs on its
blocks, with the collectives that keep it equal to the original, and the layout of each of
its results.

The pass walks the equations in order. Each value has a layout; an equation's *rule* (one
per primitive, in the table at the end) looks at its operands' layouts, chooses the layout
it computes in (resharding an operand where it must), emits the equation on the blocks with
its parameters made local (``broadcast_in_dim``'s shape, ``reshape``'s sizes, ...), adds the
collectives its result needs (a ``psum`` after a product over a split contracting
dimension, or after a reduction over a split dimension) and gives its results their layouts.
The per-device program is staged by running the rules under a trace, so rules read like
ordinary code on per-device values.

- **Resharding** a value between two layouts is local work where the target splits more
  (each device slices its block at its coordinates, which the program receives as inputs)
  and an ``all_gather`` along each dimension whose splitting must be undone.
- **Broadcasts of replicated values** (constants, biases, scalars made into arrays) are not
  computed until a consumer says which layout it needs: each device then broadcasts to its
  block directly, instead of materializing the whole array and slicing it.
- **An equation without a rule** gathers its operands (every device gets the whole arrays)
  and runs replicated: correct, and logged under ``FUNCTRANS_LOG_COMPILES`` with the
  primitive and the gathered shapes, so users can see where a program stops being
  partitioned.
- ``shard_map`` regions already are per-device code: their operands are resharded to the
  region's ``in_specs`` and its body is inlined; its results have the ``out_specs``.
"""
from __future__ import annotations

import logging
import math

import numpy as np

from functrans import core
from functrans._axis_env import extend_axis_env_nd
from functrans._config import config
from functrans.core import ClosedJaxpr, Literal, ShapedArray, get_aval
from functrans.interpreters.staging import trace_to_jaxpr_dynamic
from functrans.primitives import collectives, structural
from functrans.sharding._mesh import Mesh
from functrans.sharding._shardings import spec_of

logger = logging.getLogger("functrans")

RULES: dict = {}


def rule(*primitives):
    """Register a partitioning rule ``rule(partitioner, eqn)`` for ``primitives``."""
    def register(fn):
        for p in primitives:
            RULES[p] = fn
        return fn
    return register


def replicated(ndim: int) -> tuple:
    return ((),) * ndim


class _Block:
    """A value computed on every device: ``value`` is the device's block (a tracer of the
    per-device program), split by ``layout``."""

    __slots__ = ("value", "layout")

    def __init__(self, value, layout):
        self.value = value
        self.layout = layout


class _Broadcast:
    """A broadcast of a replicated value, made at the layout its first consumer needs:
    ``source`` (replicated, per-device) broadcast to the global ``shape`` along
    ``dimensions``."""

    __slots__ = ("source", "shape", "dimensions", "made")

    def __init__(self, source, shape, dimensions):
        self.source = source
        self.shape = tuple(shape)
        self.dimensions = tuple(dimensions)
        self.made: dict = {}


class Partitioned:
    """The result of :func:`partition`: the per-device program (its first inputs are the
    device's coordinate along each mesh axis, int32 scalars; then one block per input), the
    layout of each output, and the equations that fell back to replicated computation."""

    def __init__(self, program: ClosedJaxpr, in_layouts, out_layouts, fallbacks):
        self.program = program
        self.in_layouts = tuple(in_layouts)
        self.out_layouts = tuple(out_layouts)
        self.fallbacks = list(fallbacks)


class Partitioner:
    """The state of one pass: the mesh, each value's block and layout, the device's
    coordinates, and the fallbacks so far."""

    def __init__(self, mesh: Mesh, coords: dict, fallbacks: list):
        self.mesh = mesh
        self.coords = coords          # mesh axis -> this device's coordinate (a tracer)
        self.fallbacks = fallbacks
        self.env: dict = {}

    # ---- sizes -------------------------------------------------------------------------

    def parts(self, axes) -> int:
        return math.prod(self.mesh.shape[a] for a in axes)

    def local_shape(self, shape, layout) -> tuple:
        return tuple(n // self.parts(axes) for n, axes in zip(shape, layout))

    def divides(self, size: int, axes) -> bool:
        return size % self.parts(axes) == 0

    def fits(self, shape, layout) -> tuple:
        """``layout`` without the splits that do not divide their dimension."""
        return tuple(axes if self.divides(n, axes) else () for n, axes in zip(shape, layout))

    def position(self, axes):
        """This device's block index along a dimension split over ``axes`` (a tracer)."""
        from functrans.primitives import elementwise
        pos = None
        for a in axes:
            c = self.coords[a]
            if pos is None:
                pos = c
            else:
                pos = elementwise.add(elementwise.mul(pos, np.int32(self.mesh.shape[a])), c)
        return pos

    # ---- values ------------------------------------------------------------------------

    def write(self, var, value, layout) -> None:
        if not isinstance(var, core.DropVar):
            self.env[id(var)] = _Block(value, tuple(layout))

    def write_broadcast(self, var, source, shape, dimensions) -> None:
        if not isinstance(var, core.DropVar):
            self.env[id(var)] = _Broadcast(source, shape, dimensions)

    def layout(self, var):
        """The layout ``var`` is computed in; None for a literal or a broadcast not made yet
        (any layout costs nothing)."""
        if isinstance(var, Literal):
            return None
        held = self.env[id(var)]
        return held.layout if isinstance(held, _Block) else None

    def is_broadcast(self, var) -> bool:
        return not isinstance(var, Literal) and isinstance(self.env[id(var)], _Broadcast)

    def read(self, var, layout=None):
        """``var``'s block at ``layout`` (default: as it is; a broadcast not made yet is made
        replicated)."""
        aval = var.aval
        if isinstance(var, Literal):
            if layout is not None and any(layout):
                return self.reshard(var.val, aval, replicated(aval.ndim), layout)
            return var.val
        held = self.env[id(var)]
        if isinstance(held, _Broadcast):
            return self._make_broadcast(held, aval, layout or replicated(aval.ndim))
        if layout is None:
            return held.value
        return self.reshard(held.value, aval, held.layout, tuple(layout))

    def _make_broadcast(self, held: _Broadcast, aval, layout):
        made = held.made.get(layout)
        if made is None:
            src_aval = get_aval(held.source)
            # a source dimension that is broadcast (size 1 -> n) stays whole; one that maps
            # to a dimension of the same size is split as that dimension
            src_layout = tuple(layout[d] if src_aval.shape[i] == held.shape[d] else ()
                               for i, d in enumerate(held.dimensions))
            source = self.reshard(held.source, src_aval, replicated(src_aval.ndim), src_layout)
            made = held.made[layout] = structural.broadcast_in_dim_p.bind(
                source, shape=self.local_shape(held.shape, layout),
                broadcast_dimensions=held.dimensions)
        return made

    def reshard(self, value, aval, have, want):
        """The block of a value split by ``have`` as split by ``want``: an ``all_gather``
        along each dimension whose split is undone, then each device's slice where the
        target splits more."""
        have, want = tuple(have), tuple(want)
        if have == want:
            return value
        current = list(have)
        for d, (h, w) in enumerate(zip(have, want)):
            if h and w[:len(h)] != h:
                for a in reversed(h):  # the minor axis first: blocks join in order
                    value = collectives.all_gather(value, a, axis=d, tiled=True)
                current[d] = ()
        for d, (c, w) in enumerate(zip(current, want)):
            if c != w:
                extra = w[len(c):]
                size = get_aval(value).shape[d] // self.parts(extra)
                value = self.slice_block(value, d, self.position(extra), size)
        return value

    def slice_block(self, value, dim, position, size):
        """The ``position``-th piece of ``size`` along ``dim`` of this device's block."""
        from functrans.primitives import elementwise
        aval = get_aval(value)
        start = elementwise.mul(position, np.int32(size))
        zero = np.int32(0)
        starts = [start if d == dim else zero for d in range(aval.ndim)]
        sizes = list(aval.shape)
        sizes[dim] = size
        return structural.dynamic_slice_p.bind(value, *starts, slice_sizes=tuple(sizes))

    def psum(self, value, axes):
        """``value`` summed over the mesh ``axes`` (those of size > 1)."""
        axes = tuple(a for a in axes if self.mesh.shape[a] > 1)
        return collectives.psum(value, axes) if axes else value

    # ---- equations ---------------------------------------------------------------------

    def run(self, eqns) -> None:
        for eqn in eqns:
            RULES.get(eqn.primitive, fallback)(self, eqn)

    def bind(self, eqn, operands, **params):
        """``eqn``'s primitive on per-device operands (its parameters, updated by
        ``params``); always a list of results."""
        out = eqn.primitive.bind(*operands, **dict(eqn.params, **params))
        return out if eqn.primitive.multiple_results else [out]


def fallback(p: Partitioner, eqn) -> None:
    """No rule: every device computes the whole equation on whole operands."""
    gathered = [v for v in eqn.invars
                if not isinstance(v, Literal) and p.layout(v) is not None and any(p.layout(v))]
    if gathered:
        what = ", ".join(f"{v.aval.str_short()} split as {spec_of(p.layout(v))}"
                         for v in gathered)
        p.fallbacks.append((eqn.primitive.name, what))
        if config.log_compiles:
            logger.warning("sharding: %s has no partitioning rule: its operands (%s) are "
                           "gathered and it runs replicated on every device",
                           eqn.primitive.name, what)
    outs = p.bind(eqn, [p.read(v, replicated(v.aval.ndim)) for v in eqn.invars])
    for v, o in zip(eqn.outvars, outs):
        p.write(v, o, replicated(v.aval.ndim))


def partition(closed: ClosedJaxpr, mesh: Mesh, in_layouts, out_layouts=None) -> Partitioned:
    """The per-device program of ``closed`` on ``mesh`` for inputs split by ``in_layouts``;
    each output is resharded to ``out_layouts[i]`` where that is not None."""
    in_layouts = [tuple(layout) for layout in in_layouts]
    fallbacks: list = []
    out_cell: list = []
    axis_names = tuple(mesh.axis_names)

    def per_device(*args):
        coords = dict(zip(axis_names, args[:len(axis_names)]))
        p = Partitioner(mesh, coords, fallbacks)
        for v, c in zip(closed.jaxpr.constvars, closed.consts):
            p.write(v, c, replicated(v.aval.ndim))
        for v, x, layout in zip(closed.jaxpr.invars, args[len(axis_names):], in_layouts):
            p.write(v, x, layout)
        p.run(closed.jaxpr.eqns)
        outs, layouts = [], []
        for k, v in enumerate(closed.jaxpr.outvars):
            want = None if out_layouts is None else out_layouts[k]
            if want is None:
                want = p.layout(v)
                if want is None:
                    want = replicated(v.aval.ndim)
            outs.append(p.read(v, want))
            layouts.append(tuple(want))
        out_cell[:] = layouts
        return outs

    coord_avals = [ShapedArray((), np.int32)] * len(axis_names)
    block_avals = [ShapedArray(_local(mesh, v.aval.shape, layout), v.aval.dtype,
                               v.aval.weak_type)
                   for v, layout in zip(closed.jaxpr.invars, in_layouts)]
    with extend_axis_env_nd([(a, mesh.shape[a]) for a in axis_names]):
        jaxpr, consts = trace_to_jaxpr_dynamic(per_device, coord_avals + block_avals)
    return Partitioned(ClosedJaxpr(jaxpr, consts), in_layouts, out_cell, fallbacks)


def _local(mesh: Mesh, shape, layout) -> tuple:
    return tuple(n // math.prod(mesh.shape[a] for a in axes) for n, axes in zip(shape, layout))


# =============================================================================================
# shard_map regions
# =============================================================================================


def _shard_map_rule(p: Partitioner, eqn) -> None:
    params = eqn.params
    if params["mesh"] != p.mesh:
        raise ValueError(f"shard_map over the mesh {params['mesh']} inside a program "
                         f"partitioned over another mesh {p.mesh}: use one mesh")
    body = params["jaxpr"]
    blocks = [p.read(v, layout) for v, layout in zip(eqn.invars, params["in_specs"])]
    outs = core.eval_jaxpr(body.jaxpr, body.consts, *blocks)
    for v, o, layout in zip(eqn.outvars, outs, params["out_specs"]):
        p.write(v, o, layout)


def _register_shard_map() -> None:
    from functrans.sharding._shard_map import shard_map_p
    RULES[shard_map_p] = _shard_map_rule


_register_shard_map()


__all__ = ["Partitioned", "Partitioner", "RULES", "fallback", "partition", "rule"]
