"""The exceptions functrans raises where JAX raises its named errors, under JAX's names.

    >>> import functrans, functrans.numpy as jnp
    >>> from functrans.errors import ConcretizationTypeError
    >>> try:
    ...     functrans.jit(lambda x: 1.0 if x > 0 else -1.0)(jnp.float32(2.0))
    ... except ConcretizationTypeError:
    ...     print("a Python `if` on a traced value")
    a Python `if` on a traced value

Two names are broader here than in JAX, because functrans does not raise a narrower class:

* ``TracerBoolConversionError`` is :class:`ConcretizationTypeError` itself (functrans raises
  that for ``bool()`` of a traced value, as for ``float()`` and ``.item()``), so catching it
  also catches those.
* ``JaxRuntimeError`` is :class:`RuntimeError`: compiled programs, devices and collectives
  report run-time failures as ``RuntimeError`` subclasses.

JAX's ``KeyReuseError`` (from its opt-in key-reuse checker), ``NonConcreteBooleanIndexError``
(functrans raises a plain ``IndexError``) and the ``JAXTypeError`` / ``JAXIndexError`` bases
have no functrans counterpart and are not defined.
"""
from __future__ import annotations

from functrans.core import (ConcretizationTypeError, JaxprTypeError,  # noqa: F401
                            TracerArrayConversionError, TracerIntegerConversionError,
                            UnexpectedTracerError)

TracerBoolConversionError = ConcretizationTypeError
JaxRuntimeError = RuntimeError

__all__ = ["ConcretizationTypeError", "JaxRuntimeError", "JaxprTypeError",
           "TracerArrayConversionError", "TracerBoolConversionError",
           "TracerIntegerConversionError", "UnexpectedTracerError"]
