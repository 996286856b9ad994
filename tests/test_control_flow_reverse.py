"""Reverse mode through staged ``while_loop``s, and dead-code elimination inside control flow.

When the primal loop is staged (``jit(grad(f))``, ``grad(jit(f))``, ``make_jaxpr(grad(f))``)
its trip count is unknown while differentiating; the backward loop then recomputes each
step's primal carry. Gradients are compared with closed forms, with finite differences in
float64, and with the eager path (which knows the trip count and stores residuals).
"""
from __future__ import annotations

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import core, lax
from functrans.interpreters import partial_eval as pe
from loop_programs import eqns_named, newton_sqrt

grad, jit, vmap = functrans.grad, functrans.jit, functrans.vmap



def close(a, b, rtol=1e-9, atol=1e-12):
    if isinstance(b, list) and all(isinstance(v, float) for v in b):
        b = np.asarray(b)   # a list of numbers compares with one array
    a_leaves = functrans.tree_util.tree_leaves(a)
    b_leaves = functrans.tree_util.tree_leaves(b)
    assert len(a_leaves) == len(b_leaves)
    for x, y in zip(a_leaves, b_leaves):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def central_difference(f, x, eps=1e-6):
    """Gradient of the scalar function ``f`` at the float64 array ``x``."""
    x = np.asarray(x, np.float64)
    g = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[k] = eps
        g[k] = (float(f(x + e)) - float(f(x - e))) / (2 * eps)
    return g


def vector_loop(w, v):
    """A loop whose trip count depends on the data, with a vector carry and the parameter
    ``w`` closed over by the body."""
    def cond_fun(carry):
        _, v, _ = carry
        return lax.lt(jnp.sum(v * v), 50.0)

    def body_fun(carry):
        i, v, s = carry
        v = lax.sin(v) * w + v * 1.3
        return i + 1, v, s + jnp.sum(v) * w[0]

    _, v, s = lax.while_loop(cond_fun, body_fun, (0, v, 0.0))
    return s + jnp.sum(v ** 2)


# =============================================================================================
# Reverse mode through staged while loops
# =============================================================================================


@pytest.mark.parametrize("x", [0.3, 2.0, 9.0])
def test_newton_sqrt_gradient_under_jit(x64, x):
    want = 1.0 / (2.0 * np.sqrt(x))
    close(jit(grad(newton_sqrt))(np.float64(x)), want)
    close(grad(jit(newton_sqrt))(np.float64(x)), want)
    close(functrans.vjp(jit(newton_sqrt), np.float64(x))[1](np.float64(2.0))[0], 2 * want)


def test_vector_carry_and_closed_over_parameter(x64):
    w, v = np.array([0.7, 1.1, 0.9]), np.array([0.3, -0.2, 0.5])
    want_w = central_difference(lambda w_: vector_loop(w_, v), w)
    want_v = central_difference(lambda v_: vector_loop(w, v_), v)
    for fun in (jit(grad(vector_loop, (0, 1))), grad(jit(vector_loop), (0, 1)),
                grad(vector_loop, (0, 1))):
        gw, gv = fun(w, v)
        close(gw, want_w, rtol=1e-6)
        close(gv, want_v, rtol=1e-6)
    # the staged (recomputing) and eager (residual-storing) paths agree to rounding
    close(jit(grad(vector_loop, (0, 1)))(w, v), grad(vector_loop, (0, 1))(w, v), rtol=1e-12)


def test_batched_predicate_under_jit_of_grad(x64):
    xs = np.array([0.5, 2.0, 9.0, 1e4])   # different trip counts per example
    want = 1.0 / (2.0 * np.sqrt(xs))
    close(vmap(jit(grad(newton_sqrt)))(xs), want)
    close(jit(vmap(grad(newton_sqrt)))(xs), want)
    ws = np.array([[0.7, 1.1, 0.9], [0.2, 0.4, 1.5]])
    v = np.array([0.3, -0.2, 0.5])
    got = vmap(jit(grad(vector_loop)), (0, None))(ws, v)
    close(got, np.stack([grad(vector_loop)(w, v) for w in ws]), rtol=1e-12)


def test_zero_trip_count_and_traced_bounds(x64):
    f = lambda x: lax.while_loop(lambda c: c < 100.0, lambda c: c * 2.0, x)  # noqa: E731
    close(jit(grad(f))(300.0), 1.0)
    close(vmap(jit(grad(f)))(np.array([3.0, 30.0, 300.0])), [64.0, 4.0, 1.0])

    def g(x, n):   # traced bounds: a while loop whose body reads its counter
        return lax.fori_loop(0, n, lambda i, c: lax.sin(c) * (i + 1.0), x)

    want = central_difference(lambda x: g(x, 3), np.float64(0.4))
    close(jit(grad(g))(0.4, 3), want, rtol=1e-8)
    close(grad(jit(g))(0.4, 0), 1.0)


def test_nested_loops_under_jit_of_grad(x64):
    def scan_in_while(a, x):
        def body(c):
            i, y = c
            y, _ = lax.scan(lambda h, t: (h * 1.2 + 0.5 * lax.sin(h * a) + 0.1 * t + 0.1, None),
                            y, jnp.arange(3.0))
            return i + 1, y
        return lax.while_loop(lambda c: lax.lt(c[1], 5.0), body, (0, x))[1]

    def while_in_scan(x):
        def step(c, t):
            y = lax.while_loop(lambda y: y < t, lambda y: y * 1.5 + 0.1, c)
            return y * 0.5, y
        c, ys = lax.scan(step, x, jnp.array([1.0, 3.0, 10.0]))
        return c + jnp.sum(ys)

    args = (np.float64(0.8), np.float64(0.3))
    want = [central_difference(lambda a: scan_in_while(a, args[1]), args[0]),
            central_difference(lambda x: scan_in_while(args[0], x), args[1])]
    close(jit(grad(scan_in_while, (0, 1)))(*args), want, rtol=1e-6)
    close(grad(jit(scan_in_while), (0, 1))(*args), want, rtol=1e-6)
    want = central_difference(while_in_scan, np.float64(0.3))
    close(jit(grad(while_in_scan))(0.3), want, rtol=1e-6)
    close(grad(jit(while_in_scan))(0.3), want, rtol=1e-6)


def test_second_derivatives_under_jit(x64):
    want = -0.25 * 2.0 ** -1.5
    close(jit(grad(grad(newton_sqrt)))(np.float64(2.0)), want, rtol=1e-8)
    close(grad(jit(grad(newton_sqrt)))(np.float64(2.0)), want, rtol=1e-8)
    close(jit(functrans.hessian(newton_sqrt))(np.float64(2.0)), want, rtol=1e-8)


def test_staged_gradient_is_loops_not_unrolled(x64):
    closed = functrans.make_jaxpr(grad(newton_sqrt))(np.float64(2.0))
    core.check_jaxpr(closed)
    # forward loop, trip count, backward loop and the recomputing loop inside it
    assert len(eqns_named(closed.jaxpr, "while")) >= 3
    assert not eqns_named(closed.jaxpr, "scan")
    # the same program whatever the trip count: one copy of the body's division per loop
    assert len(eqns_named(closed.jaxpr, "div")) <= 6
    text = str(functrans.make_jaxpr(grad(newton_sqrt))(np.float64(1e6)))
    assert text.count("div") == str(closed).count("div")
    core.check_jaxpr(functrans.make_jaxpr(grad(vector_loop, (0, 1)))(np.ones(3), np.ones(3)))


def test_forward_mode_and_eager_paths_unchanged(x64):
    x = np.float64(2.0)
    want = 1.0 / (2.0 * np.sqrt(2.0))
    close(functrans.jvp(jit(newton_sqrt), (x,), (np.float64(1.0),))[1], want)
    close(functrans.linearize(jit(newton_sqrt), x)[1](np.float64(1.0)), want)
    close(jit(lambda x: functrans.jvp(newton_sqrt, (x,), (1.0,))[1])(x), want)
    # eager grad stores per-step residuals in a scan: no while loop in its linear part
    _, f_lin = functrans.linearize(newton_sqrt, x)
    close(f_lin(np.float64(1.0)), want)
    close(grad(newton_sqrt)(x), want)


# =============================================================================================
# Dead-code elimination inside control flow
# =============================================================================================


def scan_loss(w, xs):
    c, ys = lax.scan(lambda c, x: (lax.sin(c * w) + x, c * x), 0.5, xs)
    return c + jnp.sum(ys)


def _prune(closed, used_outputs):
    jaxpr, used_inputs = pe.dce_jaxpr(closed.jaxpr, used_outputs)
    const_of = {id(v): c for v, c in zip(closed.jaxpr.constvars, closed.consts)}
    pruned = core.ClosedJaxpr(jaxpr, [const_of[id(v)] for v in jaxpr.constvars])
    core.check_jaxpr(pruned)
    return pruned, used_inputs


def test_dce_drops_unused_outputs_of_the_scans_of_grad():
    w, xs = np.float32(0.7), np.arange(4.0, dtype=np.float32)
    closed = functrans.make_jaxpr(grad(scan_loss, (0, 1)))(w, xs)
    before = [len(e.outvars) for e in eqns_named(closed.jaxpr, "scan")]
    pruned, used_inputs = _prune(closed, [True, False])     # keep d/dw only
    after = [len(e.outvars) for e in eqns_named(pruned.jaxpr, "scan")]
    assert len(after) == len(before) and sum(after) < sum(before)
    # the backward scan no longer stacks the cotangent of xs
    backward = eqns_named(pruned.jaxpr, "scan")[-1]
    assert not any(v.aval.shape == (4,) for v in backward.outvars)
    got = core.eval_jaxpr(pruned.jaxpr, pruned.consts,
                          *[a for a, u in zip((w, xs), used_inputs) if u])
    close(got, [grad(scan_loss)(w, xs)], rtol=1e-6)


def test_dce_scan_keeps_carries_that_feed_used_values():
    def f(x, xs):
        # a reads b; b reads only itself; d is independent and unused
        (a, b, d), ys = lax.scan(lambda c, t: ((c[0] + c[1] * t, c[1] * 0.5, c[2] + 1.0),
                                               (c[0] * t, c[2])), (x, x, x), xs)
        return a, b, d, ys[0], ys[1]

    args = (np.float32(1.5), np.arange(3.0, dtype=np.float32))
    closed = functrans.make_jaxpr(f)(*args)
    full = f(*args)
    for used, carries, ys in [([True, False, False, False, False], 2, 0),
                              ([False, True, False, False, False], 1, 0),
                              ([False, False, False, True, False], 2, 1),
                              ([False, False, False, False, True], 1, 1)]:
        pruned, used_inputs = _prune(closed, used)
        (scan_eqn,) = eqns_named(pruned.jaxpr, "scan")
        assert scan_eqn.params["num_carry"] == carries
        assert len(scan_eqn.outvars) == carries + ys
        got = core.eval_jaxpr(pruned.jaxpr, pruned.consts,
                              *[a for a, u in zip(args, used_inputs) if u])
        close(got, [r for r, u in zip(full, used) if u], rtol=1e-6)


def test_dce_while_and_cond():
    def f(x, a, b):
        _, y, z = lax.while_loop(lambda c: c[0] < 5,
                                 lambda c: (c[0] + 1, c[1] * a, c[2] + lax.sin(b)), (0, x, x))
        u, v = lax.cond(x > 0, lambda p, q: (p * 2, lax.cos(q)), lambda p, q: (p - 1, q), a, b)
        return y, z, u, v

    args = tuple(np.float32(v) for v in (1.0, 2.0, 3.0))
    closed = functrans.make_jaxpr(f)(*args)
    pruned, used_inputs = _prune(closed, [True, False, True, False])
    assert used_inputs == [True, True, False]           # b fed only unused results
    (loop,) = eqns_named(pruned.jaxpr, "while")
    assert len(loop.outvars) == 2                       # the counter (read by cond) and y
    assert not eqns_named(pruned.jaxpr, "sin") and not eqns_named(pruned.jaxpr, "cos")
    (branch,) = eqns_named(pruned.jaxpr, "cond")
    assert len(branch.outvars) == 1 and len(branch.invars) == 2
    got = core.eval_jaxpr(pruned.jaxpr, pruned.consts, *args[:2])
    full = f(*args)
    close(got, [full[0], full[2]], rtol=1e-6)


def test_compiled_programs_with_unused_loop_results_agree():
    def f(x, xs):
        (a, _), ys = lax.scan(lambda c, t: ((c[0] * 0.9 + t, c[1] + lax.exp(t)), lax.sin(t)),
                              (x, x), xs)
        i, y, _ = lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2.0, c[2] - 1.0),
                                 (0, a, x))
        return y + lax.cond(y > 0, lambda v: (v, v * 2), lambda v: (v, v - 1), a)[0]

    args = (np.float32(0.5), np.arange(4.0, dtype=np.float32))
    close(jit(f)(*args), f(*args), rtol=1e-6)
    close(jit(grad(f))(*args), grad(f)(*args), rtol=1e-5)
