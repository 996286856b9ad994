"""Gather and scatter: reading and writing windows of an array at computed positions.

``gather`` reads one window of ``slice_sizes`` per index vector in ``start_indices`` (the
index vector is always the last axis of ``start_indices``); ``scatter`` and its combining
variants (``scatter_add``, ``scatter_mul``, ``scatter_min``, ``scatter_max``) write windows
of ``updates`` back. Dimension numbers say which operand axes the index vector addresses,
which window axes are dropped, and where the window axes go; the ``*_batching_dims`` pair an
operand axis with an index axis elementwise (that is how ``vmap`` batches both without a
loop). Out-of-bounds windows follow :class:`GatherScatterMode`: clamped, or filled on read /
dropped on write, never read or written out of bounds.

Each primitive's shape rule, NumPy reference implementation, JVP, transpose and batching rule
are declared together below it.
"""
from __future__ import annotations

import enum
from typing import Callable, NamedTuple, Sequence

import numpy as np

from functrans import _dtypes
from functrans.core import Primitive, ShapedArray, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters.ad import Zero, is_undefined_primal
from functrans.primitives import elementwise, structural
from functrans.primitives import reductions, while_loop
from functrans.primitives import elementwise as ew
from functrans.primitives.structural import _axis


class GatherDimensionNumbers(NamedTuple):
    """How the axes of ``gather``'s operand, indices and output correspond.

    ``offset_dims``: output axes holding the window axes that are kept (in operand order).
    ``collapsed_slice_dims``: operand axes whose window (of size 1) is dropped.
    ``start_index_map``: the operand axis addressed by each entry of an index vector.
    ``operand_batching_dims`` / ``start_indices_batching_dims``: operand axes indexed by the
    position along the paired axis of ``start_indices`` (elementwise batching).
    """
    offset_dims: tuple
    collapsed_slice_dims: tuple
    start_index_map: tuple
    operand_batching_dims: tuple = ()
    start_indices_batching_dims: tuple = ()


class ScatterDimensionNumbers(NamedTuple):
    """How the axes of ``scatter``'s operand, indices and updates correspond.

    ``update_window_dims``: axes of ``updates`` that are window axes (the rest are scatter
    axes, one per batch axis of the indices). ``inserted_window_dims``: operand axes with a
    window of size 1 that ``updates`` omits. ``scatter_dims_to_operand_dims``: the operand
    axis addressed by each entry of an index vector. ``operand_batching_dims`` /
    ``scatter_indices_batching_dims``: elementwise batching, as for gather.
    """
    update_window_dims: tuple
    inserted_window_dims: tuple
    scatter_dims_to_operand_dims: tuple
    operand_batching_dims: tuple = ()
    scatter_indices_batching_dims: tuple = ()


class GatherScatterMode(enum.Enum):
    """What out-of-bounds windows do. ``CLIP``: the start is clamped so the window fits.
    ``FILL_OR_DROP``: gather returns ``fill_value`` for the window, scatter skips it.
    ``PROMISE_IN_BOUNDS``: the caller promises in-bounds indices (here: treated as ``CLIP``
    for gather and ``FILL_OR_DROP`` for scatter, so nothing is ever accessed out of bounds).
    """
    CLIP = 0
    FILL_OR_DROP = 1
    PROMISE_IN_BOUNDS = 2

    @staticmethod
    def from_any(mode) -> "GatherScatterMode":
        if isinstance(mode, GatherScatterMode):
            return mode
        if mode == "clip":
            return GatherScatterMode.CLIP
        if mode is None or mode in ("fill", "drop"):
            return GatherScatterMode.FILL_OR_DROP
        if mode == "promise_in_bounds":
            return GatherScatterMode.PROMISE_IN_BOUNDS
        raise ValueError(f"unknown gather/scatter mode {mode!r}; use 'clip', 'fill', 'drop' "
                         "or 'promise_in_bounds'")

    def __str__(self):
        return self.name


def _tup(xs) -> tuple:
    return tuple(int(x) for x in xs)


def _sorted_unique(name, what, dims, bound):
    if list(dims) != sorted(set(dims)) or any(not 0 <= d < bound for d in dims):
        raise TypeError(f"{name}: {what}={tuple(dims)} must be sorted, distinct axes below {bound}")


def _check_indices(name, indices):
    if not _dtypes.is_integer(indices.dtype):
        raise TypeError(f"{name}: indices must have an integer dtype, got {indices.str_short()}")
    if indices.ndim < 1:
        raise TypeError(f"{name}: indices must have at least one axis (the index vector is the "
                        f"last axis), got {indices.str_short()}")


def _check_batching_pairs(name, operand, indices, operand_dims, indices_dims):
    """Each operand batching axis pairs with a distinct batch axis of the indices (not the
    index-vector axis) of the same size."""
    batch_shape = indices.shape[:-1]
    if len(operand_dims) != len(indices_dims) or len(set(indices_dims)) != len(indices_dims) \
            or any(not 0 <= d < len(batch_shape) for d in indices_dims) \
            or any(operand.shape[od] != batch_shape[idim]
                   for od, idim in zip(operand_dims, indices_dims)):
        raise TypeError(f"{name}: operand batching axes {tuple(operand_dims)} and indices "
                        f"batching axes {tuple(indices_dims)} must pair axes of equal size of "
                        f"{operand.str_short()} and {indices.str_short()}")


# ---- index arithmetic shared by the reference implementations -------------------------------

def _window_starts(index_vectors, batch_shape, rank, index_map, operand_batching_dims,
                   indices_batching_dims):
    """Window starts ``[N, rank]`` (int64) for the ``N = prod(batch_shape)`` index vectors:
    addressed axes from the index vector, batching axes from the position, others 0."""
    n = index_vectors.shape[0]
    starts = np.zeros((n, rank), dtype=np.int64)
    for k, d in enumerate(index_map):
        starts[:, d] = index_vectors[:, k]
    if operand_batching_dims:
        coords = np.indices(batch_shape).reshape(len(batch_shape), n)
        for od, idim in zip(operand_batching_dims, indices_batching_dims):
            starts[:, od] = coords[idim]
    return starts


def _window_positions(starts, window):
    """Per-axis index arrays ``[N, *window]`` addressing every element of every window."""
    rank = len(window)
    positions = []
    for d in range(rank):
        along = [1] * (rank + 1)
        along[d + 1] = window[d]
        positions.append(starts[:, d].reshape((-1,) + (1,) * rank)
                         + np.arange(window[d]).reshape(along))
    return tuple(positions)


def _in_bounds(starts, shape, window):
    limit = np.asarray(shape, np.int64) - np.asarray(window, np.int64)
    return np.all((starts >= 0) & (starts <= limit), axis=1)


def default_fill_value(dtype):
    """What a gather in ``fill`` mode reads out of bounds: NaN for inexact dtypes, True for
    bool, the lowest signed or highest unsigned integer otherwise (part of the primitive's
    semantics, so every backend's lowering uses it too)."""
    dtype = np.dtype(dtype)
    if _dtypes.is_inexact(dtype):
        return np.nan
    if _dtypes.is_bool(dtype):
        return True
    info = np.iinfo(dtype)
    return info.min if _dtypes.is_signed(dtype) else info.max


# =============================================================================================
# gather
# =============================================================================================

gather_p = Primitive("gather")


def _gather_offset_operand_dims(dnums, rank):
    skipped = set(dnums.collapsed_slice_dims) | set(dnums.operand_batching_dims)
    return [d for d in range(rank) if d not in skipped]


@gather_p.def_abstract_eval
def _gather_rule(operand, indices, *, dimension_numbers, slice_sizes, indices_are_sorted,
                 unique_indices, mode, fill_value):
    name, dn = "gather", dimension_numbers
    _check_indices(name, indices)
    rank = operand.ndim
    # (with no indices there is nothing to read: the sizes are not checked, as in XLA)
    if len(slice_sizes) != rank or (indices.size and any(
            not 0 <= z <= s for z, s in zip(slice_sizes, operand.shape))):
        raise TypeError(f"gather: slice_sizes {tuple(slice_sizes)} do not fit operand "
                        f"{operand.str_short()}")
    _sorted_unique(name, "collapsed_slice_dims", dn.collapsed_slice_dims, rank)
    _sorted_unique(name, "operand_batching_dims", dn.operand_batching_dims, rank)
    if set(dn.collapsed_slice_dims) & set(dn.operand_batching_dims):
        raise TypeError("gather: collapsed_slice_dims and operand_batching_dims overlap")
    if any(slice_sizes[d] > 1 for d in dn.collapsed_slice_dims + dn.operand_batching_dims):
        raise TypeError(f"gather: collapsed and batching axes need slice size <= 1, got "
                        f"slice_sizes {tuple(slice_sizes)}")
    if indices.shape[-1] != len(dn.start_index_map) or any(
            not 0 <= d < rank for d in dn.start_index_map) or \
            len(set(dn.start_index_map)) != len(dn.start_index_map):
        raise TypeError(f"gather: start_index_map {dn.start_index_map} must name "
                        f"{indices.shape[-1]} distinct axes of {operand.str_short()} (the last "
                        f"axis of indices {indices.str_short()})")
    batch_shape = indices.shape[:-1]
    _check_batching_pairs(name, operand, indices, dn.operand_batching_dims,
                          dn.start_indices_batching_dims)
    offset_operand_dims = _gather_offset_operand_dims(dn, rank)
    out_rank = len(offset_operand_dims) + len(batch_shape)
    if len(dn.offset_dims) != len(offset_operand_dims):
        raise TypeError(f"gather: offset_dims {dn.offset_dims} must have one entry per kept "
                        f"window axis ({len(offset_operand_dims)})")
    _sorted_unique(name, "offset_dims", dn.offset_dims, out_rank)
    window_sizes = iter(slice_sizes[d] for d in offset_operand_dims)
    batch_sizes = iter(batch_shape)
    shape = [next(window_sizes) if i in dn.offset_dims else next(batch_sizes)
             for i in range(out_rank)]
    return ShapedArray(shape, operand.dtype, operand.weak_type)


def _to_output_layout(value, num_batch, offset_dims):
    """Move axes ``[batch..., window...]`` so the window axes land at ``offset_dims``."""
    out_rank = value.ndim
    batch_axes = iter(range(num_batch))
    perm = [num_batch + offset_dims.index(i) if i in offset_dims else next(batch_axes)
            for i in range(out_rank)]
    return np.transpose(value, perm)


@gather_p.def_impl
def _gather_impl(operand, indices, *, dimension_numbers, slice_sizes, indices_are_sorted,
                 unique_indices, mode, fill_value):
    dn = dimension_numbers
    batch_shape = indices.shape[:-1]
    n = int(np.prod(batch_shape, dtype=np.int64))
    vectors = indices.reshape(n, indices.shape[-1]).astype(np.int64)
    starts = _window_starts(vectors, batch_shape, operand.ndim, dn.start_index_map,
                            dn.operand_batching_dims, dn.start_indices_batching_dims)
    ok = _in_bounds(starts, operand.shape, slice_sizes)
    starts = np.clip(starts, 0, np.asarray(operand.shape, np.int64) - np.asarray(slice_sizes, np.int64))
    if operand.ndim == 0:
        windows = np.broadcast_to(operand, (n,))
    else:
        windows = operand[_window_positions(starts, slice_sizes)]
    offset_operand_dims = _gather_offset_operand_dims(dn, operand.ndim)
    kept = tuple(slice_sizes[d] for d in offset_operand_dims)
    out = windows.reshape(batch_shape + kept)
    if mode == GatherScatterMode.FILL_OR_DROP:
        fill = default_fill_value(operand.dtype) if fill_value is None else fill_value
        mask = ok.reshape(batch_shape + (1,) * len(kept))
        out = np.where(mask, out, np.asarray(fill).astype(operand.dtype))
    return _to_output_layout(out, len(batch_shape), tuple(dn.offset_dims))


def _gather_to_scatter_dnums(dn: GatherDimensionNumbers) -> "ScatterDimensionNumbers":
    return ScatterDimensionNumbers(
        update_window_dims=dn.offset_dims, inserted_window_dims=dn.collapsed_slice_dims,
        scatter_dims_to_operand_dims=dn.start_index_map,
        operand_batching_dims=dn.operand_batching_dims,
        scatter_indices_batching_dims=dn.start_indices_batching_dims)


def _gather_jvp(primals, tangents, *, fill_value, **params):
    operand, indices = primals
    out = gather_p.bind(operand, indices, fill_value=fill_value, **params)
    if isinstance(tangents[0], Zero):
        return out, Zero.from_value(out)
    # filled windows are constants: their tangent is 0
    return out, gather_p.bind(tangents[0], indices, fill_value=0, **params)


def _gather_transpose(ct, operand, indices, *, dimension_numbers, slice_sizes,
                      indices_are_sorted, unique_indices, mode, fill_value):
    if is_undefined_primal(indices):
        raise NotImplementedError("gather: transposing with respect to the indices")
    if isinstance(ct, Zero):
        return [Zero(operand.aval), None]
    aval = operand.aval
    zeros = structural.full(aval.shape, 0, aval.dtype)
    # clamped reads (CLIP, and PROMISE_IN_BOUNDS, which the reference clamps) accumulate
    # where they were read from; filled reads had no source
    scatter_mode = GatherScatterMode.FILL_OR_DROP if mode == GatherScatterMode.FILL_OR_DROP \
        else GatherScatterMode.CLIP
    out = scatter_add_p.bind(zeros, indices, ct,
                             dimension_numbers=_gather_to_scatter_dnums(dimension_numbers),
                             indices_are_sorted=indices_are_sorted,
                             unique_indices=unique_indices, mode=scatter_mode)
    return [out, None]


def gather_batch_rule(vals, dims, *, dimension_numbers, slice_sizes, indices_are_sorted,
                      unique_indices, mode, fill_value):
    """Batch ``gather`` (also used by ``dynamic_slice`` with batched start indices). The
    batch axis becomes a window axis (operand only), a new batch axis of the indices (indices
    only), or a pair of batching axes (both); the output batch axis is always 0."""
    (operand, indices), (operand_dim, indices_dim) = vals, dims
    dn = dimension_numbers
    params = dict(indices_are_sorted=indices_are_sorted, unique_indices=unique_indices,
                  mode=mode, fill_value=fill_value)

    def shift(ds):
        return tuple(d + 1 for d in ds)

    if indices_dim is None:
        operand = batching.moveaxis(operand, operand_dim, 0)
        size = get_aval(operand).shape[0]
        new = GatherDimensionNumbers(
            offset_dims=(0,) + shift(dn.offset_dims),
            collapsed_slice_dims=shift(dn.collapsed_slice_dims),
            start_index_map=shift(dn.start_index_map),
            operand_batching_dims=shift(dn.operand_batching_dims),
            start_indices_batching_dims=dn.start_indices_batching_dims)
        return gather_p.bind(operand, indices, dimension_numbers=new,
                             slice_sizes=(size,) + tuple(slice_sizes), **params), 0
    indices = batching.moveaxis(indices, indices_dim, 0)
    if operand_dim is None:
        new = GatherDimensionNumbers(
            offset_dims=shift(dn.offset_dims),
            collapsed_slice_dims=dn.collapsed_slice_dims,
            start_index_map=dn.start_index_map,
            operand_batching_dims=dn.operand_batching_dims,
            start_indices_batching_dims=shift(dn.start_indices_batching_dims))
        return gather_p.bind(operand, indices, dimension_numbers=new,
                             slice_sizes=tuple(slice_sizes), **params), 0
    operand = batching.moveaxis(operand, operand_dim, 0)
    new = GatherDimensionNumbers(
        offset_dims=shift(dn.offset_dims),
        collapsed_slice_dims=shift(dn.collapsed_slice_dims),
        start_index_map=shift(dn.start_index_map),
        operand_batching_dims=(0,) + shift(dn.operand_batching_dims),
        start_indices_batching_dims=(0,) + shift(dn.start_indices_batching_dims))
    return gather_p.bind(operand, indices, dimension_numbers=new,
                         slice_sizes=(1,) + tuple(slice_sizes), **params), 0


gather_p.jvp = _gather_jvp
gather_p.transpose = _gather_transpose
gather_p.batch = gather_batch_rule


def gather(operand, start_indices, dimension_numbers: GatherDimensionNumbers, slice_sizes, *,
           unique_indices: bool = False, indices_are_sorted: bool = False, mode=None,
           fill_value=None):
    """Read one window of ``slice_sizes`` from ``operand`` per index vector (the last axis
    of ``start_indices``). ``mode`` (default ``"fill"``): ``"clip"`` clamps windows into
    bounds, ``"fill"`` returns ``fill_value`` (NaN, the most negative integer, or True by
    default) for out-of-bounds windows.

        >>> x = jnp.arange(10.0).reshape(5, 2)
        >>> dn = GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,),
        ...                             start_index_map=(0,))
        >>> gather(x, jnp.array([[4], [1]]), dn, (1, 2))
        Array([[8., 9.],
               [2., 3.]], dtype=float32)
    """
    dn = GatherDimensionNumbers(*(_tup(f) for f in dimension_numbers))
    mode = GatherScatterMode.from_any(mode)
    if fill_value is not None:
        fill_value = np.asarray(fill_value).item()
    return gather_p.bind(operand, start_indices, dimension_numbers=dn,
                         slice_sizes=_tup(slice_sizes), indices_are_sorted=bool(indices_are_sorted),
                         unique_indices=bool(unique_indices), mode=mode, fill_value=fill_value)


# =============================================================================================
# scatter, scatter_add, scatter_mul, scatter_min, scatter_max
# =============================================================================================


def _scatter_window_operand_dims(dn, rank):
    skipped = set(dn.inserted_window_dims) | set(dn.operand_batching_dims)
    return [d for d in range(rank) if d not in skipped]


def _scatter_rule(name):
    def rule(operand, indices, updates, *, dimension_numbers, indices_are_sorted,
             unique_indices, mode):
        dn = dimension_numbers
        _check_indices(name, indices)
        rank = operand.ndim
        if updates.dtype != operand.dtype:
            raise TypeError(f"{name}: updates {updates.str_short()} must have the dtype of "
                            f"operand {operand.str_short()}")
        _sorted_unique(name, "update_window_dims", dn.update_window_dims, updates.ndim)
        _sorted_unique(name, "inserted_window_dims", dn.inserted_window_dims, rank)
        _sorted_unique(name, "operand_batching_dims", dn.operand_batching_dims, rank)
        if set(dn.inserted_window_dims) & set(dn.operand_batching_dims):
            raise TypeError(f"{name}: inserted_window_dims and operand_batching_dims overlap")
        if indices.shape[-1] != len(dn.scatter_dims_to_operand_dims) or any(
                not 0 <= d < rank for d in dn.scatter_dims_to_operand_dims):
            raise TypeError(f"{name}: scatter_dims_to_operand_dims "
                            f"{dn.scatter_dims_to_operand_dims} must name {indices.shape[-1]} "
                            f"axes of {operand.str_short()}")
        window_dims = _scatter_window_operand_dims(dn, rank)
        batch_shape = indices.shape[:-1]
        scatter_sizes = tuple(s for i, s in enumerate(updates.shape)
                              if i not in dn.update_window_dims)
        window_sizes = [updates.shape[i] for i in dn.update_window_dims]
        if len(window_dims) != len(window_sizes) or scatter_sizes != batch_shape or any(
                w > operand.shape[d] for w, d in zip(window_sizes, window_dims)):
            raise TypeError(f"{name}: updates {updates.str_short()} do not match operand "
                            f"{operand.str_short()} and indices {indices.str_short()} under "
                            f"{dn}")
        _check_batching_pairs(name, operand, indices, dn.operand_batching_dims,
                              dn.scatter_indices_batching_dims)
        return ShapedArray(operand.shape, operand.dtype, operand.weak_type)
    return rule


def _scatter_impl(combine):
    def impl(operand, indices, updates, *, dimension_numbers, indices_are_sorted,
             unique_indices, mode):
        dn = dimension_numbers
        rank = operand.ndim
        out = operand.copy()
        if rank == 0:  # a scalar operand: give it one axis so windows can address it
            out = out.reshape(1)
        window = [1] * max(rank, 1)
        window_dims = _scatter_window_operand_dims(dn, rank)
        for d, u in zip(window_dims, dn.update_window_dims):
            window[d] = updates.shape[u]
        batch_shape = indices.shape[:-1]
        n = int(np.prod(batch_shape, dtype=np.int64))
        scatter_axes = [i for i in range(updates.ndim) if i not in dn.update_window_dims]
        values = np.transpose(updates, scatter_axes + list(dn.update_window_dims))
        values = values.reshape((n,) + tuple(window))
        vectors = indices.reshape(n, indices.shape[-1]).astype(np.int64)
        starts = _window_starts(vectors, batch_shape, max(rank, 1),
                                dn.scatter_dims_to_operand_dims, dn.operand_batching_dims,
                                dn.scatter_indices_batching_dims)
        if mode == GatherScatterMode.CLIP:
            starts = np.clip(starts, 0, np.asarray(out.shape, np.int64) - np.asarray(window))
        else:
            keep = _in_bounds(starts, out.shape, window)
            starts, values = starts[keep], values[keep]
        combine(out, _window_positions(starts, window), values)
        return out.reshape(operand.shape)
    return impl


def _assign(out, positions, values):
    out[positions] = values


scatter_p = Primitive("scatter")
scatter_add_p = Primitive("scatter_add")
scatter_mul_p = Primitive("scatter_mul")
scatter_min_p = Primitive("scatter_min")
scatter_max_p = Primitive("scatter_max")

for _p, _combine in ((scatter_p, _assign), (scatter_add_p, np.add.at),
                     (scatter_mul_p, np.multiply.at), (scatter_min_p, np.minimum.at),
                     (scatter_max_p, np.maximum.at)):
    _p.def_abstract_eval(_scatter_rule(_p.name))
    _p.def_impl(_scatter_impl(_combine))


def _scatter_to_gather(dn: ScatterDimensionNumbers, updates_shape, rank):
    """The gather reading, for each update element, the operand element it is written to."""
    window = [1] * rank
    for d, u in zip(_scatter_window_operand_dims(dn, rank), dn.update_window_dims):
        window[d] = updates_shape[u]
    gdn = GatherDimensionNumbers(
        offset_dims=dn.update_window_dims, collapsed_slice_dims=dn.inserted_window_dims,
        start_index_map=dn.scatter_dims_to_operand_dims,
        operand_batching_dims=dn.operand_batching_dims,
        start_indices_batching_dims=dn.scatter_indices_batching_dims)
    return gdn, tuple(window)


def _gather_like_scatter(x, indices, updates_shape, dn, mode, indices_are_sorted,
                         unique_indices, fill_value):
    gdn, window = _scatter_to_gather(dn, updates_shape, get_aval(x).ndim)
    gather_mode = GatherScatterMode.CLIP if mode == GatherScatterMode.CLIP \
        else GatherScatterMode.FILL_OR_DROP
    return gather_p.bind(x, indices, dimension_numbers=gdn, slice_sizes=window,
                         indices_are_sorted=indices_are_sorted, unique_indices=unique_indices,
                         mode=gather_mode, fill_value=fill_value)


def _zeros_like(x):
    aval = get_aval(x)
    return structural.full(aval.shape, 0, aval.dtype)


def _ones_like(x):
    aval = get_aval(x)
    return structural.full(aval.shape, 1, aval.dtype)


# ---- scatter_add: linear in operand and updates ---------------------------------------------

def _scatter_add_jvp(primals, tangents, **params):
    operand, indices, updates = primals
    t_operand, _, t_updates = tangents
    out = scatter_add_p.bind(operand, indices, updates, **params)
    if isinstance(t_operand, Zero) and isinstance(t_updates, Zero):
        return out, Zero.from_value(out)
    t_operand, t_updates = ad.instantiate_zeros(t_operand), ad.instantiate_zeros(t_updates)
    return out, scatter_add_p.bind(t_operand, indices, t_updates, **params)


def _scatter_add_transpose(ct, operand, indices, updates, *, dimension_numbers,
                           indices_are_sorted, unique_indices, mode):
    if is_undefined_primal(indices):
        raise NotImplementedError("scatter_add: transposing with respect to the indices")
    updates_aval = updates.aval if is_undefined_primal(updates) else get_aval(updates)
    if isinstance(ct, Zero):
        return [Zero(operand.aval) if is_undefined_primal(operand) else None, None,
                Zero(updates_aval) if is_undefined_primal(updates) else None]
    t_operand = ct if is_undefined_primal(operand) else None
    t_updates = None
    if is_undefined_primal(updates):
        # dropped updates contributed nothing: their cotangent is 0
        t_updates = _gather_like_scatter(ct, indices, updates_aval.shape, dimension_numbers,
                                         mode, indices_are_sorted, unique_indices, 0)
    return [t_operand, None, t_updates]


# ---- scatter_mul: linear in the operand; in the updates only for unique indices -------------

def _scatter_mul_jvp(primals, tangents, *, dimension_numbers, indices_are_sorted,
                     unique_indices, mode):
    operand, indices, updates = primals
    t_operand, _, t_updates = tangents
    params = dict(dimension_numbers=dimension_numbers, indices_are_sorted=indices_are_sorted,
                  unique_indices=unique_indices, mode=mode)
    out = scatter_mul_p.bind(operand, indices, updates, **params)
    tangent = Zero.from_value(out)
    if not isinstance(t_operand, Zero):
        tangent = scatter_mul_p.bind(t_operand, indices, updates, **params)
    if not isinstance(t_updates, Zero):
        if not unique_indices:
            raise NotImplementedError(
                "scatter_mul: differentiating with respect to the updates is only supported "
                "for unique indices (x.at[idx].multiply(v) with concrete, non-repeating "
                "indices, or lax.scatter_mul(..., unique_indices=True))")
        # each position is multiplied once: d(x * u) = x * du
        x_at = _gather_like_scatter(operand, indices, get_aval(updates).shape,
                                    dimension_numbers, mode, indices_are_sorted, True, 0)
        contribution = scatter_add_p.bind(_zeros_like(out), indices,
                                          elementwise.mul(t_updates, x_at), **params)
        tangent = ad.add_tangents(tangent, contribution)
    return out, tangent


def _scatter_mul_transpose(ct, operand, indices, updates, *, dimension_numbers,
                           indices_are_sorted, unique_indices, mode):
    if is_undefined_primal(updates) or is_undefined_primal(indices):
        raise NotImplementedError("scatter_mul is linear only in its operand")
    if isinstance(ct, Zero):
        return [Zero(operand.aval), None, None]
    # scaling each position by the product of its updates is its own transpose
    return [scatter_mul_p.bind(ct, indices, updates, dimension_numbers=dimension_numbers,
                               indices_are_sorted=indices_are_sorted,
                               unique_indices=unique_indices, mode=mode), None, None]


# ---- scatter_min / scatter_max: the tangent of whichever value won --------------------------

def _scatter_extremum_jvp(primitive):
    def jvp(primals, tangents, *, dimension_numbers, indices_are_sorted, unique_indices, mode):
        operand, indices, updates = primals
        t_operand, _, t_updates = tangents
        params = dict(dimension_numbers=dimension_numbers,
                      indices_are_sorted=indices_are_sorted, unique_indices=unique_indices,
                      mode=mode)
        out = primitive.bind(operand, indices, updates, **params)
        if isinstance(t_operand, Zero) and isinstance(t_updates, Zero):
            return out, Zero.from_value(out)
        t_operand, t_updates = ad.instantiate_zeros(t_operand), ad.instantiate_zeros(t_updates)
        # Every value equal to the result "won"; ties share the tangent equally (as max/min
        # of two equal values do). Dropped updates read NaN here and so never win.
        dtype = get_aval(out).dtype
        result_at_updates = _gather_like_scatter(out, indices, get_aval(updates).shape,
                                                 dimension_numbers, mode, indices_are_sorted,
                                                 unique_indices, np.nan)
        one, zero = _ones_like(updates), _zeros_like(updates)
        update_won = elementwise.select(elementwise.eq(updates, result_at_updates), one, zero)
        operand_won = elementwise.select(elementwise.eq(operand, out), _ones_like(operand),
                                         _zeros_like(operand))
        add_params = dict(params, mode=GatherScatterMode.FILL_OR_DROP
                          if mode != GatherScatterMode.CLIP else mode)
        winners = elementwise.add(operand_won, scatter_add_p.bind(
            _zeros_like(operand), indices, update_won, **add_params))
        winners = elementwise.max(winners, structural.full(get_aval(out).shape, 1, dtype))
        summed = elementwise.add(
            elementwise.mul(t_operand, operand_won),
            scatter_add_p.bind(_zeros_like(operand), indices,
                               elementwise.mul(t_updates, update_won), **add_params))
        return out, elementwise.div(summed, winners)
    return jvp


# ---- scatter (set): the tangent of whichever update was written last ------------------------

def _scatter_jvp(primals, tangents, *, dimension_numbers, indices_are_sorted, unique_indices,
                 mode):
    """Which update wins a position written several times is decided once, by scattering
    update ids; the value and tangent are then assembled from the winners, so they agree
    and the tangent part is linear (a select and a scatter_add), hence transposable."""
    operand, indices, updates = primals
    t_operand, _, t_updates = tangents
    params = dict(dimension_numbers=dimension_numbers, indices_are_sorted=indices_are_sorted,
                  unique_indices=unique_indices, mode=mode)
    if isinstance(t_operand, Zero) and isinstance(t_updates, Zero):
        out = scatter_p.bind(operand, indices, updates, **params)
        return out, Zero.from_value(out)
    t_operand, t_updates = ad.instantiate_zeros(t_operand), ad.instantiate_zeros(t_updates)
    dn = dimension_numbers
    updates_shape = get_aval(updates).shape
    operand_shape = get_aval(operand).shape
    scatter_axes = [i for i in range(len(updates_shape)) if i not in dn.update_window_dims]
    num_windows = int(np.prod([updates_shape[i] for i in scatter_axes], dtype=np.int64))
    # id k + 1 for the k-th window (row-major over the scatter axes); 0 means "not written"
    ids = np.arange(1, num_windows + 1, dtype=np.int32).reshape(
        [updates_shape[i] for i in scatter_axes])
    ids = structural.broadcast_in_dim(ids, updates_shape, tuple(scatter_axes))
    written = scatter_p.bind(np.zeros(operand_shape, np.int32), indices, ids, **params)
    id_at_updates = _gather_like_scatter(written, indices, updates_shape, dn, mode,
                                         indices_are_sorted, unique_indices, 0)
    won = elementwise.eq(id_at_updates, ids)
    untouched = elementwise.eq(written, np.zeros(operand_shape, np.int32))
    add_params = dict(params, mode=GatherScatterMode.FILL_OR_DROP
                      if mode != GatherScatterMode.CLIP else mode)

    def assemble(x, u):
        placed = scatter_add_p.bind(_zeros_like(x), indices,
                                    elementwise.select(won, u, _zeros_like(u)), **add_params)
        return elementwise.select(untouched, x, placed)

    return assemble(operand, updates), assemble(t_operand, t_updates)


def _scatter_transpose(ct, operand, indices, updates, *, dimension_numbers,
                       indices_are_sorted, unique_indices, mode):
    """With unique indices, scatter is linear in (operand, updates): overwritten positions
    pass their cotangent to the update written there, the rest to the operand. (The JVP
    above never puts scatter on tangents; this serves linear programs built otherwise, such
    as a batched dynamic_update_slice.)"""
    if not unique_indices:
        raise NotImplementedError(
            "scatter: transposing an overwrite with possibly repeated indices is not "
            "supported (differentiate through scatter's JVP instead, as grad does)")
    if is_undefined_primal(indices):
        raise NotImplementedError("scatter: transposing with respect to the indices")
    updates_aval = updates.aval if is_undefined_primal(updates) else get_aval(updates)
    if isinstance(ct, Zero):
        return [Zero(operand.aval) if is_undefined_primal(operand) else None, None,
                Zero(updates_aval) if is_undefined_primal(updates) else None]
    params = dict(dimension_numbers=dimension_numbers, indices_are_sorted=indices_are_sorted,
                  unique_indices=unique_indices, mode=mode)
    t_operand = t_updates = None
    if is_undefined_primal(operand):
        zeros = structural.full(updates_aval.shape, 0, updates_aval.dtype)
        t_operand = scatter_p.bind(ct, indices, zeros, **params)
    if is_undefined_primal(updates):
        t_updates = _gather_like_scatter(ct, indices, updates_aval.shape, dimension_numbers,
                                         mode, indices_are_sorted, unique_indices, 0)
    return [t_operand, None, t_updates]


# ---- batching: one rule for the whole family ------------------------------------------------

def scatter_batch_rule(primitive, vals, dims, *, dimension_numbers, indices_are_sorted,
                       unique_indices, mode):
    """Batch a scatter (also used by ``dynamic_update_slice`` with batched start indices).
    Operand and updates get the batch axis at 0; with unbatched indices it is a window axis,
    with batched indices a pair of batching axes. The output batch axis is 0."""
    operand, indices, updates = vals
    operand_dim, indices_dim, updates_dim = dims
    dn = dimension_numbers
    size = batching.batch_size_of(vals, dims)
    operand = batching.bdim_at_front(operand, operand_dim, size)
    updates = batching.bdim_at_front(updates, updates_dim, size)
    params = dict(indices_are_sorted=indices_are_sorted, unique_indices=unique_indices,
                  mode=mode)

    def shift(ds):
        return tuple(d + 1 for d in ds)

    if indices_dim is None:
        new = ScatterDimensionNumbers(
            update_window_dims=(0,) + shift(dn.update_window_dims),
            inserted_window_dims=shift(dn.inserted_window_dims),
            scatter_dims_to_operand_dims=shift(dn.scatter_dims_to_operand_dims),
            operand_batching_dims=shift(dn.operand_batching_dims),
            scatter_indices_batching_dims=dn.scatter_indices_batching_dims)
    else:
        indices = batching.moveaxis(indices, indices_dim, 0)
        new = ScatterDimensionNumbers(
            update_window_dims=shift(dn.update_window_dims),
            inserted_window_dims=shift(dn.inserted_window_dims),
            scatter_dims_to_operand_dims=shift(dn.scatter_dims_to_operand_dims),
            operand_batching_dims=(0,) + shift(dn.operand_batching_dims),
            scatter_indices_batching_dims=(0,) + shift(dn.scatter_indices_batching_dims))
    return primitive.bind(operand, indices, updates, dimension_numbers=new, **params), 0


scatter_add_p.jvp = _scatter_add_jvp
scatter_add_p.transpose = _scatter_add_transpose
scatter_mul_p.jvp = _scatter_mul_jvp
scatter_mul_p.transpose = _scatter_mul_transpose
scatter_min_p.jvp = _scatter_extremum_jvp(scatter_min_p)
scatter_max_p.jvp = _scatter_extremum_jvp(scatter_max_p)
scatter_p.jvp = _scatter_jvp
scatter_p.transpose = _scatter_transpose
for _p in (scatter_p, scatter_add_p, scatter_mul_p, scatter_min_p, scatter_max_p):
    _p.batch = (lambda prim: lambda vals, dims, **params:
                scatter_batch_rule(prim, vals, dims, **params))(_p)


# =============================================================================================
# dynamic_slice and dynamic_update_slice under vmap
# =============================================================================================
# The two primitives are declared in structural (below this module) with their other rules.
# Batched start indices make a dynamic slice a gather and an update a scatter, so their
# batching rules are attached here, where gather's and scatter's rules are.

def _start_index_vector(indices, dims, size):
    """Stack scalar start indices (some batched) into a batched index vector ``[size, n]``."""
    dtype = _common_index_dtype([get_aval(i).dtype for i in indices])
    columns = []
    for i, d in zip(indices, dims):
        i = ew.convert_element_type(i, dtype)
        i = batching.bdim_at_front(i, d, size)
        columns.append(structural.reshape(i, (size, 1)))
    return structural.concatenate(columns, 1)


def _common_index_dtype(dtypes) -> np.dtype:
    return _dtypes.int64 if any(np.dtype(d).itemsize == 8 for d in dtypes) \
        and _dtypes.x64_enabled() else _dtypes.int32


def _dynamic_slice_batch(vals, dims, *, slice_sizes):
    operand, *indices = vals
    operand_dim, *index_dims = dims
    if all(d is None for d in index_dims):
        # only the operand is batched: take the whole batch axis
        indices = list(indices)
        indices.insert(operand_dim, np.zeros((), _dtypes.int32))
        sizes = list(slice_sizes)
        sizes.insert(operand_dim, get_aval(operand).shape[operand_dim])
        return structural.dynamic_slice_p.bind(operand, *indices, slice_sizes=tuple(sizes)), operand_dim
    size = batching.batch_size_of(vals, dims)
    index_vector = _start_index_vector(indices, index_dims, size)
    rank = len(slice_sizes)
    dnums = GatherDimensionNumbers(offset_dims=tuple(range(rank)),
                                            collapsed_slice_dims=(),
                                            start_index_map=tuple(range(rank)))
    return gather_batch_rule(
        [operand, index_vector], [operand_dim, 0], dimension_numbers=dnums,
        slice_sizes=tuple(slice_sizes), indices_are_sorted=False, unique_indices=False,
        mode=GatherScatterMode.CLIP, fill_value=None)


def _dynamic_update_slice_batch(vals, dims):
    operand, update, *indices = vals
    operand_dim, update_dim, *index_dims = dims
    size = batching.batch_size_of(vals, dims)
    operand = batching.bdim_at_front(operand, operand_dim, size)
    if all(d is None for d in index_dims):
        update = batching.bdim_at_front(update, update_dim, size)
        zero = np.zeros((), _dtypes.int32)
        return structural.dynamic_update_slice_p.bind(operand, update, zero, *indices), 0
    index_vector = _start_index_vector(indices, index_dims, size)
    rank = len(indices)
    dnums = ScatterDimensionNumbers(update_window_dims=tuple(range(rank)),
                                             inserted_window_dims=(),
                                             scatter_dims_to_operand_dims=tuple(range(rank)))
    return scatter_batch_rule(
        scatter_p, [operand, index_vector, update], [0, 0, update_dim],
        dimension_numbers=dnums, indices_are_sorted=True, unique_indices=True,
        mode=GatherScatterMode.CLIP)


structural.dynamic_slice_p.batch = _dynamic_slice_batch
structural.dynamic_update_slice_p.batch = _dynamic_update_slice_batch


def _scatter_fn(primitive, doc):
    def fn(operand, scatter_indices, updates, dimension_numbers: ScatterDimensionNumbers, *,
           indices_are_sorted: bool = False, unique_indices: bool = False, mode=None):
        dn = ScatterDimensionNumbers(*(_tup(f) for f in dimension_numbers))
        return primitive.bind(operand, scatter_indices, updates, dimension_numbers=dn,
                              indices_are_sorted=bool(indices_are_sorted),
                              unique_indices=bool(unique_indices),
                              mode=GatherScatterMode.from_any(mode))
    fn.__name__ = primitive.name
    fn.__doc__ = doc
    return fn


_SCATTER_DOC = """Write ``updates`` into windows of ``operand`` at ``scatter_indices``
({how}); returns the updated copy. ``mode`` (default: drop) skips out-of-bounds windows;
``"clip"`` clamps them into bounds.

    >>> dn = ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
    ...                              scatter_dims_to_operand_dims=(0,))
    >>> {name}(jnp.ones(4), jnp.array([[1], [3], [1]]), jnp.array([2., 3., 4.]), dn)
    {example}
"""

scatter = _scatter_fn(scatter_p, _SCATTER_DOC.format(
    how="replacing; which of several updates to one position wins is unspecified",
    name="scatter", example="Array([1., 4., 1., 3.], dtype=float32)"))
scatter_add = _scatter_fn(scatter_add_p, _SCATTER_DOC.format(
    how="adding; repeated positions accumulate", name="scatter_add",
    example="Array([1., 7., 1., 4.], dtype=float32)"))
scatter_mul = _scatter_fn(scatter_mul_p, _SCATTER_DOC.format(
    how="multiplying", name="scatter_mul", example="Array([1., 8., 1., 3.], dtype=float32)"))
scatter_min = _scatter_fn(scatter_min_p, _SCATTER_DOC.format(
    how="keeping the minimum", name="scatter_min",
    example="Array([1., 1., 1., 1.], dtype=float32)"))
scatter_max = _scatter_fn(scatter_max_p, _SCATTER_DOC.format(
    how="keeping the maximum", name="scatter_max",
    example="Array([1., 4., 1., 3.], dtype=float32)"))

def index_take(src, idxs, axes: Sequence[int]):
    """Gather ``src[..., idxs[0], ..., idxs[1], ...]``: ``idxs[j]`` indexes axis ``axes[j]``
    (indices wrap modulo the axis size). The result has the indices' shape followed by the
    axes not indexed, in order.

        >>> x = jnp.arange(24).reshape(2, 3, 4)
        >>> index_take(x, (jnp.array([1, 0]), jnp.array([2, 3])), (0, 2))
        Array([[14, 18, 22],
               [ 3,  7, 11]], dtype=int32)
    """
    src_shape = get_aval(src).shape
    axes = tuple(_axis(a, len(src_shape), "index_take") for a in axes)
    if len(idxs) != len(axes):
        raise ValueError(f"index_take: {len(idxs)} index arrays for {len(axes)} axes")
    if len(set(axes)) != len(axes):
        raise ValueError(f"index_take: repeated axes {axes}")
    # the result does not depend on the order of (axis, index) pairs: sort them by axis
    order = sorted(range(len(axes)), key=lambda j: axes[j])
    axes = tuple(axes[j] for j in order)
    idxs = [idxs[j] for j in order]
    columns = []
    for i, ax in zip(idxs, axes):
        i = structural.broadcast_in_dim(i, get_aval(i).shape, tuple(range(get_aval(i).ndim))) \
            if _dtypes.is_python_scalar(i) else i
        i_aval = get_aval(i)
        if not _dtypes.is_integer(i_aval.dtype):
            raise TypeError(f"index_take: indices must be integers, got {i_aval.str_short()}")
        size = ew._const(i, src_shape[ax])
        wrapped = ew.rem(ew.add(ew.rem(i, size), size), size)  # a floor modulo
        columns.append(structural.expand_dims(wrapped, (i_aval.ndim,)))
    shapes = {get_aval(c).shape for c in columns}
    if len(shapes) != 1:
        raise TypeError(f"index_take: index arrays must have one shape, got {sorted(shapes)}")
    columns = [ew.convert_element_type(c, np.int32) for c in columns]
    indices = structural.concatenate(columns, get_aval(columns[0]).ndim - 1)
    batch_ndim = get_aval(indices).ndim - 1
    slice_sizes = tuple(1 if d in axes else s for d, s in enumerate(src_shape))
    offset_dims = tuple(range(batch_ndim, batch_ndim + len(src_shape) - len(axes)))
    dn = GatherDimensionNumbers(offset_dims=offset_dims, collapsed_slice_dims=axes,
                                         start_index_map=axes)
    return gather(src, indices, dn, slice_sizes, mode="clip")


# ---- scatter_sub, scatter_apply ------------------------------------------------------------


def scatter_sub(operand, scatter_indices, updates, dimension_numbers, *,
                indices_are_sorted: bool = False, unique_indices: bool = False, mode=None):
    """Subtract ``updates`` from windows of ``operand`` at ``scatter_indices`` (repeated
    positions accumulate); as :func:`scatter_add` with ``-updates`` (for unsigned integers
    the wrap-around difference).

        >>> dn = ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
        ...                              scatter_dims_to_operand_dims=(0,))
        >>> scatter_sub(jnp.zeros(3), jnp.array([[1], [1]]), jnp.array([1., 2.]), dn)
        Array([ 0., -3.,  0.], dtype=float32)
    """
    return scatter_add(operand, scatter_indices, ew.neg(updates), dimension_numbers,
                                indices_are_sorted=indices_are_sorted,
                                unique_indices=unique_indices, mode=mode)


def scatter_apply(operand, scatter_indices, func: Callable, dimension_numbers, *,
                  update_shape=(), indices_are_sorted: bool = False,
                  unique_indices: bool = False, mode=None):
    """Apply the scalar function ``func`` to the elements of ``operand`` that windows of
    ``update_shape`` at ``scatter_indices`` cover. A position covered ``n`` times gets
    ``func`` applied ``n`` times (as XLA applies the scatter combiner once per update).

        >>> dn = ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
        ...                              scatter_dims_to_operand_dims=(0,))
        >>> scatter_apply(jnp.zeros(3), jnp.array([[1], [1]]), lambda v: v + 1, dn,
        ...               update_shape=(2,))
        Array([0., 2., 0.], dtype=float32)
    """
    aval = get_aval(operand)
    ones = structural.full(tuple(update_shape), 1, np.int32)
    count = scatter_add(structural.full(aval.shape, 0, np.int32), scatter_indices,
                                 ones, dimension_numbers,
                                 indices_are_sorted=indices_are_sorted,
                                 unique_indices=unique_indices, mode=mode)
    flat_func = batching.vmap_leading_axis(func)  # func sees scalars, as in XLA's update computation

    def apply(x):
        return structural.reshape(flat_func(structural.reshape(x, (aval.size,))), aval.shape)

    def step(k, x):
        return ew.select(ew.gt(count, ew._const(count, k)), apply(x), x)

    if unique_indices or aval.size == 0:
        return step(0, operand)
    times = reductions.reduce_max(count, tuple(range(aval.ndim)))
    return while_loop.fori_loop(0, times, lambda k, x: step(k, x), operand)


__all__ = ["gather", "GatherDimensionNumbers", "GatherScatterMode", "index_take", "scatter",
           "scatter_add", "scatter_apply", "scatter_max", "scatter_min", "scatter_mul",
           "scatter_sub", "ScatterDimensionNumbers"]
