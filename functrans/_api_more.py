"""More of the top-level ``jax`` namespace: ``custom_gradient``, the ``debug_nans`` /
``debug_infs`` flag contexts, process/host queries, ``live_arrays`` and
``copy_to_host_async``.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import warnings
from typing import Any, Callable

from functrans import _devices, core, distributed, tree_util
from functrans._config import config
from functrans._custom_derivatives import custom_vjp
from functrans.core import get_aval
from functrans.interpreters import ad
from functrans._array import Array
from functrans.interpreters.staging import trace_to_jaxpr_dynamic

__all__ = ["custom_gradient", "check_tracer_leaks", "checking_leaks", "debug_nans", "debug_infs", "live_arrays", "copy_to_host_async",
           "host_count", "host_id", "host_ids", "process_indices"]


# =============================================================================================
# custom_gradient
# =============================================================================================


class _GradientResiduals:
    """What ``custom_gradient``'s forward pass hands to its backward pass: the user's
    gradient function staged as a jaxpr, whose constants (the values it closed over) are
    the residual arrays. A pytree node, so the arrays travel as residual leaves and the
    program as static data."""

    def __init__(self, jaxpr, consts, ct_in_tree, ct_out_tree):
        self.jaxpr = jaxpr
        self.consts = list(consts)
        self.ct_in_tree = ct_in_tree     # structure of the output cotangent
        self.ct_out_tree = ct_out_tree   # structure of what the gradient function returns


tree_util.register_pytree_node(
    _GradientResiduals,
    lambda r: (r.consts, (r.jaxpr, r.ct_in_tree, r.ct_out_tree)),
    lambda aux, consts: _GradientResiduals(aux[0], consts, aux[1], aux[2]))


def _positional(fun, args, kwargs) -> tuple:
    if not kwargs:
        return tuple(args)
    bound = inspect.signature(fun).bind(*args, **kwargs)
    bound.apply_defaults()
    if bound.kwargs:
        raise TypeError(f"custom_gradient: keyword-only arguments {sorted(bound.kwargs)} of "
                        f"{getattr(fun, '__name__', fun)!r} are not supported")
    return tuple(bound.args)


def custom_gradient(fun: Callable) -> Callable:
    """Define a function and its gradient together, as TensorFlow's ``tf.custom_gradient``.

    ``fun(*args)`` returns ``(value, vjp_fn)``: ``vjp_fn(cotangent)`` gives the cotangents of
    the arguments (a tuple, one per argument; a single value when there is one argument).
    ``vjp_fn`` may close over values computed in the forward pass, but must not branch in
    Python on them: it is traced once into a program.

        >>> import functrans
        >>> @functrans.custom_gradient
        ... def f(x):
        ...     return x ** 2, lambda g: (g * x,)
        >>> f(3.0), functrans.grad(f)(3.0)
        (9.0, Array(3., dtype=float32, weak_type=True))
    """

    def primal(*args):
        value, _ = fun(*args)
        return value

    def fwd(*args):
        value, vjp_fn = fun(*args)
        value_leaves, ct_in_tree = tree_util.tree_flatten((value,))
        ct_avals = [ad.tangent_aval(get_aval(v)) for v in value_leaves]
        ct_out_tree_cell = []

        def flat_vjp(*ct_leaves):
            (ct,) = tree_util.tree_unflatten(ct_in_tree, list(ct_leaves))
            cts_leaves, cts_tree = tree_util.tree_flatten(vjp_fn(ct))
            ct_out_tree_cell.append(cts_tree)
            return cts_leaves

        jaxpr, consts = trace_to_jaxpr_dynamic(flat_vjp, ct_avals)
        return value, _GradientResiduals(jaxpr, consts, ct_in_tree, ct_out_tree_cell[-1])

    def bwd(res: _GradientResiduals, ct):
        ct_leaves, ct_tree = tree_util.tree_flatten((ct,))
        if ct_tree != res.ct_in_tree:
            raise TypeError(f"custom_gradient: cotangent structure {ct_tree} does not match "
                            f"the output structure {res.ct_in_tree}")
        cts = core.eval_jaxpr(res.jaxpr, res.consts, *ct_leaves)
        cts = tree_util.tree_unflatten(res.ct_out_tree, cts)
        if not isinstance(cts, (tuple, list)):
            cts = (cts,)  # one argument: its cotangent may be returned bare
        return tuple(cts)

    wrapped_primal = custom_vjp(primal)
    wrapped_primal.defvjp(fwd, bwd)

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        return wrapped_primal(*_positional(fun, args, kwargs))

    return wrapper


# =============================================================================================
# debug_nans / debug_infs as context managers (jax.debug_nans(True): ...)
# =============================================================================================


class _FlagState:
    """A boolean config flag that is also a context manager factory, as ``jax.debug_nans``:
    ``flag.value`` reads it, ``with flag(True):`` sets it for a block and restores it.

    The flag is process-wide (functrans's config is global), not per thread."""

    def __init__(self, name: str, doc: str):
        self._name = name
        self.__doc__ = doc

    @property
    def name(self) -> str:
        return "jax_" + self._name

    @property
    def value(self) -> bool:
        return bool(config.read(self._name))

    @contextlib.contextmanager
    def __call__(self, new_val: bool = True):
        previous = config.read(self._name)
        config.update(self._name, bool(new_val))
        try:
            yield
        finally:
            config.update(self._name, previous)

    def __repr__(self):
        return f"<flag {self.name}={self.value}>"


debug_nans = _FlagState(
    "debug_nans",
    """While set, an operation or jitted call that produces a NaN raises FloatingPointError
    naming the primitive (``functrans.config.update("jax_debug_nans", True)`` sets it for
    good).

        >>> import functrans, functrans.numpy as jnp
        >>> with functrans.debug_nans(True):
        ...     jnp.log(-1.0)
        Traceback (most recent call last):
        FloatingPointError: invalid value (NaN) encountered in primitive 'log' ...
    """)

debug_infs = _FlagState(
    "debug_infs",
    """As :data:`debug_nans`, for infinities: ``with functrans.debug_infs(True): ...``.""")

enable_x64 = _FlagState(
    "enable_x64",
    """While set, 64-bit types are available (Python floats become float64, ints int64):
    ``with functrans.enable_x64(True): ...``; ``functrans.enable_x64.value`` reads it.

        >>> import functrans, functrans.numpy as jnp
        >>> with functrans.enable_x64(True):
        ...     print(jnp.zeros(1).dtype)
        float64
    """)

check_tracer_leaks = _FlagState(
    "check_tracer_leaks",
    """While set, every transformation (jit, grad, vjp, jvp, vmap, make_jaxpr, control-flow
    bodies) checks when its trace ends that none of its tracers is still referred to from
    outside it, and raises UnexpectedTracerError naming each leaked one and what holds it
    (``config.update("jax_check_tracer_leaks", True)`` or ``FUNCTRANS_CHECK_TRACER_LEAKS=1``
    set it for good). Each trace then runs a garbage collection: for debugging only.

    Example::

        with functrans.check_tracer_leaks(True):
            functrans.jit(f)(x)
    """)


def checking_leaks():
    """Context manager: check for leaked tracers in the block, as ``jax.checking_leaks``
    (the same as ``check_tracer_leaks(True)``).

        >>> import functrans
        >>> leaked = []
        >>> def f(x):
        ...     leaked.append(x)       # keeps a tracer after jit's trace ends
        ...     return x
        >>> with functrans.checking_leaks():
        ...     functrans.jit(f)(1.0)  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        UnexpectedTracerError: Leaked trace DynamicJaxprTrace ...
    """
    return check_tracer_leaks(True)


log_compiles = _FlagState(
    "log_compiles",
    """While set, each trace and compilation of a jitted function is logged (at warning
    level, logger ``functrans``): ``with functrans.log_compiles(True): ...``.""")

explain_cache_misses = _FlagState(
    "explain_cache_misses",
    """While set, a jitted function that traces again logs why (which argument's shape,
    dtype or structure changed): ``with functrans.explain_cache_misses(True): ...``.""")


# =============================================================================================
# Processes, hosts and arrays
# =============================================================================================


def _renamed(old: str, new: str) -> None:
    warnings.warn(f"functrans.{old} has been renamed to functrans.{new}; the old name will "
                  "eventually be removed. Please update your code.", UserWarning, stacklevel=3)


def process_indices(backend: str | None = None) -> list[int]:
    """The indices of all processes taking part (``[0]`` when not running distributed).

        >>> import functrans
        >>> functrans.process_indices()
        [0]
    """
    return list(range(distributed.process_count()))


def host_count(backend: str | None = None) -> int:
    """Old name of :func:`functrans.process_count` (warns)."""
    _renamed("host_count", "process_count")
    return distributed.process_count()


def host_id(backend: str | None = None) -> int:
    """Old name of :func:`functrans.process_index` (warns)."""
    _renamed("host_id", "process_index")
    return distributed.process_index()


def host_ids(backend: str | None = None) -> list[int]:
    """Old name of :func:`functrans.process_indices` (warns)."""
    _renamed("host_ids", "process_indices")
    return process_indices(backend)


def live_arrays(platform: str | None = None) -> list:
    """Every array alive in this process on ``platform`` (default: the default platform),
    not counting deleted (donated) ones. A debugging aid: it walks all objects the garbage
    collector tracks, so it is slow in a large program.

        >>> import functrans, functrans.numpy as jnp
        >>> x = jnp.ones(3)
        >>> any(a is x for a in functrans.live_arrays())
        True
    """
    platform = platform or _devices.default_platform()
    if platform == "cuda":
        platform = "gpu"
    return [obj for obj in gc.get_objects()
            if isinstance(obj, Array) and getattr(obj, "_platform", "cpu") == platform
            and not obj.is_deleted()]


def copy_to_host_async(x: Any) -> Any:
    """Start copying every array leaf of ``x`` to the host (each leaf's own
    ``copy_to_host_async`` where it has one; CPU arrays already live on the host). Returns
    ``x`` unchanged.

        >>> import functrans, functrans.numpy as jnp
        >>> functrans.copy_to_host_async({"w": jnp.ones(2)})["w"]
        Array([1., 1.], dtype=float32)
    """
    for leaf in tree_util.tree_leaves(x):
        copy = getattr(leaf, "copy_to_host_async", None)
        if callable(copy):
            copy()
    return x
