"""Scalar code for each elementwise primitive, keyed by the ``Primitive`` object.

One row per primitive: a function that emits the LLVM IR computing one element from its
operands' elements. Loops in :mod:`codegen` call these inside their bodies; LLVM then
vectorizes the loop. Semantics follow the primitives' reference implementations in
``functrans/primitives/elementwise.py`` (integer division by zero gives -1, shifts past
the bit width give 0, float-to-int conversion saturates and maps NaN to 0, max/min
propagate NaN, ...).

Registers hold ``bool`` as ``i1``; memory holds it as one byte.

    >>> supports(ew.exp_p, {}, [np.dtype("float32")], np.dtype("float32"))
    True
"""
from __future__ import annotations

import math

import llvmlite.ir as ir
import numpy as np

from functrans.backends.llvm.vector_math import F32, F64, MathLibrary
from functrans.backends.compiler import exprs as E
from functrans.backends.compiler.scalar_tables import call_emitter, table_supports
from functrans.primitives import elementwise as ew

SUPPORTED_DTYPES = {np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64,
                                           np.uint8, np.uint16, np.uint32, np.uint64,
                                           np.float32, np.float64)}


def reg_type(dtype):
    """The LLVM type of a value of ``dtype`` in a register."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return ir.IntType(1)
    if dtype.kind in "iu":
        return ir.IntType(8 * dtype.itemsize)
    if dtype == np.float32:
        return F32
    if dtype == np.float64:
        return F64
    raise NotImplementedError(f"llvm backend: dtype {dtype.name} is not supported in kernels")


def mem_type(dtype):
    """The LLVM type of an element of ``dtype`` in memory."""
    return ir.IntType(8) if np.dtype(dtype) == np.bool_ else reg_type(dtype)


def constant(dtype, value):
    dtype = np.dtype(dtype)
    ty = reg_type(dtype)
    if dtype == np.bool_:
        return ir.Constant(ty, int(bool(value)))
    if dtype.kind in "iu":
        v = int(np.asarray(value).astype(dtype))
        return ir.Constant(ty, v & ((1 << ty.width) - 1))
    return ir.Constant(ty, float(np.asarray(value).astype(dtype)))


def _is_float(d):
    return np.dtype(d).kind == "f"


def _is_signed(d):
    return np.dtype(d).kind == "i"


class ScalarContext:
    """What a scalar emitter needs: the builder and the module's math library.

    In the default (fast) mode, functions whose inline code is accurate only on part of
    their domain append an ``i1`` to ``guards`` that is true where it is not; the kernel
    then reruns in ``exact`` mode (C library calls) if any element needed it."""

    def __init__(self, builder: ir.IRBuilder, math: MathLibrary, exact: bool = False):
        self.b = builder
        self.math = math
        self.exact = exact
        self.guards: list = []

    def intrinsic(self, name, ty, *args):
        return self.math.intrinsic(self.b, name, ty, *args)


# =============================================================================================
# The table
# =============================================================================================

# float functions of the math library (:mod:`vector_math`), which names them as the primitive
_FLOAT_MATH = (ew.exp_p, ew.exp2_p, ew.log_p, ew.log1p_p, ew.expm1_p, ew.tanh_p, ew.logistic_p,
               ew.sin_p, ew.cos_p, ew.tan_p, ew.asin_p, ew.acos_p, ew.atan_p, ew.sinh_p,
               ew.cosh_p, ew.asinh_p, ew.acosh_p, ew.atanh_p, ew.erf_p, ew.erfc_p, ew.lgamma_p,
               ew.cbrt_p)


# float32 sin/cos/tan reduce their argument in float64, accurate for |x| below this
TRIG_FAST_LIMIT = 2.0 ** 26
GUARDED = (ew.sin_p, ew.cos_p, ew.tan_p)


def _float_math(primitive):
    name, guarded = primitive.name, primitive in GUARDED

    def emit(ctx, args, in_dtypes, out_dtype, params):
        x, = args
        if guarded and x.type == F32:
            if ctx.exact:
                return ctx.math.libm(ctx.b, name, in_dtypes[0], x)
            big = ctx.b.fcmp_ordered(">", ctx.intrinsic("llvm.fabs", F32, x),
                                     ir.Constant(F32, TRIG_FAST_LIMIT))
            ctx.guards.append(big)
        return ctx.math.call(ctx.b, name, in_dtypes[0], x)
    return emit


def _lgamma(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    y = ctx.math.libm(ctx.b, "lgamma", in_dtypes[0], x)
    # the C library says +inf at -inf; the reference (SciPy) says -inf
    minus_inf = ir.Constant(x.type, -math.inf)
    return ctx.b.select(ctx.b.fcmp_ordered("==", x, minus_inf), minus_inf, y)


def needs_guard(nodes) -> bool:
    """Whether expression ``nodes`` use a function with a guarded fast path."""
    return any(isinstance(n, E.ScalarExpr) and n.kind == "op" and n.args[0] in GUARDED
               and n.dtype == np.float32 for n in E.postorder(nodes))


def calls_inline_math(nodes) -> bool:
    """Whether expression ``nodes`` call a float32 function of the math library that is
    inline code (not a C library call): a long chain of vector arithmetic per element."""
    return any(isinstance(n, E.ScalarExpr) and n.kind == "op" and n.args[0] in _FLOAT_MATH
               and n.dtype == np.float32 and n.args[0].name in MathLibrary.INLINE_F32
               for n in E.postorder(nodes))


def _float_binary_libm(name):
    def emit(ctx, args, in_dtypes, out_dtype, params):
        return ctx.math.libm(ctx.b, name, in_dtypes[0], *args)
    return emit


def _neg(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    if _is_float(in_dtypes[0]):
        return ctx.b.fneg(x)
    return ctx.b.sub(ir.Constant(x.type, 0), x)


def _sign(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    b, d = ctx.b, in_dtypes[0]
    one, minus, zero = constant(d, 1), constant(d, -1) if _is_signed(d) or _is_float(d) else None, constant(d, 0)
    if _is_float(d):
        # zeros and NaN as x * 0: a signed zero, a NaN, and for a subnormal read as zero
        # (subnormals flushed, see float_mode.py) the zero it reads as, not its bits
        pos = b.select(b.fcmp_ordered(">", x, zero), one, b.fmul(x, zero))
        return b.select(b.fcmp_ordered("<", x, zero), minus, pos)
    if _is_signed(d):
        pos = b.select(b.icmp_signed(">", x, zero), one, zero)
        return b.select(b.icmp_signed("<", x, zero), minus, pos)
    return b.select(b.icmp_unsigned(">", x, zero), one, zero)


def _unary_intrinsic(name):
    def emit(ctx, args, in_dtypes, out_dtype, params):
        return ctx.intrinsic(name, args[0].type, args[0])
    return emit


def _round(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    name = "llvm.round" if params.get("rounding_method", 0) == 0 else "llvm.roundeven"
    return ctx.intrinsic(name, x.type, x)


def _is_finite(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    a = ctx.intrinsic("llvm.fabs", x.type, x)
    return ctx.b.fcmp_ordered("<", a, ir.Constant(x.type, math.inf))


def _sqrt(ctx, args, in_dtypes, out_dtype, params):
    return ctx.intrinsic("llvm.sqrt", args[0].type, args[0])


def _rsqrt(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    return ctx.b.fdiv(ir.Constant(x.type, 1.0), ctx.intrinsic("llvm.sqrt", x.type, x))


def _abs(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    d = in_dtypes[0]
    if _is_float(d):
        return ctx.intrinsic("llvm.fabs", x.type, x)
    if _is_signed(d):
        return ctx.intrinsic("llvm.abs", x.type, x, ir.Constant(ir.IntType(1), 0))
    return x


def _square(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    return ctx.b.fmul(x, x) if _is_float(in_dtypes[0]) else ctx.b.mul(x, x)


def _not(ctx, args, in_dtypes, out_dtype, params):
    return ctx.b.not_(args[0])


def _popcount(ctx, args, in_dtypes, out_dtype, params):
    return ctx.intrinsic("llvm.ctpop", args[0].type, args[0])


def _clz(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    return ctx.intrinsic("llvm.ctlz", x.type, x, ir.Constant(ir.IntType(1), 0))


def _identity(ctx, args, in_dtypes, out_dtype, params):
    return args[0]


def _imag(ctx, args, in_dtypes, out_dtype, params):
    return ir.Constant(args[0].type, 0.0)


def _integer_pow(ctx, args, in_dtypes, out_dtype, params):
    x, = args
    y = int(params["y"])
    b, d = ctx.b, in_dtypes[0]
    mul = b.fmul if _is_float(d) else b.mul
    if y == 0:
        return constant(d, 1)
    acc, base, n = None, x, abs(y)
    while n:
        if n & 1:
            acc = base if acc is None else mul(acc, base)
        n >>= 1
        if n:
            base = mul(base, base)
    if y < 0:
        acc = b.fdiv(ir.Constant(x.type, 1.0), acc)
    return acc


def _arith(float_op, int_op):
    def emit(ctx, args, in_dtypes, out_dtype, params):
        fn = float_op if _is_float(in_dtypes[0]) else int_op
        return getattr(ctx.b, fn)(*args)
    return emit


def _div(ctx, args, in_dtypes, out_dtype, params):
    x, y = args
    if _is_float(in_dtypes[0]):
        return ctx.b.fdiv(x, y)
    return _integer_division(ctx.b, x, y, _is_signed(in_dtypes[0]), remainder=False)


def _rem(ctx, args, in_dtypes, out_dtype, params):
    x, y = args
    if _is_float(in_dtypes[0]):
        return ctx.b.frem(x, y)
    return _integer_division(ctx.b, x, y, _is_signed(in_dtypes[0]), remainder=True)


def _integer_division(b, x, y, signed: bool, remainder: bool):
    """``x / y`` (or ``x % y``) of integers, for every ``y``: a division by zero gives all
    ones (the remainder ``x``), and a signed one by -1, which traps on INT_MIN / -1, is a
    (wrapping) negation (the remainder 0), as NumPy computes them."""
    zero, one = ir.Constant(x.type, 0), ir.Constant(x.type, 1)
    is_zero = b.icmp_unsigned("==", y, zero)
    if signed:
        is_minus_one = b.icmp_signed("==", y, ir.Constant(x.type, -1))
        safe = b.select(b.or_(is_zero, is_minus_one), one, y)
        out = b.srem(x, safe) if remainder else b.sdiv(x, safe)
        out = b.select(is_minus_one, zero if remainder else b.sub(zero, x), out)
    else:
        out = (b.urem if remainder else b.udiv)(x, b.select(is_zero, one, y))
    by_zero = x if remainder else ir.Constant(x.type, -1 & ((1 << x.type.width) - 1))
    return b.select(is_zero, by_zero, out)


def _extremum(which):
    def emit(ctx, args, in_dtypes, out_dtype, params):
        x, y = args
        b, d = ctx.b, in_dtypes[0]
        if _is_float(d):
            return ctx.intrinsic("llvm.maximum" if which == "max" else "llvm.minimum", x.type, x, y)
        if d == np.bool_:
            return b.or_(x, y) if which == "max" else b.and_(x, y)
        cmp = b.icmp_signed if _is_signed(d) else b.icmp_unsigned
        return b.select(cmp(">" if which == "max" else "<", x, y), x, y)
    return emit


def _bitwise(op):
    def emit(ctx, args, in_dtypes, out_dtype, params):
        return getattr(ctx.b, op)(*args)
    return emit


def _shift(kind):
    def emit(ctx, args, in_dtypes, out_dtype, params):
        x, y = args
        b = ctx.b
        bits = ir.Constant(x.type, x.type.width)
        in_range = b.icmp_unsigned("<", y, bits)  # negative counts are huge when unsigned
        safe = b.select(in_range, y, ir.Constant(x.type, 0))
        if kind == "left":
            return b.select(in_range, b.shl(x, safe), ir.Constant(x.type, 0))
        if kind == "logical":
            return b.select(in_range, b.lshr(x, safe), ir.Constant(x.type, 0))
        return b.ashr(x, b.select(in_range, y, ir.Constant(x.type, x.type.width - 1)))
    return emit


_FCMP = {"eq": ("==", True), "ne": ("!=", False), "lt": ("<", True), "le": ("<=", True),
         "gt": (">", True), "ge": (">=", True)}


def _compare(name):
    def emit(ctx, args, in_dtypes, out_dtype, params):
        x, y = args
        b, d = ctx.b, in_dtypes[0]
        op, ordered = _FCMP[name]
        if _is_float(d):
            return (b.fcmp_ordered if ordered else b.fcmp_unordered)(op, x, y)
        if _is_signed(d):
            return b.icmp_signed(op, x, y)
        return b.icmp_unsigned(op, x, y)
    return emit


def _pow(ctx, args, in_dtypes, out_dtype, params):
    x, y = args
    if isinstance(y, ir.Constant) and y.constant == 0.5:
        return _pow_one_half(ctx, x)
    return ctx.math.libm(ctx.b, "pow", in_dtypes[0], *args)


def _pow_one_half(ctx, x):
    """``pow(x, 0.5)`` (Adam's ``v ** 0.5``) as a vectorizable square root instead of a libm
    call per element, with pow's special cases: ``pow(-0, 0.5) = +0`` (sqrt gives -0, fabs
    makes it +0) and ``pow(-inf, 0.5) = +inf`` (sqrt gives NaN)."""
    b = ctx.b
    root = ctx.intrinsic("llvm.fabs", x.type, ctx.intrinsic("llvm.sqrt", x.type, x))
    minus_inf = b.fcmp_ordered("==", x, ir.Constant(x.type, -math.inf))
    return b.select(minus_inf, ir.Constant(x.type, math.inf), root)


def convert(ctx, x, from_dtype, to_dtype):
    """Cast a register value between dtypes with the reference semantics (float to int
    truncates toward zero, saturates, NaN becomes 0; anything to bool is ``!= 0``)."""
    b = ctx.b
    src, dst = np.dtype(from_dtype), np.dtype(to_dtype)
    if src == dst:
        return x
    ty = reg_type(dst)
    if dst == np.bool_:
        if _is_float(src):
            return b.fcmp_unordered("!=", x, ir.Constant(x.type, 0.0))
        return b.icmp_unsigned("!=", x, ir.Constant(x.type, 0))
    if src == np.bool_:
        return b.uitofp(x, ty) if _is_float(dst) else b.zext(x, ty)
    if _is_float(src) and _is_float(dst):
        return b.fpext(x, ty) if dst.itemsize > src.itemsize else b.fptrunc(x, ty)
    if _is_float(src):
        name = "llvm.fptosi.sat" if _is_signed(dst) else "llvm.fptoui.sat"
        suffix = f"i{ty.width}.{'f32' if x.type == F32 else 'f64'}"
        fn = ctx.math.declare(f"{name}.{suffix}", ty, [x.type])
        return b.call(fn, [x])
    if _is_float(dst):
        return b.sitofp(x, ty) if _is_signed(src) else b.uitofp(x, ty)
    if ty.width < x.type.width:
        return b.trunc(x, ty)
    if ty.width > x.type.width:
        return b.sext(x, ty) if _is_signed(src) else b.zext(x, ty)
    return x


def _convert(ctx, args, in_dtypes, out_dtype, params):
    return convert(ctx, args[0], in_dtypes[0], out_dtype)


def _select_n(ctx, args, in_dtypes, out_dtype, params):
    which, *cases = args
    b = ctx.b
    if len(cases) == 1:
        return cases[0]
    if in_dtypes[0] == np.bool_:
        return b.select(which, cases[1], cases[0])
    # an integer selector is clipped into range, as the reference does
    out = cases[0]
    for k in range(1, len(cases)):
        cmp = b.icmp_signed if _is_signed(in_dtypes[0]) else b.icmp_unsigned
        pick = cmp(">=", which, ir.Constant(which.type, k))
        out = b.select(pick, cases[k], out)
    return out


def _clamp(ctx, args, in_dtypes, out_dtype, params):
    lo, x, hi = args
    mx, mn = _extremum("max"), _extremum("min")
    d = in_dtypes[1]
    return mn(ctx, [mx(ctx, [x, lo], [d, d], d, {}), hi], [d, d], d, {})


EMITTERS = {
    ew.neg_p: _neg, ew.sign_p: _sign, ew.floor_p: _unary_intrinsic("llvm.floor"),
    ew.ceil_p: _unary_intrinsic("llvm.ceil"), ew.round_p: _round, ew.is_finite_p: _is_finite,
    ew.sqrt_p: _sqrt, ew.rsqrt_p: _rsqrt, ew.abs_p: _abs, ew.square_p: _square, ew.not_p: _not,
    ew.population_count_p: _popcount, ew.clz_p: _clz, ew.real_p: _identity,
    ew.conj_p: _identity, ew.imag_p: _imag, ew.integer_pow_p: _integer_pow,
    ew.add_p: _arith("fadd", "add"), ew.sub_p: _arith("fsub", "sub"),
    ew.mul_p: _arith("fmul", "mul"), ew.div_p: _div, ew.rem_p: _rem, ew.pow_p: _pow,
    ew.max_p: _extremum("max"), ew.min_p: _extremum("min"),
    ew.atan2_p: _float_binary_libm("atan2"), ew.nextafter_p: _float_binary_libm("nextafter"),
    ew.and_p: _bitwise("and_"), ew.or_p: _bitwise("or_"), ew.xor_p: _bitwise("xor"),
    ew.shift_left_p: _shift("left"), ew.shift_right_logical_p: _shift("logical"),
    ew.shift_right_arithmetic_p: _shift("arithmetic"),
    ew.eq_p: _compare("eq"), ew.ne_p: _compare("ne"), ew.lt_p: _compare("lt"),
    ew.le_p: _compare("le"), ew.gt_p: _compare("gt"), ew.ge_p: _compare("ge"),
    ew.convert_element_type_p: _convert, ew.select_n_p: _select_n, ew.clamp_p: _clamp,
}
for _primitive in _FLOAT_MATH:
    EMITTERS[_primitive] = _float_math(_primitive)
EMITTERS[ew.lgamma_p] = _lgamma
EMITTERS[ew.erf_inv_p] = _float_math(ew.erf_inv_p)  # float32 only: inline polynomial (no libm)

# Rows that only exist for float dtypes (the shape rules allow complex too; complex buffers
# are not supported here, so they fall back).
_FLOAT_ONLY = set(_FLOAT_MATH) | {ew.floor_p, ew.ceil_p, ew.round_p, ew.is_finite_p, ew.sqrt_p,
                                  ew.rsqrt_p, ew.pow_p, ew.atan2_p, ew.nextafter_p, ew.real_p,
                                  ew.imag_p, ew.conj_p, ew.erf_inv_p}


# float64 erf_inv has no inline code and libm has no erfinv: NumPy runs it
_DTYPE_LIMITS = {ew.erf_inv_p: lambda dtype: dtype == np.float32}

# supports(primitive, params, in_dtypes, out_dtype): whether ``primitive`` on these dtypes
# has scalar code here
supports = table_supports(EMITTERS, SUPPORTED_DTYPES, _FLOAT_ONLY, _is_float, _DTYPE_LIMITS)


def emit(ctx: ScalarContext, primitive, params: dict, args, in_dtypes, out_dtype):
    """Emit ``primitive`` on register values ``args``; returns the result value."""
    return call_emitter(EMITTERS, ctx, primitive, params, args, in_dtypes, out_dtype)
