"""Host callbacks: ``pure_callback`` and ``io_callback``.

``pure_callback`` is a primitive: its reference implementation calls the user's Python
function on NumPy arrays, so it runs eagerly, and inside ``jit`` the compiled backends run it
as one of their NumPy steps when the program runs (not while it is traced).

    >>> import numpy as np, functrans, functrans.numpy as jnp
    >>> from functrans._callbacks import pure_callback
    >>> f = functrans.jit(lambda x: pure_callback(np.sin, functrans.ShapeDtypeStruct((2,), np.float32), x))
    >>> f(jnp.zeros(2))
    Array([0., 0.], dtype=float32)
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from functrans import _dtypes, core, tree_util
from functrans.core import Primitive, ShapedArray, Tracer
from functrans.interpreters import batching
from functrans.tree_util import tree_flatten, tree_unflatten
from functrans.numpy import asarray
from functrans.primitives import structural

__all__ = ["pure_callback", "io_callback"]


# =============================================================================================
# pure_callback
# =============================================================================================

pure_callback_p = Primitive("pure_callback", multiple_results=True)

_VMAP_METHODS = ("sequential", "sequential_unrolled", "expand_dims", "broadcast_all",
                 "legacy_vectorized")


class _FlatCallback:
    """The user's callback on flat NumPy arguments, returning its results' leaves. Kept as
    an object (not a closure) so error messages and printed programs name the user's
    function. As in JAX, only the leaves of the result are checked, not its container types
    (a list where the spec has a tuple is fine)."""

    __slots__ = ("fun", "in_tree")

    def __init__(self, fun: Callable, in_tree):
        self.fun = fun
        self.in_tree = in_tree

    @property
    def name(self) -> str:
        return _callable_name(self.fun)

    def __call__(self, *flat_args):
        args, kwargs = tree_unflatten(self.in_tree, list(flat_args))
        return tree_util.tree_leaves(self.fun(*args, **kwargs))

    def __repr__(self):
        return self.name


class _SequentialCallback:
    """``inner`` applied example by example along the leading axis of the batched arguments
    (``vmap_method="sequential"``), the per-example results stacked."""

    __slots__ = ("inner", "batched", "size", "inner_avals")

    def __init__(self, inner, batched, size: int, inner_avals):
        self.inner = inner
        self.batched = tuple(batched)
        self.size = size
        self.inner_avals = tuple(inner_avals)

    @property
    def name(self) -> str:
        return _callback_name(self.inner)

    def __call__(self, *flat_args):
        per_example = []
        for i in range(self.size):
            args = [a[i] if b else a for a, b in zip(flat_args, self.batched)]
            per_example.append(_call_checked(self.inner, args, self.inner_avals))
        if not per_example:  # an empty batch: the callback is never called
            return [np.zeros((0,) + a.shape, a.dtype) for a in self.inner_avals]
        return [np.stack(rows) for rows in zip(*per_example)]

    def __repr__(self):
        return f"sequential({self.name})"


def _callable_name(fun) -> str:
    name = getattr(fun, "__qualname__", None) or getattr(fun, "__name__", None)
    if name is None and isinstance(fun, functools.partial):
        return f"partial({_callable_name(fun.func)})"
    return name or repr(fun)


def _callback_name(callback) -> str:
    return getattr(callback, "name", None) or _callable_name(callback)


def _read_only(x) -> np.ndarray:
    # The callback sees the program's buffers without a copy; a read-only view keeps it
    # from mutating arrays that are immutable everywhere else.
    view = np.asarray(x).view()
    view.flags.writeable = False
    return view


def _call_checked(callback, args, result_avals) -> list:
    """Call ``callback`` on NumPy views of ``args`` and check every result against
    ``result_avals`` (shape and dtype exactly, as the compiled program relies on them)."""
    outs = list(callback(*[_read_only(a) for a in args]))
    name = _callback_name(callback)
    if len(outs) != len(result_avals):
        raise RuntimeError(f"pure_callback: the callback {name} returned {len(outs)} arrays, "
                           f"but result_shape_dtypes describes {len(result_avals)}")
    checked = []
    for i, (out, aval) in enumerate(zip(outs, result_avals)):
        value = np.asarray(out)
        if value.shape != aval.shape:
            raise RuntimeError(f"pure_callback: result {i} of the callback {name} has shape "
                               f"{value.shape}, but result_shape_dtypes says {aval.shape}")
        if value.dtype != aval.dtype:
            raise RuntimeError(f"pure_callback: result {i} of the callback {name} has dtype "
                               f"{value.dtype}, but result_shape_dtypes says {aval.dtype} "
                               "(convert the result in the callback, e.g. with .astype)")
        checked.append(value)
    return checked


@pure_callback_p.def_abstract_eval
def _pure_callback_abstract_eval(*avals, callback, result_avals, vmap_method):
    return list(result_avals)


@pure_callback_p.def_impl
def _pure_callback_impl(*args, callback, result_avals, vmap_method):
    return _call_checked(callback, args, result_avals)


def _pure_callback_jvp(primals, tangents, *, callback, result_avals, vmap_method):
    raise ValueError(
        f"pure_callback ({_callback_name(callback)}) cannot be differentiated: functrans "
        "cannot see inside the Python callback. Wrap the function that calls pure_callback "
        "in functrans.custom_jvp or functrans.custom_vjp and give its derivative there.")


def _pure_callback_transpose(cts, *args, callback, result_avals, vmap_method):
    raise ValueError(f"pure_callback ({_callback_name(callback)}) cannot be transposed; "
                     "use custom_vjp to give its derivative")


def _pure_callback_batch(vals, dims, *, callback, result_avals, vmap_method):
    name = _callback_name(callback)
    if vmap_method is None:
        raise NotImplementedError(
            f"vmap of pure_callback ({name}) needs vmap_method: pass "
            "vmap_method='sequential' (call the callback once per example), 'expand_dims' "
            "(call it once with batched arguments; unbatched ones get a leading axis of size "
            "1) or 'broadcast_all' (unbatched ones are broadcast to the batch size)")
    size = batching.batch_size_of(vals, dims)
    batched_avals = tuple(ShapedArray((size,) + a.shape, a.dtype) for a in result_avals)
    if vmap_method in ("sequential", "sequential_unrolled"):
        vals = [v if d is None else batching.moveaxis(v, d, 0) for v, d in zip(vals, dims)]
        looped = _SequentialCallback(callback, [d is not None for d in dims], size, result_avals)
        outs = pure_callback_p.bind(*vals, callback=looped, result_avals=batched_avals,
                                    vmap_method=vmap_method)
        return outs, [0] * len(outs)
    new_vals = []
    for v, d in zip(vals, dims):
        if d is not None:
            new_vals.append(batching.moveaxis(v, d, 0))
        elif vmap_method == "expand_dims":
            new_vals.append(structural.expand_dims(v, (0,)))
        elif vmap_method == "broadcast_all":
            new_vals.append(batching.broadcast(v, size, 0))
        else:  # legacy_vectorized: unbatched arguments are passed as they are
            new_vals.append(v)
    outs = pure_callback_p.bind(*new_vals, callback=callback, result_avals=batched_avals,
                                vmap_method=vmap_method)
    return outs, [0] * len(outs)


pure_callback_p.jvp = _pure_callback_jvp
pure_callback_p.transpose = _pure_callback_transpose
pure_callback_p.batch = _pure_callback_batch


def _array_operands(name: str, args, kwargs) -> tuple[list, Any]:
    """The leaves of a callback's arguments as arrays (tracers as they are) and their tree;
    ``name``, the callback's kind, names it in the error for a leaf that is not an array."""
    leaves, in_tree = tree_flatten((args, kwargs))
    for leaf in leaves:
        if not (isinstance(leaf, Tracer) or core.valid_jaxtype(leaf)):
            raise TypeError(f"{name}: arguments must be arrays, got "
                            f"{type(leaf).__name__}: {leaf!r}")
    return [x if isinstance(x, Tracer) else asarray(x) for x in leaves], in_tree


def _result_aval(leaf) -> ShapedArray:
    try:
        shape, dtype = leaf.shape, leaf.dtype
    except AttributeError:
        raise TypeError("pure_callback: result_shape_dtypes must be a pytree of objects with "
                        f".shape and .dtype (ShapeDtypeStruct or arrays), got "
                        f"{type(leaf).__name__}: {leaf!r}") from None
    return ShapedArray(tuple(shape), _dtypes.canonicalize_dtype(dtype))


def pure_callback(callback: Callable, result_shape_dtypes: Any, *args: Any, sharding=None,
                  vmap_method: str | None = None, **kwargs: Any):
    """Call the Python function ``callback(*args, **kwargs)`` on NumPy arrays from inside
    transformed code, as ``jax.pure_callback``.

    ``result_shape_dtypes`` is a pytree of ``ShapeDtypeStruct`` (or arrays) describing what
    the callback returns; results are checked against it exactly (shape and dtype), and a
    mismatch raises an error naming the callback. Under ``jit`` the callback runs each time
    the compiled program runs. The callback must be pure: a program may run it fewer or
    more times (it is removed when its results are unused).

    Under ``vmap``, ``vmap_method`` says how: ``"sequential"`` calls it once per example;
    ``"expand_dims"`` calls it once with the batch on axis 0 of batched arguments and a
    leading axis of size 1 on the others; ``"broadcast_all"`` broadcasts those to the batch
    size. With ``vmap_method=None`` vmap raises. It cannot be differentiated: wrap it in
    ``custom_jvp``/``custom_vjp``. ``sharding`` is accepted and ignored (one device).

        >>> import numpy as np, functrans, functrans.numpy as jnp
        >>> spec = functrans.ShapeDtypeStruct((3,), np.float32)
        >>> pure_callback(lambda x: np.cumsum(x), spec, jnp.ones(3))
        Array([1., 2., 3.], dtype=float32)
    """
    if vmap_method is not None and vmap_method not in _VMAP_METHODS:
        raise ValueError(f"pure_callback: vmap_method must be one of {_VMAP_METHODS} or None, "
                         f"got {vmap_method!r}")
    leaves, in_tree = _array_operands("pure_callback", args, kwargs)
    result_leaves, out_tree = tree_flatten(result_shape_dtypes)
    result_avals = tuple(_result_aval(r) for r in result_leaves)
    flat_callback = _FlatCallback(callback, in_tree)
    outs = pure_callback_p.bind(*leaves, callback=flat_callback, result_avals=result_avals,
                                vmap_method=vmap_method)
    return tree_unflatten(out_tree, outs)




# =============================================================================================
# io_callback
# =============================================================================================

# A callback with side effects: kept by dead-code elimination, run once per execution in
# program order. Same rules as pure_callback otherwise; under vmap an unordered one runs once
# per example, an ordered one cannot be batched (the order of examples would be invented).
io_callback_p = Primitive("io_callback", multiple_results=True)
io_callback_p.effectful = True


@io_callback_p.def_abstract_eval
def _io_callback_abstract_eval(*avals, callback, result_avals, ordered):
    return list(result_avals)


@io_callback_p.def_impl
def _io_callback_impl(*args, callback, result_avals, ordered):
    return _call_checked(callback, args, result_avals)


def _io_callback_jvp(primals, tangents, *, callback, result_avals, ordered):
    raise ValueError(f"io_callback ({_callback_name(callback)}) cannot be differentiated; "
                     "wrap it in custom_jvp or custom_vjp")


def _io_callback_batch(vals, dims, *, callback, result_avals, ordered):
    if ordered:
        raise ValueError("Cannot `vmap` ordered IO callback.")
    size = batching.batch_size_of(vals, dims)
    batched_avals = tuple(ShapedArray((size,) + a.shape, a.dtype) for a in result_avals)
    vals = [v if d is None else batching.moveaxis(v, d, 0) for v, d in zip(vals, dims)]
    looped = _SequentialCallback(callback, [d is not None for d in dims], size, result_avals)
    outs = io_callback_p.bind(*vals, callback=looped, result_avals=batched_avals,
                              ordered=ordered)
    return outs, [0] * len(outs)


io_callback_p.jvp = _io_callback_jvp
io_callback_p.batch = _io_callback_batch


def io_callback(callback: Callable, result_shape_dtypes: Any, *args: Any, sharding=None,
                ordered: bool = False, **kwargs: Any):
    """Call ``callback(*args, **kwargs)`` (a Python function with side effects, on NumPy
    arrays) from inside transformed code, as ``jax.experimental.io_callback``. Unlike
    :func:`pure_callback` it is never removed or repeated: under ``jit`` it runs once each
    time the program runs, in program order. ``ordered=True`` also forbids ``vmap``. It
    cannot be differentiated.

        >>> import numpy as np, functrans
        >>> seen = []
        >>> _ = functrans.jit(lambda x: io_callback(lambda v: seen.append(v) or v,
        ...                   functrans.ShapeDtypeStruct((), np.float32), x))(1.0)
        >>> seen
        [array(1., dtype=float32)]
    """
    leaves, in_tree = _array_operands("io_callback", args, kwargs)
    result_leaves, out_tree = tree_flatten(result_shape_dtypes)
    result_avals = tuple(_result_aval(r) for r in result_leaves)
    outs = io_callback_p.bind(*leaves, callback=_FlatCallback(callback, in_tree),
                              result_avals=result_avals, ordered=bool(ordered))
    return tree_unflatten(out_tree, outs)
