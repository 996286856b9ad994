"""functrans.export: exported programs serialize, deserialize (in this process and in a
fresh one, without the functions' source) and run as the original functions do."""
from __future__ import annotations

import gc
import importlib
import json
import pkgutil
import subprocess
import sys
import textwrap
from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import functrans
import functrans.nn as nn
import functrans.numpy as jnp
from functrans import export, lax
from functrans.export import _container, _program, _registry

RNG = np.random.default_rng(0)
F32 = np.float32


def _f32(*shape):
    return RNG.standard_normal(shape).astype(F32)


def _spec(shape, dtype=F32):
    return functrans.ShapeDtypeStruct(shape, dtype)


# ---- the models of the round trip ---------------------------------------------------------------

def mlp(params, x):
    h = nn.relu(x @ params["w1"] + params["b1"])
    return nn.log_softmax(h @ params["w2"] + params["b2"])


def cnn(w, x):
    y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = lax.reduce_window(nn.relu(y), -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    return y.reshape(y.shape[0], -1).sum(axis=1)


def rnn(w, h0, xs):
    def step(h, x):
        h = jnp.tanh(h @ w + x)
        return h, h.sum(axis=-1)
    return lax.scan(step, h0, xs)


def poly(x, y):
    z = jnp.where(x.sum() > 0, x * 2.0, x - 1.0) @ y
    return lax.cond(z.mean() > 0, jnp.tanh, jnp.sin, z), jnp.mean(z, axis=0)


MLP_PARAMS = {"w1": _f32(4, 16), "b1": _f32(16), "w2": _f32(16, 3), "b2": _f32(3)}


def mlp_loss(params, x):
    return -jnp.mean(mlp(params, x)[:, 0])


def _models():
    """(name, exported, inputs) of each model of the round trip."""
    b, = export.symbolic_shape("b")
    w_cnn, w_rnn = _f32(3, 3, 2, 4), 0.4 * _f32(6, 6)
    return [
        ("mlp", export.export(functrans.jit(mlp))(MLP_PARAMS, _spec((b, 4))),
         (MLP_PARAMS, _f32(5, 4))),
        ("cnn", export.export(functrans.jit(cnn))(w_cnn, _spec((2, 8, 8, 2))),
         (w_cnn, _f32(2, 8, 8, 2))),
        ("rnn", export.export(functrans.jit(rnn))(w_rnn, _spec((3, 6)), _spec((7, 3, 6))),
         (w_rnn, _f32(3, 6), _f32(7, 3, 6))),
        ("poly", export.export(functrans.jit(poly))(_spec((b, 3)), _spec((3, 2))),
         (_f32(9, 3), _f32(3, 2))),
    ]


_FRESH_PROCESS = textwrap.dedent("""
    import json, sys
    import numpy as np
    import functrans, functrans.numpy as jnp
    from functrans import export
    folder = sys.argv[1]
    report = {}
    for name in json.load(open(folder + "/names.json")):
        exp = export.deserialize(open(f"{folder}/{name}.bin", "rb").read())
        data = np.load(f"{folder}/{name}.npz")
        args = [data[f"a{i}"] for i in range(int(data["n"]))]
        if name == "mlp":
            args[0] = {k: data["p_" + k] for k in ("w1", "b1", "w2", "b2")}
        outs = functrans.tree_util.tree_leaves(exp.call(*args))
        report[name] = [float(np.max(np.abs(np.asarray(o) - data[f"out{i}"])))
                        for i, o in enumerate(outs)]
        if name == "mlp":
            loss = lambda p, x: -jnp.mean(exp.call(p, x)[:, 0])
            grads = functrans.grad(loss)(*args)
            report["mlp_grad"] = [float(np.max(np.abs(np.asarray(grads[k]) - data["g_" + k])))
                                  for k in ("w1", "b1", "w2", "b2")]
            report["mlp_other_batch"] = list(exp.call(args[0], args[1][:2]).shape)
    report["modules"] = sorted(m for m in sys.modules
                               if m.startswith("tests") or m == "test_export")
    print(json.dumps(report))
""")


def test_round_trip_in_a_fresh_process(tmp_path):
    names = []
    for name, exp, args in _models():
        blob = exp.serialize(vjp_order=1 if name == "mlp" else 0)
        (tmp_path / f"{name}.bin").write_bytes(bytes(blob))
        expected = functrans.tree_util.tree_leaves(functrans.jit(globals()[name])(*args))
        arrays = {f"out{i}": np.asarray(o) for i, o in enumerate(expected)}
        flat = list(args)
        if name == "mlp":
            arrays.update({f"p_{k}": v for k, v in MLP_PARAMS.items()})
            grads = functrans.grad(mlp_loss)(*args)
            arrays.update({f"g_{k}": np.asarray(v) for k, v in grads.items()})
            flat[0] = np.zeros(1)
        arrays.update({f"a{i}": np.asarray(a) for i, a in enumerate(flat)}, n=len(flat))
        np.savez(tmp_path / f"{name}.npz", **arrays)
        names.append(name)
    (tmp_path / "names.json").write_text(json.dumps(names))
    script = tmp_path / "load.py"
    script.write_text(_FRESH_PROCESS)
    # the loading process never imports this file, where the functions are defined
    result = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True,
                            text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report.pop("modules") == []
    assert report.pop("mlp_other_batch") == [2, 3]
    for name in names:  # the same program, compiled by the same backend: the same numbers
        assert max(report[name]) == 0.0, (name, report[name])
    assert max(report["mlp_grad"]) < 1e-6, report["mlp_grad"]


# ---- the Exported object and its calls ----------------------------------------------------------

def test_exported_attributes_follow_jax():
    b, = export.symbolic_shape("b")
    exp = export.export(functrans.jit(mlp))(MLP_PARAMS, _spec((b, 4)))
    assert exp.fun_name == "mlp"
    assert exp.platforms == ("cpu",)
    assert exp.in_tree == functrans.tree_util.tree_structure(((MLP_PARAMS, 0), {}))
    assert exp.out_tree == functrans.tree_util.tree_structure(0)
    assert [a.str_short() for a in exp.in_avals] == ["float32[16]", "float32[3]", "float32[4,16]",
                                                     "float32[16,3]", "float32[b,4]"]
    assert [str(a) for a in exp.out_avals] == ["float32[b,3]"]
    assert str(exp) == "Exported(fun_name=mlp, ...)"
    assert exp.has_vjp()
    back = export.deserialize(exp.serialize())
    assert not back.has_vjp()
    assert (back.fun_name, back.in_tree, back.out_tree) == (exp.fun_name, exp.in_tree,
                                                             exp.out_tree)
    assert [str(a) for a in back.in_avals + back.out_avals] == \
        [str(a) for a in exp.in_avals + exp.out_avals]


def test_export_requires_jit_and_known_platforms():
    with pytest.raises(ValueError, match="must be the result of `jit`"):
        export.export(jnp.sin)(np.ones(2, F32))
    with pytest.raises(ValueError, match="unknown platform"):
        export.export(functrans.jit(jnp.sin), platforms=["vulkan"])
    exp = export.export(functrans.jit(jnp.sin), platforms=["cuda"])(np.ones(2, F32))
    with pytest.raises(ValueError, match="was exported for platforms"):
        exp.call(np.ones(2, F32))
    unchecked = export.export(functrans.jit(jnp.sin), platforms=["cuda"], disabled_checks=[
        export.DisabledSafetyCheck.platform()])(np.ones(2, F32))
    np.testing.assert_allclose(unchecked.call(np.ones(2, F32)), np.sin(np.ones(2, F32)))


def test_call_checks_structure_dtypes_and_shapes():
    b, = export.symbolic_shape("b")
    exp = export.export(functrans.jit(lambda x, y: x * y[0]))(_spec((b, 3)), _spec((2 * b, 3)))
    np.testing.assert_allclose(exp.call(np.ones((2, 3), F32), np.full((4, 3), 2, F32)),
                               np.full((2, 3), 2))
    cases = [
        ((np.ones((2, 3), F32),), "same pytree structure"),
        ((np.ones((2, 3), np.int32), np.ones((4, 3), F32)), "Dtype mismatch for args\\[0\\]"),
        ((np.ones((2, 4), F32), np.ones((4, 3), F32)),
         r"Shape mismatch for args\[0\].shape\[1\] \(expected same constant\)"),
        ((np.ones((2, 3), F32), np.ones((5, 3), F32)), r"args\[1\].shape\[0\]"),
        ((np.ones((2, 3, 1), F32), np.ones((4, 3), F32)), "Rank mismatch for args\\[0\\]"),
        ((np.ones((0, 3), F32), np.ones((0, 3), F32)), "positive integer value"),
    ]
    for args, message in cases:
        with pytest.raises(ValueError, match=message):
            exp.call(*args)


def test_call_inside_jit_vmap_and_grad():
    exp = export.export(functrans.jit(mlp))(MLP_PARAMS, _spec((5, 4)))
    x = _f32(5, 4)
    expected = functrans.jit(mlp)(MLP_PARAMS, x)
    outer = functrans.jit(lambda p, x: exp.call(p, x) * 2.0)
    np.testing.assert_allclose(outer(MLP_PARAMS, x), 2 * expected, rtol=1e-6)
    assert "jit" in str(functrans.make_jaxpr(lambda p, x: exp.call(p, x))(MLP_PARAMS, x))
    xs = _f32(3, 5, 4)
    np.testing.assert_allclose(functrans.vmap(lambda x: exp.call(MLP_PARAMS, x))(xs),
                               functrans.vmap(lambda x: mlp(MLP_PARAMS, x))(xs), rtol=1e-5,
                               atol=1e-6)
    loss = lambda p, x: -jnp.mean(exp.call(p, x)[:, 0])  # noqa: E731
    for k, g in functrans.grad(loss)(MLP_PARAMS, x).items():
        np.testing.assert_allclose(g, functrans.grad(mlp_loss)(MLP_PARAMS, x)[k], rtol=1e-5,
                                   atol=1e-6)


def test_grad_needs_a_serialized_vjp():
    exp = export.export(functrans.jit(jnp.tanh))(np.ones(3, F32))
    x = np.linspace(-1, 1, 3).astype(F32)
    without = export.deserialize(exp.serialize())
    with pytest.raises(ValueError, match="No VJP is available"):
        functrans.grad(lambda x: without.call(x).sum())(x)
    second = export.deserialize(exp.serialize(vjp_order=2))
    hessian_diag = functrans.grad(lambda x: functrans.grad(lambda y: second.call(y).sum())(x).sum())
    np.testing.assert_allclose(hessian_diag(x), -2 * np.tanh(x) / np.cosh(x) ** 2, rtol=1e-5)
    with pytest.raises(ValueError, match="vjp_order"):
        exp.serialize(vjp_order=-1)


def test_custom_derivative_rules_are_kept_through_the_vjp():
    @functrans.custom_jvp
    def damped_identity(x):
        return x

    damped_identity.defjvp(lambda p, t: (p[0], 0.5 * t[0]))
    f = functrans.jit(lambda x: damped_identity(x) * 3.0)
    back = export.deserialize(export.export(f)(np.ones(2, F32)).serialize(vjp_order=1))
    x = np.array([1.0, 2.0], F32)
    np.testing.assert_allclose(back.call(x), 3 * x)
    np.testing.assert_allclose(functrans.grad(lambda x: back.call(x).sum())(x), [1.5, 1.5])
    program = json.dumps(back._program)
    assert "custom_jvp_call" not in program and '"mul"' in program


def test_callbacks_are_refused_naming_the_primitive():
    def f(x):
        return functrans.pure_callback(np.sin, _spec(x.shape), x) + 1

    with pytest.raises(ValueError, match="cannot export primitive 'pure_callback'.*'callback'"):
        export.export(functrans.jit(f))(np.ones(3, F32))

    def nested(x):
        return lax.scan(lambda c, y: (c + f(y).sum(), None), 0.0, x)[0]
    with pytest.raises(ValueError, match="'pure_callback' \\(inside primitive 'scan'\\)"):
        export.export(functrans.jit(nested))(np.ones((2, 3), F32))


def test_static_arguments_and_keywords():
    def f(x, n, *, scale):
        return x ** n * scale

    jitted = functrans.jit(f, static_argnums=1)
    exp = export.export(jitted)(np.ones(3, F32), 3, scale=np.float32(2))
    back = export.deserialize(exp.serialize())
    x = np.array([1, 2, 3], F32)
    np.testing.assert_allclose(back.call(x, scale=np.float32(0.5)), x ** 3 * 0.5)


class Batch(NamedTuple):
    x: object
    y: object


export.register_namedtuple_serialization(Batch, serialized_name="tests.test_export.Batch")


class Unregistered(NamedTuple):
    x: object


def test_pytree_structures_serialize():
    exp = export.export(functrans.jit(lambda b: {"sum": b.x + b.y, "parts": [b.x, (b.y,)]}))(
        Batch(np.ones(2, F32), np.ones(2, F32)))
    back = export.deserialize(exp.serialize())
    out = back.call(Batch(np.ones(2, F32), np.full(2, 2, F32)))
    assert set(out) == {"sum", "parts"} and isinstance(out["parts"][1], tuple)
    np.testing.assert_allclose(out["sum"], [3, 3])
    unregistered = export.export(functrans.jit(lambda u: u.x))(Unregistered(np.ones(2, F32)))
    with pytest.raises(ValueError, match="register_namedtuple_serialization"):
        unregistered.serialize()


# ---- dimension polymorphism ---------------------------------------------------------------------

def test_symbolic_shape_parsing():
    b, c = export.symbolic_shape("b, c")
    assert export.symbolic_shape("b, 2*b + 1, 4") == (b, 2 * b + 1, 4)
    assert export.symbolic_shape("(b,)") == (b,)
    assert str(export.symbolic_shape("3*b - c")[0]) == "3*b - c"
    assert export.symbolic_shape("_, n", like=(7, None))[0] == 7
    assert export.is_symbolic_dim(b) and not export.is_symbolic_dim(4)
    for bad in ("b, )", "b + ", "2.5*b", "b*c"):
        with pytest.raises(ValueError, match="symbolic shape"):
            export.symbolic_shape(bad)
    with pytest.raises(TypeError, match="no value before"):
        int(b)
    specs = export.symbolic_args_specs(np.ones((3, 4), F32), "b, 4")
    assert specs.shape == (b, 4) and specs.dtype == F32


@pytest.mark.parametrize("batch", [1, 2, 13])
def test_polymorphic_batch_through_elementwise_dot_reductions_reshape_scan_cond(batch):
    b, = export.symbolic_shape("b")

    def f(x, w):
        h = jnp.tanh(x @ w) + 1.0
        flat = h.reshape(h.shape[0], -1)  # keeps b
        merged = h.reshape(-1).sum() / h.shape[0]  # merges b; divides by b
        carry, ys = lax.scan(lambda c, row: (c + row, row * 2), jnp.zeros(flat.shape[1]), flat)
        picked = lax.cond(merged > 0, lambda y: y.max(axis=0), lambda y: y.min(axis=0), ys)
        return carry, ys.mean(axis=0), picked, jnp.concatenate([flat, flat]).shape[0] * merged

    exp = export.export(functrans.jit(f))(_spec((b, 3, 2)), _spec((2, 2)))
    assert [str(a) for a in exp.out_avals] == ["float32[6]", "float32[6]", "float32[6]", "float32[]"]
    back = export.deserialize(exp.serialize())
    x, w = _f32(batch, 3, 2), _f32(2, 2)
    expected = functrans.jit(f)(x, w)
    for got, want in zip(back.call(x, w), expected):
        np.testing.assert_array_equal(got, want)


def test_polymorphism_in_two_variables():
    m, n = export.symbolic_shape("m, n")
    f = functrans.jit(lambda x, y: (jnp.concatenate([x, y]), jnp.pad(x, ((1, 2), (0, 0)))))
    exp = export.export(f)(_spec((m, 3)), _spec((n, 3)))
    assert [str(a) for a in exp.out_avals] == ["float32[m + n,3]", "float32[m + 3,3]"]
    x, y = _f32(2, 3), _f32(5, 3)
    for got, want in zip(export.deserialize(exp.serialize()).call(x, y), f(x, y)):
        np.testing.assert_array_equal(got, want)


def test_sizes_too_small_for_the_program_are_refused_at_call():
    b, = export.symbolic_shape("b")
    exp = export.export(functrans.jit(lambda x: x[4:] * 2))(_spec((b,)))
    assert [str(a) for a in exp.out_avals] == ["float32[b - 4]"]
    np.testing.assert_array_equal(exp.call(np.ones(6, F32)), [2, 2])
    with pytest.raises(ValueError, match="cannot run at b=2.*slice"):
        exp.call(np.ones(2, F32))


def test_polymorphism_refuses_what_it_cannot_express():
    b, = export.symbolic_shape("b")
    spec = _spec((b,))
    cases = [
        (lambda x: jnp.zeros(x.shape[0] * x.shape[0]), "not an affine function"),
        (lambda x: x + np.arange(x.shape[0], dtype=F32), "constant array 0 .* depends on"),
        (lambda x: x[:3] if x.shape[0] > 6 else x, "gives different programs"),
    ]
    for f, message in cases:
        with pytest.raises(ValueError, match=message):
            export.export(functrans.jit(f))(spec)


# ---- the serialized form ------------------------------------------------------------------------

def test_serialized_bytes_are_a_safetensors_file_and_deterministic():
    import safetensors
    # parameters baked in: the constants of the program, one tensor each
    exp = export.export(functrans.jit(lambda x: mlp(MLP_PARAMS, x)))(np.ones((2, 4), F32))
    blob = exp.serialize()
    assert exp.serialize() == blob
    tensors = dict(safetensors.deserialize(bytes(blob)))
    stored = sorted((t["shape"], bytes(t["data"])) for t in tensors.values())
    assert stored == sorted((list(v.shape), v.tobytes()) for v in MLP_PARAMS.values())


def _blob():
    f = functrans.jit(lambda x, w: lax.scan(lambda c, r: (c + jnp.tanh(r @ w), None),
                                            jnp.zeros(2), x)[0])
    b, = export.symbolic_shape("b")
    return bytes(export.export(f)(_spec((b, 3)), _f32(3, 2)).serialize())


BLOB = _blob()


def test_future_and_foreign_versions_are_refused():
    document, arrays = _container.unpack(BLOB)
    header_len = int.from_bytes(BLOB[:8], "little")
    header = json.loads(BLOB[8:8 + header_len])
    for version, message in (("2", "newer than this functrans reads.*upgrade"),
                             ("0", "no longer reads"), ("x", "format version")):
        header["__metadata__"]["version"] = version
        text = json.dumps(header).encode()
        with pytest.raises(ValueError, match=message):
            export.deserialize(len(text).to_bytes(8, "little") + text + BLOB[8 + header_len:])
    with pytest.raises(ValueError, match="not a serialized Exported"):
        export.deserialize(b"\x00" * 7)
    with pytest.raises(ValueError, match="not a serialized Exported"):
        export.deserialize(np.zeros(12).tobytes())
    import safetensors.numpy
    with pytest.raises(ValueError, match="not a serialized Exported"):  # someone else's file
        export.deserialize(safetensors.numpy.save({"w": np.ones(2, F32)}))
    with pytest.raises(TypeError, match="takes bytes"):
        export.deserialize("a file name")


def _check_deserialize_fails_cleanly(data: bytes):
    try:
        back = export.deserialize(data)
    except ValueError:
        return
    # the rare mutation that changes nothing of substance (a header's padding)
    x, w = np.ones((4, 3), F32), np.ones((3, 2), F32)
    np.testing.assert_array_equal(back.call(x, w), export.deserialize(BLOB).call(x, w))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_or_truncated_bytes_raise_value_error(data):
    kind = data.draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
    at = data.draw(st.integers(0, len(BLOB) - 1))
    if kind == "flip":
        mutated = BLOB[:at] + bytes([BLOB[at] ^ data.draw(st.integers(1, 255))]) + BLOB[at + 1:]
    elif kind == "truncate":
        mutated = BLOB[:at]
    elif kind == "insert":
        mutated = BLOB[:at] + data.draw(st.binary(min_size=1, max_size=8)) + BLOB[at:]
    else:
        mutated = BLOB[:at] + BLOB[at + data.draw(st.integers(1, 16)):]
    _check_deserialize_fails_cleanly(mutated)


def _resigned(document: dict, arrays: list) -> bytes:
    """A well-formed file (valid checksum) holding a possibly nonsensical document."""
    document = dict(document)
    document.pop("tensors", None)
    return bytes(_container.pack(document, arrays))


def _mutations(doc, path=()):
    """Every (path, leaf) of a JSON document."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _mutations(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _mutations(v, path + (i,))
    else:
        yield path, doc


DOCUMENT, ARRAYS = _container.unpack(BLOB)
LEAVES = list(_mutations(DOCUMENT))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(LEAVES), st.one_of(st.integers(-3, 40), st.text(max_size=6),
                                           st.none(), st.booleans(), st.floats(),
                                           st.just({"$dim": "b*b"}), st.just([1, [2]])))
def test_corrupted_documents_with_valid_checksums_raise_value_error(leaf, value):
    path, _ = leaf
    document = json.loads(json.dumps(DOCUMENT))
    node = document
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    try:
        blob = _resigned(document, ARRAYS)
    except (ValueError, TypeError):
        return  # not even writable (a NaN in JSON)
    try:
        back = export.deserialize(blob)
    except ValueError:
        return
    # an edit that keeps the program well formed (a changed literal) is a valid program:
    # it runs, or its call refuses arguments of the old signature
    try:
        back.call(np.ones((4, 3), F32), np.ones((3, 2), F32))
    except (ValueError, TypeError):
        pass


# ---- every primitive and its parameters round-trip ----------------------------------------------

def _programs():
    x, m = _f32(4, 3), _f32(3, 3)
    spd = m @ m.T + 3 * np.eye(3, dtype=F32)
    idx = np.array([2, 0, 1], np.int32)
    key = functrans.random.PRNGKey(1)
    return {
        "unary": (lambda x: [f(x) for f in (jnp.sin, jnp.exp, jnp.log1p, jnp.sqrt, jnp.abs,
                                            jnp.floor, jnp.tanh, lax.logistic, jnp.sign,
                                            lax.erf, lax.lgamma, lax.digamma, jnp.round)],
                  (np.abs(x) + 0.1,)),
        "binary": (lambda x, y: [x + y, x - y, x * y, x / y, jnp.maximum(x, y), x ** 2,
                                 jnp.arctan2(x, y), x > y, lax.rem(x, y), lax.pow(x, 2.5),
                                 lax.nextafter(x, y)], (x, x[::-1] + 3)),
        "integers": (lambda a: [a << 2, a >> 1, a & 6, a | 1, a ^ 3, ~a, lax.clz(a),
                                lax.population_count(a), a // 3, lax.shift_right_logical(a, 1),
                                lax.bitcast_convert_type(a, np.float32)],
                     (np.arange(12, dtype=np.int32).reshape(4, 3),)),
        "reductions": (lambda x: [x.sum(0), x.max(1), x.min(), x.prod(0), jnp.argmax(x, 1),
                                  jnp.argmin(x, 0), (x > 0).any(0), (x > 0).all(1),
                                  jnp.cumsum(x, 0), lax.cumprod(x, 1), lax.cummax(x, 0),
                                  lax.cumlogsumexp(x, 1)], (x,)),
        "structural": (lambda x: [x.T, x.reshape(2, 6), x[1:3, ::2], jnp.flip(x, 0),
                                  jnp.pad(x, ((1, 0), (2, 1))), jnp.concatenate([x, x], 1),
                                  jnp.broadcast_to(x[:, None], (4, 2, 3)), x[None].squeeze(0),
                                  lax.dynamic_slice(x, (1, 0), (2, 2)),
                                  lax.dynamic_update_slice(x, jnp.ones((1, 3)), (2, 0)),
                                  jnp.arange(5) * 2, lax.select(x > 0, x, -x),
                                  jnp.clip(x, -0.5, 0.5), x.astype(np.int16),
                                  lax.reduce_precision(x, 5, 10), lax.integer_pow(x, 3),
                                  lax.stop_gradient(x)], (x,)),
        "indexing": (lambda x, i: [x[i], x.at[i].set(1.0), x.at[i].add(2.0), x.at[i].mul(3.0),
                                   x.at[i].min(0.0), x.at[i].max(0.0), x[i, i],
                                   jnp.take(x, i, axis=1, mode="fill", fill_value=-1.0)],
                     (x, idx)),
        "sorting": (lambda x: [jnp.sort(x, 0), jnp.argsort(x, 1), lax.top_k(x, 2)[0],
                               lax.sort_key_val(x[:, 0], x[:, 1])[1]], (x,)),
        "windowed": (lambda x: [lax.reduce_window(x, 0.0, lax.add, (2, 2), (1, 1), "SAME"),
                                lax.reduce_window(x, -jnp.inf, lax.max, (2, 1), (2, 1),
                                                  "VALID"),
                                lax.reduce_window(x, jnp.inf, lax.min, (1, 2), (1, 1),
                                                  ((0, 0), (1, 1)))], (x,)),
        "conv": (lambda x, w: lax.conv_general_dilated(
            x, w, (2, 1), ((1, 1), (0, 2)), lhs_dilation=(1, 1), rhs_dilation=(1, 2),
            dimension_numbers=("NCHW", "OIHW", "NCHW"), feature_group_count=1),
            (_f32(2, 3, 6, 5), _f32(4, 3, 3, 2))),
        "linalg": (lambda a, b: [a @ b, jnp.einsum("ij,kj->ik", a, b), jnp.linalg.cholesky(a),
                                 lax.linalg.triangular_solve(a, b, left_side=True, lower=True),
                                 jnp.linalg.qr(b)[1], jnp.linalg.eigh(a)[0],
                                 jnp.linalg.svd(b, compute_uv=False), jnp.linalg.solve(a, b),
                                 lax.linalg.lu(a)[0]], (spd, m)),
        "fft": (lambda x: jnp.fft.rfft(x, axis=1).real, (x,)),
        "control_flow": (lambda x: [lax.fori_loop(0, 3, lambda i, c: c * 1.5 + i, x),
                                    lax.while_loop(lambda c: c[1] < 4,
                                                   lambda c: (c[0] * 2, c[1] + 1), (x, 0))[0],
                                    lax.switch(1, [jnp.sin, jnp.cos, jnp.tan], x),
                                    lax.map(jnp.sum, x),
                                    functrans.jit(lambda y: y * 2)(x),
                                    functrans.checkpoint(lambda y: jnp.sin(y) * 2)(x),
                                    lax.custom_linear_solve(lambda v: 2 * v, x[0],
                                                            lambda mv, b: b / 2)],
                         (x,)),
        "random": (lambda k, x: [functrans.random.normal(k, (3,)), functrans.random.split(k),
                                 functrans.random.uniform(k, (2, 2)) + x[:2, :2],
                                 functrans.random.bernoulli(k, 0.3, (4,)),
                                 functrans.random.randint(k, (3,), 0, 10)], (key, x)),
        "complex": (lambda x: [lax.complex(x, x).conj(), jnp.abs(lax.complex(x, -x)),
                               lax.complex(x, x) * 1j], (x,)),
        "special_literals": (lambda x: [x + np.float32(np.inf), jnp.where(x > 0, np.nan, x),
                                        x * -0.0, jnp.full((2,), np.int32(-7)),
                                        x.astype(jnp.bfloat16) * 2, x.astype(np.float16)],
                             (x,)),
    }


@pytest.mark.parametrize("name", sorted(_programs()))
def test_program_round_trips(name):
    f, args = _programs()[name]
    jitted = functrans.jit(f)
    exp = export.export(jitted)(*args)
    document = json.dumps(exp._program, sort_keys=True)
    back = export.deserialize(exp.serialize())
    assert json.dumps(back._program, sort_keys=True) == document  # decoding loses nothing
    again = _program.encode_closed_jaxpr(back._decode({}))[0]
    assert json.dumps(again, sort_keys=True) == document  # re-encoding changes nothing
    for got, want in zip(functrans.tree_util.tree_leaves(back.call(*args)),
                         functrans.tree_util.tree_leaves(jitted(*args))):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_every_primitive_is_in_the_registry():
    from functrans.core import Primitive
    registry = _registry.primitives()
    missing = []
    for info in pkgutil.walk_packages(functrans.__path__, "functrans."):
        if ".backends" in info.name:
            continue
        module = importlib.import_module(info.name)
        missing += [f"{info.name}.{name}" for name, p in vars(module).items()
                    if isinstance(p, Primitive) and registry.get(p.name) is not p]
    assert not missing, f"primitives not found by functrans.export's registry: {missing}"
    # no other primitive of the library shares a name with a registered one
    clashes = [p.name for p in gc.get_objects() if isinstance(p, Primitive)
               and p.name in registry and registry[p.name] is not p
               and type(p).__module__.startswith("functrans")]
    assert not clashes
