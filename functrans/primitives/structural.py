"""Shape primitives: broadcast_in_dim, reshape, transpose, squeeze (and the lax functions
built on them: full, expand_dims, broadcast).

Each primitive's shape rule, reference implementation, JVP/transpose and batching rules are
declared together below it.
"""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans.core import Primitive, ShapedArray, get_aval
from functrans.interpreters import ad, batching

# =============================================================================================
# broadcast_in_dim
# =============================================================================================

broadcast_in_dim_p = Primitive("broadcast_in_dim")


@broadcast_in_dim_p.def_abstract_eval
def _broadcast_in_dim_rule(operand, *, shape, broadcast_dimensions):
    dims = broadcast_dimensions
    if len(dims) != operand.ndim:
        raise TypeError(f"broadcast_in_dim: operand {operand.str_short()} has {operand.ndim} "
                        f"dimensions but broadcast_dimensions={dims} has {len(dims)}")
    if any(d < 0 or d >= len(shape) for d in dims) or list(dims) != sorted(set(dims)):
        raise TypeError(f"broadcast_in_dim: broadcast_dimensions={dims} must be strictly "
                        f"increasing and within the result rank {len(shape)}")
    for i, d in enumerate(dims):
        if operand.shape[i] not in (1, shape[d]):
            raise TypeError(f"broadcast_in_dim: operand {operand.str_short()} dimension {i} "
                            f"(size {operand.shape[i]}) cannot broadcast to size {shape[d]} "
                            f"of result shape {tuple(shape)}")
    return ShapedArray(shape, operand.dtype, operand.weak_type)


@broadcast_in_dim_p.def_impl
def _broadcast_in_dim_impl(operand, *, shape, broadcast_dimensions):
    expanded = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        expanded[d] = operand.shape[i]
    return np.broadcast_to(operand.reshape(expanded), shape)


def _broadcast_in_dim_transpose(ct, operand, *, shape, broadcast_dimensions):
    in_shape = operand.aval.shape
    new_axes = tuple(i for i in range(len(shape)) if i not in broadcast_dimensions)
    # axes where the operand had size 1 but the result is larger were broadcast too
    stretched = tuple(d for i, d in enumerate(broadcast_dimensions)
                      if in_shape[i] == 1 and shape[d] != 1)
    from functrans.primitives import reductions
    summed = reductions.reduce_sum(ct, tuple(sorted(new_axes + stretched)))
    return [reshape(summed, in_shape)]


def _broadcast_in_dim_batch(vals, dims, *, shape, broadcast_dimensions):
    (x,), (d,) = vals, dims
    x = batching.moveaxis(x, d, 0)
    size = get_aval(x).shape[0]
    new_dims = (0,) + tuple(b + 1 for b in broadcast_dimensions)
    return broadcast_in_dim_p.bind(x, shape=(size,) + tuple(shape),
                                   broadcast_dimensions=new_dims), 0


ad.deflinear2(broadcast_in_dim_p, _broadcast_in_dim_transpose)
broadcast_in_dim_p.batch = _broadcast_in_dim_batch


def broadcast_in_dim(operand, shape, broadcast_dimensions):
    """Broadcast ``operand`` to ``shape``; its axis ``i`` becomes result axis
    ``broadcast_dimensions[i]``."""
    shape = tuple(int(s) for s in shape)
    broadcast_dimensions = tuple(int(d) for d in broadcast_dimensions)
    aval = get_aval(operand)
    if aval.shape == shape and broadcast_dimensions == tuple(range(len(shape))) \
            and not _dtypes.is_python_scalar(operand) and not isinstance(operand, (np.ndarray, np.generic)):
        return operand
    return broadcast_in_dim_p.bind(operand, shape=shape, broadcast_dimensions=broadcast_dimensions)


def broadcast(operand, sizes):
    """Add leading dimensions of the given ``sizes``."""
    aval = get_aval(operand)
    sizes = tuple(sizes)
    dims = tuple(range(len(sizes), len(sizes) + aval.ndim))
    return broadcast_in_dim(operand, sizes + aval.shape, dims)


def full(shape, fill_value, dtype=None, weak_type: bool = False):
    """An array of ``shape`` filled with ``fill_value``."""
    from functrans.primitives import elementwise
    shape = tuple(int(s) for s in shape)
    if dtype is None:
        dtype, weak_type = _dtypes.dtype_and_weak(fill_value)
    dtype = _dtypes.canonicalize_dtype(dtype)
    if not _dtypes.is_python_scalar(fill_value) and get_aval(fill_value).ndim != 0:
        raise TypeError(f"full: fill_value must be a scalar, got shape {get_aval(fill_value).shape}")
    if isinstance(fill_value, (int, float, bool, complex, np.generic, np.ndarray)):
        scalar = np.asarray(fill_value).astype(dtype)[()]
        if weak_type:
            py = scalar.item()
            if _dtypes.is_python_scalar(py) and _dtypes.python_scalar_dtype(py) == dtype:
                scalar = py  # a weak literal of the default dtype
            else:
                scalar = elementwise.convert_element_type(scalar, dtype, weak_type=True)
    else:
        scalar = elementwise.convert_element_type(fill_value, dtype, weak_type=weak_type)
    return broadcast_in_dim_p.bind(scalar, shape=shape, broadcast_dimensions=())


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
    new_sizes = tuple(int(s) for s in new_sizes)
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
