"""functrans.custom_batching: custom_vmap (the rule under vmap, the function elsewhere, and
both under forward and reverse mode) and sequential_vmap, against Python loops and JAX's
documented semantics."""


from __future__ import annotations

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans.custom_batching import custom_vmap, sequential_vmap

F32 = np.float32


# =============================================================================================
# custom_vmap
# =============================================================================================


def _sin_mul_with_cos_rule():
    calls = []

    @custom_vmap
    def f(x, y):
        return jnp.sin(x) * y

    @f.def_vmap
    def rule(axis_size, in_batched, xs, ys):
        calls.append((axis_size, list(in_batched)))
        xb, yb = in_batched
        return jnp.cos(xs) * ys, xb or yb  # deliberately a different function

    return f, calls


def test_custom_vmap_unbatched_runs_the_function_and_vmap_runs_the_rule():
    f, calls = _sin_mul_with_cos_rule()
    x = np.arange(3.0, dtype=F32)
    np.testing.assert_allclose(f(F32(1.0), F32(2.0)), np.sin(1.0) * 2.0, rtol=1e-6)
    assert calls == []
    out = functrans.vmap(f, (0, None))(x, F32(2.0))
    np.testing.assert_allclose(out, np.cos(x) * 2.0, rtol=1e-6)
    assert calls == [(3, [True, False])]
    # jit of vmap, vmap of jit, and jit alone (the function, not the rule)
    np.testing.assert_allclose(functrans.jit(functrans.vmap(f, (0, None)))(x, F32(2.0)),
                               np.cos(x) * 2.0, rtol=1e-6)
    np.testing.assert_allclose(functrans.vmap(functrans.jit(f), (0, None))(x, F32(2.0)),
                               np.cos(x) * 2.0, rtol=1e-6)
    np.testing.assert_allclose(functrans.jit(f)(F32(1.0), F32(2.0)), np.sin(1.0) * 2.0,
                               rtol=1e-6)
    # vmap over an unrelated axis only: the rule is not called
    g = functrans.vmap(lambda a, b: f(b, b) + a, (0, None))
    np.testing.assert_allclose(g(x, F32(1.0)), x + np.sin(1.0), rtol=1e-6)


def test_custom_vmap_rule_matches_a_python_loop_and_compiles_as_one_program():
    @custom_vmap
    def row_norm(x):
        return jnp.sqrt(jnp.sum(x * x))

    @row_norm.def_vmap
    def rule(axis_size, in_batched, xs):
        return jnp.sqrt(jnp.sum(xs * xs, axis=1)), in_batched[0]

    xs = np.random.default_rng(0).normal(size=(5, 4)).astype(F32)
    loop = np.stack([np.asarray(row_norm(r)) for r in xs])
    np.testing.assert_allclose(functrans.vmap(row_norm)(xs), loop, rtol=1e-6)
    np.testing.assert_allclose(functrans.jit(functrans.vmap(row_norm))(xs), loop, rtol=1e-6)
    # the staged vmap holds the rule's operations, not the custom call
    text = str(functrans.make_jaxpr(functrans.vmap(row_norm))(xs))
    assert "custom_vmap_call" not in text and "reduce_sum" in text
    # the staged unbatched call keeps the function inside one equation
    assert "custom_vmap_call" in str(functrans.make_jaxpr(row_norm)(xs[0]))


def test_custom_vmap_nested_vmap_pytrees_and_kwargs():
    f, calls = _sin_mul_with_cos_rule()
    out = functrans.vmap(functrans.vmap(f, (0, None)), (0, None))(jnp.ones((2, 3)), F32(2.0))
    np.testing.assert_allclose(out, np.full((2, 3), np.cos(1.0) * 2.0), rtol=1e-6)

    seen = []

    @custom_vmap
    def p(d, scale=1.0):
        return {"a": d["a"] + scale, "b": d["b"]}

    @p.def_vmap
    def p_rule(axis_size, in_batched, d, scale):
        seen.append(in_batched)
        return {"a": d["a"] + 10 * scale, "b": d["b"]}, {"a": in_batched[0]["a"],
                                                        "b": in_batched[0]["b"]}

    x = np.arange(3.0, dtype=F32)
    out = functrans.vmap(lambda d: p(d, scale=2.0), ({"a": 0, "b": None},))({"a": x, "b": F32(1)})
    np.testing.assert_allclose(out["a"], x + 20.0)
    np.testing.assert_allclose(out["b"], [1.0, 1.0, 1.0])
    assert seen == [[{"a": True, "b": False}, False]]
    with pytest.raises(TypeError, match="could not be resolved to positional"):
        p({"a": x, "b": x}, nonsense=1)


def test_custom_vmap_rule_errors():
    @custom_vmap
    def no_rule(x):
        return x

    with pytest.raises(AttributeError, match="No batching rule defined"):
        no_rule(1.0)

    @custom_vmap
    def q(x):
        return x + 1

    x = jnp.arange(3.0)
    q.def_vmap(lambda n, ib, xs: ((xs + 1, xs), True))
    with pytest.raises(ValueError, match="do not match"):
        functrans.vmap(q)(x)
    q.def_vmap(lambda n, ib, xs: ((xs + 1, xs), (True, True)))
    with pytest.raises(ValueError, match="original custom-vmapped function"):
        functrans.vmap(q)(x)
    q.def_vmap(lambda n, ib, xs: (xs + 1, False))  # claims unbatched, returns a batch
    with pytest.raises(ValueError, match=r"shape \(3,\).*must be \(\)"):
        functrans.vmap(q)(x)


def test_custom_vmap_closure_over_batched_values():
    def outer(c, x):
        @custom_vmap
        def f(x):
            return x * c

        @f.def_vmap
        def rule(axis_size, in_batched, xs):
            return xs * c * 100.0, True

        return f(x)

    xs = np.arange(3.0, dtype=F32)
    # only the closed-over value is batched: the function itself is batched, not the rule
    np.testing.assert_allclose(functrans.vmap(outer, (0, None))(xs, F32(2.0)), xs * 2.0)
    # the closure is unbatched at the level where the argument is batched: the rule runs
    inner = functrans.vmap(lambda c: functrans.vmap(lambda x: outer(c, x))(xs))(xs)
    np.testing.assert_allclose(inner, np.outer(xs, xs) * 100.0)
    with pytest.raises(NotImplementedError, match="closes over"):
        functrans.vmap(outer)(xs, xs)


def test_custom_vmap_forward_mode_follows_function_and_rule():
    f, _ = _sin_mul_with_cos_rule()
    x = np.arange(3.0, dtype=F32)
    # unbatched: the jvp of the function
    p, t = functrans.jvp(f, (F32(1.0), F32(2.0)), (F32(1.0), F32(0.0)))
    np.testing.assert_allclose([p, t], [np.sin(1.0) * 2, np.cos(1.0) * 2], rtol=1e-6)
    p, t = functrans.jit(lambda a: functrans.jvp(f, (a, F32(2.0)), (F32(1.0), F32(0.0))))(F32(1))
    np.testing.assert_allclose([p, t], [np.sin(1.0) * 2, np.cos(1.0) * 2], rtol=1e-6)
    # batched primals (tangents unbatched or batched): the jvp of the rule
    p, t = functrans.vmap(lambda a: functrans.jvp(f, (a, F32(2.0)), (F32(1.0), F32(0.0))))(x)
    np.testing.assert_allclose(p, np.cos(x) * 2, rtol=1e-6)
    np.testing.assert_allclose(t, -np.sin(x) * 2, rtol=1e-6)
    p, t = functrans.vmap(lambda a, da: functrans.jvp(f, (a, F32(2.0)), (da, F32(0.0))))(x, x)
    np.testing.assert_allclose(t, -np.sin(x) * 2 * x, rtol=1e-6)
    # only tangents batched (jacfwd): the primal output stays unbatched
    np.testing.assert_allclose(functrans.jacfwd(lambda a: f(a, F32(2.0)))(F32(1.0)),
                               -np.sin(1.0) * 2, rtol=1e-6)
    # integer arguments carry no tangent
    @custom_vmap
    def h(x, k):
        return x * k

    h.def_vmap(lambda n, ib, x, k: (x * k + 1000, any(ib)))
    p, t = functrans.vmap(lambda a: functrans.jvp(lambda b: h(b, 3), (a,), (F32(1.0),)))(x)
    np.testing.assert_allclose(p, x * 3 + 1000)
    np.testing.assert_allclose(t, [3.0, 3.0, 3.0])


def test_custom_vmap_reverse_mode_as_in_jax():
    f, _ = _sin_mul_with_cos_rule()
    x = np.arange(3.0, dtype=F32)
    # grad of a vmap: the rule replaces the call before differentiation sees it
    g = functrans.grad(lambda a: jnp.sum(functrans.vmap(f, (0, None))(a, F32(2.0))))(x)
    np.testing.assert_allclose(g, -np.sin(x) * 2, rtol=1e-6)
    # reverse mode of the call itself is refused, with or without jit around it
    two = np.full(3, 2.0, F32)
    for fun, args in ((functrans.grad(f), (F32(1.0), F32(2.0))),
                      (functrans.grad(functrans.jit(f)), (F32(1.0), F32(2.0))),
                      (functrans.vmap(functrans.grad(f)), (x, two))):
        with pytest.raises(ValueError, match="reverse-mode differentiation.*custom_vmap"):
            fun(*args)
    with pytest.raises(ValueError, match="custom_vmap"):
        functrans.linearize(lambda a: f(a, F32(2.0)), F32(1.0))


def test_custom_vmap_inside_custom_vjp_gives_both():
    @custom_vmap
    def fv(x, y):
        return jnp.sin(x) * y

    @fv.def_vmap
    def rule(axis_size, in_batched, xs, ys):
        return jnp.cos(xs) * ys, True

    f = functrans.custom_vjp(fv)
    f.defvjp(lambda x, y: (f(x, y), (jnp.cos(x), jnp.sin(x), y)),
             lambda res, g: (res[0] * g * res[2], res[1] * g))
    np.testing.assert_allclose(functrans.vmap(f)(jnp.zeros(3), jnp.ones(3)), [1.0, 1.0, 1.0])
    assert float(functrans.grad(f)(F32(0.0), F32(1.0))) == 1.0
    np.testing.assert_allclose(functrans.vmap(functrans.grad(f))(jnp.zeros(2), jnp.ones(2)),
                               [1.0, 1.0])


def test_sequential_vmap_loops_and_matches_vmap():
    seen_shapes = []

    def body(x, y):
        seen_shapes.append(tuple(x.shape))
        return jnp.sum(x) * y

    f = sequential_vmap(body)
    xs = np.arange(6.0, dtype=F32).reshape(3, 2)
    out = functrans.vmap(f, (0, None))(xs, F32(2.0))
    np.testing.assert_allclose(out, xs.sum(1) * 2.0)
    assert (2,) in seen_shapes and (3, 2) not in seen_shapes  # traced per example
    assert "scan" in str(functrans.make_jaxpr(functrans.vmap(f, (0, None)))(xs, F32(2.0)))
    np.testing.assert_allclose(functrans.jit(functrans.vmap(f))(xs, np.ones(3, F32)),
                               xs.sum(1))
