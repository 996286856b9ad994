"""Named rematerialization (functrans.ad_checkpoint): checkpoint_name, every policy of
checkpoint_policies, and print_saved_residuals. Each policy is checked three ways: the values
reverse mode keeps (the residual inputs of the linear program, and print_saved_residuals'
report of them, in JAX's format), the recomputation in the backward pass, and gradients equal
to those of the plain function, eagerly and under jit, vmap and scan."""
from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import functrans
import functrans.numpy as jnp
from functrans import lax
from functrans.ad_checkpoint import (Offloadable, Recompute, Saveable, checkpoint,
                                     checkpoint_name, checkpoint_policies, print_saved_residuals,
                                     saved_residuals)
from functrans.interpreters.inline import inline_calls

cp = checkpoint_policies
F32 = np.float32


def model(x, w, wb):
    a = checkpoint_name(jnp.sin(x), "a")
    h = checkpoint_name(jnp.cos(a @ w), "h")
    hb = jnp.einsum("bi,bij->bj", h, wb)
    return jnp.sum(jnp.tanh(hb) * h)


X = np.linspace(0.1, 1.2, 6, dtype=F32).reshape(2, 3)
W = np.linspace(-1.0, 1.0, 12, dtype=F32).reshape(3, 4)
WB = np.linspace(-0.5, 0.5, 32, dtype=F32).reshape(2, 4, 4)
ARGS = (X, W, WB)


def _where(fun, text, line_offset=0):
    """``file:line:col (function)`` of the call expression ``text`` in ``fun``'s source, as
    print_saved_residuals writes it."""
    lines, first = inspect.getsourcelines(fun)
    for k, line in enumerate(lines):
        if text in line:
            return f"{__file__}:{first + k}:{line.index(text)} ({fun.__qualname__})"
    raise AssertionError(text)


A = ("f32[2,3]", f"named 'a' from {_where(model, 'checkpoint_name(jnp.sin')}")
H = ("f32[2,4]", f"named 'h' from {_where(model, 'checkpoint_name(jnp.cos')}")
DOT = ("f32[2,4]", f"output of dot_general from {_where(model, 'a @ w')}")
BATCHED_DOT = ("f32[2,4]", f"output of dot_general from {_where(model, 'jnp.einsum')}")
INPUTS = [("f32[2,3]", "from the argument x"), ("f32[3,4]", "from the argument w"),
          ("f32[2,4,4]", "from the argument wb")]

# policy -> the intermediates it keeps (besides the inputs), in program order
EXPECTED = {
    "nothing_saveable": (cp.nothing_saveable, []),
    "save_only_these_names(a)": (cp.save_only_these_names("a"), [A]),
    "save_only_these_names(a, h)": (cp.save_only_these_names("a", "h"), [A, H]),
    "save_any_names_but_these(a)": (cp.save_any_names_but_these("a"), [H]),
    "dots_saveable": (cp.dots_saveable, [DOT, BATCHED_DOT]),
    "checkpoint_dots": (cp.checkpoint_dots, [DOT, BATCHED_DOT]),  # an alias
    "dots_with_no_batch_dims_saveable": (cp.dots_with_no_batch_dims_saveable, [DOT]),
    "checkpoint_dots_with_no_batch_dims": (cp.checkpoint_dots_with_no_batch_dims, [DOT]),
    "save_from_both_policies": (cp.save_from_both_policies(cp.dots_with_no_batch_dims_saveable,
                                                           cp.save_only_these_names("h")),
                                [DOT, H]),
    "save_and_offload_only_these_names": (cp.save_and_offload_only_these_names(
        names_which_can_be_saved=["h"], names_which_can_be_offloaded=["a"],
        offload_src="device", offload_dst="pinned_host"), [A, H]),
    "offload_dot_with_no_batch_dims": (cp.offload_dot_with_no_batch_dims("device",
                                                                         "unpinned_host"), [DOT]),
}


def _report(f, *args):
    return [(aval.str_short(short_dtypes=True), text) for aval, text in saved_residuals(f, *args)]


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_policy_keeps_exactly_what_it_allows(name):
    policy, kept = EXPECTED[name]
    assert _report(checkpoint(model, policy=policy), *ARGS) == INPUTS + kept


def test_everything_saveable_keeps_what_the_plain_function_keeps():
    plain = _report(model, *ARGS)
    assert len(plain) > len(INPUTS) + 4  # many intermediates, not just the policy's picks
    assert _report(checkpoint(model, policy=cp.everything_saveable), *ARGS) == plain


def test_save_anything_except_these_names_keeps_everything_as_in_jax():
    # the named value is also the output of cos, which this policy keeps
    got = _report(checkpoint(model, policy=cp.save_anything_except_these_names("h")), *ARGS)
    assert got == _report(model, *ARGS)


def test_print_saved_residuals_text(capsys):
    print_saved_residuals(checkpoint(model, policy=cp.save_only_these_names("a", "h")), *ARGS)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{aval} {text}" for aval, text in INPUTS + [A, H]]
    assert lines[0] == "f32[2,3] from the argument x"

    def g(d, *rest, scale):
        return jnp.sin(d["p"] * rest[0] * scale)

    print_saved_residuals(checkpoint(g), {"p": X}, X, scale=2.0)
    assert capsys.readouterr().out.splitlines() == [
        "f32[2,3] from the argument d['p']", "f32[2,3] from the argument rest[0]",
        "f32[] from the argument scale"]


def test_residuals_name_the_qualified_function(capsys):
    def compose(n):
        def chained(x):
            for _ in range(n):
                x = jnp.sin(x)
            return x
        return chained

    print_saved_residuals(compose(2), 3.0)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert all(line.startswith("f32[] output of cos from ") for line in lines)
    assert all(line.endswith(" (test_residuals_name_the_qualified_function.<locals>."
                             "compose.<locals>.chained)") for line in lines)


def test_the_backward_pass_recomputes_what_is_not_kept():
    def counts(policy):
        f = checkpoint(model, policy=policy)
        jaxpr = functrans.make_jaxpr(functrans.grad(f, argnums=(0, 1, 2)))(*ARGS)
        names = [e.primitive.name for e in jaxpr.eqns]
        return names.count("sin"), names.count("cos"), names.count("dot_general")

    # everything kept: sin(x), cos(a @ w) and the two products once each, plus the
    # derivatives' cos(x) and sin(a @ w) and the four products of the backward pass
    assert counts(cp.everything_saveable) == (2, 2, 6)
    # nothing kept: sin(x), the products and cos(a @ w) run again in the backward pass
    assert counts(cp.nothing_saveable) == (3, 3, 8)
    # "a" kept: sin(x) is not recomputed, the rest is
    assert counts(cp.save_only_these_names("a")) == (2, 3, 8)
    # the products kept: they are not recomputed, sin(x) and cos(a @ w) are
    assert counts(cp.dots_saveable) == (3, 3, 6)


def test_linearize_residuals_are_the_kept_values():
    f = checkpoint(model, policy=cp.save_only_these_names("a"))
    jaxpr = functrans.make_jaxpr(lambda *a: functrans.linearize(f, *a)[1](*a))(*ARGS).jaxpr
    (remat_linear,) = [e for e in jaxpr.eqns if e.primitive.name == "remat_linear"]
    residuals = remat_linear.invars[:remat_linear.params["num_res"]]
    producers = {id(v): e.primitive.name for e in jaxpr.eqns for v in e.outvars}
    # x, w and wb (each read by the backward pass) and the value named "a"
    assert residuals[:3] == jaxpr.invars[:3]
    assert [producers.get(id(v)) for v in residuals[3:]] == ["name"]
    # and the values: the forward pass's sin(x)
    _, f_jvp = functrans.linearize(f, *ARGS)
    t = [np.ones_like(a) for a in ARGS]
    np.testing.assert_allclose(f_jvp(*t), functrans.jvp(model, ARGS, tuple(t))[1], rtol=1e-5)


# (checkpoint_dots and checkpoint_dots_with_no_batch_dims are the same objects as the
# dots_* policies, checked above)
@pytest.mark.parametrize("name", [n for n in EXPECTED if not n.startswith("checkpoint_dots")] +
                         ["everything_saveable", "save_anything_except_these_names"])
def test_each_policy_gives_the_plain_gradient_under_jit_vmap_and_scan(name):
    policy = {"everything_saveable": cp.everything_saveable,
              "save_anything_except_these_names": cp.save_anything_except_these_names("a"),
              }.get(name) or EXPECTED[name][0]
    grad_all = lambda f: functrans.grad(f, argnums=(0, 1, 2))  # noqa: E731
    f = checkpoint(model, policy=policy)
    want = grad_all(model)(*ARGS)

    def close(got, expected=want):
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=2e-5, atol=1e-6)

    close(grad_all(f)(*ARGS))
    close(functrans.jit(grad_all(f))(*ARGS))
    xs = np.stack([X, 2 * X])
    batched = functrans.vmap(grad_all(f), in_axes=(0, None, None))(xs, W, WB)
    close([b[1] for b in batched], grad_all(model)(2 * X, W, WB))

    def scanned(g):
        def loss(x, w, wb):
            def body(c, x_t):
                return c + g(x_t, w, wb), None
            return lax.scan(body, 0.0, jnp.stack([x, 2 * x]))[0]
        return loss

    close(grad_all(scanned(f))(*ARGS), grad_all(scanned(model))(*ARGS))
    # second order through the checkpoint
    hess = functrans.grad(lambda x: functrans.grad(f)(x, W, WB).sum())(X)
    np.testing.assert_allclose(hess, functrans.grad(
        lambda x: functrans.grad(model)(x, W, WB).sum())(X), rtol=1e-4, atol=1e-5)


@given(st.lists(st.integers(1, 3), min_size=1, max_size=2), st.sampled_from(sorted(EXPECTED)),
       st.integers(0, 2**31 - 1))
def test_checkpointed_gradients_for_any_shape(shape, name, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(F32)

    def f(v):
        a = checkpoint_name(jnp.sin(v), "a")
        h = checkpoint_name(a * jnp.exp(v), "h")
        return jnp.sum(jnp.cos(h) * a)

    got = functrans.grad(checkpoint(f, policy=EXPECTED[name][0]))(x)
    np.testing.assert_allclose(got, functrans.grad(f)(x), rtol=1e-5, atol=1e-6)


def test_checkpoint_name_is_the_identity_to_every_transform_and_the_compiler():
    tree = {"u": X, "v": (W,)}
    named = checkpoint_name(tree, "t")
    np.testing.assert_array_equal(named["u"], X)
    np.testing.assert_array_equal(named["v"][0], W)
    jaxpr = functrans.make_jaxpr(lambda x: checkpoint_name(x, "q") * 2)(X)
    assert jaxpr.eqns[0].primitive.name == "name" and jaxpr.eqns[0].params == {"name": "q"}
    g = functrans.grad(lambda x: jnp.sum(checkpoint_name(jnp.sin(x), "s")))(X)
    np.testing.assert_allclose(g, np.cos(X), rtol=1e-6)
    np.testing.assert_allclose(functrans.vmap(lambda x: checkpoint_name(x * 2, "d"))(X), 2 * X)
    np.testing.assert_allclose(functrans.jit(lambda x: checkpoint_name(x + 1, "e"))(X), X + 1)

    # compilers never see it, also inside the body of a loop
    def loop(x):
        return lax.scan(lambda c, x_t: (c + checkpoint_name(x_t, "r"), None), 0.0, x)[0]

    inlined = inline_calls(functrans.make_jaxpr(loop)(X[0]))
    body = inlined.eqns[-1].params["jaxpr"]
    assert all(e.primitive.name != "name" for e in body.eqns)
    np.testing.assert_allclose(functrans.jit(loop)(X[0]), X[0].sum(), rtol=1e-6)


def test_policies_see_names_inside_a_nested_jit():
    def f(x):
        inner = functrans.jit(lambda y: jnp.sin(checkpoint_name(jnp.sin(y), "a")))
        return jnp.sum(inner(x))

    where = _where(f, "checkpoint_name(jnp.sin(y)")
    where = where.replace(".f)", ".f.<locals>.<lambda>)")
    report = _report(checkpoint(f, policy=cp.save_only_these_names("a")), X)
    assert report == [("f32[2,3]", "from the argument x"), ("f32[2,3]", f"named 'a' from {where}")]
    # a policy that keeps nothing inside leaves the call closed
    assert _report(checkpoint(f), X) == [("f32[2,3]", "from the argument x")]
    np.testing.assert_allclose(functrans.grad(checkpoint(f, policy=cp.save_only_these_names("a")))(X),
                               functrans.grad(f)(X), rtol=1e-6)


def test_policy_answers_and_policy_errors():
    def answering(value):
        return checkpoint(lambda x: jnp.sin(jnp.sin(x)), policy=lambda *a, **k: value)

    x = F32(0.5)
    want = functrans.grad(lambda v: jnp.sin(jnp.sin(v)))(x)
    for value in (True, False, Saveable, Recompute, Offloadable("device", "pinned_host")):
        np.testing.assert_allclose(functrans.grad(answering(value))(x), want, rtol=1e-6)
    with pytest.raises(TypeError, match="must return a bool.*'yes'"):
        functrans.grad(answering("yes"))(x)
    with pytest.raises(TypeError, match=r"Offloadable\(src=..., dst=...\)"):
        functrans.grad(answering(Offloadable))(x)
    with pytest.raises(ValueError, match="'tape'"):
        functrans.grad(answering(Offloadable("device", "tape")))(x)
    with pytest.raises(ValueError, match="offload_src must be 'device'"):
        cp.save_and_offload_only_these_names(names_which_can_be_saved=[],
                                             names_which_can_be_offloaded=["a"],
                                             offload_src="pinned_host", offload_dst="device")
    with pytest.raises(ValueError, match="both saved and offloaded.*'a'"):
        cp.save_and_offload_only_these_names(names_which_can_be_saved=["a"],
                                             names_which_can_be_offloaded=["a", "b"],
                                             offload_src="device", offload_dst="pinned_host")
    mixed = cp.save_from_both_policies(cp.dots_saveable, lambda *a, **k: Saveable)
    with pytest.raises(ValueError, match="answer with a bool"):
        functrans.grad(checkpoint(lambda v: jnp.sin(v), policy=mixed))(x)


def test_checkpoint_arguments():
    def branchy(x, mode, *, power):
        return jnp.sin(x) ** power if mode == "sin" else jnp.cos(x) ** power

    f = checkpoint(branchy, static_argnums=(1,), static_argnames=("power",))
    assert float(functrans.grad(f)(0.0, "sin", power=1)) == pytest.approx(1.0)
    assert float(functrans.grad(checkpoint(branchy, static_argnums=-1,
                                           static_argnames="power"))(0.0, "cos", power=2)) == 0.0
    with pytest.raises(ValueError, match="static_argnums"):
        checkpoint(branchy, static_argnums=(3,))(0.0, "sin", power=1)
    with pytest.raises(TypeError, match="static_argnums"):
        checkpoint(branchy, static_argnums=[1])(0.0, "sin", power=1)
    with pytest.raises(NotImplementedError, match="static_argnums"):
        checkpoint(branchy, concrete=True)
    with pytest.raises(TypeError, match="prevent_cse"):
        checkpoint(branchy, prevent_cse="yes")
    per_arg = checkpoint(lambda x, y: jnp.sin(x) * y, prevent_cse=(True, False))
    assert float(functrans.grad(per_arg)(0.0, 2.0)) == pytest.approx(2.0)
    assert functrans.ad_checkpoint.remat is functrans.remat
