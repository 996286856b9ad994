"""jax.lax promotes no dtypes: binary operations, clamp and select take operands of one dtype
(a Python scalar has its own weak dtype), while dot_general mixes dtypes in the wider one.

The expectations are JAX 0.10.2's answers, recorded as literals: "ok <dtype>" for a result,
or the TypeError's message (or its start)."""
import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import lax
from functrans.primitives import elementwise, special

TIP = " (Tip: jnp.{} is a similar function that does automatic type promotion on inputs)."


def same_dtypes(op, dtypes, jnp_name=None):
    msg = f"lax.{op} requires arguments to have the same dtypes, got {', '.join(dtypes)}."
    return msg + (TIP.format(jnp_name) if jnp_name else "")


def operand(spec):
    """A test operand from a short spec: 'f32' (an array of 2), 'py:1.0' (a Python
    scalar), 'np:float64' (a NumPy scalar), 'weak' (a weak-typed float32 array)."""
    if spec.startswith("py:"):
        return {"1": 1, "1.0": 1.0, "True": True, "1j": 1j}[spec[3:]]
    if spec.startswith("np:"):
        return np.dtype(spec[3:]).type(1)
    if spec == "weak":
        return lax.convert_element_type(jnp.ones(2), np.float32, weak_type=True)
    dtype = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i8": np.int8,
             "u8": np.uint8, "u32": np.uint32, "b": np.bool_, "c64": np.complex64}[spec]
    return jnp.ones(2, dtype)


# (lax function, x, y, JAX 0.10.2's answer)
BINARY_CASES = [
    ("add", "i32", "py:1.0", same_dtypes("add", ["int32", "float32"], "add")),
    ("add", "i32", "py:1", "ok int32"),
    ("add", "f32", "py:1", same_dtypes("add", ["float32", "int32"], "add")),
    ("add", "f32", "py:1.0", "ok float32"),
    ("add", "f16", "py:1.0", same_dtypes("add", ["float16", "float32"], "add")),
    ("add", "py:1.0", "f16", same_dtypes("add", ["float32", "float16"], "add")),
    ("add", "u8", "py:1", same_dtypes("add", ["uint8", "int32"], "add")),
    ("add", "c64", "py:1j", "ok complex64"),
    ("add", "c64", "py:1.0", same_dtypes("add", ["complex64", "float32"], "add")),
    ("add", "f32", "np:float64", "ok float32"),   # 64-bit NumPy values narrow without x64
    ("add", "f32", "np:float32", "ok float32"),
    ("add", "np:int8", "i32", same_dtypes("add", ["int8", "int32"], "add")),
    ("add", "weak", "f16", same_dtypes("add", ["float32", "float16"], "add")),
    ("add", "weak", "f32", "ok float32"),
    ("add", "i32", "f32", same_dtypes("add", ["int32", "float32"], "add")),
    ("add", "i32", "u32", same_dtypes("add", ["int32", "uint32"], "add")),
    ("add", "b", "py:True", "add does not accept dtype bool at position 0. Accepted dtypes "
                            "at position 0 are subtypes of integer, floating, complexfloating."),
    ("add", "py:1.0", "py:1.0", "ok float32 weak"),
    ("add", "py:1.0", "py:1", same_dtypes("add", ["float32", "int32"], "add")),
    ("sub", "f32", "i32", same_dtypes("sub", ["float32", "int32"], "subtract")),
    ("mul", "f32", "py:1", same_dtypes("mul", ["float32", "int32"], "multiply")),
    ("div", "i32", "py:1.0", same_dtypes("div", ["int32", "float32"], "divide")),
    ("rem", "f32", "py:1", same_dtypes("rem", ["float32", "int32"])),
    ("rem", "i32", "py:1", "ok int32"),
    ("max", "b", "py:True", "ok bool"),
    ("max", "b", "py:1", same_dtypes("max", ["bool", "int32"], "maximum")),
    ("min", "f32", "f16", same_dtypes("min", ["float32", "float16"], "minimum")),
    ("atan2", "f32", "py:1.0", "ok float32"),
    ("atan2", "f32", "f16", same_dtypes("atan2", ["float32", "float16"], "arctan2")),
    ("nextafter", "f32", "py:1.0", "ok float32"),
    ("eq", "f32", "py:1", same_dtypes("eq", ["float32", "int32"], "equal")),
    ("eq", "b", "py:True", "ok bool"),
    ("ne", "i32", "u32", same_dtypes("ne", ["int32", "uint32"], "not_equal")),
    ("lt", "f32", "i32", same_dtypes("lt", ["float32", "int32"])),
    ("le", "i32", "py:1.0", same_dtypes("le", ["int32", "float32"])),
    ("gt", "i32", "py:1", "ok bool"),
    ("ge", "f32", "f16", same_dtypes("ge", ["float32", "float16"])),
    ("bitwise_and", "i32", "py:True", same_dtypes("and", ["int32", "bool"])),
    ("bitwise_and", "b", "py:True", "ok bool"),
    ("bitwise_or", "i32", "i8", same_dtypes("or", ["int32", "int8"])),
    ("bitwise_xor", "u8", "py:1", same_dtypes("xor", ["uint8", "int32"])),
    ("shift_left", "i32", "py:1", "ok int32"),
    ("shift_left", "u32", "py:1", same_dtypes("shift_left", ["uint32", "int32"], "left_shift")),
    ("shift_right_logical", "i32", "i8",
     same_dtypes("shift_right_logical", ["int32", "int8"], "right_shift")),
    ("shift_right_arithmetic", "i32", "u32",
     same_dtypes("shift_right_arithmetic", ["int32", "uint32"], "right_shift")),
    ("complex", "py:1.0", "f32", "ok complex64"),
    ("pow", "f32", "i32", "ok float32"),
    ("pow", "f32", "py:1", "ok float32"),
    ("pow", "f32", "u8", "ok float32"),
    ("pow", "c64", "i32", "ok complex64"),
    ("pow", "py:1.0", "py:1", "ok float32 weak"),
    ("pow", "f32", "f16", "the first argument to pow must have an inexact dtype"),
    ("pow", "i32", "py:1.0", "pow does not accept dtype int32 at position 0."),
    ("lt", "c64", "c64", "lt does not accept dtype complex64 at position 0. Accepted dtypes "
                         "at position 0 are subtypes of integer, floating, bool."),
    ("le", "py:1j", "py:1j", "le does not accept dtype complex64 at position 0."),
    ("gt", "c64", "py:1j", "gt does not accept dtype complex64 at position 0."),
    ("ge", "c64", "c64", "ge does not accept dtype complex64 at position 0."),
    ("eq", "c64", "c64", "ok bool"),
    ("max", "c64", "c64", "ok complex64"),
    ("igamma", "np:float32", "py:1", "igamma does not accept dtype int32 at position 1. "
                                     "Accepted dtypes at position 1 are subtypes of floating."),
    ("igamma", "f32", "py:1.0", "ok float32"),
    ("igamma", "py:1.0", "f32", "ok float32"),
    ("igamma", "f16", "py:1.0", same_dtypes("igamma", ["float16", "float32"])),
    ("igamma", "weak", "f16", same_dtypes("igamma", ["float32", "float16"])),
    ("igamma", "i32", "i32", "igamma does not accept dtype int32 at position 0."),
    ("igamma", "py:1.0", "py:1.0", "ok float32 weak"),
    ("igammac", "f32", "py:1", "igammac does not accept dtype int32 at position 1."),
    ("igammac", "f32", "f16", same_dtypes("igammac", ["float32", "float16"])),
    ("igamma_grad_a", "f16", "py:1.0", same_dtypes("igamma_grad_a", ["float16", "float32"])),
    ("zeta", "f32", "py:1", "zeta does not accept dtype int32 at position 1."),
    ("zeta", "f16", "py:1.0", same_dtypes("zeta", ["float16", "float32"])),
    ("zeta", "f32", "py:1.0", "ok float32"),
    # (JAX fails on Python scalars here with an AttributeError; mixed dtypes are a TypeError)
    ("random_gamma_grad", "f32", "f16", "lax.random_gamma_grad requires arguments to have "
                                        "the same dtypes"),
    ("random_gamma_grad", "f32", "f32", "ok float32"),
    ("mulhi", "i32", "py:1", "ok int32"),
    ("mulhi", "u32", "py:1", same_dtypes("mulhi", ["uint32", "int32"])),
    ("mulhi", "i32", "u32", same_dtypes("mulhi", ["int32", "uint32"])),
    ("mulhi", "f32", "f32", "mulhi does not accept dtype float32 at position 0. Accepted "
                            "dtypes at position 0 are subtypes of integer."),
    ("mulhi", "i32", "py:1.0", "mulhi does not accept dtype float32 at position 1."),
    ("mulhi", "py:1", "py:1", "ok int32 weak"),
]

# (a, b, x, JAX 0.10.2's answer)
BETAINC_CASES = [
    ("f32", "py:1.0", "f32", "ok float32"),
    ("f32", "py:1", "f32", "regularized_incomplete_beta does not accept dtype int32 at "
                           "position 1. Accepted dtypes at position 1 are subtypes of floating."),
    ("f32", "f16", "f32", same_dtypes("regularized_incomplete_beta",
                                      ["float32", "float16", "float32"])),
    ("f16", "py:1.0", "f16", same_dtypes("regularized_incomplete_beta",
                                         ["float16", "float32", "float16"])),
    ("py:1.0", "py:1.0", "py:1.0", "ok float32 weak"),
    ("i32", "i32", "i32", "regularized_incomplete_beta does not accept dtype int32 at "
                          "position 0."),
]


def outcome(fn, *args):
    try:
        out = fn(*args)
    except TypeError as e:
        return str(e)
    return f"ok {out.dtype}" + (" weak" if out.weak_type else "")


@pytest.mark.parametrize("op,x,y,expected", BINARY_CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in BINARY_CASES])
def test_binary_dtype_rules_match_jax(op, x, y, expected):
    got = outcome(getattr(lax, op), operand(x), operand(y))
    assert got.startswith(expected), got


@pytest.mark.parametrize("a,b,x,expected", BETAINC_CASES)
def test_betainc_dtype_rules_match_jax(a, b, x, expected):
    got = outcome(lax.betainc, operand(a), operand(b), operand(x))
    assert got.startswith(expected), got


def test_special_functions_reject_a_python_int_operand():
    # the reproducer: JAX's TypeError, where an int operand used to become float32
    with pytest.raises(TypeError, match="igamma does not accept dtype int32 at position 1"):
        lax.igamma(jnp.float32(1), 1)
    np.testing.assert_allclose(lax.igamma(jnp.float32(1), 1.0), 0.6321205, rtol=1e-6)


def test_the_issue_reproducer():
    with pytest.raises(TypeError, match=r"lax.add requires arguments to have the same "
                                        r"dtypes, got int32, float32"):
        lax.add(jnp.int32(1), 1.0)


def test_x64_python_float_is_float64():
    with functrans.enable_x64(True):
        assert outcome(lax.add, jnp.ones(2, np.float32), 1.0) == \
            same_dtypes("add", ["float32", "float64"], "add")
        assert outcome(lax.add, jnp.ones(2, np.int64), 1) == "ok int64"


def test_non_array_operands_are_type_errors():
    with pytest.raises(TypeError):
        lax.add(jnp.ones(2), [1.0, 2.0])
    with pytest.raises(OverflowError):
        lax.add(jnp.ones(2, np.int32), 2 ** 40)


def test_results_are_unchanged_for_matching_dtypes():
    x = jnp.array([1.5, -2.0, 3.0])
    np.testing.assert_allclose(lax.mul(x, 2.0), [3.0, -4.0, 6.0])
    np.testing.assert_allclose(lax.pow(x, 2), [2.25, 4.0, 9.0])
    np.testing.assert_allclose(lax.pow(jnp.float32(2.0), jnp.arange(4)), [1, 2, 4, 8])
    assert functrans.grad(lambda v: lax.pow(v, 3))(2.0) == 12.0


CLAMP_CASES = [
    (0, "f32", 1, same_dtypes("clamp", ["int32", "float32", "int32"])),
    (0.0, "f32", 1.0, "ok float32"),
    (0, "i32", 1, "ok int32"),
    (0.0, "i32", 1.0, same_dtypes("clamp", ["float32", "int32", "float32"])),
    (0.0, "f16", 1.0, same_dtypes("clamp", ["float32", "float16", "float32"])),
    (np.float64(0), "f32", np.float64(1), "ok float32"),
    (np.float16(0), "f32", np.float16(1), same_dtypes("clamp", ["float16", "float32", "float16"])),
]


@pytest.mark.parametrize("lo,x,hi,expected", CLAMP_CASES)
def test_clamp_dtype_rules_match_jax(lo, x, hi, expected):
    got = outcome(lax.clamp, lo, operand(x), hi)
    assert got.startswith(expected), got


SELECT_CASES = [
    ("f32", "i32", same_dtypes("select", ["int32", "float32"], "where")),
    ("f32", "f32", "ok float32"),
    ("f16", "f32", same_dtypes("select", ["float32", "float16"], "where")),
    ("f32", "py:1.0", "select cases must have the same shapes, got [(), (2,)]."),
]


@pytest.mark.parametrize("on_true,on_false,expected", SELECT_CASES)
def test_select_dtype_rules_match_jax(on_true, on_false, expected):
    pred = jnp.array([True, False])
    got = outcome(lax.select, pred, operand(on_true), operand(on_false))
    assert got.startswith(expected), got


# (lhs dtype, rhs dtype, preferred_element_type, JAX 0.10.2's result dtype)
DOT_CASES = [
    (np.float32, np.int32, None, "float32"),
    (np.int32, np.float32, None, "float32"),
    (np.float16, np.float32, None, "float32"),
    ("bfloat16", np.float32, None, "float32"),
    (np.int8, np.int32, None, "int32"),
    (np.bool_, np.int32, None, "int32"),
    (np.float32, np.complex64, None, "complex64"),
    (np.float32, np.int32, np.float32, "float32"),
    (np.int8, np.int8, np.int32, "int32"),
    (np.float32, np.float32, np.int32, "int32"),
]


@pytest.mark.parametrize("lhs,rhs,preferred,expected", DOT_CASES)
def test_dot_general_mixes_dtypes_in_the_wider_one(lhs, rhs, preferred, expected):
    a = jnp.arange(4).reshape(2, 2).astype(lhs)
    b = jnp.ones((2, 2), rhs)
    out = lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=preferred)
    assert out.dtype == np.dtype(expected)
    np.testing.assert_allclose(np.real(np.asarray(out)).astype(np.float64),
                               np.asarray(a).astype(np.float64) @ np.ones((2, 2)), rtol=1e-2)


def test_dot_general_mixed_dtypes_differentiate_in_each_input_dtype():
    a, b = jnp.ones((2, 3), np.float16), jnp.ones((3, 2), np.float32)
    ga, gb = functrans.grad(lambda a, b: jnp.sum(lax.dot(a, b)), argnums=(0, 1))(a, b)
    assert ga.dtype == np.float16 and gb.dtype == np.float32
    np.testing.assert_allclose(ga, np.full((2, 3), 2.0))


def test_dot_general_preferred_type_must_not_narrow_an_integer_product():
    with pytest.raises(TypeError, match="must not be narrower"):
        lax.dot_general(jnp.ones((2, 2), np.int32), jnp.ones((2, 2), np.int32),
                        (((1,), (0,)), ((), ())), preferred_element_type=np.int8)


def test_internal_forms_keep_the_scalar_convenience():
    # the library's own code may rely on a Python scalar taking the other operand's dtype
    assert elementwise.add(jnp.ones(2, np.float16), 1.0).dtype == np.float16
    assert elementwise.clamp(0.0, jnp.ones(2, np.int32), 1.0).dtype == np.int32
    assert special.igamma(jnp.ones(2, np.float16), 1).dtype == np.float16
    assert special.betainc(1, jnp.ones(2, np.float16), 0.5).dtype == np.float16
