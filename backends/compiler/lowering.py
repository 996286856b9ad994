"""How a backend's lowering table is read: which primitives it runs natively, and how.

Each backend keeps one table keyed by the ``Primitive`` object (``backends/llvm/lowering.py``,
``backends/cuda/lowering.py``); this module holds what the tables share: how the fusion pass
handles a primitive on every target, and the lookup the coverage table uses.

    >>> from functrans.primitives import elementwise
    >>> fused_kind(elementwise.add_p, scalar_primitives={elementwise.add_p})
    'fused'
"""
from __future__ import annotations

from functrans import lax
from functrans._callbacks import io_callback_p, pure_callback_p
from functrans._custom_derivatives import custom_lin_p
from functrans._remat import remat_linear_p
from functrans.backends.compiler import decompose, fusion
from functrans.debug import debug_callback_p
from functrans.interpreters import inline
from functrans.ops import first_order_only_p
from functrans.primitives import linalg
from functrans.primitives.checks import check_p
from functrans.primitives.collectives import CollectivePrimitive, pvary_p
from functrans.primitives.reductions import cumulative_tangent_p
from functrans.primitives.special import random_gamma_grad_p
from functrans.sharding._constraints import sharding_constraint_p
from functrans.sharding._shard_map import shard_map_p

NO_SCALAR_CODE = "no scalar code in the backend's elementwise table: evaluated by NumPy"
NO_COMPLEX = "the backend computes no complex numbers: complex values stay in NumPy"
_CALL = "runs its body or callback as a call from the host"
# Primitives that every compiled backend leaves to their NumPy implementation, and why.
# Each backend's ``HOST`` table (primitive -> reason) starts from these.
SHARED_HOST = {
    **{p: NO_COMPLEX for p in (lax.complex_p, lax.real_p, lax.imag_p, lax.conj_p)},
    **{p: NO_SCALAR_CODE for p in (
        lax.bessel_i0e_p, lax.bessel_i1e_p, lax.igamma_p, lax.igammac_p, lax.igamma_grad_a_p,
        random_gamma_grad_p, lax.polygamma_p, lax.zeta_p, lax.regularized_incomplete_beta_p,
        lax.mulhi_p, lax.reduce_precision_p)},
    lax.fft_p: "no native FFT: NumPy's pocketfft",
    lax.bitcast_convert_type_p: "no native reinterpretation of bits: a NumPy view",
    lax.cumlogsumexp_p: "the native cumulative kernels do sum/prod/max/min only",
    cumulative_tangent_p: "the native cumulative kernels do sum/prod/max/min only",
    lax.top_k_p: "no native top_k: NumPy's argpartition",
    lax.linear_solve_p: "custom_linear_solve's solve is run as a call to a NumPy step",
    lax.rng_bit_generator_p: "no native generator: NumPy's Philox/threefry",
    lax.rng_uniform_p: "draws from the host's generator (stateful, as in XLA)",
    pure_callback_p: _CALL + ": a Python function",
    debug_callback_p: _CALL + ": a Python function with effects",
    io_callback_p: _CALL + ": a Python function with effects",
    check_p: "checkify's check: raises when a compiled program reaches a failing check "
             "(checkify itself takes it out of the program)",
    pvary_p: "pcast(to='varying'): a type annotation of shard_map, the identity on values",
    shard_map_p: _CALL + ": a per-shard region",
    sharding_constraint_p: "a placement annotation, the identity on values",
    custom_lin_p: "a linearization placeholder that transposition replaces; a program "
                  "holding it untransposed evaluates it in NumPy",
    remat_linear_p: _CALL + ": the recomputing half of a checkpoint's derivative",
    first_order_only_p: "a guard of segment_prod's derivative, the identity on values",
}


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
    other primitives before fusion), ``runtime`` (a collective, carried out by the pmap
    runtime between per-device programs) or ``host`` (its NumPy implementation between
    compiled parts)."""
    # the front end's inliner keeps its own tables by name
    if primitive.name in inline.INLINABLE or primitive.name in inline.FORWARDED:
        return "inlined"
    if primitive in decompose.DECOMPOSABLE:
        return "decomposed"
    if primitive in table:
        return "step"
    if isinstance(primitive, CollectivePrimitive):
        return "runtime"
    return fused_kind(primitive, scalar_primitives, extra_fused) or "host"
