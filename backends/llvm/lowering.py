"""The llvm backend's lowering table, keyed by the ``Primitive`` object.

The shared fusion pass turns elementwise ops (scalar code in :mod:`scalar_ops`), data
movement, reductions and ``dot_general`` into loop kernels and BLAS calls. Every primitive
that instead becomes a native step of its own is a row of :data:`STEPS`: its lowering takes
the NumPy fallback step the fusion pass left, and returns the native step, or None when
this instance (its dtypes, a body that needs NumPy) stays on the host. A primitive in
neither place runs its NumPy implementation between compiled segments, and is a row of
:data:`HOST` with the reason, as is one that stays on the host for some instances.

    >>> from functrans.primitives.sorting import sort_p
    >>> sort_p in STEPS
    True
"""
from __future__ import annotations

from functrans import lax
from functrans.backends.compiler import lowering
from functrans.backends.llvm import (along_axis, control_flow, convolution, indexing, lapack,
                                     scalar_ops, sorting)
from functrans.primitives import control_flow as control_prims
from functrans.primitives import indexing as indexing_prims
from functrans.primitives import linalg, linalg_schur, reductions
from functrans.primitives.sorting import sort_p


# primitive -> lowering(fallback_step, program, target, in_body) -> native step or None
# (read by the lower_native_steps pass: see functrans.backends.compiler.native_steps)
STEPS = {
    **dict.fromkeys((control_prims.while_p, control_prims.scan_p, control_prims.cond_p),
                    control_flow.lower_control),
    **dict.fromkeys((reductions.cumsum_p, reductions.cumprod_p, reductions.cummax_p,
                     reductions.cummin_p), along_axis.lower_cumulative),
    sort_p: sorting.lower_sort,
    linalg.cholesky_p: lapack.lower_linalg, linalg.triangular_solve_p: lapack.lower_linalg,
    linalg.conv_general_dilated_p: convolution.lower_convolution,
    **dict.fromkeys((indexing_prims.scatter_p, indexing_prims.scatter_add_p,
                     indexing_prims.scatter_mul_p, indexing_prims.scatter_min_p,
                     indexing_prims.scatter_max_p), indexing.lower_scatter),
}

# primitives fused by rules of this backend's own (the shared table lacks them)
EXTRA_FUSED = (indexing_prims.gather_p,)

_NO_LAPACK = ("only cholesky and triangular_solve are linked from LAPACK: the other "
              "decompositions run NumPy/SciPy")
# primitive -> why this backend leaves it (or some of its instances) to NumPy
HOST = {
    **lowering.SHARED_HOST,
    lax.digamma_p: lowering.NO_SCALAR_CODE,
    lax.erf_inv_p: "float64 erf_inv has no scalar code (float32 is native)",
    **{p: _NO_LAPACK for p in (linalg.lu_p, linalg.qr_p, linalg.eigh_p, linalg.svd_p,
                               linalg_schur.schur_p, linalg_schur.hessenberg_p)},
    sort_p: ("short lines at the top level are sorted by NumPy (as fast); lines of "
             "RADIX_MIN_LENGTH and more, and sorts in loop bodies, are native"),
    lax.conv_general_dilated_p: ("decomposed into im2col + BLAS only without batch "
                                 "grouping and input dilation; other convolutions run NumPy"),
}


def native_kind(primitive) -> str:
    """Where ``primitive`` runs: see :func:`lowering.native_kind`."""
    return lowering.native_kind(primitive, STEPS, scalar_ops.EMITTERS, EXTRA_FUSED)
