"""Reductions over axes and cumulative (scan-like) reductions along one axis.

``reduce_sum``, ``reduce_max``, ``reduce_min``, ``reduce_prod``, ``reduce_and``,
``reduce_or``, ``reduce_xor`` take ``axes``; ``argmax``/``argmin`` take ``axes=(axis,)`` and
``index_dtype``; ``cumsum``, ``cumprod``, ``cummax``, ``cummin``, ``cumlogsumexp`` take
``axis`` and ``reverse``. Each primitive's shape rule, reference implementation, JVP,
transpose (the linear ones) and batching rule are declared together below it.
"""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans.core import Primitive, ShapedArray, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters.ad import Zero

# =============================================================================================
# Shared rules
# =============================================================================================


def _reduce_rule(name, kinds=None):
    """Shape rule of a reduction over ``axes``; ``kinds`` restricts the operand dtype."""
    def rule(operand, *, axes):
        if any(not 0 <= a < operand.ndim for a in axes) or len(set(axes)) != len(axes):
            raise TypeError(f"{name}: axes {tuple(axes)} are not distinct axes of "
                            f"{operand.str_short()}")
        if kinds is not None and not kinds(operand.dtype):
            raise TypeError(f"{name} does not accept an operand of type {operand.str_short()}")
        shape = tuple(s for i, s in enumerate(operand.shape) if i not in axes)
        return ShapedArray(shape, operand.dtype, operand.weak_type)
    return rule


def _reduce_batch(primitive):
    def rule(vals, dims, **params):
        (x,), (d,) = vals, dims
        axes = params.pop("axes")
        new_axes = tuple(a + (a >= d) for a in axes)
        out_dim = d - sum(a < d for a in axes)
        return primitive.bind(x, axes=new_axes, **params), out_dim
    return rule


def _not_bool(dtype):
    return not _dtypes.is_bool(dtype)


def _int_or_bool(dtype):
    return _dtypes.is_integer(dtype) or _dtypes.is_bool(dtype)


def _canonical_axes(operand, axes) -> tuple:
    ndim = get_aval(operand).ndim
    return tuple(sorted(int(a) % ndim for a in axes)) if ndim else ()


def _kept_dims(shape, axes) -> tuple:
    return tuple(i for i in range(len(shape)) if i not in axes)


def _broadcast_back(reduced, shape, axes):
    """Broadcast a result of reducing ``axes`` back to the operand's ``shape``."""
    from functrans.primitives import structural
    return structural.broadcast_in_dim(reduced, shape, _kept_dims(shape, axes))


def _lowest(dtype):
    """The identity of max: -inf for floats, the smallest integer, False."""
    if _dtypes.is_bool(dtype):
        return np.array(False)
    if _dtypes.is_inexact(dtype):
        return np.array(-np.inf, dtype)
    return np.array(np.iinfo(dtype).min, dtype)


def _highest(dtype):
    if _dtypes.is_bool(dtype):
        return np.array(True)
    if _dtypes.is_inexact(dtype):
        return np.array(np.inf, dtype)
    return np.array(np.iinfo(dtype).max, dtype)


def _with_f32(fn):
    """Low-precision floats (bf16, f16) are reduced in float32 and rounded back."""
    def impl(operand, **params):
        if operand.dtype in (_dtypes.bfloat16, _dtypes.float16):
            return np.asarray(fn(operand.astype(np.float32), **params)).astype(operand.dtype)
        return fn(operand, **params)
    return impl


# =============================================================================================
# reduce_sum
# =============================================================================================

reduce_sum_p = Primitive("reduce_sum")
reduce_sum_p.def_abstract_eval(_reduce_rule("reduce_sum"))


@reduce_sum_p.def_impl
def _reduce_sum_impl(operand, *, axes):
    return np.sum(operand, axis=tuple(axes), dtype=operand.dtype)


def _reduce_sum_transpose(ct, operand, *, axes):
    return [_broadcast_back(ct, operand.aval.shape, axes)]


ad.deflinear2(reduce_sum_p, _reduce_sum_transpose)
reduce_sum_p.batch = _reduce_batch(reduce_sum_p)


def reduce_sum(operand, axes):
    """Sum over ``axes``.

    Example::

        reduce_sum(jnp.ones((2, 3)), (1,))   # [3., 3.]
    """
    return reduce_sum_p.bind(operand, axes=_canonical_axes(operand, axes))


# =============================================================================================
# reduce_max / reduce_min
# =============================================================================================

reduce_max_p = Primitive("reduce_max")
reduce_max_p.def_abstract_eval(_reduce_rule("reduce_max"))
reduce_min_p = Primitive("reduce_min")
reduce_min_p.def_abstract_eval(_reduce_rule("reduce_min"))


@reduce_max_p.def_impl
@_with_f32
def _reduce_max_impl(operand, *, axes):
    # an empty reduction gives the identity (-inf / smallest int), as XLA does
    return np.max(operand, axis=tuple(axes), initial=_lowest(operand.dtype))


@reduce_min_p.def_impl
@_with_f32
def _reduce_min_impl(operand, *, axes):
    return np.min(operand, axis=tuple(axes), initial=_highest(operand.dtype))


def _extremum_jvp(primitive):
    """The tangent of a max/min is the operand's tangent at the extremal positions,
    averaged over ties (the location mask divided by its count)."""
    from functrans.primitives import elementwise as ew

    def rule(primals, tangents, *, axes):
        (x,), (t,) = primals, tangents
        ans = primitive.bind(x, axes=axes)
        if isinstance(t, Zero):
            return ans, Zero.from_value(ans)
        shape, dtype = get_aval(x).shape, get_aval(x).dtype
        location = ew.convert_element_type(ew.eq(x, _broadcast_back(ans, shape, axes)), dtype)
        counts = reduce_sum(location, axes)
        return ans, ew.div(reduce_sum(ew.mul(t, location), axes), counts)
    return rule


reduce_max_p.jvp = _extremum_jvp(reduce_max_p)
reduce_min_p.jvp = _extremum_jvp(reduce_min_p)
reduce_max_p.batch = _reduce_batch(reduce_max_p)
reduce_min_p.batch = _reduce_batch(reduce_min_p)


def reduce_max(operand, axes):
    """Maximum over ``axes`` (NaN propagates).

    Example::

        reduce_max(jnp.array([[1., 5.], [7., 2.]]), (1,))   # [5., 7.]
    """
    return reduce_max_p.bind(operand, axes=_canonical_axes(operand, axes))


def reduce_min(operand, axes):
    """Minimum over ``axes`` (NaN propagates).

    Example::

        reduce_min(jnp.array([[1., 5.], [7., 2.]]), (1,))   # [1., 2.]
    """
    return reduce_min_p.bind(operand, axes=_canonical_axes(operand, axes))


# =============================================================================================
# reduce_prod
# =============================================================================================

reduce_prod_p = Primitive("reduce_prod")
reduce_prod_p.def_abstract_eval(_reduce_rule("reduce_prod", _not_bool))


@reduce_prod_p.def_impl
@_with_f32
def _reduce_prod_impl(operand, *, axes):
    return np.prod(operand, axis=tuple(axes), dtype=operand.dtype)


def _reduce_prod_jvp(primals, tangents, *, axes):
    # d prod / d x_i is the product of the other elements. Dividing prod by x_i fails on
    # zeros, so count them: with no zero it is prod / x_i; with one zero only that element
    # has a nonzero partial (the product of the nonzeros); with two or more all are zero.
    from functrans.primitives import elementwise as ew
    (x,), (t,) = primals, tangents
    ans = reduce_prod_p.bind(x, axes=axes)
    if isinstance(t, Zero):
        return ans, Zero.from_value(ans)
    aval = get_aval(x)
    zero, one = _full_like(x, 0), _full_like(x, 1)
    is_zero = ew.eq(x, zero)
    safe_x = ew.select(is_zero, one, x)
    nonzero_prod = _broadcast_back(reduce_prod_p.bind(safe_x, axes=axes), aval.shape, axes)
    zero_count = _broadcast_back(reduce_sum(ew.convert_element_type(is_zero, _dtypes.int32), axes),
                                 aval.shape, axes)
    no_zeros = ew.eq(zero_count, _full_like(zero_count, 0))
    one_zero = ew.eq(zero_count, _full_like(zero_count, 1))
    partial = ew.select(no_zeros, ew.div(nonzero_prod, safe_x),
                        ew.select(ew.bitwise_and(one_zero, is_zero), nonzero_prod, zero))
    return ans, reduce_sum(ew.mul(t, partial), axes)


reduce_prod_p.jvp = _reduce_prod_jvp
reduce_prod_p.batch = _reduce_batch(reduce_prod_p)


def reduce_prod(operand, axes):
    """Product over ``axes``.

    Example::

        reduce_prod(jnp.array([[1., 2.], [3., 4.]]), (0,))   # [3., 8.]
    """
    return reduce_prod_p.bind(operand, axes=_canonical_axes(operand, axes))


def _full_like(x, value):
    aval = get_aval(x)
    from functrans.primitives import structural
    return structural.full(aval.shape, value, aval.dtype)


# =============================================================================================
# reduce_and / reduce_or / reduce_xor (bitwise on integers, logical on booleans)
# =============================================================================================


def _bitwise_reduction(name, ufunc):
    p = Primitive(name)
    p.def_abstract_eval(_reduce_rule(name, _int_or_bool))

    @p.def_impl
    def impl(operand, *, axes):
        return ufunc.reduce(operand, axis=tuple(axes)) if axes else operand

    ad.defjvp_zero(p)
    p.batch = _reduce_batch(p)
    return p


reduce_and_p = _bitwise_reduction("reduce_and", np.bitwise_and)
reduce_or_p = _bitwise_reduction("reduce_or", np.bitwise_or)
reduce_xor_p = _bitwise_reduction("reduce_xor", np.bitwise_xor)


def reduce_and(operand, axes):
    """Bitwise (logical for booleans) AND over ``axes``.

    Example::

        reduce_and(jnp.array([True, False]), (0,))   # False
    """
    return reduce_and_p.bind(operand, axes=_canonical_axes(operand, axes))


def reduce_or(operand, axes):
    """Bitwise (logical for booleans) OR over ``axes``.

    Example::

        reduce_or(jnp.array([True, False]), (0,))   # True
    """
    return reduce_or_p.bind(operand, axes=_canonical_axes(operand, axes))


def reduce_xor(operand, axes):
    """Bitwise (logical for booleans) XOR over ``axes``.

    Example::

        reduce_xor(jnp.array([3, 5], jnp.int32), (0,))   # 6
    """
    return reduce_xor_p.bind(operand, axes=_canonical_axes(operand, axes))


# =============================================================================================
# argmax / argmin
# =============================================================================================


def _arg_rule(name):
    def rule(operand, *, axes, index_dtype):
        if len(axes) != 1 or not 0 <= axes[0] < operand.ndim:
            raise TypeError(f"{name}: axes={tuple(axes)} must name exactly one axis of "
                            f"{operand.str_short()}")
        if operand.shape[axes[0]] == 0:
            raise TypeError(f"{name}: axis {axes[0]} of {operand.str_short()} is empty")
        if not _dtypes.is_integer(index_dtype):
            raise TypeError(f"{name}: index_dtype must be an integer type, got {index_dtype}")
        shape = tuple(s for i, s in enumerate(operand.shape) if i != axes[0])
        return ShapedArray(shape, index_dtype)
    return rule


def _arg_impl(np_fn):
    # NumPy treats NaN as the extremum and returns the first occurrence, as JAX does.
    def impl(operand, *, axes, index_dtype):
        if operand.dtype in (_dtypes.bfloat16, _dtypes.float16):
            operand = operand.astype(np.float32)
        return np_fn(operand, axis=axes[0]).astype(index_dtype)
    return impl


argmax_p = Primitive("argmax")
argmax_p.def_abstract_eval(_arg_rule("argmax"))
argmax_p.def_impl(_arg_impl(np.argmax))
argmin_p = Primitive("argmin")
argmin_p.def_abstract_eval(_arg_rule("argmin"))
argmin_p.def_impl(_arg_impl(np.argmin))
for _p in (argmax_p, argmin_p):
    ad.defjvp_zero(_p)
    _p.batch = _reduce_batch(_p)


def argmax(operand, axis: int, index_dtype):
    """Index of the maximum along ``axis`` (the first one on ties; NaN counts as the max).

    Example::

        argmax(jnp.array([1., 7., 7.]), 0, jnp.int32)   # 1
    """
    axis = int(axis) % get_aval(operand).ndim
    return argmax_p.bind(operand, axes=(axis,), index_dtype=_dtypes.canonicalize_dtype(index_dtype))


def argmin(operand, axis: int, index_dtype):
    """Index of the minimum along ``axis`` (the first one on ties; NaN counts as the min).

    Example::

        argmin(jnp.array([3., 1., 2.]), 0, jnp.int32)   # 1
    """
    axis = int(axis) % get_aval(operand).ndim
    return argmin_p.bind(operand, axes=(axis,), index_dtype=_dtypes.canonicalize_dtype(index_dtype))


# =============================================================================================
# Cumulative reductions: cumsum, cumprod, cummax, cummin, cumlogsumexp
# =============================================================================================


def _cumulative_rule(name, kinds):
    def rule(operand, *, axis, reverse):
        if not 0 <= axis < operand.ndim:
            raise TypeError(f"{name}: axis {axis} is out of range for {operand.str_short()}")
        if not kinds(operand.dtype):
            raise TypeError(f"{name} does not accept an operand of type {operand.str_short()}")
        return ShapedArray(operand.shape, operand.dtype, operand.weak_type)
    return rule


def _cumulative_impl(accumulate):
    @_with_f32
    def impl(operand, *, axis, reverse):
        x = np.flip(operand, axis) if reverse else operand
        with np.errstate(all="ignore"):
            out = accumulate(x, axis)
        out = np.asarray(out, dtype=operand.dtype)
        return np.flip(out, axis) if reverse else out
    return impl


def _cumulative_batch(primitive):
    def rule(vals, dims, *, axis, reverse):
        (x,), (d,) = vals, dims
        return primitive.bind(x, axis=axis + (d <= axis), reverse=reverse), d
    return rule


def _cumulative(name, kinds, accumulate):
    p = Primitive(name)
    p.def_abstract_eval(_cumulative_rule(name, kinds))
    p.def_impl(_cumulative_impl(accumulate))
    p.batch = _cumulative_batch(p)
    return p


cumsum_p = _cumulative("cumsum", _not_bool, lambda x, a: np.cumsum(x, axis=a, dtype=x.dtype))
cumprod_p = _cumulative("cumprod", _not_bool, lambda x, a: np.cumprod(x, axis=a, dtype=x.dtype))
cummax_p = _cumulative("cummax", _not_bool, lambda x, a: np.maximum.accumulate(x, axis=a))
cummin_p = _cumulative("cummin", _not_bool, lambda x, a: np.minimum.accumulate(x, axis=a))
cumlogsumexp_p = _cumulative("cumlogsumexp", _dtypes.is_float,
                             lambda x, a: np.logaddexp.accumulate(x, axis=a))

# cumsum is linear; its transpose accumulates from the other end.
ad.deflinear2(cumsum_p, lambda ct, x, *, axis, reverse: [
    cumsum_p.bind(ct, axis=axis, reverse=not reverse)])


def _cumprod_jvp(primals, tangents, *, axis, reverse):
    # d y_i = sum_{j<=i} t_j prod_{k<=i, k!=j} x_k. As for reduce_prod, count zeros in each
    # prefix so zeros are handled exactly: no zero -> y_i * sum t_j / x_j; one zero -> the
    # prefix product of the nonzeros times the zero's tangent; more -> 0.
    from functrans.primitives import elementwise as ew
    (x,), (t,) = primals, tangents
    ans = cumprod_p.bind(x, axis=axis, reverse=reverse)
    if isinstance(t, Zero):
        return ans, Zero.from_value(ans)
    zero, one = _full_like(x, 0), _full_like(x, 1)
    is_zero = ew.eq(x, zero)
    safe_x = ew.select(is_zero, one, x)
    nonzero_prefix = cumprod_p.bind(safe_x, axis=axis, reverse=reverse)
    zero_count = cumsum_p.bind(ew.convert_element_type(is_zero, _dtypes.int32),
                               axis=axis, reverse=reverse)
    no_zeros = ew.eq(zero_count, _full_like(zero_count, 0))
    one_zero = ew.eq(zero_count, _full_like(zero_count, 1))
    scaled = cumsum_p.bind(ew.select(is_zero, zero, ew.div(t, safe_x)), axis=axis, reverse=reverse)
    zero_tangent = cumsum_p.bind(ew.select(is_zero, t, zero), axis=axis, reverse=reverse)
    tangent = ew.select(no_zeros, ew.mul(nonzero_prefix, scaled),
                        ew.select(one_zero, ew.mul(nonzero_prefix, zero_tangent), zero))
    return ans, tangent


cumprod_p.jvp = _cumprod_jvp


def _iota_along(shape, axis):
    """int32 positions along ``axis``, broadcast to ``shape``."""
    from functrans.primitives import structural
    return structural.broadcast_in_dim(np.arange(shape[axis], dtype=np.int32), shape, (axis,))


def _take_along(t, index, axis):
    """``t[..., index[..., i, ...], ...]`` along ``axis`` as a one-hot contraction, which
    is linear in ``t`` (so it transposes) and batches as a dot_general."""
    from functrans.primitives import elementwise as ew
    from functrans.primitives import linalg, structural
    aval = get_aval(t)
    nd, n = aval.ndim, aval.shape[axis]
    # onehot[..., i, j] = (index[..., i] == j), with i and j both where `axis` was
    t_last = _move_axis(t, axis, nd - 1)
    idx_last = _move_axis(index, axis, nd - 1)
    lead = get_aval(t_last).shape[:-1]
    onehot_shape = lead + (n,)
    idx_b = structural.broadcast_in_dim(idx_last, onehot_shape + (n,), tuple(range(nd)))
    cols = structural.broadcast_in_dim(np.arange(n, dtype=np.int32), onehot_shape + (n,), (nd,))
    onehot = ew.convert_element_type(ew.eq(idx_b, cols), aval.dtype)
    batch = tuple(range(nd - 1))
    out = linalg.dot_general(onehot, t_last, (((nd,), (nd - 1,)), (batch, batch)))
    return _move_axis(out, nd - 1, axis)


def _move_axis(x, src, dst):
    return batching.moveaxis(x, src, dst)


def _cum_extremum_jvp(primitive):
    # The tangent at i is the operand's tangent where the running extremum was attained
    # (the latest such position, as max/min pick one element).
    from functrans.primitives import elementwise as ew

    def rule(primals, tangents, *, axis, reverse):
        (x,), (t,) = primals, tangents
        ans = primitive.bind(x, axis=axis, reverse=reverse)
        if isinstance(t, Zero):
            return ans, Zero.from_value(ans)
        shape = get_aval(x).shape
        positions = _iota_along(shape, axis)
        attained = ew.eq(x, ans)
        # the latest attaining position in scan order is a running max (min when reversed)
        never = -1 if not reverse else shape[axis]
        marked = ew.select(attained, positions, _full_like(positions, never))
        scan = cummax_p if not reverse else cummin_p
        where = scan.bind(marked, axis=axis, reverse=reverse)
        return ans, _take_along(t, where, axis)
    return rule


cummax_p.jvp = _cum_extremum_jvp(cummax_p)
cummin_p.jvp = _cum_extremum_jvp(cummin_p)


def _cumlogsumexp_jvp(primals, tangents, *, axis, reverse):
    # d y_i = sum_{j<=i} exp(x_j - y_i) t_j: softmax weights of each prefix. The weights
    # exp(x_j - y_i) are at most 1, so build them as a (prefix-masked) matrix of pairs
    # rather than rescaling by a common maximum, which underflows for wide ranges.
    from functrans.primitives import elementwise as ew
    from functrans.primitives import linalg, structural
    (x,), (t,) = primals, tangents
    ans = cumlogsumexp_p.bind(x, axis=axis, reverse=reverse)
    if isinstance(t, Zero):
        return ans, Zero.from_value(ans)
    aval = get_aval(x)
    nd, n = aval.ndim, aval.shape[axis]
    x_last, y_last, t_last = (_move_axis(v, axis, nd - 1) for v in (x, ans, t))
    lead = get_aval(x_last).shape[:-1]
    pair_shape = lead + (n, n)               # [..., i, j]
    x_j = structural.broadcast_in_dim(x_last, pair_shape, tuple(range(nd - 1)) + (nd,))
    y_i = structural.broadcast_in_dim(y_last, pair_shape, tuple(range(nd)))
    rows = np.arange(n)[:, None]
    cols = np.arange(n)[None, :]
    in_prefix = (cols >= rows) if reverse else (cols <= rows)
    mask = structural.broadcast_in_dim(in_prefix, pair_shape, (nd - 1, nd))
    # the masked-out difference is replaced before exp, so no inf/NaN reaches the product
    diff = ew.select(mask, ew.sub(x_j, y_i), structural.full(pair_shape, -np.inf, aval.dtype))
    weights = ew.exp(diff)
    batch = tuple(range(nd - 1))
    out = linalg.dot_general(weights, t_last, (((nd,), (nd - 1,)), (batch, batch)))
    return ans, _move_axis(out, nd - 1, axis)


cumlogsumexp_p.jvp = _cumlogsumexp_jvp


def _cumulative_fn(p, doc):
    def fn(operand, axis: int = 0, reverse: bool = False):
        axis = int(axis) % max(get_aval(operand).ndim, 1)
        return p.bind(operand, axis=axis, reverse=bool(reverse))
    fn.__name__ = fn.__qualname__ = p.name
    fn.__doc__ = doc
    return fn


cumsum = _cumulative_fn(cumsum_p, """Cumulative sum along ``axis`` (from the end if ``reverse``).

    Example::

        cumsum(jnp.array([1., 2., 3.]))   # [1., 3., 6.]
    """)
cumprod = _cumulative_fn(cumprod_p, """Cumulative product along ``axis``.

    Example::

        cumprod(jnp.array([1., 2., 3.]))   # [1., 2., 6.]
    """)
cummax = _cumulative_fn(cummax_p, """Running maximum along ``axis``.

    Example::

        cummax(jnp.array([1., 3., 2.]))   # [1., 3., 3.]
    """)
cummin = _cumulative_fn(cummin_p, """Running minimum along ``axis``.

    Example::

        cummin(jnp.array([3., 1., 2.]))   # [3., 1., 1.]
    """)
cumlogsumexp = _cumulative_fn(cumlogsumexp_p, """Running ``log(sum(exp(x)))`` along ``axis``.

    Example::

        cumlogsumexp(jnp.array([0., 0.]))   # [0., log 2]
    """)


__all__ = ["argmax", "argmin", "cumlogsumexp", "cummax", "cummin", "cumprod", "cumsum",
           "reduce_and", "reduce_max", "reduce_min", "reduce_or", "reduce_prod", "reduce_sum",
           "reduce_xor"]
