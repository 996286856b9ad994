"""The dot product primitive ``dot_general`` and what builds on it: ``dot``,
``batch_matmul``, ``ragged_dot``, and the types that describe a product (``Precision``,
the dot algorithms, ``DotDimensionNumbers``).

``dot_general``'s shape rule, reference implementation, JVP, transpose and batching rule
are declared together below it.
"""
from __future__ import annotations

import enum
from typing import Any, Callable, NamedTuple, Sequence, Tuple, Union

import numpy as np

from functrans import _dtypes
from functrans.core import Primitive, ShapedArray, get_aval
from functrans.interpreters import ad
from functrans.primitives import elementwise, reductions, structural
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


def _dot_general_cotangent(ct, lhs_aval, rhs, dimension_numbers, precision,
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


def _dot_general_transpose_lhs(ct, lhs, rhs, *, dimension_numbers, precision=None,
                               preferred_element_type=None):
    return _dot_general_cotangent(ct, lhs.aval, rhs, dimension_numbers, precision,
                                  preferred_element_type)


def _dot_general_transpose_rhs(ct, lhs, rhs, *, dimension_numbers, precision=None,
                               preferred_element_type=None):
    # The rhs cotangent is the lhs cotangent of the swapped product rhs . lhs, whose output
    # has the two free groups in the other order.
    (lc, rc), (lb, rb) = dimension_numbers
    swapped = ((rc, lc), (rb, lb))
    return _dot_general_cotangent(ct, rhs.aval, lhs, swapped, precision, preferred_element_type,
                                  swapped=True)


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


ad.defbilinear(dot_general_p, _dot_general_transpose_lhs, _dot_general_transpose_rhs)
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


# ``out_sharding=`` is carried out by the sharding layer, which sits above the primitives:
# it registers its constraint here when it is imported (functrans.sharding._constraints).
_constrain_sharding: Callable | None = None


def register_sharding_constraint(constrain: Callable) -> None:
    """Register ``constrain(x, sharding)``, which places ``out_sharding=`` results."""
    global _constrain_sharding
    _constrain_sharding = constrain


def place_result(out, out_sharding):
    """``out`` split as ``out_sharding`` (JAX's ``out_sharding=`` argument of products and
    convolutions), or as it is when that is None."""
    if out_sharding is None:
        return out
    return _constrain_sharding(out, out_sharding)


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
# Precision, dot algorithms and dimension numbers
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



__all__ = ["batch_matmul", "dot", "dot_general", "DotAlgorithm", "DotAlgorithmPreset",
           "DotDimensionNumbers", "Precision", "PrecisionLike", "ragged_dot"]
