"""The axis environment: axis names bound by a pmap being staged (or by
``make_jaxpr(..., axis_env=[(name, size)])``), so collectives over them can be traced.

vmap binds its axis names on the trace stack instead (``batching.find_axis_main``); a name
bound here has no values attached, only a size, because the staged program runs once per
member later.
"""
from __future__ import annotations

from contextlib import contextmanager

from functrans import core


@contextmanager
def extend_axis_env_nd(axes):
    """Bind each ``(name, size)`` in ``axes`` for the duration of the block.

        >>> with extend_axis_env_nd([("i", 4)]):   # doctest: +SKIP
        ...     make_jaxpr(lambda x: psum(x, "i"))(1.0)
    """
    axes = [(name, int(size)) for name, size in axes]
    env = core._state.axis_env
    env.extend(axes)
    try:
        yield
    finally:
        del env[len(env) - len(axes):]
