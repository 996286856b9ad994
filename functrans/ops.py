"""``functrans.ops``: segment reductions (as ``jax.ops``).

A segment reduction combines the rows of ``data`` that share a segment id:
``out[s] = op(data[i] for every i with segment_ids[i] == s)``. Segments that receive no row
hold the identity of ``op`` (0 for sums, 1 for products, the lowest/highest value of the
dtype for max/min). Each one is a single scatter (``scatter_add``, ``scatter_mul``,
``scatter_max``, ``scatter_min``) into an array of identities, so it differentiates, batches
under ``vmap`` and compiles under ``jit`` like the scatter it is made of.

    >>> import functrans.numpy as jnp
    >>> from functrans import ops
    >>> ops.segment_sum(jnp.array([1.0, 2.0, 3.0, 4.0]), jnp.array([0, 0, 2, 1]), 3)
    Array([3., 4., 3.], dtype=float32)

``num_segments`` fixes the output shape, so under ``jit`` it must be a static Python int;
without it, the number of segments is read from the concrete ``segment_ids``.
"""
from __future__ import annotations

import functools
import operator

import numpy as np

import functrans.numpy as jnp
from functrans import _dtypes, lax
from functrans._custom_derivatives import custom_jvp
from functrans.core import ConcretizationTypeError, Primitive, Tracer, get_aval
from functrans.numpy._promotion import concrete_value

__all__ = ["segment_sum", "segment_prod", "segment_max", "segment_min"]


def _check_arraylike(name, **args):
    # As jax.ops does, refuse lists and tuples: their conversion is ambiguous (a list of
    # arrays may be meant as a pytree).
    for what, value in args.items():
        if isinstance(value, (list, tuple)):
            raise TypeError(f"{name} requires array or scalar arguments, got a "
                            f"{type(value).__name__} for {what}; wrap it with jnp.asarray")


def _num_segments(name, segment_ids, num_segments) -> int:
    """The static number of segments: ``num_segments`` itself, or ``max(segment_ids) + 1``."""
    if num_segments is None:
        ids = concrete_value(segment_ids)
        if ids is None:
            raise ConcretizationTypeError(
                f"{name}: without num_segments the output length depends on the values of "
                f"the traced segment_ids; pass num_segments= as a static int")
        if ids.size == 0:
            raise ValueError(f"{name}: cannot infer num_segments from empty segment_ids; "
                             f"pass num_segments=")
        return max(int(ids.max()) + 1, 0)
    if isinstance(num_segments, Tracer):
        num_segments = concrete_value(num_segments)
    if num_segments is None:
        raise ConcretizationTypeError(
            f"{name}: num_segments sets the output shape, so it must be a static int, got a "
            f"traced value; mark it static (jit(..., static_argnums=...)) or use a constant")
    try:
        count = operator.index(num_segments)
    except TypeError:
        if getattr(num_segments, "shape", None) == ():
            count = operator.index(np.asarray(num_segments).item())
        else:
            raise TypeError(f"{name}: num_segments must be an int, got "
                            f"{num_segments!r}") from None
    if count < 0:
        raise ValueError(f"{name}: num_segments must be non-negative, got {count}")
    return count


def _identity(kind: str, dtype):
    """The value an empty segment holds: the identity of the combining operation."""
    dtype = np.dtype(dtype)
    if kind == "sum":
        return 0
    if kind == "prod":
        return 1
    lowest = kind == "max"
    if _dtypes.is_bool(dtype):
        return not lowest
    if _dtypes.is_integer(dtype):
        info = np.iinfo(dtype)
        return info.min if lowest else info.max
    return -np.inf if lowest else np.inf


_SCATTERS = {"sum": lax.scatter_add, "prod": lax.scatter_mul, "max": lax.scatter_max,
             "min": lax.scatter_min}


def _scatter_segments(kind, data, segment_ids, num_segments, indices_are_sorted,
                      unique_indices, mode):
    """``full((num_segments,) + data.shape[1:], identity).at[segment_ids].<op>(data)`` as
    one scatter primitive. ``data`` is already broadcast to ``segment_ids.shape + rest``."""
    aval = get_aval(data)
    ids_ndim = get_aval(segment_ids).ndim
    rest = aval.shape[ids_ndim:]
    out = lax.full((num_segments,) + rest, _identity(kind, aval.dtype), aval.dtype)
    # one index vector (of length 1, addressing axis 0) per position of segment_ids; the
    # trailing axes of data are whole windows over the trailing axes of the output
    dnums = lax.ScatterDimensionNumbers(
        update_window_dims=tuple(range(ids_ndim, aval.ndim)), inserted_window_dims=(0,),
        scatter_dims_to_operand_dims=(0,))
    indices = lax.expand_dims(segment_ids, (ids_ndim,))
    return _SCATTERS[kind](out, indices, data, dnums, indices_are_sorted=indices_are_sorted,
                           unique_indices=unique_indices, mode=mode)


# ---- a guard for derivatives the rule below does not provide --------------------------------
# Identity on values; differentiating through it raises. The segment-product rule's "product
# of the others" is exact in value and first derivative but not beyond (its zero-handling
# branches are piecewise), so it passes through this guard: a second derivative is an error,
# never a wrong number.
first_order_only_p = Primitive("first_order_only")


@first_order_only_p.def_impl
def _first_order_only_impl(x, *, what):
    return x


@first_order_only_p.def_abstract_eval
def _first_order_only_abstract_eval(aval, *, what):
    return aval


def _first_order_only_jvp(primals, tangents, *, what):
    raise NotImplementedError(f"{what}: derivatives of second and higher order are not "
                              f"implemented (first derivatives are)")


first_order_only_p.jvp = _first_order_only_jvp
first_order_only_p.batch = lambda vals, dims, *, what: (
    first_order_only_p.bind(vals[0], what=what), dims[0])


# scatter_mul differentiates in its updates only when no position repeats; a product over a
# segment gets its own rule: d prod(x) = sum_i prod_{j != i}(x_j) dx_i, with the products
# "of all the others" computed without dividing by zero. The static settings are closed
# over (one custom_jvp function per setting, cached) so that only arrays are arguments.
@functools.lru_cache(maxsize=None)
def _differentiable_segment_prod(num_segments, indices_are_sorted, unique_indices, mode):
    static = (num_segments, indices_are_sorted, unique_indices, mode)

    @custom_jvp
    def segment_prod(data, segment_ids):
        return _scatter_segments("prod", data, segment_ids, *static)

    @segment_prod.defjvp
    def segment_prod_jvp(primals, tangents):
        data, segment_ids = primals
        t_data = tangents[0]
        out = segment_prod(data, segment_ids)
        is_zero = data == 0
        # per segment: the product of its non-zero entries and how many zeros it holds,
        # read back at every row (rows whose id was dropped read 0)
        nonzero_product = segment_prod(jnp.where(is_zero, 1, data), segment_ids)
        zero_count = _scatter_segments("sum", is_zero.astype(np.int32), segment_ids, *static)
        row_product = _gather_segments(nonzero_product, segment_ids, mode)
        row_zeros = _gather_segments(zero_count, segment_ids, mode)
        # the product of the others: with no zero in the segment, the product over the
        # entry itself; with exactly one zero, non-zero only at that zero
        others = jnp.where(is_zero, jnp.where(row_zeros == 1, row_product, 0),
                           jnp.where(row_zeros == 0, row_product / jnp.where(is_zero, 1, data),
                                     0))
        others = first_order_only_p.bind(others, what="segment_prod")
        return out, _scatter_segments("sum", others * t_data, segment_ids, *static)

    return segment_prod


def _gather_segments(per_segment, segment_ids, mode):
    """``per_segment[segment_ids]`` with the scatter's bounds policy: clamped ids read their
    clamped segment, dropped ids read 0 (never wrapped around as negative NumPy indices)."""
    aval, ids_ndim = get_aval(per_segment), get_aval(segment_ids).ndim
    dnums = lax.GatherDimensionNumbers(
        offset_dims=tuple(range(ids_ndim, ids_ndim + aval.ndim - 1)), collapsed_slice_dims=(0,),
        start_index_map=(0,))
    gather_mode = (lax.GatherScatterMode.CLIP if mode == lax.GatherScatterMode.CLIP
                   else lax.GatherScatterMode.FILL_OR_DROP)
    return lax.gather(per_segment, lax.expand_dims(segment_ids, (ids_ndim,)), dnums,
                      (1,) + aval.shape[1:], mode=gather_mode, fill_value=0)


def _segment_reduce(name, kind, data, segment_ids, num_segments, indices_are_sorted,
                    unique_indices, bucket_size, mode):
    _check_arraylike(name, data=data, segment_ids=segment_ids)
    data = jnp.asarray(data)
    segment_ids = jnp.asarray(segment_ids)
    ids_dtype = get_aval(segment_ids).dtype
    if not _dtypes.is_integer(ids_dtype):
        raise TypeError(f"{name}: segment_ids must be integers, got {ids_dtype}")
    dtype = get_aval(data).dtype
    if kind in ("sum", "prod") and _dtypes.is_bool(dtype):
        raise TypeError(f"{name} does not accept boolean data (as jax.ops); cast it to an "
                        f"integer or float dtype first")
    if bucket_size is not None and operator.index(bucket_size) <= 0:
        raise ValueError(f"{name}: bucket_size must be a positive int, got {bucket_size}")
    # bucket_size only reorders the summation in JAX (a performance knob for accelerators);
    # the result is the same reduction, so one scatter serves every bucket size.
    count = _num_segments(name, segment_ids, num_segments)
    ids_shape, data_shape = get_aval(segment_ids).shape, get_aval(data).shape
    rest = data_shape[1:]
    target = tuple(ids_shape) + tuple(rest)
    try:
        np.broadcast_shapes(data_shape, target)
        if len(data_shape) > len(target):
            raise ValueError
    except ValueError:
        raise ValueError(f"{name}: data of shape {data_shape} does not broadcast to "
                         f"segment_ids.shape + data.shape[1:] = {target}") from None
    data = jnp.broadcast_to(data, target)
    mode = lax.GatherScatterMode.from_any(mode)
    if count == 0:
        return lax.full((0,) + tuple(rest), _identity(kind, dtype), dtype)
    if kind == "prod" and _dtypes.is_inexact(dtype) and not unique_indices:
        differentiable = _differentiable_segment_prod(count, bool(indices_are_sorted),
                                                      bool(unique_indices), mode)
        return differentiable(data, segment_ids)
    return _scatter_segments(kind, data, segment_ids, count, bool(indices_are_sorted),
                             bool(unique_indices), mode)


def _make_segment_op(kind, what, identity, example_out):
    name = f"segment_{kind}"

    def segment_op(data, segment_ids, num_segments=None, indices_are_sorted: bool = False,
                   unique_indices: bool = False, bucket_size=None, mode=None):
        return _segment_reduce(name, kind, data, segment_ids, num_segments,
                               indices_are_sorted, unique_indices, bucket_size, mode)

    segment_op.__name__ = segment_op.__qualname__ = name
    segment_op.__module__ = __name__
    segment_op.__doc__ = f"""The {what} of the rows of ``data`` within each segment.

    ``out[s]`` combines every ``data[i]`` with ``segment_ids[i] == s`` (ids may repeat and
    come in any order); a segment with no rows holds {identity}.

    Args:
      data: the values; its leading axes are matched with ``segment_ids`` (it is broadcast
        to ``segment_ids.shape + data.shape[1:]``).
      segment_ids: integer segment of each row. Ids outside ``[0, num_segments)`` are
        dropped (``mode="clip"`` clamps them into range instead).
      num_segments: the number of segments, a static int (required under ``jit``);
        defaults to ``max(segment_ids) + 1``.
      indices_are_sorted, unique_indices: promises about ``segment_ids`` passed on to the
        scatter.
      bucket_size: accepted for compatibility; the result does not depend on it.
      mode: out-of-range policy, ``None``/``"drop"``/``"fill"`` or ``"clip"``.

    Returns:
      An array of shape ``(num_segments,) + data.shape[1:]`` and ``data``'s dtype.

        >>> import functrans.numpy as jnp
        >>> from functrans import ops
        >>> ops.{name}(jnp.array([1.0, 2.0, 3.0, 4.0]), jnp.array([0, 0, 2, 1]), 3)
        {example_out}
    """
    return segment_op


segment_sum = _make_segment_op("sum", "sum", "0", "Array([3., 4., 3.], dtype=float32)")
segment_prod = _make_segment_op("prod", "product", "1", "Array([2., 4., 3.], dtype=float32)")
segment_max = _make_segment_op("max", "maximum", "the lowest value of the dtype (``-inf`` for "
                               "floats)", "Array([2., 4., 3.], dtype=float32)")
segment_min = _make_segment_op("min", "minimum", "the highest value of the dtype (``inf`` for "
                               "floats)", "Array([1., 4., 3.], dtype=float32)")
