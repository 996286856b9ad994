"""Python's cyclic garbage collector, paused while a program is traced or compiled.

Tracing and compiling allocate tens of thousands of container objects (tracers, jaxpr
equations, the compiler's expressions and IR values). Each 700 of them start a collection of
the young generation, and every few of those one of the older generations; a full collection
scans the whole heap, which after importing NumPy, functrans and llvmlite is large.
Measured with ``gc.callbacks`` on the MLP train step's first compile: 18-22 ms of CPU time
in collections (a full one among them); with the collector paused, 9-10 ms, in the two
collections of the younger generations that run when the trace and the compile end (see
docs/performance.md). Those free what the block left in reference cycles (a compile's
llvmlite IR objects); a full collection the block would have run comes later, if at all,
when the process's own allocations call for one.

    >>> with paused():
    ...     pass
"""
from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def paused():
    """The collector off for the block, then on again. A collector the application turned
    off stays off, and a block inside another (a compile nested in a trace, a loop body
    compiled on its own) leaves it to the outer one. ``gc.collect()`` still works inside."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
