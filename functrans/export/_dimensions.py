"""Symbolic dimensions: affine expressions over named dimension variables.

A dimension-polymorphic export names some dimensions of its arguments with variables
(``symbolic_shape("b, 4")``). A dimension is an integer, or ``c0 + c1*v1 + c2*v2 + ...``
with integer coefficients: what a batch dimension becomes through elementwise operations,
products, reductions, concatenations and reshapes that keep or merge it. Calling an
exported function binds every variable to a positive integer by matching the symbolic
shapes of its arguments against the concrete ones (:func:`solve_dimensions`).

    >>> b, four = symbolic_shape("b, 4")
    >>> 2 * b + four
    2*b + 4
"""
from __future__ import annotations

import re
from typing import Mapping, Sequence

import numpy as np

from functrans.core import ShapedArray
from functrans._api import ShapeDtypeStruct
from functrans.tree_util import tree_flatten, tree_unflatten

__all__ = ["DimExpr", "SymbolicShapedArray", "symbolic_shape", "symbolic_args_specs",
           "is_symbolic_dim", "solve_dimensions", "shape_text"]


class DimExpr:
    """``constant + sum(coefficient * variable)``, with integer coefficients. Immutable and
    hashable; arithmetic with integers and other expressions stays affine. ``int()`` of an
    expression with variables raises ``TypeError``: its value is known only at call time."""

    __slots__ = ("constant", "terms")

    def __init__(self, constant: int = 0, terms: Mapping[str, int] | None = None):
        self.constant = int(constant)
        self.terms = tuple(sorted((v, int(c)) for v, c in (terms or {}).items() if c))

    @staticmethod
    def variable(name: str) -> "DimExpr":
        return DimExpr(0, {name: 1})

    @property
    def variables(self) -> tuple[str, ...]:
        return tuple(v for v, _ in self.terms)

    def evaluate(self, values: Mapping[str, int]) -> int:
        """The dimension when each variable has the value given in ``values``."""
        try:
            return self.constant + sum(c * int(values[v]) for v, c in self.terms)
        except KeyError as err:
            raise ValueError(f"no value for dimension variable {err.args[0]!r} in "
                             f"{dict(values)}") from None

    # ---- arithmetic (results that are constants become Python ints) ------------------------

    def _combine(self, other, sign: int):
        other = _as_expr(other)
        if other is None:
            return NotImplemented
        terms = dict(self.terms)
        for v, c in other.terms:
            terms[v] = terms.get(v, 0) + sign * c
        return _simplify(DimExpr(self.constant + sign * other.constant, terms))

    def __add__(self, other):
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other):
        return self._combine(other, -1)

    def __rsub__(self, other):
        other = _as_expr(other)
        return NotImplemented if other is None else other._combine(self, -1)

    def __neg__(self):
        return _simplify(DimExpr(-self.constant, {v: -c for v, c in self.terms}))

    def __mul__(self, other):
        if isinstance(other, DimExpr):
            if not other.terms:
                other = other.constant
            elif not self.terms:
                return other * self.constant
            else:
                raise TypeError(f"the product of dimensions {self} and {other} is not affine; "
                                "exported shapes may only be affine in the dimension variables")
        if isinstance(other, (int, np.integer)) and not isinstance(other, bool):
            k = int(other)
            return _simplify(DimExpr(self.constant * k, {v: c * k for v, c in self.terms}))
        return NotImplemented

    __rmul__ = __mul__

    def __eq__(self, other):
        other = _as_expr(other)
        return other is not None and (self.constant, self.terms) == (other.constant, other.terms)

    def __hash__(self):
        return hash((self.constant, self.terms)) if self.terms else hash(self.constant)

    def __int__(self):
        if self.terms:
            raise TypeError(f"the symbolic dimension {self} has no value before the exported "
                            "function is called")
        return self.constant

    __index__ = __int__

    def __repr__(self):
        parts = [v if c == 1 else f"-{v}" if c == -1 else f"{c}*{v}" for v, c in self.terms]
        if self.constant or not parts:
            parts.append(str(self.constant))
        text = parts[0]
        for p in parts[1:]:
            text += f" - {p[1:]}" if p.startswith("-") else f" + {p}"
        return text

    __str__ = __repr__


def _as_expr(x) -> DimExpr | None:
    if isinstance(x, DimExpr):
        return x
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return DimExpr(int(x))
    return None


def _simplify(e: DimExpr):
    return e if e.terms else e.constant


def is_symbolic_dim(d) -> bool:
    """Whether ``d`` is a symbolic dimension (an expression with variables), not an int.

        >>> is_symbolic_dim(symbolic_shape("b")[0]), is_symbolic_dim(3)
        (True, False)
    """
    return isinstance(d, DimExpr) and bool(d.terms)


# ---- parsing -----------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(.))")


def parse_dimension(text: str) -> int | DimExpr:
    """One dimension: an integer, a variable, or a sum of terms ``k``, ``v``, ``k*v``,
    ``v*k`` (with ``+``, ``-`` and parentheses)."""
    tokens = []
    for number, name, other in _TOKEN.findall(text.strip()):
        tokens.append(("num", int(number)) if number else ("name", name) if name
                      else ("op", other))
    position = [0]

    def peek():
        return tokens[position[0]] if position[0] < len(tokens) else ("end", None)

    def take():
        tok = peek()
        position[0] += 1
        return tok

    def expression():
        value = term()
        while peek() in (("op", "+"), ("op", "-")):
            _, op = take()
            value = value + term() if op == "+" else value - term()
        return value

    def term():
        value = factor()
        while peek() == ("op", "*"):
            take()
            value = value * factor()
        return value

    def factor():
        kind, value = take()
        if kind == "num":
            return value
        if kind == "name":
            return DimExpr.variable(value)
        if (kind, value) == ("op", "-"):
            return -factor()
        if (kind, value) == ("op", "("):
            inner = expression()
            if take() != ("op", ")"):
                raise ValueError("expected ')'")
            return inner
        raise ValueError(f"unexpected {value!r}" if kind != "end" else "unexpected end")

    if not tokens:
        raise ValueError("empty dimension")
    result = expression()
    if peek()[0] != "end":
        raise ValueError(f"unexpected {peek()[1]!r}")
    return result


def symbolic_shape(shape_spec: str | None, *, constraints: Sequence[str] = (), scope=None,
                   like: Sequence[int | None] | None = None) -> tuple:
    """A shape with symbolic dimensions, from its text (``jax.export.symbolic_shape``).

    Dimensions are separated by commas; each is an integer or an affine expression of
    dimension variables (``"b"``, ``"2*b + 1"``). ``_`` takes the dimension from ``like``.
    ``constraints`` and ``scope`` are accepted for JAX compatibility; constraints between
    variables are not supported.

        >>> symbolic_shape("b, 4")
        (b, 4)
        >>> symbolic_shape("_, 2*n", like=(3, None))
        (3, 2*n)
    """
    if constraints:
        raise NotImplementedError("symbolic_shape: constraints between dimension variables "
                                  "are not supported by functrans's export")
    text = "" if shape_spec is None else str(shape_spec).strip()
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    pieces = [p.strip() for p in text.split(",")] if text else []
    if pieces and pieces[-1] == "":  # "b," is the shape (b,)
        pieces.pop()
    if like is not None and len(like) != len(pieces):
        raise ValueError(f"symbolic shape {shape_spec!r} has {len(pieces)} dimensions but "
                         f"like= has {len(like)}")
    dims = []
    for k, piece in enumerate(pieces):
        if piece == "_":
            if like is None or like[k] is None:
                raise ValueError(f"symbolic shape {shape_spec!r}: dimension {k} is '_' but "
                                 "no known dimension is given for it in like=")
            dims.append(int(like[k]))
            continue
        try:
            dim = parse_dimension(piece)
        except (ValueError, TypeError) as err:
            raise ValueError(f"syntax error in symbolic shape {shape_spec!r} in dimension "
                             f"{k} ({piece!r}): {err}") from None
        if like is not None and like[k] is not None and not is_symbolic_dim(dim) \
                and dim != like[k]:
            raise ValueError(f"symbolic shape {shape_spec!r}: dimension {k} is {dim} but "
                             f"like= has {like[k]}")
        dims.append(dim)
    return tuple(dims)


def symbolic_args_specs(args, shapes_specs, constraints: Sequence[str] = (), scope=None):
    """Specifications for exporting ``args`` with the symbolic shapes ``shapes_specs``
    (one string per leaf, or one for every leaf): a pytree of ``ShapeDtypeStruct``.

        >>> import numpy as np
        >>> symbolic_args_specs(np.zeros((3, 4), np.float32), "b, 4")
        ShapeDtypeStruct(shape=(b, 4), dtype=float32)
    """
    leaves, tree = tree_flatten(args)
    if isinstance(shapes_specs, (str, type(None))):
        specs = [shapes_specs] * len(leaves)
    else:
        specs = tree_flatten(shapes_specs, is_leaf=lambda x: x is None)[0]
        if len(specs) != len(leaves):
            raise ValueError(f"symbolic_args_specs: {len(specs)} shape specifications for "
                             f"{len(leaves)} arguments")
    out = [ShapeDtypeStruct(symbolic_shape(s, constraints=constraints, like=np.shape(x))
                            if s is not None else np.shape(x), np.result_type(x))
           for x, s in zip(leaves, specs)]
    return tree_unflatten(tree, out)


# ---- abstract values with symbolic shapes ------------------------------------------------------

class SymbolicShapedArray(ShapedArray):
    """A :class:`~functrans.core.ShapedArray` whose shape may hold :class:`DimExpr`s (the
    ``in_avals``/``out_avals`` of a dimension-polymorphic export)."""

    __slots__ = ()

    def __init__(self, shape, dtype, weak_type: bool = False):
        self.shape = tuple(d if is_symbolic_dim(d) else int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.weak_type = bool(weak_type)
        self._sharding = None

    size = property(lambda self: int(np.prod([int(d) for d in self.shape], dtype=np.int64)))


def aval_with_shape(shape, dtype, weak_type: bool = False) -> ShapedArray:
    """A plain ShapedArray when every dimension is known, else a SymbolicShapedArray."""
    if any(is_symbolic_dim(d) for d in shape):
        return SymbolicShapedArray(shape, dtype, weak_type)
    return ShapedArray([int(d) for d in shape], dtype, weak_type)


def shape_text(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


# ---- binding variables at call time ------------------------------------------------------------

def solve_dimensions(symbolic_shapes: Sequence[tuple], shapes: Sequence[tuple],
                     names: Sequence[str]) -> dict[str, int]:
    """The value of every dimension variable, from matching each symbolic shape with the
    concrete shape of the argument called ``names[i]``. Raises ``ValueError`` naming the
    argument and dimension that cannot match (a rank, a constant, a variable bound to two
    values, a variable that would not be a positive integer).

        >>> solve_dimensions([(DimExpr.variable("b"), 4)], [(5, 4)], ["x"])
        {'b': 5}
    """
    for sym, shape, name in zip(symbolic_shapes, shapes, names):
        if len(sym) != len(shape):
            raise ValueError(f"Rank mismatch for {name}: expected {shape_text(sym)} and "
                             f"called with {shape_text(shape)}")
        for k, (d, n) in enumerate(zip(sym, shape)):
            if not is_symbolic_dim(d) and int(d) != n:
                raise ValueError(f"Shape mismatch for {name}.shape[{k}] (expected same "
                                 f"constant): expected {shape_text(sym)} and called with "
                                 f"{shape_text(shape)}")
    values: dict[str, int] = {}
    where: dict[str, str] = {}
    pending = [(d, n, f"{name}.shape[{k}]", sym, shape)
               for sym, shape, name in zip(symbolic_shapes, shapes, names)
               for k, (d, n) in enumerate(zip(sym, shape)) if is_symbolic_dim(d)]
    progress = True
    while pending and progress:  # solve the dimensions with one unknown variable, repeat
        progress, still = False, []
        for item in pending:
            d, n, place, sym, shape = item
            unknown = [(v, c) for v, c in d.terms if v not in values]
            if len(unknown) != 1:
                if not unknown:
                    _check_solved(d, n, values, where, place, sym, shape)
                    progress = True
                else:
                    still.append(item)
                continue
            v, c = unknown[0]
            rest = d.constant + sum(cc * values[vv] for vv, cc in d.terms if vv != v)
            value, remainder = divmod(n - rest, c)
            if remainder or value < 1:
                raise ValueError(
                    f"Input shapes do not match the polymorphic shapes specification: "
                    f"{place} = {n} does not give a positive integer value for dimension "
                    f"variable {v!r} (from {d} in {shape_text(sym)}, called with "
                    f"{shape_text(shape)}). Every dimension variable must be >= 1.")
            values[v], where[v] = value, place
            progress = True
        pending = still
    if pending:
        missing = sorted({v for d, *_ in pending for v in d.variables if v not in values})
        raise ValueError(f"cannot determine the dimension variables {missing} from the "
                         "argument shapes: each variable must appear in some dimension of "
                         "an argument with no other unknown variable")
    return values


def _check_solved(d, n, values, where, place, sym, shape):
    expected = d.evaluate(values)
    if expected != n:
        sources = ", ".join(f"{v!r} = {values[v]} from {where[v]}" for v in d.variables)
        raise ValueError(f"Shape mismatch for {place}: expected {d} = {expected} (with "
                         f"{sources}) in {shape_text(sym)}, and called with "
                         f"{shape_text(shape)}")
