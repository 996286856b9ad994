"""pure_callback: eager and staged calls, result checks, every vmap_method, inside loops,
and derivatives through custom_jvp / custom_vjp, each checked against its JAX semantics."""


from __future__ import annotations

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import lax
from functrans._callbacks import pure_callback

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
