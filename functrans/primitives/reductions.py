"""Reductions over axes: reduce_sum (and the other reductions declared beside it)."""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans.core import Primitive, ShapedArray, get_aval
from functrans.interpreters import ad, batching


def _reduce_rule(name, allow_bool=True):
    def rule(operand, *, axes):
        if any(not 0 <= a < operand.ndim for a in axes) or len(set(axes)) != len(axes):
            raise TypeError(f"{name}: axes {tuple(axes)} are not distinct axes of "
                            f"{operand.str_short()}")
        if not allow_bool and operand.dtype == _dtypes.bool_:
            raise TypeError(f"{name} does not accept boolean operands")
        shape = tuple(s for i, s in enumerate(operand.shape) if i not in axes)
        return ShapedArray(shape, operand.dtype, operand.weak_type)
    return rule


def _reduce_batch(primitive):
    def rule(vals, dims, *, axes):
        (x,), (d,) = vals, dims
        new_axes = tuple(a + (a >= d) for a in axes)
        out_dim = d - sum(a < d for a in axes)
        return primitive.bind(x, axes=new_axes), out_dim
    return rule


reduce_sum_p = Primitive("reduce_sum")
reduce_sum_p.def_abstract_eval(_reduce_rule("reduce_sum"))


@reduce_sum_p.def_impl
def _reduce_sum_impl(operand, *, axes):
    return np.sum(operand, axis=tuple(axes), dtype=operand.dtype)


def _reduce_sum_transpose(ct, operand, *, axes):
    from functrans.primitives import structural
    shape = operand.aval.shape
    kept = tuple(i for i in range(len(shape)) if i not in axes)
    return [structural.broadcast_in_dim(ct, shape, kept)]


ad.deflinear2(reduce_sum_p, _reduce_sum_transpose)
reduce_sum_p.batch = _reduce_batch(reduce_sum_p)


def reduce_sum(operand, axes):
    """Sum over ``axes``."""
    ndim = get_aval(operand).ndim
    axes = tuple(sorted(int(a) % ndim for a in axes)) if ndim else ()
    return reduce_sum_p.bind(operand, axes=axes)
