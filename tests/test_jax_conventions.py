"""Where JAX 0.10 raises, functrans raises the same class; derivatives at kinks, dtype
warnings and flag context managers follow JAX 0.10 (the expected values were read off JAX
0.10.2)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import lax, nn, tree_util
from functrans.errors import (ConcretizationTypeError, JAXIndexError, JAXTypeError,
                              NonConcreteBooleanIndexError, TracerBoolConversionError)
from functrans.test_util import x64

# ---- error classes ------------------------------------------------------------------------------


@pytest.mark.parametrize("product", [
    lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ()))),
    jnp.matmul, jnp.dot, lambda a, b: a @ b,
])
def test_contracting_dimension_mismatch_is_a_type_error(product):
    with pytest.raises(TypeError, match="contracting dimensions"):
        product(jnp.ones((2, 3)), jnp.ones((4, 5)))
    with pytest.raises(TypeError, match="contracting dimensions"):
        functrans.jit(product)(jnp.ones((2, 3)), jnp.ones((4, 5)))


def test_traced_boolean_mask_index():
    f = functrans.jit(lambda x: x[x > 0])
    with pytest.raises(NonConcreteBooleanIndexError, match="bool\\[3\\]") as info:
        f(jnp.arange(3.0))
    assert isinstance(info.value, IndexError) and isinstance(info.value, JAXIndexError)
    # a concrete mask works eagerly
    np.testing.assert_array_equal(jnp.arange(3.0)[jnp.arange(3.0) > 0], [1.0, 2.0])


@pytest.mark.parametrize("make", [
    jnp.zeros, jnp.ones, lambda n: jnp.zeros((n,)), lambda n: jnp.full((2, n), 1.0),
    lambda n: jnp.ones(3).reshape(n), lambda n: jnp.broadcast_to(1.0, (n,)),
    lambda n: lax.broadcast_in_dim(1.0, (n,), ()),
])
def test_a_traced_value_used_as_a_shape_names_static_argnums(make):
    with pytest.raises(TypeError, match="static_argnums"):
        functrans.jit(make)(3)
    assert functrans.jit(make, static_argnums=0)(3).shape[-1] == 3


def test_a_traced_bound_of_arange_needs_a_concrete_value():
    with pytest.raises(ConcretizationTypeError, match="static_argnums"):
        functrans.jit(jnp.arange)(3)
    assert issubclass(ConcretizationTypeError, JAXTypeError)
    assert issubclass(TracerBoolConversionError, ConcretizationTypeError)


@pytest.mark.parametrize("reduction", [jnp.sum, jnp.prod, jnp.max, jnp.min, jnp.mean, jnp.var,
                                       jnp.any, jnp.all, jnp.cumsum, jnp.nanmax, jnp.argmax])
def test_reductions_of_lists_raise_type_error(reduction):
    with pytest.raises(TypeError, match="requires ndarray or scalar arguments"):
        reduction([1, 2, 3])
    reduction(jnp.asarray([1, 2, 3]))  # the documented fix


def test_dict_keys_of_mixed_types_make_no_pytree():
    for call in (tree_util.tree_leaves, tree_util.tree_structure,
                 functrans.jit(lambda d: d["a"])):
        with pytest.raises(ValueError, match="sorting pytree dictionary keys"):
            call({1: 2.0, "a": 3.0})


@pytest.mark.parametrize("make", [jnp.asarray, jnp.array])
def test_arrays_of_none_ragged_lists_and_strings_raise_as_in_jax(make):
    for value in (None, [1.0, None], (None,)):
        with pytest.raises(ValueError, match="None is not a valid value for jnp.array"):
            make(value)
    with pytest.raises(ValueError, match="inhomogeneous"):
        make([[1], [2, 3]])
    for value in ("abc", ["a", "b"], np.array([b"x"]), {"a": 1}, [object()]):
        with pytest.raises(TypeError):
            make(value)


class _Checked:
    """A pytree node whose constructor insists on array children."""

    def __init__(self, a):
        self.a = jnp.asarray(a)


tree_util.register_pytree_node(_Checked, lambda t: ((t.a,), None), lambda _, c: _Checked(*c))


def test_custom_nodes_rebuilt_by_transforms_as_in_jax():
    tree = _Checked(jnp.arange(3.0))
    # vmap matches axes to the tree's structure without rebuilding it with placeholders
    assert isinstance(functrans.vmap(lambda t: t)(tree), _Checked)
    assert isinstance(functrans.vmap(_Checked)(jnp.ones((2, 3))), _Checked)
    # the Jacobians check their inputs through tree_map, which rebuilds the node with the
    # checks' None results: a node that refuses None fails there, as in JAX
    for jacobian in (functrans.jacrev, functrans.jacfwd, functrans.hessian):
        with pytest.raises(ValueError, match="None is not a valid value"):
            jacobian(lambda t: t.a.sum())(tree)
    assert isinstance(functrans.grad(lambda t: t.a.sum())(tree), _Checked)


def test_vmap_in_axes_must_be_an_int_none_or_a_tuple():
    with pytest.raises(TypeError, match="vmap in_axes must be an int, None, or a tuple"):
        functrans.vmap(lambda d: d, in_axes={"a": 0})
    with pytest.raises(ValueError, match="tree prefix"):
        functrans.vmap(lambda t: t, in_axes=({"a": 0},))((jnp.ones(2),))
    out = functrans.vmap(lambda t: t["a"] * t["b"], in_axes=({"a": 0, "b": None},))(
        {"a": jnp.arange(3.0), "b": jnp.float32(2)})
    np.testing.assert_array_equal(out, [0.0, 2.0, 4.0])


def test_jit_refuses_unknown_and_unsupported_options():
    with pytest.raises(TypeError, match="static_argnum"):
        functrans.jit(lambda x, y: x, static_argnum=1)  # a typo for static_argnums
    with pytest.raises(TypeError, match="in_shardings must hold shardings"):
        functrans.jit(lambda x: x, in_shardings=object())
    with pytest.raises(ValueError, match="compiler_options"):
        functrans.jit(lambda x: x, compiler_options={"xla_cpu_fast_math": True})
    # the options JAX users pass that change nothing here are accepted
    f = functrans.jit(lambda x, y: x + y, keep_unused=True, inline=True,
                      device=functrans.devices()[0], donate_argnames="x")
    assert float(f(jnp.float32(1), jnp.float32(2))) == 3.0
    assert functrans.jit(lambda n, x: x * n, static_argnums=0)(0, 5.0) == 0.0


# ---- derivatives at kinks -------------------------------------------------------------------------

_KINKS = [  # (function, argument, JAX 0.10.2's derivative)
    (jnp.abs, 0.0, 1.0),
    (jnp.abs, -0.0, 1.0),
    (jnp.abs, -2.0, -1.0),
    (jnp.sign, 0.0, 0.0),
    (lambda x: jnp.maximum(x, 1.0), 1.0, 0.5),
    (lambda x: jnp.minimum(x, 1.0), 1.0, 0.5),
    (lambda x: jnp.maximum(x, x), 1.0, 1.0),
    (lambda x: jnp.clip(x, 0.0, 1.0), 0.0, 0.5),
    (lambda x: jnp.clip(x, 0.0, 1.0), 1.0, 0.5),
    (nn.relu, 0.0, 0.0),
    (lambda x: jnp.where(x > 0, x, 0.0), 0.0, 0.0),
    (jnp.sqrt, 0.0, np.inf),
    (nn.softplus, 0.0, 0.5),
    (lambda x: jnp.logaddexp(x, 0.0), 0.0, 0.5),
    (lambda x: jnp.logaddexp(x, x), 1.0, 1.0),
]


@pytest.mark.parametrize("fun, x, expected", _KINKS)
def test_derivatives_at_kinks_follow_jax(fun, x, expected):
    for transform in (functrans.grad, lambda f: functrans.jit(functrans.grad(f))):
        assert float(transform(fun)(x)) == expected


def test_derivatives_at_ties_of_reductions_and_sorts_follow_jax():
    ties = jnp.array([1.0, 1.0, 0.0])
    np.testing.assert_array_equal(functrans.grad(jnp.max)(ties), [0.5, 0.5, 0.0])
    np.testing.assert_array_equal(functrans.grad(jnp.min)(jnp.array([1.0, 1.0, 2.0])),
                                  [0.5, 0.5, 0.0])
    np.testing.assert_array_equal(functrans.grad(lambda x: jnp.sort(x)[0])(
        jnp.array([1.0, 1.0, 2.0])), [1.0, 0.0, 0.0])
    g = functrans.grad(jnp.logaddexp, (0, 1))
    assert [float(v) for v in g(np.inf, np.inf)] == [1.0, 1.0]  # no NaN from the other branch


def test_abs_of_complex_is_differentiable():
    primal, tangent = functrans.jvp(jnp.abs, (3.0 + 4.0j,), (1.0 + 0.0j,))
    assert float(primal) == 5.0 and np.isclose(float(tangent), 0.6)
    assert float(functrans.jvp(jnp.abs, (0j,), (1j,))[1]) == 0.0
    np.testing.assert_allclose(complex(functrans.grad(jnp.abs)(3.0 + 4.0j)), 0.6 - 0.8j)


# ---- 64-bit dtypes with x64 off -------------------------------------------------------------------


@pytest.mark.parametrize("request_dtype, fname", [
    (lambda d: jnp.zeros(2, d), "zeros"),
    (lambda d: jnp.ones(2, d), "ones"),
    (lambda d: jnp.full(2, 1, d), "full"),
    (lambda d: jnp.array([1.0], d), "array"),
    (lambda d: jnp.asarray([1.0], d), "asarray"),
    (lambda d: jnp.ones(2).astype(d), "astype"),
    (lambda d: jnp.sum(jnp.ones(2), dtype=d), "sum"),
    (lambda d: jnp.mean(jnp.ones(2), dtype=d), "mean"),
    (lambda d: jnp.cumsum(jnp.ones(2), dtype=d), "cumsum"),
    (lambda d: jnp.full_like(jnp.ones(2), 1, dtype=d), "full_like"),
    (lambda d: jnp.linspace(0, 1, 3, dtype=d), "linspace"),
    (lambda d: jnp.eye(2, dtype=d), "eye"),
])
def test_requests_for_64_bit_dtypes_warn_with_x64_off(request_dtype, fname):
    with pytest.warns(UserWarning, match=f"Explicitly requested dtype float64 requested in "
                                         f"{fname} is not available, and will be truncated to "
                                         f"dtype float32"):
        assert request_dtype(np.float64).dtype == np.float32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        request_dtype(float)  # Python's float means the default float type: no warning
        request_dtype(np.float32)
        with x64():
            assert request_dtype(np.float64).dtype == np.float64


def test_enable_x64_is_a_context_manager():
    assert not functrans.enable_x64.value
    with functrans.enable_x64(True):
        assert functrans.enable_x64.value and jnp.zeros(1).dtype == np.float64
        assert jnp.asarray(1).dtype == np.int64
    assert jnp.zeros(1).dtype == np.float32 and not functrans.enable_x64.value
    with functrans.log_compiles(True):
        assert functrans.config.log_compiles
    assert not functrans.config.log_compiles


def test_samplers_warn_for_64_bit_dtypes_with_x64_off():
    from functrans import random
    key = random.key(0)
    for sample in (lambda d: random.uniform(key, (2,), d), lambda d: random.normal(key, (2,), d),
                   lambda d: random.randint(key, (2,), 0, 5, d if d != np.float64 else np.int64)):
        with pytest.warns(UserWarning, match="Explicitly requested dtype (float|int)64 is not "
                                             "available"):
            sample(np.float64)


def test_nan_and_inf_arithmetic_warns_nothing():
    # JAX computes inf - inf and 0 / 0 silently: no NumPy RuntimeWarning, eager or compiled
    x = jnp.array([np.inf, -np.inf], jnp.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(float(jnp.sum(x)))
        assert np.isnan(float(functrans.jit(jnp.mean)(x)))
        assert np.isnan(np.asarray(jnp.array([0.0]) / 0.0)).all()
        assert np.isnan(float(functrans.jit(lambda v: jnp.fft.fft(v)[0].real)(x)))


def test_inner_jit_closing_over_an_outer_traced_value():
    # the inner function's closed-over tracer becomes an input of its jit equation
    inner = lambda x: functrans.jit(lambda y: jnp.sin(x) * y)(3.0)  # noqa: E731
    assert float(functrans.jit(inner)(1.0)) == pytest.approx(3 * np.sin(1.0), rel=1e-6)
    np.testing.assert_allclose(functrans.vmap(inner)(jnp.arange(3.0)),
                               3 * np.sin(np.arange(3.0)), rtol=1e-6)
    assert float(functrans.grad(inner)(1.0)) == pytest.approx(3 * np.cos(1.0), rel=1e-6)
    assert float(functrans.jit(functrans.grad(inner))(1.0)) == pytest.approx(3 * np.cos(1.0),
                                                                           rel=1e-6)
    jaxpr = functrans.make_jaxpr(lambda x: functrans.jit(lambda y: x + y)(1.0))(2.0)
    assert len(jaxpr.jaxpr.eqns) == 1 and len(jaxpr.jaxpr.eqns[0].invars) == 2
