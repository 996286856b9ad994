"""Batching (``vmap``): a trace of (value, batch dimension) pairs.

A batching rule receives the operands with their batch dimensions (``None`` when an operand
is not batched) and calls the primitive once on whole batches, returning the outputs and
where their batch dimensions ended up. Nothing here loops over examples.
"""
from __future__ import annotations

import weakref
from typing import Callable, NamedTuple, Sequence

from functrans import _tracer_leaks, core, tree_util
from functrans.core import Tracer, get_aval
from functrans.interpreters.staging import trace_to_jaxpr_dynamic

not_mapped = None


class AxisData(NamedTuple):
    name: object        # the axis name given to vmap (None if unnamed)
    size: int
    spmd_name: object = None
    # A live vmap this one maps the same axis as (a custom function's body re-batched
    # above it): tracers of that vmap met here are its per-example values, not constants.
    stands_for: object = None


class BatchTracer(Tracer):
    __slots__ = ("val", "batch_dim")

    def __init__(self, trace, val, batch_dim):
        self._trace = trace
        self.val = val
        self.batch_dim = batch_dim

    @property
    def aval(self):
        aval = get_aval(self.val)
        if self.batch_dim is None:
            return aval
        shape = list(aval.shape)
        del shape[self.batch_dim]
        return aval.update(shape=tuple(shape))

    def full_lower(self):
        if self.batch_dim is None:
            return core.full_lower(self.val)
        return self

    def _short_repr(self) -> str:
        return f"VmapTracer(aval={self.aval.str_short()}, batched={get_aval(self.val).str_short()})"


class BatchTrace(core.Trace):
    @property
    def axis_data(self) -> AxisData:
        return self.main.payload

    def pure(self, val):
        return BatchTracer(self, val, not_mapped)

    def lift(self, val):
        stands_for = self.axis_data.stands_for
        if stands_for is not None and isinstance(val, BatchTracer) and \
                val._trace.main is stands_for:
            return BatchTracer(self, val.val, val.batch_dim)
        return BatchTracer(self, val, not_mapped)

    def process_primitive(self, primitive, tracers, params):
        vals = [t.val for t in tracers]
        dims = [t.batch_dim for t in tracers]
        if all(d is None for d in dims) and not primitive.is_collective:
            return primitive.bind(*vals, **params)
        if primitive.batch is None:
            raise NotImplementedError(f"batching (vmap) of primitive '{primitive.name}' is "
                                      "not supported")
        outs, out_dims = primitive.batch(vals, dims, **params, axis_data=self.axis_data) \
            if primitive.batch_needs_axis else primitive.batch(vals, dims, **params)
        if primitive.multiple_results:
            return [BatchTracer(self, o, d) for o, d in zip(outs, out_dims)]
        return BatchTracer(self, outs, out_dims)

    def process_custom_jvp_call(self, primitive, fun, jvp, tracers, params):
        vals = [t.val for t in tracers]
        dims = [t.batch_dim for t in tracers]
        return primitive.custom_batch(self, primitive, fun, jvp, vals, dims, params)

    def process_custom_vjp_call(self, primitive, fun, fwd, bwd, tracers, params):
        vals = [t.val for t in tracers]
        dims = [t.batch_dim for t in tracers]
        return primitive.custom_batch(self, primitive, fun, fwd, bwd, vals, dims, params)


# Moving and inserting batch axes binds primitives of the layer above (transpose,
# broadcast_in_dim), which registers them here when it defines them.
_transpose: Callable | None = None
_broadcast_in_dim: Callable | None = None


def register_axis_primitives(transpose: Callable, broadcast_in_dim: Callable) -> None:
    """Register ``transpose(x, permutation)`` and ``broadcast_in_dim(x, shape, dims)``,
    with which batch axes are moved and inserted."""
    global _transpose, _broadcast_in_dim
    _transpose, _broadcast_in_dim = transpose, broadcast_in_dim


def find_axis_main(name) -> core.MainTrace | None:
    """The innermost active vmap whose axis is called ``name``."""
    for main in reversed(core.trace_stack()):
        if main.trace_type is BatchTrace and main.payload.name == name:
            return main
    return None


def batch_fun(fun: Callable, args: Sequence, in_dims: Sequence, axis_size: int,
              out_dims_fn: Callable[[int], Sequence], axis_name=None, spmd_axis_name=None,
              stands_for=None):
    """Apply ``fun`` to batched ``args`` (flat) and return outputs with their batch dims
    moved to ``out_dims_fn(num_outputs)``. ``stands_for``: a live vmap main over the same
    axis whose tracers ``fun`` may close over (see :class:`AxisData`)."""
    axis_data = AxisData(axis_name, axis_size, spmd_axis_name, stands_for)
    with core.new_main(BatchTrace, axis_data, name="vmap") as main:
        trace = BatchTrace(main)
        tracers_in = [BatchTracer(trace, x, d) if d is not None else x
                      for x, d in zip(args, in_dims)]
        outs = fun(*tracers_in)
        tracers_out = [trace.full_raise(o) for o in outs]
        out_dims = out_dims_fn(len(tracers_out))
        results = [matchaxis(axis_size, t.batch_dim, od, t.val)
                   for t, od in zip(tracers_out, out_dims)]
    if _tracer_leaks.enabled():
        main = weakref.ref(main)
        del trace, tracers_in, outs, tracers_out  # only leaks may keep tracers now
        _tracer_leaks.check(main)
    return results


def vmap_leading_axis(fun: Callable, axis_name=None) -> Callable:
    """``fun`` mapped over the leading axis of every array of its (pytree) arguments, every
    output batched along its leading axis: ``vmap(fun)`` for the rules and lax-level
    functions below the public API that apply a function of one example to a batch."""
    def mapped(*args):
        leaves, in_tree = tree_util.tree_flatten(args)
        out_tree_cell: list = []

        def flat(*xs):
            out = fun(*tree_util.tree_unflatten(in_tree, xs))
            out_leaves, out_tree = tree_util.tree_flatten(out)
            out_tree_cell.append(out_tree)
            return out_leaves

        size = get_aval(leaves[0]).shape[0]
        outs = batch_fun(flat, leaves, [0] * len(leaves), size, lambda n: [0] * n, axis_name)
        return tree_util.tree_unflatten(out_tree_cell[0], outs)
    return mapped


# =============================================================================================
# Helpers for batching rules
# =============================================================================================


def moveaxis(x, src: int, dst: int):
    """Move axis ``src`` of ``x`` to position ``dst`` (a transpose, or nothing)."""
    ndim = get_aval(x).ndim
    src, dst = src % ndim, dst % ndim
    if src == dst:
        return x
    perm = [i for i in range(ndim) if i != src]
    perm.insert(dst, src)
    return _transpose(x, tuple(perm))


def broadcast(x, size: int, axis: int):
    """Insert a new axis of length ``size`` at ``axis``, broadcasting ``x`` along it."""
    aval = get_aval(x)
    shape = list(aval.shape)
    shape.insert(axis, size)
    dims = tuple(i for i in range(len(shape)) if i != axis)
    return _broadcast_in_dim(x, tuple(shape), dims)


def bdim_at_front(x, bdim, size: int):
    """``x`` with its batch dim at axis 0, broadcasting it if it is not batched."""
    if bdim is None:
        return broadcast(x, size, 0)
    return moveaxis(x, bdim, 0)


def matchaxis(size: int, src, dst, x):
    """Move batch dim ``src`` of ``x`` to ``dst`` (``None`` dst: must be unbatched)."""
    if dst is None:
        if src is None:
            return x
        raise ValueError("vmap: out_axes is None for an output that is batched; only "
                         "outputs that do not depend on the mapped inputs can use None")
    if src is None:
        return broadcast(x, size, dst if dst >= 0 else dst + get_aval(x).ndim + 1)
    ndim = get_aval(x).ndim
    return moveaxis(x, src, dst % ndim)


def batch_size_of(vals, dims) -> int:
    for v, d in zip(vals, dims):
        if d is not None:
            return get_aval(v).shape[d]
    raise AssertionError("no batched operand")


def broadcast_batcher(primitive):
    """Batching rule for elementwise primitives: operands of equal shape, batch dims aligned
    at 0 (unbatched operands are broadcast along the batch)."""

    def rule(vals, dims, **params):
        size = batch_size_of(vals, dims)
        same = all(d == dims[0] for d in dims) and len({get_aval(v).ndim for v in vals}) == 1
        if same:
            out = primitive.bind(*vals, **params)
            d = dims[0]
            return (out, [d] * len(out)) if primitive.multiple_results else (out, d)
        vals = [bdim_at_front(v, d, size) for v, d in zip(vals, dims)]
        out = primitive.bind(*vals, **params)
        return (out, [0] * len(out)) if primitive.multiple_results else (out, 0)

    primitive.batch = rule
    return rule


def defvectorized(primitive):
    """Batching rule for a unary primitive acting on each element independently."""

    def rule(vals, dims, **params):
        (x,), (d,) = vals, dims
        return primitive.bind(x, **params), d

    primitive.batch = rule
    return rule


def batch_jaxpr(closed, axis_size: int, in_dims: Sequence, out_dims_instantiate: Sequence | bool,
                axis_name=None, spmd_axis_name=None, want_out_dims: Sequence | None = None):
    """Batch a closed jaxpr. Inputs come with ``in_dims`` (None: unbatched). Outputs are
    batched at axis 0 where ``out_dims_instantiate`` says so or where they depend on a batched
    input; returns the new closed jaxpr and each output's batch dim (0 or None)."""
    num_out = len(closed.out_avals)
    if isinstance(out_dims_instantiate, bool):
        out_dims_instantiate = [out_dims_instantiate] * num_out
    in_avals = []
    for aval, d in zip(closed.in_avals, in_dims):
        if d is None:
            in_avals.append(aval)
        else:
            shape = list(aval.shape)
            shape.insert(d, axis_size)
            in_avals.append(aval.update(shape=tuple(shape)))
    out_dims_cell: list = []

    def fun(*args):
        with core.new_main(BatchTrace, AxisData(axis_name, axis_size, spmd_axis_name), name="vmap") as main:
            trace = BatchTrace(main)
            tracers = [BatchTracer(trace, x, d) if d is not None else x for x, d in zip(args, in_dims)]
            outs = core.eval_jaxpr(closed.jaxpr, closed.consts, *tracers)
            outs = [trace.full_raise(o) for o in outs]
            results, dims = [], []
            for t, inst in zip(outs, out_dims_instantiate):
                if t.batch_dim is None and not inst:
                    results.append(t.val)
                    dims.append(None)
                else:
                    results.append(matchaxis(axis_size, t.batch_dim, 0, t.val))
                    dims.append(0)
        out_dims_cell[:] = dims
        return results

    jaxpr, consts = trace_to_jaxpr_dynamic(fun, in_avals)
    return core.ClosedJaxpr(jaxpr, consts), out_dims_cell


# =============================================================================================
# JAX's rule tables, as views of the rule each primitive holds
# =============================================================================================


class _BatchRuleTable:
    """``table[primitive] = rule`` sets the primitive's batching rule, adapting JAX's three
    calling conventions: ``primitive_batchers`` rules take ``(args, dims, **params)``;
    ``axis_primitive_batchers`` rules ``(axis_size, axis_name, trace_type, args, dims,
    **params)``; ``fancy_primitive_batchers`` rules ``(axis_data, args, dims, **params)``."""

    def __init__(self, convention: str):
        self._convention = convention

    def __setitem__(self, primitive, rule):
        if self._convention == "plain":
            primitive.batch = rule
            primitive.batch_needs_axis = False
            return
        if self._convention == "axis":
            def batch(vals, dims, *, axis_data, **params):
                return rule(axis_data.size, axis_data.name, None, vals, dims, **params)
        else:
            def batch(vals, dims, *, axis_data, **params):
                return rule(axis_data, vals, dims, **params)
        batch.jax_rule = rule
        primitive.batch = batch
        primitive.batch_needs_axis = True

    def __getitem__(self, primitive):
        rule = primitive.batch
        if rule is None:
            raise KeyError(primitive)
        return getattr(rule, "jax_rule", rule)

    def __delitem__(self, primitive):
        primitive.batch = None
        primitive.batch_needs_axis = False

    def __contains__(self, primitive):
        return primitive.batch is not None


primitive_batchers = _BatchRuleTable("plain")
axis_primitive_batchers = _BatchRuleTable("axis")
fancy_primitive_batchers = _BatchRuleTable("fancy")
