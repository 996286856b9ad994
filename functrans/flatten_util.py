"""``ravel_pytree``: a whole pytree of arrays as one flat vector, and the way back.

    >>> import functrans.numpy as jnp
    >>> flat, unravel = ravel_pytree({"w": jnp.ones((2, 2)), "b": jnp.zeros(2)})
    >>> flat
    Array([0., 0., 1., 1., 1., 1.], dtype=float32)
    >>> unravel(flat)["w"].shape
    (2, 2)

Useful for optimizers and solvers written for vectors (L-BFGS, Newton-CG, ODE solvers):
``flat`` is built from ordinary differentiable operations, so it works under ``jit``,
``grad`` and ``vmap``, and so does ``unravel``.
"""
from __future__ import annotations

import math

import numpy as np

from functrans import _dtypes, lax, tree_util
from functrans.core import get_aval

__all__ = ["ravel_pytree"]


def _leaf_dtype(leaf) -> np.dtype:
    """A leaf's dtype with Python scalars taken at their full (not weak) default width, so
    a Python float next to a float16 array promotes to float32, not float16 (as JAX does)."""
    if _dtypes.is_python_scalar(leaf):
        return _dtypes.canonicalize_dtype(np.dtype(type(leaf)))
    return get_aval(leaf).dtype


def ravel_pytree(pytree):
    """Flatten every leaf of ``pytree`` and concatenate them into one 1-D array.

    Returns ``(flat, unravel)``. The leaves are converted to the dtype they all promote to
    (their ``result_type``); ``unravel(v)`` splits a vector of that dtype and length back
    into a tree of ``pytree``'s structure, each leaf cast back to its original dtype and
    shape. When every leaf already has the common dtype nothing is cast, and ``unravel``
    accepts a vector of any dtype. A tree without leaves ravels to an empty float32 vector.

        >>> import functrans.numpy as jnp
        >>> flat, unravel = ravel_pytree((jnp.arange(2), 0.5))
        >>> flat
        Array([0. , 1. , 0.5], dtype=float32)
        >>> unravel(flat)[0]
        Array([0, 1], dtype=int32)
    """
    leaves, treedef = tree_util.tree_flatten(pytree)
    if not leaves:
        # float32 even under x64: the vector is empty, its dtype only has to be some float
        empty = lax.full((0,), 0, _dtypes.float32)
        return empty, _Unravel(treedef, (), None, _dtypes.float32)
    avals = [get_aval(leaf) for leaf in leaves]
    leaf_dtypes = tuple(_leaf_dtype(leaf) for leaf in leaves)
    flat_dtype = _dtypes.promote_types_weak(*[(d, False) for d in leaf_dtypes])[0]
    shapes = tuple(tuple(aval.shape) for aval in avals)
    if all(d == flat_dtype for d in leaf_dtypes):
        # One dtype: no casts, so weak types flow through and ``unravel`` accepts a vector
        # of any dtype (e.g. a float64 Newton step for float32 parameters), as in JAX.
        pieces = [lax.reshape(leaf, (math.prod(shape),)) for leaf, shape in zip(leaves, shapes)]
        unravel = _Unravel(treedef, shapes, None, flat_dtype)
    else:
        pieces = [lax.reshape(lax.convert_element_type(leaf, flat_dtype), (math.prod(shape),))
                  for leaf, shape in zip(leaves, shapes)]
        unravel = _Unravel(treedef, shapes, leaf_dtypes, flat_dtype)
    flat = pieces[0] if len(pieces) == 1 else lax.concatenate(pieces, 0)
    return flat, unravel


class _Unravel:
    """The inverse of one ``ravel_pytree`` call: vector -> pytree.

    ``dtypes`` holds each leaf's dtype to cast back to, or is None when all leaves had the
    vector's dtype (then any vector dtype is accepted and kept). Hashable and comparable by
    the layout it undoes, so it can be a static argument of ``jit`` (two ravels of
    same-shaped trees give equal unravel functions).
    """

    __slots__ = ("treedef", "shapes", "dtypes", "flat_dtype", "size")

    def __init__(self, treedef, shapes, dtypes, flat_dtype):
        self.treedef, self.shapes, self.dtypes = treedef, shapes, dtypes
        self.flat_dtype = np.dtype(flat_dtype)
        self.size = sum(math.prod(s) for s in shapes)

    def _key(self):
        if self.dtypes is None:
            return (self.treedef, self.shapes, None)
        return (self.treedef, self.shapes, self.dtypes, self.flat_dtype)

    def __hash__(self):
        return hash(self._key())

    def __eq__(self, other):
        return isinstance(other, _Unravel) and self._key() == other._key()

    def __repr__(self):
        return f"<unravel to {self.treedef} from {self.flat_dtype.name}[{self.size}]>"

    def __call__(self, flat):
        aval = get_aval(flat)
        if self.dtypes is not None and aval.dtype != self.flat_dtype:
            raise TypeError(f"unravel: expected a vector of dtype {self.flat_dtype.name}, "
                            f"got {aval.str_short()} (ravel_pytree promoted the leaves to "
                            f"{self.flat_dtype.name})")
        if tuple(aval.shape) != (self.size,):
            raise ValueError(f"unravel: expected a vector of shape ({self.size},), "
                             f"got {aval.str_short()}")
        leaves, start = [], 0
        for i, shape in enumerate(self.shapes):
            stop = start + math.prod(shape)
            piece = lax.reshape(lax.slice_in_dim(flat, start, stop), shape)
            if self.dtypes is not None and self.dtypes[i] != self.flat_dtype:
                piece = _cast_back(piece, self.dtypes[i])
            leaves.append(piece)
            start = stop
        return self.treedef.unflatten(leaves)


def _cast_back(piece, dtype):
    # complex -> real keeps the real part, as a cast back to a real leaf's dtype must
    if _dtypes.is_complex(get_aval(piece).dtype) and not _dtypes.is_complex(dtype):
        piece = lax.real(piece)
    return lax.convert_element_type(piece, dtype)
