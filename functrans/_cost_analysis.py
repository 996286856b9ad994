"""What a program costs, counted on its jaxpr: ``Lowered.cost_analysis()`` and
``Compiled.cost_analysis()``, as JAX's (which XLA computes).

Counts follow XLA's conventions: an elementwise operation is one flop per result element
(a transcendental one, ``exp``, ``log``, ``tanh``, ..., also counts one transcendental), a
reduction one flop per input element, a product ``2 * M * N * K`` (a convolution likewise
per output element and kernel tap); moving data (reshapes, slices, gathers, conversions)
costs no flops. ``bytes accessed`` adds up the operands and results of every equation.
Called programs count once; a ``scan`` body counts ``length`` times; a ``while_loop`` body
(whose trip count is not known) and the costliest ``cond`` branch count once.

    >>> import functrans, functrans.numpy as jnp
    >>> lowered = functrans.jit(lambda a, b: jnp.tanh(a @ b)).lower(jnp.ones((2, 3)),
    ...                                                            jnp.ones((3, 4)))
    >>> lowered.cost_analysis()["flops"]
    56.0
"""
from __future__ import annotations

import math

import numpy as np

from functrans import core
from functrans.primitives import elementwise, linalg, reductions

_TRANSCENDENTAL = {"exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos",
                   "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
                   "sqrt", "rsqrt", "cbrt", "erf", "erfc", "erf_inv", "lgamma", "digamma",
                   "pow", "atan2"}
_ELEMENTWISE = set(elementwise.ELEMENTWISE_UNARY.values()) | \
    set(elementwise.ELEMENTWISE_BINARY.values())
_REDUCTIONS = {p for p in vars(reductions).values()
               if isinstance(p, core.Primitive) and p.name.startswith(("reduce_", "arg"))}


def _size(aval) -> int:
    return int(np.prod(aval.shape, dtype=np.int64)) if hasattr(aval, "shape") else 0


def _bytes(aval) -> int:
    try:
        return _size(aval) * np.dtype(aval.dtype).itemsize
    except TypeError:
        return 0


def _aval(v):
    return v.aval


def _cost(jaxpr: core.Jaxpr) -> np.ndarray:
    """(flops, transcendentals, bytes accessed) of ``jaxpr``."""
    total = np.zeros(3)
    for eqn in jaxpr.eqns:
        prim, params = eqn.primitive, eqn.params
        in_avals = [_aval(v) for v in eqn.invars]
        out_avals = [_aval(v) for v in eqn.outvars]
        out_size = sum(_size(a) for a in out_avals)
        total[2] += sum(_bytes(a) for a in in_avals + out_avals)
        if prim in _ELEMENTWISE:
            total[0] += out_size
            if prim.name in _TRANSCENDENTAL:
                total[1] += out_size
        elif prim in _REDUCTIONS:
            total[0] += _size(in_avals[0]) if in_avals else 0
        elif prim is linalg.dot_general_p:
            (lhs_contract, _), _ = params["dimension_numbers"]
            k = math.prod(in_avals[0].shape[d] for d in lhs_contract)
            total[0] += 2 * out_size * k
        elif prim is linalg.conv_general_dilated_p:
            rhs = in_avals[1]
            spec = params["dimension_numbers"]
            rhs_spec = getattr(spec, "rhs_spec", None)
            taps = _size(rhs) // max(1, rhs.shape[rhs_spec[0]] if rhs_spec else 1)
            total[0] += 2 * out_size * taps
        elif prim.name == "scan":
            total += params["length"] * _cost(params["jaxpr"].jaxpr)
        elif prim.name == "cond":
            total += max((_cost(b.jaxpr) for b in params["branches"]),
                         key=lambda c: c[0], default=np.zeros(3))
        elif prim.name == "while":
            total += _cost(params["cond_jaxpr"].jaxpr) + _cost(params["body_jaxpr"].jaxpr)
        else:
            for sub in core.subjaxprs(params):
                total += _cost(sub)
    return total


def cost_analysis(closed: core.ClosedJaxpr) -> dict:
    """``{"flops", "transcendentals", "bytes accessed"}`` of the program ``closed``."""
    flops, transcendentals, accessed = _cost(closed.jaxpr)
    return {"flops": float(flops), "transcendentals": float(transcendentals),
            "bytes accessed": float(accessed)}
