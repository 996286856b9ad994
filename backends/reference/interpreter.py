"""Op-by-op evaluation of a jaxpr on NumPy buffers."""
from __future__ import annotations

import numpy as np

from functrans.core import ClosedJaxpr, Jaxpr, Literal, to_numpy


def eval_jaxpr_numpy(jaxpr: Jaxpr, consts, args) -> list:
    """Evaluate ``jaxpr`` with the primitives' reference implementations (NumPy in, out)."""
    env: dict[int, object] = {}
    for v, c in zip(jaxpr.constvars, consts):
        env[id(v)] = c
    for v, a in zip(jaxpr.invars, args):
        env[id(v)] = a

    def read(v):
        return np.asarray(v.val, dtype=v.aval.dtype) if isinstance(v, Literal) else env[id(v)]

    for eqn in jaxpr.eqns:
        prim = eqn.primitive
        outs = prim.impl(*[read(v) for v in eqn.invars], **eqn.params)
        if not prim.multiple_results:
            outs = [outs]
        for v, o in zip(eqn.outvars, outs):
            o = np.asarray(o)
            if o.dtype != v.aval.dtype:
                o = o.astype(v.aval.dtype)
            env[id(v)] = o
    return [read(v) for v in jaxpr.outvars]


class ReferenceExecutable:
    """A jaxpr bound to its constants, run op by op."""

    def __init__(self, closed: ClosedJaxpr):
        self.closed = closed
        self.consts = [to_numpy(c) for c in closed.consts]

    def __call__(self, *args):
        return eval_jaxpr_numpy(self.closed.jaxpr, self.consts, args)

    def as_text(self) -> str:
        return str(self.closed)


def compile_jaxpr(closed: ClosedJaxpr, devices=None) -> ReferenceExecutable:
    return ReferenceExecutable(closed)
