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

JAX's ``KeyReuseError`` (from its opt-in key-reuse checker), ``NonConcreteBooleanIndexError``
(functrans raises a plain ``IndexError``) and the ``JAXTypeError`` / ``JAXIndexError`` bases
have no functrans counterpart and are not defined.
"""
from __future__ import annotations

from functrans.core import (ConcretizationTypeError, JaxprTypeError,  # noqa: F401
                            TracerArrayConversionError, TracerBoolConversionError,
                            TracerIntegerConversionError, UnexpectedTracerError)

JaxRuntimeError = RuntimeError

__all__ = ["ConcretizationTypeError", "JaxRuntimeError", "JaxprTypeError",
           "TracerArrayConversionError", "TracerBoolConversionError",
           "TracerIntegerConversionError", "UnexpectedTracerError"]
