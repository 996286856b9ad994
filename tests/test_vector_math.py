"""Accuracy of the float32 math the llvm backend inlines (``backends/llvm/vector_math.py``):
errors in ulps against float64 NumPy over a dense sweep of float32 values, and the edges
(overflow, subnormal results, NaN, infinities, signed zeros) value by value."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special

import functrans
import functrans.numpy as jnp
from functrans import lax, nn

from primitive_table import FLOAT32_MATH_ULPS as ULPS


@pytest.fixture(autouse=True)
def _ieee_subnormals():
    """The accuracy of the inline math is measured in IEEE arithmetic, subnormal results
    included: with subnormals flushed (the default, as in JAX) every result below the
    smallest normal float32 is zero instead (tests/test_float_mode.py)."""
    functrans.config.update("flush_denormals", False)
    yield


def ulps(got, want):
    """|got - want| in units of the float32 spacing at ``want`` (float64); 0 where both are
    the same infinity or both NaN, inf where only one is NaN."""
    got = np.asarray(got, np.float64)
    with np.errstate(over="ignore"):
        want32 = np.abs(want).astype(np.float32)
    spacing = np.maximum(np.spacing(want32).astype(np.float64), 2.0 ** -149)
    with np.errstate(invalid="ignore"):
        err = np.abs(got - want) / spacing
    same = ((got == want) | (np.isnan(got) & np.isnan(want))
            | (np.isinf(got) & (got == want32 * np.sign(want))))
    err[same] = 0.0
    err[np.isnan(err)] = np.inf
    return err


def sweep(limit, points=1 << 16):
    """float32 values spread evenly by bit pattern over (0, limit], both signs, and 0."""
    bits = np.linspace(0, np.float32(limit).view(np.int32), points).astype(np.int32)
    positive = bits.view(np.float32)
    return np.concatenate([positive, -positive])


# The documented bounds (primitive_table.FLOAT32_MATH_ULPS): each float32 function the
# backend inlines is within this many ulps of the exact result, for every target CPU (with a
# fused multiply-add, from x86-64-v3 up, and without one, x86-64-v2).
CASES = {  # name: (function, float64 reference, sweep limit, ulps allowed, domain)
    "exp": (jnp.exp, np.exp, 110.0, ULPS["exp"], "real"),
    "exp2": (jnp.exp2, np.exp2, 160.0, ULPS["exp2"], "real"),
    "expm1": (jnp.expm1, np.expm1, 100.0, ULPS["expm1"], "real"),
    "tanh": (jnp.tanh, np.tanh, 20.0, ULPS["tanh"], "real"),
    "sinh": (jnp.sinh, np.sinh, 95.0, ULPS["sinh"], "real"),
    "cosh": (jnp.cosh, np.cosh, 95.0, ULPS["cosh"], "real"),
    "logistic": (lax.logistic, scipy.special.expit, 80.0, ULPS["logistic"], "real"),
    "softplus": (nn.softplus, lambda x: np.logaddexp(0.0, x), 200.0, 5.0, "real"),
    "log": (jnp.log, np.log, 1e30, ULPS["log"], "positive"),
    "log1p": (jnp.log1p, np.log1p, 1e30, ULPS["log1p"], "above -1"),
    "sin": (jnp.sin, np.sin, 1e4, ULPS["sin"], "real"),
    "cos": (jnp.cos, np.cos, 1e4, ULPS["cos"], "real"),
    "tan": (jnp.tan, np.tan, 1e4, ULPS["tan"], "real"),
    "atan": (jnp.arctan, np.arctan, 1e30, ULPS["atan"], "real"),
    "asin": (jnp.arcsin, np.arcsin, 1.0, ULPS["asin"], "real"),
    "acos": (jnp.arccos, np.arccos, 1.0, ULPS["acos"], "real"),
    "asinh": (jnp.arcsinh, np.arcsinh, 1e30, ULPS["asinh"], "real"),
    "acosh": (jnp.arccosh, np.arccosh, 1e30, ULPS["acosh"], "from 1"),
    "atanh": (jnp.arctanh, np.arctanh, 1.0, ULPS["atanh"], "real"),
    "erf": (lax.erf, scipy.special.erf, 10.0, ULPS["erf"], "real"),
    "erf_inv": (lax.erf_inv, scipy.special.erfinv, 1.0, ULPS["erf_inv"], "real"),
}
assert set(CASES) - {"softplus"} == set(ULPS)


def _in_domain(x, domain):
    if domain == "positive":
        return np.abs(x)
    if domain == "above -1":  # (-1, 0] and [0, limit]
        return np.where(x < 0, np.maximum(x, -1.0) * np.float32(0.999999), x).astype(np.float32)
    if domain == "from 1":
        return (1 + np.abs(x)).astype(np.float32)
    return x


def _targets():
    """The target CPUs whose code this machine runs: native, and the x86-64 levels below."""
    from functrans.backends.llvm import targets
    names = ["native"]
    if targets.host().triple.startswith(("x86_64", "amd64")):
        names += [n for n in ("x86-64-v3", "x86-64-v2")
                  if not targets.missing_features(targets.resolve(n))]
    return names


@pytest.mark.parametrize("target", _targets())
@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_functions_are_within_a_few_ulp(name, target):
    fn, reference, limit, allowed, domain = CASES[name]
    x = _in_domain(sweep(limit), domain)
    got = np.asarray(functrans.jit(fn, compiler_options={"target_cpu": target})(x))
    with np.errstate(all="ignore"):
        want = reference(x.astype(np.float64))
    err = ulps(got, want)
    worst = int(np.argmax(err))
    assert err[worst] <= allowed, (name, x[worst], got[worst], want[worst], err[worst])


def test_exp_overflow_and_subnormal_edges():
    # 88.72283 is the largest float32 whose exp is finite; from -87.34 down the results are
    # subnormal, rounded once; below about -103.97 they round to zero
    x = np.array([88.72283, 88.72284, 89.0, 1e4, np.inf, -87.33, -87.34, -95.5, -100.0, -103.27,
                  -103.97, -103.98, -104.0, -1e4, -np.inf, np.nan, 0.0, -0.0, 1e-40, -1e-40],
                 np.float32)
    got = np.asarray(functrans.jit(jnp.exp)(x))
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64))
    assert np.all(ulps(got, want) <= 1.0), (got, want)
    assert np.isfinite(got[0]) and np.isinf(got[1]) and np.isinf(got[4])
    assert got[14] == 0.0 and np.isnan(got[15])
    assert got[9] > 0 and got[11] == 0.0 and got[12] == 0.0


def test_exp2_and_sinh_cosh_at_the_ends_of_the_exponent_range():
    e = np.array([127.99, 128.0, -126.0, -126.5, -140.25, -149.0, -149.5, -149.6, -150.0, -151.0],
                 np.float32)
    assert np.all(ulps(functrans.jit(jnp.exp2)(e), np.exp2(e.astype(np.float64))) <= 1.0)
    # e**x / 2 is finite a little beyond exp's own range
    h = np.array([89.41, 89.415, 89.42, 90.0, -89.41, -89.42, np.inf, -np.inf, np.nan], np.float32)
    for fn, reference in ((jnp.sinh, np.sinh), (jnp.cosh, np.cosh)):
        with np.errstate(over="ignore"):
            want = reference(h.astype(np.float64))
        assert np.all(ulps(functrans.jit(fn)(h), want) <= 2.0), fn


def test_tanh_edges_keep_sign_nan_and_never_pass_one():
    x = np.array([0.0, -0.0, 1e-40, -1e-40, 1e-30, np.nan, np.inf, -np.inf, 9.0, -9.0, 8.99,
                  9.01, 1e30, -1e30, 3e38, -3e38], np.float32)
    got = np.asarray(functrans.jit(jnp.tanh)(x))
    assert np.array_equal(np.signbit(got[:2]), [False, True])
    np.testing.assert_array_equal(got[2:5], x[2:5])  # tanh(x) rounds to x for tiny x
    assert np.isnan(got[5])
    np.testing.assert_array_equal(got[6:8], [1.0, -1.0])
    assert np.all(ulps(got[8:], np.tanh(x[8:].astype(np.float64))) <= 1.0)
    # around the clamp at 9 the rational's rounding must not overshoot 1
    near = np.linspace(7.0, 11.0, 200001, dtype=np.float32)
    y = np.asarray(functrans.jit(jnp.tanh)(np.concatenate([near, -near])))
    assert np.all(np.abs(y) <= 1.0)


@pytest.mark.parametrize("fn", [jnp.exp, jnp.exp2, jnp.expm1, jnp.sinh, jnp.cosh, jnp.tanh,
                                lax.logistic], ids=lambda fn: fn.__name__)
def test_nans_of_any_payload_stay_nan(fn):
    # exp's 2**n scaling works on bit patterns: a NaN's payload must not leak into it
    bits = np.array([0x7FC00000, 0xFFC00000, 0x7FC00123, 0xFFFFFFFF, 0x7F800001, 0x7FBFFFFF,
                     0xFF8001FF], np.uint32)
    x = np.concatenate([bits.view(np.float32), np.ones(9, np.float32)])
    out = np.asarray(functrans.jit(fn)(x))
    assert np.all(np.isnan(out[:bits.size])), out
