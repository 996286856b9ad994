"""Gather and scatter, planned for any target.

``gather`` is data movement with computed positions, so it fuses like ``dynamic_slice``:
each output element loads its index vector (itself any fused expression), clamps the window
start into the operand (or, in ``FILL_OR_DROP`` mode, selects the fill value for a window
that does not fit), and loads the operand there. :func:`gather_rule` is the fusion rule the
targets add to the shared table.

The ``scatter`` family writes to data-dependent positions, so it is a step of its own
(:class:`ScatterStep`): the output starts as a copy of the operand, then each element of the
updates, visited in the reference's order (scatter axes, then window axes), is combined into
its target element. Out-of-bounds windows are clamped (``CLIP``) or dropped (otherwise); the
address is clamped either way, so nothing is ever written out of bounds.
:meth:`ScatterStep.expressions` says all of that in the expression language; each target
turns it into code (a serial loop on the CPU, atomic updates on the GPU).

    >>> rule = gather_rule(eqn)    # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from functrans.backends.compiler import exprs as E
from functrans.backends.compiler.fusion import Buffer, FallbackStep, Step, _move, unique_buffers
from functrans.primitives.indexing import GatherScatterMode, default_fill_value
from functrans.primitives import indexing as indexing_prims

# scatter primitive -> the monoid an update combines with (None: it replaces the element)
SCATTER_COMBINE = {indexing_prims.scatter_p: None, indexing_prims.scatter_add_p: "add",
                   indexing_prims.scatter_mul_p: "mul", indexing_prims.scatter_min_p: "min",
                   indexing_prims.scatter_max_p: "max"}


# =============================================================================================
# gather: a fusion rule
# =============================================================================================


def gather_rule(eqn):
    """The fusion rule for a ``gather`` equation, or None when it should run in NumPy."""
    if eqn.primitive is not indexing_prims.gather_p:
        return None
    operand, indices = (v.aval for v in eqn.invars)
    if 0 in operand.shape or indices.dtype.kind not in "iu":
        return None
    return _rule_gather


def _rule_gather(eqn, ops, out_shape):
    mode_enum, default_fill = GatherScatterMode, default_fill_value
    operand, indices = ops
    p = eqn.params
    dn, slice_sizes = p["dimension_numbers"], p["slice_sizes"]
    fill = p["mode"] == mode_enum.FILL_OR_DROP
    rank = len(operand.shape)
    out = E.index_vars(out_shape)
    batch = [out[i] for i in range(len(out_shape)) if i not in dn.offset_dims]
    skipped = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
    window = dict(zip([d for d in range(rank) if d not in skipped],
                      [out[i] for i in dn.offset_dims]))
    starts = {}
    for k, d in enumerate(dn.start_index_map):
        starts[d] = E.from_scalar(_move(indices, batch + [E.const(k)]))
    for od, idim in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
        starts[od] = batch[idim]
    valid = E.constant(True, np.bool_)
    index = []
    for d in range(rank):
        limit = operand.shape[d] - slice_sizes[d]
        start = starts.get(d, E.const(0))
        if fill and d in starts:
            valid = E.logical_and(valid, E.logical_and(E.compare("ge", start, E.const(0)),
                                                       E.compare("le", start, E.const(limit))))
        index.append(E.add(E.clamp_index(start, 0, limit), window.get(d, E.const(0))))
    value = _move(operand, index)
    if fill:
        dtype = eqn.outvars[0].aval.dtype
        fill_value = default_fill(dtype) if p["fill_value"] is None else p["fill_value"]
        value = E.select(valid, value, E.constant(fill_value, dtype))
    return value


# =============================================================================================
# scatter: a native step
# =============================================================================================


class ScatterStep(Step):
    """``out = operand`` with each element of ``updates`` combined into it at the position
    its index vector and window offset address."""

    def __init__(self, primitive, operand, indices, updates, out, params):
        self.prims = (primitive.name,)
        self.combine = SCATTER_COMBINE[primitive]
        self.operand, self.indices, self.updates, self.out = operand, indices, updates, out
        self.params = params

    def reads(self):
        return unique_buffers([self.operand, self.indices, self.updates])

    def writes(self):
        return [self.out]

    def describe(self):
        return (f"{self.prims[0]} {self.operand!r} at {self.indices!r} with {self.updates!r} -> "
                f"{self.out!r} {self.params['dimension_numbers']} {self.params['mode']}")

    def expressions(self):
        """(loop extents, target offset, update value, valid) as expressions of the loop
        variables, which walk ``updates`` in the order [scatter axes..., window axes...]."""
        mode_enum = GatherScatterMode
        dn = self.params["dimension_numbers"]
        upd_shape, op_shape = self.updates.shape, self.operand.shape
        rank = len(op_shape)
        scatter_axes = [i for i in range(len(upd_shape)) if i not in dn.update_window_dims]
        order = scatter_axes + list(dn.update_window_dims)
        extents = [upd_shape[a] for a in order]
        loop = E.index_vars(extents)
        coord = [None] * len(upd_shape)
        for var, axis in zip(loop, order):
            coord[axis] = var
        update = E.load(self.updates, E.linearize(coord, upd_shape))
        batch = [coord[a] for a in scatter_axes]
        skipped = set(dn.inserted_window_dims) | set(dn.operand_batching_dims)
        window_dims = [d for d in range(rank) if d not in skipped]
        window_size = {d: upd_shape[u] for d, u in zip(window_dims, dn.update_window_dims)}
        window_coord = {d: coord[u] for d, u in zip(window_dims, dn.update_window_dims)}
        starts = {}
        for k, d in enumerate(dn.scatter_dims_to_operand_dims):
            position = E.linearize(batch + [E.const(k)], self.indices.shape)
            starts[d] = E.from_scalar(E.load(self.indices, position))
        for od, idim in zip(dn.operand_batching_dims, dn.scatter_indices_batching_dims):
            starts[od] = batch[idim]
        clip = self.params["mode"] == mode_enum.CLIP
        valid = E.constant(True, np.bool_)
        index = []
        for d in range(rank):
            limit = op_shape[d] - window_size.get(d, 1)
            start = starts.get(d, E.const(0))
            if not clip:
                valid = E.logical_and(valid, E.logical_and(E.compare("ge", start, E.const(0)),
                                                           E.compare("le", start, E.const(limit))))
            index.append(E.add(E.clamp_index(start, 0, limit), window_coord.get(d, E.const(0))))
        return extents, E.linearize(index, op_shape), update, valid


def scatter_operands(step: FallbackStep):
    """``(operand, indices, updates)`` buffers of a scatter fallback step whose result is
    used, or None (another primitive, or an operand that is not a buffer)."""
    if step.eqn.primitive not in SCATTER_COMBINE or step.outputs[0] is None:
        return None
    if not all(isinstance(x, Buffer) for x in step.inputs):
        return None
    return step.inputs
