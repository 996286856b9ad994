"""The matrix exponential ``expm`` (Pade approximant with scaling and squaring) and its
Frechet derivative ``expm_frechet``: exported by ``functrans.scipy.linalg``, and below both it
and the special matrices' module, which builds on them."""
from __future__ import annotations

import math

import numpy as np

from functrans import lax
from functrans import numpy as jnp
from functrans.core import get_aval
from functrans.numpy import linalg as np_linalg
from functrans.numpy._promotion import promote_dtypes_inexact


def _pade13_coefficients():
    """The numerator coefficients ``b_k = (26 - k)! 13! / (26! k! (13 - k)!)`` of the
    [13/13] Pade approximant of ``exp``, scaled so ``b_0`` is ``64764752532480000``."""
    m = 13
    exact = [math.factorial(2 * m - k) * math.factorial(m)
             / (math.factorial(2 * m) * math.factorial(k) * math.factorial(m - k))
             for k in range(m + 1)]
    return [c / exact[0] * 64764752532480000.0 for c in exact]


# ||A||_1 below which the [13/13] approximant is accurate to double precision (Higham 2005)
_THETA_13 = 5.371920351148152


def expm(A, *, upper_triangular: bool = False, max_squarings: int = 16):
    """The matrix exponential ``sum_k A**k / k!``, by the [13/13] Pade approximant with
    scaling and squaring (Higham 2005). ``A`` may be a stack of square matrices.

    The number of squarings depends on the norm of ``A`` but the program does not: it
    always runs ``max_squarings`` steps and keeps the ones it needs, so it works under
    ``jit``, ``vmap`` and reverse-mode ``grad``. Matrices with ``||A||_1`` above
    ``5.37 * 2**max_squarings`` give NaN.

        >>> expm(jnp.zeros((2, 2)))
        Array([[1., 0.],
               [0., 1.]], dtype=float32)
    """
    del upper_triangular
    (A,) = promote_dtypes_inexact(A)
    shape = get_aval(A).shape
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ValueError(f"expm: expected a square matrix (or a stack of them), got shape {shape}")
    n = get_aval(A).shape[-1]
    b = _pade13_coefficients()
    norm = jnp.max(jnp.sum(jnp.abs(A), axis=-2), axis=-1)
    squarings = jnp.maximum(0.0, jnp.ceil(jnp.log2(norm / _THETA_13)))
    squarings = jnp.where(norm == 0, 0.0, squarings)
    A = A / jnp.exp2(squarings)[..., None, None].astype(A.dtype)
    eye = jnp.broadcast_to(jnp.eye(n, dtype=A.dtype), get_aval(A).shape)
    A2 = A @ A
    A4 = A2 @ A2
    A6 = A4 @ A2
    U = A @ (A6 @ (b[13] * A6 + b[11] * A4 + b[9] * A2)
             + b[7] * A6 + b[5] * A4 + b[3] * A2 + b[1] * eye)
    V = A6 @ (b[12] * A6 + b[10] * A4 + b[8] * A2) + b[6] * A6 + b[4] * A4 + b[2] * A2 \
        + b[0] * eye
    R = np_linalg.solve(V - U, V + U)

    def square(i, R):
        needed = (i < squarings)[..., None, None]
        return jnp.where(needed, R @ R, R)

    R = lax.fori_loop(0, int(max_squarings), square, R)
    return jnp.where((squarings > max_squarings)[..., None, None], np.nan, R)


def expm_frechet(A, E, *, method: str | None = None, compute_expm: bool = True):
    """The Frechet derivative of ``expm`` at ``A`` in the direction ``E``,
    ``L = d/dt expm(A + t E)`` at ``t = 0``; with ``compute_expm`` also ``expm(A)``, as
    ``(expm(A), L)``. Uses the identity ``expm([[A, E], [0, A]]) = [[expm(A), L],
    [0, expm(A)]]``, for every ``method`` (``None``, ``'SPS'`` or ``'blockEnlarge'``).
    Leading axes are batch axes.

        >>> expm_frechet(jnp.zeros((1, 1)), jnp.ones((1, 1)), compute_expm=False)
        Array([[1.]], dtype=float32)
    """
    if method not in (None, "SPS", "blockEnlarge"):
        raise ValueError(f"expm_frechet: method must be None, 'SPS' or 'blockEnlarge', got "
                         f"{method!r}")
    A, E = promote_dtypes_inexact(A, E)
    shape_a, shape_e = jnp.shape(A), jnp.shape(E)
    if len(shape_a) < 2 or shape_a[-1] != shape_a[-2] or shape_a != shape_e:
        raise ValueError(f"expm_frechet: A and E must be square matrices of the same shape, "
                         f"got {shape_a} and {shape_e}")
    n = shape_a[-1]
    top = jnp.concatenate([A, E], axis=-1)
    bottom = jnp.concatenate([jnp.zeros_like(A), A], axis=-1)
    big = expm(jnp.concatenate([top, bottom], axis=-2))
    derivative = big[..., :n, n:]
    if compute_expm:
        return big[..., :n, :n], derivative
    return derivative
