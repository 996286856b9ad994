"""Schur / Hessenberg primitives and the scipy.linalg functions built on them (schur,
hessenberg, rsf2csf, sqrtm, funm), checked against SciPy and against hard facts
(reconstruction, unitarity, sqrtm(A)^2 == A, funm(A, exp) == expm(A))."""
import numpy as np
import pytest
import scipy.linalg as sl

import functrans
import functrans.numpy as jnp
from functrans.primitives import linalg_schur as prims
from functrans.scipy import linalg_schur as L
from functrans.test_util import x64


def _np(x):
    return np.asarray(x)


def _rand(shape, seed=0, dtype=np.float32, complex_=False):
    rs = np.random.RandomState(seed)
    a = rs.randn(*shape)
    if complex_:
        a = a + 1j * rs.randn(*shape)
    return a.astype(dtype)


def _HT(x):
    return np.conj(np.swapaxes(x, -1, -2))


def _positive_spectrum(n, seed=0):
    """A nonsymmetric matrix whose eigenvalues have positive real parts (so the principal
    square root / logarithm is unambiguous and SciPy's and ours must agree)."""
    rs = np.random.RandomState(seed)
    return rs.randn(n, n) * 0.3 + 2 * np.eye(n)


# ---- schur --------------------------------------------------------------------------------

@pytest.mark.parametrize("output", ["real", "complex"])
@pytest.mark.parametrize("complex_", [False, True])
def test_schur_reconstructs(output, complex_):
    dtype = np.complex64 if complex_ else np.float32
    a = _rand((2, 5, 5), seed=1, dtype=dtype, complex_=complex_)
    t, z = L.schur(a, output=output)
    t, z = _np(t), _np(z)
    expect_complex = complex_ or output == "complex"
    assert np.iscomplexobj(t) == expect_complex and t.shape == a.shape
    np.testing.assert_allclose(z @ t @ _HT(z), a, atol=2e-5)
    np.testing.assert_allclose(_HT(z) @ z, np.broadcast_to(np.eye(5), a.shape), atol=2e-5)
    # quasi-triangular: nothing below the first subdiagonal (triangular if complex)
    assert np.all(np.tril(t, -1 if expect_complex else -2) == 0)
    # same form as SciPy in the same precision (Schur vectors are defined up to sign)
    ts, _ = sl.schur(a[0], output=output)
    np.testing.assert_allclose(t[0], ts, atol=1e-5)


def test_schur_errors_and_no_derivative():
    with pytest.raises(ValueError, match="output"):
        L.schur(np.eye(2, dtype=np.float32), output="other")
    with pytest.raises(TypeError, match="schur.*float or complex"):
        L.schur(np.eye(3, dtype=np.int32))
    with pytest.raises(ValueError, match="schur.*square"):
        L.schur(np.ones((2, 3), np.float32))
    with pytest.raises(NotImplementedError, match="schur"):
        functrans.jvp(lambda x: L.schur(x)[0], (np.eye(2, dtype=np.float32),),
                      (np.eye(2, dtype=np.float32),))
    with pytest.raises(NotImplementedError, match="schur"):
        functrans.grad(lambda x: L.schur(x)[0].sum())(_rand((3, 3)))
    with pytest.raises(NotImplementedError, match="sort"):
        prims.schur(np.eye(2, dtype=np.float32), sort_eig_vals=True)


def test_schur_primitive_without_vectors_jit_vmap():
    a = _rand((3, 4, 4), seed=2)
    (t,) = prims.schur(a, compute_schur_vectors=False)
    np.testing.assert_array_equal(_np(t), _np(L.schur(a)[0]))
    jt = functrans.jit(L.schur)(a)
    for x, y in zip(jt, L.schur(a)):
        np.testing.assert_allclose(_np(x), _np(y), atol=1e-6)
    vt, vz = functrans.vmap(L.schur, in_axes=1, out_axes=2)(np.moveaxis(a, 0, 1))
    for i in range(3):
        t_i, z_i = L.schur(a[i])
        np.testing.assert_allclose(_np(vt)[:, :, i], _np(t_i), atol=1e-6)
        np.testing.assert_allclose(_np(vz)[:, :, i], _np(z_i), atol=1e-6)


# ---- hessenberg ---------------------------------------------------------------------------

@pytest.mark.parametrize("complex_", [False, True])
def test_hessenberg_matches_scipy(complex_):
    dtype = np.complex128 if complex_ else np.float64
    a = _rand((2, 6, 6), seed=3, dtype=dtype, complex_=complex_)
    with x64():
        h, q = L.hessenberg(a, calc_q=True)
        h_only = L.hessenberg(a)
    h, q = _np(h), _np(q)
    assert h.dtype == dtype and q.dtype == dtype
    np.testing.assert_array_equal(h, _np(h_only))
    for i in range(2):
        hs, qs = sl.hessenberg(a[i], calc_q=True)
        np.testing.assert_allclose(h[i], hs, atol=1e-12)
        np.testing.assert_allclose(q[i], qs, atol=1e-12)
    assert np.all(np.tril(h, -2) == 0)
    np.testing.assert_allclose(q @ h @ _HT(q), a, atol=1e-12)


def test_hessenberg_primitive_and_edge_cases():
    a = _rand((4, 4), seed=4)
    packed, taus = prims.hessenberg(a)
    assert _np(packed).shape == (4, 4) and _np(taus).shape == (3,)
    for n in (0, 1):
        e = np.zeros((n, n), np.float32) if n == 0 else np.array([[2.0]], np.float32)
        h, q = L.hessenberg(e, calc_q=True)
        np.testing.assert_array_equal(_np(h), e)
    np.testing.assert_array_equal(_np(L.hessenberg(np.array([[2.0]], np.float32),
                                                   calc_q=True)[1]), [[1.0]])
    with pytest.raises(TypeError, match="hessenberg"):
        L.hessenberg(np.eye(3, dtype=np.int32))
    with pytest.raises(NotImplementedError, match="hessenberg"):
        functrans.jvp(L.hessenberg, (a,), (a,))


def test_hessenberg_jit_and_vmap():
    a = _rand((3, 5, 5), seed=5)
    f = lambda x: L.hessenberg(x, calc_q=True)  # noqa: E731
    eager = f(a)
    for x, y in zip(functrans.jit(f)(a), eager):
        np.testing.assert_allclose(_np(x), _np(y), atol=1e-5)
    vh, vq = functrans.vmap(f)(a)
    for i in range(3):
        h_i, q_i = f(a[i])
        np.testing.assert_allclose(_np(vh)[i], _np(h_i), atol=1e-5)
        np.testing.assert_allclose(_np(vq)[i], _np(q_i), atol=1e-5)


# ---- rsf2csf ------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 3, 7])
def test_rsf2csf_matches_scipy(seed):
    a = np.random.RandomState(seed).randn(6, 6)
    t, z = sl.schur(a)
    ts, zs = sl.rsf2csf(t, z)
    with x64():
        tc, zc = L.rsf2csf(t, z)
    tc, zc = _np(tc), _np(zc)
    assert tc.dtype == np.complex128
    np.testing.assert_allclose(tc, ts, atol=1e-12)
    np.testing.assert_allclose(zc, zs, atol=1e-12)
    assert np.all(np.tril(tc, -1) == 0)
    np.testing.assert_allclose(zc @ tc @ _HT(zc), a, atol=1e-12)


def test_rsf2csf_float32_batched_jit():
    a = _rand((3, 5, 5), seed=8)
    t, z = L.schur(a)
    tc, zc = L.rsf2csf(t, z)
    assert _np(tc).dtype == np.complex64
    np.testing.assert_allclose(_np(zc) @ _np(tc) @ _HT(_np(zc)), a, atol=3e-5)
    for i in range(3):
        t_i, z_i = L.rsf2csf(t[i], z[i])
        np.testing.assert_allclose(_np(tc)[i], _np(t_i), atol=1e-6)
    jt, jz = functrans.jit(L.rsf2csf)(t, z)
    np.testing.assert_allclose(_np(jt), _np(tc), atol=1e-6)
    with pytest.raises(ValueError, match="rsf2csf"):
        L.rsf2csf(np.eye(3), np.eye(2))


# ---- sqrtm --------------------------------------------------------------------------------

def test_sqrtm_matches_scipy_and_squares_back():
    a = _positive_spectrum(6, seed=9)
    with x64():
        r = _np(L.sqrtm(a))
    assert r.dtype == np.complex128
    np.testing.assert_allclose(r, sl.sqrtm(a), atol=1e-10)
    # any real matrix (negative and complex eigenvalues too): the square is A
    b = _rand((5, 5), seed=10)
    rb = _np(L.sqrtm(b))
    assert rb.dtype == np.complex64
    np.testing.assert_allclose(rb @ rb, b, atol=1e-4)
    # integers are promoted; the zero matrix has the zero root (no 0/0)
    np.testing.assert_allclose(_np(L.sqrtm(np.array([[4, 0], [0, 9]]))).real, [[2, 0], [0, 3]])
    np.testing.assert_array_equal(_np(L.sqrtm(np.zeros((3, 3), np.float32))), 0)


def test_sqrtm_jit_vmap_errors():
    a = np.stack([_positive_spectrum(4, seed=s) for s in range(3)]).astype(np.float32)
    loop = np.stack([_np(L.sqrtm(x)) for x in a])
    np.testing.assert_allclose(_np(functrans.vmap(L.sqrtm)(a)), loop, atol=1e-5)
    np.testing.assert_allclose(_np(functrans.jit(L.sqrtm)(a[0])), loop[0], atol=1e-5)
    with pytest.raises(NotImplementedError, match="blocksize"):
        L.sqrtm(a[0], blocksize=2)
    with pytest.raises(ValueError, match="sqrtm"):
        L.sqrtm(a)


# ---- funm ---------------------------------------------------------------------------------

def test_funm_exp_is_expm():
    a = _rand((5, 5), seed=11) * 0.5
    with x64():
        f = _np(L.funm(a.astype(np.float64), jnp.exp))
    assert f.dtype == np.complex128
    np.testing.assert_allclose(f, sl.expm(a.astype(np.float64)), atol=1e-10)
    f32 = _np(L.funm(a, jnp.exp))
    assert f32.dtype == np.complex64
    np.testing.assert_allclose(f32, sl.expm(a.astype(np.float64)), rtol=1e-4, atol=1e-4)


def test_funm_matches_scipy_with_error_estimate():
    a = np.random.RandomState(12).randn(6, 6)
    func = lambda x: jnp.sin(x) + 2 * jnp.cos(x)  # noqa: E731
    with x64():
        f, err = L.funm(a, func, disp=False)
    fs, errs = sl.funm(a, lambda x: np.sin(x) + 2 * np.cos(x), disp=False)
    np.testing.assert_allclose(_np(f), fs, atol=1e-10)
    np.testing.assert_allclose(float(err), errs, rtol=1e-6)
    with pytest.raises(ValueError, match="square"):
        L.funm(np.ones((2, 3)), jnp.exp)


def test_funm_jit_vmap():
    a = _rand((3, 4, 4), seed=13) * 0.5
    f = lambda x: L.funm(x, jnp.exp)  # noqa: E731
    loop = np.stack([_np(f(x)) for x in a])
    np.testing.assert_allclose(_np(functrans.vmap(f)(a)), loop, atol=1e-5)
    np.testing.assert_allclose(_np(functrans.jit(f)(a[1])), loop[1], atol=1e-5)
    np.testing.assert_allclose(loop.real, np.stack([sl.expm(x) for x in a]), atol=1e-4)
