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
from functrans.interpreters.ad import Zero, is_undefined_primal
from functrans.primitives import elementwise as ew
from functrans.primitives.conversions import broadcast_in_dim, full

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
    return broadcast_in_dim(reduced, shape, _kept_dims(shape, axes))


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
    return full(aval.shape, value, aval.dtype)


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


# =============================================================================================
# cumulative_tangent: the tangent map of cummax, cummin and cumlogsumexp
# =============================================================================================
#
# JAX defines the derivative of these three as the JVP of their parallel (odd/even) prefix
# scan. The tangent is linear in t with weights fixed by x: a combine of two sides gives each
# the weight max's (min's) JVP gives it -- a half to each on a tie, so a repeated extremum
# shares its tangent along the scan's tree -- or exp(side - result) for logaddexp. Staged as
# ops, that scan is O(log n) rounds of slices whose programs grow with log n and compile
# slowly, and a dense [n, n] matrix of weights is O(n^2); so the map is one primitive, linear
# in t, that walks the same tree in NumPy in O(n) time and memory. Its transpose is the same
# primitive with ``transpose=True``.

cumulative_tangent_p = Primitive("cumulative_tangent")
_TANGENT_COMBINES = ("max", "min", "logaddexp")


@cumulative_tangent_p.def_abstract_eval
def _cumulative_tangent_rule(operand, tangent, *, combine, axis, reverse, transpose):
    if combine not in _TANGENT_COMBINES:
        raise TypeError(f"cumulative_tangent: combine={combine!r} is not one of "
                        f"{_TANGENT_COMBINES}")
    if operand.shape != tangent.shape:
        raise TypeError(f"cumulative_tangent: operand {operand.str_short()} and tangent "
                        f"{tangent.str_short()} must have one shape")
    if not 0 <= axis < operand.ndim:
        raise TypeError(f"cumulative_tangent: axis {axis} is out of range for "
                        f"{operand.str_short()}")
    return ShapedArray(tangent.shape, tangent.dtype, tangent.weak_type)


def _tree_combine(combine, a, b, weights=None):
    """One combine of the scan on values: the result and (given ``weights``, a dtype) the
    weight of each side's tangent, by the arithmetic of lax.max's / lax.min's / logaddexp's
    JVP. Weights are rounded to the tangents' dtype, as each step of JAX's scan rounds."""
    if combine == "logaddexp":
        delta = a - b
        # equal infinities give NaN in delta; a + b is then the answer (inf or -inf)
        out = np.where(np.isnan(delta), a + b,
                       np.maximum(a, b) + np.log1p(np.exp(-np.abs(delta))))
        if weights is None:
            return out, None, None

        def weight(v):  # +inf -> 0 on both sides, so inf - inf is e^0 = 1, not NaN
            finite, finite_out = (np.where(u == np.inf, np.zeros_like(u), u) for u in (v, out))
            return np.exp(finite - finite_out).astype(weights, copy=False)

        return out, weight(a), weight(b)
    out = np.maximum(a, b) if combine == "max" else np.minimum(a, b)
    if weights is None:
        return out, None, None
    # 1 where a side alone is the result, 1/2 where both are (a tie), else 0
    a_is, b_is = a == out, b == out
    tie = (a_is & b_is).astype(weights) * np.asarray(0.5, weights)
    return out, a_is.astype(weights) - tie, b_is.astype(weights) - tie


def _interleave_last(evens, odds):
    out = np.empty(evens.shape[:-1] + (evens.shape[-1] + odds.shape[-1],),
                   np.result_type(evens, odds))
    out[..., 0::2], out[..., 1::2] = evens, odds
    return out


def _tree_scan(combine, x, t=None):
    """The prefix scan of ``x`` along its last axis, and with ``t`` its tangent, on the tree
    of ``associative_scan``: neighbours are paired, the pairs scanned (the odd positions),
    and each later even position combines the odd prefix before it with its own element."""
    n = x.shape[-1]
    if n < 2:
        return x, t
    pairs, w_left, w_right = _tree_combine(combine, x[..., 0:n - 1:2], x[..., 1:n:2],
                                           weights=None if t is None else t.dtype)
    pairs_t = None if t is None else t[..., 0:n - 1:2] * w_left + t[..., 1:n:2] * w_right
    odd, odd_t = _tree_scan(combine, pairs, pairs_t)
    m = (n - 1) // 2  # even positions after the first
    even, w_prev, w_own = _tree_combine(combine, odd[..., :m], x[..., 2::2],
                                        weights=None if t is None else t.dtype)
    values = _interleave_last(np.concatenate([x[..., :1], even], -1), odd)
    if t is None:
        return values, None
    even_t = odd_t[..., :m] * w_prev + t[..., 2::2] * w_own
    return values, _interleave_last(np.concatenate([t[..., :1], even_t], -1), odd_t)


def _tree_scan_transpose(combine, x, ct):
    """The transpose of ``t -> _tree_scan(combine, x, t)[1]``: the same tree walked from the
    outputs back, each combine sending its cotangent to both sides with their weights."""
    n = x.shape[-1]
    if n < 2:
        return ct
    pairs, w_left, w_right = _tree_combine(combine, x[..., 0:n - 1:2], x[..., 1:n:2], ct.dtype)
    odd, _ = _tree_scan(combine, pairs)
    m = (n - 1) // 2
    _, w_prev, w_own = _tree_combine(combine, odd[..., :m], x[..., 2::2], ct.dtype)
    ct_even, ct_odd = ct[..., 0::2], ct[..., 1::2].copy()
    ct_odd[..., :m] += ct_even[..., 1:] * w_prev
    ct_pairs = _tree_scan_transpose(combine, pairs, ct_odd)
    out = np.empty_like(ct)
    out[..., :1] = ct_even[..., :1]
    out[..., 2::2] = ct_even[..., 1:] * w_own
    out[..., 0:n - 1:2] += ct_pairs * w_left
    out[..., 1:n:2] = ct_pairs * w_right
    return out


@cumulative_tangent_p.def_impl
def _cumulative_tangent_impl(operand, tangent, *, combine, axis, reverse, transpose):
    # comparisons are exact in float32, and low-precision logaddexp is computed in it
    x = operand.astype(np.float32) if operand.dtype in (_dtypes.bfloat16, _dtypes.float16) \
        else operand
    x, t = np.moveaxis(x, axis, -1), np.moveaxis(tangent, axis, -1)
    if reverse:
        x, t = x[..., ::-1], t[..., ::-1]
    with np.errstate(all="ignore"):
        out = (_tree_scan_transpose(combine, x, t) if transpose
               else _tree_scan(combine, x, t)[1])
    if reverse:
        out = out[..., ::-1]
    return np.ascontiguousarray(np.moveaxis(out, -1, axis)).astype(tangent.dtype, copy=False)


def _cumulative_tangent_jvp(primals, tangents, *, combine, axis, reverse, transpose):
    # Linear in t. The max/min weights are piecewise constant in x; the logaddexp weights
    # W_ij = exp(x_j - y_i) have dW_ij = W_ij (dx_j - dy_i) with dy = W dx, so
    # d(W t) = W (dx * t) - dy * (W t) and d(W^T s) = dx * (W^T s) - W^T (dy * s).
    (x, t), (dx, dt) = primals, tangents
    params = dict(combine=combine, axis=axis, reverse=reverse)
    out = cumulative_tangent_p.bind(x, t, transpose=transpose, **params)
    tangent = Zero.from_value(out)
    if not isinstance(dt, Zero):
        tangent = cumulative_tangent_p.bind(x, dt, transpose=transpose, **params)
    if combine == "logaddexp" and not isinstance(dx, Zero):
        dy = cumulative_tangent_p.bind(x, dx, transpose=False, **params)
        if transpose:
            moved = ew.sub(ew.mul(dx, out),
                           cumulative_tangent_p.bind(x, ew.mul(dy, t), transpose=True, **params))
        else:
            moved = ew.sub(cumulative_tangent_p.bind(x, ew.mul(dx, t), transpose=False, **params),
                           ew.mul(dy, out))
        tangent = ad.add_tangents(tangent, moved)
    return out, tangent


def _cumulative_tangent_transpose(ct, x, t, *, transpose, **params):
    if is_undefined_primal(x):
        raise NotImplementedError("cumulative_tangent is linear in its tangent only; it is not "
                                  "transposable with respect to the operand")
    if isinstance(ct, Zero):
        return [None, Zero(t.aval)]
    return [None, cumulative_tangent_p.bind(x, ct, transpose=not transpose, **params)]


def _cumulative_tangent_batch(vals, dims, *, axis, **params):
    size = batching.batch_size_of(vals, dims)
    x, t = (batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims))
    return cumulative_tangent_p.bind(x, t, axis=axis + 1, **params), 0


cumulative_tangent_p.jvp = _cumulative_tangent_jvp
cumulative_tangent_p.transpose = _cumulative_tangent_transpose
cumulative_tangent_p.batch = _cumulative_tangent_batch


def _tree_tangent_jvp(primitive, combine):
    def rule(primals, tangents, *, axis, reverse):
        (x,), (t,) = primals, tangents
        ans = primitive.bind(x, axis=axis, reverse=reverse)
        if isinstance(t, Zero):
            return ans, Zero.from_value(ans)
        return ans, cumulative_tangent_p.bind(x, t, combine=combine, axis=axis, reverse=reverse,
                                              transpose=False)
    return rule


cummax_p.jvp = _tree_tangent_jvp(cummax_p, "max")
cummin_p.jvp = _tree_tangent_jvp(cummin_p, "min")
cumlogsumexp_p.jvp = _tree_tangent_jvp(cumlogsumexp_p, "logaddexp")


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
