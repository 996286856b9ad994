"""Structured control flow: cond/switch, while_loop, fori_loop, scan, map.

Every construct is compared with a plain Python loop; derivatives with finite differences
(float64); vmap with a loop over examples; jit against eager; and the staged programs are
checked to hold one loop body, not an unrolled copy per step.
"""
from __future__ import annotations

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import lax
from functrans.test_util import check_grads
from loop_programs import eqns_named, newton_sqrt



def arr(x, dtype=np.float32):
    return jnp.array(np.asarray(x, dtype=dtype))


def close(a, b, rtol=1e-5, atol=1e-6):
    """``a`` (a result pytree) equals ``b`` leaf by leaf; a lone array compares with any
    array-like ``b`` (a list of numbers included)."""
    if isinstance(a, (tuple, list, dict)):
        a_leaves = functrans.tree_util.tree_leaves(a)
        b_leaves = functrans.tree_util.tree_leaves(b)
        assert len(a_leaves) == len(b_leaves)
    else:
        a_leaves, b_leaves = [a], [np.asarray([np.asarray(v) for v in b]) if isinstance(b, list) else b]
    for x, y in zip(a_leaves, b_leaves):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


# =============================================================================================
# cond / switch
# =============================================================================================


def test_cond_matches_python():
    def f(p, x):
        return lax.cond(p, lambda v: {"a": lax.sin(v["a"]), "b": v["b"] * 2},
                        lambda v: {"a": lax.cos(v["a"]), "b": v["b"] - 1}, x)

    x = {"a": arr([0.3, 1.2]), "b": arr(3.0)}
    for p in (True, False):
        expected = {"a": np.sin(x["a"]) if p else np.cos(x["a"]),
                    "b": np.float32(6.0) if p else np.float32(2.0)}
        close(f(p, x), expected)
        close(functrans.jit(f)(p, x), expected)
        close(functrans.jit(f)(arr(p, np.bool_), x), expected)


def test_cond_number_predicate_and_closure():
    scale = arr(3.0)
    f = functrans.jit(lambda p, x: lax.cond(p, lambda v: v * scale, lambda v: v, x))
    close(f(arr(2.0), arr(1.5)), 4.5)
    close(f(arr(0.0), arr(1.5)), 1.5)


def test_switch_clamps_index():
    branches = [lambda x: x + 1.0, lambda x: x * 2.0, lambda x: -x]
    x = arr(5.0)
    for i, expected in [(-3, 6.0), (0, 6.0), (1, 10.0), (2, -5.0), (7, -5.0)]:
        close(lax.switch(i, branches, x), expected)
        close(functrans.jit(lambda i, x: lax.switch(i, branches, x))(arr(i, np.int32), x), expected)


def test_cond_branch_type_mismatch_names_both():
    with pytest.raises(TypeError, match=r"false_fun and true_fun.*float32\[2\].*float32\[3\]|float32\[3\].*float32\[2\]"):
        lax.cond(True, lambda x: jnp.zeros(3), lambda x: jnp.zeros(2), arr(1.0))
    with pytest.raises(TypeError, match="pytree structure"):
        lax.cond(True, lambda x: (x, x), lambda x: x, arr(1.0))


def test_cond_without_operands_and_with_python_scalars():
    close(lax.cond(True, lambda: 1.0, lambda: 2.0), 1.0)
    close(functrans.jit(lambda p: lax.cond(p, lambda: 1.0, lambda: 2.0))(False), 2.0)
    out = lax.cond(False, lambda x: x, lambda x: x * 2, 3.0)
    close(out, 6.0)


def test_python_if_on_traced_value_points_to_cond():
    def f(x):
        if lax.gt(x, 0.0):
            return x
        return -x

    with pytest.raises(functrans.ConcretizationTypeError, match="lax.cond"):
        functrans.jit(f)(arr(1.0))


# =============================================================================================
# while_loop / fori_loop
# =============================================================================================


def test_while_loop_matches_python():
    def collatz_steps(n):
        def body(c):
            n, k = c
            n = lax.select(lax.eq(lax.rem(n, 2), 0), lax.div(n, 2), 3 * n + 1)
            return n, k + 1
        return lax.while_loop(lambda c: lax.ne(c[0], 1), body, (n, 0))[1]

    def reference(n):
        k = 0
        while n != 1:
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            k += 1
        return k

    for n in (1, 6, 27):
        assert int(collatz_steps(arr(n, np.int32))) == reference(n)
        assert int(functrans.jit(collatz_steps)(arr(n, np.int32))) == reference(n)


def test_while_loop_carry_type_change_error():
    with pytest.raises(TypeError, match=r"input carry has type .*float32\[\].* output has type .*float32\[2\]"):
        lax.while_loop(lambda x: lax.lt(x, 3.0), lambda x: jnp.zeros(2), arr(0.0))
    with pytest.raises(TypeError, match=r"int32\[\].*float32\[\]"):
        lax.while_loop(lambda x: lax.lt(x, 3), lambda x: arr(1.0), arr(0, np.int32))
    with pytest.raises(TypeError, match="boolean scalar"):
        lax.while_loop(lambda x: x, lambda x: x, arr(0.0))


def test_fori_loop_static_and_traced_bounds():
    def body(i, x):
        return x * 1.5 + i.astype(jnp.float32)

    def reference(lo, hi, x):
        for i in range(lo, hi):
            x = x * 1.5 + i
        return x

    close(lax.fori_loop(2, 7, body, arr(1.0)), reference(2, 7, 1.0))
    close(lax.fori_loop(5, 2, body, arr(1.0)), 1.0)
    traced = functrans.jit(lambda lo, hi, x: lax.fori_loop(lo, hi, body, x))
    close(traced(arr(2, np.int32), arr(7, np.int32), arr(1.0)), reference(2, 7, 1.0))
    jaxpr = functrans.make_jaxpr(lambda lo, hi, x: lax.fori_loop(lo, hi, body, x))(
        arr(2, np.int32), arr(7, np.int32), arr(1.0))
    assert len(eqns_named(jaxpr.jaxpr, "while")) == 1


def test_fori_loop_index_is_weakly_typed_with_known_bounds():
    # known bounds become Python ints, so a Python-scalar carry stays weakly typed
    total = lax.fori_loop(0, 10, lambda i, x: x + i, 0)
    assert total.weak_type and total.dtype == np.int32 and int(total) == 45
    assert lax.fori_loop(jnp.int16(0), 3, lambda i, x: i, 0).weak_type
    assert not lax.fori_loop(0, 3, lambda i, x: x + i, jnp.int32(0)).weak_type
    assert functrans.jit(lambda: lax.fori_loop(0, 4, lambda i, x: x + i, 0))().weak_type
    # traced bounds keep their dtype; a Python int bound takes the other bound's type
    traced = functrans.jit(lambda lo: lax.fori_loop(lo, 3, lambda i, x: i, 0))(jnp.int16(0))
    assert traced.dtype == np.int16 and not traced.weak_type
    for lo, hi in [(jnp.int16(0), jnp.int32(3)), (jnp.uint8(0), 3)]:
        with pytest.raises(TypeError, match="must have equal types"):
            lax.fori_loop(lo, hi, lambda i, x: x, 0)


def test_make_jaxpr_of_long_loop_has_one_body():
    def f(x):
        return lax.fori_loop(0, 1000, lambda i, x: lax.sin(x) * 0.5 + 1.0, x)

    jaxpr = functrans.make_jaxpr(f)(arr(0.1))
    scans = [e for e in jaxpr.eqns if e.primitive.name == "scan"]
    assert len(scans) == 1 and scans[0].params["length"] == 1000
    assert len(eqns_named(jaxpr.jaxpr, "sin")) == 1
    x = 0.1
    for _ in range(1000):
        x = np.sin(x) * 0.5 + 1.0
    close(f(arr(0.1)), x, rtol=1e-4)


# =============================================================================================
# scan / map
# =============================================================================================


def _python_scan(f, init, xs, length=None, reverse=False):
    n = length if xs is None else len(functrans.tree_util.tree_leaves(xs)[0])
    order = range(n - 1, -1, -1) if reverse else range(n)
    carry, ys = init, [None] * n
    for i in order:
        x = None if xs is None else functrans.tree_util.tree_map(lambda a: a[i], xs)
        carry, ys[i] = f(carry, x)
    return carry, ys


def test_scan_matches_python_loop():
    rng = np.random.default_rng(0)
    xs = {"u": rng.standard_normal((6, 3)).astype(np.float32), "v": rng.standard_normal(6).astype(np.float32)}

    def f(carry, x):
        h, k = carry
        h = np.tanh(h * 0.9 + x["u"] * x["v"])
        return (h, k + 1), (h.sum(), h * 2)

    def f_ft(carry, x):
        h, k = carry
        h = lax.tanh(h * 0.9 + x["u"] * x["v"])
        return (h, k + 1), (jnp.sum(h), h * 2)

    init = (np.zeros(3, np.float32), np.int32(0))
    for reverse in (False, True):
        carry, ys = _python_scan(f, init, xs, reverse=reverse)
        expected = (carry, (np.stack([y[0] for y in ys]), np.stack([y[1] for y in ys])))
        got = lax.scan(f_ft, (arr(init[0]), arr(0, np.int32)),
                       {"u": arr(xs["u"]), "v": arr(xs["v"])}, reverse=reverse)
        close(got, expected)
        jitted = functrans.jit(lambda c, x: lax.scan(f_ft, c, x, reverse=reverse))
        close(jitted((arr(init[0]), arr(0, np.int32)), {"u": arr(xs["u"]), "v": arr(xs["v"])}), expected)


def test_scan_without_xs():
    carry, ys = lax.scan(lambda c, _: (c * 2.0, c), arr(1.0), None, length=5)
    close(carry, 32.0)
    close(ys, [1, 2, 4, 8, 16])
    with pytest.raises(ValueError, match="length"):
        lax.scan(lambda c, _: (c, c), arr(1.0), None)


def test_scan_carry_type_change_error():
    with pytest.raises(TypeError, match=r"scan f .*float32\[\].*float32\[3\]"):
        lax.scan(lambda c, x: (c * x, x), arr(1.0), arr(np.ones((4, 3))))


def test_map_matches_python():
    xs = np.arange(12, dtype=np.float32).reshape(6, 2)
    f = lambda x: lax.sin(x) * jnp.sum(x)  # noqa: E731
    expected = np.stack([np.sin(x) * x.sum() for x in xs])
    close(lax.map(f, arr(xs)), expected)
    close(lax.map(f, arr(xs), batch_size=3), expected)
    close(lax.map(f, arr(xs), batch_size=4), expected)


# =============================================================================================
# derivatives (float64)
# =============================================================================================


def test_cond_and_switch_gradients(x64):
    def f(x, y):
        a = lax.cond(lax.gt(jnp.sum(x), 0.0), lambda v: lax.sin(v[0]) * v[1],
                     lambda v: v[0] * v[0] + v[1], (x, y))
        return lax.switch(lax.convert_element_type(lax.gt(jnp.sum(y), 0.0), np.int32) + 1,
                          [lambda a: a * 3.0, lambda a: lax.exp(a), lambda a: a * y], a)

    x = np.array([0.3, -0.1, 0.5])
    for y in (np.array([0.7, 1.1, -0.2]), np.array([-0.7, -1.1, -0.2])):
        check_grads(f, (x, y), order=2, modes=("fwd", "rev"))
        check_grads(f, (-x, y), order=1, modes=("fwd", "rev"))


def test_scan_gradients(x64):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((3, 3)) * 0.5
    xs = rng.standard_normal((5, 3))

    def f(w, h0, xs):
        def step(h, x):
            h = lax.tanh(jnp.sum(w * h[None, :], axis=1) + x)
            return h, jnp.sum(h * h)
        h, ys = lax.scan(step, h0, xs)
        return jnp.sum(h) + jnp.sum(ys)

    check_grads(f, (w, rng.standard_normal(3), xs), order=2, modes=("fwd", "rev"))
    check_grads(lambda w, h0, xs: lax.scan(lambda c, x: (c * x + w[0, 0], c), h0, xs, reverse=True),
                (w, rng.standard_normal(3), xs), order=1)


def test_staged_derivative_programs_type_check(x64):
    def f(w, xs):
        return jnp.sum(lax.scan(lambda c, x: (lax.sin(c * w) + x, c * x), 0.5, xs)[1])

    xs = np.arange(4.0)
    for fun, args in [(functrans.grad(f), (1.0, xs)),
                      (functrans.vmap(functrans.grad(f), (0, None)), (xs, xs)),
                      (lambda x: functrans.jvp(newton_sqrt, (x,), (1.0,)), (2.0,)),
                      (functrans.vmap(newton_sqrt), (xs + 1,)),
                      (functrans.grad(lambda x: lax.switch(1, [lax.sin, lax.cos, lax.exp], x)), (1.0,))]:
        functrans.core.check_jaxpr(functrans.make_jaxpr(fun)(*args))
    # grad of a jitted scan agrees with grad of the eager one
    close(functrans.grad(functrans.jit(f))(0.7, xs), functrans.grad(f)(0.7, xs), rtol=1e-12)


def test_fori_loop_gradients(x64):
    def f(x, a):
        return lax.fori_loop(0, 6, lambda i, c: lax.sin(c) * a + i * 0.1, x)

    check_grads(f, (np.array([0.4, 1.3]), np.array(0.8)), order=2, modes=("fwd", "rev"))
    g = functrans.grad(lambda x: jnp.sum(f(x, 0.8)))(np.array([0.4, 1.3]))
    g_jit = functrans.jit(functrans.grad(lambda x: jnp.sum(f(x, 0.8))))(np.array([0.4, 1.3]))
    close(g, g_jit, rtol=1e-12)


def test_while_loop_newton_sqrt_derivatives(x64):
    for x in (2.0, 9.0, 0.3):
        expected = 1.0 / (2.0 * np.sqrt(x))
        close(newton_sqrt(np.float64(x)), np.sqrt(x), rtol=1e-12)
        _, t = functrans.jvp(newton_sqrt, (np.float64(x),), (np.float64(1.0),))
        close(t, expected, rtol=1e-9)
        close(functrans.grad(newton_sqrt)(np.float64(x)), expected, rtol=1e-9)
    check_grads(newton_sqrt, (np.float64(2.5),), order=1, modes=("fwd", "rev"))


def test_while_loop_reverse_mode_closure_and_jit_forward(x64):
    # the differentiated value enters the loop only through the body's closure
    def f(a):
        return lax.while_loop(lambda c: lax.lt(c[0], 4), lambda c: (c[0] + 1, c[1] * a), (0, 1.0))[1]

    close(functrans.grad(f)(np.float64(1.5)), 4 * 1.5 ** 3, rtol=1e-12)
    close(functrans.jit(lambda x: functrans.jvp(f, (x,), (1.0,))[1])(np.float64(1.5)),
          4 * 1.5 ** 3, rtol=1e-12)
    # staged primal loops (trip count unknown while differentiating) reverse by recomputation
    close(functrans.jit(functrans.grad(f))(np.float64(1.5)), 4 * 1.5 ** 3, rtol=1e-12)
    close(functrans.grad(functrans.jit(f))(np.float64(1.5)), 4 * 1.5 ** 3, rtol=1e-12)
    # forward mode through a jitted while loop: jvp and linearize
    close(functrans.linearize(functrans.jit(newton_sqrt), np.float64(2.0))[1](np.float64(1.0)),
          1.0 / (2.0 * np.sqrt(2.0)), rtol=1e-9)


def test_while_loop_second_derivatives(x64):
    want = -0.25 * 2.0 ** -1.5
    close(functrans.grad(functrans.grad(newton_sqrt))(np.float64(2.0)), want, rtol=1e-8)
    close(functrans.hessian(newton_sqrt)(np.float64(2.0)), want, rtol=1e-8)


# =============================================================================================
# vmap
# =============================================================================================


def test_vmap_cond_batched_predicate():
    xs = arr([-2.0, -0.5, 0.5, 3.0])

    def f(x):
        return lax.cond(lax.gt(x, 0.0), lambda v: lax.sqrt(v), lambda v: v * v, x)

    expected = np.array([f(x) for x in xs])
    close(functrans.vmap(f)(xs), expected)
    close(functrans.jit(functrans.vmap(f))(xs), expected)
    idx = arr([0, 1, 2, 5], np.int32)
    branches = [lambda v: v + 1.0, lambda v: v * 10.0, lambda v: -v]
    g = lambda i, v: lax.switch(i, branches, v)  # noqa: E731
    close(functrans.vmap(g)(idx, xs), [g(i, x) for i, x in zip(idx, xs)])
    # an unbatched predicate with batched operands
    close(functrans.vmap(lambda v: lax.cond(True, lambda u: u * 2.0, lambda u: u, v))(xs), xs * 2)


def test_vmap_while_batched_predicate():
    xs = arr([0.5, 2.0, 9.0, 30.0])
    expected = np.array([float(newton_sqrt(x)) for x in xs])
    close(functrans.vmap(newton_sqrt)(xs), expected)
    close(np.asarray(expected), np.sqrt(xs), rtol=1e-5)

    def steps(n):
        return lax.while_loop(lambda c: lax.lt(c[0], n), lambda c: (c[0] + 1, c[1] * 2.0), (0, arr(1.0)))

    ns = arr([0, 3, 1, 5], np.int32)
    got = functrans.vmap(steps)(ns)
    close(got[1], [2.0 ** int(n) for n in ns])
    close(got[0], ns)


def test_vmap_scan_and_fori_loop():
    rng = np.random.default_rng(2)
    xs = rng.standard_normal((4, 5, 3)).astype(np.float32)   # batch, time, features
    h0 = rng.standard_normal((4, 3)).astype(np.float32)

    def f(h0, xs):
        return lax.scan(lambda h, x: (lax.tanh(h + x), jnp.sum(h)), h0, xs)

    got = functrans.vmap(f)(arr(h0), arr(xs))
    want = [f(arr(h0[b]), arr(xs[b])) for b in range(4)]
    close(got[0], np.stack([w[0] for w in want]))
    close(got[1], np.stack([w[1] for w in want]))
    # batched along the scanned operand's second axis, carry starts unbatched
    got = functrans.vmap(f, in_axes=(None, 1))(arr(h0[0]), arr(np.swapaxes(xs, 0, 1)))
    close(got[0], np.stack([f(arr(h0[0]), arr(xs[b]))[0] for b in range(4)]))
    g = lambda a: lax.fori_loop(0, 4, lambda i, c: c * a + 1.0, arr(0.0))  # noqa: E731
    close(functrans.vmap(g)(arr([0.5, 1.0, 2.0])), [g(a) for a in (0.5, 1.0, 2.0)])


def test_nested_scan_inside_grad_inside_vmap(x64):
    def inner(c, x):
        return lax.scan(lambda d, y: (lax.sin(d * y + c), d), c, x)[0], None

    def loss(w, xs):
        c, _ = lax.scan(lambda c, x: inner(c * w, x), np.float64(0.3), xs)
        return c

    rng = np.random.default_rng(3)
    ws = rng.uniform(0.5, 1.5, size=4)
    xs = rng.standard_normal((3, 2))
    got = functrans.vmap(functrans.grad(loss), in_axes=(0, None))(ws, xs)
    eps = 1e-6
    want = [(float(loss(w + eps, xs)) - float(loss(w - eps, xs))) / (2 * eps) for w in ws]
    close(got, want, rtol=1e-6)
    close(functrans.jit(functrans.vmap(functrans.grad(loss), in_axes=(0, None)))(ws, xs), want, rtol=1e-6)


def test_vmap_of_grad_through_while_loop(x64):
    xs = np.array([0.5, 2.0, 9.0])
    got = functrans.vmap(functrans.grad(newton_sqrt))(xs)
    close(got, 1.0 / (2.0 * np.sqrt(xs)), rtol=1e-8)


def test_grad_of_vmap_of_while_and_cond(x64):
    def f(xs):
        return jnp.sum(functrans.vmap(newton_sqrt)(xs)) + jnp.sum(functrans.vmap(
            lambda x: lax.cond(lax.gt(x, 1.0), lax.sin, lax.cos, x))(xs))

    xs = np.array([0.5, 2.0, 9.0])
    want = 1.0 / (2.0 * np.sqrt(xs)) + np.where(xs > 1.0, np.cos(xs), -np.sin(xs))
    close(functrans.grad(f)(xs), want, rtol=1e-8)


def test_collectives_inside_batched_bodies_find_their_axis():
    if not hasattr(lax, "psum"):
        pytest.skip("collectives not available")
    xs = arr(np.arange(6.0).reshape(2, 3))
    f = lambda x: lax.scan(lambda c, y: (c + lax.psum(y, "i"), None), 0.0, x)[0]  # noqa: E731
    close(functrans.vmap(f, axis_name="i")(xs), [15.0, 15.0])
    g = lambda x: lax.cond(lax.gt(x[0], 1.0), lambda v: lax.psum(v, "i"), lambda v: v, x)  # noqa: E731
    close(functrans.vmap(g, axis_name="i")(xs), [[0.0, 1.0, 2.0], [3.0, 5.0, 7.0]])
