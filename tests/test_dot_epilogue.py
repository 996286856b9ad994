"""Dot epilogues (fusion.fuse_dot_epilogues): ``x ± alpha * dot`` folded into one
accumulating BLAS call must give the reference's numbers, and only the forms it can express
exactly may be folded."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

pytest.importorskip("llvmlite")

import functrans  # noqa: E402
import functrans.numpy as jnp  # noqa: E402
from functrans.backends.compiler import fusion  # noqa: E402
from functrans.test_util import x64  # noqa: E402

rng = np.random.default_rng(3)


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


A, B, C, BIAS = _f32(6, 5), _f32(5, 4), _f32(6, 4), _f32(4)

# name: (function, arguments, folded?, alpha of the folded product)
CASES = {
    "sgd_update": (lambda c, a, b: c - 0.1 * (a @ b), (C, A, B), True, np.float32(-0.1)),
    "scaled_only": (lambda a, b: (a @ b) * 2.0, (A, B), True, 2.0),
    "negated_plus": (lambda c, a, b: -(a @ b) + c, (C, A, B), True, -1.0),
    "plus_scaled_right": (lambda c, a, b: c + (a @ b) * 3.0, (C, A, B), True, 3.0),
    "bias": (lambda a, b, bias: a @ b + bias, (A, B, BIAS), True, 1.0),
    "batched": (lambda c, a, b: c + jnp.einsum("bij,bjk->bik", a, b),
                (_f32(3, 6, 4), _f32(3, 6, 5), _f32(3, 5, 4)), True, 1.0),
    "transposed_operands": (lambda c, a, b: c - a.T @ b.T, (_f32(5, 3), _f32(4, 5), _f32(3, 4)),
                            True, -1.0),
    "empty_contraction": (lambda c, a, b: c + a @ b, (C, _f32(6, 0), _f32(0, 4)), True, 1.0),
    "large_split": (lambda c, a, b: c - 0.5 * (a @ b),
                    (_f32(256, 640), _f32(256, 300), _f32(300, 640)), True, -0.5),
    "float64": (lambda c, a, b: c - 0.25 * (a @ b),
                (C.astype(np.float64), A.astype(np.float64), B.astype(np.float64)), True, -0.25),
    # two products read by one loop: the first writes the output, the second adds to it
    "two_products_one_sum": (lambda a, b: a.T @ b + a @ b,
                             (np.arange(9, dtype=np.float32).reshape(3, 3),
                              np.ones((3, 2), np.float32)), True, 1.0),
    "two_scaled_products": (lambda c, a, b, d: c - 0.5 * (a @ b) + 2.0 * (a @ d),
                            (C, A, B, _f32(5, 4)), True, 2.0),
    # not foldable
    "product_minus": (lambda c, a, b: (a @ b) - c, (C, A, B), False, None),
    "transposed_result": (lambda c, a, b: (a @ b).T + c, (C.T.copy(), A, B), False, None),
    "read_twice": (lambda c, a, b: (lambda d: (d + c, d * 2.0))(a @ b), (C, A, B), False, None),
    "nonlinear": (lambda a, b: jnp.tanh(a @ b), (A, B), False, None),
    "integer": (lambda c, a, b: c + a @ b,
                (np.ones((6, 4), np.int32), np.ones((6, 5), np.int32), np.ones((5, 4), np.int32)),
                False, None),
}


def _dots(fun, args):
    program = functrans.jit(fun).lower(*args).compile()._executable.program
    return [s for s in program.steps if isinstance(s, fusion.DotKernel)]


@pytest.mark.parametrize("name", list(CASES))
def test_dot_epilogues(name):
    fun, args, folded, alpha = CASES[name]
    wide = any(np.asarray(a).dtype == np.float64 for a in args)
    with x64() if wide else contextlib.nullcontext():
        _check_epilogue(name, fun, args, folded, alpha)


def _check_epilogue(name, fun, args, folded, alpha):
    dots = _dots(fun, args)
    assert dots
    if folded:
        assert any(d.alpha == pytest.approx(alpha) and (d.accumulate or name == "scaled_only")
                   for d in dots), [d.describe() for d in dots]
    else:
        assert all(d.alpha == 1.0 and not d.accumulate for d in dots), \
            [d.describe() for d in dots]
    got = functrans.jit(fun)(*args)
    expected = functrans.jit(fun, backend="reference")(*args)
    for g, e in zip(functrans.tree_util.tree_leaves(got), functrans.tree_util.tree_leaves(expected)):
        assert np.asarray(g).dtype == np.asarray(e).dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-5, atol=1e-4)


def test_a_loop_reading_two_products_keeps_both():
    """``a.T @ b + a @ b``: both products fold, one per sweep, and neither is lost (once,
    folding the second overwrote the first's rewrite, leaving its buffer unwritten)."""
    a = np.arange(9, dtype=np.float32).reshape(3, 3)
    b = np.ones((3, 2), np.float32)
    got = functrans.jit(lambda a, b: a.T @ b + a @ b)(a, b)
    np.testing.assert_array_equal(np.asarray(got), a.T @ b + a @ b)
    dots = _dots(lambda a, b: a.T @ b + a @ b, (a, b))
    assert len(dots) == 2 and [d.accumulate for d in dots] == [False, True]
    assert dots[0].out is dots[1].out


def test_jit_of_grad_of_a_gram_matrix_loss():
    """The gradient of ``sum((x @ x.T) ** 2)`` sums two products of the same operands."""
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    f = lambda x: jnp.sum(jnp.einsum("ij,kj->ik", x, x) ** 2)  # noqa: E731
    expected = 4 * (x @ x.T) @ x
    np.testing.assert_allclose(np.asarray(functrans.jit(functrans.grad(f))(x)), expected,
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(functrans.grad(f)(x)), expected, rtol=1e-5,
                               atol=1e-5)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_non_finite_values_pass_through_the_accumulator():
    c = C.copy()
    c[0, 0], c[1, 1], c[2, 2] = np.nan, np.inf, -np.inf
    a = A.copy()
    a[3, :] = np.inf
    fun = lambda c, a, b: c - 0.1 * (a @ b)  # noqa: E731
    assert _dots(fun, (c, a, B))[0].accumulate
    got = np.asarray(functrans.jit(fun)(c, a, B))
    expected = np.asarray(functrans.jit(fun, backend="reference")(c, a, B))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(expected)],
                                  expected[~finite & ~np.isnan(expected)])
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-5, atol=1e-5)


def _data_pointer(a) -> int:
    return a._value.__array_interface__["data"][0]


def test_a_donated_parameter_holds_the_accumulated_update():
    """``w - lr * x.T @ g`` with ``w`` donated: BLAS adds the product into w's own buffer."""
    x, g = _f32(32, 48), _f32(32, 24)
    step = functrans.jit(lambda w, x, g: w - 0.1 * (x.T @ g), donate_argnums=0)
    plain = functrans.jit(lambda w, x, g: w - 0.1 * (x.T @ g))
    w = functrans.jit(lambda v: v + 0.0)(_f32(48, 24))  # an exclusively owned buffer
    expected = np.asarray(w).copy()
    for _ in range(3):
        address = _data_pointer(w)
        expected = np.asarray(plain(expected, x, g))
        new = step(w, x, g)
        assert w.is_deleted() and _data_pointer(new) == address
        np.testing.assert_allclose(np.asarray(new), expected, rtol=1e-5, atol=1e-5)
        w = new


def test_loop_bodies_accumulate_into_their_carries():
    """A scan whose carry accumulates products (the gradient sums of backpropagation through
    time) folds them into accumulating BLAS calls inside the compiled body too."""
    from functrans.backends.llvm import control_flow

    xs, w = _f32(7, 8, 5), _f32(5, 6) * 0.3

    def grads(w, xs):
        def step(carry, x):
            acc, h = carry
            g = jnp.tanh(x @ w)                 # [8, 6]
            return (acc - 0.5 * (x.T @ g), h + g.sum(0)), g.mean()
        (acc, h), means = functrans.lax.scan(step, (jnp.zeros_like(w), jnp.zeros(6)), xs)
        return acc, h, means

    program = functrans.jit(grads).lower(w, xs).compile()._executable.program
    scans = [s for s in program.steps if isinstance(s, control_flow.ControlStep)]
    assert scans
    body_dots = [s for s in scans[0].bodies[0].program.steps if isinstance(s, fusion.DotKernel)]
    assert any(d.accumulate and d.alpha == pytest.approx(-0.5) for d in body_dots), \
        [d.describe() for d in body_dots]
    got = functrans.jit(grads)(w, xs)
    expected = functrans.jit(grads, backend="reference")(w, xs)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-5, atol=1e-5)
    # and reverse mode through a scan (its transposed body accumulates parameter gradients)
    loss = lambda w, xs: sum(jnp.sum(t ** 2) for t in grads(w, xs))  # noqa: E731
    gw = functrans.jit(functrans.grad(loss))(w, xs)
    gw_ref = functrans.jit(functrans.grad(loss), backend="reference")(w, xs)
    np.testing.assert_allclose(np.asarray(gw), np.asarray(gw_ref), rtol=1e-4, atol=1e-4)
