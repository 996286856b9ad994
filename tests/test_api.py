"""Top-level names of functrans checked against their JAX semantics: jacobian, device_get,
default_backend, named_scope/named_call, ensure_compile_time_eval, linear_transpose,
closure_convert, clear_caches, typeof, print_environment_info, float0, errors, typing,
version, Device, host/process queries, live_arrays, copy_to_host_async and dlpack."""


from __future__ import annotations

import gc

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans._environment import (clear_caches, default_backend, device_get,
                                    print_environment_info)
from functrans._program_transforms import (closure_convert, ensure_compile_time_eval, jacobian,
                                           linear_transpose, named_call, named_scope, typeof)
from functrans.core import ShapedArray, Tracer

Spec = functrans.ShapeDtypeStruct
F32 = np.float32


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
