"""Debugging inside transformed code: ``debug.print`` and ``debug.callback``.

Both stage a ``debug_callback`` equation: an effectful primitive with no outputs, kept by
dead-code elimination and run in program order when the program runs. Under ``vmap`` the
callback runs once per example; under ``grad`` it sees primal values and does not change
the derivative.

    >>> import functrans, functrans.numpy as jnp
    >>> @functrans.jit
    ... def f(x):
    ...     functrans.debug.print("x = {}", x)
    ...     return x * 2
    >>> _ = f(jnp.arange(2.0))
    x = [0. 1.]
"""
from __future__ import annotations

import string
import sys
import threading
from typing import Callable

import numpy as np

from functrans import core, tree_util
from functrans.core import Primitive, get_aval
from functrans.interpreters import ad, batching

from functrans.sharding._visualize import visualize_array_sharding, visualize_sharding  # noqa: E402,F401
from functrans._spmd import current_device_index
from functrans.numpy import asarray

__all__ = ["print", "callback", "visualize_array_sharding", "visualize_sharding"]

_print_lock = threading.Lock()

debug_callback_p = Primitive("debug_callback", multiple_results=True)
debug_callback_p.effectful = True


@debug_callback_p.def_abstract_eval
def _debug_callback_abstract_eval(*avals, callback, batch_index):
    return []


@debug_callback_p.def_impl
def _debug_callback_impl(*args, callback, batch_index):
    callback(*[np.asarray(a) for a in args])
    return []


def _debug_callback_jvp(primals, tangents, *, callback, batch_index):
    debug_callback_p.bind(*primals, callback=callback, batch_index=batch_index)
    return [], []


def _debug_callback_batch(vals, dims, *, callback, batch_index):
    size = batching.batch_size_of(vals, dims)
    vals = [batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims)]

    def per_example(*batched):
        for i in range(size):
            callback(*[b[i] for b in batched])

    debug_callback_p.bind(*vals, callback=per_example, batch_index=batch_index)
    return [], []


def _debug_callback_transpose(cts, *args, callback, batch_index):
    return [None] * len(args)


debug_callback_p.jvp = _debug_callback_jvp
debug_callback_p.batch = _debug_callback_batch
debug_callback_p.transpose = _debug_callback_transpose


def _strip_tangents(x):
    while isinstance(x, ad.JVPTracer):
        x = x.primal
    return x


def callback(fn: Callable, *args, ordered: bool = False, **kwargs) -> None:
    """Call ``fn(*args, **kwargs)`` with concrete NumPy values when the program runs, also
    inside ``jit``, ``vmap``, ``grad`` and loop bodies."""
    leaves, tree = tree_util.tree_flatten((args, kwargs))
    leaves = [_strip_tangents(x) for x in leaves]

    def flat_callback(*values):
        a, kw = tree_util.tree_unflatten(tree, list(values))
        fn(*a, **kw)

    arrays = [x if isinstance(x, core.Tracer) else _as_array(x) for x in leaves]
    debug_callback_p.bind(*arrays, callback=flat_callback, batch_index=None)


def _as_array(x):
    try:
        get_aval(x)
    except TypeError:
        raise TypeError(f"debug.callback arguments must be arrays, got {type(x).__name__}") from None
    return asarray(x)


class _Formatter(string.Formatter):
    def format_field(self, value, format_spec):
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value.item()
        return super().format_field(value, format_spec)


def print(fmt: str, *args, ordered: bool = False, **kwargs) -> None:  # noqa: A001
    """``print(fmt.format(*args, **kwargs))`` when the program runs (values are concrete).
    Inside ``pmap`` each line starts with the device position, e.g. ``[device 1]``."""
    def do_print(*a, **kw):
        device = current_device_index()
        prefix = "" if device is None else f"[device {device}] "
        line = prefix + _Formatter().format(fmt, *a, **kw) + "\n"
        with _print_lock:  # device threads print whole lines
            sys.stdout.write(line)

    callback(do_print, *args, **kwargs)
