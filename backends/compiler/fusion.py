"""Fusion: turn a jaxpr into a schedule of loop kernels, reductions, matmuls and fallbacks.

The pass decides which values are *materialized* (written to a buffer) and which are
*inlined*: an inlined value is an expression (see :mod:`exprs`) evaluated inside the loop of
the kernel that consumes it, so a chain of elementwise ops, broadcasts, reshapes,
transposes, slices and pads becomes one loop that reads its inputs once and writes its
outputs once. A reduction inlines its operand the same way. A value is materialized when it
is an output of the program, when an operation that needs a buffer (``dot_general``, a
primitive run by its reference implementation) reads it, when two kernels read it (unless it
is pure data movement, which is free to repeat), or when a broadcast would recompute it
many times.

The result, a :class:`Program`, is a list of steps over :class:`Buffer` objects:

* :class:`LoopKernel` — ``out[offset(i)] = expr(i)`` for every ``i`` in a shape;
* :class:`ReduceKernel` — a monoid over some loop dimensions of an expression;
* :class:`DotKernel` — a (batched) matrix product of row-major operands;
* :class:`FallbackStep` — an equation evaluated by the primitive's NumPy implementation.

The pass knows nothing about the target beyond the :class:`Target` predicates it is given,
so the CUDA backend can reuse it.

    >>> import functrans, functrans.numpy as jnp
    >>> closed = functrans.make_jaxpr(lambda x: jnp.exp(x) * 2 + 1)(jnp.ones(4))
    >>> print(plan_program(closed.jaxpr, Target()).describe())  # doctest: +SKIP
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from functrans.backends.compiler import exprs as E
from functrans.backends.compiler.passes import enabled
from functrans.backends.compiler.recomputation import recomputed_values, value_size
from functrans.core import ClosedJaxpr, DropVar, Eqn, Jaxpr, Literal, ShapedArray, Var
from functrans.interpreters import inline
from functrans.primitives import elementwise as ew
from functrans.primitives import linalg, reductions
from functrans.primitives import structural as st
from functrans.primitives import windowed as wd

# =============================================================================================
# What the target can do
# =============================================================================================


class Target:
    """Predicates a backend gives the fusion pass: which dtypes live in its buffers, which
    scalar functions it can emit, which matmuls it can run. The defaults accept everything."""

    def dtype_supported(self, dtype) -> bool:
        return True

    def scalar_supported(self, primitive, params: dict, in_dtypes, out_dtype) -> bool:
        return True

    def dot_supported(self, lhs_dtype, rhs_dtype, out_dtype) -> bool:
        return True

    def reduce_supported(self, monoid: str, dtype) -> bool:
        return True

    def movement_rule(self, eqn: Eqn):
        """An extra rule (with the signature of the data-movement rules below) that fuses
        ``eqn``, or None. Lets a backend fuse a primitive the shared table lacks."""
        return None


class ScalarTableTarget(Target):
    """A target whose buffers, scalar functions and reductions are those of a backend's
    scalar-op module (its ``SUPPORTED_DTYPES`` and ``supports``), set as ``scalar_ops``."""

    scalar_ops = None

    def dtype_supported(self, dtype) -> bool:
        return np.dtype(dtype) in self.scalar_ops.SUPPORTED_DTYPES

    def scalar_supported(self, primitive, params: dict, in_dtypes, out_dtype) -> bool:
        return self.scalar_ops.supports(primitive, params, in_dtypes, out_dtype)

    def reduce_supported(self, monoid: str, dtype) -> bool:
        return self.dtype_supported(dtype)


# =============================================================================================
# Buffers and steps
# =============================================================================================


class Buffer:
    """A row-major array the program reads or writes.

    ``kind`` is ``input`` (a jaxpr argument), ``const`` (a constant the executable holds),
    ``output`` (allocated per call, returned to the user), ``fallback`` (an array a NumPy
    step returned) or ``temp`` (an intermediate in the executable's scratch arena)."""

    __slots__ = ("id", "shape", "dtype", "kind", "value", "is_array")

    def __init__(self, id: int, shape, dtype, kind: str, value=None, is_array: bool = True):
        self.id = id
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.kind = kind
        self.value = value  # the array of a ``const`` buffer
        self.is_array = is_array  # False for non-array values (tokens) passed through as is

    # math.prod, not np.prod: a compile takes hundreds of sizes of small tuples (np.prod:
    # about 4 us each, 2 ms of the MLP step's cold compile)
    size = property(lambda self: math.prod(self.shape))
    nbytes = property(lambda self: self.size * self.dtype.itemsize)

    def __repr__(self):
        return f"%{self.id}:{self.dtype.name}{list(self.shape)}({self.kind})"


class Step:
    prims: tuple = ()
    # a native step that replaced a fallback step (see native_steps) and hands the
    # equation's results over as arrays of its own, as the fallback did
    hands_over_results = False

    def reads(self) -> list:
        raise NotImplementedError

    def writes(self) -> list:
        raise NotImplementedError

    def results(self) -> list:
        """Where a native step that replaced a fallback step writes the equation's results:
        the list of its output buffers (None for a dropped result), which the lowering pass
        may fill in (see :mod:`native_steps`)."""
        return [self.out]


class LoopKernel(Step):
    """For every index ``i`` of ``shape``: ``buffer[offset(i)] = value(i)`` for each output."""

    def __init__(self, shape, outputs, prims):
        self.shape = tuple(shape)
        self.outputs = list(outputs)  # (Buffer, offset IndexExpr, value ScalarExpr)
        self.prims = tuple(prims)

    def reads(self):
        return _loaded_buffers([v for _, _, v in self.outputs])

    def writes(self):
        return [b for b, _, _ in self.outputs]

    def describe(self):
        outs = ", ".join(f"{b!r}" for b, _, _ in self.outputs)
        return f"loop{list(self.shape)} -> {outs}  [{' '.join(self.prims)}]"


class ReduceKernel(Step):
    """``out[offset(i)] = monoid over the dims with reduced[d] of value(i)``."""

    def __init__(self, shape, reduced, monoid, value, out, out_offset, prims):
        self.shape = tuple(shape)
        self.reduced = tuple(reduced)
        self.monoid = monoid
        self.value = value
        self.out = out
        self.out_offset = out_offset
        self.prims = tuple(prims)

    def reads(self):
        return _loaded_buffers([self.value])

    def writes(self):
        return [self.out]

    def describe(self):
        return (f"reduce[{self.monoid}]{list(self.shape)} over "
                f"{[d for d, r in enumerate(self.reduced) if r]} -> {self.out!r}  "
                f"[{' '.join(self.prims)}]")


class DotKernel(Step):
    """``out[b] = op(lhs[b]) @ op(rhs[b])`` over ``batch`` products of row-major matrices:
    lhs is (m, k), or (k, m) when ``lhs_transposed``; rhs is (k, n), or (n, k) when
    ``rhs_transposed``; out is (m, n)."""

    def __init__(self, lhs, rhs, out, batch, m, n, k, lhs_transposed, rhs_transposed):
        self.lhs, self.rhs, self.out = lhs, rhs, out
        self.batch, self.m, self.n, self.k = batch, m, n, k
        self.lhs_transposed, self.rhs_transposed = lhs_transposed, rhs_transposed
        self.prims = ("dot_general",)
        # out = alpha * product (+ out, when accumulating: see fuse_dot_epilogues)
        self.alpha = 1.0
        self.accumulate = False

    def reads(self):
        return [self.lhs, self.rhs] + ([self.out] if self.accumulate else [])

    def writes(self):
        return [self.out]

    def describe(self):
        scale = "" if self.alpha == 1.0 else f"{self.alpha!r}*"
        return (f"dot b={self.batch} m={self.m} n={self.n} k={self.k} "
                f"lhs{'ᵀ' if self.lhs_transposed else ''}={self.lhs!r} "
                f"rhs{'ᵀ' if self.rhs_transposed else ''}={self.rhs!r} -> "
                f"{'+= ' if self.accumulate else ''}{scale}{self.out!r}")


class AxisStep(Step):
    """``out = primitive(operand)`` walking ``axis`` (from the end if ``reverse``): the
    operand viewed as ``[outer, n, inner]`` with ``n`` the walked axis. Backends emit the
    walk (cumulative ops, arg-extrema)."""

    def __init__(self, primitive, operand: Buffer, out: Buffer, axis: int,
                 reverse: bool = False):
        self.prims = (primitive.name,)
        self.primitive, self.name = primitive, primitive.name
        self.operand, self.out = operand, out
        self.axis, self.reverse = axis, reverse
        shape = operand.shape
        self.outer = math.prod(shape[:axis])
        self.n = shape[axis]
        self.inner = math.prod(shape[axis + 1:])

    @property
    def lines(self) -> int:
        return self.outer * self.inner

    def reads(self):
        return [self.operand]

    def writes(self):
        return [self.out]

    def describe(self):
        return (f"{self.name}[axis {self.axis}{', reverse' if self.reverse else ''}] "
                f"{self.operand!r} -> {self.out!r}")


class FallbackStep(Step):
    """``eqn`` run by its primitive's reference implementation on NumPy arrays."""

    def __init__(self, eqn: Eqn, inputs, outputs):
        self.eqn = eqn
        self.inputs = list(inputs)  # Buffer, or a NumPy scalar for a literal
        self.outputs = list(outputs)  # Buffer, or None for a dropped output
        self.prims = (eqn.primitive.name,)
        self.driver = None  # runs the step instead of the reference impl (see host_loops)

    def reads(self):
        return [b for b in self.inputs if isinstance(b, Buffer)]

    def writes(self):
        return [b for b in self.outputs if b is not None]

    def describe(self):
        how = "around compiled bodies" if self.driver is not None else "numpy"
        return f"{how} {self.eqn.primitive.name} {self.inputs} -> {self.outputs}"


def unique_buffers(buffers) -> list:
    """``buffers`` in order, each once (by id), without ``None`` entries."""
    seen, out = set(), []
    for b in buffers:
        if b is not None and b.id not in seen:
            seen.add(b.id)
            out.append(b)
    return out


def _loaded_buffers(values) -> list:
    return unique_buffers(n.args[0] for n in E.loads(values))


class Program:
    """The fused schedule of one jaxpr."""

    def __init__(self, inputs, consts, outputs, steps, buffers):
        self.inputs = inputs  # one Buffer per jaxpr invar
        self.consts = consts  # Buffers of kind const (constvars, then literal arrays)
        self.outputs = outputs  # per jaxpr outvar: a Buffer, or a NumPy array for a literal
        self.steps = steps
        self.buffers = buffers

    def new_buffer(self, shape, dtype, kind: str, value=None) -> Buffer:
        """A new buffer of this program (a ``const`` one holds ``value``)."""
        buffer = Buffer(len(self.buffers), shape, dtype, kind, value)
        self.buffers.append(buffer)
        return buffer

    def describe(self) -> str:
        lines = [f"inputs {self.inputs}", f"consts {self.consts}"]
        lines += [s.describe() for s in self.steps]
        lines.append(f"outputs {[o if isinstance(o, Buffer) else 'literal' for o in self.outputs]}")
        return "\n".join(lines)


# =============================================================================================
# Flattening: calls inlined, every variable bound once
# =============================================================================================


def flat_closed(closed: ClosedJaxpr) -> ClosedJaxpr:
    """:func:`flat_program` as a closed jaxpr (a compiler pass: see ``passes``)."""
    jaxpr, consts = flat_program(closed)
    return ClosedJaxpr(jaxpr, consts)


def flat_program(closed: ClosedJaxpr) -> tuple[Jaxpr, list]:
    """``closed``'s program with its call-like equations (nested ``jit``, custom derivative
    calls, checkpoints, the decompositions of :mod:`decompose`) replaced by their bodies,
    through the front end's one inliner, and every variable bound once: the form
    :func:`plan_program` takes. Returns the jaxpr and its constants."""
    closed = inline.inline_calls(closed)
    return _barrier_per_value(to_ssa(closed.jaxpr)), list(closed.consts)


def _barrier_per_value(jaxpr: Jaxpr) -> Jaxpr:
    """``jaxpr`` with each ``optimization_barrier`` of several values split into one per
    value: the planner runs a barrier of one value as the identity (no step, no copy; see
    ``IDENTITY_PRIMS``), and what a barrier is for, keeping the equations that read its
    results apart from those that read its operands, holds value by value."""
    if not any(e.primitive is wd.optimization_barrier_p and len(e.invars) > 1
               for e in jaxpr.eqns):
        return jaxpr
    eqns = []
    for e in jaxpr.eqns:
        if e.primitive is wd.optimization_barrier_p and len(e.invars) > 1:
            eqns += [e.replace(invars=[x], outvars=[v]) for x, v in zip(e.invars, e.outvars)]
        else:
            eqns.append(e)
    return Jaxpr(jaxpr.constvars, jaxpr.invars, jaxpr.outvars, eqns)


def to_ssa(jaxpr: Jaxpr) -> Jaxpr:
    """``jaxpr`` with every variable bound once. A program that rebinds a variable (as a body
    spliced twice by an inliner may) means, read in order, the latest binding; fusion
    relies on single assignment, so rebound variables get fresh names."""
    bound: set = set(jaxpr.constvars) | set(jaxpr.invars)
    if all(v not in bound and not bound.add(v) for e in jaxpr.eqns for v in e.outvars
           if not isinstance(v, DropVar)):
        return jaxpr
    bound = set(jaxpr.constvars) | set(jaxpr.invars)
    current: dict = {}
    eqns = []

    def read(v):
        return v if isinstance(v, Literal) else current.get(v, v)

    for e in jaxpr.eqns:
        ins = [read(v) for v in e.invars]
        outs = []
        for v in e.outvars:
            if isinstance(v, DropVar):
                outs.append(v)
            elif v in bound:
                nv = Var(v.aval)
                current[v] = nv
                outs.append(nv)
            else:
                bound.add(v)
                current.pop(v, None)
                outs.append(v)
        eqns.append(e.replace(invars=ins, outvars=outs))
    return Jaxpr(jaxpr.constvars, jaxpr.invars, [read(v) for v in jaxpr.outvars], eqns)


# =============================================================================================
# Per-primitive rules: how an output element is computed from operand elements
# =============================================================================================
#
# A rule gets the equation, one expression per operand (a ScalarExpr over the operand's own
# loop variables, see ``_Lazy``) and returns the output's expression over the output's loop
# variables. Data movement substitutes index expressions into the operand; elementwise ops
# wrap their operands in an ``op`` node.

ELEMENTWISE_EXTRA = (ew.select_n_p, ew.clamp_p, ew.convert_element_type_p)
# the identity on values: the planner reads the operand's value for the result's. (A
# barrier's job, keeping common-subexpression elimination from merging across it, is done
# by the time a program is planned.)
IDENTITY_PRIMS = (ew.stop_gradient_p, wd.optimization_barrier_p)
# reduction primitive -> the monoid its kernel combines with
REDUCE_MONOIDS = {reductions.reduce_sum_p: "add", reductions.reduce_max_p: "max",
                  reductions.reduce_min_p: "min", reductions.reduce_prod_p: "mul",
                  reductions.reduce_and_p: "and", reductions.reduce_or_p: "or",
                  reductions.reduce_xor_p: "xor"}
# elementwise primitives: scalar code of the target's (its ``scalar_supported``) in a loop
ELEMENTWISE_PRIMS = frozenset(ew.ELEMENTWISE_UNARY.values()) | \
    frozenset(ew.ELEMENTWISE_BINARY.values()) | frozenset(ELEMENTWISE_EXTRA)


class _Lazy:
    """An inlined value: ``node`` is its element at the loop variables of ``shape``."""

    __slots__ = ("node", "shape", "prims")

    def __init__(self, node, shape, prims=()):
        self.node = node
        self.shape = tuple(shape)
        self.prims = tuple(prims)


def _params_key(params: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in params.items() if k not in ("sharding",)))


def _move(operand: _Lazy, operand_index) -> E.ScalarExpr:
    """The operand's expression at the given index expressions (one per operand dim)."""
    mapping = {E.ivar(k, s): idx for k, (s, idx) in enumerate(zip(operand.shape, operand_index))
               if s > 1}
    return E.substitute([operand.node], mapping)[0]


def _rule_elementwise(eqn, ops, out_shape):
    dtype = eqn.outvars[0].aval.dtype
    return E.op(eqn.primitive, _params_key(eqn.params), tuple(o.node for o in ops), dtype)


def _rule_broadcast_in_dim(eqn, ops, out_shape):
    x, = ops
    out = E.index_vars(out_shape)
    dims = eqn.params["broadcast_dimensions"]
    return _move(x, [out[d] if x.shape[i] == out_shape[d] else E.const(0)
                     for i, d in enumerate(dims)])


def _reshape_index(in_shape, out_shape, out_index):
    """Operand coordinates of a row-major reshape. Dimensions are matched in groups of equal
    product so each group's flat index is split separately (fewer div/mod to simplify)."""
    in_shape, out_shape = list(in_shape), list(out_shape)
    result = []
    i = j = 0
    while i < len(in_shape) or j < len(out_shape):
        gi, gj = [i], [j]
        if i >= len(in_shape):
            j += 1
            continue
        if j >= len(out_shape):
            result.append(E.const(0))
            i += 1
            continue
        pi, pj = in_shape[i], out_shape[j]
        i, j = i + 1, j + 1
        while pi != pj:
            if pi < pj:
                pi *= in_shape[i]
                gi.append(i)
                i += 1
            else:
                pj *= out_shape[j]
                gj.append(j)
                j += 1
        # absorb trailing size-1 dims into this group
        while i < len(in_shape) and in_shape[i] == 1 and (j >= len(out_shape) or out_shape[j] != 1):
            gi.append(i)
            i += 1
        while j < len(out_shape) and out_shape[j] == 1 and (i >= len(in_shape) or in_shape[i] != 1):
            gj.append(j)
            j += 1
        flat = E.linearize([out_index[d] for d in gj], [out_shape[d] for d in gj])
        result.extend(E.delinearize(flat, [in_shape[d] for d in gi]))
    return result


def _rule_reshape(eqn, ops, out_shape):
    x, = ops
    if eqn.params.get("dimensions") is not None:
        raise NotImplementedError("reshape with dimensions")
    if 0 in x.shape:
        return E.constant(0, eqn.outvars[0].aval.dtype)
    return _move(x, _reshape_index(x.shape, out_shape, E.index_vars(out_shape)))


def _rule_transpose(eqn, ops, out_shape):
    x, = ops
    perm = eqn.params["permutation"]
    out = E.index_vars(out_shape)
    index = [None] * len(perm)
    for j, p in enumerate(perm):
        index[p] = out[j]
    return _move(x, index)


def _rule_squeeze(eqn, ops, out_shape):
    x, = ops
    dims = set(eqn.params["dimensions"])
    out = iter(E.index_vars(out_shape))
    return _move(x, [E.const(0) if d in dims else next(out) for d in range(len(x.shape))])


def _rule_rev(eqn, ops, out_shape):
    x, = ops
    dims = set(eqn.params["dimensions"])
    out = E.index_vars(out_shape)
    return _move(x, [E.add(E.scale(v, -1), s - 1) if d in dims else v
                     for d, (v, s) in enumerate(zip(out, out_shape))])


def _rule_slice(eqn, ops, out_shape):
    x, = ops
    starts = eqn.params["start_indices"]
    strides = eqn.params.get("strides") or (1,) * len(starts)
    out = E.index_vars(out_shape)
    return _move(x, [E.add(E.scale(v, st), s0) for v, s0, st in zip(out, starts, strides)])


def _rule_pad(eqn, ops, out_shape):
    x, pad_value = ops
    out = E.index_vars(out_shape)
    valid = E.constant(True, np.bool_)
    index = []
    for v, n, (lo, _hi, interior) in zip(out, x.shape, eqn.params["padding_config"]):
        step = interior + 1
        shifted = E.add(v, -lo)
        pos = E.floordiv(shifted, step)
        valid = E.logical_and(valid, E.compare("ge", shifted, E.const(0)))
        if step > 1:
            valid = E.logical_and(valid, E.compare("eq", E.mod(shifted, step), E.const(0)))
        valid = E.logical_and(valid, E.compare("lt", pos, E.const(n)))
        index.append(E.clamp_index(pos, 0, max(n - 1, 0)))
    if 0 in x.shape:
        return pad_value.node
    return E.select(valid, _move(x, index), pad_value.node)


def _rule_concatenate(eqn, ops, out_shape):
    axis = eqn.params["dimension"]
    out = E.index_vars(out_shape)
    pieces, offset = [], 0
    for x in ops:
        n = x.shape[axis]
        if n:
            index = list(out)
            index[axis] = E.clamp_index(E.add(out[axis], -offset), 0, n - 1)
            pieces.append((offset, _move(x, index)))
        offset += n
    if not pieces:  # every operand is empty along the axis: so is the result
        return E.constant(0, eqn.outvars[0].aval.dtype)
    value = pieces[-1][1]
    for start, piece in reversed(pieces[:-1]):
        end = next(s for s, _ in pieces if s > start)
        value = E.select(E.compare("lt", out[axis], E.const(end)), piece, value)
    return value


def _rule_iota(eqn, ops, out_shape):
    p = eqn.params
    return E.iota(E.ivar(p["dimension"], out_shape[p["dimension"]]), eqn.outvars[0].aval.dtype)


def _clamped_start(start: _Lazy, dim: int, size: int) -> E.IndexExpr:
    return E.clamp_index(E.from_scalar(start.node), 0, dim - size)


def _rule_dynamic_slice(eqn, ops, out_shape):
    x, *starts = ops
    out = E.index_vars(out_shape)
    return _move(x, [E.add(v, _clamped_start(s, n, z))
                     for v, s, n, z in zip(out, starts, x.shape, out_shape)])


def _rule_dynamic_update_slice(eqn, ops, out_shape):
    x, update, *starts = ops
    out = E.index_vars(out_shape)
    inside = E.constant(True, np.bool_)
    index = []
    for v, s, n, z in zip(out, starts, x.shape, update.shape):
        begin = _clamped_start(s, n, z)
        rel = E.add(v, E.scale(begin, -1))
        inside = E.logical_and(inside, E.compare("ge", rel, E.const(0)))
        inside = E.logical_and(inside, E.compare("lt", rel, E.const(z)))
        index.append(E.clamp_index(rel, 0, max(z - 1, 0)))
    if 0 in update.shape:
        return x.node
    return E.select(inside, _move(update, index), x.node)


_MOVEMENT_RULES: dict = {
    st.broadcast_in_dim_p: _rule_broadcast_in_dim, st.reshape_p: _rule_reshape,
    st.transpose_p: _rule_transpose, st.squeeze_p: _rule_squeeze,
    st.rev_p: _rule_rev, st.slice_p: _rule_slice, st.pad_p: _rule_pad,
    st.concatenate_p: _rule_concatenate, st.iota_p: _rule_iota,
    st.dynamic_slice_p: _rule_dynamic_slice,
    st.dynamic_update_slice_p: _rule_dynamic_update_slice,
}
MOVEMENT_PRIMS = tuple(_MOVEMENT_RULES)

# Ops that only move or re-index data: repeating them in several kernels costs loads, not
# arithmetic, so they never force a buffer by themselves.
_CHEAP = {st.broadcast_in_dim_p, st.reshape_p, st.transpose_p, st.squeeze_p, st.rev_p,
          st.slice_p, st.iota_p, st.dynamic_slice_p, ew.convert_element_type_p,
          ew.stop_gradient_p}
# data movement whose result is larger than an operand without reading any element twice
_PLACING = {st.pad_p, st.concatenate_p}


# =============================================================================================
# The pass
# =============================================================================================


def _classify(eqn: Eqn, target: Target, elementwise: set) -> str:
    """``fusible``, ``identity``, ``reduce``, ``dot`` or ``fallback``."""
    primitive = eqn.primitive
    if len(eqn.outvars) != 1 or (primitive.multiple_results and
                                 primitive is not wd.optimization_barrier_p):
        return "fallback"
    out = eqn.outvars[0].aval
    in_avals = [v.aval for v in eqn.invars]
    if not all(isinstance(a, ShapedArray) and target.dtype_supported(a.dtype)
               for a in in_avals + [out]):
        return "fallback"
    if primitive in IDENTITY_PRIMS and len(eqn.invars) == 1:
        return "identity"
    if primitive in elementwise:
        ok = target.scalar_supported(primitive, eqn.params, [a.dtype for a in in_avals],
                                     out.dtype)
        return "fusible" if ok else "fallback"
    if primitive in _MOVEMENT_RULES:
        if primitive is st.reshape_p and eqn.params.get("dimensions") is not None:
            return "fallback"
        return "fusible"
    if primitive in REDUCE_MONOIDS:
        ok = set(eqn.params) <= {"axes", "out_sharding"} and target.reduce_supported(
            REDUCE_MONOIDS[primitive], out.dtype)
        return "reduce" if ok else "fallback"
    if primitive is linalg.dot_general_p:
        ok = target.dot_supported(in_avals[0].dtype, in_avals[1].dtype, out.dtype)
        return "dot" if ok else "fallback"
    if target.movement_rule(eqn) is not None:
        return "fusible"
    return "fallback"


def plan_program(jaxpr: Jaxpr, target: Target, consts: Sequence = (), *, fuse: bool = True,
                 force_fallback: frozenset = frozenset()) -> Program:
    """Fuse ``jaxpr`` (already flat: see :func:`flat_program`) into a :class:`Program`.

    ``fuse=False`` materializes every value (one kernel per equation), the schedule used to
    isolate a fusion bug. Equations whose index is in ``force_fallback`` run in NumPy."""
    with E.lock:
        return _Planner(jaxpr, target, consts, fuse, force_fallback).run()


class _Planner:
    def __init__(self, jaxpr, target, consts, fuse, force_fallback):
        self.jaxpr = jaxpr
        self.target = target
        self.const_values = list(consts)
        self.fuse = fuse
        self.force_fallback = force_fallback
        self.broadcast_operand_buffers = enabled("broadcast_operands")
        self.buffers: list[Buffer] = []
        self.steps: list[Step] = []

    def new_buffer(self, shape, dtype, kind, value=None, is_array=True) -> Buffer:
        b = Buffer(len(self.buffers), shape, dtype, kind, value, is_array)
        self.buffers.append(b)
        return b

    # ---- the decisions: which values get buffers ---------------------------------------------

    def classify_all(self):
        elementwise = ELEMENTWISE_PRIMS
        self.kinds = []
        for i, e in enumerate(self.jaxpr.eqns):
            kind = "fallback" if i in self.force_fallback else _classify(e, self.target, elementwise)
            self.kinds.append(kind)

    def decide(self):
        """Walk the equations backwards. Each value learns which kernels read it (and how
        many times per element) before its own producer is visited."""
        eqns, kinds = self.jaxpr.eqns, self.kinds
        outvars = {v for v in self.jaxpr.outvars if isinstance(v, Var)}
        producer = {}
        for i, e in enumerate(eqns):
            for v in e.outvars:
                producer[v] = i
        # forward: values made of data movement only (cheap to repeat anywhere), and values
        # computed from iotas and literals alone (no data: repeating them costs a few
        # integer operations, and they stay visible as index arithmetic)
        cheap: dict = {}
        data_free: dict = {}
        for i, e in enumerate(eqns):
            fusible = kinds[i] in ("fusible", "identity")
            free = fusible and all(isinstance(x, Literal) or data_free.get(x, False)
                                   for x in e.invars)
            for v in e.outvars:
                data_free[v] = free
            if fusible and (e.primitive in _CHEAP or kinds[i] == "identity"):
                cheap[e.outvars[0]] = free or all(
                    isinstance(x, Literal) or x not in producer or cheap.get(x, True)
                    for x in e.invars)
            else:
                for v in e.outvars:
                    cheap[v] = free or kinds[i] not in ("fusible",)
        consumers: dict = {}  # var -> list of (kernel id, repeat) or "buffer"
        self.materialized: set = set()
        self.live_eqns: set = set()
        self.matrix_kernels: set = set()
        kernel_ids = iter(range(1 << 62))
        kernels_of: dict = {}
        repeat_of: dict = {}
        for i in reversed(range(len(eqns))):
            e, kind = eqns[i], kinds[i]
            outs = [v for v in e.outvars if not isinstance(v, DropVar)]
            used = [v for v in outs if v in outvars or consumers.get(v)]
            if not used and kind != "fallback":
                continue
            self.live_eqns.add(i)
            if kind in ("fusible", "identity"):
                v = e.outvars[0]
                cons = consumers.get(v, [])
                needs_buffer = (not self.fuse or v in outvars or "buffer" in cons)
                ks = {k for c in cons if c != "buffer" for k in c[0]}
                rep = max([c[1] for c in cons if c != "buffer"], default=1.0)
                operand_buffer = False
                if not needs_buffer and not cheap.get(v, False):
                    if len(ks) > 1 or (rep > 1.0 and value_size(v) > 1):
                        # a broadcast read by several kernels: its smaller operand gets
                        # the buffer and each reader repeats the broadcast as loads
                        operand_buffer = self.broadcast_operand_buffers and \
                            _broadcasts_smaller(e)
                        needs_buffer = not operand_buffer
                if needs_buffer:
                    self.materialized.add(v)
                    ks, rep = {next(kernel_ids)}, 1.0
                kernels_of[v], repeat_of[v] = frozenset(ks), rep
                if operand_buffer:
                    consumers.setdefault(e.invars[0], []).append("buffer")
                    continue
                out_size = max(value_size(v), 1)
                for x in e.invars:
                    if isinstance(x, Var):
                        # elements read per element of x: a broadcast repeats them; a pad
                        # or a concatenation places each once in a larger result
                        factor = 1.0 if e.primitive in _PLACING else \
                            out_size / max(value_size(x), 1)
                        consumers.setdefault(x, []).append((kernels_of[v], rep * factor))
            elif kind == "reduce":
                self.materialized.update(outs)
                k = next(kernel_ids)
                for x in e.invars:
                    if isinstance(x, Var):
                        consumers.setdefault(x, []).append((frozenset([k]), 1.0))
                        if not self.fuse:
                            consumers[x].append("buffer")
            elif kind == "dot":
                self.materialized.update(outs)
                for x in e.invars:
                    if isinstance(x, Var):
                        # a dot operand gets a buffer in matrix layout: its own kernel
                        k = next(kernel_ids)
                        self.matrix_kernels.add(k)
                        consumers.setdefault(x, []).append((frozenset([k]), 1.0))
                        if not self.fuse:
                            consumers[x].append("buffer")
            else:
                self.materialized.update(outs)
                for x in e.invars:
                    if isinstance(x, Var):
                        consumers.setdefault(x, []).append("buffer")
        if self.fuse and enabled("recomputed_values"):
            self.materialized -= recomputed_values(
                eqns, kinds, self.live_eqns, self.materialized, consumers, outvars,
                self.matrix_kernels, _CHEAP)

    # ---- building the steps ----------------------------------------------------------------

    def run(self) -> Program:
        self.classify_all()
        self.decide()
        env: dict = {}
        inputs = []
        for v in self.jaxpr.invars:
            b = self.new_buffer(v.aval.shape, v.aval.dtype, "input",
                                is_array=isinstance(v.aval, ShapedArray))
            inputs.append(b)
            env[v] = b
        consts = []
        for v, c in zip(self.jaxpr.constvars, self.const_values):
            b = self.new_buffer(v.aval.shape, v.aval.dtype, "const", c)
            consts.append(b)
            env[v] = b
        self.env = env
        self.consts = consts
        for i, e in enumerate(self.jaxpr.eqns):
            if i not in self.live_eqns:
                continue
            kind = self.kinds[i]
            if kind == "identity":
                env[e.outvars[0]] = env[e.invars[0]] if isinstance(e.invars[0], Var) else \
                    self.lazy_of(e.invars[0])
                if e.outvars[0] in self.materialized and not isinstance(env[e.outvars[0]], Buffer):
                    env[e.outvars[0]] = self.materialize(e.outvars[0], env[e.outvars[0]])
            elif kind == "fusible":
                self.build_fusible(e)
            elif kind == "reduce":
                self.build_reduce(e)
            elif kind == "dot":
                self.build_dot(e)
            else:
                self.build_fallback(e)
        outputs = []
        for v in self.jaxpr.outvars:
            if isinstance(v, Literal):
                outputs.append(np.asarray(v.val, v.aval.dtype))
                continue
            value = env[v]
            if not isinstance(value, Buffer):
                value = env[v] = self.materialize(v, value)
            outputs.append(value)
        for b in outputs:
            if isinstance(b, Buffer) and b.kind == "temp":
                b.kind = "output"
        return Program(inputs, self.consts, outputs, self.steps, self.buffers)

    def lazy_of(self, x) -> _Lazy:
        if isinstance(x, Literal):
            return _Lazy(E.constant(x.val, x.aval.dtype), ())
        value = self.env[x]
        if isinstance(value, _Lazy):
            return value
        return _Lazy(E.load(value, E.linearize(E.index_vars(value.shape), value.shape)),
                     value.shape)

    def buffer_of(self, x) -> Buffer:
        """A buffer holding ``x`` (materializing an inlined value or a literal)."""
        if isinstance(x, Literal):
            return self.const_buffer(np.asarray(x.val, x.aval.dtype))
        value = self.env[x]
        if isinstance(value, Buffer):
            return value
        self.env[x] = self.materialize(x, value)
        return self.env[x]

    def const_buffer(self, array) -> Buffer:
        b = self.new_buffer(array.shape, array.dtype, "const", np.asarray(array, order="C"))
        self.consts.append(b)
        return b

    def materialize(self, v, lazy: _Lazy) -> Buffer:
        b = self.new_buffer(v.aval.shape, v.aval.dtype, "temp")
        self.emit_loop(lazy.shape, [(b, lazy.node)], lazy.prims)
        return b

    def emit_loop(self, shape, outputs, prims):
        shape = tuple(shape)
        outs = [(b, E.linearize(E.index_vars(shape), shape), node) for b, node in outputs]
        if math.prod(shape) == 0:
            return
        self.steps.append(LoopKernel(shape, outs, prims))

    def build_fusible(self, e: Eqn):
        name = e.primitive.name
        ops = [self.lazy_of(x) for x in e.invars]
        out_shape = e.outvars[0].aval.shape
        rule = _MOVEMENT_RULES.get(e.primitive) or self.target.movement_rule(e) or \
            _rule_elementwise
        node = rule(e, ops, out_shape)
        prims = tuple(dict.fromkeys(sum((o.prims for o in ops), ()) + (name,)))
        lazy = _Lazy(node, out_shape, prims)
        v = e.outvars[0]
        if v in self.materialized:
            self.env[v] = self.materialize(v, lazy)
        else:
            self.env[v] = lazy

    def build_reduce(self, e: Eqn):
        x, = e.invars
        operand = self.lazy_of(x)
        axes = set(e.params["axes"])
        v = e.outvars[0]
        out = self.new_buffer(v.aval.shape, v.aval.dtype, "temp")
        self.env[v] = out
        if out.size == 0:
            return
        shape = operand.shape
        ivars = E.index_vars(shape)
        kept = [ivars[d] for d in range(len(shape)) if d not in axes]
        offset = E.linearize(kept, out.shape)
        reduced = [d in axes for d in range(len(shape))]
        self.steps.append(ReduceKernel(shape, reduced, REDUCE_MONOIDS[e.primitive],
                                       operand.node, out, offset,
                                       tuple(dict.fromkeys(operand.prims + (e.primitive.name,)))))

    def build_dot(self, e: Eqn):
        (lc, rc), (lb, rb) = e.params["dimension_numbers"]
        lhs_v, rhs_v = e.invars
        lhs, rhs = self.lazy_of(lhs_v), self.lazy_of(rhs_v)
        lf = [d for d in range(len(lhs.shape)) if d not in lc and d not in lb]
        rf = [d for d in range(len(rhs.shape)) if d not in rc and d not in rb]
        size = lambda shape, dims: math.prod([shape[d] for d in dims])  # noqa: E731
        batch, m, k, n = size(lhs.shape, lb), size(lhs.shape, lf), size(lhs.shape, lc), size(rhs.shape, rf)
        lhs_buf, lhs_t = self.matrix_operand(lhs_v, lhs, list(lb), list(lf), list(lc))
        rhs_buf, rhs_t = self.matrix_operand(rhs_v, rhs, list(rb), list(rc), list(rf))
        v = e.outvars[0]
        out = self.new_buffer(v.aval.shape, v.aval.dtype, "temp")
        self.env[v] = out
        if out.size == 0:
            return
        self.steps.append(DotKernel(lhs_buf, rhs_buf, out, batch, m, n, k, lhs_t, rhs_t))

    def matrix_operand(self, var, lazy: _Lazy, batch, first, second):
        """A buffer holding the operand in [batch, first, second] row-major order, or in
        [batch, second, first] order (then the flag is True). Reuses an existing buffer when
        its layout already is one of the two; otherwise a kernel writes the canonical one."""
        def read_in(order):
            """The operand's shape in ``order``, the index variables, and its value there."""
            shape = [lazy.shape[d] for d in order]
            ivars = E.index_vars(shape)
            index = [None] * len(order)
            for j, d in enumerate(order):
                index[d] = ivars[j]
            return shape, ivars, _move(lazy, index)

        for order, transposed in ((batch + first + second, False), (batch + second + first, True)):
            shape, ivars, node = read_in(order)
            if node.kind == "load" and node.args[1] is E.linearize(ivars, shape):
                buf = node.args[0]
                if buf.size == math.prod(shape):
                    return buf, transposed
        shape, _, node = read_in(batch + first + second)
        b = self.new_buffer(shape, var.aval.dtype if isinstance(var, Var) else lazy.node.dtype, "temp")
        self.emit_loop(shape, [(b, node)], lazy.prims + ("transpose",))
        return b, False

    def build_fallback(self, e: Eqn):
        inputs = []
        for x in e.invars:
            if isinstance(x, Literal):
                inputs.append(np.asarray(x.val, x.aval.dtype))
            elif not isinstance(self.env.get(x), Buffer):
                inputs.append(self.buffer_of(x))
            else:
                inputs.append(self.env[x])
        outputs = []
        for v in e.outvars:
            if isinstance(v, DropVar):
                outputs.append(None)
                continue
            aval = v.aval
            b = self.new_buffer(getattr(aval, "shape", ()), getattr(aval, "dtype", np.bool_),
                                "fallback", is_array=isinstance(aval, ShapedArray))
            outputs.append(b)
            self.env[v] = b
        self.steps.append(FallbackStep(e, inputs, outputs))


def _broadcasts_smaller(e: Eqn) -> bool:
    """Whether ``e`` broadcasts a computed value to a larger result: writing that result
    out for its several readers would cost a full pass where the operand is a few loads."""
    return (e.primitive is st.broadcast_in_dim_p and len(e.invars) == 1
            and isinstance(e.invars[0], Var)
            and value_size(e.invars[0]) < value_size(e.outvars[0]))


# =============================================================================================
# Loop normalization: merge dimensions the loops can walk as one
# =============================================================================================


def collapse_dims(shape, groups, roots):
    """Merge adjacent loop dimensions of ``shape`` wherever every index expression in
    ``roots`` stays free of div/mod after the merge (so the merged loop walks memory the same
    way, with fewer loop levels and a longer, vectorizable inner loop). ``groups[d]`` labels
    each dimension; only dimensions with equal labels merge (a reduction keeps kept and
    reduced dimensions apart). Returns (shape, groups, roots)."""
    shape, groups, roots = list(shape), list(groups), list(roots)
    # size-1 loops are constant 0 already; drop them first
    keep = [d for d, s in enumerate(shape) if s != 1]
    if len(keep) != len(shape):
        mapping = {}
        for new_k, d in enumerate(keep):
            if new_k != d:
                mapping[E.ivar(d, shape[d])] = E.ivar(new_k, shape[d])
        roots = E.substitute(roots, mapping) if mapping else roots
        shape = [shape[d] for d in keep]
        groups = [groups[d] for d in keep]
    if 0 in shape:
        # an empty loop runs no iteration (a reduction's output just gets its identity):
        # nothing to gain, and merging would divide by the empty extent
        return tuple(shape), tuple(groups), roots
    k = len(shape) - 2
    while k >= 0:
        if groups[k] == groups[k + 1]:
            inner = shape[k + 1]
            merged = E.ivar(k, shape[k] * inner)
            mapping = {E.ivar(k, shape[k]): E.floordiv(merged, inner),
                       E.ivar(k + 1, inner): E.mod(merged, inner)}
            for d in range(k + 2, len(shape)):
                mapping[E.ivar(d, shape[d])] = E.ivar(d - 1, shape[d])
            new_roots = E.substitute(roots, mapping)
            if not E.has_divmod_of(new_roots, merged):
                roots = new_roots
                shape[k:k + 2] = [shape[k] * inner]
                del groups[k + 1]
                k = min(k, len(shape) - 2)
                continue
        k -= 1
    return tuple(shape), tuple(groups), roots


# =============================================================================================
# Dot epilogues: out = x ± alpha * dot(...) as one accumulating matrix product
# =============================================================================================


def _scaled_load(value: E.ScalarExpr, buf: Buffer, offset):
    """``alpha`` when ``value`` is ``alpha * buf[offset]`` (a load, maybe negated or scaled
    by a constant), else None."""
    if value.kind == "load":
        return 1.0 if value.args[0] is buf and value.args[1] is offset else None
    if value.kind != "op":
        return None
    primitive, _, args = value.args
    if primitive is ew.neg_p:
        inner = _scaled_load(args[0], buf, offset)
        return None if inner is None else -inner
    if primitive is ew.mul_p:
        for c, other in ((args[0], args[1]), (args[1], args[0])):
            if c.kind == "const" and np.isfinite(c.args[0]):
                inner = _scaled_load(other, buf, offset)
                if inner is not None:
                    return inner * float(c.args[0])
    return None


def _epilogue(step: LoopKernel, dot: DotKernel):
    """``(alpha, rest)`` when ``step`` computes ``rest + alpha * dot.out`` element by element
    (``rest`` None: just ``alpha * dot.out``), with ``rest`` free of the product."""
    (out, offset, value), = step.outputs
    if offset is not E.linearize(E.index_vars(step.shape), step.shape):
        return None  # not written in row-major order: the product's layout differs
    alpha = _scaled_load(value, dot.out, offset)
    if alpha is not None:
        return alpha, None
    if value.kind != "op" or value.args[0] not in (ew.add_p, ew.sub_p):
        return None
    primitive, _, (a, b) = value.args
    # rest + product either way round; rest - product (product - rest would need -rest)
    candidates = ((a, b, 1.0), (b, a, 1.0)) if primitive is ew.add_p else ((a, b, -1.0),)
    for rest, scaled, sign in candidates:
        alpha = _scaled_load(scaled, dot.out, offset)
        if alpha is not None and all(n.args[0] is not dot.out for n in E.loads([rest])):
            return sign * alpha, rest
    return None


def fuse_dot_epilogues(program: Program) -> Program:
    """Fold ``x ± alpha * dot(a, b)`` (an elementwise loop that is the product's only reader)
    into the product: the loop writes ``x`` into its output, and BLAS accumulates ``alpha *
    a @ b`` onto it (beta = 1). The product's own buffer, and a pass over it, disappear —
    e.g. an SGD update ``w - lr * grad`` where the gradient is a matrix product, or a dense
    layer's bias add.

    A loop reading two products (``a.T @ b + a @ b``) folds one of them per sweep: the loop
    left to initialize the accumulator reads the other product alone, and the next sweep
    folds that one into it (the first product writes the output, the second adds to it).
    A reader is rewritten at most once per sweep, from the program as the sweep found it."""
    while _fold_dot_epilogues_once(program):
        pass
    return program


def _fold_dot_epilogues_once(program: Program) -> bool:
    """One sweep of :func:`fuse_dot_epilogues`; whether it changed the program."""
    readers: dict = {}
    for k, step in enumerate(program.steps):
        for b in step.reads():
            readers.setdefault(b.id, []).append(k)
    results = {b.id for b in program.outputs if isinstance(b, Buffer)}
    moved, replaced = set(), {}
    for k, dot in enumerate(program.steps):
        if not isinstance(dot, DotKernel) or dot.out.kind != "temp" or dot.out.id in results \
                or dot.out.dtype not in (np.float32, np.float64) or dot.accumulate:
            continue
        users = readers.get(dot.out.id, [])
        if len(users) != 1 or users[0] in replaced:
            continue  # (a reader already rewritten in this sweep is looked at in the next)
        step = program.steps[users[0]]
        if not isinstance(step, LoopKernel) or len(step.outputs) != 1:
            continue
        out = step.outputs[0][0]
        if out.shape != dot.out.shape or out.dtype != dot.out.dtype or out.size == 0:
            continue
        with E.lock:
            found = _epilogue(step, dot)
        if found is None:
            continue
        alpha, rest = found
        fused = DotKernel(dot.lhs, dot.rhs, out, dot.batch, dot.m, dot.n, dot.k,
                          dot.lhs_transposed, dot.rhs_transposed)
        fused.alpha = alpha
        fused.accumulate = rest is not None
        new_steps = [fused]
        if rest is not None:  # the initial value of the accumulator
            (_, offset, _), = step.outputs
            new_steps.insert(0, LoopKernel(step.shape, [(out, offset, rest)], step.prims))
        # the product moves down to its reader: its operands are still there, and ``rest``
        # may read what was computed in between
        moved.add(k)
        replaced[users[0]] = new_steps
    if not moved:
        return False
    steps = []
    for k, step in enumerate(program.steps):
        if k in moved:
            continue
        steps.extend(replaced.get(k, [step]))
    program.steps = steps
    return True


def split_dims(shape, roots):
    """Split each loop dimension that the expressions divide — ``i // d`` and ``i % d`` of
    the loop index itself, for a chain of divisors of its extent — into one loop per
    factor, so those divisions become plain loop indices (as when a reshape merges axes
    that another expression reads apart). Returns (shape, roots)."""
    variables = {E.ivar(k, n): k for k, n in enumerate(shape) if n > 1}
    divisors: dict = {}
    for node in E.postorder(roots):
        if isinstance(node, E.IndexExpr) and node.kind in ("div", "mod") \
                and node.args[0] in variables:
            divisors.setdefault(variables[node.args[0]], set()).add(node.args[1])
    if not divisors:
        return tuple(shape), roots
    new_shape, mapping = [], {}
    for k, n in enumerate(shape):
        chain = sorted(divisors.get(k, ()))
        if not chain or any(n % d for d in chain) or any(b % a for a, b in zip(chain, chain[1:])):
            new_shape.append(n)
            continue
        # n = (n / d_m) x (d_m / d_m-1) x ... x d_1: the factors, outermost first
        bounds = [n] + chain[::-1]
        factors = [bounds[j] // bounds[j + 1] for j in range(len(bounds) - 1)] + [chain[0]]
        new_shape.extend(factors)
        mapping[k] = factors
    if not mapping:
        return tuple(shape), roots
    substitution, position = {}, 0
    for k, n in enumerate(shape):
        factors = mapping.get(k)
        if factors is None:
            if n > 1 and position != k:
                substitution[E.ivar(k, n)] = E.ivar(position, n)
            position += 1
            continue
        stride, terms = 1, []
        for j in reversed(range(len(factors))):
            terms.append(E.scale(E.ivar(position + j, factors[j]), stride))
            stride *= factors[j]
        substitution[E.ivar(k, n)] = E.add(*terms)
        position += len(factors)
    return tuple(new_shape), E.substitute(roots, substitution)


def normalize(program: Program) -> Program:
    """Split loop dimensions that expressions divide (see :func:`split_dims`), then collapse
    the loop dimensions of every kernel (see :func:`collapse_dims`)."""
    with E.lock:
        for step in program.steps:
            if isinstance(step, LoopKernel):
                roots = [o for _, o, _ in step.outputs] + [v for _, _, v in step.outputs]
                split_shape, roots = split_dims(step.shape, roots)
                shape, _, roots = collapse_dims(split_shape, [0] * len(split_shape), roots)
                n = len(step.outputs)
                step.outputs = [(b, roots[i], roots[n + i]) for i, (b, _, _) in enumerate(step.outputs)]
                step.shape = shape
            elif isinstance(step, ReduceKernel):
                shape, groups, roots = collapse_dims(step.shape, step.reduced,
                                                     [step.out_offset, step.value])
                step.shape, step.reduced = shape, groups
                step.out_offset, step.value = roots
    return program
