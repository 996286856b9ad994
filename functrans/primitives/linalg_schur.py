"""The Schur and Hessenberg primitives, under the module name they had before they joined the
other decompositions in :mod:`functrans.primitives.decompositions`."""
from __future__ import annotations

from functrans.primitives.decompositions import hessenberg, hessenberg_p, schur, schur_p

__all__ = ["schur", "hessenberg", "schur_p", "hessenberg_p"]
