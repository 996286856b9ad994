"""The core: IR printing and type checking, tracing, tracer-misuse errors, Array, pytrees,
weak-type promotion, jit caching."""
from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import core, lax, tree_util
from functrans._dtypes import result_type


def test_make_jaxpr_prints_like_jax():
    text = str(functrans.make_jaxpr(lambda x, y: lax.sin(x) * y + 2.0)(
        np.ones(3, np.float32), np.ones(3, np.float32)))
    assert text.splitlines()[0] == "{ lambda ; a:f32[3] b:f32[3]. let"
    assert "c:f32[3] = sin a" in text
    assert "d:f32[3] = mul c b" in text
    assert text.rstrip().endswith(") }") and " = add " in text


def test_jaxpr_layout_follows_jax():
    def unused_cos(x):
        y = lax.sin(x)
        lax.cos(x)
        return y
    # a jaxpr that fits in 80 columns is one line; results nobody reads print as _
    assert str(functrans.make_jaxpr(unused_cos)(1.0)) == \
        "{ lambda ; a:f32[]. let b:f32[] = sin a; _:f32[] = cos a in (b,) }"
    # literals carry their type; dtypes in params are spelled out
    text = str(functrans.make_jaxpr(
        lambda x: (lax.log(x) / lax.log(2.0), x.astype(jnp.int16)))(3.0))
    assert text.splitlines() == [
        "{ lambda ; a:f32[]. let",
        "    b:f32[] = log a",
        "    c:f32[] = log 2.0:f32[]",
        "    d:f32[] = div b c",
        "    e:i16[] = convert_element_type[new_dtype=int16 weak_type=False] a",
        "  in (d, e) }"]
    # names run a..z, ba, bb, ... as JAX counts
    text = str(functrans.make_jaxpr(lambda *xs: sum(xs[1:], xs[0]))(*[1.0] * 28))
    assert "ba:f32[] bb:f32[]. let" in text and "bc:f32[] = add a b" in text
    # an equation holding jaxprs puts each param on its own line
    lines = str(functrans.make_jaxpr(
        lambda x: lax.cond(x > 0, lambda y: y, lambda y: -y, x))(1.0)).splitlines()
    cond = next(i for i, line in enumerate(lines) if "= cond[" in line)
    assert lines[cond + 1] == "      branches=("
    assert lines[cond + 2].startswith("        { lambda ; ") and \
        lines[cond + 2].endswith(" }")
    assert lines[cond + 4] == "      )" and lines[cond + 5].startswith("    ] ")


def test_closed_over_arrays_become_constvars():
    w = jnp.asarray(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    closed = functrans.make_jaxpr(lambda x: x * w)(np.ones((2, 3), np.float32))
    assert len(closed.jaxpr.constvars) == 1
    assert closed.consts[0] is w
    core.check_jaxpr(closed)


def test_check_jaxpr_catches_bad_types():
    closed = functrans.make_jaxpr(lambda x: lax.sin(x))(np.ones(3, np.float32))
    jaxpr = closed.jaxpr
    bad_out = core.Var(core.ShapedArray((4,), np.float32))
    eqn = jaxpr.eqns[0].replace(outvars=[bad_out])
    bad = core.Jaxpr(jaxpr.constvars, jaxpr.invars, [bad_out], [eqn])
    with pytest.raises(core.JaxprTypeError, match="sin"):
        core.check_jaxpr(bad)
    unbound = core.Jaxpr([], [], jaxpr.outvars, [])
    with pytest.raises(core.JaxprTypeError, match="before it is bound"):
        core.check_jaxpr(unbound)


def test_python_if_on_tracer_under_jit_names_the_fix():
    def f(x):
        if x > 0:
            return x
        return -x

    with pytest.raises(functrans.ConcretizationTypeError, match="lax.cond"):
        functrans.jit(f)(1.0)
    # eagerly and under grad the value is known, so Python control flow works
    assert f(2.0) == 2.0
    assert functrans.grad(f)(-3.0) == -1.0


def test_tracers_print_with_the_transform_that_made_them():
    seen = []

    def record(x):
        seen.append(repr(x))
        assert f"{x}" == str(x) == repr(x)
        return x.sum()

    functrans.jit(record)(1.0)
    functrans.jit(record)(jnp.ones(3))
    functrans.grad(record)(1.0)
    functrans.grad(record)(jnp.ones(2))
    functrans.vmap(record)(jnp.ones(3))
    functrans.jit(functrans.grad(record))(1.0)
    functrans.vmap(functrans.grad(record))(jnp.ones(3))
    functrans.jvp(record, (1.0,), (2.0,))
    assert seen == [
        "JitTracer(~float32[])",
        "JitTracer(float32[3])",
        "GradTracer(primal=1.0, typeof(tangent)=f32[])",
        "GradTracer(primal=[1. 1.], typeof(tangent)=f32[2])",
        "VmapTracer(aval=float32[], batched=float32[3])",
        "GradTracer(primal=JitTracer(~float32[]), typeof(tangent)=f32[])",
        "GradTracer(primal=VmapTracer(aval=float32[], batched=float32[3]), "
        "typeof(tangent)=f32[])",
        "JVPTracer(primal=1.0, tangent=2.0)",
    ]


def test_float_and_array_conversion_of_tracers_raise():
    with pytest.raises(functrans.ConcretizationTypeError, match="static_argnums"):
        functrans.jit(lambda x: float(x))(1.0)
    with pytest.raises(functrans.TracerArrayConversionError, match="functrans.numpy"):
        functrans.jit(lambda x: np.sin(np.asarray(x)))(np.ones(2, np.float32))
    with pytest.raises(functrans.TracerIntegerConversionError, match="dynamic_slice"):
        functrans.jit(lambda x, i: [1, 2, 3][i])(1.0, 1)


def test_leaked_tracer_is_reported():
    leaked = []

    def f(x):
        leaked.append(x)
        return x

    functrans.jit(f)(1.0)
    with pytest.raises(core.UnexpectedTracerError, match="leaked"):
        lax.sin(leaked[0])


def test_array_is_immutable_and_readable():
    x = jnp.asarray([1.0, 2.0])
    with pytest.raises(TypeError, match=r"\.at\[idx\]\.set"):
        x[0] = 3.0
    assert repr(x) == "Array([1., 2.], dtype=float32)"
    assert x.shape == (2,) and x.dtype == np.float32 and x.ndim == 1 and x.size == 2
    view = np.asarray(x)
    with pytest.raises(ValueError):
        view[0] = 5.0
    assert float(jnp.asarray(3.5)) == 3.5
    assert x.block_until_ready() is x
    assert x.device == functrans.devices()[0]
    np.testing.assert_array_equal(np.from_dlpack(x), [1.0, 2.0])


def test_weak_type_promotion_matches_jax():
    f32 = np.dtype(np.float32)
    assert (jnp.ones(3, np.float32) * 2.0).dtype == f32
    assert (jnp.ones(3, np.int8) + 1).dtype == np.int8
    assert (jnp.ones(3, np.int32) + 1.5).dtype == f32
    assert (jnp.ones(3, np.float16) * 2.0).dtype == np.float16
    assert result_type(np.int32, np.float32) == f32
    assert result_type(np.uint8, np.int8) == np.int16
    assert result_type(np.int32, np.uint32) == np.int32  # int64 narrowed without x64
    assert result_type(np.float16, functrans.numpy.bfloat16) == f32
    assert result_type(True, 1) == np.int32
    assert jnp.asarray(2.0).weak_type and not jnp.asarray(np.float32(2)).weak_type
    assert (jnp.asarray(2.0) * 3).weak_type


def test_x64_switch():
    assert jnp.asarray(1.0).dtype == np.float32
    functrans.config.update("enable_x64", True)
    try:
        assert jnp.asarray(1.0).dtype == np.float64
        assert jnp.asarray(np.ones(2)).dtype == np.float64
    finally:
        functrans.config.update("enable_x64", False)
    assert jnp.asarray(np.ones(2)).dtype == np.float32


def test_jit_caches_and_retraces_on_new_signatures():
    traces = []

    def f(x, n):
        traces.append(1)
        return x * n

    g = functrans.jit(f, static_argnums=1)
    g(np.ones(3, np.float32), 2)
    g(np.ones(3, np.float32), 2)
    assert len(traces) == 1
    g(np.ones(4, np.float32), 2)          # new shape
    g(np.ones(4, np.int32), 2)            # new dtype
    g(np.ones(4, np.int32), 3)            # new static value
    assert len(traces) == 4
    np.testing.assert_array_equal(g(np.ones(2, np.int32), 3), [3, 3])


def test_jit_lower_shows_ir():
    lowered = functrans.jit(lambda x: lax.exp(x) + 1.0).lower(np.ones(2, np.float32))
    text = lowered.as_text()
    assert "exp a" in text
    np.testing.assert_allclose(lowered.compile()(np.zeros(2, np.float32)), [2.0, 2.0])


def test_eval_shape_runs_nothing():
    out = functrans.eval_shape(lambda x: {"y": x * 2, "z": lax.reduce_sum(x, (0,))},
                               functrans.ShapeDtypeStruct((5, 2), np.float32))
    assert out["y"].shape == (5, 2) and out["z"].shape == (2,) and out["z"].dtype == np.float32


def test_pytrees_flatten_sorted_dicts_namedtuples_dataclasses():
    Point = collections.namedtuple("Point", "x y")

    @functrans.tree_util.register_dataclass
    @dataclasses.dataclass
    class Params:
        w: object
        b: object
        name: str = dataclasses.field(default="p", metadata={"static": True})

    tree = {"b": [1, (2, None)], "a": Point(3, 4), "c": Params(5, 6)}
    leaves, treedef = tree_util.tree_flatten(tree)
    assert leaves == [3, 4, 1, 2, 5, 6]
    rebuilt = tree_util.tree_unflatten(treedef, [x * 10 for x in leaves])
    assert rebuilt["a"] == Point(30, 40) and rebuilt["b"] == [10, (20, None)]
    assert rebuilt["c"].w == 50 and rebuilt["c"].name == "p"
    paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(tree)[0]]
    assert paths == ["['a'].x", "['a'].y", "['b'][0]", "['b'][1][0]", "['c'].w", "['c'].b"]
    assert hash(treedef) == hash(tree_util.tree_structure(tree))


def test_registering_a_node_returns_none_and_class_decorators_the_class():
    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b

    class KeyedPair(Pair):
        pass

    assert tree_util.register_pytree_node(
        Pair, lambda p: ((p.a, p.b), None), lambda _, c: Pair(*c)) is None
    assert tree_util.register_pytree_with_keys(
        KeyedPair, lambda p: (((tree_util.GetAttrKey("a"), p.a),
                               (tree_util.GetAttrKey("b"), p.b)), None),
        lambda _, c: KeyedPair(*c)) is None
    assert tree_util.tree_leaves([Pair(1, 2), KeyedPair(3, 4)]) == [1, 2, 3, 4]

    @tree_util.register_pytree_node_class
    class Node:
        def tree_flatten(self):
            return (), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls()
    assert isinstance(Node, type) and tree_util.tree_leaves(Node()) == []


def test_plain_flatten_agrees_with_the_general_walker():
    """tree_flatten/tree_leaves without is_leaf take a shortcut for lists, tuples, dicts and
    leaves; it must give the general walker's leaves and structure for every node kind."""
    Point = collections.namedtuple("Point", "x y")

    class Tup(tuple):  # a tuple subclass that is not a namedtuple: a leaf
        pass

    @functrans.tree_util.register_dataclass
    @dataclasses.dataclass
    class Params:
        w: object
        b: object

    trees = [
        None, 1, [], (), {}, [None], (1,), [1, [2, (3, {"b": 4, "a": None})]],
        {"z": Point(1, [2, 3]), "a": collections.OrderedDict(q=1, p=2),
         "m": collections.defaultdict(list, {"k": 5}), "t": Tup((6, 7)),
         "d": Params(np.ones(2), [8, None])},
        {1: "x", 0: ("y", 2.5)},
    ]
    # keys that cannot be sorted make no pytree, as in JAX
    for flatten in (tree_util.tree_flatten, lambda t: tree_util._flatten(t, [], None)):
        with pytest.raises(ValueError, match="sorting pytree dictionary keys"):
            flatten({"s": 1, 2: 3})
    for t in trees:
        leaves, treedef = tree_util.tree_flatten(t)
        general_leaves: list = []
        general = tree_util._flatten(t, general_leaves, None)
        assert treedef == general and hash(treedef) == hash(general) and \
            treedef.num_leaves == general.num_leaves and treedef.num_nodes == general.num_nodes
        assert len(leaves) == len(general_leaves) and \
            all(a is b for a, b in zip(leaves, general_leaves))
        assert [x for x in tree_util.tree_leaves(t)] == leaves
        assert all(a is b for a, b in zip(tree_util.tree_leaves(t), leaves))
        rebuilt = tree_util.tree_unflatten(treedef, leaves)
        assert tree_util.tree_structure(rebuilt) == treedef


def test_jit_fast_path_keys_the_whole_argument_tree():
    """Later calls with Array pytrees skip the slow signature; the key must tell apart
    every structure, dict key set, shape, dtype and weak type."""
    traces = []

    def f(tree):
        traces.append(tree_util.tree_structure(tree))
        return tree_util.tree_reduce(lambda a, b: a + jnp.sum(b), tree, jnp.float32(0))

    g = functrans.jit(f)
    a, b = jnp.ones(3), jnp.full(3, 2.0)
    calls = [([a, b], 9.0), ((a, b), 9.0), ({"x": a, "y": b}, 9.0), ({"x": a, "z": b}, 9.0),
             ([a, [b]], 9.0), ([[a], b], 9.0), ([a, None, b], 9.0), ([a], 3.0),
             ([a, jnp.ones(4)], 7.0), ([a, jnp.ones(3, jnp.int32)], 6.0),
             ([a, jnp.asarray(2.0)], 5.0), ([a, jnp.asarray(np.float32(2.0))], 5.0)]
    for round_ in range(3):
        for arg, want in calls:
            assert float(g(arg)) == want
        assert len(traces) == len(calls)  # traced in the first round only
    # tuples of other kinds take the slow path; a dict whose keys cannot be sorted is no
    # pytree (JAX's ValueError), on either path
    Point = collections.namedtuple("Point", "x y")
    assert float(g(Point(a, b))) == 9.0 and float(g(Point(a, b))) == 9.0
    assert len(traces) == len(calls) + 1
    with pytest.raises(ValueError, match="sorting pytree dictionary keys"):
        g({"s": a, 2: b})


def test_tree_map_mismatch_shows_both_structures():
    with pytest.raises(ValueError, match=r"expected .*got"):
        tree_util.tree_map(lambda a, b: a + b, {"a": 1, "b": 2}, {"a": 1, "c": 2})


def test_grad_pytrees_with_aux():
    def loss(params, x):
        y = params["w"] * x + params["b"]
        return lax.reduce_sum(y * y, (0,)), {"y": y}

    params = {"w": jnp.asarray(2.0), "b": jnp.asarray(1.0)}
    x = jnp.asarray(np.array([1.0, 2.0], np.float32))
    g, aux = functrans.grad(loss, has_aux=True)(params, x)
    y = 2.0 * np.array([1.0, 2.0]) + 1.0
    np.testing.assert_allclose(g["w"], np.sum(2 * y * np.array([1.0, 2.0])))
    np.testing.assert_allclose(g["b"], np.sum(2 * y))
    np.testing.assert_allclose(aux["y"], y)


def test_grad_errors_follow_jax():
    with pytest.raises(TypeError, match="scalar output"):
        functrans.grad(lambda x: x * 2)(np.ones(3, np.float32))
    with pytest.raises(TypeError, match="integer-valued inputs"):
        functrans.grad(lambda x: x * 2)(3)
    with pytest.raises(TypeError, match="holomorphic"):
        functrans.grad(lambda x: lax.complex(x, x))(1.0)
    g = functrans.grad(lambda x, n: x * 2.0, argnums=(0, 1), allow_int=True)(1.0, 3)
    assert g[1].dtype == functrans.numpy.float0


def test_higher_order_and_nested_transforms():
    f = lambda x: lax.sin(x) * x  # noqa: E731
    x = 0.7
    d2 = functrans.grad(functrans.grad(f))(x)
    expected = 2 * np.cos(x) - x * np.sin(x)
    np.testing.assert_allclose(d2, expected, rtol=1e-5)
    np.testing.assert_allclose(functrans.jit(functrans.grad(functrans.grad(f)))(x), expected, rtol=1e-5)
    xs = np.linspace(0.1, 1.0, 4).astype(np.float32)
    per_example = functrans.jit(functrans.vmap(functrans.grad(f)))(xs)
    np.testing.assert_allclose(per_example, np.cos(xs) * xs + np.sin(xs), rtol=1e-5)
    hess = functrans.hessian(lambda v: lax.reduce_sum(lax.sin(v) * v, (0,)))(xs)
    np.testing.assert_allclose(hess, np.diag(2 * np.cos(xs) - xs * np.sin(xs)), rtol=1e-5, atol=1e-6)
    jf = functrans.jacfwd(lambda v: lax.sin(v) * v)(xs)
    jr = functrans.jacrev(lambda v: lax.sin(v) * v)(xs)
    np.testing.assert_allclose(jf, jr, rtol=1e-6)


def test_linearize_matches_jvp():
    f = lambda x: lax.exp(lax.sin(x))  # noqa: E731
    x = np.array([0.1, 0.2], np.float32)
    y, f_jvp = functrans.linearize(f, x)
    t = np.array([1.0, -1.0], np.float32)
    np.testing.assert_allclose(f_jvp(t), functrans.jvp(f, (x,), (t,))[1], rtol=1e-6)
    np.testing.assert_allclose(y, f(x))


def test_custom_jvp_and_custom_vjp_under_jit_and_vmap():
    @functrans.custom_jvp
    def softplus(x):
        return lax.log1p(lax.exp(x))

    @softplus.defjvp
    def softplus_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return softplus(x), t * lax.logistic(x)

    xs = np.array([-1.0, 0.0, 2.0], np.float32)
    g = functrans.jit(functrans.vmap(functrans.grad(softplus)))(xs)
    np.testing.assert_allclose(g, 1 / (1 + np.exp(-xs)), rtol=1e-6)

    @functrans.custom_vjp
    def scale_grad(x, s):
        return x

    scale_grad.defvjp(lambda x, s: (x, s), lambda s, ct: (ct * s, None))
    g = functrans.grad(lambda x: scale_grad(x, 3.0) * 2.0)(1.0)
    assert g == 6.0
    g = functrans.jit(functrans.vmap(functrans.grad(lambda x: scale_grad(x, 3.0))))(xs)
    np.testing.assert_array_equal(g, [3.0, 3.0, 3.0])
    with pytest.raises(TypeError, match=r"can't apply forward-mode autodiff \(jvp\) to a custom_vjp"):
        functrans.jvp(lambda x: scale_grad(x, 2.0), (1.0,), (1.0,))


def test_checkpoint_recomputes_in_backward_pass():
    f = functrans.checkpoint(lambda x: lax.sin(lax.sin(x)))
    x = 0.3
    np.testing.assert_allclose(functrans.grad(f)(x), np.cos(np.sin(x)) * np.cos(x), rtol=1e-6)
    jaxpr = functrans.make_jaxpr(functrans.grad(f))(x)
    plain = functrans.make_jaxpr(functrans.grad(lambda x: lax.sin(lax.sin(x))))(x)

    def count(j):
        return sum(e.primitive.name == "sin" for e in j.eqns)

    assert count(plain) == 2
    assert count(jaxpr) == 3  # sin(x) is computed again for the backward pass


def test_nested_calls_are_inlined_for_the_compiler():
    @functrans.custom_jvp
    def double(x):
        return x * 2

    double.defjvps(lambda t, ans, x: t * 2)
    inner = functrans.jit(lambda y: double(y) + 1)
    out = functrans.jit(lambda x: inner(x) * 3)(np.ones(3, np.float32))
    np.testing.assert_array_equal(out, [9.0, 9.0, 9.0])


def test_transforms_of_a_staged_program_keep_the_users_source_lines():
    import inspect

    def f(x):
        return lax.sin(lax.sin(x))

    # checkpoint stages f; differentiating the staged program re-evaluates it, and the
    # equations the jvp rule adds (cos) keep the line of the sin they differentiate
    jaxpr = functrans.make_jaxpr(functrans.grad(functrans.checkpoint(f)))(0.5)
    lines, first = inspect.getsourcelines(f)
    line = next(first + k for k, text in enumerate(lines) if "lax.sin(lax.sin(x))" in text)
    cosines = [e.source_info for e in jaxpr.eqns if e.primitive.name == "cos"]
    assert cosines and all(info.lineno == line and info.function == f.__qualname__
                           for info in cosines)
    text = lines[line - first]
    # the column of each call expression: lax.sin(lax.sin(x)) and the inner lax.sin(x)
    assert {info.column for info in cosines} == {text.index("lax.sin(lax"),
                                                 text.index("lax.sin(x)")}


def test_calls_inside_loop_bodies_are_inlined_for_the_compiler():
    from functrans.interpreters.inline import inline_calls

    body = functrans.checkpoint(lambda c, x: (c * lax.sin(x), c))
    jaxpr = functrans.make_jaxpr(lambda xs: lax.scan(body, 1.0, xs))(np.ones(3, np.float32))
    scan_eqn = jaxpr.eqns[-1]
    assert [e.primitive.name for e in scan_eqn.params["jaxpr"].eqns] == ["remat"]
    inlined = inline_calls(jaxpr).eqns[-1].params["jaxpr"]
    assert [e.primitive.name for e in inlined.eqns] == ["sin", "mul"]
    carry, ys = functrans.jit(lambda xs: lax.scan(body, 1.0, xs))(np.full(3, 0.5, np.float32))
    np.testing.assert_allclose(carry, np.sin(0.5) ** 3, rtol=1e-6)


def test_array_methods_forward_to_jnp():
    x = jnp.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(x.flatten(), np.arange(6))
    np.testing.assert_array_equal(x.compress(np.array([True, False, True]), axis=1),
                                  np.arange(6).reshape(2, 3)[:, [0, 2]])
    np.testing.assert_array_equal(x.T, np.arange(6).reshape(2, 3).T)
    np.testing.assert_allclose(x.astype(np.float32).mean(axis=0), [1.5, 2.5, 3.5])


def test_a_jitted_function_called_twice_inside_jit():
    inner = functrans.jit(lambda x: lax.exp(x) * 2.0)
    outer = functrans.jit(lambda x: inner(x) + inner(x + 1.0))
    for backend in ("reference", "llvm"):
        out = functrans.jit(lambda x: inner(x) + inner(x + 1.0), backend=backend)(np.float32(-1.0))
        np.testing.assert_allclose(out, 2 * np.exp(-1.0) + 2.0, rtol=1e-6)
    np.testing.assert_allclose(outer(np.float32(-1.0)), 2 * np.exp(-1.0) + 2.0, rtol=1e-6)


def test_donated_arguments_cannot_be_used_again():
    f = functrans.jit(lambda p, x: {"w": p["w"] - 0.1 * x}, donate_argnums=0)
    params = {"w": jnp.ones(3)}
    x = jnp.ones(3)
    new = f(params, x)
    np.testing.assert_allclose(new["w"], [0.9, 0.9, 0.9])
    assert params["w"].is_deleted() and not x.is_deleted()
    assert "deleted" in repr(params["w"])
    with pytest.raises(RuntimeError, match="donated"):
        params["w"] + 1
    with pytest.raises(RuntimeError, match="donated"):
        f(params, x)
    np.testing.assert_allclose(f(new, x)["w"], [0.8, 0.8, 0.8])  # the result is usable


def _data_pointer(a) -> int:
    return a._value.__array_interface__["data"][0]


def test_donated_buffers_hold_results():
    step = functrans.jit(lambda p, g: p - 0.5 * g, donate_argnums=0)
    g = jnp.ones(1000)
    p = step(jnp.zeros(1000), g)             # a result: its buffer belongs to it alone
    for k in range(2, 5):
        address = _data_pointer(p)
        new = step(p, g)
        assert p.is_deleted() and _data_pointer(new) == address  # updated in place
        np.testing.assert_array_equal(np.asarray(new), np.full(1000, -0.5 * k, np.float32))
        p = new
    # a buffer someone else holds is never written: here the caller's NumPy view of it
    held = np.asarray(p)
    new = step(p, g)
    assert p.is_deleted() and _data_pointer(new) != held.__array_interface__["data"][0]
    np.testing.assert_array_equal(held, np.full(1000, -2.0, np.float32))
    np.testing.assert_array_equal(np.asarray(new), np.full(1000, -2.5, np.float32))
    # nor an array made from the caller's own NumPy array
    mine = np.zeros(1000, np.float32)
    step(jnp.asarray(mine), g)
    np.testing.assert_array_equal(mine, 0)


@pytest.mark.parametrize("name", ["read_later", "transposed", "returned", "guarded", "twice",
                                  "two_outputs"])
def test_donation_never_changes_results(name):
    rng = np.random.default_rng(0)
    p0 = rng.standard_normal((16, 16)).astype(np.float32)
    programs = {
        # the input is read again after the output that could take its place is written
        "read_later": lambda p: (p * 2.0, jnp.sum(p * p)),
        "transposed": lambda p: p.T + 1.0,   # reads another element than it writes
        "returned": lambda p: (p + 1.0, p),    # the input is itself a result
        "guarded": lambda p: jnp.sin(p * 1e8) * 3.0,  # large arguments: the range is redone
        "twice": lambda p: (p + 1.0, p - 1.0),  # two outputs, one input
        "two_outputs": lambda p: (jnp.exp(p), jnp.cumsum(p, axis=0) + p),
    }
    f = programs[name]
    expected = functrans.jit(f)(p0)
    donating = functrans.jit(f, donate_argnums=0)
    for _ in range(2):
        p = functrans.jit(lambda v: v + 0.0)(p0)  # an exclusively owned buffer
        got = donating(p)
        assert p.is_deleted()
        for a, b in zip(functrans.tree_util.tree_leaves(got),
                        functrans.tree_util.tree_leaves(expected)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


def test_a_donated_array_also_passed_elsewhere_is_not_reused():
    """The same Array donated and passed again: the program reads it while writing results,
    so its buffer must not take them (here it would be read transposed)."""
    f = functrans.jit(lambda w, x: w - x.T * 2.0, donate_argnums=0)
    make = functrans.jit(lambda v: v + 0.0)
    for _ in range(3):  # the first call takes the full path, later ones the fast path
        w = make(np.arange(16, dtype=np.float32).reshape(4, 4) * 1000)
        expected = np.asarray(w) - np.asarray(w).T * 2.0
        np.testing.assert_array_equal(np.asarray(f(w, w)), expected)
        assert w.is_deleted()


def test_donating_fast_path_reuses_pytree_buffers_and_deletes_donated_leaves():
    step = functrans.jit(lambda p, g: {"w": p["w"] - 0.5 * g, "b": p["b"] * 2.0},
                         donate_argnums=0)
    g = jnp.ones((50, 20))
    p = functrans.jit(lambda: {"w": jnp.zeros((50, 20)), "b": jnp.ones(20)})()
    for k in range(1, 5):
        addresses = {name: _data_pointer(leaf) for name, leaf in p.items()}
        new = step(p, g)
        assert all(leaf.is_deleted() for leaf in p.values()) and not g.is_deleted()
        assert {name: _data_pointer(leaf) for name, leaf in new.items()} == addresses
        np.testing.assert_array_equal(np.asarray(new["w"]), np.full((50, 20), -0.5 * k))
        np.testing.assert_array_equal(np.asarray(new["b"]), np.full(20, 2.0 ** k))
        p = new
    step(p, g)
    with pytest.raises(RuntimeError, match="donated"):  # its leaves were deleted
        step(p, g)


def test_donation_plan_of_an_update_step():
    from functrans.backends.llvm import donation
    params = {"w": jnp.ones((4, 3)), "b": jnp.ones(3)}

    def step(params, x):
        grads = functrans.grad(lambda p: jnp.sum(jnp.tanh(x @ p["w"] + p["b"])))(params)
        return functrans.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)

    compiled = functrans.jit(step).lower(params, jnp.ones((2, 4))).compile()._executable
    program = compiled.program
    plan = donation.alias_candidates(program)
    # each new parameter may live in its old buffer (inputs 0 and 1 are b and w)
    outputs = [b.id for b in program.outputs]
    assert plan == {outputs[0]: [0], outputs[1]: [1]}
