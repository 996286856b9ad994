"""What a serialized program may name: the library's primitives, the classes of their
parameters, and dtypes — each looked up by a stable name, never by importing a name read
from a file.

    >>> primitive("add").name
    'add'
    >>> dtype_from_name("bfloat16")
    dtype(bfloat16)
"""
from __future__ import annotations

import enum
import importlib
import pkgutil
import threading

import numpy as np

from functrans import _dtypes
from functrans.core import Primitive
from functrans.primitives.fft import FftType
from functrans.primitives.implicit import LinearSolveJaxprs
from functrans.primitives.indexing import (GatherDimensionNumbers, GatherScatterMode,
                                           ScatterDimensionNumbers)
from functrans.primitives.elementwise import RoundingMethod
from functrans.primitives.convolution import ConvDimensionNumbers
from functrans.primitives.dot import Precision
from functrans.primitives.random_bits import RandomAlgorithm
import functrans.primitives as package

# Modules outside functrans.primitives that declare primitives (jit, callbacks, custom
# derivative calls, remat, ...). A test checks that these, with functrans.primitives,
# hold every primitive of the library.
_PRIMITIVE_MODULES = (
    "functrans._jit", "functrans._callbacks", "functrans._custom_derivatives",
    "functrans._remat", "functrans.custom_batching", "functrans.debug", "functrans.ops",
    "functrans.sharding._constraints", "functrans.sharding._shard_map",
)

_primitives: dict[str, Primitive] = {}
_lock = threading.Lock()


def _modules_with_primitives() -> list:
    names = [f"functrans.primitives.{info.name}" for info in pkgutil.iter_modules(package.__path__)]
    return [importlib.import_module(name) for name in names + list(_PRIMITIVE_MODULES)]


def primitives() -> dict[str, Primitive]:
    """Every primitive of the library, by name (built on first use)."""
    with _lock:
        if not _primitives:
            found: dict[str, Primitive] = {}
            for module in _modules_with_primitives():
                for value in vars(module).values():
                    if isinstance(value, Primitive):
                        other = found.setdefault(value.name, value)
                        if other is not value:
                            raise RuntimeError(f"two primitives are named {value.name!r} "
                                               f"({module.__name__})")
            _primitives.update(found)
        return _primitives


def primitive(name: str) -> Primitive:
    """The primitive called ``name``; ``ValueError`` for a name this library does not have."""
    found = primitives().get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"unknown primitive {name!r}: the program was serialized by a "
                         "version of functrans with primitives this one does not have")
    return found


# ---- parameter classes ------------------------------------------------------------------------

def _parameter_classes() -> dict[str, type]:
    return {cls.__name__: cls for cls in (
        FftType, LinearSolveJaxprs, GatherDimensionNumbers, GatherScatterMode,
        ScatterDimensionNumbers, Precision, RandomAlgorithm, RoundingMethod,
        ConvDimensionNumbers)}


_classes: dict[str, type] = {}


def parameter_class(name: str) -> type:
    """The named tuple or enum class of primitive parameters called ``name``."""
    if not _classes:
        _classes.update(_parameter_classes())
    found = _classes.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"unknown parameter type {name!r} in a serialized program")
    return found


def is_parameter_class(cls: type) -> bool:
    if not _classes:
        _classes.update(_parameter_classes())
    return _classes.get(cls.__name__) is cls


def is_enum(cls: type) -> bool:
    return issubclass(cls, enum.Enum)


# ---- dtypes -----------------------------------------------------------------------------------

_DTYPES = {np.dtype(t).name: np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128)}
_DTYPES["bfloat16"] = _dtypes.bfloat16


def dtype_name(dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype == _dtypes.float0:
        return "float0"
    name = dtype.name
    if _DTYPES.get(name) != dtype:
        raise ValueError(f"dtype {dtype} cannot be serialized")
    return name


def dtype_from_name(name) -> np.dtype:
    if name == "float0":
        return _dtypes.float0
    found = _DTYPES.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"unknown dtype {name!r} in a serialized program")
    return found
