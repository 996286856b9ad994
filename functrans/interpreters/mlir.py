"""``jax.interpreters.mlir``: how JAX libraries give a primitive its compiled form.

functrans does not compile through MLIR/StableHLO. A lowering made by
``lower_fun(f)`` (the primitive computed by the array function ``f``, the form JAX libraries
use for their own primitives) is honoured: ``f`` becomes the primitive's implementation when
it has none, so the primitive runs eagerly and in compiled programs. A lowering written with
MLIR operations is kept but cannot run; a primitive that has only such a lowering raises
``NotImplementedError`` when evaluated. Anything that would produce MLIR text raises too.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from functrans import core

__all__ = ["register_lowering", "lower_fun", "LoweringRuleContext", "ir", "hlo"]

# primitive -> {platform or None: lowering rule}
_lowerings: dict = {}


class LoweredFunction:
    """The lowering "compute this primitive with the array function ``fun``"."""

    def __init__(self, fun: Callable, multiple_results: bool):
        self.fun = fun
        self.multiple_results = multiple_results

    def __call__(self, ctx, *args, **params):
        raise NotImplementedError("functrans does not emit MLIR: a lower_fun lowering runs "
                                  "as the primitive's implementation instead")


def lower_fun(fun: Callable, multiple_results: bool = True) -> LoweredFunction:
    """A lowering that computes the primitive as ``fun(*args, **params)`` on arrays."""
    return LoweredFunction(fun, multiple_results)


def _mlir_only_impl(primitive):
    def impl(*args, **params):
        raise NotImplementedError(
            f"primitive {primitive.name} has no implementation functrans can run: its only "
            f"lowering is written in MLIR (functrans does not compile through MLIR); give it "
            f"def_impl or a lowering made with mlir.lower_fun")
    return impl


def register_lowering(primitive, rule, platform: str | None = None, **kwargs) -> None:
    """Register ``rule`` as the lowering of ``primitive`` (for ``platform``, or all)."""
    _lowerings.setdefault(primitive, {})[platform] = rule
    if isinstance(rule, LoweredFunction):
        if hasattr(primitive, "_lowering_fun") and primitive._lowering_fun is None:
            primitive._lowering_fun = rule.fun
            if primitive.impl is None:
                primitive.impl = primitive._impl_on_buffers
        elif primitive.impl is None:
            fun, multiple = rule.fun, primitive.multiple_results
            primitive.impl = lambda *a, **p: _run_on_buffers(fun, multiple, a, p)
    elif primitive.impl is None:
        primitive.impl = _mlir_only_impl(primitive)


def _run_on_buffers(fun, multiple_results, args, params):
    arrays = [core.wrap_array(core.host_copy(np.asarray(a)), core.get_aval(np.asarray(a)))
              for a in args]
    out = fun(*arrays, **params)
    return [np.asarray(o) for o in out] if multiple_results else np.asarray(out)


class LoweringRuleContext:
    """The context an MLIR lowering rule receives; functrans never builds one."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("functrans does not lower through MLIR")


class _NoMLIR:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        raise NotImplementedError(f"{self._name}.{attr}: functrans does not compile through "
                                  f"MLIR, so MLIR operations and types are not available")


ir = _NoMLIR("mlir.ir")
hlo = _NoMLIR("mlir.hlo")
