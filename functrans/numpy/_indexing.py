"""NumPy-style indexing: ``x[idx]`` and ``x.at[idx].set/add/mul/min/max(v)``.

An index expression is first normalized against the array's shape: ``Ellipsis`` is expanded,
``None`` (and a scalar ``True``/``False``) becomes a new axis of size 1 that the array is
reshaped to have, concrete boolean masks become integer arrays (``np.nonzero``), and every
axis ends up with exactly one entry: a slice, an integer (static or traced), or an integer
array. Then:

* reads with only slices and integers lower to cheap ops: ``slice`` (plus ``rev`` for negative
  steps), ``dynamic_slice`` for traced integers, ``squeeze`` for the integer axes;
* everything else lowers to one ``gather``, whose dimension numbers are built so its output
  already has NumPy's layout (advanced-index axes in place when the advanced indices are
  adjacent, first otherwise);
* updates lower to the matching ``scatter`` primitive with the same dimension numbers.

Out-of-bounds reads are clamped (``mode="fill"`` returns ``fill_value`` instead);
out-of-bounds updates are dropped (``mode="clip"`` clamps them). Negative indices count from
the end, as in NumPy.
"""
from __future__ import annotations

import operator
from typing import NamedTuple

import numpy as np

from functrans import _dtypes
from functrans._array import Array, is_concrete_array
from functrans.core import Tracer, get_aval
from functrans.errors import NonConcreteBooleanIndexError
from functrans.numpy._promotion import asarray, broadcast_to_shape, to_array
from functrans.primitives import elementwise, indexing, structural

__all__: list = []


# =============================================================================================
# Normalizing an index expression
# =============================================================================================


class _Slice(NamedTuple):
    start: int
    step: int
    size: int          # number of elements selected


class _Int(NamedTuple):
    value: object      # Python int, or a traced integer scalar


class _IntArray(NamedTuple):
    value: object      # integer np.ndarray (concrete) or traced integer array


class _Parsed(NamedTuple):
    shape: tuple       # the array's shape with the new axes (None / scalar bools) inserted
    entries: tuple     # one _Slice / _Int / _IntArray per axis of ``shape``


def _concrete(x):
    """The NumPy value of ``x`` if it is known now (not a traced value), else None."""
    if isinstance(x, Tracer):
        value = x.to_concrete_value()
        return None if value is None else np.asarray(value)
    if is_concrete_array(x):
        return x.to_numpy()
    if isinstance(x, (np.ndarray, np.generic)):
        return np.asarray(x)
    return None


def _slice_bound(v, what):
    if v is None:
        return None
    try:
        return operator.index(v)
    except TypeError as err:
        raise IndexError(
            f"slice {what} must be a static integer, got {v!r}. Slices with traced bounds "
            "would have a traced size; use lax.dynamic_slice (a static size at a traced "
            "start) instead.") from err


def _as_index_array(x):
    """Lists/tuples inside an index become arrays (NumPy's rule); traced entries are stacked."""
    try:
        return np.asarray(x)
    except TypeError:
        return asarray([_as_index_array(e) if isinstance(e, (list, tuple)) else e for e in x])


def _classify(item):
    """One of ('none',), ('ellipsis',), ('slice', slice), ('bool', bool), ('int', value),
    ('array', value) or ('mask', np bool array) for one element of an index tuple."""
    if item is None:
        return ("none",)
    if item is Ellipsis:
        return ("ellipsis",)
    if isinstance(item, slice):
        return ("slice", item)
    if isinstance(item, (bool, np.bool_)):
        return ("bool", bool(item))
    if isinstance(item, (int, np.integer)):
        if type(item) is int:  # an index is an array value: it must fit the default int type
            _dtypes.weak_scalar_dtype(item)
        return ("int", int(item))
    if isinstance(item, (list, tuple)):
        item = _as_index_array(item)
    if not isinstance(item, (np.ndarray, np.generic, Array, Tracer)):
        raise IndexError(f"only integers, slices, Ellipsis, None, and integer or boolean arrays "
                         f"are valid indices, got {type(item).__name__}: {item!r}")
    aval = get_aval(item)
    if _dtypes.is_bool(aval.dtype):
        value = _concrete(item)
        if value is None:
            raise NonConcreteBooleanIndexError(
                f"Array boolean indices must be concrete; got {aval.str_short()}: the mask is "
                "traced, so the number of "
                "selected elements (the result's shape) is unknown while tracing. Use "
                "jnp.where(mask, x, other) to select values, or pass a concrete mask.")
        return ("bool", bool(value)) if value.ndim == 0 else ("mask", value)
    if not _dtypes.is_integer(aval.dtype):
        raise IndexError(f"indices must be integers or booleans, got {aval.str_short()}")
    value = _concrete(item) if not isinstance(item, Tracer) else None
    if aval.ndim == 0:
        return ("int", int(value) if value is not None else item)
    return ("array", value if value is not None else item)


def _parse_index(shape, idx) -> _Parsed:
    if not isinstance(idx, tuple):
        idx = (idx,)
    items = [_classify(i) for i in idx]
    # a concrete boolean mask stands for the integer arrays of its nonzero positions
    expanded = []
    for it in items:
        if it[0] == "mask":
            expanded.extend(("array", a) for a in np.nonzero(it[1]))
        else:
            expanded.append(it)
    items = expanded
    if sum(it[0] == "ellipsis" for it in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(it[0] in ("slice", "int", "array") for it in items)
    if consumed > len(shape):
        raise IndexError(f"too many indices for array: array is {len(shape)}-dimensional, but "
                         f"{consumed} were indexed")
    full = ("slice", slice(None))
    if any(it[0] == "ellipsis" for it in items):
        at = [it[0] for it in items].index("ellipsis")
        items[at:at + 1] = [full] * (len(shape) - consumed)
    else:
        items += [full] * (len(shape) - consumed)

    has_arrays = any(it[0] == "array" for it in items)
    new_shape, entries = [], []
    dims = iter(shape)
    for it in items:
        kind = it[0]
        if kind == "none" or kind == "bool":
            new_shape.append(1)
            if kind == "bool" and has_arrays:
                # a scalar bool acts as a mask over a new axis: index [0] (True) or [] (False)
                entries.append(_IntArray(np.arange(int(it[1]))))
            else:
                size = 0 if kind == "bool" and not it[1] else 1
                entries.append(_Slice(0, 1, size))
            continue
        n = next(dims)
        new_shape.append(n)
        if kind == "slice":
            s = it[1]
            start, stop, step = slice(_slice_bound(s.start, "start"), _slice_bound(s.stop, "stop"),
                                      _slice_bound(s.step, "step")).indices(n)
            entries.append(_Slice(start, step, len(range(start, stop, step))))
        elif kind == "int":
            entries.append(_Int(it[1]))
        else:
            entries.append(_IntArray(it[1]))
    return _Parsed(tuple(new_shape), tuple(entries))


# =============================================================================================
# Index arrays for gather and scatter
# =============================================================================================


def _normalize(value, size: int, index_dtype):
    """Negative indices count from the end; converted to ``index_dtype``."""
    concrete = value if isinstance(value, (int, np.ndarray)) else None
    if concrete is not None:
        v = np.asarray(concrete).astype(np.int64)
        return np.where(v < 0, v + size, v).astype(index_dtype)
    dtype = get_aval(value).dtype
    if not _dtypes.is_unsigned(dtype):
        value = elementwise.select(elementwise.lt(value, 0), elementwise.add(value, size), value)
    return elementwise.convert_element_type(value, index_dtype)


def _index_dtype(entries):
    wide = any(isinstance(e, (_Int, _IntArray)) and isinstance(e.value, Tracer)
               and get_aval(e.value).dtype.itemsize == 8 for e in entries)
    return _dtypes.int64 if wide and _dtypes.x64_enabled() else _dtypes.int32


class _Indexer(NamedTuple):
    """A gather/scatter equivalent of an index expression on an array of ``shape``."""
    shape: tuple           # operand shape (new axes included)
    indices: object        # np.ndarray or traced, shape batch + (num_columns,)
    dnums: indexing.GatherDimensionNumbers
    slice_sizes: tuple
    out_shape: tuple       # shape of x[idx]


def _place(value, axes, batch_shape):
    """Broadcast ``value`` to ``batch_shape`` with its axes at ``axes``."""
    if isinstance(value, np.ndarray):
        along = [1] * len(batch_shape)
        for a, s in zip(axes, value.shape):
            along[a] = s
        return np.broadcast_to(value.reshape(along), batch_shape)
    return structural.broadcast_in_dim(value, batch_shape, tuple(axes))


def _build_indexer(parsed: _Parsed) -> _Indexer:
    shape, entries = parsed
    index_dtype = _index_dtype(entries)
    has_arrays = any(isinstance(e, _IntArray) for e in entries)
    advanced = [d for d, e in enumerate(entries)
                if isinstance(e, _IntArray) or (has_arrays and isinstance(e, _Int))]
    adjacent = advanced == list(range(advanced[0], advanced[-1] + 1)) if advanced else True

    # NumPy's broadcasting of the advanced indices (integers are 0-d)
    adv_values = {d: _normalize(entries[d].value, shape[d], index_dtype) for d in advanced}
    adv_shape = np.broadcast_shapes(*(get_aval(v).shape if isinstance(v, Tracer) else np.shape(v)
                                      for v in adv_values.values())) if advanced else ()

    # Output axes in order: ('block',) for the advanced block, ('offset', d), ('strided', d).
    layout = [("block",)] if advanced and not adjacent else []
    for d, e in enumerate(entries):
        if d in advanced:
            if adjacent and d == advanced[0]:
                layout.append(("block",))
        elif isinstance(e, _Slice):
            layout.append(("offset", d) if e.step == 1 else ("strided", d))

    batch_shape, batch_axes_of = [], {}
    out_shape, offset_dims = [], []
    for item in layout:
        if item[0] == "block":
            batch_axes_of["block"] = list(range(len(batch_shape), len(batch_shape) + len(adv_shape)))
            batch_shape.extend(adv_shape)
            out_shape.extend(adv_shape)
        elif item[0] == "strided":
            batch_axes_of[item[1]] = [len(batch_shape)]
            batch_shape.append(entries[item[1]].size)
            out_shape.append(entries[item[1]].size)
        else:
            offset_dims.append(len(out_shape))
            out_shape.append(entries[item[1]].size)
    batch_shape = tuple(batch_shape)

    columns, index_map, collapsed, slice_sizes = [], [], [], []
    for d, e in enumerate(entries):
        if d in advanced:
            value = adv_values[d]
            value = value if isinstance(value, Tracer) else np.asarray(value)
            block = batch_axes_of["block"]
            v_shape = get_aval(value).shape if isinstance(value, Tracer) else value.shape
            # right-align the value's axes within the advanced block (broadcasting)
            columns.append(_place(value, block[len(block) - len(v_shape):], batch_shape))
        elif isinstance(e, _Int):
            columns.append(_place(_normalize(e.value, shape[d], index_dtype), (), batch_shape))
        elif e.step != 1:
            positions = (e.start + e.step * np.arange(e.size)).astype(index_dtype)
            columns.append(_place(positions, batch_axes_of[d], batch_shape))
        else:
            slice_sizes.append(e.size)
            if e.start != 0:
                index_map.append(d)
                columns.append(_place(np.asarray(e.start, index_dtype), (), batch_shape))
            continue
        index_map.append(d)
        collapsed.append(d)
        slice_sizes.append(1)

    if all(isinstance(c, np.ndarray) for c in columns):
        indices = np.stack(columns, axis=-1) if columns else np.zeros(batch_shape + (0,), index_dtype)
        indices = indices.astype(index_dtype)
    else:
        columns = [structural.reshape(c if isinstance(c, Tracer) else Array(np.ascontiguousarray(c)),
                                      batch_shape + (1,)) for c in columns]
        indices = structural.concatenate(columns, len(batch_shape))
    dnums = indexing.GatherDimensionNumbers(
        offset_dims=tuple(offset_dims), collapsed_slice_dims=tuple(collapsed),
        start_index_map=tuple(index_map))
    return _Indexer(shape, indices, dnums, tuple(slice_sizes), tuple(out_shape))


def _indices_operand(indices):
    return Array(np.ascontiguousarray(indices)) if isinstance(indices, np.ndarray) else indices


# =============================================================================================
# x[idx]
# =============================================================================================


def _basic_getitem(x, parsed: _Parsed):
    """Slices and integers only: slice / rev / dynamic_slice / squeeze, no gather."""
    shape, entries = parsed
    dynamic = [d for d, e in enumerate(entries) if isinstance(e, _Int) and isinstance(e.value, Tracer)]
    if dynamic:
        starts = [entries[d].value if d in dynamic else 0 for d in range(len(shape))]
        sizes = [1 if d in dynamic else n for d, n in enumerate(shape)]
        allow = [d in dynamic for d in range(len(shape))]
        x = structural.dynamic_slice(x, starts, sizes, allow_negative_indices=allow)
    starts, limits, strides, flipped, dropped = [], [], [], [], []
    for d, (n, e) in enumerate(zip(shape, entries)):
        if isinstance(e, _Int):
            dropped.append(d)
            if d in dynamic:
                starts.append(0), limits.append(1), strides.append(1)
                continue
            if n == 0:
                raise IndexError(f"index {e.value} is out of bounds for axis {d} with size 0")
            i = e.value + n if e.value < 0 else e.value
            i = min(max(i, 0), n - 1)  # out-of-bounds reads are clamped
            starts.append(i), limits.append(i + 1), strides.append(1)
        elif e.size == 0:
            starts.append(0), limits.append(0), strides.append(1)
        elif e.step > 0:
            starts.append(e.start), limits.append(e.start + (e.size - 1) * e.step + 1)
            strides.append(e.step)
        else:
            lowest = e.start + (e.size - 1) * e.step
            starts.append(lowest), limits.append(e.start + 1), strides.append(-e.step)
            flipped.append(d)
    x = structural.slice(x, starts, limits, strides)
    x = structural.rev(x, flipped)
    return structural.squeeze(x, dropped)


def getitem(x, idx, mode=None, fill_value=None):
    """``x[idx]`` with NumPy's indexing rules (basic, advanced and mixed).

    ``mode``: ``None``/``"clip"``/``"promise_in_bounds"`` clamp out-of-bounds indices;
    ``"fill"``/``"drop"`` return ``fill_value`` there (default NaN for floats).

        >>> x = jnp.arange(12).reshape(3, 4)
        >>> getitem(x, (slice(None, None, -1), [0, 3]))
        Array([[ 8, 11],
               [ 4,  7],
               [ 0,  3]], dtype=int32)
    """
    x = to_array(x)
    if isinstance(idx, tuple) and not idx:
        return x
    parsed = _parse_index(get_aval(x).shape, idx)
    if parsed.shape != get_aval(x).shape:
        x = structural.reshape(x, parsed.shape)
    fill = mode is not None and indexing.GatherScatterMode.from_any(mode) \
        == indexing.GatherScatterMode.FILL_OR_DROP
    if not fill and not any(isinstance(e, _IntArray) for e in parsed.entries):
        return _basic_getitem(x, parsed)
    indexer = _build_indexer(parsed)
    aval = get_aval(x)
    if 0 in indexer.out_shape:
        return structural.full(indexer.out_shape, 0, aval.dtype, weak_type=aval.weak_type)
    if any(s > n for s, n in zip(indexer.slice_sizes, aval.shape)):
        raise IndexError(f"cannot index into an axis of size 0 (array shape {aval.shape})")
    gather_mode = indexing.GatherScatterMode.CLIP if mode is None else \
        indexing.GatherScatterMode.from_any(mode)
    return indexing.gather(x, _indices_operand(indexer.indices), indexer.dnums,
                           indexer.slice_sizes, mode=gather_mode, fill_value=fill_value)


# =============================================================================================
# x.at[idx].op(values)
# =============================================================================================

_SCATTERS = {"set": indexing.scatter, "add": indexing.scatter_add, "mul": indexing.scatter_mul,
             "min": indexing.scatter_min, "max": indexing.scatter_max}


def _unique_rows(indices, shape, dnums, mode) -> bool:
    """Whether concrete ``indices`` address disjoint windows (every addressed axis with a
    window of 1 differs between any two rows, or the rows differ at all)."""
    if not isinstance(indices, np.ndarray):
        return False
    rows = indices.reshape(int(np.prod(indices.shape[:-1])), indices.shape[-1]).astype(np.int64)
    if mode == indexing.GatherScatterMode.CLIP and rows.size:
        upper = np.asarray([shape[d] - 1 for d in dnums.start_index_map], np.int64)
        rows = np.clip(rows, 0, upper)
    return len(rows) <= 1 or len(np.unique(rows, axis=0)) == len(rows)


def scatter_update(x, idx, values, op, mode=None):
    """``x.at[idx].set/add/mul/min/max(values)``: a copy of ``x`` with ``values`` (broadcast
    to ``x[idx]``'s shape and cast to ``x``'s dtype) combined in at ``idx``. Repeated indices
    accumulate for ``add``/``mul``/``min``/``max``. Out-of-bounds updates are dropped
    (``mode="clip"`` clamps them instead).

        >>> jnp.zeros(3).at[jnp.array([0, 0, 2])].add(1.0)
        Array([2., 0., 1.], dtype=float32)
    """
    if op not in _SCATTERS:
        raise ValueError(f"unknown indexed update {op!r}; expected one of {sorted(_SCATTERS)}")
    x = to_array(x)
    aval = get_aval(x)
    values = elementwise.convert_element_type(to_array(values), aval.dtype, aval.weak_type)
    parsed = _parse_index(aval.shape, idx)
    operand = structural.reshape(x, parsed.shape) if parsed.shape != aval.shape else x
    indexer = _build_indexer(parsed)
    values_shape = get_aval(values).shape
    if len(values_shape) > len(indexer.out_shape):
        # leading axes of size 1 beyond the indexed shape are allowed (NumPy assignment rule)
        extra = len(values_shape) - len(indexer.out_shape)
        if any(s != 1 for s in values_shape[:extra]):
            raise ValueError(f"cannot broadcast update of shape {values_shape} to indexed "
                             f"shape {indexer.out_shape}")
        values = structural.reshape(values, values_shape[extra:])
    values = broadcast_to_shape(values, indexer.out_shape)
    if 0 in indexer.out_shape or any(s > n for s, n in zip(indexer.slice_sizes, parsed.shape)):
        return x  # nothing is written (empty selection, or an index into an empty axis)
    scatter_mode = indexing.GatherScatterMode.from_any(mode)
    unique = _unique_rows(indexer.indices, parsed.shape, indexer.dnums, scatter_mode)
    dn = indexer.dnums
    sdn = indexing.ScatterDimensionNumbers(
        update_window_dims=dn.offset_dims, inserted_window_dims=dn.collapsed_slice_dims,
        scatter_dims_to_operand_dims=dn.start_index_map)
    out = _SCATTERS[op](operand, _indices_operand(indexer.indices), values, sdn,
                        unique_indices=unique, mode=scatter_mode)
    return structural.reshape(out, aval.shape) if parsed.shape != aval.shape else out
