"""Dtypes: canonicalization (32-bit unless x64 is on) and JAX's type-promotion lattice.

Weak types: a Python scalar, or a value computed only from Python scalars, carries a *weak*
dtype. In promotion it stands for its kind ("some int", "some float") rather than a width,
so ``float32_array * 2.0`` stays float32 and ``int8_array + 1`` stays int8.
"""
from __future__ import annotations

import functools
import warnings

import ml_dtypes
import numpy as np

from functrans._config import config
from functrans._source_info import user_stacklevel

bfloat16 = np.dtype(ml_dtypes.bfloat16)
float0 = np.dtype([("float0", np.void, 0)])

bool_ = np.dtype(np.bool_)
int8, int16, int32, int64 = (np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
uint8, uint16, uint32, uint64 = (np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))
float16, float32, float64 = (np.dtype(t) for t in (np.float16, np.float32, np.float64))
complex64, complex128 = np.dtype(np.complex64), np.dtype(np.complex128)

_CANONICAL_32 = {int64: int32, uint64: uint32, float64: float32, complex128: complex64}


class extended(np.generic):  # noqa: N801 (JAX's name)
    """Abstract kind of the dtypes outside NumPy's hierarchy (``issubdtype(x, extended)``);
    the dtype of typed PRNG key arrays (``key<fry>``) is one."""


class prng_key(extended):  # noqa: N801 (JAX's name)
    """Abstract kind of the dtypes of typed PRNG key arrays (``random.key``)."""


def extended_kind(x):
    """The extended kind class ``x`` names: ``x`` itself if it is one, the ``type`` of an
    extended dtype (e.g. ``key<fry>``'s is :class:`prng_key`), else None."""
    if isinstance(x, type):
        return x if issubclass(x, extended) else None
    kind = getattr(x, "type", None)
    if isinstance(kind, type) and issubclass(kind, extended) and not isinstance(x, np.dtype):
        return kind
    return None


def x64_enabled() -> bool:
    return bool(config.enable_x64)


def canonicalize_dtype(dtype) -> np.dtype:
    """The dtype a value of ``dtype`` is stored as: native byte order, and 64-bit types narrow
    unless x64 is on."""
    dtype = np.dtype(dtype)
    if not dtype.isnative:  # big-endian host data is stored (and computed on) as native
        dtype = dtype.newbyteorder("=")
    if not x64_enabled():
        return _CANONICAL_32.get(dtype, dtype)
    return dtype


def check_user_dtype(dtype, fname: str | None = None) -> np.dtype:
    """``dtype`` as a user asked for it in ``fname``: canonicalized as
    :func:`canonicalize_dtype`, with JAX's ``UserWarning`` when a 64-bit type is asked for
    while x64 is off (Python's ``int``/``float``/``complex`` mean the default types and
    never warn)."""
    result = canonicalize_dtype(dtype)
    builtin = any(dtype is t for t in (int, float, complex, bool))  # np.dtype(float) == float
    if not builtin and result != np.dtype(dtype):
        where = f" requested in {fname}" if fname else ""
        warnings.warn(f"Explicitly requested dtype {np.dtype(dtype).name}{where} is not "
                      f"available, and will be truncated to dtype {result.name}. To enable "
                      "more dtypes, set the jax_enable_x64 configuration option or the "
                      "JAX_ENABLE_X64 shell environment variable.", UserWarning,
                      stacklevel=user_stacklevel())
    return result


def default_int_dtype() -> np.dtype:
    return int64 if x64_enabled() else int32


def default_uint_dtype() -> np.dtype:
    return uint64 if x64_enabled() else uint32


def default_float_dtype() -> np.dtype:
    return float64 if x64_enabled() else float32


def default_complex_dtype() -> np.dtype:
    return complex128 if x64_enabled() else complex64


def is_float(dtype) -> bool:
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype == bfloat16


def is_complex(dtype) -> bool:
    return np.dtype(dtype).kind == "c"


def is_inexact(dtype) -> bool:
    return is_float(dtype) or is_complex(dtype)


def is_integer(dtype) -> bool:
    return np.dtype(dtype).kind in "iu"


def is_signed(dtype) -> bool:
    return np.dtype(dtype).kind == "i"


def is_unsigned(dtype) -> bool:
    return np.dtype(dtype).kind == "u"


def is_bool(dtype) -> bool:
    return np.dtype(dtype) == bool_


def finfo(dtype):
    # ml_dtypes' finfo knows its narrow floats (bfloat16, the float8 and float4 types) and
    # gives NumPy's answer for the others
    return ml_dtypes.finfo(dtype) if np.dtype(dtype).type.__module__.startswith("ml_dtypes") \
        else np.finfo(dtype)


def iinfo(dtype):
    return np.iinfo(dtype)


def python_scalar_dtype(value) -> np.dtype:
    """The (weak) dtype a Python scalar takes: bool, default int, default float, default complex."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, int):
        return default_int_dtype()
    if isinstance(value, float):
        return default_float_dtype()
    if isinstance(value, complex):
        return default_complex_dtype()
    raise TypeError(f"not a Python scalar: {value!r}")


def is_python_scalar(value) -> bool:
    return type(value) in (bool, int, float, complex)


_INT_BOUNDS = {d: (int(np.iinfo(d).min), int(np.iinfo(d).max))
               for d in (int8, int16, int32, int64, uint8, uint16, uint32, uint64)}


def check_python_int(value: int, dtype) -> None:
    """Raise ``OverflowError`` unless the Python int ``value`` fits in the integer ``dtype``.

    The one check made wherever a Python int becomes an array value (an argument, a literal,
    an operand of an arithmetic operator, an element of a list): outside its dtype's range it
    is an error, as in JAX, never a silent wrap-around. Non-integer dtypes take any int.

        >>> check_python_int(2 ** 31, np.dtype("uint32"))  # fits: no error
        >>> check_python_int(2 ** 31, np.dtype("int32"))  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        OverflowError: Python int 2147483648 too large to convert to int32
    """
    bounds = _INT_BOUNDS.get(np.dtype(dtype))
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise OverflowError(f"Python int {value} too large to convert to {np.dtype(dtype).name}"
                            f"{_overflow_hint(np.dtype(dtype))}")


def _overflow_hint(dtype: np.dtype) -> str:
    if dtype == int32 and not x64_enabled():
        return (" (the default integer type while 64-bit types are off: enable them with "
                "functrans.config.update('jax_enable_x64', True), or write the value as a "
                "float)")
    return " (convert it to an array of a wider dtype, or write it as a float)"


def weak_scalar_dtype(value) -> np.dtype:
    """The dtype the Python scalar ``value`` takes as an array value (:func:`python_scalar_dtype`),
    after checking that a Python int fits in it (:func:`check_python_int`)."""
    dtype = python_scalar_dtype(value)
    if type(value) is int:
        check_python_int(value, dtype)
    return dtype


def python_scalar_to_numpy(value, dtype=None) -> np.ndarray:
    """The Python scalar ``value`` as a 0-d NumPy array of ``dtype`` (default: the weak dtype
    it takes). A Python int must fit in the dtype (:func:`check_python_int`); a float or
    complex value converts as NumPy converts it (a float too large becomes inf)."""
    if dtype is None:
        dtype = weak_scalar_dtype(value)
    elif type(value) is int:
        check_python_int(value, dtype)
    return np.asarray(value, dtype=dtype)


# The lattice. Nodes are dtypes plus the weak kinds "i*", "f*", "c*".
_WEAK_INT, _WEAK_FLOAT, _WEAK_COMPLEX = "i*", "f*", "c*"
_LATTICE_EDGES = {
    bool_: [_WEAK_INT],
    _WEAK_INT: [uint8, int8],
    uint8: [uint16, int16],
    uint16: [uint32, int32],
    uint32: [uint64, int64],
    uint64: [_WEAK_FLOAT],
    int8: [int16],
    int16: [int32],
    int32: [int64],
    int64: [_WEAK_FLOAT],
    _WEAK_FLOAT: [bfloat16, float16, _WEAK_COMPLEX],
    bfloat16: [float32],
    float16: [float32],
    float32: [float64, complex64],
    float64: [complex128],
    _WEAK_COMPLEX: [complex64],
    complex64: [complex128],
    complex128: [],
}


@functools.lru_cache(maxsize=None)
def _upper_bounds(node) -> frozenset:
    bounds = {node}
    for successor in _LATTICE_EDGES[node]:
        bounds |= _upper_bounds(successor)
    return frozenset(bounds)


def _lattice_node(dtype: np.dtype, weak: bool):
    if weak:
        if dtype.kind in "iu":
            return _WEAK_INT
        if is_float(dtype):
            return _WEAK_FLOAT
        if dtype.kind == "c":
            return _WEAK_COMPLEX
    return dtype


@functools.lru_cache(maxsize=4096)
def _join(nodes: tuple):
    common = functools.reduce(frozenset.intersection, (_upper_bounds(n) for n in nodes))
    # The least upper bound is the common bound that every other common bound is above.
    for candidate in common:
        if all(other in _upper_bounds(candidate) for other in common):
            return candidate
    raise TypeError(f"no common dtype for {nodes}")


def promote_types_weak(*typed: tuple) -> tuple[np.dtype, bool]:
    """Join of ``(dtype, weak_type)`` pairs: returns the result dtype and whether it is weak."""
    nodes = tuple(_lattice_node(np.dtype(d), w) for d, w in typed)
    outside = [n for n in nodes if not isinstance(n, str) and n not in _LATTICE_EDGES]
    if outside:  # ml_dtypes' narrow types (float8_*, int4...): no implicit promotion
        strong = {n for n in nodes if not isinstance(n, str)}
        if len(strong) == 1:
            return strong.pop(), all(w for _, w in typed)
        raise TypeError(f"no implicit promotion between {', '.join(sorted(d.name for d in strong))}"
                        f"; convert explicitly with .astype(...)")
    result = _join(nodes)
    if result == _WEAK_INT:
        return default_int_dtype(), True
    if result == _WEAK_FLOAT:
        return default_float_dtype(), True
    if result == _WEAK_COMPLEX:
        return default_complex_dtype(), True
    return canonicalize_dtype(result), False


def result_type(*args, return_weak_type_flag: bool = False):
    """``jnp.result_type``: the dtype arguments promote to (Python scalars are weak)."""
    typed = [dtype_and_weak(a) for a in args]
    if not typed:
        raise ValueError("at least one array or dtype is required")
    dtype, weak = promote_types_weak(*typed)
    return (dtype, weak) if return_weak_type_flag else dtype


def promote_types(a, b) -> np.dtype:
    return promote_types_weak((np.dtype(a), False), (np.dtype(b), False))[0]


def dtype_and_weak(x) -> tuple[np.dtype, bool]:
    """The dtype of a value, dtype-like or Python scalar, and whether it is weakly typed."""
    if is_python_scalar(x):
        return python_scalar_dtype(x), True
    aval = getattr(x, "aval", None)
    if aval is not None:
        return aval.dtype, aval.weak_type
    if isinstance(x, (np.ndarray, np.generic)):
        return canonicalize_dtype(x.dtype), False
    if isinstance(x, type) and any(x is t for t in (bool, int, float, complex)):
        return python_scalar_dtype(x(0)), x is not bool
    try:
        return canonicalize_dtype(np.dtype(x)), False
    except TypeError:
        raise TypeError(f"cannot interpret {x!r} as a dtype") from None


def dtype_of(x) -> np.dtype:
    return dtype_and_weak(x)[0]


def long_name(dtype) -> str:
    """The name JAX prints in types and errors: float32, int8, bfloat16, bool, float0 (an
    extended dtype prints itself: key<fry>)."""
    if extended_kind(dtype) is not None:
        return str(dtype)
    dtype = np.dtype(dtype)
    return "float0" if dtype == float0 else dtype.name


def short_name(dtype) -> str:
    """Compact name used in IR printing: f32, i32, bf16, bool, ... (key<fry> as it is)."""
    if extended_kind(dtype) is not None:
        return str(dtype)
    dtype = np.dtype(dtype)
    if dtype == bool_:
        return "bool"
    if dtype == bfloat16:
        return "bf16"
    if dtype == float0:
        return "float0"
    return {"f": "f", "i": "i", "u": "u", "c": "c"}[dtype.kind] + str(dtype.itemsize * 8)
