"""The reference backend: evaluates a jaxpr op by op with each primitive's NumPy
implementation. It is the oracle every compiled backend is tested against."""
from __future__ import annotations

from functrans._backends import register_backend
from functrans.backends.reference.interpreter import compile_jaxpr, eval_jaxpr_numpy

__all__ = ["compile_jaxpr", "eval_jaxpr_numpy"]

register_backend("reference", "cpu", compile_jaxpr, priority=0)
