"""Elementwise primitives: one table row per operation.

A row gives the name, which dtypes it accepts, its reference implementation and its
derivative (a JVP rule, or for a linear operation its transpose), e.g.::

    sin_p = _unary("sin", "float", np.sin, _jvp(lambda g, x: mul(g, cos(x))))

Shape rules (operands of one shape and dtype), batching (broadcasting along the batch axis)
and the lax-level function are made from the row. The compiled backends keep their scalar
code for each row in their own tables, keyed by the ``Primitive`` object (``EMITTERS`` in
``backends/llvm/scalar_ops.py`` and ``backends/cuda/scalar_ops.py``), never by its name.

The lax-level functions here take arrays of equal shape and dtype; for the library's own
convenience a Python scalar takes the other operand's dtype. ``functrans.lax`` exports the
forms in ``LAX_FUNCTIONS_WITHOUT_PROMOTION`` instead, which promote nothing, as ``jax.lax``.
"""
from __future__ import annotations

import enum
import math
import operator

import numpy as np

from functrans import _dtypes
from functrans.core import Primitive, ShapedArray, get_aval
from functrans.interpreters import ad, batching
from functrans.interpreters.ad import Zero, is_undefined_primal
from functrans.primitives.conversions import broadcast_in_dim, convert_element_type, full
# convert_element_type is declared in conversions, the bottom family, and is exported here
# too: the compiled backends fuse it with the elementwise ops and find it in this module
from functrans.primitives.conversions import convert_element_type_p  # noqa: F401
from functrans.tree_util import tree_map

# ---- dtype classes ---------------------------------------------------------------------------

_KINDS = {
    "float": lambda d: _dtypes.is_inexact(d),
    "real_float": lambda d: _dtypes.is_float(d),
    "int": lambda d: _dtypes.is_integer(d),
    "int_or_bool": lambda d: _dtypes.is_integer(d) or _dtypes.is_bool(d),
    "numeric": lambda d: not _dtypes.is_bool(d),
    "real_numeric": lambda d: not _dtypes.is_bool(d) and not _dtypes.is_complex(d),
    "ordered": lambda d: not _dtypes.is_complex(d),  # complex numbers have no order
    "any": lambda d: True,
}


# the dtype classes each kind accepts, named as in jax.lax's messages
_KIND_NAMES = {
    "float": "floating, complexfloating", "real_float": "floating", "int": "integer",
    "int_or_bool": "integer, bool", "numeric": "integer, floating, complexfloating",
    "real_numeric": "integer, floating", "ordered": "integer, floating, bool",
    "any": "integer, floating, complexfloating, bool",
}

# jax.numpy's promoting counterpart of a lax operation, named in the error for mixed dtypes
JNP_EQUIVALENTS = {
    "add": "add", "sub": "subtract", "mul": "multiply", "div": "divide", "max": "maximum",
    "min": "minimum", "atan2": "arctan2", "nextafter": "nextafter", "pow": "float_power",
    "eq": "equal", "ne": "not_equal", "shift_left": "left_shift",
    "shift_right_logical": "right_shift", "shift_right_arithmetic": "right_shift",
    "select": "where",
}


def _check_kind(name: str, kind: str, avals, positional: bool | None = None) -> None:
    """``positional``: name the operand's position (by default when there are several)."""
    for i, a in enumerate(avals):
        if not _KINDS[kind](a.dtype):
            where = f" at position {i}" if (len(avals) > 1 if positional is None
                                            else positional) else ""
            raise TypeError(f"{name} does not accept dtype {a.dtype.name}{where}. Accepted "
                            f"dtypes{where} are subtypes of {_KIND_NAMES[kind]}.")


def check_same_dtypes(name: str, avals) -> None:
    """Raise jax.lax's TypeError unless ``avals`` share one dtype (no implicit promotion)."""
    if any(a.dtype != avals[0].dtype for a in avals[1:]):
        tip = (f" (Tip: jnp.{JNP_EQUIVALENTS[name]} is a similar function that does automatic "
               f"type promotion on inputs)." if name in JNP_EQUIVALENTS else "")
        raise TypeError(f"lax.{name} requires arguments to have the same dtypes, got "
                        f"{', '.join(a.dtype.name for a in avals)}.{tip}")


def _same_shapes_and_dtypes(name: str, avals) -> None:
    check_same_dtypes(name, avals)
    if len({a.shape for a in avals}) > 1:
        raise TypeError(f"{name} requires operands of the same shape, got "
                        f"{', '.join(a.str_short() for a in avals)}")


def _elementwise_rule(name: str, kind: str, result_dtype=None):
    def rule(*avals, **params):
        _check_kind(name, kind, avals)
        _same_shapes_and_dtypes(name, avals)
        a = avals[0]
        dtype = a.dtype if result_dtype is None else result_dtype(a.dtype)
        # a weak input stays weak unless the result is of another kind (comparisons -> bool)
        weak = all(x.weak_type for x in avals) and np.dtype(dtype).kind == a.dtype.kind
        return ShapedArray(a.shape, dtype, weak)
    return rule


def _via_f32(fn):
    """Compute low-precision floats (bf16, f16) in float32, as libraries often lack them."""
    def impl(*xs, **params):
        dtype = xs[0].dtype if xs else None
        if dtype is not None and dtype in (_dtypes.bfloat16, _dtypes.float16):
            out = fn(*[x.astype(np.float32) for x in xs], **params)
            # results of another kind (bool, complex) keep their dtype
            return out.astype(dtype) if out.dtype.kind == "f" else out
        return fn(*xs, **params)
    return impl


def _quiet(fn):
    def impl(*xs, **params):
        with np.errstate(all="ignore"):
            return fn(*xs, **params)
    return impl


_UNARY, _BINARY = {}, {}


def _unary(name: str, kind: str, impl, derivative, result_dtype=None) -> Primitive:
    """A row of the unary table: ``kind`` names the dtypes it accepts, ``impl`` is its
    reference implementation, ``derivative`` one of the forms below the reference
    implementations, ``result_dtype`` maps the operand's dtype to the result's."""
    p = Primitive(name)
    p.def_impl(_quiet(_via_f32(impl)))
    p.def_abstract_eval(_elementwise_rule(name, kind, result_dtype))
    batching.defvectorized(p)
    derivative(p)
    _UNARY[name] = p
    return p


def _binary(name: str, kind: str, impl, derivative, result_dtype=None, *,
            transpose=None) -> Primitive:
    """A row of the binary table, as :func:`_unary`; ``transpose`` is the transpose rule of
    an operation linear in one operand (its derivative being a :func:`_jvp` form)."""
    p = Primitive(name)
    p.def_impl(_quiet(_via_f32(impl)))
    p.def_abstract_eval(_elementwise_rule(name, kind, result_dtype))
    batching.broadcast_batcher(p)
    derivative(p)
    if transpose is not None:
        p.transpose = transpose
    _BINARY[name] = p
    return p


def _bool_result(_dtype):
    return _dtypes.bool_


def _real_result(dtype):
    return np.dtype(np.float64) if dtype == _dtypes.complex128 else (
        np.dtype(np.float32) if dtype == _dtypes.complex64 else dtype)


# ---- reference implementations needing care -------------------------------------------------

def _round_impl(x, *, rounding_method=0):
    if rounding_method == 0:  # half away from zero
        return np.where(np.abs(x) >= 2 ** 52, x, np.sign(x) * np.floor(np.abs(x) + 0.5)).astype(x.dtype)
    return np.round(x)


def _int_div(x, y):
    """Integer division rounding toward zero; x / 0 is all ones (-1 signed, max unsigned)."""
    safe_y = np.where(y == 0, np.ones_like(y), y)
    q = np.floor_divide(x, safe_y)
    # floor and truncation differ when the remainder is nonzero and the signs differ
    adjust = (np.remainder(x, safe_y) != 0) & ((x < 0) != (safe_y < 0))
    q = (q + adjust.astype(x.dtype)).astype(x.dtype)
    all_ones = np.array(-1 if x.dtype.kind == "i" else np.iinfo(x.dtype).max, x.dtype)
    return np.where(y == 0, all_ones, q)


def _div_impl(x, y):
    if _dtypes.is_integer(x.dtype):
        return _int_div(x, y)
    return np.true_divide(x, y).astype(x.dtype)


def _pow_impl(x, y):
    # NumPy takes a power whose exponent is one value (a scalar or a stride-0 broadcast) of
    # 0.5 as a square root: -0 for -0 and NaN for -inf, where pow (and JAX) give +0 and +inf.
    # Those two results are set afterwards (no exponent the size of the output is made).
    out = np.asarray(np.power(x, y))
    half = np.asarray(y) == 0.5
    if half.any():
        out = np.where(half & (x == 0), out.dtype.type(0), out)
        out = np.where(half & (x == -np.inf), out.dtype.type(np.inf), out)
    return out


def _rem_impl(x, y):
    if _dtypes.is_integer(x.dtype):
        safe_y = np.where(y == 0, 1, y)
        return np.where(y == 0, x, np.fmod(x, safe_y))
    return np.fmod(x, y)


def _bits(dtype) -> int:
    return np.dtype(dtype).itemsize * 8


def _unsigned_of(dtype):
    return np.dtype(f"u{np.dtype(dtype).itemsize}")


def _shift_left_impl(x, y):
    bits = _bits(x.dtype)
    y_ok = (y >= 0) & (y < bits)
    shifted = np.left_shift(x, np.where(y_ok, y, 0).astype(x.dtype))
    return np.where(y_ok, shifted, np.zeros_like(x))


def _shift_right_logical_impl(x, y):
    bits = _bits(x.dtype)
    u = x.view(_unsigned_of(x.dtype)) if x.dtype.kind == "i" else x
    y_ok = (y >= 0) & (y < bits)
    shifted = np.right_shift(u, np.where(y_ok, y, 0).astype(u.dtype))
    out = np.where(y_ok, shifted, np.zeros_like(u))
    return out.view(x.dtype) if x.dtype.kind == "i" else out


def _shift_right_arithmetic_impl(x, y):
    bits = _bits(x.dtype)
    s = x.view(np.dtype(f"i{x.dtype.itemsize}")) if x.dtype.kind == "u" else x
    y_clamped = np.where((y < 0) | (y >= bits), bits - 1, y).astype(s.dtype)
    out = np.right_shift(s, y_clamped)
    return out.view(x.dtype) if x.dtype.kind == "u" else out


def _clz_impl(x):
    bits = _bits(x.dtype)
    u = x.view(_unsigned_of(x.dtype)).astype(np.uint64)
    count = np.full(x.shape, bits, dtype=np.int64)
    for b in range(bits):
        count = np.where((u >> np.uint64(b)) & np.uint64(1), bits - 1 - b, count)
    return count.astype(x.dtype)


def _select_n_impl(which, *cases):
    if which.dtype == np.bool_:
        return np.where(which, cases[1], cases[0]) if len(cases) > 1 else cases[0]
    idx = np.clip(which.astype(np.int64), 0, len(cases) - 1)
    return np.choose(idx, cases)


def _integer_pow_impl(x, *, y):
    if y == 0:
        return np.ones_like(x)
    if _dtypes.is_integer(x.dtype):
        if y < 0:
            raise ValueError(f"integer_pow: integers to negative integer powers are not "
                             f"allowed, got {x.dtype.name} ** {y}")
        # square and multiply in x's dtype, wrapping around as the compiled code does: the
        # exponent is a static int of any size (2 ** 40 does not fit an int32 array)
        acc, base, n = np.ones_like(x), np.asarray(x), y
        with np.errstate(over="ignore"):
            while n:
                if n & 1:
                    acc = np.multiply(acc, base, dtype=x.dtype)
                n >>= 1
                if n:
                    base = np.multiply(base, base, dtype=x.dtype)
        return np.asarray(acc, dtype=x.dtype)
    return np.power(x, np.array(y, dtype=x.dtype)).astype(x.dtype)


def _special(name: str):
    """A scipy.special function, imported when first called (scipy.special is slow to
    import and most programs never need it)."""
    def fn(*args):
        import scipy.special
        return getattr(scipy.special, name)(*args)
    fn.__name__ = name
    return fn


_erf_inv_impl = _special("erfinv")
_logistic_impl = _special("expit")


# ---- derivatives: each row names its own ------------------------------------------------------
# A row's ``derivative`` is one of the forms below, applied to its primitive when the row is
# made. The rules call the lax-level functions defined after the table (``mul``, ``cos``,
# ...); they are looked up when a derivative is taken, not when the row is read.


def _zero_derivative(p):
    """Piecewise constant or integer-valued: the tangent is always zero."""
    ad.defjvp_zero(p)


def _jvp(*rules):
    """One tangent rule per operand, ``rule(g, *operands)`` (None where the result does not
    depend differentiably on that operand); the tangents are summed."""
    return lambda p: ad.defjvp(p, *rules)


def _jvp_of_result(*rules):
    """As :func:`_jvp`, each rule also receiving the result: ``rule(g, ans, *operands)``."""
    return lambda p: ad.defjvp2(p, *rules)


def _linear(transpose):
    """Linear in every operand: the JVP applies the primitive to the tangents, and
    ``transpose(ct)`` gives the operands' cotangents."""
    return lambda p: ad.deflinear(p, transpose)


def _bilinear(lhs_transpose, rhs_transpose):
    """Linear in each operand with the other fixed: ``lhs_transpose(ct, x, y)`` and
    ``rhs_transpose(ct, x, y)`` give the cotangent of the linear one."""
    return lambda p: ad.defbilinear(p, lhs_transpose, rhs_transpose)


def _const(x, value):
    """A scalar of ``x``'s dtype broadcast to its shape."""
    aval = get_aval(x)
    return full(aval.shape, value, aval.dtype, weak_type=aval.weak_type)


def _abs_jvp(g, ans, x):
    if _dtypes.is_complex(get_aval(x).dtype):
        # d|z| = Re(conj(z) dz) / |z|, taken as 0 at z = 0 (|z| is replaced by 1 there)
        magnitude = convert_element_type(ans, get_aval(x).dtype)
        safe = select(eq(magnitude, _const(magnitude, 0)), _const(magnitude, 1), magnitude)
        return real(mul(g, div(conj(x), safe)))
    # the kink at 0 takes the right-hand slope (+1, also at -0.0), as JAX does
    return select(ge(x, _const(x, 0)), g, neg(g))


def _integer_pow_jvp(g, x, *, y):
    if y == 0:
        return ad.zeros_like_aval(get_aval(g))
    return mul(g, mul(_const(x, y), integer_pow(x, y - 1) if y != 1 else _const(x, 1)))


def _div_transpose(ct, x, y):
    if is_undefined_primal(y):
        raise NotImplementedError("div is not linear in its divisor")
    if isinstance(ct, Zero):
        return [Zero(x.aval), None]
    return [div(ct, y), None]


def _pow_jvp_lhs(g, ans, x, y):
    # d/dx x**y = y * x**(y-1), defined as 0 where y == 0 (so 0**0 has derivative 0)
    y_is_zero = eq(y, _const(y, 0))
    jac = select(y_is_zero, _const(x, 0), mul(y, pow(x, sub(y, _const(y, 1)))))
    return mul(g, jac)


def _pow_jvp_rhs(g, ans, x, y):
    # d/dy x**y = log(x) * x**y, with log(0) replaced so 0**y has derivative 0
    safe_x = select(eq(x, _const(x, 0)), _const(x, 1), x)
    return mul(g, mul(log(safe_x), ans))


def _balanced_eq(x, z, y):
    """1 where ``x`` is the result ``z`` alone, 1/2 on ties with ``y``, else 0."""
    one, half, zero = _const(z, 1), _const(z, 0.5), _const(z, 0)
    return select(eq(x, z), select(eq(y, z), half, one), zero)


def _one_minus_square(x):
    return sub(_const(x, 1), mul(x, x))


_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)


# ---- the table: unary ------------------------------------------------------------------------

neg_p = _unary("neg", "numeric", np.negative, _linear(lambda ct: [neg(ct)]))
sign_p = _unary("sign", "numeric", np.sign, _zero_derivative)
floor_p = _unary("floor", "real_float", np.floor, _zero_derivative)
ceil_p = _unary("ceil", "real_float", np.ceil, _zero_derivative)
round_p = _unary("round", "real_float", _round_impl, _zero_derivative)
is_finite_p = _unary("is_finite", "real_float", np.isfinite, _zero_derivative, _bool_result)
exp_p = _unary("exp", "float", np.exp, _jvp_of_result(lambda g, ans, x: mul(g, ans)))
exp2_p = _unary("exp2", "float", np.exp2, _jvp_of_result(
    lambda g, ans, x: mul(g, mul(ans, _const(x, math.log(2.0))))))
log_p = _unary("log", "float", np.log, _jvp(lambda g, x: div(g, x)))
log1p_p = _unary("log1p", "float", np.log1p, _jvp(lambda g, x: div(g, add(x, _const(x, 1)))))
expm1_p = _unary("expm1", "float", np.expm1, _jvp_of_result(
    lambda g, ans, x: mul(g, add(ans, _const(x, 1)))))
tanh_p = _unary("tanh", "float", np.tanh, _jvp_of_result(
    lambda g, ans, x: mul(g, sub(_const(x, 1), mul(ans, ans)))))
logistic_p = _unary("logistic", "float", _logistic_impl, _jvp_of_result(
    lambda g, ans, x: mul(g, mul(ans, sub(_const(x, 1), ans)))))
sin_p = _unary("sin", "float", np.sin, _jvp(lambda g, x: mul(g, cos(x))))
cos_p = _unary("cos", "float", np.cos, _jvp(lambda g, x: neg(mul(g, sin(x)))))
tan_p = _unary("tan", "float", np.tan, _jvp_of_result(
    lambda g, ans, x: mul(g, add(_const(x, 1), mul(ans, ans)))))
asin_p = _unary("asin", "float", np.arcsin, _jvp(
    lambda g, x: mul(g, rsqrt(_one_minus_square(x)))))
acos_p = _unary("acos", "float", np.arccos, _jvp(
    lambda g, x: neg(mul(g, rsqrt(_one_minus_square(x))))))
atan_p = _unary("atan", "float", np.arctan, _jvp(
    lambda g, x: div(g, add(_const(x, 1), mul(x, x)))))
sinh_p = _unary("sinh", "float", np.sinh, _jvp(lambda g, x: mul(g, cosh(x))))
cosh_p = _unary("cosh", "float", np.cosh, _jvp(lambda g, x: mul(g, sinh(x))))
asinh_p = _unary("asinh", "float", np.arcsinh, _jvp(
    lambda g, x: mul(g, rsqrt(add(mul(x, x), _const(x, 1))))))
acosh_p = _unary("acosh", "float", np.arccosh, _jvp(
    lambda g, x: mul(g, rsqrt(mul(sub(x, _const(x, 1)), add(x, _const(x, 1)))))))
atanh_p = _unary("atanh", "float", np.arctanh, _jvp(lambda g, x: div(g, _one_minus_square(x))))
sqrt_p = _unary("sqrt", "float", np.sqrt, _jvp_of_result(
    lambda g, ans, x: div(g, mul(_const(x, 2), ans))))
rsqrt_p = _unary("rsqrt", "float", lambda x: 1 / np.sqrt(x), _jvp_of_result(
    lambda g, ans, x: mul(g, mul(_const(x, -0.5), div(ans, x)))))
cbrt_p = _unary("cbrt", "real_float", np.cbrt, _jvp_of_result(
    lambda g, ans, x: mul(g, mul(_const(x, 1 / 3), integer_pow(ans, -2)))))
abs_p = _unary("abs", "numeric", np.abs, _jvp_of_result(_abs_jvp), _real_result)
square_p = _unary("square", "numeric", np.square, _jvp(
    lambda g, x: mul(g, mul(_const(x, 2), x))))
erf_p = _unary("erf", "real_float", _special("erf"), _jvp(
    lambda g, x: mul(g, mul(_const(x, _TWO_OVER_SQRT_PI), exp(neg(mul(x, x)))))))
erfc_p = _unary("erfc", "real_float", _special("erfc"), _jvp(
    lambda g, x: mul(g, mul(_const(x, -_TWO_OVER_SQRT_PI), exp(neg(mul(x, x)))))))
erf_inv_p = _unary("erf_inv", "real_float", _erf_inv_impl, _jvp_of_result(
    lambda g, ans, x: mul(g, mul(_const(x, math.sqrt(math.pi) / 2), exp(mul(ans, ans))))))
lgamma_p = _unary("lgamma", "real_float", _special("gammaln"), _jvp(
    lambda g, x: mul(g, digamma(x))))
digamma_p = _unary("digamma", "real_float", _special("digamma"), _jvp(
    lambda g, x: mul(g, polygamma(_const(x, 1), x))))
not_p = _unary("not", "int_or_bool", np.invert, _zero_derivative)
population_count_p = _unary("population_count", "int",  # two's-complement bits
                            lambda x: np.bitwise_count(x.view(_unsigned_of(x.dtype))).astype(x.dtype),
                            _zero_derivative)
clz_p = _unary("clz", "int", _clz_impl, _zero_derivative)
real_p = _unary("real", "float", np.real, _linear(lambda ct: [complex(ct, _const(ct, 0))]),
                _real_result)
imag_p = _unary("imag", "float", np.imag, _linear(lambda ct: [complex(_const(ct, 0), neg(ct))]),
                _real_result)
conj_p = _unary("conj", "float", np.conj, _linear(lambda ct: [conj(ct)]))

integer_pow_p = _unary("integer_pow", "numeric", _integer_pow_impl, _jvp(_integer_pow_jvp))

# ---- the table: binary -----------------------------------------------------------------------

add_p = _binary("add", "numeric", np.add, _linear(lambda ct: [ct, ct]))
sub_p = _binary("sub", "numeric", np.subtract, _linear(lambda ct: [ct, neg(ct)]))
mul_p = _binary("mul", "numeric", np.multiply,
                _bilinear(lambda ct, x, y: mul(ct, y), lambda ct, x, y: mul(x, ct)))
div_p = _binary("div", "numeric", _div_impl,
                _jvp_of_result(lambda g, ans, x, y: div(g, y),
                               lambda g, ans, x, y: neg(mul(g, div(ans, y)))),
                transpose=_div_transpose)
rem_p = _binary("rem", "real_numeric", _rem_impl, _jvp(
    lambda g, x, y: g,
    lambda g, x, y: mul(neg(g), mul(sign(div(x, y)), floor(abs(div(x, y)))))))
pow_p = _binary("pow", "float", _pow_impl, _jvp_of_result(_pow_jvp_lhs, _pow_jvp_rhs))
max_p = _binary("max", "any", np.maximum, _jvp_of_result(
    lambda g, ans, x, y: mul(g, _balanced_eq(x, ans, y)),
    lambda g, ans, x, y: mul(g, _balanced_eq(y, ans, x))))
min_p = _binary("min", "any", np.minimum, _jvp_of_result(
    lambda g, ans, x, y: mul(g, _balanced_eq(x, ans, y)),
    lambda g, ans, x, y: mul(g, _balanced_eq(y, ans, x))))
atan2_p = _binary("atan2", "real_float", np.arctan2, _jvp(
    lambda g, x, y: mul(g, div(y, add(mul(x, x), mul(y, y)))),
    lambda g, x, y: mul(g, div(neg(x), add(mul(x, x), mul(y, y))))))
nextafter_p = _binary("nextafter", "real_float", np.nextafter, _zero_derivative)
polygamma_p = _binary("polygamma", "real_float", _special("polygamma"), _jvp(
    None, lambda g, m, x: mul(g, polygamma(add(m, _const(m, 1)), x))))
and_p = _binary("and", "int_or_bool", np.bitwise_and, _zero_derivative)
or_p = _binary("or", "int_or_bool", np.bitwise_or, _zero_derivative)
xor_p = _binary("xor", "int_or_bool", np.bitwise_xor, _zero_derivative)
shift_left_p = _binary("shift_left", "int", _shift_left_impl, _zero_derivative)
shift_right_logical_p = _binary("shift_right_logical", "int", _shift_right_logical_impl,
                                _zero_derivative)
shift_right_arithmetic_p = _binary("shift_right_arithmetic", "int",
                                   _shift_right_arithmetic_impl, _zero_derivative)
eq_p = _binary("eq", "any", np.equal, _zero_derivative, _bool_result)
ne_p = _binary("ne", "any", np.not_equal, _zero_derivative, _bool_result)
lt_p = _binary("lt", "ordered", np.less, _zero_derivative, _bool_result)
le_p = _binary("le", "ordered", np.less_equal, _zero_derivative, _bool_result)
gt_p = _binary("gt", "ordered", np.greater, _zero_derivative, _bool_result)
ge_p = _binary("ge", "ordered", np.greater_equal, _zero_derivative, _bool_result)
complex_p = _binary("complex", "real_float", lambda x, y: x + 1j * y,
                    _linear(lambda ct: [real(ct), neg(imag(ct))]),
                    lambda d: _dtypes.complex128 if d == _dtypes.float64 else _dtypes.complex64)

def _integer_pow_rule(aval, *, y):
    _check_kind("integer_pow", "numeric", [aval])
    if y < 0 and _dtypes.is_integer(aval.dtype):
        raise TypeError(f"integer_pow: negative exponent {y} for an integer operand "
                        f"{aval.str_short()}")
    return aval


integer_pow_p.def_abstract_eval(_integer_pow_rule)

ELEMENTWISE_UNARY = dict(_UNARY)
ELEMENTWISE_BINARY = dict(_BINARY)

# =============================================================================================
# lax-level functions
# =============================================================================================


def _coerce_pair(x, y):
    """A Python scalar operand takes the other operand's dtype (as in jax.lax), once it is
    known to fit its own weak dtype (a Python int too large for int32 without x64 is an
    OverflowError, not a wrapped-around value)."""
    x_scalar, y_scalar = _dtypes.is_python_scalar(x), _dtypes.is_python_scalar(y)
    if x_scalar and not y_scalar:
        _dtypes.weak_scalar_dtype(x)
        return _weak_full(x, get_aval(y)), y
    if y_scalar and not x_scalar:
        _dtypes.weak_scalar_dtype(y)
        return x, _weak_full(y, get_aval(x))
    return x, y


def _weak_full(value, like_aval):
    return full(like_aval.shape, value, like_aval.dtype, weak_type=like_aval.weak_type)


def _unary_fn(p):
    def fn(x):
        return p.bind(x)
    fn.__name__ = p.name
    fn.__doc__ = f"Elementwise ``{p.name}`` (the ``{p.name}`` primitive)."
    return fn


def _broadcast_pair(x, y):
    """Operands of one shape, as ``jax.lax``'s binary functions take them: a rank-0 operand,
    and size-1 axes of operands of equal rank, broadcast. Other shape mismatches are left
    for the primitive's shape rule to report."""
    xs, ys = get_aval(x).shape, get_aval(y).shape
    if xs == ys:
        return x, y
    if not xs or not ys:
        target = ys or xs
    elif len(xs) == len(ys) and all(a == b or a == 1 or b == 1 for a, b in zip(xs, ys)):
        target = tuple(b if a == 1 else a for a, b in zip(xs, ys))
    else:
        return x, y

    def to_target(v, shape):
        if shape == target:
            return v
        return broadcast_in_dim(v, target, tuple(range(len(shape))) if shape else ())
    return to_target(x, xs), to_target(y, ys)


def _binary_fn(p):
    def fn(x, y):
        x, y = _broadcast_pair(*_coerce_pair(x, y))
        return p.bind(x, y)
    fn.__name__ = p.name
    fn.__doc__ = (f"Elementwise ``{p.name}`` of two arrays of one dtype (a rank-0 operand and "
                  f"size-1 axes broadcast).")
    return fn


neg, sign, floor, ceil, is_finite = map(_unary_fn, (neg_p, sign_p, floor_p, ceil_p, is_finite_p))
exp, exp2, log, log1p, expm1 = map(_unary_fn, (exp_p, exp2_p, log_p, log1p_p, expm1_p))
tanh, logistic, sin, cos, tan = map(_unary_fn, (tanh_p, logistic_p, sin_p, cos_p, tan_p))
asin, acos, atan, sinh, cosh = map(_unary_fn, (asin_p, acos_p, atan_p, sinh_p, cosh_p))
asinh, acosh, atanh, sqrt, rsqrt = map(_unary_fn, (asinh_p, acosh_p, atanh_p, sqrt_p, rsqrt_p))
cbrt, abs, square, erf, erfc = map(_unary_fn, (cbrt_p, abs_p, square_p, erf_p, erfc_p))  # noqa: A001
erf_inv, lgamma, digamma = map(_unary_fn, (erf_inv_p, lgamma_p, digamma_p))
bitwise_not, population_count, clz = map(_unary_fn, (not_p, population_count_p, clz_p))
real, imag, conj = map(_unary_fn, (real_p, imag_p, conj_p))
add, sub, mul, div, rem, pow = map(_binary_fn, (add_p, sub_p, mul_p, div_p, rem_p, pow_p))  # noqa: A001
max, min, atan2, nextafter = map(_binary_fn, (max_p, min_p, atan2_p, nextafter_p))  # noqa: A001
polygamma = _binary_fn(polygamma_p)
bitwise_and, bitwise_or, bitwise_xor = map(_binary_fn, (and_p, or_p, xor_p))
shift_left, shift_right_logical, shift_right_arithmetic = map(
    _binary_fn, (shift_left_p, shift_right_logical_p, shift_right_arithmetic_p))
eq, ne, lt, le, gt, ge = map(_binary_fn, (eq_p, ne_p, lt_p, le_p, gt_p, ge_p))
complex = _binary_fn(complex_p)  # noqa: A001
add_any = add
ad.register_tangent_primitives(add_any=add_any)


# ---- jax.lax's public binary functions: no implicit promotion -------------------------------
# The functions above let a Python scalar take the other operand's dtype, a convenience for
# the library's own code. jax.lax promotes nothing: a Python scalar has its own weak dtype
# (int32, float32, complex64, bool), and operands of different dtypes are a TypeError. These
# are the forms ``functrans.lax`` exports.

def binary_fn_without_promotion(p, name: str | None = None, doc: str | None = None):
    """The ``jax.lax`` form of binary primitive ``p``, called ``name`` (default: ``p``'s):
    operands of one dtype, broadcast as :func:`_broadcast_pair` does, nothing promoted."""
    def fn(x, y):
        return p.bind(*_broadcast_pair(x, y))
    fn.__name__ = fn.__qualname__ = name or p.name
    fn.__doc__ = doc or (f"Elementwise ``{p.name}`` of two arrays of one dtype, as ``jax.lax.{p.name}``: "
                  f"no implicit promotion (a Python scalar has its own weak dtype), a rank-0 "
                  f"operand and size-1 axes broadcast.\n\n"
                  f"Example::\n\n    lax.{p.name}(jnp.ones(2), jnp.ones(2))\n"
                  f"    lax.{p.name}(jnp.ones(2), 1)   # TypeError: float32 and int32")
    return fn


def _pow_without_promotion(x, y):
    """``x ** y`` elementwise, as ``jax.lax.pow``: ``x`` is float or complex, ``y`` has
    ``x``'s dtype or an integer dtype (no other promotion).

    Example::

        lax.pow(jnp.float32(2.0), 3)     # 8.0
        lax.pow(jnp.float32(2.0), 3.0)   # 8.0
    """
    x_aval, y_aval = get_aval(x), get_aval(y)
    _check_kind("pow", "float", [x_aval], positional=True)
    if _dtypes.is_integer(y_aval.dtype):
        # an integer exponent computes as x's dtype, as XLA lowers it
        y = convert_element_type(y, x_aval.dtype, weak_type=y_aval.weak_type)
    elif y_aval.dtype != x_aval.dtype and not _dtypes.is_bool(y_aval.dtype):
        raise TypeError("the first argument to pow must have an inexact dtype (float or "
                        "complex), and the second argument must have an inexact or integer "
                        "dtype, and two inexact dtypes must match, but got "
                        f"{x_aval.dtype.name} and {y_aval.dtype.name} respectively.")
    return pow_p.bind(*_broadcast_pair(x, y))


def _clamp_without_promotion(min, x, max):  # noqa: A002
    """``min(max(x, min), max)`` elementwise, as ``jax.lax.clamp``: the bounds are scalars or
    of ``x``'s shape, and all three share ``x``'s dtype (a Python scalar has its own weak
    dtype; nothing is promoted).

    Example::

        lax.clamp(0.0, jnp.array([-1.0, 0.5, 2.0]), 1.0)   # [0., 0.5, 1.]
    """
    return clamp_p.bind(min, x, max)


LAX_FUNCTIONS_WITHOUT_PROMOTION = {
    **{p.name if p.name not in ("and", "or", "xor") else f"bitwise_{p.name}":
       binary_fn_without_promotion(p)
       for p in (add_p, sub_p, mul_p, div_p, rem_p, max_p, min_p, atan2_p, nextafter_p,
                 polygamma_p, and_p, or_p, xor_p, shift_left_p, shift_right_logical_p,
                 shift_right_arithmetic_p, eq_p, ne_p, lt_p, le_p, gt_p, ge_p, complex_p)},
    "pow": _pow_without_promotion,
    "clamp": _clamp_without_promotion,
}


def round(x, rounding_method=0):  # noqa: A001
    """Round to integral values: ``rounding_method`` 0 rounds half away from zero, 1 to even."""
    return round_p.bind(x, rounding_method=int(rounding_method))


def integer_pow(x, y: int):
    """``x ** y`` for a static Python integer ``y``."""
    return integer_pow_p.bind(x, y=int(y))


# =============================================================================================
# select_n, clamp
# =============================================================================================

select_n_p = Primitive("select_n")


@select_n_p.def_impl
def _select_n_ref(which, *cases):
    return _select_n_impl(which, *cases)


@select_n_p.def_abstract_eval
def _select_n_rule(which, *cases):
    if not cases:
        raise TypeError("select_n needs at least one case")
    check_same_dtypes("select", cases)
    if len({c.shape for c in cases}) > 1:
        raise TypeError(f"select cases must have the same shapes, got "
                        f"{[c.shape for c in cases]}.")
    if which.dtype != _dtypes.bool_ and which.dtype not in (_dtypes.int32, _dtypes.int64):
        raise TypeError(f"select_n: the selector must be bool or int32, got {which.str_short()}")
    if which.dtype == _dtypes.bool_ and len(cases) > 2:
        raise TypeError("select_n: a boolean selector chooses between at most 2 cases")
    if which.shape not in ((), cases[0].shape):
        raise TypeError(f"select_n: selector shape {which.shape} must be () or the cases' "
                        f"shape {cases[0].shape}")
    return ShapedArray(cases[0].shape, cases[0].dtype, all(c.weak_type for c in cases))


def _select_n_jvp(primals, tangents):
    which, *cases = primals
    _, *case_tangents = tangents
    out = select_n_p.bind(which, *cases)
    if all(isinstance(t, Zero) for t in case_tangents):
        return out, Zero.from_value(out)
    case_tangents = [ad.instantiate_zeros(t) for t in case_tangents]
    return out, select_n_p.bind(which, *case_tangents)


def _select_n_transpose(ct, which, *cases):
    if is_undefined_primal(which):
        raise AssertionError("select_n is not linear in its selector")
    if isinstance(ct, Zero):
        return [None] + [Zero(c.aval) if is_undefined_primal(c) else None for c in cases]
    zeros = ad.zeros_like_aval(get_aval(ct))
    out = [None]
    for i, c in enumerate(cases):
        if is_undefined_primal(c):
            branches = [zeros] * len(cases)
            branches[i] = ct
            out.append(select_n_p.bind(which, *branches))
        else:
            out.append(None)
    return out


def _select_n_batch(vals, dims):
    which, *cases = vals
    wdim, *cdims = dims
    size = batching.batch_size_of(vals, dims)
    case_ndim = get_aval(cases[0]).ndim - (0 if cdims[0] is None else 1)
    if get_aval(which).ndim - (0 if wdim is None else 1) == 0 and case_ndim > 0 and wdim is not None:
        # a per-example scalar selector: broadcast it to the cases' shape
        which = batching.moveaxis(which, wdim, 0)
        case_shape = next(get_aval(c).shape if d is None else
                          tuple(s for i, s in enumerate(get_aval(c).shape) if i != d)
                          for c, d in zip(cases, cdims))
        which = broadcast_in_dim(which, (size,) + case_shape, (0,))
        wdim = 0
    cases = [batching.bdim_at_front(c, d, size) for c, d in zip(cases, cdims)]
    if wdim is None and get_aval(which).ndim == 0:
        return select_n_p.bind(which, *cases), 0
    which = batching.bdim_at_front(which, wdim, size)
    return select_n_p.bind(which, *cases), 0


select_n_p.jvp = _select_n_jvp
select_n_p.transpose = _select_n_transpose
select_n_p.batch = _select_n_batch


def select_n(which, *cases):
    """``cases[which]`` elementwise; a boolean ``which`` picks ``cases[1]`` where True."""
    return select_n_p.bind(which, *cases)


def select(pred, on_true, on_false):
    """``on_true`` where ``pred`` else ``on_false`` (as ``jax.lax.select``)."""
    return select_n_p.bind(pred, on_false, on_true)


clamp_p = Primitive("clamp")


@clamp_p.def_impl
def _clamp_ref(lo, x, hi):
    return np.minimum(np.maximum(x, lo), hi)


@clamp_p.def_abstract_eval
def _clamp_rule(lo, x, hi):
    check_same_dtypes("clamp", (lo, x, hi))
    for bound, which in ((lo, "min"), (hi, "max")):
        if bound.shape not in ((), x.shape):
            raise TypeError(f"clamp: {which} {bound.str_short()} must have the operand's "
                            f"dtype and be a scalar or of its shape {x.str_short()}")
    return ShapedArray(x.shape, x.dtype, x.weak_type)


def _clamp_batch(vals, dims):
    lo, x, hi = vals
    ld, xd, hd = dims
    size = batching.batch_size_of(vals, dims)
    x = batching.bdim_at_front(x, xd, size)
    shape = get_aval(x).shape

    def fix(b, d):
        if d is None and get_aval(b).ndim == 0:
            return b
        if d is None:
            return batching.bdim_at_front(b, None, size)
        b = batching.moveaxis(b, d, 0)
        if get_aval(b).ndim == 1:
            return broadcast_in_dim(b, shape, (0,))
        return b

    return clamp_p.bind(fix(lo, ld), x, fix(hi, hd)), 0


def _clamp_jvp(primals, tangents):
    lo, x, hi = primals
    glo, gx, ghi = tangents
    out = clamp_p.bind(lo, x, hi)
    t = Zero.from_value(out)

    def bcast(b):
        aval = get_aval(b)
        if aval.shape == get_aval(x).shape:
            return b
        return broadcast_in_dim(b, get_aval(x).shape, ())

    zeros = _const(x, 0)
    if not isinstance(gx, Zero):
        inside = bitwise_and(gt(x, bcast(lo)), lt(x, bcast(hi)))
        t = ad.add_tangents(t, select(inside, gx, zeros))
    if not isinstance(glo, Zero):
        t = ad.add_tangents(t, select(lt(x, bcast(lo)), bcast(glo), zeros))
    if not isinstance(ghi, Zero):
        t = ad.add_tangents(t, select(gt(x, bcast(hi)), bcast(ghi), zeros))
    return out, t



clamp_p.batch = _clamp_batch
clamp_p.jvp = _clamp_jvp


def clamp(min, x, max):  # noqa: A002
    """``min(max(x, min), max)`` elementwise; bounds are scalars or of ``x``'s shape."""
    x_aval = get_aval(x) if not _dtypes.is_python_scalar(x) else None
    if x_aval is not None:
        if _dtypes.is_python_scalar(min):
            min = np.asarray(min, x_aval.dtype)[()]  # noqa: A001
        if _dtypes.is_python_scalar(max):
            max = np.asarray(max, x_aval.dtype)[()]  # noqa: A001
    return clamp_p.bind(min, x, max)


# =============================================================================================
# stop_gradient: the identity whose derivative is zero
# =============================================================================================

stop_gradient_p = Primitive("stop_gradient")
stop_gradient_p.def_impl(lambda x: x)
stop_gradient_p.def_abstract_eval(lambda x: x)
ad.defjvp_zero(stop_gradient_p)
batching.defvectorized(stop_gradient_p)


def stop_gradient(x):
    """``x`` unchanged, but no derivative flows through it (applies to every leaf of a pytree)."""

    def stop(leaf):
        if not _dtypes.is_inexact(get_aval(leaf).dtype):
            return leaf
        return stop_gradient_p.bind(leaf)

    return tree_map(stop, x)


# =============================================================================================
# Operands: one floating dtype, broadcast to one shape
# =============================================================================================


def elementwise_operands(name: str, args, kind: str = "float"):
    """``args`` as arrays of one dtype and shape, as ``jax.lax`` n-ary functions take them:
    Python scalars adopt the arrays' dtype; rank-0 arrays and size-1 axes broadcast; every
    other shape or dtype mismatch is a TypeError naming ``name``. ``kind`` is ``"float"``
    (floating dtypes only), ``"int"`` (integers only) or ``"any"``."""
    arrays = [a for a in args if not _dtypes.is_python_scalar(a)]
    if arrays:
        avals = [get_aval(a) for a in arrays]
        strong = [a.dtype for a in avals if not a.weak_type] or [avals[0].dtype]
        dtype = strong[0]
        if any(d != dtype for d in strong):
            raise TypeError(f"lax.{name} requires arguments to have the same dtypes, got "
                            f"{', '.join(d.name for d in strong)}")
        weak = all(a.weak_type for a in avals)
    else:
        dtype = _dtypes.default_int_dtype() if kind == "int" else _dtypes.dtype_and_weak(args[0])[0]
        weak = True
    ok = {"float": _dtypes.is_float, "int": _dtypes.is_integer, "any": lambda d: True}[kind]
    if not ok(dtype):
        raise TypeError(f"{name} does not accept dtype {np.dtype(dtype).name}; it needs "
                        f"{'a floating' if kind == 'float' else 'an integer'} dtype")
    out = []
    for a in args:
        if _dtypes.is_python_scalar(a) or get_aval(a).dtype != dtype:
            a = convert_element_type(a, dtype, weak_type=weak)
        out.append(a)
    return broadcast_operands(name, out)


def broadcast_operands(name: str, args) -> list:
    """``args`` broadcast to one shape, as ``jax.lax`` n-ary functions take them: rank-0
    operands and size-1 axes broadcast; other shape mismatches are a TypeError naming
    ``name``. Dtypes are left as they are."""
    out = list(args)
    shapes = [get_aval(a).shape for a in out]
    ranks = {len(s) for s in shapes if len(s)}
    if len(ranks) > 1:
        raise TypeError(f"{name}: arrays must have the same number of dimensions, got "
                        f"{sorted(len(s) for s in shapes)}")
    rank = ranks.pop() if ranks else 0
    shape = []
    for i in range(rank):
        sizes = {s[i] for s in shapes if len(s)} - {1}
        if len(sizes) > 1:
            raise TypeError(f"{name} got incompatible shapes for broadcasting: "
                            f"{', '.join(str(s) for s in shapes)}")
        shape.append(sizes.pop() if sizes else 1)
    shape = tuple(shape)
    return [a if get_aval(a).shape == shape else broadcast_in_dim(
        a, shape, tuple(range(rank)) if get_aval(a).ndim else ()) for a in out]



# =============================================================================================
# RoundingMethod, reciprocal
# =============================================================================================


class RoundingMethod(enum.IntEnum):
    """How :func:`round` breaks ties: away from zero (0) or to the nearest even (1)."""
    AWAY_FROM_ZERO = 0
    TO_NEAREST_EVEN = 1

    def __str__(self):
        return self.name


def reciprocal(x):
    """``1 / x`` elementwise (floating and complex dtypes).

        >>> reciprocal(jnp.array([2.0, 4.0]))
        Array([0.5 , 0.25], dtype=float32)
    """
    return integer_pow(x, -1)


# =============================================================================================
# mulhi: the high half of the double-width integer product
# =============================================================================================


def _mulhi_impl(x, y):
    bits = x.dtype.itemsize * 8
    if bits < 64:
        wide = np.int64 if x.dtype.kind == "i" else np.uint64
        return ((x.astype(wide) * y.astype(wide)) >> bits).astype(x.dtype)
    # 64-bit: schoolbook on 32-bit halves of the unsigned values, then a sign correction
    ux, uy = x.view(np.uint64), y.view(np.uint64)
    mask, s32 = np.uint64(0xFFFFFFFF), np.uint64(32)
    with np.errstate(over="ignore"):
        x_lo, x_hi, y_lo, y_hi = ux & mask, ux >> s32, uy & mask, uy >> s32
        lo_lo = x_lo * y_lo
        mid1 = x_hi * y_lo + (lo_lo >> s32)
        mid2 = x_lo * y_hi + (mid1 & mask)
        high = x_hi * y_hi + (mid1 >> s32) + (mid2 >> s32)
        if x.dtype.kind == "i":
            # signed = unsigned - 2**64 for negatives: subtract the other operand
            high = high - np.where(x < 0, uy, np.uint64(0)) - np.where(y < 0, ux, np.uint64(0))
    return high.view(x.dtype)


mulhi_p = Primitive("mulhi")
mulhi_p.def_impl(_mulhi_impl)
mulhi_p.def_abstract_eval(_elementwise_rule("mulhi", "int"))
batching.broadcast_batcher(mulhi_p)
ad.defjvp_zero(mulhi_p)


def mulhi(x, y, /):
    """The high half of the double-width product of two integers of one dtype:
    ``(x * y) >> bits`` computed without overflow.

        >>> mulhi(jnp.array([2**31 - 1], jnp.int32), jnp.array([2**31 - 1], jnp.int32))
        Array([1073741823], dtype=int32)
    """
    return mulhi_p.bind(*elementwise_operands("mulhi", (x, y), kind="int"))


# =============================================================================================
# bitcast_convert_type
# =============================================================================================

bitcast_convert_type_p = Primitive("bitcast_convert_type")


@bitcast_convert_type_p.def_abstract_eval
def _bitcast_rule(operand, *, new_dtype):
    old, new = operand.dtype, np.dtype(new_dtype)
    if old != new and any(_dtypes.is_bool(d) or _dtypes.is_complex(d) for d in (old, new)):
        raise TypeError(f"bitcast_convert_type does not support bool or complex values unless "
                        f"the operand and destination types match (operand "
                        f"{operand.str_short()}, new_dtype={new.name})")
    if old.itemsize == new.itemsize:
        shape = operand.shape
    elif old.itemsize > new.itemsize:
        shape = operand.shape + (old.itemsize // new.itemsize,)
    else:
        ratio = new.itemsize // old.itemsize
        if not operand.shape or operand.shape[-1] != ratio:
            raise TypeError(f"bitcast_convert_type: converting {operand.str_short()} to "
                            f"{new.name} needs a last axis of size {ratio} (the ratio of "
                            f"their widths)")
        shape = operand.shape[:-1]
    return ShapedArray(shape, new)


@bitcast_convert_type_p.def_impl
def _bitcast_impl(operand, *, new_dtype):
    new = np.dtype(new_dtype)
    x = np.array(operand, order="C", copy=True)  # 0-d stays 0-d
    if x.dtype.itemsize == new.itemsize:
        return x.view(new)
    if x.dtype.itemsize > new.itemsize:
        return x.reshape(x.shape + (1,)).view(new)
    return x.view(new).reshape(x.shape[:-1])


def _bitcast_batch(vals, dims, *, new_dtype):
    # the conversion may add or remove the last axis: keep the batch axis in front
    (x,), (d,) = vals, dims
    return bitcast_convert_type_p.bind(batching.moveaxis(x, d, 0), new_dtype=new_dtype), 0


bitcast_convert_type_p.batch = _bitcast_batch
ad.defjvp_zero(bitcast_convert_type_p)


def bitcast_convert_type(operand, new_dtype):
    """Reinterpret the bits of ``operand`` as ``new_dtype``. A narrower type adds a last axis
    (the pieces of each element, in memory order); a wider one consumes a last axis of that
    ratio. Bool and complex only convert to themselves. No derivative flows through.

        >>> bitcast_convert_type(jnp.float32(1.0), jnp.int32)
        Array(1065353216, dtype=int32)
    """
    new_dtype = _dtypes.canonicalize_dtype(new_dtype)
    if _dtypes.is_python_scalar(operand):
        operand = convert_element_type(operand, get_aval(operand).dtype)
    return bitcast_convert_type_p.bind(operand, new_dtype=new_dtype)


# =============================================================================================
# reduce_precision: round to a float format with fewer exponent / mantissa bits
# =============================================================================================


def _reduce_precision_bits(x, exponent_bits, mantissa_bits):
    """Round float32/float64 ``x`` to ``exponent_bits``/``mantissa_bits`` on its bit pattern:
    round-to-nearest-even on the mantissa (a carry may bump the exponent), then exponents
    above the format's range become infinities and those below its smallest normal zero."""
    finfo = np.finfo(x.dtype)
    total, mant = finfo.bits, finfo.nmant
    expo = total - 1 - mant
    uint = np.dtype(f"u{total // 8}")
    bits = x.view(uint).copy()
    one = uint.type(1)
    if mantissa_bits < mant:
        drop = uint.type(mant - mantissa_bits)
        last_kept = (bits >> drop) & one
        half_minus_one = (one << (drop - one)) - one
        with np.errstate(over="ignore"):
            bits = (bits + half_minus_one + last_kept) & ~((one << drop) - one)
    if exponent_bits < expo:
        sign = bits & (one << uint.type(total - 1))
        biased = ((bits >> uint.type(mant)) & ((one << uint.type(expo)) - one)).astype(np.int64)
        unbiased = biased - (2 ** (expo - 1) - 1)
        limit = 2 ** (exponent_bits - 1) - 1
        inf_bits = sign | (((one << uint.type(expo)) - one) << uint.type(mant))
        bits = np.where(unbiased > limit, inf_bits, bits)
        bits = np.where(unbiased <= -limit, sign, bits)
    out = bits.view(x.dtype)
    return np.where(np.isnan(x), x, out)


reduce_precision_p = Primitive("reduce_precision")


@reduce_precision_p.def_impl
def _reduce_precision_impl(operand, *, exponent_bits, mantissa_bits):
    x = operand
    if x.dtype.itemsize < 4:  # bf16/f16: every narrower format is exact in float32
        return _reduce_precision_bits(x.astype(np.float32), exponent_bits,
                                      mantissa_bits).astype(x.dtype)
    return _reduce_precision_bits(x, exponent_bits, mantissa_bits)


@reduce_precision_p.def_abstract_eval
def _reduce_precision_rule(operand, *, exponent_bits, mantissa_bits):
    _check_kind("reduce_precision", "real_float", [operand])
    return operand


batching.defvectorized(reduce_precision_p)
# rounding is treated as the identity for derivatives, with tangents rounded like the values
ad.deflinear(reduce_precision_p, lambda ct, **params: [reduce_precision_p.bind(ct, **params)])


def reduce_precision(operand, exponent_bits: int, mantissa_bits: int):
    """Round ``operand`` to the float format with ``exponent_bits`` exponent bits and
    ``mantissa_bits`` explicit mantissa bits (round to nearest even; overflow to infinity,
    values below the smallest normal to zero) and return it in its own dtype: emulates
    bfloat16 (8, 7), float16 (5, 10) and the like.

        >>> reduce_precision(jnp.float32(1.2345678), 8, 7)
        Array(1.234375, dtype=float32)
    """
    exponent_bits, mantissa_bits = operator.index(exponent_bits), operator.index(mantissa_bits)
    if exponent_bits < 1:
        raise ValueError(f"reduce_precision: exponent_bits must be positive; got "
                         f"{exponent_bits}")
    if mantissa_bits < 0:
        raise ValueError(f"reduce_precision: mantissa_bits must be non-negative; got "
                         f"{mantissa_bits}")
    if _dtypes.is_python_scalar(operand):
        operand = convert_element_type(operand, get_aval(operand).dtype, weak_type=True)
    return reduce_precision_p.bind(operand, exponent_bits=exponent_bits,
                                   mantissa_bits=mantissa_bits)


__all__ = ["abs", "acos", "acosh", "add", "asin", "asinh", "atan", "atan2", "atanh",
           "bitcast_convert_type", "bitwise_and", "bitwise_not", "bitwise_or",
           "bitwise_xor", "cbrt", "ceil", "clamp", "clz", "complex", "conj",
           "convert_element_type", "cos", "cosh", "digamma", "div", "eq", "erf", "erf_inv",
           "erfc", "exp", "exp2", "expm1", "floor", "ge", "gt", "imag", "integer_pow",
           "is_finite", "le", "lgamma", "log", "log1p", "logistic", "lt", "max", "min", "mul",
           "mulhi", "ne", "neg", "nextafter", "polygamma", "population_count", "pow", "real",
           "reciprocal", "reduce_precision", "rem", "round", "RoundingMethod", "rsqrt",
           "select", "select_n", "shift_left", "shift_right_arithmetic", "shift_right_logical",
           "sign", "sin", "sinh", "sqrt", "square", "stop_gradient", "sub", "tan", "tanh"]
