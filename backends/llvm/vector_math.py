"""Transcendental functions as straight-line LLVM IR, so loops that use them vectorize.

A call to libm inside a loop stops LLVM's loop vectorizer; the same function written as
range reduction + polynomial + bit manipulation, with selects instead of branches, becomes
8 or 16 lanes of SIMD code. Each function is emitted once per module as an ``internal
alwaysinline`` function and inlined into the loops that call it.

float32 versions are inline code (accurate to a few ulp; |x| up to ~1e9 for sin/cos/tan,
whose argument reduction is done in float64). float64 versions call the C library, which
is exact to within an ulp but not vectorized. The polynomial coefficients not given by a
Taylor series were fitted for minimal relative error on the interval each comment states;
``tests/test_vector_math.py`` (ulp bounds) and the compiled-against-reference checks of
``tests/test_primitives.py`` bound the resulting error.

    >>> lib = MathLibrary(module)                      # doctest: +SKIP
    >>> y = lib.call(builder, "exp", np.float32, x)    # doctest: +SKIP
"""
from __future__ import annotations

import math

import llvmlite.ir as ir
import numpy as np

from functrans.backends.llvm import targets
# the C library, for float64 and the rarer float32 functions
from functrans.backends.llvm.libm import LIBM_FUNCTIONS

F32, F64, I32, I64, I1 = ir.FloatType(), ir.DoubleType(), ir.IntType(32), ir.IntType(64), ir.IntType(1)

# ---- coefficients ----------------------------------------------------------------------------

# exp(r) = 1 + (r + r^2 * P(r)) on |r| <= ln2/2, P of degree 4 fitted for minimal relative
# error (4e-9 with these float32 coefficients: a Taylor series needs degree 7 for as much).
# The bracket is one fused multiply-add and 1 is added last: the small terms are rounded
# at their own scale, and the result about once.
EXP_COEFFS = [0.4999999403953552, 0.1666652113199234, 0.04166838899254799,
              0.008368710055947304, 0.001381461275741458]
# log(1+f) = 2*atanh(s), s = f/(2+f), |s| <= 0.1716: 2*s*(1 + s^2/3 + s^4/5 + s^6/7 + s^8/9).
LOG_COEFFS = [1.0, 1 / 3, 1 / 5, 1 / 7, 1 / 9]
# tanh(x) = x * P(x^2) / Q(x^2) on [-9, 9] (fitted for minimal relative error, 2e-8; beyond 9,
# tanh(x) rounds to 1 in float32). One division and no exp: the cheapest accurate form (a
# rational of one degree less is 20 times less accurate).
TANH_LIMIT = 9.0
TANH_P = [0.999999979506774, 0.1338101686769878, 0.0034955771758222957, 2.060888346113678e-05,
          1.3354359419759292e-08]
TANH_Q = [1.0, 0.4671433248009906, 0.025876941902004652, 0.00032856160556893023,
          7.77643978791521e-07]
# erf(x) = x * P(x^2) on [0, 1] (fitted).
# erf_inv in float32: Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011),
# polynomials in w = -log(1 - x^2), shifted, for w < 5 and in sqrt(w) beyond (ascending).
ERF_INV_CENTRAL = [1.50140941, 0.246640727, -0.00417768164, -0.00125372503, 0.00021858087,
                   -4.39150654e-06, -3.5233877e-06, 3.43273939e-07, 2.81022636e-08]
ERF_INV_TAIL = [2.83297682, 1.00167406, 0.00943887047, -0.0076224613, 0.00573950773,
                -0.00367342844, 0.00134934322, 0.000100950558, -0.000200214257]
ERF_SMALL_COEFFS = [1.1283791224910056, -0.3761232617301605, 0.11280180006312825,
                    -0.026711308415082628, 0.0049175481649219215, -0.0005631409314007503]
# erfc(x) * exp(x^2) = Q(1/x) on [1, 4] (fitted).
ERFCX_COEFFS = [0.0002531177489536222, 0.5593154179698645, 0.04016240608981308,
                -0.46467758661747705, 0.4809638119565255, -0.2191043932428214,
                0.004057449304553429, 0.03798508304017542, -0.011371758022760439]
# atan(z) = z + z^3 * P(z^2) on [0, tan(pi/8)] (fitted).
ATAN_COEFFS = [-0.3333333180606194, 0.19999547242651913, -0.14264141623850854,
               0.10745416756854141, -0.06456750361401803]
# sin(r) = r + r^3 * P(r^2), cos(r) = 1 - r^2/2 + r^4 * Q(r^2) on |r| <= pi/4 (Taylor).
SIN_COEFFS = [-1 / 6, 1 / 120, -1 / 5040, 1 / 362880]
COS_COEFFS = [1 / 24, -1 / 720, 1 / 40320, -1 / 3628800]

LN2 = math.log(2.0)
# ln2 in two parts (Cody and Waite): the head has 16 significant bits, so n * LN2_HI is exact
# in float32 for every |n| < 2**8 the reductions use, and x - n * LN2_HI is then exact too,
# with a fused multiply-add or without one (x86-64-v2 has none: a 24-bit head rounded the
# product there, and exp lost 60 ulp near the ends of its range)
LN2_HI = round(LN2 * 2 ** 16) / 2 ** 16
LN2_LO = float(np.float32(LN2 - LN2_HI))
# adding 1.5 * 2**23 to a float32 of magnitude below 2**22 rounds it to an integer, which is
# then the low bits of the sum
ROUNDER = 1.5 * 2 ** 23
PIO2_HI = math.pi / 2
PIO2_LO = 6.123233995736766e-17  # pi/2 - PIO2_HI

def target_has_avx512() -> bool:
    """Whether the CPU being compiled for (see :mod:`targets`) has AVX-512: ``ldexp`` on a
    vector is then one instruction (elsewhere LLVM may split it into library calls, which
    would stop vectorization), and vectors are 64 bytes wide."""
    return targets.current().has_avx512


def _float_bits(value: float) -> int:
    return int(np.array(value, np.float32).view(np.int32))


def _fty(dtype):
    return F32 if np.dtype(dtype) == np.float32 else F64


class _Ops:
    """Float arithmetic on one builder, for writing the functions below compactly."""

    def __init__(self, lib: "MathLibrary", b: ir.IRBuilder, ty):
        self.lib, self.b, self.ty = lib, b, ty
        self.ity = I32 if ty == F32 else I64

    def c(self, v):
        return ir.Constant(self.ty, float(v))

    def i(self, v):
        return ir.Constant(self.ity, int(v))

    def add(self, x, y):
        return self.b.fadd(x, y)

    def sub(self, x, y):
        return self.b.fsub(x, y)

    def mul(self, x, y):
        return self.b.fmul(x, y)

    def div(self, x, y):
        return self.b.fdiv(x, y)

    def fma(self, x, y, z):
        return self.lib.intrinsic(self.b, "llvm.fmuladd", self.ty, x, y, z)

    def poly(self, x, coeffs):
        """coeffs[0] + x*coeffs[1] + ... by Horner's rule."""
        acc = self.c(coeffs[-1])
        for k in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, self.c(k))
        return acc

    def poly_pairs(self, x, x2, coeffs):
        """The polynomial of :meth:`poly`, given ``x2 = x*x``, as Horner's rule in ``x2`` over
        pairs ``coeffs[2k] + x*coeffs[2k+1]``. The pairs are independent, so the chain of
        dependent operations is half as long: that chain, not the operation count, limits
        a loop of several inlined functions (out-of-order execution overlaps few iterations
        of a long chain)."""
        pairs = [self.fma(x, self.c(coeffs[k + 1]), self.c(coeffs[k])) if k + 1 < len(coeffs)
                 else self.c(coeffs[k]) for k in range(0, len(coeffs), 2)]
        acc = pairs[-1]
        for pair in reversed(pairs[:-1]):
            acc = self.fma(x2, acc, pair)
        return acc

    def cmp(self, op, x, y):
        return self.b.fcmp_ordered(op, x, y)

    def isnan(self, x):
        return self.b.fcmp_unordered("uno", x, x)

    def sel(self, cond, x, y):
        return self.b.select(cond, x, y)

    def abs(self, x):
        return self.lib.intrinsic(self.b, "llvm.fabs", self.ty, x)

    def copysign(self, mag, sign):
        return self.lib.intrinsic(self.b, "llvm.copysign", self.ty, mag, sign)

    def roundeven(self, x):
        return self.lib.intrinsic(self.b, "llvm.roundeven", self.ty, x)

    def sqrt(self, x):
        return self.lib.intrinsic(self.b, "llvm.sqrt", self.ty, x)

    def call(self, name, *args):
        return self.lib.call(self.b, name, np.float32 if self.ty == F32 else np.float64, *args)


class MathLibrary:
    """Per-module cache of math functions and intrinsic declarations."""

    def __init__(self, module: ir.Module):
        self.module = module
        self.functions: dict = {}

    # ---- declarations ----------------------------------------------------------------------

    def declare(self, name: str, ret, args) -> ir.Function:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, list(args)), name=name)
        return fn

    def intrinsic(self, b: ir.IRBuilder, name: str, ty, *args):
        suffix = {F32: "f32", F64: "f64"}.get(ty) or f"i{ty.width}"
        fn = self.declare(f"{name}.{suffix}", ty, [a.type for a in args])
        return b.call(fn, list(args))

    def libm(self, b: ir.IRBuilder, name: str, dtype, *args):
        f32_name, f64_name, arity = LIBM_FUNCTIONS[name]
        ty = _fty(dtype)
        sym = f32_name if ty == F32 else f64_name
        fn = self.declare(f"ft_libm_{sym}", ty, [ty] * arity)
        return b.call(fn, list(args))

    # ---- entry point -------------------------------------------------------------------------

    INLINE_F32 = ("exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos",
                  "tan", "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh",
                  "erf", "erf_inv")

    def call(self, b: ir.IRBuilder, name: str, dtype, *args):
        """``name(*args)`` for float ``dtype``: inline code where we have it, else libm."""
        ty = _fty(dtype)
        if name == "logistic" and ty == F64:
            ops = _Ops(self, b, ty)
            return ops.div(ops.c(1.0), ops.add(ops.c(1.0), self.libm(b, "exp", dtype, b.fneg(args[0]))))
        if ty != F32 or name not in self.INLINE_F32:
            return self.libm(b, name, dtype, *args)
        fn = self.functions.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(F32, [F32]), name=f"ft_{name}f")
            fn.linkage = "internal"
            fn.attributes.add("alwaysinline")
            fn.attributes.add("nounwind")
            body = ir.IRBuilder(fn.append_basic_block("entry"))
            ops = _Ops(self, body, F32)
            body.ret(getattr(self, f"_{name}")(ops, fn.args[0]))
            self.functions[name] = fn
        return b.call(fn, list(args))

    # ---- float32 implementations -------------------------------------------------------------

    def _round_to_int(self, o: _Ops, x, scale=1.0):
        """``t = round(x * scale) + ROUNDER`` in one rounding: the integer n then sits in the
        low bits of ``t`` (no float-to-int conversion, which LLVM defines for no NaN) and
        ``t - ROUNDER`` is n exactly. Needs |x * scale| < 2**22."""
        return o.fma(x, o.c(scale), o.c(ROUNDER)) if scale != 1.0 else o.add(x, o.c(ROUNDER))

    def _scale_by_pow2(self, o: _Ops, p, t):
        """``p * 2**n`` for ``p`` in [0.5, 2] and ``t`` from :meth:`_round_to_int` of an
        integer n in [-151, 131]: one ``ldexp`` where it is a vector instruction (AVX-512's
        vscalefps); elsewhere a multiplication by 2**(n//2) (exact: the product is a normal
        number) and one by 2**(n - n//2), which rounds the result once, into the subnormals
        or to infinity as it must. A NaN ``p`` stays NaN whatever ``t`` holds."""
        b = o.b
        bits = b.bitcast(t, I32)
        if target_has_avx512():
            n = b.sub(bits, ir.Constant(I32, _float_bits(ROUNDER)))
            return b.call(self.declare("llvm.ldexp.f32.i32", F32, [F32, I32]), [p, n])
        # the rounder's own bits are zero from bit 9 down, so they leave the 32-bit word
        # when n's bits are moved to the exponent field
        exponent = ir.Constant(I32, 23)
        half = b.shl(b.lshr(bits, ir.Constant(I32, 1)), exponent)  # (n//2) << 23
        one = ir.Constant(I32, 127 << 23)
        first = b.bitcast(b.add(half, one), F32)
        second = b.bitcast(b.add(b.sub(b.shl(bits, exponent), half), one), F32)
        return o.mul(o.mul(p, first), second)

    def _exp_reduced(self, o: _Ops, r):
        """exp(r) for |r| <= ln2/2 (see EXP_COEFFS)."""
        r2 = o.mul(r, r)
        return o.add(o.c(1.0), o.fma(r2, o.poly_pairs(r, r2, EXP_COEFFS), r))

    def _exp(self, o: _Ops, x):
        return self._exp_times_pow2(o, x, 0)

    def _exp_times_pow2(self, o: _Ops, x, k: int):
        """``exp(x) * 2**k`` without intermediate overflow: exp(x) = 2**n * exp(r) with
        n = round(x / ln2) and r = x - n*ln2 (ln2 in two parts, the head exact). NaN passes
        the clamp and every step after it."""
        xc = self._clamp_keeping_nan(o, x, -104.0, 90.0)
        t = self._round_to_int(o, xc, 1 / LN2)
        n = o.sub(t, o.c(ROUNDER))
        r = o.fma(n, o.c(-LN2_HI), xc)
        r = o.fma(n, o.c(-LN2_LO), r)
        return self._scale_by_pow2(o, self._exp_reduced(o, r), o.add(t, o.c(k)) if k else t)

    def _exp2(self, o: _Ops, x):
        xc = self._clamp_keeping_nan(o, x, -151.0, 129.0)
        t = self._round_to_int(o, xc)
        r = o.mul(o.sub(xc, o.sub(t, o.c(ROUNDER))), o.c(LN2))  # xc - n is exact
        return self._scale_by_pow2(o, self._exp_reduced(o, r), t)

    def _clamp(self, o: _Ops, x, lo, hi):
        # NaN goes to ``lo``: callers restore NaN at the end
        x = o.sel(o.cmp(">", x, o.c(lo)), x, o.c(lo))
        return o.sel(o.cmp("<", x, o.c(hi)), x, o.c(hi))

    def _clamp_keeping_nan(self, o: _Ops, x, lo, hi):
        # each select is one min/max instruction whose NaN operand comes second
        x = o.sel(o.cmp("<", x, o.c(lo)), o.c(lo), x)
        return o.sel(o.cmp(">", x, o.c(hi)), o.c(hi), x)

    def _log(self, o: _Ops, x):
        b = o.b
        # subnormals: scale into the normal range first
        tiny = o.cmp("<", x, o.c(2.0 ** -126))
        xs = o.sel(tiny, o.mul(x, o.c(2.0 ** 23)), x)
        bias = o.sel(tiny, o.c(-23.0 - 127.0), o.c(-127.0))
        bits = b.bitcast(xs, I32)
        e = b.sitofp(b.lshr(bits, ir.Constant(I32, 23)), F32)
        e = o.add(e, bias)
        m = b.bitcast(b.or_(b.and_(bits, ir.Constant(I32, 0x007FFFFF)),
                            ir.Constant(I32, 0x3F800000)), F32)  # m in [1, 2)
        big = o.cmp(">", m, o.c(math.sqrt(2.0)))
        m = o.sel(big, o.mul(m, o.c(0.5)), m)
        e = o.sel(big, o.add(e, o.c(1.0)), e)
        f = o.sub(m, o.c(1.0))  # exact
        s = o.div(f, o.add(f, o.c(2.0)))
        log1pf = o.mul(o.mul(o.c(2.0), s), o.poly(o.mul(s, s), LOG_COEFFS))
        y = o.fma(e, o.c(LN2_HI), o.fma(e, o.c(LN2_LO), log1pf))
        y = o.sel(o.cmp("==", x, o.c(0.0)), o.c(-math.inf), y)
        y = o.sel(o.cmp("==", x, o.c(math.inf)), x, y)
        return o.sel(b.fcmp_unordered("<", x, o.c(0.0)), o.c(math.nan), y)  # x < 0 or NaN

    def _log1p(self, o: _Ops, x):
        # log(u) * x / (u - 1) with u = 1 + x corrects the rounding of u (Goldberg)
        u = o.add(o.c(1.0), x)
        um1 = o.sub(u, o.c(1.0))
        y = o.mul(o.call("log", u), o.div(x, um1))
        y = o.sel(o.cmp("==", um1, o.c(0.0)), x, y)
        return o.sel(o.cmp("==", x, o.c(math.inf)), x, y)

    def _expm1(self, o: _Ops, x):
        # (u - 1) * x / log(u) with u = exp(x) (Kahan)
        u = o.call("exp", x)
        um1 = o.sub(u, o.c(1.0))
        y = o.mul(um1, o.div(x, o.call("log", u)))
        y = o.sel(o.cmp("==", um1, o.c(0.0)), x, y)
        y = o.sel(o.cmp("==", um1, o.c(-1.0)), o.c(-1.0), y)
        return o.sel(o.cmp("==", u, o.c(math.inf)), u, y)

    def _tanh(self, o: _Ops, x):
        # P and Q are even, so x * P/Q is odd and keeps the sign of zero. Beyond the limit,
        # x^2 is clamped instead of x (one comparison, not two): x * P/Q then exceeds 1 in
        # magnitude (or is infinite), and the final clamp, needed anyway because rounding may
        # overshoot 1 near the limit, gives +-1. NaN passes the clamps (an unordered
        # comparison is false) and the arithmetic.
        s = o.mul(x, x)
        s = o.sel(o.cmp(">", s, o.c(TANH_LIMIT ** 2)), o.c(TANH_LIMIT ** 2), s)
        s2 = o.mul(s, s)
        y = o.div(o.mul(x, o.poly_pairs(s, s2, TANH_P)), o.poly_pairs(s, s2, TANH_Q))
        return self._clamp_keeping_nan(o, y, -1.0, 1.0)

    def _logistic(self, o: _Ops, x):
        return o.div(o.c(1.0), o.add(o.c(1.0), o.call("exp", o.b.fneg(x))))

    def _reduce_pio2(self, o: _Ops, x):
        """(r, q): x = r + q*pi/2 with |r| <= pi/4, computed in float64."""
        b = o.b
        xd = b.fpext(x, F64)
        k = self.intrinsic(b, "llvm.roundeven", F64, b.fmul(xd, ir.Constant(F64, 2 / math.pi)))
        r = self.intrinsic(b, "llvm.fmuladd", F64, b.fneg(k), ir.Constant(F64, PIO2_HI), xd)
        r = self.intrinsic(b, "llvm.fmuladd", F64, b.fneg(k), ir.Constant(F64, PIO2_LO), r)
        q = b.and_(b.call(self.declare("llvm.fptosi.sat.i64.f64", I64, [F64]), [k]),
                   ir.Constant(I64, 3))
        return b.fptrunc(r, F32), q

    def _sin_cos_of_reduced(self, o: _Ops, r):
        s2 = o.mul(r, r)
        sin_r = o.fma(o.mul(r, s2), o.poly(s2, SIN_COEFFS), r)
        cos_r = o.fma(o.mul(s2, s2), o.poly(s2, COS_COEFFS), o.fma(s2, o.c(-0.5), o.c(1.0)))
        return sin_r, cos_r

    def _quadrant(self, o: _Ops, q, values):
        b = o.b
        out = values[3]
        for k in (2, 1, 0):
            out = o.sel(b.icmp_unsigned("==", q, ir.Constant(I64, k)), values[k], out)
        return out

    def _sin(self, o: _Ops, x):
        r, q = self._reduce_pio2(o, x)
        s, c = self._sin_cos_of_reduced(o, r)
        y = self._quadrant(o, q, [s, c, o.b.fneg(s), o.b.fneg(c)])
        return o.sel(o.cmp("==", x, o.c(0.0)), x, y)  # keeps the sign of zero

    def _cos(self, o: _Ops, x):
        r, q = self._reduce_pio2(o, x)
        s, c = self._sin_cos_of_reduced(o, r)
        return self._quadrant(o, q, [c, o.b.fneg(s), o.b.fneg(c), s])

    def _tan(self, o: _Ops, x):
        r, q = self._reduce_pio2(o, x)
        s, c = self._sin_cos_of_reduced(o, r)
        odd = o.b.trunc(q, I1)
        y = o.sel(odd, o.div(o.b.fneg(c), s), o.div(s, c))
        return o.sel(o.cmp("==", x, o.c(0.0)), x, y)

    def _atan(self, o: _Ops, x):
        a = o.abs(x)
        big = o.cmp(">", a, o.c(2.414213562373095))
        mid = o.cmp(">", a, o.c(0.4142135623730951))
        z = o.sel(big, o.div(o.c(-1.0), a),
                  o.sel(mid, o.div(o.sub(a, o.c(1.0)), o.add(a, o.c(1.0))), a))
        base = o.sel(big, o.c(math.pi / 2), o.sel(mid, o.c(math.pi / 4), o.c(0.0)))
        z2 = o.mul(z, z)
        y = o.add(base, o.fma(o.mul(z, z2), o.poly(z2, ATAN_COEFFS), z))
        return o.sel(o.isnan(x), x, o.copysign(y, x))

    def _asin(self, o: _Ops, x):
        one = o.c(1.0)
        d = o.sqrt(o.mul(o.sub(one, x), o.add(one, x)))
        return o.call("atan", o.div(x, d))

    def _acos(self, o: _Ops, x):
        one = o.c(1.0)
        t = o.sqrt(o.div(o.sub(one, x), o.add(one, x)))
        return o.mul(o.c(2.0), o.call("atan", t))

    def _sinh(self, o: _Ops, x):
        a = o.abs(x)
        e = o.call("expm1", a)
        small = o.mul(o.c(0.5), o.add(e, o.div(e, o.add(e, o.c(1.0)))))
        h = self._exp_times_pow2(o, a, -1)  # e**a / 2, finite a little beyond exp's range
        large = o.sub(h, o.div(o.c(0.25), h))
        y = o.sel(o.cmp("<", a, o.c(1.0)), small, large)
        return o.sel(o.isnan(x), x, o.copysign(y, x))

    def _cosh(self, o: _Ops, x):
        h = self._exp_times_pow2(o, o.abs(x), -1)
        return o.add(h, o.div(o.c(0.25), h))

    def _asinh(self, o: _Ops, x):
        a = o.abs(x)
        one = o.c(1.0)
        a2 = o.mul(a, a)
        moderate = o.call("log1p", o.add(a, o.div(a2, o.add(one, o.sqrt(o.add(one, a2))))))
        huge = o.add(o.call("log", a), o.c(LN2))
        y = o.sel(o.cmp(">", a, o.c(4096.0)), huge, moderate)
        return o.sel(o.isnan(x), x, o.copysign(y, x))

    def _acosh(self, o: _Ops, x):
        t = o.sub(x, o.c(1.0))
        moderate = o.call("log1p", o.add(t, o.sqrt(o.fma(t, t, o.mul(t, o.c(2.0))))))
        huge = o.add(o.call("log", x), o.c(LN2))
        y = o.sel(o.cmp(">", x, o.c(4096.0)), huge, moderate)
        return o.sel(o.b.fcmp_unordered("<", x, o.c(1.0)), o.c(math.nan), y)

    def _atanh(self, o: _Ops, x):
        a = o.abs(x)
        y = o.mul(o.c(0.5), o.call("log1p", o.div(o.mul(a, o.c(2.0)), o.sub(o.c(1.0), a))))
        return o.sel(o.isnan(x), x, o.copysign(y, x))

    def _erf_inv(self, o: _Ops, x):
        one = o.c(1.0)
        w = o.b.fneg(o.call("log", o.mul(o.sub(one, x), o.add(one, x))))
        central = o.poly(o.sub(w, o.c(2.5)), ERF_INV_CENTRAL)
        tail = o.poly(o.sub(o.sqrt(w), o.c(3.0)), ERF_INV_TAIL)
        y = o.mul(o.sel(o.cmp("<", w, o.c(5.0)), central, tail), x)
        # at +-1 the tail polynomial meets inf * inf of alternating signs: give +-inf
        return o.sel(o.cmp("==", o.abs(x), one), o.copysign(o.c(float("inf")), x), y)

    def _erf(self, o: _Ops, x):
        a = o.abs(x)
        small = o.mul(a, o.poly(o.mul(a, a), ERF_SMALL_COEFFS))
        ac = self._clamp(o, a, 1.0, 4.0)
        q = o.poly(o.div(o.c(1.0), ac), ERFCX_COEFFS)
        large = o.sub(o.c(1.0), o.mul(o.call("exp", o.b.fneg(o.mul(ac, ac))), q))
        y = o.sel(o.cmp("<", a, o.c(1.0)), small, large)
        return o.sel(o.isnan(x), x, o.copysign(y, x))
