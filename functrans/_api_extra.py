"""Smaller top-level functions of the JAX API: host callbacks (``pure_callback``), ``jacobian``,
``device_get``, ``default_backend``, naming (``named_scope``, ``named_call``),
``ensure_compile_time_eval``, ``linear_transpose``, ``closure_convert``, ``clear_caches``,
``typeof`` and ``print_environment_info``.

``pure_callback`` is a primitive: its reference implementation calls the user's Python
function on NumPy arrays, so it runs eagerly, and inside ``jit`` the compiled backends run it
as one of their NumPy steps when the program runs (not while it is traced).

    >>> import numpy as np, functrans, functrans.numpy as jnp
    >>> from functrans._api_extra import pure_callback
    >>> f = functrans.jit(lambda x: pure_callback(np.sin, functrans.ShapeDtypeStruct((2,), np.float32), x))
    >>> f(jnp.zeros(2))
    Array([0., 0.], dtype=float32)
"""
from __future__ import annotations

import contextlib
import functools
import platform
import sys
from typing import Any, Callable

import numpy as np

from functrans import _backends, _caches, _devices, _dtypes, core, tree_util
from functrans._api import jacrev
from functrans.core import Primitive, ShapedArray, Tracer, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters.staging import trace_to_jaxpr_dynamic
from functrans.random._keys import PRNGKeyArray, key_aval
from functrans.tree_util import tree_flatten, tree_unflatten
from functrans.version import __version__
from functrans.numpy import asarray
from functrans.primitives import structural

__all__ = ["pure_callback", "jacobian", "device_get", "default_backend", "named_scope",
           "named_call", "ensure_compile_time_eval", "linear_transpose", "closure_convert",
           "clear_caches", "typeof", "print_environment_info"]


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
    leaves, in_tree = tree_flatten((args, kwargs))
    for leaf in leaves:
        if not (isinstance(leaf, Tracer) or core.valid_jaxtype(leaf)):
            raise TypeError(f"pure_callback: arguments must be arrays, got "
                            f"{type(leaf).__name__}: {leaf!r}")
    leaves = [x if isinstance(x, Tracer) else asarray(x) for x in leaves]
    result_leaves, out_tree = tree_flatten(result_shape_dtypes)
    result_avals = tuple(_result_aval(r) for r in result_leaves)
    flat_callback = _FlatCallback(callback, in_tree)
    outs = pure_callback_p.bind(*leaves, callback=flat_callback, result_avals=result_avals,
                                vmap_method=vmap_method)
    return tree_unflatten(out_tree, outs)


# =============================================================================================
# Small API functions
# =============================================================================================

jacobian = jacrev
"""``jacobian`` is ``jacrev``, as in JAX."""


def device_get(x: Any):
    """Copy every array of the pytree ``x`` (``Array``, ``ShardedArray``, GPU arrays) to a
    NumPy array on the host; other leaves (and tracers) are returned as they are.

        >>> import functrans, functrans.numpy as jnp
        >>> device_get({"w": jnp.ones(2)})
        {'w': array([1., 1.], dtype=float32)}
    """
    def get(leaf):
        if isinstance(leaf, Tracer):
            return leaf
        to_array = getattr(leaf, "__array__", None)
        if to_array is None:
            return leaf
        if isinstance(leaf, np.ndarray):
            return leaf
        value = np.asarray(leaf)
        if getattr(leaf, "_value", None) is value and value.flags.writeable:
            # the Array's own buffer: a read-only view, as arrays are immutable
            value = value.view()
            value.flags.writeable = False
        return value

    return tree_util.tree_map(get, x)


def default_backend() -> str:
    """The platform ``jit`` compiles for when none is named: ``"gpu"`` when a GPU backend is
    available (or configured), else ``"cpu"``.

        >>> default_backend() in ("cpu", "gpu")
        True
    """
    return _backends.default_platform()


@contextlib.contextmanager
def named_scope(name: str):
    """A context manager naming the operations staged inside it (as ``jax.named_scope``).
    functrans's IR does not record the names, so this only checks the name; it works under
    ``jit``, ``grad`` and ``vmap``.

        >>> import functrans.numpy as jnp
        >>> with named_scope("layer1"):
        ...     y = jnp.ones(2) * 2
    """
    if not isinstance(name, str):
        raise TypeError(f"named_scope: name must be a string, got {type(name).__name__}")
    yield


def named_call(fun: Callable, *, name: str | None = None) -> Callable:
    """``fun`` wrapped so that its operations are staged under ``name`` (default: the
    function's name); the result computes exactly what ``fun`` does.

        >>> import functrans, functrans.numpy as jnp
        >>> functrans.grad(named_call(jnp.sin, name="s"))(0.0)
        Array(1., dtype=float32, weak_type=True)
    """
    scope = name if name is not None else getattr(fun, "__name__", "named_call")

    @functools.wraps(fun)
    def named(*args, **kwargs):
        with named_scope(scope):
            return fun(*args, **kwargs)

    return named


@contextlib.contextmanager
def ensure_compile_time_eval():
    """Inside this block, operations whose inputs are all concrete (not traced) are computed
    right away, also while a function is being staged by ``jit``: their results are concrete
    arrays (usable in Python control flow), and become constants of the staged program when
    combined with traced values. Operations that read traced values are staged as usual.

    Precisely: ``jit`` staging records every operation, even on constants; this block
    makes operations without traced inputs run on the eager (reference) interpreter instead.
    Transforms that trace only their inputs (``vmap``, ``grad``) are unaffected.

        >>> import functrans, functrans.numpy as jnp
        >>> @functrans.jit
        ... def f(x):
        ...     with ensure_compile_time_eval():
        ...         n = jnp.sum(jnp.arange(4))       # a concrete Array, not a tracer
        ...     return x * int(n)
        >>> f(1.0)
        Array(6., dtype=float32, weak_type=True)
    """
    state = core._state
    previous = state.dynamic
    # the bottom of the trace stack is the eval trace: binds with no tracer among their
    # arguments resolve to it instead of to the staging trace
    state.dynamic = state.stack[0]
    try:
        yield
    finally:
        state.dynamic = previous


def _aval_of_example(x) -> ShapedArray:
    if isinstance(x, Tracer) or core.valid_jaxtype(x):
        return get_aval(x)
    try:
        return ShapedArray(tuple(x.shape), _dtypes.canonicalize_dtype(x.dtype),
                           getattr(x, "weak_type", False))
    except AttributeError:
        raise TypeError(f"expected an array or a ShapeDtypeStruct, got {type(x).__name__}: "
                        f"{x!r}") from None


def _trace_flat(fun, in_tree, in_avals):
    """``fun`` (of the pytree ``in_tree``) staged at ``in_avals``: (jaxpr, consts, out tree)."""
    out_tree_cell: list = []

    def flat(*leaves):
        out_leaves, out_tree = tree_flatten(fun(*tree_unflatten(in_tree, list(leaves))))
        out_tree_cell.append(out_tree)
        return out_leaves

    jaxpr, consts = trace_to_jaxpr_dynamic(flat, in_avals)
    return jaxpr, consts, out_tree_cell[0]


def linear_transpose(fun: Callable, *primals, reduce_axes=()) -> Callable:
    """The transpose of the linear function ``fun``: returns ``f_t`` with
    ``f_t(out_cotangent) == vjp(fun, *primals)[1](out_cotangent)``, without evaluating
    ``fun`` at a point (``primals`` give only shapes and dtypes; ``ShapeDtypeStruct`` is
    accepted). ``fun`` must be linear in its arguments, which must be floating point.

        >>> import functrans, functrans.numpy as jnp
        >>> f_t = linear_transpose(lambda x: 3.0 * x, jnp.zeros(2))
        >>> f_t(jnp.ones(2))
        (Array([3., 3.], dtype=float32),)
    """
    primal_leaves, in_tree = tree_flatten(primals)
    in_avals = [_aval_of_example(p) for p in primal_leaves]
    for aval in in_avals:
        if not _dtypes.is_inexact(aval.dtype):
            raise TypeError(f"linear_transpose only supports floating-point inputs, got an "
                            f"input of type {aval.str_short()}")
    jaxpr, consts, out_tree = _trace_flat(fun, in_tree, in_avals)
    out_avals = jaxpr.out_avals
    for aval in out_avals:
        if not _dtypes.is_inexact(aval.dtype):
            raise TypeError(f"linear_transpose only supports floating-point outputs, got an "
                            f"output of type {aval.str_short()}")

    def transposed_fun(out_cotangent):
        ct_leaves, ct_tree = tree_flatten(out_cotangent)
        if ct_tree != out_tree:
            raise TypeError(f"linear_transpose: the cotangent has structure {ct_tree}, but "
                            f"the function's output has structure {out_tree}")
        cts = []
        for ct, aval in zip(ct_leaves, out_avals):
            ct_aval = get_aval(ct)
            if ct_aval.shape != aval.shape or ct_aval.dtype != aval.dtype:
                raise TypeError(f"linear_transpose: cotangent of type {ct_aval.str_short()} "
                                f"for an output of type {aval.str_short()}")
            cts.append(ct if isinstance(ct, Tracer) else asarray(ct))
        undefined = [ad.UndefinedPrimal(a) for a in in_avals]
        cts_in = ad.backward_pass(jaxpr, consts, undefined, cts)
        cts_in = [ad.zeros_like_aval(a) if isinstance(ct, ad.Zero) else ct
                  for ct, a in zip(cts_in, in_avals)]
        return tuple(tree_unflatten(in_tree, cts_in))

    return transposed_fun


def _maybe_perturbed(x) -> bool:
    """Whether ``x`` may carry a tangent when differentiated, now or later: tracers of
    floating-point values (up to what the tracer reveals), never concrete constants."""
    if not isinstance(x, Tracer):
        return False
    if isinstance(x, ad.JVPTracer):
        return not isinstance(x.tangent, ad.Zero) or _maybe_perturbed(x.primal)
    if isinstance(x, batching.BatchTracer):
        return _maybe_perturbed(x.val)
    return ad.tangent_aval(x.aval).dtype != _dtypes.float0


def closure_convert(fun: Callable, *example_args):
    """Returns ``(converted_fun, consts)``: ``converted_fun(*args, *consts)`` computes
    ``fun(*args)``, with the values ``fun`` closes over that may be differentiated (tracers
    of enclosing transforms) taken as the explicit arguments ``consts``. This is how a
    closure is passed to a ``custom_vjp`` function whose backward pass must also give
    cotangents for the closed-over values.

        >>> import functrans, functrans.numpy as jnp
        >>> def outer(w):
        ...     f = lambda x: w * x
        ...     f_conv, consts = closure_convert(f, 1.0)
        ...     return f_conv(2.0, *consts)
        >>> functrans.grad(outer)(3.0)
        Array(2., dtype=float32, weak_type=True)
    """
    leaves, in_tree = tree_flatten(example_args)
    in_avals = [_aval_of_example(x) for x in leaves]
    jaxpr, consts, out_tree = _trace_flat(fun, in_tree, in_avals)
    hoist = [_maybe_perturbed(c) for c in consts]
    hoisted = [c for c, h in zip(consts, hoist) if h]
    num_hoisted = len(hoisted)

    def converted_fun(*args_and_consts):
        num_args = len(args_and_consts) - num_hoisted
        if num_args < 0:
            raise TypeError(f"closure-converted function takes its arguments followed by "
                            f"{num_hoisted} constants, got {len(args_and_consts)} values")
        args, given = args_and_consts[:num_args], iter(args_and_consts[num_args:])
        arg_leaves, arg_tree = tree_flatten(tuple(args))
        if arg_tree != in_tree:
            raise TypeError(f"closure-converted function called with arguments of structure "
                            f"{arg_tree}, but it was converted for {in_tree}")
        all_consts = [next(given) if h else c for c, h in zip(consts, hoist)]
        outs = core.eval_jaxpr(jaxpr, all_consts, *arg_leaves)
        return tree_unflatten(out_tree, outs)

    return converted_fun, hoisted


def clear_caches() -> None:
    """Forget every staged program and compiled executable held in memory, and the scratch
    memory kept for compiled programs: each ``jit`` and ``pmap`` function traces and
    compiles again on its next call. (The on-disk cache of machine code is kept: it is keyed
    by the program, so it is never stale; ``functrans.backends.llvm.cache.clear()`` deletes
    it.)

        >>> clear_caches()
    """
    _caches.clear_all()


def typeof(x) -> ShapedArray:
    """The abstract value (shape, dtype, weak type) of an array, tracer, scalar or key array.

        >>> typeof(1.0)
        ShapedArray(f32[], weak_type=True)
        >>> import functrans.random as random
        >>> typeof(random.key(0))
        ShapedArray(key<fry>[])
    """
    if isinstance(x, PRNGKeyArray):
        return key_aval(x)
    return get_aval(x)


def print_environment_info(return_string: bool = False) -> str | None:
    """Print (or return) the versions of functrans, Python, NumPy and the compilers, the
    backends and devices found, for bug reports.

        >>> "functrans" in print_environment_info(return_string=True)
        True
    """

    lines = [f"functrans:    {__version__}",
             f"numpy:        {np.__version__}",
             f"python:       {sys.version.splitlines()[0]}",
             f"platform:     {platform.platform()}"]
    for module in ("llvmlite", "cupy", "mpi4py"):
        try:
            version = getattr(__import__(module), "__version__", "installed")
        except Exception:  # an absent (or broken) optional dependency
            version = "not installed"
        lines.append(f"{module + ':':<13} {version}")
    backends = _backends.backends()
    names = ", ".join(f"{name} ({b.platform}{'' if _safe_available(b) else ', unavailable'})"
                      for name, b in sorted(backends.items()))
    lines.append(f"backends:     {names}")
    lines.append(f"default:      {default_backend()}")
    try:
        lines.append(f"devices:      {_devices.devices()}")
    except Exception as err:  # report, do not fail, in a bug-report helper
        lines.append(f"devices:      unavailable ({err})")
    text = "\n".join(lines)
    if return_string:
        return text
    print(text)
    return None


def _safe_available(backend) -> bool:
    try:
        return bool(backend.available())
    except Exception:
        return False
