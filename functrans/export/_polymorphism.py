"""Dimension-polymorphic programs, from programs traced at a few concrete sizes.

functrans's IR has concrete shapes. A dimension-polymorphic export traces the function
once per *sample point* (a value for every dimension variable) and compares the JSON
documents of the traced programs (see :mod:`._program`) leaf by leaf:

* everything that is not a number (primitive names, dtypes, the equation graph) must be
  the same at every point — otherwise the function's operations depend on a dimension's
  value beyond its shapes (a Python branch on ``x.shape``), which a polymorphic program
  cannot express, and export raises;
* a number that is the same everywhere is a constant; one that changes is fitted as an
  affine function of the variables (``c0 + c1*v1 + ...``, integer coefficients for
  integers) on the first ``1 + len(vars)`` points (a base point, then one variable changed
  at a time) and checked on the last one (every variable changed at once), which catches
  products such as ``b*b``; the number is then written ``{"$dim": "2*b + 1"}``;
* constant arrays must be identical at every point.

The result is a template: :func:`._program.instantiate` turns it into the program for any
values of the variables, the same program a trace at those values would give.

    >>> points = sample_points(["b"])
    >>> points
    [{'b': 5}, {'b': 7}, {'b': 11}]
"""
from __future__ import annotations

import numpy as np

from functrans.export._dimensions import DimExpr

# Sample values, distinct primes: no accidental equality between variables, between a
# variable and a small constant dimension, or a size-1 broadcast.
_PRIMES = (5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79,
           83, 89, 97, 101, 103, 107, 109, 113, 127, 131)


class PolymorphismError(ValueError):
    """The function's program cannot be expressed for every value of the variables."""


def sample_points(variables: list[str]) -> list[dict[str, int]]:
    """The points a polymorphic export traces at: a base point, one per variable with that
    variable changed, and a last one with every variable changed (the check)."""
    k = len(variables)
    if 3 * k > len(_PRIMES):
        raise ValueError(f"at most {len(_PRIMES) // 3} dimension variables are supported")
    base = {v: _PRIMES[i] for i, v in enumerate(variables)}
    points = [base]
    for i, v in enumerate(variables):
        points.append({**base, v: _PRIMES[k + i]})
    points.append({v: _PRIMES[2 * k + i] for i, v in enumerate(variables)})
    return points


def describe_point(point: dict) -> str:
    return ", ".join(f"{v}={n}" for v, n in point.items())


def generalize(documents: list, consts: list[list], points: list[dict],
               variables: list[str]):
    """The template of the programs ``documents`` (with constants ``consts``) traced at
    ``points`` (see :func:`sample_points`); returns (template, constants)."""
    _same_constants(consts, points)
    return _Generalizer(points, variables).node(documents, []), consts[0]


def _same_constants(consts: list[list], points):
    first = consts[0]
    for other, point in zip(consts[1:], points[1:]):
        if len(other) != len(first):
            raise PolymorphismError(
                f"the program has {len(first)} constant arrays at {describe_point(points[0])}"
                f" but {len(other)} at {describe_point(point)}")
        for k, (a, b) in enumerate(zip(first, other)):
            if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
                raise PolymorphismError(
                    f"constant array {k} of the program ({a.dtype}{list(a.shape)} at "
                    f"{describe_point(points[0])}) depends on the dimension variables "
                    f"({b.dtype}{list(b.shape)} at {describe_point(point)}): a NumPy value "
                    "computed from a symbolic shape cannot be exported polymorphically; "
                    "compute it with functrans.numpy inside the function")


class _Generalizer:
    def __init__(self, points: list[dict], variables: list[str]):
        self.points = points
        self.variables = variables

    def node(self, docs: list, path: list):
        first = docs[0]
        if all(_is_number(d) for d in docs):
            return self.number(docs, path)
        if isinstance(first, dict) and all(isinstance(d, dict) for d in docs):
            if any(d.keys() != first.keys() for d in docs):
                self.differ(docs, path)
            if "primitive" in first and path:  # name an equation by its primitive
                path = path[:-1] + [f"equation {path[-1]} ({_short(first['primitive'])})"]
            return {k: self.node([d[k] for d in docs], path + [k]) for k in first}
        if isinstance(first, list) and all(isinstance(d, list) for d in docs):
            if any(len(d) != len(first) for d in docs):
                self.differ(docs, path)
            return [self.node([d[i] for d in docs], path + [i]) for i in range(len(first))]
        if any(type(d) is not type(first) or d != first for d in docs):
            self.differ(docs, path)
        return first

    def number(self, docs: list, path: list):
        if all(d == docs[0] and type(d) is type(docs[0]) for d in docs):
            return docs[0]
        integral = all(isinstance(d, int) for d in docs)
        k = len(self.variables)
        base = docs[0]
        coefficients = {}
        for i, v in enumerate(self.variables):
            step = self.points[1 + i][v] - self.points[0][v]
            coefficient = (docs[1 + i] - base) / step
            if coefficient != int(coefficient):
                self.not_affine(docs, path)
            coefficients[v] = int(coefficient)
        constant = base - sum(c * self.points[0][v] for v, c in coefficients.items())
        if constant != int(constant):
            self.not_affine(docs, path)
        expression = DimExpr(int(constant), coefficients)
        for point, actual in zip(self.points[1 + k:], docs[1 + k:]):
            predicted = expression.evaluate(point)
            if not np.isclose(predicted, actual, rtol=0 if integral else 1e-6, atol=0):
                self.not_affine(docs, path)
        text = str(expression)
        return {"$dim": text} if integral else {"$fdim": text}

    def differ(self, docs, path):
        shown = [_short(d) for d in docs]
        raise PolymorphismError(
            f"the function traced at {describe_point(self.points[0])} and at "
            f"{describe_point(self.points[docs.index(next(d for d in docs if d != docs[0]))])}"
            f" gives different programs, at {_path_text(path)}: {shown[0]} vs "
            f"{next(s for s, d in zip(shown, docs) if d != docs[0])}. Its operations depend "
            "on the value of a dimension variable beyond the shapes (a Python branch or loop "
            "on x.shape?), which a dimension-polymorphic export cannot express")

    def not_affine(self, docs, path):
        values = ", ".join(f"{_short(d)} at {describe_point(p)}"
                           for d, p in zip(docs, self.points))
        raise PolymorphismError(
            f"{_path_text(path)} is not an affine function of the dimension variables with "
            f"integer coefficients ({values}); exported shapes and sizes may only be affine "
            "in the dimension variables (b, 2*b + 1, b + c)")


def _is_number(d) -> bool:
    return isinstance(d, (int, float)) and not isinstance(d, bool)


def _path_text(path: list) -> str:
    """``["eqns", "equation 3 (slice)", "params", "limit_indices", 0]`` as "equation 3
    (slice), parameter limit_indices[0]"."""
    words, parameter = [], False
    for p in path:
        if isinstance(p, int) and words:
            words[-1] += f"[{p}]"
        elif p == "params":
            parameter = True
        elif p == "eqns" and p is path[-1]:
            words.append("the list of equations")
        elif p not in ("eqns", "closed_jaxpr", "jaxpr"):
            words.append(f"parameter {p}" if parameter else str(p))
            parameter = False
    return ", ".join(words) or "the program"


def _short(d) -> str:
    text = repr(d)
    return text if len(text) < 60 else text[:57] + "..."
