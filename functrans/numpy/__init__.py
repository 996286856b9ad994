"""``functrans.numpy``: the ``jax.numpy`` surface, built on the primitives.

    >>> import functrans.numpy as jnp
    >>> jnp.sum(jnp.arange(4.0) * 2.0)
    Array(12., dtype=float32)

The functions are grouped by topic in private modules: creation (``_creation``),
elementwise math (``_ufuncs``), reductions (``_reductions``), shape manipulation
(``_shape``), products and einsum (``_contractions``), sorting and data-dependent selection
(``_sorting``), polynomials and signal helpers (``_polynomial``), dtype and array queries
(``_array_info``), scalar types (``_scalar_types``) and indexing (``_indexing``), plus the
public ``linalg`` submodule.
"""
from __future__ import annotations

import numpy as _np

from functrans.numpy import _indexing  # noqa: F401
from functrans.numpy import fft  # noqa: F401
from functrans.numpy import linalg  # noqa: F401
from functrans.numpy._array_info import (  # noqa: F401
    apply_along_axis, apply_over_axes, array_equal, array_equiv, can_cast, finfo, iinfo,
    iscomplexobj, isrealobj, isscalar, iterable, ndim, promote_types, ravel_multi_index,
    result_type, shape, size, unravel_index, vectorize)
from functrans.numpy._contractions import (  # noqa: F401
    cross, dot, einsum, inner, kron, matmul, outer, tensordot, vdot, vecdot)
from functrans.numpy._creation import (  # noqa: F401
    arange, array, asarray, copy, diag, diag_indices, diagflat, empty, empty_like, eye,
    fromfunction, full, full_like, geomspace, identity, indices, ix_, linspace, logspace,
    meshgrid, ones, ones_like, tri, tril, tril_indices, triu, triu_indices, zeros, zeros_like)
from functrans.numpy._polynomial import (  # noqa: F401
    bincount, convolve, corrcoef, correlate, cov, diff, ediff1d, gradient, histogram,
    histogram_bin_edges, interp, polyadd, polyder, polyfit, polyint, polymul, polysub, polyval,
    trapezoid, vander)
from functrans.numpy._reductions import (  # noqa: F401
    all, amax, amin, any, argmax, argmin, average, count_nonzero, cumprod, cumproduct, cumsum,
    cumulative_prod, cumulative_sum, max, mean, median, min, nanargmax, nanargmin, nancumprod,
    nancumsum, nanmax, nanmean, nanmedian, nanmin, nanpercentile, nanprod, nanquantile, nanstd,
    nansum, nanvar, percentile, prod, ptp, quantile, std, sum, var)
from functrans.numpy._scalar_types import (  # noqa: F401
    bfloat16, bool_, cdouble, character, complex64, complex128, complex_, complexfloating,
    csingle, double, dtype, flexible, float16, float32, float64, float_, floating, generic, half,
    inexact, int8, int16, int32, int64, int_, integer, isdtype, issubdtype, number, object_,
    signedinteger, single, uint, uint8, uint16, uint32, uint64, unsignedinteger)
from functrans.numpy._shape import (  # noqa: F401
    append, array_split, atleast_1d, atleast_2d, atleast_3d, broadcast_arrays, broadcast_to,
    column_stack, concat, concatenate, delete, diagonal, dsplit, dstack, expand_dims,
    flip, fliplr, flipud, hsplit, hstack, insert, matrix_transpose, moveaxis, pad, permute_dims,
    ravel, repeat, reshape, resize, roll, rollaxis, rot90, row_stack, split, squeeze, stack,
    swapaxes, take, take_along_axis, tile, trace, transpose, unstack, vsplit, vstack)
from functrans.numpy._sorting import (  # noqa: F401
    argpartition, argsort, argwhere, choose, compress, digitize, extract, flatnonzero,
    intersect1d, isin, lexsort, nonzero, partition, searchsorted, setdiff1d, setxor1d, sort,
    sort_complex, union1d, unique, unique_all, unique_counts, unique_inverse, unique_values)
from functrans.numpy._ufuncs import (  # noqa: F401
    abs, absolute, acos, acosh, add, allclose, angle, arccos, arccosh, arcsin, arcsinh, arctan,
    arctan2, arctanh, around, asin, asinh, atan, atan2, atanh, bitwise_and, bitwise_count,
    bitwise_invert, bitwise_left_shift, bitwise_not, bitwise_or, bitwise_right_shift,
    bitwise_xor, cbrt, ceil, clip, conj, conjugate, copysign, cos, cosh, deg2rad, degrees,
    divide, divmod, equal, exp, exp2, expm1, fabs, fix, float_power, floor, floor_divide, fmax,
    fmin, fmod, frexp, gcd, greater, greater_equal, heaviside, hypot, imag, invert, isclose,
    iscomplex, isfinite, isinf, isnan, isneginf, isposinf, isreal, lcm, ldexp, left_shift, less,
    less_equal, log, log1p, log2, log10, logaddexp, logaddexp2, logical_and, logical_not,
    logical_or, logical_xor, maximum, minimum, mod, modf, multiply, nan_to_num, negative,
    nextafter, not_equal, positive, pow, power, rad2deg, radians, real, reciprocal, remainder,
    right_shift, rint, round, round_, select, sign, signbit, sin, sinc, sinh, sqrt, square,
    subtract, tan, tanh, true_divide, trunc, where)
from functrans.numpy._promotion import broadcast_shapes  # noqa: F401
from functrans._dtypes import float0  # noqa: F401
from functrans.numpy._array_methods import astype, view  # noqa: F401
from functrans.numpy._more import *  # noqa: F401,F403
from functrans.numpy._extras import *  # noqa: F401,F403
from functrans.numpy._ufunc import frompyfunc, ufunc  # noqa: F401
from functrans._array import Array
from functrans.core import Tracer

pi = _np.pi
e = _np.e
euler_gamma = _np.euler_gamma
inf = _np.inf
nan = _np.nan
newaxis = None


class _ArrayMeta(type):
    """``isinstance(x, jnp.ndarray)`` holds for arrays and for traced values alike."""

    def __instancecheck__(cls, instance):
        return isinstance(instance, (Array, Tracer))


class ndarray(metaclass=_ArrayMeta):  # noqa: N801 - NumPy's name
    """The array type for ``isinstance`` checks (matches Arrays and tracers)."""


del annotations
