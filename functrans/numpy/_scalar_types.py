"""Scalar types (``jnp.float32``, ``jnp.int8``, ...): usable as dtypes and callable.

As in JAX, ``jnp.float32`` is both a dtype specifier (``np.dtype(jnp.float32)`` works, and
``x.dtype == jnp.float32``) and a constructor: ``jnp.float32(3)`` is a float32 Array
rather than a NumPy scalar, so it can be used inside transformed code.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from functrans import _dtypes
from functrans.numpy._promotion import asarray


class _ScalarMeta(type):
    """Metaclass whose instances (the scalar types) convert when called."""

    def __call__(cls, x=0):
        return asarray(x, dtype=cls.dtype)

    def __eq__(cls, other):
        if isinstance(other, _ScalarMeta):
            return cls.dtype == other.dtype
        try:
            return cls.dtype == np.dtype(other)
        except TypeError:
            return False

    def __ne__(cls, other):
        return not cls == other

    def __hash__(cls):
        return hash(cls.dtype.type)

    def __instancecheck__(cls, instance):
        return isinstance(instance, cls.dtype.type)

    def __repr__(cls):
        return f"<class 'functrans.numpy.{cls.__name__}'>"


def _scalar_type(name: str, dtype) -> type:
    dtype = np.dtype(dtype)
    return _ScalarMeta(name, (), {"dtype": dtype, "__doc__": f"The {dtype.name} scalar type: "
                                  f"``{name}(x)`` converts ``x`` to a {dtype.name} Array."})


bool_ = _scalar_type("bool_", np.bool_)
int8 = _scalar_type("int8", np.int8)
int16 = _scalar_type("int16", np.int16)
int32 = _scalar_type("int32", np.int32)
int64 = _scalar_type("int64", np.int64)
uint8 = _scalar_type("uint8", np.uint8)
uint16 = _scalar_type("uint16", np.uint16)
uint32 = _scalar_type("uint32", np.uint32)
uint64 = _scalar_type("uint64", np.uint64)
bfloat16 = _scalar_type("bfloat16", _dtypes.bfloat16)
float16 = _scalar_type("float16", np.float16)
float32 = _scalar_type("float32", np.float32)
float64 = _scalar_type("float64", np.float64)
complex64 = _scalar_type("complex64", np.complex64)
complex128 = _scalar_type("complex128", np.complex128)

# The "default" names are the 64-bit types, narrowed to 32 bits unless x64 is enabled, like
# every other dtype request.
int_ = int64
uint = uint64
float_ = float64
complex_ = complex128
single, double = float32, float64
csingle, cdouble = complex64, complex128
half = float16

# Abstract kinds, for ``jnp.issubdtype``.
generic, number, inexact, floating = np.generic, np.number, np.inexact, np.floating
complexfloating, integer = np.complexfloating, np.integer
signedinteger, unsignedinteger = np.signedinteger, np.unsignedinteger
flexible, character, object_ = np.flexible, np.character, np.object_

dtype = np.dtype

_EXTENDED_FLOATS = {_dtypes.bfloat16}


def _as_dtype_or_kind(x):
    kind = _dtypes.extended_kind(x)
    if kind is not None:
        return kind
    if isinstance(x, type) and issubclass(x, np.generic) and x in (
            np.generic, np.number, np.inexact, np.floating, np.complexfloating, np.integer,
            np.signedinteger, np.unsignedinteger, np.flexible, np.character):
        return x
    if isinstance(x, _ScalarMeta):
        return x.dtype
    if x is float:
        return np.dtype(np.float64)
    if x is int:
        return np.dtype(np.int64)
    if x is complex:
        return np.dtype(np.complex128)
    if x is bool:
        return np.dtype(np.bool_)
    return np.dtype(x)


def issubdtype(arg1, arg2) -> bool:
    """Whether ``arg1`` is a sub-type of ``arg2`` in NumPy's hierarchy, with bfloat16 counted
    as a floating type.

        >>> issubdtype(bfloat16, floating)
        True
    """
    a, b = _as_dtype_or_kind(arg1), _as_dtype_or_kind(arg2)
    a_extended = isinstance(a, type) and issubclass(a, _dtypes.extended)
    if a_extended or (isinstance(b, type) and issubclass(b, _dtypes.extended)):
        # the extended kinds are NumPy generics, but under none of NumPy's concrete kinds
        return b is np.generic or (a_extended and isinstance(b, type) and issubclass(a, b))
    if isinstance(a, np.dtype) and a in _EXTENDED_FLOATS:
        if isinstance(b, np.dtype):
            return a == b
        return b in (np.floating, np.inexact, np.number, np.generic)
    if isinstance(b, np.dtype) and b in _EXTENDED_FLOATS:
        return isinstance(a, np.dtype) and a == b
    return bool(np.issubdtype(a, b))


def isdtype(dtype_, kind) -> bool:
    """The array-API dtype-kind test (``'bool'``, ``'signed integer'``, ``'unsigned integer'``,
    ``'integral'``, ``'real floating'``, ``'complex floating'``, ``'numeric'``, or dtypes)."""
    d = np.dtype(_as_dtype_or_kind(dtype_))
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for k in kinds:
        if isinstance(k, str):
            ok = {"bool": d == np.bool_,
                  "signed integer": d.kind == "i",
                  "unsigned integer": d.kind == "u",
                  "integral": d.kind in "iu",
                  "real floating": _dtypes.is_float(d),
                  "complex floating": d.kind == "c",
                  "numeric": d != np.bool_}.get(k)
            if ok is None:
                raise ValueError(f"isdtype: unknown kind {k!r}")
            if ok:
                return True
        elif d == np.dtype(_as_dtype_or_kind(k)):
            return True
    return False


ComplexWarning = np.exceptions.ComplexWarning

# The narrow floating-point and integer types of ml_dtypes, as far as the installed version
# has them. Arrays of these dtypes can be created, indexed, reshaped and converted to and from
# the standard dtypes; arithmetic on them is not supported (convert with ``.astype`` first).
_ML_DTYPE_NAMES = (
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz",
    "float8_e3m4", "float8_e4m3", "float8_e8m0fnu", "float4_e2m1fn", "float6_e2m3fn",
    "float6_e3m2fn", "int4", "uint4", "int2", "uint2", "int1", "uint1",
)
ml_dtype_scalar_types = {name: _scalar_type(name, getattr(ml_dtypes, name))
                         for name in _ML_DTYPE_NAMES if hasattr(ml_dtypes, name)}
