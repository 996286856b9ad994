"""custom_jvp / custom_vjp called as JAX calls them: the rule signatures with nondiff_argnums,
eager calls returning what the function returns, symbolic zeros, optimize_remat, forward mode
of custom_vjp, pytrees, and the errors for rules that return the wrong things. Expected values
are derivatives worked out by hand (or the rule's deliberate deviation from them)."""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import functrans
import functrans.numpy as jnp
from functrans import lax
from functrans.core import UnexpectedTracerError
from functrans.custom_derivatives import (CustomVJPPrimal, SymbolicZero, custom_jvp,
                                          custom_vjp, custom_vjp_primal_tree_values,
                                          zero_from_primal)
from functrans.test_util import check_grads

F32 = np.float32


# =============================================================================================
# custom_jvp with nondiff_argnums: rule(*nondiff_args, primals, tangents)
# =============================================================================================


@partial(custom_jvp, nondiff_argnums=(0,))
def apply_twice(fn, x):
    return fn(fn(x))


@apply_twice.defjvp
def _apply_twice_jvp(fn, primals, tangents):
    (x,), (t,) = primals, tangents
    # a deliberately "wrong" derivative (7 t) so the test sees the rule was used
    return apply_twice(fn, x), 7.0 * t


def test_custom_jvp_rule_receives_the_nondiff_function_first():
    assert float(functrans.grad(lambda x: apply_twice(jnp.tanh, x))(0.4)) == 7.0
    assert float(functrans.jit(functrans.grad(lambda x: apply_twice(jnp.tanh, x)))(F32(0.4))) == 7.0
    g = functrans.vmap(functrans.grad(lambda x: apply_twice(jnp.sin, x)))(jnp.arange(3.0))
    np.testing.assert_array_equal(g, [7.0, 7.0, 7.0])
    _, t = functrans.jvp(lambda x: apply_twice(jnp.sin, x), (F32(1.0),), (F32(2.0),))
    assert float(t) == 14.0


@partial(custom_jvp, nondiff_argnums=(1,))
def power(x, n):
    return x ** n


@power.defjvp
def _power_jvp(n, primals, tangents):
    (x,), (t,) = primals, tangents
    return power(x, n), n * x ** (n - 1) * t


def test_custom_jvp_static_and_traced_nondiff_arguments():
    assert float(functrans.grad(power)(2.0, 3)) == 12.0
    # a traced nondiff argument reaches the rule, with its own derivative stopped
    assert float(functrans.jit(functrans.grad(power))(F32(2.0), F32(3.0))) == 12.0
    assert float(functrans.grad(lambda n: power(2.0, n))(3.0)) == 0.0
    g = functrans.vmap(functrans.grad(power))(jnp.array([2.0, 3.0]), jnp.array([2.0, 3.0]))
    np.testing.assert_allclose(g, [4.0, 27.0])


def test_custom_jvp_nondiff_argnames_and_keyword_calls():
    @partial(custom_jvp, nondiff_argnames=("scale",))
    def scaled(x, scale=2.0):
        return scale * jnp.sin(x)

    @scaled.defjvp
    def _scaled_jvp(scale, primals, tangents):
        (x,), (t,) = primals, tangents
        return scaled(x, scale), scale * 100.0 * t

    assert scaled.nondiff_argnums == (1,)
    # keywords resolve to positions and defaults are filled in, so the rule sees scale
    assert float(functrans.grad(lambda x: scaled(x=x))(0.0)) == 200.0
    assert float(functrans.grad(lambda x: scaled(x, scale=3.0))(0.0)) == 300.0


def test_defjvps_sums_per_argument_rules_and_refuses_nondiff_argnums():
    @custom_jvp
    def f(x, y):
        return jnp.sin(x) * y

    f.defjvps(lambda tx, ans, x, y: jnp.cos(x) * tx * y, None)
    gx, gy = functrans.grad(f, argnums=(0, 1))(1.0, 2.0)
    assert float(gx) == pytest.approx(2 * np.cos(1.0), rel=1e-6)
    assert float(gy) == 0.0  # None: y does not enter the derivative
    with pytest.raises(TypeError, match="defjvps.*nondiff_argnums"):
        apply_twice.defjvps(lambda t, ans, x: t)


# =============================================================================================
# Eager calls are the undecorated function
# =============================================================================================


def test_custom_functions_outside_transforms_return_what_the_function_returns():
    @custom_jvp
    def twice(x):
        return x * 2

    twice.defjvp(lambda p, t: (twice(p[0]), 2 * t[0]))

    @custom_vjp
    def thrice(x):
        return x * 3

    thrice.defvjp(lambda x: (thrice(x), None), lambda _, g: (3 * g,))

    for f, k in ((twice, 2), (thrice, 3)):
        out = f(1.5)
        assert type(out) is float and out == 1.5 * k
        assert type(f(2)) is int
        assert type(f(np.float64(1.0))) is np.float64
        assert isinstance(f(jnp.ones(2)), functrans.Array)
    assert type(apply_twice(lambda v: v + 1, 1)) is int
    # under a transform the function is traced as usual
    assert isinstance(functrans.jit(twice)(1.5), functrans.Array)


# =============================================================================================
# Symbolic zeros
# =============================================================================================


def test_custom_jvp_symbolic_zeros_reach_the_rule():
    seen = []

    @custom_jvp
    def mul(x, y):
        return x * y

    def mul_jvp(primals, tangents):
        (x, y), (tx, ty) = primals, tangents
        seen.append((type(tx).__name__, type(ty).__name__))
        for t, p in ((tx, x), (ty, y)):
            if isinstance(t, SymbolicZero):
                assert t.shape == jnp.shape(p) and t.dtype == np.float32
        dx = 0.0 if isinstance(tx, SymbolicZero) else tx * y
        dy = 0.0 if isinstance(ty, SymbolicZero) else x * ty
        return mul(x, y), dx + dy

    mul.defjvp(mul_jvp, symbolic_zeros=True)
    assert float(functrans.grad(mul)(2.0, 3.0)) == 3.0
    assert seen[-1][1] == "SymbolicZero" and seen[-1][0] != "SymbolicZero"
    assert float(functrans.jit(functrans.grad(mul, argnums=1))(F32(2.0), F32(3.0))) == 2.0
    assert seen[-1][0] == "SymbolicZero"
    g = functrans.vmap(functrans.grad(mul))(jnp.arange(3.0), jnp.full(3, 5.0))
    np.testing.assert_array_equal(g, [5.0, 5.0, 5.0])
    g = functrans.grad(lambda x: functrans.vmap(mul, (0, None))(x, 4.0).sum())(jnp.ones(3))
    np.testing.assert_array_equal(g, [4.0, 4.0, 4.0])
    # the rule may itself return a symbolic zero tangent
    mul.defjvp(lambda p, t: (mul(*p), SymbolicZero.from_primal_value(mul(*p))),
               symbolic_zeros=True)
    assert float(functrans.grad(mul)(2.0, 3.0)) == 0.0


def test_custom_vjp_symbolic_zeros_mark_perturbed_inputs_and_zero_cotangents():
    seen = {}

    @custom_vjp
    def both(x, y):
        return x * y, x + y

    def fwd(x, y):
        seen["perturbed"] = (x.perturbed, y.perturbed)
        x, y = custom_vjp_primal_tree_values((x, y))
        return both(x, y), (x, y)

    def bwd(res, cts):
        x, y = res
        g_prod, g_sum = cts
        seen["cts"] = (type(g_prod).__name__, type(g_sum).__name__)
        g_sum = 0.0 if isinstance(g_sum, SymbolicZero) else g_sum
        return g_prod * y + g_sum, SymbolicZero.from_primal_value(y)

    both.defvjp(fwd, bwd, symbolic_zeros=True)
    assert float(functrans.grad(lambda x: both(x, 3.0)[0])(2.0)) == 3.0
    assert seen == {"perturbed": (True, False), "cts": ("Array", "SymbolicZero")}
    g = functrans.vmap(functrans.grad(lambda x: both(x, 3.0)[0]))(jnp.arange(3.0))
    np.testing.assert_array_equal(g, [3.0, 3.0, 3.0])
    g = functrans.grad(lambda x: functrans.vmap(both)(x, jnp.ones(3))[0].sum())(jnp.arange(3.0))
    np.testing.assert_array_equal(g, [1.0, 1.0, 1.0])
    # the cotangent of y came back as a symbolic zero
    assert float(functrans.grad(lambda y: both(2.0, y)[0])(3.0)) == 0.0
    with pytest.raises(TypeError, match="unexpected leaf type"):
        custom_vjp_primal_tree_values((1.0,))


def test_zero_from_primal_and_symbolic_zero_attributes():
    z = zero_from_primal({"a": jnp.ones((2, 3)), "i": 1}, symbolic_zeros=True)
    assert isinstance(z["a"], SymbolicZero) and z["a"].shape == (2, 3) and z["a"].ndim == 2
    assert z["i"].dtype == functrans.float0 and repr(z["a"]) == "SymbolicZero"
    concrete = zero_from_primal({"a": jnp.ones(2)})
    np.testing.assert_array_equal(concrete["a"], [0.0, 0.0])
    assert CustomVJPPrimal(1.0, False).perturbed is False


# =============================================================================================
# custom_vjp: nondiff_argnums, None cotangents, pytrees, optimize_remat
# =============================================================================================


@partial(custom_vjp, nondiff_argnums=(0,))
def apply_fn(fn, x, y):
    return fn(x) * y


def _apply_fn_fwd(fn, x, y):  # every argument, in its place
    return apply_fn(fn, x, y), (x, y)


def _apply_fn_bwd(fn, res, g):  # nondiff arguments first
    x, y = res
    return 10.0 * g * y, None


apply_fn.defvjp(_apply_fn_fwd, _apply_fn_bwd)


def test_custom_vjp_nondiff_function_and_none_cotangent():
    gx, gy = functrans.grad(apply_fn, argnums=(1, 2))(jnp.sin, 1.0, 3.0)
    assert float(gx) == 30.0 and float(gy) == 0.0
    assert float(functrans.jit(functrans.grad(partial(apply_fn, jnp.cos), argnums=0))(
        F32(1.0), F32(2.0))) == 20.0
    g = functrans.vmap(functrans.grad(partial(apply_fn, jnp.exp)))(jnp.ones(2), jnp.ones(2))
    np.testing.assert_array_equal(g, [10.0, 10.0])


def test_custom_vjp_refuses_traced_nondiff_arguments():
    @partial(custom_vjp, nondiff_argnums=(1,))
    def scale(x, s):
        return x * s

    scale.defvjp(lambda x, s: (x * s, None), lambda s, _, g: (g * s,))
    assert float(functrans.grad(scale)(1.0, 2.0)) == 2.0
    with pytest.raises(UnexpectedTracerError, match="nondiff_argnums"):
        functrans.jit(functrans.grad(scale))(F32(1.0), F32(2.0))


def test_custom_vjp_pytree_inputs_outputs_and_partial_none():
    @custom_vjp
    def f(x, d):
        return {"sum": x * d["a"] + d["b"], "a": d["a"]}

    def fwd(x, d):
        return f(x, d), (x, d["a"])

    def bwd(res, g):
        x, a = res
        # no cotangent for d["a"]; a list is accepted for the argument tuple
        return [g["sum"] * a, {"a": None, "b": 2.0 * g["sum"]}]

    f.defvjp(fwd, bwd)
    gx, gd = functrans.grad(lambda x, d: f(x, d)["sum"], argnums=(0, 1))(2.0, {"a": 3.0, "b": 1.0})
    assert float(gx) == 3.0 and float(gd["a"]) == 0.0 and float(gd["b"]) == 2.0


def test_custom_vjp_bwd_none_for_a_whole_pytree_argument():
    @custom_vjp
    def f(x, d):
        return x * d["a"] + d["b"]

    f.defvjp(lambda x, d: (f(x, d), None), lambda _, g: (g, None))
    gx, gd = functrans.grad(f, argnums=(0, 1))(2.0, {"a": 1.0, "b": 2.0})
    assert float(gx) == 1.0 and float(gd["a"]) == 0.0 and float(gd["b"]) == 0.0


def test_optimize_remat_gives_the_same_derivatives_and_runs_the_function_when_residuals_die():
    @custom_vjp
    def sin_rule(x):
        return jnp.sin(x)

    # the forward rule computes the output its own way (through exp) on purpose
    sin_rule.defvjp(lambda x: (jnp.sin(x) + 0.0 * jnp.exp(x), jnp.cos(x)),
                    lambda c, g: (c * g,), optimize_remat=True)
    x = jnp.array([0.1, 0.7])
    want = np.cos(np.asarray(x))
    np.testing.assert_allclose(functrans.grad(lambda v: sin_rule(v).sum())(x), want, rtol=1e-6)
    checkpointed = functrans.checkpoint(lambda v: sin_rule(v).sum())
    np.testing.assert_allclose(functrans.grad(checkpointed)(x), want, rtol=1e-6)
    np.testing.assert_allclose(functrans.jit(functrans.grad(checkpointed))(x), want, rtol=1e-6)
    np.testing.assert_allclose(functrans.vmap(functrans.grad(sin_rule))(x), want, rtol=1e-6)
    # Under checkpoint the forward pass keeps no residual: it runs sin_rule itself, not fwd.
    jaxpr = functrans.make_jaxpr(lambda v: functrans.linearize(checkpointed, v)[0])(x)
    names = _primitive_names(jaxpr.jaxpr)
    assert "exp" not in names and "sin" in names and "custom_vjp_fwd" not in names
    # without checkpoint the residual is needed, so fwd runs
    jaxpr = functrans.make_jaxpr(lambda v: functrans.vjp(lambda u: sin_rule(u).sum(), v)[0])(x)
    assert "custom_vjp_fwd" in _primitive_names(jaxpr.jaxpr)
    with pytest.raises(NotImplementedError, match="symbolic zeros"):
        sin_rule.defvjp(lambda x: (x, None), lambda _, g: (g,), symbolic_zeros=True,
                        optimize_remat=True)


def _primitive_names(jaxpr) -> set:
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for p in eqn.params.values():
            inner = getattr(p, "jaxpr", None)
            if inner is not None and hasattr(inner, "eqns"):
                names |= _primitive_names(inner)
    return names


# =============================================================================================
# Forward mode of custom_vjp, and custom_jvp under every transform
# =============================================================================================


JVP_OF_VJP = r"can't apply forward-mode autodiff \(jvp\) to a custom_vjp function\."


def test_forward_mode_of_custom_vjp_is_a_type_error_everywhere():
    @custom_vjp
    def g(x):
        return jnp.sin(x)

    g.defvjp(lambda x: (jnp.sin(x), jnp.cos(x)), lambda c, t: (c * t,))
    for attempt in (lambda: functrans.jvp(g, (1.0,), (1.0,)),
                    lambda: functrans.jit(lambda x: functrans.jvp(g, (x,), (x,)))(F32(1.0)),
                    lambda: functrans.jacfwd(g)(jnp.ones(2)),
                    lambda: functrans.linearize(g, 1.0)[1](1.0),
                    lambda: functrans.jvp(functrans.vmap(g), (jnp.ones(2),), (jnp.ones(2),))):
        with pytest.raises(TypeError, match=JVP_OF_VJP):
            attempt()
    # reverse mode (and reverse-over-reverse) works
    assert float(functrans.grad(functrans.jit(g))(F32(1.0))) == pytest.approx(np.cos(1.0))
    assert float(functrans.hessian(g)(1.0)) == pytest.approx(-np.sin(1.0), rel=1e-6)


@custom_jvp
def softplus(x):
    return jnp.log1p(jnp.exp(x))


@softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return softplus(x), t * lax.logistic(x)


def test_custom_jvp_under_vmap_jit_and_higher_order():
    xs = np.array([-1.0, 0.0, 2.0], F32)
    sig = 1 / (1 + np.exp(-xs))
    np.testing.assert_allclose(functrans.vmap(functrans.grad(softplus))(xs), sig, rtol=1e-6)
    np.testing.assert_allclose(functrans.grad(lambda v: functrans.vmap(softplus)(v).sum())(xs),
                               sig, rtol=1e-6)
    np.testing.assert_allclose(functrans.jit(functrans.vmap(functrans.grad(softplus)))(xs), sig,
                               rtol=1e-6)
    second = functrans.vmap(functrans.grad(functrans.grad(softplus)))(xs)
    np.testing.assert_allclose(second, sig * (1 - sig), rtol=1e-5)
    np.testing.assert_allclose(functrans.jacfwd(functrans.jacrev(softplus))(F32(0.5)),
                               functrans.grad(functrans.grad(softplus))(F32(0.5)), rtol=1e-6)


def test_a_function_called_inside_its_own_rule_is_differentiated_by_the_rule_again():
    # The rules deliberately differ from sin's derivative: d/dx sin(x) "=" 10 sin(x), so
    # every order of differentiation multiplies by 10 (JAX applies the rule at each level).
    calls = []

    @custom_jvp
    def f(x):
        calls.append("f")
        return jnp.sin(x)

    @f.defjvp
    def f_jvp(primals, tangents):
        calls.append("f_jvp")
        (x,), (t,) = primals, tangents
        y = f(x)
        return y, 10.0 * y * t

    @custom_vjp
    def g(x):
        return jnp.sin(x)

    def g_fwd(x):
        y = g(x)
        return y, y

    g.defvjp(g_fwd, lambda y, ct: (10.0 * y * ct,))

    x = F32(0.7)
    assert functrans.grad(functrans.grad(f))(x) == pytest.approx(100 * np.sin(x), rel=1e-6)
    assert calls == ["f_jvp", "f_jvp", "f"]
    for second in (functrans.jacfwd(functrans.grad(f)), functrans.jit(functrans.hessian(f)),
                   functrans.grad(functrans.grad(g)), functrans.jacrev(functrans.jacrev(g))):
        assert second(x) == pytest.approx(100 * np.sin(x), rel=1e-6)
    third = functrans.grad(functrans.grad(functrans.grad(f)))(x)
    assert third == pytest.approx(1000 * np.sin(x), rel=1e-6)
    np.testing.assert_allclose(functrans.vmap(functrans.grad(functrans.grad(g)))(
        np.array([0.5, 1.0], F32)), 100 * np.sin([0.5, 1.0]), rtol=1e-6)


@given(st.lists(st.integers(1, 4), min_size=0, max_size=2), st.integers(0, 2**31 - 1))
def test_custom_jvp_and_vjp_on_pytrees_of_any_shape(shape, seed):
    """A dict in, a (tuple, array) out; the rules scale the true derivative by 2 (jvp) and
    3 (vjp) so the test sees the rules at work."""
    rng = np.random.default_rng(seed)
    tree = {"u": rng.normal(size=shape).astype(F32), "v": rng.normal(size=shape).astype(F32)}

    @custom_jvp
    def fj(d):
        return (d["u"] * d["v"], jnp.sin(d["u"])), d["v"]

    @fj.defjvp
    def _fj_jvp(primals, tangents):
        (d,), (t,) = primals, tangents
        out = fj(d)
        return out, ((2 * (t["u"] * d["v"] + d["u"] * t["v"]), 2 * jnp.cos(d["u"]) * t["u"]),
                     2 * t["v"])

    @custom_vjp
    def fv(d):
        return (d["u"] * d["v"], jnp.sin(d["u"])), d["v"]

    def _fv_bwd(d, g):
        (g_uv, g_sin), g_v = g
        return ({"u": 3 * (g_uv * d["v"] + g_sin * jnp.cos(d["u"])),
                 "v": 3 * (g_uv * d["u"] + g_v)},)

    fv.defvjp(lambda d: (fv(d), d), _fv_bwd)

    def loss(f):
        return lambda d: jnp.sum(f(d)[0][0]) + jnp.sum(f(d)[0][1]) + jnp.sum(f(d)[1])

    u, v = tree["u"], tree["v"]
    true_gu, true_gv = v + np.cos(u), u + 1
    for f, k in ((fj, 2), (fv, 3)):
        g = functrans.grad(loss(f))(tree)
        np.testing.assert_allclose(g["u"], k * true_gu, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(g["v"], k * true_gv, rtol=1e-5, atol=1e-6)


# =============================================================================================
# Closures over traced values
# =============================================================================================


def test_custom_vjp_with_a_closure_converted_argument():
    """A custom_vjp function that takes a function which closes over a differentiated value:
    closure_convert makes the closed-over value an explicit argument."""
    @partial(custom_vjp, nondiff_argnums=(0,))
    def call(fn, x, *consts):
        return fn(x, *consts)

    def call_fwd(fn, x, *consts):
        return call(fn, x, *consts), (x, consts)

    def call_bwd(fn, res, g):
        x, consts = res
        return functrans.vjp(fn, x, *consts)[1](g)

    call.defvjp(call_fwd, call_bwd)

    def f(w, x):
        fn_conv, consts = functrans.closure_convert(lambda v: w * jnp.sin(v), x)
        return call(fn_conv, x, *consts)

    gw, gx = functrans.grad(f, argnums=(0, 1))(2.0, 1.0)
    assert float(gw) == pytest.approx(np.sin(1.0)) and float(gx) == pytest.approx(2 * np.cos(1.0))
    gw = functrans.jit(functrans.grad(f))(F32(2.0), F32(1.0))
    assert float(gw) == pytest.approx(np.sin(1.0))


def _closing_over(kind, w):
    """A custom function of x that closes over w; its rule scales the derivative by 10."""
    if kind == "jvp":
        f = custom_jvp(lambda x: w * jnp.sin(x))
        f.defjvp(lambda p, t: (f(p[0]), 10 * w * jnp.cos(p[0]) * t[0]))
    else:
        f = custom_vjp(lambda x: w * jnp.sin(x))
        f.defvjp(lambda x: (f(x), x), lambda x, g: (10 * w * jnp.cos(x) * g,))
    return f


@pytest.mark.parametrize("kind", ["jvp", "vjp"])
def test_custom_functions_closing_over_values_of_the_vmap_that_batches_them(kind):
    ws, xs = jnp.array([1.0, 2.0]), jnp.array([0.5, 1.0])
    out = functrans.vmap(lambda w, x: _closing_over(kind, w)(x))(ws, xs)
    np.testing.assert_allclose(out, ws * np.sin(xs), rtol=1e-6)
    want = 10 * ws * np.cos(xs)
    g = functrans.vmap(functrans.grad(lambda w, x: _closing_over(kind, w)(x), argnums=1))(ws, xs)
    np.testing.assert_allclose(g, want, rtol=1e-6)
    g = functrans.jit(functrans.vmap(functrans.grad(
        lambda w, x: _closing_over(kind, w)(x), argnums=1)))(ws, xs)
    np.testing.assert_allclose(g, want, rtol=1e-6)
    if kind == "jvp":  # forward rule under vmap under grad: the rule runs inside the vmap
        g = functrans.grad(lambda x: functrans.vmap(
            lambda w, v: _closing_over(kind, w)(v))(ws, x).sum())(xs)
        np.testing.assert_allclose(g, want, rtol=1e-6)
    else:  # bwd runs after the vmap ended, so its closure leaked, as in JAX
        with pytest.raises(UnexpectedTracerError):
            functrans.grad(lambda x: functrans.vmap(
                lambda w, v: _closing_over(kind, w)(v))(ws, x).sum())(xs)


@pytest.mark.parametrize("kind", ["jvp", "vjp"])
def test_custom_functions_closing_over_vmap_values_under_an_outer_jit(kind):
    # jit below the vmap: the custom call is staged by the jit, above which the function
    # runs again batched; the vmap's values it closes over stay per-example values
    ws, xs = jnp.array([1.0, 2.0]), jnp.array([0.5, 1.0])
    out = functrans.jit(functrans.vmap(lambda w, x: _closing_over(kind, w)(x)))(ws, xs)
    np.testing.assert_allclose(out, ws * np.sin(xs), rtol=1e-6)
    second = functrans.grad(functrans.grad(lambda w, x: _closing_over(kind, w)(x), argnums=1),
                            argnums=1)
    np.testing.assert_allclose(functrans.jit(functrans.vmap(second))(ws, xs),
                               -10 * ws * np.sin(xs), rtol=1e-6)


def test_collectives_inside_custom_functions_see_the_vmap_axis():
    @custom_jvp
    def share(x):
        return x / lax.psum(x, "i")

    share.defjvp(lambda p, t: (share(p[0]), t[0] / lax.psum(p[0], "i")))

    @custom_vjp
    def share_v(x):
        return x / lax.psum(x, "i")

    share_v.defvjp(lambda x: (share_v(x), None), lambda _, g: (g,))
    xs = jnp.array([1.0, 3.0])
    for f in (share, share_v):
        np.testing.assert_allclose(functrans.vmap(f, axis_name="i")(xs), [0.25, 0.75])
    g = functrans.grad(lambda x: functrans.vmap(share, axis_name="i")(x)[0])(xs)
    np.testing.assert_allclose(g, [0.25, 0.0])


def test_differentiating_a_staged_custom_function_through_a_closed_over_value_is_an_error():
    def make(kind, w):
        if kind == "vjp":
            f = custom_vjp(lambda x: w * jnp.sin(x))
            f.defvjp(lambda x: (f(x), x), lambda x, g: (jnp.cos(x) * g,))
        else:
            f = custom_jvp(lambda x: w * jnp.sin(x))
            f.defjvp(lambda p, t: (f(p[0]), jnp.cos(p[0]) * t[0]))
        return f

    for kind in ("vjp", "jvp"):
        # checkpoint stages the function, so the custom call closes over the traced w
        outer = functrans.checkpoint(lambda w: make(kind, w)(1.0))  # noqa: B023
        with pytest.raises(TypeError, match=f"custom_{kind} function with respect to a closed-over"):
            functrans.grad(outer)(2.0)
        # closing over a value that is not differentiated is fine
        inner = functrans.checkpoint(lambda x: make(kind, 2.0)(x))  # noqa: B023
        assert float(functrans.grad(inner)(0.0)) == pytest.approx(1.0 if kind == "vjp" else 1.0)


# =============================================================================================
# Rules that return the wrong things
# =============================================================================================


def test_custom_jvp_rule_output_errors():
    @custom_jvp
    def f(x):
        return {"a": x, "b": 2 * x}

    f.defjvp(lambda p, t: ({"a": p[0], "b": 2 * p[0]}, (t[0], t[0])))
    with pytest.raises(TypeError, match="pytree structures must be equal"):
        functrans.jvp(f, (1.0,), (1.0,))
    f.defjvp(lambda p, t: ({"a": p[0], "b": 2 * p[0]}, {"a": jnp.ones(3), "b": t[0]}))
    with pytest.raises(TypeError, match=r"Expected float32\[\] \(tangent type of float32\[\]\) "
                                        r"but got float32\[3\]"):
        functrans.jvp(f, (1.0,), (1.0,))
    f.defjvp(lambda p, t: p[0])
    with pytest.raises(TypeError, match="must return a pair"):
        functrans.jvp(f, (1.0,), (1.0,))
    # once the function itself has run (staged under jit), the rule's primal output must match
    f.defjvp(lambda p, t: ((p[0], 2 * p[0]), (t[0], t[0])))
    with pytest.raises(TypeError, match="pytree structure differs from the output of f"):
        functrans.jvp(functrans.jit(f), (1.0,), (1.0,))

    @custom_jvp
    def g(x):
        return x

    g.defjvp(lambda p, t: (p[0], t[0].astype(np.float16)))
    with pytest.raises(TypeError, match=r"tangent of type float16\[\] for a primal output of type "
                                        r"float32\[\]"):
        functrans.jvp(g, (F32(1.0),), (F32(1.0),))
    with pytest.raises(AttributeError, match="No JVP defined for custom_jvp function <lambda>"):
        custom_jvp(lambda x: x)(1.0)


def test_custom_vjp_rule_output_errors():
    @custom_vjp
    def f(x, d):
        return x * d["a"] + d["b"]

    def grad_with(bwd, fwd=lambda x, d: (f(x, d), None)):
        f.defvjp(fwd, bwd)
        return functrans.grad(f, argnums=(0, 1))(2.0, {"a": 1.0, "b": 2.0})

    with pytest.raises(TypeError, match=r"one cotangent per differentiable argument.*"
                                        r"returned structure PyTreeDef\(\(\*,\)\)"):
        grad_with(lambda _, g: (g,))
    with pytest.raises(TypeError, match="returned structure PyTreeDef"):
        grad_with(lambda _, g: g)  # not a tuple
    with pytest.raises(TypeError, match=r"'c'"):
        grad_with(lambda _, g: (g, {"a": g, "c": g}))
    with pytest.raises(ValueError, match=r"at output\[1\]\['a'\].*float32\[3\].*shapes do not match"):
        grad_with(lambda _, g: (g, {"a": jnp.ones(3), "b": g}))
    with pytest.raises(TypeError, match="must return a pair"):
        grad_with(lambda _, g: (g, None), fwd=lambda x, d: (f(x, d), None, 3))
    # under jit the function is staged first, so fwd's primal output is checked against it
    f.defvjp(lambda x, d: ((x, x), None), lambda _, g: (g, None))
    with pytest.raises(TypeError, match="fwd rule <lambda> for function f returned a primal"):
        functrans.grad(functrans.jit(lambda x: f(x, {"a": 1.0, "b": 2.0})))(1.0)
    with pytest.raises(AttributeError, match="No VJP defined for custom_vjp function <lambda>"):
        custom_vjp(lambda x: x)(1.0)


# =============================================================================================
# custom_gradient
# =============================================================================================


def test_custom_gradient_uses_the_given_gradient():
    @functrans.custom_gradient
    def f(x):
        return x ** 2, lambda g: (g * x,)  # "wrong" on purpose: d/dx is x, not 2x

    assert float(f(3.0)) == 9.0
    assert float(functrans.grad(f)(3.0)) == 3.0
    # under jit, vmap and with the function jitted inside
    np.testing.assert_allclose(functrans.jit(functrans.grad(f))(F32(2.0)), 2.0)
    np.testing.assert_allclose(functrans.vmap(functrans.grad(f))(jnp.arange(3.0)), [0, 1, 2])
    np.testing.assert_allclose(functrans.grad(functrans.jit(f))(F32(5.0)), 5.0)


def test_custom_gradient_two_arguments_none_and_bare_cotangent():
    @functrans.custom_gradient
    def f(x, y):
        return x * y, lambda g: (g * y, g * x)

    gx, gy = functrans.grad(f, argnums=(0, 1))(3.0, 4.0)
    assert (float(gx), float(gy)) == (4.0, 3.0)

    @functrans.custom_gradient
    def h(x, y):
        return x * y, lambda g: (g * y, None)  # None: zero cotangent for y

    gx, gy = functrans.grad(h, argnums=(0, 1))(3.0, 4.0)
    assert (float(gx), float(gy)) == (4.0, 0.0)

    @functrans.custom_gradient
    def k(x):
        return 2.0 * x, lambda g: 10.0 * g  # one argument: a bare cotangent is accepted

    assert float(functrans.grad(k)(1.0)) == 10.0


def test_custom_gradient_closes_over_forward_values_and_pytrees(x64):
    # softplus with its gradient written from the forward pass's exp(x)
    @functrans.custom_gradient
    def softplus(x):
        e = jnp.exp(x)
        return jnp.log1p(e), lambda g: (g * e / (1.0 + e),)

    x = np.linspace(-2.0, 2.0, 5)
    np.testing.assert_allclose(softplus(x), np.log1p(np.exp(x)), rtol=1e-12)
    check_grads(lambda v: jnp.sum(softplus(v)), (x,), order=1, modes=("rev",))
    np.testing.assert_allclose(functrans.grad(lambda v: jnp.sum(softplus(v)))(x),
                               1.0 / (1.0 + np.exp(-x)), rtol=1e-12)

    @functrans.custom_gradient
    def scale(p):
        return {"y": p["a"] * p["b"]}, lambda g: ({"a": g["y"] * p["b"], "b": g["y"] * p["a"]},)

    g = functrans.grad(lambda p: scale(p)["y"])({"a": 2.0, "b": 5.0})
    assert (float(g["a"]), float(g["b"])) == (5.0, 2.0)


def test_custom_gradient_keyword_arguments():
    @functrans.custom_gradient
    def f(x, scale=3.0):
        return x * scale, lambda g: (g * 100.0, g * 0.0)

    assert float(f(2.0, scale=4.0)) == 8.0
    assert float(functrans.grad(lambda x: f(x, scale=4.0))(2.0)) == 100.0
