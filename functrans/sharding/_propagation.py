"""Sharding propagation: a program over global arrays -> the per-device program of a mesh.

This is the idea of XLA's SPMD partitioner, written for our IR. The input is a closed jaxpr
over whole arrays and the layout of each input (one tuple of mesh axes per dimension: which
axes split it, see ``_shardings.py``); the output is the program each device runs on its
blocks, with the collectives that keep it equal to the original, and the layout of each of
its results.

The pass walks the equations in order. Each value has a layout; an equation's *rule* (one
per primitive, in the table ``RULES`` below) looks at its operands' layouts, chooses the layout
it computes in (resharding an operand where it must), emits the equation on the blocks with
its parameters made local (``broadcast_in_dim``'s shape, ``reshape``'s sizes, ...), adds the
collectives its result needs (a ``psum`` after a product over a split contracting
dimension, or after a reduction over a split dimension) and gives its results their layouts.
The per-device program is staged by running the rules under a trace, so rules read like
ordinary code on per-device values.

- **Resharding** a value between two layouts is local work where the target splits more
  (each device slices its block at its coordinates, which the program receives as inputs)
  and an ``all_gather`` along each dimension whose splitting must be undone.
- **Broadcasts of replicated values** (constants, biases, scalars made into arrays), iotas and
  elementwise functions of those are not computed until a consumer says which layout it
  needs: each device then makes its block directly, instead of materializing the whole
  array and slicing it.
- **Collectives run as late as they can** (``delay_collectives``): the devices meet only
  when a result is needed, and the gradient sums of a training step run back to back.
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

from functrans import core, ops
from functrans._axis_env import extend_axis_env_nd
from functrans._remat import name_p
from functrans._config import config
from functrans.core import ClosedJaxpr, Literal, ShapedArray, get_aval
from functrans.interpreters.staging import trace_to_jaxpr_dynamic
from functrans.primitives import collectives, structural
from functrans.primitives import control_flow as _cf
from functrans.primitives import elementwise as _ew
from functrans.primitives import fft as _fft
from functrans.primitives import indexing as _ix
from functrans.primitives import linalg as _la
from functrans.primitives import linalg_schur as _ls
from functrans.primitives import random_bits as _rb
from functrans.primitives import reductions as _rd
from functrans.primitives import sorting as _so
from functrans.primitives import special as _sp
from functrans.primitives import windowed as _wd
from functrans.sharding._mesh import Mesh
from functrans.sharding._shardings import spec_of
from functrans.sharding._constraints import sharding_constraint_p
from functrans.sharding._shard_map import shard_map_p

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


class _Lazy:
    """A value that is cheap to make at any layout (a broadcast of a replicated value, an
    iota, elementwise functions of those): ``make(layout)`` makes this device's block of
    it, when the first consumer says which layout it needs."""

    __slots__ = ("make", "made")

    def __init__(self, make):
        self.make = make
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
        pos = None
        for a in axes:
            c = self.coords[a]
            pos = c if pos is None else _ew.add(_ew.mul(pos, np.int32(self.mesh.shape[a])), c)
        return pos

    # ---- values ------------------------------------------------------------------------

    def write(self, var, value, layout) -> None:
        if not isinstance(var, core.DropVar):
            self.env[id(var)] = _Block(value, tuple(layout))

    def write_lazy(self, var, make) -> None:
        """``var`` is made by ``make(layout)`` at the layout its consumers need."""
        if not isinstance(var, core.DropVar):
            self.env[id(var)] = _Lazy(make)

    def layout(self, var):
        """The layout ``var`` is computed in; None for a literal or a broadcast not made yet
        (any layout costs nothing)."""
        if isinstance(var, Literal):
            return None
        held = self.env[id(var)]
        return held.layout if isinstance(held, _Block) else None

    def layout_or_replicated(self, var) -> tuple:
        layout = self.layout(var)
        return replicated(var.aval.ndim) if layout is None else layout

    def read(self, var, layout=None):
        """``var``'s block at ``layout`` (default: as it is; a broadcast not made yet is made
        replicated)."""
        aval = var.aval
        if isinstance(var, Literal):
            if layout is not None and any(layout):
                return self.reshard(var.val, aval, replicated(aval.ndim), layout)
            return var.val
        held = self.env[id(var)]
        if isinstance(held, _Lazy):
            layout = tuple(layout) if layout is not None else replicated(aval.ndim)
            made = held.made.get(layout)
            if made is None:
                made = held.made[layout] = held.make(layout)
            return made
        if layout is None:
            return held.value
        return self.reshard(held.value, aval, held.layout, tuple(layout))

    def reshard(self, value, aval, have, want):
        """The block of a value split by ``have`` as split by ``want``: an ``all_gather``
        along each dimension whose split is undone, then each device's slice where the
        target splits more."""
        have, want = tuple(have), tuple(want)
        if have == want:
            return value
        current = list(have)
        for d, (h, w) in enumerate(zip(have, want)):
            keep = 0  # the axes both split by, major first, stay
            while keep < min(len(h), len(w)) and h[keep] == w[keep]:
                keep += 1
            for a in reversed(h[keep:]):  # the minor axis first: blocks join in order
                value = collectives.all_gather(value, a, axis=d, tiled=True)
            current[d] = h[:keep]
        for d, (c, w) in enumerate(zip(current, want)):
            if c != w:
                extra = w[len(c):]
                size = get_aval(value).shape[d] // self.parts(extra)
                value = self.slice_block(value, d, self.position(extra), size)
        return value

    def slice_block(self, value, dim, position, size):
        """The ``position``-th piece of ``size`` along ``dim`` of this device's block."""
        aval = get_aval(value)
        start = _ew.mul(position, np.int32(size))
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


def partition(closed: ClosedJaxpr, mesh: Mesh, in_layouts, out_layouts=None, fallbacks=None,
              nested: bool = False) -> Partitioned:
    """The per-device program of ``closed`` on ``mesh`` for inputs split by ``in_layouts``;
    each output is resharded to ``out_layouts[i]`` where that is not None. (``nested``: the
    body of a loop or branch, partitioned inside the enclosing program's pass.)"""
    in_layouts = [tuple(layout) for layout in in_layouts]
    fallbacks = [] if fallbacks is None else fallbacks
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
    return Partitioned(ClosedJaxpr(delay_collectives(jaxpr), consts), in_layouts, out_cell,
                       fallbacks)


def delay_collectives(jaxpr: core.Jaxpr) -> core.Jaxpr:
    """The same program with each collective moved down to just before the first equation
    that reads its result (or the end): the devices then compute without meeting until a
    result is needed, and the collectives that pile up there (the gradient sums of a
    data-parallel step) run back to back, between the same two compiled segments. Every
    device runs the same program, so the collectives keep one order on all of them."""
    out, pending, produced = [], [], set()
    for eqn in jaxpr.eqns:
        if eqn.primitive.is_collective and eqn.primitive is not \
                collectives.axis_index_p:
            pending.append(eqn)
            produced.update(id(v) for v in eqn.outvars)
            continue
        if pending and any(id(v) in produced for v in eqn.invars
                           if not isinstance(v, Literal)):
            out.extend(pending)
            pending, produced = [], set()
        out.append(eqn)
    out.extend(pending)
    return core.Jaxpr(jaxpr.constvars, jaxpr.invars, jaxpr.outvars, out)


def _local(mesh: Mesh, shape, layout) -> tuple:
    return tuple(n // math.prod(mesh.shape[a] for a in axes) for n, axes in zip(shape, layout))


# =============================================================================================
# Rules
# =============================================================================================

def _merge(p: Partitioner, operands, ndim: int, shape):
    """One layout for operands of one shape: each dimension split as the first operand that
    splits it (an axis used once); None when no operand has a layout yet."""
    out, used, seen = [()] * ndim, set(), False
    for v in operands:
        if isinstance(v, Literal) or v.aval.ndim != ndim:
            continue
        layout = p.layout(v)
        if layout is None:
            continue
        seen = True
        for d, axes in enumerate(layout):
            if axes and not out[d] and not used & set(axes) and p.divides(shape[d], axes):
                out[d] = axes
                used.update(axes)
    return tuple(out) if seen else None


def _read_as(p: Partitioner, v, layout, ndim):
    """Operand ``v`` at ``layout`` when it has the result's rank (a scalar stays whole)."""
    return p.read(v, layout if v.aval.ndim == ndim else replicated(v.aval.ndim))


# ---- elementwise ---------------------------------------------------------------------------

ELEMENTWISE = (list(_ew.ELEMENTWISE_UNARY.values()) + list(_ew.ELEMENTWISE_BINARY.values()) +
               [_ew.select_n_p, _ew.clamp_p, _ew.convert_element_type_p, _ew.stop_gradient_p,
                _ew.reduce_precision_p, _ew.mulhi_p, _rb.threefry2x32_p, _sp.igamma_p,
                _sp.igammac_p, _sp.igamma_grad_a_p, _sp.random_gamma_grad_p,
                _sp.regularized_incomplete_beta_p, _sp.zeta_p, _sp.bessel_i0e_p,
                _sp.bessel_i1e_p, name_p])


@rule(*ELEMENTWISE)
def _elementwise(p: Partitioner, eqn) -> None:
    aval = eqn.outvars[0].aval
    ndim = aval.ndim
    layout = _merge(p, eqn.invars, ndim, aval.shape)
    if layout is None:  # only lazy operands and scalars: stay lazy
        def make(target, index):
            return p.bind(eqn, [_read_as(p, v, target, ndim) for v in eqn.invars])[index]
        for k, v in enumerate(eqn.outvars):
            p.write_lazy(v, lambda target, k=k: make(target, k))
        return
    outs = p.bind(eqn, [_read_as(p, v, layout, ndim) for v in eqn.invars])
    for v, o in zip(eqn.outvars, outs):
        p.write(v, o, layout)


@rule(_ew.bitcast_convert_type_p)
def _bitcast(p: Partitioner, eqn) -> None:
    (x,), (out,) = eqn.invars, eqn.outvars
    if x.aval.ndim != out.aval.ndim:
        return fallback(p, eqn)
    return _elementwise(p, eqn)


@rule(_wd.optimization_barrier_p)
def _barrier(p: Partitioner, eqn) -> None:
    layouts = [p.layout_or_replicated(v) for v in eqn.invars]
    outs = p.bind(eqn, [p.read(v, layout) for v, layout in zip(eqn.invars, layouts)])
    for v, o, layout in zip(eqn.outvars, outs, layouts):
        p.write(v, o, layout)


# ---- broadcasts, iotas, shapes -----------------------------------------------------------


@rule(structural.broadcast_in_dim_p)
def _broadcast_in_dim(p: Partitioner, eqn) -> None:
    (x,), (out,) = eqn.invars, eqn.outvars
    shape, dims = eqn.params["shape"], eqn.params["broadcast_dimensions"]
    in_shape = x.aval.shape

    def source_layout(layout):
        # a broadcast dimension (size 1 -> n) stays whole; a kept one is split as the result
        return tuple(layout[d] if in_shape[i] == shape[d] else () for i, d in enumerate(dims))

    def make(layout):
        return structural.broadcast_in_dim_p.bind(
            p.read(x, source_layout(layout)), shape=p.local_shape(shape, layout),
            broadcast_dimensions=dims)

    have = p.layout(x)
    if have is None or not any(have):  # a replicated source: made where it is needed
        p.write_lazy(out, make)
        return
    layout = [()] * len(shape)
    for i, d in enumerate(dims):
        if in_shape[i] == shape[d]:
            layout[d] = have[i]
    layout = tuple(layout)
    p.write(out, make(layout), layout)


@rule(structural.iota_p)
def _iota(p: Partitioner, eqn) -> None:
    params = eqn.params
    shape, dim, dtype = params["shape"], params["dimension"], params["dtype"]

    def make(layout):
        local = p.local_shape(shape, layout)
        value = structural.iota_p.bind(**dict(params, shape=local))
        if layout[dim]:  # this device's block starts further along the counted dimension
            offset = _ew.mul(p.position(layout[dim]), np.int32(local[dim]))
            offset = _ew.convert_element_type(offset, dtype) if np.dtype(dtype) != np.int32 \
                else offset
            value = _ew.add(value, structural.broadcast_in_dim_p.bind(
                offset, shape=local, broadcast_dimensions=()))
        return value

    p.write_lazy(eqn.outvars[0], make)


def _reshape_groups(in_shape, out_shape):
    """Runs of input and output dimensions with equal products (None when a size is 0)."""
    if 0 in in_shape or 0 in out_shape:
        return None
    groups, i, j = [], 0, 0
    while i < len(in_shape) or j < len(out_shape):
        if i == len(in_shape):
            groups.append(([], [j]))
            j += 1
            continue
        if j == len(out_shape):
            groups.append(([i], []))
            i += 1
            continue
        gi, gj, a, b = [i], [j], in_shape[i], out_shape[j]
        while a != b:
            if a < b:
                i += 1
                gi.append(i)
                a *= in_shape[i]
            else:
                j += 1
                gj.append(j)
                b *= out_shape[j]
        groups.append((gi, gj))
        i, j = i + 1, j + 1
    return groups


@rule(structural.reshape_p)
def _reshape(p: Partitioner, eqn) -> None:
    (x,), (out,) = eqn.invars, eqn.outvars
    in_shape, out_shape = x.aval.shape, out.aval.shape
    groups = _reshape_groups(in_shape, out_shape)
    have = p.layout(x)
    if eqn.params.get("dimensions") is not None or groups is None:
        return fallback(p, eqn)
    if have is None:  # lazy: made at the layout its consumers need
        def make(target):
            source, made = [()] * len(in_shape), [()] * len(out_shape)
            for gi, gj in groups:  # the splits a reshape of blocks can make (see below)
                if gi and gj and target[gj[0]] and p.divides(in_shape[gi[0]], target[gj[0]]):
                    source[gi[0]] = made[gj[0]] = target[gj[0]]
            value = structural.reshape_p.bind(
                p.read(x, tuple(source)), new_sizes=p.local_shape(out_shape, made),
                dimensions=None)
            return p.reshard(value, out.aval, tuple(made), target)
        p.write_lazy(out, make)
        return
    want_in, layout = [()] * len(in_shape), [()] * len(out_shape)
    for gi, gj in groups:
        # a run's elements are contiguous: splitting its major input dimension into k blocks
        # splits the run into k chunks, which are the k blocks of its major output
        # dimension when that divides by k
        if gi and gj and have[gi[0]] and p.divides(out_shape[gj[0]], have[gi[0]]):
            want_in[gi[0]] = layout[gj[0]] = have[gi[0]]
    layout = tuple(layout)
    value = p.read(x, tuple(want_in))
    p.write(out, structural.reshape_p.bind(value, new_sizes=p.local_shape(out_shape, layout),
                                           dimensions=None), layout)


@rule(structural.transpose_p)
def _transpose(p: Partitioner, eqn) -> None:
    (x,), (out,) = eqn.invars, eqn.outvars
    perm = eqn.params["permutation"]
    have = p.layout(x)
    if have is None:
        def make(layout):
            source = [()] * len(perm)
            for i, d in enumerate(perm):
                source[d] = layout[i]
            return p.bind(eqn, [p.read(x, tuple(source))])[0]
        p.write_lazy(out, make)
        return
    p.write(out, p.bind(eqn, [p.read(x)])[0], tuple(have[d] for d in perm))


@rule(structural.squeeze_p)
def _squeeze(p: Partitioner, eqn) -> None:
    (x,), (out,) = eqn.invars, eqn.outvars
    dims = set(eqn.params["dimensions"])
    have = p.layout_or_replicated(x)
    want = tuple(() if d in dims else axes for d, axes in enumerate(have))
    layout = tuple(axes for d, axes in enumerate(want) if d not in dims)
    p.write(out, p.bind(eqn, [p.read(x, want)])[0], layout)


def _whole_along(p: Partitioner, eqn, dims, operand_index: int = 0, **params) -> None:
    """Rules of ops that move data along some dimensions only: those are gathered, the
    others keep their split; the other operands (scalars) stay whole. ``params`` are
    functions of the layout giving the local parameters."""
    x = eqn.invars[operand_index]

    def compute(layout):
        layout = tuple(() if d in dims else axes for d, axes in enumerate(layout))
        operands = [p.read(v, layout) if k == operand_index else p.read(v, replicated(
            v.aval.ndim)) for k, v in enumerate(eqn.invars)]
        return layout, p.bind(eqn, operands, **{k: f(layout) for k, f in params.items()})

    out = eqn.outvars
    if p.layout(x) is None and len(out) == 1 and out[0].aval.ndim == x.aval.ndim:
        p.write_lazy(out[0], lambda target: compute(target)[1][0])  # cheap at any layout
        return
    layout, outs = compute(p.layout_or_replicated(x))
    for v, o in zip(out, outs):
        p.write(v, o, layout[:v.aval.ndim] if v.aval.ndim <= len(layout) else
                layout + ((),) * (v.aval.ndim - len(layout)))


@rule(structural.rev_p)
def _rev(p: Partitioner, eqn) -> None:
    _whole_along(p, eqn, set(eqn.params["dimensions"]))


@rule(structural.pad_p)
def _pad(p: Partitioner, eqn) -> None:
    config_ = eqn.params["padding_config"]
    _whole_along(p, eqn, {d for d, c in enumerate(config_) if tuple(c) != (0, 0, 0)})


@rule(structural.slice_p)
def _slice(p: Partitioner, eqn) -> None:
    x = eqn.invars[0]
    shape = x.aval.shape
    starts, limits = eqn.params["start_indices"], eqn.params["limit_indices"]
    strides = eqn.params.get("strides") or (1,) * len(shape)
    cut = {d for d in range(len(shape))
           if (starts[d], limits[d], strides[d]) != (0, shape[d], 1)}

    def local_limits(layout):
        return tuple(n // p.parts(axes) if axes else lim
                     for n, axes, lim in zip(shape, layout, limits))

    _whole_along(p, eqn, cut, limit_indices=local_limits)


@rule(structural.dynamic_slice_p)
def _dynamic_slice(p: Partitioner, eqn) -> None:
    shape = eqn.invars[0].aval.shape
    sizes = eqn.params["slice_sizes"]
    cut = {d for d in range(len(shape)) if sizes[d] != shape[d]}
    _whole_along(p, eqn, cut, slice_sizes=lambda layout: p.local_shape(sizes, layout))


@rule(structural.dynamic_update_slice_p)
def _dynamic_update_slice(p: Partitioner, eqn) -> None:
    operand, update = eqn.invars[:2]
    shape = operand.aval.shape
    layout = _merge(p, [operand, update], len(shape), shape) or replicated(len(shape))
    layout = tuple(axes if update.aval.shape[d] == shape[d] else ()
                   for d, axes in enumerate(layout))
    operands = [p.read(operand, layout), p.read(update, layout)] + \
        [p.read(v, ()) for v in eqn.invars[2:]]
    p.write(eqn.outvars[0], p.bind(eqn, operands)[0], layout)


@rule(structural.concatenate_p)
def _concatenate(p: Partitioner, eqn) -> None:
    aval = eqn.outvars[0].aval
    dim = eqn.params["dimension"]
    layout = _merge(p, eqn.invars, aval.ndim, aval.shape) or replicated(aval.ndim)
    layout = tuple(() if d == dim else axes for d, axes in enumerate(layout))
    outs = p.bind(eqn, [p.read(v, layout) for v in eqn.invars])
    p.write(eqn.outvars[0], outs[0], layout)


# ---- reductions ----------------------------------------------------------------------------

# the collective that finishes a reduction over a split dimension, per primitive (and for
# the bitwise ones, only on booleans, where and/or are min/max)
_FINISH = {_rd.reduce_sum_p: collectives.psum, _rd.reduce_max_p: collectives.pmax,
           _rd.reduce_min_p: collectives.pmin}
_FINISH_BOOL = {_rd.reduce_and_p: collectives.pmin, _rd.reduce_or_p: collectives.pmax}


@rule(_rd.reduce_sum_p, _rd.reduce_max_p, _rd.reduce_min_p, _rd.reduce_and_p,
      _rd.reduce_or_p, _rd.reduce_prod_p, _rd.reduce_xor_p)
def _reduction(p: Partitioner, eqn) -> None:
    (x,), (out,) = eqn.invars, eqn.outvars
    axes = set(eqn.params["axes"])
    have = p.layout_or_replicated(x)
    finish = _FINISH.get(eqn.primitive)
    if finish is None and x.aval.dtype == np.bool_:
        finish = _FINISH_BOOL.get(eqn.primitive)
    if finish is None:  # no collective finishes it: the reduced dimensions are gathered
        have = tuple(() if d in axes else a for d, a in enumerate(have))
    local = p.bind(eqn, [p.read(x, have)])[0]
    over = tuple(a for d in sorted(axes) for a in have[d] if p.mesh.shape[a] > 1)
    if over:
        local = finish(local, over)
    p.write(out, local, tuple(a for d, a in enumerate(have) if d not in axes))


@rule(_rd.argmax_p, _rd.argmin_p)
def _arg_reduction(p: Partitioner, eqn) -> None:
    (x,), (out,) = eqn.invars, eqn.outvars
    axes = set(eqn.params["axes"])
    have = p.layout_or_replicated(x)
    have = tuple(() if d in axes else a for d, a in enumerate(have))
    p.write(out, p.bind(eqn, [p.read(x, have)])[0],
            tuple(a for d, a in enumerate(have) if d not in axes))


@rule(_rd.cumsum_p, _rd.cumprod_p, _rd.cummax_p, _rd.cummin_p, _rd.cumlogsumexp_p)
def _cumulative(p: Partitioner, eqn) -> None:
    _whole_along(p, eqn, {eqn.params["axis"]})


def _all_operands_whole_along(p: Partitioner, eqn, dim: int) -> None:
    """Rules of ops whose operands all have the result's shape and that move data along
    ``dim`` only (a sort with its payloads, the derivative of a cumulative op): ``dim`` is
    gathered, the other dimensions keep their split."""
    aval = eqn.invars[0].aval
    layout = _merge(p, eqn.invars, aval.ndim, aval.shape) or replicated(aval.ndim)
    layout = tuple(() if d == dim else a for d, a in enumerate(layout))
    outs = p.bind(eqn, [p.read(v, layout) for v in eqn.invars])
    for v, o in zip(eqn.outvars, outs):
        p.write(v, o, layout)


@rule(_rd.cumulative_tangent_p)
def _cumulative_tangent(p: Partitioner, eqn) -> None:
    _all_operands_whole_along(p, eqn, eqn.params["axis"])


@rule(_so.sort_p)
def _sort(p: Partitioner, eqn) -> None:
    _all_operands_whole_along(p, eqn, eqn.params["dimension"])


@rule(_so.top_k_p)
def _top_k(p: Partitioner, eqn) -> None:
    _whole_along(p, eqn, {eqn.invars[0].aval.ndim - 1})


@rule(_fft.fft_p)
def _fft_rule(p: Partitioner, eqn) -> None:
    ndim = eqn.invars[0].aval.ndim
    _whole_along(p, eqn, set(range(ndim - len(eqn.params["fft_lengths"]), ndim)))


@rule(_la.cholesky_p, _la.lu_p, _la.qr_p, _la.eigh_p, _la.svd_p, _ls.schur_p, _ls.hessenberg_p)
def _batched_matrix(p: Partitioner, eqn) -> None:
    """Factorizations of a stack of matrices: the stack's dimensions keep their split."""
    ndim = eqn.invars[0].aval.ndim
    _whole_along(p, eqn, {ndim - 2, ndim - 1})


@rule(_la.triangular_solve_p)
def _triangular_solve(p: Partitioner, eqn) -> None:
    a, b = eqn.invars
    ndim = a.aval.ndim
    layout = _merge(p, [a, b], ndim, a.aval.shape[:-2] + (1, 1)) or replicated(ndim)
    layout = layout[:-2] + ((), ())
    out = p.bind(eqn, [p.read(a, layout), p.read(b, layout)])[0]
    p.write(eqn.outvars[0], out, layout)


# ---- products ------------------------------------------------------------------------------


@rule(_la.dot_general_p)
def _dot_general(p: Partitioner, eqn) -> None:
    """Batch dimensions split alike on both sides (data parallelism); a contracting
    dimension split on both sides gives partial products summed with ``psum`` (row-split
    weights); free dimensions keep their split (column-split weights)."""
    lhs, rhs = eqn.invars
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    have_l, have_r = p.layout_or_replicated(lhs), p.layout_or_replicated(rhs)
    shape_l, shape_r = lhs.aval.shape, rhs.aval.shape
    want_l, want_r = [()] * len(shape_l), [()] * len(shape_r)
    used: set = set()

    def take(axes, size):
        if axes and not used & set(axes) and p.divides(size, axes):
            used.update(axes)
            return axes
        return ()

    for i, j in zip(lb, rb):
        want_l[i] = want_r[j] = take(have_l[i] or have_r[j], shape_l[i])
    contracted = []
    for i, j in zip(lc, rc):
        want_l[i] = want_r[j] = take(have_l[i] or have_r[j], shape_l[i])
        contracted += want_l[i]
    free_l = [d for d in range(len(shape_l)) if d not in lc and d not in lb]
    free_r = [d for d in range(len(shape_r)) if d not in rc and d not in rb]
    for d in free_l:
        want_l[d] = take(have_l[d], shape_l[d])
    for d in free_r:
        want_r[d] = take(have_r[d], shape_r[d])
    out = p.bind(eqn, [p.read(lhs, tuple(want_l)), p.read(rhs, tuple(want_r))])[0]
    out = p.psum(out, contracted)
    layout = tuple([want_l[i] for i in lb] + [want_l[d] for d in free_l] +
                   [want_r[d] for d in free_r])
    p.write(eqn.outvars[0], out, layout)


@rule(_la.conv_general_dilated_p)
def _conv(p: Partitioner, eqn) -> None:
    """The batch dimension keeps its split (data parallelism); an input-feature dimension
    split on both operands gives partial sums (the kernel gradient, where the batch is the
    contracted feature); the kernel's output features keep their split."""
    params = eqn.params
    if params["feature_group_count"] != 1 or params["batch_group_count"] != 1:
        return fallback(p, eqn)
    lhs, rhs = eqn.invars
    lhs_spec, rhs_spec, out_spec = params["dimension_numbers"]
    have_l, have_r = p.layout_or_replicated(lhs), p.layout_or_replicated(rhs)
    want_l, want_r = [()] * lhs.aval.ndim, [()] * rhs.aval.ndim
    used: set = set()

    def take(axes, size):
        if axes and not used & set(axes) and p.divides(size, axes):
            used.update(axes)
            return axes
        return ()

    batch = want_l[lhs_spec[0]] = take(have_l[lhs_spec[0]], lhs.aval.shape[lhs_spec[0]])
    feature = take(have_l[lhs_spec[1]] or have_r[rhs_spec[1]], lhs.aval.shape[lhs_spec[1]])
    want_l[lhs_spec[1]] = want_r[rhs_spec[1]] = feature
    out_feature = want_r[rhs_spec[0]] = take(have_r[rhs_spec[0]], rhs.aval.shape[rhs_spec[0]])
    out = p.bind(eqn, [p.read(lhs, tuple(want_l)), p.read(rhs, tuple(want_r))])[0]
    out = p.psum(out, feature)
    layout = [()] * eqn.outvars[0].aval.ndim
    layout[out_spec[0]], layout[out_spec[1]] = batch, out_feature
    p.write(eqn.outvars[0], out, tuple(layout))


@rule(_wd.reduce_window_sum_p, _wd.reduce_window_max_p, _wd.reduce_window_min_p,
      _wd.window_select_p)
def _windowed(p: Partitioner, eqn) -> None:
    """Dimensions the window does not move along (size 1, stride 1, no padding or
    dilation: the batch and feature dimensions of a pooling) keep their split."""
    params = eqn.params
    moved = {d for d in range(eqn.invars[0].aval.ndim)
             if (params["window_dimensions"][d], params["window_strides"][d],
                 tuple(params["padding"][d]), params["base_dilation"][d],
                 params["window_dilation"][d]) != (1, 1, (0, 0), 1, 1)}
    _whole_along(p, eqn, moved)


# ---- gathers and scatters ------------------------------------------------------------------


@rule(_ix.gather_p)
def _gather(p: Partitioner, eqn) -> None:
    """Dimensions the gather takes whole from the operand keep the operand's split; the
    batch dimensions of the indices keep theirs (each device gathers for its indices)."""
    operand, indices = eqn.invars
    out = eqn.outvars[0]
    dn, sizes = eqn.params["dimension_numbers"], eqn.params["slice_sizes"]
    shape = operand.aval.shape
    have_o, have_i = p.layout_or_replicated(operand), p.layout_or_replicated(indices)
    want_o, want_i = [()] * len(shape), [()] * indices.aval.ndim
    layout = [()] * out.aval.ndim
    used: set = set()
    offset_operand = [d for d in range(len(shape))
                      if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims]
    for position, d in enumerate(offset_operand):
        axes = have_o[d]
        if axes and d not in dn.start_index_map and sizes[d] == shape[d] and \
                not used & set(axes):
            want_o[d] = layout[dn.offset_dims[position]] = axes
            used.update(axes)
    batch_out = [k for k in range(out.aval.ndim) if k not in dn.offset_dims]
    for k in range(indices.aval.ndim - 1):
        axes = have_i[k]
        if axes and k not in dn.start_indices_batching_dims and not used & set(axes):
            want_i[k] = layout[batch_out[k]] = axes
            used.update(axes)
    local_sizes = tuple(n // p.parts(axes) for n, axes in zip(sizes, want_o))
    value = p.bind(eqn, [p.read(operand, tuple(want_o)), p.read(indices, tuple(want_i))],
                   slice_sizes=local_sizes)[0]
    p.write(out, value, tuple(layout))


@rule(_ix.scatter_p, _ix.scatter_add_p, _ix.scatter_mul_p, _ix.scatter_min_p,
      _ix.scatter_max_p)
def _scatter(p: Partitioner, eqn) -> None:
    """Window dimensions that cover the operand keep its split; for scatter-add, -min and
    -max, updates split along their scatter dimensions are scattered by each device into
    its copy and combined with psum (onto zeros), pmin or pmax."""
    operand, indices, updates = eqn.invars
    dn = eqn.params["dimension_numbers"]
    shape = operand.aval.shape
    have_o = p.layout_or_replicated(operand)
    have_i = p.layout_or_replicated(indices)
    have_u = p.layout_or_replicated(updates)
    want_o, want_i, want_u = [()] * len(shape), [()] * indices.aval.ndim, \
        [()] * updates.aval.ndim
    used: set = set()
    window_operand = [d for d in range(len(shape))
                      if d not in dn.inserted_window_dims and d not in dn.operand_batching_dims]
    for position, d in enumerate(window_operand):
        u = dn.update_window_dims[position]
        axes = have_o[d] or have_u[u]
        if axes and d not in dn.scatter_dims_to_operand_dims and \
                updates.aval.shape[u] == shape[d] and not used & set(axes):
            want_o[d] = want_u[u] = axes
            used.update(axes)
    combined = ()
    if eqn.primitive in (_ix.scatter_add_p, _ix.scatter_min_p, _ix.scatter_max_p):
        scatter_dims = [u for u in range(updates.aval.ndim) if u not in dn.update_window_dims]
        for k, u in enumerate(scatter_dims):
            axes = have_u[u] or have_i[k]
            if axes and k not in dn.scatter_indices_batching_dims and not used & set(axes) \
                    and p.divides(indices.aval.shape[k], axes):
                want_u[u] = want_i[k] = axes
                combined += axes
                used.update(axes)
    base = p.read(operand, tuple(want_o))
    idx, upd = p.read(indices, tuple(want_i)), p.read(updates, tuple(want_u))
    if combined and eqn.primitive is _ix.scatter_add_p:
        zeros = structural.full(get_aval(base).shape, 0, get_aval(base).dtype)
        value = _ew.add(base, p.psum(p.bind(eqn, [zeros, idx, upd])[0], combined))
    elif combined:
        finish = collectives.pmin if eqn.primitive is _ix.scatter_min_p else collectives.pmax
        value = finish(p.bind(eqn, [base, idx, upd])[0], combined)
    else:
        value = p.bind(eqn, [base, idx, upd])[0]
    p.write(eqn.outvars[0], value, tuple(want_o))


# ---- control flow --------------------------------------------------------------------------


def _sub_partition(p: Partitioner, closed, in_layouts, out_layouts=None) -> Partitioned:
    """A body partitioned on its own; its first inputs are the device coordinates."""
    return partition(closed, p.mesh, in_layouts, out_layouts, p.fallbacks, nested=True)


def _loop_layouts(p: Partitioner, closed, fixed_before, carry, fixed_after, num_carry,
                  carry_out_at=0) -> list:
    """Carry layouts for a loop: those of the initial values, except where the initial value
    is whole on every device and one pass of the body splits it: then the split one (the
    initial value is cut to it for free)."""
    trial = partition(closed, p.mesh, list(fixed_before) + list(carry) + list(fixed_after),
                      None, [], nested=True)
    out = trial.out_layouts[carry_out_at:carry_out_at + num_carry]
    return [o if not any(c) else c for c, o in zip(carry, out)]


@rule(_cf.scan_p)
def _scan(p: Partitioner, eqn) -> None:
    params = eqn.params
    nc, nk = params["num_consts"], params["num_carry"]
    consts, carry, xs = eqn.invars[:nc], eqn.invars[nc:nc + nk], eqn.invars[nc + nk:]
    const_l = [p.layout_or_replicated(v) for v in consts]
    # the scanned dimension is whole: each step takes one slice of it
    x_l = [((),) + p.layout_or_replicated(v)[1:] for v in xs]
    body_x = [layout[1:] for layout in x_l]
    carry_l = _loop_layouts(p, params["jaxpr"], const_l,
                            [p.layout_or_replicated(v) for v in carry], body_x, nk)
    body = _sub_partition(p, params["jaxpr"], const_l + carry_l + body_x,
                          list(carry_l) + [None] * (len(eqn.outvars) - nk))
    ncoords = len(p.mesh.axis_names)
    operands = [p.coords[a] for a in p.mesh.axis_names] + \
        [p.read(v, layout) for v, layout in zip(consts + carry + xs, const_l + carry_l + x_l)]
    outs = p.bind(eqn, operands, jaxpr=body.program, num_consts=ncoords + nc,
                  linear=(False,) * ncoords + tuple(params["linear"]))
    ys_l = [((),) + layout for layout in body.out_layouts[nk:]]
    for v, o, layout in zip(eqn.outvars, outs, carry_l + ys_l):
        p.write(v, o, layout)


@rule(_cf.while_p)
def _while(p: Partitioner, eqn) -> None:
    params = eqn.params
    cc, bc = params["cond_nconsts"], params["body_nconsts"]
    cond_consts, body_consts = eqn.invars[:cc], eqn.invars[cc:cc + bc]
    carry = eqn.invars[cc + bc:]
    cond_l = [p.layout_or_replicated(v) for v in cond_consts]
    body_l = [p.layout_or_replicated(v) for v in body_consts]
    carry_l = _loop_layouts(p, params["body_jaxpr"], body_l,
                            [p.layout_or_replicated(v) for v in carry], [], len(carry))
    body = _sub_partition(p, params["body_jaxpr"], body_l + carry_l, carry_l)
    cond = _sub_partition(p, params["cond_jaxpr"], cond_l + carry_l, [()])
    ncoords = len(p.mesh.axis_names)
    coords = [p.coords[a] for a in p.mesh.axis_names]
    operands = coords + [p.read(v, layout) for v, layout in zip(cond_consts, cond_l)] + \
        coords + [p.read(v, layout) for v, layout in zip(body_consts + carry, body_l + carry_l)]
    outs = p.bind(eqn, operands, cond_jaxpr=cond.program, body_jaxpr=body.program,
                  cond_nconsts=ncoords + cc, body_nconsts=ncoords + bc)
    for v, o, layout in zip(eqn.outvars, outs, carry_l):
        p.write(v, o, layout)


@rule(_cf.cond_p)
def _cond(p: Partitioner, eqn) -> None:
    index, operands = eqn.invars[0], eqn.invars[1:]
    branches = eqn.params["branches"]
    in_l = [p.layout_or_replicated(v) for v in operands]
    out_l = partition(branches[0], p.mesh, in_l, None, [], nested=True).out_layouts
    parted = [_sub_partition(p, b, in_l, out_l).program for b in branches]
    values = [p.coords[a] for a in p.mesh.axis_names] + \
        [p.read(v, layout) for v, layout in zip(operands, in_l)]
    outs = p.bind(eqn, [p.read(index, ())] + values, branches=tuple(parted))
    for v, o, layout in zip(eqn.outvars, outs, out_l):
        p.write(v, o, layout)


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


def _constraint_rule(p: Partitioner, eqn) -> None:
    sharding = eqn.params["sharding"]
    if sharding.mesh != p.mesh:
        raise ValueError(f"with_sharding_constraint to a sharding over the mesh "
                         f"{sharding.mesh} inside a program partitioned over another mesh "
                         f"{p.mesh}: use one mesh")
    (x,), (out,) = eqn.invars, eqn.outvars
    layout = p.fits(x.aval.shape, sharding.layout(x.aval.ndim))
    p.write(out, p.read(x, layout), layout)


def _register_regions() -> None:
    RULES[shard_map_p] = _shard_map_rule
    RULES[sharding_constraint_p] = _constraint_rule
    RULES[ops.first_order_only_p] = _elementwise


_register_regions()


__all__ = ["Partitioned", "Partitioner", "RULES", "fallback", "partition", "rule"]
