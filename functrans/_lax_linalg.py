"""``functrans.lax.linalg``: matrix decompositions and triangular solves (as ``jax.lax.linalg``)."""
from functrans.primitives.linalg import cholesky, eigh, lu, qr, svd, triangular_solve  # noqa: F401
from functrans.primitives.linalg_schur import hessenberg, schur  # noqa: F401

__all__ = ["cholesky", "eigh", "hessenberg", "lu", "qr", "schur", "svd", "triangular_solve"]
