"""functrans.scipy.optimize (BFGS minimize, line_search), functrans.scipy.spatial.transform
(Rotation, Slerp) and functrans.scipy._special_matrices (special matrices, polar, expm_frechet,
...) against SciPy: values, shapes and dtypes, jit against eager, vmap against a loop."""
from __future__ import annotations

import doctest
import warnings

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.optimize as sopt
from scipy.spatial.transform import Rotation as SRotation
from scipy.spatial.transform import Slerp as SSlerp

import functrans
import functrans.numpy as jnp
import functrans.random as jrandom
from functrans.scipy import _special_matrices as lm
from functrans.scipy import optimize as fopt
from functrans.scipy.optimize import _bfgs, _line_search, _minimize
from functrans.scipy.spatial import transform as ftransform
from functrans.scipy.spatial.transform import Rotation, Slerp
from functrans.test_util import check_grads, x64


def _close(actual, expected, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(actual, dtype=np.complex128 if np.iscomplexobj(
        actual) else np.float64), expected, rtol=rtol, atol=atol)


# =============================================================================================
# optimize
# =============================================================================================

def _rosen(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def _rosen_np(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


_RNG = np.random.default_rng(0)
_M = _RNG.normal(size=(5, 5))
_A = _M @ _M.T + 5 * np.eye(5)
_B = _RNG.normal(size=5)


def _quadratic(x, a, b):
    return 0.5 * x @ (a @ x) - b @ x


def test_minimize_quadratic_matches_solve_and_scipy():
    a, b = jnp.asarray(_A, jnp.float32), jnp.asarray(_B, jnp.float32)
    res = fopt.minimize(_quadratic, jnp.zeros(5), (a, b), method="BFGS")
    assert isinstance(res, fopt.OptimizeResults)
    assert res._fields == ("x", "success", "status", "fun", "jac", "hess_inv", "nfev",
                           "njev", "nit")
    expected = np.linalg.solve(_A, _B)
    ref = sopt.minimize(lambda x: 0.5 * x @ _A @ x - _B @ x, np.zeros(5),
                        jac=lambda x: _A @ x - _B, method="BFGS")
    _close(res.x, expected, rtol=1e-4, atol=1e-5)
    _close(res.x, ref.x, rtol=1e-4, atol=1e-5)
    _close(res.fun, ref.fun, rtol=1e-5)
    assert bool(res.success) and int(res.status) == 0
    assert np.max(np.abs(np.asarray(res.jac))) < 1e-5
    assert res.x.dtype == jnp.float32 and res.hess_inv.shape == (5, 5)
    assert int(res.nfev) >= int(res.nit) >= 1 and int(res.njev) == int(res.nfev)


@pytest.mark.parametrize("n", [2, 5])
def test_minimize_rosenbrock_against_scipy_float64(n):
    # (from this start the 5-D problem ends in its local minimum near (-1, 1, 1, 1, 1))
    x0 = np.linspace(-1.2, 1.0, n) if n == 2 else np.linspace(0.0, 0.5, n)
    ref = sopt.minimize(_rosen_np, x0, method="BFGS", jac=sopt.rosen_der)
    with x64():
        res = fopt.minimize(_rosen, jnp.asarray(x0), method="BFGS")
        assert res.x.dtype == jnp.float64
        assert bool(res.success), res
        _close(res.x, ref.x, rtol=0, atol=2e-5)
        _close(res.x, np.ones(n), rtol=0, atol=1e-5)
        assert float(res.fun) < 1e-10
        # the inverse-Hessian estimate stays symmetric positive definite
        h = np.asarray(res.hess_inv)
        _close(h, h.T, rtol=0, atol=1e-8)
        assert np.all(np.linalg.eigvalsh(h) > 0)


def test_minimize_rosenbrock_float32():
    res = fopt.minimize(_rosen, jnp.zeros(4), method="BFGS")
    assert res.x.dtype == jnp.float32
    _close(res.x, np.ones(4), rtol=0, atol=1e-3)


def test_minimize_jit_matches_eager():
    # In float64: in float32 the last line searches run at the rounding level, where the
    # compiled arithmetic (fused multiply-adds) and NumPy's can differ in whether a search
    # succeeds (status 3 on some CPUs), which is not what this test is about.
    with x64():
        x0 = jnp.array([-1.2, 1.0, 0.5])
        eager = fopt.minimize(_rosen, x0, method="BFGS")
        staged = functrans.jit(lambda x: fopt.minimize(_rosen, x, method="BFGS"))(x0)
    _close(staged.x, eager.x, rtol=0, atol=1e-9)
    assert int(staged.status) == int(eager.status) == 0
    assert abs(int(staged.nit) - int(eager.nit)) <= 2


def test_minimize_vmap_matches_loop():
    # in float64, so that batched and unbatched rounding cannot change the iteration count
    with x64():
        a, b = jnp.asarray(_A), jnp.asarray(_B)
        starts = jnp.asarray(_RNG.normal(size=(3, 5)))
        batched = functrans.vmap(lambda x0: fopt.minimize(_quadratic, x0, (a, b),
                                                          method="BFGS"))(starts)
        for i in range(3):
            single = fopt.minimize(_quadratic, starts[i], (a, b), method="BFGS")
            _close(batched.x[i], single.x, rtol=0, atol=1e-9)
            assert int(batched.nit[i]) == int(single.nit)
            assert int(batched.nfev[i]) == int(single.nfev)
    # rosenbrock from several starts: each member runs its own number of iterations
    starts = jnp.array([[-1.2, 1.0], [0.0, 0.0], [1.0, 1.0]])
    batched = functrans.vmap(lambda x0: fopt.minimize(_rosen, x0, method="BFGS"))(starts)
    _close(batched.x, np.ones((3, 2)), rtol=0, atol=1e-3)
    assert int(batched.nit[2]) == 0


def test_minimize_options_and_errors():
    f = lambda x: jnp.sum((x - 1.0) ** 2)  # noqa: E731
    one_step = fopt.minimize(_rosen, jnp.zeros(2), method="bfgs", options={"maxiter": 1})
    assert int(one_step.nit) == 1 and int(one_step.status) == 1
    assert not bool(one_step.success)
    loose = fopt.minimize(_rosen, jnp.zeros(2), method="BFGS", tol=1e-1)
    tight = fopt.minimize(_rosen, jnp.zeros(2), method="BFGS")
    assert int(loose.nit) < int(tight.nit)
    at_minimum = fopt.minimize(f, jnp.ones(3), method="BFGS")
    assert int(at_minimum.nit) == 0 and bool(at_minimum.success)
    with pytest.raises(TypeError, match="tuple"):
        fopt.minimize(f, jnp.zeros(2), args=1.0, method="BFGS")
    with pytest.raises(ValueError, match="CG"):
        fopt.minimize(f, jnp.zeros(2), method="CG")
    with pytest.raises(ValueError, match="1-D"):
        fopt.minimize(f, jnp.zeros((2, 2)), method="BFGS")
    with pytest.raises(TypeError, match="floating"):
        fopt.minimize(f, jnp.array([0, 0]), method="BFGS")


def test_line_search_satisfies_strong_wolfe():
    x = jnp.array([-1.2, 1.0])
    g = np.asarray(functrans.grad(_rosen)(x))
    for direction in (-g, -g / np.linalg.norm(g), np.array([1.0, 0.3])):
        p = jnp.asarray(direction, jnp.float32)
        res = fopt.line_search(_rosen, x, p, c1=1e-4, c2=0.9)
        if float(np.dot(g, direction)) >= 0:
            assert bool(res.failed) and int(res.status) == 2
            continue
        assert not bool(res.failed)
        a = float(res.a_k)
        x_new = np.asarray(x) + a * np.asarray(p)
        slope0 = float(np.dot(g, direction))
        assert _rosen_np(x_new) <= _rosen_np(np.asarray(x)) + 1e-4 * a * slope0 + 1e-5
        slope = float(np.dot(sopt.rosen_der(x_new), np.asarray(p)))
        assert abs(slope) <= 0.9 * abs(slope0) * (1 + 1e-4)
        _close(res.f_k, _rosen_np(x_new), rtol=1e-5)
        _close(res.g_k, sopt.rosen_der(x_new), rtol=1e-4, atol=1e-3)


def test_line_search_jit_and_vmap():
    f = lambda x: jnp.sum((x - 1.0) ** 2)  # noqa: E731
    directions = jnp.array([[1.0, 1.0], [100.0, 0.0], [0.5, 0.5]])
    batched = functrans.vmap(lambda p: fopt.line_search(f, jnp.zeros(2), p).a_k)(directions)
    staged = functrans.jit(lambda p: fopt.line_search(f, jnp.zeros(2), p).a_k)
    for i in range(3):
        single = fopt.line_search(f, jnp.zeros(2), directions[i]).a_k
        _close(batched[i], single, rtol=1e-6)
        _close(staged(directions[i]), single, rtol=1e-6)
    # a step of 1 along [0.5, 0.5] already halves the slope, which strong Wolfe accepts
    _close(batched, [1.0, 0.01, 1.0], rtol=1e-5)


# =============================================================================================
# spatial.transform
# =============================================================================================

_QUATS = _RNG.normal(size=(7, 4)).astype(np.float32)
_SEQS = ["xyz", "xzy", "yxz", "yzx", "zxy", "zyx", "xyx", "xzx", "yxy", "yzy", "zxz", "zyz"]


def test_rotation_representations_against_scipy():
    ours, ref = Rotation.from_quat(_QUATS), SRotation.from_quat(_QUATS)
    assert ours.quat.dtype == jnp.float32 and not ours.single and len(ours) == 7
    _close(ours.as_quat(), ref.as_quat(), atol=1e-6)
    _close(ours.as_quat(canonical=True), ref.as_quat(canonical=True), atol=1e-6)
    _close(ours.as_quat(scalar_first=True), ref.as_quat(scalar_first=True), atol=1e-6)
    _close(ours.as_matrix(), ref.as_matrix(), atol=1e-6)
    _close(ours.as_rotvec(), ref.as_rotvec(), atol=1e-5)
    _close(ours.as_rotvec(degrees=True), ref.as_rotvec(degrees=True), atol=1e-4)
    _close(ours.as_mrp(), ref.as_mrp(), atol=1e-5)
    _close(ours.magnitude(), ref.magnitude(), atol=1e-6)
    single = Rotation.from_quat(_QUATS[0])
    assert single.single and single.as_matrix().shape == (3, 3)
    assert single.magnitude().shape == ()


def test_rotation_constructors_against_scipy():
    ref = SRotation.from_quat(_QUATS)
    canon = ref.as_quat(canonical=True)
    _close(Rotation.from_matrix(ref.as_matrix().astype(np.float32)).as_quat(canonical=True),
           canon, atol=1e-6)
    _close(Rotation.from_rotvec(ref.as_rotvec().astype(np.float32)).as_quat(canonical=True),
           canon, atol=1e-6)
    _close(Rotation.from_rotvec(ref.as_rotvec(degrees=True).astype(np.float32),
                                degrees=True).as_quat(canonical=True), canon, atol=1e-6)
    _close(Rotation.from_mrp(ref.as_mrp().astype(np.float32)).as_quat(canonical=True), canon,
           atol=1e-6)
    # tiny and zero rotation vectors use the series branch
    small = np.array([[1e-5, -2e-5, 3e-6], [0.0, 0.0, 0.0], [0.0, 0.0, np.pi]])
    _close(Rotation.from_rotvec(small.astype(np.float32)).as_matrix(),
           SRotation.from_rotvec(small).as_matrix(), atol=1e-6)
    _close(Rotation.from_rotvec(small[:2].astype(np.float32)).as_rotvec(), small[:2],
           atol=1e-9)
    # identity
    assert Rotation.identity().quat.dtype == jnp.float32
    _close(Rotation.identity(3).as_matrix(), np.broadcast_to(np.eye(3), (3, 3, 3)))


@pytest.mark.parametrize("seq", _SEQS + [s.upper() for s in _SEQS])
def test_rotation_euler_against_scipy(seq):
    ref = SRotation.from_quat(_QUATS)
    angles = ref.as_euler(seq)
    _close(Rotation.from_quat(_QUATS).as_euler(seq), angles, atol=2e-5)
    _close(Rotation.from_quat(_QUATS).as_euler(seq, degrees=True), ref.as_euler(
        seq, degrees=True), atol=2e-3)
    _close(Rotation.from_euler(seq, angles.astype(np.float32)).as_matrix(),
           SRotation.from_euler(seq, angles).as_matrix(), atol=1e-6)
    # gimbal lock: the middle angle at 0 or at its extreme; SciPy zeroes the third angle
    proper = seq[0].lower() == seq[2].lower()
    for middle in ([0.0, np.pi] if proper else [0.0, np.pi / 2, -np.pi / 2]):
        locked = SRotation.from_euler(seq, [0.3, middle, 0.5]).as_quat()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = SRotation.from_quat(locked).as_euler(seq)
        _close(Rotation.from_quat(locked.astype(np.float32)).as_euler(seq), expected,
               atol=2e-5)


def test_from_euler_shapes_and_errors():
    assert Rotation.from_euler("z", 0.3).single
    assert Rotation.from_euler("z", jnp.array([0.3, 0.4])).quat.shape == (2, 4)
    assert Rotation.from_euler("z", jnp.array([[0.3], [0.4]])).quat.shape == (2, 4)
    assert Rotation.from_euler("zy", jnp.array([0.3, 0.1])).single
    _close(Rotation.from_euler("zy", jnp.array([0.3, 0.1])).as_matrix(),
           SRotation.from_euler("zy", [0.3, 0.1]).as_matrix(), atol=1e-6)
    for bad in ("xyzz", "xyZ", "xxz", "abc", ""):
        with pytest.raises(ValueError):
            Rotation.from_euler(bad, jnp.ones(3))
    with pytest.raises(ValueError, match="3 axes"):
        Rotation.identity().as_euler("xy")
    with pytest.raises(ValueError, match="shape"):
        Rotation.from_euler("xyz", jnp.ones(2))


def test_rotation_operations_against_scipy():
    ours, ref = Rotation.from_quat(_QUATS), SRotation.from_quat(_QUATS)
    vectors = _RNG.normal(size=(7, 3)).astype(np.float32)
    _close(ours.apply(vectors), ref.apply(vectors), atol=1e-5)
    _close(ours.apply(vectors, inverse=True), ref.apply(vectors, inverse=True), atol=1e-5)
    _close(ours.apply(vectors[0]), ref.apply(vectors[0]), atol=1e-5)
    _close(ours[0].apply(vectors), ref[0].apply(vectors), atol=1e-5)
    assert ours[0].apply(vectors[0]).shape == (3,)
    with pytest.raises(ValueError):
        ours.apply(np.ones((5, 3), np.float32))
    _close((ours * ours[::-1]).as_matrix(), (ref * ref[::-1]).as_matrix(), atol=1e-5)
    _close((ours[0] * ours).as_matrix(), (ref[0] * ref).as_matrix(), atol=1e-5)
    _close(ours.inv().as_matrix(), ref.inv().as_matrix(), atol=1e-6)
    _close((ours * ours.inv()).magnitude(), np.zeros(7), atol=1e-3)
    _close(ours.mean().as_matrix(), ref.mean().as_matrix(), atol=1e-5)
    weights = np.linspace(0.1, 1.0, 7).astype(np.float32)
    _close(ours.mean(weights).as_matrix(), ref.mean(weights).as_matrix(), atol=1e-5)
    both = Rotation.concatenate([ours, ours[0]])
    assert both.quat.shape == (8, 4)
    _close(both.as_matrix()[-1], ref[0].as_matrix(), atol=1e-6)
    with pytest.raises(TypeError, match="subscriptable"):
        ours[0][0]
    with pytest.raises(TypeError, match="len"):
        len(ours[0])


def test_rotation_random_is_uniform():
    r = Rotation.random(jrandom.PRNGKey(0), 4000)
    assert r.quat.shape == (4000, 4) and r.quat.dtype == jnp.float32
    _close(jnp.linalg.norm(r.quat, axis=-1), np.ones(4000), atol=1e-5)
    # under the uniform (Haar) measure E[R] = 0 and the angle has density (1 - cos t) / pi,
    # whose mean is pi / 2 + 2 / pi
    _close(jnp.mean(r.as_matrix(), axis=0), np.zeros((3, 3)), atol=0.05)
    _close(jnp.mean(r.magnitude()), np.pi / 2 + 2 / np.pi, atol=0.05)
    assert Rotation.random(jrandom.PRNGKey(1)).single


def test_rotation_jit_vmap_grad():
    rotvecs = jnp.asarray(_RNG.normal(size=(5, 3)), jnp.float32)
    vectors = jnp.asarray(_RNG.normal(size=(5, 3)), jnp.float32)

    def rotate(rv, v):
        return Rotation.from_rotvec(rv).apply(v)

    eager = rotate(rotvecs, vectors)
    _close(functrans.jit(rotate)(rotvecs, vectors), eager, atol=1e-6)
    _close(functrans.vmap(rotate)(rotvecs, vectors), eager, atol=1e-6)
    # a Rotation is a pytree: it goes in and out of jit
    inverted = functrans.jit(lambda r: r.inv())(Rotation.from_rotvec(rotvecs))
    assert isinstance(inverted, Rotation)
    _close(inverted.as_rotvec(), -np.asarray(rotvecs), atol=1e-5)
    with x64():
        rv = jnp.asarray([0.3, -0.2, 0.5])
        check_grads(lambda r: Rotation.from_rotvec(r).as_matrix(), (rv,), order=2)
        check_grads(lambda r: Rotation.from_rotvec(r).as_euler("ZYX"), (rv,), order=1)
        # at the identity: the series branches keep derivatives finite (and right)
        jac = functrans.jacfwd(lambda r: Rotation.from_rotvec(r).as_rotvec())(jnp.zeros(3))
        _close(jac, np.eye(3), atol=1e-12)
        check_grads(lambda q: Rotation(q).as_rotvec(), (jnp.asarray([0.0, 0.0, 0.0, 1.0]),),
                    order=1)


def test_slerp_against_scipy():
    times = np.array([0.0, 1.0, 3.0, 4.0])
    keys = _QUATS[:4]
    ours = Slerp.init(jnp.asarray(times, jnp.float32), Rotation.from_quat(keys))
    ref = SSlerp(times, SRotation.from_quat(keys))
    query = np.array([0.0, 0.3, 1.0, 2.5, 3.9, 4.0])
    _close(ours(query).as_matrix(), ref(query).as_matrix(), atol=1e-5)
    single = ours(jnp.asarray(0.5))
    assert single.single
    _close(single.as_matrix(), ref(0.5).as_matrix(), atol=1e-5)
    _close(functrans.jit(lambda t: ours(t).quat)(jnp.asarray(query, jnp.float32)),
           ours(query).quat, atol=1e-6)
    with pytest.raises(ValueError):
        Slerp.init(jnp.array([0.0, 1.0]), Rotation.from_quat(keys))


# =============================================================================================
# special matrices (functrans.scipy._special_matrices)
# =============================================================================================

_C = _RNG.normal(size=4).astype(np.float32)
_R = _RNG.normal(size=3).astype(np.float32)


def _same(actual, expected, dtype, atol=1e-6):
    assert actual.dtype == dtype, (actual.dtype, dtype)
    assert actual.shape == np.shape(expected)
    _close(actual, expected, rtol=1e-5, atol=atol)


def test_structured_matrices_against_scipy():
    f32 = jnp.float32
    _same(lm.toeplitz(_C), sla.toeplitz(_C, _C), f32)
    _same(lm.toeplitz(_C, _R), sla.toeplitz(_C, _R), f32)
    _same(lm.toeplitz(np.array([1, 2, 3])), sla.toeplitz([1, 2, 3]), jnp.int32)
    _same(lm.hankel(_C), sla.hankel(_C), f32)
    _same(lm.hankel(_C, _R), sla.hankel(_C, _R), f32)
    _same(lm.circulant(_C), sla.circulant(_C), f32)
    _same(lm.companion(_C), sla.companion(_C), f32)
    _same(lm.companion(np.array([1, 2, 3])), sla.companion([1, 2, 3]), f32)
    _same(lm.fiedler(_C), sla.fiedler(_C), f32)
    _same(lm.leslie(_C, _R), sla.leslie(_C, _R), f32)
    for n in range(2, 8):
        a = _RNG.normal(size=n).astype(np.float32)
        _same(lm.fiedler_companion(a), sla.fiedler_companion(a), f32, atol=1e-5)
    assert lm.fiedler_companion(np.ones(1, np.float32)).shape == (0, 0)


@pytest.mark.parametrize("m,n", [(3, 5), (5, 3), (4, 4), (4, 2), (1, 3)])
def test_convolution_matrix_against_scipy(m, n):
    a = _RNG.normal(size=m).astype(np.float32)
    v = _RNG.normal(size=n).astype(np.float32)
    for mode in ("full", "same", "valid"):
        ours = lm.convolution_matrix(a, n, mode)
        _same(ours, sla.convolution_matrix(a, n, mode), jnp.float32)
        _close(ours @ v, np.convolve(a, v, mode), atol=1e-5)
    with pytest.raises(ValueError, match="mode"):
        lm.convolution_matrix(a, n, "middle")


def test_structured_matrices_batch_like_a_loop():
    c = _RNG.normal(size=(2, 3, 4)).astype(np.float32)
    r = _RNG.normal(size=(3, 5)).astype(np.float32)
    for fn, args in [(lm.toeplitz, (c, r)), (lm.hankel, (c, r)), (lm.circulant, (c,)),
                     (lm.companion, (c,)), (lm.fiedler, (c,)),
                     (lm.fiedler_companion, (c,)), (lambda x: lm.convolution_matrix(x, 3),
                                                     (c,)), (lm.leslie, (c, c[..., 1:]))]:
        batched = np.asarray(fn(*args))
        for i in range(2):
            for j in range(3):
                single = fn(*(x[i, j] if x.ndim == 3 else x[j] for x in args))
                _close(batched[i, j], single, atol=1e-6)
        _close(functrans.jit(fn)(*args), batched, atol=1e-6)


def test_sized_matrices_against_scipy():
    for scale in (None, "sqrtn", "n"):
        _same(lm.dft(5, scale), sla.dft(5, scale), jnp.complex64, atol=1e-6)
    _same(lm.hadamard(8), sla.hadamard(8), jnp.int32)
    _same(lm.hadamard(4, jnp.float32), sla.hadamard(4), jnp.float32)
    with pytest.raises(ValueError, match="power of 2"):
        lm.hadamard(6)
    _same(lm.helmert(5), sla.helmert(5), jnp.float32)
    _same(lm.helmert(5, full=True), sla.helmert(5, full=True), jnp.float32)
    _same(lm.hilbert(4), sla.hilbert(4), jnp.float32)
    _same(lm.invhilbert(6), sla.invhilbert(6), jnp.float32, atol=0)
    for kind in (None, "lower", "upper", "symmetric"):
        _same(lm.pascal(6, kind), sla.pascal(6, kind or "symmetric"), jnp.float32, atol=0)
        _same(lm.invpascal(6, kind), sla.invpascal(6, kind or "symmetric"), jnp.float32,
              atol=0)
    with x64():
        assert lm.hilbert(3).dtype == jnp.float64 and lm.dft(3).dtype == jnp.complex128
        _same(lm.invhilbert(12), sla.invhilbert(12, exact=True).astype(np.float64),
              jnp.float64, atol=0)


@pytest.mark.parametrize("shape", [(4, 3), (3, 4), (3, 3)])
@pytest.mark.parametrize("side", ["right", "left"])
def test_polar_against_scipy(shape, side):
    a = _RNG.normal(size=shape).astype(np.float32)
    u, p = lm.polar(a, side)
    u_ref, p_ref = sla.polar(a.astype(np.float64), side)
    _same(u, u_ref, jnp.float32, atol=1e-5)
    _same(p, p_ref, jnp.float32, atol=1e-5)
    batched = lm.polar(np.stack([a, 2 * a]), side)
    _close(batched[1][1], 2 * np.asarray(p), atol=1e-5)


def test_expm_frechet_against_scipy():
    a = (0.5 * _RNG.normal(size=(3, 3))).astype(np.float32)
    e = _RNG.normal(size=(3, 3)).astype(np.float32)
    expm_a, derivative = lm.expm_frechet(a, e)
    ref_expm, ref_derivative = sla.expm_frechet(a.astype(np.float64), e.astype(np.float64))
    _same(expm_a, ref_expm, jnp.float32, atol=1e-5)
    _same(derivative, ref_derivative, jnp.float32, atol=1e-5)
    _close(lm.expm_frechet(a, e, compute_expm=False), ref_derivative, atol=1e-5)
    with pytest.raises(ValueError, match="method"):
        lm.expm_frechet(a, e, method="taylor")


def test_solve_sylvester_eigh_tridiagonal_qr_multiply_against_scipy():
    a = (_RNG.normal(size=(3, 3)) + 3 * np.eye(3)).astype(np.float32)
    b = _RNG.normal(size=(2, 2)).astype(np.float32)
    c = _RNG.normal(size=(3, 2)).astype(np.float32)
    x = lm.solve_sylvester(a, b, c)
    _same(x, sla.solve_sylvester(a, b, c), jnp.float32, atol=1e-5)
    _close(a @ x + x @ b, c, atol=1e-5)

    d = _RNG.normal(size=5).astype(np.float32)
    e = _RNG.normal(size=4).astype(np.float32)
    w, v = lm.eigh_tridiagonal(d, e)
    w_ref = sla.eigh_tridiagonal(d, e, eigvals_only=True)
    _same(w, w_ref, jnp.float32, atol=1e-5)
    tri = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
    _close(tri @ np.asarray(v), np.asarray(v) * np.asarray(w), atol=1e-5)
    _close(lm.eigh_tridiagonal(d, e, eigvals_only=True, select="i", select_range=(1, 3)),
           w_ref[1:4], atol=1e-5)
    with pytest.raises(NotImplementedError, match="select='v'"):
        lm.eigh_tridiagonal(d, e, select="v", select_range=(0.0, 1.0))

    m = _RNG.normal(size=(4, 3)).astype(np.float32)
    right = _RNG.normal(size=(2, 4)).astype(np.float32)
    left = _RNG.normal(size=(3, 5)).astype(np.float32)
    cq, r = lm.qr_multiply(m, right)
    ref_cq, ref_r = sla.qr_multiply(m, right)
    # Q and R are unique up to the signs of R's diagonal: fix them to compare
    signs = np.sign(np.diag(np.asarray(r))) * np.sign(np.diag(ref_r))
    _close(np.asarray(cq) * signs, ref_cq, atol=1e-5)
    _close(np.asarray(r) * signs[:, None], ref_r, atol=1e-5)
    qc, _ = lm.qr_multiply(m, left, mode="left")
    _close(np.asarray(qc) * 1.0, (sla.qr(m, mode="economic")[0] * signs) @ left, atol=1e-5)
    assert lm.qr_multiply(m, right[0])[0].shape == (3,)
    with pytest.raises(NotImplementedError, match="pivoting"):
        lm.qr_multiply(m, right, pivoting=True)


# =============================================================================================
# docstring examples
# =============================================================================================

@pytest.mark.parametrize("module", [_line_search, _bfgs, _minimize, fopt, ftransform, lm])
def test_docstring_examples(module):
    globs = {"jnp": jnp, "functrans": functrans}
    globs.update({name: getattr(module, name) for name in dir(module)
                  if not name.startswith("__")})
    result = doctest.testmod(module, extraglobs=globs, verbose=False,
                             optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
