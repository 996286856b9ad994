"""Less common ``jax.numpy`` functions: polynomial roots, block assembly, piecewise
definitions, functional (out-of-place) writes, phase unwrapping, the Bessel function ``i0``,
bit packing, float spacing and einsum paths (``frompyfunc`` is in ``_ufunc``).

They are written with the public ``functrans.numpy`` functions, so every transform that
works on those works here.

    >>> import functrans.numpy as jnp
    >>> jnp.packbits(jnp.array([1, 0, 1, 1, 0, 0, 0, 1], dtype=jnp.uint8))
    Array([177], dtype=uint8)
"""
from __future__ import annotations

import builtins

import numpy as np

import functrans.numpy as jnp
from functrans import _dtypes, lax
from functrans.core import Tracer

__all__ = [
    "block", "einsum_path", "fill_diagonal", "i0", "packbits", "piecewise",
    "place", "put_along_axis", "roots", "spacing", "unpackbits", "unwrap",
]


def _inexact(x):
    """``x`` as an array, promoted to the default float type when it is not inexact."""
    x = jnp.asarray(x)
    if not _dtypes.is_inexact(x.dtype):
        x = x.astype(_dtypes.default_float_dtype())
    return x


def _complex_of(dtype):
    """The complex dtype with ``dtype``'s precision (the dtype of roots)."""
    return np.result_type(np.dtype(dtype), np.complex64)


def _require_not_inplace(name, inplace):
    if inplace:
        raise ValueError(f"jnp.{name} cannot modify arrays in place (functrans arrays are "
                         f"immutable); pass inplace=False to get the updated array back.")


def _concrete(name, x, what):
    if isinstance(x, Tracer):
        raise TypeError(f"jnp.{name}: {what} must be concrete (its value sets the output "
                        f"shape or the written positions), got a traced value. Call it outside "
                        f"jit or mark the argument static.")
    return np.asarray(x)


# =============================================================================================
# Polynomial roots
# =============================================================================================

_ROOT_ITERATIONS = 80


def _polynomial_roots(p):
    """Roots of the polynomial with coefficients ``p`` (highest first, ``p[0] != 0``) by the
    Aberth-Ehrlich simultaneous iteration: each estimate takes a Newton step corrected by the
    repulsion of the other estimates, so all roots are found at once (cubic convergence for
    simple roots). A fixed number of steps keeps it traceable; converged roots stop moving
    because their Newton step is 0."""
    n = p.shape[0] - 1
    complex_dtype = _complex_of(p.dtype)
    if n < 1:
        return jnp.zeros((0,), complex_dtype)
    monic = (p / p[0]).astype(complex_dtype)
    derivative = monic[:-1] * jnp.arange(n, 0, -1).astype(complex_dtype)
    # start on a circle that encloses every root (Cauchy's bound), rotated off the axes so
    # that no start is symmetric to another under conjugation
    radius = 1 + jnp.max(jnp.abs(monic[1:]))
    angles = 2 * np.pi * np.arange(n) / n + 0.4
    start = (radius * jnp.asarray(np.cos(angles) + 1j * np.sin(angles), complex_dtype))
    off_diagonal = jnp.asarray(~np.eye(n, dtype=bool))

    def horner(coefficients, z):
        value = jnp.zeros_like(z)
        for c in coefficients:
            value = value * z + c
        return value

    def step(_, z):
        value, slope = horner(monic, z), horner(derivative, z)
        newton = jnp.where(value == 0, 0, value / jnp.where(slope == 0, 1, slope))
        gaps = z[:, None] - z[None, :]
        safe_gaps = jnp.where(off_diagonal & (gaps != 0), gaps, 1)
        repulsion = jnp.sum(jnp.where(off_diagonal & (gaps != 0), 1 / safe_gaps, 0), axis=1)
        denominator = 1 - newton * repulsion
        return z - newton / jnp.where(denominator == 0, 1, denominator)

    return lax.fori_loop(0, _ROOT_ITERATIONS, step, start)


def roots(p, *, strip_zeros: bool = True):
    """The roots of a polynomial with coefficients ``p`` (highest degree first), as complex
    numbers (found all at once by the Aberth-Ehrlich iteration, in no particular order).

    With ``strip_zeros=True`` (the default) leading zeros are dropped and trailing zeros
    become roots at 0, so ``p`` must be concrete. With ``strip_zeros=False`` the result always
    has ``len(p) - 1`` entries and each leading zero gives a NaN root instead.

        >>> import functrans.numpy as jnp
        >>> jnp.sort_complex(jnp.roots(jnp.array([1.0, -3.0, 2.0])))
        Array([1.+0.j, 2.+0.j], dtype=complex64)
    """
    p = jnp.atleast_1d(_inexact(p))
    if p.ndim != 1:
        raise ValueError(f"jnp.roots: the coefficients must be one-dimensional, got shape "
                         f"{p.shape}")
    if strip_zeros:
        values = _concrete("roots", p, "p (with strip_zeros=True)")
        nonzero = np.flatnonzero(values)
        if nonzero.size == 0:
            return jnp.zeros((0,), _complex_of(p.dtype))
        first, last = int(nonzero[0]), int(nonzero[-1])
        found = _polynomial_roots(p[first:last + 1])
        # each trailing zero coefficient is a factor x, i.e. a root at 0
        trailing = jnp.zeros((p.shape[0] - 1 - last,), found.dtype)
        return jnp.concatenate([found, trailing])
    n = p.shape[0]
    if n < 2:
        return jnp.zeros((0,), _complex_of(p.dtype))
    leading = jnp.argmax(p != 0)
    leading = jnp.where(jnp.all(p == 0), n, leading)
    # move the leading zeros to the end: they become roots at 0, which we then mark NaN
    shifted = jnp.roll(p, -leading)
    safe = shifted.at[0].set(jnp.where(shifted[0] == 0, 1, shifted[0]))
    found = _polynomial_roots(safe)
    # a polynomial with k trailing zeros has k roots at 0; mark those k as NaN
    order = jnp.argsort(jnp.abs(found), stable=True)
    nan_slot = jnp.arange(n - 1) < leading
    nan_positions = jnp.zeros((n - 1,), bool).at[order].set(nan_slot)
    nan = jnp.array(complex(np.nan, np.nan), found.dtype)
    return jnp.where(nan_positions, nan, found)


# =============================================================================================
# Assembly: block, piecewise
# =============================================================================================

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
    return 0, jnp.ndim(arrays)


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
    dtype = jnp.result_type(*_block_leaves(arrays))

    def assemble(node, level):
        if isinstance(node, list):
            return jnp.concatenate([assemble(n, level + 1) for n in node], axis=level - depth)
        leaf = jnp.asarray(node, dtype=dtype)
        return jnp.reshape(leaf, (1,) * (ndim - leaf.ndim) + leaf.shape)

    return assemble(arrays, 0)


def _block_leaves(arrays):
    if isinstance(arrays, list):
        return [leaf for a in arrays for leaf in _block_leaves(a)]
    return [arrays]


def piecewise(x, condlist, funclist, *args, **kw):
    """Evaluate a function defined piecewise: where ``condlist[i]`` holds, the result is
    ``funclist[i](x)`` (later conditions win). An extra last entry of ``funclist`` is the value
    where no condition holds (otherwise 0). Entries of ``funclist`` may be constants. Each
    function is applied element by element (vectorized) and the result has ``x``'s dtype.

        >>> import functrans.numpy as jnp
        >>> x = jnp.array([-2.0, 0.5, 3.0])
        >>> jnp.piecewise(x, [x < 0, x > 1], [lambda v: -v, lambda v: v * 10, 0.0])
        Array([ 2.,  0., 30.], dtype=float32)
    """
    x = jnp.asarray(x)
    conditions = jnp.asarray(condlist, dtype=bool)
    # a single condition array (same shape as x) means one condition, as in NumPy
    if conditions.ndim == x.ndim:
        conditions = conditions[None]
    conditions = jnp.broadcast_to(conditions, (conditions.shape[0],) + x.shape)
    n_cond, n_func = conditions.shape[0], len(funclist)
    if n_func == n_cond + 1:
        default, funclist = funclist[-1], list(funclist[:-1])
    elif n_func == n_cond:
        default, funclist = 0, list(funclist)
    else:
        raise ValueError(f"jnp.piecewise: funclist must have {n_cond} or {n_cond + 1} entries "
                         f"for {n_cond} conditions, got {n_func}")

    def evaluate(f):
        if not callable(f):
            return jnp.full(x.shape, f, dtype=x.dtype)
        per_element = jnp.vectorize(lambda v: jnp.asarray(f(v, *args, **kw)).astype(x.dtype))
        return jnp.broadcast_to(per_element(x), x.shape)

    out = evaluate(default)
    for i, f in enumerate(funclist):
        out = jnp.where(conditions[i], evaluate(f), out)
    return out


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
    arr = jnp.asarray(arr)
    indices = jnp.asarray(indices)
    original_shape = arr.shape
    if axis is None:
        if indices.ndim != 1:
            raise ValueError(f"jnp.put_along_axis: with axis=None the indices must be 1-D, got "
                             f"shape {indices.shape}")
        arr, axis = jnp.ravel(arr), 0
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
            index.append(jnp.broadcast_to(indices, target))
        else:
            # every other axis is indexed by its own position
            shape = [1] * arr.ndim
            shape[d] = arr.shape[d]
            position = jnp.reshape(jnp.arange(arr.shape[d]), shape)
            index.append(jnp.broadcast_to(position, target))
    out = arr.at[tuple(index)].set(jnp.broadcast_to(jnp.asarray(values, arr.dtype), target),
                                   mode=mode)
    return jnp.reshape(out, original_shape)


def _cycled(values, n, dtype):
    """``values`` (raveled) repeated to length ``n``, as NumPy's flat assignment does."""
    values = jnp.ravel(jnp.asarray(values, dtype=dtype))
    if values.size == 0:
        raise ValueError("cannot write an empty array of values to non-empty positions")
    repeats = -(-n // values.size)
    return jnp.tile(values, repeats)[:n]


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
    a = jnp.asarray(a)
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
    flat = jnp.ravel(a).at[positions].set(_cycled(val, positions.size, a.dtype))
    return jnp.reshape(flat, a.shape)


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
    arr = jnp.asarray(arr)
    mask = _concrete("place", mask, "mask").astype(bool)
    if mask.size != arr.size:
        raise ValueError(f"jnp.place: mask and arr must have the same size, got {mask.size} "
                         f"and {arr.size}")
    positions = np.flatnonzero(mask)
    if positions.size == 0:
        return arr
    flat = jnp.ravel(arr).at[positions].set(_cycled(vals, positions.size, arr.dtype))
    return jnp.reshape(flat, arr.shape)


# =============================================================================================
# Elementwise: unwrap, i0, spacing
# =============================================================================================

def unwrap(p, discont=None, axis: int = -1, period=2 * np.pi):
    """Unwrap a phase signal along ``axis``: jumps larger than ``discont`` (default
    ``period / 2``) are replaced by their equivalent modulo ``period``.

        >>> import functrans.numpy as jnp
        >>> jnp.unwrap(jnp.array([0.0, 6.0]))
        Array([ 0.      , -0.283185], dtype=float32)
    """
    p = _inexact(p)
    if p.ndim == 0:
        raise ValueError("jnp.unwrap: the input must have at least one dimension")
    axis = int(axis) % p.ndim
    if discont is None:
        discont = period / 2
    interval = period / 2
    step = jnp.diff(p, axis=axis)
    wrapped = jnp.mod(step + interval, period) - interval
    # a jump of exactly +period/2 stays positive (NumPy's convention)
    wrapped = jnp.where((wrapped == -interval) & (step > 0), interval, wrapped)
    correction = jnp.where(jnp.abs(step) < discont, 0, wrapped - step)
    first = jnp.take(p, jnp.arange(1), axis=axis)
    rest = jnp.take(p, jnp.arange(1, p.shape[axis]), axis=axis)
    return jnp.concatenate([first, rest + jnp.cumsum(correction, axis=axis).astype(p.dtype)],
                           axis=axis)


# I0 by its power series sum_k (x^2/4)^k / (k!)^2 below _I0_SWITCH, and above it by the
# asymptotic expansion e^x / sqrt(2 pi x) * sum_k ((2k-1)!!)^2 / (k! (8x)^k); both are
# accurate to double precision with these term counts on their side of the switch.
_I0_SWITCH = 20.0
_I0_SERIES_TERMS = 70
_I0_ASYMPTOTIC_TERMS = 25


def i0(x):
    """The modified Bessel function of the first kind, order zero, elementwise.

        >>> import functrans.numpy as jnp
        >>> jnp.i0(jnp.array([0.0, 1.0]))
        Array([1.      , 1.266066], dtype=float32)
    """
    x = _inexact(x)
    if _dtypes.is_complex(x.dtype):
        raise NotImplementedError("jnp.i0 of complex input is not supported")
    ax = jnp.abs(x)
    small = ax < _I0_SWITCH
    # each branch sees only inputs it is valid for, so neither yields inf/NaN (nor NaN
    # gradients through the unselected side of the where)
    # (the series is in x^2, so it takes x itself: |x| would lose the curvature at 0)
    xs = jnp.where(small, x, 0)
    xl = jnp.where(small, _I0_SWITCH, ax)

    quarter_square = xs * xs / 4
    term = jnp.ones_like(xs)
    series = jnp.ones_like(xs)
    for k in range(1, _I0_SERIES_TERMS):
        term = term * quarter_square / (k * k)
        series = series + term

    inv_8x = 1 / (8 * xl)
    term = jnp.ones_like(xl)
    tail = jnp.ones_like(xl)
    for k in range(1, _I0_ASYMPTOTIC_TERMS):
        term = term * ((2 * k - 1) ** 2 / k) * inv_8x
        tail = tail + term
    # e^x split in two halves so the result overflows only where I0 itself does
    half = jnp.exp(xl / 2)
    asymptotic = half * (half * tail / jnp.sqrt(2 * np.pi * xl))
    return jnp.where(small, series, asymptotic)


def spacing(x):
    """The distance from ``x`` to the next representable number away from zero (negative for
    negative ``x``): the size of one unit in the last place.

        >>> import functrans.numpy as jnp
        >>> jnp.spacing(jnp.array([1.0, -1.0]))
        Array([ 1.1920929e-07, -1.1920929e-07], dtype=float32)
    """
    x = _inexact(x)
    if _dtypes.is_complex(x.dtype):
        raise TypeError("jnp.spacing does not accept complex input")
    away = jnp.where(x < 0, jnp.array(-np.inf, x.dtype), jnp.array(np.inf, x.dtype))
    return jnp.nextafter(x, away) - x


# =============================================================================================
# Bits: packbits, unpackbits
# =============================================================================================

def _bit_weights(bitorder, name):
    if bitorder not in ("big", "little"):
        raise ValueError(f"jnp.{name}: bitorder must be 'big' or 'little', got {bitorder!r}")
    shifts = np.arange(8, dtype=np.uint8)
    return shifts[::-1].copy() if bitorder == "big" else shifts


def packbits(a, axis=None, bitorder: str = "big"):
    """Pack the elements of a boolean or integer array (nonzero = 1) into the bits of uint8s
    along ``axis`` (the flattened array when ``None``), padding the end with zero bits.

        >>> import functrans.numpy as jnp
        >>> jnp.packbits(jnp.array([True, False, True]))
        Array([160], dtype=uint8)
    """
    a = jnp.asarray(a)
    if not (_dtypes.is_integer(a.dtype) or a.dtype == np.bool_):
        raise TypeError(f"jnp.packbits: expected an integer or boolean array, got {a.dtype}")
    shifts = _bit_weights(bitorder, "packbits")
    if axis is None:
        a, axis = jnp.ravel(a), 0
    axis = int(axis) % builtins.max(a.ndim, 1)
    bits = jnp.moveaxis((a != 0).astype(np.uint8), axis, -1)
    n = bits.shape[-1]
    padded = -(-n // 8) * 8
    bits = jnp.pad(bits, [(0, 0)] * (bits.ndim - 1) + [(0, padded - n)])
    bits = jnp.reshape(bits, bits.shape[:-1] + (padded // 8, 8))
    packed = jnp.sum(jnp.left_shift(bits, jnp.asarray(shifts)), axis=-1, dtype=np.uint8)
    return jnp.moveaxis(packed, -1, axis)


def unpackbits(a, axis=None, count=None, bitorder: str = "big"):
    """Unpack each uint8 of ``a`` into 8 bits (0 or 1) along ``axis`` (the flattened array when
    ``None``). ``count`` keeps that many bits (negative: drops that many from the end; more
    than available: pads with zeros).

        >>> import functrans.numpy as jnp
        >>> jnp.unpackbits(jnp.array([160], dtype=jnp.uint8), count=3)
        Array([1, 0, 1], dtype=uint8)
    """
    a = jnp.asarray(a)
    if a.dtype != np.uint8:
        raise TypeError(f"jnp.unpackbits: expected a uint8 array, got {a.dtype}")
    shifts = _bit_weights(bitorder, "unpackbits")
    if axis is None:
        a, axis = jnp.ravel(a), 0
    axis = int(axis) % builtins.max(a.ndim, 1)
    moved = jnp.moveaxis(a, axis, -1)
    bits = jnp.right_shift(moved[..., None], jnp.asarray(shifts)) & np.uint8(1)
    bits = jnp.reshape(bits, moved.shape[:-1] + (moved.shape[-1] * 8,))
    if count is not None:
        count = int(count)
        total = bits.shape[-1]
        keep = count if count >= 0 else builtins.max(total + count, 0)
        if keep > total:
            bits = jnp.pad(bits, [(0, 0)] * (bits.ndim - 1) + [(0, keep - total)])
        else:
            bits = bits[..., :keep]
    return jnp.moveaxis(bits, -1, axis)


# =============================================================================================
# einsum_path
# =============================================================================================

def einsum_path(subscripts, *operands, optimize="greedy"):
    """The contraction order ``einsum`` would use, without computing anything: returns
    ``(path, description)`` as :func:`numpy.einsum_path` does (only operand shapes matter).

        >>> import functrans.numpy as jnp
        >>> path, _ = jnp.einsum_path("ij,jk,kl->il", jnp.ones((2, 3)), jnp.ones((3, 4)),
        ...                           jnp.ones((4, 5)))
        >>> path
        ['einsum_path', (1, 2), (0, 1)]
    """
    # zero-stride stand-ins: the path depends only on shapes, so nothing is allocated
    stand_ins = [np.broadcast_to(np.zeros((), dtype=np.float32), np.shape(op))
                 for op in operands]
    if optimize is True:
        optimize = "greedy"
    return np.einsum_path(subscripts, *stand_ins, optimize=optimize)


