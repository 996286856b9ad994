"""``functrans.lax.linalg``: matrix decompositions and triangular solves (as ``jax.lax.linalg``)."""
from functrans.primitives.linalg import cholesky, eigh, lu, qr, svd, triangular_solve  # noqa: F401

__all__ = ["cholesky", "eigh", "lu", "qr", "svd", "triangular_solve"]
