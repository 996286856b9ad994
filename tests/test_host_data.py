"""Host data becoming arrays.

NumPy arrays: the caller's array is never changed (it stays writeable), an Array never
aliases it (writing to it, or to the array it views, later changes no result, also of a
jitted function that captured it as a constant), and big-endian data works everywhere,
converted to native byte order.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import functrans
import functrans.numpy as jnp
from functrans import grad, jit, lax, vmap

# =============================================================================================
# NumPy arrays: never changed, never aliased, any byte order
# =============================================================================================

def _host():
    return np.arange(1.0, 4.0, dtype=np.float32)


# Each op takes the caller's array ``h`` and returns something built from it.
HOST_OPS = [
    ("jnp.sin", jnp.sin),
    ("jnp.asarray", jnp.asarray),
    ("jnp.array", jnp.array),
    ("Array(h)", functrans.Array),
    ("device_put", functrans.device_put),
    ("h + Array", lambda h: h + jnp.ones(3)),
    ("Array + h", lambda h: jnp.ones(3) + h),
    ("jnp.reshape", lambda h: jnp.reshape(h, (3, 1))),
    ("jnp.where", lambda h: jnp.where(True, h, 0.0)),
    ("lax.sin", lax.sin),
    ("lax.reshape", lambda h: lax.reshape(h, (3, 1))),
    ("lax.convert_element_type to its own dtype",
     lambda h: lax.convert_element_type(h, jnp.float32)),
    ("lax.neg twice", lambda h: lax.neg(lax.neg(h))),
    ("jit argument", jit(lambda x: x * 2)),
    ("jit identity", jit(lambda x: x)),
    ("jit identity pair", jit(lambda x: (x, x + 1))),
    ("jit constant", lambda h: jit(lambda x: x + h)(1.0)),
    ("jit lax constant", lambda h: jit(lambda x: lax.add(x, h))(jnp.zeros(3))),
    ("grad argument", lambda h: grad(lambda x: (x * 2).sum())(h)),
    ("grad constant", lambda h: grad(lambda x: (x * h).sum())(1.0)),
    ("vjp constant", lambda h: functrans.vjp(lambda x: lax.mul(x, h), jnp.ones(3))[1](
        jnp.ones(3))[0]),
    ("vmap argument", vmap(lambda x: x * 2)),
    ("vmap constant", lambda h: vmap(lambda x: x * h)(jnp.ones(2))),
    ("make_jaxpr constant", lambda h: functrans.make_jaxpr(lambda x: x + h)(1.0).consts),
]


@pytest.mark.parametrize("name,op", HOST_OPS, ids=[n for n, _ in HOST_OPS])
def test_the_callers_array_is_never_changed_nor_aliased(name, op):
    h = _host()
    out = op(h)
    assert h.flags.writeable, f"{name} made the caller's array read-only"
    np.testing.assert_array_equal(h, [1.0, 2.0, 3.0])
    before = [np.array(leaf) for leaf in functrans.tree_util.tree_leaves(out)]
    h[:] = 100.0  # the caller writes to its array: no result may change
    after = [np.asarray(leaf) for leaf in functrans.tree_util.tree_leaves(out)]
    for b, a in zip(before, after):
        np.testing.assert_array_equal(a, b)


def test_a_view_of_the_callers_array_is_copied_too():
    base = np.arange(6.0, dtype=np.float32)
    x = jnp.asarray(base[::2])
    y = lax.neg(base[1:4])
    base[:] = -1.0
    np.testing.assert_array_equal(x, [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(y, [-1.0, -2.0, -3.0])
    assert base.flags.writeable


@pytest.mark.parametrize("x64", [False, True], ids=["x64_off", "x64_on"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_jit_constant_keeps_the_values_it_was_traced_with(dtype, x64):
    functrans.config.update("jax_enable_x64", x64)
    base = np.arange(6, dtype=dtype)
    v = base[:3]
    f = jit(lambda x: x + v)
    first = np.asarray(f(1.0))
    base[0] = 100
    np.testing.assert_array_equal(f(1.0), first)
    np.testing.assert_array_equal(first, [1.0, 2.0, 3.0])

    own = np.arange(3, dtype=dtype)
    g = jit(lambda x: lax.add(x, own))
    first = np.asarray(g(jnp.zeros(3, own.dtype)))
    own[:] = 7
    np.testing.assert_array_equal(g(jnp.zeros(3, own.dtype)), first)


def test_the_fast_path_still_passes_arrays_own_buffers():
    """A jitted call on Arrays keeps working with the Arrays' immutable buffers (no copy
    needed: nobody can write them); an output that is an input shares its buffer."""
    f = jit(lambda x: x)
    x = jnp.arange(3.0)
    f(x)
    out = f(x)  # the cached fast path
    np.testing.assert_array_equal(out, x)
    assert not out.to_numpy().flags.writeable


BIG_ENDIAN = [">f4", ">i4", ">c8", ">u2", ">f8", ">i8"]


def _native(dtype):
    return np.dtype(dtype).newbyteorder("=")


# (name, op, the dtype kinds it applies to)
BIG_ENDIAN_OPS = [
    ("jnp.sin", jnp.sin, "fciu"),
    ("lax.neg", lax.neg, "fci"),
    ("jnp.asarray", jnp.asarray, "fciu"),
    ("Array(h)", functrans.Array, "fciu"),
    ("device_put", functrans.device_put, "fciu"),
    ("h + 1", lambda h: jnp.add(h, 1), "fciu"),
    ("h == native", lambda h: jnp.equal(h, np.asarray(h, _native(h.dtype))), "fciu"),
    ("jit argument", jit(lambda x: x * 2), "fciu"),
    ("jit argument in a pytree", jit(lambda d: d["a"] + 1), "fciu"),
    ("jit constant", lambda h: jit(lambda x: x * h)(jnp.ones((), _native(h.dtype))), "fciu"),
    ("vmap", vmap(lambda x: x * 2), "fciu"),
    ("grad argument", lambda h: grad(lambda x: (x * x).sum())(h), "f"),
    ("grad constant", lambda h: grad(lambda x: (x * h).sum())(1.0), "f"),
]
BIG_ENDIAN_CASES = [(name, op, dtype) for name, op, kinds in BIG_ENDIAN_OPS
                    for dtype in BIG_ENDIAN if np.dtype(dtype).kind in kinds]


@pytest.mark.parametrize("name,op,dtype", BIG_ENDIAN_CASES,
                         ids=[f"{name}-{dtype}" for name, _, dtype in BIG_ENDIAN_CASES])
def test_big_endian_input_works_in_native_byte_order(name, op, dtype):
    functrans.config.update("jax_enable_x64", np.dtype(dtype).itemsize == 8
                            and np.dtype(dtype).kind != "c")
    native = np.arange(1, 4).astype(_native(dtype))
    h = native.astype(dtype)
    assert not h.dtype.isnative
    arg = {"a": h} if "pytree" in name else h
    out, expected = op(arg), op({"a": native} if "pytree" in name else native)
    for o, e in zip(functrans.tree_util.tree_leaves(out), functrans.tree_util.tree_leaves(expected)):
        assert o.dtype == e.dtype and o.dtype.isnative, (o.dtype, e.dtype)
        np.testing.assert_array_equal(np.asarray(o), np.asarray(e))
    assert h.flags.writeable


def test_big_endian_dtype_is_canonicalized():
    assert jnp.result_type(np.ones(2, ">f4")) == np.float32
    assert jnp.asarray(np.ones(2, ">f4")).dtype.isnative
    assert functrans.core.get_aval(np.ones(2, ">i4")) == functrans.core.get_aval(np.ones(2, "<i4"))


@given(st.sampled_from(["<f4", ">f4", "<i4", ">i4", ">i2", "<u1"]),
       st.lists(st.integers(1, 5), min_size=1, max_size=3),
       st.integers(1, 2), st.booleans())
def test_host_arrays_of_any_layout_are_copied(dtype, shape, step, transpose):
    """A NumPy array of any byte order and layout (a strided or transposed view) becomes an
    Array equal to it, eagerly and as a jit argument; the caller's array and its base are
    untouched and later writes to them change nothing."""
    base = (np.arange(int(np.prod(shape, dtype=np.int64)) * step ** len(shape)) % 100) \
        .astype(dtype).reshape([s * step for s in shape])
    h = base[tuple(slice(None, None, step) for _ in shape)]
    if transpose:
        h = h.T
    expected = np.array(h, dtype=_native(dtype))
    eager, jitted = jnp.asarray(h), jit(lambda x: x + 0)(h)
    base[...] = 1
    for out in (eager, jitted):
        assert out.dtype == expected.dtype
        np.testing.assert_array_equal(out, expected)
    assert base.flags.writeable and h.flags.writeable
