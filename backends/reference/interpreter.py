"""Op-by-op evaluation of a jaxpr on NumPy buffers (``functrans.core.eval_jaxpr_numpy``)."""
from __future__ import annotations

from functrans.core import ClosedJaxpr, eval_jaxpr_numpy, to_numpy


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
