"""Random programs over every primitive family, for differential testing of the compiler.

:func:`programs` is a hypothesis strategy of :class:`Program`: Python source of one
function over ``functrans.numpy``, ``lax`` and ``nn``, with the shapes and dtypes of its
arguments. A program is built one statement at a time from a catalogue of operations —
elementwise math and broadcasting, transposes, reshapes, slices, pads and concatenations,
reductions (several of one buffer), cumulative reductions and sorts, matrix products (``x @
x.T``, ``a.T @ b + a @ b``, batched einsums, products scaled into a sum), convolutions,
pooling windows, Cholesky factors and triangular solves, random bits, rematerialized
regions, gathers and scatters, integer, bitwise and boolean values, and ``scan``, ``fori_loop``,
``while_loop``, ``cond`` and ``switch`` whose bodies are built the same way (and may close
over the program's values). Operands are drawn from every value built so far, with a bias
to reuse one: shared operands, results read twice and products or reductions of one buffer
are the common case, not a rare one. Hypothesis shrinks a failing program statement by
statement, towards the first values and the simplest operations.

Values stay in a range where float32 keeps its precision: each value carries a bound on its
magnitude, and operations that would take it past :data:`MAX_BOUND` are not drawn (a bound
also sets the tolerance the fuzzer compares with). Branches are chosen by exact predicates
(integer arguments, or the arguments' own values), never by computed floats, so a result
cannot flip between two correct implementations that round differently.

The source is written with ``F`` for the floating-point dtype, so one program runs in
float32 and, with x64 on, in float64 (the fuzzer checks gradients in float64).

    >>> from hypothesis import given
    >>> @given(programs())                           # doctest: +SKIP
    ... def test(program):
    ...     f = program.function(np.float32)
"""
from __future__ import annotations

import itertools
import math
import textwrap
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

import functrans
import functrans.numpy as jnp
from functrans import lax, nn

# values are kept within this magnitude (see the module docstring)
MAX_BOUND = 1e4
# elements of any value, but in a program drawn with a large dimension
MAX_ELEMENTS = 4096
LARGE_MAX_ELEMENTS = 1 << 19
# a large dimension: its square is past the size from which loops are split over threads
LARGE_DIM = 512


@dataclass
class Value:
    name: str
    shape: tuple
    kind: str  # "f" (the program's float dtype), "i" (int32) or "b" (bool)
    bound: float

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass
class Program:
    """A random program: ``source`` defines ``f``; ``inputs`` are its arguments' (shape,
    kind); ``bounds`` the magnitude bounds of its results."""
    source: str
    inputs: list
    bounds: list
    kinds: list
    has_while: bool = False  # (reverse mode does not go through while_loop)
    donate: bool = False  # the fuzzer also runs it with its first argument donated
    features: set = field(default_factory=set)

    def function(self, float_dtype):
        """``f``, with ``F`` meaning ``float_dtype``."""
        namespace = {"jnp": jnp, "lax": lax, "nn": nn, "functrans": functrans,
                     "F": float_dtype}
        exec(compile(self.source, "<fuzzed program>", "exec"), namespace)
        return namespace["f"]

    def arguments(self, seed: int, float_dtype) -> list:
        """Arguments for ``f``: floats from a standard normal distribution, integers in
        [0, 10), from ``seed``."""
        rng = np.random.default_rng(seed)
        out = []
        for shape, kind in self.inputs:
            if kind == "f":
                out.append(rng.standard_normal(shape).astype(float_dtype))
            else:
                out.append(rng.integers(0, 10, shape).astype(np.int32))
        return out

    def __str__(self):
        return self.source


class _Builder:
    """Statements of one function body under construction."""

    def __init__(self, draw, names, values, depth, limit, indent=1):
        self.draw = draw
        self.names = names  # a shared counter of fresh names
        self.values = list(values)  # visible: parameters, closure, built here
        self.own: list = []  # built in this body
        self.lines: list = []
        self.depth = depth
        self.limit = limit
        self.indent = indent
        self.features: set = set()
        self.has_while = False

    def fresh(self, prefix="v") -> str:
        return f"{prefix}{next(self.names)}"

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def add(self, expr: str, shape, kind, bound, feature=None) -> Value | None:
        shape = tuple(int(s) for s in shape)
        size = int(np.prod(shape, dtype=np.int64))
        if size > self.limit or size == 0 or not math.isfinite(bound) or bound > MAX_BOUND:
            return None
        value = Value(self.fresh(), shape, kind, max(float(bound), 1e-3))
        self.emit(f"{value.name} = {expr}")
        self.values.append(value)
        self.own.append(value)
        if feature:
            self.features.add(feature)
        return value

    def pick(self, kind="f", where=lambda v: True) -> Value | None:
        candidates = [v for v in self.values if v.kind == kind and where(v)]
        if not candidates:
            return None
        return self.draw(st.sampled_from(candidates))

    def partner(self, x: Value, kind="f", where=lambda v: True) -> Value | None:
        """A second operand for ``x``: often ``x`` itself (a shared operand)."""
        if x.kind == kind and where(x) and self.draw(st.booleans()):
            return x
        return self.pick(kind, where)


def _broadcast(a, b):
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        return None


def _divisors(n):
    return [d for d in range(2, n) if n % d == 0]


# ---- elementwise ------------------------------------------------------------------------------

# (expression, bound of the result from the operand's bound b, or None where not drawn)
UNARY = [
    ("jnp.tanh({x})", lambda b: 1.0),
    ("jnp.sin({x})", lambda b: 1.0),
    ("jnp.cos({x})", lambda b: 1.0),
    ("nn.sigmoid({x})", lambda b: 1.0),
    ("-{x}", lambda b: b),
    ("jnp.abs({x})", lambda b: b),
    ("{x} * {x}", lambda b: b * b),
    ("jnp.square({x})", lambda b: b * b),
    ("jnp.sqrt({x} * {x} + 1.0)", lambda b: math.sqrt(b * b + 1)),
    ("jnp.exp({x})", lambda b: math.exp(b) if b <= 8 else math.inf),
    ("jnp.log1p(jnp.abs({x}))", lambda b: math.log1p(b)),
    ("jnp.log({x} * {x} + 0.5)", lambda b: max(1.0, math.log(b * b + 0.5))),
    ("{x} / (1.0 + jnp.abs({x}))", lambda b: 1.0),
    ("1.0 / ({x} * {x} + 1.0)", lambda b: 1.0),
    ("lax.rsqrt({x} * {x} + 1.0)", lambda b: 1.0),
    ("nn.relu({x})", lambda b: b),
    ("nn.gelu({x})", lambda b: b),
    ("nn.softplus({x})", lambda b: b + 1),
    ("nn.silu({x})", lambda b: b),
    ("lax.erf({x})", lambda b: 1.0),
    ("jnp.arctan({x})", lambda b: 2.0),
    ("(jnp.abs({x}) + 0.25) ** 0.5", lambda b: math.sqrt(b + 0.25)),
    ("(jnp.abs({x}) + 1.0) ** 1.5", lambda b: (b + 1) ** 1.5),
    ("jnp.expm1(jnp.tanh({x}))", lambda b: 2.0),
    ("jnp.clip({x}, -0.5, 0.5)", lambda b: 0.5),
    ("{x} * 0.5", lambda b: b * 0.5),
    ("{x} * -1.5", lambda b: b * 1.5),
    ("{x} + 2.0", lambda b: b + 2),
]

BINARY = [
    ("{x} + {y}", lambda a, b: a + b),
    ("{x} - {y}", lambda a, b: a + b),
    ("{x} * {y}", lambda a, b: a * b),
    ("jnp.maximum({x}, {y})", max),
    ("jnp.minimum({x}, {y})", max),
    ("{x} / (1.0 + {y} * {y})", lambda a, b: a),
    # continuous where it switches (gradients are checked by finite differences)
    ("jnp.where({x} > {y}, {x} - {y}, 0.5 * ({x} - {y}))", lambda a, b: a + b),
    ("{x} - 0.1 * {y}", lambda a, b: a + 0.1 * b),
]


def unary(b: _Builder):
    x = b.pick()
    if x is None:
        return None
    expr, bound = b.draw(st.sampled_from(UNARY))
    return b.add(expr.format(x=x.name), x.shape, "f", bound(x.bound), "elementwise")


def binary(b: _Builder):
    x = b.pick()
    if x is None:
        return None
    y = b.partner(x, where=lambda v: _broadcast(x.shape, v.shape) is not None)
    if y is None:
        return None
    expr, bound = b.draw(st.sampled_from(BINARY))
    return b.add(expr.format(x=x.name, y=y.name), _broadcast(x.shape, y.shape), "f",
                 bound(x.bound, y.bound), "broadcast" if x.shape != y.shape else "elementwise")


# ---- structural -------------------------------------------------------------------------------


def structural(b: _Builder):
    x = b.pick(where=lambda v: v.ndim >= 1)
    if x is None:
        return None
    choice = b.draw(st.sampled_from(["transpose", "reshape", "flip", "slice", "pad",
                                     "concatenate", "broadcast", "outer", "iota", "roll",
                                     "dynamic_slice", "dynamic_update_slice"]))
    n = x.ndim
    if choice == "transpose" and n >= 2:
        perm = b.draw(st.permutations(range(n)))
        if n == 2:
            return b.add(f"{x.name}.T", x.shape[::-1], "f", x.bound, "transpose")
        return b.add(f"jnp.transpose({x.name}, {tuple(perm)})",
                     tuple(x.shape[p] for p in perm), "f", x.bound, "transpose")
    if choice == "reshape":
        options = [(x.size,)]
        for d in _divisors(x.size):
            options.append((x.size // d, d))
        if n >= 3:
            options.append((x.shape[0] * x.shape[1],) + x.shape[2:])
        shape = b.draw(st.sampled_from(options))
        return b.add(f"{x.name}.reshape({shape})", shape, "f", x.bound, "reshape")
    axis = b.draw(st.integers(0, n - 1))
    if choice == "flip":
        return b.add(f"jnp.flip({x.name}, axis={axis})", x.shape, "f", x.bound, "rev")
    if choice == "slice" and x.shape[axis] >= 2:
        start = b.draw(st.integers(0, x.shape[axis] - 1))
        step = b.draw(st.sampled_from([1, 1, 2]))
        count = len(range(start, x.shape[axis], step))
        index = ", ".join([":"] * axis + [f"{start}::{step}"])
        shape = x.shape[:axis] + (count,) + x.shape[axis + 1:]
        return b.add(f"{x.name}[{index}]", shape, "f", x.bound, "slice")
    if choice == "pad":
        lo, hi = b.draw(st.integers(0, 2)), b.draw(st.integers(0, 2))
        widths = tuple((lo, hi) if d == axis else (0, 0) for d in range(n))
        shape = x.shape[:axis] + (x.shape[axis] + lo + hi,) + x.shape[axis + 1:]
        return b.add(f"jnp.pad({x.name}, {widths}, constant_values=0.5)", shape, "f",
                     max(x.bound, 0.5), "pad")
    if choice == "concatenate":
        y = b.partner(x, where=lambda v: v.ndim == n and all(
            v.shape[d] == x.shape[d] for d in range(n) if d != axis))
        if y is None:
            return None
        shape = x.shape[:axis] + (x.shape[axis] + y.shape[axis],) + x.shape[axis + 1:]
        return b.add(f"jnp.concatenate([{x.name}, {y.name}], axis={axis})", shape, "f",
                     max(x.bound, y.bound), "concatenate")
    if choice == "broadcast" and n <= 2:
        m = b.draw(st.sampled_from([2, 3, 4]))
        return b.add(f"jnp.broadcast_to({x.name}, ({m},) + {x.name}.shape)", (m,) + x.shape,
                     "f", x.bound, "broadcast")
    if choice == "outer" and n == 1:
        y = b.partner(x, where=lambda v: v.ndim == 1)
        return b.add(f"{x.name}[:, None] * {y.name}[None, :]", x.shape + y.shape, "f",
                     x.bound * y.bound, "broadcast")
    if choice == "iota":
        m = x.shape[-1]
        return b.add(f"{x.name} * (jnp.arange({m}, dtype=F) / {m})", x.shape, "f", x.bound,
                     "iota")
    if choice == "roll":
        shift = b.draw(st.integers(-2, 2))
        return b.add(f"jnp.roll({x.name}, {shift}, axis={axis})", x.shape, "f", x.bound,
                     "roll")
    if choice == "dynamic_slice" and x.shape[axis] >= 2:
        size = b.draw(st.integers(1, x.shape[axis] - 1))
        start = _index(b, x.shape[axis])
        shape = x.shape[:axis] + (size,) + x.shape[axis + 1:]
        return b.add(f"lax.dynamic_slice_in_dim({x.name}, {start}, {size}, axis={axis})",
                     shape, "f", x.bound, "dynamic_slice")
    if choice == "dynamic_update_slice" and x.shape[0] >= 2:
        size = b.draw(st.integers(1, x.shape[0] - 1))
        start = _index(b, x.shape[0])
        return b.add(f"lax.dynamic_update_slice_in_dim({x.name}, jnp.tanh({x.name}[:{size}]), "
                     f"{start}, 0)", x.shape, "f", max(x.bound, 1.0), "dynamic_update_slice")
    return None


def _index(b: _Builder, n: int) -> str:
    """An integer scalar expression: a literal, or one computed from an integer value
    (possibly out of range: dynamic slices clamp it)."""
    k = b.pick("i")
    if k is None or b.draw(st.booleans()):
        return str(b.draw(st.integers(0, n)))
    return f"jnp.sum({k.name}) % {n + 2}"


# ---- reductions, cumulative ops, sorts --------------------------------------------------------


def reduction(b: _Builder):
    x = b.pick(where=lambda v: v.ndim >= 1)
    if x is None:
        return None
    axis = b.draw(st.integers(0, x.ndim - 1))
    n = x.shape[axis]
    rest = x.shape[:axis] + x.shape[axis + 1:]
    kind = b.draw(st.sampled_from(["sum", "max", "min", "mean", "all", "centered", "two",
                                   "logsumexp", "softmax", "log_softmax", "cumsum", "cummax",
                                   "cumprod", "argmax", "sort", "argsort", "var", "prod"]))
    a = f"axis={axis}"
    if kind == "sum":
        return b.add(f"jnp.sum({x.name}, {a})", rest, "f", x.bound * n, "reduce_sum")
    if kind in ("max", "min"):
        return b.add(f"jnp.{kind}({x.name}, {a})", rest, "f", x.bound, "reduce_max")
    if kind == "mean":
        return b.add(f"jnp.mean({x.name}, {a})", rest, "f", x.bound, "reduce_sum")
    if kind == "all":
        return b.add(f"jnp.sum({x.name})", (), "f", x.bound * x.size, "reduce_sum")
    if kind == "centered":  # the buffer read by a reduction and by the loop after it
        return b.add(f"{x.name} - jnp.max({x.name}, {a}, keepdims=True)", x.shape, "f",
                     2 * x.bound, "reduce_max")
    if kind == "two":  # two reductions of one buffer
        return b.add(f"jnp.sum({x.name}, {a}) * jnp.max({x.name}, {a})", rest, "f",
                     n * x.bound * x.bound, "reduce_sum")
    if kind == "logsumexp":
        return b.add(f"nn.logsumexp({x.name}, {a})", rest, "f", x.bound + math.log(n) + 1,
                     "reduce_max")
    if kind == "softmax":
        return b.add(f"nn.softmax({x.name}, {a})", x.shape, "f", 1.0, "reduce_sum")
    if kind == "log_softmax" and x.bound <= 30:
        return b.add(f"nn.log_softmax({x.name}, {a})", x.shape, "f",
                     2 * x.bound + math.log(n) + 1, "reduce_sum")
    if kind == "cumsum":
        return b.add(f"jnp.cumsum({x.name}, {a})", x.shape, "f", x.bound * n, "cumsum")
    if kind == "cummax":
        return b.add(f"lax.cummax({x.name}, {a})", x.shape, "f", x.bound, "cummax")
    if kind == "cumprod" and x.bound <= 1:
        return b.add(f"jnp.cumprod({x.name}, {a})", x.shape, "f", 1.0, "cumprod")
    if kind == "prod" and x.bound <= 1:
        return b.add(f"jnp.prod({x.name}, {a})", rest, "f", 1.0, "reduce_prod")
    if kind == "argmax":
        return b.add(f"jnp.argmax({x.name}, {a}).astype(jnp.int32)", rest, "i", n, "argmax")
    if kind == "sort":
        return b.add(f"jnp.sort({x.name}, {a})", x.shape, "f", x.bound, "sort")
    if kind == "argsort":
        return b.add(f"jnp.argsort({x.name}, {a}).astype(jnp.int32)", x.shape, "i", n, "sort")
    if kind == "var":
        return b.add(f"jnp.var({x.name}, {a})", rest, "f", x.bound * x.bound, "reduce_sum")
    return None


# ---- products and convolutions ----------------------------------------------------------------


def product(b: _Builder):
    x = b.pick(where=lambda v: v.ndim >= 1)
    if x is None:
        return None
    kind = b.draw(st.sampled_from(["matmul", "matmul", "two_products", "einsum_batch",
                                   "vector", "outer", "scaled_sum"]))
    if kind in ("matmul", "scaled_sum") and x.ndim == 2:
        forms = []
        for y in [v for v in b.values if v.kind == "f" and v.ndim == 2]:
            (m, k), (p, q) = x.shape, y.shape
            if k == p:
                forms.append((f"{x.name} @ {y.name}", (m, q), k, y))
            if m == p:
                forms.append((f"{x.name}.T @ {y.name}", (k, q), m, y))
            if k == q:
                forms.append((f"{x.name} @ {y.name}.T", (m, p), k, y))
            if m == q:
                forms.append((f"{x.name}.T @ {y.name}.T", (k, p), m, y))
        if not forms:
            return None
        # the same operand twice (x @ x.T) first: hypothesis shrinks towards it
        forms.sort(key=lambda f: f[3] is not x)
        expr, shape, depth, y = b.draw(st.sampled_from(forms))
        bound = depth * x.bound * y.bound
        if kind == "scaled_sum":
            z = b.pick(where=lambda v: v.shape == shape)
            if z is not None:
                scale = b.draw(st.sampled_from([-0.1, 1.0, -1.0, 2.0]))
                return b.add(f"{z.name} + {scale} * ({expr})", shape, "f",
                             z.bound + abs(scale) * bound, "dot_epilogue")
        return b.add(expr, shape, "f", bound, "dot_general")
    if kind == "two_products" and x.ndim == 2 and x.shape[0] == x.shape[1]:
        n = x.shape[0]
        y = b.partner(x, where=lambda v: v.ndim == 2 and v.shape[0] == n)
        if y is None:
            return None
        return b.add(f"{x.name}.T @ {y.name} + {x.name} @ {y.name}", (n, y.shape[1]), "f",
                     2 * n * x.bound * y.bound, "dot_general")
    if kind == "einsum_batch" and x.ndim == 3:
        bs, i, j = x.shape
        y = b.partner(x, where=lambda v: v.ndim == 3 and v.shape[0] == bs and v.shape[1] == j)
        if y is not None:
            return b.add(f"jnp.einsum('bij,bjk->bik', {x.name}, {y.name})", (bs, i, y.shape[2]),
                         "f", j * x.bound * y.bound, "dot_general")
        y = b.partner(x, where=lambda v: v.ndim == 3 and v.shape[0] == bs and v.shape[2] == j)
        if y is None:
            return None
        return b.add(f"jnp.einsum('bij,bkj->bik', {x.name}, {y.name})", (bs, i, y.shape[1]),
                     "f", j * x.bound * y.bound, "dot_general")
    if kind == "vector" and x.ndim == 2:
        v = b.pick(where=lambda u: u.ndim == 1 and u.shape[0] == x.shape[1])
        if v is None:
            return None
        return b.add(f"jnp.dot({x.name}, {v.name})", x.shape[:1], "f",
                     x.shape[1] * x.bound * v.bound, "dot_general")
    if kind == "outer" and x.ndim == 1:
        y = b.partner(x, where=lambda u: u.ndim == 1)
        if b.draw(st.booleans()) and y.shape == x.shape:
            return b.add(f"jnp.dot({x.name}, {y.name})", (), "f",
                         x.size * x.bound * y.bound, "dot_general")
        return b.add(f"jnp.outer({x.name}, {y.name})", x.shape + y.shape, "f",
                     x.bound * y.bound, "dot_general")
    return None


def convolution(b: _Builder):
    x = b.pick(where=lambda v: v.ndim in (1, 2, 3))
    if x is None:
        return None
    if x.ndim == 1:
        w = b.partner(x, where=lambda v: v.ndim == 1 and v.shape[0] <= x.shape[0])
        if w is None:
            return None
        mode = b.draw(st.sampled_from(["full", "same", "valid"]))
        n, m = x.shape[0], w.shape[0]
        length = {"full": n + m - 1, "same": max(n, m), "valid": n - m + 1}[mode]
        return b.add(f"jnp.convolve({x.name}, {w.name}, mode='{mode}')", (length,), "f",
                     m * x.bound * w.bound, "convolution")
    channels, (h, wd) = (1, x.shape) if x.ndim == 2 else (x.shape[0], x.shape[1:])
    w = b.partner(x, where=lambda v: v.ndim == 2 and v.shape[0] <= min(h, 3)
                  and v.shape[1] <= min(wd, 3))
    if w is None:
        return None
    p, q = w.shape
    strides = (b.draw(st.integers(1, 2)), b.draw(st.integers(1, 2)))
    padding = b.draw(st.sampled_from(["VALID", "SAME"]))
    if padding == "VALID":
        out = ((h - p) // strides[0] + 1, (wd - q) // strides[1] + 1)
    else:
        out = (-(-h // strides[0]), -(-wd // strides[1]))
    # each channel convolved with the same kernel (a feature group per channel)
    kernel = f"jnp.broadcast_to({w.name}, ({channels}, {p}, {q})).reshape({channels}, 1, {p}, {q})"
    expr = (f"lax.conv_general_dilated({x.name}.reshape(1, {channels}, {h}, {wd}), {kernel}, "
            f"{strides}, '{padding}', feature_group_count={channels})"
            f".reshape({(channels,) + out if channels > 1 else out})")
    return b.add(expr, (channels,) + out if channels > 1 else out, "f",
                 p * q * x.bound * w.bound, "convolution")


# ---- indexing ---------------------------------------------------------------------------------


def indexing(b: _Builder):
    x = b.pick(where=lambda v: v.ndim >= 1)
    k = b.pick("i", where=lambda v: v.ndim == 1)
    if x is None or k is None:
        return None
    n = x.shape[0]
    kind = b.draw(st.sampled_from(["take", "take_axis", "scatter_add", "scatter_max",
                                   "scatter_set_slice", "where_int"]))
    if kind == "take":
        return b.add(f"{x.name}[{k.name} % {n}]", k.shape + x.shape[1:], "f", x.bound, "gather")
    if kind == "take_axis":
        axis = x.ndim - 1
        # out-of-range indices clamp
        return b.add(f"jnp.take({x.name}, {k.name} - 2, axis={axis}, mode='clip')",
                     x.shape[:axis] + k.shape, "f", x.bound, "gather")
    if kind in ("scatter_add", "scatter_max"):
        y = b.pick(where=lambda v: v.shape == x.shape[1:] or v.shape == ())
        update = y.name if y is not None else "1.5"
        bound = y.bound if y is not None else 1.5
        op = "add" if kind == "scatter_add" else "max"
        return b.add(f"{x.name}.at[{k.name} % {n}].{op}({update})", x.shape, "f",
                     x.bound + (k.size * bound if op == "add" else bound), "scatter")
    if kind == "scatter_set_slice" and n >= 2:
        return b.add(f"{x.name}.at[1:].set(jnp.tanh({x.name}[:-1]))", x.shape, "f",
                     max(x.bound, 1.0), "scatter")
    if kind == "where_int":
        if _broadcast(k.shape, x.shape) != x.shape:
            return None
        return b.add(f"jnp.where({k.name} % 2 == 0, {x.name}, -{x.name})", x.shape, "f",
                     x.bound, "select")
    return None


def integers(b: _Builder):
    k = b.pick("i")
    if k is None:
        return None
    kind = b.draw(st.sampled_from(["arith", "max", "mod", "sum", "to_float", "compare",
                                   "mask", "bool_to_float"]))
    if kind == "arith":
        j = b.partner(k, "i", where=lambda v: _broadcast(k.shape, v.shape) is not None)
        return b.add(f"{k.name} * 3 + {j.name}", _broadcast(k.shape, j.shape), "i",
                     3 * k.bound + j.bound, "integer")
    if kind == "max":
        return b.add(f"jnp.maximum({k.name}, 4) - jnp.minimum({k.name}, 2)", k.shape, "i",
                     k.bound + 4, "integer")
    if kind == "mod":
        return b.add(f"({k.name} % 7) // 2", k.shape, "i", 3, "integer")
    if kind == "sum" and k.ndim >= 1:
        return b.add(f"jnp.sum({k.name}, axis=0)", k.shape[1:], "i", k.bound * k.shape[0],
                     "integer")
    if kind == "to_float":
        return b.add(f"{k.name}.astype(F) * 0.25", k.shape, "f", k.bound * 0.25, "convert")
    x = b.pick(where=lambda v: _broadcast(v.shape, k.shape) is not None)
    if x is None:
        return None
    shape = _broadcast(x.shape, k.shape)
    if kind == "compare":
        return b.add(f"{x.name} > {k.name}.astype(F) * 0.1", shape, "b", 1, "compare")
    if kind == "mask":
        m = b.pick("b", where=lambda v: _broadcast(v.shape, x.shape) is not None)
        if m is None:
            return None
        return b.add(f"jnp.where({m.name}, {x.name}, 0.5 * {x.name})",
                     _broadcast(m.shape, x.shape), "f", x.bound, "select")
    if kind == "bool_to_float":
        m = b.pick("b")
        if m is None:
            return None
        return b.add(f"{m.name}.astype(F) - 0.5", m.shape, "f", 0.5, "convert")
    return None


# ---- windows, factorizations, random bits, rematerialization, bit operations ----------------


def windowed(b: _Builder):
    x = b.pick(where=lambda v: v.ndim == 2 and min(v.shape) >= 2)
    if x is None:
        return None
    window = (b.draw(st.integers(1, 2)), b.draw(st.integers(1, 2)))
    strides = (b.draw(st.integers(1, 2)), b.draw(st.integers(1, 2)))
    padding = b.draw(st.sampled_from(["VALID", "SAME"]))
    if padding == "VALID":
        shape = tuple((n - w) // s + 1 for n, w, s in zip(x.shape, window, strides))
    else:
        shape = tuple(-(-n // s) for n, s in zip(x.shape, strides))
    if b.draw(st.booleans()):
        return b.add(f"lax.reduce_window({x.name}, -jnp.inf, lax.max, {window}, {strides}, "
                     f"'{padding}')", shape, "f", x.bound, "reduce_window")
    return b.add(f"lax.reduce_window({x.name}, 0.0, lax.add, {window}, {strides}, "
                 f"'{padding}')", shape, "f", x.bound * window[0] * window[1], "reduce_window")


def factorization(b: _Builder):
    # a symmetric positive definite matrix from any matrix: x @ x.T + n I
    x = b.pick(where=lambda v: v.ndim == 2 and v.shape[0] <= 16)
    if x is None:
        return None
    n, k = x.shape
    spd = f"({x.name} @ {x.name}.T + {n}.0 * jnp.eye({n}, dtype=F))"
    factor = b.add(f"jnp.linalg.cholesky({spd})", (n, n), "f",
                   math.sqrt(k * x.bound * x.bound + n), "cholesky")
    if factor is None or not b.draw(st.booleans()):
        return factor
    y = b.pick(where=lambda v: v.ndim == 2 and v.shape[0] == n)
    if y is None:
        return factor
    # the factor's diagonal is at least sqrt(n): the solve stays within y's bound
    return b.add(f"lax.linalg.triangular_solve({factor.name}, {y.name}, left_side=True, "
                 f"lower=True)", y.shape, "f", y.bound * n, "triangular_solve")


def random_bits(b: _Builder):
    x = b.pick()
    if x is None:
        return None
    k = b.pick("i", where=lambda v: v.ndim == 1)
    # the key from an integer value, or a constant one
    key = f"functrans.random.key(jnp.sum({k.name}))" if k is not None else \
        f"functrans.random.key({b.draw(st.integers(0, 3))})"
    kind = b.draw(st.sampled_from(["normal", "uniform", "bernoulli"]))
    shape = tuple(x.shape)
    if kind == "normal":
        return b.add(f"{x.name} + 0.1 * functrans.random.normal({key}, {shape}, dtype=F)",
                     shape, "f", x.bound + 1, "random")
    if kind == "uniform":
        return b.add(f"{x.name} * functrans.random.uniform({key}, {shape}, dtype=F)", shape, "f",
                     x.bound, "random")
    return b.add(f"jnp.where(functrans.random.bernoulli({key}, 0.5, {shape}), {x.name}, 0.0)",
                 shape, "f", x.bound, "random")


def rematerialized(b: _Builder):
    x = b.pick()
    if x is None:
        return None
    y = b.partner(x, where=lambda v: _broadcast(x.shape, v.shape) is not None)
    shape = _broadcast(x.shape, y.shape)
    return b.add(f"functrans.checkpoint(lambda a, c: jnp.sin(a) * c + a)({x.name}, {y.name})",
                 shape, "f", x.bound * (y.bound + 1), "remat")


def bits(b: _Builder):
    k = b.pick("i")
    if k is None:
        return None
    expr = b.draw(st.sampled_from(["({k} & 5) | 2", "{k} ^ 3", "({k} << 2) >> 1",
                                   "lax.population_count({k})", "jnp.clip({k}, 1, 6)"]))
    return b.add(expr.format(k=k.name), k.shape, "i", 4 * k.bound + 8, "bitwise")


# ---- control flow -----------------------------------------------------------------------------


def _body(b: _Builder, params: list, closure: list) -> _Builder:
    """A nested builder for a body: ``params`` and ``closure`` visible, a few statements."""
    inner = _Builder(b.draw, b.names, params + closure, b.depth + 1, b.limit, b.indent + 1)
    for _ in range(b.draw(st.integers(1, 4))):
        _statement(inner)
    b.features |= inner.features
    b.has_while |= inner.has_while
    return inner


def _result_like(inner: _Builder, target: Value) -> Value:
    """A value of the body with ``target``'s shape (a float), made if there is none."""
    same = [v for v in inner.own if v.shape == target.shape and v.kind == "f"]
    if same:
        return inner.draw(st.sampled_from(same[::-1]))
    last = ([v for v in inner.own if v.kind == "f"] or [target])[-1]
    made = inner.add(f"{target.name} * 0.5 + jnp.tanh(jnp.mean({last.name}))", target.shape,
                     "f", target.bound * 0.5 + 1)
    return made if made is not None else target


def _bounded_carry(inner: _Builder, carry: Value, new: Value, steps: int) -> tuple:
    """``(name, bound)`` of a carry's next value, kept bounded over ``steps`` iterations."""
    # a step that at most adds to the carry's bound grows it by as much each iteration; one
    # that multiplies it (or worse: exp of the carry) is bounded by a tanh
    grow = new.bound - carry.bound
    if grow <= 0 or (new.bound <= 2 * carry.bound + 10
                     and carry.bound + steps * grow <= MAX_BOUND / 10):
        return new.name, carry.bound + max(grow, 0) * steps
    return f"jnp.tanh({new.name})", max(carry.bound, 1.0)


def control(b: _Builder):
    if b.depth >= 2:
        return None
    kind = b.draw(st.sampled_from(["scan", "fori", "while", "cond", "switch"]))
    closure = list(b.values)
    if kind == "scan":
        # (a long scan of a large body is slow in the reference interpreter, not news)
        xs = b.pick(where=lambda v: 1 <= v.ndim and v.shape[0] <= 16)
        init = b.pick()
        if xs is None or init is None:
            return None
        steps = xs.shape[0]
        name = b.fresh("scan_body")
        c = Value(b.fresh("c"), init.shape, "f", max(init.bound, 1.0))
        xt = Value(b.fresh("xt"), xs.shape[1:], "f", xs.bound)
        inner = _body(b, [c, xt], closure)
        new = _result_like(inner, c)
        carry, bound = _bounded_carry(inner, c, new, steps)
        y = inner.draw(st.sampled_from([v for v in inner.own if v.kind == "f"] or [new]))
        b.emit(f"def {name}({c.name}, {xt.name}):")
        b.lines += inner.lines
        b.emit(f"    return {carry}, {y.name}")
        out, ys = b.fresh(), b.fresh()
        b.emit(f"{out}, {ys} = lax.scan({name}, {init.name}, {xs.name})")
        b.features.add("scan")
        for v in (Value(out, init.shape, "f", bound), Value(ys, (steps,) + y.shape, "f",
                                                            max(y.bound, bound))):
            b.values.append(v)
            b.own.append(v)
        return b.values[-1]
    if kind in ("fori", "while"):
        init = b.pick()
        if init is None:
            return None
        steps = b.draw(st.integers(0, 3))
        name = b.fresh("loop_body")
        i = Value(b.fresh("i"), (), "i", steps)
        c = Value(b.fresh("c"), init.shape, "f", max(init.bound, 1.0))
        inner = _body(b, [i, c] if kind == "fori" else [c], closure)
        new = _result_like(inner, c)
        carry, bound = _bounded_carry(inner, c, new, steps)
        b.emit(f"def {name}({i.name + ', ' if kind == 'fori' else ''}{c.name}):")
        b.lines += inner.lines
        b.emit(f"    return {carry}")
        if kind == "fori":
            expr = f"lax.fori_loop(0, {steps}, {name}, {init.name})"
        else:
            b.has_while = True
            expr = (f"lax.while_loop(lambda s: s[0] < {steps}, lambda s: (s[0] + 1, "
                    f"{name}(s[1])), (0, {init.name}))[1]")
        return b.add(expr, init.shape, "f", bound, kind)
    # cond and switch: branches over an operand, chosen by an exact predicate
    operand = b.pick()
    if operand is None:
        return None
    k = b.pick("i")
    x0 = b.values[0]
    if k is not None:
        selector = f"jnp.sum({k.name})"
    elif x0.kind == "f":
        selector = f"({x0.name}.ravel()[0] > 0).astype(jnp.int32)"
    else:
        return None
    count = 2 if kind == "cond" else 3
    names, bound = [], 0.0
    for _ in range(count):
        name = b.fresh("branch")
        o = Value(b.fresh("o"), operand.shape, "f", operand.bound)
        inner = _body(b, [o], closure)
        result = _result_like(inner, o)
        b.emit(f"def {name}({o.name}):")
        b.lines += inner.lines
        b.emit(f"    return {result.name}")
        names.append(name)
        bound = max(bound, result.bound)
    if kind == "cond":
        expr = f"lax.cond({selector} % 2 == 0, {names[0]}, {names[1]}, {operand.name})"
    else:
        expr = f"lax.switch({selector} % 4, [{', '.join(names)}], {operand.name})"
    return b.add(expr, operand.shape, "f", bound, kind)


# the operation families, with their weights
FAMILIES = [(unary, 4), (binary, 4), (structural, 3), (reduction, 3), (product, 5),
            (convolution, 2), (indexing, 2), (integers, 2), (control, 2), (windowed, 1),
            (factorization, 1), (random_bits, 1), (rematerialized, 1), (bits, 1)]
_WEIGHTED = [f for f, w in FAMILIES for _ in range(w)]


def _statement(b: _Builder) -> None:
    for _ in range(3):  # a family that does not apply to what was drawn: another
        family = b.draw(st.sampled_from(_WEIGHTED))
        if family(b) is not None:
            return


_DIMS = [1, 2, 3, 4, 5, 8]


@st.composite
def programs(draw, max_statements: int = 10, large: bool | None = None):
    """A random :class:`Program` (see the module docstring). ``large``: draw one dimension
    of :data:`LARGE_DIM` (default: in one program of sixteen)."""
    if large is None:
        large = draw(st.integers(0, 15)) == 0
    dims = draw(st.lists(st.sampled_from(_DIMS), min_size=3, max_size=3))
    if large:
        dims[0] = LARGE_DIM
    limit = LARGE_MAX_ELEMENTS if large else MAX_ELEMENTS
    names = itertools.count()
    inputs = []
    for k in range(draw(st.integers(1, 3))):
        ndim = draw(st.integers(0, 3))
        shape = tuple(draw(st.sampled_from(dims)) for _ in range(ndim))
        if int(np.prod(shape, dtype=np.int64)) > limit:
            shape = shape[1:]
        inputs.append(Value(f"x{k}", shape, "f", 4.0))
    if draw(st.booleans()):
        inputs.append(Value("k0", (draw(st.sampled_from(dims[1:] or [3])),), "i", 10))
    b = _Builder(draw, names, inputs, 0, limit)
    for _ in range(draw(st.integers(2, max_statements))):
        _statement(b)
    built = b.own or inputs
    outputs = draw(st.lists(st.sampled_from(built[::-1]), min_size=1, max_size=3))
    if draw(st.integers(0, 7)) == 0:
        outputs.append(inputs[0])  # an argument returned as it is
    params = ", ".join(v.name for v in inputs)
    source = f"def f({params}):\n" + "\n".join(b.lines) + \
        f"\n    return ({', '.join(v.name for v in outputs)},)\n"
    return Program(source=textwrap.dedent(source), inputs=[(v.shape, v.kind) for v in inputs],
                   bounds=[v.bound for v in outputs], kinds=[v.kind for v in outputs],
                   has_while=b.has_while, donate=draw(st.integers(0, 3)) == 0,
                   features=b.features)
