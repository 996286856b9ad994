"""Rewrite primitives that compilers run better as compositions of other primitives.

A convolution becomes im2col and a matrix product: the windows of the padded (and, for a
transposed convolution, dilated) input are gathered into a patch matrix, one row per output
position (a gather per spatial axis: each element is one load, where a concatenation of
per-tap slices would select among all of them), and one ``dot_general``, batched over
feature groups, multiplies it by the reshaped kernel. The pad, gathers, reshapes and
transposes fuse into a few loops, and the product goes to BLAS (CPU) or cuBLAS (GPU), where
the backends would otherwise run the primitive's NumPy implementation.

The rewrite happens at compile time only (the IR users see keeps ``conv_general_dilated``,
and transforms use its own rules): each equation is replaced by a ``jit`` equation of the
decomposition, which the compilers inline. Bodies of control flow are rewritten too.

    >>> closed = decompose_closed(closed)   # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from functrans.core import ClosedJaxpr, Jaxpr
from functrans.primitives import linalg, random_bits, reductions, windowed

_WINDOW_REDUCTIONS = {windowed.reduce_window_sum_p: "sum", windowed.reduce_window_max_p: "max",
                      windowed.reduce_window_min_p: "min"}
_ARG_EXTREMES = {reductions.argmax_p: "max", reductions.argmin_p: "min"}
# primitives rewritten here (when their instance qualifies: see _decompose_eqn)
DECOMPOSABLE = frozenset({linalg.conv_general_dilated_p, *_WINDOW_REDUCTIONS,
                          windowed.window_select_p, random_bits.threefry2x32_p, *_ARG_EXTREMES})


def decompose_closed(closed: ClosedJaxpr) -> ClosedJaxpr:
    """``closed`` with every decomposable equation (here and in nested programs) rewritten;
    the same object when there is nothing to rewrite."""
    jaxpr = _decompose_jaxpr(closed.jaxpr)
    return closed if jaxpr is closed.jaxpr else ClosedJaxpr(jaxpr, closed.consts)


def _decompose_jaxpr(jaxpr: Jaxpr) -> Jaxpr:
    eqns, changed = [], False
    for eqn in jaxpr.eqns:
        new = _decompose_eqn(eqn)
        changed |= new is not eqn
        eqns.append(new)
    if not changed:
        return jaxpr
    return Jaxpr(jaxpr.constvars, jaxpr.invars, jaxpr.outvars, eqns)


def _decompose_param(value):
    if isinstance(value, ClosedJaxpr):
        return decompose_closed(value)
    if isinstance(value, Jaxpr):
        return _decompose_jaxpr(value)
    if isinstance(value, tuple) and any(isinstance(v, (ClosedJaxpr, Jaxpr)) for v in value):
        new = tuple(_decompose_param(v) for v in value)
        return value if all(a is b for a, b in zip(new, value)) else new
    return value


def _decompose_eqn(eqn):
    primitive = eqn.primitive
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
    params = {k: _decompose_param(v) for k, v in eqn.params.items()}
    if all(params[k] is eqn.params[k] for k in params):
        return eqn
    return eqn.replace(params=params)


def _as_jit_eqn(eqn, decomposition):
    """A ``jit`` equation computing ``eqn`` by ``decomposition(*operands, **params)``."""
    from functrans._jit import jit_p
    from functrans.interpreters.staging import trace_to_jaxpr_dynamic
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
    from functrans import lax
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


# ---- windowed reductions (pooling) -------------------------------------------------------------


def _window_decomposable(eqn) -> bool:
    operand = eqn.invars[0].aval
    return (operand.dtype in (np.float32, np.float64) and operand.size > 0
            and eqn.outvars[0].aval.size > 0)


def _gathered_windows(operand, fill, window_dimensions, window_strides, padding,
                      base_dilation, window_dilation):
    """The padded operand gathered into (..., out_k, window_k, ...) for each axis with a
    window (other axes stay as they are), and the positions of the window axes."""
    import functrans.numpy as jnp
    from functrans import lax
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
        from functrans import lax
        from functrans.primitives.windowed import _identity
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
    from functrans import lax
    from functrans.primitives.windowed import _identity
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
    from functrans import lax
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
        from functrans import lax
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
    from functrans import lax
    from functrans.primitives.random_bits import KEY_SCHEDULE_PARITY, ROTATIONS

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
