"""Shape primitives: reshape, transpose, squeeze, rev, pad, concatenate, slice, iota,
dynamic_slice and dynamic_update_slice (and the lax functions built on them: expand_dims,
slice_in_dim, index_in_dim, iota, broadcasted_iota and the ``dynamic_*_in_dim`` helpers).
``broadcast_in_dim``, ``broadcast`` and ``full`` are exported here too: they are declared in
``conversions``, the bottom family, as the families between it and this one (elementwise,
reductions) build their operands and constants with them; ``broadcast_in_dim``'s transpose
is declared here.

Each primitive's shape rule, reference implementation, JVP/transpose and batching rules are
declared together below it, except the batching rules of ``dynamic_slice`` and
``dynamic_update_slice`` with batched start indices, which are a gather and a scatter and
are attached in ``indexing`` (a family above this one) next to those.
"""
from __future__ import annotations

import builtins
import math
import operator
from typing import Sequence

import numpy as np

from functrans import _dtypes
from functrans import core
from functrans.core import Primitive, ShapedArray, Tracer, canonicalize_shape, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters.ad import Zero, is_undefined_primal
from functrans.primitives import elementwise, reductions
from functrans.primitives.conversions import broadcast, broadcast_in_dim, broadcast_in_dim_p, full
from functrans.primitives.elementwise import elementwise_operands

# The lax function ``slice`` below shadows the builtin inside this module.
_py_slice = builtins.slice

# =============================================================================================
# broadcast_in_dim's transpose
# =============================================================================================
# broadcast_in_dim is declared with its other rules in conversions, the bottom family; its
# transpose sums (reductions) and reshapes, so it is attached here, above both.

def _broadcast_in_dim_transpose(ct, operand, *, shape, broadcast_dimensions):
    in_shape = operand.aval.shape
    new_axes = tuple(i for i in range(len(shape)) if i not in broadcast_dimensions)
    # axes where the operand had size 1 but the result is larger were broadcast too
    stretched = tuple(d for i, d in enumerate(broadcast_dimensions)
                      if in_shape[i] == 1 and shape[d] != 1)
    summed = reductions.reduce_sum(ct, tuple(sorted(new_axes + stretched)))
    return [reshape(summed, in_shape)]


ad.deflinear2(broadcast_in_dim_p, _broadcast_in_dim_transpose)


# =============================================================================================
# host data as operands
# =============================================================================================

def as_array(x):
    """``x`` as ``jnp.asarray(x)`` gives it, for operands of the lax-level functions: tracers
    and Arrays as they are, host data (a NumPy value, a Python scalar) as an Array of its
    canonical type, holding a private copy of it. Like ``jnp.asarray``, turning host data
    into an Array is an implicit transfer, which a transfer guard may log or refuse."""
    if isinstance(x, Tracer) or getattr(x, "_value", None) is not None:
        return x
    if hasattr(x, "__jax_array__"):
        return as_array(x.__jax_array__())
    return core.implicit_host_to_array(x, get_aval(x))


# =============================================================================================
# reshape
# =============================================================================================

reshape_p = Primitive("reshape")


@reshape_p.def_abstract_eval
def _reshape_rule(operand, *, new_sizes, dimensions=None):
    if dimensions is not None:
        raise TypeError("reshape: the `dimensions` parameter is expressed as a transpose first")
    if int(np.prod(new_sizes, dtype=np.int64)) != operand.size or any(s < 0 for s in new_sizes):
        raise TypeError(f"reshape: cannot reshape {operand.str_short()} (size {operand.size}) "
                        f"to shape {tuple(new_sizes)}")
    return ShapedArray(new_sizes, operand.dtype, operand.weak_type)


@reshape_p.def_impl
def _reshape_impl(operand, *, new_sizes, dimensions=None):
    return np.reshape(operand, new_sizes)


def _reshape_batch(vals, dims, *, new_sizes, dimensions=None):
    (x,), (d,) = vals, dims
    x = batching.moveaxis(x, d, 0)
    size = get_aval(x).shape[0]
    return reshape_p.bind(x, new_sizes=(size,) + tuple(new_sizes), dimensions=None), 0


ad.deflinear2(reshape_p, lambda ct, operand, **p: [reshape(ct, operand.aval.shape)])
reshape_p.batch = _reshape_batch


def reshape(operand, new_sizes, dimensions=None):
    """Reshape (row-major); with ``dimensions``, transpose by it first."""
    new_sizes = canonicalize_shape(new_sizes)
    if dimensions is not None and tuple(dimensions) != tuple(range(len(dimensions))):
        operand = transpose(operand, tuple(dimensions))
    if get_aval(operand).shape == new_sizes and not _dtypes.is_python_scalar(operand):
        return operand
    return reshape_p.bind(operand, new_sizes=new_sizes, dimensions=None)


# =============================================================================================
# transpose
# =============================================================================================

transpose_p = Primitive("transpose")


@transpose_p.def_abstract_eval
def _transpose_rule(operand, *, permutation):
    if sorted(permutation) != list(range(operand.ndim)):
        raise TypeError(f"transpose: permutation {tuple(permutation)} is not a permutation of "
                        f"the axes of {operand.str_short()}")
    return ShapedArray(tuple(operand.shape[p] for p in permutation), operand.dtype, operand.weak_type)


@transpose_p.def_impl
def _transpose_impl(operand, *, permutation):
    return np.transpose(operand, permutation)


def _transpose_transpose(ct, operand, *, permutation):
    inverse = tuple(int(i) for i in np.argsort(permutation))
    return [transpose(ct, inverse)]


def _transpose_batch(vals, dims, *, permutation):
    (x,), (d,) = vals, dims
    perm = (d,) + tuple(p + (p >= d) for p in permutation)
    return transpose_p.bind(x, permutation=perm), 0


ad.deflinear2(transpose_p, _transpose_transpose)
transpose_p.batch = _transpose_batch


def transpose(operand, permutation):
    """Permute the axes of ``operand``."""
    permutation = tuple(int(p) for p in permutation)
    if permutation == tuple(range(len(permutation))) and not _dtypes.is_python_scalar(operand):
        return operand
    return transpose_p.bind(operand, permutation=permutation)


batching.register_axis_primitives(transpose, broadcast_in_dim)
ad.register_tangent_primitives(full=full)


# =============================================================================================
# squeeze / expand_dims
# =============================================================================================

squeeze_p = Primitive("squeeze")


@squeeze_p.def_abstract_eval
def _squeeze_rule(operand, *, dimensions):
    for d in dimensions:
        if not 0 <= d < operand.ndim or operand.shape[d] != 1:
            raise TypeError(f"squeeze: cannot remove dimension {d} of {operand.str_short()}; "
                            "only axes of size 1 can be squeezed")
    shape = tuple(s for i, s in enumerate(operand.shape) if i not in dimensions)
    return ShapedArray(shape, operand.dtype, operand.weak_type)


@squeeze_p.def_impl
def _squeeze_impl(operand, *, dimensions):
    return np.squeeze(operand, axis=tuple(dimensions)) if dimensions else operand


def _squeeze_batch(vals, dims, *, dimensions):
    (x,), (d,) = vals, dims
    x = batching.moveaxis(x, d, 0)
    return squeeze_p.bind(x, dimensions=tuple(a + 1 for a in dimensions)), 0


ad.deflinear2(squeeze_p, lambda ct, operand, **p: [reshape(ct, operand.aval.shape)])
squeeze_p.batch = _squeeze_batch


def squeeze(array, dimensions):
    """Remove the given axes, each of size 1."""
    ndim = get_aval(array).ndim
    dimensions = tuple(sorted(int(d) % ndim for d in dimensions)) if ndim else ()
    if not dimensions:
        return array
    return squeeze_p.bind(array, dimensions=dimensions)


def expand_dims(array, dimensions):
    """Insert axes of size 1 at ``dimensions`` (positions in the result)."""
    aval = get_aval(array)
    out_ndim = aval.ndim + len(dimensions)
    dims = sorted(int(d) % out_ndim for d in dimensions)
    shape = list(aval.shape)
    for d in dims:
        shape.insert(d, 1)
    return reshape(array, tuple(shape))



def _zero_scalar(dtype):
    """A 0-d zero of ``dtype`` (the padding value of transposes)."""
    return np.zeros((), dtype=dtype)


def _axes_tuple(dims, ndim: int, name: str) -> tuple:
    dims = tuple(int(d) for d in dims)
    if any(not -ndim <= d < ndim for d in dims):
        raise TypeError(f"{name}: dimensions {dims} out of range for rank {ndim}")
    return tuple(d % ndim for d in dims)


# =============================================================================================
# rev
# =============================================================================================

rev_p = Primitive("rev")


@rev_p.def_abstract_eval
def _rev_rule(operand, *, dimensions):
    if any(not 0 <= d < operand.ndim for d in dimensions) or len(set(dimensions)) != len(dimensions):
        raise TypeError(f"rev: dimensions {tuple(dimensions)} are not distinct axes of "
                        f"{operand.str_short()}")
    return operand


@rev_p.def_impl
def _rev_impl(operand, *, dimensions):
    return np.flip(operand, tuple(dimensions)) if dimensions else operand


def _rev_batch(vals, dims, *, dimensions):
    (x,), (d,) = vals, dims
    return rev_p.bind(x, dimensions=tuple(a + (a >= d) for a in dimensions)), d


ad.deflinear2(rev_p, lambda ct, operand, *, dimensions: [rev(ct, dimensions)])
rev_p.batch = _rev_batch


def rev(operand, dimensions):
    """Reverse ``operand`` along ``dimensions``.

        >>> rev(jnp.arange(3), (0,))
        Array([2, 1, 0], dtype=int32)
    """
    dimensions = _axes_tuple(dimensions, get_aval(operand).ndim, "rev")
    if not dimensions:
        return operand
    return rev_p.bind(operand, dimensions=dimensions)


# =============================================================================================
# pad
# =============================================================================================

pad_p = Primitive("pad")


def _padded_size(size: int, lo: int, hi: int, interior: int) -> int:
    return lo + hi + size + builtins.max(0, size - 1) * interior


@pad_p.def_abstract_eval
def _pad_rule(operand, padding_value, *, padding_config):
    if padding_value.ndim != 0:
        raise TypeError(f"pad: padding_value must be a scalar, got {padding_value.str_short()}")
    if operand.dtype != padding_value.dtype:
        raise TypeError(f"pad: operand {operand.str_short()} and padding_value "
                        f"{padding_value.str_short()} must have the same dtype")
    if len(padding_config) != operand.ndim:
        raise TypeError(f"pad: padding_config has {len(padding_config)} entries for operand "
                        f"{operand.str_short()} of rank {operand.ndim}")
    shape = []
    for size, (lo, hi, interior) in zip(operand.shape, padding_config):
        if interior < 0:
            raise TypeError(f"pad: interior padding must be non-negative, got {padding_config}")
        out = _padded_size(size, lo, hi, interior)
        if out < 0:
            raise TypeError(f"pad: padding_config {padding_config} crops operand "
                            f"{operand.str_short()} to a negative size")
        shape.append(out)
    return ShapedArray(shape, operand.dtype, operand.weak_type)


@pad_p.def_impl
def _pad_impl(operand, padding_value, *, padding_config):
    # Pad with the non-negative parts of lo/hi (and interior) first, then crop the negative.
    grown = [_padded_size(s, builtins.max(lo, 0), builtins.max(hi, 0), it)
             for s, (lo, hi, it) in zip(operand.shape, padding_config)]
    out = np.full(grown, padding_value, dtype=operand.dtype)
    place = tuple(_py_slice(builtins.max(lo, 0), builtins.max(lo, 0) + _padded_size(s, 0, 0, it), it + 1)
                  for s, (lo, _, it) in zip(operand.shape, padding_config))
    out[place] = operand
    crop = tuple(_py_slice(builtins.max(-lo, 0), g - builtins.max(-hi, 0))
                 for g, (lo, hi, _) in zip(grown, padding_config))
    return out[crop]


def _pad_transpose(ct, operand, padding_value, *, padding_config):
    # Undo lo/hi by padding with their negation (crops become zero pads and vice versa), then
    # keep every (interior + 1)-th element.
    unpadded = pad(ct, _zero_scalar(get_aval(ct).dtype),
                   tuple((-lo, -hi, 0) for lo, hi, _ in padding_config))
    shape = get_aval(unpadded).shape
    t_operand = slice(unpadded, (0,) * len(shape), shape,
                      tuple(it + 1 for _, _, it in padding_config))
    cts = [t_operand if is_undefined_primal(operand) else None, None]
    if is_undefined_primal(padding_value):
        all_axes = tuple(range(len(shape)))
        cts[1] = elementwise.sub(reductions.reduce_sum(ct, all_axes),
                                 reductions.reduce_sum(t_operand, all_axes))
    return cts


def _pad_batch(vals, dims, *, padding_config):
    (x, value), (xd, vd) = vals, dims
    if vd is None:
        config = list(padding_config)
        config.insert(xd, (0, 0, 0))
        return pad_p.bind(x, value, padding_config=tuple(config)), xd
    # A batched padding value: pad with zeros, then select the padding positions by a mask.
    size = get_aval(value).shape[vd]
    x = batching.bdim_at_front(x, xd, size)
    value = batching.moveaxis(value, vd, 0)
    aval = get_aval(x)
    padded = pad_p.bind(x, _zero_scalar(aval.dtype),
                        padding_config=((0, 0, 0),) + tuple(padding_config))
    out_shape = get_aval(padded).shape
    mask = pad(full(aval.shape[1:], True, np.bool_), np.array(False), padding_config)
    mask = broadcast_in_dim(mask, out_shape, tuple(range(1, len(out_shape))))
    fill = broadcast_in_dim(value, out_shape, (0,))
    return elementwise.select(mask, padded, fill), 0


ad.deflinear2(pad_p, _pad_transpose)
pad_p.batch = _pad_batch


def pad(operand, padding_value, padding_config):
    """Pad ``operand`` with ``padding_value``: ``padding_config`` has one ``(lo, hi, interior)``
    per axis; negative ``lo``/``hi`` crop.

        >>> pad(jnp.array([1, 2]), 0, [(1, 2, 1)])
        Array([0, 1, 0, 2, 0, 0], dtype=int32)
    """
    config = tuple((int(lo), int(hi), int(it)) for lo, hi, it in padding_config)
    dtype = get_aval(operand).dtype
    if _dtypes.is_python_scalar(padding_value) or isinstance(padding_value, (np.ndarray, np.generic)):
        padding_value = np.asarray(padding_value, dtype=dtype)
    return pad_p.bind(operand, padding_value, padding_config=config)


# =============================================================================================
# concatenate
# =============================================================================================

concatenate_p = Primitive("concatenate")


@concatenate_p.def_abstract_eval
def _concatenate_rule(*operands, dimension):
    if not operands:
        raise TypeError("concatenate: needs at least one operand")
    first = operands[0]
    if not 0 <= dimension < builtins.max(first.ndim, 1) or first.ndim == 0:
        raise TypeError(f"concatenate: dimension {dimension} is out of range for operands "
                        f"{', '.join(o.str_short() for o in operands)}")
    for o in operands:
        same_rest = o.ndim == first.ndim and all(
            a == b for i, (a, b) in enumerate(zip(o.shape, first.shape)) if i != dimension)
        if o.dtype != first.dtype or not same_rest:
            raise TypeError("concatenate: operands must have one dtype and equal shapes except "
                            f"along dimension {dimension}, got "
                            f"{', '.join(x.str_short() for x in operands)}")
    shape = list(first.shape)
    shape[dimension] = builtins.sum(o.shape[dimension] for o in operands)
    return ShapedArray(shape, first.dtype, all(o.weak_type for o in operands))


@concatenate_p.def_impl
def _concatenate_impl(*operands, dimension):
    return np.concatenate(operands, axis=dimension)


def _concatenate_transpose(ct, *operands, dimension):
    shape = get_aval(ct).shape
    cts, offset = [], 0
    for o in operands:
        size = (o.aval if is_undefined_primal(o) else get_aval(o)).shape[dimension]
        if is_undefined_primal(o):
            start = [0] * len(shape)
            limit = list(shape)
            start[dimension], limit[dimension] = offset, offset + size
            cts.append(slice(ct, start, limit))
        else:
            cts.append(None)
        offset += size
    return cts


def _concatenate_batch(vals, dims, *, dimension):
    size = batching.batch_size_of(vals, dims)
    vals = [batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims)]
    return concatenate_p.bind(*vals, dimension=dimension + 1), 0


ad.deflinear2(concatenate_p, _concatenate_transpose)
concatenate_p.batch = _concatenate_batch


def concatenate(operands, dimension: int):
    """Join ``operands`` (same dtype, same shape but along ``dimension``) along ``dimension``.

        >>> concatenate([jnp.array([1, 2]), jnp.array([3])], 0)
        Array([1, 2, 3], dtype=int32)
    """
    operands = list(operands)
    if len(operands) == 1 and not _dtypes.is_python_scalar(operands[0]):
        return operands[0]
    ndim = get_aval(operands[0]).ndim
    return concatenate_p.bind(*operands, dimension=int(dimension) % builtins.max(ndim, 1))


# =============================================================================================
# slice
# =============================================================================================

slice_p = Primitive("slice")


@slice_p.def_abstract_eval
def _slice_rule(operand, *, start_indices, limit_indices, strides=None):
    n = operand.ndim
    strides = strides or (1,) * n
    if not len(start_indices) == len(limit_indices) == len(strides) == n:
        raise TypeError(f"slice: start_indices {start_indices}, limit_indices {limit_indices} "
                        f"and strides {strides} must each have one entry per axis of "
                        f"{operand.str_short()}")
    shape = []
    for size, lo, hi, st in zip(operand.shape, start_indices, limit_indices, strides):
        if not 0 <= lo <= hi <= size or st < 1:
            raise TypeError(f"slice: start_indices {start_indices}, limit_indices "
                            f"{limit_indices}, strides {strides} are not a valid slice of "
                            f"{operand.str_short()} (need 0 <= start <= limit <= size, "
                            "stride >= 1)")
        shape.append(-(-(hi - lo) // st))
    return ShapedArray(shape, operand.dtype, operand.weak_type)


@slice_p.def_impl
def _slice_impl(operand, *, start_indices, limit_indices, strides=None):
    strides = strides or (1,) * operand.ndim
    return operand[tuple(_py_slice(lo, hi, st)
                         for lo, hi, st in zip(start_indices, limit_indices, strides))]


def _slice_transpose(ct, operand, *, start_indices, limit_indices, strides=None):
    shape = operand.aval.shape
    strides = strides or (1,) * len(shape)
    out_shape = get_aval(ct).shape
    config = []
    for size, lo, n, st in zip(shape, start_indices, out_shape, strides):
        # the last element read is lo + (n - 1) * st; everything after it is zero padding
        end = lo + (n - 1) * st + 1 if n else lo
        config.append((lo, size - end, st - 1))
    return [pad(ct, _zero_scalar(get_aval(ct).dtype), config)]


def _slice_batch(vals, dims, *, start_indices, limit_indices, strides=None):
    (x,), (d,) = vals, dims
    size = get_aval(x).shape[d]
    strides = strides or (1,) * len(start_indices)
    start, limit, step = list(start_indices), list(limit_indices), list(strides)
    start.insert(d, 0)
    limit.insert(d, size)
    step.insert(d, 1)
    return slice_p.bind(x, start_indices=tuple(start), limit_indices=tuple(limit),
                        strides=tuple(step)), d


ad.deflinear2(slice_p, _slice_transpose)
slice_p.batch = _slice_batch


def slice(operand, start_indices, limit_indices, strides=None):  # noqa: A001
    """The static slice ``operand[start:limit:stride]`` along every axis.

        >>> slice(jnp.arange(6), (1,), (6,), (2,))
        Array([1, 3, 5], dtype=int32)
    """
    start_indices = tuple(int(i) for i in start_indices)
    limit_indices = tuple(int(i) for i in limit_indices)
    strides = None if strides is None else tuple(int(s) for s in strides)
    if strides is not None and all(s == 1 for s in strides):
        strides = None
    aval = get_aval(operand)
    if strides is None and start_indices == (0,) * aval.ndim and limit_indices == aval.shape \
            and not _dtypes.is_python_scalar(operand):
        return operand
    return slice_p.bind(operand, start_indices=start_indices, limit_indices=limit_indices,
                        strides=strides)


def slice_in_dim(operand, start_index, limit_index, stride: int = 1, axis: int = 0):
    """``slice`` along one ``axis``; ``None`` and negative bounds work as in Python slicing.

        >>> slice_in_dim(jnp.arange(5), 1, -1)
        Array([1, 2, 3], dtype=int32)
    """
    shape = get_aval(operand).shape
    axis = int(axis) % len(shape)
    size = shape[axis]
    start = 0 if start_index is None else int(start_index)
    limit = size if limit_index is None else int(limit_index)
    start = start + size if start < 0 else start
    limit = limit + size if limit < 0 else limit
    starts, limits, strides = [0] * len(shape), list(shape), [1] * len(shape)
    starts[axis], limits[axis], strides[axis] = start, limit, int(stride)
    return slice(operand, starts, limits, strides)


def index_in_dim(operand, index: int, axis: int = 0, keepdims: bool = True):
    """Element ``index`` (negative counts from the end) along ``axis``.

        >>> index_in_dim(jnp.arange(6).reshape(2, 3), 1, keepdims=False)
        Array([3, 4, 5], dtype=int32)
    """
    shape = get_aval(operand).shape
    axis = int(axis) % len(shape)
    index = int(index)
    index = index + shape[axis] if index < 0 else index
    if not 0 <= index < shape[axis]:
        raise IndexError(f"index_in_dim: index {index} is out of bounds for axis {axis} of "
                         f"size {shape[axis]}")
    out = slice_in_dim(operand, index, index + 1, 1, axis)
    return out if keepdims else squeeze(out, (axis,))


# =============================================================================================
# iota
# =============================================================================================

iota_p = Primitive("iota")


@iota_p.def_abstract_eval
def _iota_rule(*, dtype, shape, dimension):
    dtype = np.dtype(dtype)
    if not (_dtypes.is_integer(dtype) or _dtypes.is_inexact(dtype)):
        raise TypeError(f"iota: dtype must be integer or floating, got {dtype.name}")
    if not 0 <= dimension < len(shape) or any(s < 0 for s in shape):
        raise TypeError(f"iota: dimension {dimension} is not an axis of shape {tuple(shape)}")
    return ShapedArray(shape, dtype)


@iota_p.def_impl
def _iota_impl(*, dtype, shape, dimension):
    along = [1] * len(shape)
    along[dimension] = shape[dimension]
    return np.broadcast_to(np.arange(shape[dimension], dtype=dtype).reshape(along), shape)


def broadcasted_iota(dtype, shape, dimension: int):
    """An array of ``shape`` counting 0, 1, 2, ... along ``dimension``.

        >>> broadcasted_iota(jnp.int32, (2, 3), 1)
        Array([[0, 1, 2],
               [0, 1, 2]], dtype=int32)
    """
    shape = tuple(int(s) for s in shape)
    dtype = _dtypes.canonicalize_dtype(dtype)
    return iota_p.bind(dtype=dtype, shape=shape, dimension=int(dimension) % len(shape))


def iota(dtype, size: int):
    """``[0, 1, ..., size - 1]`` of ``dtype``.

        >>> iota(jnp.int32, 3)
        Array([0, 1, 2], dtype=int32)
    """
    return broadcasted_iota(dtype, (int(size),), 0)


# =============================================================================================
# dynamic_slice / dynamic_update_slice
# =============================================================================================
#
# Start indices are separate scalar operands (one per axis) so that each can be traced on its
# own. The primitives clamp each start into [0, size - slice_size]; the lax functions first
# wrap negative indices as Python does. Batched start indices turn the slice into a gather
# (and the update into a scatter), whose batching rules carry the per-example starts.

def _check_start_indices(name, operand, indices):
    if len(indices) != operand.ndim:
        raise TypeError(f"{name}: {len(indices)} start indices for operand "
                        f"{operand.str_short()} of rank {operand.ndim}")
    for i in indices:
        if i.ndim != 0 or not _dtypes.is_integer(i.dtype):
            raise TypeError(f"{name}: start indices must be integer scalars, got "
                            f"{', '.join(x.str_short() for x in indices)}")


def _clamped_starts(shape, sizes, indices):
    return [int(np.clip(np.asarray(i).astype(np.int64), 0, s - z))
            for s, z, i in zip(shape, sizes, indices)]


dynamic_slice_p = Primitive("dynamic_slice")


@dynamic_slice_p.def_abstract_eval
def _dynamic_slice_rule(operand, *indices, slice_sizes):
    _check_start_indices("dynamic_slice", operand, indices)
    if len(slice_sizes) != operand.ndim or any(
            not 0 <= z <= s for z, s in zip(slice_sizes, operand.shape)):
        raise TypeError(f"dynamic_slice: slice_sizes {tuple(slice_sizes)} do not fit operand "
                        f"{operand.str_short()}")
    return ShapedArray(slice_sizes, operand.dtype, operand.weak_type)


@dynamic_slice_p.def_impl
def _dynamic_slice_impl(operand, *indices, slice_sizes):
    starts = _clamped_starts(operand.shape, slice_sizes, indices)
    return operand[tuple(_py_slice(b, b + z) for b, z in zip(starts, slice_sizes))]


def _dynamic_slice_jvp(primals, tangents, *, slice_sizes):
    operand, *indices = primals
    out = dynamic_slice_p.bind(operand, *indices, slice_sizes=slice_sizes)
    if isinstance(tangents[0], Zero):
        return out, Zero.from_value(out)
    return out, dynamic_slice_p.bind(tangents[0], *indices, slice_sizes=slice_sizes)


def _dynamic_slice_transpose(ct, operand, *indices, slice_sizes):
    if any(is_undefined_primal(i) for i in indices):
        raise NotImplementedError("dynamic_slice: transposing with respect to start indices")
    nones = [None] * len(indices)
    if isinstance(ct, Zero):
        return [Zero(operand.aval)] + nones
    zeros = full(operand.aval.shape, 0, operand.aval.dtype)
    return [dynamic_update_slice_p.bind(zeros, ct, *indices)] + nones


dynamic_slice_p.jvp = _dynamic_slice_jvp
dynamic_slice_p.transpose = _dynamic_slice_transpose
# dynamic_slice_p.batch is attached in indexing.py: with batched start indices the slice is a
# gather, batched by gather's own rule


dynamic_update_slice_p = Primitive("dynamic_update_slice")


@dynamic_update_slice_p.def_abstract_eval
def _dynamic_update_slice_rule(operand, update, *indices):
    _check_start_indices("dynamic_update_slice", operand, indices)
    if update.dtype != operand.dtype or update.ndim != operand.ndim or any(
            u > s for u, s in zip(update.shape, operand.shape)):
        raise TypeError(f"dynamic_update_slice: update {update.str_short()} must have the dtype "
                        f"and rank of operand {operand.str_short()} and fit inside it")
    return operand


@dynamic_update_slice_p.def_impl
def _dynamic_update_slice_impl(operand, update, *indices):
    starts = _clamped_starts(operand.shape, update.shape, indices)
    out = operand.copy()
    out[tuple(_py_slice(b, b + z) for b, z in zip(starts, update.shape))] = update
    return out


def _dynamic_update_slice_jvp(primals, tangents, **params):
    operand, update, *indices = primals
    t_operand, t_update = tangents[:2]
    out = dynamic_update_slice_p.bind(operand, update, *indices)
    if isinstance(t_operand, Zero) and isinstance(t_update, Zero):
        return out, Zero.from_value(out)
    t_operand, t_update = ad.instantiate_zeros(t_operand), ad.instantiate_zeros(t_update)
    return out, dynamic_update_slice_p.bind(t_operand, t_update, *indices)


def _dynamic_update_slice_transpose(ct, operand, update, *indices):
    if any(is_undefined_primal(i) for i in indices):
        raise NotImplementedError("dynamic_update_slice: transposing with respect to start "
                                  "indices")
    update_aval = update.aval if is_undefined_primal(update) else get_aval(update)
    nones = [None] * len(indices)
    if isinstance(ct, Zero):
        return [Zero(operand.aval) if is_undefined_primal(operand) else None,
                Zero(update_aval) if is_undefined_primal(update) else None] + nones
    t_operand = t_update = None
    if is_undefined_primal(operand):
        zeros = full(update_aval.shape, 0, update_aval.dtype)
        t_operand = dynamic_update_slice_p.bind(ct, zeros, *indices)
    if is_undefined_primal(update):
        t_update = dynamic_slice_p.bind(ct, *indices, slice_sizes=update_aval.shape)
    return [t_operand, t_update] + nones


dynamic_update_slice_p.jvp = _dynamic_update_slice_jvp
dynamic_update_slice_p.transpose = _dynamic_update_slice_transpose
# dynamic_update_slice_p.batch is attached in indexing.py: with batched start indices the
# update is a scatter, batched by scatter's own rule


def _normalize_start(index, size: int, allow_negative: bool):
    """Wrap a negative start index (Python int or traced scalar) around ``size``."""
    if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
        index = int(index)
        return index + size if allow_negative and index < 0 else index
    aval = get_aval(index)
    if aval.ndim != 0 or not _dtypes.is_integer(aval.dtype):
        raise TypeError(f"start indices must be integer scalars, got {aval.str_short()}")
    if not allow_negative or _dtypes.is_unsigned(aval.dtype):
        return index
    return elementwise.select(elementwise.lt(index, 0), elementwise.add(index, size), index)


def _index_operands(indices, shape, allow_negative_indices):
    allow = allow_negative_indices
    if isinstance(allow, bool):
        allow = [allow] * len(shape)
    return [_normalize_start(i, s, a) for i, s, a in zip(indices, shape, allow)]


def dynamic_slice(operand, start_indices, slice_sizes, *, allow_negative_indices=True):
    """The slice of ``operand`` of shape ``slice_sizes`` starting at ``start_indices`` (which
    may be traced). Negative starts count from the end; a start that would run past the end
    is moved back so the slice fits.

        >>> dynamic_slice(jnp.arange(5), (3,), (3,))
        Array([2, 3, 4], dtype=int32)
    """
    shape = get_aval(operand).shape
    if len(start_indices) != len(shape):
        raise TypeError(f"dynamic_slice: {len(start_indices)} start indices for an operand of "
                        f"rank {len(shape)}")
    indices = _index_operands(list(start_indices), shape, allow_negative_indices)
    return dynamic_slice_p.bind(operand, *indices, slice_sizes=tuple(int(s) for s in slice_sizes))


def dynamic_update_slice(operand, update, start_indices, *, allow_negative_indices=True):
    """``operand`` with the block ``update`` written at ``start_indices`` (clamped so the
    block fits).

        >>> dynamic_update_slice(jnp.zeros(4), jnp.ones(2), (3,))
        Array([0., 0., 1., 1.], dtype=float32)
    """
    shape = get_aval(operand).shape
    if len(start_indices) != len(shape):
        raise TypeError(f"dynamic_update_slice: {len(start_indices)} start indices for an "
                        f"operand of rank {len(shape)}")
    indices = _index_operands(list(start_indices), shape, allow_negative_indices)
    return dynamic_update_slice_p.bind(operand, update, *indices)


def dynamic_slice_in_dim(operand, start_index, slice_size: int, axis: int = 0, *,
                         allow_negative_indices=True):
    """``dynamic_slice`` along one ``axis`` (whole extent elsewhere).

        >>> dynamic_slice_in_dim(jnp.arange(5), 1, 3)
        Array([1, 2, 3], dtype=int32)
    """
    shape = get_aval(operand).shape
    axis = int(axis) % len(shape)
    starts = [0] * len(shape)
    sizes = list(shape)
    starts[axis], sizes[axis] = start_index, int(slice_size)
    allow = [False] * len(shape)
    allow[axis] = allow_negative_indices
    return dynamic_slice(operand, starts, sizes, allow_negative_indices=allow)


def dynamic_index_in_dim(operand, index, axis: int = 0, keepdims: bool = True, *,
                         allow_negative_indices=True):
    """Element ``index`` (possibly traced) along ``axis``.

        >>> dynamic_index_in_dim(jnp.arange(5), 2, keepdims=False)
        Array(2, dtype=int32)
    """
    axis = int(axis) % get_aval(operand).ndim
    out = dynamic_slice_in_dim(operand, index, 1, axis,
                               allow_negative_indices=allow_negative_indices)
    return out if keepdims else squeeze(out, (axis,))


def dynamic_update_slice_in_dim(operand, update, start_index, axis: int, *,
                                allow_negative_indices=True):
    """``dynamic_update_slice`` at ``start_index`` along ``axis`` (0 elsewhere).

        >>> dynamic_update_slice_in_dim(jnp.zeros(4), jnp.ones(2), 1, 0)
        Array([0., 1., 1., 0.], dtype=float32)
    """
    shape = get_aval(operand).shape
    axis = int(axis) % len(shape)
    starts = [0] * len(shape)
    starts[axis] = start_index
    allow = [False] * len(shape)
    allow[axis] = allow_negative_indices
    return dynamic_update_slice(operand, update, starts, allow_negative_indices=allow)


def dynamic_update_index_in_dim(operand, update, index, axis: int, *,
                                allow_negative_indices=True):
    """Write ``update`` (with or without the indexed axis) at ``index`` along ``axis``.

        >>> dynamic_update_index_in_dim(jnp.zeros(3), 5.0, 1, 0)
        Array([0., 5., 0.], dtype=float32)
    """
    operand_aval = get_aval(operand)
    axis = int(axis) % operand_aval.ndim
    if _dtypes.is_python_scalar(update):
        update = np.asarray(update, operand_aval.dtype)
    if get_aval(update).ndim == operand_aval.ndim - 1:
        update = expand_dims(update, (axis,))
    return dynamic_update_slice_in_dim(operand, update, index, axis,
                                       allow_negative_indices=allow_negative_indices)


# =============================================================================================
# Shape and array-construction conveniences
# =============================================================================================


def full_like(x, fill_value, dtype=None, shape=None, sharding=None):
    """An array like ``x`` (its shape and dtype, unless ``shape``/``dtype`` are given) filled
    with ``fill_value``. A weakly typed ``x`` gives a weakly typed result.

        >>> full_like(jnp.ones(3, jnp.int32), 2.7)
        Array([2, 2, 2], dtype=int32)
    """
    aval = get_aval(x)
    weak = aval.weak_type and dtype is None
    dtype = aval.dtype if dtype is None else _dtypes.canonicalize_dtype(dtype)
    shape = aval.shape if shape is None else tuple(int(s) for s in shape)
    return full(shape, fill_value, dtype, weak_type=weak)


def broadcast_to_rank(x, rank: int):
    """``x`` with leading axes of size 1 added until it has ``rank`` axes (unchanged if it
    already has at least that many).

        >>> broadcast_to_rank(jnp.ones(3), 3).shape
        (1, 1, 3)
    """
    aval = get_aval(x)
    if aval.ndim >= rank:
        return broadcast_in_dim(x, aval.shape, tuple(range(aval.ndim))) \
            if _dtypes.is_python_scalar(x) else x
    return broadcast(x, (1,) * (rank - aval.ndim))


def _axis(axis: int, ndim: int, name: str) -> int:
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{name}: axis {axis} is out of bounds for an array of rank {ndim}")
    return axis % ndim


def collapse(operand, start_dimension: int, stop_dimension: int | None = None):
    """Merge axes ``start_dimension`` up to (not including) ``stop_dimension`` into one
    (to the end when ``stop_dimension`` is None); an empty range inserts an axis of size 1.

        >>> collapse(jnp.ones((2, 3, 4, 5)), 1, 3).shape
        (2, 12, 5)
    """
    shape = get_aval(operand).shape
    ndim = len(shape)
    start = start_dimension + ndim if start_dimension < 0 else start_dimension
    stop = ndim if stop_dimension is None else (
        stop_dimension + ndim if stop_dimension < 0 else stop_dimension)
    if not 0 <= start <= stop <= ndim:
        raise ValueError(f"collapse: invalid dimension range [{start_dimension}, "
                         f"{stop_dimension}) for an array of shape {shape}")
    size = math.prod(shape[start:stop])
    return reshape(operand, shape[:start] + (size,) + shape[stop:])


def empty(shape, dtype, *, out_sharding=None):
    """An array of ``shape`` and ``dtype`` whose contents are unspecified (here: zeros).

        >>> empty((2,), jnp.int32)
        Array([0, 0], dtype=int32)
    """
    return full(shape, 0, _dtypes.canonicalize_dtype(dtype))


def split(operand, sizes: Sequence[int], axis: int = 0):
    """Split ``operand`` along ``axis`` into pieces of the given ``sizes`` (which must add up
    to the axis length).

        >>> split(jnp.arange(5), [2, 3])
        [Array([0, 1], dtype=int32), Array([2, 3, 4], dtype=int32)]
    """
    shape = get_aval(operand).shape
    axis = _axis(axis, len(shape), "split")
    sizes = [operator.index(s) for s in sizes]
    if any(s < 0 for s in sizes) or sum(sizes) != shape[axis]:
        raise ValueError(f"split: sizes {sizes} must be non-negative and add up to dimension "
                         f"{axis} of the operand shape {list(shape)}")
    pieces, start = [], 0
    for s in sizes:
        pieces.append(slice_in_dim(operand, start, start + s, axis=axis))
        start += s
    return pieces


def stack(operands, axis: int = 0):
    """Join arrays of one shape and dtype along a new ``axis``.

        >>> stack([jnp.ones(2), jnp.zeros(2)], axis=1)
        Array([[1., 0.],
               [1., 0.]], dtype=float32)
    """
    operands = elementwise_operands("stack", tuple(operands), kind="any")
    ndim = get_aval(operands[0]).ndim
    axis = _axis(axis, ndim + 1, "stack")
    return concatenate([expand_dims(x, (axis,)) for x in operands], axis)


def unstack(x, axis: int = 0):
    """The slices of ``x`` along ``axis``, as a tuple (the inverse of :func:`stack`).

        >>> unstack(jnp.arange(4).reshape(2, 2))
        (Array([0, 1], dtype=int32), Array([2, 3], dtype=int32))
    """
    shape = get_aval(x).shape
    axis = _axis(axis, len(shape), "unstack")
    return tuple(index_in_dim(x, i, axis, keepdims=False) for i in range(shape[axis]))


def tile(operand, reps: Sequence[int]):
    """Repeat ``operand`` ``reps[i]`` times along each axis ``i`` (one entry per axis).

        >>> tile(jnp.arange(3), (2,))
        Array([0, 1, 2, 0, 1, 2], dtype=int32)
    """
    shape = get_aval(operand).shape
    reps = tuple(operator.index(r) for r in reps)
    if len(reps) != len(shape):
        raise TypeError(f"reps length must be equal to the ndim of x, got len(reps)="
                        f"{len(reps)} and x.ndim={len(shape)}.")
    # broadcast a new axis of length reps[i] before each axis i, then merge the pairs
    wide = tuple(v for r, d in zip(reps, shape) for v in (r, d))
    out = broadcast_in_dim(operand, wide, tuple(range(1, 2 * len(shape), 2)))
    return reshape(out, tuple(r * d for r, d in zip(reps, shape)))


def broadcast_like(arr, like_arr):
    """``arr`` broadcast (NumPy rules) to the shape of ``like_arr``.

        >>> broadcast_like(jnp.array([1, 2]), jnp.zeros((2, 2)))
        Array([[1, 2],
               [1, 2]], dtype=int32)
    """
    arr = as_array(arr)
    aval, shape = get_aval(arr), tuple(get_aval(like_arr).shape)
    if aval.shape == shape:
        return arr
    lead = len(shape) - aval.ndim
    if lead < 0 or any(s not in (1, shape[lead + i]) for i, s in enumerate(aval.shape)):
        raise ValueError(f"incompatible shapes for broadcasting: {aval.shape} and {shape}")
    # drop the size-1 axes that get stretched, so broadcast_in_dim maps each kept axis exactly
    keep = [i for i, s in enumerate(aval.shape) if s == shape[lead + i]]
    if len(keep) != aval.ndim:
        arr = reshape(arr, tuple(aval.shape[i] for i in keep))
    return broadcast_in_dim(arr, shape, tuple(lead + i for i in keep))


def broadcast_shapes(*shapes):
    """The shape NumPy broadcasting gives ``shapes`` (a ValueError if they do not broadcast).

        >>> broadcast_shapes((2, 1), (3,))
        (2, 3)
    """
    shapes = [tuple(operator.index(d) for d in s) for s in shapes]
    rank = max((len(s) for s in shapes), default=0)
    result = []
    for i in range(rank):
        sizes = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0} - {1}
        if len(sizes) > 1:
            raise ValueError(f"Incompatible shapes for broadcasting: shapes={shapes}")
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def dtype(x) -> np.dtype:
    """The dtype functrans gives ``x`` (a value, array, scalar type or dtype name), with
    64-bit types narrowed unless x64 is enabled.

        >>> dtype(1.0)
        dtype('float32')
    """
    if isinstance(x, (type, str, np.dtype)):
        return _dtypes.canonicalize_dtype(np.dtype(x))
    if _dtypes.is_python_scalar(x):
        return _dtypes.python_scalar_dtype(x)
    dt = getattr(x, "dtype", None)
    if dt is None:
        raise TypeError(f"Cannot determine dtype of {x!r}")
    return _dtypes.canonicalize_dtype(dt)


def shape_as_value(shape):
    """``shape`` as an int32 vector (a NumPy array, as in JAX).

        >>> shape_as_value((2, 3))
        array([2, 3], dtype=int32)
    """
    return np.asarray([operator.index(d) for d in shape], dtype=np.int32)


__all__ = ["broadcast", "broadcast_in_dim", "broadcast_like", "broadcast_shapes",
           "broadcast_to_rank", "broadcasted_iota", "collapse", "concatenate", "dtype",
           "dynamic_index_in_dim", "dynamic_slice", "dynamic_slice_in_dim",
           "dynamic_update_index_in_dim", "dynamic_update_slice",
           "dynamic_update_slice_in_dim", "empty", "expand_dims", "full", "full_like",
           "index_in_dim", "iota", "pad", "reshape", "rev", "shape_as_value", "slice",
           "slice_in_dim", "split", "squeeze", "stack", "tile", "transpose", "unstack"]
