"""The expression language of fused kernels: index arithmetic and per-element scalar code.

A fused kernel computes each output element from an *expression* of the loop indices.
Two node families, both immutable and hash-consed (structurally equal nodes are the same
object, so code generators get common-subexpression elimination by memoizing on nodes):

* :class:`IndexExpr` — integer arithmetic on loop indices: ``var``, ``const``, ``lin``
  (a linear combination), floor ``div`` / ``mod`` by positive constants, ``min``/``max``,
  and ``scalar`` (a runtime integer, e.g. a ``dynamic_slice`` start). Each node carries an
  interval ``[lo, hi]``; the constructors use it to simplify, which is what turns a reshape
  of a row-major buffer back into a plain linear address instead of a chain of div/mod.
* :class:`ScalarExpr` — ``load`` (buffer at an index), ``const``, ``op`` (a primitive's
  scalar function by name), ``iota`` (an index as a value) and ``compare`` (of two indices).

Nothing here knows about LLVM or CUDA: this module is shared by every compiling backend.

    >>> i = ivar(0, 4); j = ivar(1, 8)
    >>> flat = add(scale(i, 8), j)                   # row-major address of [4, 8]
    >>> add(scale(floordiv(flat, 8), 8), mod(flat, 8)) is flat
    True
"""
from __future__ import annotations

import itertools
import math
import threading
import weakref

import numpy as np

from functrans.primitives import elementwise as ew

_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1

# One intern table for the process; entries die with their last user. Compilation holds
# ``lock`` so the table is never mutated from two threads at once.
_interned: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()
_serial = itertools.count()
lock = threading.RLock()


class IndexExpr:
    """An integer expression of the loop indices (see the module docstring)."""

    __slots__ = ("kind", "args", "lo", "hi", "serial", "__weakref__")

    def __repr__(self):
        return format_index(self)


class ScalarExpr:
    """A per-element value of a fused kernel, with its NumPy ``dtype``."""

    __slots__ = ("kind", "args", "dtype", "serial", "__weakref__")

    def __repr__(self):
        return f"ScalarExpr({self.kind}, {self.dtype})"


def _make(cls, key, fill):
    node = _interned.get(key)
    if node is None:
        node = cls.__new__(cls)
        node.serial = next(_serial)
        fill(node)
        _interned[key] = node
    return node


def _index_node(kind, args, lo, hi):
    def fill(n):
        n.kind, n.args, n.lo, n.hi = kind, args, lo, hi
    return _make(IndexExpr, ("I", kind) + args, fill)


# =============================================================================================
# Index expressions
# =============================================================================================


def const(value: int) -> IndexExpr:
    value = int(value)
    return _index_node("const", (value,), value, value)


def ivar(k: int, extent: int) -> IndexExpr:
    """Loop index ``k`` of a loop with ``extent`` iterations (a size-1 loop is just 0)."""
    if extent <= 1:
        return const(0)
    return _index_node("var", (int(k), int(extent)), 0, int(extent) - 1)


def _terms(x: IndexExpr):
    """``x`` as (dict atom -> coefficient, constant)."""
    if x.kind == "const":
        return {}, x.args[0]
    if x.kind == "lin":
        return dict(x.args[0]), x.args[1]
    return {x: 1}, 0


def _lin(terms: dict, c: int) -> IndexExpr:
    terms = {a: k for a, k in terms.items() if k != 0}
    _recombine(terms)
    terms = {a: k for a, k in terms.items() if k != 0}
    if not terms:
        return const(c)
    if len(terms) == 1 and c == 0:
        (atom, coef), = terms.items()
        if coef == 1:
            return atom
    items = tuple(sorted(terms.items(), key=lambda t: t[0].serial))
    lo = hi = c
    for atom, coef in items:
        a, b = coef * atom.lo, coef * atom.hi
        lo += min(a, b)
        hi += max(a, b)
    return _index_node("lin", (items, c), lo, hi)


def _recombine(terms: dict) -> None:
    """Fold ``(L mod A)*k + (L div A)*A*k`` into ``L*k`` and ``(L mod A)*k +
    ((L div A) mod B)*A*k`` into ``(L mod A*B)*k``: the pattern a reshape leaves behind when
    it splits a flat index into coordinates and an address linearizes them again."""
    changed = True
    while changed:
        changed = False
        for atom, k in list(terms.items()):
            if atom.kind != "mod" or terms.get(atom) != k:
                continue
            base, a = atom.args
            quotient = floordiv(base, a)
            if terms.get(quotient) == a * k:
                del terms[atom], terms[quotient]
                for t, c in _terms(scale(base, k))[0].items():
                    terms[t] = terms.get(t, 0) + c
                changed = True
                break
            for other, k2 in list(terms.items()):
                if other.kind == "mod" and other.args[0] is quotient and k2 == a * k:
                    del terms[atom], terms[other]
                    merged = mod(base, a * other.args[1])
                    for t, c in _terms(scale(merged, k))[0].items():
                        terms[t] = terms.get(t, 0) + c
                    changed = True
                    break
            if changed:
                break


def add(*xs) -> IndexExpr:
    terms: dict = {}
    c = 0
    for x in xs:
        if isinstance(x, int):
            c += x
            continue
        t, k = _terms(x)
        c += k
        for atom, coef in t.items():
            terms[atom] = terms.get(atom, 0) + coef
    return _lin(terms, c)


def scale(x: IndexExpr, factor: int) -> IndexExpr:
    factor = int(factor)
    if factor == 0:
        return const(0)
    if factor == 1:
        return x
    t, c = _terms(x)
    return _lin({a: k * factor for a, k in t.items()}, c * factor)


def _split_by(x: IndexExpr, g: int):
    """Write ``x = g*y + r`` with the terms whose coefficient ``g`` divides in ``y``."""
    t, c = _terms(x)
    big = {a: k // g for a, k in t.items() if k % g == 0}
    rest = {a: k for a, k in t.items() if k % g != 0}
    return _lin(big, c // g), _lin(rest, c % g), bool(big)


def floordiv(x: IndexExpr, d: int) -> IndexExpr:
    """``floor(x / d)`` for a positive constant ``d``."""
    d = int(d)
    if d == 1:
        return x
    if x.kind == "const":
        return const(x.args[0] // d)
    if x.lo // d == x.hi // d:
        return const(x.lo // d)
    if x.kind == "div":
        return floordiv(x.args[0], x.args[1] * d)
    t, _ = _terms(x)
    for g in sorted({math.gcd(d, k) for k in t.values()} | {d}, reverse=True):
        if g == 1:
            continue
        y, r, any_big = _split_by(x, g)
        if any_big and r.lo >= 0 and r.hi < g:
            return floordiv(y, d // g)
        if any_big and g == d and r.lo >= 0:
            return add(y, floordiv(r, d))
    return _index_node("div", (x, d), x.lo // d, x.hi // d)


def mod(x: IndexExpr, d: int) -> IndexExpr:
    """``x mod d`` (floor semantics, result in ``[0, d)``) for a positive constant ``d``."""
    d = int(d)
    if d == 1:
        return const(0)
    if x.kind == "const":
        return const(x.args[0] % d)
    if x.lo >= 0 and x.hi < d:
        return x
    t, c = _terms(x)
    kept = {a: k for a, k in t.items() if k % d != 0}
    if len(kept) != len(t) or not 0 <= c < d:
        return mod(_lin(kept, c % d), d)
    if x.kind == "mod" and x.args[1] % d == 0:
        return mod(x.args[0], d)
    for g in sorted({math.gcd(d, k) for k in t.values()}, reverse=True):
        if g == 1 or g == d:
            continue
        y, r, any_big = _split_by(x, g)
        if any_big and r.lo >= 0 and r.hi < g:
            return add(scale(mod(y, d // g), g), r)
    hi = min(d - 1, x.hi) if x.lo >= 0 else d - 1
    return _index_node("mod", (x, d), 0, hi)


def imin(a: IndexExpr, b: IndexExpr) -> IndexExpr:
    if a.hi <= b.lo:
        return a
    if b.hi <= a.lo:
        return b
    return _index_node("min", (a, b), min(a.lo, b.lo), min(a.hi, b.hi))


def imax(a: IndexExpr, b: IndexExpr) -> IndexExpr:
    if a.lo >= b.hi:
        return a
    if b.lo >= a.hi:
        return b
    return _index_node("max", (a, b), max(a.lo, b.lo), max(a.hi, b.hi))


def clamp_index(x: IndexExpr, lo: int, hi: int) -> IndexExpr:
    """``x`` clamped into ``[lo, hi]``: keeps every load in bounds whatever the data."""
    return imax(imin(x, const(hi)), const(lo))


def from_scalar(s: "ScalarExpr") -> IndexExpr:
    """A runtime integer (an operand of the kernel) used as an index. An integer expression
    of the loop indices (iotas, constants, sums and constant multiples, as computed window
    positions are) becomes that index expression itself, so its loads stay affine."""
    if s.kind == "const":
        return const(int(np.asarray(s.args[0]).item()))
    affine = _affine_value(s)
    if affine is not None:
        return affine
    info = np.iinfo(s.dtype) if s.dtype.kind in "iu" else None
    lo = max(int(info.min), _INT64_MIN) if info is not None else 0
    hi = min(int(info.max), _INT64_MAX) if info is not None else 1
    return _index_node("scalar", (s,), lo, hi)


# integer arithmetic that keeps an index affine
_AFFINE_OPS = (ew.add_p, ew.sub_p, ew.mul_p, ew.neg_p, ew.convert_element_type_p)
# integer comparisons the operands' bounds can decide, as the index comparison they are
_ORDER_COMPARISONS = {ew.lt_p: "lt", ew.le_p: "le", ew.gt_p: "gt", ew.ge_p: "ge"}


def _affine_value(s: "ScalarExpr"):
    """``s`` as an index expression when it is integer arithmetic on iotas and constants
    whose every value fits its dtype (so the integer arithmetic cannot have wrapped), else
    None."""
    if s.dtype.kind not in "iu":
        return None
    if s.kind == "const":
        return const(int(np.asarray(s.args[0]).item()))
    if s.kind == "iota":
        x = s.args[0]
    elif s.kind == "op" and s.args[0] is ew.select_n_p and len(s.args[2]) == 3:
        # a choice the bounds decide, as a negative-index wrap of a nonnegative index is
        which = _decided(s.args[2][0])
        if which is None:
            return None
        x = _affine_value(s.args[2][1 + which])
        if x is None:
            return None
    elif s.kind == "op" and s.args[0] in _AFFINE_OPS:
        primitive, _, args = s.args
        if any(a.dtype.kind not in "iu" for a in args):
            return None
        parts = [_affine_value(a) for a in args]
        if any(p is None for p in parts):
            return None
        if primitive is ew.add_p:
            x = add(*parts)
        elif primitive is ew.sub_p:
            x = add(parts[0], scale(parts[1], -1))
        elif primitive is ew.neg_p:
            x = scale(parts[0], -1)
        elif primitive is ew.convert_element_type_p:
            x = parts[0]
        elif parts[0].kind == "const":
            x = scale(parts[1], parts[0].args[0])
        elif parts[1].kind == "const":
            x = scale(parts[0], parts[1].args[0])
        else:
            return None
    else:
        return None
    info = np.iinfo(s.dtype)
    return x if info.min <= x.lo and x.hi <= info.max else None


def _decided(pred: "ScalarExpr"):
    """The value (0 or 1) of a comparison of integer arithmetic on iotas that the bounds of
    its operands decide, else None."""
    if pred.kind == "const":
        return int(bool(np.asarray(pred.args[0]).item()))
    if pred.kind != "op" or pred.args[0] not in _ORDER_COMPARISONS:
        return None
    a, b = (_affine_value(x) for x in pred.args[2])
    if a is None or b is None:
        return None
    name = _ORDER_COMPARISONS[pred.args[0]]
    if name in ("le", "gt"):  # integers: a <= b is a < b + 1, a > b is a >= b + 1
        b, name = add(b, 1), "lt" if name == "le" else "ge"
    decided = compare(name, a, b)  # decides by the operands' bounds where it can
    return int(bool(decided.args[0])) if decided.kind == "const" else None


def linearize(indices, shape) -> IndexExpr:
    """The row-major offset of ``indices`` in an array of ``shape``."""
    terms = []
    stride = 1
    for idx, size in zip(reversed(list(indices)), reversed(list(shape))):
        terms.append(scale(idx, stride))
        stride *= int(size)
    return add(*terms) if terms else const(0)


def delinearize(flat: IndexExpr, shape) -> list:
    """The coordinates in ``shape`` of row-major offset ``flat``."""
    out = []
    stride = math.prod(shape) if len(shape) else 1
    for size in shape:
        stride //= max(int(size), 1)
        out.append(mod(floordiv(flat, stride), size) if size else const(0))
    return out


def index_vars(shape) -> list:
    return [ivar(k, s) for k, s in enumerate(shape)]


# =============================================================================================
# Scalar expressions
# =============================================================================================


def _scalar_node(kind, args, dtype, key_args=None):
    dtype = np.dtype(dtype)

    def fill(n):
        n.kind, n.args, n.dtype = kind, args, dtype
    return _make(ScalarExpr, ("S", kind, dtype.str) + (args if key_args is None else key_args), fill)


def load(buffer, offset: IndexExpr) -> ScalarExpr:
    """The element of ``buffer`` (a backend buffer with ``dtype``) at flat ``offset``."""
    return _scalar_node("load", (buffer, offset), buffer.dtype)


def constant(value, dtype) -> ScalarExpr:
    dtype = np.dtype(dtype)
    value = np.asarray(value).astype(dtype)[()]
    # keyed by the bytes so NaN constants intern too
    return _scalar_node("const", (value,), dtype, (value.tobytes(),))


def op(primitive, params: tuple, args: tuple, dtype) -> ScalarExpr:
    """The scalar function of elementwise ``primitive`` (with hashable ``params``) on
    ``args``."""
    return _scalar_node("op", (primitive, params, tuple(args)), dtype)


def iota(index: IndexExpr, dtype) -> ScalarExpr:
    return _scalar_node("iota", (index,), dtype)


def compare(pred: str, a: IndexExpr, b: IndexExpr) -> ScalarExpr:
    """Boolean ``a pred b`` for ``pred`` in lt, le, eq, ne, ge, gt."""
    if a.kind == "const" and b.kind == "const":
        x, y = a.args[0], b.args[0]
        return constant({"lt": x < y, "le": x <= y, "eq": x == y, "ne": x != y,
                         "ge": x >= y, "gt": x > y}[pred], np.bool_)
    if pred == "lt" and a.hi < b.lo or pred == "ge" and a.lo >= b.hi:
        return constant(True, np.bool_)
    if pred == "lt" and a.lo >= b.hi or pred == "ge" and a.hi < b.lo:
        return constant(False, np.bool_)
    return _scalar_node("compare", (pred, a, b), np.bool_)


def logical_and(a: ScalarExpr, b: ScalarExpr) -> ScalarExpr:
    for x, y in ((a, b), (b, a)):
        if x.kind == "const":
            return y if bool(x.args[0]) else x
    return op(ew.and_p, (), (a, b), np.bool_)


def select(pred: ScalarExpr, on_true: ScalarExpr, on_false: ScalarExpr) -> ScalarExpr:
    if pred.kind == "const":
        return on_true if bool(pred.args[0]) else on_false
    return op(ew.select_n_p, (), (pred, on_false, on_true), on_true.dtype)


# =============================================================================================
# Traversal
# =============================================================================================


def children(node):
    kind, args = node.kind, node.args
    if isinstance(node, IndexExpr):
        if kind == "lin":
            return [a for a, _ in args[0]]
        if kind in ("div", "mod"):
            return [args[0]]
        if kind in ("min", "max"):
            return list(args)
        if kind == "scalar":
            return [args[0]]
        return []
    if kind == "load":
        return [args[1]]
    if kind == "op":
        return list(args[2])
    if kind == "iota":
        return [args[0]]
    if kind == "compare":
        return [args[1], args[2]]
    return []


def postorder(roots) -> list:
    """Every node reachable from ``roots``, children before parents (no recursion, so
    long elementwise chains do not hit Python's recursion limit)."""
    seen: set = set()
    order = []
    for root in roots:
        if root in seen:
            continue
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if node in seen:
                continue
            seen.add(node)
            stack.append((node, True))
            for c in children(node):
                if c not in seen:
                    stack.append((c, False))
    return order


def substitute(roots, mapping: dict, rebuild_load=None) -> list:
    """``roots`` with loop variables replaced by the index expressions in ``mapping``;
    ``rebuild_load(buffer, offset)``, if given, builds each load (to redirect some)."""
    new: dict = {}
    for node in postorder(roots):
        if isinstance(node, IndexExpr):
            k, a = node.kind, node.args
            if k == "var":
                new[node] = mapping.get(node, node)
            elif k == "const":
                new[node] = node
            elif k == "lin":
                new[node] = add(*[scale(new[t], c) for t, c in a[0]], a[1])
            elif k == "div":
                new[node] = floordiv(new[a[0]], a[1])
            elif k == "mod":
                new[node] = mod(new[a[0]], a[1])
            elif k == "min":
                new[node] = imin(new[a[0]], new[a[1]])
            elif k == "max":
                new[node] = imax(new[a[0]], new[a[1]])
            elif k == "scalar":
                new[node] = from_scalar(new[a[0]])
        else:
            k, a = node.kind, node.args
            if k == "load":
                new[node] = (rebuild_load or load)(a[0], new[a[1]])
            elif k == "const":
                new[node] = node
            elif k == "op":
                new[node] = op(a[0], a[1], tuple(new[x] for x in a[2]), node.dtype)
            elif k == "iota":
                new[node] = iota(new[a[0]], node.dtype)
            elif k == "compare":
                new[node] = compare(a[0], new[a[1]], new[a[2]])
    return [new[r] for r in roots]


def variables(roots) -> set:
    return {n for n in postorder(roots) if isinstance(n, IndexExpr) and n.kind == "var"}


def loads(roots) -> list:
    return [n for n in postorder(roots) if isinstance(n, ScalarExpr) and n.kind == "load"]


def has_divmod_of(roots, var: IndexExpr) -> bool:
    """Whether a ``div`` or ``mod`` node depends on ``var`` (which would make a flattened loop
    compute coordinates with divisions)."""
    for n in postorder(roots):
        if isinstance(n, IndexExpr) and n.kind in ("div", "mod"):
            if var in postorder([n]):
                return True
    return False


# =============================================================================================
# Printing (for dumps and error messages)
# =============================================================================================


def format_index(x: IndexExpr) -> str:
    k, a = x.kind, x.args
    if k == "const":
        return str(a[0])
    if k == "var":
        return f"i{a[0]}"
    if k == "lin":
        parts = [(format_index(t) if c == 1 else f"{c}*{format_index(t)}") for t, c in a[0]]
        if a[1]:
            parts.append(str(a[1]))
        return "(" + " + ".join(parts) + ")"
    if k == "div":
        return f"({format_index(a[0])} // {a[1]})"
    if k == "mod":
        return f"({format_index(a[0])} % {a[1]})"
    if k in ("min", "max"):
        return f"{k}({format_index(a[0])}, {format_index(a[1])})"
    return "scalar"
