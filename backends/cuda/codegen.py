"""Code generation: a fused :class:`~functrans.backends.compiler.fusion.Program` becomes CUDA C.

The fusion pass is shared with the llvm backend; this module only decides how each step
runs on a GPU:

* a :class:`LoopKernel` becomes one ``extern "C" __global__`` kernel with a grid-stride loop
  over the flat index of its shape; the flat index is split into the coordinates the
  expressions use (after loop normalization that is usually none: a plain linear address);
* a :class:`ReduceKernel` becomes one of three kernels, picked from its shape:
  ``thread`` (one thread per output: short reductions, or columns read coalesced across
  threads), ``block`` (one block per output, threads stride over the reduced elements and
  meet in a warp-shuffle block reduction: rows), or ``split`` (few outputs, many elements:
  several blocks per output write partial results to scratch memory and a second kernel
  combines them);
* a scatter (:mod:`indexing`: a copy kernel, then one thread per update with an atomic
  combine) and a cumulative op or ``argmax``/``argmin`` (:mod:`along_axis`: one thread per
  line) become kernels of their own; ``gather`` fuses like any data movement;
* control flow (:mod:`control_flow`) generates its bodies into the same source and leaves
  the loop to the runtime, which drives it from the host;
* a :class:`DotKernel` and a :class:`FallbackStep` are left to the runtime (cuBLAS through
  CuPy, and the reference implementation on the host).

Each kernel's per-element work is a ``__host__ __device__`` function (``<name>_body`` for
loops, ``<name>_element``/``<name>_store`` for reductions), so the same code can be compiled
for the CPU and checked against the reference interpreter without a GPU
(:mod:`host_emulation`).

    >>> import functrans, functrans.numpy as jnp
    >>> closed = functrans.make_jaxpr(lambda x: jnp.exp(x) * 2 + 1)(jnp.ones(4))
    >>> module = generate(plan(closed.jaxpr, closed.consts))
    >>> [k.name for k in module.kernels]
    ['k1_exp_mul_add']
"""
from __future__ import annotations

import re

import numpy as np

from functrans.backends.compiler import exprs as E
from functrans.backends.compiler.fusion import (DotKernel, FallbackStep, LoopKernel, Program,
                                                ReduceKernel, ScalarTableTarget, normalize,
                                                plan_program, unique_buffers)
from functrans.backends.compiler.native_steps import lower_native_steps
from functrans.backends.cuda import lowering, scalar_ops
from functrans.backends.cuda.control_flow import ControlLaunch, ControlStep
from functrans.backends.cuda.indexing import gather_rule
from functrans.backends.cuda.kernel_source import (BLOCK_SIZE, WRITERS, ExpressionWriter,
                                                   KernelLaunch, accumulator_dtype, combine_expr,
                                                   grid_stride, host_args, identity_literal,
                                                   index_type, kernel_args, kernel_params,
                                                   split_index, store_statement, writes)
from functrans.backends.cuda.prelude import PRELUDE
from functrans.backends.cuda.scalar_ops import reg_type


class CudaTarget(ScalarTableTarget):
    """What the CUDA code generator can do, told to the shared fusion pass and to the
    ``lower_native_steps`` pass."""

    scalar_ops = scalar_ops
    native_steps = lowering.STEPS

    def dot_supported(self, lhs_dtype, rhs_dtype, out_dtype) -> bool:
        # cuBLAS GEMMs through cupy.matmul; other dtypes run their reference implementation
        dtypes = {np.dtype(lhs_dtype), np.dtype(rhs_dtype), np.dtype(out_dtype)}
        return len(dtypes) == 1 and dtypes <= {np.dtype(np.float16), np.dtype(np.float32),
                                              np.dtype(np.float64)}

    def movement_rule(self, eqn):
        return gather_rule(eqn)


TARGET = CudaTarget()


def plan(jaxpr, consts=(), *, fuse: bool = True) -> Program:
    """The fused, loop-normalized program of ``jaxpr`` for the CUDA target, with the
    fallback steps that have CUDA code (scatters, cumulative ops, control flow) replaced
    (see :mod:`~functrans.backends.compiler.native_steps`)."""
    return lower_native_steps(fuse_program(jaxpr, consts, fuse=fuse), TARGET)


def fuse_program(jaxpr, consts=(), *, fuse: bool = True) -> Program:
    """The fusion pass for the CUDA target: loop kernels, reductions, products and the
    fallback steps left for NumPy."""
    return normalize(plan_program(jaxpr, TARGET, consts, fuse=fuse))


# =============================================================================================
# What the runtime launches
# =============================================================================================


class CudaModule:
    """The generated translation unit of a program and the schedule the runtime follows.

    ``schedule`` holds :class:`KernelLaunch`, :class:`DotKernel`,
    :class:`~control_flow.ControlLaunch` and :class:`FallbackStep` items in program order;
    ``source`` is what NVRTC compiles; ``host_source`` adds
    ``extern "C" void host_<name>(void** buffers)`` wrappers that run each kernel's work
    serially on the CPU (used only by :mod:`host_emulation`)."""

    def __init__(self, program, source, host_source, schedule):
        self.program = program
        self.source = source
        self.host_source = host_source
        self.schedule = schedule

    def describe(self) -> str:
        """The CUDA C, then the launch schedule (what a pass dump shows)."""
        schedule = "\n".join(getattr(s, "name", None) or type(s).__name__ for s in self.schedule)
        return f"{self.source}\n// schedule:\n{schedule}"

    @property
    def kernels(self) -> list:
        return [s for s in self.schedule if isinstance(s, KernelLaunch)]

    @property
    def kernel_names(self) -> list:
        names = []
        for k in self.kernels:
            names += [k.name + "_partial", k.finish_name] if k.strategy == "split" else [k.name]
        return names

    @property
    def scratch_bytes(self) -> int:
        return max([k.scratch_bytes for k in self.kernels], default=0)


def generate(program: Program, prefix: str = "") -> CudaModule:
    """CUDA C for every kernel of ``program``. Kernel names start with ``prefix``, so the
    modules of several programs can share one translation unit; the bodies of control flow
    are generated with longer prefixes into this module's source."""
    parts, host_parts, schedule = [PRELUDE], [], []
    index = 0
    with E.lock:
        for step in program.steps:
            if isinstance(step, (DotKernel, FallbackStep)):
                schedule.append(step)
                continue
            index += 1
            name = prefix + _kernel_name(index, step.prims)
            if isinstance(step, ControlStep):
                modules = [generate(body, prefix=f"{name}_b{j}_") for j, body in enumerate(step.bodies)]
                parts += [m.source[len(PRELUDE):] for m in modules]
                host_parts += [m.host_source for m in modules]
                schedule.append(ControlLaunch(step, modules))
                continue
            writer_type = WRITERS.get(type(step))
            if writer_type is None:
                raise NotImplementedError(f"cuda backend: step {type(step).__name__}")
            writer = writer_type(name, step)
            parts.append(writer.device_source())
            host_parts.append(writer.host_source())
            schedule.extend(writer.launches)
    return CudaModule(program, "\n".join(parts), "\n".join(host_parts), schedule)


_QUIET_PRIMS = {"broadcast_in_dim", "reshape", "expand_dims", "squeeze", "convert_element_type",
                "stop_gradient", "copy"}


def _kernel_name(index: int, prims) -> str:
    """``k<index>_<the primitives that compute>``: data movement is left out of the name."""
    shown = [p for p in prims if p not in _QUIET_PRIMS] or list(prims)
    prims = "_".join(shown[:4]) or "copy"
    return f"k{index}_{re.sub(r'[^A-Za-z0-9_]', '_', prims)}"


# =============================================================================================
# Loop kernels
# =============================================================================================


@writes(LoopKernel)
class _LoopWriter:
    def __init__(self, name: str, step: LoopKernel):
        self.name, self.step = name, step
        self.written = [b for b, _, _ in step.outputs]
        self.buffers = unique_buffers(self.written + step.reads())
        self.count = int(np.prod(step.shape, dtype=np.int64))
        self.launch = KernelLaunch(name, step, self.buffers, "loop", self.count)
        self.launches = [self.launch]

    def device_source(self) -> str:
        step = self.step
        roots = [o for _, o, _ in step.outputs] + [v for _, _, v in step.outputs]
        it = index_type(roots, [self.count])
        lines, ivars = split_index("flat", step.shape, range(len(step.shape)), it)
        body = ExpressionWriter(it, ivars)
        results = [(b, body.value(off), body.value(v)) for b, off, v in step.outputs]
        stores = [store_statement(b, off, v) for b, off, v in results]
        params = kernel_params(self.buffers, self.written)
        self.index_t = it
        return "\n".join([
            f"// {self.name}: loop{list(step.shape)} [{' '.join(step.prims)}]",
            f"__host__ __device__ inline void {self.name}_body({it} flat, {params}) {{",
            *lines, *body.lines, *stores, "}",
            f'extern "C" __global__ void __launch_bounds__({BLOCK_SIZE}) {self.name}({params}) {{',
            grid_stride("flat", self.count,
                         f"    {self.name}_body(({it})flat, {kernel_args(self.buffers)});"),
            "}", ""])

    def host_source(self) -> str:
        return (f'extern "C" void host_{self.name}(void** p) {{\n'
                f"  for (long long flat = 0; flat < {self.count}LL; ++flat)\n"
                f"    {self.name}_body(({self.index_t})flat, "
                f"{host_args(self.buffers, self.written)});\n}}\n")


# =============================================================================================
# Reductions
# =============================================================================================


def choose_strategy(shape, reduced, kept_size: int, reduce_size: int) -> tuple[str, int]:
    """(strategy, partitions) for a reduction: see the module docstring."""
    if reduce_size <= 16:
        return "thread", 1
    innermost_reduced = bool(reduced[-1]) if len(reduced) else True
    many_elements = reduce_size >= 8192
    if innermost_reduced:  # rows: each output reads contiguous memory
        if kept_size >= 256 or not many_elements:
            return "block", 1
    else:  # columns: neighbouring outputs are neighbours in memory
        if kept_size >= 8192:
            return "thread", 1
        if not many_elements:
            return "block", 1
    # few outputs, long reductions: about 1024 blocks in all, 2048+ elements per block
    partitions = max(1, min(-(-1024 // max(kept_size, 1)), -(-reduce_size // 2048)))
    return ("split", partitions) if partitions > 1 else ("block", 1)


@writes(ReduceKernel)
class _ReduceWriter:
    def __init__(self, name: str, step: ReduceKernel):
        self.name, self.step = name, step
        shape, reduced = step.shape, [bool(r) for r in step.reduced]
        self.kept_dims = [d for d in range(len(shape)) if not reduced[d]]
        self.reduced_dims = [d for d in range(len(shape)) if reduced[d]]
        self.kept = int(np.prod([shape[d] for d in self.kept_dims], dtype=np.int64))
        self.size = int(np.prod([shape[d] for d in self.reduced_dims], dtype=np.int64))
        self.buffers = unique_buffers([step.out] + step.reads())
        self.acc = accumulator_dtype(step.out.dtype)
        strategy, partitions = choose_strategy(shape, reduced, self.kept, self.size)
        self.launch = KernelLaunch(name, step, self.buffers, strategy, self.kept, self.size,
                                   partitions, self.acc)
        self.launches = [self.launch]

    def device_source(self) -> str:
        step, name = self.step, self.name
        it = index_type([step.value, step.out_offset],
                        [self.kept, self.size, self.kept * self.launch.partitions])
        self.index_t = it
        acc_t = reg_type(self.acc)
        params = kernel_params(self.buffers, [step.out])
        args = kernel_args(self.buffers)
        identity = identity_literal(step.monoid, step.out.dtype)

        kept_lines, kept_vars = split_index("o", step.shape, self.kept_dims, it)
        red_lines, red_vars = split_index("r", step.shape, self.reduced_dims, it)
        body = ExpressionWriter(it, {**kept_vars, **red_vars})
        value = body.value(step.value)
        value = f"({value} ? 1 : 0)" if step.value.dtype == np.bool_ else value
        element = [f"__host__ __device__ inline {acc_t} {name}_element({it} o, {it} r, {params}) {{",
                   *kept_lines, *red_lines, *body.lines, f"  return ({acc_t}){value};", "}"]

        out_body = ExpressionWriter(it, kept_vars)
        offset = out_body.value(step.out_offset)
        if step.out.dtype == np.bool_ or scalar_ops.is_low_precision(step.out.dtype):
            final = "acc"
        else:
            final = f"({reg_type(step.out.dtype)})acc"
        store = [f"__host__ __device__ inline void {name}_store({it} o, {acc_t} acc, {params}) {{",
                 *kept_lines, *out_body.lines, store_statement(step.out, offset, final), "}"]
        combine = [f"struct {name}_combine {{",
                   f"  __host__ __device__ {acc_t} operator()({acc_t} a, {acc_t} b) const {{ "
                   f"return {combine_expr(step.monoid, step.out.dtype, 'a', 'b')}; }}",
                   "};"]
        head = f"// {name}: reduce[{step.monoid}] {self.kept} outputs x {self.size} elements " \
               f"({self.launch.strategy}) [{' '.join(step.prims)}]"
        kernels = self.kernels(it, acc_t, params, args, identity)
        return "\n".join([head, *combine, *element, *store, *kernels, ""])

    def kernels(self, it, acc_t, params, args, identity) -> list:
        name, launch = self.name, self.launch
        element = f"{name}_element(({it})o, ({it})r, {args})"
        combine = f"{name}_combine()"
        kernel = f'extern "C" __global__ void __launch_bounds__({BLOCK_SIZE})'
        if launch.strategy == "thread":
            body = (f"    {acc_t} acc = {identity};\n"
                    f"    for (long long r = 0; r < {self.size}LL; ++r) acc = {combine}(acc, {element});\n"
                    f"    {name}_store(({it})o, acc, {args});")
            return [f"{kernel} {name}({params}) {{", grid_stride("o", self.kept, body), "}"]
        block_tail = (f"    acc = ft_block_reduce(acc, ({acc_t}){identity}, {combine});\n"
                      f"    if (threadIdx.x == 0) {name}_store(({it})o, acc, {args});")
        if launch.strategy == "block":
            body = (f"    {acc_t} acc = {identity};\n"
                    f"    for (long long r = threadIdx.x; r < {self.size}LL; r += blockDim.x)\n"
                    f"      acc = {combine}(acc, {element});\n" + block_tail)
            return [f"{kernel} {name}({params}) {{", grid_stride("o", self.kept, body, True), "}"]
        parts = launch.partitions
        chunk = -(-self.size // parts)
        partial = (f"    const long long o = b / {parts}LL, begin = (b % {parts}LL) * {chunk}LL;\n"
                   f"    const long long end = begin + {chunk}LL < {self.size}LL ? begin + {chunk}LL "
                   f": {self.size}LL;\n"
                   f"    {acc_t} acc = {identity};\n"
                   f"    for (long long r = begin + threadIdx.x; r < end; r += blockDim.x)\n"
                   f"      acc = {combine}(acc, {element});\n"
                   f"    acc = ft_block_reduce(acc, ({acc_t}){identity}, {combine});\n"
                   f"    if (threadIdx.x == 0) scratch[b] = acc;")
        finish = (f"    {acc_t} acc = {identity};\n"
                  f"    for (long long t = threadIdx.x; t < {parts}LL; t += blockDim.x)\n"
                  f"      acc = {combine}(acc, scratch[o * {parts}LL + t]);\n" + block_tail)
        return [f"{kernel} {name}_partial({acc_t}* __restrict__ scratch, {params}) {{",
                grid_stride("b", self.kept * parts, partial, True), "}",
                f"{kernel} {launch.finish_name}(const {acc_t}* __restrict__ scratch, {params}) {{",
                grid_stride("o", self.kept, finish, True), "}"]

    def host_source(self) -> str:
        name, it = self.name, self.index_t
        acc_t = reg_type(self.acc)
        args = host_args(self.buffers, [self.step.out])
        return (f'extern "C" void host_{name}(void** p) {{\n'
                f"  for (long long o = 0; o < {self.kept}LL; ++o) {{\n"
                f"    {acc_t} acc = {identity_literal(self.step.monoid, self.step.out.dtype)};\n"
                f"    for (long long r = 0; r < {self.size}LL; ++r)\n"
                f"      acc = {name}_combine()(acc, {name}_element(({it})o, ({it})r, {args}));\n"
                f"    {name}_store(({it})o, acc, {args});\n  }}\n}}\n")

