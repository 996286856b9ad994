"""Gather and scatter as CUDA kernels.

``gather`` is data movement with computed positions: it fuses into the kernel that reads it,
through the shared compiler's fusion rule (:func:`gather_rule`: each output
element loads its index vector, clamps the window start into the operand, or selects the
fill value in ``FILL_OR_DROP`` mode, and loads the operand there).

The ``scatter`` family becomes two kernels: one copies the operand to the output, the next
runs one thread per element of ``updates`` and combines it into the element its index
vector and window offset address. Windows that do not fit are clamped (``CLIP``) or dropped
(every other mode); the address is clamped either way, so nothing is written out of bounds.
Updates may collide, so the combine is atomic:

* ``scatter`` (set) is a plain store: a naturally aligned store of one element is never
  torn, so an element written by several updates ends up holding one of them, which is
  what a scatter with repeated indices promises (the host emulation, serial, keeps the
  last one, as the reference does);
* ``scatter_add`` on float32, float64 and 32/64-bit integers uses the hardware's
  ``atomicAdd`` (integers wrap, as in the reference);
* everything else (``scatter_mul``, ``scatter_min``, ``scatter_max``, and additions of
  8/16-bit types, float16 and bfloat16) is a compare-and-swap loop on the word holding the
  element (``ft_atomic_update`` in the prelude): every update is applied exactly once,
  in some order.

    >>> step = lower_scatter(fallback_step, program, CudaTarget())       # doctest: +SKIP
    >>> ScatterWriter("k3_scatter_add", step).device_source()            # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from functrans.backends.cuda import scalar_ops
from functrans.backends.cuda.kernel_source import (BLOCK_SIZE, ExpressionWriter, KernelLaunch,
                                                   buffer_name, grid_stride, host_args,
                                                   index_type, kernel_args, split_index,
                                                   store_statement, writes)
from functrans.backends.compiler import exprs as E
from functrans.backends.compiler.fusion import FallbackStep, unique_buffers
from functrans.backends.compiler.indexing import ScatterStep, gather_rule, scatter_operands

__all__ = ["gather_rule", "lower_scatter", "ScatterStep", "ScatterWriter"]

# combines with a hardware atomicAdd, by the element's dtype
_ATOMIC_ADD_DTYPES = {np.dtype(t) for t in (np.float32, np.float64, np.int32, np.uint32,
                                             np.int64, np.uint64)}


def lower_scatter(step: FallbackStep, program=None, target=None,
                  in_body: bool = False) -> ScatterStep | None:
    """A :class:`ScatterStep` for a scatter fallback step, or None (complex numbers, a
    scalar operand, a dropped result)."""
    eqn = step.eqn
    operands = scatter_operands(step)
    if operands is None:
        return None
    operand, indices, updates = operands
    if operand.dtype not in scalar_ops.SUPPORTED_DTYPES or indices.dtype.kind not in "iu" \
            or indices.dtype not in scalar_ops.SUPPORTED_DTYPES or not operand.shape:
        return None
    return ScatterStep(eqn.primitive, operand, indices, updates, step.outputs[0],
                       dict(eqn.params))


def update_kind(step: ScatterStep) -> str:
    """How the scatter kernel writes an update: ``store``, ``atomic_add`` or ``cas``."""
    if step.combine is None:
        return "store"
    if step.combine == "add" and step.out.dtype in _ATOMIC_ADD_DTYPES:
        return "atomic_add"
    return "cas"


@writes(ScatterStep)
class ScatterWriter:
    """CUDA C for one :class:`ScatterStep`: a copy kernel and a scatter kernel."""

    def __init__(self, name: str, step: ScatterStep):
        self.name, self.step = name, step
        self.copy_name = name + "_copy"
        with E.lock:
            self.extents, self.offset, self.update, self.valid = step.expressions()
        self.count = int(np.prod(self.extents, dtype=np.int64))
        self.size = step.out.size
        self.kind = update_kind(step)
        self.buffers = unique_buffers([step.out, step.indices, step.updates])
        self.launches = []
        if self.size == 0:
            return
        self.launches.append(KernelLaunch(self.copy_name, step, [step.out, step.operand],
                                          "loop", self.size))
        if self.count:
            self.launches.append(KernelLaunch(name, step, self.buffers, "loop", self.count))

    # ---- the copy --------------------------------------------------------------------------

    def _copy_source(self) -> str:
        out, operand = self.step.out, self.step.operand
        mt = scalar_ops.mem_type(out.dtype)
        return "\n".join([
            f"// {self.copy_name}: the scatter's operand, copied to its output",
            f"__host__ __device__ inline void {self.copy_name}_body(long long flat, {mt}* "
            f"__restrict__ {buffer_name(out)}, const {mt}* __restrict__ {buffer_name(operand)}) {{",
            f"  {buffer_name(out)}[flat] = {buffer_name(operand)}[flat];", "}",
            f'extern "C" __global__ void __launch_bounds__({BLOCK_SIZE}) {self.copy_name}({mt}* '
            f"__restrict__ {buffer_name(out)}, const {mt}* __restrict__ {buffer_name(operand)}) {{",
            grid_stride("flat", self.size,
                         f"    {self.copy_name}_body(flat, {buffer_name(out)}, {buffer_name(operand)});"),
            "}", ""])

    # ---- the scatter -----------------------------------------------------------------------

    def _params(self) -> str:
        """Pointer parameters; the output is not ``__restrict__``: threads update it
        through atomics, and its elements may be hit by several of them."""
        parts = []
        for b in self.buffers:
            mt = scalar_ops.mem_type(b.dtype)
            if b.id == self.step.out.id:
                parts.append(f"{mt}* {buffer_name(b)}")
            else:
                parts.append(f"const {mt}* __restrict__ {buffer_name(b)}")
        return ", ".join(parts)

    def _update_functor(self) -> list:
        """``<name>_update``: old element (memory representation) -> combined element."""
        dtype = self.step.out.dtype
        rt, mt = scalar_ops.reg_type(dtype), scalar_ops.mem_type(dtype)
        old = {scalar_ops.FLOAT16: "ft_h2f(old)", scalar_ops.BFLOAT16: "ft_bf2f(old)"}.get(dtype, "old")
        combined = scalar_ops.emit(None, scalar_ops.MONOID_OPS[self.step.combine], {},
                                   ["current", "value"], [dtype, dtype], dtype)
        if dtype == scalar_ops.FLOAT16:
            back = f"ft_f2h({combined})"
        elif dtype == scalar_ops.BFLOAT16:
            back = f"ft_f2bf({combined})"
        elif dtype == np.bool_:
            back = f"({combined} != 0)"
        else:
            back = f"({mt})({combined})"
        return [f"struct {self.name}_update {{",
                f"  {rt} value;",
                f"  __host__ __device__ {mt} operator()({mt} old) const {{",
                f"    const {rt} current = {old};",
                f"    return {back};",
                "  }", "};"]

    def _combine_statement(self, offset: str, value: str) -> str:
        out = self.step.out
        target = f"&{buffer_name(out)}[{offset}]"
        if self.kind == "store":
            return "  " + store_statement(out, offset, value)
        if self.kind == "atomic_add":
            return f"    ft_atomic_add({target}, {value});"
        return f"    ft_atomic_update({target}, {self.name}_update{{{value}}});"

    def _scatter_source(self) -> str:
        it = index_type([self.offset, self.update, self.valid], [self.count, self.size])
        self.index_t = it
        lines, ivars = split_index("flat", self.extents, range(len(self.extents)), it)
        with E.lock:
            body = ExpressionWriter(it, ivars)
            offset, value, valid = (body.value(self.offset), body.value(self.update),
                                    body.value(self.valid))
        params = self._params()
        functor = self._update_functor() if self.kind == "cas" else []
        step = self.step
        head = (f"// {self.name}: {step.prims[0]} ({self.kind}) of {self.count} updates into "
                f"{list(step.out.shape)}, mode {step.params['mode']}")
        return "\n".join([
            head, *functor,
            f"__host__ __device__ inline void {self.name}_body({it} flat, {params}) {{",
            *lines, *body.lines,
            f"  if ({valid}) {{",  # a dropped update writes nothing (never the old value back)
            self._combine_statement(offset, value),
            "  }", "}",
            f'extern "C" __global__ void __launch_bounds__({BLOCK_SIZE}) {self.name}({params}) {{',
            grid_stride("flat", self.count, f"    {self.name}_body(({it})flat, {kernel_args(self.buffers)});"),
            "}", ""])

    def device_source(self) -> str:
        if not self.launches:
            return f"// {self.name}: {self.step.prims[0]} into an empty array: nothing to do\n"
        parts = [self._copy_source()]
        if self.count:
            parts.append(self._scatter_source())
        return "\n".join(parts)

    def host_source(self) -> str:
        out = []
        for launch in self.launches:
            written = [self.step.out]
            if launch.name == self.copy_name:
                call = f"{self.copy_name}_body(flat, {host_args(launch.buffers, written)})"
                count = self.size
            else:
                call = f"{self.name}_body(({self.index_t})flat, {host_args(launch.buffers, written)})"
                count = self.count
            out.append(f'extern "C" void host_{launch.name}(void** p) {{\n'
                       f"  for (long long flat = 0; flat < {count}LL; ++flat)\n"
                       f"    {call};\n}}\n")
        return "\n".join(out)

