"""The linear algebra family: ``dot_general`` and the products built on it
(:mod:`~functrans.primitives.dot`), ``conv_general_dilated`` and the convolutions
(:mod:`~functrans.primitives.convolution`), and the matrix decompositions
(:mod:`~functrans.primitives.decompositions`).

Each primitive is declared, with all its rules, in its own module; this one gathers the
family under one name for ``lax`` and for code that reaches the primitives as
``linalg.dot_general_p`` (the backends' lowering tables, sharding propagation).
"""
from __future__ import annotations

from functrans.primitives import convolution as _convolution
from functrans.primitives import decompositions as _decompositions
from functrans.primitives import dot as _dot
from functrans.primitives.convolution import *  # noqa: F401,F403
from functrans.primitives.convolution import conv_general_dilated_p  # noqa: F401
from functrans.primitives.decompositions import *  # noqa: F401,F403
from functrans.primitives.decompositions import (cholesky_p, eigh_p, hessenberg,  # noqa: F401
                                                 hessenberg_p, lu_p, qr_p, schur, schur_p,
                                                 svd_p, triangular_solve_p)
from functrans.primitives.dot import *  # noqa: F401,F403
from functrans.primitives.dot import dot_general_p, place_result  # noqa: F401

__all__ = sorted(_dot.__all__ + _convolution.__all__ + _decompositions.__all__, key=str.lower)
