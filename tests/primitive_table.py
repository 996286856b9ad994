"""One table of the library's primitives, read by ``test_primitives.py``.

Each :class:`Row` names a ``Primitive`` object, a function that applies it through the public
API, a generator of argument cases (shapes, dtypes, value ranges, static parameters), a
NumPy/SciPy reference (or a property check where the result is not unique, as for the
eigenvectors of a decomposition), tolerances and flags: the order of derivatives to check and
in which modes, whether it is linear, whether ``vmap`` applies, and the reason it is allowed
to run as a NumPy fallback step in the llvm or cuda backend. A new primitive is tested by
adding one row; ``test_every_primitive_has_a_row`` fails until it has one (or a reasoned
entry in :data:`EXCLUDED`).

Each row also bounds how far apart the llvm backend's results may be when compiled for two
target CPUs (``Row.ulps``; ``backends/llvm/targets.py``): code for x86-64-v2 has no fused
multiply-add, and the float32 math the backend inlines rounds differently with one and
without one. Those functions' own bounds are :data:`FLOAT32_MATH_ULPS`.

A case generator draws from a :class:`Draw`: under hypothesis the structure (shapes, axes,
dtypes, parameters) comes from hypothesis and the values from a NumPy generator it seeds;
for the fixed example of a row (``row.example()``) everything comes from one seeded
generator.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Callable

import numpy as np
import scipy.linalg
import scipy.special

import functrans
import functrans.lax as lax
from functrans import ad_checkpoint
from functrans.backends.cuda import lowering as cuda_lowering
from functrans.backends.llvm import lowering as llvm_lowering
from functrans.core import Primitive
from functrans.primitives import random_bits

f32, f64, i32, u32, u8, i8 = (np.dtype(t) for t in
                              (np.float32, np.float64, np.int32, np.uint32, np.uint8, np.int8))
c64, boolean = np.dtype(np.complex64), np.dtype(np.bool_)


# =============================================================================================
# Drawing cases
# =============================================================================================


class Draw:
    """Where a case generator gets its choices: ``integer(lo, hi)`` (inclusive) decides the
    structure, ``rng`` (a NumPy generator) the values."""

    def __init__(self, integer: Callable[[int, int], int], rng: np.random.Generator):
        self.integer, self.rng = integer, rng

    @classmethod
    def seeded(cls, seed: int) -> "Draw":
        rng = np.random.default_rng(seed)
        return cls(lambda lo, hi: int(rng.integers(lo, hi + 1)), rng)

    def choice(self, options):
        options = list(options)
        return options[self.integer(0, len(options) - 1)]

    def boolean(self) -> bool:
        return bool(self.integer(0, 1))

    def shape(self, min_rank=0, max_rank=3, min_size=1, max_size=4) -> tuple:
        return tuple(self.integer(min_size, max_size)
                     for _ in range(self.integer(min_rank, max_rank)))

    def subset(self, n) -> tuple:
        return tuple(i for i in range(n) if self.boolean())

    def permutation(self, n) -> tuple:
        items, out = list(range(n)), []
        while items:
            out.append(items.pop(self.integer(0, len(items) - 1)))
        return tuple(out)

    def array(self, shape, dtype, low=-2.0, high=2.0) -> np.ndarray:
        dtype = np.dtype(dtype)
        if dtype == boolean:
            return self.rng.random(shape) < 0.5
        if dtype.kind in "iu":
            return self.rng.integers(int(low), int(high), shape, endpoint=True).astype(dtype)
        if dtype.kind == "c":
            parts = self.rng.uniform(low, high, (2,) + tuple(shape))
            return (parts[0] + 1j * parts[1]).astype(dtype)
        return self.rng.uniform(low, high, shape).astype(dtype)


@dataclasses.dataclass
class Case:
    """Operands (arrays, passed positionally) and static parameters (keywords)."""
    args: tuple
    params: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Row:
    """One primitive's tests. ``fun(*case.args, **case.params)`` applies it; ``numpy`` (same
    signature) is the reference, or ``check(case, outs)`` asserts properties of the result
    where it is not unique. ``grad`` is the derivative order checked by finite differences
    (0: not differentiable), in ``grad_modes``, with respect to the floating operands;
    ``grad_cases`` replaces ``cases`` there (e.g. to stay away from kinks).
    ``llvm_fallback``/``cuda_fallback`` (from :data:`LLVM_FALLBACKS`/:data:`CUDA_FALLBACKS`):
    why the primitive may stay a NumPy step there.

    ``ulps``: how far apart the llvm backend's results for two target CPUs may be, in ulps
    of the larger of the two (with ``accumulates``, of the largest magnitude in that output:
    a sum's rounding scales with its terms, not with its result); 0: the same bits on
    every target; None: not a function of its operands (a stateful generator)."""
    name: str
    primitive: Primitive
    fun: Callable
    cases: Callable[[Draw], Case]
    numpy: Callable | None = None
    check: Callable | None = None
    tol: float = 1e-5
    grad: int = 0
    grad_modes: tuple = ("fwd", "rev")
    grad_cases: Callable[[Draw], Case] | None = None
    grad_tol: float = 1e-4
    linear: bool = False
    vmap: bool = True
    ulps: float | None = 0.0
    accumulates: bool = False

    @property
    def llvm_fallback(self) -> str:
        return LLVM_FALLBACKS.get(self.primitive, "")

    @property
    def cuda_fallback(self) -> str:
        return CUDA_FALLBACKS.get(self.primitive, "")

    def call(self, case: Case):
        return self.fun(*case.args, **case.params)

    def bound(self, case: Case) -> Callable:
        """``fun`` with the case's static parameters bound (what jit and vmap see)."""
        return functools.partial(self.fun, **case.params)

    def example(self, seed: int = 0) -> Case:
        return self.cases(Draw.seeded(seed))

    def __repr__(self):
        return self.name


ROWS: list[Row] = []


def row(name, primitive, fun, cases, **flags) -> Row:
    assert all(r.name != name for r in ROWS), f"two rows are named {name!r}"
    r = Row(name, primitive, fun, cases, **flags)
    ROWS.append(r)
    return r


def _prim(name: str) -> Primitive:
    """The primitive object ``name`` as the public ``functrans.lax`` module exports it."""
    found = getattr(lax, f"{name}_p", None)
    if isinstance(found, Primitive):
        return found
    from functrans.export._registry import primitive
    return primitive(name)


# =============================================================================================
# Elementwise
# =============================================================================================

# value ranges (low, high) of the operands, where the function is smooth and defined
ANY, POS, UNIT, GT1, SMALL = (-2.0, 2.0), (0.2, 2.0), (-0.9, 0.9), (1.2, 3.0), (-1.0, 1.0)

# The float32 functions the llvm backend inlines (backends/llvm/vector_math.py) are within
# this many ulps of the exact result for every target CPU (tests/test_vector_math.py checks
# them over dense sweeps of float32 values), so two targets' results are within twice as
# many of each other. float64 math calls the C library, whatever the target.
FLOAT32_MATH_ULPS = {
    "exp": 1.0, "exp2": 1.0, "expm1": 5.0, "log": 3.0, "log1p": 4.0, "tanh": 5.0,
    "logistic": 3.0, "sin": 2.0, "cos": 2.0, "tan": 4.0, "asin": 3.0, "acos": 3.0,
    "atan": 3.0, "sinh": 5.0, "cosh": 2.0, "asinh": 4.0, "acosh": 4.0, "atanh": 5.0,
    "erf": 3.0, "erf_inv": 4.0,
}


def _elementwise_cases(arity, dtypes, ranges):
    ranges = ranges if isinstance(ranges[0], tuple) else (ranges,) * arity

    def cases(d: Draw) -> Case:
        shape, dtype = d.shape(max_size=3), d.choice(dtypes)
        return Case(tuple(d.array(shape, dtype, *r) for r in ranges))
    return cases


def elementwise(name, fun, numpy, arity=1, dtypes=(f32,), values=ANY, grad=2, label=None,
                **flags):
    return row(label or name, _prim(name), fun, _elementwise_cases(arity, dtypes, values), numpy=numpy,
               grad=grad, **flags)


def _round_half_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


for _name, _fun, _ref, _values, _grad in [
    ("neg", lax.neg, np.negative, ANY, 2), ("exp", lax.exp, np.exp, ANY, 2),
    ("exp2", lax.exp2, np.exp2, ANY, 2), ("log", lax.log, np.log, POS, 2),
    ("log1p", lax.log1p, np.log1p, POS, 2), ("expm1", lax.expm1, np.expm1, ANY, 2),
    ("tanh", lax.tanh, np.tanh, ANY, 2), ("logistic", lax.logistic, scipy.special.expit, ANY, 2),
    ("sin", lax.sin, np.sin, ANY, 2), ("cos", lax.cos, np.cos, ANY, 2),
    ("tan", lax.tan, np.tan, UNIT, 2), ("asin", lax.asin, np.arcsin, UNIT, 2),
    ("acos", lax.acos, np.arccos, UNIT, 2), ("atan", lax.atan, np.arctan, ANY, 2),
    ("sinh", lax.sinh, np.sinh, ANY, 2), ("cosh", lax.cosh, np.cosh, ANY, 2),
    ("asinh", lax.asinh, np.arcsinh, ANY, 2), ("acosh", lax.acosh, np.arccosh, GT1, 2),
    ("atanh", lax.atanh, np.arctanh, UNIT, 2), ("sqrt", lax.sqrt, np.sqrt, POS, 2),
    ("rsqrt", lax.rsqrt, lambda x: 1 / np.sqrt(x), POS, 2), ("cbrt", lax.cbrt, np.cbrt, POS, 2),
    ("abs", lax.abs, np.abs, POS, 2), ("square", lax.square, np.square, ANY, 2),
    ("erf", lax.erf, scipy.special.erf, ANY, 2), ("erfc", lax.erfc, scipy.special.erfc, ANY, 2),
    ("erf_inv", lax.erf_inv, scipy.special.erfinv, UNIT, 2),
    ("lgamma", lax.lgamma, scipy.special.gammaln, POS, 2),
    ("digamma", lax.digamma, scipy.special.digamma, POS, 2),
    ("bessel_i0e", lax.bessel_i0e, scipy.special.i0e, ANY, 1),
    ("bessel_i1e", lax.bessel_i1e, scipy.special.i1e, ANY, 1),
    ("sign", lax.sign, np.sign, ANY, 0), ("floor", lax.floor, np.floor, ANY, 0),
    ("ceil", lax.ceil, np.ceil, ANY, 0), ("round", lax.round, _round_half_away, ANY, 0),
    ("is_finite", lax.is_finite, np.isfinite, ANY, 0),
]:
    elementwise(_name, _fun, _ref, values=_values, grad=_grad, dtypes=(f32, f64),
                ulps=2 * FLOAT32_MATH_ULPS.get(_name, 0.0))

# abs at and across its kink (the slope at 0 is JAX's right-hand one, tested elsewhere)
elementwise("abs", lax.abs, np.abs, values=ANY, grad=0, dtypes=(f32, i32), label="abs(any sign)")

for _name, _fun, _ref, _values, _grad in [
    ("add", lax.add, np.add, ANY, 2), ("sub", lax.sub, np.subtract, ANY, 2),
    ("mul", lax.mul, np.multiply, ANY, 2), ("div", lax.div, np.divide, POS, 2),
    ("rem", lax.rem, np.fmod, POS, 0), ("pow", lax.pow, np.power, POS, 2),
    ("atan2", lax.atan2, np.arctan2, POS, 2),
    ("nextafter", lax.nextafter, np.nextafter, ANY, 0),
    ("eq", lax.eq, np.equal, ANY, 0), ("ne", lax.ne, np.not_equal, ANY, 0),
    ("lt", lax.lt, np.less, ANY, 0), ("le", lax.le, np.less_equal, ANY, 0),
    ("gt", lax.gt, np.greater, ANY, 0), ("ge", lax.ge, np.greater_equal, ANY, 0),
]:
    elementwise(_name, _fun, _ref, arity=2, values=_values, grad=_grad, dtypes=(f32, f64))


def _apart_cases(d: Draw) -> Case:
    """Two operands at least 0.5 apart: max and min are smooth there."""
    shape = d.shape(max_size=3)
    x = d.array(shape, f64)
    gap = d.array(shape, f64, 0.5, 1.0) * np.where(d.array(shape, boolean), 1, -1)
    return Case((x, x + gap))


for _name, _fun, _ref in [("max", lax.max, np.maximum), ("min", lax.min, np.minimum)]:
    elementwise(_name, _fun, _ref, arity=2, dtypes=(f32, i32), grad=2, grad_cases=_apart_cases)

# the remainder is smooth away from the points where x / y is an integer
elementwise("rem", lax.rem, np.fmod, arity=2, values=((0.2, 0.9), (1.0, 2.0)), grad=2,
            label="rem(smooth)")


def _trunc_div(x, y):
    return np.trunc(x / y).astype(x.dtype)


INT_RANGE = (-100, 100)
elementwise("div", lax.div, _trunc_div, arity=2, dtypes=(i32,), values=(INT_RANGE, (1, 9)),
            grad=0, label="div(int)")
elementwise("rem", lax.rem, np.fmod, arity=2, dtypes=(i32,), values=(INT_RANGE, (1, 9)), grad=0,
            label="rem(int)")
for _name, _fun, _ref in [("and", lax.bitwise_and, np.bitwise_and),
                          ("or", lax.bitwise_or, np.bitwise_or),
                          ("xor", lax.bitwise_xor, np.bitwise_xor)]:
    elementwise(_name, _fun, _ref, arity=2, dtypes=(i32, u8, boolean), values=INT_RANGE, grad=0)
elementwise("not", lax.bitwise_not, np.invert, dtypes=(i32, u8, boolean), values=INT_RANGE, grad=0)


def _shift_left(x, s):
    return np.where(s < 32, x << np.minimum(s, 31), 0).astype(x.dtype)


def _shift_right_logical(x, s):
    return np.where(s < 32, (x.view(u32) >> np.minimum(s, 31).astype(u32)).view(i32), 0)


for _name, _fun, _ref in [
        ("shift_left", lax.shift_left, _shift_left),
        ("shift_right_arithmetic", lax.shift_right_arithmetic, lambda x, s: x >> np.minimum(s, 31)),
        ("shift_right_logical", lax.shift_right_logical, _shift_right_logical)]:
    elementwise(_name, _fun, _ref, arity=2, dtypes=(i32,), values=(INT_RANGE, (0, 40)), grad=0)

elementwise("population_count", lax.population_count,
            lambda x: np.bitwise_count(x.view(u32)).astype(i32), dtypes=(i32,),
            values=(-2 ** 31, 2 ** 31 - 1), grad=0)


def _clz(x):
    bits = x.view(u32).astype(np.int64)
    return np.where(bits == 0, 32, 31 - np.floor(np.log2(np.maximum(bits, 1)))).astype(i32)


elementwise("clz", lax.clz, _clz, dtypes=(i32,), values=(-2 ** 31, 2 ** 31 - 1), grad=0)


def _mulhi(x, y):
    return ((x.astype(np.uint64) * y.astype(np.uint64)) >> np.uint64(32)).astype(u32)


elementwise("mulhi", lax.mulhi, _mulhi, arity=2, dtypes=(u32,), values=(0, 2 ** 32 - 1), grad=0)


def _integer_pow_cases(d: Draw) -> Case:
    shape = d.shape(max_size=3)
    return Case((d.array(shape, d.choice([f32, f64])),), {"y": d.integer(-2, 4)})


row("integer_pow", _prim("integer_pow"), lax.integer_pow, _integer_pow_cases,
    numpy=lambda x, y: np.power(x, float(y)).astype(x.dtype), tol=1e-4, grad=2,
    grad_cases=lambda d: Case((d.array((3,), f64, 0.5, 2.0),), {"y": d.integer(-2, 4)}))

# complex numbers
elementwise("complex", lax.complex, lambda x, y: x + 1j * y, arity=2, grad=1)
elementwise("real", lax.real, np.real, dtypes=(c64,), grad=1)
elementwise("imag", lax.imag, np.imag, dtypes=(c64,), grad=1)
elementwise("conj", lax.conj, np.conj, dtypes=(c64,), grad=1)

# special functions (float64 SciPy references; derivatives where JAX has them)
elementwise("igamma", lax.igamma, scipy.special.gammainc, arity=2, values=POS, grad=1, tol=1e-4,
            dtypes=(f32, f64))
elementwise("igammac", lax.igammac, scipy.special.gammaincc, arity=2, values=POS, grad=1,
            tol=1e-4, dtypes=(f32, f64))


def _igamma_grad_a(a, x):
    """d/da of the regularized lower incomplete gamma function, by central differences."""
    a64, x64 = a.astype(f64), x.astype(f64)
    h = 1e-6
    return (scipy.special.gammainc(a64 + h, x64) - scipy.special.gammainc(a64 - h, x64)) / (2 * h)


def _random_gamma_grad(a, x):
    """d sample / d alpha of a gamma sample ``x``: -(dP/da) / (dP/dx) for P = gammainc."""
    a64, x64 = a.astype(f64), x.astype(f64)
    density = np.exp((a64 - 1) * np.log(x64) - x64 - scipy.special.gammaln(a64))
    return -_igamma_grad_a(a, x) / density


elementwise("igamma_grad_a", lax.igamma_grad_a, _igamma_grad_a, arity=2, values=(0.5, 2.0),
            grad=0, tol=2e-3, dtypes=(f32, f64))
elementwise("random_gamma_grad", lax.random_gamma_grad, _random_gamma_grad, arity=2,
            values=(0.5, 2.0), grad=0, tol=2e-3, dtypes=(f32, f64))


def _polygamma_cases(d: Draw) -> Case:
    shape = d.shape(max_size=3)
    dtype = d.choice([f32, f64])
    m = d.rng.integers(0, 3, shape).astype(dtype)
    return Case((m, d.array(shape, dtype, *POS)))


row("polygamma", _prim("polygamma"), lax.polygamma, _polygamma_cases,
    numpy=lambda m, x: scipy.special.polygamma(m.astype(int), x), tol=1e-4)
# the derivative with respect to x only (as in JAX, polygamma's order m has none)
row("polygamma(m, .)", _prim("polygamma"), lambda x, m: lax.polygamma(np.asarray(m, x.dtype), x),
    lambda d: Case((d.array((3,), f64, *POS),), {"m": d.integer(0, 2)}),
    numpy=lambda x, m: scipy.special.polygamma(m, x), tol=1e-4, grad=1)
elementwise("zeta", lax.zeta, scipy.special.zeta, arity=2, values=((1.5, 4.0), POS), grad=0,
            tol=1e-4, dtypes=(f32, f64))


def _betainc_cases(d: Draw) -> Case:
    shape, dtype = d.shape(max_size=3), d.choice([f32, f64])
    return Case((d.array(shape, dtype, 0.5, 3.0), d.array(shape, dtype, 0.5, 3.0),
                 d.array(shape, dtype, 0.05, 0.95)))


row("regularized_incomplete_beta", _prim("regularized_incomplete_beta"), lax.betainc,
    _betainc_cases, numpy=scipy.special.betainc, tol=1e-4)
row("regularized_incomplete_beta(a, b, .)", _prim("regularized_incomplete_beta"),
    lambda x, a, b: lax.betainc(np.full(x.shape, a, x.dtype), np.full(x.shape, b, x.dtype), x),
    lambda d: Case((d.array((3,), f64, 0.05, 0.95),), {"a": 1.5, "b": 2.5}),
    numpy=lambda x, a, b: scipy.special.betainc(a, b, x), grad=1, tol=1e-4)


# selection, clamping, casts, identities
def _select_n_cases(d: Draw) -> Case:
    shape, n = d.shape(max_size=3), d.integer(1, 3)
    which = d.array(shape, boolean) if n <= 2 and d.boolean() else \
        d.rng.integers(0, n, shape).astype(i32)
    if which.dtype == boolean and n == 1:
        n = 2
    return Case((which,) + tuple(d.array(shape, f32) for _ in range(n)))


row("select_n", _prim("select_n"), lax.select_n, _select_n_cases,
    numpy=lambda which, *cases: np.choose(which.astype(int), cases), grad=2)


def _clamp_cases(d: Draw) -> Case:
    shape = d.shape(max_size=3)
    scalar_bounds = d.boolean()
    bounds_shape = () if scalar_bounds else shape
    low = d.array(bounds_shape, f32, -1.0, -0.5)
    return Case((low, d.array(shape, f32), low + 1.5))


row("clamp", _prim("clamp"), lax.clamp, _clamp_cases, numpy=lambda lo, x, hi: np.clip(x, lo, hi),
    grad=1, grad_cases=lambda d: Case((np.float64(-1.0), np.array([-1.5, -0.4, 0.3, 1.7])
                                       + d.array((4,), f64, -0.1, 0.1), np.float64(0.8))))

_CASTS = [(f32, i32), (f32, f64), (i32, f32), (boolean, f32), (f32, boolean), (f32, u8),
          (f64, f32), (i32, i8)]


def _convert_cases(d: Draw) -> Case:
    source, target = d.choice(_CASTS)
    return Case((d.array(d.shape(max_size=3), source, -120, 120),), {"new_dtype": target})


def _numpy_convert(x, new_dtype):
    if new_dtype == boolean:
        return x != 0
    if x.dtype.kind == "f" and new_dtype.kind in "iu":
        info = np.iinfo(new_dtype)
        return np.clip(np.trunc(x), info.min, info.max).astype(new_dtype)
    return x.astype(new_dtype)


row("convert_element_type", _prim("convert_element_type"), lax.convert_element_type,
    _convert_cases, numpy=_numpy_convert, grad=1, linear=True, grad_tol=2e-3,
    grad_cases=lambda d: Case((d.array((3,), f64),), {"new_dtype": f32}))


def _bitcast_cases(d: Draw) -> Case:
    source, target = d.choice([(f32, i32), (i32, f32), (u32, i32), (f32, u8), (u8, f32)])
    shape = d.shape(max_size=3)
    if source == u8:  # four bytes make one 32-bit value
        shape = shape + (4,)
    return Case((d.array(shape, source, -1000, 1000),), {"new_dtype": target})


def _numpy_bitcast(x, new_dtype):
    if new_dtype.itemsize < x.dtype.itemsize:
        return x.reshape(x.shape + (1,)).view(new_dtype)
    return x.view(new_dtype).reshape(x.shape[:-1]) if x.dtype.itemsize < new_dtype.itemsize \
        else x.view(new_dtype)


row("bitcast_convert_type", _prim("bitcast_convert_type"), lax.bitcast_convert_type,
    _bitcast_cases, numpy=_numpy_bitcast)


def _reduce_precision_cases(d: Draw) -> Case:
    return Case((d.array(d.shape(max_size=3), f32, -100.0, 100.0),),
                {"exponent_bits": 5, "mantissa_bits": 10})


row("reduce_precision", _prim("reduce_precision"), lax.reduce_precision, _reduce_precision_cases,
    numpy=lambda x, exponent_bits, mantissa_bits: x.astype(np.float16).astype(x.dtype),
    tol=0.0, grad=1, grad_cases=lambda d: Case((d.array((3,), f64),),
                                               {"exponent_bits": 11, "mantissa_bits": 40}))
row("stop_gradient", _prim("stop_gradient"), lax.stop_gradient,
    _elementwise_cases(1, (f32,), ANY), numpy=lambda x: x)
row("optimization_barrier", _prim("optimization_barrier"),
    lambda x, y: lax.optimization_barrier((x, y)), _elementwise_cases(2, (f32, i32), ANY),
    numpy=lambda x, y: (x, y), grad=1)
row("name", _prim("name"), lambda x: ad_checkpoint.checkpoint_name(x, "h"),
    _elementwise_cases(1, (f32,), ANY), numpy=lambda x: x, grad=2)


# =============================================================================================
# Reductions and cumulative reductions
# =============================================================================================


def _reduce_cases(dtypes, values=ANY):
    def cases(d: Draw) -> Case:
        shape = d.shape(min_rank=1, min_size=0 if d.integer(0, 4) == 0 else 1)
        return Case((d.array(shape, d.choice(dtypes), *values),), {"axes": d.subset(len(shape))})
    return cases


def _numpy_reduce(ufunc):
    def reference(x, axes):
        identity = {np.maximum: -np.inf, np.minimum: np.inf}.get(ufunc)
        if identity is not None and x.dtype.kind in "iu":
            info = np.iinfo(x.dtype)
            identity = info.min if ufunc is np.maximum else info.max
        extra = {} if identity is None else {"initial": identity}
        out = ufunc.reduce(x, axis=axes, **extra) if axes else x
        return np.asarray(out, x.dtype)
    return reference


def _distinct(cases):
    """``cases`` with the first operand's values made distinct and 0.1 apart (a permutation of
    0.3, 0.4, ...): a maximum or minimum is then unique, and finite differences never cross
    the kink where two values tie."""
    def distinct(d: Draw) -> Case:
        c = cases(d)
        x = c.args[0]
        values = 0.3 + 0.1 * d.rng.permutation(x.size).reshape(x.shape)
        return Case((values.astype(x.dtype),) + c.args[1:], c.params)
    return distinct


def _nonempty(cases):
    return lambda d: (lambda c: c if c.args[0].size else cases(Draw.seeded(1)))(cases(d))


for _name, _ufunc, _dtypes, _grad in [
        ("reduce_sum", np.add, (f32, i32), 2), ("reduce_max", np.maximum, (f32, i32), 2),
        ("reduce_min", np.minimum, (f32, i32), 2), ("reduce_prod", np.multiply, (f32, i32), 2),
        ("reduce_and", np.bitwise_and, (i32, boolean), 0),
        ("reduce_or", np.bitwise_or, (i32, boolean), 0),
        ("reduce_xor", np.bitwise_xor, (i32, boolean), 0)]:
    _cases = _reduce_cases(_dtypes, INT_RANGE if _grad == 0 else (-2, 2))
    # empty max/min are the identity (-inf/+inf); finite differences need a non-empty operand
    row(_name, _prim(_name), getattr(lax, _name), _cases, numpy=_numpy_reduce(_ufunc), tol=1e-5,
        grad=_grad, linear=_name == "reduce_sum",
        grad_cases=_nonempty(_distinct(_reduce_cases((f64,), (0.3, 2.0)))))


def _arg_reduce_cases(d: Draw) -> Case:
    shape = d.shape(min_rank=1)
    x = d.rng.integers(-3, 3, shape).astype(d.choice([f32, i32]))  # ties are common
    if x.dtype == f32 and d.boolean():
        x.flat[d.integer(0, x.size - 1)] = np.nan
    return Case((x,), {"axis": d.integer(0, len(shape) - 1), "index_dtype": i32})


for _name in ("argmax", "argmin"):
    row(_name, _prim(_name), getattr(lax, _name), _arg_reduce_cases,
        numpy=functools.partial(lambda f, x, axis, index_dtype: f(x, axis=axis).astype(index_dtype),
                                getattr(np, _name)))


def _cumulative_cases(dtypes):
    def cases(d: Draw) -> Case:
        shape = d.shape(min_rank=1, min_size=1)
        return Case((d.array(shape, d.choice(dtypes)),),
                    {"axis": d.integer(0, len(shape) - 1), "reverse": d.boolean()})
    return cases


def _numpy_cumulative(accumulate):
    def reference(x, axis, reverse):
        if reverse:
            return np.flip(accumulate(np.flip(x, axis), axis), axis)
        return accumulate(x, axis)
    return reference


for _name, _accumulate, _dtypes in [
        ("cumsum", lambda x, a: np.cumsum(x, a, dtype=x.dtype), (f32, i32)),
        ("cumprod", lambda x, a: np.cumprod(x, a, dtype=x.dtype), (f32, i32)),
        ("cummax", lambda x, a: np.maximum.accumulate(x, a), (f32, i32)),
        ("cummin", lambda x, a: np.minimum.accumulate(x, a), (f32, i32)),
        ("cumlogsumexp", lambda x, a: np.logaddexp.accumulate(x, a), (f32,))]:
    row(_name, _prim(_name), getattr(lax, _name), _cumulative_cases(_dtypes),
        numpy=_numpy_cumulative(_accumulate), grad=2, linear=_name == "cumsum",
        grad_cases=_cumulative_cases((f64,)))


def _cummax_tangent(x, t, axis, reverse):
    """The tangent of cummax: at each position, the tangent of the running maximum's
    (first, or last when reversed) source."""
    x, t = np.moveaxis(x, axis, -1), np.moveaxis(t, axis, -1)
    if reverse:
        x, t = x[..., ::-1], t[..., ::-1]
    out = np.empty_like(t)
    for idx in np.ndindex(*x.shape[:-1]):
        best = 0
        for k in range(x.shape[-1]):
            best = k if x[idx + (k,)] > x[idx + (best,)] else best
            out[idx + (k,)] = t[idx + (best,)]
    if reverse:
        out = out[..., ::-1]
    return np.moveaxis(out, -1, axis)


def _tangent_cases(d: Draw) -> Case:
    c = _cumulative_cases((f32,))(d)
    (x,) = c.args
    return Case((x, d.array(x.shape, f32)), c.params)


# reached only through cummax's (and cummin's, cumlogsumexp's) derivative
row("cumulative_tangent", _prim("cumulative_tangent"),
    lambda x, t, axis, reverse: functrans.jvp(
        lambda y: lax.cummax(y, axis=axis, reverse=reverse), (x,), (t,))[1],
    _tangent_cases, numpy=_cummax_tangent, grad=1, linear=False,
    grad_cases=lambda d: (lambda c: Case(tuple(a.astype(f64) for a in c.args), c.params))(
        _tangent_cases(d)))


# =============================================================================================
# Shapes and data movement
# =============================================================================================


def _broadcast_in_dim_cases(d: Draw) -> Case:
    out_shape = d.shape(max_size=3)
    dims = tuple(i for i in range(len(out_shape)) if d.boolean())
    operand_shape = tuple(out_shape[i] if d.boolean() else 1 for i in dims)
    return Case((d.array(operand_shape, d.choice([f32, i32])),),
                {"shape": out_shape, "broadcast_dimensions": dims})


def _numpy_broadcast_in_dim(x, shape, broadcast_dimensions):
    expanded = [1] * len(shape)
    for i, dim in enumerate(broadcast_dimensions):
        expanded[dim] = x.shape[i]
    return np.broadcast_to(x.reshape(expanded), shape)


row("broadcast_in_dim", _prim("broadcast_in_dim"), lax.broadcast_in_dim, _broadcast_in_dim_cases,
    numpy=_numpy_broadcast_in_dim, grad=2, linear=True)


def _reshape_cases(d: Draw) -> Case:
    shape = d.shape(max_size=3)
    size = int(np.prod(shape))
    new = d.choice([(size,), shape[::-1], (1,) + shape, shape + (1,)])
    return Case((d.array(shape, d.choice([f32, i32])),), {"new_sizes": new})


row("reshape", _prim("reshape"), lax.reshape, _reshape_cases,
    numpy=lambda x, new_sizes: x.reshape(new_sizes), grad=2, linear=True)


def _transpose_cases(d: Draw) -> Case:
    shape = d.shape()
    return Case((d.array(shape, d.choice([f32, i32])),), {"permutation": d.permutation(len(shape))})


row("transpose", _prim("transpose"), lax.transpose, _transpose_cases,
    numpy=lambda x, permutation: np.transpose(x, permutation), grad=2, linear=True)


def _squeeze_cases(d: Draw) -> Case:
    shape = list(d.shape(max_rank=2))
    ones = d.integer(1, 2)
    dims = []
    for _ in range(ones):
        at = d.integer(0, len(shape))
        shape.insert(at, 1)
    dims = tuple(i for i, n in enumerate(shape) if n == 1 and d.boolean()) or \
        (shape.index(1),)
    return Case((d.array(tuple(shape), f32),), {"dimensions": dims})


row("squeeze", _prim("squeeze"), lax.squeeze, _squeeze_cases,
    numpy=lambda x, dimensions: np.squeeze(x, dimensions), grad=2, linear=True)


def _rev_cases(d: Draw) -> Case:
    shape = d.shape()
    return Case((d.array(shape, d.choice([f32, i32])),), {"dimensions": d.subset(len(shape))})


row("rev", _prim("rev"), lax.rev, _rev_cases,
    numpy=lambda x, dimensions: np.flip(x, dimensions) if dimensions else x, grad=2, linear=True)


def _pad_cases(d: Draw) -> Case:
    shape = d.shape(max_size=3)
    config = tuple((d.integer(-1, 2), d.integer(-1, 2), d.integer(0, 1)) for _ in shape)
    # a negative edge may not remove more than the (interior-dilated) axis holds
    config = tuple((lo, hi, k) if (n - 1) * (k + 1) + 1 + lo + hi >= 0 else (0, 0, k)
                   for (lo, hi, k), n in zip(config, shape))
    dtype = d.choice([f32, i32])
    return Case((d.array(shape, dtype), d.array((), dtype)), {"padding_config": config})


def _numpy_pad(x, value, padding_config):
    out = x
    for axis, (lo, hi, interior) in enumerate(padding_config):
        n = out.shape[axis]
        size = n + max(n - 1, 0) * interior
        dilated = np.full(out.shape[:axis] + (size,) + out.shape[axis + 1:], value, x.dtype)
        index = [slice(None)] * out.ndim
        index[axis] = slice(None, None, interior + 1)
        dilated[tuple(index)] = out
        pad_lo, pad_hi = max(lo, 0), max(hi, 0)
        widths = [(0, 0)] * out.ndim
        widths[axis] = (pad_lo, pad_hi)
        padded = np.pad(dilated, widths, constant_values=value)
        index[axis] = slice(-min(lo, 0), padded.shape[axis] + min(hi, 0))
        out = padded[tuple(index)]
    return out


row("pad", _prim("pad"), lax.pad, _pad_cases, numpy=_numpy_pad, grad=2, linear=True)


def _concatenate_cases(d: Draw) -> Case:
    shape = d.shape(min_rank=1, max_size=3)
    axis, n = d.integer(0, len(shape) - 1), d.integer(1, 3)
    dtype = d.choice([f32, i32])
    parts = [d.array(shape[:axis] + (d.integer(0, 3),) + shape[axis + 1:], dtype)
             for _ in range(n)]
    return Case(tuple(parts), {"dimension": axis})


row("concatenate", _prim("concatenate"), lambda *xs, dimension: lax.concatenate(xs, dimension),
    _concatenate_cases, numpy=lambda *xs, dimension: np.concatenate(xs, dimension), grad=2,
    linear=True)


def _slice_cases(d: Draw) -> Case:
    shape = d.shape(max_size=4)
    starts = tuple(d.integer(0, n) for n in shape)
    limits = tuple(d.integer(s, n) for s, n in zip(starts, shape))
    strides = tuple(d.integer(1, 2) for _ in shape) if d.boolean() else None
    return Case((d.array(shape, d.choice([f32, i32])),),
                {"start_indices": starts, "limit_indices": limits, "strides": strides})


row("slice", _prim("slice"), lax.slice, _slice_cases,
    numpy=lambda x, start_indices, limit_indices, strides: x[tuple(
        slice(s, e, k) for s, e, k in zip(start_indices, limit_indices,
                                          strides or (1,) * x.ndim))],
    grad=2, linear=True)
row("iota", _prim("iota"), lax.iota,
    lambda d: Case((), {"dtype": d.choice([i32, f32, u8]), "size": d.integer(0, 6)}),
    numpy=lambda dtype, size: np.arange(size, dtype=dtype), vmap=False)


def _dynamic_slice_cases(d: Draw) -> Case:
    shape = d.shape(min_rank=1, max_size=4)
    sizes = tuple(d.integer(0, n) for n in shape)
    # starts out of range both ways: clamped, as in JAX
    starts = tuple(np.asarray(d.integer(-n - 2, n + 2), i32) for n in shape)
    return Case((d.array(shape, d.choice([f32, i32])),) + starts, {"slice_sizes": sizes})


def _clamped_starts(shape, sizes, starts):
    return [int(np.clip(s + n if s < 0 else s, 0, n - z))
            for s, n, z in zip(starts, shape, sizes)]


def _numpy_dynamic_slice(x, *starts, slice_sizes):
    begin = _clamped_starts(x.shape, slice_sizes, starts)
    return x[tuple(slice(b, b + z) for b, z in zip(begin, slice_sizes))]


row("dynamic_slice", _prim("dynamic_slice"),
    lambda x, *starts, slice_sizes: lax.dynamic_slice(x, starts, slice_sizes),
    _dynamic_slice_cases, numpy=_numpy_dynamic_slice, grad=2, linear=True)


def _dynamic_update_slice_cases(d: Draw) -> Case:
    c = _dynamic_slice_cases(d)
    x, starts = c.args[0], c.args[1:]
    return Case((x, d.array(c.params["slice_sizes"], x.dtype)) + starts)


def _numpy_dynamic_update_slice(x, update, *starts):
    begin = _clamped_starts(x.shape, update.shape, starts)
    out = x.copy()
    out[tuple(slice(b, b + z) for b, z in zip(begin, update.shape))] = update
    return out


row("dynamic_update_slice", _prim("dynamic_update_slice"),
    lambda x, update, *starts: lax.dynamic_update_slice(x, update, starts),
    _dynamic_update_slice_cases, numpy=_numpy_dynamic_update_slice, grad=2, linear=True)


# =============================================================================================
# Gather and scatter (rows of an operand picked by an index vector)
# =============================================================================================

GSM = lax.GatherScatterMode


def _row_indices(d: Draw, n: int, count: int, in_range: bool) -> np.ndarray:
    low, high = (0, n - 1) if in_range else (-n - 2, n + 2)
    return d.rng.integers(low, high, (count, 1), endpoint=True).astype(i32)


def _gather_cases(d: Draw) -> Case:
    shape = d.shape(min_rank=1, max_size=4)
    mode = d.choice([GSM.CLIP, GSM.FILL_OR_DROP])
    idx = _row_indices(d, shape[0], d.integer(0, 4), in_range=False)
    return Case((d.array(shape, d.choice([f32, i32])), idx), {"mode": mode})


def _gather(x, idx, mode):
    dn = lax.GatherDimensionNumbers(offset_dims=tuple(range(1, x.ndim)), collapsed_slice_dims=(0,),
                                    start_index_map=(0,))
    return lax.gather(x, idx, dn, (1,) + x.shape[1:], mode=mode)


def _numpy_gather(x, idx, mode):
    rows = idx[:, 0]
    if mode == GSM.CLIP:
        return x[np.clip(rows, 0, x.shape[0] - 1)]
    fill = np.nan if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    inside = (rows >= 0) & (rows < x.shape[0])
    out = np.full((len(rows),) + x.shape[1:], fill, x.dtype)
    out[inside] = x[rows[inside]]
    return out


row("gather", _prim("gather"), _gather, _gather_cases, numpy=_numpy_gather, grad=2, linear=True,
    # clamped indices: a filled row is NaN, where finite differences are NaN too
    grad_cases=lambda d: (lambda c: Case(c.args, {"mode": GSM.CLIP}))(_gather_cases(d)))

_SCATTERS = {"scatter": (lax.scatter, None), "scatter_add": (lax.scatter_add, np.add),
             "scatter_mul": (lax.scatter_mul, np.multiply),
             "scatter_min": (lax.scatter_min, np.minimum),
             "scatter_max": (lax.scatter_max, np.maximum)}


def _scatter_cases(name, dtypes=(f32, i32), unique=False):
    def cases(d: Draw) -> Case:
        shape = d.shape(min_rank=1, max_size=4)
        count = d.integer(0, 4)
        mode = d.choice([GSM.CLIP, GSM.FILL_OR_DROP])
        if unique or name == "scatter":
            # distinct in-range targets: a set does not depend on the order of the updates,
            # and scatter_mul differentiates with respect to its updates only then
            count = min(count, shape[0])
            idx = d.rng.permutation(shape[0])[:count].reshape(count, 1).astype(i32)
        else:
            idx = _row_indices(d, shape[0], count, in_range=False)
        dtype = d.choice(dtypes)
        return Case((d.array(shape, dtype), idx, d.array((count,) + shape[1:], dtype)),
                    {"mode": mode, "unique_indices": unique})
    return cases


def _scatter(fn):
    def apply(x, idx, updates, mode, unique_indices):
        dn = lax.ScatterDimensionNumbers(update_window_dims=tuple(range(1, x.ndim)),
                                         inserted_window_dims=(0,),
                                         scatter_dims_to_operand_dims=(0,))
        return fn(x, idx, updates, dn, mode=mode, unique_indices=unique_indices)
    return apply


def _numpy_scatter(combine):
    def reference(x, idx, updates, mode, unique_indices):
        out = x.copy()
        for k, i in enumerate(idx[:, 0]):
            if mode == GSM.CLIP:
                i = min(max(i, 0), x.shape[0] - 1)
            elif not 0 <= i < x.shape[0]:
                continue
            out[i] = updates[k] if combine is None else combine(out[i], updates[k])
        return out
    return reference


for _name, (_fn, _combine) in _SCATTERS.items():
    row(_name, _prim(_name), _scatter(_fn), _scatter_cases(_name), numpy=_numpy_scatter(_combine),
        grad=0 if _name in ("scatter_min", "scatter_max") else 1, linear=_name == "scatter_add",
        grad_cases=_scatter_cases(_name, (f64,), unique=_name == "scatter_mul"))


# =============================================================================================
# Sorting
# =============================================================================================


def _sort_cases(d: Draw) -> Case:
    shape = d.shape(min_rank=1)
    dim = d.integer(0, len(shape) - 1)
    n = d.integer(1, 2)
    keys = d.rng.integers(-3, 3, shape).astype(d.choice([f32, i32]))  # with ties
    if keys.dtype == f32 and d.boolean():
        keys.flat[d.integer(0, keys.size - 1)] = np.nan
    return Case((keys,) + tuple(d.array(shape, f32) for _ in range(n - 1)),
                {"dimension": dim, "num_keys": 1})


def _numpy_sort(*operands, dimension, num_keys):
    order = np.argsort(operands[0], axis=dimension, kind="stable")
    return tuple(np.take_along_axis(x, order, dimension) for x in operands)


row("sort", _prim("sort"), lambda *xs, dimension, num_keys: tuple(
    lax.sort(xs, dimension=dimension, num_keys=num_keys)), _sort_cases, numpy=_numpy_sort,
    grad=2, grad_cases=lambda d: Case((d.array((3, 4), f64), d.array((3, 4), f64)),
                                      {"dimension": d.integer(0, 1), "num_keys": 1}))


def _top_k_cases(d: Draw) -> Case:
    shape = d.shape(min_rank=1)
    x = d.rng.integers(-4, 4, shape).astype(d.choice([f32, i32]))
    return Case((x,), {"k": d.integer(0, shape[-1])})


def _numpy_top_k(x, k):
    order = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, order, -1), order.astype(i32)


row("top_k", _prim("top_k"), lambda x, k: tuple(lax.top_k(x, k)), _top_k_cases,
    numpy=_numpy_top_k, grad=2,
    grad_cases=_distinct(lambda d: Case((d.array((2, 5), f64),), {"k": d.integer(1, 5)})))


# =============================================================================================
# Linear algebra
# =============================================================================================


def _dot_general_cases(d: Draw) -> Case:
    """Batch, contracting and free axes of random sizes, at random positions in each operand."""
    nb, nc, nlf, nrf = (d.integer(0, 2) for _ in range(4))
    letters = iter("abcdefgh")
    groups = {g: [next(letters) for _ in range(n)] for g, n in
              (("b", nb), ("c", nc), ("l", nlf), ("r", nrf))}
    size = {c: d.integer(1, 3) for g in groups.values() for c in g}
    lhs = [c for g in "bcl" for c in groups[g]]
    rhs = [c for g in "bcr" for c in groups[g]]
    lhs = [lhs[i] for i in d.permutation(len(lhs))]
    rhs = [rhs[i] for i in d.permutation(len(rhs))]
    dn = ((tuple(lhs.index(c) for c in groups["c"]), tuple(rhs.index(c) for c in groups["c"])),
          (tuple(lhs.index(c) for c in groups["b"]), tuple(rhs.index(c) for c in groups["b"])))
    dtype = d.choice([f32, i32])
    return Case((d.array([size[c] for c in lhs], dtype, -3, 3),
                 d.array([size[c] for c in rhs], dtype, -3, 3)), {"dimension_numbers": dn})


def _numpy_dot_general(lhs, rhs, dimension_numbers):
    (lc, rc), (lb, rb) = dimension_numbers
    letters = iter("abcdefghijklmnop")
    lhs_l, rhs_l = [None] * lhs.ndim, [None] * rhs.ndim
    for i, j in zip(lb + lc, rb + rc):
        lhs_l[i] = rhs_l[j] = next(letters)
    lhs_l = [c or next(letters) for c in lhs_l]
    rhs_l = [c or next(letters) for c in rhs_l]
    out = [lhs_l[i] for i in lb] + [c for i, c in enumerate(lhs_l) if i not in lb + lc] + \
        [c for i, c in enumerate(rhs_l) if i not in rb + rc]
    spec = f"{''.join(lhs_l)},{''.join(rhs_l)}->{''.join(out)}"
    return np.einsum(spec, lhs, rhs).astype(lhs.dtype)


row("dot_general", _prim("dot_general"), lax.dot_general, _dot_general_cases,
    numpy=_numpy_dot_general, grad=2, tol=1e-5)


def naive_conv(x, w, strides, padding, lhs_dil, rhs_dil, fgc=1, bgc=1):
    """The definition, one output element at a time (canonical [N, C, *S] / [O, I, *K])."""
    n_, c_ = x.shape[:2]
    o_, i_ = w.shape[:2]
    nsp = x.ndim - 2
    dilated = [(s - 1) * d + 1 for s, d in zip(x.shape[2:], lhs_dil)]
    xd = np.zeros((n_, c_) + tuple(dilated))
    xd[(slice(None), slice(None)) + tuple(slice(None, None, d) for d in lhs_dil)] = x
    padded = [dilated[k] + padding[k][0] + padding[k][1] for k in range(nsp)]
    window = [(w.shape[2 + k] - 1) * rhs_dil[k] + 1 for k in range(nsp)]
    out_sp = [max(0, (padded[k] - window[k]) // strides[k] + 1) for k in range(nsp)]
    out = np.zeros((n_ // bgc, o_) + tuple(out_sp))
    for n, o in itertools.product(range(n_ // bgc), range(o_)):
        g, b = o // (o_ // fgc), o // (o_ // bgc)
        for y in np.ndindex(*out_sp):
            acc = 0.0
            for i in range(i_):
                for kk in np.ndindex(*w.shape[2:]):
                    pos = [y[k] * strides[k] + kk[k] * rhs_dil[k] - padding[k][0]
                           for k in range(nsp)]
                    if all(0 <= p < dilated[k] for k, p in enumerate(pos)):
                        acc += xd[(b * (n_ // bgc) + n, g * i_ + i) + tuple(pos)] * w[(o, i) + kk]
            out[(n, o) + y] = acc
    return out


def _conv_cases(d: Draw) -> Case:
    nsp = d.integer(1, 2)
    fgc, bgc = d.choice([(1, 1), (2, 1), (1, 2)])
    x = d.array((2 * bgc, 2 * fgc) + tuple(d.integer(2, 4) for _ in range(nsp)), f32)
    w = d.array((2 * fgc * bgc, 2) + tuple(d.integer(1, 2) for _ in range(nsp)), f32)
    params = {"window_strides": tuple(d.integer(1, 2) for _ in range(nsp)),
              "padding": tuple((d.integer(0, 1), d.integer(-1, 1) + 1) for _ in range(nsp)),
              "lhs_dilation": tuple(d.integer(1, 2) for _ in range(nsp)),
              "rhs_dilation": tuple(d.integer(1, 2) for _ in range(nsp)),
              "feature_group_count": fgc, "batch_group_count": bgc}
    return Case((x, w), params)


def _numpy_conv(x, w, window_strides, padding, lhs_dilation, rhs_dilation, feature_group_count,
                batch_group_count):
    return naive_conv(x, w, window_strides, padding, lhs_dilation, rhs_dilation,
                      feature_group_count, batch_group_count).astype(x.dtype)


row("conv_general_dilated", _prim("conv_general_dilated"), lax.conv_general_dilated, _conv_cases,
    numpy=_numpy_conv, grad=1, tol=1e-4)


def _spd(d: Draw, batch, n, dtype=f32):
    a = d.array(tuple(batch) + (n, n), f64)
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dtype)


def _matrix_cases(square=True, spd=False, dtype=f32):
    def cases(d: Draw) -> Case:
        batch, rows = d.shape(max_rank=1, max_size=2), d.integer(1, 4)
        if spd:
            return Case((_spd(d, batch, rows, dtype),))
        cols = rows if square else d.integer(1, 4)
        return Case((d.array(tuple(batch) + (rows, cols), dtype),))
    return cases


def _allclose(a, b, tol):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                               rtol=tol, atol=tol)


row("cholesky", _prim("cholesky"), lax.linalg.cholesky, _matrix_cases(spd=True),
    numpy=np.linalg.cholesky, tol=1e-4, grad=2, grad_cases=_matrix_cases(spd=True, dtype=f64))


def _triangular_solve_cases(d: Draw) -> Case:
    flags = {k: d.boolean() for k in ("left_side", "lower", "transpose_a", "unit_diagonal")}
    n, m = d.integer(1, 4), d.integer(1, 3)
    batch = d.shape(max_rank=1, max_size=2)
    a = d.array(tuple(batch) + (n, n), f32) + 4 * np.eye(n, dtype=f32)
    b = d.array(tuple(batch) + ((n, m) if flags["left_side"] else (m, n)), f32)
    return Case((a, b), flags)


def _numpy_triangular_solve(a, b, left_side, lower, transpose_a, unit_diagonal):
    op = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        op = op - op * np.eye(a.shape[-1]) + np.eye(a.shape[-1])
    if transpose_a:
        op = np.swapaxes(op, -1, -2)
    if left_side:
        return np.linalg.solve(op.astype(f64), b.astype(f64))
    return np.swapaxes(np.linalg.solve(np.swapaxes(op, -1, -2).astype(f64),
                                       np.swapaxes(b, -1, -2).astype(f64)), -1, -2)


row("triangular_solve", _prim("triangular_solve"), lax.linalg.triangular_solve,
    _triangular_solve_cases, numpy=_numpy_triangular_solve, tol=1e-4, grad=2,
    grad_cases=lambda d: (lambda c: Case(tuple(a.astype(f64) for a in c.args), c.params))(
        _triangular_solve_cases(d)))


def _check_lu(case, outs):
    (m,) = case.args
    lu, pivots, perm = (np.asarray(o) for o in outs)
    rows, cols = m.shape[-2:]
    k = min(rows, cols)
    lower = np.tril(lu, -1)[..., :, :k] + np.eye(rows, k)
    upper = np.triu(lu)[..., :k, :]
    _allclose(lower @ upper, np.take_along_axis(m, perm[..., :, None], -2), 1e-4)
    assert np.abs(lower).max(initial=0) <= 1 + 1e-6  # partial pivoting
    for idx in np.ndindex(*m.shape[:-2]):  # the row swaps produce the permutation
        p = np.arange(rows)
        for i, j in enumerate(pivots[idx]):
            p[[i, j]] = p[[j, i]]
        np.testing.assert_array_equal(p, perm[idx])


row("lu", _prim("lu"), lambda a: tuple(lax.linalg.lu(a)), _matrix_cases(square=False),
    check=_check_lu, grad=1, grad_modes=("fwd", "rev"),
    grad_cases=lambda d: Case((d.array((3, 3), f64) + 3 * np.eye(3),)))


def _check_qr(case, outs):
    (m,) = case.args
    q, r = (np.asarray(o, f64) for o in outs)
    _allclose(q @ r, m, 1e-4)
    _allclose(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(q.shape[-1]), q.shape[:-2] +
                                                          (q.shape[-1],) * 2), 1e-4)
    _allclose(r, np.triu(r), 0)


row("qr", _prim("qr"), lambda a, full_matrices: tuple(lax.linalg.qr(a, full_matrices=full_matrices)),
    lambda d: Case(_matrix_cases(square=False)(d).args, {"full_matrices": d.boolean()}),
    check=_check_qr, grad=2,
    grad_cases=lambda d: Case((d.array((4, 3), f64),), {"full_matrices": False}))


def _check_eigh(case, outs):
    (a,) = case.args
    v, w = (np.asarray(o, f64) for o in outs)
    _allclose(w, np.linalg.eigvalsh(a), 1e-4)
    _allclose(a @ v, v * w[..., None, :], 1e-3)


row("eigh", _prim("eigh"), lambda a: tuple(lax.linalg.eigh(a)), _matrix_cases(spd=True),
    check=_check_eigh, grad=1,
    grad_cases=lambda d: Case((d.array((3, 3), f64),)))


def _check_svd(case, outs):
    (m,) = case.args
    if not case.params["compute_uv"]:
        _allclose(outs, np.linalg.svd(m, compute_uv=False), 1e-4)
        return
    u, s, vh = (np.asarray(o, f64) for o in outs)
    k = s.shape[-1]
    _allclose((u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :], m, 1e-4)
    _allclose(s, np.linalg.svd(m, compute_uv=False), 1e-4)


row("svd", _prim("svd"),
    lambda a, full_matrices, compute_uv: (lambda o: tuple(o) if compute_uv else o)(
        lax.linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)),
    lambda d: Case(_matrix_cases(square=False)(d).args,
                   {"full_matrices": d.boolean(), "compute_uv": d.boolean()}),
    check=_check_svd, grad=2, grad_modes=("fwd", "rev"),
    grad_cases=lambda d: Case((d.array((3, 2), f64),),
                              {"full_matrices": False, "compute_uv": False}))


def _check_schur(case, outs):
    (a,) = case.args
    t, z = (np.asarray(o, f64) for o in outs)
    _allclose(z @ t @ np.swapaxes(z, -1, -2), a, 1e-4)
    _allclose(np.tril(t, -2), 0, 1e-5)  # quasi-triangular: 2x2 blocks for complex pairs


def _check_hessenberg(case, outs):
    (a,) = case.args
    h, taus = (np.asarray(o, f64) for o in outs)
    n = a.shape[-1]
    assert taus.shape == a.shape[:-2] + (max(n - 1, 0),)
    # below the subdiagonal h holds the reflectors; the Hessenberg part is similar to a, and
    # equals SciPy's up to the signs of the reflectors
    hess = np.triu(h, -1)
    expected = scipy.linalg.hessenberg(a.astype(f64))
    _allclose(np.abs(hess), np.abs(expected), 1e-4)


row("schur", _prim("schur"), lambda a: tuple(lax.linalg.schur(a)),
    lambda d: Case((d.array((d.integer(1, 4),) * 2, f32),)), check=_check_schur, vmap=False)
row("hessenberg", _prim("hessenberg"), lambda a: tuple(lax.linalg.hessenberg(a)),
    lambda d: Case((d.array((d.integer(1, 4),) * 2, f32),)), check=_check_hessenberg, vmap=False)


_FFTS = {"FFT": (c64, np.fft.fftn), "IFFT": (c64, np.fft.ifftn), "RFFT": (f32, np.fft.rfftn),
         "IRFFT": (c64, None)}


def _fft_cases(d: Draw) -> Case:
    kind = d.choice(sorted(_FFTS))
    shape = d.shape(min_rank=1, max_size=4)
    k = d.integer(1, min(len(shape), 3))
    lengths = shape[len(shape) - k:]
    if kind == "IRFFT":
        shape = shape[:-1] + (lengths[-1] // 2 + 1,)
    return Case((d.array(shape, _FFTS[kind][0]),), {"fft_type": kind, "fft_lengths": lengths})


def _numpy_fft(x, fft_type, fft_lengths):
    axes = tuple(range(x.ndim - len(fft_lengths), x.ndim))
    if fft_type == "IRFFT":
        return np.fft.irfftn(x, fft_lengths, axes).astype(f32)
    return _FFTS[fft_type][1](x, axes=axes).astype(c64)


row("fft", _prim("fft"), lax.fft, _fft_cases, numpy=_numpy_fft, tol=1e-4, grad=1, linear=True,
    grad_cases=lambda d: Case((d.array((3, 4), f64),), {"fft_type": "RFFT", "fft_lengths": (4,)}))


# =============================================================================================
# Windows
# =============================================================================================


def _window_cases(d: Draw) -> Case:
    shape = d.shape(min_rank=1, max_rank=2, min_size=1, max_size=5)
    window = tuple(d.integer(1, n) for n in shape)
    return Case((d.array(shape, f32),), {"window_dimensions": window,
                                         "window_strides": tuple(d.integer(1, 2) for _ in shape),
                                         "padding": d.choice(["VALID", "SAME"])})


def _numpy_window(ufunc, identity):
    def reference(x, window_dimensions, window_strides, padding):
        pads = lax.padtype_to_pads(x.shape, window_dimensions, window_strides, padding)
        padded = np.pad(x, pads, constant_values=identity)
        windows = np.lib.stride_tricks.sliding_window_view(padded, window_dimensions)
        windows = windows[tuple(slice(None, None, s) for s in window_strides)]
        axes = tuple(range(x.ndim, 2 * x.ndim))
        return ufunc.reduce(windows, axis=axes).astype(x.dtype)
    return reference


def _window_grad_cases(d: Draw) -> Case:
    c = _window_cases(d)
    # distinct values: the maximum of every window is unique
    x = np.random.default_rng(d.integer(0, 99)).permutation(c.args[0].size).reshape(
        c.args[0].shape) * 0.5
    return Case((x.astype(f64),), c.params)


for _name, _ufunc, _identity in [("reduce_window_sum", np.add, 0),
                                 ("reduce_window_max", np.maximum, -np.inf),
                                 ("reduce_window_min", np.minimum, np.inf)]:
    # a window's sum rounds differently on x86-64-v2 than with AVX (1 ulp measured)
    row(_name, _prim(_name), getattr(lax, _name), _window_cases,
        numpy=_numpy_window(_ufunc, _identity), grad=2, linear=_name == "reduce_window_sum",
        grad_cases=_window_grad_cases, ulps=4.0 if _name == "reduce_window_sum" else 0.0,
        accumulates=True)


def _window_select_cases(d: Draw) -> Case:
    c = _window_grad_cases(d)
    (x,) = c.args
    return Case((x.astype(f32), d.array(x.shape, f32)), c.params)


def _numpy_window_max_tangent(x, t, **params):
    """The tangent of reduce_window_max: the tangent at each window's (unique) maximum."""
    pads = lax.padtype_to_pads(x.shape, params["window_dimensions"], params["window_strides"],
                               params["padding"])
    px, pt = np.pad(x, pads, constant_values=-np.inf), np.pad(t, pads)
    view = np.lib.stride_tricks.sliding_window_view
    strided = tuple(slice(None, None, s) for s in params["window_strides"])
    wx = view(px, params["window_dimensions"])[strided]
    wt = view(pt, params["window_dimensions"])[strided]
    flat = wx.reshape(wx.shape[:x.ndim] + (-1,))
    pick = np.argmax(flat, axis=-1)[..., None]
    return np.take_along_axis(wt.reshape(flat.shape), pick, -1)[..., 0]


# reached only through reduce_window_max's (and _min's) derivative
row("window_select", _prim("window_select"),
    lambda x, t, **params: functrans.jvp(lambda y: lax.reduce_window_max(y, **params),
                                         (x,), (t,))[1],
    _window_select_cases, numpy=_numpy_window_max_tangent)


# =============================================================================================
# Control flow
# =============================================================================================


def _cond(p, x, y):
    return lax.cond(p, lambda a, b: lax.sin(a) * b, lambda a, b: a - b, x, y)


def _cond_cases(d: Draw) -> Case:
    shape = d.shape(max_size=3)
    return Case((np.asarray(d.boolean()), d.array(shape, f32), d.array(shape, f32)))


row("cond", _prim("cond"), _cond, _cond_cases,
    numpy=lambda p, x, y: np.sin(x) * y if p else x - y, grad=2)


def _while(x, n):
    return lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, lax.sin(c[1]) * 1.5),
                          (np.int32(0), x))[1]


def _numpy_while(x, n):
    for _ in range(int(n)):
        x = (np.sin(x) * 1.5).astype(x.dtype)
    return x


row("while", _prim("while"), _while,
    lambda d: Case((d.array(d.shape(max_size=3), f32), np.asarray(d.integer(0, 4), i32))),
    numpy=_numpy_while, grad=2, grad_modes=("fwd",))


def _scan(c, xs, reverse):
    return tuple(lax.scan(lambda c, x: (c * x + 1, lax.sin(c)), c, xs, reverse=reverse))


def _numpy_scan(c, xs, reverse):
    ys = []
    for x in (xs[::-1] if reverse else xs):
        ys.append(np.sin(c))
        c = c * x + 1
    ys = np.stack(ys) if ys else np.zeros((0,) + c.shape, c.dtype)
    return c, ys[::-1] if reverse else ys


def _scan_cases(d: Draw) -> Case:
    shape = d.shape(max_rank=2, max_size=3)
    return Case((d.array(shape, f32, -1, 1), d.array((d.integer(0, 4),) + shape, f32, -1, 1)),
                {"reverse": d.boolean()})


row("scan", _prim("scan"), _scan, _scan_cases, numpy=_numpy_scan, grad=2)


def _linear_solve(diagonal, b):
    return lax.custom_linear_solve(lambda v: diagonal * v, b, lambda matvec, r: r / diagonal,
                                   lambda matvec, r: r / diagonal)


row("linear_solve", _prim("linear_solve"), _linear_solve,
    lambda d: (lambda shape: Case((d.array(shape, f32, 0.5, 2.0), d.array(shape, f32))))(
        d.shape(max_size=3)),
    numpy=lambda diagonal, b: b / diagonal, grad=2)


# =============================================================================================
# Random bits
# =============================================================================================


def _rotl(x, r):
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def numpy_threefry2x32(key1, key2, x1, x2):
    """Threefry-2x32 with 20 rounds (Salmon et al., SC 2011), on uint32 arrays."""
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    keys = (key1.astype(u32), key2.astype(u32), key1.astype(u32) ^ key2.astype(u32) ^ np.uint32(0x1BD11BDA))
    with np.errstate(over="ignore"):
        x = [x1.astype(u32) + keys[0], x2.astype(u32) + keys[1]]
        for block in range(5):
            for r in rotations[block % 2]:
                x[0] = x[0] + x[1]
                x[1] = _rotl(x[1], r) ^ x[0]
            x[0] = x[0] + keys[(block + 1) % 3]
            x[1] = x[1] + keys[(block + 2) % 3] + np.uint32(block + 1)
    return x[0], x[1]


def _threefry_cases(d: Draw) -> Case:
    shape = d.shape(max_size=3)
    return Case(tuple(d.array(shape, u32, 0, 2 ** 32 - 1) for _ in range(4)))


row("threefry2x32", _prim("threefry2x32"),
    lambda k1, k2, x1, x2: tuple(random_bits.threefry2x32(k1, k2, x1, x2)), _threefry_cases,
    numpy=numpy_threefry2x32, tol=0.0)


def _check_rng_uniform(case, out):
    low, high = case.args
    out = np.asarray(out)
    assert out.shape == case.params["shape"] and out.dtype == low.dtype
    assert np.all((out >= low) & (out < high))


row("rng_uniform", _prim("rng_uniform"), lax.rng_uniform,
    lambda d: Case((np.float32(-1.5), np.float32(2.0)), {"shape": d.shape()}),
    check=_check_rng_uniform, vmap=False, ulps=None)


def _check_rng_bit_generator(case, outs):
    key, bits = (np.asarray(o) for o in outs)
    assert key.shape == case.args[0].shape and key.dtype == u32
    assert bits.shape == case.params["shape"] and bits.dtype == case.params["dtype"]
    again = lax.rng_bit_generator(case.args[0], case.params["shape"], case.params["dtype"])
    np.testing.assert_array_equal(np.asarray(again[1]), bits)  # a function of the key


row("rng_bit_generator", _prim("rng_bit_generator"),
    lambda key, shape, dtype: tuple(lax.rng_bit_generator(key, shape, dtype)),
    lambda d: Case((d.array((4,), u32, 0, 2 ** 32 - 1),),
                   {"shape": d.shape(), "dtype": d.choice([u32, u8])}),
    check=_check_rng_bit_generator, vmap=False)


# =============================================================================================
# Primitives without a row, and why
# =============================================================================================

_COLLECTIVE = ("bound to a pmap/shard_map axis name; tested on several CPU devices in "
               "test_pmap.py, test_collective_groups.py and test_shard_map.py")
_CALL = ("holds a sub-program or a user function rather than computing; tested through the "
         "transform that binds it")
EXCLUDED = {
    "psum": _COLLECTIVE, "pmax": _COLLECTIVE, "pmin": _COLLECTIVE, "all_gather": _COLLECTIVE,
    "all_to_all": _COLLECTIVE, "ppermute": _COLLECTIVE, "axis_index": _COLLECTIVE,
    "reduce_scatter": _COLLECTIVE,
    "jit": _CALL + " (test_jit_caching.py)",
    "remat": _CALL + " (test_ad_checkpoint.py)", "remat_linear": _CALL + " (test_ad_checkpoint.py)",
    "custom_jvp_call": _CALL + " (test_custom_derivatives.py)",
    "custom_vjp_call": _CALL + " (test_custom_derivatives.py)",
    "custom_vjp_fwd": _CALL + " (test_custom_derivatives.py)",
    "custom_lin": _CALL + " (test_custom_derivatives.py)",
    "custom_vmap_call": _CALL + " (test_custom_batching.py)",
    "pure_callback": _CALL + ": a host callback, never native (test_callbacks.py)",
    "debug_callback": _CALL + ": a host callback with effects (test_debug.py)",
    "io_callback": _CALL + ": a host callback with effects (test_as_jax.py)",
    "check": "checkify's check: no outputs, raises when it fails; tested through checkify "
             "(test_as_jax.py)",
    "pvary": "lax.pcast(to='varying'): the identity on values, a type annotation of "
             "shard_map; tested there (test_as_jax.py)",
    "shard_map": _CALL + " (test_shard_map.py)",
    "sharding_constraint": "a placement annotation, the identity on values; tested with "
                           "sharding propagation (test_sharding_propagation.py)",
    "first_order_only": "an internal guard of segment_prod's derivative that raises on a "
                        "second derivative; tested with segment_prod (test_ops.py)",
}


# =============================================================================================
# Known NumPy fallbacks, and why (each is checked to still happen for some example)
# =============================================================================================

# the backends' own tables of what they leave to NumPy (primitive -> reason)
LLVM_FALLBACKS = llvm_lowering.HOST
CUDA_FALLBACKS = cuda_lowering.HOST
