"""The bottom of CUDA code generation: how a kernel's C source is written — expressions as
``const`` locals, loads and stores, the flat index split into loop variables, parameter and
argument lists, grid-stride loops, the reduction monoids — what a launch of it is
(:class:`KernelLaunch`), and the table of kernel writers.

Each kind of step that becomes kernels (a loop kernel, a reduction, a scatter, a walk along
an axis) has one writer class, registered with :func:`writes` by the module that defines
it: ``writer = WRITERS[type(step)](name, step)``, with ``writer.device_source()``,
``writer.host_source()`` (see :mod:`host_emulation`) and ``writer.launches``.

    >>> body = ExpressionWriter("int", {})                # doctest: +SKIP
    >>> body.value(node)                                  # doctest: +SKIP
    'v3'
"""
from __future__ import annotations

import numpy as np

from functrans.backends.compiler import exprs as E
from functrans.backends.compiler.fusion import Buffer
from functrans.backends.cuda import scalar_ops
from functrans.backends.cuda.scalar_ops import literal, mem_type, reg_type

BLOCK_SIZE = 256  # threads per block of every kernel (a multiple of the warp size)
_INT32_MAX = 2 ** 31 - 1

# step class -> the class writing its kernels (see the module docstring)
WRITERS: dict = {}


def writes(*step_types):
    """Register the decorated class as the kernel writer of ``step_types``."""
    def register(writer):
        for step_type in step_types:
            WRITERS[step_type] = writer
        return writer
    return register


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


class ExpressionWriter:
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
            expr = scalar_ops.emit(self, name, dict(params), [m[x] for x in args],
                                   [x.dtype for x in args], node.dtype)
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


def split_index(flat: str, shape, dims, index_t: str) -> tuple[list, dict]:
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


def kernel_params(buffers, written) -> str:
    written = {b.id for b in written}
    return ", ".join(f"{'' if b.id in written else 'const '}{mem_type(b.dtype)}* __restrict__ "
                     f"{buffer_name(b)}" for b in buffers)


def kernel_args(buffers) -> str:
    return ", ".join(buffer_name(b) for b in buffers)


def host_args(buffers, written, first_slot=0) -> str:
    written = {b.id for b in written}
    return ", ".join(f"({'' if b.id in written else 'const '}{mem_type(b.dtype)}*)p[{first_slot + i}]"
                     for i, b in enumerate(buffers))


def grid_stride(var: str, count: int, body: str, per_block: bool = False) -> str:
    if per_block:
        start, step = "(long long)blockIdx.x", "(long long)gridDim.x"
    else:
        start = "(long long)blockIdx.x * blockDim.x + threadIdx.x"
        step = "(long long)gridDim.x * blockDim.x"
    return (f"  for (long long {var} = {start}; {var} < {count}LL; {var} += {step}) {{\n"
            f"{body}\n  }}")



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
        return scalar_ops.emit(None, scalar_ops.MONOID_OPS[monoid], {}, [a, b], [acc, acc], acc)
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
