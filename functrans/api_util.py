"""``jax.api_util``: flattening a Python function's pytree arguments and results, for
libraries that build transforms on ``functrans.extend.linear_util``.

    >>> from functrans import api_util, tree_util
    >>> from functrans.extend import linear_util as lu
    >>> leaves, tree = tree_util.tree_flatten(((1.0, 2.0),))
    >>> wrapped = lu.wrap_init(lambda p: {"s": p[0] + p[1]})
    >>> flat, out_tree = api_util.flatten_fun_nokwargs(wrapped, tree)
    >>> flat.call_wrapped(*leaves), out_tree()
    ([3.0], PyTreeDef({'s': *}))
"""
from __future__ import annotations

import inspect

from functrans.extend import linear_util as lu
from functrans.extend.linear_util import DebugInfo
from functrans.core import get_aval
from functrans.tree_util import tree_flatten, tree_unflatten

__all__ = ["debug_info", "flatten_fun", "flatten_fun_nokwargs", "fun_signature",
           "shaped_abstractify"]


def _flatten_fun(f, store, in_tree, *args_flat):
    args, kwargs = tree_unflatten(in_tree, args_flat)
    leaves, out_tree = tree_flatten(f(*args, **kwargs))
    store.store(out_tree)
    return leaves


def _flatten_fun_nokwargs(f, store, in_tree, *args_flat):
    leaves, out_tree = tree_flatten(f(*tree_unflatten(in_tree, args_flat)))
    store.store(out_tree)
    return leaves


def flatten_fun(fun: lu.WrappedFun, in_tree):
    """``fun`` (taking ``(args, kwargs)`` as a pytree) as a function of the flat leaves that
    returns flat leaves; also returns a thunk giving the output tree once it has run."""
    return lu.transformation_with_aux2(_flatten_fun, fun, in_tree)


def flatten_fun_nokwargs(fun: lu.WrappedFun, in_tree):
    """As :func:`flatten_fun` for a ``fun`` taking positional arguments only (``in_tree``
    is the tree of the argument tuple)."""
    return lu.transformation_with_aux2(_flatten_fun_nokwargs, fun, in_tree)


def fun_signature(fun):
    """``inspect.signature(fun)``, or None when it has none."""
    try:
        return inspect.signature(fun)
    except (ValueError, TypeError):
        return None


def debug_info(traced_for: str, fun, args, kwargs, *, static_argnums=(),
               static_argnames=()) -> DebugInfo:
    """What to call ``fun`` and its arguments in messages about a trace of it."""
    name = getattr(fun, "__qualname__", getattr(fun, "__name__", repr(fun)))
    signature = fun_signature(fun)
    names = ()
    if signature is not None:
        try:
            bound = signature.bind(*args, **kwargs)
            names = tuple(bound.arguments)
        except TypeError:
            names = ()
    return DebugInfo(traced_for, name, names)


def shaped_abstractify(x):
    """The abstract value (shape, dtype, weak type) of ``x``."""
    return get_aval(x)
