"""Linear algebra primitives: ``dot_general``, ``conv_general_dilated`` and the matrix
decompositions behind ``jnp.linalg`` (``cholesky``, ``triangular_solve``, ``lu``, ``qr``,
``svd``, ``eigh``).

Each primitive's shape rule, reference implementation, JVP, transpose (for the bilinear
ones) and batching rule are declared together below it.
"""
from __future__ import annotations

import enum
import math
from typing import Any, NamedTuple, Sequence, Tuple, Union

import numpy as np

from functrans import _dtypes
from functrans.core import Primitive, ShapedArray, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters.ad import Zero, is_undefined_primal
from functrans.primitives import elementwise, reductions, sorting, structural
from functrans.primitives import elementwise as ew

# =============================================================================================
# dot_general
# =============================================================================================

dot_general_p = Primitive("dot_general")


def _canonical_dimension_numbers(dimension_numbers) -> tuple:
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    as_ints = lambda dims: tuple(int(d) for d in dims)  # noqa: E731
    return ((as_ints(lhs_contract), as_ints(rhs_contract)), (as_ints(lhs_batch), as_ints(rhs_batch)))


def _free_dims(ndim, contract, batch) -> tuple:
    return tuple(i for i in range(ndim) if i not in contract and i not in batch)


def _canonical_precision(precision):
    """Precision is advisory for the reference backend; keep it hashable and printable."""
    if precision is None:
        return None
    if isinstance(precision, (tuple, list)):
        return tuple(_canonical_precision(p) for p in precision)
    return str(getattr(precision, "name", precision)).upper()


@dot_general_p.def_abstract_eval
def _dot_general_rule(lhs, rhs, *, dimension_numbers, precision=None, preferred_element_type=None):
    (lc, rc), (lb, rb) = dimension_numbers

    def fail(why):
        raise TypeError(f"dot_general: {why} (lhs {lhs.str_short()}, rhs {rhs.str_short()}, "
                        f"dimension_numbers={dimension_numbers})")

    for dims, aval, side in ((lc + lb, lhs, "lhs"), (rc + rb, rhs, "rhs")):
        if len(set(dims)) != len(dims) or any(not 0 <= d < aval.ndim for d in dims):
            fail(f"{side} contracting and batch dimensions must be distinct axes")
    if len(lc) != len(rc) or len(lb) != len(rb):
        fail("lhs and rhs need as many contracting (and batch) dimensions as each other")
    if any(lhs.shape[a] != rhs.shape[b] for a, b in zip(lc, rc)):
        fail("contracting dimensions have different sizes")
    if any(lhs.shape[a] != rhs.shape[b] for a, b in zip(lb, rb)):
        fail("batch dimensions have different sizes")
    if lhs.dtype != rhs.dtype:
        fail("operands must have the same dtype")
    shape = (tuple(lhs.shape[d] for d in lb)
             + tuple(lhs.shape[d] for d in _free_dims(lhs.ndim, lc, lb))
             + tuple(rhs.shape[d] for d in _free_dims(rhs.ndim, rc, rb)))
    dtype = lhs.dtype if preferred_element_type is None else np.dtype(preferred_element_type)
    weak = lhs.weak_type and rhs.weak_type and preferred_element_type is None
    return ShapedArray(shape, dtype, weak)


@dot_general_p.def_impl
def _dot_general_impl(lhs, rhs, *, dimension_numbers, precision=None, preferred_element_type=None):
    # Lay both operands out as [batch, free, contract] / [batch, contract, free] and call one
    # np.matmul, so large products run in BLAS.
    (lc, rc), (lb, rb) = dimension_numbers
    lf, rf = _free_dims(lhs.ndim, lc, lb), _free_dims(rhs.ndim, rc, rb)
    out_dtype = lhs.dtype if preferred_element_type is None else np.dtype(preferred_element_type)
    work_dtype = out_dtype
    if out_dtype in (_dtypes.bfloat16, _dtypes.float16) or _dtypes.is_bool(out_dtype):
        work_dtype = np.dtype(np.float32) if not _dtypes.is_bool(out_dtype) else np.dtype(np.int32)
    size = lambda a, dims: int(np.prod([a.shape[d] for d in dims], dtype=np.int64))  # noqa: E731
    b, m, k, n = size(lhs, lb), size(lhs, lf), size(lhs, lc), size(rhs, rf)
    l3 = np.transpose(lhs, lb + lf + lc).reshape(b, m, k).astype(work_dtype, copy=False)
    r3 = np.transpose(rhs, rb + rc + rf).reshape(b, k, n).astype(work_dtype, copy=False)
    # a single product goes through the 2-D path, which NumPy hands to BLAS gemm directly
    out = np.matmul(l3[0], r3[0])[None] if b == 1 else np.matmul(l3, r3)
    shape = (tuple(lhs.shape[d] for d in lb) + tuple(lhs.shape[d] for d in lf)
             + tuple(rhs.shape[d] for d in rf))
    return out.reshape(shape).astype(out_dtype, copy=False)


def _dot_general_transpose_lhs(ct, lhs_aval, rhs, dimension_numbers, precision,
                               preferred_element_type, swapped=False):
    """Cotangent of ``lhs``: contract ``ct``'s rhs-free axes with ``rhs``'s free axes,
    keeping the batch axes, then permute the result into ``lhs``'s layout."""
    (lc, rc), (lb, rb) = dimension_numbers
    rhs_ndim = get_aval(rhs).ndim
    lf = _free_dims(lhs_aval.ndim, lc, lb)
    rf = _free_dims(rhs_ndim, rc, rb)
    nb = len(lb)
    # ct layout: [batch, lhs free, rhs free] (or [batch, rhs free, lhs free] when swapped)
    ct_rf = tuple(range(nb + len(lf), nb + len(lf) + len(rf))) if not swapped else \
        tuple(range(nb, nb + len(rf)))
    ct_batch = tuple(range(nb))
    rc_sorted = sorted(rc)
    paired_lc = [lc[rc.index(r)] for r in rc_sorted]
    # Two products give the cotangent: ct . rhs has layout [batch, lhs free, lhs contract],
    # rhs . ct has [batch, lhs contract, lhs free]; pick one that needs no transpose.
    ct_first = list(lb) + list(lf) + paired_lc
    rhs_first = list(lb) + paired_lc + list(lf)
    if ct_first != sorted(ct_first) and rhs_first == sorted(rhs_first):
        out = dot_general(rhs, ct, ((rf, ct_rf), (rb, ct_batch)), precision=precision,
                          preferred_element_type=preferred_element_type)
    else:
        result = dot_general(ct, rhs, ((ct_rf, rf), (ct_batch, rb)), precision=precision,
                             preferred_element_type=preferred_element_type)
        permutation = tuple(int(i) for i in np.argsort(ct_first))
        out = structural.transpose(result, permutation)
    if get_aval(out).dtype != lhs_aval.dtype:
        out = elementwise.convert_element_type(out, lhs_aval.dtype)
    return out


def _dot_general_transpose(ct, lhs, rhs, *, dimension_numbers, precision=None,
                           preferred_element_type=None):
    if is_undefined_primal(lhs) and is_undefined_primal(rhs):
        raise NotImplementedError("dot_general is bilinear: transposing it in both operands "
                                  "at once is not supported")
    if isinstance(ct, Zero):
        return [Zero(lhs.aval) if is_undefined_primal(lhs) else None,
                Zero(rhs.aval) if is_undefined_primal(rhs) else None]
    if is_undefined_primal(lhs):
        return [_dot_general_transpose_lhs(ct, lhs.aval, rhs, dimension_numbers, precision,
                                           preferred_element_type), None]
    # The rhs cotangent is the lhs cotangent of the swapped product rhs . lhs, whose output
    # has the two free groups in the other order.
    (lc, rc), (lb, rb) = dimension_numbers
    swapped = ((rc, lc), (rb, lb))
    return [None, _dot_general_transpose_lhs(ct, rhs.aval, lhs, swapped, precision,
                                             preferred_element_type, swapped=True)]


def _dot_general_jvp(primals, tangents, *, dimension_numbers, precision=None,
                     preferred_element_type=None):
    lhs, rhs = primals
    t_lhs, t_rhs = tangents
    params = dict(dimension_numbers=dimension_numbers, precision=precision,
                  preferred_element_type=preferred_element_type)
    out = dot_general_p.bind(lhs, rhs, **params)
    tangent = Zero.from_value(out)
    if not isinstance(t_lhs, Zero):
        tangent = ad.add_tangents(tangent, dot_general_p.bind(t_lhs, rhs, **params))
    if not isinstance(t_rhs, Zero):
        tangent = ad.add_tangents(tangent, dot_general_p.bind(lhs, t_rhs, **params))
    return out, tangent


def _shift_dims(dims, at):
    """Renumber axes after inserting a new axis at position ``at``."""
    return tuple(d + (d >= at) for d in dims)


def _dot_general_batch(vals, dims, *, dimension_numbers, precision=None,
                       preferred_element_type=None):
    # A batched operand's batch axis stays where it is: when both are batched it becomes a
    # new leading batch dimension of the product (so vmap of a matmul is one batched
    # dot_general); otherwise it is a free axis, and we report where it lands.
    (lhs, rhs), (ld, rd) = vals, dims
    (lc, rc), (lb, rb) = dimension_numbers
    params = dict(precision=precision, preferred_element_type=preferred_element_type)
    lhs_ndim, rhs_ndim = get_aval(lhs).ndim, get_aval(rhs).ndim
    if ld is not None and rd is not None:
        new = ((_shift_dims(lc, ld), _shift_dims(rc, rd)),
               ((ld,) + _shift_dims(lb, ld), (rd,) + _shift_dims(rb, rd)))
        return dot_general_p.bind(lhs, rhs, dimension_numbers=new, **params), 0
    if ld is not None:
        new = ((_shift_dims(lc, ld), rc), (_shift_dims(lb, ld), rb))
        lf = _free_dims(lhs_ndim, new[0][0], new[1][0])
        out_dim = len(lb) + lf.index(ld)
        return dot_general_p.bind(lhs, rhs, dimension_numbers=new, **params), out_dim
    new = ((lc, _shift_dims(rc, rd)), (lb, _shift_dims(rb, rd)))
    rf = _free_dims(rhs_ndim, new[0][1], new[1][1])
    out_dim = len(lb) + len(_free_dims(lhs_ndim, lc, lb)) + rf.index(rd)
    return dot_general_p.bind(lhs, rhs, dimension_numbers=new, **params), out_dim


dot_general_p.jvp = _dot_general_jvp
dot_general_p.transpose = _dot_general_transpose
dot_general_p.batch = _dot_general_batch


def _precision_rank(dtype) -> tuple:
    """How XLA orders dtypes when a dot mixes two: complex over real, then by exponent range,
    mantissa width, bit width, and signed over unsigned."""
    real = np.dtype(np.float64 if dtype == np.complex128 else np.float32) \
        if _dtypes.is_complex(dtype) else dtype
    floating = _dtypes.is_float(real)
    info = _dtypes.finfo(real) if floating else None
    bits = 1 if _dtypes.is_bool(real) else np.dtype(real).itemsize * 8
    return (_dtypes.is_complex(dtype), info.maxexp if floating else -1,
            info.nmant if floating else -1, bits, not _dtypes.is_unsigned(real))


def _operands_of_one_dtype(lhs, rhs):
    """jax.lax.dot_general takes operands of different dtypes (unlike the elementwise ops):
    the product is computed in the wider of the two, the other operand converted to it."""
    from functrans.primitives import elementwise
    lhs_dtype, rhs_dtype = get_aval(lhs).dtype, get_aval(rhs).dtype
    if lhs_dtype == rhs_dtype:
        return lhs, rhs
    lhs_rank, rhs_rank = _precision_rank(lhs_dtype), _precision_rank(rhs_dtype)
    if lhs_rank == rhs_rank:
        raise TypeError(f"lax.dot_general argument type error: {lhs_dtype.name}, "
                        f"{rhs_dtype.name}")
    if lhs_rank > rhs_rank:
        return lhs, elementwise.convert_element_type(rhs, lhs_dtype)
    return elementwise.convert_element_type(lhs, rhs_dtype), rhs


def _check_preferred_not_narrower(dtype, preferred) -> None:
    def bits(d):
        return 1 if _dtypes.is_bool(d) else np.dtype(d).itemsize * 8
    if not _dtypes.is_float(dtype) and dtype != preferred and bits(preferred) < bits(dtype):
        raise TypeError(f"`preferred_element_type` must not be narrower than the original "
                        f"type, got preferred_element_type of {preferred.name} for result "
                        f"type of {dtype.name}.")


def place_result(out, out_sharding):
    """``out`` split as ``out_sharding`` (JAX's ``out_sharding=`` argument of products and
    convolutions), or as it is when that is None."""
    if out_sharding is None:
        return out
    # upward, at call time: sharding constraints are built over the public API
    from functrans.sharding._constraints import with_sharding_constraint
    return with_sharding_constraint(out, out_sharding)


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                out_sharding=None):
    """General tensor contraction. ``dimension_numbers`` is
    ``((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))``; the result's axes are
    the batch axes, then lhs's free axes, then rhs's free axes (as in XLA).

    Example::

        x, y = jnp.ones((5, 2, 3)), jnp.ones((5, 3, 4))
        dot_general(x, y, (((2,), (1,)), ((0,), (0,)))).shape   # (5, 2, 4)

    Operands of different dtypes multiply in the wider one (``int8`` by ``float32`` gives
    ``float32``), as in JAX; ``preferred_element_type`` picks the result's dtype.
    """
    dimension_numbers = _canonical_dimension_numbers(dimension_numbers)
    if preferred_element_type is not None:
        preferred_element_type = _dtypes.canonicalize_dtype(preferred_element_type)
    lhs, rhs = _operands_of_one_dtype(lhs, rhs)
    if preferred_element_type is not None:
        _check_preferred_not_narrower(get_aval(lhs).dtype, preferred_element_type)
    out = dot_general_p.bind(lhs, rhs, dimension_numbers=dimension_numbers,
                             precision=_canonical_precision(precision),
                             preferred_element_type=preferred_element_type)
    return place_result(out, out_sharding)


def dot(lhs, rhs, precision=None, preferred_element_type=None, out_sharding=None):
    """Vector/matrix product: contracts the last axis of ``lhs`` with the first axis of
    ``rhs`` (both 1-D or 2-D).

    Example::

        dot(jnp.ones((2, 3)), jnp.ones(3))   # [3., 3.]
    """
    lhs_ndim, rhs_ndim = get_aval(lhs).ndim, get_aval(rhs).ndim
    if lhs_ndim not in (1, 2) or rhs_ndim not in (1, 2):
        raise TypeError(f"dot: operands must be 1-D or 2-D, got {get_aval(lhs).str_short()} "
                        f"and {get_aval(rhs).str_short()}")
    return dot_general(lhs, rhs, (((lhs_ndim - 1,), (0,)), ((), ())), precision,
                       preferred_element_type, out_sharding)


def batch_matmul(lhs, rhs, precision=None):
    """Matrix product over the last two axes, batched over equal leading axes.

    Example::

        batch_matmul(jnp.ones((7, 2, 3)), jnp.ones((7, 3, 4))).shape   # (7, 2, 4)
    """
    lhs_aval, rhs_aval = get_aval(lhs), get_aval(rhs)
    if lhs_aval.ndim < 2 or lhs_aval.ndim != rhs_aval.ndim:
        raise TypeError(f"batch_matmul: operands need the same rank >= 2, got "
                        f"{lhs_aval.str_short()} and {rhs_aval.str_short()}")
    nd = lhs_aval.ndim
    batch = tuple(range(nd - 2))
    return dot_general(lhs, rhs, (((nd - 1,), (nd - 2,)), (batch, batch)), precision)


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


def _conv_params(**params):
    return {k: params[k] for k in ("window_strides", "padding", "lhs_dilation", "rhs_dilation",
                                   "dimension_numbers", "feature_group_count",
                                   "batch_group_count", "precision", "preferred_element_type")}


def _conv_jvp(primals, tangents, **params):
    lhs, rhs = primals
    t_lhs, t_rhs = tangents
    out = conv_general_dilated_p.bind(lhs, rhs, **params)
    tangent = Zero.from_value(out)
    if not isinstance(t_lhs, Zero):
        tangent = ad.add_tangents(tangent, conv_general_dilated_p.bind(t_lhs, rhs, **params))
    if not isinstance(t_rhs, Zero):
        tangent = ad.add_tangents(tangent, conv_general_dilated_p.bind(lhs, t_rhs, **params))
    return out, tangent


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


def _reverse(x, dims):
    """``x`` reversed along ``dims``. Uses a ``rev`` primitive where the tree provides
    one; otherwise a stable sort by descending position (an exact permutation, linear and
    transposable)."""
    from functrans import lax as _lax  # upward: lax is in the API, above this layer
    rev = getattr(_lax, "rev", None)
    if rev is not None:
        return rev(x, tuple(dims))
    shape = get_aval(x).shape
    for d in dims:
        keys = structural.broadcast_in_dim(np.arange(shape[d], dtype=np.int32)[::-1].copy(),
                                           shape, (d,))
        x = sorting.sort((keys, x), dimension=d, num_keys=1)[1]
    return x


def _conv_transpose_lhs(ct, lhs_aval, rhs, params):
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
    w = _reverse(w, tuple(range(2, 2 + nsp)))
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


def _conv_transpose_rhs(ct, lhs, rhs_aval, params):
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


def _conv_transpose(ct, lhs, rhs, **params):
    if is_undefined_primal(lhs) and is_undefined_primal(rhs):
        raise NotImplementedError("conv_general_dilated is bilinear: transposing it in both "
                                  "operands at once is not supported")
    if isinstance(ct, Zero):
        return [Zero(lhs.aval) if is_undefined_primal(lhs) else None,
                Zero(rhs.aval) if is_undefined_primal(rhs) else None]
    params = _conv_params(**params)
    if is_undefined_primal(lhs):
        return [_conv_transpose_lhs(ct, lhs.aval, rhs, params), None]
    return [None, _conv_transpose_rhs(ct, lhs, rhs.aval, params)]


conv_general_dilated_p.jvp = _conv_jvp
conv_general_dilated_p.transpose = _conv_transpose
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


# =============================================================================================
# Matrix decompositions. Operands are [..., m, n]: leading axes are batch axes, so a
# batching rule only moves the vmapped axis to the front.
# =============================================================================================


def _matrix_rule_check(name, operand, square=True, inexact=True):
    if operand.ndim < 2 or (square and operand.shape[-1] != operand.shape[-2]):
        kind = "a (batch of) square matrices" if square else "a (batch of) matrices"
        raise TypeError(f"{name}: operand {operand.str_short()} must be {kind}")
    if inexact and not _dtypes.is_inexact(operand.dtype):
        raise TypeError(f"{name}: operand {operand.str_short()} must have a float or complex "
                        "dtype")


def _real_dtype(dtype):
    return {_dtypes.complex64: _dtypes.float32, _dtypes.complex128: _dtypes.float64}.get(
        np.dtype(dtype), np.dtype(dtype))


def _per_matrix(fn, *arrays):
    """Apply ``fn`` to each matrix of a batch (NumPy/SciPy routines without batching);
    returns a list of stacked outputs."""
    batch = arrays[0].shape[:-2]
    results = [fn(*[a.reshape((-1,) + a.shape[-2:])[i] for a in arrays])
               for i in range(int(np.prod(batch, dtype=np.int64)))]
    if not results:
        return None
    return [np.stack([r[j] for r in results]).reshape(batch + np.shape(results[0][j]))
            for j in range(len(results[0]))]


def _decomposition_batch(primitive):
    def rule(vals, dims, **params):
        size = batching.batch_size_of(vals, dims)
        vals = [batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims)]
        outs = primitive.bind(*vals, **params)
        if primitive.multiple_results:
            return outs, [0] * len(outs)
        return outs, 0
    primitive.batch = rule
    return rule


# ---- small helpers on traced values ---------------------------------------------------------

def _mT(x):
    nd = get_aval(x).ndim
    return structural.transpose(x, tuple(range(nd - 2)) + (nd - 1, nd - 2))


def _H(x):
    x = _mT(x)
    return ew.conj(x) if _dtypes.is_complex(get_aval(x).dtype) else x


def _matmul(a, b):
    nd = get_aval(a).ndim
    batch = tuple(range(nd - 2))
    return dot_general(a, b, (((nd - 1,), (nd - 2,)), (batch, batch)))


def _const_matrix(value: np.ndarray, like):
    """A constant [m, n] matrix broadcast over ``like``'s batch axes, in its dtype."""
    aval = get_aval(like)
    shape = aval.shape[:-2] + value.shape
    return structural.broadcast_in_dim(value.astype(aval.dtype), shape,
                                       (aval.ndim - 2, aval.ndim - 1))


def _masked(x, mask: np.ndarray):
    return ew.mul(x, _const_matrix(mask, x))


def _diagonal(x):
    """The diagonal of each square matrix: [..., n, n] -> [..., n]."""
    n = get_aval(x).shape[-1]
    return reductions.reduce_sum(_masked(x, np.eye(n)), (get_aval(x).ndim - 1,))


def _row_scale(x, d):
    """``x * d[..., None, :]`` (scale the columns of each matrix)."""
    aval, daval = get_aval(x), get_aval(d)
    b = structural.broadcast_in_dim(d, aval.shape, tuple(range(daval.ndim - 1)) + (aval.ndim - 1,))
    return ew.mul(x, ew.convert_element_type(b, aval.dtype) if get_aval(b).dtype != aval.dtype else b)


def _col_scale(x, d):
    """``x * d[..., :, None]`` (scale the rows of each matrix)."""
    aval, daval = get_aval(x), get_aval(d)
    b = structural.broadcast_in_dim(d, aval.shape, tuple(range(daval.ndim - 1)) + (aval.ndim - 2,))
    return ew.mul(x, ew.convert_element_type(b, aval.dtype) if get_aval(b).dtype != aval.dtype else b)


# =============================================================================================
# cholesky
# =============================================================================================

cholesky_p = Primitive("cholesky")


@cholesky_p.def_abstract_eval
def _cholesky_rule(operand):
    _matrix_rule_check("cholesky", operand)
    return ShapedArray(operand.shape, operand.dtype)


@cholesky_p.def_impl
def _cholesky_impl(operand):
    # A matrix that is not positive definite gives NaNs (as in JAX), not an exception.
    def one(a):
        try:
            return (np.linalg.cholesky(a),)
        except np.linalg.LinAlgError:
            return (np.full(a.shape, np.nan, a.dtype),)
    if operand.size == 0:
        return operand.copy()
    return _per_matrix(one, operand)[0].astype(operand.dtype)


def _cholesky_jvp(primals, tangents):
    # dL = L Phi(L^-1 dA L^-H), Phi = lower triangle with the diagonal halved.
    (a,), (da,) = primals, tangents
    l = cholesky_p.bind(a)
    if isinstance(da, Zero):
        return l, Zero.from_value(l)
    n = get_aval(a).shape[-1]
    tmp = triangular_solve(l, da, left_side=True, lower=True)
    tmp = triangular_solve(l, tmp, left_side=False, lower=True, transpose_a=True,
                           conjugate_a=True)
    phi = _masked(tmp, np.tril(np.ones((n, n)), -1) + 0.5 * np.eye(n))
    return l, _matmul(l, phi)


cholesky_p.jvp = _cholesky_jvp
_decomposition_batch(cholesky_p)


def cholesky(x, symmetrize_input: bool = True):
    """Lower Cholesky factor ``L`` with ``x = L L^H`` (NaNs if ``x`` is not positive
    definite). Only the lower triangle is read unless ``symmetrize_input``.

    Example::

        cholesky(jnp.array([[4., 2.], [2., 3.]]))   # [[2, 0], [1, 1.414]]
    """
    if symmetrize_input:
        x = ew.mul(ew.add(x, _H(x)), _const_scalar(0.5, x))
    return cholesky_p.bind(x)


def _const_scalar(value, like):
    aval = get_aval(like)
    return structural.full(aval.shape, value, aval.dtype)


# =============================================================================================
# triangular_solve
# =============================================================================================

triangular_solve_p = Primitive("triangular_solve")


@triangular_solve_p.def_abstract_eval
def _triangular_solve_rule(a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    _matrix_rule_check("triangular_solve", a)
    if b.ndim != a.ndim or b.shape[:-2] != a.shape[:-2] or a.dtype != b.dtype:
        raise TypeError(f"triangular_solve: a {a.str_short()} and b {b.str_short()} need the "
                        "same dtype and batch axes")
    m = a.shape[-1]
    if (b.shape[-2] if left_side else b.shape[-1]) != m:
        raise TypeError(f"triangular_solve: b {b.str_short()} does not match a "
                        f"{a.str_short()} (left_side={left_side})")
    return ShapedArray(b.shape, b.dtype)


def _op_a(a, lower, transpose_a, conjugate_a, unit_diagonal):
    """The effective matrix op(A) read from the stored triangle."""
    tri = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        tri = tri.copy()
        idx = np.arange(a.shape[-1])
        tri[..., idx, idx] = 1
    if conjugate_a:
        tri = np.conj(tri)
    if transpose_a:
        tri = np.swapaxes(tri, -1, -2)
    return tri


@triangular_solve_p.def_impl
def _triangular_solve_impl(a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    op = _op_a(a, lower, transpose_a, conjugate_a, unit_diagonal)
    if b.size == 0:
        return b.copy()
    upper_after_op = (not lower) ^ bool(transpose_a)
    import scipy.linalg  # imported on use: it is slow to import

    def one(t, rhs):
        if left_side:
            return (scipy.linalg.solve_triangular(t, rhs, lower=not upper_after_op,
                                                  check_finite=False),)
        # x t = rhs  <=>  t^T x^T = rhs^T
        return (scipy.linalg.solve_triangular(t.T, rhs.T, lower=upper_after_op,
                                              check_finite=False).T,)
    with np.errstate(all="ignore"):
        return _per_matrix(one, op, b)[0].astype(b.dtype)


def _tri_mask(n, lower, unit_diagonal):
    mask = np.tril(np.ones((n, n))) if lower else np.triu(np.ones((n, n)))
    return mask - np.eye(n) if unit_diagonal else mask


def _triangular_solve_jvp_a(da, a, b, *, left_side, lower, transpose_a, conjugate_a,
                            unit_diagonal):
    # X = op(A)^-1 B  =>  dX = -op(A)^-1 op(dA) X   (left; mirrored for right side)
    params = dict(left_side=left_side, lower=lower, transpose_a=transpose_a,
                  conjugate_a=conjugate_a, unit_diagonal=unit_diagonal)
    x = triangular_solve_p.bind(a, b, **params)
    n = get_aval(a).shape[-1]
    dop = _masked(da, _tri_mask(n, lower, unit_diagonal))
    if conjugate_a and _dtypes.is_complex(get_aval(a).dtype):
        dop = ew.conj(dop)
    if transpose_a:
        dop = _mT(dop)
    rhs = _matmul(dop, x) if left_side else _matmul(x, dop)
    return ew.neg(triangular_solve_p.bind(a, rhs, **params))


def _triangular_solve_transpose(ct, a, b, *, left_side, lower, transpose_a, conjugate_a,
                                unit_diagonal):
    if is_undefined_primal(a):
        raise NotImplementedError("triangular_solve is not linear in the triangular matrix")
    if isinstance(ct, Zero):
        return [None, Zero(b.aval)]
    ct_b = triangular_solve_p.bind(a, ct, left_side=left_side, lower=lower,
                                   transpose_a=not transpose_a, conjugate_a=conjugate_a,
                                   unit_diagonal=unit_diagonal)
    return [None, ct_b]


ad.defjvp(triangular_solve_p, _triangular_solve_jvp_a,
          lambda db, a, b, **params: triangular_solve_p.bind(a, db, **params))
triangular_solve_p.transpose = _triangular_solve_transpose
_decomposition_batch(triangular_solve_p)


def triangular_solve(a, b, left_side: bool = False, lower: bool = False,
                     transpose_a: bool = False, conjugate_a: bool = False,
                     unit_diagonal: bool = False):
    """Solve ``op(a) @ x = b`` (``left_side``) or ``x @ op(a) = b`` for triangular ``a``;
    ``op`` transposes and/or conjugates as asked. Only the ``lower`` (or upper) triangle of
    ``a`` is read.

    Example::

        a = jnp.array([[2., 0.], [1., 1.]])
        triangular_solve(a, jnp.array([[2.], [3.]]), left_side=True, lower=True)  # [[1],[2]]
    """
    return triangular_solve_p.bind(a, b, left_side=bool(left_side), lower=bool(lower),
                                   transpose_a=bool(transpose_a), conjugate_a=bool(conjugate_a),
                                   unit_diagonal=bool(unit_diagonal))


# =============================================================================================
# lu
# =============================================================================================

lu_p = Primitive("lu", multiple_results=True)


@lu_p.def_abstract_eval
def _lu_rule(operand):
    _matrix_rule_check("lu", operand, square=False)
    m, n = operand.shape[-2:]
    batch = operand.shape[:-2]
    return [ShapedArray(operand.shape, operand.dtype),
            ShapedArray(batch + (min(m, n),), _dtypes.int32),
            ShapedArray(batch + (m,), _dtypes.int32)]


def _pivots_to_permutation(pivots, m):
    perm = np.arange(m)
    for i, p in enumerate(pivots):
        perm[i], perm[p] = perm[p], perm[i]
    return perm


@lu_p.def_impl
def _lu_impl(operand):
    m, n = operand.shape[-2:]
    import scipy.linalg  # imported on use: it is slow to import

    def one(a):
        p, l, u = scipy.linalg.lu(a)           # a = p @ l @ u
        k = min(m, n)
        packed = np.zeros_like(a)
        packed[:, :k] += np.tril(l, -1)[:, :k]
        packed[:k, :] += np.triu(u)[:k, :]
        permutation = np.argmax(p, axis=0)     # row i of p.T @ a is a[permutation[i]]
        # pivots: the row swaps (LAPACK style) that produce this permutation
        current = np.arange(m)
        where = np.arange(m)
        pivots = np.zeros(k, np.int64)
        for i in range(k):
            j = where[permutation[i]]
            pivots[i] = j
            ri, rj = current[i], current[j]
            current[i], current[j] = rj, ri
            where[rj], where[ri] = i, j
        return packed, pivots, permutation
    if operand.size == 0:
        batch = operand.shape[:-2]
        return [operand.copy(), np.zeros(batch + (min(m, n),), np.int32),
                np.broadcast_to(np.arange(m, dtype=np.int32), batch + (m,)).copy()]
    with np.errstate(all="ignore"):
        lu, pivots, perm = _per_matrix(one, operand)
    return [lu.astype(operand.dtype), pivots.astype(np.int32), perm.astype(np.int32)]


def _lu_jvp(primals, tangents):
    # For square A: P A = L U. With X = L^-1 P dA U^-1, dL = L strict_lower(X) and
    # dU = upper(X) U; the packed output's tangent is dL + dU.
    (a,), (da,) = primals, tangents
    lu, pivots, perm = lu_p.bind(a)
    outs = [lu, pivots, perm]
    zero_ints = [Zero.from_value(pivots), Zero.from_value(perm)]
    if isinstance(da, Zero):
        return outs, [Zero.from_value(lu)] + zero_ints
    m, n = get_aval(a).shape[-2:]
    if m != n:
        raise NotImplementedError("differentiation of lu for non-square matrices is not "
                                  "supported")
    # P dA as a product with the one-hot permutation matrix P[i, j] = (perm[i] == j)
    nd = get_aval(a).ndim
    rows = structural.broadcast_in_dim(perm, get_aval(a).shape, tuple(range(nd - 1)))
    cols = structural.broadcast_in_dim(np.arange(m, dtype=np.int32), get_aval(a).shape, (nd - 1,))
    p = ew.convert_element_type(ew.eq(rows, cols), get_aval(a).dtype)
    l = ew.add(_masked(lu, np.tril(np.ones((m, m)), -1)), _const_matrix(np.eye(m), lu))
    x = triangular_solve(l, _matmul(p, da), left_side=True, lower=True, unit_diagonal=True)
    x = triangular_solve(lu, x, left_side=False, lower=False)
    dl = _matmul(l, _masked(x, np.tril(np.ones((m, m)), -1)))
    du = _matmul(_masked(x, np.triu(np.ones((m, m)))), _masked(lu, np.triu(np.ones((m, m)))))
    return outs, [ew.add(dl, du)] + zero_ints


lu_p.jvp = _lu_jvp
_decomposition_batch(lu_p)


def lu(x):
    """LU decomposition with partial pivoting: returns ``(lu, pivots, permutation)`` where
    ``lu`` packs the unit-lower ``L`` (below the diagonal) and ``U``, and
    ``x[permutation] == L @ U``.

    Example::

        lu_, piv, perm = lu(jnp.array([[1., 2.], [3., 4.]]))   # perm == [1, 0]
    """
    return tuple(lu_p.bind(x))


# =============================================================================================
# qr
# =============================================================================================

qr_p = Primitive("qr", multiple_results=True)


@qr_p.def_abstract_eval
def _qr_rule(operand, *, full_matrices):
    _matrix_rule_check("qr", operand, square=False)
    m, n = operand.shape[-2:]
    batch = operand.shape[:-2]
    k = m if full_matrices else min(m, n)
    return [ShapedArray(batch + (m, k), operand.dtype), ShapedArray(batch + (k, n), operand.dtype)]


@qr_p.def_impl
def _qr_impl(operand, *, full_matrices):
    q, r = np.linalg.qr(operand, mode="complete" if full_matrices else "reduced")
    return [q.astype(operand.dtype), r.astype(operand.dtype)]


def _qr_jvp(primals, tangents, *, full_matrices):
    # A = QR. With M = Q^H dA R^-1 and w = strict_lower(M) - strict_lower(M)^H
    # (Q^H dQ is skew): dQ = Q w + (dA - Q Q^H dA) R^-1, dR = (Q^H dA - w R).
    (a,), (da,) = primals, tangents
    q, r = qr_p.bind(a, full_matrices=full_matrices)
    if isinstance(da, Zero):
        return [q, r], [Zero.from_value(q), Zero.from_value(r)]
    m, n = get_aval(a).shape[-2:]
    if m < n or (full_matrices and m > n):
        raise NotImplementedError("differentiation of qr is supported for m >= n with "
                                  "reduced matrices (full_matrices=False, or square inputs)")
    qt_da = _matmul(_H(q), da)
    da_rinv = triangular_solve(r, da, left_side=False, lower=False)
    m_mat = triangular_solve(r, qt_da, left_side=False, lower=False)
    low = _masked(m_mat, np.tril(np.ones((n, n)), -1))
    w = ew.sub(low, _H(low))
    dq = ew.add(_matmul(q, w), ew.sub(da_rinv, _matmul(q, _matmul(_H(q), da_rinv))))
    dr = ew.sub(qt_da, _matmul(w, r))
    return [q, r], [dq, dr]


qr_p.jvp = _qr_jvp
_decomposition_batch(qr_p)


def qr(x, full_matrices: bool = True):
    """QR decomposition ``x = q @ r`` (``q`` with orthonormal columns, ``r`` upper
    triangular).

    Example::

        q, r = qr(jnp.eye(3), full_matrices=False)
    """
    return tuple(qr_p.bind(x, full_matrices=bool(full_matrices)))


# =============================================================================================
# eigh
# =============================================================================================

eigh_p = Primitive("eigh", multiple_results=True)


@eigh_p.def_abstract_eval
def _eigh_rule(operand, *, lower, sort_eigenvalues=True):
    _matrix_rule_check("eigh", operand)
    return [ShapedArray(operand.shape, operand.dtype),
            ShapedArray(operand.shape[:-1], _real_dtype(operand.dtype))]


@eigh_p.def_impl
def _eigh_impl(operand, *, lower, sort_eigenvalues=True):
    w, v = np.linalg.eigh(operand, UPLO="L" if lower else "U")
    return [v.astype(operand.dtype), w.astype(_real_dtype(operand.dtype))]


def _eigh_jvp(primals, tangents, *, lower, sort_eigenvalues=True):
    # With S = V^H dA V: dw = real(diag(S)); dV = V (F * S), F_ij = 1 / (w_j - w_i) off the
    # diagonal (distinct eigenvalues assumed) and 0 on it.
    (a,), (da,) = primals, tangents
    v, w = eigh_p.bind(a, lower=lower, sort_eigenvalues=sort_eigenvalues)
    if isinstance(da, Zero):
        return [v, w], [Zero.from_value(v), Zero.from_value(w)]
    n = get_aval(a).shape[-1]
    s = _matmul(_H(v), _matmul(da, v))
    aval_w = get_aval(w)
    w_i = structural.broadcast_in_dim(w, aval_w.shape + (n,), tuple(range(aval_w.ndim)))
    w_j = structural.broadcast_in_dim(w, aval_w.shape + (n,),
                                      tuple(range(aval_w.ndim - 1)) + (aval_w.ndim,))
    eye = _const_matrix(np.eye(n), w_i)
    f = ew.sub(ew.div(_const_scalar(1.0, w_i), ew.add(eye, ew.sub(w_j, w_i))), eye)
    f = ew.convert_element_type(f, get_aval(a).dtype) if get_aval(a).dtype != aval_w.dtype else f
    dv = _matmul(v, ew.mul(f, s))
    dw = _diagonal(s)
    if _dtypes.is_complex(get_aval(dw).dtype):
        dw = ew.real(dw)
    return [v, w], [dv, dw]


eigh_p.jvp = _eigh_jvp
_decomposition_batch(eigh_p)


def eigh(x, lower: bool = True, symmetrize_input: bool = True, sort_eigenvalues: bool = True):
    """Eigendecomposition of a Hermitian matrix: returns ``(v, w)`` with ``x @ v = v * w``,
    eigenvalues ascending. Only one triangle is read unless ``symmetrize_input``.

    Example::

        v, w = eigh(jnp.array([[2., 1.], [1., 2.]]))   # w == [1., 3.]
    """
    if symmetrize_input:
        x = ew.mul(ew.add(x, _H(x)), _const_scalar(0.5, x))
    return tuple(eigh_p.bind(x, lower=bool(lower), sort_eigenvalues=bool(sort_eigenvalues)))


# =============================================================================================
# svd
# =============================================================================================

svd_p = Primitive("svd", multiple_results=True)


@svd_p.def_abstract_eval
def _svd_rule(operand, *, full_matrices, compute_uv):
    _matrix_rule_check("svd", operand, square=False)
    m, n = operand.shape[-2:]
    batch, k = operand.shape[:-2], min(m, n)
    s = ShapedArray(batch + (k,), _real_dtype(operand.dtype))
    if not compute_uv:
        return [s]
    u_cols, vt_rows = (m, n) if full_matrices else (k, k)
    return [s, ShapedArray(batch + (m, u_cols), operand.dtype),
            ShapedArray(batch + (vt_rows, n), operand.dtype)]


@svd_p.def_impl
def _svd_impl(operand, *, full_matrices, compute_uv):
    real = _real_dtype(operand.dtype)
    if not compute_uv:
        return [np.linalg.svd(operand, compute_uv=False).astype(real)]
    u, s, vt = np.linalg.svd(operand, full_matrices=full_matrices)
    return [s.astype(real), u.astype(operand.dtype), vt.astype(operand.dtype)]


def _svd_jvp(primals, tangents, *, full_matrices, compute_uv):
    # A = U S V^H (reduced). With P = U^H dA V: dS = real(diag(P));
    # dU = U (F * (P S + S P^H)) + (I - U U^H) dA V S^-1,
    # dV = V (F * (S P + P^H S)) + (I - V V^H) dA^H U S^-1, F_ij = 1 / (s_j^2 - s_i^2).
    (a,), (da,) = primals, tangents
    outs = svd_p.bind(a, full_matrices=full_matrices, compute_uv=compute_uv)
    if isinstance(da, Zero):
        return outs, [Zero.from_value(o) for o in outs]
    m, n = get_aval(a).shape[-2:]
    s, u, vt = svd_p.bind(a, full_matrices=False, compute_uv=True)
    v = _H(vt)
    p = _matmul(_H(u), _matmul(da, v))
    ds = _diagonal(p)
    if _dtypes.is_complex(get_aval(ds).dtype):
        ds = ew.real(ds)
    if not compute_uv:
        return outs, [ds]
    if full_matrices and m != n:
        raise NotImplementedError("differentiation of the singular vectors of svd with "
                                  "full_matrices=True is supported only for square matrices")
    if _dtypes.is_complex(get_aval(a).dtype):
        raise NotImplementedError("differentiation of the singular vectors of a complex svd "
                                  "is not supported")
    k = min(m, n)
    aval_s = get_aval(s)
    s_sq = ew.mul(s, s)
    s_i = structural.broadcast_in_dim(s_sq, aval_s.shape + (k,), tuple(range(aval_s.ndim)))
    s_j = structural.broadcast_in_dim(s_sq, aval_s.shape + (k,),
                                      tuple(range(aval_s.ndim - 1)) + (aval_s.ndim,))
    eye = _const_matrix(np.eye(k), s_i)
    f = ew.sub(ew.div(_const_scalar(1.0, s_i), ew.add(eye, ew.sub(s_j, s_i))), eye)
    p_s = _row_scale(p, s)           # P S
    s_p = _col_scale(p, s)           # S P
    du = _matmul(u, ew.mul(f, ew.add(p_s, _mT(p_s))))   # S P^H = (P S)^H
    dv = _matmul(v, ew.mul(f, ew.add(s_p, _mT(s_p))))   # P^H S = (S P)^H
    inv_s = ew.div(_const_scalar(1.0, s), s)
    if m > k:
        da_v = _row_scale(_matmul(da, v), inv_s)
        du = ew.add(du, ew.sub(da_v, _matmul(u, _matmul(_H(u), da_v))))
    if n > k:
        dat_u = _row_scale(_matmul(_H(da), u), inv_s)
        dv = ew.add(dv, ew.sub(dat_u, _matmul(v, _matmul(_H(v), dat_u))))
    return outs, [ds, du, _H(dv)]


svd_p.jvp = _svd_jvp
_decomposition_batch(svd_p)


def svd(x, full_matrices: bool = True, compute_uv: bool = True):
    """Singular value decomposition. Returns ``(u, s, vh)`` with ``x = u @ diag(s) @ vh``
    (``s`` descending), or only ``s`` when ``compute_uv`` is False.

    Example::

        svd(jnp.array([[3., 0.], [0., 4.]]), compute_uv=False)   # [4., 3.]
    """
    outs = svd_p.bind(x, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv))
    if not compute_uv:
        return outs[0]
    s, u, vh = outs
    return u, s, vh


# =============================================================================================
# Precision, dot algorithms and dimension-number types
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


# =============================================================================================
# Convolution helpers
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
        from functrans.primitives.implicit import _conv_transpose_padding  # implicit imports linalg
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
# ragged_dot
# =============================================================================================


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


__all__ = ["batch_matmul", "cholesky", "conv", "conv_dimension_numbers",
           "conv_general_dilated", "conv_general_dilated_local",
           "conv_general_dilated_patches", "conv_general_permutations",
           "conv_general_shape_tuple", "conv_shape_tuple", "conv_transpose_shape_tuple",
           "ConvDimensionNumbers", "ConvGeneralDilatedDimensionNumbers", "dot", "dot_general",
           "DotAlgorithm", "DotAlgorithmPreset", "DotDimensionNumbers", "eigh", "lu",
           "padtype_to_pads", "Precision", "PrecisionLike", "qr", "ragged_dot",
           "reduce_window_shape_tuple", "svd", "triangular_solve"]
