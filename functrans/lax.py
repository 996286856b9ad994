"""``functrans.lax``: the primitives under ``jax.lax``'s names and signatures."""
from __future__ import annotations

from functrans.primitives.elementwise import (  # noqa: F401
    abs, acos, acosh, add, asin, asinh, atan, atan2, atanh, bitwise_and, bitwise_not,
    bitwise_or, bitwise_xor, cbrt, ceil, clamp, clz, complex, conj, convert_element_type, cos,
    cosh, digamma, div, eq, erf, erf_inv, erfc, exp, exp2, expm1, floor, ge, gt, imag,
    integer_pow, is_finite, le, lgamma, log, log1p, logistic, lt, max, min, mul, ne, neg,
    nextafter, polygamma, population_count, pow, real, rem, round, rsqrt, select, select_n,
    shift_left, shift_right_arithmetic, shift_right_logical, sign, sin, sinh, sqrt, square,
    stop_gradient, sub, tan, tanh)
from functrans.primitives.reductions import reduce_sum  # noqa: F401
from functrans.primitives.structural import (  # noqa: F401
    broadcast, broadcast_in_dim, expand_dims, full, reshape, squeeze, transpose)

bitwise_not = bitwise_not
