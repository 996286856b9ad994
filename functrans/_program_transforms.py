"""Transformations of traced programs beside the main ones: ``jacobian``, naming
(``named_scope``, ``named_call``), ``ensure_compile_time_eval``, ``linear_transpose``,
``closure_convert`` and ``typeof``."""
from __future__ import annotations

import contextlib
import functools
from typing import Callable

from functrans import _dtypes, core
from functrans._api import jacrev
from functrans.core import ShapedArray, Tracer, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters.staging import trace_to_jaxpr_dynamic
from functrans.random._keys import PRNGKeyArray, key_aval
from functrans.tree_util import tree_flatten, tree_unflatten
from functrans.numpy import asarray

__all__ = ["jacobian", "named_scope", "named_call", "ensure_compile_time_eval",
           "linear_transpose", "closure_convert", "typeof"]


jacobian = jacrev
"""``jacobian`` is ``jacrev``, as in JAX."""



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


