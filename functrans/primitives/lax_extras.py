"""The rest of ``jax.lax``: its enums and type aliases, small functions built from existing
primitives, and a few primitives of their own (``mulhi``, ``bitcast_convert_type``,
``reduce_precision``, ``rng_uniform``, ``rng_bit_generator``).

Every name here has ``jax.lax``'s signature and semantics. Where a JAX feature selects a
hardware strategy this CPU backend does not have (dot algorithms, transcendental accuracy
targets), it is accepted and documented as not changing results; where it would change
them, it raises NotImplementedError.
"""
from __future__ import annotations

import enum
import math
import operator
from typing import Any, Callable, NamedTuple, Sequence, Tuple, Union

import numpy as np

from functrans import _backends, _dtypes
from functrans.core import Primitive, ShapedArray, get_aval
from functrans.interpreters import ad, batching
from functrans.primitives import elementwise as ew
from functrans.primitives import (collectives, control_flow, indexing, reductions, sorting,
                                  structural)
from functrans.primitives.special import elementwise_operands
from functrans.primitives.implicit import _conv_transpose_padding
from functrans.primitives.linalg import (conv_dimension_numbers, conv_general_dilated,
                                         ConvDimensionNumbers, dot_general, padtype_to_pads)
from functrans.primitives.random_bits import threefry2x32_reference

# =============================================================================================
# Enums and type aliases
# =============================================================================================


class Precision(enum.Enum):
    """Precision of ``dot_general``/``conv_general_dilated`` and the jnp contractions.

    On this backend every precision computes in the operands' dtype (float32 products are
    float32 products: ``DEFAULT`` is already ``HIGHEST``), so the choice never changes
    results. Strings name the members too: ``"default"``/``"bfloat16"``/``"fastest"``,
    ``"high"``/``"tensorfloat32"``, ``"highest"``/``"float32"``.

        >>> Precision("highest")
        <Precision.HIGHEST: 2>
    """
    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2

    @classmethod
    def _missing_(cls, value):
        aliases = {"default": cls.DEFAULT, "bfloat16": cls.DEFAULT, "fastest": cls.DEFAULT,
                   "high": cls.HIGH, "tensorfloat32": cls.HIGH,
                   "highest": cls.HIGHEST, "float32": cls.HIGHEST}
        if isinstance(value, str) and value.lower() in aliases:
            return aliases[value.lower()]
        return None

    def __repr__(self):
        return f"<Precision.{self.name}: {self.value}>"

    def __str__(self):
        return self.name


class DotAlgorithm(NamedTuple):
    """A dot algorithm spelled out: input precision types, accumulation type, how many
    components each input is split into and how many primitive products are summed.

    Accepted wherever ``precision=`` is. This backend computes every dot in the operands'
    dtype with at least float32 accumulation whatever the algorithm says (JAX on CPU does
    the same for the algorithms it accepts)."""
    lhs_precision_type: Any
    rhs_precision_type: Any
    accumulation_type: Any
    lhs_component_count: int = 1
    rhs_component_count: int = 1
    num_primitive_operations: int = 1
    allow_imprecise_accumulation: bool = False


class DotAlgorithmPreset(enum.Enum):
    """Named dot algorithms (``precision=DotAlgorithmPreset.BF16_BF16_F32``, ...).

    Accepted wherever ``precision=`` is; as for :class:`DotAlgorithm`, this backend computes
    in the operands' dtype: the presets that round inputs to bf16/f16/tf32 on accelerators do
    not round them here (JAX on CPU computes the BF16 presets in full float32 as well)."""
    DEFAULT = enum.auto()
    ANY_F8_ANY_F8_F32 = enum.auto()
    ANY_F8_ANY_F8_F32_FAST_ACCUM = enum.auto()
    ANY_F8_ANY_F8_ANY = enum.auto()
    ANY_F8_ANY_F8_ANY_FAST_ACCUM = enum.auto()
    F16_F16_F16 = enum.auto()
    F16_F16_F32 = enum.auto()
    BF16_BF16_BF16 = enum.auto()
    BF16_BF16_F32 = enum.auto()
    BF16_BF16_F32_X3 = enum.auto()
    BF16_BF16_F32_X6 = enum.auto()
    BF16_BF16_F32_X9 = enum.auto()
    TF32_TF32_F32 = enum.auto()
    TF32_TF32_F32_X3 = enum.auto()
    F32_F32_F32 = enum.auto()
    F64_F64_F64 = enum.auto()

    def __repr__(self):
        return f"DotAlgorithmPreset.{self.name}"

    __str__ = __repr__


PrecisionLike = Union[None, str, Precision, Tuple[str, str], Tuple[Precision, Precision],
                      DotAlgorithm, DotAlgorithmPreset]

DotDimensionNumbers = Tuple[Tuple[Sequence[int], Sequence[int]],
                            Tuple[Sequence[int], Sequence[int]]]


def _conv_dimension_numbers_type():
    return Union[Tuple[str, str, str], ConvDimensionNumbers, None]


ConvGeneralDilatedDimensionNumbers = _conv_dimension_numbers_type()


class AccuracyMode(enum.Enum):
    """Accuracy request for transcendental functions (``lax.exp(x, accuracy=...)``). This
    backend has one implementation per function (accurate to a few ulps), used for every
    mode."""
    HIGHEST = 1
    DEFAULT = 2


class Tolerance:
    """An accuracy target ``(atol, rtol, ulps)`` for transcendental functions
    (``lax.tanh(x, accuracy=Tolerance(rtol=1e-6))``). This backend's one implementation per
    function is used whatever the target."""

    def __init__(self, atol: float = 0.0, rtol: float = 0.0, ulps: int = 0):
        if atol < 0 or rtol < 0 or ulps < 0:
            raise ValueError("Tolerance: atol, rtol and ulps must be non-negative")
        self.atol, self.rtol, self.ulps = float(atol), float(rtol), int(ulps)

    def __repr__(self):
        return f"Tolerance(atol={self.atol}, rtol={self.rtol}, ulps={self.ulps})"

    def __eq__(self, other):
        return isinstance(other, Tolerance) and \
            (self.atol, self.rtol, self.ulps) == (other.atol, other.rtol, other.ulps)

    def __hash__(self):
        return hash((self.atol, self.rtol, self.ulps))


class RoundingMethod(enum.IntEnum):
    """How :func:`round` breaks ties: away from zero (0) or to the nearest even (1)."""
    AWAY_FROM_ZERO = 0
    TO_NEAREST_EVEN = 1

    def __str__(self):
        return self.name


class RandomAlgorithm(enum.IntEnum):
    """The bit generator of :func:`rng_bit_generator`. ``RNG_DEFAULT`` is Philox on this
    backend (as on XLA:CPU)."""
    RNG_DEFAULT = 0
    RNG_THREE_FRY = 1
    RNG_PHILOX = 2

    def __str__(self):
        return self.name


# =============================================================================================
# Small functions over existing primitives
# =============================================================================================


def reciprocal(x):
    """``1 / x`` elementwise (floating and complex dtypes).

        >>> reciprocal(jnp.array([2.0, 4.0]))
        Array([0.5 , 0.25], dtype=float32)
    """
    return ew.integer_pow(x, -1)


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
    return structural.full(shape, fill_value, dtype, weak_type=weak)


def broadcast_to_rank(x, rank: int):
    """``x`` with leading axes of size 1 added until it has ``rank`` axes (unchanged if it
    already has at least that many).

        >>> broadcast_to_rank(jnp.ones(3), 3).shape
        (1, 1, 3)
    """
    aval = get_aval(x)
    if aval.ndim >= rank:
        return structural.broadcast_in_dim(x, aval.shape, tuple(range(aval.ndim))) \
            if _dtypes.is_python_scalar(x) else x
    return structural.broadcast(x, (1,) * (rank - aval.ndim))


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
    return structural.reshape(operand, shape[:start] + (size,) + shape[stop:])


def empty(shape, dtype, *, out_sharding=None):
    """An array of ``shape`` and ``dtype`` whose contents are unspecified (here: zeros).

        >>> empty((2,), jnp.int32)
        Array([0, 0], dtype=int32)
    """
    return structural.full(shape, 0, _dtypes.canonicalize_dtype(dtype))


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
    dn = indexing.GatherDimensionNumbers(offset_dims=offset_dims, collapsed_slice_dims=axes,
                                         start_index_map=axes)
    return indexing.gather(src, indices, dn, slice_sizes, mode="clip")


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
        pieces.append(structural.slice_in_dim(operand, start, start + s, axis=axis))
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
    return structural.concatenate([structural.expand_dims(x, (axis,)) for x in operands], axis)


def unstack(x, axis: int = 0):
    """The slices of ``x`` along ``axis``, as a tuple (the inverse of :func:`stack`).

        >>> unstack(jnp.arange(4).reshape(2, 2))
        (Array([0, 1], dtype=int32), Array([2, 3], dtype=int32))
    """
    shape = get_aval(x).shape
    axis = _axis(axis, len(shape), "unstack")
    return tuple(structural.index_in_dim(x, i, axis, keepdims=False) for i in range(shape[axis]))


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
    out = structural.broadcast_in_dim(operand, wide, tuple(range(1, 2 * len(shape), 2)))
    return structural.reshape(out, tuple(r * d for r, d in zip(reps, shape)))


def broadcast_like(arr, like_arr):
    """``arr`` broadcast (NumPy rules) to the shape of ``like_arr``.

        >>> broadcast_like(jnp.array([1, 2]), jnp.zeros((2, 2)))
        Array([[1, 2],
               [1, 2]], dtype=int32)
    """
    from functrans.numpy import broadcast_to  # upward: numpy is in the API, above this layer
    return broadcast_to(arr, get_aval(like_arr).shape)


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


def axis_size(axis_name) -> int:
    """The size of the named mapped axis (the batch size of the enclosing
    ``vmap(..., axis_name=...)`` or the device count of the ``pmap``); a tuple of names gives
    the product.

        >>> functrans.vmap(lambda x: x * axis_size("i"), axis_name="i")(jnp.ones(3))
        Array([3., 3., 3.], dtype=float32)
    """
    return collectives.axis_size(axis_name)


def shape_as_value(shape):
    """``shape`` as an int32 vector (a NumPy array, as in JAX).

        >>> shape_as_value((2, 3))
        array([2, 3], dtype=int32)
    """
    return np.asarray([operator.index(d) for d in shape], dtype=np.int32)


def platform_dependent(*args, default: Callable | None = None, **per_platform: Callable):
    """Call the function given for the default backend's platform (``cpu=...`` or
    ``cuda=...``) on ``args``, or ``default`` if there is none.

        >>> platform_dependent(1.0, cpu=lambda x: x + 1, default=lambda x: x - 1)
        2.0
    """
    for name in per_platform:
        if name == "gpu":
            raise ValueError("Use 'cuda' or 'rocm' for lax.platform_dependent.")
    platform = _backends.default_platform()
    platform = {"gpu": "cuda"}.get(platform, platform)
    branch = per_platform.get(platform, default)
    if branch is None:
        raise NotImplementedError(f"platform_dependent: no branch for platform {platform!r} "
                                  f"(given: {sorted(per_platform)}) and no default")
    return branch(*args)


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
    return indexing.scatter_add(operand, scatter_indices, ew.neg(updates), dimension_numbers,
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
    from functrans import _api  # upward: _api is in the API, above this layer
    aval = get_aval(operand)
    ones = structural.full(tuple(update_shape), 1, np.int32)
    count = indexing.scatter_add(structural.full(aval.shape, 0, np.int32), scatter_indices,
                                 ones, dimension_numbers,
                                 indices_are_sorted=indices_are_sorted,
                                 unique_indices=unique_indices, mode=mode)
    flat_func = _api.vmap(func)  # func sees scalars, as in XLA's update computation

    def apply(x):
        return structural.reshape(flat_func(structural.reshape(x, (aval.size,))), aval.shape)

    def step(k, x):
        return ew.select(ew.gt(count, ew._const(count, k)), apply(x), x)

    if unique_indices or aval.size == 0:
        return step(0, operand)
    times = reductions.reduce_max(count, tuple(range(aval.ndim)))
    return control_flow.fori_loop(0, times, lambda k, x: step(k, x), operand)


# ---- convolution helpers ---------------------------------------------------------------------


def conv_general_permutations(dimension_numbers):
    """``(lhs_perm, rhs_perm, out_perm)``: for each operand, its (batch/out-feature,
    feature/in-feature, spatial...) axes, from layout strings such as
    ``("NHWC", "HWIO", "NHWC")``.

        >>> conv_general_permutations(("NHWC", "HWIO", "NHWC"))
        ((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
    """
    if isinstance(dimension_numbers[0], str):
        rank = len(dimension_numbers[0])
        for spec, required in zip(dimension_numbers, ("NC", "OI", "NC")):
            if len(spec) != rank or any(spec.count(c) != 1 for c in required):
                raise TypeError(f"conv_general_permutations: {spec!r} must have length {rank} "
                                f"and contain each of {required!r} once")
        dn = conv_dimension_numbers((1,) * rank, (1,) * rank, dimension_numbers)
    else:
        dn = conv_dimension_numbers((1,) * len(dimension_numbers[0]),
                                    (1,) * len(dimension_numbers[0]), dimension_numbers)
    return tuple(dn)


def _conv_specs(rank, dimension_numbers):
    return conv_dimension_numbers((1,) * rank, (1,) * rank, dimension_numbers)


def _window_output_size(size, window, stride):
    return max(0, (size - window) // stride + 1) if size >= window else 0


def conv_shape_tuple(lhs_shape, rhs_shape, strides, pads, batch_group_count: int = 1):
    """Output shape of a convolution in the NC.../OI... layout (``pads``: ``(low, high)``
    pairs or ``"SAME"``/``"VALID"``).

        >>> conv_shape_tuple((1, 3, 5, 5), (8, 3, 3, 3), (2, 2), [(1, 1), (0, 0)])
        (1, 8, 3, 2)
    """
    lhs_shape, rhs_shape = tuple(lhs_shape), tuple(rhs_shape)
    if isinstance(pads, str):
        pads = padtype_to_pads(lhs_shape[2:], rhs_shape[2:], strides, pads)
    if len(pads) != len(lhs_shape) - 2:
        raise TypeError(f"conv_shape_tuple: {len(pads)} padding pairs for "
                        f"{len(lhs_shape) - 2} spatial dimensions")
    spatial = tuple(_window_output_size(n + lo + hi, k, s) for n, k, s, (lo, hi)
                    in zip(lhs_shape[2:], rhs_shape[2:], strides, pads))
    return (lhs_shape[0] // batch_group_count, rhs_shape[0]) + spatial


def _to_layout(canonical, spec):
    """Place ``canonical`` (batch, feature, spatial...) sizes at the axes ``spec`` names."""
    out = [0] * len(spec)
    for size, axis in zip(canonical, spec):
        out[axis] = size
    return tuple(out)


def _canonical_conv_shapes(lhs_shape, rhs_shape, dimension_numbers):
    """The operand shapes in (N, C, spatial...) and (O, I, spatial...) order, and the output
    layout's spec."""
    lhs_spec, rhs_spec, out_spec = _conv_specs(len(lhs_shape), dimension_numbers)
    return (tuple(lhs_shape[a] for a in lhs_spec), tuple(rhs_shape[a] for a in rhs_spec),
            out_spec)


def conv_general_shape_tuple(lhs_shape, rhs_shape, window_strides, padding, dimension_numbers):
    """Output shape of :func:`conv_general_dilated` (no dilation) for the given layouts.

        >>> conv_general_shape_tuple((1, 5, 5, 3), (3, 3, 3, 8), (1, 1), "SAME",
        ...                          ("NHWC", "HWIO", "NHWC"))
        (1, 5, 5, 8)
    """
    lhs_nc, rhs_oi, out_spec = _canonical_conv_shapes(lhs_shape, rhs_shape, dimension_numbers)
    out = conv_shape_tuple(lhs_nc, rhs_oi, window_strides, padding)
    return _to_layout(out, out_spec)


def conv_transpose_shape_tuple(lhs_shape, rhs_shape, window_strides, padding,
                               dimension_numbers):
    """Output shape of :func:`conv_transpose` for the given layouts.

        >>> conv_transpose_shape_tuple((1, 5, 5, 3), (3, 3, 3, 8), (2, 2), "SAME",
        ...                            ("NHWC", "HWIO", "NHWC"))
        (1, 10, 10, 8)
    """
    lhs_nc, rhs_oi, out_spec = _canonical_conv_shapes(lhs_shape, rhs_shape, dimension_numbers)
    if isinstance(padding, str):
        padding = [_conv_transpose_padding(k, s, padding.upper())
                   for k, s in zip(rhs_oi[2:], window_strides)]
    # the input dilated by the stride, padded, then a VALID convolution with the kernel
    spatial = tuple((n - 1) * s + 1 + lo + hi - k + 1 for n, k, s, (lo, hi)
                    in zip(lhs_nc[2:], rhs_oi[2:], window_strides, padding))
    return _to_layout((lhs_nc[0], rhs_oi[0]) + spatial, out_spec)


def reduce_window_shape_tuple(operand_shape, window_dimensions, window_strides, padding,
                              base_dilation=None, window_dilation=None):
    """Output shape of :func:`reduce_window` (``padding``: ``(low, high)`` pairs, or
    ``"SAME"``/``"VALID"``).

        >>> reduce_window_shape_tuple((1, 5, 5, 3), (1, 3, 3, 1), (1, 2, 2, 1),
        ...                           [(0, 0), (1, 1), (0, 0), (0, 0)])
        (1, 3, 2, 3)
    """
    n = len(operand_shape)
    base_dilation = (1,) * n if base_dilation is None else tuple(base_dilation)
    window_dilation = (1,) * n if window_dilation is None else tuple(window_dilation)
    dilated = [0 if d == 0 else (d - 1) * b + 1 for d, b in zip(operand_shape, base_dilation)]
    windows = [(w - 1) * wd + 1 for w, wd in zip(window_dimensions, window_dilation)]
    if isinstance(padding, str):
        padding = padtype_to_pads(dilated, windows, window_strides, padding)
    return tuple(_window_output_size(d + lo + hi, w, s) for d, w, s, (lo, hi)
                 in zip(dilated, windows, window_strides, padding))


def conv_general_dilated_patches(lhs, filter_shape: Sequence[int], window_strides, padding,
                                 lhs_dilation=None, rhs_dilation=None, dimension_numbers=None,
                                 precision=None, preferred_element_type=None):
    """The patches :func:`conv_general_dilated` would multiply by its kernel: the output's
    feature axis holds each receptive field flattened, input channel major, then the filter's
    spatial positions in ``rhs_spec`` order (size ``C * prod(filter_shape)``). Computed as a
    grouped convolution with a 0/1 selection kernel, so it differentiates and batches like
    any convolution.

        >>> conv_general_dilated_patches(jnp.ones((1, 2, 4, 4)), (2, 2), (1, 1), "VALID").shape
        (1, 8, 3, 3)
    """
    lhs_aval = get_aval(lhs)
    filter_shape = tuple(int(s) for s in filter_shape)
    dn = conv_dimension_numbers(lhs_aval.shape, (1, 1) + filter_shape, dimension_numbers)
    channels = lhs_aval.shape[dn.lhs_spec[1]]
    taps = math.prod(filter_shape)
    # kernel in OI<spatial> order: output feature c*taps + t reads input channel c (its own
    # group) at filter position t
    selector = np.eye(taps, dtype=lhs_aval.dtype).reshape((taps, 1) + filter_shape)
    kernel_oi = np.tile(selector, (channels,) + (1,) * (1 + len(filter_shape)))
    kernel = np.transpose(kernel_oi, np.argsort(dn.rhs_spec))
    return conv_general_dilated(lhs, kernel, window_strides, padding, lhs_dilation=lhs_dilation,
                                rhs_dilation=rhs_dilation, dimension_numbers=dn,
                                feature_group_count=channels, precision=precision,
                                preferred_element_type=preferred_element_type)


def conv_general_dilated_local(lhs, rhs, window_strides, padding, filter_shape: Sequence[int],
                               lhs_dilation=None, rhs_dilation=None, dimension_numbers=None,
                               precision=None):
    """Unshared ("locally connected") convolution: a separate kernel at each output position.
    ``rhs``'s spatial axes index output positions and its ``I`` axis holds the receptive
    field flattened as in :func:`conv_general_dilated_patches` (input channel major).

        >>> lhs = jnp.ones((1, 2, 4, 4))
        >>> rhs = jnp.ones((5, 2 * 2 * 2, 3, 3))          # O, I = C*2*2, out H, out W
        >>> conv_general_dilated_local(lhs, rhs, (1, 1), "VALID", (2, 2)).shape
        (1, 5, 3, 3)
    """
    lhs_aval = get_aval(lhs)
    filter_shape = tuple(int(s) for s in filter_shape)
    dn = conv_dimension_numbers(lhs_aval.shape, (1, 1) + filter_shape, dimension_numbers)
    lhs_precision = precision[0] if isinstance(precision, (tuple, list)) else precision
    patches = conv_general_dilated_patches(lhs, filter_shape, window_strides, padding,
                                           lhs_dilation, rhs_dilation, dn, lhs_precision)
    # contract the patch axis with rhs's I axis; the k-th spatial axes of both pair up
    nsp = len(filter_shape)
    dims = (((dn.out_spec[1],), (dn.rhs_spec[1],)),
            (tuple(dn.out_spec[2:]), tuple(dn.rhs_spec[2:])))
    out = dot_general(patches, rhs, dims, precision=precision)  # (spatial..., N, O)
    canonical = (nsp, nsp + 1) + tuple(range(nsp))               # -> (N, O, spatial...)
    out = structural.transpose(out, canonical)
    return structural.transpose(out, tuple(int(i) for i in np.argsort(dn.out_spec)))


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
        values, indices = sorting.top_k(x, k)
    else:
        # the smallest first: top_k of -x, with NaN (which -x keeps NaN) ranked last
        negated = ew.neg(x)
        negated = ew.select(ew.ne(negated, negated), structural.full(
            get_aval(x).shape, -np.inf, aval.dtype), negated)
        _, indices = sorting.top_k(negated, k)
        from functrans.numpy import take_along_axis  # upward: numpy is in the API, above this layer
        values = take_along_axis(x, indices, axis=-1)
    return [batching.moveaxis(values, -1, axis), batching.moveaxis(indices, -1, axis)]


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


# ---- ragged_dot ------------------------------------------------------------------------------


def ragged_dot(lhs, rhs, group_sizes, precision=None, preferred_element_type=None,
               group_offset=None, out_sharding=None):
    """Grouped matmul: ``lhs`` is ``[m, k]``, ``rhs`` is ``[g, k, n]``; consecutive rows of
    ``lhs`` form ``g`` groups of ``group_sizes`` rows, and group ``i`` is multiplied by
    ``rhs[i]``. Rows past ``sum(group_sizes)`` give zeros. Returns ``[m, n]``.

        >>> lhs, rhs = jnp.ones((3, 2)), jnp.stack([jnp.eye(2), 2 * jnp.eye(2)])
        >>> ragged_dot(lhs, rhs, jnp.array([1, 2]))
        Array([[1., 1.],
               [2., 2.],
               [2., 2.]], dtype=float32)
    """
    if group_offset is not None:
        raise NotImplementedError("ragged_dot: group_offset is not supported")
    lhs_aval, rhs_aval, gs_aval = get_aval(lhs), get_aval(rhs), get_aval(group_sizes)
    if lhs_aval.ndim != 2 or rhs_aval.ndim != 3 or gs_aval.shape != (rhs_aval.shape[0],) \
            or lhs_aval.shape[1] != rhs_aval.shape[1]:
        raise TypeError(f"ragged_dot: expected lhs [m, k], rhs [g, k, n] and group_sizes [g], "
                        f"got {lhs_aval.str_short()}, {rhs_aval.str_short()}, "
                        f"{gs_aval.str_short()}")
    if not _dtypes.is_integer(gs_aval.dtype):
        raise TypeError(f"ragged_dot: group_sizes must be integers, got {gs_aval.str_short()}")
    m, g = lhs_aval.shape[0], rhs_aval.shape[0]
    sizes = ew.convert_element_type(group_sizes, np.int32)
    ends = reductions.cumsum(sizes, 0)
    starts = ew.sub(ends, sizes)
    rows = structural.broadcasted_iota(np.int32, (m, g), 0)
    in_group = ew.bitwise_and(ew.ge(rows, structural.broadcast_in_dim(starts, (m, g), (1,))),
                              ew.lt(rows, structural.broadcast_in_dim(ends, (m, g), (1,))))
    per_group = dot_general(lhs, rhs, (((1,), (1,)), ((), ())), precision=precision,
                            preferred_element_type=preferred_element_type)   # [m, g, n]
    out_dtype = get_aval(per_group).dtype
    n = rhs_aval.shape[2]
    mask = structural.broadcast_in_dim(in_group, (m, g, n), (0, 1))
    picked = ew.select(mask, per_group, structural.full((m, g, n), 0, out_dtype))
    return reductions.reduce_sum(picked, (1,))


# =============================================================================================
# mulhi: the high half of the double-width integer product
# =============================================================================================


def _mulhi_impl(x, y):
    bits = x.dtype.itemsize * 8
    if bits < 64:
        wide = np.int64 if x.dtype.kind == "i" else np.uint64
        return ((x.astype(wide) * y.astype(wide)) >> bits).astype(x.dtype)
    # 64-bit: schoolbook on 32-bit halves of the unsigned values, then a sign correction
    ux, uy = x.view(np.uint64), y.view(np.uint64)
    mask, s32 = np.uint64(0xFFFFFFFF), np.uint64(32)
    with np.errstate(over="ignore"):
        x_lo, x_hi, y_lo, y_hi = ux & mask, ux >> s32, uy & mask, uy >> s32
        lo_lo = x_lo * y_lo
        mid1 = x_hi * y_lo + (lo_lo >> s32)
        mid2 = x_lo * y_hi + (mid1 & mask)
        high = x_hi * y_hi + (mid1 >> s32) + (mid2 >> s32)
        if x.dtype.kind == "i":
            # signed = unsigned - 2**64 for negatives: subtract the other operand
            high = high - np.where(x < 0, uy, np.uint64(0)) - np.where(y < 0, ux, np.uint64(0))
    return high.view(x.dtype)


mulhi_p = Primitive("mulhi")
mulhi_p.def_impl(_mulhi_impl)
mulhi_p.def_abstract_eval(ew._elementwise_rule("mulhi", "int"))
batching.broadcast_batcher(mulhi_p)
ad.defjvp_zero(mulhi_p)


def mulhi(x, y, /):
    """The high half of the double-width product of two integers of one dtype:
    ``(x * y) >> bits`` computed without overflow.

        >>> mulhi(jnp.array([2**31 - 1], jnp.int32), jnp.array([2**31 - 1], jnp.int32))
        Array([1073741823], dtype=int32)
    """
    return mulhi_p.bind(*elementwise_operands("mulhi", (x, y), kind="int"))


# =============================================================================================
# bitcast_convert_type
# =============================================================================================

bitcast_convert_type_p = Primitive("bitcast_convert_type")


@bitcast_convert_type_p.def_abstract_eval
def _bitcast_rule(operand, *, new_dtype):
    old, new = operand.dtype, np.dtype(new_dtype)
    if old != new and any(_dtypes.is_bool(d) or _dtypes.is_complex(d) for d in (old, new)):
        raise TypeError(f"bitcast_convert_type does not support bool or complex values unless "
                        f"the operand and destination types match (operand "
                        f"{operand.str_short()}, new_dtype={new.name})")
    if old.itemsize == new.itemsize:
        shape = operand.shape
    elif old.itemsize > new.itemsize:
        shape = operand.shape + (old.itemsize // new.itemsize,)
    else:
        ratio = new.itemsize // old.itemsize
        if not operand.shape or operand.shape[-1] != ratio:
            raise TypeError(f"bitcast_convert_type: converting {operand.str_short()} to "
                            f"{new.name} needs a last axis of size {ratio} (the ratio of "
                            f"their widths)")
        shape = operand.shape[:-1]
    return ShapedArray(shape, new)


@bitcast_convert_type_p.def_impl
def _bitcast_impl(operand, *, new_dtype):
    new = np.dtype(new_dtype)
    x = np.array(operand, order="C", copy=True)  # 0-d stays 0-d
    if x.dtype.itemsize == new.itemsize:
        return x.view(new)
    if x.dtype.itemsize > new.itemsize:
        return x.reshape(x.shape + (1,)).view(new)
    return x.view(new).reshape(x.shape[:-1])


def _bitcast_batch(vals, dims, *, new_dtype):
    # the conversion may add or remove the last axis: keep the batch axis in front
    (x,), (d,) = vals, dims
    return bitcast_convert_type_p.bind(batching.moveaxis(x, d, 0), new_dtype=new_dtype), 0


bitcast_convert_type_p.batch = _bitcast_batch
ad.defjvp_zero(bitcast_convert_type_p)


def bitcast_convert_type(operand, new_dtype):
    """Reinterpret the bits of ``operand`` as ``new_dtype``. A narrower type adds a last axis
    (the pieces of each element, in memory order); a wider one consumes a last axis of that
    ratio. Bool and complex only convert to themselves. No derivative flows through.

        >>> bitcast_convert_type(jnp.float32(1.0), jnp.int32)
        Array(1065353216, dtype=int32)
    """
    new_dtype = _dtypes.canonicalize_dtype(new_dtype)
    if _dtypes.is_python_scalar(operand):
        operand = ew.convert_element_type(operand, get_aval(operand).dtype)
    return bitcast_convert_type_p.bind(operand, new_dtype=new_dtype)


# =============================================================================================
# reduce_precision: round to a float format with fewer exponent / mantissa bits
# =============================================================================================


def _reduce_precision_bits(x, exponent_bits, mantissa_bits):
    """Round float32/float64 ``x`` to ``exponent_bits``/``mantissa_bits`` on its bit pattern:
    round-to-nearest-even on the mantissa (a carry may bump the exponent), then exponents
    above the format's range become infinities and those below its smallest normal zero."""
    finfo = np.finfo(x.dtype)
    total, mant = finfo.bits, finfo.nmant
    expo = total - 1 - mant
    uint = np.dtype(f"u{total // 8}")
    bits = x.view(uint).copy()
    one = uint.type(1)
    if mantissa_bits < mant:
        drop = uint.type(mant - mantissa_bits)
        last_kept = (bits >> drop) & one
        half_minus_one = (one << (drop - one)) - one
        with np.errstate(over="ignore"):
            bits = (bits + half_minus_one + last_kept) & ~((one << drop) - one)
    if exponent_bits < expo:
        sign = bits & (one << uint.type(total - 1))
        biased = ((bits >> uint.type(mant)) & ((one << uint.type(expo)) - one)).astype(np.int64)
        unbiased = biased - (2 ** (expo - 1) - 1)
        limit = 2 ** (exponent_bits - 1) - 1
        inf_bits = sign | (((one << uint.type(expo)) - one) << uint.type(mant))
        bits = np.where(unbiased > limit, inf_bits, bits)
        bits = np.where(unbiased <= -limit, sign, bits)
    out = bits.view(x.dtype)
    return np.where(np.isnan(x), x, out)


reduce_precision_p = Primitive("reduce_precision")


@reduce_precision_p.def_impl
def _reduce_precision_impl(operand, *, exponent_bits, mantissa_bits):
    x = operand
    if x.dtype.itemsize < 4:  # bf16/f16: every narrower format is exact in float32
        return _reduce_precision_bits(x.astype(np.float32), exponent_bits,
                                      mantissa_bits).astype(x.dtype)
    return _reduce_precision_bits(x, exponent_bits, mantissa_bits)


@reduce_precision_p.def_abstract_eval
def _reduce_precision_rule(operand, *, exponent_bits, mantissa_bits):
    ew._check_kind("reduce_precision", "real_float", [operand])
    return operand


batching.defvectorized(reduce_precision_p)
# rounding is treated as the identity for derivatives, with tangents rounded like the values
ad.deflinear(reduce_precision_p, lambda ct, **params: [reduce_precision_p.bind(ct, **params)])


def reduce_precision(operand, exponent_bits: int, mantissa_bits: int):
    """Round ``operand`` to the float format with ``exponent_bits`` exponent bits and
    ``mantissa_bits`` explicit mantissa bits (round to nearest even; overflow to infinity,
    values below the smallest normal to zero) and return it in its own dtype: emulates
    bfloat16 (8, 7), float16 (5, 10) and the like.

        >>> reduce_precision(jnp.float32(1.2345678), 8, 7)
        Array(1.234375, dtype=float32)
    """
    exponent_bits, mantissa_bits = operator.index(exponent_bits), operator.index(mantissa_bits)
    if exponent_bits < 1:
        raise ValueError(f"reduce_precision: exponent_bits must be positive; got "
                         f"{exponent_bits}")
    if mantissa_bits < 0:
        raise ValueError(f"reduce_precision: mantissa_bits must be non-negative; got "
                         f"{mantissa_bits}")
    if _dtypes.is_python_scalar(operand):
        operand = ew.convert_element_type(operand, get_aval(operand).dtype, weak_type=True)
    return reduce_precision_p.bind(operand, exponent_bits=exponent_bits,
                                   mantissa_bits=mantissa_bits)


# =============================================================================================
# rng_uniform: stateful uniform numbers (no key)
# =============================================================================================

_stateful_generator = np.random.default_rng()

rng_uniform_p = Primitive("rng_uniform")


@rng_uniform_p.def_impl
def _rng_uniform_impl(a, b, *, shape):
    if _dtypes.is_integer(a.dtype):
        return _stateful_generator.integers(a, b, size=shape, dtype=a.dtype, endpoint=False)
    u = _stateful_generator.random(size=shape)
    return (a + (b - a) * u).astype(a.dtype)


@rng_uniform_p.def_abstract_eval
def _rng_uniform_rule(a, b, *, shape):
    if a.shape != () or b.shape != () or a.dtype != b.dtype:
        raise TypeError(f"rng_uniform: a and b must be scalars of one dtype, got "
                        f"{a.str_short()} and {b.str_short()}")
    if _dtypes.is_bool(a.dtype) or _dtypes.is_complex(a.dtype):
        raise TypeError(f"rng_uniform: unsupported dtype {a.dtype.name}")
    return ShapedArray(shape, a.dtype, a.weak_type and b.weak_type)


def rng_uniform(a, b, shape):
    """Stateful pseudo-random numbers uniform in ``[a, b)`` (floats or integers), from a
    process-wide generator: every call (and every run of a compiled function) draws new
    numbers. Prefer :mod:`functrans.random`, whose keys make results reproducible.

        >>> rng_uniform(0.0, 1.0, (3,)).shape
        (3,)
    """
    a, b = _same_dtype_scalars(a, b)
    return rng_uniform_p.bind(a, b, shape=tuple(int(s) for s in shape))


def _same_dtype_scalars(a, b):
    """Python scalars take the other operand's dtype (both Python: their own, weakly)."""
    if _dtypes.is_python_scalar(a):
        a = ew.convert_element_type(a, get_aval(b).dtype, weak_type=get_aval(b).weak_type)
    if _dtypes.is_python_scalar(b):
        b = ew.convert_element_type(b, get_aval(a).dtype, weak_type=get_aval(a).weak_type)
    return a, b


# =============================================================================================
# rng_bit_generator: XLA's counter-based bit generators, bit for bit
# =============================================================================================

_PHILOX_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
_PHILOX_KEY_STEPS = (0x9E3779B9, 0xBB67AE85)


def _philox4x32(key, counter):
    """Philox-4x32 with 10 rounds (Salmon et al., SC 2011). ``key``: two uint32 arrays;
    ``counter``: four uint32 arrays (low word first). Returns four uint32 arrays."""
    c = [w.astype(np.uint64) for w in counter]
    k0, k1 = (w.astype(np.uint64) for w in key)
    mask = np.uint64(0xFFFFFFFF)
    m0, m1 = (np.uint64(m) for m in _PHILOX_MULTIPLIERS)
    s0, s1 = (np.uint64(s) for s in _PHILOX_KEY_STEPS)
    for _ in range(10):
        p0, p1 = m0 * c[0], m1 * c[2]   # 32 x 32 -> 64 bits: no overflow in uint64
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & mask,
             (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & mask]
        k0, k1 = (k0 + s0) & mask, (k1 + s1) & mask
    return [w.astype(np.uint32) for w in c]


def _counters(start: int, count: int, words: int):
    """``count`` consecutive counters from ``start`` as ``words`` (2 or 4) uint32 arrays, low
    word first, wrapping modulo ``2**(32 * words)``."""
    low = np.uint64(start & 0xFFFFFFFFFFFFFFFF)
    with np.errstate(over="ignore"):
        lo = low + np.arange(count, dtype=np.uint64)       # wraps modulo 2**64
        carry = (lo < low).astype(np.uint64)
        hi = np.uint64((start >> 64) & 0xFFFFFFFFFFFFFFFF) + carry
    mask, s32 = np.uint64(0xFFFFFFFF), np.uint64(32)
    out = [lo & mask, lo >> s32, hi & mask, hi >> s32]
    return [w.astype(np.uint32) for w in out[:words]]


def _threefry_split_axis(shape) -> int:
    """XLA's ThreeFry pairs up the outputs along one axis: the first even one, else the
    largest (first among equals) longer than 1, else axis 0."""
    for i, d in enumerate(shape):
        if d % 2 == 0:
            return i
    best = -1
    for i, d in enumerate(shape):
        if d > 1 and (best < 0 or d > shape[best]):
            best = i
    return max(best, 0)


def _threefry_words(key, counter, shape):
    """32-bit words laid out as XLA's ThreeFry lays them out, and the blocks used."""
    if not shape:
        words, blocks = _threefry_words(key, counter, (1,))
        return words.reshape(()), blocks
    axis = _threefry_split_axis(shape)
    half = list(shape)
    half[axis] = -(-shape[axis] // 2)
    blocks = math.prod(half)
    lo, hi = _counters(counter, blocks, 2)
    w0, w1 = threefry2x32_reference(np.full(blocks, key[0], np.uint32),
                                    np.full(blocks, key[1], np.uint32), lo, hi)
    # each block's two words sit next to each other along the split axis' new inner pair
    pairs = np.stack([w0.reshape(half), w1.reshape(half)], axis=axis + 1)
    full = pairs.reshape(half[:axis] + [2 * half[axis]] + half[axis + 1:])
    return full[tuple(slice(0, d) for d in shape)], blocks


def _threefry_u64(key, counter, shape):
    blocks = math.prod(shape)
    lo, hi = _counters(counter, blocks, 2)
    w0, w1 = threefry2x32_reference(np.full(blocks, key[0], np.uint32),
                                    np.full(blocks, key[1], np.uint32), lo, hi)
    out = w0.astype(np.uint64) | (w1.astype(np.uint64) << np.uint64(32))
    return out.reshape(shape), blocks


def _philox_words(key, counter, count):
    """``count`` 32-bit words from consecutive 128-bit counters whose high half starts at
    the key (XLA's layout for a 128-bit state), and the blocks used."""
    blocks = -(-count // 4)
    start = counter | (int(key[0]) << 64) | (int(key[1]) << 96)
    ctr = _counters(start, blocks, 4)
    keys = [np.full(blocks, k, np.uint32) for k in key[:2]]
    words = np.stack(_philox4x32(keys, ctr), axis=1).reshape(-1)
    return words[:count], blocks


def _rng_bit_generator_one(key, shape, dtype, algorithm):
    key = [int(k) for k in key]
    counter = key[2] | (key[3] << 32)
    dtype = np.dtype(dtype)
    size = math.prod(shape)
    if algorithm == RandomAlgorithm.RNG_THREE_FRY:
        if dtype.itemsize == 8:
            bits, blocks = _threefry_u64(key, counter, shape)
        else:
            bits, blocks = _threefry_words(key, counter, shape)
    else:  # RNG_DEFAULT is Philox on CPU
        per_element = 2 if dtype.itemsize == 8 else 1
        words, blocks = _philox_words(key, counter, size * per_element)
        if per_element == 2:
            pairs = words.reshape(-1, 2).astype(np.uint64)
            bits = (pairs[:, 0] | (pairs[:, 1] << np.uint64(32))).reshape(shape)
        else:
            bits = words.reshape(shape)
    new_counter = (counter + blocks) % (1 << 64)
    new_key = np.array([key[0], key[1], new_counter & 0xFFFFFFFF, new_counter >> 32], np.uint32)
    # narrower types keep the low bits of each 32-bit word
    return new_key, np.asarray(bits).astype(dtype)


rng_bit_generator_p = Primitive("rng_bit_generator", multiple_results=True)


@rng_bit_generator_p.def_impl
def _rng_bit_generator_impl(key, *, shape, dtype, algorithm):
    batch = key.shape[:-1]
    flat = key.reshape(-1, 4)
    new_keys, outs = [], []
    for k in flat:
        nk, bits = _rng_bit_generator_one(k, shape, dtype, algorithm)
        new_keys.append(nk)
        outs.append(bits)
    new_keys = np.stack(new_keys).reshape(batch + (4,)) if flat.shape[0] else \
        np.zeros(batch + (4,), np.uint32)
    outs = np.stack(outs).reshape(batch + shape) if flat.shape[0] else \
        np.zeros(batch + shape, dtype)
    return [new_keys, outs]


@rng_bit_generator_p.def_abstract_eval
def _rng_bit_generator_rule(key, *, shape, dtype, algorithm):
    # keys may carry leading batch axes (from vmap): (..., 4) -> (..., *shape)
    if key.dtype != np.uint32 or not key.shape or key.shape[-1] != 4:
        raise TypeError(f"rng_bit_generator: the key must be uint32[4], got {key.str_short()}")
    batch = key.shape[:-1]
    return [ShapedArray(key.shape, key.dtype), ShapedArray(batch + tuple(shape), dtype)]


def _rng_bit_generator_batch(vals, dims, **params):
    (key,), (d,) = vals, dims
    return rng_bit_generator_p.bind(batching.moveaxis(key, d, 0), **params), [0, 0]


rng_bit_generator_p.batch = _rng_bit_generator_batch
ad.defjvp_zero(rng_bit_generator_p)

_BIT_GENERATOR_DTYPES = ("uint8", "uint16", "uint32", "uint64")


def rng_bit_generator(key, shape, dtype=np.uint32, algorithm=RandomAlgorithm.RNG_DEFAULT, *,
                      out_sharding=None):
    """Random bits of ``shape`` and unsigned ``dtype`` from a uint32[4] state ``key``;
    returns ``(new_key, bits)``. Bit-for-bit the generators of XLA:CPU (and so of JAX on CPU):
    ``RNG_THREE_FRY`` (Threefry-2x32: key words 0-1 are the key, words 2-3 a 64-bit counter)
    and ``RNG_PHILOX`` (Philox-4x32-10), which ``RNG_DEFAULT`` means here. Narrower dtypes
    keep the low bits of 32-bit words; uint64 needs x64.

        >>> key = jnp.array([1, 2, 3, 4], jnp.uint32)
        >>> rng_bit_generator(key, (2,), algorithm=RandomAlgorithm.RNG_THREE_FRY)[1]
        Array([1576285164, 2249660814], dtype=uint32)
    """
    dtype = _dtypes.canonicalize_dtype(dtype)
    if dtype.name not in _BIT_GENERATOR_DTYPES:
        raise TypeError(f"rng_bit_generator: unsupported dtype {dtype.name} (use one of "
                        f"{', '.join(_BIT_GENERATOR_DTYPES)})")
    try:
        algorithm = RandomAlgorithm(int(algorithm))
    except (TypeError, ValueError):
        raise NotImplementedError(f"rng_bit_generator: unknown algorithm {algorithm!r}; "
                                  "RNG_DEFAULT, RNG_THREE_FRY and RNG_PHILOX are "
                                  "supported") from None
    key_aval = get_aval(key)
    if key_aval.shape != (4,) or key_aval.dtype != np.uint32:
        raise TypeError(f"rng_bit_generator: the key must be uint32[4], got "
                        f"{key_aval.str_short()}")
    shape = tuple(operator.index(s) for s in shape)
    return tuple(rng_bit_generator_p.bind(key, shape=shape, dtype=dtype,
                                          algorithm=int(algorithm)))


__all__ = [
    "AccuracyMode", "ConvGeneralDilatedDimensionNumbers", "DotAlgorithm", "DotAlgorithmPreset",
    "DotDimensionNumbers", "Precision", "PrecisionLike", "RandomAlgorithm", "RoundingMethod",
    "Tolerance", "approx_max_k", "approx_min_k", "axis_size", "bitcast_convert_type",
    "broadcast_like", "stack", "tile", "unstack",
    "broadcast_shapes", "broadcast_to_rank", "collapse", "conv_general_dilated_local",
    "conv_general_dilated_patches", "conv_general_permutations", "conv_general_shape_tuple",
    "conv_shape_tuple", "conv_transpose_shape_tuple", "dtype", "empty", "full_like",
    "index_take", "mulhi", "platform_dependent", "ragged_dot", "reciprocal", "reduce_precision",
    "reduce_window_shape_tuple", "rng_bit_generator", "rng_uniform", "scatter_apply",
    "scatter_sub", "shape_as_value", "split",
]

