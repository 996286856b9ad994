"""Top-level names that close gaps with the ``jax`` namespace: custom_gradient,
custom_batching.custom_vmap / sequential_vmap, float0, debug_nans / debug_infs, errors,
typing, version, live_arrays, host/process queries, Device, dlpack, copy_to_host_async.
Each is checked against NumPy, hand-computed values or JAX's documented semantics."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans.custom_batching import custom_vmap, sequential_vmap
from functrans.test_util import check_grads

F32 = np.float32


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


# =============================================================================================
# debug_nans / debug_infs
# =============================================================================================


def test_debug_nans_config_with_jax_prefix_raises_and_is_restored():
    assert functrans.config.jax_debug_nans is False
    functrans.config.update("jax_debug_nans", True)
    try:
        assert functrans.config.jax_debug_nans is True and functrans.debug_nans.value
        f = lambda x: jnp.log(x) * 2.0  # noqa: E731
        with pytest.raises(FloatingPointError, match="log"):
            functrans.jit(f)(F32(-1.0))
        with pytest.raises(FloatingPointError, match="log"):
            f(F32(-1.0))
        # nested jit: the innermost primitive is named
        with pytest.raises(FloatingPointError, match="'log'"):
            functrans.jit(lambda x: functrans.jit(f)(x) + 1.0)(F32(-1.0))
        # no NaN, no error; an inf is not a NaN
        np.testing.assert_allclose(functrans.jit(f)(F32(1.0)), 0.0)
        assert np.isinf(functrans.jit(lambda x: 1.0 / x)(F32(0.0)))
    finally:
        functrans.config.update("jax_debug_nans", False)
    assert functrans.config.jax_debug_nans is False
    assert np.isnan(functrans.jit(lambda x: jnp.log(x))(F32(-1.0)))


def test_debug_nans_and_infs_context_managers():
    assert not functrans.debug_infs.value
    with functrans.debug_infs(True):
        assert functrans.config.jax_debug_infs
        with pytest.raises(FloatingPointError, match="inf.*'div'"):
            functrans.jit(lambda x: 1.0 / x)(F32(0.0))
        with pytest.raises(FloatingPointError, match="inf"):
            jnp.exp(F32(1000.0))
        np.testing.assert_allclose(jnp.exp(F32(0.0)), 1.0)
    assert not functrans.config.jax_debug_infs
    with functrans.debug_nans(True):
        with pytest.raises(FloatingPointError, match="NaN"):
            jnp.sqrt(F32(-1.0))
    assert not functrans.config.jax_debug_nans
    assert np.isnan(jnp.sqrt(F32(-1.0)))


# =============================================================================================
# small names: float0, errors, typing, version, Device, processes, arrays, dlpack
# =============================================================================================


def test_float0_is_the_tangent_dtype_of_integers():
    assert functrans.float0 == np.dtype([("float0", np.void, 0)])
    _, t = functrans.jvp(lambda x: x * 2, (np.arange(3),), (np.zeros(3, functrans.float0),))
    assert t.dtype == functrans.float0


def test_errors_module_catches_what_functrans_raises():
    from functrans import errors
    with pytest.raises(errors.ConcretizationTypeError):
        functrans.jit(lambda x: 1.0 if x > 0 else 0.0)(F32(1.0))
    with pytest.raises(errors.TracerBoolConversionError):
        functrans.jit(lambda x: 1.0 if x > 0 else 0.0)(F32(1.0))
    with pytest.raises(errors.ConcretizationTypeError) as raised:  # not a bool() conversion
        functrans.jit(lambda x: float(x))(F32(1.0))
    assert not isinstance(raised.value, errors.TracerBoolConversionError)
    assert issubclass(errors.UnexpectedTracerError, TypeError)
    with pytest.raises(errors.TracerArrayConversionError):
        functrans.jit(lambda x: np.asarray(x))(F32(1.0))
    with pytest.raises(errors.TracerIntegerConversionError):
        functrans.jit(lambda x: [1, 2, 3][x])(np.int32(1))
    leaked = []
    functrans.jit(lambda x: leaked.append(x) or x)(F32(1.0))
    with pytest.raises(errors.UnexpectedTracerError):
        leaked[0] + 1
    assert errors.JaxRuntimeError is RuntimeError
    assert issubclass(errors.JaxprTypeError, TypeError)


def test_typing_version_device_and_processes():
    from functrans.typing import ArrayLike, DTypeLike
    import typing
    assert functrans.Array in typing.get_args(ArrayLike)
    assert np.ndarray in typing.get_args(ArrayLike) and float in typing.get_args(ArrayLike)
    assert np.dtype in typing.get_args(DTypeLike) and str in typing.get_args(DTypeLike)
    assert functrans.version.__version__ == functrans.__version__
    assert ".".join(map(str, functrans.__version_info__)) == functrans.__version__
    assert isinstance(functrans.devices()[0], functrans.Device)
    assert jnp.ones(2).device in functrans.devices()
    assert functrans.process_indices() == list(range(functrans.process_count()))
    with pytest.warns(UserWarning, match="renamed"):
        assert functrans.host_count() == functrans.process_count()
    with pytest.warns(UserWarning, match="renamed"):
        assert functrans.host_id() == functrans.process_index()
    with pytest.warns(UserWarning, match="renamed"):
        assert functrans.host_ids() == functrans.process_indices()


def test_live_arrays_sees_new_arrays_and_forgets_freed_ones():
    def count_marked():
        return sum(1 for a in functrans.live_arrays() if a.shape == (7, 13))

    assert count_marked() == 0
    x = jnp.zeros((7, 13)) + 1.0
    assert any(a is x for a in functrans.live_arrays())
    assert count_marked() == 1
    assert all(isinstance(a, functrans.Array) for a in functrans.live_arrays("cpu"))
    del x
    gc.collect()
    assert count_marked() == 0


def test_copy_to_host_async_returns_its_argument_and_calls_leaf_methods():
    class Leaf:
        copied = 0

        def copy_to_host_async(self):
            Leaf.copied += 1

    tree = {"a": jnp.ones(2), "b": [Leaf(), 3]}
    assert functrans.copy_to_host_async(tree) is tree
    assert Leaf.copied == 1


def test_dlpack_round_trip_copy_and_dtypes():
    from functrans import dlpack
    x = np.arange(4.0, dtype=F32)
    y = dlpack.from_dlpack(x)
    assert isinstance(y, functrans.Array)
    x[0] = 100.0  # copied by default: the functrans array does not change
    np.testing.assert_array_equal(y, [0, 1, 2, 3])
    shared = dlpack.from_dlpack(x, copy=False)
    assert np.shares_memory(np.asarray(shared), x)
    # 64-bit data becomes 32-bit without x64, as everywhere in functrans
    assert dlpack.from_dlpack(np.arange(3, dtype=np.int64)).dtype == np.int32
    with pytest.raises(ValueError, match="copy"):
        dlpack.from_dlpack(np.arange(3.0), copy=False)
    # a functrans array exports through __dlpack__, and imports back
    z = jnp.arange(3.0)
    np.testing.assert_array_equal(np.from_dlpack(z), [0, 1, 2])
    np.testing.assert_array_equal(dlpack.from_dlpack(z), [0, 1, 2])
    assert dlpack.is_supported_dtype(np.float32) and dlpack.is_supported_dtype(np.bool_)
    assert not dlpack.is_supported_dtype(np.dtype("U2"))
    with pytest.raises(TypeError, match="__dlpack__"):
        dlpack.from_dlpack([1, 2])
    assert functrans.dlpack is dlpack and functrans.typing is not None
