"""Questions about arrays and dtypes (shape, ndim, result_type, can_cast, array_equal, ...),
index conversions, and function-mapping helpers (vectorize, apply_along_axis)."""
from __future__ import annotations

import builtins
import functools
import re

import numpy as np

from functrans import _dtypes
from functrans.core import Tracer, get_aval
from functrans.numpy import _ufuncs as uf
from functrans.numpy._promotion import (broadcast_shapes, canonicalize_axis, concrete_value,
                                        operator_index, promote_dtypes, to_array)
from functrans.numpy._scalar_types import _as_dtype_or_kind
from functrans.primitives import elementwise as lax
from functrans.primitives import structural
from functrans._api import vmap
from functrans.numpy._reductions import all as all_
from functrans.numpy._shape import broadcast_arrays, moveaxis
from functrans.numpy._creation import asarray, full
from functrans.numpy._shape import broadcast_to
from functrans.numpy._ufuncs import where


def _dtype_of(x):
    if isinstance(x, (np.dtype, type)) or isinstance(x, str):
        return np.dtype(_as_dtype_or_kind(x))
    return _dtypes.dtype_of(x)


def result_type(*args):
    """The dtype the arguments promote to under JAX's rules (Python scalars are weak).

        >>> result_type(float16, 1.0)
        dtype('float16')
    """
    python_types = (bool, int, float, complex)
    return _dtypes.result_type(*[_as_dtype_or_kind(a) if isinstance(a, type) and
                                 not any(a is t for t in python_types) else a for a in args])


def promote_types(a, b):
    """The smallest dtype both ``a`` and ``b`` can be converted to (no weak types)."""
    return _dtypes.promote_types(_as_dtype_or_kind(a), _as_dtype_or_kind(b))


def can_cast(from_, to, casting="safe"):
    """Whether a cast from ``from_`` to ``to`` is allowed by ``casting`` (NumPy's rules)."""
    src = _dtype_of(from_) if not isinstance(from_, (np.dtype, type, str)) else \
        np.dtype(_as_dtype_or_kind(from_))
    dst = np.dtype(_as_dtype_or_kind(to))
    if _dtypes.bfloat16 in (src, dst):
        # NumPy does not know bfloat16: it sits between the 8-bit integers and float32
        if src == dst or casting == "unsafe":
            return True
        if casting in ("no", "equiv"):
            return False
        if src == _dtypes.bfloat16:
            return dst.kind == "c" or (dst.kind == "f" and (dst.itemsize >= 4 or
                                                           casting == "same_kind"))
        if casting == "safe":
            return src.kind == "b" or (src.kind in "iu" and src.itemsize == 1)
        return src.kind in "biuf"
    return bool(np.can_cast(src, dst, casting))


def finfo(dtype):
    """Machine limits of a floating type (bfloat16 included)."""
    return _dtypes.finfo(np.dtype(_as_dtype_or_kind(dtype)))


def iinfo(dtype):
    """Machine limits of an integer type."""
    return _dtypes.iinfo(np.dtype(_as_dtype_or_kind(dtype)))


def iscomplexobj(x):
    """Whether ``x`` has a complex dtype."""
    return _dtypes.is_complex(_dtype_of(x))


def isrealobj(x):
    """Whether ``x`` does not have a complex dtype."""
    return not iscomplexobj(x)


def isscalar(element):
    """Whether ``element`` is a scalar: a Python or NumPy scalar or a 0-d array."""
    if _dtypes.is_python_scalar(element) or isinstance(element, np.generic):
        return True
    if isinstance(element, np.ndarray) or hasattr(element, "aval"):
        return get_aval(element).ndim == 0
    return False


def shape(a):
    """The shape of ``a`` as a tuple."""
    return get_aval(to_array(a)).shape if not hasattr(a, "shape") else tuple(a.shape)


def ndim(a):
    """The number of dimensions of ``a``."""
    return len(shape(a))


def size(a, axis=None):
    """The number of elements of ``a`` (along ``axis`` if given)."""
    s = shape(a)
    if axis is None:
        return int(np.prod(s, dtype=np.int64))
    return s[canonicalize_axis(axis, len(s))]


def array_equal(a1, a2, equal_nan=False):
    """Whether two arrays have the same shape and elements (as a boolean array).

        >>> array_equal(arange(3), array([0, 1, 2]))
        Array(True, dtype=bool)
    """
    a1, a2 = to_array(a1), to_array(a2)
    if get_aval(a1).shape != get_aval(a2).shape:
        return to_array(False)
    a1, a2 = promote_dtypes(a1, a2)
    eq = lax.eq(a1, a2)
    if equal_nan:
        eq = lax.bitwise_or(eq, lax.bitwise_and(uf.isnan(a1), uf.isnan(a2)))
    return all_(eq)


def array_equiv(a1, a2):
    """Whether two arrays are equal after broadcasting."""
    try:
        broadcast_shapes(get_aval(to_array(a1)).shape, get_aval(to_array(a2)).shape)
    except ValueError:
        return to_array(False)
    return all_(uf.equal(a1, a2))


def unravel_index(indices, shape):
    """Multi-indices of flat ``indices`` into an array of ``shape`` (out-of-range indices
    are clipped).

        >>> unravel_index(5, (2, 3))
        (Array(1, dtype=int32), Array(2, dtype=int32))
    """
    indices = to_array(indices)
    if not _dtypes.is_integer(get_aval(indices).dtype):
        raise TypeError("unravel_index: indices must be integers")
    dims = tuple(operator_index(d, "unravel_index: shape") for d in shape)
    total = int(np.prod(dims, dtype=np.int64))
    indices = lax.convert_element_type(indices, _dtypes.default_int_dtype())
    idx = uf.where(uf.less(indices, 0), uf.add(indices, total), indices)
    idx = uf.clip(idx, 0, builtins.max(total - 1, 0))
    out = []
    for d in reversed(dims):
        out.append(uf.remainder(idx, d) if d else idx)
        idx = uf.floor_divide(idx, d) if d else idx
    return tuple(reversed(out))


def ravel_multi_index(multi_index, dims, mode="raise", order="C"):
    """Flat indices from a tuple of index arrays into an array of shape ``dims``."""
    if order != "C":
        raise NotImplementedError("ravel_multi_index: only order='C' is supported")
    dims = tuple(operator_index(d, "ravel_multi_index: dims") for d in dims)
    if len(multi_index) != len(dims):
        raise ValueError("ravel_multi_index: one index array per dimension is needed")
    out = None
    for idx, d in zip(multi_index, dims):
        idx = to_array(idx)
        if mode == "wrap":
            idx = uf.remainder(idx, d)
        elif mode == "clip":
            idx = uf.clip(idx, 0, d - 1)
        elif mode == "raise":
            value = concrete_value(idx)
            if value is not None and ((value < 0) | (value >= d)).any():
                raise ValueError("ravel_multi_index: invalid entry in coordinates array")
        else:
            raise ValueError(f"ravel_multi_index: unknown mode {mode!r}")
        idx = lax.convert_element_type(idx, _dtypes.default_int_dtype())
        out = idx if out is None else uf.add(uf.multiply(out, d), idx)
    return out


# ---- mapping functions over axes -------------------------------------------------------------

def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    """``func1d`` applied to each 1-D slice of ``arr`` along ``axis`` (with ``vmap``); the
    function's output dimensions take the place of ``axis``."""
    arr = to_array(arr)
    ndim = get_aval(arr).ndim
    axis = canonicalize_axis(axis, ndim)
    fn = lambda x: func1d(x, *args, **kwargs)  # noqa: E731
    for _ in range(ndim - 1):
        fn = vmap(fn)
    out = fn(moveaxis(arr, axis, -1))
    core = get_aval(out).ndim - (ndim - 1)
    if core == 0:
        return out
    return moveaxis(out, list(range(ndim - 1, ndim - 1 + core)), list(range(axis, axis + core)))


def apply_over_axes(func, a, axes):
    """Apply ``func(a, axis)`` repeatedly over ``axes``, keeping dimensions."""
    a = to_array(a)
    for axis in (axes,) if np.ndim(axes) == 0 else axes:
        out = func(a, axis)
        if get_aval(out).ndim == get_aval(a).ndim - 1:
            out = structural.expand_dims(out, (canonicalize_axis(axis, get_aval(a).ndim),))
        a = out
    return a


_SIGNATURE_DIMS = re.compile(r"\(([^()]*)\)")


def _parse_gufunc_signature(signature: str):
    """``"(m,n),(n)->(m)"`` -> ([("m", "n"), ("n",)], [("m",)])."""
    compact = signature.replace(" ", "")
    if compact.count("->") != 1:
        raise ValueError(f"not a valid gufunc signature: {signature!r}")
    ins, outs = compact.split("->")

    def groups(text):
        found = _SIGNATURE_DIMS.findall(text)
        if ",".join(f"({g})" for g in found) != text:
            raise ValueError(f"not a valid gufunc signature: {signature!r}")
        return [tuple(d for d in g.split(",") if d) for g in found]

    return groups(ins), groups(outs)


class vectorize:  # noqa: N801 - NumPy's name
    """Turn a function of scalars (or of core arrays, with ``signature``) into one that
    broadcasts over the leading dimensions of its arguments, with ``vmap``.

        >>> vectorize(lambda a, b: a + 2 * b)(arange(3), 1)
        Array([2, 3, 4], dtype=int32)
        >>> vectorize(lambda a, b: (a * b).sum(), signature="(n),(n)->()")(ones((2, 3)), ones(3))
        Array([3., 3.], dtype=float32)

    ``excluded`` names positional indices or keywords passed through unchanged.
    ``signature`` is a NumPy generalized-ufunc signature: each argument's trailing core
    dimensions (named, so equal names must have equal sizes) are passed to ``pyfunc`` whole,
    and the leading dimensions are broadcast together and mapped over.
    """

    def __init__(self, pyfunc, *, excluded=frozenset(), signature=None):
        self.pyfunc = pyfunc
        self.excluded = set(excluded)
        self.signature = signature
        self._core = None if signature is None else _parse_gufunc_signature(signature)
        functools.update_wrapper(self, pyfunc)

    def __call__(self, *args, **kwargs):
        mapped = [i for i in range(len(args)) if i not in self.excluded]
        static = {k: v for k, v in kwargs.items() if k in self.excluded}
        kw_mapped = [k for k in kwargs if k not in self.excluded]
        arrays = [asarray(a) for a in [args[i] for i in mapped] + [kwargs[k] for k in kw_mapped]]
        n_pos = len(mapped)
        if self._core is None:
            in_core = [()] * len(arrays)
        else:
            in_core = self._core[0]
            if len(in_core) != len(arrays):
                raise TypeError(f"wrong number of positional arguments: expected "
                                f"{len(in_core)} for signature {self.signature!r}, got "
                                f"{len(arrays)}")
        sizes: dict[str, int] = {}
        loop_shapes = []
        for arr, dims in zip(arrays, in_core):
            shape = get_aval(arr).shape
            if len(shape) < len(dims):
                raise ValueError(f"input with shape {shape} does not have enough dimensions "
                                 f"for the core dimensions {dims} of signature "
                                 f"{self.signature!r}")
            core_shape = shape[len(shape) - len(dims):]
            for name, size in zip(dims, core_shape):
                if sizes.setdefault(name, size) != size:
                    raise ValueError(f"inconsistent size for core dimension {name!r}: "
                                     f"{sizes[name]} vs {size}")
            loop_shapes.append(shape[:len(shape) - len(dims)])
        loop_shape = np.broadcast_shapes(*loop_shapes) if loop_shapes else ()
        arrays = [broadcast_to(arr, loop_shape + get_aval(arr).shape[len(ls):])
                  for arr, ls in zip(arrays, loop_shapes)]

        def call(*leaves):
            full = list(args)
            for i, leaf in zip(mapped, leaves[:n_pos]):
                full[i] = leaf
            kw = dict(static)
            kw.update(zip(kw_mapped, leaves[n_pos:]))
            out = self.pyfunc(*full, **kw)
            if self._core is not None:
                out_core = self._core[1]
                outs = out if len(out_core) != 1 else (out,)
                if len(out_core) != 1 and (not isinstance(out, tuple) or len(out) != len(out_core)):
                    raise ValueError(f"wrong number of outputs from the function: expected "
                                     f"{len(out_core)} for signature {self.signature!r}")
                for value, dims in zip(outs, out_core):
                    if get_aval(value).ndim != len(dims):
                        raise ValueError(f"output has shape {get_aval(value).shape}, which "
                                         f"does not match the core dimensions {dims} of "
                                         f"signature {self.signature!r}")
            return out

        if not arrays:
            return self.pyfunc(*args, **kwargs)
        fn = call
        for _ in range(len(loop_shape)):
            fn = vmap(fn)
        return fn(*arrays)


def iterable(y):
    """Whether ``y`` can be iterated over."""
    try:
        iter(y)
    except TypeError:
        return False
    return not (isinstance(y, Tracer) or hasattr(y, "aval")) or get_aval(y).ndim > 0


def piecewise(x, condlist, funclist, *args, **kw):
    """Evaluate a function defined piecewise: where ``condlist[i]`` holds, the result is
    ``funclist[i](x)`` (later conditions win). An extra last entry of ``funclist`` is the value
    where no condition holds (otherwise 0). Entries of ``funclist`` may be constants. Each
    function is applied element by element (vectorized) and the result has ``x``'s dtype.

        >>> import functrans.numpy as jnp
        >>> x = jnp.array([-2.0, 0.5, 3.0])
        >>> jnp.piecewise(x, [x < 0, x > 1], [lambda v: -v, lambda v: v * 10, 0.0])
        Array([ 2.,  0., 30.], dtype=float32)
    """
    x = asarray(x)
    conditions = asarray(condlist, dtype=bool)
    # a single condition array (same shape as x) means one condition, as in NumPy
    if conditions.ndim == x.ndim:
        conditions = conditions[None]
    conditions = broadcast_to(conditions, (conditions.shape[0],) + x.shape)
    n_cond, n_func = conditions.shape[0], len(funclist)
    if n_func == n_cond + 1:
        default, funclist = funclist[-1], list(funclist[:-1])
    elif n_func == n_cond:
        default, funclist = 0, list(funclist)
    else:
        raise ValueError(f"jnp.piecewise: funclist must have {n_cond} or {n_cond + 1} entries "
                         f"for {n_cond} conditions, got {n_func}")

    def evaluate(f):
        if not callable(f):
            return full(x.shape, f, dtype=x.dtype)
        per_element = vectorize(lambda v: asarray(f(v, *args, **kw)).astype(x.dtype))
        return broadcast_to(per_element(x), x.shape)

    out = evaluate(default)
    for i, f in enumerate(funclist):
        out = where(conditions[i], evaluate(f), out)
    return out
