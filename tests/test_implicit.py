"""conv_transpose against a scatter-add reference and the convolution-gradient identity;
custom_root and custom_linear_solve against closed forms and finite differences, under
jit, vmap and grad."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import lax
from functrans.test_util import check_grads

# =============================================================================================
# conv_transpose
# =============================================================================================


def _transpose_pads(window, stride, padding):
    """The (low, high) padding JAX documents for "SAME"/"VALID" transposed convolutions."""
    if padding == "SAME":
        total = window + stride - 2
        low = window - 1 if stride > window - 1 else int(np.ceil(total / 2))
    else:
        total = window + stride - 2 + max(window - stride, 0)
        low = window - 1
    return low, total - low


def conv_transpose_reference(x, w, strides, pads, dilation, transpose_kernel):
    """Scatter-add of the kernel per input pixel. ``x`` is [N, C, *S]; ``w`` is [O, I, *K]
    (with transpose_kernel its O axis matches C, its I axis is the output feature)."""
    nsp = x.ndim - 2
    kernel = w.shape[2:]
    out_features = w.shape[1] if transpose_kernel else w.shape[0]
    out_sp = [(x.shape[2 + k] - 1) * strides[k] + 1 + pads[k][0] + pads[k][1]
              - (kernel[k] - 1) * dilation[k] for k in range(nsp)]
    out = np.zeros((x.shape[0], out_features) + tuple(out_sp))
    for i in itertools.product(*[range(s) for s in x.shape[2:]]):
        for t in itertools.product(*[range(k) for k in kernel]):
            if transpose_kernel:
                # pixel i spreads the kernel forwards from i * stride
                j = [i[k] * strides[k] + pads[k][0] - (kernel[k] - 1) * dilation[k]
                     + t[k] * dilation[k] for k in range(nsp)]
                tap = w[(slice(None), slice(None)) + t]            # [C, O]
            else:
                # a plain convolution over the dilated input reads the kernel backwards
                j = [i[k] * strides[k] + pads[k][0] - t[k] * dilation[k] for k in range(nsp)]
                tap = w[(slice(None), slice(None)) + t].T          # [C, O]
            if all(0 <= j[k] < out_sp[k] for k in range(nsp)):
                out[(slice(None), slice(None)) + tuple(j)] += x[(slice(None), slice(None)) + i] @ tap
    return out


CONV_CASES = [
    # (spatial input, kernel, strides, padding, rhs_dilation)
    ((5,), (3,), (2,), "SAME", (1,)),
    ((4,), (2,), (3,), "VALID", (1,)),
    ((4,), (3,), (1,), ((1, 2),), (2,)),
    ((4, 3), (3, 2), (2, 1), "SAME", (1, 1)),
    ((3, 4), (3, 3), (2, 2), "VALID", (1, 2)),
    ((4, 4), (2, 3), (1, 2), ((0, 1), (2, -1)), (2, 1)),
    ((3, 3), (4, 4), (3, 2), "SAME", (1, 1)),
]


@pytest.mark.parametrize("transpose_kernel", [False, True])
@pytest.mark.parametrize("spatial,kernel,strides,padding,dilation", CONV_CASES)
def test_conv_transpose_matches_scatter_reference(spatial, kernel, strides, padding, dilation,
                                                  transpose_kernel):
    rng = np.random.default_rng(0)
    nsp = len(spatial)
    n, c, o = 2, 3, 4
    x = rng.standard_normal((n, c) + spatial).astype(np.float32)          # canonical NC*S
    w_features = (c, o) if transpose_kernel else (o, c)
    w = rng.standard_normal(w_features + kernel).astype(np.float32)      # canonical OI*K
    if isinstance(padding, str):
        pads = [_transpose_pads((kernel[k] - 1) * dilation[k] + 1, strides[k], padding)
                for k in range(nsp)]
    else:
        pads = list(padding)
    expected = conv_transpose_reference(x.astype(np.float64), w.astype(np.float64), strides,
                                        pads, dilation, transpose_kernel)
    # channels-last, JAX's default layout for conv_transpose
    x_last = np.moveaxis(x, 1, -1)
    w_last = np.transpose(w, tuple(range(2, 2 + nsp)) + (1, 0))               # *K I O
    got = lax.conv_transpose(x_last, w_last, strides, padding, rhs_dilation=dilation,
                             transpose_kernel=transpose_kernel)
    np.testing.assert_allclose(np.moveaxis(np.asarray(got), -1, 1), expected, rtol=1e-4,
                               atol=1e-4)
    # explicit channels-first layout gives the same numbers
    names = "HW"[:nsp]
    got_first = lax.conv_transpose(x, w, strides, padding, rhs_dilation=dilation,
                                   dimension_numbers=("NC" + names, "OI" + names, "NC" + names),
                                   transpose_kernel=transpose_kernel)
    np.testing.assert_allclose(np.asarray(got_first), expected, rtol=1e-4, atol=1e-4)


def test_conv_transpose_output_sizes():
    x, w = jnp.ones((1, 4, 4, 2)), jnp.ones((3, 3, 2, 5))
    assert lax.conv_transpose(x, w, (2, 2), "SAME").shape == (1, 8, 8, 5)
    assert lax.conv_transpose(x, w, (2, 2), "VALID").shape == (1, 9, 9, 5)
    assert lax.conv_transpose(x, w, (1, 1), "VALID").shape == (1, 6, 6, 5)
    with pytest.raises(ValueError, match="SAME"):
        lax.conv_transpose(x, w, (2, 2), "FULL")


@pytest.mark.parametrize("spatial,kernel,strides,padding,dilation", [
    ((6, 6), (3, 3), (2, 2), "SAME", (1, 1)),
    ((7, 5), (3, 3), (2, 1), "VALID", (1, 1)),
    ((8, 6), (2, 3), (2, 2), "SAME", (1, 2)),
    ((11,), (3,), (3,), "VALID", (2,)),
])
def test_conv_transpose_is_the_input_gradient_of_conv(spatial, kernel, strides, padding,
                                                      dilation):
    rng = np.random.default_rng(1)
    nsp = len(spatial)
    names = "HWD"[:nsp]
    dn = ("N" + names + "C", names + "IO", "N" + names + "C")
    x = rng.standard_normal((2,) + spatial + (3,)).astype(np.float32)
    w = rng.standard_normal(kernel + (3, 4)).astype(np.float32)

    def conv(x):
        return lax.conv_general_dilated(x, w, strides, padding, rhs_dilation=dilation,
                                        dimension_numbers=dn)

    y, pullback = functrans.vjp(conv, x)
    ct = rng.standard_normal(y.shape).astype(np.float32)
    (expected,) = pullback(ct)
    got = lax.conv_transpose(ct, w, strides, padding, rhs_dilation=dilation,
                             dimension_numbers=dn, transpose_kernel=True)
    assert got.shape == x.shape
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-4, atol=1e-4)


def test_conv_transpose_differentiable_and_jittable(x64):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 3, 3, 2))
    w = rng.standard_normal((2, 2, 3, 2))   # HWIO; O matches x's features (transposed)

    def f(x, w):
        return lax.conv_transpose(x, w, (2, 2), "SAME", transpose_kernel=True)

    check_grads(f, (x, w), order=1, modes=("fwd", "rev"))
    np.testing.assert_allclose(np.asarray(functrans.jit(f)(x, w)), np.asarray(f(x, w)),
                               rtol=1e-12)
    batched = functrans.vmap(f, (0, None))(np.stack([x, 2 * x]), w)
    np.testing.assert_allclose(np.asarray(batched[1]), 2 * np.asarray(f(x, w)), rtol=1e-12)


def test_conv_with_general_padding():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 5, 4)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 2)).astype(np.float32)
    got = lax.conv_with_general_padding(x, w, (2, 1), ((1, 0), (0, 1)), (1, 2), (2, 1))
    expected = lax.conv_general_dilated(x, w, (2, 1), ((1, 0), (0, 1)), lhs_dilation=(1, 2),
                                        rhs_dilation=(2, 1))
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected))


def test_conv_transpose_matches_jax():
    jax = pytest.importorskip("jax")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 5, 4, 3)).astype(np.float32)
    for padding, kernel_flag in itertools.product(["SAME", "VALID", ((1, 2), (0, 1))],
                                                  [False, True]):
        # HWIO; with transpose_kernel the kernel's I and O swap roles
        w = rng.standard_normal((3, 2, 4, 3) if kernel_flag else (3, 2, 3, 4)).astype(np.float32)
        for strides in [(1, 1), (2, 3)]:
            expected = jax.lax.conv_transpose(x, w, strides, padding, rhs_dilation=(1, 2),
                                              transpose_kernel=kernel_flag)
            got = lax.conv_transpose(x, w, strides, padding, rhs_dilation=(1, 2),
                                     transpose_kernel=kernel_flag)
            np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-4,
                                       atol=1e-4)


# =============================================================================================
# custom_root
# =============================================================================================


def newton(f, x0, steps=30):
    """Scalar Newton iterations with the derivative of f from grad."""
    return lax.fori_loop(0, steps, lambda _, x: x - f(x) / functrans.grad(f)(x), x0)


def scalar_tangent_solve(g, y):
    return y / g(1.0)


def root_sqrt(a):
    return lax.custom_root(lambda x: x * x - a, 1.0, newton, scalar_tangent_solve)


def root_cbrt(a):
    return lax.custom_root(lambda x: x ** 3 - a, 1.0, newton, scalar_tangent_solve)


def test_custom_root_scalar_values_and_grads():
    for a in (2.0, 9.0):
        np.testing.assert_allclose(float(root_sqrt(a)), np.sqrt(a), rtol=1e-6)
        np.testing.assert_allclose(float(functrans.grad(root_sqrt)(a)), 0.5 / np.sqrt(a),
                                   rtol=1e-5)
        np.testing.assert_allclose(float(root_cbrt(a)), np.cbrt(a), rtol=1e-6)
        np.testing.assert_allclose(float(functrans.grad(root_cbrt)(a)),
                                   1 / (3 * np.cbrt(a) ** 2), rtol=1e-5)
        # second derivative: d²/da² sqrt(a) = -1/4 a^(-3/2)
        np.testing.assert_allclose(float(functrans.grad(functrans.grad(root_sqrt))(a)),
                                   -0.25 * a ** -1.5, rtol=1e-4)


def test_custom_root_scalar_check_grads(x64):
    check_grads(root_sqrt, (np.float64(3.0),), order=2, modes=("fwd", "rev"))
    check_grads(root_cbrt, (np.float64(5.0),), order=2, modes=("fwd", "rev"))


def test_custom_root_does_not_differentiate_the_solver():
    # a solver whose iterations have a wrong derivative (stop_gradient) still yields the
    # implicit-function derivative
    def opaque_newton(f, x0):
        return lax.stop_gradient(newton(f, x0))

    def sqrt(a):
        return lax.custom_root(lambda x: x * x - a, 1.0, opaque_newton, scalar_tangent_solve)

    np.testing.assert_allclose(float(functrans.grad(sqrt)(4.0)), 0.25, rtol=1e-5)


def test_custom_root_jit_and_vmap():
    a = jnp.array([1.0, 4.0, 16.0])
    np.testing.assert_allclose(np.asarray(functrans.jit(functrans.vmap(root_sqrt))(a)),
                               np.sqrt(a), rtol=1e-6)
    per_example = functrans.vmap(functrans.grad(root_sqrt))(a)
    np.testing.assert_allclose(np.asarray(per_example), 0.5 / np.sqrt(a), rtol=1e-5)
    np.testing.assert_allclose(float(functrans.jit(functrans.grad(root_cbrt))(8.0)), 1 / 12,
                               rtol=1e-5)
    np.testing.assert_allclose(np.asarray(functrans.jacfwd(functrans.vmap(root_cbrt))(a)),
                               np.diag(1 / (3 * np.cbrt(np.asarray(a)) ** 2)), rtol=1e-5)


def _vector_problem(rng, n=3):
    m = rng.standard_normal((n, n))
    a = m @ m.T + n * np.eye(n)
    b = rng.standard_normal(n)
    return a, b


def vector_root(a, b):
    """x with a x + x³ = b, found by Newton steps on the Jacobian from jacfwd."""
    def f(x):
        return a @ x + x ** 3 - b

    def solve(f, x0):
        def step(_, x):
            return x - jnp.linalg.solve(functrans.jacfwd(f)(x), f(x))
        return lax.fori_loop(0, 12, step, x0)

    def tangent_solve(g, y):
        return jnp.linalg.solve(functrans.jacfwd(g)(y), y)

    return lax.custom_root(f, jnp.zeros_like(b), solve, tangent_solve)


def test_custom_root_vector(x64):
    rng = np.random.default_rng(5)
    a, b = _vector_problem(rng)
    x = np.asarray(vector_root(a, b))
    np.testing.assert_allclose(a @ x + x ** 3, b, atol=1e-10)
    # closed form: dx/db = J⁻¹ with J = a + 3 diag(x²); dx/da_ij = -J⁻¹ e_i x_j
    jac = a + 3 * np.diag(x ** 2)
    got_db = functrans.jacrev(vector_root, argnums=1)(a, b)
    np.testing.assert_allclose(np.asarray(got_db), np.linalg.inv(jac), rtol=1e-8)
    w = rng.standard_normal(3)
    got_da = functrans.grad(lambda a: jnp.dot(w, vector_root(a, b)))(a)
    np.testing.assert_allclose(np.asarray(got_da), -np.outer(np.linalg.solve(jac.T, w), x),
                               rtol=1e-8)
    check_grads(vector_root, (a, b), order=1, modes=("fwd", "rev"))


def test_custom_root_pytree_and_aux():
    def solve(f, x0):
        x = newton(lambda s: f({"s": s})["s"], x0["s"])
        return {"s": x}, jnp.array(30, jnp.int32)

    def sqrt_with_steps(a):
        return lax.custom_root(lambda d: {"s": d["s"] * d["s"] - a}, {"s": 1.0}, solve,
                               lambda g, y: {"s": y["s"] / g({"s": 1.0})["s"]}, has_aux=True)

    root, steps = sqrt_with_steps(9.0)
    np.testing.assert_allclose(float(root["s"]), 3.0, rtol=1e-6)
    assert int(steps) == 30
    g = functrans.grad(lambda a: sqrt_with_steps(a)[0]["s"])(9.0)
    np.testing.assert_allclose(float(g), 1 / 6, rtol=1e-5)


# =============================================================================================
# custom_linear_solve
# =============================================================================================


def conjugate_gradient(matvec, b, iterations=None):
    """Plain CG with a fixed number of iterations (n is exact for an n×n SPD matrix)."""
    iterations = b.shape[0] if iterations is None else iterations

    def step(_, state):
        x, r, p, rr = state
        ap = matvec(p)
        alpha = rr / jnp.dot(p, ap)
        x = x + alpha * p
        r = r - alpha * ap
        rr_new = jnp.dot(r, r)
        p = r + (rr_new / rr) * p
        return x, r, p, rr_new

    x0 = jnp.zeros_like(b)
    x, *_ = lax.fori_loop(0, iterations, step, (x0, b, b, jnp.dot(b, b)))
    return x


def spd_cg_solve(a, b):
    return lax.custom_linear_solve(lambda v: a @ v, b, conjugate_gradient, symmetric=True)


def dense_solve(a, b):
    return lax.custom_linear_solve(lambda v: a @ v, b, lambda mv, r: jnp.linalg.solve(a, r),
                                   transpose_solve=lambda vm, r: jnp.linalg.solve(a.T, r))


def test_custom_linear_solve_cg_value_and_grads(x64):
    rng = np.random.default_rng(6)
    a, b = _vector_problem(rng, 4)
    x = np.asarray(spd_cg_solve(a, b))
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-8)
    w = rng.standard_normal(4)

    def loss(a, b):
        return jnp.dot(w, spd_cg_solve(a, b))

    ga, gb = functrans.grad(loss, argnums=(0, 1))(a, b)
    lam = np.linalg.solve(a.T, w)
    np.testing.assert_allclose(np.asarray(gb), lam, rtol=1e-8)
    np.testing.assert_allclose(np.asarray(ga), -np.outer(lam, x), rtol=1e-8)
    # finite differences in b and in the matrix entries (a perturbed a stays in CG's reach:
    # n iterations solve any nonsingular symmetric system nearby)
    check_grads(lambda b: spd_cg_solve(a, b), (b,), order=2, modes=("fwd", "rev"))
    check_grads(lambda a: spd_cg_solve((a + a.T) / 2, b), (a,), order=1, modes=("fwd", "rev"))


def test_custom_linear_solve_nonsymmetric(x64):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 3)) + 3 * np.eye(3)
    b = rng.standard_normal(3)
    np.testing.assert_allclose(np.asarray(dense_solve(a, b)), np.linalg.solve(a, b), rtol=1e-10)
    check_grads(dense_solve, (a, b), order=2, modes=("fwd", "rev"))


def test_custom_linear_solve_needs_transpose_solve_for_reverse_mode():
    a = jnp.array([[2.0, 1.0], [0.0, 3.0]])
    b = jnp.array([1.0, 1.0])

    def solve(a, b):
        return lax.custom_linear_solve(lambda v: a @ v, b, lambda mv, r: jnp.linalg.solve(a, r))

    _, t = functrans.jvp(lambda b: solve(a, b), (b,), (jnp.array([1.0, 0.0]),))
    np.testing.assert_allclose(np.asarray(t), np.linalg.solve(np.asarray(a), [1.0, 0.0]),
                               rtol=1e-6)
    with pytest.raises(TypeError, match="transpose_solve"):
        functrans.grad(lambda b: solve(a, b).sum())(b)


def test_custom_linear_solve_does_not_differentiate_the_solver():
    a = np.array([[3.0, 1.0], [1.0, 2.0]], np.float32)

    def solve(b):
        # the solver hides itself from differentiation; the implicit rule does not care
        return lax.custom_linear_solve(
            lambda v: a @ v, b, lambda mv, r: lax.stop_gradient(jnp.linalg.solve(a, r)),
            symmetric=True)

    g = functrans.grad(lambda b: solve(b)[0])(jnp.array([1.0, 1.0]))
    np.testing.assert_allclose(np.asarray(g), np.linalg.inv(a)[0], rtol=1e-5)


def test_custom_linear_solve_jit_and_vmap():
    rng = np.random.default_rng(8)
    mats = []
    for _ in range(3):
        m = rng.standard_normal((4, 4))
        mats.append(m @ m.T + 4 * np.eye(4))
    a = np.stack(mats).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    expected = np.stack([np.linalg.solve(a[i], b[i]) for i in range(3)])
    np.testing.assert_allclose(np.asarray(functrans.vmap(spd_cg_solve)(a, b)), expected,
                               rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(np.asarray(functrans.jit(functrans.vmap(spd_cg_solve))(a, b)),
                               expected, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(np.asarray(functrans.vmap(spd_cg_solve, (None, 0))(a[0], b)),
                               np.linalg.solve(a[0], b.T).T, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(np.asarray(functrans.vmap(spd_cg_solve, (0, None))(a, b[0])),
                               np.stack([np.linalg.solve(m, b[0]) for m in a]), rtol=1e-3,
                               atol=1e-4)

    def loss(a, b):
        return jnp.sum(spd_cg_solve(a, b) ** 2)

    grads = functrans.jit(functrans.vmap(functrans.grad(loss, argnums=(0, 1))))(a, b)
    for i in range(3):
        ga, gb = functrans.grad(loss, argnums=(0, 1))(a[i], b[i])
        x = np.linalg.solve(a[i], b[i])
        lam = np.linalg.solve(a[i].T, 2 * x)
        np.testing.assert_allclose(np.asarray(gb), lam, rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(np.asarray(grads[1][i]), lam, rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(np.asarray(grads[0][i]), np.asarray(ga), rtol=1e-3,
                                   atol=1e-4)
    staged = functrans.make_jaxpr(functrans.grad(loss))(a[0], b[0])
    assert "linear_solve" in str(staged)


def test_custom_linear_solve_pytree_and_aux(x64):
    rng = np.random.default_rng(9)
    a1, _ = _vector_problem(rng, 2)
    a2, _ = _vector_problem(rng, 3)

    def matvec(v):
        return {"p": a1 @ v["p"], "q": a2 @ v["q"]}

    def solve(mv, r):
        return {"p": jnp.linalg.solve(a1, r["p"]), "q": jnp.linalg.solve(a2, r["q"])}, \
            jnp.array(0, jnp.int32)

    b = {"p": rng.standard_normal(2), "q": rng.standard_normal(3)}
    x, aux = lax.custom_linear_solve(matvec, b, solve, symmetric=True, has_aux=True)
    assert int(aux) == 0
    np.testing.assert_allclose(np.asarray(x["q"]), np.linalg.solve(a2, b["q"]), rtol=1e-10)

    def f(b):
        return lax.custom_linear_solve(matvec, b, solve, symmetric=True, has_aux=True)[0]

    check_grads(f, (b,), order=1, modes=("fwd", "rev"))
