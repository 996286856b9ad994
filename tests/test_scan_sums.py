"""Iteration sums taken out of scans (backends/compiler/scan_sums.py): which carries move,
what the rewritten program computes, and the compiled results against the reference."""
import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import lax
from functrans.backends.compiler import fusion, scan_sums
from functrans.primitives import control_flow, linalg

RNG = np.random.default_rng(21)


def _scans(closed):
    return [e for e in closed.jaxpr.eqns if e.primitive is control_flow.scan_p]


def _hoisted(f, *args):
    closed = fusion.flat_closed(functrans.make_jaxpr(f)(*args))
    return closed, scan_sums.hoist_closed(closed)


def _compare(f, *args, tol=2e-5):
    ours = functrans.tree_util.tree_leaves(functrans.jit(f, backend="llvm")(*args))
    ref = functrans.tree_util.tree_leaves(functrans.jit(f, backend="reference")(*args))
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max([1.0, *np.abs(b).ravel()]))


def rnn_loss(params, xs):
    def step(h, x):
        return jnp.tanh(x @ params["wx"] + h @ params["wh"] + params["b"]), None

    h, _ = lax.scan(step, jnp.zeros((xs.shape[1], params["wh"].shape[0])), xs)
    return jnp.sum(h * h)


def rnn_data(seq=7, batch=3, n_in=4, hidden=5):
    params = {"wx": RNG.normal(size=(n_in, hidden)).astype(np.float32) / 2,
              "wh": RNG.normal(size=(hidden, hidden)).astype(np.float32) / 3,
              "b": RNG.normal(size=hidden).astype(np.float32)}
    return params, RNG.normal(size=(seq, batch, n_in)).astype(np.float32)


def test_the_weight_gradients_of_an_rnn_leave_the_loop():
    params, xs = rnn_data()
    before, after = _hoisted(functrans.grad(rnn_loss), params, xs)
    backward_before, backward_after = _scans(before)[-1], _scans(after)[-1]
    # dwx, dwh and db were carries; only the recurrence's own carry is left
    assert backward_before.params["num_carry"] == 4
    assert backward_after.params["num_carry"] == 1
    body = backward_after.params["jaxpr"].jaxpr
    assert sum(e.primitive is linalg.dot_general_p for e in body.eqns) == 1
    after_loop = after.jaxpr.eqns[after.jaxpr.eqns.index(backward_after) + 1:]
    products = [e for e in after_loop if e.primitive is linalg.dot_general_p]
    assert len(products) == 2
    for e in products:  # the iteration axis and the batch axis are both contracted
        (lc, rc), _ = e.params["dimension_numbers"]
        assert lc == rc == (0, 1)
    _compare(functrans.grad(rnn_loss), params, xs)


def test_a_weight_used_twice_sums_two_products():
    """``x @ w + h @ w``: the gradient carry adds two products per iteration."""
    w = RNG.normal(size=(3, 3)).astype(np.float32) / 2
    xs = RNG.normal(size=(5, 2, 3)).astype(np.float32)

    def loss(w, xs):
        step = lambda h, x: (jnp.tanh(x @ w + h @ w), None)  # noqa: E731
        return lax.scan(step, jnp.zeros((2, 3)), xs)[0].sum()

    _, after = _hoisted(functrans.grad(loss), w, xs)
    assert [e.params["num_carry"] for e in _scans(after)] == [1, 1]
    _compare(functrans.grad(loss), w, xs)


@pytest.mark.parametrize("reverse", [False, True])
def test_sums_of_products_and_reductions(reverse):
    """Carries summing a product of a scanned input and a computed value, a product with
    batch dimensions, a reduce_sum of a stacked value; one carry (c) read by the body
    stays."""
    xs = RNG.normal(size=(6, 2, 3, 4)).astype(np.float32)
    ys = RNG.normal(size=(6, 2, 4, 5)).astype(np.float32)

    def f(xs, ys):
        def body(carry, inputs):
            p, q, r, c = carry
            x, y = inputs
            z = jnp.sin(x) * c
            p = p + jnp.einsum("bij,bjk->bik", z, y)
            q = q + lax.dot_general(x, z, (((0, 1), (0, 1)), ((), ())))
            r = r + jnp.sum(z, axis=(0, 2))
            return (p, q, r, c * 0.9 + 0.1), jnp.sum(z)

        init = (jnp.zeros((2, 3, 5)), jnp.zeros((4, 4)), jnp.ones(3), jnp.float32(1.5))
        return lax.scan(body, init, (xs, ys), reverse=reverse)

    before, after = _hoisted(f, xs, ys)
    assert _scans(before)[0].params["num_carry"] == 4
    assert _scans(after)[0].params["num_carry"] == 1
    _compare(f, xs, ys)


def test_what_stays_in_the_loop():
    """A loop-invariant operand, a carry the body also reads, a term used twice, and a
    sum too large to stack keep their carries."""
    w = RNG.normal(size=(4, 4)).astype(np.float32)
    xs = RNG.normal(size=(5, 4, 4)).astype(np.float32)

    def f(w, xs):
        def body(carry, x):
            a, b, c = carry
            t = x @ x
            a = a + w @ x          # w is loop-invariant
            b = b + t              # not a reduction
            c = c + jnp.sum(t) + jnp.sum(c)  # c is read
            return (a, b, c), t

        return lax.scan(body, (jnp.zeros((4, 4)), jnp.zeros((4, 4)), jnp.float32(0)), xs)

    before, after = _hoisted(f, w, xs)
    assert _scans(after)[0].params["num_carry"] == 3
    _compare(f, w, xs)


def test_nothing_moves_beyond_the_memory_bound(monkeypatch):
    params, xs = rnn_data()
    monkeypatch.setattr(scan_sums, "MAX_STACKED_BYTES", 16)
    closed = fusion.flat_closed(functrans.make_jaxpr(functrans.grad(rnn_loss))(params, xs))
    assert scan_sums.hoist_closed(closed) is closed


def test_nested_scans_and_empty_loops():
    xs = RNG.normal(size=(3, 4, 2, 3)).astype(np.float32)

    def f(xs):
        def outer(acc, block):
            def inner(s, x):
                return s + x.T @ jnp.cos(x), None
            s, _ = lax.scan(inner, jnp.zeros((3, 3)), block)
            return acc + s, jnp.trace(s)
        return lax.scan(outer, jnp.zeros((3, 3)), xs)

    _, after = _hoisted(f, xs)
    outer = _scans(after)[0]
    assert outer.params["num_carry"] == 1
    assert _scans(outer.params["jaxpr"])[0].params["num_carry"] == 0
    _compare(f, xs)
    _compare(f, xs[:0])
    _compare(functrans.grad(rnn_loss), *rnn_data(seq=0))


def test_rnn_gradients_match_finite_differences():
    params, xs = rnn_data(seq=4, batch=2, n_in=3, hidden=3)
    params64 = {k: v.astype(np.float64) for k, v in params.items()}
    with functrans.enable_x64():
        grads = functrans.jit(functrans.grad(rnn_loss))(params64, xs.astype(np.float64))
        eps = 1e-6
        for name in params64:
            flat = params64[name].reshape(-1)
            for i in range(flat.size):
                up, down = flat.copy(), flat.copy()
                up[i] += eps
                down[i] -= eps
                shape = params64[name].shape
                f_up = rnn_loss({**params64, name: up.reshape(shape)}, xs.astype(np.float64))
                f_down = rnn_loss({**params64, name: down.reshape(shape)}, xs.astype(np.float64))
                numeric = (float(f_up) - float(f_down)) / (2 * eps)
                np.testing.assert_allclose(np.asarray(grads[name]).reshape(-1)[i], numeric,
                                           rtol=1e-5, atol=1e-7)


def test_an_operand_that_is_another_carry_is_stacked_as_it_enters():
    """``c + h^T x`` with ``h`` a carry: the value of ``h`` at the start of each iteration
    is stacked (the body outputs its own input)."""
    w = RNG.normal(size=(3, 3)).astype(np.float32)
    xs = RNG.normal(size=(6, 2, 3)).astype(np.float32)

    def f(w, xs):
        def body(carry, x):
            h, c = carry
            return (jnp.tanh(h @ w + x), c + lax.dot_general(h, x, (((0,), (0,)), ((), ())))), None
        return lax.scan(body, (jnp.ones((2, 3)), jnp.zeros((3, 3))), xs, reverse=True)[0]

    _, after = _hoisted(f, w, xs)
    scan = _scans(after)[0]
    assert scan.params["num_carry"] == 1
    body = scan.params["jaxpr"].jaxpr
    assert body.outvars[-1] is body.invars[scan.params["num_consts"]]
    _compare(f, w, xs)


def test_only_the_operands_of_moved_sums_are_stacked():
    """``a`` adds a product and a reduce_sum of a value no product reads, so it stays in the
    loop; ``b`` moves, and only its own computed operand is stacked."""
    xs = RNG.normal(size=(5, 2, 3)).astype(np.float32)

    def f(xs):
        def body(carry, x):
            a, b = carry
            z, u = jnp.sin(x), jnp.cos(x)
            w = jnp.exp(x)[:, :, None] * jnp.ones((1, 1, 3))
            a = a + x.T @ z + jnp.sum(w, axis=0)
            b = b + lax.dot_general(x, u, (((0,), (0,)), ((), ())))
            return (a, b), None
        return lax.scan(body, (jnp.zeros((3, 3)), jnp.zeros((3, 3))), xs)[0]

    before, after = _hoisted(f, xs)
    scan = _scans(after)[0]
    assert scan.params["num_carry"] == 1
    assert len(scan.outvars) == len(_scans(before)[0].outvars)  # b out, one stacked operand
    _compare(f, xs)
