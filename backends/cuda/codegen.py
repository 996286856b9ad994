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

from functrans.backends.cuda import scalar_ops
from functrans.backends.cuda.prelude import PRELUDE
from functrans.backends.cuda.scalar_ops import literal, mem_type, reg_type
from functrans.backends.compiler import exprs as E
from functrans.backends.compiler.fusion import (Buffer, DotKernel, FallbackStep, LoopKernel, Program,
                                            ReduceKernel, ScalarTableTarget, normalize,
                                            plan_program, unique_buffers)

BLOCK_SIZE = 256  # threads per block of every kernel (a multiple of the warp size)
_INT32_MAX = 2 ** 31 - 1


class CudaTarget(ScalarTableTarget):
    """What the CUDA code generator can do, told to the shared fusion pass."""

    scalar_ops = scalar_ops

    def dot_supported(self, lhs_dtype, rhs_dtype, out_dtype) -> bool:
        # cuBLAS GEMMs through cupy.matmul; other dtypes run their reference implementation
        dtypes = {np.dtype(lhs_dtype), np.dtype(rhs_dtype), np.dtype(out_dtype)}
        return len(dtypes) == 1 and dtypes <= {np.dtype(np.float16), np.dtype(np.float32),
                                              np.dtype(np.float64)}

    def movement_rule(self, eqn):
        from functrans.backends.cuda.indexing import gather_rule
        return gather_rule(eqn)


def plan(jaxpr, consts=(), *, fuse: bool = True) -> Program:
    """The fused, loop-normalized program of ``jaxpr`` for the CUDA target, with the
    fallback steps that have CUDA code (scatters, cumulative ops, control flow) replaced
    (see :mod:`control_flow`)."""
    return lower_native_steps(fuse_program(jaxpr, consts, fuse=fuse))


def fuse_program(jaxpr, consts=(), *, fuse: bool = True) -> Program:
    """The fusion pass for the CUDA target: loop kernels, reductions, products and the
    fallback steps left for NumPy."""
    return normalize(plan_program(jaxpr, CudaTarget(), consts, fuse=fuse))


def lower_native_steps(program: Program) -> Program:
    """``program`` with the fallback steps that have CUDA code replaced (in place)."""
    from functrans.backends.cuda.control_flow import replace_fallbacks
    return replace_fallbacks(program, CudaTarget())


# =============================================================================================
# What the runtime launches
# =============================================================================================


class KernelLaunch:
    """One generated kernel (two for a ``split`` reduction) and how to launch it.

    ``buffers`` are the kernel's pointer parameters in order; ``count`` is the number of
    loop iterations (a loop) or outputs (a reduction); ``reduce_size`` the elements reduced
    per output; a ``split`` reduction runs ``partitions`` blocks per output, writing
    ``count * partitions`` partial results of ``acc_dtype`` to scratch memory, then
    ``finish_name`` combines them."""

    def __init__(self, name, step, buffers, strategy, count, reduce_size=0, partitions=1,
                 acc_dtype=None):
        self.name = name
        self.step = step
        self.buffers = list(buffers)
        self.strategy = strategy  # loop | thread | block | split
        self.count = int(count)
        self.reduce_size = int(reduce_size)
        self.partitions = int(partitions)
        self.acc_dtype = None if acc_dtype is None else np.dtype(acc_dtype)

    @property
    def finish_name(self) -> str:
        return self.name + "_finish"

    @property
    def scratch_bytes(self) -> int:
        if self.strategy != "split":
            return 0
        return self.count * self.partitions * self.acc_dtype.itemsize

    def __repr__(self):
        return (f"KernelLaunch({self.name}, {self.strategy}, count={self.count}"
                + (f", reduce={self.reduce_size}" if self.strategy != "loop" else "") + ")")


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
    from functrans.backends.cuda.along_axis import AxisStep, AxisWriter
    from functrans.backends.cuda.control_flow import ControlLaunch, ControlStep
    from functrans.backends.cuda.indexing import ScatterStep, ScatterWriter
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
            if isinstance(step, LoopKernel):
                writer = _LoopWriter(name, step)
            elif isinstance(step, ReduceKernel):
                writer = _ReduceWriter(name, step)
            elif isinstance(step, ScatterStep):
                writer = ScatterWriter(name, step)
            elif isinstance(step, AxisStep):
                writer = AxisWriter(name, step)
            else:
                raise NotImplementedError(f"cuda backend: step {type(step).__name__}")
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
# Expressions as C statements
# =============================================================================================


def _fits_int32(lo: int, hi: int) -> bool:
    return -_INT32_MAX - 1 <= lo and hi <= _INT32_MAX


def index_type(roots, counts) -> str:
    """``int`` when every index value (and partial sum) of the kernel fits in 32 bits, which
    makes its divisions and multiplications much cheaper on a GPU; else ``long long``."""
    if any(c > _INT32_MAX for c in counts):
        return "long long"
    for node in E.postorder(roots):
        if not isinstance(node, E.IndexExpr):
            continue
        if not _fits_int32(node.lo, node.hi):
            return "long long"
        if node.kind == "lin":
            bound = abs(node.args[1]) + sum(abs(c) * max(abs(t.lo), abs(t.hi)) for t, c in node.args[0])
            if bound > _INT32_MAX:
                return "long long"
    return "int"


def _int_literal(v: int) -> str:
    return str(v) if _fits_int32(v, v) else f"{v}LL"


class _Body:
    """Emits ``const`` locals for expression nodes, each node once (the nodes are
    hash-consed, so shared subexpressions are computed once per element)."""

    def __init__(self, index_t: str, ivars: dict):
        self.index_t = index_t
        self.lines: list[str] = []
        self.memo: dict = dict(ivars)  # loop variable node -> C name
        self.count = 0

    def bind(self, dtype, expr: str) -> str:
        self.count += 1
        name = f"v{self.count}"
        self.lines.append(f"  const {reg_type(dtype)} {name} = {expr};")
        return name

    def bind_index(self, expr: str) -> str:
        self.count += 1
        name = f"x{self.count}"
        self.lines.append(f"  const {self.index_t} {name} = {expr};")
        return name

    def value(self, root) -> str:
        for node in E.postorder([root]):
            if node not in self.memo:
                self.memo[node] = (self.emit_index(node) if isinstance(node, E.IndexExpr)
                                   else self.emit_scalar(node))
        return self.memo[root]

    def emit_index(self, x) -> str:
        k, a, m = x.kind, x.args, self.memo
        if k == "const":
            return _int_literal(a[0])
        if k == "var":
            # a loop variable the kernel does not define: its loop was collapsed away
            raise NotImplementedError(f"cuda backend: undefined loop variable {E.format_index(x)}")
        if k == "lin":
            terms = [m[t] if c == 1 else f"{_int_literal(c)} * {m[t]}" for t, c in a[0]]
            if a[1]:
                terms.append(_int_literal(a[1]))
            return self.bind_index(" + ".join(terms))
        if k in ("div", "mod"):
            v, d = m[a[0]], f"({self.index_t}){a[1]}"
            if a[0].lo >= 0:
                return self.bind_index(f"{v} {'/' if k == 'div' else '%'} {d}")
            return self.bind_index(f"ft_floor{k}({v}, {d})")
        if k in ("min", "max"):
            x0, x1 = m[a[0]], m[a[1]]
            return self.bind_index(f"{x0} {'<' if k == 'min' else '>'} {x1} ? {x0} : {x1}")
        if k == "scalar":
            s = a[0]
            v = m[s]
            if s.dtype == np.uint64:  # values past int64 act as "very large"
                return self.bind_index(f"{v} > 9223372036854775807ull ? 9223372036854775807LL "
                                       f": ({self.index_t}){v}")
            if s.dtype == np.bool_:
                return self.bind_index(f"({self.index_t})({v} ? 1 : 0)")
            return self.bind_index(f"({self.index_t}){v}")
        raise NotImplementedError(f"cuda backend: index node {k}")

    def emit_scalar(self, node) -> str:
        k, a, m = node.kind, node.args, self.memo
        if k == "const":
            return literal(a[0], node.dtype)
        if k == "load":
            return self.bind(node.dtype, load_expr(a[0], m[a[1]]))
        if k == "op":
            name, params, args = a
            expr = scalar_ops.emit(name, dict(params), [m[x] for x in args], [x.dtype for x in args],
                                   node.dtype, ctx=self)
            return self.bind(node.dtype, expr)
        if k == "iota":
            return self.bind(node.dtype, scalar_ops.convert(m[a[0]], np.int64, node.dtype))
        if k == "compare":
            op = {"lt": "<", "le": "<=", "eq": "==", "ne": "!=", "ge": ">=", "gt": ">"}[a[0]]
            return self.bind(np.bool_, f"{m[a[1]]} {op} {m[a[2]]}")
        raise NotImplementedError(f"cuda backend: scalar node {k}")


def buffer_name(buf: Buffer) -> str:
    return f"b{buf.id}"


def load_expr(buf: Buffer, index: str) -> str:
    raw = f"{buffer_name(buf)}[{index}]"
    if buf.dtype == scalar_ops.FLOAT16:
        return f"ft_h2f({raw})"
    if buf.dtype == scalar_ops.BFLOAT16:
        return f"ft_bf2f({raw})"
    return raw


def store_statement(buf: Buffer, index: str, value: str) -> str:
    if buf.dtype == scalar_ops.FLOAT16:
        value = f"ft_f2h({value})"
    elif buf.dtype == scalar_ops.BFLOAT16:
        value = f"ft_f2bf({value})"
    elif buf.dtype == np.bool_:
        value = f"({value} != 0)"
    else:
        value = f"({mem_type(buf.dtype)})({value})"
    return f"  {buffer_name(buf)}[{index}] = {value};"


def _split_index(flat: str, shape, dims, index_t: str) -> tuple[list, dict]:
    """Statements defining the loop variables of ``dims`` (of ``shape``) from the row-major
    position ``flat`` over those dims, and the map from loop variable nodes to names."""
    lines, names = [], {}
    sizes = [shape[d] for d in dims]
    total = int(np.prod(sizes, dtype=np.int64)) if sizes else 1
    stride = total
    for d, size in zip(dims, sizes):
        stride //= max(size, 1)
        node = E.ivar(d, size)
        if node.kind != "var":
            continue  # a size-1 (or empty) loop is the constant 0
        expr = flat if stride == 1 else f"{flat} / ({index_t}){stride}"
        if stride * size != total:
            expr = f"({expr}) % ({index_t}){size}"
        lines.append(f"  const {index_t} i{d} = {expr};")
        names[node] = f"i{d}"
    return lines, names


def _params(buffers, written) -> str:
    written = {b.id for b in written}
    return ", ".join(f"{'' if b.id in written else 'const '}{mem_type(b.dtype)}* __restrict__ "
                     f"{buffer_name(b)}" for b in buffers)


def _args(buffers) -> str:
    return ", ".join(buffer_name(b) for b in buffers)


def _host_args(buffers, written, first_slot=0) -> str:
    written = {b.id for b in written}
    return ", ".join(f"({'' if b.id in written else 'const '}{mem_type(b.dtype)}*)p[{first_slot + i}]"
                     for i, b in enumerate(buffers))


def _grid_stride(var: str, count: int, body: str, per_block: bool = False) -> str:
    if per_block:
        start, step = "(long long)blockIdx.x", "(long long)gridDim.x"
    else:
        start = "(long long)blockIdx.x * blockDim.x + threadIdx.x"
        step = "(long long)gridDim.x * blockDim.x"
    return (f"  for (long long {var} = {start}; {var} < {count}LL; {var} += {step}) {{\n"
            f"{body}\n  }}")


# =============================================================================================
# Loop kernels
# =============================================================================================


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
        lines, ivars = _split_index("flat", step.shape, range(len(step.shape)), it)
        body = _Body(it, ivars)
        results = [(b, body.value(off), body.value(v)) for b, off, v in step.outputs]
        stores = [store_statement(b, off, v) for b, off, v in results]
        params = _params(self.buffers, self.written)
        self.index_t = it
        return "\n".join([
            f"// {self.name}: loop{list(step.shape)} [{' '.join(step.prims)}]",
            f"__host__ __device__ inline void {self.name}_body({it} flat, {params}) {{",
            *lines, *body.lines, *stores, "}",
            f'extern "C" __global__ void __launch_bounds__({BLOCK_SIZE}) {self.name}({params}) {{',
            _grid_stride("flat", self.count,
                         f"    {self.name}_body(({it})flat, {_args(self.buffers)});"),
            "}", ""])

    def host_source(self) -> str:
        return (f'extern "C" void host_{self.name}(void** p) {{\n'
                f"  for (long long flat = 0; flat < {self.count}LL; ++flat)\n"
                f"    {self.name}_body(({self.index_t})flat, "
                f"{_host_args(self.buffers, self.written)});\n}}\n")


# =============================================================================================
# Reductions
# =============================================================================================


def accumulator_dtype(dtype) -> np.dtype:
    """Reductions accumulate narrow types in 32 bits (shuffles need them) and half
    precision in float32."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_ or dtype in (np.int8, np.int16):
        return np.dtype(np.int32)
    if dtype in (np.uint8, np.uint16):
        return np.dtype(np.uint32)
    if scalar_ops.is_low_precision(dtype):
        return np.dtype(np.float32)
    return dtype


def combine_expr(monoid: str, dtype, a: str, b: str) -> str:
    """``a monoid b`` on accumulators of the reduction of ``dtype``."""
    dtype = np.dtype(dtype)
    acc = accumulator_dtype(dtype)
    if dtype == np.bool_:
        op = {"add": "|", "or": "|", "max": "|", "mul": "&", "and": "&", "min": "&", "xor": "^"}[monoid]
        return f"({a} {op} {b})"
    if scalar_ops.is_float(dtype):
        if monoid in ("max", "min"):
            return f"ft_f{monoid}({a}, {b})"
        return f"({a} {'+' if monoid == 'add' else '*'} {b})"
    if monoid in ("add", "mul"):
        return scalar_ops.emit(scalar_ops.MONOID_OPS[monoid], {}, [a, b], [acc, acc], acc)
    if monoid in ("max", "min"):
        return f"({a} {'>' if monoid == 'max' else '<'} {b} ? {a} : {b})"
    op = {"and": "&", "or": "|", "xor": "^"}[monoid]
    return f"({a} {op} {b})"


def identity_literal(monoid: str, dtype) -> str:
    """The identity of ``monoid`` as an accumulator literal."""
    dtype = np.dtype(dtype)
    acc = accumulator_dtype(dtype)
    if monoid in ("add", "or", "xor"):
        value = 0
    elif monoid == "mul":
        value = 1
    elif monoid == "and":
        value = 1 if dtype == np.bool_ else -1
    elif dtype == np.bool_:
        value = int(monoid == "min")
    elif scalar_ops.is_float(dtype):
        value = -np.inf if monoid == "max" else np.inf
    else:
        info = np.iinfo(dtype)
        value = info.min if monoid == "max" else info.max
    return literal(value, acc)


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
        params = _params(self.buffers, [step.out])
        args = _args(self.buffers)
        identity = identity_literal(step.monoid, step.out.dtype)

        kept_lines, kept_vars = _split_index("o", step.shape, self.kept_dims, it)
        red_lines, red_vars = _split_index("r", step.shape, self.reduced_dims, it)
        body = _Body(it, {**kept_vars, **red_vars})
        value = body.value(step.value)
        value = f"({value} ? 1 : 0)" if step.value.dtype == np.bool_ else value
        element = [f"__host__ __device__ inline {acc_t} {name}_element({it} o, {it} r, {params}) {{",
                   *kept_lines, *red_lines, *body.lines, f"  return ({acc_t}){value};", "}"]

        out_body = _Body(it, kept_vars)
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
            return [f"{kernel} {name}({params}) {{", _grid_stride("o", self.kept, body), "}"]
        block_tail = (f"    acc = ft_block_reduce(acc, ({acc_t}){identity}, {combine});\n"
                      f"    if (threadIdx.x == 0) {name}_store(({it})o, acc, {args});")
        if launch.strategy == "block":
            body = (f"    {acc_t} acc = {identity};\n"
                    f"    for (long long r = threadIdx.x; r < {self.size}LL; r += blockDim.x)\n"
                    f"      acc = {combine}(acc, {element});\n" + block_tail)
            return [f"{kernel} {name}({params}) {{", _grid_stride("o", self.kept, body, True), "}"]
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
                _grid_stride("b", self.kept * parts, partial, True), "}",
                f"{kernel} {launch.finish_name}(const {acc_t}* __restrict__ scratch, {params}) {{",
                _grid_stride("o", self.kept, finish, True), "}"]

    def host_source(self) -> str:
        name, it = self.name, self.index_t
        acc_t = reg_type(self.acc)
        args = _host_args(self.buffers, [self.step.out])
        return (f'extern "C" void host_{name}(void** p) {{\n'
                f"  for (long long o = 0; o < {self.kept}LL; ++o) {{\n"
                f"    {acc_t} acc = {identity_literal(self.step.monoid, self.step.out.dtype)};\n"
                f"    for (long long r = 0; r < {self.size}LL; ++r)\n"
                f"      acc = {name}_combine()(acc, {name}_element(({it})o, ({it})r, {args}));\n"
                f"    {name}_store(({it})o, acc, {args});\n  }}\n}}\n")
