"""How a backend's lowering table is read: which primitives it runs natively, and how.

Each backend keeps one table keyed by the ``Primitive`` object (``backends/llvm/lowering.py``,
``backends/cuda/lowering.py``); this module holds what the tables share: how the fusion pass
handles a primitive on every target, and the lookup the coverage table uses.

    >>> from functrans.primitives import elementwise
    >>> fused_kind(elementwise.add_p, scalar_primitives={elementwise.add_p})
    'fused'
"""
from __future__ import annotations

from functrans.backends.compiler import decompose, fusion
from functrans.interpreters import inline
from functrans.primitives import linalg


def fused_kind(primitive, scalar_primitives, extra_fused=()) -> str | None:
    """How the shared fusion pass runs ``primitive`` on a target whose scalar code covers
    ``scalar_primitives`` (and whose own fusion rules cover ``extra_fused``): ``fused``
    (inside a loop kernel), ``reduce``, ``dot`` (a BLAS-like call), or None (not by fusion)."""
    if primitive in fusion.IDENTITY_PRIMS or primitive in fusion.MOVEMENT_PRIMS or \
            primitive in extra_fused:
        return "fused"
    if primitive in fusion.ELEMENTWISE_PRIMS:
        return "fused" if primitive in scalar_primitives else None
    if primitive in fusion.REDUCE_MONOIDS:
        return "reduce"
    if primitive is linalg.dot_general_p:
        return "dot"
    return None


def native_kind(primitive, table: dict, scalar_primitives, extra_fused=()) -> str:
    """Where ``primitive`` runs on a backend: a fused kind (see :func:`fused_kind`),
    ``step`` (a native step of the backend's ``table``), ``inlined`` (a call spliced into
    the program by the inliner), ``decomposed`` (rewritten into
    other primitives before fusion) or ``host`` (its NumPy implementation between compiled
    parts)."""
    # the front end's inliner keeps its own tables by name
    if primitive.name in inline.INLINABLE or primitive.name in inline.FORWARDED:
        return "inlined"
    if primitive in decompose.DECOMPOSABLE:
        return "decomposed"
    if primitive in table:
        return "step"
    return fused_kind(primitive, scalar_primitives, extra_fused) or "host"
