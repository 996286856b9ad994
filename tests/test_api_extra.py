"""pure_callback, jacobian, device_get, default_backend, named_scope/named_call,
ensure_compile_time_eval, linear_transpose, closure_convert, clear_caches, typeof and
print_environment_info, each checked against its JAX semantics."""
from __future__ import annotations

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import lax
from functrans._api_extra import (clear_caches, closure_convert, default_backend, device_get,
                                  ensure_compile_time_eval, jacobian, linear_transpose,
                                  named_call, named_scope, print_environment_info,
                                  pure_callback, typeof)
from functrans.core import ShapedArray, Tracer

Spec = functrans.ShapeDtypeStruct
F32 = np.float32


def _counted(fun):
    """``fun`` with a list ``.calls`` of the argument shapes of each call."""
    def wrapper(*args, **kwargs):
        wrapper.calls.append(tuple(np.shape(a) for a in args))
        return fun(*args, **kwargs)
    wrapper.calls = []
    return wrapper


# =============================================================================================
# pure_callback
# =============================================================================================


def test_pure_callback_eager_pytrees_and_kwargs():
    def host(xs, scale=None):
        a, b = xs["a"], xs["b"]
        assert isinstance(a, np.ndarray) and isinstance(scale, np.ndarray)
        return (np.cumsum(a) * scale).astype(F32), {"n": np.array(a.size + b.size, np.int32)}

    spec = (Spec((3,), F32), {"n": Spec((), np.int32)})
    out, aux = pure_callback(host, spec, {"a": jnp.arange(3.0), "b": jnp.ones(2)}, scale=2.0)
    np.testing.assert_allclose(out, [0.0, 2.0, 6.0])
    assert out.dtype == F32 and int(aux["n"]) == 5


def test_pure_callback_result_spec_may_be_arrays():
    out = pure_callback(lambda x: x * 2, jnp.zeros(2), jnp.ones(2))
    np.testing.assert_allclose(out, [2.0, 2.0])
    # only leaves are checked: a list for a tuple spec is fine, as in JAX
    a, b = pure_callback(lambda x: [x, x + 1], (Spec((2,), F32), Spec((2,), F32)), jnp.ones(2))
    np.testing.assert_allclose(b, [2.0, 2.0])


def test_pure_callback_jit_runs_at_run_time_not_trace_time():
    host = _counted(lambda x: np.sin(x))
    f = functrans.jit(lambda x: pure_callback(host, Spec((4,), F32), x) * 2.0)
    functrans.make_jaxpr(f)(jnp.zeros(4))
    assert host.calls == []  # staging does not call it
    x = jnp.arange(4.0)
    np.testing.assert_allclose(f(x), 2 * np.sin(np.arange(4.0)), rtol=1e-6)
    np.testing.assert_allclose(f(x + 1), 2 * np.sin(np.arange(4.0) + 1), rtol=1e-6)
    f(x)
    assert len(host.calls) == 3  # once per run, from the cached executable
    assert f._cache_size() == 1


def test_pure_callback_in_staged_program_is_one_equation():
    jaxpr = functrans.make_jaxpr(lambda x: pure_callback(np.cos, Spec((2,), F32), x))(jnp.ones(2))
    names = [e.primitive.name for e in jaxpr.eqns]
    assert names == ["pure_callback"]


def test_pure_callback_callback_gets_read_only_arrays():
    x = jnp.ones(3)

    def mutate(a):
        a += 1
        return a

    with pytest.raises(ValueError, match="read-only"):
        pure_callback(mutate, Spec((3,), F32), x)
    np.testing.assert_array_equal(x, np.ones(3))


@pytest.mark.parametrize("jitted", [False, True])
@pytest.mark.parametrize("bad, message", [
    (lambda x: x[:2], r"shape \(2,\).*\(3,\)"),
    (lambda x: x.astype(np.float64), "dtype float64.*float32"),
    (lambda x: (x, x), "returned 2 arrays"),
])
def test_pure_callback_checks_results_and_names_the_callback(jitted, bad, message):
    def my_bad_callback(x):
        return bad(x)

    f = lambda x: pure_callback(my_bad_callback, Spec((3,), F32), x)  # noqa: E731
    if jitted:
        f = functrans.jit(f)
    with pytest.raises(RuntimeError, match=message) as info:
        f(jnp.ones(3))
    assert "my_bad_callback" in str(info.value)


def test_pure_callback_argument_and_option_errors():
    with pytest.raises(TypeError, match="arrays"):
        pure_callback(lambda x: x, Spec((), F32), "text")
    with pytest.raises(ValueError, match="vmap_method"):
        pure_callback(lambda x: x, Spec((), F32), 1.0, vmap_method="loop")
    with pytest.raises(TypeError, match="shape"):
        pure_callback(lambda x: x, object(), 1.0)


def _add_rows(x, y):
    return (x + y).astype(F32)


@pytest.mark.parametrize("jitted", [False, True])
def test_vmap_sequential_calls_once_per_example(jitted):
    host = _counted(_add_rows)

    def f(x, y):
        return pure_callback(host, Spec((3,), F32), x, y, vmap_method="sequential")

    g = functrans.vmap(f, in_axes=(1, None))
    if jitted:
        g = functrans.jit(g)
    x = np.arange(15.0, dtype=F32).reshape(3, 5)
    y = np.array([10.0, 20.0, 30.0], F32)
    out = g(x, y)
    np.testing.assert_allclose(out, x.T + y)
    assert host.calls == [((3,), (3,))] * 5


@pytest.mark.parametrize("jitted", [False, True])
def test_vmap_expand_dims_calls_once_with_leading_one(jitted):
    host = _counted(lambda x, y: (x + y).astype(F32))

    def f(x, y):
        return pure_callback(host, Spec((3,), F32), x, y, vmap_method="expand_dims")

    g = functrans.vmap(f, in_axes=(1, None))
    if jitted:
        g = functrans.jit(g)
    x = np.arange(15.0, dtype=F32).reshape(3, 5)
    y = np.array([10.0, 20.0, 30.0], F32)
    np.testing.assert_allclose(g(x, y), x.T + y)
    assert host.calls == [((5, 3), (1, 3))]  # batch moved to the front


@pytest.mark.parametrize("jitted", [False, True])
def test_vmap_broadcast_all_broadcasts_unbatched(jitted):
    host = _counted(lambda x, y: (x * y).astype(F32))

    def f(x, y):
        return pure_callback(host, Spec((3,), F32), x, y, vmap_method="broadcast_all")

    g = functrans.vmap(f, in_axes=(0, None))
    if jitted:
        g = functrans.jit(g)
    x = np.arange(12.0, dtype=F32).reshape(4, 3)
    y = np.array([1.0, 2.0, 3.0], F32)
    np.testing.assert_allclose(g(x, y), x * y)
    assert host.calls == [((4, 3), (4, 3))]


def test_vmap_nested_sequential_and_expand_dims():
    seq = _counted(_add_rows)
    exp = _counted(_add_rows)
    x = np.arange(24.0, dtype=F32).reshape(2, 4, 3)
    y = np.ones(3, F32)
    f_seq = lambda a: pure_callback(seq, Spec((3,), F32), a, y, vmap_method="sequential")  # noqa
    f_exp = lambda a: pure_callback(exp, Spec((3,), F32), a, y, vmap_method="expand_dims")  # noqa
    np.testing.assert_allclose(functrans.vmap(functrans.vmap(f_seq))(x), x + 1)
    np.testing.assert_allclose(functrans.vmap(functrans.vmap(f_exp))(x), x + 1)
    assert len(seq.calls) == 8 and seq.calls[0] == ((3,), (3,))
    assert exp.calls == [((2, 4, 3), (1, 1, 3))]


def test_vmap_without_method_raises():
    f = lambda x: pure_callback(np.sin, Spec((), F32), x)  # noqa: E731
    with pytest.raises(NotImplementedError, match="vmap_method"):
        functrans.vmap(f)(jnp.ones(3))


def test_vmap_sequential_empty_batch():
    host = _counted(np.sin)
    f = lambda x: pure_callback(host, Spec((2,), F32), x, vmap_method="sequential")  # noqa
    out = functrans.vmap(f)(jnp.ones((0, 2)))
    assert out.shape == (0, 2) and host.calls == []


@pytest.mark.parametrize("jitted", [False, True])
def test_pure_callback_in_scan_and_while_bodies(jitted):
    host = _counted(lambda c, x: (c * 2 + x).astype(F32))

    def scanned(xs):
        def body(c, x):
            c = pure_callback(host, Spec((), F32), c, x)
            return c, c
        return lax.scan(body, jnp.float32(1.0), xs)

    def looped(n):
        def body(state):
            i, v = state
            return i + 1, pure_callback(host, Spec((), F32), v, jnp.float32(1.0))
        return lax.while_loop(lambda s: s[0] < n, body, (0, jnp.float32(0.0)))[1]

    if jitted:
        scanned, looped = functrans.jit(scanned), functrans.jit(looped)
    xs = np.array([1.0, 2.0, 3.0], F32)
    final, ys = scanned(xs)
    expected, c = [], 1.0
    for x in xs:
        c = 2 * c + x
        expected.append(c)
    np.testing.assert_allclose(ys, expected)
    assert float(final) == expected[-1]
    assert len(host.calls) == 3
    assert float(looped(4)) == 15.0  # v -> 2v + 1, four times
    assert len(host.calls) == 7


def test_pure_callback_is_not_differentiable():
    f = lambda x: pure_callback(np.sin, Spec((), F32), x)  # noqa: E731
    with pytest.raises(ValueError, match="custom_jvp"):
        functrans.grad(f)(1.0)
    with pytest.raises(ValueError, match="custom_jvp"):
        functrans.jvp(f, (1.0,), (1.0,))
    # a callback on values that are not differentiated is fine inside grad
    g = lambda x: x * pure_callback(np.cos, Spec((), F32), jnp.float32(0.0))  # noqa: E731
    assert float(functrans.grad(g)(3.0)) == 1.0


def test_pure_callback_differentiable_through_custom_jvp_and_custom_vjp():
    def host_sin(x):
        return pure_callback(lambda a: np.sin(a).astype(a.dtype), Spec(x.shape, x.dtype), x,
                             vmap_method="expand_dims")

    @functrans.custom_jvp
    def sin_j(x):
        return host_sin(x)

    @sin_j.defjvp
    def _(primals, tangents):
        (x,), (t,) = primals, tangents
        return sin_j(x), jnp.cos(x) * t

    @functrans.custom_vjp
    def sin_v(x):
        return host_sin(x)

    sin_v.defvjp(lambda x: (sin_v(x), x), lambda x, g: (jnp.cos(x) * g,))

    xs = np.linspace(-1.0, 1.0, 5).astype(F32)
    for fn in (sin_j, sin_v):
        grads = functrans.vmap(functrans.grad(fn))(xs)
        np.testing.assert_allclose(grads, np.cos(xs), rtol=1e-6)
        np.testing.assert_allclose(functrans.jit(functrans.grad(lambda x: jnp.sum(fn(x))))(xs),
                                   np.cos(xs), rtol=1e-6)


# =============================================================================================
# The smaller functions
# =============================================================================================


def test_jacobian_is_reverse_mode_jacobian():
    assert jacobian is functrans.jacrev
    a = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], F32)
    x = np.array([0.5, -1.0], F32)
    jac = jacobian(lambda v: jnp.tanh(a @ v))(x)
    expected = (1 - np.tanh(a @ x) ** 2)[:, None] * a
    np.testing.assert_allclose(jac, expected, rtol=1e-5)


def test_device_get_returns_numpy_pytree():
    sharded = functrans.device_put_replicated(np.arange(3.0, dtype=F32),
                                              functrans.local_devices())
    tree = {"a": jnp.arange(4.0), "b": (sharded, 7, "label"), "c": np.ones(2)}
    out = device_get(tree)
    assert type(out["a"]) is np.ndarray and out["a"].dtype == F32
    np.testing.assert_array_equal(out["a"], np.arange(4.0))
    assert type(out["b"][0]) is np.ndarray
    assert out["b"][0].shape == (functrans.local_device_count(), 3)
    assert out["b"][1:] == (7, "label")
    assert out["c"] is tree["c"]
    with pytest.raises(ValueError):
        out["a"][0] = 5.0  # the array's own buffer is not handed out writable
    assert float(tree["a"][0]) == 0.0


def test_default_backend():
    from functrans import _backends
    assert default_backend() == _backends.default_platform()
    assert default_backend() in ("cpu", "gpu")
    functrans.config.update("default_backend", "cpu")
    assert default_backend() == "cpu"


def test_named_scope_and_named_call_under_transforms():
    def layer(x):
        with named_scope("dense"):
            return jnp.sin(x) * 2.0

    f = named_call(layer, name="block")
    assert f.__name__ == "layer"
    assert float(functrans.jit(f)(0.5)) == pytest.approx(2 * np.sin(0.5), rel=1e-6)
    assert float(functrans.grad(f)(0.5)) == pytest.approx(2 * np.cos(0.5), rel=1e-6)
    np.testing.assert_allclose(functrans.vmap(named_call(layer))(jnp.zeros(3)), np.zeros(3))
    with pytest.raises(TypeError, match="string"):
        with named_scope(3):
            pass


def test_ensure_compile_time_eval_makes_constants_concrete():
    seen = {}

    @functrans.jit
    def f(x):
        with ensure_compile_time_eval():
            table = jnp.cumsum(jnp.arange(5.0))   # no traced inputs: computed now
            seen["table"] = table
            seen["traced"] = jnp.sin(x)            # traced input: still staged
            if jnp.max(table) > 5:                 # concrete, so Python control flow works
                scale = 2.0
            else:
                scale = 3.0
        return x * table * scale

    x = np.ones(5, F32)
    np.testing.assert_allclose(f(x), 2.0 * np.cumsum(np.arange(5.0)))
    assert not isinstance(seen["table"], Tracer)
    assert isinstance(seen["traced"], Tracer)
    jaxpr = functrans.make_jaxpr(f.__wrapped__)(x)
    names = [e.primitive.name for e in jaxpr.eqns]
    assert "cumsum" not in " ".join(names) and "iota" not in names and len(jaxpr.eqns) <= 4


def test_ensure_compile_time_eval_restores_staging():
    @functrans.jit
    def f(x):
        try:
            with ensure_compile_time_eval():
                raise KeyError("boom")
        except KeyError:
            pass
        y = jnp.ones(3)  # staged again after the block
        assert isinstance(y, Tracer)
        return x + y

    np.testing.assert_allclose(f(np.ones(3, F32)), [2.0, 2.0, 2.0])
    with ensure_compile_time_eval():  # at top level it changes nothing
        assert float(jnp.sum(jnp.ones(3))) == 3.0


def test_linear_transpose_matches_vjp():
    a = np.array([[1.0, 2.0, 0.5], [3.0, -1.0, 2.0]], F32)

    def f(p):
        return {"y": a @ p["u"] + 2.0 * p["v"], "s": jnp.sum(p["u"]) * 3.0}

    primals = {"u": np.ones(3, F32), "v": np.zeros(2, F32)}
    ct = {"y": np.array([1.0, -2.0], F32), "s": np.float32(0.5)}
    (got,) = linear_transpose(f, primals)(ct)
    _, f_vjp = functrans.vjp(f, primals)
    (expected,) = f_vjp(ct)
    for k in ("u", "v"):
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-6)
    # shapes alone suffice, and the transpose works under jit
    f_t = linear_transpose(f, {"u": Spec((3,), F32), "v": Spec((2,), F32)})
    (got_jit,) = functrans.jit(f_t)(ct)
    np.testing.assert_allclose(got_jit["u"], expected["u"], rtol=1e-6)


def test_linear_transpose_zero_cotangent_inputs_and_errors():
    f_t = linear_transpose(lambda x, y: 2.0 * x, np.ones(2, F32), np.ones(3, F32))
    gx, gy = f_t(np.array([1.0, 2.0], F32))
    np.testing.assert_allclose(gx, [2.0, 4.0])
    np.testing.assert_allclose(gy, np.zeros(3))
    with pytest.raises(TypeError, match="cotangent"):
        f_t(np.ones(3, F32))
    with pytest.raises(TypeError, match="floating-point"):
        linear_transpose(lambda i: i * 2, np.ones(2, np.int32))


def test_closure_convert_hoists_closed_over_tracers():
    def outer(w, b):
        f = lambda x: jnp.sin(w * x) + b  # noqa: E731
        f_conv, consts = closure_convert(f, 1.0)
        assert len(consts) == 2 and all(isinstance(c, Tracer) for c in consts)
        return f_conv(2.0, *consts)

    gw, gb = functrans.grad(outer, argnums=(0, 1))(0.3, 1.0)
    assert float(gw) == pytest.approx(2.0 * np.cos(0.6), rel=1e-6)
    assert float(gb) == pytest.approx(1.0)
    # concrete closed-over values stay inside the converted function
    f_conv, consts = closure_convert(lambda x: x * np.float32(3.0) + jnp.ones(2), np.ones(2, F32))
    assert consts == []
    np.testing.assert_allclose(f_conv(np.ones(2, F32)), [4.0, 4.0])
    with pytest.raises(TypeError, match="structure"):
        f_conv((np.ones(2, F32),))


def test_closure_convert_inside_custom_vjp():
    """The pattern of JAX's docs: a custom_vjp function that takes a closure, converted so
    the backward pass also gives cotangents for the closed-over values."""
    from functools import partial

    @partial(functrans.custom_vjp, nondiff_argnums=(0,))
    def apply(f, x, *consts):
        return f(x, *consts)

    def apply_fwd(f, x, *consts):
        return f(x, *consts), (x, consts)

    def apply_bwd(f, res, g):
        x, consts = res
        _, f_vjp = functrans.vjp(f, x, *consts)
        return f_vjp(g)

    apply.defvjp(apply_fwd, apply_bwd)

    def loss(w, x):
        f = lambda v: jnp.tanh(w @ v)  # noqa: E731 (closes over w)
        f_conv, consts = closure_convert(f, x)
        return jnp.sum(apply(f_conv, x, *consts))

    def direct(w, x):
        return jnp.sum(jnp.tanh(w @ x))

    w = np.array([[0.5, -1.0], [2.0, 0.25]], F32)
    x = np.array([0.3, -0.7], F32)
    got = functrans.grad(loss, argnums=(0, 1))(w, x)
    want = functrans.grad(direct, argnums=(0, 1))(w, x)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-5)
    got_jit = functrans.jit(functrans.grad(loss))(w, x)
    np.testing.assert_allclose(got_jit, want[0], rtol=1e-5)


def test_clear_caches_retraces_and_recompiles():
    traces = []

    @functrans.jit
    def f(x):
        traces.append(1)
        return x * 2.0

    f(jnp.ones(2))
    f(jnp.ones(2))
    assert len(traces) == 1 and f._cache_size() == 1
    from functrans import _jit
    assert len(_jit._executables) > 0
    clear_caches()
    assert f._cache_size() == 0 and len(_jit._executables) == 0
    np.testing.assert_allclose(f(jnp.ones(2)), [2.0, 2.0])
    assert len(traces) == 2


def test_typeof():
    assert typeof(1.0) == ShapedArray((), F32, weak_type=True)
    assert typeof(jnp.ones((2, 3), jnp.int32)) == ShapedArray((2, 3), np.int32)
    assert typeof(np.zeros(4, np.float32)) == ShapedArray((4,), F32)
    seen = []
    functrans.jit(lambda x: seen.append(typeof(x)) or x)(jnp.ones(5))
    assert seen == [ShapedArray((5,), F32)]


def test_print_environment_info(capsys):
    print_environment_info()
    printed = capsys.readouterr().out
    assert "functrans:" in printed and "numpy:" in printed and "backends:" in printed
    assert functrans.__version__ in printed
    text = print_environment_info(return_string=True)
    assert text == printed.rstrip("\n")
