"""Control flow driven from Python around compiled bodies.

A ``while``, ``scan`` or ``cond`` becomes one native loop or branch when all its sub-jaxprs
compile without NumPy steps (see :mod:`control_flow`). When one of them needs a NumPy step
(``sort``, ``cholesky``, a ``cumsum`` the backend does not compile...), the equation stays a
fallback step — and the reference implementation would interpret the body op by op, in
NumPy, on every iteration. Instead, each sub-jaxpr is compiled on its own here (native
segments around its NumPy steps, like any program) and the loop runs in Python around those
executables: per iteration, one compiled call. Nested control flow inside a body gets the
same treatment, recursively, by the ordinary pipeline.

    >>> step.driver = driver_for(step.eqn, compile_jaxpr)       # doctest: +SKIP
    >>> outs = step.driver(*numpy_inputs)        # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from functrans.core import ShapedArray
from functrans.primitives import control_flow as control_prims


def driver_for(eqn, compile_jaxpr):
    """A callable running ``eqn`` (a ``while``/``scan``/``cond``) on NumPy arrays with
    sub-jaxprs compiled by ``compile_jaxpr`` (the pipeline's), or None when the equation
    has non-array operands (tokens)."""
    avals = [v.aval for v in list(eqn.invars) + list(eqn.outvars)]
    if not all(isinstance(a, ShapedArray) for a in avals):
        return None
    return DRIVERS[eqn.primitive](compile_jaxpr, **eqn.params)


class _Scan:
    def __init__(self, compile_jaxpr, jaxpr, num_consts, num_carry, length, reverse, **_):
        self.body = compile_jaxpr(jaxpr)
        self.num_consts, self.num_carry = num_consts, num_carry
        self.length, self.reverse = length, reverse
        self.y_avals = jaxpr.out_avals[num_carry:]

    def __call__(self, *args):
        consts = list(args[:self.num_consts])
        carry = list(args[self.num_consts:self.num_consts + self.num_carry])
        xs = args[self.num_consts + self.num_carry:]
        ys = [np.empty((self.length,) + a.shape, a.dtype) for a in self.y_avals]
        body = self.body
        for step in range(self.length):
            i = self.length - 1 - step if self.reverse else step
            outs = body(*consts, *carry, *[x[i] for x in xs])
            carry = outs[:self.num_carry]
            for y, o in zip(ys, outs[self.num_carry:]):
                y[i] = o
        return carry + ys


class _While:
    def __init__(self, compile_jaxpr, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, **_):
        self.cond, self.body = compile_jaxpr(cond_jaxpr), compile_jaxpr(body_jaxpr)
        self.cond_nconsts, self.body_nconsts = cond_nconsts, body_nconsts

    def __call__(self, *args):
        n_cond, n_body = self.cond_nconsts, self.body_nconsts
        cond_consts, body_consts = args[:n_cond], args[n_cond:n_cond + n_body]
        carry = list(args[n_cond + n_body:])
        while bool(self.cond(*cond_consts, *carry)[0]):
            carry = self.body(*body_consts, *carry)
        return carry


class _Cond:
    def __init__(self, compile_jaxpr, branches, **_):
        self.branches = [compile_jaxpr(b) for b in branches]

    def __call__(self, index, *operands):
        i = int(np.clip(np.asarray(index), 0, len(self.branches) - 1))
        return self.branches[i](*operands)


# control primitive -> the Python loop that drives its compiled bodies
DRIVERS = {control_prims.while_p: _While, control_prims.scan_p: _Scan,
           control_prims.cond_p: _Cond}
