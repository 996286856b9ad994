"""The ``jax.dtypes`` namespace: dtype canonicalization, JAX's promotion rules, weak types.

    >>> import functrans.dtypes as dtypes, functrans.numpy as jnp
    >>> dtypes.result_type(jnp.int32, 1.0)       # a Python float is weak: "some float"
    dtype('float32')
    >>> dtypes.issubdtype(dtypes.bfloat16, jnp.floating)
    True

The promotion lattice itself lives in :mod:`functrans._dtypes`; this module is its public
face with JAX's names and argument conventions.
"""
from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from functrans import _dtypes
from functrans.numpy import _scalar_types

__all__ = [
    "TypePromotionError", "bfloat16", "canonicalize_dtype", "extended", "finfo", "float0",
    "iinfo", "is_weakly_typed", "issubdtype", "itemsize_bits", "prng_key", "result_type",
    "scalar_type_of",
]

# As in JAX, ``dtypes.bfloat16`` is the scalar *type* (``np.dtype(bfloat16)`` is the dtype).
bfloat16 = ml_dtypes.bfloat16

# The dtype of tangents and cotangents of integer and boolean values: it has no data.
float0 = _dtypes.float0

_PYTHON_SCALAR_TYPES = (bool, int, float, complex)


class TypePromotionError(ValueError):
    """Raised when arguments have no common dtype to promote to (e.g. ``float0``)."""


# The abstract kinds of dtypes outside NumPy's tree: ``issubdtype(key.dtype, prng_key)`` holds
# for typed PRNG key arrays (``random.key``), whose dtype is ``key<fry>``.
extended = _dtypes.extended
prng_key = _dtypes.prng_key


def _as_dtype(x) -> np.dtype:
    """``np.dtype`` of a dtype-like (incl. ``jnp.float32`` and Python types) or of a value."""
    if isinstance(x, _scalar_types._ScalarMeta):
        return x.dtype
    if any(x is t for t in _PYTHON_SCALAR_TYPES):
        return np.dtype(x)
    if isinstance(x, (np.dtype, str, type)):
        return np.dtype(x)
    if _dtypes.is_python_scalar(x):
        return _dtypes.python_scalar_dtype(x)
    return _dtypes.dtype_of(x)


def canonicalize_dtype(dtype, allow_extended_dtype: bool = False) -> np.dtype:
    """The dtype values of ``dtype`` are stored as: the 64-bit types narrow to 32 bits unless
    ``enable_x64`` is on.

        >>> canonicalize_dtype(np.float64)
        dtype('float32')
        >>> canonicalize_dtype(int)
        dtype('int32')
    """
    if _dtypes.extended_kind(dtype) is not None:
        if not allow_extended_dtype:
            name = getattr(dtype, "__name__", dtype)
            raise TypeError(f"canonicalize_dtype: {name} is an extended dtype; "
                            "pass allow_extended_dtype=True to accept it")
        return dtype
    if isinstance(dtype, _scalar_types._ScalarMeta):
        dtype = dtype.dtype
    try:
        return _dtypes.canonicalize_dtype(dtype)
    except TypeError:
        raise TypeError(f"canonicalize_dtype: {dtype!r} is not a valid dtype") from None


def issubdtype(a, b) -> bool:
    """Whether dtype ``a`` is ``b`` or one of its sub-kinds, in NumPy's hierarchy widened to
    functrans's dtypes: bfloat16 is a floating type, and the abstract ``extended`` and
    ``prng_key`` kinds sit outside NumPy's tree.

        >>> issubdtype(np.int8, np.signedinteger)
        True
        >>> issubdtype(bfloat16, np.inexact)
        True
        >>> issubdtype(np.uint32, prng_key)
        False
    """
    return _scalar_types.issubdtype(a, b)


def result_type(*args, return_weak_type_flag: bool = False):
    """The dtype ``args`` promote to under JAX's rules: the least upper bound in the
    promotion lattice, canonicalized. Python scalars (and the types ``int``, ``float``,
    ``complex``) are *weak*: they take the kind of the other operands, not a width.

    With ``return_weak_type_flag=True`` returns ``(dtype, weak_type)``.

        >>> result_type(np.int8, 1)
        dtype('int8')
        >>> result_type(np.int32, 1.0, return_weak_type_flag=True)
        (dtype('float32'), True)
        >>> result_type(np.uint8, np.int8)
        dtype('int16')
    """
    if not args:
        raise ValueError("at least one array or dtype is required")
    typed = []
    for arg in args:
        if isinstance(arg, _scalar_types._ScalarMeta):
            arg = arg.dtype
        elif _dtypes.extended_kind(arg) is not None:
            name = getattr(arg, "__name__", arg)
            raise TypeError(f"result_type: {name} is an extended dtype, outside type promotion")
        typed.append(_dtypes.dtype_and_weak(arg))
    try:
        dtype, weak = _dtypes.promote_types_weak(*typed)
    except (TypeError, KeyError):
        # only dtypes outside the lattice (float0, structured, strings) get here
        names = ", ".join(str(d) for d, _ in typed)
        raise TypePromotionError(f"result_type: no common dtype for {names}") from None
    return (dtype, weak) if return_weak_type_flag else dtype


def is_weakly_typed(x: Any) -> bool:
    """Whether ``x`` carries a weak type: a Python ``int``/``float``/``complex``, or an
    array computed only from such scalars. Python ``bool`` is not weak.

        >>> is_weakly_typed(1.0), is_weakly_typed(True), is_weakly_typed(np.float32(1))
        (True, False, False)
    """
    if type(x) in (int, float, complex):
        return True
    aval = getattr(x, "aval", None)
    return bool(getattr(aval, "weak_type", False))


def scalar_type_of(x: Any) -> type:
    """The Python scalar type (``bool``, ``int``, ``float`` or ``complex``) matching the
    dtype of ``x`` (a value or a dtype).

        >>> scalar_type_of(np.uint8(3)), scalar_type_of(np.dtype(bfloat16))
        (<class 'int'>, <class 'float'>)
    """
    dtype = _as_dtype(x)
    if _dtypes.is_bool(dtype):
        return bool
    if _dtypes.is_integer(dtype):
        return int
    if _dtypes.is_float(dtype):
        return float
    if _dtypes.is_complex(dtype):
        return complex
    raise TypeError(f"scalar_type_of: {dtype} has no Python scalar type")


def itemsize_bits(dtype) -> int:
    """Number of bits per element of ``dtype``.

        >>> itemsize_bits(bfloat16), itemsize_bits(np.bool_)
        (16, 8)
    """
    dtype = _as_dtype(dtype)
    if dtype.kind not in "biufc" and dtype != _dtypes.bfloat16:
        raise ValueError(f"itemsize_bits: {dtype} is not a numeric or boolean dtype")
    return dtype.itemsize * 8


def finfo(dtype):
    """Machine limits of a floating or complex type (bfloat16 included); also accepts an
    array, meaning its dtype.

        >>> float(finfo(bfloat16).eps)
        0.0078125
    """
    return _dtypes.finfo(_as_dtype(dtype))


def iinfo(int_type):
    """Machine limits of an integer type; also accepts an array, meaning its dtype.

        >>> int(iinfo(np.int8).min)
        -128
    """
    return _dtypes.iinfo(_as_dtype(int_type))
