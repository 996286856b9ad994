"""Windowed reductions (pooling), reductions by a computation, prefix scans and barriers.

``reduce_window_sum``, ``reduce_window_max`` and ``reduce_window_min`` reduce every window
of an operand, with JAX's parameters: ``window_dimensions``, ``window_strides``, ``padding``
(one ``(low, high)`` pair per axis; negative pads crop), ``base_dilation`` (holes between
operand elements) and ``window_dilation`` (holes between window elements). Padding and holes
hold the reduction's identity. ``reduce_window`` maps a computation (``lax.add``, ``lax.max``,
``lax.min``) and its init value onto them, as CNN pooling layers call it; ``reduce`` does the
same for whole-axis reductions. ``associative_scan`` is the parallel prefix algorithm built
from slices and concatenations, and ``optimization_barrier`` is an identity that transforms
pass through.

Each primitive's shape rule, reference implementation, JVP, transpose and batching rule are
declared together below it.
"""
from __future__ import annotations

import builtins

import numpy as np

from functrans import _dtypes, tree_util
from functrans.core import Primitive, ShapedArray, Tracer, get_aval
from functrans.interpreters import ad, staging
from functrans.interpreters.ad import Zero, is_undefined_primal
from functrans.primitives import elementwise as ew
from functrans.primitives import indexing, reductions, structural
from functrans.primitives.convolution import padtype_to_pads

_WINDOW_PARAMS = ("window_dimensions", "window_strides", "padding", "base_dilation",
                  "window_dilation")

# =============================================================================================
# Shared window arithmetic
# =============================================================================================


def _dilated_size(size: int, dilation: int) -> int:
    return 0 if size == 0 else (size - 1) * dilation + 1


def _padded_sizes(shape, padding, base_dilation) -> tuple:
    """Sizes of the operand after base dilation and padding: the array the windows slide on."""
    return tuple(_dilated_size(s, d) + lo + hi
                 for s, (lo, hi), d in zip(shape, padding, base_dilation))


def _window_out_shape(shape, window_dimensions, window_strides, padding, base_dilation,
                      window_dilation) -> tuple:
    out = []
    for size, w, s, wd in zip(_padded_sizes(shape, padding, base_dilation), window_dimensions,
                              window_strides, window_dilation):
        extent = _dilated_size(w, wd)
        out.append((size - extent) // s + 1 if size >= extent else 0)
    return tuple(out)


def _window_rule(name, kinds=None):
    """Shape rule of a windowed reduction; ``kinds`` restricts the operand dtype."""
    def rule(operand, *, window_dimensions, window_strides, padding, base_dilation,
             window_dilation):
        def fail(why):
            raise TypeError(
                f"{name}: {why} (operand {operand.str_short()}, window_dimensions="
                f"{tuple(window_dimensions)}, window_strides={tuple(window_strides)}, padding="
                f"{tuple(padding)}, base_dilation={tuple(base_dilation)}, window_dilation="
                f"{tuple(window_dilation)})")

        for label, seq in (("window_dimensions", window_dimensions),
                           ("window_strides", window_strides), ("padding", padding),
                           ("base_dilation", base_dilation), ("window_dilation", window_dilation)):
            if len(seq) != operand.ndim:
                fail(f"{label} has {len(seq)} entries for an operand of rank {operand.ndim}")
        for label, seq in (("window_dimensions", window_dimensions),
                           ("window_strides", window_strides), ("base_dilation", base_dilation),
                           ("window_dilation", window_dilation)):
            if any(v < 1 for v in seq):
                fail(f"{label} must be positive")
        if kinds is not None and not kinds(operand.dtype):
            fail(f"the operand type {operand.dtype} is not supported")
        if any(size < 0 for size in _padded_sizes(operand.shape, padding, base_dilation)):
            fail("the padding crops an axis to a negative size")
        shape = _window_out_shape(operand.shape, window_dimensions, window_strides, padding,
                                  base_dilation, window_dilation)
        return ShapedArray(shape, operand.dtype, operand.weak_type)
    return rule


def _dilate_and_pad(x, base_dilation, padding, fill):
    """Spread ``x`` by ``base_dilation`` and pad it (negative pads crop), filling the holes and
    the padding with ``fill``."""
    dilated = [_dilated_size(s, d) for s, d in zip(x.shape, base_dilation)]
    grown = [builtins.max(lo, 0) + size + builtins.max(hi, 0)
             for size, (lo, hi) in zip(dilated, padding)]
    out = np.full(grown, fill, dtype=x.dtype)
    place = tuple(builtins.slice(builtins.max(lo, 0), builtins.max(lo, 0) + size, d)
                  for size, (lo, _), d in zip(dilated, padding, base_dilation))
    out[place] = x
    crop = tuple(builtins.slice(builtins.max(-lo, 0), g - builtins.max(-hi, 0))
                 for g, (lo, hi) in zip(grown, padding))
    return out[crop]


def _windows(x, fill, *, window_dimensions, window_strides, padding, base_dilation,
             window_dilation):
    """Every window of ``x`` as an array of shape ``out_shape + window_dimensions`` (a strided
    view where possible)."""
    out_shape = _window_out_shape(x.shape, window_dimensions, window_strides, padding,
                                  base_dilation, window_dilation)
    if x.ndim == 0:
        return x
    if 0 in out_shape:
        return np.full(out_shape + tuple(window_dimensions), fill, dtype=x.dtype)
    padded = _dilate_and_pad(x, base_dilation, padding, fill)
    extents = tuple(_dilated_size(w, d) for w, d in zip(window_dimensions, window_dilation))
    views = np.lib.stride_tricks.sliding_window_view(padded, extents)
    picks = (tuple(builtins.slice(None, s * (o - 1) + 1, s)
                   for s, o in zip(window_strides, out_shape))
             + tuple(builtins.slice(None, None, d) for d in window_dilation))
    return views[picks]


def _window_axes(ndim):
    return tuple(range(ndim, 2 * ndim))


def _in_f32(x):
    """Low-precision floats (bf16, f16) are reduced in float32 and rounded back."""
    return x.astype(np.float32) if x.dtype in (_dtypes.bfloat16, _dtypes.float16) else x


def _window_batch(primitive):
    """The batch axis becomes a window axis of size 1, stride 1, without padding."""
    def rule(vals, dims, **params):
        (x,), (d,) = vals, dims
        defaults = {"window_dimensions": 1, "window_strides": 1, "padding": (0, 0),
                    "base_dilation": 1, "window_dilation": 1}
        new = dict(params)
        for key, fill in defaults.items():
            seq = list(params[key])
            seq.insert(d, fill)
            new[key] = tuple(seq)
        return primitive.bind(x, **new), d
    return rule


def _identity(kind, dtype):
    if kind == "sum":
        return np.zeros((), dtype)
    return reductions._lowest(dtype) if kind == "max" else reductions._highest(dtype)


# =============================================================================================
# reduce_window_sum
# =============================================================================================

reduce_window_sum_p = Primitive("reduce_window_sum")
reduce_window_sum_p.def_abstract_eval(
    _window_rule("reduce_window_sum", lambda dt: not _dtypes.is_bool(dt)))


@reduce_window_sum_p.def_impl
def _reduce_window_sum_impl(operand, **params):
    windows = _windows(_in_f32(operand), 0, **params)
    return np.sum(windows, axis=_window_axes(operand.ndim)).astype(operand.dtype)


def _reduce_window_sum_transpose(ct, operand, *, window_dimensions, window_strides, padding,
                                 base_dilation, window_dilation):
    # Output o sums padded[o*stride + k*wdil] over k. Transposed, each padded position p
    # collects ct[o] from every (o, k) with o*stride + k*wdil = p. So: place ct[o] at o*stride
    # of a zero array as long as the padded operand (interior padding), pad it low by the
    # dilated window extent minus one, and sum windows of stride 1 (each p looks back over the
    # window). Finally undo the operand's padding and base dilation (pad by the negated pads,
    # keep every base_dilation-th element).
    shape, dtype = operand.aval.shape, operand.aval.dtype
    ct_shape = get_aval(ct).shape
    zero = np.zeros((), dtype)
    if 0 in ct_shape or 0 in shape:
        return [structural.full(shape, 0, dtype)]
    nd = len(shape)
    spread_config = []
    for size, o, s, w, wd in zip(_padded_sizes(shape, padding, base_dilation), ct_shape,
                                 window_strides, window_dimensions, window_dilation):
        spread_config.append(((w - 1) * wd, size - (o - 1) * s - 1, s - 1))
    spread = structural.pad(ct, zero, spread_config)
    summed = reduce_window_sum_p.bind(
        spread, window_dimensions=tuple(window_dimensions), window_strides=(1,) * nd,
        padding=((0, 0),) * nd, base_dilation=(1,) * nd, window_dilation=tuple(window_dilation))
    undilated = structural.pad(summed, zero, [(-lo, -hi, 0) for lo, hi in padding])
    result = structural.slice(undilated, (0,) * nd, get_aval(undilated).shape,
                              tuple(base_dilation))
    return [result]


ad.deflinear2(reduce_window_sum_p, _reduce_window_sum_transpose)
reduce_window_sum_p.batch = _window_batch(reduce_window_sum_p)


# =============================================================================================
# reduce_window_max / reduce_window_min, and the private position-of-the-extremum primitive
# =============================================================================================

reduce_window_max_p = Primitive("reduce_window_max")
reduce_window_max_p.def_abstract_eval(_window_rule("reduce_window_max"))
reduce_window_min_p = Primitive("reduce_window_min")
reduce_window_min_p.def_abstract_eval(_window_rule("reduce_window_min"))


def _chooser_impl(kind):
    np_fn = np.max if kind == "max" else np.min

    def impl(operand, **params):
        work = _in_f32(operand)
        windows = _windows(work, _identity(kind, work.dtype), **params)
        if operand.ndim == 0:
            return operand
        return np_fn(windows, axis=_window_axes(operand.ndim)).astype(operand.dtype)
    return impl


reduce_window_max_p.def_impl(_chooser_impl("max"))
reduce_window_min_p.def_impl(_chooser_impl("min"))

# The flat (row-major) offset, within its window, of the element each window selects: the first
# maximum (minimum) in window order, as XLA's select-and-scatter with `ge` (`le`) chooses. A
# window axis of size 1 adds nothing to a row-major offset, so batching keeps the values.
window_select_p = Primitive("window_select")


@window_select_p.def_abstract_eval
def _window_select_rule(operand, *, select, **params):
    out = _window_rule(f"window_select ({select})")(operand, **params)
    return ShapedArray(out.shape, np.dtype(np.int32))


@window_select_p.def_impl
def _window_select_impl(operand, *, select, **params):
    work = _in_f32(operand)
    windows = _windows(work, _identity(select, work.dtype), **params)
    if operand.ndim == 0:
        return np.zeros((), np.int32)
    out_shape = windows.shape[:operand.ndim]
    flat = windows.reshape(out_shape + (int(np.prod(params["window_dimensions"])),))
    np_fn = np.argmax if select == "max" else np.argmin
    return np_fn(flat, axis=-1).astype(np.int32)


ad.defjvp_zero(window_select_p)
window_select_p.batch = _window_batch(window_select_p)


def _take_selected(t, offsets, *, window_dimensions, window_strides, padding, base_dilation,
                   window_dilation):
    """The tangent of the selected element of every window: ``t`` padded (with zeros, so a
    selected padding element has zero tangent) and gathered at the selected positions. A gather
    is linear in ``t`` and transposes to a scatter-add, so overlapping windows accumulate."""
    nd = get_aval(t).ndim
    dtype = get_aval(t).dtype
    padded = structural.pad(t, np.zeros((), dtype),
                            [(lo, hi, d - 1) for (lo, hi), d in zip(padding, base_dilation)])
    out_shape = get_aval(offsets).shape
    coords, rest = [None] * nd, offsets
    for axis in reversed(range(nd)):
        # the outermost window axis needs no remainder: the offset is already below its size
        within = rest
        if axis:
            within = ew.rem(rest, window_dimensions[axis])
            rest = ew.div(rest, window_dimensions[axis])
        start = structural.broadcasted_iota(np.int32, out_shape, axis)
        position = ew.add(_scaled(start, window_strides[axis]),
                          _scaled(within, window_dilation[axis]))
        coords[axis] = structural.broadcast_in_dim(position, out_shape + (1,), tuple(range(nd)))
    indices = structural.concatenate(coords, nd)
    dnums = indexing.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=tuple(range(nd)),
                                            start_index_map=tuple(range(nd)))
    return indexing.gather(padded, indices, dnums, (1,) * nd, mode="clip",
                           indices_are_sorted=False, unique_indices=False)


def _tiles_exactly(operand_shape, window_dimensions, window_strides, padding, base_dilation,
                   window_dilation) -> bool:
    """Whether the windows tile the operand without overlap or gaps between them (stride =
    window, no padding or dilation), as in the usual 2x2 max pool."""
    return (tuple(window_strides) == tuple(window_dimensions)
            and all(tuple(p) == (0, 0) for p in padding)
            and all(d == 1 for d in base_dilation) and all(d == 1 for d in window_dilation)
            and all(w <= n for w, n in zip(window_dimensions, operand_shape)))


def _take_selected_tiled(t, offsets, *, window_dimensions, **_):
    """:func:`_take_selected` for windows that tile the operand: ``t`` split into (windows,
    position in window) per axis, and summed over the window positions where the position is
    the selected one. Elementwise and a reduction, so its transpose (the pooling gradient) is
    one elementwise loop over the operand instead of a scatter-add."""
    out_shape = get_aval(offsets).shape
    nd = len(out_shape)
    covered = tuple(o * w for o, w in zip(out_shape, window_dimensions))
    if covered != get_aval(t).shape:  # the last, partial windows hold no selected element
        t = structural.slice(t, (0,) * nd, covered)
    split = tuple(d for o, w in zip(out_shape, window_dimensions) for d in (o, w))
    t = structural.reshape(t, split)
    position, stride = None, 1
    for axis in reversed(range(nd)):  # the row-major offset within the window
        if window_dimensions[axis] > 1:
            term = _scaled(structural.broadcasted_iota(np.int32, split, 2 * axis + 1), stride)
            position = term if position is None else ew.add(position, term)
        stride *= window_dimensions[axis]
    if position is None:
        position = structural.full(split, 0, np.int32)
    selected = structural.broadcast_in_dim(offsets, split, tuple(range(0, 2 * nd, 2)))
    zeros = structural.full(split, 0, get_aval(t).dtype)
    picked = ew.select(ew.eq(position, selected), t, zeros)
    return reductions.reduce_sum(picked, tuple(range(1, 2 * nd, 2)))


def _scaled(x, factor):
    return x if factor == 1 else ew.mul(x, factor)


def _chooser_jvp(primitive, kind):
    def rule(primals, tangents, **params):
        (x,), (t,) = primals, tangents
        ans = primitive.bind(x, **params)
        if isinstance(t, Zero):
            return ans, Zero.from_value(ans)
        if get_aval(x).ndim == 0:
            return ans, t
        out_aval = get_aval(ans)
        if 0 in out_aval.shape:  # no windows: nothing to gather (the padded operand may be empty)
            return ans, structural.full(out_aval.shape, 0, get_aval(t).dtype)
        offsets = window_select_p.bind(x, select=kind, **params)
        if _tiles_exactly(get_aval(x).shape, **params):
            return ans, _take_selected_tiled(t, offsets, **params)
        return ans, _take_selected(t, offsets, **params)
    return rule


reduce_window_max_p.jvp = _chooser_jvp(reduce_window_max_p, "max")
reduce_window_min_p.jvp = _chooser_jvp(reduce_window_min_p, "min")
reduce_window_max_p.batch = _window_batch(reduce_window_max_p)
reduce_window_min_p.batch = _window_batch(reduce_window_min_p)


# =============================================================================================
# The lax-level functions
# =============================================================================================


def _window_params(shape, window_dimensions, window_strides, padding, base_dilation,
                   window_dilation) -> dict:
    nd = len(shape)
    window_dimensions = tuple(int(w) for w in window_dimensions)
    window_strides = (1,) * nd if window_strides is None else tuple(int(s) for s in window_strides)
    base_dilation = (1,) * nd if base_dilation is None else tuple(int(d) for d in base_dilation)
    window_dilation = ((1,) * nd if window_dilation is None
                       else tuple(int(d) for d in window_dilation))
    if isinstance(padding, str):
        # "SAME" keeps ceil(size / stride) outputs for the dilated window on the undilated operand
        extents = tuple(_dilated_size(w, d) for w, d in zip(window_dimensions, window_dilation))
        padding = padtype_to_pads(shape, extents, window_strides, padding)
    else:
        padding = tuple((int(lo), int(hi)) for lo, hi in padding)
    return dict(window_dimensions=window_dimensions, window_strides=window_strides,
                padding=padding, base_dilation=base_dilation, window_dilation=window_dilation)


def _windowed_fn(primitive, doc):
    def fn(operand, window_dimensions, window_strides=None, padding="VALID", base_dilation=None,
           window_dilation=None):
        params = _window_params(get_aval(operand).shape, window_dimensions, window_strides,
                                padding, base_dilation, window_dilation)
        return primitive.bind(operand, **params)
    fn.__name__ = fn.__qualname__ = primitive.name
    fn.__doc__ = doc
    return fn


reduce_window_sum = _windowed_fn(reduce_window_sum_p, """Sum of every window of ``operand``.

    ``window_strides`` defaults to 1, ``padding`` is ``"VALID"``, ``"SAME"`` or one
    ``(low, high)`` pair per axis; ``base_dilation`` and ``window_dilation`` default to 1.

    Example::

        reduce_window_sum(jnp.arange(4.), (2,), (1,), "VALID")   # [1., 3., 5.]
    """)
reduce_window_max = _windowed_fn(reduce_window_max_p, """Maximum of every window of ``operand``
    (padding counts as -inf). Parameters as for :func:`reduce_window_sum`.

    Example::

        reduce_window_max(jnp.array([1., 3., 2., 0.]), (2,), (2,), "VALID")   # [3., 2.]
    """)
reduce_window_min = _windowed_fn(reduce_window_min_p, """Minimum of every window of ``operand``
    (padding counts as +inf). Parameters as for :func:`reduce_window_sum`.

    Example::

        reduce_window_min(jnp.array([1., 3., 2., 0.]), (2,), (2,), "VALID")   # [1., 0.]
    """)


def _monoid(computation, dtype):
    """Which of add/mul/max/min/and/or the binary ``computation`` is, or None.

    The lax functions are recognised directly; any other callable is traced on two scalars
    and recognised when its program is that single primitive applied to both arguments."""
    known = {ew.add: "add", ew.mul: "mul", ew.max: "max", ew.min: "min",
             ew.bitwise_and: "and", ew.bitwise_or: "or"}
    if computation in known:
        return known[computation]
    aval = ShapedArray((), np.dtype(dtype))
    try:
        jaxpr, _ = staging.trace_to_jaxpr_dynamic(lambda a, b: [computation(a, b)], [aval, aval])
    except Exception:  # noqa: BLE001 - an untraceable computation is simply not a known monoid
        return None
    if len(jaxpr.eqns) != 1:
        return None
    eqn = jaxpr.eqns[0]
    name = eqn.primitive.name
    if (name in ("add", "mul", "max", "min", "and", "or")
            and sorted(map(id, eqn.invars)) == sorted(map(id, jaxpr.invars))
            and list(map(id, eqn.outvars)) == list(map(id, jaxpr.outvars))):
        return name
    return None


def _monoid_identity(kind, dtype):
    dtype = np.dtype(dtype)
    if kind == "add" or kind == "or":
        return np.zeros((), dtype)
    if kind == "mul":
        return np.ones((), dtype)
    if kind == "and":
        return np.array(True) if _dtypes.is_bool(dtype) else np.array(-1, dtype)
    return reductions._lowest(dtype) if kind == "max" else reductions._highest(dtype)


def _known_value(x):
    """The value of ``x`` if it is known now (not a staged or batched tracer), else None."""
    if isinstance(x, Tracer):
        value = x.to_concrete_value()
        return None if value is None else np.asarray(value)
    return np.asarray(x)


def _is_identity(init, kind, dtype):
    value = _known_value(init)
    if value is None or value.shape != ():
        return False
    identity = _monoid_identity(kind, dtype)
    # -inf given for an integer max (as flax's max_pool does) casts to the smallest integer
    with np.errstate(invalid="ignore"):
        return bool(value.astype(dtype) == identity)


def _as_operand_dtype(init, dtype):
    if isinstance(init, Tracer) or not isinstance(init, (np.ndarray, np.generic, int, float,
                                                          bool, complex)):
        aval = get_aval(init)
        if aval.shape != ():
            raise TypeError(f"the init value must be a scalar, got {aval.str_short()}")
        return init if aval.dtype == dtype else ew.convert_element_type(init, dtype)
    return np.asarray(init, dtype=dtype)


def reduce_window(operand, init_value, computation, window_dimensions, window_strides, padding,
                  base_dilation=None, window_dilation=None):
    """Reduce every window of ``operand`` with ``computation`` (``lax.add``, ``lax.max`` or
    ``lax.min``, or a function that is one of them), starting from ``init_value``; padding and
    base-dilation holes hold ``init_value``. ``padding`` is ``"SAME"``, ``"VALID"`` or one
    ``(low, high)`` pair per axis.

    Example (a 2x2 max pool with stride 2 over NHWC images, as flax writes it)::

        reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    """
    leaves, tree = tree_util.tree_flatten(operand)
    init_leaves = tree_util.tree_leaves(init_value)
    if len(leaves) != 1 or len(init_leaves) != 1:
        raise NotImplementedError("reduce_window: only one operand (not a tuple of operands) "
                                  "is supported")
    x, init = leaves[0], init_leaves[0]
    aval = get_aval(x)
    kind = _monoid(computation, aval.dtype)
    primitives = {"add": reduce_window_sum_p, "max": reduce_window_max_p,
                  "min": reduce_window_min_p}
    if kind not in primitives:
        raise NotImplementedError(
            f"reduce_window: the computation {computation!r} is not lax.add, lax.max or lax.min")
    params = _window_params(aval.shape, window_dimensions, window_strides, padding,
                            base_dilation, window_dilation)
    out = primitives[kind].bind(x, **params)
    if not _is_identity(init, kind, aval.dtype):
        init = _as_operand_dtype(init, aval.dtype)
        if kind == "add":
            # every window folds init in once, plus once per padding or hole position it covers
            real = _reduce_window_sum_impl(np.ones(aval.shape, np.int32), **params)
            covered = 1 + int(np.prod(params["window_dimensions"])) - real
            out = ew.add(out, ew.mul(_broadcast_scalar(init, get_aval(out).shape),
                                     covered.astype(aval.dtype)))
        else:
            combine = ew.max if kind == "max" else ew.min
            out = combine(out, _broadcast_scalar(init, get_aval(out).shape))
    return tree_util.tree_unflatten(tree, [out])


def _broadcast_scalar(value, shape):
    if isinstance(value, np.ndarray):
        return np.broadcast_to(value, shape).copy()
    return structural.broadcast_in_dim(value, shape, ())


def reduce(operands, init_values, computation, dimensions):
    """Reduce ``operands`` over ``dimensions`` with ``computation`` (``lax.add``, ``lax.mul``,
    ``lax.max``, ``lax.min``, ``lax.bitwise_and``, ``lax.bitwise_or`` or a function that is one
    of them), starting from ``init_values``.

    Example::

        reduce(jnp.array([[1., 2.], [3., 4.]]), 0., lax.add, (0,))   # [4., 6.]
    """
    leaves, tree = tree_util.tree_flatten(operands)
    init_leaves = tree_util.tree_leaves(init_values)
    if len(leaves) != 1 or len(init_leaves) != 1:
        raise NotImplementedError("reduce: only one operand (not a tuple of operands, as for a "
                                  "variadic argmax) is supported")
    x, init = leaves[0], init_leaves[0]
    dtype = get_aval(x).dtype
    kind = _monoid(computation, dtype)
    reducers = {"add": reductions.reduce_sum, "mul": reductions.reduce_prod,
                "max": reductions.reduce_max, "min": reductions.reduce_min,
                "and": reductions.reduce_and, "or": reductions.reduce_or}
    if kind not in reducers:
        raise NotImplementedError(
            f"reduce: the computation {computation!r} is not one of lax.add, lax.mul, lax.max, "
            "lax.min, lax.bitwise_and, lax.bitwise_or")
    out = reducers[kind](x, tuple(dimensions))
    if not _is_identity(init, kind, dtype):
        combine = {"add": ew.add, "mul": ew.mul, "max": ew.max, "min": ew.min,
                   "and": ew.bitwise_and, "or": ew.bitwise_or}[kind]
        init = _as_operand_dtype(init, dtype)
        out = combine(_broadcast_scalar(init, get_aval(out).shape), out)
    return tree_util.tree_unflatten(tree, [out])


# =============================================================================================
# associative_scan
# =============================================================================================


def _interleave(evens, odds, axis):
    """``[e0, o0, e1, o1, ...]`` along ``axis``; ``evens`` may be one longer than ``odds``."""
    n_even, n_odd = get_aval(evens).shape[axis], get_aval(odds).shape[axis]
    tail = None
    if n_even == n_odd + 1:
        tail = structural.slice_in_dim(evens, n_odd, n_even, axis=axis)
        evens = structural.slice_in_dim(evens, 0, n_odd, axis=axis)
    shape = get_aval(evens).shape
    # stacking on a new axis after `axis` and merging the two puts each odd after its even
    stacked = structural.concatenate([structural.expand_dims(evens, (axis + 1,)),
                                      structural.expand_dims(odds, (axis + 1,))], axis + 1)
    merged = structural.reshape(stacked, shape[:axis] + (2 * shape[axis],) + shape[axis + 1:])
    return merged if tail is None else structural.concatenate([merged, tail], axis)


def associative_scan(fn, elems, reverse: bool = False, axis: int = 0):
    """Inclusive prefix scan of ``elems`` (an array or pytree of arrays of one length along
    ``axis``) with the associative binary ``fn``, by the parallel (odd/even) prefix algorithm:
    O(log n) rounds of vectorised ``fn`` calls. ``fn`` must work elementwise on whole slices.

    Example::

        associative_scan(lax.add, jnp.array([1., 2., 3., 4.]))   # [1., 3., 6., 10.]
    """
    leaves, tree = tree_util.tree_flatten(elems)
    if not leaves:
        return elems
    ndim = get_aval(leaves[0]).ndim
    axis = int(axis) % builtins.max(ndim, 1)
    lengths = {get_aval(leaf).shape[axis] for leaf in leaves}
    if len(lengths) != 1:
        raise ValueError(f"associative_scan: the leaves of elems have different lengths "
                         f"{sorted(lengths)} along axis {axis}")

    def combine(a, b):
        out = fn(tree_util.tree_unflatten(tree, a), tree_util.tree_unflatten(tree, b))
        out_leaves, out_tree = tree_util.tree_flatten(out)
        if out_tree != tree:
            raise TypeError(f"associative_scan: fn returned the structure {out_tree}, not the "
                            f"structure of elems {tree}")
        return out_leaves

    def take(xs, start, stop, stride=1):
        return [structural.slice_in_dim(x, start, stop, stride, axis) for x in xs]

    def scan(xs):
        n = get_aval(xs[0]).shape[axis]
        if n < 2:
            return xs
        # combine neighbouring pairs, scan the half-length sequence of pair sums (those are the
        # odd positions' prefixes), then each even position adds its element to the prefix
        # before it
        pairs = combine(take(xs, 0, n - 1, 2), take(xs, 1, n, 2))
        odd_prefixes = scan(pairs)
        if n % 2 == 0:
            evens = combine(take(odd_prefixes, 0, get_aval(odd_prefixes[0]).shape[axis] - 1),
                            take(xs, 2, n, 2))
        else:
            evens = combine(odd_prefixes, take(xs, 2, n, 2))
        evens = [structural.concatenate([first, e], axis)
                 for first, e in zip(take(xs, 0, 1), evens)]
        return [_interleave(e, o, axis) for e, o in zip(evens, odd_prefixes)]

    if reverse:
        leaves = [structural.rev(x, (axis,)) for x in leaves]
    out = scan(leaves)
    if reverse:
        out = [structural.rev(x, (axis,)) for x in out]
    return tree_util.tree_unflatten(tree, out)


# =============================================================================================
# optimization_barrier
# =============================================================================================

optimization_barrier_p = Primitive("optimization_barrier", multiple_results=True)
optimization_barrier_p.def_impl(lambda *operands: list(operands))
optimization_barrier_p.def_abstract_eval(lambda *avals: list(avals))


def _optimization_barrier_jvp(primals, tangents):
    # the primals and the tangents pass separate barriers, so linearize can split them
    out = optimization_barrier_p.bind(*primals)
    nonzero = [t for t in tangents if not isinstance(t, Zero)]
    through = iter(optimization_barrier_p.bind(*nonzero) if nonzero else [])
    return out, [t if isinstance(t, Zero) else next(through) for t in tangents]


def _optimization_barrier_transpose(cts, *operands):
    return [ct if is_undefined_primal(x) else None for ct, x in zip(cts, operands)]


optimization_barrier_p.jvp = _optimization_barrier_jvp
optimization_barrier_p.transpose = _optimization_barrier_transpose
optimization_barrier_p.batch = lambda vals, dims: (optimization_barrier_p.bind(*vals), list(dims))


def optimization_barrier(operand):
    """Return ``operand`` (any pytree of arrays) unchanged, as one unit the compiler must not
    move computations across (e.g. to keep a rematerialisation where it was placed).

    Example::

        x, y = optimization_barrier((x, y))
    """
    leaves, tree = tree_util.tree_flatten(operand)
    return tree_util.tree_unflatten(tree, optimization_barrier_p.bind(*leaves))


__all__ = ["associative_scan", "optimization_barrier", "reduce",
           "reduce_window", "reduce_window_max", "reduce_window_min", "reduce_window_sum"]
