"""Sorting, searching, and selections whose size depends on the data (``nonzero``,
``where``'s one-argument form, ``unique``, set operations, ``repeat`` with traced counts).

Functions such as :func:`nonzero` and :func:`unique` return as many elements as the data
asks for. Eagerly that is fine (the values are known); inside ``jit``/``vmap``/``grad`` the
output shape must be static, so, as in JAX, they take ``size=`` (and ``fill_value=`` for
the unused slots) and raise a ConcretizationTypeError naming it when it is missing.
"""
from __future__ import annotations

import builtins
import collections
import math

import numpy as np

from functrans import _dtypes
from functrans._array import Array
from functrans.core import ConcretizationTypeError, get_aval
from functrans.numpy import _ufuncs as uf
from functrans.numpy._promotion import (broadcast_to_shape, canonicalize_axis, concrete_value,
                                        iota, lax_fn, operator_index, promote_dtypes,
                                        promote_shapes, to_array)
from functrans.numpy._reductions import any as any_
from functrans.numpy._reductions import cumsum
from functrans.numpy._reductions import sum as sum_
from functrans.numpy._shape import (concatenate, flip, moveaxis, ravel, slice_along_axis, stack,
                                    take, take_along_axis, take_static)
from functrans.primitives import elementwise as lax
from functrans.primitives import structural

_SIZE_HINT = ("Pass size= (a static int) and optionally fill_value= so the result has a "
              "static shape.")


def _int_array(value) -> Array:
    return Array._from_buffer(np.asarray(value).astype(_dtypes.default_int_dtype()))


def _needs_size(fname, x, size):
    """The concrete value of ``x`` when no ``size`` is given (else None); a traced ``x``
    without ``size`` is an error that says to pass one."""
    if size is not None:
        return None
    value = concrete_value(x)
    if value is None:
        raise ConcretizationTypeError(
            f"{fname}: the number of results depends on the values of a traced array, so the "
            f"output shape is not static. {_SIZE_HINT}")
    return value


# ---- sorting ---------------------------------------------------------------------------------

def _iota_like(x, axis):
    return iota(_dtypes.default_int_dtype(), get_aval(x).shape, axis)


def _sort_operand(name, a, axis, order):
    """``(array, axis)`` to sort along: the flattened array when ``axis`` is None; the axis
    is None for a 0-d array (nothing to sort)."""
    if order is not None:
        raise ValueError(f"{name}: the `order` argument is not supported")
    a = to_array(a)
    if axis is None:
        a = structural.reshape(a, (get_aval(a).size,))
        axis = 0
    if get_aval(a).ndim == 0:
        return a, None
    return a, canonicalize_axis(axis, get_aval(a).ndim)


def sort(a, axis=-1, kind=None, order=None, *, stable=True, descending=False):
    """Sorted copy of ``a`` along ``axis`` (the flattened array when None); NaNs go last.

        >>> sort(array([3, 1, 2]))
        Array([1, 2, 3], dtype=int32)
    """
    a, axis = _sort_operand("sort", a, axis, order)
    if axis is None:
        return a
    out = lax_fn("sort")(a, dimension=axis, is_stable=bool(stable))
    if isinstance(out, (tuple, list)):
        out = out[0]
    if descending:
        out = lax_fn("rev")(out, (axis,))
    return out


def argsort(a, axis=-1, kind=None, order=None, *, stable=True, descending=False):
    """Indices that sort ``a`` along ``axis`` (ties keep their order when ``stable``).

        >>> argsort(array([3, 1, 2]))
        Array([1, 2, 0], dtype=int32)
    """
    a, axis = _sort_operand("argsort", a, axis, order)
    if axis is None:
        return structural.full((), 0, _dtypes.default_int_dtype())
    n = get_aval(a).shape[axis]
    rev = lax_fn("rev")
    if descending:
        # sort the reversed array ascending, then reverse back: equal keys keep their
        # original order, and positions are mapped back to the unreversed array
        _, perm = lax_fn("sort")((rev(a, (axis,)), _iota_like(a, axis)), dimension=axis,
                                 is_stable=True, num_keys=1)
        perm = rev(perm, (axis,))
        return lax.sub(lax._weak_full(n - 1, get_aval(perm)), perm)
    _, perm = lax_fn("sort")((a, _iota_like(a, axis)), dimension=axis, is_stable=True,
                             num_keys=1)
    return perm


def lexsort(keys, axis=-1):
    """Indices that sort by several keys; the last key is the primary one.

        >>> lexsort((array([2, 1, 3]), array([0, 0, 1])))
        Array([1, 0, 2], dtype=int32)
    """
    keys = [to_array(k) for k in keys]
    if not keys:
        raise TypeError("lexsort: need at least one key")
    keys = promote_shapes(*keys)
    axis = canonicalize_axis(axis, get_aval(keys[0]).ndim)
    operands = tuple(reversed(keys)) + (_iota_like(keys[0], axis),)
    outs = lax_fn("sort")(operands, dimension=axis, is_stable=True, num_keys=len(keys))
    return outs[-1]


def partition(a, kth, axis=-1):
    """An arrangement with the ``kth`` element in its sorted place, smaller ones before and
    larger ones after (this returns the fully sorted array, which satisfies that)."""
    operator_index(kth, "partition: kth")
    return sort(a, axis=axis)


def argpartition(a, kth, axis=-1):
    """Indices of a :func:`partition` of ``a`` (here: of the sorted order)."""
    operator_index(kth, "argpartition: kth")
    return argsort(a, axis=axis)


def sort_complex(a):
    """Sort a complex array by real part, then imaginary part."""
    a = to_array(a)
    a = lax.convert_element_type(a, _dtypes.default_complex_dtype()) \
        if not _dtypes.is_complex(get_aval(a).dtype) else a
    a = structural.reshape(a, (get_aval(a).size,)) if get_aval(a).ndim != 1 else a
    perm = lexsort((uf.imag(a), uf.real(a)))
    return take_along_axis(a, perm, axis=0)


# ---- searching -------------------------------------------------------------------------------

def _less(x, y):
    """``x < y`` with NaN ordered after every number (the order sort produces)."""
    lt = lax.lt(x, y)
    if not _dtypes.is_inexact(get_aval(x).dtype):
        return lt
    return lax.bitwise_or(lt, lax.bitwise_and(uf.isnan(y), lax.bitwise_not(uf.isnan(x))))


def searchsorted(a, v, side="left", sorter=None, *, method="scan"):
    """Positions at which to insert ``v`` into the sorted 1-D ``a`` to keep it sorted
    (``side='left'``: before equal elements; ``'right'``: after them).

    ``method='scan'`` (or ``'sort'``) is a binary search; ``'compare_all'`` compares every
    pair, which is faster for short ``a``.

        >>> searchsorted(array([1, 2, 3]), array([2, 5]))
        Array([1, 3], dtype=int32)
    """
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    a, v = promote_dtypes(a, v)
    if get_aval(a).ndim != 1:
        raise ValueError(f"searchsorted: a must be 1-D, got shape {get_aval(a).shape}")
    if sorter is not None:
        a = take(a, sorter, mode="clip")
    n = get_aval(a).shape[0]
    v_shape = get_aval(v).shape
    out_dtype = _dtypes.default_int_dtype()

    def goes_after(elem, value):
        # whether `value` belongs after `elem` for this side
        if side == "left":
            return _less(elem, value)
        return lax.bitwise_not(_less(value, elem))

    if n == 0:
        return structural.full(v_shape, 0, out_dtype)
    if method == "compare_all":
        nd = len(v_shape)
        big = v_shape + (n,)
        elems = structural.broadcast_in_dim(a, big, (nd,))
        vals = structural.broadcast_in_dim(v, big, tuple(range(nd)))
        return sum_(goes_after(elems, vals), axis=-1, dtype=out_dtype)
    if method not in ("scan", "sort", "scan_unrolled"):
        raise ValueError(f"searchsorted: unknown method {method!r}")
    lo = structural.full(v_shape, 0, out_dtype)
    hi = structural.full(v_shape, n, out_dtype)
    for _ in range(int(math.ceil(math.log2(n + 1)))):
        mid = lax.div(lax.add(lo, hi), lax._weak_full(2, get_aval(lo)))
        active = lax.lt(lo, hi)
        elem = take(a, uf.minimum(mid, n - 1), mode="clip")
        right = lax.bitwise_and(active, goes_after(elem, v))
        left = lax.bitwise_and(active, lax.bitwise_not(right))
        lo = lax.select(right, lax.add(mid, lax._weak_full(1, get_aval(mid))), lo)
        hi = lax.select(left, mid, hi)
    return lo


def digitize(x, bins, right=False):
    """Index of the bin each value of ``x`` falls in (``bins`` increasing or decreasing).

        >>> digitize(array([0.5, 1.5]), array([0.0, 1.0, 2.0]))
        Array([1, 2], dtype=int32)
    """
    x, bins = promote_dtypes(x, bins)
    if get_aval(bins).ndim != 1:
        raise ValueError("digitize: bins must be 1-D")
    n = get_aval(bins).shape[0]
    if n == 0:
        return structural.full(get_aval(x).shape, 0, _dtypes.default_int_dtype())
    side = "left" if right else "right"
    increasing = lax.ge(structural.reshape(slice_along_axis(bins, 0, n - 1, n), ()),
                        structural.reshape(slice_along_axis(bins, 0, 0, 1), ()))
    up = searchsorted(bins, x, side=side)
    down = lax.sub(lax._weak_full(n, get_aval(up)), searchsorted(flip(bins), x, side=side))
    return uf.where(increasing, up, down)


# ---- data-dependent selections ---------------------------------------------------------------

def where(condition, x=None, y=None, /, *, size=None, fill_value=None):
    """``x`` where ``condition`` else ``y``, broadcasting all three. With only ``condition``,
    the indices of its non-zero elements (as :func:`nonzero`, needing ``size=`` under a
    transform).

        >>> where(arange(4) > 1, 1.0, 0.0)
        Array([0., 0., 1., 1.], dtype=float32, weak_type=True)
    """
    if x is None and y is None:
        return nonzero(condition, size=size, fill_value=fill_value)
    if x is None or y is None:
        raise ValueError("where: either both or neither of x and y must be given")
    if size is not None or fill_value is not None:
        raise ValueError("where: size and fill_value apply only to the one-argument form")
    return uf.where(condition, x, y)


def nonzero(a, *, size=None, fill_value=None):
    """Indices of the non-zero elements, one index array per dimension.

    Under a transform, pass ``size=``: the result then has exactly ``size`` entries, padded
    with ``fill_value`` (default 0) or truncated.

        >>> nonzero(array([0, 3, 0, 4]))
        (Array([1, 3], dtype=int32),)
    """
    a = to_array(a)
    aval = get_aval(a)
    if aval.ndim == 0:
        raise ValueError("nonzero is not defined for 0-d arrays; use atleast_1d first")
    value = _needs_size("nonzero", a, size)
    if value is not None:
        return tuple(_int_array(i) for i in np.nonzero(value))
    size = operator_index(size, "nonzero: size")
    flat = structural.reshape(uf._to_bool(a), (aval.size,))
    int_dtype = _dtypes.default_int_dtype()
    counts = cumsum(lax.convert_element_type(flat, int_dtype)) if aval.size else \
        structural.full((0,), 0, int_dtype)
    # the k-th true element sits where the running count first reaches k + 1
    wanted = iota(int_dtype, (size,))
    wanted = lax.add(wanted, lax._weak_full(1, get_aval(wanted)))
    positions = searchsorted(counts, wanted, side="left")
    valid = lax.lt(positions, lax._weak_full(aval.size, get_aval(positions)))
    fills = fill_value if isinstance(fill_value, (tuple, list)) else (fill_value,) * aval.ndim
    if len(fills) != aval.ndim:
        raise ValueError(f"nonzero: fill_value must be a scalar or a tuple of length "
                         f"{aval.ndim}")
    out = []
    stride = aval.size
    remaining = positions
    for dim, fill in zip(aval.shape, fills):
        stride //= builtins.max(dim, 1) if dim else 1
        if stride:
            idx = lax.div(remaining, lax._weak_full(stride, get_aval(remaining)))
            remaining = lax.rem(remaining, lax._weak_full(stride, get_aval(remaining)))
        else:
            idx = remaining
        out.append(uf.where(valid, idx, 0 if fill is None else fill).astype(int_dtype))
    return tuple(out)


def flatnonzero(a, *, size=None, fill_value=None):
    """Indices of the non-zero elements of the flattened array."""
    return nonzero(ravel(a), size=size, fill_value=fill_value)[0]


def argwhere(a, *, size=None, fill_value=None):
    """Indices of the non-zero elements, one row per element.

        >>> argwhere(array([[0, 1], [1, 0]]))
        Array([[0, 1],
               [1, 0]], dtype=int32)
    """
    a = to_array(a)
    if get_aval(a).ndim == 0:
        idx = nonzero(structural.reshape(a, (1,)), size=size, fill_value=fill_value)[0]
        return structural.full((get_aval(idx).shape[0], 0), 0, _dtypes.default_int_dtype())
    return stack(nonzero(a, size=size, fill_value=fill_value), axis=-1)


def _gather_valid(values, mask, size, fill_value):
    """The elements of 1-D ``values`` where ``mask`` holds, as a length-``size`` array padded
    with ``fill_value``."""
    idx, = nonzero(mask, size=size, fill_value=get_aval(values).shape[0])
    out = take(values, idx, mode="fill",
               fill_value=0 if fill_value is None else fill_value)
    return out


def compress(condition, a, axis=None, *, size=None, fill_value=0, out=None):
    """The slices of ``a`` along ``axis`` where the 1-D ``condition`` is true."""
    if out is not None:
        raise ValueError("compress: the `out` argument is not supported")
    a = to_array(a)
    if axis is None:
        a = ravel(a)
        axis = 0
    cond = uf._to_bool(condition)
    n = get_aval(a).shape[canonicalize_axis(axis, get_aval(a).ndim)]
    cond_n = get_aval(cond).shape[0] if get_aval(cond).ndim else 1
    value = _needs_size("compress", cond, size)
    if value is not None:
        keep = np.nonzero(np.asarray(value).ravel()[:n])[0]
        return take_static(a, keep, canonicalize_axis(axis, get_aval(a).ndim))
    if cond_n > n:
        cond = structural.reshape(cond, (cond_n,))
        cond = slice_along_axis(cond, 0, 0, n)
    idx, = nonzero(cond, size=size, fill_value=n)
    moved = moveaxis(a, axis, 0)
    picked = take(moved, idx, axis=0, mode="fill", fill_value=fill_value)
    return moveaxis(picked, 0, axis)


def extract(condition, arr, *, size=None, fill_value=0):
    """The elements of ``arr`` where ``condition`` is true, flattened."""
    return compress(ravel(condition), ravel(arr), size=size, fill_value=fill_value)


def choose(a, choices, out=None, mode="raise"):
    """``choices[a[i]][i]`` elementwise (all broadcast together); ``mode`` is ``'clip'``,
    ``'wrap'``, or ``'raise'`` (checked only when ``a`` is concrete)."""
    if out is not None:
        raise ValueError("choose: the `out` argument is not supported")
    a = to_array(a)
    choices = list(choices) if not hasattr(choices, "aval") else [
        choices[i] for i in range(get_aval(choices).shape[0])]
    n = len(choices)
    if mode == "raise":
        value = concrete_value(a)
        if value is not None and ((value < 0) | (value >= n)).any():
            raise ValueError("choose: invalid entry in the index array")
        mode = "clip"
    if mode == "wrap":
        a = uf.remainder(a, n)
    elif mode == "clip":
        a = uf.clip(a, 0, n - 1)
    else:
        raise ValueError(f"choose: unknown mode {mode!r}")
    choices = promote_dtypes(*choices)
    arrays = promote_shapes(a, *choices)
    a, choices = arrays[0], arrays[1:]
    out_ = choices[0]
    for k in range(1, n):
        out_ = lax.select(lax.eq(a, lax._weak_full(k, get_aval(a))), choices[k], out_)
    return out_


# ---- repeating --------------------------------------------------------------------------------
# (traced repeat counts make the positions each element goes to data-dependent: a search)

def repeat(a, repeats, axis=None, *, total_repeat_length=None):
    """Repeat each element ``repeats`` times along ``axis`` (of the flattened array when
    None). ``repeats`` must be static unless ``total_repeat_length`` is given.

        >>> repeat(arange(3), 2)
        Array([0, 0, 1, 1, 2, 2], dtype=int32)
    """
    a = to_array(a)
    if axis is None:
        a = ravel(a)
        axis = 0
    aval = get_aval(a)
    axis = canonicalize_axis(axis, aval.ndim)
    n = aval.shape[axis]
    reps = concrete_value(repeats)
    if reps is not None and np.ndim(reps) == 0:
        r = int(reps)
        if r < 0:
            raise ValueError("repeat: repeats may not contain negative values")
        # a new axis of length r right after `axis`, merged into it
        shape = aval.shape[:axis + 1] + (r,) + aval.shape[axis + 1:]
        dims = tuple(range(axis + 1)) + tuple(range(axis + 2, aval.ndim + 1))
        out = structural.broadcast_in_dim(a, shape, dims)
        out = structural.reshape(out, aval.shape[:axis] + (n * r,) + aval.shape[axis + 1:])
        if total_repeat_length is not None and total_repeat_length != n * r:
            raise ValueError(f"repeat: total_repeat_length={total_repeat_length} does not "
                             f"match {n} * {r}")
        return out
    if reps is not None:
        reps = np.broadcast_to(np.asarray(reps).astype(np.int64), (n,))
        if (reps < 0).any():
            raise ValueError("repeat: repeats may not contain negative values")
        idx = np.repeat(np.arange(n), reps)
        if total_repeat_length is not None and total_repeat_length != len(idx):
            raise ValueError(f"repeat: total_repeat_length={total_repeat_length} does not "
                             f"match the sum of repeats {len(idx)}")
        return take_static(a, idx, axis)
    if total_repeat_length is None:
        raise ConcretizationTypeError(
            "repeat: traced `repeats` make the output length data-dependent; pass "
            "total_repeat_length= (a static int) as well")
    # output position j takes the element whose cumulative repeat count first exceeds j
    reps = broadcast_to_shape(to_array(repeats), (n,))
    ends = cumsum(reps)
    positions = iota(get_aval(ends).dtype, (int(total_repeat_length),))
    idx = searchsorted(ends, positions, side="right")
    return take(a, idx, axis=axis, mode="clip")


# ---- unique and set operations ---------------------------------------------------------------

def _not_equal_adjacent(x, equal_nan):
    """For sorted 1-D ``x``: True at 0 and wherever an element differs from the previous."""
    n = get_aval(x).shape[0]
    prev, cur = slice_along_axis(x, 0, 0, n - 1), slice_along_axis(x, 0, 1, n)
    differs = lax.ne(prev, cur)
    if equal_nan and _dtypes.is_inexact(get_aval(x).dtype):
        differs = lax.bitwise_and(differs, lax.bitwise_not(lax.bitwise_and(uf.isnan(prev),
                                                                             uf.isnan(cur))))
    return concatenate([structural.full((1,), True, _dtypes.bool_), differs])


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None,
           *, equal_nan=True, size=None, fill_value=None, sorted=True):  # noqa: A002
    """The sorted distinct values of ``ar`` (optionally with first indices, the inverse map
    and counts). Under a transform pass ``size=``; missing slots hold ``fill_value``
    (default: the smallest value).

        >>> unique(array([3, 1, 3, 2]))
        Array([1, 2, 3], dtype=int32)
    """
    ar = to_array(ar)
    value = _needs_size("unique", ar, size)
    if value is not None:
        res = np.unique(value, return_index=return_index, return_inverse=return_inverse,
                        return_counts=return_counts, axis=axis, equal_nan=equal_nan)
        if not (return_index or return_inverse or return_counts):
            return Array._from_buffer(np.asarray(res).astype(get_aval(ar).dtype))
        outs = [Array._from_buffer(np.asarray(res[0]).astype(get_aval(ar).dtype))]
        for r in res[1:]:
            outs.append(_int_array(r))
        if return_inverse:
            k = 1 + int(return_index)
            if axis is None:
                outs[k] = _int_array(np.asarray(res[k]).reshape(value.shape))
        return tuple(outs)
    if axis is not None:
        raise NotImplementedError("unique: axis= together with size= is not supported")
    size = operator_index(size, "unique: size")
    flat = structural.reshape(ar, (get_aval(ar).size,))
    n = get_aval(flat).shape[0]
    int_dtype = _dtypes.default_int_dtype()
    if n == 0:
        raise ValueError("unique: size= needs a non-empty array")
    sorted_vals, perm = lax_fn("sort")((flat, _iota_like(flat, 0)), dimension=0,
                                       is_stable=True, num_keys=1)
    starts_mask = _not_equal_adjacent(sorted_vals, equal_nan)
    starts, = nonzero(starts_mask, size=size, fill_value=n)
    valid = lax.lt(starts, lax._weak_full(n, get_aval(starts)))
    smallest = structural.reshape(slice_along_axis(sorted_vals, 0, 0, 1), ())
    fill = smallest if fill_value is None else fill_value
    values = uf.where(valid, take(sorted_vals, starts, mode="clip"), fill)
    values = lax.convert_element_type(values, get_aval(ar).dtype)
    outs = [values]
    if return_index:
        outs.append(uf.where(valid, take(perm, starts, mode="clip"), 0).astype(int_dtype))
    if return_inverse:
        group = lax.sub(_cumsum_bool(starts_mask), lax._weak_full(1, get_aval(perm)))
        inverse = take(group, argsort(perm), mode="clip")
        outs.append(structural.reshape(inverse, get_aval(ar).shape))
    if return_counts:
        nexts = concatenate([slice_along_axis(starts, 0, 1, size),
                             structural.full((1,), n, int_dtype)]) if size else starts
        outs.append(lax.sub(uf.minimum(nexts, n), uf.minimum(starts, n)))
    return values if len(outs) == 1 else tuple(outs)


def _cumsum_bool(mask):
    return cumsum(lax.convert_element_type(mask, _dtypes.default_int_dtype()))


UniqueAllResult = collections.namedtuple("UniqueAllResult",
                                         ["values", "indices", "inverse_indices", "counts"])
UniqueCountsResult = collections.namedtuple("UniqueCountsResult", ["values", "counts"])
UniqueInverseResult = collections.namedtuple("UniqueInverseResult",
                                             ["values", "inverse_indices"])


def unique_values(x, /, *, size=None, fill_value=None):
    """The sorted distinct values of ``x``."""
    return unique(x, size=size, fill_value=fill_value)


def unique_counts(x, /, *, size=None, fill_value=None):
    """Distinct values and how often each occurs."""
    return UniqueCountsResult(*unique(x, return_counts=True, size=size, fill_value=fill_value))


def unique_inverse(x, /, *, size=None, fill_value=None):
    """Distinct values and, for each element of ``x``, the index of its value."""
    return UniqueInverseResult(*unique(x, return_inverse=True, size=size,
                                       fill_value=fill_value))


def unique_all(x, /, *, size=None, fill_value=None):
    """Distinct values, first indices, inverse indices and counts."""
    return UniqueAllResult(*unique(x, return_index=True, return_inverse=True,
                                   return_counts=True, size=size, fill_value=fill_value))


def isin(element, test_elements, assume_unique=False, invert=False, *, method="auto"):
    """True where an element of ``element`` occurs in ``test_elements``.

        >>> isin(array([1, 2, 3]), array([2, 3]))
        Array([False,  True,  True], dtype=bool)
    """
    element, test_elements = promote_dtypes(element, test_elements)
    shape = get_aval(element).shape
    tests = structural.reshape(test_elements, (get_aval(test_elements).size,))
    m = get_aval(tests).shape[0]
    big = shape + (m,)
    hits = lax.eq(structural.broadcast_in_dim(element, big, tuple(range(len(shape)))),
                  structural.broadcast_in_dim(tests, big, (len(shape),)))
    out = any_(hits, axis=-1)
    return lax.bitwise_not(out) if invert else out


def _set_result(fname, values, mask, size, fill_value):
    """Sorted unique ``values`` where ``mask`` holds; static-size when ``size`` is given."""
    concrete_mask = _needs_size(fname, mask, size) if size is None else None
    if concrete_mask is not None:
        vals = concrete_value(values)
        if vals is None:
            raise AssertionError("values are concrete when the mask is")
        return Array._from_buffer(
            np.asarray(vals)[np.asarray(concrete_mask)].astype(get_aval(values).dtype))
    return _gather_valid(values, mask, size, fill_value)


def union1d(ar1, ar2, *, size=None, fill_value=None):
    """Sorted distinct values in either array."""
    return unique(concatenate([ravel(ar1), ravel(ar2)]), size=size, fill_value=fill_value)


def intersect1d(ar1, ar2, assume_unique=False, return_indices=False, *, size=None,
                fill_value=None):
    """Sorted distinct values present in both arrays."""
    if return_indices:
        raise NotImplementedError("intersect1d: return_indices is not supported")
    ar1, ar2 = promote_dtypes(ravel(ar1), ravel(ar2))
    if size is None:
        a = unique(ar1)
        return _set_result("intersect1d", a, isin(a, ar2), None, fill_value)
    n = get_aval(ar1).shape[0]
    a, counts = unique(ar1, size=n, return_counts=True)
    mask = lax.bitwise_and(isin(a, ar2), lax.gt(counts, lax._weak_full(0, get_aval(counts))))
    return _set_result("intersect1d", a, mask, size, fill_value)


def setdiff1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    """Sorted distinct values of ``ar1`` that are not in ``ar2``."""
    ar1, ar2 = promote_dtypes(ravel(ar1), ravel(ar2))
    if size is None:
        a = unique(ar1)
        return _set_result("setdiff1d", a, isin(a, ar2, invert=True), None, fill_value)
    n = get_aval(ar1).shape[0]
    a, counts = unique(ar1, size=n, return_counts=True)
    mask = lax.bitwise_and(isin(a, ar2, invert=True),
                           lax.gt(counts, lax._weak_full(0, get_aval(counts))))
    return _set_result("setdiff1d", a, mask, size, fill_value)


def setxor1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    """Sorted values in exactly one of the two arrays."""
    a1, a2 = unique(ar1), unique(ar2)
    both = concatenate([setdiff1d(a1, a2), setdiff1d(a2, a1)])
    return unique(both, size=size, fill_value=fill_value)
