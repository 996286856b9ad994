"""``jnp.ufunc``: NumPy's ufunc object (``reduce``, ``accumulate``, ``outer``, ``at``, ``reduceat``).

A :class:`ufunc` wraps a function of ``nin`` arrays. Calling it broadcasts elementwise (through
:func:`functrans.numpy.vectorize` unless a faster ``call`` is given); its methods are built from
that scalar function with structured control flow (``fori_loop``, ``scan``), so they work for
any user function and under ``jit``, ``grad`` and ``vmap``. Built-in ufuncs (``add``,
``maximum``, ...) pass specialised ``reduce`` / ``accumulate`` / ``at`` implementations that
lower to single reductions, cumulative ops and scatters instead of loops::

    >>> import operator
    >>> import functrans.numpy as jnp
    >>> add = jnp.frompyfunc(operator.add, nin=2, nout=1, identity=0)
    >>> add.reduce(jnp.arange(5))
    Array(10, dtype=int32)
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable

import numpy as np

from functrans import _api, _dtypes
from functrans.core import get_aval
from functrans.numpy import (_array_info, _creation, _promotion, _reductions, _shape, _sorting,
                             _ufuncs)
from functrans.numpy._log_sum_exp import logsumexp
from functrans.primitives import elementwise, structural
from functrans.primitives.control_flow import fori_loop, scan
from functrans.primitives.windowed import reduce as lax_reduce

__all__ = ["ufunc", "frompyfunc"]


def _canonical_axis(axis: int, ndim: int, fname: str) -> int:
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{fname}: axis {axis} is out of bounds for array of dimension {ndim}")
    return axis % ndim


def _result_dtype(func, arrays):
    """The dtype ``func`` gives for scalars of the arrays' dtypes (found by tracing, no compute)."""
    ones = [_creation.ones((), get_aval(_promotion.asarray(a)).dtype) for a in arrays]
    return _api.eval_shape(func, *ones).dtype


class ufunc:
    """A universal function: an elementwise function with NumPy's ufunc methods.

    Args:
      func: the function, taking ``nin`` arrays (or scalars) and returning ``nout`` values.
      nin, nout: number of inputs and outputs.
      name: the name shown in ``repr`` and errors (default ``func.__name__``).
      nargs: number of arguments (default ``nin``).
      identity: the value ``x`` with ``func(x, y) == y``, or ``None``; used by ``reduce`` of
        empty arrays and with ``where`` masks.
      call, reduce, accumulate, at, reduceat: optional faster implementations of the
        corresponding operations; the generic ones built from ``func`` are used otherwise.

    Example::

        >>> import functrans.numpy as jnp
        >>> mul = jnp.ufunc(lambda x, y: x * y, nin=2, nout=1, identity=1)
        >>> mul.outer(jnp.arange(1, 3), jnp.arange(1, 4))
        Array([[1, 2, 3],
               [2, 4, 6]], dtype=int32)
    """

    def __init__(self, func: Callable[..., Any], /, nin: int, nout: int, *,
                 name: str | None = None, nargs: int | None = None, identity: Any = None,
                 call: Callable[..., Any] | None = None,
                 reduce: Callable[..., Any] | None = None,
                 accumulate: Callable[..., Any] | None = None,
                 at: Callable[..., Any] | None = None,
                 reduceat: Callable[..., Any] | None = None):
        self.__doc__ = func.__doc__
        self.__name__ = name or getattr(func, "__name__", "ufunc")
        # Read-only after construction: ufuncs are hashable and may be passed as static
        # arguments to jit, so their identity must not change.
        self.__props = dict(func=func, nin=operator.index(nin), nout=operator.index(nout),
                            nargs=operator.index(nargs or nin), identity=identity, call=call,
                            reduce=reduce, accumulate=accumulate, at=at, reduceat=reduceat)

    _func = property(lambda self: self.__props["func"])
    nin = property(lambda self: self.__props["nin"])
    nout = property(lambda self: self.__props["nout"])
    nargs = property(lambda self: self.__props["nargs"])
    identity = property(lambda self: self.__props["identity"])

    def _key(self):
        return (self._func, self.__name__, self.identity, self.nin, self.nout, self.nargs)

    def __hash__(self) -> int:
        return hash(self._key())

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ufunc) and self._key() == other._key()

    def __repr__(self) -> str:
        return f"<jnp.ufunc '{self.__name__}'>"

    # ---- call ---------------------------------------------------------------------------------

    def __call__(self, *args, out: None = None, where: None = None):
        """Apply the function elementwise, broadcasting the arguments."""
        if out is not None:
            raise NotImplementedError(f"out argument of {self}")
        if where is not None:
            raise NotImplementedError(f"where argument of {self}")
        call = self.__props["call"]
        if call is not None:
            return call(*args)
        return _array_info.vectorize(self._func)(*args)

    def _check_binary(self, method: str):
        if self.nin != 2:
            raise ValueError(f"{method} only supported for binary ufuncs")
        if self.nout != 1:
            raise ValueError(f"{method} only supported for functions returning a single value")

    # ---- reduce -------------------------------------------------------------------------------

    def reduce(self, a, axis: int | None = 0, dtype=None, out: None = None,
               keepdims: bool = False, initial=None, where=None):
        """Reduce ``a`` along ``axis`` by repeatedly applying this binary ufunc.

        Example: ``jnp.add.reduce(jnp.arange(4))`` is ``Array(6, dtype=int32)``.
        """
        self._check_binary("reduce")
        if out is not None:
            raise NotImplementedError(f"out argument of {self.__name__}.reduce()")
        if where is not None:
            if self.identity is None and initial is None:
                raise ValueError(f"reduction operation {self.__name__!r} does not have an identity, "
                                 "so to use a where mask one has to specify 'initial'.")
            if get_aval(_promotion.asarray(where)).dtype != np.dtype(bool):
                raise ValueError("where argument must have dtype=bool; got "
                                 f"dtype={get_aval(_promotion.asarray(where)).dtype}")
        reduce = self.__props["reduce"] or self._reduce_via_loop
        return reduce(a, axis=axis, dtype=dtype, keepdims=keepdims, initial=initial, where=where)

    def _reduce_via_loop(self, arr, axis=0, dtype=None, keepdims=False, initial=None, where=None):
        # Generic path: a fori_loop folding one slice at a time, valid for any binary function
        # (associative or not), in NumPy's left-to-right order.
        arr = _promotion.asarray(arr)
        if initial is None:
            initial = self.identity
        if dtype is None:
            dtype = _result_dtype(self._func, [arr, arr])
        if where is not None:
            where = _shape.broadcast_to(where, arr.shape)
        if isinstance(axis, tuple):
            raise NotImplementedError(f"{self.__name__}.reduce: tuple of axes for a generic ufunc")
        if axis is None:
            final_shape = (1,) * arr.ndim if keepdims else ()
            arr = arr.ravel()
            where = None if where is None else where.ravel()
            axis = 0
        else:
            axis = _canonical_axis(axis, arr.ndim, f"{self.__name__}.reduce")
            final_shape = arr.shape[:axis] + ((1,) if keepdims else ()) + arr.shape[axis + 1:]
        arr = _shape.moveaxis(arr, axis, 0)
        if where is not None:
            where = _shape.moveaxis(where, axis, 0)
        if arr.shape[0] == 0:
            if initial is None:
                raise ValueError(f"zero-size array to reduction operation {self.__name__} "
                                 "which has no identity")
            return _creation.full(final_shape, initial, dtype)

        def body(i, acc):
            new = self(acc, arr[i].astype(dtype))
            return new if where is None else _sorting.where(where[i], new, acc)

        if initial is None:
            start, init = 1, arr[0]
        else:
            start, init = 0, initial
        init = _shape.broadcast_to(_promotion.asarray(init).astype(dtype), arr.shape[1:])
        result = fori_loop(start, arr.shape[0], body, init)
        return result.reshape(final_shape)

    # ---- accumulate ---------------------------------------------------------------------------

    def accumulate(self, a, axis: int = 0, dtype=None, out: None = None):
        """Running reduction along ``axis``: ``out[i] = f(out[i-1], a[i])``.

        Example: ``jnp.add.accumulate(jnp.arange(4))`` is ``Array([0, 1, 3, 6], dtype=int32)``.
        """
        self._check_binary("accumulate")
        if out is not None:
            raise NotImplementedError(f"out argument of {self.__name__}.accumulate()")
        accumulate = self.__props["accumulate"] or self._accumulate_via_scan
        return accumulate(a, axis=axis, dtype=dtype)

    def _accumulate_via_scan(self, arr, axis=0, dtype=None):
        # A sequential scan, not associative_scan: a user function need not be associative.
        arr = _promotion.asarray(arr)
        if dtype is None:
            dtype = _result_dtype(self._func, [arr, arr])
        if axis is None or isinstance(axis, tuple):
            raise ValueError("accumulate does not allow multiple axes")
        axis = _canonical_axis(axis, arr.ndim, f"{self.__name__}.accumulate")
        if arr.size == 0:
            return _creation.zeros(arr.shape, dtype)
        arr = _shape.moveaxis(arr, axis, 0).astype(dtype)

        def step(acc, x):
            new = self(acc, x).astype(dtype)
            return new, new

        _, rest = scan(step, arr[0], arr[1:])
        result = _shape.concatenate([arr[:1], rest], axis=0)
        return _shape.moveaxis(result, 0, axis)

    # ---- at -----------------------------------------------------------------------------------

    def at(self, a, indices, b=None, /, *, inplace: bool = True):
        """``a`` with ``f(a[indices], b)`` applied at ``indices``; repeated indices apply repeatedly.

        Arrays are immutable, so this returns the updated copy and requires ``inplace=False``::

            >>> jnp.add.at(jnp.zeros(3), jnp.array([0, 0, 2]), 1.0, inplace=False)
            Array([2., 0., 1.], dtype=float32)
        """
        if inplace:
            raise NotImplementedError(
                "jnp.ufunc.at does not support inplace=True, because arrays are immutable; "
                "pass inplace=False to get the updated array back.")
        at = self.__props["at"] or self._at_via_scan
        return at(a, indices) if b is None else at(a, indices, b)

    def _at_via_scan(self, a, indices, *args):
        # One update per index, in order, so duplicates compound as in NumPy's unbuffered at.
        dtype = _result_dtype(self._func, [a, *args])
        a = _promotion.asarray(a).astype(dtype)
        args = tuple(_promotion.asarray(arg).astype(dtype) for arg in args)
        if not isinstance(indices, tuple):
            indices = (indices,)
        if not indices:
            return a
        shapes = [np.shape(i) for i in indices if not isinstance(i, slice)]
        shape = np.broadcast_shapes(*shapes) if shapes else ()
        if not shape:
            return a.at[indices].set(self(a[indices], *args))
        n = math.prod(shape)
        if args:
            arg = _shape.broadcast_to(args[0], (*shape, *args[0].shape[len(shape):]))
            args = (arg.reshape(n, *args[0].shape[len(shape):]),)
        indices = [i if isinstance(i, slice) else _shape.broadcast_to(_promotion.asarray(i), shape).ravel()
                   for i in indices]

        def step(carry, k):
            idx = tuple(i if isinstance(i, slice) else i[k] for i in indices)
            return carry.at[idx].set(self(carry[idx], *(arg[k] for arg in args))), None

        out, _ = scan(step, a, _creation.arange(n))
        return out

    # ---- reduceat -----------------------------------------------------------------------------

    def reduceat(self, a, indices, axis: int = 0, dtype=None, out: None = None):
        """Reduce over the slices ``a[indices[i]:indices[i+1]]`` along ``axis`` (NumPy's rules).

        Example: ``jnp.add.reduceat(jnp.arange(6), jnp.array([0, 2]))`` is ``[1, 14]``.
        """
        self._check_binary("reduceat")
        if out is not None:
            raise NotImplementedError(f"out argument of {self.__name__}.reduceat()")
        reduceat = self.__props["reduceat"] or self._reduceat_via_loop
        return reduceat(a, indices, axis=axis, dtype=dtype)

    def _reduceat_via_loop(self, a, indices, axis=0, dtype=None):
        a = _promotion.asarray(a)
        indices = _promotion.asarray(indices)
        if a.ndim == 0:
            raise ValueError(f"reduceat: a must have 1 or more dimension, got a.shape={a.shape}")
        if indices.ndim != 1:
            raise ValueError("reduceat: indices must be one-dimensional, got "
                             f"indices.shape={indices.shape}")
        if dtype is None:
            dtype = a.dtype
        if axis is None or isinstance(axis, (tuple, list)):
            raise ValueError("reduceat requires a single integer axis.")
        axis = _canonical_axis(axis, a.ndim, f"{self.__name__}.reduceat")
        out = _shape.take(a, indices, axis=axis)
        # Segment i covers positions (start_i, end_i) after its first element; an empty or
        # backwards segment (end <= start) keeps just a[indices[i]], as NumPy specifies.
        bounds = _shape.append(indices, a.shape[axis])
        other = [d for d in range(out.ndim) if d != axis]
        bounds = _shape.expand_dims(bounds, other)
        start = structural.slice_in_dim(bounds, 0, bounds.shape[axis] - 1, axis=axis)
        end = structural.slice_in_dim(bounds, 1, bounds.shape[axis], axis=axis)

        def body(i, acc):
            piece = _shape.take(a, _shape.expand_dims(i, 0), axis=axis)
            return _sorting.where((i > start) & (i < end), self(acc, piece), acc)

        return fori_loop(0, a.shape[axis], body, out).astype(dtype)

    # ---- outer --------------------------------------------------------------------------------

    def outer(self, A, B, /):
        """``f(A[i..., None...], B[None..., j...])`` for every pair: shape ``A.shape + B.shape``.

        Example: ``jnp.multiply.outer(jnp.arange(2), jnp.arange(3))`` has shape ``(2, 3)``.
        """
        self._check_binary("outer")
        A, B = _promotion.asarray(A), _promotion.asarray(B)
        flat = _api.vmap(_api.vmap(self, (None, 0)), (0, None))(A.ravel(), B.ravel())
        return flat.reshape(*A.shape, *B.shape)


def frompyfunc(func: Callable[..., Any], /, nin: int, nout: int, *, identity: Any = None) -> ufunc:
    """Make a :class:`ufunc` from a function of scalars.

    Example::

        >>> import operator
        >>> add = jnp.frompyfunc(operator.add, nin=2, nout=1, identity=0)
        >>> add.accumulate(jnp.arange(4))
        Array([0, 1, 3, 6], dtype=int32)
    """
    return ufunc(func, nin, nout, identity=identity)


# ---- built-in ufunc objects ---------------------------------------------------------------------
# Ufunc versions of _ufuncs.add, _ufuncs.maximum, ... whose methods use single reductions, cumulative
# ops and scatters. Exported through ``builtin_ufuncs()`` so the numpy namespace can opt in.

def _moved_reduce(reduce_fn, identity, cast_bool=False):
    """``reduce(a, axis, dtype, keepdims, initial, where)`` from a jnp reduction over axes."""
    def reduce(a, axis=0, dtype=None, keepdims=False, initial=None, where=None):
        a = _promotion.asarray(a)
        if cast_bool:
            a = a.astype(bool)
        if dtype is not None:
            a = a.astype(dtype)
        if where is not None:
            a = _sorting.where(where, a, _promotion.asarray(identity).astype(a.dtype))
        out = reduce_fn(a, axis, keepdims)
        if initial is not None:
            out = reduce_fn(_shape.stack([out, _shape.broadcast_to(
                _promotion.asarray(initial).astype(out.dtype), out.shape)]), 0, False)
        return out
    return reduce


def _lax_reduce(op, identity, cast_bool=False):
    def fn(a, axis, keepdims):
        axes = tuple(range(a.ndim)) if axis is None else (
            tuple(axis) if isinstance(axis, tuple) else (axis,))
        axes = tuple(_canonical_axis(ax, a.ndim, "reduce") for ax in axes)
        init = _promotion.asarray(identity).astype(a.dtype)
        out = lax_reduce(a, init, op, axes)
        return _shape.expand_dims(out, axes) if keepdims else out
    return _moved_reduce(fn, identity, cast_bool)


def _parity(a, axis, keepdims):
    """xor over bools: true where an odd number of entries are true."""
    return (_reductions.sum(a.astype(np.int32), axis=axis, keepdims=keepdims) % 2).astype(bool)


def _with_dtype_cast(fn):
    def reduce(a, axis=0, dtype=None, keepdims=False, initial=None, where=None):
        a = _promotion.asarray(a)
        if dtype is not None:
            a = a.astype(dtype)
        return fn(a, axis=axis, keepdims=keepdims, initial=initial, where=where)
    return reduce


def _cum(fn):
    def accumulate(a, axis=0, dtype=None):
        return fn(a, axis=axis, dtype=dtype)
    return accumulate


def _logsumexp_reduce(base2: bool):
    def reduce(a, axis=0, dtype=None, keepdims=False, initial=None, where=None):
        a = _promotion.asarray(a)
        a = a.astype(dtype) if dtype is not None else a.astype(
            _array_info.result_type(a, _dtypes.float32) if not _dtypes.is_inexact(a.dtype)
            else a.dtype)
        scale = np.log(2) if base2 else 1.0
        out = logsumexp(a * scale, axis=axis, keepdims=keepdims, where=where) / scale
        if initial is not None:
            out = (_ufuncs.logaddexp2 if base2 else _ufuncs.logaddexp)(out, initial)
        return out
    return reduce


def _scatter_at(method):
    def at(a, indices, b):
        a = _promotion.asarray(a)
        if a.dtype == np.dtype(bool):
            b = _promotion.asarray(b).astype(bool).astype(np.int32)
            return getattr(a.astype(np.int32).at[indices], method)(b).astype(bool)
        return getattr(a.at[indices], method)(b)
    return at


def builtin_ufuncs() -> dict[str, ufunc]:
    """The ufunc objects for jnp's binary/unary ufuncs, keyed by name (wrapping existing functions)."""
    table = {
        "add": dict(identity=0, reduce=_reductions.sum, accumulate=_cum(_reductions.cumsum),
                    at=_scatter_at("add")),
        "multiply": dict(identity=1, reduce=_reductions.prod, accumulate=_cum(_reductions.cumprod),
                         at=_scatter_at("multiply")),
        "subtract": dict(identity=None, at=lambda a, i, b: _promotion.asarray(a).at[i].subtract(b)),
        "maximum": dict(identity=None, reduce=_with_dtype_cast(_reductions.max)),
        "minimum": dict(identity=None, reduce=_with_dtype_cast(_reductions.min)),
        "bitwise_and": dict(identity=-1, reduce=_lax_reduce(elementwise.bitwise_and, -1)),
        "bitwise_or": dict(identity=0, reduce=_lax_reduce(elementwise.bitwise_or, 0)),
        # lax.reduce has no xor monoid; integer xor folds with the generic loop.
        "bitwise_xor": dict(identity=0),
        "logical_and": dict(identity=True,
                            reduce=_lax_reduce(elementwise.bitwise_and, True, True)),
        "logical_or": dict(identity=False,
                           reduce=_lax_reduce(elementwise.bitwise_or, False, True)),
        "logical_xor": dict(identity=False, reduce=_moved_reduce(_parity, False, True)),
        "logaddexp": dict(identity=-np.inf, reduce=_logsumexp_reduce(False)),
        "logaddexp2": dict(identity=-np.inf, reduce=_logsumexp_reduce(True)),
    }
    out = {name: ufunc(getattr(_ufuncs, name), 2, 1, name=name, call=getattr(_ufuncs, name), **kw)
           for name, kw in table.items()}
    out["negative"] = ufunc(_ufuncs.negative, 1, 1, name="negative", call=_ufuncs.negative)
    return out
