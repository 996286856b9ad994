"""Out-of-place versions of NumPy's in-place writes: ``put``, ``put_along_axis``,
``fill_diagonal`` and ``place`` return the updated array (functrans arrays are immutable,
so ``inplace=False`` is required).

    >>> import functrans.numpy as jnp
    >>> jnp.put(jnp.zeros(3), jnp.array([1]), 5.0, inplace=False)
    Array([0., 5., 0.], dtype=float32)
"""
from __future__ import annotations

import builtins

import numpy as np

from functrans import _dtypes
from functrans.numpy._promotion import _concrete
from functrans.numpy._creation import arange, asarray
from functrans.numpy._shape import broadcast_to, ravel, reshape, tile
from functrans.numpy._ufuncs import clip, mod


def put(a, ind, v, mode=None, *, inplace=True):
    """A copy of ``a`` with ``v`` written at the flat positions ``ind`` (``v`` is repeated to
    the number of positions). functrans arrays are immutable, so ``inplace=False`` is
    required.

    ``mode``: ``None`` (negative positions count from the end, out-of-range ones are
    skipped), ``"clip"`` (positions clamped into range) or ``"wrap"`` (taken modulo the
    size). ``"raise"`` would need a data-dependent error and is not supported. When a
    position repeats, the last value written to it wins.

        >>> put(jnp.zeros(4), jnp.array([0, 2]), jnp.array([5.0, 6.0]), inplace=False)
        Array([5., 0., 6., 0.], dtype=float32)
    """
    if inplace:
        raise ValueError("jnp.put cannot modify arrays in place (functrans arrays are "
                         "immutable); pass inplace=False to get the updated array back.")
    for position, arg in enumerate((a, ind, v)):
        if isinstance(arg, (list, tuple)):
            raise TypeError(f"jnp.put requires array or scalar arguments, got a "
                            f"{type(arg).__name__} at position {position}")
    a = asarray(a)
    ind = ravel(asarray(ind))
    if not (_dtypes.is_integer(ind.dtype)):
        raise TypeError(f"jnp.put: indices must be integers, got {ind.dtype}")
    values = ravel(asarray(v))
    if ind.size == 0:
        return a
    if values.size == 0:
        raise ValueError("jnp.put: cannot write an empty array of values to non-empty indices")
    values = tile(values, -(-ind.size // values.size))[:ind.size]
    flat = ravel(a)
    if mode is None or mode in ("fill", "drop"):
        out = flat.at[ind].set(values, mode="drop")
    elif mode == "clip":
        out = flat.at[clip(ind, 0, flat.size - 1)].set(values)
    elif mode == "wrap":
        out = flat.at[mod(ind, flat.size)].set(values)
    elif mode == "raise":
        raise NotImplementedError("jnp.put: mode='raise' is not supported (it needs an error "
                                  "that depends on the values); use 'clip' or 'wrap'")
    else:
        raise ValueError(f"jnp.put: unknown mode {mode!r}; expected None, 'clip' or 'wrap'")
    return reshape(out, a.shape)


# =============================================================================================
# Functional writes: put_along_axis, fill_diagonal, place
# =============================================================================================

def put_along_axis(arr, indices, values, axis, inplace: bool = True, mode=None):
    """A copy of ``arr`` with ``values`` written at ``indices`` along ``axis`` (the inverse of
    ``take_along_axis``). ``axis=None`` works on the flattened array. functrans arrays are
    immutable, so ``inplace=False`` is required.

        >>> import functrans.numpy as jnp
        >>> a = jnp.zeros((2, 3))
        >>> jnp.put_along_axis(a, jnp.array([[2], [0]]), 5.0, axis=1, inplace=False)
        Array([[0., 0., 5.],
               [5., 0., 0.]], dtype=float32)
    """
    _require_not_inplace("put_along_axis", inplace)
    arr = asarray(arr)
    indices = asarray(indices)
    original_shape = arr.shape
    if axis is None:
        if indices.ndim != 1:
            raise ValueError(f"jnp.put_along_axis: with axis=None the indices must be 1-D, got "
                             f"shape {indices.shape}")
        arr, axis = ravel(arr), 0
    if indices.ndim != arr.ndim:
        raise ValueError(f"jnp.put_along_axis: indices and arr must have the same number of "
                         f"dimensions, got {indices.ndim} and {arr.ndim}")
    if not _dtypes.is_integer(indices.dtype):
        raise TypeError(f"jnp.put_along_axis: indices must be integers, got {indices.dtype}")
    axis = int(axis) % arr.ndim
    target = np.broadcast_shapes(
        tuple(s for i, s in enumerate(arr.shape) if i != axis),
        tuple(s for i, s in enumerate(indices.shape) if i != axis))
    target = target[:axis] + (indices.shape[axis],) + target[axis:]
    index = []
    for d in range(arr.ndim):
        if d == axis:
            index.append(broadcast_to(indices, target))
        else:
            # every other axis is indexed by its own position
            shape = [1] * arr.ndim
            shape[d] = arr.shape[d]
            position = reshape(arange(arr.shape[d]), shape)
            index.append(broadcast_to(position, target))
    out = arr.at[tuple(index)].set(broadcast_to(asarray(values, arr.dtype), target),
                                   mode=mode)
    return reshape(out, original_shape)


def _cycled(values, n, dtype):
    """``values`` (raveled) repeated to length ``n``, as NumPy's flat assignment does."""
    values = ravel(asarray(values, dtype=dtype))
    if values.size == 0:
        raise ValueError("cannot write an empty array of values to non-empty positions")
    repeats = -(-n // values.size)
    return tile(values, repeats)[:n]


def fill_diagonal(a, val, wrap: bool = False, *, inplace: bool = True):
    """A copy of ``a`` with its main diagonal set to ``val`` (a scalar, or values used in turn
    and repeated). For a tall 2-D array ``wrap=True`` restarts the diagonal every ``ncols + 1``
    rows, as in NumPy. An array of more than two dimensions must have all sides equal.
    ``inplace=False`` is required.

        >>> import functrans.numpy as jnp
        >>> jnp.fill_diagonal(jnp.zeros((2, 3)), 7.0, inplace=False)
        Array([[7., 0., 0.],
               [0., 7., 0.]], dtype=float32)
    """
    _require_not_inplace("fill_diagonal", inplace)
    a = asarray(a)
    if a.ndim < 2:
        raise ValueError(f"jnp.fill_diagonal: the array must be at least 2-D, got shape "
                         f"{a.shape}")
    if a.ndim > 2 and len(set(a.shape)) != 1:
        raise ValueError(f"jnp.fill_diagonal: all dimensions of an array of more than 2 "
                         f"dimensions must be equal, got shape {a.shape}")
    # the diagonal in the flattened array: start at 0, step over one of every axis at once
    step = a.shape[1] + 1 if a.ndim == 2 else 1 + int(np.cumprod(a.shape[:-1]).sum())
    end = a.size if (wrap or a.ndim != 2) else builtins.min(a.size, a.shape[1] * a.shape[1])
    positions = np.arange(0, end, step)
    if positions.size == 0:
        return a
    flat = ravel(a).at[positions].set(_cycled(val, positions.size, a.dtype))
    return reshape(flat, a.shape)


def place(arr, mask, vals, *, inplace: bool = True):
    """A copy of ``arr`` where the positions with ``mask`` True take ``vals`` in turn (in
    row-major order, repeating ``vals`` as needed). ``mask`` must be concrete;
    ``inplace=False`` is required.

        >>> import functrans.numpy as jnp
        >>> x = jnp.arange(5.0)
        >>> jnp.place(x, x > 2, jnp.array([10.0, 20.0]), inplace=False)
        Array([ 0.,  1.,  2., 10., 20.], dtype=float32)
    """
    _require_not_inplace("place", inplace)
    arr = asarray(arr)
    mask = _concrete("place", mask, "mask").astype(bool)
    if mask.size != arr.size:
        raise ValueError(f"jnp.place: mask and arr must have the same size, got {mask.size} "
                         f"and {arr.size}")
    positions = np.flatnonzero(mask)
    if positions.size == 0:
        return arr
    flat = ravel(arr).at[positions].set(_cycled(vals, positions.size, arr.dtype))
    return reshape(flat, arr.shape)


def _require_not_inplace(name, inplace):
    if inplace:
        raise ValueError(f"jnp.{name} cannot modify arrays in place (functrans arrays are "
                         f"immutable); pass inplace=False to get the updated array back.")
