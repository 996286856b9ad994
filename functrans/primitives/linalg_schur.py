"""Schur and Hessenberg decompositions: the primitives behind ``jax.lax.linalg.schur`` and
``jax.lax.linalg.hessenberg`` (and ``functrans.scipy.linalg.schur`` / ``hessenberg``).

Their reference implementations call SciPy/LAPACK once per matrix of a batch; under ``jit``
the compiled backends run that implementation through their NumPy fallback. As in JAX, the
decompositions have no derivative rule (the Schur form is not a smooth function of the
matrix where eigenvalues cross), so differentiating through them raises.
"""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans.core import Primitive, ShapedArray
from functrans.primitives.linalg import _decomposition_batch, _per_matrix


def _check_square(name, operand):
    if operand.ndim < 2 or operand.shape[-1] != operand.shape[-2]:
        raise ValueError(f"{name}: the operand must be a (batch of) square matrices, got "
                         f"{operand.str_short()}")
    if not _dtypes.is_inexact(operand.dtype):
        raise TypeError(f"{name}: the operand must have a float or complex dtype, got "
                        f"{operand.str_short()}")


def _no_jvp(name):
    def rule(primals, tangents, **params):
        raise NotImplementedError(f"differentiation rule for '{name}' is not implemented "
                                  "(as in JAX, the decomposition has no derivative)")
    return rule


# =============================================================================================
# schur
# =============================================================================================

schur_p = Primitive("schur", multiple_results=True)


@schur_p.def_abstract_eval
def _schur_rule(operand, *, compute_schur_vectors):
    _check_square("schur", operand)
    out = ShapedArray(operand.shape, operand.dtype)
    return [out, out] if compute_schur_vectors else [out]


@schur_p.def_impl
def _schur_impl(operand, *, compute_schur_vectors):
    import scipy.linalg

    # A real matrix gets the real (quasi-triangular) form, a complex one the triangular form:
    # the output dtype is always the input dtype.
    output = "complex" if _dtypes.is_complex(operand.dtype) else "real"
    if operand.size == 0:
        outs = [operand.copy(), operand.copy()]
    else:
        outs = _per_matrix(lambda a: scipy.linalg.schur(a, output=output), operand)
    outs = [np.asarray(o).astype(operand.dtype, copy=False) for o in outs]
    return outs if compute_schur_vectors else outs[:1]


schur_p.jvp = _no_jvp("schur")
_decomposition_batch(schur_p)


def schur(x, *, compute_schur_vectors: bool = True, sort_eig_vals: bool = False,
          select_callable=None):
    """Schur decomposition ``x = Z T Z^H`` of a (batch of) square matrices, as
    ``jax.lax.linalg.schur``. Returns ``[T, Z]`` (``[T]`` without Schur vectors); ``T`` is
    quasi-upper-triangular for real input (2x2 blocks for complex eigenvalue pairs) and
    upper triangular for complex input.

    Example::

        t, z = schur(jnp.array([[1., 2.], [3., 4.]]))   # z @ t @ z.T == x
    """
    if sort_eig_vals or select_callable is not None:
        raise NotImplementedError("schur: sorting the eigenvalues (sort_eig_vals, "
                                  "select_callable) is not supported")
    return schur_p.bind(x, compute_schur_vectors=bool(compute_schur_vectors))


# =============================================================================================
# hessenberg
# =============================================================================================

hessenberg_p = Primitive("hessenberg", multiple_results=True)


@hessenberg_p.def_abstract_eval
def _hessenberg_rule(operand):
    _check_square("hessenberg", operand)
    n = operand.shape[-1]
    return [ShapedArray(operand.shape, operand.dtype),
            ShapedArray(operand.shape[:-2] + (max(n - 1, 0),), operand.dtype)]


@hessenberg_p.def_impl
def _hessenberg_impl(operand):
    from scipy.linalg import lapack

    n = operand.shape[-1]

    def one(a):
        # LAPACK gehrd's packed output, as XLA returns it: the Hessenberg matrix on and above
        # the first subdiagonal, the Householder vectors below it, and their scales ``tau``.
        gehrd, gehrd_lwork = lapack.get_lapack_funcs(("gehrd", "gehrd_lwork"), (a,))
        lwork = int(np.real(gehrd_lwork(n)[0])) if n > 1 else 1
        packed, tau, info = gehrd(a, lwork=max(lwork, 1), overwrite_a=False)
        if info != 0:
            raise RuntimeError(f"hessenberg: LAPACK gehrd failed (info={info})")
        return packed, tau[: n - 1]

    if operand.size == 0:
        return [operand.copy(), np.zeros(operand.shape[:-2] + (max(n - 1, 0),), operand.dtype)]
    packed, tau = _per_matrix(one, operand)
    return [packed.astype(operand.dtype, copy=False), tau.astype(operand.dtype, copy=False)]


hessenberg_p.jvp = _no_jvp("hessenberg")
_decomposition_batch(hessenberg_p)


def hessenberg(a):
    """Reduce a (batch of) square matrices to upper Hessenberg form, as
    ``jax.lax.linalg.hessenberg``. Returns ``(packed, taus)`` in LAPACK's layout: the
    Hessenberg matrix on and above the first subdiagonal, and below it the Householder
    vectors ``v_i`` (with an implicit leading 1) of ``Q = prod_i (I - taus[i] v_i v_i^H)``.

    Example::

        packed, taus = hessenberg(jnp.eye(3))   # jnp.triu(packed, -1) is the Hessenberg form
    """
    return tuple(hessenberg_p.bind(a))


__all__ = ["schur", "hessenberg", "schur_p", "hessenberg_p"]
