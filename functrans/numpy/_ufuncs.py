"""Elementwise math: NumPy's ufuncs over the elementwise primitives.

Every function converts its arguments with JAX's promotion rules (Python scalars are weak,
so ``float32_array * 2.0`` stays float32; functions that only make sense for floats, such as
``sin``, turn integers into the default float type), broadcasts them NumPy-style, and then
binds primitives. Where NumPy's definition differs from the one primitive (floor division,
``remainder``'s sign rule, ``hypot`` avoiding overflow) the composition is written out here.
"""
from __future__ import annotations

import math

import numpy as np

from functrans import _dtypes
from functrans.core import get_aval
from functrans.numpy._promotion import (array, asarray, check_arraylike, has_lax_fn, lax_fn,
                                        promote_args, promote_args_inexact,
                                        promote_args_numeric, promote_shapes, to_array)
from functrans.primitives import elementwise as lax
from functrans.primitives import structural

# ---- small helpers ---------------------------------------------------------------------------


def _const(x, value):
    """``value`` with ``x``'s shape and dtype (weak if ``x`` is)."""
    return lax._weak_full(value, get_aval(x))


def _dtype(x):
    return get_aval(x).dtype


def _is_int_or_bool(x) -> bool:
    dtype = _dtype(x)
    return _dtypes.is_integer(dtype) or _dtypes.is_bool(dtype)


def _inexact1(fname, x):
    return promote_args_inexact(fname, x)[0]


def _unary_inexact(name, prim_fn, doc_example=None):
    def fn(x, /):
        return prim_fn(_inexact1(name, x))
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"Elementwise ``{name}`` (as ``numpy.{name}``); integer and boolean inputs "
                  "are converted to the default float type first.")
    if doc_example:
        fn.__doc__ += "\n\n" + doc_example
    return fn


# ---- trigonometric, hyperbolic, exponential --------------------------------------------------

sin = _unary_inexact("sin", lax.sin, "        >>> sin(0.0)\n        Array(0., dtype=float32, weak_type=True)")
cos = _unary_inexact("cos", lax.cos)
tan = _unary_inexact("tan", lax.tan)
arcsin = _unary_inexact("arcsin", lax.asin)
arccos = _unary_inexact("arccos", lax.acos)
arctan = _unary_inexact("arctan", lax.atan)
sinh = _unary_inexact("sinh", lax.sinh)
cosh = _unary_inexact("cosh", lax.cosh)
tanh = _unary_inexact("tanh", lax.tanh)
arcsinh = _unary_inexact("arcsinh", lax.asinh)
arccosh = _unary_inexact("arccosh", lax.acosh)
arctanh = _unary_inexact("arctanh", lax.atanh)
exp = _unary_inexact("exp", lax.exp, "        >>> exp(0.0)\n        Array(1., dtype=float32, weak_type=True)")
exp2 = _unary_inexact("exp2", lax.exp2)
expm1 = _unary_inexact("expm1", lax.expm1)
log = _unary_inexact("log", lax.log)
log1p = _unary_inexact("log1p", lax.log1p)
sqrt = _unary_inexact("sqrt", lax.sqrt, "        >>> sqrt(4)\n        Array(2., dtype=float32, weak_type=True)")
cbrt = _unary_inexact("cbrt", lax.cbrt)

# the array-API spellings
asin, acos, atan = arcsin, arccos, arctan
asinh, acosh, atanh = arcsinh, arccosh, arctanh


def log2(x, /):
    """Base-2 logarithm, elementwise."""
    x = _inexact1("log2", x)
    return lax.div(lax.log(x), lax.log(_const(x, 2)))


def log10(x, /):
    """Base-10 logarithm, elementwise.

        >>> log10(100.0)
        Array(2., dtype=float32, weak_type=True)
    """
    x = _inexact1("log10", x)
    return lax.div(lax.log(x), lax.log(_const(x, 10)))


def deg2rad(x, /):
    """Degrees to radians."""
    x = _inexact1("deg2rad", x)
    return lax.mul(x, _const(x, math.pi / 180))


def rad2deg(x, /):
    """Radians to degrees."""
    x = _inexact1("rad2deg", x)
    return lax.mul(x, _const(x, 180 / math.pi))


radians, degrees = deg2rad, rad2deg


def sinc(x, /):
    """The normalized sinc, ``sin(pi x) / (pi x)``, equal to 1 at 0.

        >>> sinc(0.0)
        Array(1., dtype=float32, weak_type=True)
    """
    x = _inexact1("sinc", x)
    is_zero = lax.eq(x, _const(x, 0))
    # keep the untaken branch finite so that its derivative is not NaN at 0
    safe = lax.select(is_zero, _const(x, 1), lax.mul(x, _const(x, math.pi)))
    return lax.select(is_zero, _const(x, 1), lax.div(lax.sin(safe), safe))


def reciprocal(x, /):
    """``1 / x`` in floating point."""
    x = _inexact1("reciprocal", x)
    return lax.div(_const(x, 1), x)


# ---- arithmetic ------------------------------------------------------------------------------


def add(x, y, /):
    """``x + y`` with broadcasting (boolean inputs: logical or).

        >>> add(arange(3), 1)
        Array([1, 2, 3], dtype=int32)
    """
    x, y = promote_args("add", x, y)
    return lax.bitwise_or(x, y) if _dtypes.is_bool(_dtype(x)) else lax.add(x, y)


def subtract(x, y, /):
    """``x - y`` with broadcasting."""
    x, y = promote_args("subtract", x, y)
    if _dtypes.is_bool(_dtype(x)):
        raise TypeError("subtract: boolean subtract is not supported; use logical_xor or "
                        "bitwise_xor instead")
    return lax.sub(x, y)


def multiply(x, y, /):
    """``x * y`` with broadcasting (boolean inputs: logical and)."""
    x, y = promote_args("multiply", x, y)
    return lax.bitwise_and(x, y) if _dtypes.is_bool(_dtype(x)) else lax.mul(x, y)


def true_divide(x, y, /):
    """``x / y`` in floating point (integers are converted to the default float type).

        >>> true_divide(1, 2)
        Array(0.5, dtype=float32, weak_type=True)
    """
    return lax.div(*promote_args_inexact("true_divide", x, y))


divide = true_divide


def _float_divmod(x, y):
    # Python's rule: the remainder takes the divisor's sign, the quotient is floored
    mod = lax.rem(x, y)
    quotient = lax.div(lax.sub(x, mod), y)
    fix = lax.bitwise_and(lax.ne(mod, _const(mod, 0)), lax.ne(lax.sign(y), lax.sign(mod)))
    mod = lax.select(fix, lax.add(mod, y), mod)
    quotient = lax.select(fix, lax.sub(quotient, _const(quotient, 1)), quotient)
    return lax.round(quotient, 1), mod


def floor_divide(x, y, /):
    """``x // y``: the quotient rounded toward negative infinity.

        >>> floor_divide(-7, 2)
        Array(-4, dtype=int32, weak_type=True)
    """
    x, y = promote_args_numeric("floor_divide", x, y)
    dtype = _dtype(x)
    if _dtypes.is_unsigned(dtype):
        return lax.div(x, y)
    if _dtypes.is_integer(dtype):
        q = lax.div(x, y)
        # truncation rounds toward zero: step down when the signs differ and it was inexact
        signs_differ = lax.ne(lax.sign(x), lax.sign(y))
        inexact = lax.ne(lax.rem(x, y), _const(x, 0))
        return lax.select(lax.bitwise_and(signs_differ, inexact), lax.sub(q, _const(q, 1)), q)
    if _dtypes.is_complex(dtype):
        raise TypeError("floor_divide does not support complex inputs")
    return _float_divmod(x, y)[0]


def remainder(x, y, /):
    """``x % y`` with the sign of ``y`` (Python's and NumPy's ``mod``).

        >>> remainder(-7, 3)
        Array(2, dtype=int32, weak_type=True)
    """
    x, y = promote_args_numeric("remainder", x, y)
    if _dtypes.is_unsigned(_dtype(x)):
        return lax.rem(x, y)
    if _dtypes.is_complex(_dtype(x)):
        raise TypeError("remainder does not support complex inputs")
    trunc_mod = lax.rem(x, y)
    zero = _const(trunc_mod, 0)
    wrong_sign = lax.ne(lax.lt(trunc_mod, zero), lax.lt(y, _const(y, 0)))
    do_plus = lax.bitwise_and(lax.ne(trunc_mod, zero), wrong_sign)
    return lax.select(do_plus, lax.add(trunc_mod, y), trunc_mod)


mod = remainder


def fmod(x, y, /):
    """C's ``fmod``: the remainder with the sign of ``x``."""
    x, y = promote_args_numeric("fmod", x, y)
    return lax.rem(x, y)


def divmod(x, y, /):  # noqa: A001
    """``(floor_divide(x, y), remainder(x, y))``."""
    return floor_divide(x, y), remainder(x, y)


def modf(x, /):
    """Fractional and integral parts of ``x``, both with its sign."""
    x = _inexact1("modf", x)
    whole = trunc(x)
    frac = lax.select(isinf(x), copysign(_const(x, 0), x), lax.sub(x, whole))
    return frac, whole


def negative(x, /):
    """``-x``."""
    x = to_array(x)
    if _dtypes.is_bool(_dtype(x)):
        raise TypeError("negative: boolean negation is not supported; use logical_not")
    return lax.neg(x)


def positive(x, /):
    """``+x`` (the input as an array)."""
    return to_array(x)


def absolute(x, /):
    """``|x|``; complex inputs give their magnitude as a real array.

        >>> absolute(-2)
        Array(2, dtype=int32, weak_type=True)
    """
    x = to_array(x)
    if _dtypes.is_bool(_dtype(x)) or _dtypes.is_unsigned(_dtype(x)):
        return x
    return lax.abs(x)


abs = absolute  # noqa: A001


def fabs(x, /):
    """``|x|`` of a real input, in floating point."""
    x = _inexact1("fabs", x)
    if _dtypes.is_complex(_dtype(x)):
        raise TypeError("fabs does not support complex inputs")
    return lax.abs(x)


def sign(x, /):
    """-1, 0 or 1 by the sign of ``x`` (NaN stays NaN)."""
    x = to_array(x)
    if _dtypes.is_bool(_dtype(x)):
        return x
    return lax.sign(x)


def square(x, /):
    """``x * x``."""
    x = to_array(x)
    if _dtypes.is_bool(_dtype(x)):
        return x
    return lax.square(x)


def _int_pow(x, y):
    """``x ** y`` for integer arrays by binary exponentiation over every bit of ``y``."""
    bits = np.dtype(_dtype(y)).itemsize * 8
    one, zero = _const(y, 1), _const(y, 0)
    acc = _const(x, 1)
    base = x
    exponent = lax.select(lax.lt(y, zero), zero, y) if _dtypes.is_signed(_dtype(y)) else y
    for _ in range(bits):
        acc = lax.select(lax.ne(lax.bitwise_and(exponent, one), zero), lax.mul(acc, base), acc)
        base = lax.mul(base, base)
        exponent = lax.shift_right_logical(exponent, one)
    if _dtypes.is_signed(_dtype(y)):
        # a negative power truncates to 0 except for bases 1 and -1
        odd = lax.ne(lax.bitwise_and(y, one), zero)
        neg_result = lax.select(lax.eq(x, _const(x, 1)), _const(x, 1),
                                lax.select(lax.eq(x, _const(x, -1)),
                                           lax.select(odd, _const(x, -1), _const(x, 1)),
                                           _const(x, 0)))
        acc = lax.select(lax.lt(y, zero), neg_result, acc)
    return acc


def power(x, y, /):
    """``x ** y``. A static integer exponent uses repeated multiplication
    (``lax.integer_pow``), so ``power(x, 2)`` keeps ``x``'s dtype and has exact derivatives.

        >>> power(arange(4), 2)
        Array([0, 1, 4, 9], dtype=int32)
    """
    check_arraylike("power", x, y)
    if isinstance(y, (int, np.integer)) and not isinstance(y, (bool, np.bool_)):
        x, = promote_args_numeric("power", x)
        if _dtypes.is_integer(_dtype(x)) and y < 0:
            raise ValueError("power: integers to negative integer powers are not allowed")
        return lax.integer_pow(x, int(y))
    x, y = promote_args_numeric("power", x, y)
    if _dtypes.is_integer(_dtype(x)):
        return _int_pow(x, y)
    return lax.pow(x, y)


pow = power  # noqa: A001


def float_power(x, y, /):
    """``x ** y`` computed in the default float (or complex) type."""
    x, y = promote_args_inexact("float_power", x, y)
    target = _dtypes.default_complex_dtype() if _dtypes.is_complex(_dtype(x)) \
        else _dtypes.default_float_dtype()
    x, y = lax.convert_element_type(x, target), lax.convert_element_type(y, target)
    return lax.pow(x, y)


def maximum(x, y, /):
    """Elementwise maximum; NaN if either input is NaN.

        >>> maximum(arange(3), 1)
        Array([1, 1, 2], dtype=int32)
    """
    return lax.max(*promote_args("maximum", x, y))


def minimum(x, y, /):
    """Elementwise minimum; NaN if either input is NaN."""
    return lax.min(*promote_args("minimum", x, y))


def fmax(x, y, /):
    """Elementwise maximum ignoring NaNs (NaN only if both are NaN)."""
    x, y = promote_args("fmax", x, y)
    return where(lax.bitwise_or(lax.gt(x, y), isnan(y)), x, y)


def fmin(x, y, /):
    """Elementwise minimum ignoring NaNs (NaN only if both are NaN)."""
    x, y = promote_args("fmin", x, y)
    return where(lax.bitwise_or(lax.lt(x, y), isnan(y)), x, y)


def arctan2(x1, x2, /):
    """The angle of the point ``(x2, x1)``, in ``[-pi, pi]``."""
    return lax.atan2(*promote_args_inexact("arctan2", x1, x2))


atan2 = arctan2


def hypot(x1, x2, /):
    """``sqrt(x1**2 + x2**2)`` without overflow for large inputs.

        >>> hypot(3.0, 4.0)
        Array(5., dtype=float32, weak_type=True)
    """
    x1, x2 = promote_args_inexact("hypot", x1, x2)
    x1, x2 = lax.abs(x1), lax.abs(x2)
    any_inf = lax.bitwise_or(isinf(x1), isinf(x2))
    big, small = lax.max(x1, x2), lax.min(x1, x2)
    big_is_zero = lax.eq(big, _const(big, 0))
    ratio = lax.div(small, lax.select(big_is_zero, _const(big, 1), big))
    out = lax.select(big_is_zero, big,
                     lax.mul(big, lax.sqrt(lax.add(_const(big, 1), lax.square(ratio)))))
    return lax.select(any_inf, _const(out, np.inf), out)


def logaddexp(x1, x2, /):
    """``log(exp(x1) + exp(x2))`` computed without overflow.

        >>> logaddexp(0.0, 0.0)
        Array(0.6931472, dtype=float32, weak_type=True)
    """
    x1, x2 = promote_args_inexact("logaddexp", x1, x2)
    amax, amin = lax.max(x1, x2), lax.min(x1, x2)
    # min - max rather than -|x1 - x2|: at x1 == x2 the derivative is then 1/2 for each
    # operand (max and min split ties), not decided by the kink of abs
    delta = lax.sub(amin, amax)
    # equal infinities give NaN in delta; x1 + x2 is then the right answer (inf or -inf).
    # The other branch gets a finite delta, so its (unused) derivative is no NaN either.
    infinities = isnan(delta)
    delta = lax.select(infinities, _const(delta, 0), delta)
    return lax.select(infinities, lax.add(x1, x2), lax.add(amax, lax.log1p(lax.exp(delta))))


def logaddexp2(x1, x2, /):
    """``log2(2**x1 + 2**x2)`` computed without overflow."""
    x1, x2 = promote_args_inexact("logaddexp2", x1, x2)
    ln2 = _const(x1, math.log(2))
    return lax.div(logaddexp(lax.mul(x1, ln2), lax.mul(x2, ln2)), ln2)


def heaviside(x1, x2, /):
    """0 where ``x1 < 0``, 1 where ``x1 > 0``, ``x2`` where ``x1 == 0``."""
    x1, x2 = promote_args_inexact("heaviside", x1, x2)
    zero, one = _const(x1, 0), _const(x1, 1)
    return lax.select(lax.lt(x1, zero), zero, lax.select(lax.gt(x1, zero), one, x2))


def copysign(x1, x2, /):
    """``|x1|`` with the sign of ``x2``."""
    x1, x2 = promote_args_inexact("copysign", x1, x2)
    if _dtypes.is_complex(_dtype(x1)):
        raise TypeError("copysign does not support complex inputs")
    magnitude = lax.abs(x1)
    return lax.select(signbit(x2), lax.neg(magnitude), magnitude)


def nextafter(x1, x2, /):
    """The next representable float after ``x1`` toward ``x2``."""
    return lax.nextafter(*promote_args_inexact("nextafter", x1, x2))


def ldexp(x1, x2, /):
    """``x1 * 2**x2`` for an integer ``x2``."""
    check_arraylike("ldexp", x1, x2)
    x2 = to_array(x2)
    if not _is_int_or_bool(x2):
        raise TypeError(f"ldexp: the exponent must be an integer, got {_dtype(x2)}")
    x1, = promote_args_inexact("ldexp", x1)
    x1, x2 = promote_shapes(x1, x2)
    # split the scale in two so that neither factor over- or underflows on its own
    half = floor_divide(x2, 2)
    scale1 = lax.exp2(lax.convert_element_type(half, _dtype(x1)))
    scale2 = lax.exp2(lax.convert_element_type(lax.sub(x2, half), _dtype(x1)))
    return lax.mul(lax.mul(x1, scale1), scale2)


def frexp(x, /):
    """Mantissa in ``[0.5, 1)`` and integer exponent with ``x == mantissa * 2**exponent``.

        >>> frexp(8.0)[1]
        Array(4, dtype=int32)
    """
    x = _inexact1("frexp", x)
    if _dtypes.is_complex(_dtype(x)):
        raise TypeError("frexp does not support complex inputs")
    out_dtype = _dtype(x)
    xc = lax.convert_element_type(x, _dtypes.float32) if out_dtype in (
        _dtypes.float16, _dtypes.bfloat16) else x
    special = lax.bitwise_or(lax.eq(xc, _const(xc, 0)), lax.bitwise_not(lax.is_finite(xc)))
    safe = lax.select(special, _const(xc, 1), lax.abs(xc))
    exponent = lax.add(lax.floor(log2(safe)), _const(xc, 1))

    def scaled(e):
        return ldexp(xc, lax.convert_element_type(lax.neg(e), _dtypes.int32))

    # log2 can be off by one near powers of two: renormalize the mantissa once each way
    mantissa = scaled(exponent)
    too_big = lax.ge(lax.abs(mantissa), _const(xc, 1))
    exponent = lax.select(too_big, lax.add(exponent, _const(xc, 1)), exponent)
    mantissa = scaled(exponent)
    too_small = lax.lt(lax.abs(mantissa), _const(xc, 0.5))
    exponent = lax.select(too_small, lax.sub(exponent, _const(xc, 1)), exponent)
    mantissa = scaled(exponent)
    mantissa = lax.select(special, xc, mantissa)
    exponent = lax.select(special, _const(xc, 0), exponent)
    return (lax.convert_element_type(mantissa, out_dtype),
            lax.convert_element_type(exponent, _dtypes.int32))


def gcd(x1, x2, /):
    """Greatest common divisor of integers (``gcd(0, 0) == 0``).

        >>> gcd(12, 18)
        Array(6, dtype=int32, weak_type=True)
    """
    x1, x2 = promote_args_numeric("gcd", x1, x2)
    if not _dtypes.is_integer(_dtype(x1)):
        raise TypeError(f"gcd requires integer arguments, got {_dtype(x1)}")
    a, b = absolute(x1), absolute(x2)
    # Euclid's algorithm needs at most ~1.44 * bits steps (consecutive Fibonacci numbers are
    # the worst case), so a fixed unrolled count covers every input of this width
    bits = np.dtype(_dtype(a)).itemsize * 8
    zero, one = _const(b, 0), _const(b, 1)
    for _ in range(int(1.45 * bits) + 2):
        nonzero = lax.ne(b, zero)
        safe_b = lax.select(nonzero, b, one)
        a, b = lax.select(nonzero, b, a), lax.select(nonzero, lax.rem(a, safe_b), zero)
    return a


def lcm(x1, x2, /):
    """Least common multiple of integers (0 if either is 0)."""
    x1, x2 = promote_args_numeric("lcm", x1, x2)
    d = gcd(x1, x2)
    is_zero = lax.eq(d, _const(d, 0))
    safe_d = lax.select(is_zero, _const(d, 1), d)
    return lax.select(is_zero, _const(d, 0), absolute(lax.mul(x1, floor_divide(x2, safe_d))))


# ---- rounding --------------------------------------------------------------------------------


def floor(x, /):
    """Round toward negative infinity (integers are returned unchanged)."""
    x = to_array(x)
    return x if _is_int_or_bool(x) else lax.floor(x)


def ceil(x, /):
    """Round toward positive infinity (integers are returned unchanged)."""
    x = to_array(x)
    return x if _is_int_or_bool(x) else lax.ceil(x)


def trunc(x, /):
    """Round toward zero (integers are returned unchanged)."""
    x = to_array(x)
    if _is_int_or_bool(x):
        return x
    return lax.select(lax.lt(x, _const(x, 0)), lax.ceil(x), lax.floor(x))


fix = trunc


def rint(x, /):
    """Round to the nearest integer, ties to even, as a float."""
    x = _inexact1("rint", x)
    if _dtypes.is_complex(_dtype(x)):
        return lax.complex(lax.round(lax.real(x), 1), lax.round(lax.imag(x), 1))
    return lax.round(x, 1)


def round(a, decimals=0, out=None):  # noqa: A001
    """Round to ``decimals`` decimal places, ties to even.

        >>> round(2.5)
        Array(2., dtype=float32, weak_type=True)
    """
    if out is not None:
        raise ValueError("round: the `out` argument is not supported (arrays are immutable)")
    a = to_array(a)
    decimals = int(decimals)
    if _is_int_or_bool(a):
        if decimals < 0:
            raise NotImplementedError("round: negative `decimals` for integer inputs")
        return a
    dtype = _dtype(a)
    if _dtypes.is_complex(dtype):
        return lax.complex(round(lax.real(a), decimals), round(lax.imag(a), decimals))
    x = lax.convert_element_type(a, _dtypes.float32) if dtype in (
        _dtypes.float16, _dtypes.bfloat16) else a
    if decimals == 0:
        out_ = lax.round(x, 1)
    else:
        factor = _const(x, 10.0 ** decimals)
        out_ = lax.div(lax.round(lax.mul(x, factor), 1), factor)
    return lax.convert_element_type(out_, dtype, get_aval(a).weak_type)


around = round
round_ = round


# ---- comparisons and logic -------------------------------------------------------------------


def _comparison(name, prim_fn, ordering: bool = False):
    def fn(x, y, /):
        x, y = promote_args(name, x, y)
        if ordering and _dtypes.is_complex(_dtype(x)):
            # complex numbers order lexicographically: by real part, then by imaginary part
            real_x, real_y = lax.real(x), lax.real(y)
            return lax.select(lax.eq(real_x, real_y), prim_fn(lax.imag(x), lax.imag(y)),
                              prim_fn(real_x, real_y))
        return prim_fn(x, y)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise ``{name}`` of two broadcast arrays, as a boolean array."
    return fn


equal = _comparison("equal", lax.eq)
not_equal = _comparison("not_equal", lax.ne)
less = _comparison("less", lax.lt, ordering=True)
less_equal = _comparison("less_equal", lax.le, ordering=True)
greater = _comparison("greater", lax.gt, ordering=True)
greater_equal = _comparison("greater_equal", lax.ge, ordering=True)


def _to_bool(x):
    x = to_array(x)
    if _dtypes.is_bool(_dtype(x)):
        return x
    return lax.ne(x, _const(x, 0))


def logical_and(x, y, /):
    """Elementwise truth of ``x and y``."""
    check_arraylike("logical_and", x, y)
    return lax.bitwise_and(*promote_shapes(_to_bool(x), _to_bool(y)))


def logical_or(x, y, /):
    """Elementwise truth of ``x or y``."""
    check_arraylike("logical_or", x, y)
    return lax.bitwise_or(*promote_shapes(_to_bool(x), _to_bool(y)))


def logical_xor(x, y, /):
    """Elementwise truth of ``bool(x) != bool(y)``."""
    check_arraylike("logical_xor", x, y)
    return lax.bitwise_xor(*promote_shapes(_to_bool(x), _to_bool(y)))


def logical_not(x, /):
    """Elementwise truth of ``not x``."""
    check_arraylike("logical_not", x)
    return lax.bitwise_not(_to_bool(x))


def _bitwise(name, prim_fn):
    def fn(x, y, /):
        x, y = promote_args(name, x, y)
        if not _is_int_or_bool(x):
            raise TypeError(f"{name} requires integer or boolean arguments, got {_dtype(x)}")
        return prim_fn(x, y)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise ``{name}`` of integer or boolean arrays."
    return fn


bitwise_and = _bitwise("bitwise_and", lax.bitwise_and)
bitwise_or = _bitwise("bitwise_or", lax.bitwise_or)
bitwise_xor = _bitwise("bitwise_xor", lax.bitwise_xor)


def invert(x, /):
    """Bitwise not (logical not for booleans).

        >>> invert(array([0, 1], dtype=uint8))
        Array([255, 254], dtype=uint8)
    """
    x = to_array(x)
    if not _is_int_or_bool(x):
        raise TypeError(f"invert requires an integer or boolean argument, got {_dtype(x)}")
    return lax.bitwise_not(x)


bitwise_not = bitwise_invert = invert


def left_shift(x, y, /):
    """``x << y`` for integers."""
    x, y = promote_args_numeric("left_shift", x, y)
    return lax.shift_left(x, y)


def right_shift(x, y, /):
    """``x >> y`` for integers (arithmetic for signed types, logical for unsigned)."""
    x, y = promote_args_numeric("right_shift", x, y)
    if _dtypes.is_unsigned(_dtype(x)):
        return lax.shift_right_logical(x, y)
    return lax.shift_right_arithmetic(x, y)


bitwise_left_shift, bitwise_right_shift = left_shift, right_shift


def bitwise_count(x, /):
    """Number of 1 bits in ``|x|``, as uint8."""
    x = to_array(x)
    if not _dtypes.is_integer(_dtype(x)):
        raise TypeError(f"bitwise_count requires integers, got {_dtype(x)}")
    return lax.convert_element_type(lax.population_count(absolute(x)), _dtypes.uint8)


# ---- classification --------------------------------------------------------------------------


def _bool_full(x, value):
    aval = get_aval(x)
    return structural.full(aval.shape, bool(value), _dtypes.bool_)


def isnan(x, /):
    """True where ``x`` is NaN."""
    x = to_array(x)
    if not _dtypes.is_inexact(_dtype(x)):
        return _bool_full(x, False)
    return lax.ne(x, x)


def isinf(x, /):
    """True where ``x`` is +inf or -inf."""
    x = to_array(x)
    dtype = _dtype(x)
    if _dtypes.is_complex(dtype):
        return lax.bitwise_or(isinf(lax.real(x)), isinf(lax.imag(x)))
    if not _dtypes.is_float(dtype):
        return _bool_full(x, False)
    return lax.eq(lax.abs(x), _const(x, np.inf))


def isposinf(x, /):
    """True where ``x`` is +inf."""
    x = to_array(x)
    if not _dtypes.is_float(_dtype(x)):
        return _bool_full(x, False)
    return lax.eq(x, _const(x, np.inf))


def isneginf(x, /):
    """True where ``x`` is -inf."""
    x = to_array(x)
    if not _dtypes.is_float(_dtype(x)):
        return _bool_full(x, False)
    return lax.eq(x, _const(x, -np.inf))


def isfinite(x, /):
    """True where ``x`` is neither infinite nor NaN."""
    x = to_array(x)
    dtype = _dtype(x)
    if _dtypes.is_complex(dtype):
        return lax.bitwise_and(lax.is_finite(lax.real(x)), lax.is_finite(lax.imag(x)))
    if not _dtypes.is_float(dtype):
        return _bool_full(x, True)
    return lax.is_finite(x)


def signbit(x, /):
    """True where the sign bit of ``x`` is set (including ``-0.0``).

    Without a bitcast primitive the sign of a NaN cannot be read; NaNs then report False."""
    x = to_array(x)
    dtype = _dtype(x)
    if _dtypes.is_bool(dtype) or _dtypes.is_unsigned(dtype):
        return _bool_full(x, False)
    if _dtypes.is_signed(dtype):
        return lax.lt(x, _const(x, 0))
    if _dtypes.is_complex(dtype):
        raise TypeError("signbit does not support complex inputs")
    if has_lax_fn("bitcast_convert_type"):
        as_int = lax_fn("bitcast_convert_type")(x, np.dtype(f"i{np.dtype(dtype).itemsize}"))
        return lax.lt(as_int, _const(as_int, 0))
    zero = _const(x, 0)
    negative_zero = lax.bitwise_and(lax.eq(x, zero), lax.lt(lax.div(_const(x, 1), x), zero))
    return lax.bitwise_or(lax.lt(x, zero), negative_zero)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """``|a - b| <= atol + rtol * |b|`` elementwise, with infinities equal only to themselves.

        >>> isclose(1.0, 1.0 + 1e-9)
        Array(True, dtype=bool)
    """
    a, b = promote_args("isclose", a, b)
    dtype = _dtype(a)
    if not _dtypes.is_inexact(dtype):
        return lax.eq(a, b)
    real_abs_b = lax.abs(b)
    tol = lax.add(_const(real_abs_b, float(atol)),
                  lax.mul(_const(real_abs_b, float(rtol)), real_abs_b))
    out = lax.le(lax.abs(lax.sub(a, b)), tol)
    a_inf, b_inf = isinf(a), isinf(b)
    out = lax.bitwise_and(out, lax.bitwise_not(lax.bitwise_or(a_inf, b_inf)))
    if not _dtypes.is_complex(dtype):
        same_inf = lax.bitwise_and(lax.bitwise_and(a_inf, b_inf), lax.eq(a, b))
        out = lax.bitwise_or(out, same_inf)
    if equal_nan:
        out = lax.bitwise_or(out, lax.bitwise_and(isnan(a), isnan(b)))
    return out


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """Replace NaN with ``nan`` and infinities with ``posinf``/``neginf`` (by default the
    largest finite values of the dtype)."""
    x = to_array(x)
    dtype = _dtype(x)
    if not _dtypes.is_inexact(dtype):
        return x
    if _dtypes.is_complex(dtype):
        return lax.complex(nan_to_num(lax.real(x), nan=nan, posinf=posinf, neginf=neginf),
                           nan_to_num(lax.imag(x), nan=nan, posinf=posinf, neginf=neginf))
    info = _dtypes.finfo(dtype)
    posinf = float(info.max) if posinf is None else posinf
    neginf = float(info.min) if neginf is None else neginf
    out = where(isnan(x), _const(x, nan), x)
    out = where(isposinf(out), _const(x, posinf), out)
    return where(isneginf(out), _const(x, neginf), out)


def clip(arr=None, /, min=None, max=None, *, a=None, a_min=None, a_max=None):  # noqa: A002
    """Limit values to ``[min, max]`` (either bound may be None).

        >>> clip(arange(5), 1, 3)
        Array([1, 1, 2, 3, 3], dtype=int32)
    """
    arr = a if arr is None else arr
    if arr is None:
        raise TypeError("clip: missing the array argument")
    min = a_min if min is None else min  # noqa: A001
    max = a_max if max is None else max  # noqa: A001
    out = to_array(arr)
    if min is not None:
        out = maximum(min, out)
    if max is not None:
        out = minimum(max, out)
    return out


# ---- complex numbers -------------------------------------------------------------------------


def real(val, /):
    """The real part (a real input is returned unchanged)."""
    val = to_array(val)
    return lax.real(val) if _dtypes.is_complex(_dtype(val)) else val


def imag(val, /):
    """The imaginary part (zeros for a real input)."""
    val = to_array(val)
    if _dtypes.is_complex(_dtype(val)):
        return lax.imag(val)
    return _const(val, 0)


def conjugate(x, /):
    """The complex conjugate (a real input is returned unchanged)."""
    x = to_array(x)
    return lax.conj(x) if _dtypes.is_complex(_dtype(x)) else x


conj = conjugate


def angle(z, deg=False):
    """The argument of a complex number (``0`` or ``pi`` for reals)."""
    z = _inexact1("angle", z)
    if _dtypes.is_complex(_dtype(z)):
        out = lax.atan2(lax.imag(z), lax.real(z))
    else:
        out = lax.atan2(_const(z, 0), z)
    return rad2deg(out) if deg else out


def iscomplex(x, /):
    """True where the imaginary part is non-zero."""
    return lax.ne(imag(x), _const(imag(x), 0))


def isreal(x, /):
    """True where the imaginary part is zero."""
    return lax.eq(imag(x), _const(imag(x), 0))


# ---- selection -------------------------------------------------------------------------------


def where(condition, x, y, /):
    """``x`` where ``condition`` else ``y``, broadcasting all three (the three-argument form
    of ``jnp.where``, which ``_sorting`` completes with the one-argument form).

        >>> where(arange(4) > 1, 1.0, 0.0)
        Array([0., 0., 1., 1.], dtype=float32, weak_type=True)
    """
    check_arraylike("where", condition, x, y)
    x, y = promote_args("where", x, y)
    condition = _to_bool(condition)
    condition, x, y = promote_shapes(condition, x, y)
    return lax.select(condition, x, y)


def select(condlist, choicelist, default=0):
    """The element of the first ``choicelist`` entry whose condition holds, else ``default``.

        >>> x = arange(4)
        >>> select([x < 1, x < 3], [x, -x], 9)
        Array([ 0, -1, -2,  9], dtype=int32)
    """
    if len(condlist) != len(choicelist):
        raise ValueError(f"select: {len(condlist)} conditions but {len(choicelist)} choices")
    if not condlist:
        raise ValueError("select: condlist must be non-empty")
    out = default
    for cond, choice in zip(reversed(condlist), reversed(choicelist)):
        out = where(cond, choice, out)
    return out


def _inexact(x):
    """``x`` as an array, promoted to the default float type when it is not inexact."""
    x = asarray(x)
    if not _dtypes.is_inexact(x.dtype):
        x = x.astype(_dtypes.default_float_dtype())
    return x


# I0 by its power series sum_k (x^2/4)^k / (k!)^2 below _I0_SWITCH, and above it by the
# asymptotic expansion e^x / sqrt(2 pi x) * sum_k ((2k-1)!!)^2 / (k! (8x)^k); both are
# accurate to double precision with these term counts on their side of the switch.
_I0_SWITCH = 20.0
_I0_SERIES_TERMS = 70
_I0_ASYMPTOTIC_TERMS = 25


def i0(x):
    """The modified Bessel function of the first kind, order zero, elementwise.

        >>> import functrans.numpy as jnp
        >>> jnp.i0(jnp.array([0.0, 1.0]))
        Array([1.      , 1.266066], dtype=float32)
    """
    x = _inexact(x)
    if _dtypes.is_complex(x.dtype):
        raise NotImplementedError("jnp.i0 of complex input is not supported")
    ax = absolute(x)
    small = ax < _I0_SWITCH
    # each branch sees only inputs it is valid for, so neither yields inf/NaN (nor NaN
    # gradients through the unselected side of the where)
    # (the series is in x^2, so it takes x itself: |x| would lose the curvature at 0)
    xs = where(small, x, 0)
    xl = where(small, _I0_SWITCH, ax)

    quarter_square = xs * xs / 4
    term = _const(xs, 1)
    series = _const(xs, 1)
    for k in range(1, _I0_SERIES_TERMS):
        term = term * quarter_square / (k * k)
        series = series + term

    inv_8x = 1 / (8 * xl)
    term = _const(xl, 1)
    tail = _const(xl, 1)
    for k in range(1, _I0_ASYMPTOTIC_TERMS):
        term = term * ((2 * k - 1) ** 2 / k) * inv_8x
        tail = tail + term
    # e^x split in two halves so the result overflows only where I0 itself does
    half = exp(xl / 2)
    asymptotic = half * (half * tail / sqrt(2 * np.pi * xl))
    return where(small, series, asymptotic)


def spacing(x):
    """The distance from ``x`` to the next representable number away from zero (negative for
    negative ``x``): the size of one unit in the last place.

        >>> import functrans.numpy as jnp
        >>> jnp.spacing(jnp.array([1.0, -1.0]))
        Array([ 1.1920929e-07, -1.1920929e-07], dtype=float32)
    """
    x = _inexact(x)
    if _dtypes.is_complex(x.dtype):
        raise TypeError("jnp.spacing does not accept complex input")
    away = where(signbit(x), array(-np.inf, x.dtype), array(np.inf, x.dtype))
    gap = nextafter(x, away) - x
    # a gap below the smallest normal float is subnormal, and computes as 0 when subnormals
    # are flushed (the default, as in JAX): it is the smallest subnormal, signed as x
    smallest = array(_dtypes.finfo(x.dtype).smallest_subnormal, x.dtype)
    return where(gap == 0, where(signbit(x), -smallest, smallest), gap)
