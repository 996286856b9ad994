"""Scalar code inside a loop body: the expression nodes of a kernel (see
:mod:`functrans.backends.compiler.exprs`) at given loop indices, and the monoids that
reductions, scatters and cumulative steps combine with.

    >>> ev = Evaluator(mb, b, indices, ptrs)              # doctest: +SKIP
    >>> ev.store(out, ev.index(offset), ev.scalar(value))  # doctest: +SKIP
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from functrans.backends.compiler import exprs as E
from functrans.backends.compiler.fusion import Buffer
from functrans.backends.llvm import scalar_ops
from functrans.backends.llvm.ir_builder import I8, I64
from functrans.backends.llvm.scalar_ops import ScalarContext, constant, reg_type


def monoid_identity(monoid: str, dtype):
    """The identity element of ``monoid`` (add, mul, max, min, and, or, xor) on ``dtype``."""
    dtype = np.dtype(dtype)
    if monoid in ("add", "or", "xor"):
        return constant(dtype, 0)
    if monoid == "mul":
        return constant(dtype, 1)
    if monoid == "and":
        return constant(dtype, True) if dtype == np.bool_ else constant(dtype, -1)
    if dtype == np.bool_:
        return constant(dtype, monoid == "min")
    if dtype.kind == "f":
        return constant(dtype, -np.inf if monoid == "max" else np.inf)
    info = np.iinfo(dtype)
    return constant(dtype, info.min if monoid == "max" else info.max)


def combine(mb, b: ir.IRBuilder, monoid: str, dtype, acc, value):
    """``acc monoid value`` (register values of ``dtype``); floats may be reassociated."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        if monoid == "add":
            r = b.fadd(acc, value)
            r.flags.append("reassoc")  # lets the vectorizer keep partial sums per lane
            return r
        if monoid == "mul":
            r = b.fmul(acc, value)
            r.flags.append("reassoc")
            return r
        name = "llvm.maximum" if monoid == "max" else "llvm.minimum"
        return mb.math.intrinsic(b, name, acc.type, acc, value)
    if dtype == np.bool_:
        op = {"add": "or_", "mul": "and_", "max": "or_", "min": "and_", "and": "and_",
              "or": "or_", "xor": "xor"}[monoid]
        return getattr(b, op)(acc, value)
    if monoid in ("add", "mul", "and", "or", "xor"):
        return getattr(b, {"add": "add", "mul": "mul", "and": "and_", "or": "or_",
                           "xor": "xor"}[monoid])(acc, value)
    cmp = b.icmp_signed if dtype.kind == "i" else b.icmp_unsigned
    return b.select(cmp(">" if monoid == "max" else "<", acc, value), acc, value)



class Evaluator:
    """Emits the code of expression nodes at given loop indices, each node once."""

    def __init__(self, mb, b: ir.IRBuilder, indices, ptrs, exact=False):
        self.mb, self.b = mb, b
        self.indices = list(indices)
        self.ptrs = ptrs
        self.memo: dict = {}
        self.ctx = ScalarContext(b, mb.math, exact)

    def record_guards(self, flag):
        """OR this element's "needs the exact path" conditions into ``flag``."""
        if flag is None or not self.ctx.guards:
            return
        any_guard = self.ctx.guards[0]
        for g in self.ctx.guards[1:]:
            any_guard = self.b.or_(any_guard, g)
        self.b.store(self.b.or_(self.b.load(flag), any_guard), flag)

    def index(self, node) -> ir.Value:
        self.evaluate(node)
        return self.memo[node]

    def scalar(self, node) -> ir.Value:
        self.evaluate(node)
        return self.memo[node]

    def evaluate(self, root):
        if root in self.memo:
            return
        for node in E.postorder([root]):
            if node in self.memo:
                continue
            if isinstance(node, E.IndexExpr):
                self.memo[node] = self.emit_index(node)
            else:
                self.memo[node] = self.emit_scalar(node)

    def emit_index(self, x: E.IndexExpr):
        b, k, a = self.b, x.kind, x.args
        c = lambda v: ir.Constant(I64, v)  # noqa: E731
        if k == "const":
            return c(a[0])
        if k == "var":
            return self.indices[a[0]]
        if k == "lin":
            acc = None
            for term, coef in a[0]:
                v = self.memo[term]
                v = v if coef == 1 else b.mul(v, c(coef), flags=["nsw"])
                acc = v if acc is None else b.add(acc, v, flags=["nsw"])
            return b.add(acc, c(a[1]), flags=["nsw"]) if a[1] else acc
        if k == "div":
            v, d = self.memo[a[0]], c(a[1])
            if a[0].lo >= 0:
                return b.sdiv(v, d)
            q = b.sdiv(v, d)
            r = b.srem(v, d)
            return b.select(b.icmp_signed("<", r, c(0)), b.sub(q, c(1)), q)
        if k == "mod":
            v, d = self.memo[a[0]], c(a[1])
            r = b.srem(v, d)
            if a[0].lo >= 0:
                return r
            return b.select(b.icmp_signed("<", r, c(0)), b.add(r, d), r)
        if k in ("min", "max"):
            x0, x1 = self.memo[a[0]], self.memo[a[1]]
            return b.select(b.icmp_signed("<" if k == "min" else ">", x0, x1), x0, x1)
        if k == "scalar":
            s = a[0]
            v = self.memo[s]
            width = v.type.width
            if s.dtype.kind == "u":
                v = v if width == 64 else b.zext(v, I64)
                if width == 64:  # values past int64 act as "very large"
                    v = b.select(b.icmp_signed("<", v, c(0)), c(2 ** 63 - 1), v)
                return v
            if s.dtype == np.bool_:
                return b.zext(v, I64)
            return v if width == 64 else b.sext(v, I64)
        raise NotImplementedError(f"index node {k}")

    def emit_scalar(self, node: E.ScalarExpr):
        b, k, a = self.b, node.kind, node.args
        if k == "load":
            return self.load(a[0], self.memo[a[1]])
        if k == "const":
            return constant(node.dtype, a[0])
        if k == "op":
            name, params, args = a
            return scalar_ops.emit(self.ctx, name, dict(params), [self.memo[x] for x in args],
                                   [x.dtype for x in args], node.dtype)
        if k == "iota":
            v = self.memo[a[0]]
            if node.dtype.kind == "f":
                return b.sitofp(v, reg_type(node.dtype))
            ty = reg_type(node.dtype)
            return b.trunc(v, ty) if ty.width < 64 else v
        if k == "compare":
            op = {"lt": "<", "le": "<=", "eq": "==", "ne": "!=", "ge": ">=", "gt": ">"}[a[0]]
            return b.icmp_signed(op, self.memo[a[1]], self.memo[a[2]])
        raise NotImplementedError(f"scalar node {k}")

    def load(self, buf: Buffer, offset):
        v = self.b.load(self.b.gep(self.ptrs[buf.id], [offset], inbounds=True))
        if buf.dtype == np.bool_:
            return self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
        return v

    def store(self, buf: Buffer, offset, value):
        if buf.dtype == np.bool_:
            value = self.b.zext(value, I8)
        self.b.store(value, self.b.gep(self.ptrs[buf.id], [offset], inbounds=True))

