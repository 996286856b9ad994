"""``functrans.numpy``: the ``jax.numpy`` surface, built on the primitives.

    >>> import functrans.numpy as jnp
    >>> jnp.sum(jnp.arange(4.0) * 2.0)
    Array(12., dtype=float32)

The functions are grouped by topic in private modules: creation (``_creation``),
elementwise math (``_ufuncs``), the ``ufunc`` class (``_ufunc_objects``), reductions
(``_reductions``), shape manipulation (``_shape``), products and einsum (``_contractions``),
sorting and data-dependent selection (``_sorting``), polynomials and signal helpers
(``_polynomial``), dtype and array queries (``_array_info``), scalar types
(``_scalar_types``), indexing (``_indexing``), index tricks (``_index_tricks``), out-of-place
writes (``_functional_writes``), window functions (``_window_functions``), bit packing
(``_bit_packing``) and host data exchange (``_io``), plus the public ``linalg`` and ``fft``
submodules.
"""
from __future__ import annotations

import numpy as _np

from functrans.numpy import _indexing  # noqa: F401
from functrans.numpy import fft  # noqa: F401
from functrans.numpy import linalg  # noqa: F401
from functrans.numpy._array_info import (  # noqa: F401
    apply_along_axis, apply_over_axes, array_equal, array_equiv, can_cast, finfo, iinfo,
    iscomplexobj, isrealobj, isscalar, iterable, ndim, piecewise, promote_types, ravel_multi_index,
    result_type, shape, size, unravel_index, vectorize)
from functrans.numpy._contractions import (  # noqa: F401
    cross, dot, einsum, einsum_path, inner, kron,
    matmul, matvec, outer, tensordot, vdot, vecdot, vecmat)
from functrans.numpy._creation import (  # noqa: F401
    arange, array, asarray, copy, diag,
    diag_indices, diag_indices_from, diagflat, empty, empty_like, eye,
    fromfunction, full, full_like, geomspace, identity, indices, ix_, linspace, logspace,
    mask_indices, meshgrid, ones, ones_like, tri,
    tril, tril_indices, tril_indices_from, triu, triu_indices, triu_indices_from, zeros, zeros_like)
from functrans.numpy._polynomial import (  # noqa: F401
    bincount, convolve, corrcoef, correlate, cov, diff, ediff1d, gradient, histogram,
    histogram2d, histogram_bin_edges, histogramdd, interp, poly, polyadd, polyder,
    polydiv, polyfit, polyint, polymul, polysub, polyval,
    roots, trapezoid, unwrap, vander)
from functrans.numpy._reductions import (  # noqa: F401
    all, amax, amin, any, argmax, argmin, average, count_nonzero, cumprod, cumproduct, cumsum,
    cumulative_prod, cumulative_sum, max, mean, min, nanargmax, nanargmin, nancumprod,
    nancumsum, nanmax, nanmean, nanmin, nanprod, nanstd,
    nansum, nanvar, prod, ptp, std, sum, var)
from functrans.numpy._scalar_types import (  # noqa: F401
    bfloat16, bool_, cdouble, character, complex64, complex128, complex_, complexfloating,
    csingle, double, dtype, flexible, float16, float32, float64, float_, floating, generic, half,
    inexact, int8, int16, int32, int64, int_, integer, isdtype, issubdtype, number, object_,
    signedinteger, single, uint, uint8, uint16, uint32, uint64, unsignedinteger)
from functrans.numpy._shape import (  # noqa: F401
    append, array_split, atleast_1d, atleast_2d, atleast_3d, block, broadcast_arrays, broadcast_to,
    column_stack, concat, concatenate, delete, diagonal, dsplit, dstack, expand_dims,
    flip, fliplr, flipud, hsplit, hstack, insert, matrix_transpose, moveaxis, permute_dims,
    ravel, reshape, resize, roll, rollaxis, rot90, row_stack, split, squeeze, stack,
    swapaxes, take, take_along_axis, tile, transpose, trim_zeros, unstack, vsplit, vstack)
from functrans.numpy._sorting import (  # noqa: F401
    argpartition, argsort, argwhere, choose, compress, digitize, extract, flatnonzero,
    intersect1d, isin, lexsort, nonzero, partition, searchsorted, setdiff1d, setxor1d, sort,
    sort_complex, union1d, unique, unique_all, unique_counts, unique_inverse, unique_values)
from functrans.numpy._ufuncs import (  # noqa: F401
    abs, absolute, acos, acosh, add, angle, arccos, arccosh, arcsin, arcsinh, arctan,
    arctan2, arctanh, around, asin, asinh, atan, atan2, atanh, bitwise_and, bitwise_count,
    bitwise_invert, bitwise_left_shift, bitwise_not, bitwise_or, bitwise_right_shift,
    bitwise_xor, cbrt, ceil, clip, conj, conjugate, copysign, cos, cosh, deg2rad, degrees,
    divide, divmod, equal, exp, exp2, expm1, fabs, fix, float_power, floor, floor_divide, fmax,
    fmin, fmod, frexp, gcd, greater, greater_equal, heaviside, hypot, i0, imag, invert, isclose,
    iscomplex, isfinite, isinf, isnan, isneginf, isposinf, isreal, lcm, ldexp, left_shift, less,
    less_equal, log, log1p, log2, log10, logaddexp, logaddexp2, logical_and, logical_not,
    logical_or, logical_xor, maximum, minimum, mod, modf, multiply, nan_to_num, negative,
    nextafter, not_equal, positive, pow, power, rad2deg, radians, real, reciprocal, remainder,
    right_shift, rint, round, round_, select, sign, signbit, sin, sinc, sinh, spacing, sqrt, square,
    subtract, tan, tanh, true_divide, trunc)
from functrans.numpy._order_statistics import (  # noqa: F401
    median, nanmedian, nanpercentile, nanquantile, percentile, quantile)
from functrans.numpy._padding import pad  # noqa: F401
from functrans.numpy._reductions import allclose, trace  # noqa: F401
from functrans.numpy._sorting import repeat, where  # noqa: F401
from functrans.numpy._promotion import broadcast_shapes  # noqa: F401
from functrans._dtypes import float0  # noqa: F401
from functrans.numpy._array_methods import astype, install_array_methods, view  # noqa: F401
from functrans.numpy._bit_packing import packbits, unpackbits  # noqa: F401
from functrans.numpy._functional_writes import (  # noqa: F401
    fill_diagonal, place, put, put_along_axis)
from functrans.numpy._index_tricks import c_, index_exp, mgrid, ogrid, r_, s_  # noqa: F401
from functrans.numpy._io import (  # noqa: F401
    array_repr, array_str, from_dlpack, frombuffer, fromfile, fromiter, fromstring,
    get_printoptions, load, printoptions, save, savez, set_printoptions)
from functrans.numpy._scalar_types import ComplexWarning, ml_dtype_scalar_types  # noqa: F401
from functrans.numpy._ufunc_objects import frompyfunc, ufunc  # noqa: F401
from functrans.numpy._window_functions import (  # noqa: F401
    bartlett, blackman, hamming, hanning, kaiser)

# jnp.add, jnp.maximum, ... are ufunc objects (jnp.add.reduce, .accumulate, .outer, .at), as
# in JAX: the fourteen functions JAX makes ufuncs, each calling the function it wraps
from functrans.numpy._ufunc_objects import builtin_ufuncs as _builtin_ufuncs  # noqa: E402
globals().update(_builtin_ufuncs())
del _builtin_ufuncs

# shape functions take typed key arrays, applied to each key word, as JAX's do
from functrans.numpy import _key_words  # noqa: E402
for _name, _positions in _key_words.KEY_AWARE.items():
    if _name in globals() and _positions:
        globals()[_name] = _key_words.over_key_words(
            globals()[_name], positions=(0,) if _positions == "seq" else _positions,
            sequence=_positions == "seq")
array_equal = _key_words.key_array_equal(array_equal)  # noqa: F405
del _name, _positions

# the narrow float and int scalar types of ml_dtypes that the installed version has
globals().update(ml_dtype_scalar_types)
del ml_dtype_scalar_types
from functrans._array import Array
from functrans.core import Tracer

pi = _np.pi
e = _np.e
euler_gamma = _np.euler_gamma
inf = _np.inf
nan = _np.nan
newaxis = None
bool = bool_  # noqa: A001, F405 - NumPy 2's name for bool_ (the very same scalar type)


class _ArrayMeta(type):
    """``isinstance(x, jnp.ndarray)`` holds for arrays and for traced values alike."""

    def __instancecheck__(cls, instance):
        return isinstance(instance, (Array, Tracer))


class ndarray(metaclass=_ArrayMeta):  # noqa: N801 - NumPy's name
    """The array type for ``isinstance`` checks (matches Arrays and tracers)."""


# arrays and tracers get their operators and methods from this namespace, as JAX's do
install_array_methods(globals())
del install_array_methods


del annotations
