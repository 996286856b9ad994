"""Running JAX libraries on functrans: the ``import jax`` alias, and the surface of
``jax.extend``, ``jax.interpreters`` and ``jax.experimental`` those libraries build on."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import _as_jax
from functrans.extend import core as jex_core
from functrans.experimental import checkify
from functrans.interpreters import ad, batching, mlir


@pytest.fixture
def as_jax():
    had = {name: mod for name, mod in sys.modules.items()
           if name.split(".")[0] in ("jax", "jaxlib")}
    if any(not _as_jax._is_ours(mod) for mod in had.values()):
        pytest.skip("the real jax is imported in this process")
    functrans.install_as_jax()
    try:
        yield
    finally:
        functrans.uninstall_as_jax()


def test_import_jax_resolves_to_functrans_modules(as_jax):
    import jax
    import jax.numpy
    import jax.extend.core
    from jax import lax
    from jax._src import traceback_util
    from jax.experimental import checkify as jax_checkify
    import jaxlib
    assert jax.numpy is functrans.numpy and lax is functrans.lax
    assert jax.extend.core is jex_core and jax_checkify is checkify
    assert traceback_util is functrans._traceback_util
    assert jax.__version__ == "0.10.2" and jax.__version_info__ == (0, 10, 2)
    assert jaxlib.__version__ == "0.10.2"
    assert jax.jit is functrans.jit
    # the shared module keeps its own spec
    assert functrans.numpy.__spec__.name == "functrans.numpy"
    with pytest.raises(ModuleNotFoundError, match="no counterpart"):
        import jax.no_such_module  # noqa: F401


def test_alias_is_reversible(as_jax):
    import jax  # noqa: F401
    functrans.uninstall_as_jax()
    assert not _as_jax.is_installed() and "jax" not in sys.modules
    functrans.install_as_jax()
    assert _as_jax.is_installed()


def test_alias_refuses_when_the_real_jax_is_imported(monkeypatch):
    import types
    monkeypatch.setitem(sys.modules, "jax", types.ModuleType("jax"))
    with pytest.raises(RuntimeError, match="real 'jax' is already imported"):
        functrans.install_as_jax()
    assert not _as_jax.is_installed()


def test_run_command_runs_a_jax_script(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import sys
        import jax, jax.numpy as jnp
        print(jax.__version__, float(jax.grad(lambda x: jnp.sin(x) * 2)(0.0)), sys.argv[1])
    """))
    out = subprocess.run([sys.executable, "-m", "functrans.run", str(script), "arg"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0.10.2", "2.0", "arg"]


# ---- jax.extend: a primitive defined as JAX libraries define them ----------------------------

def _make_scaled_square():
    """``scaled_square(x, scale) = scale * x**2`` with JAX-style rules."""
    p = jex_core.Primitive("scaled_square_test")
    p.def_impl(lambda x, *, scale: scale * x * x)
    p.def_abstract_eval(lambda x, *, scale: jex_core.ShapedArray(x.shape, x.dtype))

    def jvp(primals, tangents, *, scale):
        (x,), (t,) = primals, tangents
        return p.bind(x, scale=scale), 2 * scale * x * ad.instantiate_zeros(t)

    calls = []

    def batch(args, dims, *, scale):
        calls.append(dims)
        return p.bind(args[0], scale=scale), dims[0]

    ad.primitive_jvps[p] = jvp
    batching.primitive_batchers[p] = batch
    mlir.register_lowering(p, mlir.lower_fun(lambda x, *, scale: scale * x * x,
                                             multiple_results=False))
    return p, calls


def test_extend_primitive_jits_grads_and_vmaps():
    p, batch_calls = _make_scaled_square()
    f = lambda x: p.bind(x, scale=3.0)  # noqa: E731
    x = jnp.arange(4.0)
    np.testing.assert_allclose(f(x), 3 * np.arange(4.0) ** 2)
    np.testing.assert_allclose(functrans.jit(f)(x), 3 * np.arange(4.0) ** 2)
    np.testing.assert_allclose(functrans.grad(lambda v: f(v).sum())(x), 6 * np.arange(4.0))
    np.testing.assert_allclose(functrans.jit(functrans.grad(lambda v: f(v).sum()))(x),
                               6 * np.arange(4.0))
    np.testing.assert_allclose(functrans.vmap(f)(x.reshape(2, 2)),
                               3 * np.arange(4.0).reshape(2, 2) ** 2)
    assert batch_calls == [[0]]
    assert p in ad.primitive_jvps and ad.primitive_jvps[p] is p.jvp


def test_extend_linear_primitive_transposes():
    p = jex_core.Primitive("triple_test")
    p.def_impl(lambda x: 3 * x)
    p.def_abstract_eval(lambda x: x)
    ad.primitive_jvps[p] = lambda primals, tangents: (p.bind(*primals), p.bind(*tangents))
    ad.primitive_transposes[p] = lambda ct, x: [3 * ct]
    np.testing.assert_allclose(functrans.grad(lambda x: p.bind(x).sum())(jnp.ones(3)),
                               np.full(3, 3.0))


def test_axis_batcher_convention():
    p = jex_core.Primitive("axis_size_test")
    p.def_impl(lambda x: x)
    p.def_abstract_eval(lambda x: x)
    seen = []

    def rule(axis_size, axis_name, trace_type, args, dims):
        seen.append((axis_size, axis_name))
        return args[0] * axis_size, dims[0]

    batching.axis_primitive_batchers[p] = rule
    out = functrans.vmap(lambda x: p.bind(x), axis_name="i")(jnp.ones(5))
    np.testing.assert_allclose(out, np.full(5, 5.0))
    assert seen == [(5, "i")]


def test_mlir_only_lowering_raises_when_run():
    p = jex_core.Primitive("mlir_only_test")
    p.def_abstract_eval(lambda x: x)
    mlir.register_lowering(p, lambda ctx, x: x)
    with pytest.raises(NotImplementedError, match="MLIR"):
        p.bind(jnp.ones(2))


def test_linear_util_and_api_util_flatten():
    from functrans import api_util, tree_util
    from functrans.extend import linear_util as lu
    leaves, tree = tree_util.tree_flatten(((1.0, {"b": 2.0}),))
    flat, out_tree = api_util.flatten_fun_nokwargs(
        lu.wrap_init(lambda a: (a[0] * a[1]["b"], a[0])), tree)
    assert flat.call_wrapped(*leaves) == [2.0, 1.0]
    assert out_tree().num_leaves == 2


def test_partial_eval_nounits_uses_jax_pairs():
    from functrans.interpreters import partial_eval as pe
    pvals = [pe.PartialVal.known(jnp.float32(2.0)),
             pe.PartialVal.unknown(jex_core.ShapedArray((), np.float32))]
    _, out, _ = pe.trace_to_jaxpr_nounits(lambda a, b: [a * 3.0, a * b], pvals)
    (known_aval, known), (unknown_aval, unknown) = out
    assert known_aval is None and float(known) == 6.0
    assert unknown is None and unknown_aval.shape == ()


def test_opaque_trace_state_tells_transforms_apart():
    outer = jex_core.get_opaque_trace_state()
    inside = []
    functrans.jit(lambda x: inside.append(jex_core.get_opaque_trace_state()) or x)(1.0)
    assert outer == jex_core.get_opaque_trace_state()
    assert inside[0] != outer


# ---- checkify -----------------------------------------------------------------------------------

def _positive_log(x):
    checkify.check(x > 0, "x must be positive, got {}", x)
    return jnp.log(x)


def test_checkify_user_check_under_jit_vmap_and_grad():
    err, y = functrans.jit(checkify.checkify(_positive_log))(-1.0)
    assert err.get() == "x must be positive, got -1.0 (`check` failed)"
    assert isinstance(err.get_exception(), checkify.FailedCheckError)
    with pytest.raises(checkify.JaxRuntimeError, match="positive"):
        err.throw()
    err, y = checkify.checkify(_positive_log)(2.0)
    assert err.get() is None and float(y) == pytest.approx(np.log(2.0))
    err, _ = functrans.vmap(checkify.checkify(_positive_log))(jnp.array([1.0, -2.0, 3.0]))
    assert err.get() == "at mapped index 1: x must be positive, got -2.0 (`check` failed)"
    err, _ = checkify.checkify(functrans.vmap(_positive_log))(jnp.array([1.0, -2.0, -3.0]))
    assert err.get() == "x must be positive, got -2.0 (`check` failed)"
    g = functrans.grad(lambda x: checkify.checkify(_positive_log)(x)[1])(2.0)
    assert float(g) == 0.5


def test_check_outside_checkify():
    with pytest.raises(checkify.JaxRuntimeError, match="positive"):
        _positive_log(-1.0)
    with pytest.raises(ValueError, match="not functionalized"):
        functrans.jit(_positive_log)(1.0)


def test_checkify_automatic_checks():
    err, _ = checkify.checkify(lambda x: x / x, errors=checkify.nan_checks)(jnp.zeros(2))
    assert err.get() == "nan generated by primitive: div."
    err, _ = checkify.checkify(lambda x: x / x, errors=checkify.nan_checks)(jnp.ones(2))
    assert err.get() is None
    err, _ = checkify.checkify(lambda x, d: x // d, errors=checkify.div_checks)(
        jnp.arange(3), jnp.array([1, 0, 1]))
    assert err.get() == "division by zero"
    err, _ = checkify.checkify(lambda x, i: x[i], errors=checkify.index_checks)(
        jnp.zeros(3), 5)
    assert "out-of-bounds indexing" in err.get() and "index 5" in err.get()


def test_checkify_inside_cond_and_check_error():
    def f(x):
        return functrans.lax.cond(x > 0, lambda v: _positive_log(v - 10.0),
                                  lambda v: v, x)
    assert checkify.checkify(f)(20.0)[0].get() is None
    assert checkify.checkify(f)(5.0)[0].get() == "x must be positive, got -5.0 (`check` failed)"
    inner = checkify.checkify(_positive_log)

    def outer(x):
        err, y = inner(x)
        checkify.check_error(err)
        return y
    assert checkify.checkify(outer)(-3.0)[0].get() == \
        "x must be positive, got -3.0 (`check` failed)"
    # format arguments may be pytrees, and keywords
    err, _ = checkify.checkify(lambda x: checkify.check(x > 0, "{a} {b[0]}", a=x, b=(x,)))(-1.0)
    assert err.get() == "-1.0 -1.0 (`check` failed)"


# ---- other surfaces ----------------------------------------------------------------------------

def test_io_callback_runs_in_order_under_jit():
    from functrans.experimental import io_callback
    seen = []
    spec = functrans.ShapeDtypeStruct((), np.float32)
    f = functrans.jit(lambda x: io_callback(lambda v: seen.append(float(v)) or v, spec, x))
    assert float(f(1.5)) == 1.5 and seen == [1.5]


def test_vectorize_signature():
    dot = jnp.vectorize(jnp.dot, signature="(n),(n)->()")
    np.testing.assert_allclose(dot(jnp.ones((2, 3)), jnp.arange(3.0)), [3.0, 3.0])
    pair = jnp.vectorize(lambda a: (a.sum(), a * 2), signature="(n)->(),(n)")
    s, d = pair(jnp.ones((4, 2)))
    assert s.shape == (4,) and d.shape == (4, 2)
    with pytest.raises(ValueError, match="inconsistent size"):
        dot(jnp.ones(3), jnp.ones(4))


def test_refs_are_not_supported():
    with pytest.raises(NotImplementedError, match="mutable array references"):
        functrans.new_ref(jnp.ones(2))
    assert not isinstance(jnp.ones(2), functrans.Ref)


def test_pswapaxes_is_all_to_all_on_the_same_axis():
    x = jnp.arange(4.0).reshape(2, 2)
    out = functrans.vmap(lambda v: functrans.lax.pswapaxes(v, "i", 0), axis_name="i")(x)
    np.testing.assert_array_equal(out, np.arange(4.0).reshape(2, 2).T)


def test_abstract_mesh():
    from functrans.sharding import AbstractMesh
    mesh = AbstractMesh((2, 4), ("data", "model"))
    assert dict(mesh.shape) == {"data": 2, "model": 4} and mesh.size == 8
    assert mesh == AbstractMesh((2, 4), ("data", "model")) and hash(mesh) == hash(
        AbstractMesh((2, 4), ("data", "model")))


@pytest.mark.parametrize("module_name", [
    "functrans.experimental.checkify", "functrans.extend.core", "functrans.api_util"])
def test_docstring_examples(module_name):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(module_name),
                             optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


# ---- what a JAX user sees as an array -----------------------------------------------------------

def test_every_array_value_is_an_array_instance():
    from functrans import random
    seen = []
    record = lambda x: seen.append(isinstance(x, functrans.Array)) or x  # noqa: E731
    functrans.jit(record)(1.0)
    functrans.grad(record)(1.0)
    functrans.vmap(record)(jnp.ones(2))
    functrans.jvp(record, (1.0,), (1.0,))
    functrans.lax.scan(lambda c, x: (record(c), x), 0.0, jnp.ones(2))
    assert seen and all(seen)
    assert isinstance(random.key(0), functrans.Array)
    assert isinstance(jnp.ones(2), functrans.Array)
    assert not isinstance(np.ones(2), functrans.Array) and not isinstance(1.0, functrans.Array)
    # a key is still not a number
    with pytest.raises(TypeError, match="key"):
        jnp.add(random.key(0), 1)


def test_like_functions_take_anything_with_shape_and_dtype():
    spec = functrans.ShapeDtypeStruct((2, 3), jnp.bfloat16)
    for out in (jnp.zeros_like(spec), jnp.ones_like(spec), jnp.full_like(spec, 2),
                jnp.empty_like(spec)):
        assert out.shape == (2, 3) and out.dtype == jnp.bfloat16
    assert jnp.zeros_like(spec, dtype=jnp.int32).dtype == jnp.int32
    assert jnp.zeros_like(jex_core.ShapedArray((4,), np.float32)).shape == (4,)


def test_jnp_ufuncs_are_ufunc_objects():
    for name in ("add", "multiply", "subtract", "maximum", "minimum", "logical_and",
                 "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
                 "logaddexp", "logaddexp2", "negative"):
        assert isinstance(getattr(jnp, name), jnp.ufunc), name
    assert int(jnp.add.reduce(jnp.arange(5))) == 10
    np.testing.assert_array_equal(jnp.add.accumulate(jnp.arange(4)), [0, 1, 3, 6])
    np.testing.assert_array_equal(jnp.multiply.outer(jnp.arange(2), jnp.arange(3)),
                                  [[0, 0, 0], [0, 1, 2]])
    np.testing.assert_array_equal(jnp.add.at(jnp.zeros(3), jnp.array([0, 0]), 1.0,
                                             inplace=False), [2.0, 0.0, 0.0])
    assert float(functrans.jit(jnp.add)(1.0, 2.0)) == 3.0


def test_complex_comparisons_are_lexicographic():
    a = jnp.array([1 + 2j, 1 + 1j, 2 + 0j])
    b = jnp.array([1 + 1j, 1 + 2j, 1 + 5j])
    np.testing.assert_array_equal(jnp.greater(a, b), [True, False, True])
    np.testing.assert_array_equal(a < b, [False, True, False])
    np.testing.assert_array_equal(functrans.jit(jnp.less_equal)(a, a), [True] * 3)
    np.testing.assert_array_equal(jnp.greater_equal(a, b), [True, False, True])


def test_parse_flags_with_absl():
    before = functrans.config.read("enable_x64")
    try:
        functrans.config.parse_flags_with_absl(["--jax_enable_x64", "--unrelated=1"])
        assert functrans.config.jax_enable_x64 is True
        functrans.config.parse_flags_with_absl(["--nojax_enable_x64"])
        assert functrans.config.jax_enable_x64 is False
    finally:
        functrans.config.update("enable_x64", before)


def test_abstract_values_have_a_sharding():
    from functrans.sharding import NamedSharding, PartitionSpec
    sharding = functrans.typeof(jnp.ones((2, 3))).sharding
    assert isinstance(sharding, NamedSharding) and sharding.spec == PartitionSpec(None, None)


def test_experimental_modules():
    from functrans import P, lax
    from functrans.experimental import mesh_utils, multihost_utils, pjit, shard_map
    assert mesh_utils.create_device_mesh((1,)).shape == (1,)
    assert mesh_utils.create_hybrid_device_mesh((1, 1), (1, 1)).shape == (1, 1)
    with pytest.raises(ValueError, match="must equal"):
        mesh_utils.create_device_mesh((3,))
    assert float(pjit.pjit(lambda x: x * 2)(1.0)) == 2.0
    mesh = functrans.make_mesh((1,), ("i",))
    out = shard_map.shard_map(lambda x: lax.psum(x, "i"), mesh, P("i"), P())(np.ones(2))
    np.testing.assert_array_equal(out, np.ones(2))
    np.testing.assert_array_equal(multihost_utils.process_allgather(np.ones(2)), [[1.0, 1.0]])
    np.testing.assert_array_equal(multihost_utils.broadcast_one_to_all(np.ones(2)), [1.0, 1.0])
    multihost_utils.sync_global_devices("here")
    multihost_utils.assert_equal(np.arange(3))


def test_odeint_matches_the_solution_and_its_derivatives():
    from functrans.experimental.ode import odeint
    ts = jnp.linspace(0.0, 2.0, 5)
    decay = lambda y, t, k: -k * y  # noqa: E731
    np.testing.assert_allclose(odeint(decay, 1.0, ts, 0.5), np.exp(-0.5 * np.asarray(ts)),
                               rtol=1e-5)
    dk = functrans.grad(lambda k: odeint(decay, 1.0, ts, k)[-1])(0.5)
    np.testing.assert_allclose(dk, -2 * np.exp(-1.0), rtol=1e-5)
    dy0 = functrans.grad(lambda y0: odeint(decay, y0, ts, 0.5)[-1])(1.0)
    np.testing.assert_allclose(dy0, np.exp(-1.0), rtol=1e-5)
    rotate = lambda y, t: {"a": y["b"], "b": -y["a"]}  # noqa: E731
    ys = functrans.jit(lambda y0: odeint(rotate, y0, ts))({"a": 1.0, "b": 0.0})
    np.testing.assert_allclose(ys["a"], np.cos(np.asarray(ts)), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="odeint \\*args must be arrays"):
        odeint(decay, 1.0, ts, "k")


def test_products_take_out_sharding():
    from functrans import P, lax
    from functrans.sharding import NamedSharding
    mesh = functrans.make_mesh((1,), ("i",))
    s = NamedSharding(mesh, P("i"))
    a, v = jnp.ones((2, 2)), jnp.arange(2.0)
    np.testing.assert_array_equal(jnp.dot(a, v, out_sharding=s), [1.0, 1.0])
    np.testing.assert_array_equal(jnp.matmul(a, v, out_sharding=s), [1.0, 1.0])
    np.testing.assert_array_equal(jnp.einsum("ij,j->i", a, v, out_sharding=s), [1.0, 1.0])
    np.testing.assert_array_equal(
        lax.dot_general(a, v, (((1,), (0,)), ((), ())), out_sharding=s), [1.0, 1.0])
    out = functrans.jit(lambda x: lax.dot(x, x, out_sharding=NamedSharding(mesh, P())))(a)
    np.testing.assert_array_equal(out, 2 * np.ones((2, 2)))


def test_monitoring_auto_axes_and_the_jax_core_attribute(as_jax):
    from functrans import monitoring
    from functrans.sharding import NamedSharding, P, auto_axes
    seen = []
    monitoring.register_event_duration_secs_listener(lambda e, d, **kw: seen.append((e, d)))
    try:
        monitoring.record_event_duration_secs("/x", 1.5)
    finally:
        monitoring.clear_event_listeners()
    assert seen == [("/x", 1.5)]
    mesh = functrans.make_mesh((1,), ("i",))
    doubled = auto_axes(lambda x: x * 2, out_sharding=NamedSharding(mesh, P()))(jnp.ones(2))
    np.testing.assert_array_equal(doubled, [2.0, 2.0])
    import jax
    assert jax.core is jex_core and jax.monitoring is monitoring


def test_jit_results_report_the_out_shardings_asked_for():
    from functrans.sharding import NamedSharding, P
    mesh = functrans.make_mesh((1,), ("i",))
    for spec in (P("i"), P(), P(None)):
        sharding = NamedSharding(mesh, spec)
        out = functrans.jit(lambda x: x * 2, out_shardings=sharding)(jnp.arange(4.0))
        assert out.sharding == sharding
        np.testing.assert_array_equal(out, [0.0, 2.0, 4.0, 6.0])


def test_xla_flags_device_count_and_backend_state(as_jax, monkeypatch):
    import inspect
    import jax
    from functrans import _devices
    monkeypatch.delenv("FUNCTRANS_CPU_DEVICES", raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=3")
    previous = functrans.config._updated.copy()
    functrans.config._updated.discard("cpu_device_count")
    _devices._reset_cpu_devices()
    try:
        assert jax._src.xla_bridge._backends == {}
        assert len(functrans.devices()) == 3
        assert "cpu" in jax._src.xla_bridge._backends
    finally:
        monkeypatch.delenv("XLA_FLAGS")
        _devices._reset_cpu_devices()
        functrans.config._updated = previous
    f = functrans.jit(lambda x, y=2: x)
    assert str(inspect.signature(f, follow_wrapped=False)) == "(x, y=2)"


def test_eval_shape_takes_abstract_values_and_complex_initializers():
    out = functrans.eval_shape(lambda a, b: a @ b, jex_core.ShapedArray((2, 3), np.float32),
                               functrans.ShapeDtypeStruct((3, 4), np.float32))
    assert out.shape == (2, 4)
    from functrans import random
    for distribution in ("normal", "uniform", "truncated_normal"):
        w = functrans.nn.initializers.variance_scaling(1.0, "fan_in", distribution)(
            random.PRNGKey(0), (400, 100), jnp.complex64)
        assert w.dtype == jnp.complex64
        assert 0.7 < float(jnp.mean(jnp.abs(w) ** 2)) * 400 < 1.2
    soft = functrans.nn.softmax(jnp.array([1 + 1j, 2 + 0j]))
    np.testing.assert_allclose(complex(soft.sum()), 1.0, atol=1e-6)


def test_tree_paths_is_leaf_random_out_sharding_and_mesh_axis_queries():
    from functrans import random, tree_util
    tree = {"a": 1, "b": (2, 3)}
    leaves, _ = tree_util.tree_flatten_with_path(
        tree, is_leaf=lambda path, x: len(path) == 1 and isinstance(x, tuple),
        is_leaf_takes_path=True)
    assert [leaf for _, leaf in leaves] == [1, (2, 3)]
    assert random.bernoulli(random.key(0), 0.5, (3,), out_sharding=None).shape == (3,)
    assert random.uniform(random.key(0), (2,), out_sharding=None).shape == (2,)
    mesh = functrans.make_mesh((1,), ("i",))
    assert mesh.are_all_axes_explicit and mesh.explicit_axes == ("i",) and mesh.auto_axes == ()
    # a sharding over no mesh (an abstract value's, outside any mesh) places nothing
    x = jnp.ones(2)
    np.testing.assert_array_equal(
        functrans.jit(lambda v: functrans.lax.with_sharding_constraint(
            v, functrans.typeof(v).sharding))(x), x)


@pytest.fixture
def two_devices():
    previous = functrans.config.read("cpu_device_count")
    functrans.config.update("cpu_device_count", 2)
    yield functrans.make_mesh((2,), ("i",))
    functrans.config.update("cpu_device_count", previous)


def test_shard_map_varying_types_and_pcast(two_devices):
    from functrans import P, lax
    mesh, x = two_devices, jnp.arange(4.0)
    # a P() output that varies along the mesh axis is refused at trace time
    with pytest.raises(ValueError, match="out_specs"):
        functrans.shard_map(lambda v, w: v * w, mesh=mesh, in_specs=(P("i"), P()),
                            out_specs=P())(x, 2.0)
    varying = functrans.shard_map(lambda w: lax.pcast(w, "i", to="varying"), mesh=mesh,
                                  in_specs=P(), out_specs=P())
    with pytest.raises(ValueError, match="out_specs"):
        varying(1.0)
    np.testing.assert_array_equal(functrans.shard_map(
        lambda w: lax.pcast(w, "i", to="varying"), mesh=mesh, in_specs=P(), out_specs=P(),
        check_vma=False)(1.0), 1.0)
    # the gradient with respect to a replicated input is summed over the axis, once
    bodies = [(lambda v, w: v * lax.pcast(w, "i", to="varying"), P("i")),
              (lambda v, w: lax.psum((v * w).sum(), "i"), P()),
              (lambda v, w: lax.psum((v * lax.pcast(w, "i", to="varying")).sum(), "i"), P()),
              (lambda v, w: v * w, P("i"))]
    for body, out_spec in bodies:
        f = functrans.shard_map(body, mesh=mesh, in_specs=(P("i"), P()), out_specs=out_spec)
        assert float(functrans.grad(lambda w: f(x, w).sum())(2.0)) == 6.0
    with pytest.raises(NotImplementedError, match="reduced"):
        functrans.vmap(lambda v: lax.pcast(v, "j", to="reduced"), axis_name="j")(x)
    np.testing.assert_array_equal(
        functrans.vmap(lambda v: lax.pcast(v, "j", to="varying"), axis_name="j")(x), x)


def test_reshape_of_a_numpy_array_stays_numpy():
    images = np.ones((2, 4), np.uint8)
    flat = jnp.reshape(images, (8,))
    assert isinstance(flat, np.ndarray) and flat.dtype == np.uint8
    assert (jnp.reshape(images, (-1,)) / 255.0).dtype == np.float64
    assert isinstance(jnp.reshape(jnp.ones(4), (2, 2)), functrans.Array)
    assert isinstance(functrans.jit(lambda x: jnp.reshape(x, (8,)))(images), functrans.Array)


def test_jax_conventions_used_by_optax():
    from functrans import lax
    # operand=None is an operand (an empty pytree), as in JAX
    assert lax.cond(True, lambda _: 1, lambda _: 2, operand=None) == 1
    assert lax.switch(1, [lambda _: 1, lambda _: 2], operand=None) == 2
    # keyword arguments of a vmapped function are mapped along axis 0
    out = functrans.vmap(lambda x, y: x + y, in_axes=(None,))(1.0, y=jnp.arange(3.0))
    np.testing.assert_array_equal(out, [1.0, 2.0, 3.0])
    # traced values copy; an empty batch gathers nothing
    assert functrans.jit(lambda x: x.copy() * 2)(1.0) == 2.0
    empty = functrans.vmap(lambda m, i: m[i])(jnp.zeros((0, 3)), jnp.zeros(0, jnp.int32))
    assert empty.shape == (0,)


def test_small_jax_conventions_of_flax():
    from functrans import P, tree_util
    path = tree_util.tree_flatten_with_path({"params": [None, {"w": 1}]})[0][0][0]
    assert tree_util.keystr(path, simple=True, separator="/") == "params/1/w"
    assert tree_util.keystr(path) == "['params'][1]['w']"
    mesh = functrans.make_mesh((1,), ("i",))
    f = functrans.shard_map(lambda x: (x * 2, None), mesh=mesh, in_specs=P("i"),
                            out_specs=(P("i"), None))
    out, nothing = f(jnp.arange(2.0))
    assert nothing is None and out.shape == (2,)
    compiled = functrans.jit(lambda x: x + 1).lower(1.0).compile(None)
    assert float(compiled(1.0)) == 2.0
    with pytest.raises(ValueError, match="compiler_options"):
        functrans.jit(lambda x: x).lower(1.0).compile({"xla_flag": True})


def test_einsum_sublist_form():
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    np.testing.assert_allclose(jnp.einsum(a, [0, 1], b, [1, 2], [0, 2]), a @ b)
    np.testing.assert_allclose(jnp.einsum(a, [0, 1], b, [1, 2]), np.einsum(a, [0, 1], b, [1, 2]))
    np.testing.assert_allclose(jnp.einsum(a, [Ellipsis, 1], [Ellipsis]), a.sum(1))


def test_jnp_shape_functions_take_key_arrays():
    from functrans import random
    key, keys = random.key(0), random.split(random.key(1), 3)
    assert jnp.stack([key, key]).shape == (2,) and jnp.concatenate([keys, keys]).shape == (6,)
    assert jnp.broadcast_to(key, (4,)).shape == (4,) and jnp.expand_dims(key, 0).shape == (1,)
    picked = jnp.where(jnp.array([True, False, True]), keys, keys[::-1])
    assert bool(jnp.array_equal(picked[1], keys[1])) and bool(jnp.array_equal(key, key))
    assert not bool(jnp.array_equal(keys[0], keys[1]))
    assert isinstance(functrans.jit(lambda k: jnp.stack([k, k]))(key), random.PRNGKeyArray)
    with pytest.raises(TypeError, match="cannot be combined"):
        jnp.stack([key, jnp.zeros(())])


def test_shaped_array_sharding_named_sharding_update_and_cost_analysis():
    from functrans.sharding import NamedSharding, P
    mesh = functrans.make_mesh((1,), ("i",))
    s = NamedSharding(mesh, P("i"))
    aval = jex_core.ShapedArray((2,), np.float32, sharding=s)
    assert aval.sharding is s and aval.update(shape=(4,)).sharding is s
    assert aval == jex_core.ShapedArray((2,), np.float32)
    assert s.update(spec=P()) == NamedSharding(mesh, P())
    lowered = functrans.jit(lambda a, b: jnp.tanh(a @ b)).lower(jnp.ones((2, 3)),
                                                               jnp.ones((3, 4)))
    cost = lowered.cost_analysis()
    assert cost["flops"] == 2 * 2 * 4 * 3 + 8 and cost["transcendentals"] == 8
    scanned = functrans.jit(lambda x: functrans.lax.scan(
        lambda c, v: (c + v, None), 0.0, x)[0]).lower(jnp.ones(10)).cost_analysis()
    assert scanned["flops"] == 10


def test_jax_internal_pytree_registry_holds_builtin_containers(as_jax):
    from jax._src.tree_util import _registry
    assert dict in _registry and list in _registry and tuple in _registry
    assert int not in _registry and functrans.tree_util.Partial in _registry


def test_shape_dtype_struct_of_keys():
    from functrans import random
    key = random.key(0)
    struct = functrans.ShapeDtypeStruct((), key.dtype)
    assert struct.dtype == key.dtype and struct.aval.shape == ()
    assert functrans.eval_shape(lambda: random.key(0)) == struct
    assert functrans.ShapeDtypeStruct((2,), np.float32).update(shape=(3,)).shape == (3,)


def test_more_jax_names_equinox_uses():
    from functrans import _traceback_util
    aval = jex_core.ShapedArray((2,), np.int32)
    assert aval.to_tangent_aval().dtype == functrans.float0
    assert jex_core.ShapedArray((2,), np.float32).to_tangent_aval().dtype == np.float32
    with functrans.numpy_dtype_promotion("standard"):
        assert (jnp.ones(2, jnp.int32) + 1.0).dtype == jnp.float32
    with pytest.raises(NotImplementedError, match="strict"):
        with functrans.numpy_dtype_promotion("strict"):
            pass
    assert not _traceback_util.include_filename(functrans.__file__)
    assert _traceback_util.include_filename(__file__)
    x = jnp.arange(4.0)
    assert float(x.at[1].get(unique_indices=True, indices_are_sorted=True)) == 1.0
    np.testing.assert_array_equal(x.at[1].set(9.0, unique_indices=True), [0, 9, 2, 3])
    with pytest.raises(NotImplementedError, match="wrap_negative_indices"):
        x.at[-1].get(wrap_negative_indices=False)


def test_checkify_through_loops():
    from functrans import lax

    def body(c, v):
        checkify.check(c < 3, "too big {} at {}", c, v)
        return c + 1, c * 2

    err, (last, ys) = checkify.checkify(lambda x: lax.scan(body, x, jnp.arange(5.0)))(0.0)
    assert err.get() == "too big 3.0 at 3.0 (`check` failed)" and float(last) == 5.0
    assert functrans.jit(checkify.checkify(lambda x: lax.scan(body, x, jnp.arange(5.0))))(
        0.0)[0].get() == err.get()

    def while_body(c):
        checkify.check(c < 4, "while {}", c)
        return c + 1

    err, out = checkify.checkify(lambda x: lax.while_loop(lambda c: c < 10, while_body, x))(0)
    assert err.get() == "while 4 (`check` failed)" and int(out) == 10
    err, _ = checkify.checkify(lambda x: lax.fori_loop(0, 3, lambda i, c: c / (c - 1.0), x),
                               errors=checkify.float_checks)(1.0)
    assert err.get() == "division by zero"


def test_finfo_of_narrow_floats():
    assert float(jnp.finfo(jnp.float8_e4m3fn).max) == 448.0
    assert float(jnp.finfo(jnp.bfloat16).eps) == 0.0078125
    assert jnp.finfo(jnp.float32).max == np.finfo(np.float32).max


def test_key_arrays_have_at():
    from functrans import random
    keys = random.split(random.key(0), 3)
    updated = keys.at[1].set(random.key(7))
    assert bool(jnp.array_equal(updated[1], random.key(7)))
    assert bool(jnp.array_equal(updated[0], keys[0])) and keys.at[2].get().shape == ()
    with pytest.raises(TypeError, match="key arrays"):
        keys.at[0].set(1)
