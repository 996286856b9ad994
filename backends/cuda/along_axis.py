"""Kernels that walk one axis per thread: cumulative ops and ``argmax``/``argmin``.

The operand is viewed as ``[outer, n, inner]`` with ``n`` the walked axis; each thread takes
one ``(outer, inner)`` line and walks its ``n`` elements in order (from the end when
``reverse``). Neighbouring threads take neighbouring ``inner`` positions, so their loads are
coalesced whenever the axis is not the last one.

* ``cumsum``, ``cumprod``, ``cummax``, ``cummin``: a running accumulator stored after every
  element. Narrow types accumulate as reductions do (8/16-bit integers in 32 bits, which
  wraps to the same result; float16 and bfloat16 in float32, rounded once per stored
  element, as the reference computes them).
* ``argmax``/``argmin``: the first position of the extremum; NaN counts as the extremum
  (the first NaN wins), as in the reference.

    >>> step = lower_along_axis(fallback_step)        # doctest: +SKIP
"""
from __future__ import annotations

from functrans.backends.cuda import scalar_ops
from functrans.backends.cuda.kernel_source import (BLOCK_SIZE, KernelLaunch, accumulator_dtype,
                                                   buffer_name, combine_expr, grid_stride,
                                                   host_args, identity_literal, kernel_args,
                                                   kernel_params, load_expr, store_statement,
                                                   writes)
from functrans.backends.compiler.fusion import AxisStep, Buffer, FallbackStep
from functrans.primitives import reductions

# cumulative primitive -> the monoid its loop combines with
CUMULATIVE = {reductions.cumsum_p: "add", reductions.cumprod_p: "mul",
              reductions.cummax_p: "max", reductions.cummin_p: "min"}
# arg-extremum primitive -> the comparison a better element passes
ARG = {reductions.argmax_p: ">", reductions.argmin_p: "<"}


def lower_along_axis(step: FallbackStep, program=None, target=None,
                     in_body: bool = False) -> AxisStep | None:
    """An :class:`AxisStep` for a cumulative or arg-extremum fallback step, or None."""
    eqn = step.eqn
    primitive = eqn.primitive
    if primitive not in CUMULATIVE and primitive not in ARG:
        return None
    if step.outputs[0] is None or not isinstance(step.inputs[0], Buffer):
        return None
    operand, out = step.inputs[0], step.outputs[0]
    if operand.dtype not in scalar_ops.SUPPORTED_DTYPES or out.dtype not in scalar_ops.SUPPORTED_DTYPES:
        return None
    if not operand.shape:
        return None
    if primitive in ARG:
        return AxisStep(primitive, operand, out, int(eqn.params["axes"][0]))
    return AxisStep(primitive, operand, out, int(eqn.params["axis"]),
                    bool(eqn.params["reverse"]))


@writes(AxisStep)
class AxisWriter:
    """CUDA C for one :class:`AxisStep`."""

    def __init__(self, name: str, step: AxisStep):
        self.name, self.step = name, step
        self.buffers = [step.out, step.operand]
        empty = step.lines == 0 or step.n == 0
        self.launches = [] if empty else [KernelLaunch(name, step, self.buffers, "loop", step.lines)]

    def _walk(self) -> list:
        """Statements of the body after ``base`` (the line's first element) is defined."""
        step = self.step
        n, inner = step.n, step.inner
        dtype = step.operand.dtype
        position = "(n - 1 - k)" if step.reverse else "k"
        element = f"base + {position} * {inner}LL"
        if step.primitive in CUMULATIVE:
            monoid = CUMULATIVE[step.primitive]
            acc = accumulator_dtype(dtype)
            acc_t = scalar_ops.reg_type(acc)
            cast_value = f"({acc_t}){load_expr(step.operand, 'i')}"
            stored = "acc" if scalar_ops.is_low_precision(dtype) else \
                f"({scalar_ops.reg_type(step.out.dtype)})acc"
            return [f"  const long long n = {n}LL;",
                    f"  {acc_t} acc = {identity_literal(monoid, dtype)};",
                    "  for (long long k = 0; k < n; ++k) {",
                    f"    const long long i = {element};",
                    f"    acc = {combine_expr(monoid, dtype, 'acc', cast_value)};",
                    "  " + store_statement(step.out, "i", stored),
                    "  }"]
        op = ARG[step.primitive]
        rt = scalar_ops.reg_type(dtype)
        better = f"v {op} best"
        if scalar_ops.is_float(dtype):
            better = f"({better}) || (v != v && best == best)"  # the first NaN wins
        out_t = scalar_ops.reg_type(step.out.dtype)
        later = f"base + k * {inner}LL"
        return [f"  const long long n = {n}LL;",
                f"  {rt} best = {load_expr(step.operand, 'base')};",
                "  long long where = 0;",
                "  for (long long k = 1; k < n; ++k) {",
                f"    const {rt} v = {load_expr(step.operand, later)};",
                f"    if ({better}) {{ best = v; where = k; }}",
                "  }",
                f"  {buffer_name(step.out)}[line] = ({out_t})where;"]

    def device_source(self) -> str:
        step = self.step
        if not self.launches:
            return f"// {self.name}: {step.name} of an empty array: nothing to do\n"
        params = kernel_params(self.buffers, [step.out])
        return "\n".join([
            f"// {self.name}: {step.describe()}, {step.lines} lines of {step.n}",
            f"__host__ __device__ inline void {self.name}_body(long long line, {params}) {{",
            f"  const long long base = (line / {step.inner}LL) * {step.n * step.inner}LL + "
            f"line % {step.inner}LL;",
            *self._walk(), "}",
            f'extern "C" __global__ void __launch_bounds__({BLOCK_SIZE}) {self.name}({params}) {{',
            grid_stride("line", step.lines, f"    {self.name}_body(line, {kernel_args(self.buffers)});"),
            "}", ""])

    def host_source(self) -> str:
        if not self.launches:
            return ""
        return (f'extern "C" void host_{self.name}(void** p) {{\n'
                f"  for (long long line = 0; line < {self.step.lines}LL; ++line)\n"
                f"    {self.name}_body(line, {host_args(self.buffers, [self.step.out])});\n}}\n")
