"""``jax.extend.core`` (and ``jax.core``): the IR and the tracing machinery, as JAX libraries
use them to define primitives and to read programs.

:class:`Primitive` takes its rules as JAX's primitives do: ``def_impl`` receives and returns
arrays (functrans's own primitives compute on NumPy buffers), ``def_abstract_eval`` returns
``ShapedArray`` (or anything with ``shape`` and ``dtype``), and the derivative and batching
rules go in ``functrans.interpreters.ad.primitive_jvps`` / ``primitive_transposes`` and
``functrans.interpreters.batching.primitive_batchers``.

    >>> import functrans, functrans.numpy as jnp
    >>> from functrans.interpreters import ad
    >>> double_p = Primitive("double")
    >>> _ = double_p.def_impl(lambda x: x * 2)
    >>> _ = double_p.def_abstract_eval(lambda x: x)
    >>> ad.primitive_jvps[double_p] = lambda p, t: (double_p.bind(*p), double_p.bind(*t))
    >>> ad.primitive_transposes[double_p] = lambda ct, x: [double_p.bind(ct)]
    >>> functrans.jit(functrans.grad(lambda x: double_p.bind(x)))(1.0)
    Array(2., dtype=float32, weak_type=True)
"""
from __future__ import annotations

import weakref

import numpy as np

from functrans import core as _core
from functrans.numpy._promotion import asarray
from functrans.core import (ClosedJaxpr, ConcretizationTypeError, DropVar, Jaxpr,  # noqa: F401
                            JaxprTypeError, Literal, ShapedArray, Trace, Tracer,
                            UnexpectedTracerError, Var, check_jaxpr, eval_jaxpr,
                            find_top_trace, get_aval, valid_jaxtype)
from functrans.core import Eqn as JaxprEqn  # noqa: F401

__all__ = ["AbstractValue", "Atom", "ClosedJaxpr", "Effect", "Effects", "Jaxpr", "JaxprEqn",
           "Literal", "Primitive", "ShapedArray", "Token", "Trace", "Tracer", "Var",
           "array_types", "concrete_or_error", "eval_jaxpr", "find_top_trace", "get_aval",
           "get_opaque_trace_state", "jaxpr_as_fun", "jaxprs_in_params", "mapped_aval",
           "new_jaxpr_eqn", "no_effects", "raise_to_shaped", "subjaxprs", "typeof",
           "unmapped_aval", "valid_jaxtype"]

AbstractValue = ShapedArray
Atom = Var | Literal
typeof = get_aval
array_types = {np.ndarray, np.generic}


class Effect:
    """The base of the side effects a primitive may declare (a class per kind of effect)."""


Effects = set
no_effects: frozenset = frozenset()


class Token:
    """Orders side effects; functrans keeps effects in program order without tokens, so a
    token carries nothing."""


def raise_to_shaped(aval, weak_type=None):
    """``aval`` itself (every abstract value here is already a ``ShapedArray``)."""
    return aval if weak_type is None else aval.update(weak_type=weak_type)


def mapped_aval(size: int, axis: int | None, aval: ShapedArray) -> ShapedArray:
    """The type of one slice of ``aval`` along ``axis`` (``aval`` when ``axis`` is None)."""
    if axis is None:
        return aval
    shape = list(aval.shape)
    if shape[axis] != size:
        raise ValueError(f"mapped axis {axis} of {aval.str_short()} is not of size {size}")
    del shape[axis]
    return aval.update(shape=tuple(shape))


def unmapped_aval(size: int, axis: int | None, aval: ShapedArray,
                  explicit_mesh_axis=None) -> ShapedArray:
    """The type of ``size`` slices of type ``aval`` stacked on ``axis``."""
    if axis is None:
        return aval
    shape = list(aval.shape)
    shape.insert(axis, size)
    return aval.update(shape=tuple(shape))


def jaxpr_as_fun(closed: ClosedJaxpr):
    """``closed`` as a function of its inputs returning the list of its outputs."""
    return lambda *args: eval_jaxpr(closed.jaxpr, closed.consts, *args)


def subjaxprs(jaxpr: Jaxpr):
    """The programs held by ``jaxpr``'s equations (control-flow bodies, called programs)."""
    for eqn in jaxpr.eqns:
        yield from _core.subjaxprs(eqn)


def jaxprs_in_params(params) -> list[Jaxpr]:
    """The open programs held in an equation's parameters."""
    return list(_core.subjaxprs(params))


def new_jaxpr_eqn(invars, outvars, primitive, params, effects=None, source_info=None,
                  ctx=None) -> JaxprEqn:
    return JaxprEqn(primitive, list(invars), list(outvars), dict(params), source_info)


def concrete_or_error(force, val, context: str = ""):
    """``force(val)`` (``val`` itself when ``force`` is None) for a value known while
    tracing; ``ConcretizationTypeError`` for a traced one."""
    if isinstance(val, Tracer):
        concrete = val.to_concrete_value()
        if concrete is None:
            raise ConcretizationTypeError(
                f"Abstract tracer value encountered where concrete value is expected: "
                f"{val._short_repr()}\n{context}")
        val = concrete
    return val if force is None else force(val)


class _OpaqueTraceState:
    """Which transform is innermost now: equal for two calls under the same one."""

    __slots__ = ("_main",)

    def __init__(self, main):
        self._main = weakref.ref(main)

    def __eq__(self, other):
        return isinstance(other, _OpaqueTraceState) and self._main() is other._main() \
            and self._main() is not None

    def __hash__(self):
        return id(self._main())


def get_opaque_trace_state(convention=None) -> _OpaqueTraceState:
    """An opaque token for the current trace: libraries compare two of them to tell whether
    a value was made under the transform that is running now."""
    return _OpaqueTraceState(_core.trace_stack()[-1])


def _to_array(value):
    return value if isinstance(value, Tracer) else asarray(value)


def _to_buffer(value):
    return np.asarray(value)


def _as_aval(x):
    if isinstance(x, ShapedArray):
        return x
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return ShapedArray(tuple(x.shape), np.dtype(x.dtype), getattr(x, "weak_type", False))
    raise TypeError(f"abstract evaluation rule returned {type(x).__name__}, not an abstract "
                    f"value (ShapedArray)")


class Primitive(_core.Primitive):
    """A primitive whose rules are written as JAX's are (see the module docstring)."""

    call_primitive = False
    map_primitive = False
    ref_primitive = False
    skip_canonicalization = False

    def __init__(self, name: str):
        super().__init__(name)
        self._array_impl = None
        self._lowering_fun = None

    def def_impl(self, impl):
        """``impl(*arrays, **params)``: the primitive computed with array operations."""
        self._array_impl = impl
        self.impl = self._impl_on_buffers
        return impl

    def _impl_on_buffers(self, *values, **params):
        impl = self._array_impl or self._lowering_fun
        out = impl(*[_to_array(v) for v in values], **params)
        if self.multiple_results:
            return [_to_buffer(o) for o in out]
        return _to_buffer(out)

    def def_abstract_eval(self, rule):
        """``rule(*avals, **params)`` returns the output's ``ShapedArray`` (a sequence of
        them when ``multiple_results``)."""
        def shape_rule(*avals, **params):
            out = rule(*avals, **params)
            return [_as_aval(o) for o in out] if self.multiple_results else _as_aval(out)
        self.abstract_eval = shape_rule
        return rule

    def def_effectful_abstract_eval(self, rule):
        """As :meth:`def_abstract_eval` for ``rule`` returning ``(avals, effects)``; a
        primitive with effects is kept by dead-code elimination."""
        self.effectful = True

        def shape_rule(*avals, **params):
            out, _effects = rule(*avals, **params)
            return [_as_aval(o) for o in out] if self.multiple_results else _as_aval(out)
        self.abstract_eval = shape_rule
        return rule

    def def_effectful_abstract_eval2(self, rule):
        return self.def_effectful_abstract_eval(rule)

    def bind_with_trace(self, trace, args, params):
        tracers = [trace.full_raise(a) for a in args]
        outs = trace.process_primitive(self, tracers, params)
        if self.multiple_results:
            return [_core.full_lower(o) for o in outs]
        return _core.full_lower(outs)

    def is_effectful(self, params) -> bool:
        return self.effectful
