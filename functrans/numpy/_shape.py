"""Shape manipulation: reshape, transpose, stacking, splitting, tiling, flipping, and taking
elements along an axis (``pad`` is ``_padding``'s, ``repeat`` ``_sorting``'s and ``trace``
``_reductions``': each needs a layer above this one).

Everything here has static output shapes. Selections with static positions (``delete``,
``insert``, ``tile``) are lowered to slices, reversals and concatenations rather than
gathers, which keeps the IR small and every backend on its fast path.
"""
from __future__ import annotations

import builtins

import numpy as np

from functrans import _dtypes
from functrans._array import sharding_layer
from functrans.core import canonicalize_shape, get_aval, Tracer
from functrans.numpy._promotion import (asarray, broadcast_shapes, broadcast_to_shape,
                                        canonicalize_axes, canonicalize_axis, check_arraylike,
                                        concrete_or_error, concrete_value, iota, lax_fn,
                                        operator_index, promote_dtypes, to_array)
from functrans.primitives import elementwise as lax
from functrans.primitives import structural
from functrans.numpy import _indexing
from functrans.numpy._ufuncs import remainder

# ---- reshaping -------------------------------------------------------------------------------


def _shape_arg(newshape):
    return list(canonicalize_shape(newshape))


def _resolve_shape(newshape, size, fname="reshape"):
    newshape = _shape_arg(newshape)
    if newshape.count(-1) > 1:
        raise TypeError(f"{fname}: can only specify one unknown dimension (-1), got "
                        f"{tuple(newshape)}")
    if -1 in newshape:
        known = int(np.prod([s for s in newshape if s != -1], dtype=np.int64))
        if known == 0 or size % known:
            raise TypeError(f"{fname}: cannot reshape an array of size {size} into shape "
                            f"{tuple(newshape)}: the product of the given sizes ({known}) "
                            f"does not evenly divide {size}")
        newshape[newshape.index(-1)] = size // known
    if int(np.prod(newshape, dtype=np.int64)) != size:
        raise TypeError(f"{fname}: cannot reshape an array of size {size} into shape "
                        f"{tuple(newshape)} (size {int(np.prod(newshape, dtype=np.int64))})")
    return tuple(newshape)


def reshape(a, newshape=None, order="C", *, shape=None, copy=None, out_sharding=None):
    """``a`` with a new shape (one entry may be -1); ``order='F'`` reads and writes
    column-major.

        >>> reshape(arange(6), (2, -1))
        Array([[0, 1, 2],
               [3, 4, 5]], dtype=int32)

    As in JAX, a NumPy array is reshaped by its own ``reshape`` method, so it stays a NumPy
    array (``jnp.reshape(uint8_images, ...) / 255.0`` is float64, computed by NumPy).
    """
    if shape is not None:
        newshape = shape
    if newshape is None:
        raise TypeError("reshape: missing the new shape")
    if out_sharding is None and isinstance(a, (np.ndarray, np.generic)):
        return a.reshape(newshape, order=order)
    if out_sharding is not None:
        return sharding_layer.constrain(reshape(to_array(a), newshape, order), out_sharding)
    a = to_array(a)
    aval = get_aval(a)
    new = _resolve_shape(newshape, aval.size)
    if order == "C":
        return structural.reshape(a, new)
    if order == "F":
        reversed_in = structural.transpose(a, tuple(reversed(range(aval.ndim))))
        out = structural.reshape(reversed_in, tuple(reversed(new)))
        return structural.transpose(out, tuple(reversed(range(len(new)))))
    raise ValueError(f"reshape: order must be 'C' or 'F', got {order!r}")


def ravel(a, order="C"):
    """The elements of ``a`` as a 1-D array."""
    a = to_array(a)
    return reshape(a, (get_aval(a).size,), order)




def transpose(a, axes=None):
    """Permute the axes of ``a`` (reverse them when ``axes`` is None).

        >>> transpose(ones((2, 3))).shape
        (3, 2)
    """
    a = to_array(a)
    ndim = get_aval(a).ndim
    if axes is None:
        perm = tuple(reversed(range(ndim)))
    else:
        perm = tuple(canonicalize_axis(ax, ndim) for ax in axes)
        if sorted(perm) != list(range(ndim)):
            raise ValueError(f"transpose: axes {tuple(axes)} are not a permutation of "
                             f"{ndim} axes")
    return structural.transpose(a, perm)


def permute_dims(a, /, axes):
    """Array-API name for :func:`transpose` with explicit axes."""
    return transpose(a, axes)


def matrix_transpose(x, /):
    """Swap the last two axes."""
    x = to_array(x)
    if get_aval(x).ndim < 2:
        raise ValueError("matrix_transpose requires at least 2 dimensions")
    return swapaxes(x, -1, -2)


def moveaxis(a, source, destination):
    """Move axes ``source`` to positions ``destination`` (ints or sequences).

        >>> moveaxis(ones((2, 3, 4)), 0, -1).shape
        (3, 4, 2)
    """
    a = to_array(a)
    ndim = get_aval(a).ndim
    src = [source] if isinstance(source, (int, np.integer)) else list(source)
    dst = [destination] if isinstance(destination, (int, np.integer)) else list(destination)
    if len(src) != len(dst):
        raise ValueError("moveaxis: source and destination must have the same length")
    src = [canonicalize_axis(s, ndim) for s in src]
    dst = [canonicalize_axis(d, ndim) for d in dst]
    order = [i for i in range(ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return structural.transpose(a, tuple(order))


def swapaxes(a, axis1, axis2):
    """Interchange two axes."""
    a = to_array(a)
    ndim = get_aval(a).ndim
    perm = list(range(ndim))
    i, j = canonicalize_axis(axis1, ndim), canonicalize_axis(axis2, ndim)
    perm[i], perm[j] = perm[j], perm[i]
    return structural.transpose(a, tuple(perm))


def rollaxis(a, axis, start=0):
    """Roll ``axis`` backwards until it lies before ``start`` (prefer :func:`moveaxis`)."""
    a = to_array(a)
    ndim = get_aval(a).ndim
    axis = canonicalize_axis(axis, ndim)
    start = start + ndim if start < 0 else start
    if axis < start:
        start -= 1
    return moveaxis(a, axis, start)


def squeeze(a, axis=None):
    """Remove axes of length one (all of them, or the given ``axis``).

        >>> squeeze(ones((1, 3, 1))).shape
        (3,)
    """
    a = to_array(a)
    aval = get_aval(a)
    if axis is None:
        axes = tuple(i for i, s in enumerate(aval.shape) if s == 1)
    else:
        axes = canonicalize_axes(axis, aval.ndim)
        for i in axes:
            if aval.shape[i] != 1:
                raise ValueError(f"squeeze: cannot select an axis to squeeze out which has "
                                 f"size not equal to one (axis {i} of shape {aval.shape})")
    return structural.squeeze(a, axes) if axes else a


def expand_dims(a, axis):
    """Insert length-one axes at positions ``axis`` (an int or a tuple) of the result."""
    a = to_array(a)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out_ndim = get_aval(a).ndim + len(axes)
    return structural.expand_dims(a, canonicalize_axes(axes, out_ndim))


def broadcast_to(array, shape):
    """Broadcast ``array`` to ``shape`` (NumPy's rules).

        >>> broadcast_to(arange(3), (2, 3)).shape
        (2, 3)
    """
    return broadcast_to_shape(to_array(array), canonicalize_shape(shape))


def broadcast_arrays(*args):
    """Broadcast all arguments against each other."""
    arrays = [to_array(a) for a in args]
    shape = broadcast_shapes(*(get_aval(a).shape for a in arrays))
    return [broadcast_to_shape(a, shape) for a in arrays]


def _atleast(arys, ndim, layout):
    outs = []
    for a in arys:
        a = to_array(a)
        shape = get_aval(a).shape
        if len(shape) < ndim:
            a = structural.reshape(a, layout(shape))
        outs.append(a)
    return outs[0] if len(outs) == 1 else outs


def atleast_1d(*arys):
    """Inputs viewed with at least one dimension."""
    return _atleast(arys, 1, lambda s: (1,))


def atleast_2d(*arys):
    """Inputs viewed with at least two dimensions (1-D ``(n,)`` becomes ``(1, n)``)."""
    return _atleast(arys, 2, lambda s: (1,) * (2 - len(s)) + s)


def atleast_3d(*arys):
    """Inputs viewed with at least three dimensions (``(n,)`` -> ``(1, n, 1)``, ``(m, n)``
    -> ``(m, n, 1)``)."""
    return _atleast(arys, 3, lambda s: {0: (1, 1, 1), 1: (1,) + s + (1,), 2: s + (1,)}[len(s)])


# ---- slicing helpers -------------------------------------------------------------------------


def slice_along_axis(x, axis, start, stop, step=1):
    """``x[..., start:stop:step, ...]`` on ``axis`` for static non-negative bounds."""
    aval = get_aval(x)
    if start == 0 and stop == aval.shape[axis] and step == 1:
        return x
    starts = [0] * aval.ndim
    limits = list(aval.shape)
    strides = [1] * aval.ndim
    starts[axis], limits[axis], strides[axis] = start, stop, step
    if stop <= start:
        shape = list(aval.shape)
        shape[axis] = 0
        return structural.full(tuple(shape), 0, aval.dtype, weak_type=aval.weak_type)
    return lax_fn("slice")(x, tuple(starts), tuple(limits),
                           None if step == 1 else tuple(strides))


def _rev(x, axes):
    if not axes:
        return x
    return lax_fn("rev")(x, tuple(axes))


def _concat(pieces, axis):
    pieces = [p for p in pieces if get_aval(p).shape[axis] != 0] or pieces[:1]
    if len(pieces) == 1:
        return pieces[0]
    return lax_fn("concatenate")(pieces, axis)


def take_static(x, indices, axis):
    """``x`` gathered at static non-negative ``indices`` along ``axis``, as slices,
    reversals, broadcasts and one concatenation (runs of consecutive, reversed or repeated
    positions each become one piece)."""
    indices = [int(i) for i in indices]
    aval = get_aval(x)
    if not indices:
        shape = list(aval.shape)
        shape[axis] = 0
        return structural.full(tuple(shape), 0, aval.dtype, weak_type=aval.weak_type)
    runs = []
    i = 0
    while i < len(indices):
        j = i + 1
        step = indices[j] - indices[i] if j < len(indices) else 1
        if step in (-1, 0, 1):
            while j < len(indices) and indices[j] - indices[j - 1] == step:
                j += 1
        else:
            step = 1
        runs.append((indices[i], j - i, step))
        i = j
    if len(runs) > 64:
        # many short runs: one gather is smaller than a concatenation of many slices
        try:
            return take(x, np.asarray(indices, dtype=np.int32), axis=axis, mode="clip")
        except NotImplementedError:
            pass
    pieces = []
    for first, length, step in runs:
        if step == 1:
            piece = slice_along_axis(x, axis, first, first + length)
        elif step == -1:
            piece = _rev(slice_along_axis(x, axis, first - length + 1, first + 1), (axis,))
        else:
            one = slice_along_axis(x, axis, first, first + 1)
            shape = list(get_aval(one).shape)
            shape[axis] = length
            piece = broadcast_to_shape(one, tuple(shape))
        pieces.append(piece)
    return _concat(pieces, axis)


# ---- joining ---------------------------------------------------------------------------------


def concatenate(arrays, axis=0, dtype=None):
    """Join arrays along an existing axis (``axis=None`` flattens them first).

        >>> concatenate([arange(2), arange(3)])
        Array([0, 1, 0, 1, 2], dtype=int32)
    """
    if isinstance(arrays, (Tracer,)) or hasattr(arrays, "aval"):
        arrays = [arrays[i] for i in range(get_aval(arrays).shape[0])]
    arrays = list(arrays)
    if not arrays:
        raise ValueError("concatenate: need at least one array to concatenate")
    check_arraylike("concatenate", *arrays)
    arrays = promote_dtypes(*arrays)
    if dtype is not None:
        arrays = [lax.convert_element_type(a, dtype) for a in arrays]
    if axis is None:
        arrays = [ravel(a) for a in arrays]
        axis = 0
    ndim = get_aval(arrays[0]).ndim
    if ndim == 0:
        raise ValueError("concatenate: zero-dimensional arrays cannot be concatenated")
    axis = canonicalize_axis(axis, ndim)
    for a in arrays:
        s0, s = get_aval(arrays[0]).shape, get_aval(a).shape
        if len(s) != ndim or any(x != y for i, (x, y) in enumerate(zip(s0, s)) if i != axis):
            raise ValueError(f"concatenate: all input array dimensions except for the "
                             f"concatenation axis must match, got shapes {s0} and {s}")
    if len(arrays) == 1:
        return arrays[0]
    return lax_fn("concatenate")(arrays, axis)


concat = concatenate


def _as_list(arrays, fname):
    if isinstance(arrays, Tracer) or hasattr(arrays, "aval"):
        n = get_aval(arrays).shape[0]
        return [arrays[i] for i in range(n)]
    arrays = list(arrays)
    if not arrays:
        raise ValueError(f"{fname}: need at least one array")
    return arrays


def stack(arrays, axis=0, out=None, dtype=None):
    """Join arrays of one shape along a new axis.

        >>> stack([arange(2), arange(2)]).shape
        (2, 2)
    """
    arrays = _as_list(arrays, "stack")
    arrays = [to_array(a) for a in arrays]
    shapes = {get_aval(a).shape for a in arrays}
    if len(shapes) != 1:
        raise ValueError(f"stack: all input arrays must have the same shape, got {sorted(shapes)}")
    axis = canonicalize_axis(axis, get_aval(arrays[0]).ndim + 1)
    return concatenate([expand_dims(a, axis) for a in arrays], axis=axis, dtype=dtype)


def vstack(tup, dtype=None):
    """Stack arrays vertically (row-wise), 1-D arrays becoming rows."""
    arrays = atleast_2d(*_as_list(tup, "vstack"))
    arrays = arrays if isinstance(arrays, list) else [arrays]
    return concatenate(arrays, axis=0, dtype=dtype)


row_stack = vstack


def hstack(tup, dtype=None):
    """Stack arrays horizontally (column-wise); 1-D arrays are joined end to end."""
    arrays = atleast_1d(*_as_list(tup, "hstack"))
    arrays = arrays if isinstance(arrays, list) else [arrays]
    axis = 0 if get_aval(arrays[0]).ndim == 1 else 1
    return concatenate(arrays, axis=axis, dtype=dtype)


def dstack(tup, dtype=None):
    """Stack arrays depth-wise (along a third axis)."""
    arrays = atleast_3d(*_as_list(tup, "dstack"))
    arrays = arrays if isinstance(arrays, list) else [arrays]
    return concatenate(arrays, axis=2, dtype=dtype)


def column_stack(tup):
    """Stack 1-D arrays as columns of a 2-D array (2-D arrays are joined as they are)."""
    arrays = []
    for a in _as_list(tup, "column_stack"):
        a = to_array(a)
        if get_aval(a).ndim < 2:
            a = structural.reshape(a, (get_aval(a).size, 1))
        arrays.append(a)
    return concatenate(arrays, axis=1)


def append(arr, values, axis=None):
    """``arr`` with ``values`` appended (both flattened when ``axis`` is None)."""
    if axis is None:
        return concatenate([ravel(arr), ravel(values)], axis=0)
    return concatenate([arr, values], axis=axis)


# ---- splitting -------------------------------------------------------------------------------


def _split(fname, ary, indices_or_sections, axis, even):
    ary = to_array(ary)
    aval = get_aval(ary)
    axis = canonicalize_axis(axis, aval.ndim)
    n = aval.shape[axis]
    sections = concrete_value(indices_or_sections)
    if sections is None:
        raise TypeError(f"{fname}: indices_or_sections must be static")
    if np.ndim(sections) == 0:
        k = int(sections)
        if k <= 0:
            raise ValueError(f"{fname}: number of sections must be larger than 0")
        if even and n % k:
            raise ValueError(f"{fname}: array split does not result in an equal division "
                             f"({n} elements into {k} sections)")
        size, extra = divmod(n, k)
        bounds = [0]
        for i in range(k):
            bounds.append(bounds[-1] + size + (1 if i < extra else 0))
    else:
        bounds = [0] + [builtins.min(builtins.max(int(i) if i >= 0 else int(i) + n, 0), n)
                        for i in np.asarray(sections).ravel()] + [n]
    return [slice_along_axis(ary, axis, lo, builtins.max(lo, hi))
            for lo, hi in zip(bounds[:-1], bounds[1:])]


def split(ary, indices_or_sections, axis=0):
    """Split into equal sections (an int) or at the given indices along ``axis``.

        >>> [x.shape for x in split(arange(6), 3)]
        [(2,), (2,), (2,)]
    """
    return _split("split", ary, indices_or_sections, axis, even=True)


def array_split(ary, indices_or_sections, axis=0):
    """Like :func:`split`, but sections may differ in size by one."""
    return _split("array_split", ary, indices_or_sections, axis, even=False)


def hsplit(ary, indices_or_sections):
    """Split along the second axis (the first for 1-D arrays)."""
    ary = to_array(ary)
    return split(ary, indices_or_sections, axis=1 if get_aval(ary).ndim > 1 else 0)


def vsplit(ary, indices_or_sections):
    """Split along the first axis."""
    return split(ary, indices_or_sections, axis=0)


def dsplit(ary, indices_or_sections):
    """Split along the third axis."""
    return split(ary, indices_or_sections, axis=2)


def unstack(x, /, *, axis=0):
    """The slices of ``x`` along ``axis``, as a tuple."""
    x = to_array(x)
    axis = canonicalize_axis(axis, get_aval(x).ndim)
    n = get_aval(x).shape[axis]
    return tuple(structural.squeeze(slice_along_axis(x, axis, i, i + 1), (axis,))
                 for i in range(n))


# ---- tiling and repeating --------------------------------------------------------------------


def tile(A, reps):
    """Repeat the whole array ``reps`` times along each axis.

        >>> tile(arange(2), 2)
        Array([0, 1, 0, 1], dtype=int32)
    """
    A = to_array(A)
    reps = (operator_index(reps, "tile: reps"),) if np.ndim(reps) == 0 \
        else tuple(operator_index(r, "tile: reps") for r in reps)
    shape = get_aval(A).shape
    ndim = builtins.max(len(shape), len(reps))
    shape = (1,) * (ndim - len(shape)) + shape
    reps = (1,) * (ndim - len(reps)) + reps
    A = structural.reshape(A, shape)
    # interleave a new axis of length rep before each axis, broadcast, then merge the pairs
    big = tuple(x for r, s in zip(reps, shape) for x in (r, s))
    out = structural.broadcast_in_dim(A, big, tuple(range(1, 2 * ndim, 2)))
    return structural.reshape(out, tuple(r * s for r, s in zip(reps, shape)))


def resize(a, new_shape):
    """A new array of ``new_shape`` filled with ``a``'s elements repeated in order."""
    a = ravel(to_array(a))
    new_shape = canonicalize_shape(new_shape)
    size = int(np.prod(new_shape, dtype=np.int64))
    n = get_aval(a).size
    if n == 0:
        return structural.full(new_shape, 0, get_aval(a).dtype)
    reps = -(-size // n)
    return reshape(slice_along_axis(tile(a, reps), 0, 0, size), new_shape)


# ---- flipping and rolling --------------------------------------------------------------------


def flip(m, axis=None):
    """Reverse the order of elements along ``axis`` (all axes when None)."""
    m = to_array(m)
    return _rev(m, canonicalize_axes(axis, get_aval(m).ndim))


def fliplr(m):
    """Reverse the columns (axis 1)."""
    return flip(m, 1)


def flipud(m):
    """Reverse the rows (axis 0)."""
    return flip(m, 0)


def rot90(m, k=1, axes=(0, 1)):
    """Rotate by 90 degrees ``k`` times in the plane of ``axes``."""
    m = to_array(m)
    ndim = get_aval(m).ndim
    ax1, ax2 = (canonicalize_axis(a, ndim) for a in axes)
    if ax1 == ax2:
        raise ValueError("rot90: axes must be different")
    k = operator_index(k, "rot90: k") % 4
    if k == 0:
        return m
    if k == 2:
        return flip(flip(m, ax1), ax2)
    perm = list(range(ndim))
    perm[ax1], perm[ax2] = perm[ax2], perm[ax1]
    if k == 1:
        return structural.transpose(flip(m, ax2), tuple(perm))
    return flip(structural.transpose(m, tuple(perm)), ax2)


def roll(a, shift, axis=None):
    """Shift elements cyclically along ``axis`` (the flattened array when None); ``shift``
    may be traced.

        >>> roll(arange(4), 1)
        Array([3, 0, 1, 2], dtype=int32)
    """
    a = to_array(a)
    if axis is None:
        shape = get_aval(a).shape
        return reshape(roll(ravel(a), shift, 0), shape)
    aval = get_aval(a)
    axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    shifts = concrete_value(shift)
    if shifts is not None:
        shifts = np.broadcast_to(np.asarray(shifts), (len(axes),))
    else:
        shift = to_array(shift)
        if get_aval(shift).ndim == 0:
            shift = structural.broadcast_in_dim(shift, (len(axes),), ())
    for i, ax in enumerate(axes):
        ax = canonicalize_axis(ax, aval.ndim)
        n = aval.shape[ax]
        if n == 0:
            continue
        if shifts is not None:
            s = int(shifts[i]) % n
            if s:
                a = _concat([slice_along_axis(a, ax, n - s, n),
                             slice_along_axis(a, ax, 0, n - s)], ax)
        else:
            # a window of length n into two copies, starting at (-shift) mod n
            s = slice_along_axis(shift, 0, i, i + 1) if len(axes) > 1 else shift
            s = structural.reshape(s, ())
            start = remainder(lax.neg(lax.convert_element_type(s, _dtypes.int32)), n)
            doubled = _concat([a, a], ax)
            starts = [lax._weak_full(0, get_aval(start)) if d != ax else start
                      for d in range(aval.ndim)]
            sizes = list(aval.shape)
            a = lax_fn("dynamic_slice")(doubled, starts, sizes)
    return a


# ---- taking ----------------------------------------------------------------------------------


def take(a, indices, axis=None, out=None, mode=None, unique_indices=False,
         indices_are_sorted=False, fill_value=None):
    """Elements of ``a`` at ``indices`` along ``axis`` (of the flattened array when None).

    Negative indices count from the end. Out-of-range indices follow ``mode``: ``"fill"``
    (the default: NaN for inexact types, the most negative value for signed integers),
    ``"clip"`` or ``"wrap"``.

        >>> take(array([4, 5, 6]), array([2, 0]))
        Array([6, 4], dtype=int32)
    """
    if out is not None:
        raise ValueError("take: the `out` argument is not supported")
    a = to_array(a)
    if axis is None:
        a = ravel(a)
        axis = 0
    axis = canonicalize_axis(axis, get_aval(a).ndim)
    indices = to_array(indices)
    if mode == "wrap":
        indices = remainder(indices, get_aval(a).shape[axis])
        mode = "clip"
    idx = (slice(None),) * axis + (indices,)
    return _indexing.getitem(a, idx, mode=mode or "fill", fill_value=fill_value)


def take_along_axis(arr, indices, axis, mode=None, fill_value=None):
    """Pick one element per position along ``axis``, as ``np.take_along_axis`` (the shapes
    of ``arr`` and ``indices`` broadcast on the other axes).

        >>> x = array([[10, 30, 20]])
        >>> take_along_axis(x, argsort(x, axis=1), axis=1)
        Array([[10, 20, 30]], dtype=int32)
    """
    arr = to_array(arr)
    indices = to_array(indices)
    a_aval, i_aval = get_aval(arr), get_aval(indices)
    if axis is None:
        arr = ravel(arr)
        a_aval = get_aval(arr)
        axis = 0
    if a_aval.ndim != i_aval.ndim:
        raise ValueError(f"take_along_axis: indices and arr must have the same number of "
                         f"dimensions, got {i_aval.shape} and {a_aval.shape}")
    axis = canonicalize_axis(axis, a_aval.ndim)
    idx = []
    for d in range(a_aval.ndim):
        if d == axis:
            idx.append(indices)
        else:
            s = [1] * a_aval.ndim
            s[d] = a_aval.shape[d]
            idx.append(structural.reshape(iota(i_aval.dtype if _dtypes.is_integer(i_aval.dtype)
                                               else _dtypes.int32, (a_aval.shape[d],)), tuple(s)))
    return _indexing.getitem(arr, tuple(idx), mode=mode or "fill", fill_value=fill_value)


def diagonal(a, offset=0, axis1=0, axis2=1):
    """The diagonal at ``offset`` of the 2-D sub-arrays on ``axis1``, ``axis2`` (placed last
    in the result).

        >>> diagonal(arange(9).reshape(3, 3))
        Array([0, 4, 8], dtype=int32)
    """
    a = to_array(a)
    aval = get_aval(a)
    if aval.ndim < 2:
        raise ValueError("diagonal requires an array of at least two dimensions")
    ax1, ax2 = canonicalize_axis(axis1, aval.ndim), canonicalize_axis(axis2, aval.ndim)
    if ax1 == ax2:
        raise ValueError("diagonal: axis1 and axis2 cannot be the same")
    offset = operator_index(offset, "diagonal: offset")
    a = moveaxis(a, (ax1, ax2), (-2, -1))
    shape = get_aval(a).shape
    n, m = shape[-2:]
    lead = shape[:-2]
    if offset >= 0:
        length, start = builtins.max(0, builtins.min(n, m - offset)), offset
    else:
        length, start = builtins.max(0, builtins.min(n + offset, m)), -offset * m
    if length == 0:
        return structural.full(lead + (0,), 0, aval.dtype, weak_type=aval.weak_type)
    # in the row-major flattening of an (n, m) matrix the diagonal is every (m+1)-th element
    flat = structural.reshape(a, lead + (n * m,))
    return slice_along_axis(flat, len(lead), start, start + (length - 1) * (m + 1) + 1, m + 1)


def _static_positions(obj, n, fname):
    value = concrete_value(obj) if not isinstance(obj, slice) else None
    if isinstance(obj, slice):
        return np.arange(n)[obj], False
    if value is None:
        raise TypeError(f"{fname}: the positions `obj` must be static")
    return np.asarray(value), np.ndim(value) == 0


def delete(arr, obj, axis=None, *, assume_unique_indices=False):
    """``arr`` without the entries at static positions ``obj`` along ``axis``."""
    arr = to_array(arr)
    if axis is None:
        arr = ravel(arr)
        axis = 0
    axis = canonicalize_axis(axis, get_aval(arr).ndim)
    n = get_aval(arr).shape[axis]
    positions, _ = _static_positions(obj, n, "delete")
    if positions.dtype == np.bool_:
        keep = np.arange(n)[~np.broadcast_to(positions, (n,))]
    else:
        keep = np.delete(np.arange(n), positions.astype(np.int64))
    return take_static(arr, keep, axis)


def insert(arr, obj, values, axis=None):
    """``arr`` with ``values`` inserted before the static positions ``obj`` along ``axis``."""
    arr = to_array(arr)
    if axis is None:
        arr = ravel(arr)
        axis = 0
    aval = get_aval(arr)
    axis = canonicalize_axis(axis, aval.ndim)
    n = aval.shape[axis]
    positions, scalar = _static_positions(obj, n, "insert")
    values = lax.convert_element_type(to_array(values), aval.dtype)
    v_aval = get_aval(values)
    block_shape = list(aval.shape)
    if scalar:
        # as NumPy: values get leading axes up to arr's rank, and their first axis becomes
        # the inserted block along `axis`
        v = structural.reshape(values, (1,) * (aval.ndim - v_aval.ndim) + v_aval.shape)
        v = moveaxis(v, 0, axis)
        k = get_aval(v).shape[axis]
        positions = np.full(k, int(positions))
    else:
        positions = positions.astype(np.int64).ravel()
        k = len(positions)
        v = values
    block_shape[axis] = k
    block = broadcast_to_shape(v, tuple(block_shape))
    positions = np.where(positions < 0, positions + n, positions)
    # np.insert applied to source labels: arr's positions 0..n-1, the block's n..n+k-1
    order = np.insert(np.arange(n), positions, np.arange(n, n + k))
    joined = _concat([arr, block], axis)
    return take_static(joined, order, axis)


def trim_zeros(filt, trim="fb", axis=None):
    """``filt`` without its leading (``"f"`` in ``trim``) and/or trailing (``"b"``) zeros
    along the given axes (default: every axis; a hyperplane is trimmed only if all of it is
    zero). The result's shape depends on the values, so ``filt`` must be concrete.

        >>> trim_zeros(jnp.array([0, 0, 1, 2, 0, 3, 0]))
        Array([1, 2, 0, 3], dtype=int32)
    """
    arr = asarray(filt)
    value = concrete_or_error(arr, "jnp.trim_zeros",
                              "Call it outside jit, or slice with static bounds instead.")
    if arr.ndim == 0:
        raise ValueError("jnp.trim_zeros: the input must be at least 1-D")
    trim = trim.lower()
    axes = range(arr.ndim) if axis is None else (
        (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis))
    axes = sorted({int(ax) % arr.ndim for ax in axes})
    nonzero = value != 0
    index = [slice(None)] * arr.ndim
    for ax in axes:
        others = tuple(d for d in range(arr.ndim) if d != ax)
        hit = np.flatnonzero(nonzero.any(axis=others) if others else nonzero)
        if hit.size == 0:
            # everything along this axis is zero: nothing survives
            index[ax] = slice(0, 0)
            continue
        start = int(hit[0]) if "f" in trim else 0
        stop = int(hit[-1]) + 1 if "b" in trim else arr.shape[ax]
        index[ax] = slice(start, stop)
    return arr[tuple(index)]


def _block_depth(arrays, path=()):
    """(list nesting depth, largest leaf ndim); every leaf must sit at the same depth."""
    if isinstance(arrays, tuple):
        raise TypeError(f"jnp.block: arrays{''.join(f'[{i}]' for i in path)} is a tuple; only "
                        f"lists can be used to arrange blocks")
    if isinstance(arrays, list):
        if not arrays:
            raise ValueError(f"jnp.block: arrays{''.join(f'[{i}]' for i in path)} is an empty "
                             f"list")
        infos = [_block_depth(a, path + (i,)) for i, a in enumerate(arrays)]
        depths = {d for d, _ in infos}
        if len(depths) != 1:
            raise ValueError("jnp.block: list depths are mismatched; every block must be nested "
                             "in the same number of lists")
        return depths.pop() + 1, builtins.max(n for _, n in infos)
    return 0, len(arrays.shape) if hasattr(arrays, "shape") else get_aval(to_array(arrays)).ndim


def block(arrays):
    """Assemble an array from nested lists of blocks: the innermost lists are joined along the
    last axis, the next level along the second-to-last, and so on (blocks are first given
    leading 1-axes up to the common number of dimensions).

        >>> import functrans.numpy as jnp
        >>> jnp.block([[jnp.eye(2), jnp.zeros((2, 1))], [jnp.ones((1, 2)), jnp.ones((1, 1))]])
        Array([[1., 0., 0.],
               [0., 1., 0.],
               [1., 1., 1.]], dtype=float32)
    """
    depth, leaf_ndim = _block_depth(arrays)
    ndim = builtins.max(depth, leaf_ndim)
    # promote all leaves together, as concatenate would
    dtype = _dtypes.result_type(*_block_leaves(arrays))

    def assemble(node, level):
        if isinstance(node, list):
            return concatenate([assemble(n, level + 1) for n in node], axis=level - depth)
        leaf = asarray(node, dtype=dtype)
        return reshape(leaf, (1,) * (ndim - leaf.ndim) + leaf.shape)

    return assemble(arrays, 0)


def _block_leaves(arrays):
    if isinstance(arrays, list):
        return [leaf for a in arrays for leaf in _block_leaves(a)]
    return [arrays]
