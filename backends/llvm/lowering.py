"""The llvm backend's lowering table, keyed by the ``Primitive`` object.

The shared fusion pass turns elementwise ops (scalar code in :mod:`scalar_ops`), data
movement, reductions and ``dot_general`` into loop kernels and BLAS calls. Every primitive
that instead becomes a native step of its own is a row of :data:`STEPS`: its lowering takes
the NumPy fallback step the fusion pass left, and returns the native step, or None when
this instance (its dtypes, a body that needs NumPy) stays on the host. A primitive in
neither place runs its NumPy implementation between compiled segments.

    >>> from functrans.primitives.sorting import sort_p
    >>> sort_p in STEPS
    True
"""
from __future__ import annotations

from functrans.backends.compiler import lowering
from functrans.backends.llvm import along_axis, control_flow, indexing, lapack, scalar_ops, sorting
from functrans.primitives import control_flow as control_prims
from functrans.primitives import indexing as indexing_prims
from functrans.primitives import linalg, reductions
from functrans.primitives.sorting import sort_p


def _control(step, program, target, in_body):
    return control_flow.lower_control(step, program, target)


def _cumulative(step, program, target, in_body):
    return along_axis.lower_cumulative(step, target)


def _sort(step, program, target, in_body):
    # short lines sort natively only inside a loop or branch body, where that keeps the
    # whole loop native: at the top level NumPy sorts them as fast
    return sorting.lower_sort(step, program, target, short_lines=in_body)


def _linalg(step, program, target, in_body):
    return lapack.lower_linalg(step)


def _scatter(step, program, target, in_body):
    return indexing.lower_scatter(step, program, target)


# primitive -> lowering(fallback_step, program, target, in_body) -> native step or None
STEPS = {
    control_prims.while_p: _control, control_prims.scan_p: _control,
    control_prims.cond_p: _control,
    reductions.cumsum_p: _cumulative, reductions.cumprod_p: _cumulative,
    reductions.cummax_p: _cumulative, reductions.cummin_p: _cumulative,
    sort_p: _sort,
    linalg.cholesky_p: _linalg, linalg.triangular_solve_p: _linalg,
    indexing_prims.scatter_p: _scatter, indexing_prims.scatter_add_p: _scatter,
    indexing_prims.scatter_mul_p: _scatter, indexing_prims.scatter_min_p: _scatter,
    indexing_prims.scatter_max_p: _scatter,
}

# primitives fused by rules of this backend's own (the shared table lacks them)
EXTRA_FUSED = (indexing_prims.gather_p,)


def native_kind(primitive) -> str:
    """``fused``, ``reduce``, ``dot``, ``step`` or ``host``: where ``primitive`` runs."""
    return lowering.native_kind(primitive, STEPS, scalar_ops.EMITTERS, EXTRA_FUSED)
