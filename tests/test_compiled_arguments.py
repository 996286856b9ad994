"""Compiled programs check their arguments before native code sees them: a wrong shape,
rank, dtype or pytree raises TypeError (naming the argument), never a crash or stray memory;
strides and byte order are converted, giving the right answer."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import functrans
import functrans.numpy as jnp
from functrans import lax
from functrans._jit import compile_closed


def _compiled(fun, *args, **kwargs):
    return functrans.jit(fun).lower(*args, **kwargs).compile()


def test_a_smaller_array_is_refused_not_read_past_its_end():
    # the reproducer: 64 values came back, 60 of them stray heap memory
    c = _compiled(lambda a: a + 0, np.ones(64, np.float32))
    with pytest.raises(TypeError, match=r"Argument 'a' compiled with float32\[64\] and called "
                                        r"with float32\[4\]"):
        c(np.ones(4, np.float32))


def test_a_large_compiled_shape_with_a_small_argument_does_not_crash():
    c = _compiled(lambda a: a * 2, np.ones(1 << 22, np.float32))
    with pytest.raises(TypeError, match="float32\\[4194304\\]"):
        c(np.ones(3, np.float32))
    np.testing.assert_array_equal(c(np.ones(1 << 22, np.float32))[:2], [2, 2])


@pytest.mark.parametrize("bad, shown", [
    (np.ones((8, 8), np.float32), r"float32\[8,8\]"),         # another rank
    (np.ones((3, 2), np.float32), r"float32\[3,2\]"),         # transposed
    (np.ones((2, 3), np.int32), r"int32\[2,3\]"),           # another dtype
    (np.ones((2, 3), np.float64), r"float32\[2,3\]"),         # float64 is float32 with x64 off
    ("text", r"a str"),
])
def test_shape_rank_and_dtype_mismatches_name_the_argument(bad, shown):
    c = _compiled(lambda a, b: a @ b, np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))
    if bad is not None and np.shape(bad) == (2, 3) and np.asarray(bad).dtype == np.float64:
        # canonicalized to float32: accepted, as in JAX
        np.testing.assert_allclose(c(bad, np.ones((3, 4), np.float32)), np.full((2, 4), 3.0))
        return
    with pytest.raises(TypeError, match=rf"Argument 'a' compiled with float32\[2,3\] and called "
                                        rf"with {shown}"):
        c(bad, np.ones((3, 4), np.float32))


def test_every_mismatch_is_listed_with_its_pytree_path():
    c = _compiled(lambda params, x: params["w"] * x + params["b"][0],
                  {"w": np.ones(3, np.float32), "b": [np.float32(0)]}, np.ones(3, np.float32))
    with pytest.raises(TypeError) as info:
        c({"w": np.ones(4, np.float32), "b": [np.ones(2, np.float32)]}, np.ones(3, np.int32))
    message = str(info.value)
    assert "Argument 'params['w']' compiled with float32[3] and called with float32[4]" in message
    assert "Argument 'params['b'][0]' compiled with float32[] and called with float32[2]" in message
    assert "Argument 'x' compiled with float32[3] and called with int32[3]" in message


def test_pytree_structure_and_count_mismatches():
    c = _compiled(lambda a, b: a + b["x"], np.ones(2, np.float32), {"x": np.float32(1)})
    with pytest.raises(TypeError, match="input pytree"):
        c(np.ones(2, np.float32), {"y": np.float32(1)})
    with pytest.raises(TypeError, match="input pytree"):
        c(np.ones(2, np.float32))
    with pytest.raises(TypeError, match="input pytree"):
        c(np.ones(2, np.float32), {"x": np.float32(1)}, np.ones(2, np.float32))


def test_keyword_and_static_arguments():
    c = _compiled(lambda a, b=1.0: a * b, np.ones(3, np.float32), b=2.0)
    np.testing.assert_array_equal(c(np.ones(3, np.float32), b=3.0), [3, 3, 3])
    with pytest.raises(TypeError, match="input pytree"):
        c(np.ones(3, np.float32), 3.0)  # compiled with b as a keyword
    with pytest.raises(TypeError, match=r"Argument 'b' compiled with float32\[\] and called "
                                        r"with float32\[2\]"):
        c(np.ones(3, np.float32), b=np.ones(2, np.float32))
    # a static argument is baked in: the compiled program takes the others only
    s = functrans.jit(lambda a, n: a * n, static_argnums=1).lower(np.ones(3, np.float32), 2)
    np.testing.assert_array_equal(s.compile()(np.ones(3, np.float32)), [2, 2, 2])


def test_python_scalars_must_be_of_the_compiled_kind():
    c = _compiled(lambda a: a + 1, 1.0)
    assert float(c(3.0)) == 4.0
    assert float(c(np.float32(3))) == 4.0
    with pytest.raises(TypeError, match=r"compiled with float32\[\] and called with int32\[\]"):
        c(3)


def test_strides_and_byte_order_are_converted():
    c = _compiled(lambda a: a * 2 + 1, np.ones(5, np.float32))
    strided = np.arange(10, dtype=np.float32)[::2]
    np.testing.assert_array_equal(c(strided), strided * 2 + 1)
    big = np.arange(5, dtype=">f4")
    np.testing.assert_array_equal(c(big), np.arange(5, dtype=np.float32) * 2 + 1)
    np.testing.assert_array_equal(big, np.arange(5))  # the caller's array is unchanged


def test_compiled_reports_its_types():
    c = _compiled(lambda a, b: (a + b, a), np.ones(2, np.float32), np.float32(1))
    args, kwargs = c.in_avals
    assert [a.shape for a in args] == [(2,), ()] and kwargs == {}
    assert [a.shape for a in c.out_avals] == [(2,), (2,)]


# ---- the executables themselves ----------------------------------------------------------------


def _executable(fun, *args):
    return compile_closed(functrans.make_jaxpr(fun)(*args), "llvm")


def test_llvm_executable_checks_shapes_on_both_call_paths():
    x = np.ones((4, 4), np.float32)
    single = _executable(lambda a: jnp.sin(a) * 2, x)  # one native segment: the short path
    passthrough = _executable(lambda a: (jnp.sin(a) * 2, a), x)  # returns an input: the full path
    for exe in (single, passthrough):
        for bad in (np.ones(16, np.float32), np.ones((2, 8), np.float32), np.float32(1)):
            with pytest.raises(TypeError, match=r"float32\[4,4\]"):
                exe(bad)
        np.testing.assert_allclose(exe(x)[0], np.sin(x) * 2, rtol=1e-6)
    with pytest.raises(TypeError, match="takes 1 arguments"):
        single(x, x)


def test_loop_bodies_and_fallback_steps_run_checked():
    def f(x):
        y = lax.fori_loop(0, 3, lambda i, c: c * 2 + 1, x)
        return jnp.linalg.eigh(y @ y.T)[0]  # a LAPACK step between native segments
    exe = _executable(f, np.eye(3, dtype=np.float32))
    with pytest.raises(TypeError):
        exe(np.eye(2, dtype=np.float32))
    expected = functrans.jit(f, backend="reference")(np.eye(3, dtype=np.float32))
    np.testing.assert_allclose(exe(np.eye(3, dtype=np.float32))[0], expected, rtol=1e-4)


def test_cuda_executable_refuses_a_reshape_of_another_shape():
    from functrans.backends.cuda import runtime
    exe = runtime.compile_jaxpr(functrans.make_jaxpr(lambda x: x * 2)(np.zeros((2, 3), np.float32)))
    (buf,) = exe.program.inputs
    with pytest.raises(TypeError, match=r"float32\[2,3\].*\(3, 2\)"):
        exe._device_input(None, np.zeros((3, 2), np.float32), buf)
    with pytest.raises(TypeError, match="takes 1 arguments"):
        exe.call_device()


# ---- random programs, random wrong arguments ------------------------------------------------

_PROGRAMS = {
    "elementwise": lambda a, b: jnp.tanh(a) * b + 1,
    "reduction": lambda a, b: jnp.sum(a * b, axis=-1),
    "matmul": lambda a, b: a @ b.T,
    "scan": lambda a, b: lax.scan(lambda c, r: (c + r, c * r), jnp.zeros_like(a[0]), a * b)[1],
    "cond": lambda a, b: lax.cond(jnp.sum(a) > 0, lambda: a - b, lambda: a + b),
}
_compiled_programs: dict = {}


def _program(name, shape):
    key = (name, shape)
    if key not in _compiled_programs:
        x = np.ones(shape, np.float32)
        _compiled_programs[key] = _compiled(_PROGRAMS[name], x, x)
    return _compiled_programs[key]


def _argument(kind, shape, data):
    """A wrong (or differently laid out) argument for a compiled ``f32[shape]`` parameter."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    values = rng.standard_normal(shape).astype(np.float32)
    if kind == "shape":
        other = data.draw(st.lists(st.integers(1, 6), min_size=len(shape),
                                   max_size=len(shape)).filter(lambda s: tuple(s) != shape))
        return rng.standard_normal(other).astype(np.float32), False
    if kind == "rank":
        rank = data.draw(st.integers(0, 4).filter(lambda r: r != len(shape)))
        return np.ones((2,) * rank, np.float32), False
    if kind == "transposed":
        return np.ascontiguousarray(values.T) if shape[0] != shape[1] else values[None], False
    if kind == "dtype":
        dtype = data.draw(st.sampled_from([np.int32, np.int8, np.uint32, np.bool_, np.complex64,
                                           np.float16]))
        return values.astype(dtype), False
    if kind == "strides":
        wide = np.zeros((shape[0], 2 * shape[1]), np.float32)
        wide[:, ::2] = values
        return wide[:, ::2], True
    if kind == "fortran":
        return np.asfortranarray(values), True
    assert kind == "byteorder"
    return values.astype(">f4"), True


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(_PROGRAMS)),
       shape=st.tuples(st.integers(1, 5), st.integers(1, 5)),
       kind=st.sampled_from(["shape", "rank", "transposed", "dtype", "strides", "fortran",
                             "byteorder"]),
       data=st.data())
def test_random_wrong_arguments_raise_or_compute_the_right_answer(name, shape, kind, data):
    c = _program(name, shape)
    bad, valid = _argument(kind, shape, data)
    good = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    if kind == "transposed" and bad.shape == shape:
        valid = True  # a square matrix transposed is of the right type
    if not valid:
        with pytest.raises(TypeError, match="Argument 'b' compiled with"):
            c(good, bad)
        return
    expected = _PROGRAMS[name](good, np.ascontiguousarray(bad, dtype=np.float32))
    np.testing.assert_allclose(np.asarray(c(good, bad)), np.asarray(expected), rtol=1e-5,
                               atol=1e-5)


# ---- the stages: trace, lower, compile ------------------------------------------------------


def test_trace_lower_compile_describe_the_signature():
    from functrans import stages
    f = functrans.jit(lambda x, y, n: x * y * n, static_argnums=2, donate_argnums=0)
    traced = f.trace(np.ones(3, np.float32), 2.0, 4)
    assert isinstance(traced, stages.Traced) and traced.fun_name == "<lambda>"
    assert [str(v.aval) for v in traced.jaxpr.jaxpr.invars] == ["float32[3]", "~float32[]"]
    (x_info, y_info), kwargs = traced.args_info
    assert kwargs == {} and x_info.donated and not y_info.donated
    assert x_info.shape == (3,) and y_info.dtype == np.float32
    assert traced.donate_argnums == (0,)
    assert traced.out_info.shape == (3,) and traced.out_info.dtype == np.float32
    lowered = traced.lower()
    assert isinstance(lowered, stages.Lowered) and lowered.out_info.shape == (3,)
    compiled = lowered.compile()
    assert isinstance(compiled, stages.Compiled)
    np.testing.assert_array_equal(compiled.call(np.ones(3, np.float32), 2.0), [8, 8, 8])
    assert isinstance(f, stages.Wrapped)
