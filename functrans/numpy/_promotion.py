"""Argument handling shared by the jnp functions: array conversion (``asarray``, ``array``),
dtype promotion with weak types, NumPy broadcasting (lowered to ``broadcast_in_dim``), axes,
concrete values and index ramps (``iota``). The lowest module of ``functrans.numpy``: every
other one builds on it."""
from __future__ import annotations

import operator

import numpy as np

from functrans import _dtypes
from functrans import core
from functrans.core import ConcretizationTypeError, canonicalize_shape, get_aval, Tracer
from functrans.primitives import elementwise, structural
from functrans._array import Array, host_to_array, is_concrete_array


def check_arraylike(fname: str, *args) -> None:
    for i, a in enumerate(args):
        if not is_arraylike(a):
            raise TypeError(f"{fname} requires ndarray or scalar arguments, got "
                            f"{type(a).__name__} at position {i}")


def is_arraylike(x) -> bool:
    """Whether ``x`` is an array or a scalar (what jnp functions take as an array)."""
    return is_concrete_array(x) or \
        isinstance(x, (Tracer, np.ndarray, np.generic, bool, int, float, complex)) \
        or hasattr(x, "__jax_array__")


def broadcast_shapes(*shapes) -> tuple:
    """NumPy broadcasting of shapes, with an error naming them when they do not match."""
    ndim = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(ndim):
        sizes = {s[axis - ndim + len(s)] for s in shapes if axis - ndim + len(s) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise ValueError("Incompatible shapes for broadcasting: "
                             f"shapes={[tuple(s) for s in shapes]}")
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def broadcast_to_shape(x, shape):
    aval = get_aval(x)
    shape = tuple(shape)
    if aval.shape == shape:
        return x
    if len(shape) < aval.ndim:
        raise ValueError(f"cannot broadcast shape {aval.shape} to {shape}")
    lead = len(shape) - aval.ndim
    if any(s not in (1, shape[lead + i]) for i, s in enumerate(aval.shape)):
        raise ValueError(f"incompatible shapes for broadcasting: {aval.shape} and {shape}")
    # drop size-1 axes that get stretched, so broadcast_in_dim maps each kept axis exactly
    keep = [i for i, s in enumerate(aval.shape) if s == shape[lead + i]]
    if len(keep) != aval.ndim:
        x = structural.reshape(x, tuple(aval.shape[i] for i in keep))
    return structural.broadcast_in_dim(x, shape, tuple(lead + i for i in keep))


def to_array(x):
    """A Python scalar, NumPy value or list becomes an Array (weak for Python scalars)."""
    if is_concrete_array(x) or isinstance(x, Tracer):
        return x
    if hasattr(x, "__jax_array__"):
        return to_array(x.__jax_array__())
    if _dtypes.is_python_scalar(x) or isinstance(x, (np.ndarray, np.generic)):
        return host_to_array(x)
    return asarray(x)


# ---- conversion: asarray and array -----------------------------------------------------------

def _canonical(dtype, fname: str):
    return None if dtype is None else _dtypes.check_user_dtype(dtype, fname)


def asarray(a, dtype=None, order=None, copy=None):
    """Convert ``a`` (array, scalar, nested lists) to an Array; no copy if already one.

    Host data (NumPy arrays) is copied, in native byte order. A Python int must fit the
    dtype it becomes (``OverflowError`` otherwise): its own default integer type, ``dtype``
    when given, or in a list the dtype the list's elements promote to.

        >>> asarray([1, 2])
        Array([1, 2], dtype=int32)
        >>> asarray(2 ** 31, dtype=np.uint32)
        Array(2147483648, dtype=uint32)
    """
    dtype = _canonical(dtype, "asarray")
    if a is None:
        raise ValueError("None is not a valid value for jnp.array")
    if is_concrete_array(a) or isinstance(a, Tracer):
        return a if dtype is None else elementwise.convert_element_type(a, dtype, False)
    if _dtypes.is_python_scalar(a):
        if dtype is None:
            return host_to_array(a)
        return Array._from_buffer(_dtypes.python_scalar_to_numpy(a, dtype))
    if hasattr(a, "__jax_array__"):
        return asarray(a.__jax_array__(), dtype)
    if isinstance(a, (list, tuple)):
        return _sequence_to_array(a, dtype)
    if isinstance(a, (np.ndarray, np.generic)):
        # objects, strings, bytes and records are not array values (ml_dtypes' narrow
        # types are kind "V" too, but without fields)
        if a.dtype.kind in "OUS" or a.dtype.names is not None:
            raise TypeError(f"cannot convert {a!r} to an array (ragged or non-numeric)")
        return host_to_array(a) if dtype is None else \
            Array._from_buffer(core.host_copy(np.asarray(a), dtype))
    try:
        value = np.asarray(a)
    except Exception as err:  # noqa: BLE001
        raise TypeError(f"cannot convert {type(a).__name__} to an array") from err
    return asarray(value, dtype)


def _sequence_to_array(a, dtype):
    """A nested list or tuple as an Array of ``dtype``, by default the type its elements
    promote to (Python scalars weakly, as in ``jnp.asarray([np.int8(1), 2])``: int8)."""
    leaves = _nested_leaves(a)
    if any(x is None for x in leaves):
        raise ValueError("None is not a valid value for jnp.array")
    if dtype is None:
        dtype = _sequence_dtype(a, leaves)
    if any(isinstance(x, Tracer) for x in leaves):
        return _stack_leading([asarray(x, dtype) for x in a])
    for x in leaves:
        if type(x) is int:
            _dtypes.check_python_int(x, dtype)
    if any(is_concrete_array(x) for x in leaves):
        a = _to_nested_numpy(a)
    try:
        value = np.array(a, dtype=dtype)
    except ValueError as err:  # ragged nesting: NumPy's ValueError, as JAX raises it
        raise ValueError(f"cannot convert {a!r} to an array: {err}") from err
    except TypeError as err:
        raise TypeError(f"cannot convert {a!r} to an array (ragged or non-numeric)") from err
    return Array._from_buffer(value)


def _sequence_dtype(a, leaves):
    if not leaves:
        return _dtypes.default_float_dtype()
    if not all(is_arraylike(x) for x in leaves):
        raise TypeError(f"cannot convert {a!r} to an array (ragged or non-numeric)")
    try:
        dtype, _ = _dtypes.result_type(*leaves, return_weak_type_flag=True)
    except TypeError:
        raise TypeError(f"cannot convert {a!r} to an array (ragged or non-numeric)") from None
    return dtype


def _nested_leaves(a):
    out = []
    for x in a:
        if isinstance(x, (list, tuple)):
            out.extend(_nested_leaves(x))
        else:
            out.append(x)
    return out


def _to_nested_numpy(a):
    if isinstance(a, (list, tuple)):
        return [_to_nested_numpy(x) for x in a]
    return np.asarray(a)


def _stack_leading(arrays):
    """Arrays of one shape and dtype joined along a new leading axis (``jnp.stack``'s
    result, built here from the primitives: the shape functions build on this module)."""
    shapes = {get_aval(a).shape for a in arrays}
    if len(shapes) != 1:
        raise ValueError(f"stack: all input arrays must have the same shape, got {sorted(shapes)}")
    arrays = [structural.expand_dims(a, (0,)) for a in arrays]
    return arrays[0] if len(arrays) == 1 else lax_fn("concatenate")(arrays, 0)


def array(object, dtype=None, copy=True, order=None, ndmin=0):  # noqa: A002
    """Create an Array (as ``jnp.array``)."""
    out = asarray(object, _canonical(dtype, "array"))
    if is_concrete_array(out) and copy and out is object:
        out = out.copy()
    if ndmin > out.ndim:
        out = structural.reshape(out, (1,) * (ndmin - out.ndim) + tuple(out.shape))
    return out




def _as_promotable(x):
    """Python scalars stay as they are (they are weakly typed); lists and other array-likes
    become arrays."""
    if _dtypes.is_python_scalar(x) or hasattr(x, "aval") or isinstance(x, (np.ndarray, np.generic)):
        return x
    return to_array(x)


def promote_dtypes(*args):
    """Convert arguments to their common dtype (JAX's lattice with weak types)."""
    args = [_as_promotable(a) for a in args]
    if len(args) < 2:
        return [to_array(a) for a in args]
    dtype, weak = _dtypes.result_type(*args, return_weak_type_flag=True)
    return [_convert(a, dtype, weak) for a in args]


def promote_dtypes_inexact(*args):
    args = [_as_promotable(a) for a in args]
    dtype, weak = _dtypes.result_type(*args, return_weak_type_flag=True)
    if not _dtypes.is_inexact(dtype):
        dtype = _dtypes.default_float_dtype()
    return [_convert(a, dtype, weak) for a in args]


def _convert(a, dtype, weak):
    """``a`` as ``dtype``; a Python scalar becomes a constant of that dtype directly (an
    inline literal when staged) instead of a conversion of a weak constant. A Python int
    must fit its own weak dtype (int32, or int64 with x64), as in JAX, and then converts as
    that value would (``int8_array + 300`` adds 300 as int8, 44)."""
    if _dtypes.is_python_scalar(a) and not weak:
        return to_array(_dtypes.python_scalar_to_numpy(a).astype(dtype)[()])
    return elementwise.convert_element_type(to_array(a), dtype, weak)


def promote_shapes(*args, fname: str | None = None):
    """``args`` broadcast to one shape. Shapes that do not broadcast raise ``ValueError``,
    or, for the operands of the jnp function ``fname`` when their ranks are equal, JAX's
    ``TypeError`` (JAX ranks-promotes first, which fails with ``ValueError``, and only
    operands of equal rank reach the primitive's shape rule, which raises ``TypeError``)."""
    shapes = [get_aval(a).shape for a in args]
    if len(set(shapes)) <= 1:
        return list(args)
    try:
        shape = broadcast_shapes(*shapes)
    except ValueError:
        if fname is None or len({len(s) for s in shapes}) > 1:
            raise
        raise TypeError(f"{fname} got incompatible shapes for broadcasting: "
                        f"{', '.join(str(tuple(s)) for s in shapes)}.") from None
    return [broadcast_to_shape(a, shape) for a in args]


def promote_args(fname: str, *args):
    check_arraylike(fname, *args)
    return promote_shapes(*promote_dtypes(*args), fname=fname)


def promote_args_inexact(fname: str, *args):
    check_arraylike(fname, *args)
    return promote_shapes(*promote_dtypes_inexact(*args), fname=fname)


def promote_args_numeric(fname: str, *args):
    """Promote like :func:`promote_args`, but booleans become the default integer type."""
    check_arraylike(fname, *args)
    arrays = promote_dtypes(*args)
    if arrays and _dtypes.is_bool(get_aval(arrays[0]).dtype):
        arrays = [elementwise.convert_element_type(a, _dtypes.default_int_dtype()) for a in arrays]
    return promote_shapes(*arrays, fname=fname)


# ---- axes ------------------------------------------------------------------------------------

def canonicalize_axis(axis, ndim: int) -> int:
    """A possibly negative ``axis`` as a position in ``range(ndim)``, or a clear error."""
    axis = operator_index(axis, "axis")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for an array of dimension {ndim}")
    return axis % ndim if ndim else 0


def canonicalize_axes(axis, ndim: int) -> tuple:
    """``axis`` (None, an int or a sequence) as a sorted tuple of distinct non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        axes = tuple(canonicalize_axis(a, ndim) for a in axis)
    else:
        axes = (canonicalize_axis(axis, ndim),)
    if len(set(axes)) != len(axes):
        raise ValueError(f"repeated axis in {axis}")
    return tuple(sorted(axes))


def operator_index(value, what: str) -> int:
    """A static Python int from ``value``; traced values get an error naming ``what``."""
    import operator
    try:
        return operator.index(value)
    except TypeError as err:
        raise TypeError(f"{what} must be a static integer, got {value!r}") from err


# ---- concrete values -------------------------------------------------------------------------

def concrete_value(x):
    """The NumPy value of ``x`` when it is known now (an eager Array, a NumPy value, a Python
    scalar, or a tracer whose transform still knows its value); otherwise None."""
    if is_concrete_array(x):
        return x._value
    if isinstance(x, Tracer):
        value = x.to_concrete_value()
        return None if value is None else np.asarray(value)
    if isinstance(x, (np.ndarray, np.generic)) or _dtypes.is_python_scalar(x):
        return np.asarray(x)
    if isinstance(x, (list, tuple)):
        try:
            return np.asarray(x)
        except Exception:  # noqa: BLE001
            return None
    return None


def concrete_or_error(x, fname: str, fix: str = ""):
    """``concrete_value(x)``, or a ConcretizationTypeError saying why ``fname`` needs it."""
    value = concrete_value(x)
    if value is None:
        raise ConcretizationTypeError(
            f"{fname}: the result shape depends on the values of a traced array, which are not "
            f"known while the function is being transformed. {fix}".rstrip())
    return value


# ---- late-bound lax functions ----------------------------------------------------------------

_LAX_MODULES = ("structural", "reductions", "indexing", "sorting", "linalg", "elementwise",
                "control_flow")
_lax_cache: dict = {}


def lax_fn(name: str):
    """The lax-level function ``name`` from ``functrans.primitives``.

    Looked up when first used, so that jnp functions import (and the rest of jnp works)
    whatever primitive families a build has; a missing one is a NotImplementedError that
    names it."""
    fn = _lax_cache.get(name)
    if fn is not None:
        return fn
    import importlib
    for module_name in _LAX_MODULES:
        try:
            module = importlib.import_module(f"functrans.primitives.{module_name}")
        except ImportError:
            continue
        fn = getattr(module, name, None)
        if callable(fn):
            _lax_cache[name] = fn
            return fn
    raise NotImplementedError(f"this operation needs the lax function `{name}`, which this "
                              "build of functrans.primitives does not provide")


def has_lax_fn(name: str) -> bool:
    try:
        lax_fn(name)
        return True
    except NotImplementedError:
        return False


def iota(dtype, shape, dimension: int = 0):
    """Indices along ``dimension`` broadcast to ``shape`` (``lax.broadcasted_iota``); a
    constant when the build has no iota primitive."""
    dtype = _dtypes.canonicalize_dtype(dtype)
    shape = canonicalize_shape(shape)
    if has_lax_fn("broadcasted_iota"):
        return lax_fn("broadcasted_iota")(dtype, shape, dimension)
    ramp = np.arange(shape[dimension], dtype=dtype).reshape(
        [-1 if i == dimension else 1 for i in range(len(shape))])
    return Array._from_buffer(np.ascontiguousarray(np.broadcast_to(ramp, shape)))


def _static_int(fname, value, what) -> int:
    """A Python int from a concrete integer-like ``value`` (floats are truncated, as JAX
    does for window lengths); traced values get an error naming ``fname``."""
    if isinstance(value, Tracer):
        value = concrete_or_error(value, f"jnp.{fname}",
                                  f"{what} must be a static integer (it sets the output shape).")
    try:
        return operator.index(value)
    except TypeError:
        scalar = np.asarray(value)
        if scalar.ndim == 0 and scalar.dtype.kind in "iuf":
            return int(scalar)
        raise TypeError(f"jnp.{fname}: {what} must be an integer, got {value!r}") from None


def _concrete(name, x, what):
    if isinstance(x, Tracer):
        raise TypeError(f"jnp.{name}: {what} must be concrete (its value sets the output "
                        f"shape or the written positions), got a traced value. Call it outside "
                        f"jit or mark the argument static.")
    return np.asarray(x)
