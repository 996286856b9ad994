"""Sorting: ``sort`` (several operands sorted together by the first ``num_keys``),
``sort_key_val`` and ``top_k``.

Floating-point keys sort in a total order: -NaN < -inf < ... < -0.0 < 0.0 < ... < inf < NaN,
so NaNs go to the end as in NumPy and JAX. Each primitive's shape rule, reference
implementation, JVP, transpose and batching rule are declared together below it.
"""
from __future__ import annotations

import operator

import numpy as np

from functrans import _dtypes
from functrans.core import Primitive, ShapedArray, get_aval
from functrans.interpreters import batching
from functrans.interpreters.ad import Zero, is_undefined_primal
from functrans.primitives import indexing, structural
from functrans.primitives import elementwise as ew
from functrans.primitives.structural import _axis


def _total_order_key(x: np.ndarray) -> list:
    """Integer keys (most significant first) that order ``x`` as the sort does."""
    if _dtypes.is_complex(x.dtype):
        return _total_order_key(np.real(x)) + _total_order_key(np.imag(x))
    if _dtypes.is_bool(x.dtype):
        return [x.astype(np.int8)]
    if _dtypes.is_integer(x.dtype):
        return [x]
    if x.dtype.kind == "V":  # ml_dtypes' narrow ints and floats (int4, float8_*...)
        import ml_dtypes
        try:
            ml_dtypes.iinfo(x.dtype)
            return [x.astype(np.int64)]  # exact
        except ValueError:
            x = x.astype(np.float32)  # exact for every narrow float format
    if x.dtype in (_dtypes.bfloat16, _dtypes.float16):
        x = x.astype(np.float32)
    width = x.dtype.itemsize * 8
    signed = x.view(np.dtype(f"i{x.dtype.itemsize}")).astype(np.int64)
    # Flip the magnitude bits of negative floats so that integer order is float order;
    # every NaN (of either sign) is mapped above +inf so NaNs sort to the end.
    mask = (1 << (width - 1)) - 1
    ordered = np.where(signed < 0, signed ^ mask, signed)
    return [np.where(np.isnan(x), np.int64(np.iinfo(np.int64).max), ordered)]


def _sort_permutation(keys, dimension) -> np.ndarray:
    """Stable permutation that sorts ``keys`` (lexicographically) along ``dimension``."""
    columns = []
    for k in keys:
        columns.extend(np.moveaxis(c, dimension, -1) for c in _total_order_key(k))
    if not columns:
        raise ValueError("sort needs at least one key")
    # np.lexsort sorts by the last key first, stably.
    return np.lexsort(columns[::-1], axis=-1) if columns[0].ndim else np.zeros((), np.int64)


# =============================================================================================
# sort
# =============================================================================================

sort_p = Primitive("sort", multiple_results=True)


@sort_p.def_abstract_eval
def _sort_rule(*operands, dimension, is_stable, num_keys):
    if not operands:
        raise TypeError("sort needs at least one operand")
    shapes = {o.shape for o in operands}
    if len(shapes) != 1:
        raise TypeError("sort: all operands must have the same shape, got "
                        + ", ".join(o.str_short() for o in operands))
    if not 1 <= num_keys <= len(operands):
        raise TypeError(f"sort: num_keys={num_keys} must be between 1 and the number of "
                        f"operands ({len(operands)})")
    if not 0 <= dimension < max(operands[0].ndim, 1):
        raise TypeError(f"sort: dimension {dimension} is out of range for "
                        f"{operands[0].str_short()}")
    return [ShapedArray(o.shape, o.dtype, o.weak_type) for o in operands]


@sort_p.def_impl
def _sort_impl(*operands, dimension, is_stable, num_keys):
    if operands[0].ndim == 0:
        return list(operands)
    perm = _sort_permutation(operands[:num_keys], dimension)
    perm = np.moveaxis(perm, -1, dimension)
    return [np.take_along_axis(o, perm, axis=dimension) for o in operands]


def _iota_like(x, dimension):
    """int32 positions along ``dimension``, of ``x``'s shape."""
    shape = get_aval(x).shape
    return structural.broadcast_in_dim(np.arange(shape[dimension], dtype=np.int32), shape,
                                       (dimension,))


def _sort_jvp(primals, tangents, *, dimension, is_stable, num_keys):
    # Every output is its operand permuted by the sort of the keys, so each tangent is
    # permuted the same way: sort the nonzero tangents along with the (primal) keys.
    params = dict(dimension=dimension, is_stable=is_stable, num_keys=num_keys)
    outs = sort_p.bind(*primals, **params)
    nonzero = [i for i, t in enumerate(tangents) if not isinstance(t, Zero)]
    if not nonzero:
        return outs, [Zero.from_value(o) for o in outs]
    keys = list(primals[:num_keys])
    sorted_tangents = sort_p.bind(*keys, *[tangents[i] for i in nonzero], **params)[num_keys:]
    tangents_out = [Zero.from_value(o) for o in outs]
    for i, t in zip(nonzero, sorted_tangents):
        tangents_out[i] = t
    return outs, tangents_out


def _sort_transpose(cts, *operands, dimension, is_stable, num_keys):
    # Linear in the non-key operands (a permutation fixed by the keys). The transpose of a
    # permutation is its inverse: sort the cotangents by the permutation itself.
    keys = operands[:num_keys]
    if any(is_undefined_primal(k) for k in keys):
        raise NotImplementedError("sort is not linear in its keys; reverse-mode through the "
                                  "keys goes through its jvp rule")
    params = dict(dimension=dimension, is_stable=is_stable)
    results = [None] * len(operands)
    wanted = [i for i in range(num_keys, len(operands))
              if is_undefined_primal(operands[i]) and not isinstance(cts[i], Zero)]
    for i in range(num_keys, len(operands)):
        if is_undefined_primal(operands[i]) and isinstance(cts[i], Zero):
            results[i] = Zero(operands[i].aval)
    if wanted:
        perm = sort_p.bind(*keys, _iota_like(keys[0], dimension), num_keys=num_keys,
                           **params)[-1]
        unsorted = sort_p.bind(perm, *[cts[i] for i in wanted], num_keys=1, **params)[1:]
        for i, ct in zip(wanted, unsorted):
            results[i] = ct
    return results


def _sort_batch(vals, dims, *, dimension, is_stable, num_keys):
    size = batching.batch_size_of(vals, dims)
    vals = [batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims)]
    outs = sort_p.bind(*vals, dimension=dimension + 1, is_stable=is_stable, num_keys=num_keys)
    return outs, [0] * len(outs)


sort_p.jvp = _sort_jvp
sort_p.transpose = _sort_transpose
sort_p.batch = _sort_batch


def sort(operand, dimension: int = -1, is_stable: bool = True, num_keys: int = 1):
    """Sort along ``dimension``. ``operand`` is an array or a sequence of arrays of one
    shape; then all are permuted by the lexicographic order of the first ``num_keys``.

    Example::

        sort(jnp.array([3., 1., 2.]))                          # [1., 2., 3.]
        sort((jnp.array([2, 1]), jnp.array([10., 20.])))       # ([1, 2], [20., 10.])
    """
    single = not isinstance(operand, (tuple, list))
    operands = [operand] if single else list(operand)
    ndim = get_aval(operands[0]).ndim
    dimension = int(dimension) % ndim if ndim else 0
    outs = sort_p.bind(*operands, dimension=dimension, is_stable=bool(is_stable),
                       num_keys=int(num_keys))
    return outs[0] if single else tuple(outs)


def sort_key_val(keys, values, dimension: int = -1, is_stable: bool = True):
    """Sort ``keys`` along ``dimension`` and permute ``values`` the same way.

    Example::

        sort_key_val(jnp.array([2., 1.]), jnp.array([0, 1]))   # ([1., 2.], [1, 0])
    """
    return sort((keys, values), dimension, is_stable, num_keys=1)


# =============================================================================================
# top_k
# =============================================================================================

top_k_p = Primitive("top_k", multiple_results=True)


@top_k_p.def_abstract_eval
def _top_k_rule(operand, *, k):
    if operand.ndim < 1:
        raise TypeError(f"top_k: operand {operand.str_short()} must have at least one axis")
    if not 0 <= k <= operand.shape[-1]:
        raise TypeError(f"top_k: k={k} must be between 0 and the last axis size of "
                        f"{operand.str_short()}")
    shape = operand.shape[:-1] + (k,)
    return [ShapedArray(shape, operand.dtype, operand.weak_type), ShapedArray(shape, _dtypes.int32)]


@top_k_p.def_impl
def _top_k_impl(operand, *, k):
    # Descending in the total order (NaN largest); ties keep the lower index first.
    # bitwise NOT reverses the order of the integer keys without overflow
    descending = [~c for c in _total_order_key(operand)]
    if operand.shape[-1] == 0 or k == 0:
        shape = operand.shape[:-1] + (k,)
        return [np.zeros(shape, operand.dtype), np.zeros(shape, np.int32)]
    order = np.lexsort(descending[::-1], axis=-1)[..., :k]
    return [np.take_along_axis(operand, order, axis=-1), order.astype(np.int32)]


def _take_along_last(t, indices):
    """``t[..., indices[..., i]]`` for each leading position: a gather whose other axes are
    batching axes (O(size of the result), where a one-hot contraction is [..., k, n]). It is
    linear in ``t``, transposes to a scatter-add and batches as a gather."""
    nd = get_aval(t).ndim
    lead = tuple(range(nd - 1))
    dnums = indexing.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(nd - 1,),
                                            start_index_map=(nd - 1,),
                                            operand_batching_dims=lead,
                                            start_indices_batching_dims=lead)
    return indexing.gather(t, structural.expand_dims(indices, (nd,)), dnums, (1,) * nd,
                           mode="clip", unique_indices=True)


def _top_k_jvp(primals, tangents, *, k):
    (x,), (t,) = primals, tangents
    values, indices = top_k_p.bind(x, k=k)
    if isinstance(t, Zero):
        return [values, indices], [Zero.from_value(values), Zero.from_value(indices)]
    return [values, indices], [_take_along_last(t, indices), Zero.from_value(indices)]


def _top_k_batch(vals, dims, *, k):
    (x,), (d,) = vals, dims
    last = get_aval(x).ndim - 1
    if d == last:
        # the sorted axis must stay last
        x, d = batching.moveaxis(x, d, 0), 0
    return top_k_p.bind(x, k=k), [d, d]


top_k_p.jvp = _top_k_jvp
top_k_p.batch = _top_k_batch


def top_k(operand, k: int):
    """The ``k`` largest entries along the last axis, in descending order, and their int32
    indices (lower index first among equal values).

    Example::

        top_k(jnp.array([1., 5., 3.]), 2)   # ([5., 3.], [1, 2])
    """
    return tuple(top_k_p.bind(operand, k=int(k)))


# ---- approx_max_k / approx_min_k -------------------------------------------------------------


def _approx_k(name, operand, k, reduction_dimension, recall_target, aggregate_to_topk,
              largest):
    aval = get_aval(operand)
    if not _dtypes.is_float(aval.dtype):
        raise ValueError(f"{name}: operand must be a floating type, got {aval.str_short()}")
    axis = _axis(reduction_dimension, aval.ndim, name)
    size = aval.shape[axis]
    k = operator.index(k)
    if not 0 <= k <= size:
        raise ValueError(f"k must be smaller than the size of reduction_dim {size}, got {k}")
    if not 0 < recall_target <= 1:
        raise ValueError(f"{name}: recall_target must be in (0, 1], got {recall_target}")
    # exact selection satisfies any recall target; without aggregation XLA:CPU returns every
    # element, sorted, and so do we
    k = k if aggregate_to_topk else size
    x = batching.moveaxis(operand, axis, -1)
    if largest:
        values, indices = top_k(x, k)
    else:
        # the smallest first: top_k of -x, with NaN (which -x keeps NaN) ranked last
        negated = ew.neg(x)
        negated = ew.select(ew.ne(negated, negated), structural.full(
            get_aval(x).shape, -np.inf, aval.dtype), negated)
        _, indices = top_k(negated, k)
        values = _take_along_last_axis(x, indices)
    return [batching.moveaxis(values, -1, axis), batching.moveaxis(indices, -1, axis)]


def _take_along_last_axis(x, indices):
    """``out[..., j] = x[..., indices[..., j]]`` for in-bounds ``indices``: one gather whose
    leading axes are batch axes of both the operand and the indices."""
    shape = get_aval(indices).shape
    batch = tuple(range(len(shape) - 1))
    dn = indexing.GatherDimensionNumbers(
        offset_dims=(), collapsed_slice_dims=(len(batch),), start_index_map=(len(batch),),
        operand_batching_dims=batch, start_indices_batching_dims=batch)
    return indexing.gather(x, structural.reshape(indices, shape + (1,)), dn,
                           (1,) * (len(batch) + 1), indices_are_sorted=False,
                           mode=indexing.GatherScatterMode.FILL_OR_DROP)


def approx_max_k(operand, k: int, reduction_dimension: int = -1, recall_target: float = 0.95,
                 reduction_input_size_override: int = -1, aggregate_to_topk: bool = True):
    """The ``k`` largest values along ``reduction_dimension`` and their int32 indices,
    descending (NaN ranks highest, +0 above -0, lower index first among ties). Computed
    exactly, which meets every ``recall_target``; with ``aggregate_to_topk=False`` every
    element comes back, sorted (as XLA:CPU does).

        >>> approx_max_k(jnp.array([3., 1., 4., 1., 5.]), 2)
        [Array([5., 4.], dtype=float32), Array([4, 2], dtype=int32)]
    """
    return _approx_k("approx_max_k", operand, k, reduction_dimension, recall_target,
                     aggregate_to_topk, largest=True)


def approx_min_k(operand, k: int, reduction_dimension: int = -1, recall_target: float = 0.95,
                 reduction_input_size_override: int = -1, aggregate_to_topk: bool = True):
    """The ``k`` smallest values along ``reduction_dimension`` and their int32 indices,
    ascending (NaN ranks last, -0 below +0, lower index first among ties); exact, as
    :func:`approx_max_k`.

        >>> approx_min_k(jnp.array([3., 1., 4., 1., 5.]), 2)
        [Array([1., 1.], dtype=float32), Array([1, 3], dtype=int32)]
    """
    return _approx_k("approx_min_k", operand, k, reduction_dimension, recall_target,
                     aggregate_to_topk, largest=False)


__all__ = ["approx_max_k", "approx_min_k", "sort", "sort_key_val", "top_k"]
