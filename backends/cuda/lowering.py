"""The cuda backend's lowering table, keyed by the ``Primitive`` object.

The shared fusion pass turns elementwise ops (CUDA C from :mod:`scalar_ops`), data
movement, gathers, reductions and ``dot_general`` into kernels and cuBLAS calls. Every
primitive that instead becomes kernels of its own is a row of :data:`STEPS`: its lowering
takes the NumPy fallback step the fusion pass left and returns the native step, or None
when this instance stays on the host. A primitive in neither place runs its NumPy
implementation between kernels, and is a row of :data:`HOST` with the reason, as is one
that stays on the host for some instances.

    >>> from functrans.primitives.control_flow import scan_p
    >>> scan_p in STEPS
    True
"""
from __future__ import annotations

from functrans.backends.compiler import lowering
from functrans.backends.cuda import along_axis, control_flow, indexing, scalar_ops
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
                     reductions.cummin_p, reductions.argmax_p, reductions.argmin_p),
                    along_axis.lower_along_axis),
    **dict.fromkeys((indexing_prims.scatter_p, indexing_prims.scatter_add_p,
                     indexing_prims.scatter_mul_p, indexing_prims.scatter_min_p,
                     indexing_prims.scatter_max_p), indexing.lower_scatter),
}

# primitives fused by rules of this backend's own (the shared table lacks them)
EXTRA_FUSED = (indexing_prims.gather_p,)

# primitive -> why this backend leaves it (or some of its instances) to NumPy on host copies
HOST = {
    **lowering.SHARED_HOST,
    **{p: "no cuSOLVER lowering: NumPy/SciPy on host copies" for p in (
        linalg.cholesky_p, linalg.triangular_solve_p, linalg.lu_p, linalg.qr_p, linalg.eigh_p,
        linalg.svd_p, linalg_schur.schur_p, linalg_schur.hessenberg_p)},
    linalg.dot_general_p: "cuBLAS multiplies floats: integer products run NumPy",
    sort_p: "no CUDA sort: NumPy on host copies",
}


def native_kind(primitive) -> str:
    """Where ``primitive`` runs: see :func:`lowering.native_kind`."""
    return lowering.native_kind(primitive, STEPS, scalar_ops.EMITTERS, EXTRA_FUSED)
