"""Autodiff and vmap on an MLP: gradients vs a hand-derived NumPy backward pass, the cost of
reverse mode counted on the IR, and per-example gradients that are batched matmuls."""
from __future__ import annotations

import numpy as np
import pytest

import functrans
from functrans import core, lax


def dense(x, w, b):
    y = lax.dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())))
    return y + lax.broadcast_in_dim(b, y.shape, (y.ndim - 1,))


def mlp_loss(params, x, y):
    h = x
    for i, (w, b) in enumerate(params):
        h = dense(h, w, b)
        if i < len(params) - 1:
            h = lax.max(h, lax.full(h.shape, 0.0, h.dtype))
    err = h - y
    return lax.reduce_sum(err * err, tuple(range(err.ndim))) / np.float32(err.size)


def numpy_grad(params, x, y):
    """The backward pass of mlp_loss, derived by hand."""
    acts, pre = [x], []
    h = x
    for i, (w, b) in enumerate(params):
        z = h @ w + b
        pre.append(z)
        h = np.maximum(z, 0) if i < len(params) - 1 else z
        acts.append(h)
    g = 2 * (h - y) / h.size
    grads = []
    for i in reversed(range(len(params))):
        w, _ = params[i]
        if i < len(params) - 1:
            g = g * (pre[i] > 0)
        grads.append((acts[i].T @ g, g.sum(0)))
        g = g @ w.T
    return list(reversed(grads))


def make_params(rng, sizes):
    return [(rng.standard_normal((m, n)).astype(np.float32) / np.sqrt(m),
             rng.standard_normal(n).astype(np.float32) * 0.1) for m, n in zip(sizes[:-1], sizes[1:])]


def test_mlp_grad_matches_hand_derived_numpy():
    rng = np.random.default_rng(0)
    params = make_params(rng, [5, 8, 6, 3])
    x = rng.standard_normal((7, 5)).astype(np.float32)
    y = rng.standard_normal((7, 3)).astype(np.float32)
    grads = functrans.grad(mlp_loss)(params, x, y)
    expected = numpy_grad(params, x, y)
    for (gw, gb), (ew, eb) in zip(grads, expected):
        np.testing.assert_allclose(gw, ew, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(gb, eb, rtol=1e-4, atol=1e-6)
    jitted = functrans.jit(functrans.grad(mlp_loss))(params, x, y)
    for (gw, gb), (jw, jb) in zip(grads, jitted):
        np.testing.assert_allclose(jw, gw, rtol=1e-5, atol=1e-7)


def _dot_flops(jaxpr: core.Jaxpr) -> int:
    total = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (lc, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval
            contracted = int(np.prod([lhs.shape[d] for d in lc]))
            total += 2 * eqn.outvars[0].aval.size * contracted
        for p in eqn.params.values():
            if isinstance(p, core.ClosedJaxpr):
                total += _dot_flops(p.jaxpr)
    return total


def test_reverse_mode_costs_a_small_multiple_of_forward():
    rng = np.random.default_rng(1)
    params = make_params(rng, [784, 512, 512, 10])
    x = rng.standard_normal((128, 784)).astype(np.float32)
    y = rng.standard_normal((128, 10)).astype(np.float32)
    forward = _dot_flops(functrans.make_jaxpr(mlp_loss)(params, x, y).jaxpr)
    backward = _dot_flops(functrans.make_jaxpr(functrans.value_and_grad(mlp_loss))(params, x, y).jaxpr)
    assert forward > 0
    # forward + backward: 3 forward dots + 5 backward dots (no gradient for the input x)
    assert backward <= 3 * forward, (backward, forward)
    assert backward >= 2 * forward


def test_per_example_gradients_are_batched_matmuls():
    rng = np.random.default_rng(2)
    params = make_params(rng, [4, 6, 2])
    xs = rng.standard_normal((5, 1, 4)).astype(np.float32)
    ys = rng.standard_normal((5, 1, 2)).astype(np.float32)
    per_example = functrans.vmap(functrans.grad(mlp_loss), in_axes=(None, 0, 0))
    grads = per_example(params, xs, ys)
    for i in range(5):
        single = functrans.grad(mlp_loss)(params, xs[i], ys[i])
        for (gw, gb), (sw, sb) in zip(grads, single):
            np.testing.assert_allclose(gw[i], sw, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(gb[i], sb, rtol=1e-5, atol=1e-6)
    jaxpr = functrans.make_jaxpr(per_example)(params, xs, ys).jaxpr
    dots = [e for e in jaxpr.eqns if e.primitive.name == "dot_general"]
    assert dots, "expected dot_general equations"
    batched = [e for e in dots if e.params["dimension_numbers"][1][0]]
    assert batched, "per-example gradients must use dot_general with batch dimensions"
    assert not any(e.primitive.name in ("while", "scan") for e in jaxpr.eqns)
    jitted = functrans.jit(per_example)(params, xs, ys)
    np.testing.assert_allclose(jitted[0][0], grads[0][0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("order", [1, 2])
def test_mlp_numerical_gradients(order):
    from functrans.test_util import check_grads, x64
    with x64():
        rng = np.random.default_rng(3)
        params = [(w.astype(np.float64), b.astype(np.float64)) for w, b in make_params(rng, [3, 4, 2])]
        x = rng.standard_normal((2, 3))
        y = rng.standard_normal((2, 2))
        check_grads(lambda p: mlp_loss(p, x, y), (params,), order=order, modes=("rev",),
                    atol=1e-4, rtol=1e-4)
