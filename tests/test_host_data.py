"""Host data becoming arrays: Python ints and NumPy arrays.

Python ints: one that does not fit the dtype it becomes raises ``OverflowError``, in every
place a Python int becomes an array value (constructors, lists, literals in traced code, jit
arguments, operands of operators), with x64 off and on; elsewhere the result is JAX's. Each
row's expectation is what JAX 0.10.2 gives.

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

RAISES = OverflowError


def _i32(n=2):
    return jnp.ones(n, jnp.int32)


# (name, thunk, expected with x64 off, expected with x64 on). An expectation is RAISES or
# (values, dtype name); the dtype with x64 on is JAX's (Python ints are int64 there).
PYTHON_INT_CASES = [
    # ---- constructors
    ("asarray scalar 2**31", lambda: jnp.asarray(2**31), RAISES, (2**31, "int64")),
    ("array scalar 2**40", lambda: jnp.array(2**40), RAISES, (2**40, "int64")),
    ("asarray scalar 2**63", lambda: jnp.asarray(2**63), RAISES, RAISES),
    ("asarray scalar -2**63-1", lambda: jnp.asarray(-2**63 - 1), RAISES, RAISES),
    ("asarray -1 as uint32", lambda: jnp.asarray(-1, jnp.uint32), RAISES, RAISES),
    ("asarray 2**31 as uint32", lambda: jnp.asarray(2**31, jnp.uint32),
     (2**31, "uint32"), (2**31, "uint32")),
    ("asarray 2**32 as uint32", lambda: jnp.asarray(2**32, jnp.uint32), RAISES, RAISES),
    ("asarray 300 as uint8", lambda: jnp.asarray(300, jnp.uint8), RAISES, RAISES),
    ("asarray 2**40 as float32", lambda: jnp.asarray(2**40, jnp.float32),
     (2.0**40, "float32"), (2.0**40, "float32")),
    ("scalar type int32(2**31)", lambda: jnp.int32(2**31), RAISES, RAISES),
    ("scalar type uint32(2**31)", lambda: jnp.uint32(2**31), (2**31, "uint32"), (2**31, "uint32")),
    # ---- lists
    ("asarray list [2**31, 1]", lambda: jnp.asarray([2**31, 1]),
     RAISES, ([2**31, 1], "int64")),
    ("array list [2**40]", lambda: jnp.array([2**40]), RAISES, ([2**40], "int64")),
    ("asarray tuple (2**40,)", lambda: jnp.asarray((2**40,)), RAISES, ([2**40], "int64")),
    ("asarray nested [[1], [2**40]]", lambda: jnp.asarray([[1], [2**40]]),
     RAISES, ([[1], [2**40]], "int64")),
    ("asarray list [2**63]", lambda: jnp.asarray([2**63]), RAISES, RAISES),
    ("asarray list [-2**31-1]", lambda: jnp.array([-2**31 - 1]), RAISES, ([-2**31 - 1], "int64")),
    ("asarray list at the int32 bounds", lambda: jnp.array([2**31 - 1, -2**31]),
     ([2**31 - 1, -2**31], "int32"), ([2**31 - 1, -2**31], "int64")),
    ("asarray list [True, 2**40]", lambda: jnp.array([True, 2**40]),
     RAISES, ([1, 2**40], "int64")),
    ("asarray list [-1] as uint32", lambda: jnp.asarray([-1], jnp.uint32), RAISES, RAISES),
    ("asarray list [2**31] as uint32", lambda: jnp.asarray([2**31], jnp.uint32),
     ([2**31], "uint32"), ([2**31], "uint32")),
    ("asarray list [300] as uint8", lambda: jnp.asarray([300], jnp.uint8), RAISES, RAISES),
    ("asarray list [2**40] as float32", lambda: jnp.asarray([2**40], jnp.float32),
     ([2.0**40], "float32"), ([2.0**40], "float32")),
    ("asarray list [1.0, 2**40]", lambda: jnp.asarray([1.0, 2**40]),
     ([1.0, 2.0**40], "float32"), ([1.0, 2.0**40], "float64")),
    # a Python int in a list takes the dtype the list promotes to, also with x64
    ("asarray list [int32(1), 2**40]", lambda: jnp.asarray([np.int32(1), 2**40]), RAISES, RAISES),
    ("asarray list [int8(1), 300]", lambda: jnp.asarray([np.int8(1), 300]), RAISES, RAISES),
    ("asarray list [uint8(1), -1]", lambda: jnp.asarray([np.uint8(1), -1]), RAISES, RAISES),
    ("asarray list [Array int32, 2**40]", lambda: jnp.asarray([jnp.int32(1), 2**40]),
     RAISES, RAISES),
    ("asarray list [float32(1), 2**40]", lambda: jnp.asarray([np.float32(1), 2**40]),
     ([1.0, 2.0**40], "float32"), ([1.0, 2.0**40], "float32")),
    ("scalar type int32([2**31])", lambda: jnp.int32([2**31]), RAISES, RAISES),
    # ---- full and friends convert as lax.convert_element_type does (wrapping, as in JAX)
    ("full(3, 2**40)", lambda: jnp.full(3, 2**40), ([0] * 3, "int32"), ([2**40] * 3, "int64")),
    ("full(3, 2**40, int32)", lambda: jnp.full(3, 2**40, jnp.int32),
     ([0] * 3, "int32"), ([0] * 3, "int32")),
    ("full(3, 300, uint8)", lambda: jnp.full(3, 300, jnp.uint8),
     ([44] * 3, "uint8"), ([44] * 3, "uint8")),
    ("full(3, -1, uint32)", lambda: jnp.full(3, -1, jnp.uint32),
     ([2**32 - 1] * 3, "uint32"), ([2**32 - 1] * 3, "uint32")),
    ("full(3, 2**31, uint32)", lambda: jnp.full(3, 2**31, jnp.uint32),
     ([2**31] * 3, "uint32"), ([2**31] * 3, "uint32")),
    ("full(3, 2**40, float32)", lambda: jnp.full(3, 2**40, jnp.float32),
     ([2.0**40] * 3, "float32"), ([2.0**40] * 3, "float32")),
    ("full((), 2**40)", lambda: jnp.full((), 2**40), (0, "int32"), (2**40, "int64")),
    ("full_like(int32, 2**40)", lambda: jnp.full_like(_i32(), 2**40),
     ([0, 0], "int32"), ([0, 0], "int32")),
    ("full_like(uint8, 300)", lambda: jnp.full_like(jnp.zeros(2, jnp.uint8), 300),
     ([44, 44], "uint8"), ([44, 44], "uint8")),
    ("zeros_like(2**40)", lambda: jnp.zeros_like(2**40), (0, "int32"), (0, "int64")),
    ("ones_like(2**40)", lambda: jnp.ones_like(2**40), (1, "int32"), (1, "int64")),
    ("lax.full(2, 2**40, int32)", lambda: lax.full((2,), 2**40, jnp.int32),
     ([0, 0], "int32"), ([0, 0], "int32")),
    ("convert_element_type(2**40, int32)", lambda: lax.convert_element_type(2**40, jnp.int32),
     (0, "int32"), (0, "int32")),
    ("convert_element_type(2**40, float32)",
     lambda: lax.convert_element_type(2**40, jnp.float32), (2.0**40, "float32"),
     (2.0**40, "float32")),
    ("arange across 2**31", lambda: jnp.arange(2**31 - 1, 2**31 + 1),
     ([2**31 - 1, -2**31], "int32"), ([2**31 - 1, 2**31], "int64")),
    # ---- operators and jnp functions with a Python int operand: it must fit int32 (int64
    # with x64) first, whatever the other operand's dtype, and then converts to that dtype
    ("int32 + 2**32", lambda: _i32() + 2**32, RAISES, ([1, 1], "int32")),
    ("int32 + 2**31", lambda: _i32() + 2**31, RAISES, ([-2**31 + 1] * 2, "int32")),
    ("int32 + (2**31 - 1)", lambda: _i32() + (2**31 - 1),
     ([-2**31] * 2, "int32"), ([-2**31] * 2, "int32")),
    ("int32 - 2**31", lambda: _i32() - 2**31, RAISES, ([-2**31 + 1] * 2, "int32")),
    ("2**40 - int32", lambda: 2**40 - _i32(), RAISES, ([-1, -1], "int32")),
    ("int32 * 2**40", lambda: _i32() * 2**40, RAISES, ([0, 0], "int32")),
    ("int32 // 2**40", lambda: _i32() // 2**40, RAISES, ([-2, -2], "int32")),
    ("int32 < 2**40", lambda: _i32() < 2**40, RAISES, ([False] * 2, "bool")),
    ("int32 == 2**40", lambda: _i32() == 2**40, RAISES, ([False] * 2, "bool")),
    ("int32 & 2**40", lambda: _i32() & 2**40, RAISES, ([0, 0], "int32")),
    ("int32 << 2**40", lambda: _i32() << 2**40, RAISES, ([1, 1], "int32")),
    ("int8 + 300", lambda: jnp.ones(2, jnp.int8) + 300, ([45] * 2, "int8"), ([45] * 2, "int8")),
    ("uint8 + -1", lambda: jnp.ones(2, jnp.uint8) + -1, ([0] * 2, "uint8"), ([0] * 2, "uint8")),
    ("uint32 + 2**31", lambda: jnp.ones(2, jnp.uint32) + 2**31,
     RAISES, ([2**31 + 1] * 2, "uint32")),
    ("uint32 * -1", lambda: jnp.ones(2, jnp.uint32) * -1,
     ([2**32 - 1] * 2, "uint32"), ([2**32 - 1] * 2, "uint32")),
    ("float32 + 2**40", lambda: jnp.ones(2, jnp.float32) + 2**40,
     RAISES, ([2.0**40 + 1] * 2, "float32")),
    ("float32 + 2**100", lambda: jnp.ones(2, jnp.float32) + 2**100, RAISES, RAISES),
    ("complex64 + 2**100", lambda: jnp.ones(2, jnp.complex64) + 2**100, RAISES, RAISES),
    ("int32 + 2**63", lambda: _i32() + 2**63, RAISES, RAISES),
    ("jnp.add(int32, 2**40)", lambda: jnp.add(_i32(), 2**40), RAISES, ([1, 1], "int32")),
    ("jnp.add(2**40, 1)", lambda: jnp.add(2**40, 1), RAISES, (2**40 + 1, "int64")),
    ("jnp.maximum(int32, 2**40)", lambda: jnp.maximum(_i32(), 2**40), RAISES, ([1, 1], "int32")),
    ("jnp.where(c, int32, 2**40)", lambda: jnp.where(jnp.array([True, False]), _i32(), 2**40),
     RAISES, ([1, 0], "int32")),
    ("jnp.where(c, uint8, 300)",
     lambda: jnp.where(jnp.array([True, False]), jnp.ones(2, jnp.uint8), 300),
     ([1, 44], "uint8"), ([1, 44], "uint8")),
    ("jnp.clip(int32, 0, 2**40)", lambda: jnp.clip(_i32(), 0, 2**40), RAISES, ([0, 0], "int32")),
    # an integer exponent is static (integer_pow): any size, wrapping in the base's dtype
    ("int32 ** 2**40", lambda: _i32() ** 2**40, ([1, 1], "int32"), ([1, 1], "int32")),
    ("int32 ** 2**70", lambda: jnp.array([1, 2, -1]) ** 2**70,
     ([1, 0, 1], "int32"), ([1, 0, 1], "int64")),
    ("x[2**31]", lambda: _i32()[2**31], RAISES, (1, "int32")),
    ("x.at[0].set(2**40)", lambda: _i32().at[0].set(2**40), RAISES, ([0, 1], "int32")),
    ("x.at[0].set(300) uint8", lambda: jnp.ones(2, jnp.uint8).at[0].set(300),
     ([44, 1], "uint8"), ([44, 1], "uint8")),
    # ---- literals in traced code and arguments of jitted functions
    ("jit: a * 2**32 on int32", lambda: jit(lambda a: a * 2**32)(np.int32(3)), RAISES, (0, "int32")),
    ("jit: literal asarray(2**40)", lambda: jit(lambda: jnp.asarray(2**40))(),
     RAISES, (2**40, "int64")),
    ("jit: x + 2**40 on a Python float", lambda: jit(lambda x: x + 2**40)(1.0),
     RAISES, (2.0**40 + 1, "float64")),
    ("jit: full(3, 2**40)", lambda: jit(lambda: jnp.full(3, 2**40))(),
     ([0] * 3, "int32"), ([2**40] * 3, "int64")),
    ("jit: list [x_int8, 300]", lambda: jit(lambda x: jnp.asarray([x, 300]))(jnp.int8(1)),
     RAISES, RAISES),
    ("jit: list [x_float32, 2**40]", lambda: jit(lambda x: jnp.asarray([x, 2**40]))(jnp.float32(1)),
     ([1.0, 2.0**40], "float32"), ([1.0, 2.0**40], "float32")),
    ("jit argument 2**31", lambda: jit(lambda x: x)(2**31), RAISES, (2**31, "int64")),
    ("jit argument 2**63", lambda: jit(lambda x: x)(2**63), RAISES, RAISES),
    ("jit argument -2**63-1", lambda: jit(lambda x: x)(-2**63 - 1), RAISES, RAISES),
    ("jit argument [2**40] (a pytree)", lambda: jit(lambda x: x[0])([2**40]),
     RAISES, (2**40, "int64")),
    ("jit static argument 2**40 in an add",
     lambda: jit(lambda x, n: x + n, static_argnums=1)(_i32(), 2**40), RAISES, ([1, 1], "int32")),
    ("grad: x * 2**40", lambda: grad(lambda x: x * 2**40)(jnp.float32(1)),
     RAISES, (2.0**40, "float32")),
    ("grad: jit inside", lambda: grad(jit(lambda x: (x + 2**40) * x))(jnp.float32(1)),
     RAISES, (2.0**40 + 2, "float32")),
    ("vmap: x + 2**40", lambda: vmap(lambda x: x + 2**40)(_i32()), RAISES, ([1, 1], "int32")),
    ("vmap: list constant", lambda: vmap(lambda x: x * jnp.asarray([2**40, 1]))(jnp.ones(2)),
     RAISES, ([[2.0**40, 1.0]] * 2, "float64")),
    ("vmap of jit: x + 2**40", lambda: vmap(jit(lambda x: x + 2**40))(jnp.ones(2, jnp.float32)),
     RAISES, ([2.0**40 + 1] * 2, "float32")),
]


@pytest.mark.parametrize("x64", [False, True], ids=["x64_off", "x64_on"])
@pytest.mark.parametrize("name,thunk,off,on", PYTHON_INT_CASES,
                         ids=[c[0] for c in PYTHON_INT_CASES])
def test_python_int_becomes_an_array_as_in_jax(name, thunk, off, on, x64):
    expected = on if x64 else off
    functrans.config.update("jax_enable_x64", x64)
    if expected is RAISES:
        with pytest.raises(OverflowError):
            thunk()
        return
    values, dtype = expected
    out = thunk()
    assert out.dtype == np.dtype(dtype), (out.dtype, dtype)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(values, dtype))


def test_overflow_message_names_the_value_and_the_dtype():
    with pytest.raises(OverflowError, match=r"Python int 4294967296 too large to convert to int32"
                                            r".*jax_enable_x64"):
        _i32() + 2**32
    with pytest.raises(OverflowError, match="Python int 2147483648 too large"):
        lax.add(_i32(), 2**31)
    functrans.config.update("jax_enable_x64", True)
    with pytest.raises(OverflowError, match=r"Python int 9223372036854775808 too large to "
                                            r"convert to int64"):
        jit(lambda x: x)(2**63)


@given(st.integers(-2**70, 2**70), st.sampled_from(["int8", "uint8", "int32", "uint32"]),
       st.booleans())
def test_python_int_in_an_operator_raises_exactly_outside_the_default_int(value, dtype, x64):
    """``array + value``: an OverflowError exactly when ``value`` is outside the default
    integer type, else the sum wraps around in the array's dtype."""
    functrans.config.update("jax_enable_x64", x64)
    bits = 64 if x64 else 32
    x = jnp.asarray(np.array([0, 1, 7], dtype))
    if not -2**(bits - 1) <= value < 2**(bits - 1):
        with pytest.raises(OverflowError):
            x + value
        return
    wrapped = (np.array([0, 1, 7], object) + value) % 2**(8 * np.dtype(dtype).itemsize)
    expected = np.array([int(w) for w in wrapped], np.uint64).astype(dtype)
    np.testing.assert_array_equal(np.asarray(x + value), expected)


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
    # (jnp.reshape of a NumPy array is NumPy's reshape, a view, as in JAX 0.10.2: not here)
    ("jnp.reshape of an Array", lambda h: jnp.reshape(jnp.asarray(h), (3, 1))),
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
    first = np.asarray(g(jnp.zeros_like(own)))
    own[:] = 7
    np.testing.assert_array_equal(g(jnp.zeros_like(own)), first)


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
