"""``functrans.lax.linalg``: matrix decompositions and triangular solves (as ``jax.lax.linalg``)."""
from functrans.primitives.decompositions import (cholesky, eigh, hessenberg, lu, qr,  # noqa: F401
                                                 schur, svd, triangular_solve)

__all__ = ["cholesky", "eigh", "hessenberg", "lu", "qr", "schur", "svd", "triangular_solve"]
