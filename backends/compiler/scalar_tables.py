"""What every backend's scalar-op table shares: which of its rows apply to which dtypes, and
how a row is called.

A backend's ``scalar_ops`` module keeps one table, ``EMITTERS``: primitive ->
``emitter(ctx, args, in_dtypes, out_dtype, params)``, the scalar code of one element from
its operands' (``ctx``: the backend's emitting context, such as the LLVM builder or the C
statement list; ``args``: the operands' values, such as LLVM registers or C expressions).
Besides the table, the backend declares the dtypes its kernels hold (``SUPPORTED_DTYPES``),
the rows that exist for real floats only (``_FLOAT_ONLY``) and, per row, any dtype its code
does not cover.

    >>> supports = table_supports(EMITTERS, SUPPORTED_DTYPES, _FLOAT_ONLY, is_float)  # doctest: +SKIP
    >>> supports(ew.exp_p, {}, [np.dtype("float32")], np.dtype("float32"))       # doctest: +SKIP
    True
"""
from __future__ import annotations

import numpy as np


def table_supports(emitters: dict, supported_dtypes, float_only, is_float,
                   dtype_limits: dict | None = None):
    """The ``supports(primitive, params, in_dtypes, out_dtype)`` of a backend's table: the
    primitive has a row, every dtype is one the backend's kernels hold, a float-only row
    sees real floats (and booleans, as predicates), and each dtype passes the row's own
    limit (``dtype_limits``: primitive -> ``allowed(dtype)``) if it has one."""
    dtype_limits = dtype_limits or {}

    def supports(primitive, params: dict, in_dtypes, out_dtype) -> bool:
        if primitive not in emitters:
            return False
        dtypes = [np.dtype(d) for d in in_dtypes] + [np.dtype(out_dtype)]
        if any(d not in supported_dtypes for d in dtypes):
            return False
        if primitive in float_only and not all(is_float(d) for d in dtypes if d != np.bool_):
            return False
        allowed = dtype_limits.get(primitive)
        return allowed is None or all(allowed(d) for d in dtypes)

    return supports


def call_emitter(emitters: dict, ctx, primitive, params: dict, args, in_dtypes, out_dtype):
    """Row ``primitive`` of ``emitters`` on ``args``, with its dtypes as NumPy dtypes."""
    return emitters[primitive](ctx, list(args), [np.dtype(d) for d in in_dtypes],
                               np.dtype(out_dtype), dict(params))
