"""The convolution primitive ``conv_general_dilated`` and what builds on it: ``conv``,
``conv_transpose``, the patch and locally connected convolutions, dimension numbers and
the output-shape helpers.

``conv_general_dilated``'s shape rule, reference implementation, JVP, transpose and batching
rule are declared together below it.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Sequence, Tuple, Union

import numpy as np

from functrans import _dtypes
from functrans.core import Primitive, ShapedArray, get_aval
from functrans.interpreters import ad, batching
from functrans.primitives import elementwise, structural
from functrans.primitives.dot import _canonical_precision, dot_general, place_result

# =============================================================================================
# conv_general_dilated
# =============================================================================================


class ConvDimensionNumbers(NamedTuple):
    """Where the batch, feature and spatial axes are. ``lhs_spec`` = (batch axis, feature
    axis, spatial axes...), ``rhs_spec`` = (output-feature axis, input-feature axis, spatial
    axes...), ``out_spec`` = (batch axis, feature axis, spatial axes...); spatial axes are
    listed in the same order in all three."""
    lhs_spec: tuple
    rhs_spec: tuple
    out_spec: tuple


def conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers) -> ConvDimensionNumbers:
    """Canonical :class:`ConvDimensionNumbers` from ``None`` (NC..., OI..., NC...), a
    triple of layout strings such as ``("NHWC", "HWIO", "NHWC")``, or integer specs."""
    ndim = len(lhs_shape)
    if len(rhs_shape) != ndim:
        raise TypeError(f"conv_general_dilated: lhs has rank {ndim} but rhs has rank "
                        f"{len(rhs_shape)}")
    if dimension_numbers is None:
        spec = tuple(range(ndim))
        return ConvDimensionNumbers(spec, spec, spec)
    if isinstance(dimension_numbers, ConvDimensionNumbers) or not isinstance(dimension_numbers[0], str):
        lhs, rhs, out = (tuple(int(d) for d in s) for s in dimension_numbers)
        return ConvDimensionNumbers(lhs, rhs, out)
    lhs_str, rhs_str, out_str = dimension_numbers
    if not len(lhs_str) == len(rhs_str) == len(out_str) == ndim:
        raise TypeError(f"conv_general_dilated: dimension_numbers {dimension_numbers} do not "
                        f"match operands of rank {ndim}")
    spatial = [c for c in rhs_str if c not in "OI"]
    if sorted(spatial) != sorted(c for c in lhs_str if c not in "NC") or \
            sorted(spatial) != sorted(c for c in out_str if c not in "NC"):
        raise TypeError(f"conv_general_dilated: dimension_numbers {dimension_numbers} name "
                        "different spatial axes for lhs, rhs and out")
    lhs = (lhs_str.index("N"), lhs_str.index("C")) + tuple(lhs_str.index(c) for c in spatial)
    rhs = (rhs_str.index("O"), rhs_str.index("I")) + tuple(rhs_str.index(c) for c in spatial)
    out = (out_str.index("N"), out_str.index("C")) + tuple(out_str.index(c) for c in spatial)
    return ConvDimensionNumbers(lhs, rhs, out)


def _dilated_size(size, dilation):
    return 0 if size == 0 else (size - 1) * dilation + 1


def padtype_to_pads(in_shape, window_shape, window_strides, padding) -> tuple:
    """Explicit ``(low, high)`` pads for ``"SAME"``, ``"SAME_LOWER"`` or ``"VALID"``."""
    if not isinstance(padding, str):
        return tuple((int(lo), int(hi)) for lo, hi in padding)
    kind = padding.upper()
    if kind == "VALID":
        return tuple((0, 0) for _ in in_shape)
    if kind not in ("SAME", "SAME_LOWER"):
        raise ValueError(f"unknown padding {padding!r}; use 'SAME', 'SAME_LOWER', 'VALID' or "
                         "a sequence of (low, high) pairs")
    pads = []
    for size, window, stride in zip(in_shape, window_shape, window_strides):
        out = -(-size // stride)
        total = max((out - 1) * stride + window - size, 0)
        small = total // 2
        pads.append((small, total - small) if kind == "SAME" else (total - small, small))
    return tuple(pads)


conv_general_dilated_p = Primitive("conv_general_dilated")


@conv_general_dilated_p.def_abstract_eval
def _conv_rule(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
               dimension_numbers, feature_group_count, batch_group_count, precision=None,
               preferred_element_type=None):
    lhs_spec, rhs_spec, out_spec = dimension_numbers

    def fail(why):
        raise TypeError(f"conv_general_dilated: {why} (lhs {lhs.str_short()}, rhs "
                        f"{rhs.str_short()}, dimension_numbers={dimension_numbers})")

    nsp = lhs.ndim - 2
    if rhs.ndim != lhs.ndim or nsp < 0:
        fail("lhs and rhs need the same rank, at least 2")
    for name, seq in (("window_strides", window_strides), ("padding", padding),
                      ("lhs_dilation", lhs_dilation), ("rhs_dilation", rhs_dilation)):
        if len(seq) != nsp:
            fail(f"{name} has {len(seq)} entries for {nsp} spatial dimensions")
    if lhs.dtype != rhs.dtype:
        fail("operands must have the same dtype")
    if feature_group_count > 1 and batch_group_count > 1:
        fail("feature_group_count and batch_group_count cannot both exceed 1")
    n, c = lhs.shape[lhs_spec[0]], lhs.shape[lhs_spec[1]]
    o, i = rhs.shape[rhs_spec[0]], rhs.shape[rhs_spec[1]]
    if c != i * feature_group_count:
        fail(f"lhs feature size {c} must equal rhs input-feature size {i} times "
             f"feature_group_count={feature_group_count}")
    if o % feature_group_count or o % batch_group_count or n % batch_group_count:
        fail("the output-feature size (and the lhs batch size for batch groups) must be "
             "divisible by the group count")
    spatial = []
    for k in range(nsp):
        size = _dilated_size(lhs.shape[lhs_spec[2 + k]], lhs_dilation[k]) + sum(padding[k])
        window = _dilated_size(rhs.shape[rhs_spec[2 + k]], rhs_dilation[k])
        spatial.append(max(0, (size - window) // window_strides[k] + 1) if size >= window else 0)
    canonical = (n // batch_group_count, o) + tuple(spatial)
    shape = [0] * lhs.ndim
    for position, axis in enumerate(out_spec):
        shape[axis] = canonical[position]
    dtype = lhs.dtype if preferred_element_type is None else np.dtype(preferred_element_type)
    return ShapedArray(tuple(shape), dtype, lhs.weak_type and rhs.weak_type)


def _dilate_and_pad(x, lhs_dilation, padding):
    """Insert ``dilation - 1`` zeros between spatial elements of a canonical [N, C, *S]
    array, then pad (negative pads crop)."""
    nsp = x.ndim - 2
    if any(d > 1 for d in lhs_dilation):
        shape = x.shape[:2] + tuple(_dilated_size(s, d) for s, d in zip(x.shape[2:], lhs_dilation))
        dilated = np.zeros(shape, x.dtype)
        dilated[(slice(None), slice(None)) + tuple(slice(None, None, d) for d in lhs_dilation)] = x
        x = dilated
    grow = [(0, 0), (0, 0)] + [(max(lo, 0), max(hi, 0)) for lo, hi in padding]
    x = np.pad(x, grow)
    crop = tuple(slice(max(-lo, 0), x.shape[2 + k] - max(-hi, 0))
                 for k, (lo, hi) in enumerate(padding))
    assert len(crop) == nsp
    return x[(slice(None), slice(None)) + crop]


@conv_general_dilated_p.def_impl
def _conv_impl(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
               dimension_numbers, feature_group_count, batch_group_count, precision=None,
               preferred_element_type=None):
    # im2col: gather every (strided, dilated) window of the padded input into rows, then one
    # batched matmul per group against the flattened kernel.
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    out_dtype = lhs.dtype if preferred_element_type is None else np.dtype(preferred_element_type)
    work = np.dtype(np.float32) if out_dtype in (_dtypes.bfloat16, _dtypes.float16) else out_dtype
    x = np.transpose(lhs, lhs_spec).astype(work)          # [N, C, *S]
    w = np.transpose(rhs, rhs_spec).astype(work)          # [O, I, *K]
    nsp = x.ndim - 2
    x = _dilate_and_pad(x, lhs_dilation, padding)
    kernel = w.shape[2:]
    window = tuple(_dilated_size(k, d) for k, d in zip(kernel, rhs_dilation))
    out_sp = tuple(max(0, (s - win) // st + 1) if s >= win else 0
                   for s, win, st in zip(x.shape[2:], window, window_strides))
    n, c, o, i = x.shape[0], x.shape[1], w.shape[0], w.shape[1]
    if min(out_sp + (n, o), default=1) == 0 or int(np.prod(kernel)) == 0 or i == 0:
        canonical = np.zeros((n // batch_group_count, o) + out_sp, work)
    else:
        views = np.lib.stride_tricks.sliding_window_view(x, window, axis=tuple(range(2, 2 + nsp)))
        picks = (tuple(slice(None, st * (osz - 1) + 1, st) for st, osz in zip(window_strides, out_sp))
                 + tuple(slice(None, None, d) for d in rhs_dilation))
        cols = views[(slice(None), slice(None)) + picks]   # [N, C, *out, *K]
        p, kk = int(np.prod(out_sp)), int(np.prod(kernel))
        cols = cols.reshape(n, c, p, kk)
        if batch_group_count > 1:
            g = batch_group_count
            cols = cols.reshape(g, n // g, c, p, kk).transpose(0, 1, 3, 2, 4)
            rows = cols.reshape(g, (n // g) * p, c * kk)
            kern = w.reshape(g, o // g, i * kk)
            out = np.matmul(rows, kern.transpose(0, 2, 1))           # [g, n/g * p, o/g]
            out = out.reshape(g, n // g, p, o // g).transpose(1, 0, 3, 2)
            canonical = out.reshape((n // g, o) + out_sp)
        else:
            g = feature_group_count
            cols = cols.reshape(n, g, c // g, p, kk).transpose(1, 0, 3, 2, 4)
            rows = cols.reshape(g, n * p, (c // g) * kk)
            kern = w.reshape(g, o // g, i * kk)
            out = np.matmul(rows, kern.transpose(0, 2, 1))           # [g, n * p, o/g]
            out = out.reshape(g, n, p, o // g).transpose(1, 0, 3, 2)
            canonical = out.reshape((n, o) + out_sp)
    return np.transpose(canonical, np.argsort(out_spec)).astype(out_dtype)


def _split_axis(x, axis, major):
    """Split ``axis`` of size ``major * m`` into two axes (major, m) at ``axis``."""
    shape = list(get_aval(x).shape)
    shape[axis:axis + 1] = [major, shape[axis] // major]
    return structural.reshape(x, tuple(shape))


def _merge_axes(x, axis):
    """Merge axes ``axis`` and ``axis + 1`` (the first one major)."""
    shape = list(get_aval(x).shape)
    shape[axis:axis + 2] = [shape[axis] * shape[axis + 1]]
    return structural.reshape(x, tuple(shape))


def _fold_into(x, axis, groups=1):
    """``x`` has an extra leading axis V and otherwise the original layout. Fold V into
    ``axis`` (size n) as (groups, V, n / groups), keeping any group structure major."""
    x = _split_axis(x, axis + 1, groups)          # [V, ..., groups, n/groups, ...]
    x = batching.moveaxis(x, 0, axis + 1)         # [..., groups, V, n/groups, ...]
    return _merge_axes(_merge_axes(x, axis + 1), axis)


def _unfold_from(y, axis, size, groups=1):
    """Inverse of :func:`_fold_into`: split V back out of ``axis`` and put it first."""
    y = _split_axis(y, axis, groups)              # [..., groups, V * m, ...]
    y = _split_axis(y, axis + 1, size)            # [..., groups, V, m, ...]
    y = batching.moveaxis(y, axis + 1, 0)         # [V, ..., groups, m, ...]
    return _merge_axes(y, axis + 1)


def _conv_batch(vals, dims, **params):
    (lhs, rhs), (ld, rd) = vals, dims
    lhs_spec, rhs_spec, out_spec = params["dimension_numbers"]
    fgc, bgc = params["feature_group_count"], params["batch_group_count"]
    size = batching.batch_size_of(vals, dims)
    if ld is not None and rd is not None:
        # every example has its own kernel: make the examples feature groups (or batch
        # groups, when the convolution already groups the batch)
        lhs, rhs = batching.moveaxis(lhs, ld, 0), batching.moveaxis(rhs, rd, 0)
        if bgc > 1:
            lhs = _fold_into(lhs, lhs_spec[0], 1)
            rhs = _fold_into(rhs, rhs_spec[0], 1)
            out = conv_general_dilated_p.bind(lhs, rhs, **{**params, "batch_group_count": bgc * size})
        else:
            lhs = _fold_into(lhs, lhs_spec[1], 1)
            rhs = _fold_into(rhs, rhs_spec[0], 1)
            out = conv_general_dilated_p.bind(lhs, rhs, **{**params, "feature_group_count": fgc * size})
        return _unfold_from(out, out_spec[1], size, 1), 0
    if ld is not None:
        lhs = _fold_into(batching.moveaxis(lhs, ld, 0), lhs_spec[0], bgc)
        out = conv_general_dilated_p.bind(lhs, rhs, **params)
        return _unfold_from(out, out_spec[0], size, 1), 0
    rhs = _fold_into(batching.moveaxis(rhs, rd, 0), rhs_spec[0], fgc * bgc)
    out = conv_general_dilated_p.bind(lhs, rhs, **params)
    return _unfold_from(out, out_spec[1], size, fgc * bgc), 0


def _conv_transpose_lhs(ct, lhs, rhs, **params):
    lhs_aval = lhs.aval
    lhs_spec, rhs_spec, out_spec = params["dimension_numbers"]
    fgc, bgc = params["feature_group_count"], params["batch_group_count"]
    strides, padding = params["window_strides"], params["padding"]
    lhs_dil, rhs_dil = params["lhs_dilation"], params["rhs_dilation"]
    nsp = lhs_aval.ndim - 2
    ct_aval = get_aval(ct)
    in_sizes = [lhs_aval.shape[lhs_spec[2 + k]] for k in range(nsp)]
    out_sizes = [ct_aval.shape[out_spec[2 + k]] for k in range(nsp)]
    w = structural.transpose(rhs, rhs_spec)               # canonical [O, I, *K]
    o, i = get_aval(w).shape[:2]
    kernel = get_aval(w).shape[2:]
    # Regroup the kernel into [groups * I, O / groups, *K]: the transposed convolution maps
    # each group's output features back to its input features. Flip it spatially.
    groups = max(fgc, bgc)
    w = _split_axis(w, 0, groups)                          # [g, O/g, I, *K]
    w = structural.transpose(w, (0, 2, 1) + tuple(range(3, 3 + nsp)))
    w = _merge_axes(w, 0)                                   # [g*I, O/g, *K]
    w = structural.rev(w, tuple(range(2, 2 + nsp)))
    new_padding = []
    for k in range(nsp):
        window = _dilated_size(kernel[k], rhs_dil[k])
        lo = padding[k][0]
        new_lo = window - 1 - lo
        new_hi = (in_sizes[k] - 1) * lhs_dil[k] + lo - (out_sizes[k] - 1) * strides[k]
        new_padding.append((new_lo, new_hi))
    canonical = tuple(range(nsp + 2))
    out_layout = lhs_spec if bgc == 1 else canonical
    dn = ConvDimensionNumbers(tuple(out_spec), canonical, tuple(out_layout))
    result = conv_general_dilated_p.bind(
        ct, w, window_strides=tuple(lhs_dil), padding=tuple(new_padding),
        lhs_dilation=tuple(strides), rhs_dilation=tuple(rhs_dil), dimension_numbers=dn,
        feature_group_count=groups, batch_group_count=1, precision=params["precision"],
        preferred_element_type=params["preferred_element_type"])
    if bgc > 1:
        # result is [N/g, g * C, *S]: the groups were batch groups of the lhs, so move them
        # back into the batch axis (group-major), then into lhs's layout
        result = _split_axis(result, 1, bgc)                # [N/g, g, C, *S]
        result = batching.moveaxis(result, 1, 0)             # [g, N/g, C, *S]
        result = _merge_axes(result, 0)                      # [N, C, *S]
        result = structural.transpose(result, tuple(int(a) for a in np.argsort(lhs_spec)))
    return _cast(result, lhs_aval.dtype)


def _conv_transpose_rhs(ct, lhs, rhs, **params):
    rhs_aval = rhs.aval
    lhs_spec, rhs_spec, out_spec = params["dimension_numbers"]
    fgc, bgc = params["feature_group_count"], params["batch_group_count"]
    strides, padding = params["window_strides"], params["padding"]
    lhs_dil, rhs_dil = params["lhs_dilation"], params["rhs_dilation"]
    nsp = rhs_aval.ndim - 2
    lhs_aval, ct_aval = get_aval(lhs), get_aval(ct)
    # The kernel cotangent correlates the input with the output cotangent: the lhs's
    # feature axis plays the batch, its batch axis is contracted, and the cotangent (dilated
    # by the strides) is the window, moved along by the kernel dilation.
    new_padding = []
    for k in range(nsp):
        size = _dilated_size(lhs_aval.shape[lhs_spec[2 + k]], lhs_dil[k])
        kernel = rhs_aval.shape[rhs_spec[2 + k]]
        out = ct_aval.shape[out_spec[2 + k]]
        lo = padding[k][0]
        hi = (kernel - 1) * rhs_dil[k] + (out - 1) * strides[k] + 1 - lo - size
        new_padding.append((lo, hi))
    dn = ConvDimensionNumbers(
        (lhs_spec[1], lhs_spec[0]) + tuple(lhs_spec[2:]),
        (out_spec[1], out_spec[0]) + tuple(out_spec[2:]),
        (rhs_spec[1], rhs_spec[0]) + tuple(rhs_spec[2:]))
    result = conv_general_dilated_p.bind(
        lhs, ct, window_strides=tuple(rhs_dil), padding=tuple(new_padding),
        lhs_dilation=tuple(lhs_dil), rhs_dilation=tuple(strides), dimension_numbers=dn,
        feature_group_count=bgc, batch_group_count=fgc, precision=params["precision"],
        preferred_element_type=params["preferred_element_type"])
    return _cast(result, rhs_aval.dtype)


def _cast(x, dtype):
    if get_aval(x).dtype == dtype:
        return x
    return elementwise.convert_element_type(x, dtype)


ad.defbilinear(conv_general_dilated_p, _conv_transpose_lhs, _conv_transpose_rhs)
conv_general_dilated_p.batch = _conv_batch


def conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None,
                         rhs_dilation=None, dimension_numbers=None, feature_group_count=1,
                         batch_group_count=1, precision=None, preferred_element_type=None,
                         out_sharding=None):
    """N-dimensional convolution (cross-correlation, as in XLA) with strides, padding
    (``"SAME"``, ``"VALID"`` or ``(low, high)`` pairs), input (transposed-conv) and kernel
    (atrous) dilation, feature and batch groups.

    Example::

        x, w = jnp.ones((1, 1, 5, 5)), jnp.ones((1, 1, 3, 3))
        conv_general_dilated(x, w, (1, 1), "SAME").shape   # (1, 1, 5, 5)
    """
    lhs_aval, rhs_aval = get_aval(lhs), get_aval(rhs)
    dn = conv_dimension_numbers(lhs_aval.shape, rhs_aval.shape, dimension_numbers)
    nsp = lhs_aval.ndim - 2
    lhs_dilation = (1,) * nsp if lhs_dilation is None else tuple(int(d) for d in lhs_dilation)
    rhs_dilation = (1,) * nsp if rhs_dilation is None else tuple(int(d) for d in rhs_dilation)
    window_strides = tuple(int(s) for s in window_strides)
    if isinstance(padding, str):
        in_sizes = [_dilated_size(lhs_aval.shape[dn.lhs_spec[2 + k]], lhs_dilation[k])
                    for k in range(nsp)]
        windows = [_dilated_size(rhs_aval.shape[dn.rhs_spec[2 + k]], rhs_dilation[k])
                   for k in range(nsp)]
        padding = padtype_to_pads(in_sizes, windows, window_strides, padding)
    else:
        padding = tuple((int(lo), int(hi)) for lo, hi in padding)
    if preferred_element_type is not None:
        preferred_element_type = _dtypes.canonicalize_dtype(preferred_element_type)
    out = conv_general_dilated_p.bind(
        lhs, rhs, window_strides=window_strides, padding=padding, lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation, dimension_numbers=dn,
        feature_group_count=int(feature_group_count), batch_group_count=int(batch_group_count),
        precision=_canonical_precision(precision), preferred_element_type=preferred_element_type)
    return place_result(out, out_sharding)


def conv(lhs, rhs, window_strides, padding, precision=None, preferred_element_type=None):
    """Convolution in the NC... / OI... layout without dilation.

    Example::

        conv(jnp.ones((1, 2, 4)), jnp.ones((3, 2, 2)), (1,), "VALID").shape   # (1, 3, 3)
    """
    return conv_general_dilated(lhs, rhs, window_strides, padding, precision=precision,
                                preferred_element_type=preferred_element_type)



def _conv_dimension_numbers_type():
    return Union[Tuple[str, str, str], ConvDimensionNumbers, None]


ConvGeneralDilatedDimensionNumbers = _conv_dimension_numbers_type()


# =============================================================================================
# Layouts, output shapes, patches and locally connected convolutions
# =============================================================================================


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


# =============================================================================================
# conv_transpose and explicit padding
# =============================================================================================


def conv_with_general_padding(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                              precision=None, preferred_element_type=None):
    """Convolution in the NC... / OI... layout with explicit ``(low, high)`` padding and
    input/kernel dilation.

    Example::

        x, w = jnp.ones((1, 1, 4, 4)), jnp.ones((1, 1, 3, 3))
        conv_with_general_padding(x, w, (1, 1), ((1, 1), (1, 1)), None, None).shape
        # (1, 1, 4, 4)
    """
    return conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
                                rhs_dilation=rhs_dilation, precision=precision,
                                preferred_element_type=preferred_element_type)


def _conv_transpose_padding(window: int, stride: int, padding: str) -> tuple:
    """``(low, high)`` padding of the stride-dilated input for a transposed convolution with an
    (effective, dilated) kernel of size ``window``. "SAME" makes the output ``stride`` times
    the input; "VALID" makes it ``stride * input + max(window - stride, 0)``, the size of the
    input of a VALID forward convolution this one undoes."""
    if padding == "SAME":
        total = window + stride - 2
        low = window - 1 if stride > window - 1 else -(-total // 2)
    elif padding == "VALID":
        total = window + stride - 2 + max(window - stride, 0)
        low = window - 1
    else:
        raise ValueError(f"conv_transpose: padding must be 'SAME', 'VALID' or a sequence of "
                         f"(low, high) pairs, got {padding!r}")
    return low, total - low


_DEFAULT_TRANSPOSE_LAYOUTS = {2: ("NC", "IO", "NC"), 3: ("NHC", "HIO", "NHC"),
                              4: ("NHWC", "HWIO", "NHWC"), 5: ("NHWDC", "HWDIO", "NHWDC")}


def conv_transpose(lhs, rhs, strides, padding, rhs_dilation=None, dimension_numbers=None,
                   transpose_kernel=False, precision=None, preferred_element_type=None):
    """Transposed ("fractionally strided") convolution: a stride-1 convolution of the input
    dilated by ``strides``.

    ``padding`` is "SAME" (output = input * stride), "VALID", or explicit ``(low, high)``
    pairs applied to the dilated input. With ``transpose_kernel=True`` the kernel is flipped
    spatially and its input/output feature axes swapped, which makes this the gradient of
    ``conv_general_dilated(x, rhs, strides, padding)`` with respect to ``x``. The default
    layout is channels-last (``NHWC``, ``HWIO``, ``NHWC`` for 2-D).

    Example::

        x, w = jnp.ones((1, 4, 4, 2)), jnp.ones((3, 3, 2, 5))   # NHWC, HWIO
        conv_transpose(x, w, (2, 2), "SAME").shape               # (1, 8, 8, 5)
    """
    lhs_aval, rhs_aval = get_aval(lhs), get_aval(rhs)
    ndim = lhs_aval.ndim
    if ndim != rhs_aval.ndim or ndim < 2:
        raise TypeError(f"conv_transpose: lhs and rhs need the same rank, at least 2; got "
                        f"{lhs_aval.str_short()} and {rhs_aval.str_short()}")
    nsp = ndim - 2
    if dimension_numbers is None:
        if ndim not in _DEFAULT_TRANSPOSE_LAYOUTS:
            raise ValueError(f"conv_transpose: no default dimension_numbers for rank {ndim}; "
                             "pass them explicitly")
        dimension_numbers = _DEFAULT_TRANSPOSE_LAYOUTS[ndim]
    dn = conv_dimension_numbers(lhs_aval.shape, rhs_aval.shape, dimension_numbers)
    strides = tuple(int(s) for s in strides)
    rhs_dilation = (1,) * nsp if rhs_dilation is None else tuple(int(d) for d in rhs_dilation)
    if len(strides) != nsp or len(rhs_dilation) != nsp:
        raise TypeError(f"conv_transpose: strides {strides} and rhs_dilation {rhs_dilation} "
                        f"need one entry per spatial dimension ({nsp})")
    kernel = [rhs_aval.shape[dn.rhs_spec[2 + k]] for k in range(nsp)]
    if isinstance(padding, str):
        pads = tuple(_conv_transpose_padding(_dilated_size(kernel[k], rhs_dilation[k]),
                                             strides[k], padding.upper()) for k in range(nsp))
    else:
        pads = tuple((int(lo), int(hi)) for lo, hi in padding)
    if transpose_kernel:
        # the forward convolution's kernel read backwards maps output features to input
        # features: flip every spatial axis and exchange the O and I axes
        rhs = structural.rev(rhs, tuple(dn.rhs_spec[2:]))
        perm = list(range(ndim))
        perm[dn.rhs_spec[0]], perm[dn.rhs_spec[1]] = dn.rhs_spec[1], dn.rhs_spec[0]
        rhs = structural.transpose(rhs, tuple(perm))
    return conv_general_dilated(lhs, rhs, (1,) * nsp, pads, lhs_dilation=strides,
                                rhs_dilation=rhs_dilation, dimension_numbers=dn,
                                precision=precision,
                                preferred_element_type=preferred_element_type)


__all__ = ["conv", "conv_dimension_numbers", "conv_general_dilated",
           "conv_general_dilated_local", "conv_general_dilated_patches",
           "conv_general_permutations", "conv_general_shape_tuple", "conv_shape_tuple",
           "conv_transpose", "conv_transpose_shape_tuple", "conv_with_general_padding",
           "ConvDimensionNumbers", "ConvGeneralDilatedDimensionNumbers", "padtype_to_pads",
           "reduce_window_shape_tuple"]
