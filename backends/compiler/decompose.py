"""Rewrite primitives that compilers run better as compositions of other primitives.

A convolution becomes im2col and a matrix product: the windows of the padded (and, for a
transposed convolution, dilated) input are gathered into a patch matrix, one row per output
position (a gather per spatial axis: each element is one load, where a concatenation of
per-tap slices would select among all of them), and one ``dot_general``, batched over
feature groups, multiplies it by the reshaped kernel. The pad, gathers, reshapes and
transposes fuse into a few loops, and the product goes to BLAS (CPU) or cuBLAS (GPU), where
the backends would otherwise run the primitive's NumPy implementation.

A backend with its own direct convolution kernels (``direct_convolutions=True``: the llvm
backend) gets float32/float64 convolutions in the form of :func:`is_direct_convolution`
instead: the input padded and dilated in its own layout, and, only where they are not so
already, the kernel and output moved to features-last layouts with each group's output
features padded to whole 32-byte vectors (cropped afterwards); these fuse into loops
around the kernel.

The rewrite happens at compile time only (the IR users see keeps ``conv_general_dilated``,
and transforms use its own rules): each equation is replaced by a ``jit`` equation of the
decomposition, which the compilers inline. Bodies of control flow are rewritten too.

    >>> closed = decompose_closed(closed)   # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from functrans.core import ClosedJaxpr, Jaxpr, ShapedArray, get_aval
from functrans import lax
from functrans._jit import jit_p
from functrans.interpreters.staging import trace_to_jaxpr_dynamic
from functrans.primitives.random_bits import KEY_SCHEDULE_PARITY, ROTATIONS
from functrans.primitives.windowed import _identity
import functrans.numpy as jnp
from functrans.primitives import linalg, random_bits, reductions, windowed

_WINDOW_REDUCTIONS = {windowed.reduce_window_sum_p: "sum", windowed.reduce_window_max_p: "max",
                      windowed.reduce_window_min_p: "min"}
_ARG_EXTREMES = {reductions.argmax_p: "max", reductions.argmin_p: "min"}
# primitives rewritten here (when their instance qualifies: see _decompose_eqn)
DECOMPOSABLE = frozenset({linalg.conv_general_dilated_p, *_WINDOW_REDUCTIONS,
                          windowed.window_select_p, random_bits.threefry2x32_p, *_ARG_EXTREMES})


def decompose_closed(closed: ClosedJaxpr, direct_convolutions: bool = False) -> ClosedJaxpr:
    """``closed`` with every decomposable equation (here and in nested programs) rewritten;
    the same object when there is nothing to rewrite. ``direct_convolutions``: convolutions
    become the form of :func:`is_direct_convolution` rather than im2col and a product."""
    jaxpr = _decompose_jaxpr(closed.jaxpr, direct_convolutions)
    return closed if jaxpr is closed.jaxpr else ClosedJaxpr(jaxpr, closed.consts)


def _decompose_jaxpr(jaxpr: Jaxpr, direct: bool = False) -> Jaxpr:
    eqns, changed = [], False
    for eqn in jaxpr.eqns:
        new = _decompose_eqn(eqn, direct)
        changed |= new is not eqn
        eqns.append(new)
    if not changed:
        return jaxpr
    return Jaxpr(jaxpr.constvars, jaxpr.invars, jaxpr.outvars, eqns)


def _decompose_param(value, direct: bool):
    if isinstance(value, ClosedJaxpr):
        return decompose_closed(value, direct)
    if isinstance(value, Jaxpr):
        return _decompose_jaxpr(value, direct)
    if isinstance(value, tuple) and any(isinstance(v, (ClosedJaxpr, Jaxpr)) for v in value):
        new = tuple(_decompose_param(v, direct) for v in value)
        return value if all(a is b for a, b in zip(new, value)) else new
    return value


def _decompose_eqn(eqn, direct: bool = False):
    primitive = eqn.primitive
    if primitive is linalg.conv_general_dilated_p and direct and _conv_direct_possible(eqn):
        return eqn if is_direct_convolution(eqn) else _as_jit_eqn(eqn, _conv_as_direct)
    if primitive is linalg.conv_general_dilated_p and _conv_decomposable(eqn):
        return _as_jit_eqn(eqn, _conv_as_matmul)
    if primitive in _WINDOW_REDUCTIONS and _window_decomposable(eqn):
        return _as_jit_eqn(eqn, _window_reduction(_WINDOW_REDUCTIONS[primitive]))
    if primitive is windowed.window_select_p and _window_decomposable(eqn):
        return _as_jit_eqn(eqn, _window_select)
    if primitive is random_bits.threefry2x32_p and eqn.outvars[0].aval.size > 0:
        return _as_jit_eqn(eqn, _threefry2x32)
    if primitive in _ARG_EXTREMES and _arg_decomposable(eqn):
        return _as_jit_eqn(eqn, _arg_extreme(_ARG_EXTREMES[primitive]))
    params = {k: _decompose_param(v, direct) for k, v in eqn.params.items()}
    if all(params[k] is eqn.params[k] for k in params):
        return eqn
    return eqn.replace(params=params)


def _as_jit_eqn(eqn, decomposition):
    """A ``jit`` equation computing ``eqn`` by ``decomposition(*operands, **params)``."""
    avals = [v.aval for v in eqn.invars]

    def body(*args):
        out = decomposition(*args, **eqn.params)
        return list(out) if eqn.primitive.multiple_results else [out]

    jaxpr, consts = trace_to_jaxpr_dynamic(body, avals)
    closed = ClosedJaxpr(jaxpr, consts)
    return eqn.replace(primitive=jit_p, params=dict(
        jaxpr=closed, name=f"{eqn.primitive.name}_decomposed", backend=None,
        donated_invars=()))


# ---- convolution --------------------------------------------------------------------------------


def _conv_decomposable(eqn) -> bool:
    lhs, rhs = (v.aval for v in eqn.invars)
    return (eqn.params["batch_group_count"] == 1 and lhs.dtype.kind == "f"
            and rhs.dtype == lhs.dtype and lhs.size > 0 and rhs.size > 0
            and eqn.outvars[0].aval.size > 0)


def _conv_as_matmul(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
                    dimension_numbers, feature_group_count, batch_group_count, precision=None,
                    preferred_element_type=None):
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    nsp = len(window_strides)
    groups = feature_group_count
    # channels last: lhs (N, *spatial, C), rhs (*kernel, I, O)
    x = lax.transpose(lhs, (lhs_spec[0],) + tuple(lhs_spec[2:]) + (lhs_spec[1],))
    w = lax.transpose(rhs, tuple(rhs_spec[2:]) + (rhs_spec[1], rhs_spec[0]))
    n, channels = x.shape[0], x.shape[-1]
    kernel, out_features = w.shape[:nsp], w.shape[-1]
    # the windows, gathered one spatial axis at a time: x[n, o*stride + t*dilation, ...]
    # for every output position o and kernel tap t (a gather per axis fuses into one load
    # per element; a concatenation of per-tap slices would select among all of them)
    ones = (1,)
    patches, tap_axes = _gathered_windows(
        x, 0, window_dimensions=ones + tuple(kernel) + ones,
        window_strides=ones + tuple(window_strides) + ones,
        padding=((0, 0),) + tuple(padding) + ((0, 0),),
        base_dilation=ones + tuple(lhs_dilation) + ones,
        window_dilation=ones + tuple(rhs_dilation) + ones)
    # (N, out_1, [k_1,] out_2, [k_2,] ..., C) -> (N, out..., k..., C) -> (rows, taps * C);
    # an axis with a 1-wide, stride-1 window has no tap axis, as a tap count of 1 needs none
    out_axes = tuple(a for a in range(1, patches.ndim - 1) if a not in tap_axes)
    out_sizes = [patches.shape[a] for a in out_axes]
    patches = lax.transpose(patches, (0,) + out_axes + tap_axes + (patches.ndim - 1,))
    rows = n
    for o in out_sizes:
        rows *= o
    taps = 1
    for size in kernel:
        taps *= size
    per_group = channels // groups
    # (rows, taps, G, C/G) -> (G, rows, taps * C/G) against (G, taps * C/G, O/G)
    a = lax.reshape(patches, (rows, taps, groups, per_group))
    a = lax.reshape(lax.transpose(a, (2, 0, 1, 3)), (groups, rows, taps * per_group))
    b = lax.reshape(w, (taps * per_group, groups, out_features // groups))
    b = lax.transpose(b, (1, 0, 2))
    product = lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,))),
                              preferred_element_type=preferred_element_type)
    # (G, rows, O/G) -> (N, *out, O) -> the output layout
    out = lax.reshape(lax.transpose(product, (1, 0, 2)), (n, *out_sizes, out_features))
    order = [0, nsp + 1] + list(range(1, nsp + 1))  # (N, O, *spatial) in spec order
    current = [None] * (nsp + 2)
    for axis, source in zip(out_spec, order):
        current[axis] = source
    return lax.transpose(out, tuple(current))


# ---- convolution in the direct form -----------------------------------------------------------

VECTOR_BYTES = 32  # each group's output features are padded to whole vectors of this size


def _feature_multiple(dtype) -> int:
    return VECTOR_BYTES // np.dtype(dtype).itemsize


def _conv_direct_possible(eqn) -> bool:
    lhs, rhs = (v.aval for v in eqn.invars)
    preferred = eqn.params["preferred_element_type"]
    return (lhs.dtype in (np.float32, np.float64) and rhs.dtype == lhs.dtype
            and (preferred is None or np.dtype(preferred) == lhs.dtype)
            and lhs.ndim >= 3 and lhs.size > 0 and rhs.size > 0
            and eqn.outvars[0].aval.size > 0)


def is_direct_convolution(eqn) -> bool:
    """Whether a ``conv_general_dilated`` equation is in the form direct kernels take:
    float32/float64, no padding, no input dilation, the output-feature axes of the kernel
    and of the output innermost, and the output features per group a multiple of a 32-byte
    vector. The input's layout, strides, kernel dilation and feature or batch groups are
    the kernel's."""
    if eqn.primitive.name != "conv_general_dilated" or not _conv_direct_possible(eqn):
        return False
    p = eqn.params
    return (all(tuple(pad) == (0, 0) for pad in p["padding"])
            and all(d == 1 for d in p["lhs_dilation"])
            and _features_innermost(eqn.invars[1].aval, eqn.outvars[0].aval, p))


def _features_innermost(rhs, out, params) -> bool:
    _, rhs_spec, out_spec = params["dimension_numbers"]
    groups = max(params["feature_group_count"], params["batch_group_count"])
    return (rhs_spec[0] == rhs.ndim - 1 and out_spec[1] == out.ndim - 1
            and (rhs.shape[-1] // groups) % _feature_multiple(rhs.dtype) == 0)


def _conv_as_direct(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
                    dimension_numbers, feature_group_count, batch_group_count, precision=None,
                    preferred_element_type=None):
    """The padding and input dilation applied to the input (in its own layout); the kernel
    and output moved to features-last layouts with whole vectors of features per group
    where they are not already."""
    lhs_spec, rhs_spec, out_spec = (tuple(s) for s in dimension_numbers)
    nsp = len(window_strides)
    config = [(0, 0, 0)] * (nsp + 2)
    for k, ((lo, hi), d) in enumerate(zip(padding, lhs_dilation)):
        config[lhs_spec[2 + k]] = (lo, hi, d - 1)
    x = lhs if all(c == (0, 0, 0) for c in config) else \
        lax.pad(lhs, lax.convert_element_type(0, lhs.dtype), config)
    params = dict(window_strides=tuple(window_strides), padding=((0, 0),) * nsp,
                  lhs_dilation=(1,) * nsp, rhs_dilation=tuple(rhs_dilation),
                  feature_group_count=feature_group_count,
                  batch_group_count=batch_group_count, precision=precision,
                  preferred_element_type=None)
    out_aval = _conv_out_aval(lhs, rhs, dimension_numbers, window_strides, padding,
                              lhs_dilation, rhs_dilation, batch_group_count)
    if _features_innermost(get_aval(rhs), out_aval, {**params, "dimension_numbers": dimension_numbers}):
        return linalg.conv_general_dilated_p.bind(x, rhs, dimension_numbers=dimension_numbers,
                                                  **params)
    groups = max(feature_group_count, batch_group_count)
    w = lax.transpose(rhs, tuple(rhs_spec[2:]) + (rhs_spec[1], rhs_spec[0]))
    out_features = w.shape[-1]
    per_group = out_features // groups
    multiple = _feature_multiple(w.dtype)
    padded = -(-per_group // multiple) * multiple
    if padded != per_group:  # zero kernels for the padding features, cropped below
        w = lax.reshape(w, w.shape[:-1] + (groups, per_group))
        w = lax.pad(w, lax.convert_element_type(0, w.dtype),
                    [(0, 0, 0)] * (w.ndim - 1) + [(0, padded - per_group, 0)])
        w = lax.reshape(w, w.shape[:-2] + (groups * padded,))
    spec = (0, nsp + 1) + tuple(range(1, nsp + 1))
    out = linalg.conv_general_dilated_p.bind(
        x, w, dimension_numbers=linalg.ConvDimensionNumbers(
            lhs_spec, (nsp + 1, nsp) + tuple(range(nsp)), spec), **params)
    if padded != per_group:
        out = lax.reshape(out, out.shape[:-1] + (groups, padded))
        out = lax.slice_in_dim(out, 0, per_group, axis=out.ndim - 1)
        out = lax.reshape(out, out.shape[:-2] + (out_features,))
    # (N, *spatial, O) -> the output layout
    order = [0, nsp + 1] + list(range(1, nsp + 1))
    current = [None] * (nsp + 2)
    for axis, source in zip(out_spec, order):
        current[axis] = source
    return lax.transpose(out, tuple(current))


def _conv_out_aval(lhs, rhs, dimension_numbers, window_strides, padding, lhs_dilation,
                   rhs_dilation, batch_group_count):
    """The abstract output of the convolution (its shape tells the output's layout)."""
    lhs_aval, rhs_aval = get_aval(lhs), get_aval(rhs)
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    spatial = []
    for k in range(len(window_strides)):
        size = (lhs_aval.shape[lhs_spec[2 + k]] - 1) * lhs_dilation[k] + 1 + sum(padding[k])
        window = (rhs_aval.shape[rhs_spec[2 + k]] - 1) * rhs_dilation[k] + 1
        spatial.append((size - window) // window_strides[k] + 1)
    canonical = (lhs_aval.shape[lhs_spec[0]] // batch_group_count,
                 rhs_aval.shape[rhs_spec[0]]) + tuple(spatial)
    shape = [0] * len(canonical)
    for position, axis in enumerate(out_spec):
        shape[axis] = canonical[position]
    return ShapedArray(tuple(shape), lhs_aval.dtype)


# ---- windowed reductions (pooling) -------------------------------------------------------------


def _window_decomposable(eqn) -> bool:
    operand = eqn.invars[0].aval
    return (operand.dtype in (np.float32, np.float64) and operand.size > 0
            and eqn.outvars[0].aval.size > 0)


def _gathered_windows(operand, fill, window_dimensions, window_strides, padding,
                      base_dilation, window_dilation):
    """The padded operand gathered into (..., out_k, window_k, ...) for each axis with a
    window (other axes stay as they are), and the positions of the window axes."""
    x = lax.pad(operand, lax.convert_element_type(fill, operand.dtype),
                [(lo, hi, d - 1) for (lo, hi), d in zip(padding, base_dilation)])
    window_axes = []
    for k, (w, s, d) in enumerate(zip(window_dimensions, window_strides, window_dilation)):
        if w == 1 and s == 1:
            continue  # every element is its own window along this axis
        axis = k + len(window_axes)
        out = max(0, (x.shape[axis] - ((w - 1) * d + 1)) // s + 1)
        # positions out*s + w*d from iotas (not a constant array): the compiler sees the
        # affine addresses and the gather becomes a strided copy
        index = lax.add(lax.mul(lax.broadcasted_iota(np.int32, (out, w), 0), np.int32(s)),
                        lax.mul(lax.broadcasted_iota(np.int32, (out, w), 1), np.int32(d)))
        x = jnp.take(x, index, axis=axis, mode="clip")
        window_axes.append(axis + 1)
    return x, tuple(window_axes)


def _window_reduction(kind: str):
    """``reduce_window_<kind>`` as a reduction over gathered windows, so the gather fuses into
    the reduction's loop."""
    def decomposition(operand, **params):
        x, axes = _gathered_windows(operand, _identity(kind, operand.dtype), **params)
        if not axes:
            return x
        reduce = {"sum": lax.reduce_sum, "max": lax.reduce_max, "min": lax.reduce_min}[kind]
        return reduce(x, axes)
    return decomposition


def _window_select(operand, *, select, **params):
    """``window_select`` (the row-major offset of the first maximum or minimum in each
    window, the first NaN if there is one, as ``argmax`` finds it) without an argmax: the
    smallest offset among the positions equal to the window's extreme."""
    x, axes = _gathered_windows(operand, _identity(select, operand.dtype), **params)
    out_shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    if not axes:
        return lax.full(out_shape, 0, np.int32)
    # row-major offset within the window: axes of size-1 windows contribute nothing
    offset = lax.full(x.shape, 0, np.int32)
    for axis, stride in zip(axes, _row_major_strides(params["window_dimensions"],
                                                     params["window_strides"])):
        offset = lax.add(offset, lax.mul(lax.broadcasted_iota(np.int32, x.shape, axis),
                                         lax.full(x.shape, stride, np.int32)))
    return _first_extreme(x, axes, select, offset)


def _first_extreme(x, axes, select, position):
    """The smallest ``position`` over ``axes`` among the elements equal to the extreme
    (``select``: "max" or "min") over ``axes``, where a NaN counts as the extreme, as
    NumPy's argmax/argmin treat it. Native reductions only, so it compiles."""
    reduce = lax.reduce_max if select == "max" else lax.reduce_min
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    extreme = lax.broadcast_in_dim(reduce(x, axes), x.shape, kept)
    hit = lax.eq(x, extreme)
    if x.dtype.kind == "f":
        hit = lax.bitwise_or(hit, lax.bitwise_and(lax.ne(x, x), lax.ne(extreme, extreme)))
    dtype = position.dtype
    big = lax.full(x.shape, np.iinfo(dtype).max, dtype)
    return lax.reduce_min(lax.select(hit, position, big), axes)


def _arg_decomposable(eqn) -> bool:
    operand = eqn.invars[0].aval
    return operand.dtype.kind in "fiu" and operand.dtype.itemsize >= 4 and operand.size > 0


def _arg_extreme(select: str):
    """``argmax``/``argmin`` as the first position of the extreme (see _first_extreme)."""
    def decomposition(operand, *, axes, index_dtype):
        position = lax.broadcasted_iota(index_dtype, operand.shape, axes[0])
        return _first_extreme(operand, tuple(axes), select, position)
    return decomposition


def _row_major_strides(window_dimensions, window_strides):
    """The row-major stride of each window axis that is gathered (see _gathered_windows)."""
    strides, running = [], 1
    for w in reversed(window_dimensions):
        strides.append(running)
        running *= w
    strides.reverse()
    return [st for st, w, s in zip(strides, window_dimensions, window_strides)
            if not (w == 1 and s == 1)]


# ---- random bits ------------------------------------------------------------------------------


def _threefry2x32(key1, key2, x1, x2):
    """Threefry-2x32 in uint32 adds, xors and shifts: elementwise, so it fuses into the
    loops that use the bits (see ``threefry2x32_reference`` for the schedule)."""

    def word(value):
        return lax.full(x1.shape, value, np.uint32)

    def rotate_left(x, distance):
        return lax.bitwise_or(lax.shift_left(x, word(distance)),
                              lax.shift_right_logical(x, word(32 - distance)))

    schedule = (key1, key2, lax.bitwise_xor(lax.bitwise_xor(key1, key2),
                                            word(KEY_SCHEDULE_PARITY)))
    x1, x2 = lax.add(x1, schedule[0]), lax.add(x2, schedule[1])
    for group in range(5):
        for distance in ROTATIONS[group % 2]:
            x1 = lax.add(x1, x2)
            x2 = lax.bitwise_xor(rotate_left(x2, distance), x1)
        x1 = lax.add(x1, schedule[(group + 1) % 3])
        x2 = lax.add(lax.add(x2, schedule[(group + 2) % 3]), word(group + 1))
    return [x1, x2]
