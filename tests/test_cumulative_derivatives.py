"""Derivatives of cummax, cummin, cumlogsumexp and top_k: exact against direct loop
definitions (ties included), transposes consistent with their JVPs, vmap, jit and higher
order, and programs whose intermediates stay O(n) (no [n, n] one-hot or weight matrices)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import functrans
from functrans import core, lax
from functrans import numpy as jnp
from functrans.test_util import check_grads, x64

# =============================================================================================
# Oracles: loops over Python lists, written from the definitions
# =============================================================================================


def _scan_tangent_oracle(combine, x, t):
    """JAX's derivative of a cumulative reduction: the JVP of its odd/even prefix scan, on
    Python lists of (value, tangent) pairs. ``combine`` maps two pairs to one."""
    pairs = list(zip(x, t))

    def scan(items):
        if len(items) < 2:
            return items
        reduced = [combine(items[i], items[i + 1]) for i in range(0, len(items) - 1, 2)]
        odd = scan(reduced)
        even = [combine(odd[k - 1], items[2 * k]) for k in range(1, (len(items) + 1) // 2)]
        even = [items[0]] + even
        out = []
        for i in range(len(items)):
            out.append(even[i // 2] if i % 2 == 0 else odd[i // 2])
        return out

    return [tangent for _, tangent in scan(pairs)]


def _max_pair(a, b):
    (x, tx), (y, ty) = a, b
    out = math.nan if math.isnan(x) or math.isnan(y) else max(x, y)
    wx = 0.0 if x != out else (0.5 if y == out else 1.0)
    wy = 0.0 if y != out else (0.5 if x == out else 1.0)
    return out, tx * wx + ty * wy


def _min_pair(a, b):
    (x, tx), (y, ty) = a, b
    (out, t) = _max_pair((-x, tx), (-y, ty))
    return -out, t


def _logaddexp_pair(a, b):
    (x, tx), (y, ty) = a, b
    out = max(x, y) + math.log1p(math.exp(-abs(x - y)))
    return out, tx * math.exp(x - out) + ty * math.exp(y - out)


ORACLES = {"cummax": _max_pair, "cummin": _min_pair, "cumlogsumexp": _logaddexp_pair}


def _along(fn, x, t, axis, reverse):
    """Apply a 1-D list function to every line of ``x``/``t`` along ``axis``."""
    x = np.moveaxis(np.asarray(x, np.float64), axis, -1)
    t = np.moveaxis(np.asarray(t, np.float64), axis, -1)
    out = np.empty_like(t)
    for index in np.ndindex(x.shape[:-1]):
        xs, ts = list(x[index]), list(t[index])
        if reverse:
            xs, ts = xs[::-1], ts[::-1]
        line = fn(xs, ts)
        out[index] = line[::-1] if reverse else line
    return np.moveaxis(out, -1, axis)


@st.composite
def _tied_case(draw):
    """Small integer-valued operands (many ties), an axis and a direction."""
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)))
    seed = draw(st.integers(0, 2 ** 31 - 1))
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, shape).astype(np.float64)
    t = rng.standard_normal(shape)
    return x, t, draw(st.integers(0, len(shape) - 1)), draw(st.booleans())


# =============================================================================================
# cummax / cummin / cumlogsumexp
# =============================================================================================


@pytest.mark.parametrize("name", sorted(ORACLES))
@settings(max_examples=25, deadline=None)
@given(case=_tied_case())
def test_jvp_and_vjp_match_the_scan_definition(name, case):
    x, t, axis, reverse = case
    f = lambda x: getattr(lax, name)(x, axis=axis, reverse=reverse)  # noqa: E731
    expected = _along(lambda xs, ts: _scan_tangent_oracle(ORACLES[name], xs, ts), x, t, axis,
                      reverse)
    with x64():
        _, tangent = functrans.jvp(f, (x,), (t,))
        np.testing.assert_allclose(np.asarray(tangent), expected, rtol=1e-12, atol=1e-12)
        # the VJP is the transpose of the JVP: <ct, J t> == <J^T ct, t> for every t
        ct = np.cos(np.arange(x.size)).reshape(x.shape)
        _, pullback = functrans.vjp(f, x)
        (cotangent,) = pullback(ct)
        np.testing.assert_allclose(np.sum(np.asarray(cotangent) * t), np.sum(ct * expected),
                                   rtol=1e-10, atol=1e-10)


def test_ties_split_as_jax_does():
    # reference values: jax.jacfwd(lax.cummax) and jax.grad of a sum in JAX 0.10.2
    x = np.array([2.0, 2.0, 2.0, 2.0], np.float32)
    np.testing.assert_array_equal(np.asarray(functrans.jacfwd(lax.cummax)(x)),
                                  [[1, 0, 0, 0], [.5, .5, 0, 0], [.25, .25, .5, 0],
                                   [.25, .25, .25, .25]])
    y = np.array([1.0, 3.0, 3.0, 2.0, 3.0, 5.0, 5.0, 5.0], np.float32)
    grad = functrans.grad(lambda y: lax.cummax(y).sum())(y)
    np.testing.assert_array_equal(np.asarray(grad), [1, 2.25, 1.25, 0, .5, 2, .75, .25])
    grad = functrans.grad(lambda y: lax.cummin(y, reverse=True).sum())(y)
    np.testing.assert_array_equal(np.asarray(grad), [1, 0, 0, 3, 1, .5, .75, 1.75])


def test_nan_and_infinities_follow_the_combines():
    # a NaN result matches neither side, so its tangent is 0; in logaddexp's weights +inf
    # counts as 0, so inf - inf weighs e^0 = 1 (values: jax.jvp in JAX 0.10.2)
    x = np.array([np.nan, 1.0, 2.0, np.nan, 3.0], np.float32)
    t = np.arange(1.0, 6.0, dtype=np.float32)
    _, tangent = functrans.jvp(lax.cummax, (x,), (t,))
    np.testing.assert_array_equal(np.asarray(tangent), [1.0, 0.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(np.asarray(tangent),
                                  np.float32(_scan_tangent_oracle(_max_pair, list(x), list(t))))
    y = np.array([np.inf, np.inf, 0.0], np.float32)
    _, tangent = functrans.jvp(lax.cumlogsumexp, (y,), (np.ones(3, np.float32),))
    np.testing.assert_array_equal(np.asarray(tangent), [1.0, 2.0, 3.0])


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_numerical_gradients_without_ties(name):
    x = np.random.default_rng(7).permutation(15).reshape(3, 5) * 0.37 - 2.0
    with x64():
        for reverse in (False, True):
            check_grads(lambda x: getattr(lax, name)(x, axis=1, reverse=reverse), (x,),
                        order=2, modes=("fwd", "rev"))


def test_cumlogsumexp_third_order_in_forward_over_reverse():
    x = np.array([0.3, -1.2, 2.0, 0.5])
    with x64():
        check_grads(lambda x: lax.cumlogsumexp(x, reverse=True) ** 2, (x,), order=3)


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_vmap_jit_and_per_example_grads_with_ties(name):
    rng = np.random.default_rng(8)
    x = rng.integers(-2, 3, (4, 6, 5)).astype(np.float32)
    w = rng.standard_normal((6, 5)).astype(np.float32)

    def loss(x):
        return (getattr(lax, name)(x, axis=0, reverse=True) * w).sum()

    g = functrans.grad(loss)
    batched = functrans.vmap(g)(x)
    compiled = functrans.jit(functrans.vmap(g))(x)
    for i in range(4):
        np.testing.assert_allclose(np.asarray(batched)[i], np.asarray(g(x[i])), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(compiled), np.asarray(batched), rtol=1e-6, atol=1e-7)
    # batched tangents with an unbatched operand (jacfwd) and the other way round
    jac = functrans.jacfwd(lambda x: getattr(lax, name)(x, axis=1))(x[0])
    jac_rev = functrans.jacrev(lambda x: getattr(lax, name)(x, axis=1))(x[0])
    np.testing.assert_allclose(np.asarray(jac), np.asarray(jac_rev), rtol=1e-6, atol=1e-7)


def test_hessian_of_cummax_is_zero():
    x = np.array([0.5, 2.0, 2.0, -1.0, 3.0], np.float32)
    h = functrans.hessian(lambda x: (lax.cummax(x) * np.arange(5.0)).sum())(x)
    np.testing.assert_array_equal(np.asarray(h), np.zeros((5, 5)))


@pytest.mark.parametrize("transpose", [False, True])
def test_the_tangent_map_is_differentiable_in_both_arguments(transpose):
    # the map the derivatives above are made of: its own JVP (zero in x for max, the
    # exp(x_j - y_i) weights' derivative for logaddexp) and transpose, checked numerically
    from functrans.primitives.reductions import cumulative_tangent_p
    x, t = np.random.default_rng(9).standard_normal((2, 3, 4))
    for combine in ("max", "logaddexp"):
        def f(x, t):
            return cumulative_tangent_p.bind(x, t, combine=combine, axis=1, reverse=True,
                                             transpose=transpose)
        with x64():
            check_grads(f, (x, t), order=2)


# =============================================================================================
# top_k
# =============================================================================================


def test_top_k_gradient_goes_to_the_chosen_indices_with_ties():
    x = np.array([[2.0, 2.0, 1.0, 2.0], [0.0, 3.0, 3.0, 1.0]], np.float32)
    w = np.array([1.0, 10.0, 100.0], np.float32)
    g = functrans.grad(lambda x: (lax.top_k(x, 3)[0] * w).sum())(x)
    expected = np.zeros_like(x)
    for row in range(2):
        order = np.argsort(-x[row], kind="stable")[:3]   # lower index first among equals
        expected[row, order] = w
    np.testing.assert_array_equal(np.asarray(g), expected)
    per_row = functrans.grad(lambda r: (lax.top_k(r, 3)[0] * w).sum())
    compiled = functrans.jit(functrans.vmap(per_row))(x)
    np.testing.assert_array_equal(np.asarray(compiled), expected)


# =============================================================================================
# Memory: no [n, n] intermediate in any derivative program
# =============================================================================================


def _avals(jaxpr):
    """Every abstract value in ``jaxpr`` and the programs nested in its equations."""
    jaxpr = jaxpr.jaxpr if isinstance(jaxpr, core.ClosedJaxpr) else jaxpr
    for v in list(jaxpr.invars) + list(jaxpr.constvars):
        yield v.aval
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            yield v.aval
        stack = list(eqn.params.values())
        while stack:
            value = stack.pop()
            if isinstance(value, (core.Jaxpr, core.ClosedJaxpr)):
                yield from _avals(value)
            elif isinstance(value, (tuple, list)):
                stack.extend(value)
            elif isinstance(value, dict):
                stack.extend(value.values())


N = 100_000
LINEAR_MEMORY_CASES = {
    "grad cummax": lambda: functrans.grad(lambda x: lax.cummax(x).sum()),
    "grad cummin reverse": lambda: functrans.grad(lambda x: lax.cummin(x, reverse=True).sum()),
    "grad cumlogsumexp": lambda: functrans.grad(lambda x: lax.cumlogsumexp(x).sum()),
    "jvp cummax": lambda: lambda x: functrans.jvp(lax.cummax, (x,), (x,)),
    "grad top_k": lambda: functrans.grad(lambda x: lax.top_k(x, N)[0].sum()),
    "grad of grad cumlogsumexp": lambda: functrans.grad(
        lambda x: functrans.grad(lambda y: (lax.cumlogsumexp(y) ** 2).sum())(x).sum()),
    "vmap grad cummax": lambda: functrans.vmap(functrans.grad(lambda x: lax.cummax(x).sum())),
    "grad cummax in scan": lambda: functrans.grad(
        lambda x: lax.scan(lambda c, _: (lax.cummax(c) * 0.5, None), x, None, length=2)[0].sum()),
}


@pytest.mark.parametrize("case", sorted(LINEAR_MEMORY_CASES))
def test_derivative_programs_have_no_quadratic_intermediates(case):
    x = jnp.zeros((2, N) if case.startswith("vmap") else (N,), jnp.float32)
    jaxpr = functrans.make_jaxpr(LINEAR_MEMORY_CASES[case]())(x)
    sizes = [math.prod(a.shape) for a in _avals(jaxpr) if hasattr(a, "shape")]
    assert max(sizes) <= 4 * N, f"{case}: an intermediate of {max(sizes)} elements (n = {N})"
