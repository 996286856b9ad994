"""The exceptions functrans raises where JAX raises its named errors, under JAX's names.

    >>> import functrans, functrans.numpy as jnp
    >>> from functrans.errors import ConcretizationTypeError
    >>> try:
    ...     functrans.jit(lambda x: 1.0 if x > 0 else -1.0)(jnp.float32(2.0))
    ... except ConcretizationTypeError:
    ...     print("a Python `if` on a traced value")
    a Python `if` on a traced value

``JaxRuntimeError`` is broader here than in JAX: it is :class:`RuntimeError`, as compiled
programs, devices and collectives report run-time failures as ``RuntimeError`` subclasses.

JAX's ``KeyReuseError`` (from its opt-in key-reuse checker, which functrans does not have)
is not defined.
"""
from __future__ import annotations

from functrans.core import (ConcretizationTypeError, JAXTypeError,  # noqa: F401
                            JaxprTypeError, TracerArrayConversionError,
                            TracerBoolConversionError, TracerIntegerConversionError,
                            UnexpectedTracerError, with_errors_page)

JaxRuntimeError = RuntimeError


class JAXIndexError(IndexError):
    """The base of functrans's indexing errors (``jax.errors.JAXIndexError``); each message
    ends with the section of the errors page that explains it."""

    def __init__(self, message: str = ""):
        super().__init__(with_errors_page(type(self), message))


class NonConcreteBooleanIndexError(JAXIndexError):
    """A boolean mask whose value is not known while tracing (under ``jit``, ``vmap``, ...)
    used as an index: the result's shape would depend on the mask's values. Use
    ``jnp.where(mask, x, other)``, or the ``size=`` argument of ``jnp.nonzero``."""


__all__ = ["ConcretizationTypeError", "JAXIndexError", "JAXTypeError", "JaxRuntimeError",
           "JaxprTypeError", "NonConcreteBooleanIndexError", "TracerArrayConversionError",
           "TracerBoolConversionError", "TracerIntegerConversionError", "UnexpectedTracerError"]
