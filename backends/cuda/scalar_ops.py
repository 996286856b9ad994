"""CUDA C for each elementwise primitive, keyed by the ``Primitive`` object.

One row per primitive: a function that returns the C expression computing one element from
its operands' C expressions. The kernels in :mod:`codegen` bind every value to a ``const``
local, so the operands here are always plain names or literals and may be repeated freely.

Semantics follow the reference implementations in ``functrans/primitives/elementwise.py``:
integer division by zero gives -1 and the remainder the dividend, shifts past the bit width
give 0 (arithmetic right shifts give the sign), float-to-int conversion truncates, saturates
and maps NaN to 0, ``max``/``min`` propagate NaN. Signed integer arithmetic is done in the
unsigned type of the same width, because signed overflow is undefined in C++ while the
reference wraps.

Registers: ``bool`` is ``bool``; float16 and bfloat16 are computed in ``float`` and rounded
back to their precision after every operation (the reference computes them in float32 and
rounds each result), stored as ``unsigned short`` bit patterns so the generated code needs
no half-precision headers.

    >>> supports(ew.exp_p, {}, [np.dtype("float32")], np.dtype("float32"))
    True
    >>> emit(None, ew.add_p, {}, ["a", "b"], [np.dtype("int32")] * 2, np.dtype("int32"))
    '((int)((unsigned int)a + (unsigned int)b))'
"""
from __future__ import annotations

import math

import numpy as np

from functrans import _dtypes
from functrans.backends.compiler.scalar_tables import call_emitter, table_supports
from functrans.primitives import elementwise as ew

BFLOAT16 = _dtypes.bfloat16
FLOAT16 = np.dtype(np.float16)

SUPPORTED_DTYPES = {np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64,
                                           np.uint8, np.uint16, np.uint32, np.uint64,
                                           np.float16, np.float32, np.float64)} | {BFLOAT16}

_INT_TYPES = {
    np.dtype(np.int8): "signed char", np.dtype(np.int16): "short", np.dtype(np.int32): "int",
    np.dtype(np.int64): "long long", np.dtype(np.uint8): "unsigned char",
    np.dtype(np.uint16): "unsigned short", np.dtype(np.uint32): "unsigned int",
    np.dtype(np.uint64): "unsigned long long",
}


def is_float(dtype) -> bool:
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype == BFLOAT16


def is_low_precision(dtype) -> bool:
    return np.dtype(dtype) in (FLOAT16, BFLOAT16)


def is_signed(dtype) -> bool:
    return np.dtype(dtype).kind == "i"


def reg_type(dtype) -> str:
    """The C type of a value of ``dtype`` in a register."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return "bool"
    if dtype in _INT_TYPES:
        return _INT_TYPES[dtype]
    if dtype == np.float64:
        return "double"
    if dtype in (np.float32, FLOAT16, BFLOAT16):
        return "float"
    raise NotImplementedError(f"cuda backend: dtype {dtype.name} is not supported in kernels")


def mem_type(dtype) -> str:
    """The C type of an element of ``dtype`` in memory."""
    return "unsigned short" if is_low_precision(dtype) else reg_type(dtype)


def storage_dtype(dtype) -> np.dtype:
    """The NumPy/CuPy dtype a buffer of ``dtype`` is held as (bfloat16 as its bits)."""
    dtype = np.dtype(dtype)
    return np.dtype(np.uint16) if dtype == BFLOAT16 else dtype


def _wide_unsigned(dtype) -> str:
    """Unsigned type that integer arithmetic of ``dtype`` is done in: at least 32 bits, so
    that C's promotion of narrow types to ``int`` cannot overflow a multiplication."""
    return "unsigned long long" if np.dtype(dtype).itemsize == 8 else "unsigned int"


def _same_width(dtype, signed: bool) -> str:
    return _INT_TYPES[np.dtype(f"{'i' if signed else 'u'}{np.dtype(dtype).itemsize}")]


def _bits(dtype) -> int:
    return 8 * np.dtype(dtype).itemsize


# =============================================================================================
# Literals and conversions
# =============================================================================================


def literal(value, dtype) -> str:
    """A C literal of ``value`` as a register of ``dtype``; exact for every value."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return "true" if bool(value) else "false"
    if dtype in _INT_TYPES:
        v = int(np.asarray(value).astype(dtype))
        if dtype == np.int64:
            return "(-9223372036854775807LL - 1)" if v == -2 ** 63 else f"{v}LL"
        if dtype == np.uint64:
            return f"{v}ull"
        if dtype == np.uint32:
            return f"{v}u"
        if dtype == np.int32:
            return "(-2147483647 - 1)" if v == -2 ** 31 else str(v)
        return f"(({_INT_TYPES[dtype]}){v})"
    if dtype == np.float64:
        v = float(np.asarray(value).astype(np.float64))
        if math.isfinite(v):
            return repr(v)
        bits = int(np.array(v, np.float64).view(np.uint64))
        return f"ft_f64({bits:#x}ull)"
    # float32, and float16/bfloat16 values (exact in float)
    v = np.float32(np.asarray(value).astype(dtype).astype(np.float32))
    if math.isfinite(float(v)):
        return f"{float(v)!r}f"
    return f"ft_f32({int(v.view(np.uint32)):#x}u)"


def round_to(dtype, expr: str) -> str:
    """``expr`` (a float) rounded to the precision of ``dtype`` (a no-op above float16)."""
    dtype = np.dtype(dtype)
    if dtype == FLOAT16:
        return f"ft_round_h({expr})"
    if dtype == BFLOAT16:
        return f"ft_round_bf({expr})"
    return expr


def convert(x: str, src, dst) -> str:
    """Cast register value ``x`` from ``src`` to ``dst`` with the reference semantics."""
    src, dst = np.dtype(src), np.dtype(dst)
    if src == dst:
        return x
    rt = reg_type(dst)
    if dst == np.bool_:
        return f"({x} != 0)"
    if src == np.bool_:
        return round_to(dst, f"(({rt})({x} ? 1 : 0))")
    if is_float(src) and is_float(dst):
        return round_to(dst, f"(({rt}){x})")
    if is_float(src):
        # saturating truncation, NaN -> 0: the bounds are powers of two, exact in any float
        f = reg_type(src)
        suffix = "f" if f == "float" else ""
        bits = _bits(dst)
        lo = f"-{2.0 ** (bits - 1)!r}{suffix}" if is_signed(dst) else f"0.0{suffix}"
        hi = f"{2.0 ** (bits - 1 if is_signed(dst) else bits)!r}{suffix}"
        info = np.iinfo(dst)
        return (f"(({x}) != ({x}) ? ({rt})0 : ({x}) <= {lo} ? {literal(info.min, dst)} : "
                f"({x}) >= {hi} ? {literal(info.max, dst)} : ({rt})({x}))")
    if is_float(dst):
        return round_to(dst, f"(({rt}){x})")
    return f"(({rt}){x})"


# =============================================================================================
# The table
# =============================================================================================

# CUDA math functions: float version (the double one drops the ``f``)
_FLOAT_MATH = {
    ew.exp_p: "expf", ew.exp2_p: "exp2f", ew.log_p: "logf", ew.log1p_p: "log1pf",
    ew.expm1_p: "expm1f", ew.tanh_p: "tanhf", ew.sin_p: "sinf", ew.cos_p: "cosf",
    ew.tan_p: "tanf", ew.asin_p: "asinf", ew.acos_p: "acosf", ew.atan_p: "atanf",
    ew.sinh_p: "sinhf", ew.cosh_p: "coshf", ew.asinh_p: "asinhf", ew.acosh_p: "acoshf",
    ew.atanh_p: "atanhf", ew.sqrt_p: "sqrtf", ew.cbrt_p: "cbrtf", ew.erf_p: "erff",
    ew.erfc_p: "erfcf", ew.erf_inv_p: "erfinvf", ew.lgamma_p: "lgammaf", ew.floor_p: "floorf",
    ew.ceil_p: "ceilf",
}


def _math_name(fname: str, dtype) -> str:
    return fname[:-1] if np.dtype(dtype) == np.float64 else fname


def _float_math(fname):
    def emit(ctx, args, in_dtypes, out_dtype, params):
        return f"{_math_name(fname, in_dtypes[0])}({args[0]})"
    return emit


def _float_binary(fname):
    def emit(ctx, args, in_dtypes, out_dtype, params):
        return f"{_math_name(fname, in_dtypes[0])}({args[0]}, {args[1]})"
    return emit


def _one(dtype) -> str:
    return literal(1, dtype)


def _neg(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    d = in_dtypes[0]
    if is_float(d):
        return f"(-{x})"
    return f"(({reg_type(d)})(0u - ({_wide_unsigned(d)}){x}))"


def _sign(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    d = in_dtypes[0]
    rt = reg_type(d)
    if is_float(d):
        # NaN stays NaN, both zeros give +0
        return f"({x} > 0 ? ({rt})1 : {x} < 0 ? ({rt})-1 : {x} == 0 ? ({rt})0 : {x})"
    if is_signed(d):
        return f"(({rt})(({x} > 0) - ({x} < 0)))"
    return f"(({rt})({x} > 0))"


def _round(ctx, args, in_dtypes, out_dtype, params):
    # rounding_method 0: half away from zero (roundf); 1: half to even (rintf)
    fname = "roundf" if params.get("rounding_method", 0) == 0 else "rintf"
    return f"{_math_name(fname, in_dtypes[0])}({args[0]})"


def _is_finite(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    d = in_dtypes[0]
    inf = literal(np.inf, np.float64 if d == np.float64 else np.float32)
    return f"({_math_name('fabsf', d)}({x}) < {inf})"


def _rsqrt(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    d = in_dtypes[0]
    return f"({_one(d)} / {_math_name('sqrtf', d)}({x}))"


def _logistic(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    d = in_dtypes[0]
    return f"({_one(d)} / ({_one(d)} + {_math_name('expf', d)}(-{x})))"


def _digamma(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    if in_dtypes[0] == np.float64:
        return f"ft_digamma({x})"
    return f"((float)ft_digamma((double){x}))"


def _abs(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    d = in_dtypes[0]
    if is_float(d):
        return f"{_math_name('fabsf', d)}({x})"
    if is_signed(d):
        return f"({x} < 0 ? {_neg(ctx, [x], in_dtypes, out_dtype, params)} : {x})"
    return x


def _square(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    return _arith("*")(ctx, [x, x], in_dtypes * 2, out_dtype, params)


def _not(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    d = in_dtypes[0]
    if d == np.bool_:
        return f"(!{x})"
    return f"(({reg_type(d)})~{x})"


def _popcount(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    d = in_dtypes[0]
    u = _same_width(d, signed=False)
    fn = "ft_popc64" if _bits(d) == 64 else "ft_popc32"
    return f"(({reg_type(d)}){fn}(({u}){x}))"


def _clz(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    d = in_dtypes[0]
    u = _same_width(d, signed=False)
    if _bits(d) == 64:
        return f"(({reg_type(d)})ft_clz64(({u}){x}))"
    return f"(({reg_type(d)})(ft_clz32(({u}){x}) - {32 - _bits(d)}))"


def _identity(ctx, args, in_dtypes, out_dtype, params):
    return args[0]


def _imag(ctx, args, in_dtypes, out_dtype, params):
    return literal(0, out_dtype)


def _integer_pow(ctx, args, in_dtypes, out_dtype, params):
    """Square-and-multiply, one statement per product (exponents are small constants)."""
    x, = args
    y = int(params["y"])
    d = in_dtypes[0]
    if y == 0:
        return _one(d)
    mul = _arith("*")
    acc, base, n = None, x, abs(y)
    while n:
        if n & 1:
            acc = base if acc is None else ctx.bind(d, mul(ctx, [acc, base], [d, d], d, {}))
        n >>= 1
        if n:
            base = ctx.bind(d, mul(ctx, [base, base], [d, d], d, {}))
    if y < 0:
        return f"({_one(d)} / {acc})"
    return acc


def _arith(op):
    def emit(ctx, args, in_dtypes, out_dtype, params):
        x, y = args
        d = in_dtypes[0]
        if is_float(d):
            return f"({x} {op} {y})"
        u = _wide_unsigned(d)
        return f"(({reg_type(d)})(({u}){x} {op} ({u}){y}))"
    return emit


def _div(ctx, args, in_dtypes, out_dtype, params):
    x, y = args
    d = in_dtypes[0]
    if is_float(d):
        return f"({x} / {y})"
    rt = reg_type(d)
    if is_signed(d):
        # y == -1 would trap on INT_MIN / -1: negate (wrapping) instead
        neg = _neg(ctx, [x], [d], d, {})
        return f"({y} == 0 ? ({rt})-1 : {y} == ({rt})-1 ? {neg} : ({rt})({x} / {y}))"
    return f"({y} == 0 ? ({rt})-1 : ({rt})({x} / {y}))"


def _rem(ctx, args, in_dtypes, out_dtype, params):
    x, y = args
    d = in_dtypes[0]
    if is_float(d):
        return f"{_math_name('fmodf', d)}({x}, {y})"
    rt = reg_type(d)
    if is_signed(d):
        return f"({y} == 0 ? {x} : {y} == ({rt})-1 ? ({rt})0 : ({rt})({x} % {y}))"
    return f"({y} == 0 ? {x} : ({rt})({x} % {y}))"


def _extremum(which):
    def emit(ctx, args, in_dtypes, out_dtype, params):
        x, y = args
        d = in_dtypes[0]
        if is_float(d):
            return f"ft_f{which}({x}, {y})"
        if d == np.bool_:
            return f"({x} || {y})" if which == "max" else f"({x} && {y})"
        return f"({x} {'>' if which == 'max' else '<'} {y} ? {x} : {y})"
    return emit


def _bitwise(op, bool_op):
    def emit(ctx, args, in_dtypes, out_dtype, params):
        x, y = args
        d = in_dtypes[0]
        if d == np.bool_:
            return f"({x} {bool_op} {y})"
        return f"(({reg_type(d)})({x} {op} {y}))"
    return emit


def _in_range_shift(y: str, d) -> str:
    # an unsigned count is never negative; saying so avoids a compiler warning
    low = f"{y} >= 0 && " if is_signed(d) else ""
    return f"({low}{y} < {_bits(d)})"


def _shift_left(ctx, args, in_dtypes, out_dtype, params):
    x, y = args
    d = in_dtypes[0]
    rt = reg_type(d)
    return f"({_in_range_shift(y, d)} ? ({rt})(({_wide_unsigned(d)}){x} << {y}) : ({rt})0)"


def _shift_right_logical(ctx, args, in_dtypes, out_dtype, params):
    x, y = args
    d = in_dtypes[0]
    rt = reg_type(d)
    u = _same_width(d, signed=False)
    return f"({_in_range_shift(y, d)} ? ({rt})(({u}){x} >> {y}) : ({rt})0)"


def _shift_right_arithmetic(ctx, args, in_dtypes, out_dtype, params):
    x, y = args
    d = in_dtypes[0]
    s = _same_width(d, signed=True)
    return f"(({reg_type(d)})(({s}){x} >> ({_in_range_shift(y, d)} ? {y} : {_bits(d) - 1})))"


def _compare(op):
    def emit(ctx, args, in_dtypes, out_dtype, params):
        return f"({args[0]} {op} {args[1]})"
    return emit


def _convert(ctx, args, in_dtypes, out_dtype, params):
    return convert(args[0], in_dtypes[0], out_dtype)


def _select_n(ctx, args, in_dtypes, out_dtype, params):
    which, *cases = args
    if len(cases) == 1:
        return cases[0]
    if in_dtypes[0] == np.bool_:
        return f"({which} ? {cases[1]} : {cases[0]})"
    # an integer selector is clipped into range, as the reference does
    expr = cases[0]
    for k in range(1, len(cases)):
        expr = f"({which} >= {k} ? {cases[k]} : {expr})"
    return expr


def _clamp(ctx, args, in_dtypes, out_dtype, params):
    lo, x, hi = args
    d = in_dtypes[1]
    mx, mn = _extremum("max"), _extremum("min")
    inner = ctx.bind(d, mx(ctx, [x, lo], [d, d], d, {}))
    return mn(ctx, [inner, hi], [d, d], d, {})


EMITTERS = {
    ew.neg_p: _neg, ew.sign_p: _sign, ew.round_p: _round, ew.is_finite_p: _is_finite,
    ew.rsqrt_p: _rsqrt, ew.logistic_p: _logistic, ew.digamma_p: _digamma, ew.abs_p: _abs,
    ew.square_p: _square, ew.not_p: _not, ew.population_count_p: _popcount, ew.clz_p: _clz,
    ew.real_p: _identity, ew.conj_p: _identity, ew.imag_p: _imag,
    ew.integer_pow_p: _integer_pow,
    ew.add_p: _arith("+"), ew.sub_p: _arith("-"), ew.mul_p: _arith("*"), ew.div_p: _div,
    ew.rem_p: _rem, ew.pow_p: _float_binary("powf"), ew.max_p: _extremum("max"),
    ew.min_p: _extremum("min"), ew.atan2_p: _float_binary("atan2f"),
    ew.nextafter_p: _float_binary("nextafterf"),
    ew.and_p: _bitwise("&", "&&"), ew.or_p: _bitwise("|", "||"), ew.xor_p: _bitwise("^", "!="),
    ew.shift_left_p: _shift_left, ew.shift_right_logical_p: _shift_right_logical,
    ew.shift_right_arithmetic_p: _shift_right_arithmetic,
    ew.eq_p: _compare("=="), ew.ne_p: _compare("!="), ew.lt_p: _compare("<"),
    ew.le_p: _compare("<="), ew.gt_p: _compare(">"), ew.ge_p: _compare(">="),
    ew.convert_element_type_p: _convert, ew.select_n_p: _select_n, ew.clamp_p: _clamp,
}
for _primitive, _fname in _FLOAT_MATH.items():
    EMITTERS[_primitive] = _float_math(_fname)

# the scalar operation of each combining monoid that has one (reductions, scatters)
MONOID_OPS = {"add": ew.add_p, "mul": ew.mul_p, "min": ew.min_p, "max": ew.max_p}

# Rows only defined here for real floats (complex buffers are not supported: they fall back).
_FLOAT_ONLY = set(_FLOAT_MATH) | {ew.round_p, ew.is_finite_p, ew.rsqrt_p, ew.logistic_p,
                                  ew.digamma_p, ew.pow_p, ew.atan2_p, ew.nextafter_p, ew.real_p,
                                  ew.imag_p, ew.conj_p}
# nextafter steps to the neighbouring float32, not float16/bfloat16: those fall back.
_DTYPE_LIMITS = {ew.nextafter_p: lambda dtype: not is_low_precision(dtype)}
# Results already exact in the operand's precision: no rounding step needed.
_EXACT = {ew.neg_p, ew.abs_p, ew.sign_p, ew.floor_p, ew.ceil_p, ew.round_p, ew.real_p,
          ew.conj_p, ew.imag_p, ew.max_p, ew.min_p, ew.select_n_p, ew.clamp_p,
          ew.convert_element_type_p, ew.eq_p, ew.ne_p, ew.lt_p, ew.le_p, ew.gt_p, ew.ge_p,
          ew.is_finite_p}


# supports(primitive, params, in_dtypes, out_dtype): whether ``primitive`` on these dtypes
# has CUDA code here
supports = table_supports(EMITTERS, SUPPORTED_DTYPES, _FLOAT_ONLY, is_float, _DTYPE_LIMITS)


class _NoStatements:
    """Context for :func:`emit` outside a kernel: multi-statement rows inline their values."""

    def bind(self, dtype, expr: str) -> str:
        return expr


def emit(ctx, primitive, params: dict, args, in_dtypes, out_dtype) -> str:
    """The C expression of ``primitive`` on operand expressions ``args``.

    ``ctx.bind(dtype, expr)`` (``ctx`` may be None) binds an intermediate to a local and
    returns its name; rows with several steps (``integer_pow``, ``clamp``) use it."""
    expr = call_emitter(EMITTERS, ctx or _NoStatements(), primitive, params, args, in_dtypes,
                        out_dtype)
    if is_low_precision(out_dtype) and primitive not in _EXACT:
        expr = round_to(np.dtype(out_dtype), expr)
    return expr
