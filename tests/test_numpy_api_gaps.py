"""The smaller jax.numpy / tree_util / ops / nn / random names: values, dtypes and shapes
against NumPy (or hand-written expectations), gradients by finite differences in float64,
vmap against Python loops, jit against eager."""
import collections
import io
import operator

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import functrans
import functrans.numpy as jnp
import functrans.ops
from functrans import nn, random, tree_util
from functrans.test_util import check_grads, x64


def assert_same(actual, expected, dtype=None, atol=1e-6, rtol=1e-6):
    """Values, shape and (when given) dtype of ``actual`` against NumPy's ``expected``."""
    actual_np = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual_np.shape == expected.shape, (actual_np.shape, expected.shape)
    if dtype is not None:
        assert actual.dtype == np.dtype(dtype), (actual.dtype, dtype)
    np.testing.assert_allclose(actual_np, expected, atol=atol, rtol=rtol)


# =============================================================================================
# Scalar types, dtypes, warnings
# =============================================================================================

_NEW_NUMPY_NAMES = (
    "bool", "ComplexWarning", "c_", "r_", "s_", "index_exp", "mgrid", "ogrid", "bartlett",
    "blackman", "hamming", "hanning", "kaiser", "diag_indices_from", "tril_indices_from",
    "triu_indices_from", "mask_indices", "put", "trim_zeros", "poly", "polydiv", "histogram2d",
    "histogramdd", "matvec", "vecmat", "frombuffer", "fromstring", "fromiter", "fromfile",
    "save", "load", "savez", "array_repr", "array_str", "printoptions", "get_printoptions",
    "set_printoptions", "from_dlpack",
)


@pytest.mark.parametrize("name", _NEW_NUMPY_NAMES)
def test_new_names_are_exported(name):
    # each is exercised by a test below; here: reachable from functrans.numpy, JAX's spelling
    assert name in vars(jnp), f"functrans.numpy.{name} is missing"


def test_bool_is_bool_():
    assert jnp.bool is jnp.bool_
    assert jnp.zeros(2, jnp.bool).dtype == np.bool_
    assert jnp.bool(3).dtype == np.bool_ and bool(jnp.bool(3))


def test_complex_warning_is_numpys():
    assert jnp.ComplexWarning is np.exceptions.ComplexWarning


_ML_NAMES = ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
             "float8_e4m3b11fnuz", "float8_e3m4", "float8_e4m3", "float8_e8m0fnu",
             "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn", "int4", "uint4", "int2",
             "uint2"]


@pytest.mark.parametrize("name", [n for n in _ML_NAMES if hasattr(ml_dtypes, n)])
def test_ml_dtypes_create_and_convert(name):
    scalar_type = getattr(jnp, name)
    dtype = np.dtype(getattr(ml_dtypes, name))
    assert np.dtype(scalar_type.dtype) == dtype
    host = (np.array([1, 2, 0.5, 1], np.float32) if name.startswith("float")
            else np.array([1, 0, 1, 1]))
    expected = host.astype(dtype)
    x = jnp.asarray(host, dtype=scalar_type)
    assert x.dtype == dtype
    np.testing.assert_array_equal(np.asarray(x).astype(np.float32), expected.astype(np.float32))
    # converting back, eagerly and compiled
    back = x.astype(jnp.float32)
    assert back.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(back), expected.astype(np.float32))
    compiled = functrans.jit(lambda a: a.astype(jnp.float32))(x)
    np.testing.assert_array_equal(np.asarray(compiled), expected.astype(np.float32))
    assert scalar_type(1).dtype == dtype
    np.testing.assert_array_equal(np.asarray(x.reshape(2, 2)[1]).astype(np.float32),
                                  expected.astype(np.float32)[2:])


def test_ml_dtypes_arithmetic_within_one_type():
    x = jnp.asarray(np.array([1.0, 2.0], np.float32), dtype=jnp.float8_e4m3fn)
    for y in (x + x, functrans.jit(lambda v: v + v)(x)):
        assert y.dtype == jnp.float8_e4m3fn
        np.testing.assert_array_equal(np.asarray(y).astype(np.float32), [2.0, 4.0])


# =============================================================================================
# Index tricks
# =============================================================================================

@pytest.mark.parametrize("key", [
    (slice(0, 3), slice(0, 2)), slice(0, 1, 5j), slice(0.0, 1, 0.25), slice(-3, 0),
    slice(1, 5, 2), (slice(0, 2), slice(0.0, 1, 0.5)), (slice(0, 1, 3j), slice(2, 4)),
])
def test_mgrid_ogrid_match_numpy(key):
    expected_m = np.mgrid[key]
    got = jnp.mgrid[key]
    dtype = np.int32 if expected_m.dtype.kind == "i" else np.float32
    assert_same(got, expected_m, dtype)
    expected_o = np.ogrid[key]
    got_o = jnp.ogrid[key]
    if isinstance(expected_o, (list, tuple)):
        assert isinstance(got_o, list) and len(got_o) == len(expected_o)
        for g, e in zip(got_o, expected_o):
            assert_same(g, e, dtype)
    else:
        assert_same(got_o, expected_o, dtype)


def test_mgrid_rejects_non_slices():
    with pytest.raises(TypeError, match="mgrid"):
        jnp.mgrid[3, 4]


@pytest.mark.parametrize("build", [
    lambda m: m.r_[1:4, 0, np.array([7, 8])],
    lambda m: m.r_["-1", np.ones((2, 2)), np.zeros((2, 1))],
    lambda m: m.r_["0,2", [1, 2, 3], [4, 5, 6]],
    lambda m: m.r_["0,2,0", [1, 2, 3], [4, 5, 6]],
    lambda m: m.r_["0,3,1", [1, 2], [3, 4]],
    lambda m: m.r_["0,3,-2", [1, 2], [3, 4]],
    lambda m: m.r_["1", np.ones((2, 2)), np.zeros((2, 2))],
    lambda m: m.r_[-1:1:6j, [0] * 3, 5, 6],
    lambda m: m.r_[np.ones((2, 2)), [[3, 4]]],
    lambda m: m.c_[np.array([1, 2, 3]), np.array([4, 5, 6])],
    lambda m: m.c_[np.array([[1, 2, 3]]), 0, 0, np.array([[4, 5, 6]])],
    lambda m: m.c_[1:3, 4:6],
    lambda m: m.c_[[1, 2]],
])
def test_r_c_match_numpy(build):
    expected = build(np)
    got = build(jnp)
    assert_same(got, expected, np.int32 if expected.dtype.kind == "i" else np.float32)


def test_r_matrix_directives():
    assert_same(jnp.r_["r", [1, 2], [3, 4]], [[1, 2, 3, 4]], np.int32)
    assert_same(jnp.r_["c", [1, 2], [3, 4]], [[1], [2], [3], [4]], np.int32)
    with pytest.raises(ValueError, match="directive"):
        jnp.r_["bogus", [1]]


def test_r_promotes_like_concatenate():
    assert jnp.r_[jnp.array([1], jnp.int8), 5].dtype == np.int8
    assert jnp.r_[True, False].dtype == np.bool_


def test_s_and_index_exp():
    assert jnp.s_[1:2, ::3] == np.s_[1:2, ::3]
    assert jnp.index_exp[2] == (2,)


# =============================================================================================
# Window functions
# =============================================================================================

@pytest.mark.parametrize("name", ["bartlett", "blackman", "hamming", "hanning"])
@pytest.mark.parametrize("M", [0, 1, 2, 5, 8])
def test_windows_match_numpy(name, M):
    assert_same(getattr(jnp, name)(M), getattr(np, name)(M), np.float32, atol=1e-6)


@pytest.mark.parametrize("M", [0, 1, 2, 5, 8])
def test_kaiser_matches_numpy(M):
    assert_same(jnp.kaiser(M, 3.5), np.kaiser(M, 3.5), np.float32, atol=1e-6, rtol=1e-5)


def test_windows_are_float64_with_x64():
    with x64():
        assert jnp.hamming(4).dtype == np.float64
        assert_same(jnp.kaiser(6, 2.0), np.kaiser(6, 2.0), np.float64, atol=1e-12, rtol=1e-12)


def test_kaiser_beta_traced_and_differentiable():
    compiled = functrans.jit(jnp.kaiser, static_argnums=0)(5, 2.0)
    assert_same(compiled, jnp.kaiser(5, 2.0), atol=1e-6)
    with x64():
        check_grads(lambda b: jnp.kaiser(6, b), (np.float64(1.7),), order=1)


def test_window_length_must_be_static():
    with pytest.raises(TypeError):
        functrans.jit(jnp.hanning)(4)


# =============================================================================================
# Index helpers
# =============================================================================================

def test_indices_from_match_numpy():
    a = np.ones((3, 3, 3))
    for g, e in zip(jnp.diag_indices_from(a), np.diag_indices_from(a)):
        assert_same(g, e, np.int32)
    for k in (-1, 0, 2):
        for g, e in zip(jnp.tril_indices_from(np.ones((3, 4)), k),
                        np.tril_indices_from(np.ones((3, 4)), k)):
            assert_same(g, e, np.int32)
        for g, e in zip(jnp.triu_indices_from(jnp.ones((4, 3)), k),
                        np.triu_indices_from(np.ones((4, 3)), k)):
            assert_same(g, e, np.int32)
    with pytest.raises(ValueError, match="equal"):
        jnp.diag_indices_from(jnp.ones((3, 2)))
    with pytest.raises(ValueError, match="2-D"):
        jnp.tril_indices_from(jnp.ones(3))


def test_mask_indices():
    for g, e in zip(jnp.mask_indices(4, jnp.triu, 1), np.mask_indices(4, np.triu, 1)):
        assert_same(g, e, np.int32)
    rows, cols = jnp.mask_indices(3, jnp.triu, 1, size=5)
    assert_same(rows, [0, 0, 1, 0, 0])
    assert_same(cols, [1, 2, 2, 0, 0])


# =============================================================================================
# put, trim_zeros
# =============================================================================================

@pytest.mark.parametrize("mode", [None, "clip", "wrap"])
def test_put_matches_numpy(mode):
    a = np.arange(6.0).reshape(2, 3)
    ind = np.array([0, 2, 7, -1, -8]) if mode else np.array([0, 2, -1, 4])
    v = np.array([10.0, 20.0])
    expected = a.copy()
    np.put(expected, ind, v, mode=mode or "raise")
    assert_same(jnp.put(a, jnp.asarray(ind), jnp.asarray(v), mode=mode, inplace=False),
                expected, np.float32)


def test_put_drops_out_of_range_by_default_and_casts():
    out = jnp.put(jnp.arange(5), jnp.array([1, 9]), jnp.array([2.7, 3.3]), inplace=False)
    assert_same(out, [0, 2, 2, 3, 4], np.int32)


def test_put_errors_and_transforms():
    with pytest.raises(ValueError, match="inplace=False"):
        jnp.put(jnp.arange(3), jnp.array([0]), 1)
    with pytest.raises(NotImplementedError, match="raise"):
        jnp.put(jnp.arange(3), jnp.array([0]), 1, mode="raise", inplace=False)
    f = lambda a, v: jnp.put(a, jnp.array([0, 3]), v, inplace=False)  # noqa: E731
    a, v = jnp.arange(8.0).reshape(2, 4), jnp.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    assert_same(functrans.jit(f)(a, v[0]), f(a, v[0]))
    batched = functrans.vmap(f, in_axes=(None, 0))(a, v)
    assert_same(batched, np.stack([np.asarray(f(a, row)) for row in v]))
    with x64():
        check_grads(lambda a, v: f(a, v), (np.arange(8.0).reshape(2, 4), np.array([1.0, 2.0])),
                    order=1)


@pytest.mark.parametrize("value,trim", [
    ([0, 0, 1, 2, 0, 3, 0, 0], "fb"), ([0, 0, 1, 2, 0, 3, 0, 0], "f"),
    ([0, 0, 1, 2, 0, 3, 0, 0], "b"), ([0.0, 0.0], "fb"), ([], "fb"), ([1, 0], "B"),
])
def test_trim_zeros_1d(value, trim):
    a = np.array(value)
    expected = np.trim_zeros(a, trim)
    got = jnp.trim_zeros(jnp.asarray(a), trim)
    assert_same(got, expected)


def test_trim_zeros_nd():
    a = np.zeros((4, 5), np.int32)
    a[1, 2] = a[2, 3] = 7
    assert_same(jnp.trim_zeros(a), np.trim_zeros(a))
    assert_same(jnp.trim_zeros(a, axis=1), np.trim_zeros(a, axis=1))
    assert_same(jnp.trim_zeros(a, "f", axis=0), np.trim_zeros(a, "f", axis=0))
    assert jnp.trim_zeros(jnp.zeros((3, 3))).shape == (0, 0)
    with pytest.raises(functrans.ConcretizationTypeError):
        functrans.jit(jnp.trim_zeros)(jnp.array([0, 1, 0]))


# =============================================================================================
# poly, polydiv
# =============================================================================================

def test_poly_matches_numpy():
    assert_same(jnp.poly(jnp.array([1.0, 2.0, 3.0])), np.poly([1.0, 2.0, 3.0]), np.float32)
    assert_same(jnp.poly(jnp.array([1, 2])), np.poly([1, 2]), np.float32)
    assert_same(jnp.poly(2.0), np.poly([2.0]), np.float32)
    empty = jnp.poly(jnp.array([]))
    assert empty.shape == () and float(empty) == 1.0
    roots = np.array([1 + 1j, 1 - 1j, 0.5j])
    assert_same(jnp.poly(roots), np.poly(roots), np.complex64, atol=1e-5)


def test_poly_of_matrix_is_its_characteristic_polynomial():
    a = np.random.default_rng(0).normal(size=(4, 4))
    got = jnp.poly(a.astype(np.float32))
    assert got.dtype == np.complex64  # as JAX (its route goes through complex eigenvalues)
    assert_same(got, np.poly(a), atol=1e-4, rtol=1e-4)


def test_poly_gradient():
    with x64():
        check_grads(jnp.poly, (np.array([0.3, -1.2, 2.0]),), order=2)


@pytest.mark.parametrize("u,v", [
    ([1.0, -3.0, 2.0], [1.0, -1.0]), ([1.0, 2.0, 3.0, 4.0], [2.0, 1.0]),
    ([1.0], [1.0, 2.0, 3.0]), ([1, 2, 3], [1, 1]), ([3.0, 1.0, 4.0, 1.0, 5.0], [2.0, 7.0, 1.0]),
])
def test_polydiv_matches_numpy(u, v):
    q, r = jnp.polydiv(jnp.asarray(u), jnp.asarray(v))
    q_np, r_np = np.polydiv(np.asarray(u, float), np.asarray(v, float))
    assert_same(q, q_np, np.float32, atol=1e-5)
    # the remainder keeps u's length; its trailing part is NumPy's remainder
    assert r.shape == (len(u),)
    assert_same(r[len(u) - len(r_np):], r_np, atol=1e-5)
    assert_same(r[:len(u) - len(r_np)], np.zeros(len(u) - len(r_np)), atol=1e-5)
    q2, r2 = jnp.polydiv(jnp.asarray(u), jnp.asarray(v), trim_leading_zeros=True)
    if np.any(np.abs(r_np) > 1e-3):
        assert_same(r2, np.trim_zeros(r_np, "f"), atol=1e-5)


def test_polydiv_jit_and_grad():
    u, v = np.array([1.0, 2.0, 3.0, 4.0]), np.array([2.0, 1.0])
    q, r = functrans.jit(jnp.polydiv)(u, v)
    q0, r0 = jnp.polydiv(u, v)
    assert_same(q, q0)
    assert_same(r, r0)
    with x64():
        check_grads(lambda u, v: jnp.polydiv(u, v), (u, v), order=1)


# =============================================================================================
# histogram2d, histogramdd
# =============================================================================================

_X = np.array([0.1, 0.5, 0.9, 0.3, 1.0, 0.65, 0.2])
_Y = np.array([0.2, 0.8, 0.4, 0.4, 0.0, 0.95, 0.33])
_Z = np.array([0.3, 0.2, 0.1, 0.9, 0.5, 0.7, 0.6])


@pytest.mark.parametrize("kwargs", [
    dict(bins=3), dict(bins=[2, 3], range=[[0, 1], [0, 1]]), dict(bins=[2, 3], density=True),
    dict(bins=[np.array([0.0, 0.5, 1.0]), 3]), dict(bins=np.array([0.0, 0.3, 0.6, 1.0])),
    dict(bins=4, weights=np.arange(7.0)), dict(bins=2, range=[[0.2, 0.8], [0.0, 0.5]]),
])
def test_histogram2d_matches_numpy(kwargs):
    hist, xe, ye = jnp.histogram2d(_X, _Y, **kwargs)
    h_np, xe_np, ye_np = np.histogram2d(_X, _Y, **kwargs)
    counts = "weights" not in kwargs and not kwargs.get("density")
    assert hist.dtype == (np.int32 if counts else np.float32)
    assert_same(hist, h_np, atol=1e-5, rtol=1e-5)
    assert_same(xe, xe_np, np.float32, atol=1e-6)
    assert_same(ye, ye_np, np.float32, atol=1e-6)


@pytest.mark.parametrize("kwargs", [
    dict(bins=2), dict(bins=[2, 3, 1]), dict(bins=3, density=True),
    dict(bins=2, range=[None, (0, 0.5), (0, 1)]), dict(bins=2, weights=np.arange(7)),
])
def test_histogramdd_matches_numpy(kwargs):
    sample = np.stack([_X, _Y, _Z], axis=1)
    hist, edges = jnp.histogramdd(sample, **kwargs)
    h_np, edges_np = np.histogramdd(sample, **kwargs)
    assert_same(hist, h_np, atol=1e-5, rtol=1e-5)
    assert isinstance(edges, list) and len(edges) == 3
    for e, e_np in zip(edges, edges_np):
        assert_same(e, e_np, np.float32, atol=1e-6)
    if "weights" in kwargs:
        assert hist.dtype == np.float32  # integer weights are promoted


def test_histogramdd_jit_and_errors():
    sample = np.stack([_X, _Y], axis=1).astype(np.float32)
    compiled = functrans.jit(lambda s: jnp.histogramdd(s, bins=3)[0])(sample)
    assert_same(compiled, jnp.histogramdd(sample, bins=3)[0])
    with pytest.raises(ValueError, match="2-D"):
        jnp.histogramdd(_X, bins=2)


# =============================================================================================
# matvec, vecmat
# =============================================================================================

def _matvec_np(a, b):
    return np.einsum("...mn,...n->...m", a, b)


def _vecmat_np(a, b):
    return np.einsum("...n,...nm->...m", np.conj(a), b)


@pytest.mark.parametrize("shapes", [((3, 4), (4,)), ((2, 3, 4), (4,)), ((2, 1, 3, 4), (5, 4))])
def test_matvec_vecmat_match_numpy(shapes):
    rng = np.random.default_rng(1)
    a = rng.normal(size=shapes[0]).astype(np.float32)
    b = rng.normal(size=shapes[1]).astype(np.float32)
    assert_same(jnp.matvec(a, b), _matvec_np(a, b), np.float32, atol=1e-5)
    m = np.swapaxes(a, -1, -2)
    assert_same(jnp.vecmat(b, m), _vecmat_np(b, m), np.float32, atol=1e-5)


def test_vecmat_conjugates_and_int_dtype():
    x, m = np.array([1j, 2]), np.array([[1, 2], [3, 4j]])
    assert_same(jnp.vecmat(x, m), _vecmat_np(x, m), np.complex64)
    assert jnp.matvec(jnp.ones((2, 3), jnp.int32), jnp.arange(3)).dtype == np.int32
    with pytest.raises(ValueError):
        jnp.matvec(jnp.ones(3), jnp.ones(3))
    with pytest.raises(ValueError):
        jnp.matvec(jnp.ones((3, 2)), jnp.ones(3))


def test_matvec_transforms():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(5, 3, 4)), rng.normal(size=(5, 4))
    batched = functrans.vmap(jnp.matvec)(a.astype(np.float32), b.astype(np.float32))
    loop = np.stack([np.asarray(jnp.matvec(a[i].astype(np.float32), b[i].astype(np.float32)))
                     for i in range(5)])
    assert_same(batched, loop, atol=1e-5)
    assert_same(functrans.jit(jnp.vecmat)(b[0], a[0].T), jnp.vecmat(b[0], a[0].T), atol=1e-5)
    with x64():
        check_grads(jnp.matvec, (a[0], b[0]), order=1)
        check_grads(jnp.vecmat, (b[0], a[0].T), order=1)


# =============================================================================================
# Host-side creation, save/load, printing, DLPack
# =============================================================================================

def test_from_buffer_string_iter_file(tmp_path):
    assert_same(jnp.frombuffer(b"\x01\x02\x03", dtype=jnp.uint8), [1, 2, 3], np.uint8)
    data = np.array([1.5, 2.5, 3.5], np.float32).tobytes()
    assert_same(jnp.frombuffer(data, dtype=np.float32, count=2, offset=4), [2.5, 3.5])
    assert_same(jnp.frombuffer(np.arange(3.0).tobytes()), [0.0, 1.0, 2.0], np.float32)
    assert_same(jnp.fromstring("1, 2, 3", dtype=int, sep=","), [1, 2, 3], np.int32)
    assert_same(jnp.fromiter((i * i for i in range(4)), dtype=float), [0, 1, 4, 9], np.float32)
    path = tmp_path / "raw.bin"
    np.arange(5, dtype=np.int16).tofile(path)
    assert_same(jnp.fromfile(path, dtype=np.int16), np.arange(5), np.int16)
    with x64():
        assert jnp.frombuffer(np.arange(3.0).tobytes()).dtype == np.float64


def test_save_load_savez(tmp_path):
    f = io.BytesIO()
    jnp.save(f, jnp.arange(3.0))
    f.seek(0)
    loaded = jnp.load(f)
    assert isinstance(loaded, functrans.Array)
    assert_same(loaded, [0.0, 1.0, 2.0], np.float32)
    f = io.BytesIO()
    jnp.save(f, jnp.array([1.5, -2.0], dtype=jnp.bfloat16))
    f.seek(0)
    restored = jnp.load(f)
    assert restored.dtype == jnp.bfloat16
    assert_same(restored.astype(jnp.float32), [1.5, -2.0])
    path = tmp_path / "arrays.npz"
    jnp.savez(path, jnp.ones(2), b=jnp.arange(3))
    archive = jnp.load(path)
    assert_same(archive["arr_0"], [1.0, 1.0])
    assert_same(archive["b"], [0, 1, 2])


def test_printing():
    x = jnp.array([1.0, 2.5])
    assert jnp.array_repr(x) == repr(x)
    assert jnp.array_repr(x, precision=1) == "Array([1. , 2.5], dtype=float32)"
    assert jnp.array_repr(np.arange(2)) == np.array_repr(np.arange(2))
    assert jnp.array_str(x) == np.array_str(np.asarray(x))
    with jnp.printoptions(precision=2):
        assert jnp.get_printoptions()["precision"] == 2
        assert repr(jnp.array([1.23456])) == "Array([1.23], dtype=float32)"
    old = jnp.get_printoptions()["precision"]
    try:
        jnp.set_printoptions(precision=3)
        assert np.get_printoptions()["precision"] == 3
    finally:
        jnp.set_printoptions(precision=old)


def test_from_dlpack_copies():
    host = np.arange(4.0)
    x = jnp.from_dlpack(host)
    assert x.dtype == np.float32
    host[0] = 100.0
    assert float(x[0]) == 0.0
    assert_same(jnp.from_dlpack(jnp.arange(3)), [0, 1, 2], np.int32)


# =============================================================================================
# functrans.ops: segment reductions
# =============================================================================================

_SEGMENT_OPS = {
    "segment_sum": (np.add, 0),
    "segment_prod": (np.multiply, 1),
    "segment_max": (np.maximum, "low"),
    "segment_min": (np.minimum, "high"),
}


def _segment_reference(name, data, ids, num_segments, mode=None):
    combine, identity = _SEGMENT_OPS[name]
    data = np.asarray(data)
    if identity == "low":
        identity = -np.inf if data.dtype.kind in "fc" else (
            False if data.dtype == np.bool_ else np.iinfo(data.dtype).min)
    elif identity == "high":
        identity = np.inf if data.dtype.kind in "fc" else (
            True if data.dtype == np.bool_ else np.iinfo(data.dtype).max)
    out = np.full((num_segments,) + data.shape[1:], identity, dtype=data.dtype)
    for i, s in enumerate(np.asarray(ids)):
        if mode == "clip":
            s = min(max(s, 0), num_segments - 1)
        elif not 0 <= s < num_segments:
            continue
        out[s] = combine(out[s], data[i])
    return out


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 9), st.integers(1, 5), st.sampled_from(list(_SEGMENT_OPS)),
       st.sampled_from([None, "clip"]), st.sampled_from([np.float32, np.int32, np.uint8]),
       st.integers(0, 2 ** 16))
def test_segment_ops_match_numpy_loop(rows, num_segments, name, mode, dtype, seed):
    rng = np.random.default_rng(seed)
    data = (rng.normal(size=(rows, 2)) * 3).astype(dtype)
    ids = rng.integers(-2, num_segments + 2, size=rows).astype(np.int32)
    got = getattr(functrans.ops, name)(jnp.asarray(data), jnp.asarray(ids), num_segments,
                                       mode=mode)
    expected = _segment_reference(name, data, ids, num_segments, mode)
    assert got.dtype == np.dtype(dtype)
    assert_same(got, expected, rtol=1e-5)


def test_segment_ops_defaults_and_dtypes():
    ids = jnp.array([0, 0, 2, 1, 2])
    data = jnp.array([1.0, 2.0, 3.0, 4.0, 5.0])
    # without num_segments: max(ids) + 1 segments
    assert_same(functrans.ops.segment_sum(data, ids), [3.0, 4.0, 8.0])
    assert_same(functrans.ops.segment_max(jnp.array([True, False]), jnp.array([0, 0]), 2),
                [True, False])
    assert_same(functrans.ops.segment_min(jnp.array([1, 2, 3], jnp.uint8),
                                          jnp.array([0, 0, 2]), 3), [1, 255, 3], np.uint8)
    # scalar data broadcasts to the rows
    assert_same(functrans.ops.segment_sum(5.0, jnp.array([1, 1]), 3), [0.0, 10.0, 0.0])
    # trailing axes are kept, and bucket_size does not change the result
    data2 = jnp.arange(12.0).reshape(6, 2)
    ids2 = jnp.array([0, 1, 0, 1, 2, 2])
    assert_same(functrans.ops.segment_sum(data2, ids2, 3, bucket_size=2),
                [[4.0, 6.0], [8.0, 10.0], [18.0, 20.0]])
    assert functrans.ops.segment_sum(data2, ids2, 0).shape == (0, 2)
    assert functrans.ops.segment_prod(data2, ids2, 0, mode="clip").shape == (0, 2)
    with x64():
        assert functrans.ops.segment_sum(jnp.arange(3.0), jnp.array([0, 1, 0]),
                                         np.int64(2)).dtype == np.float64
    complex_data = jnp.array([1 + 2j, 1 + 3j, 2 - 1j, 0 + 5j])
    assert_same(functrans.ops.segment_max(complex_data, jnp.array([0, 0, 1, 1]), 2),
                [1 + 3j, 2 - 1j])


def test_segment_ops_errors():
    ops = functrans.ops
    with pytest.raises(TypeError, match="list"):
        ops.segment_sum([1.0, 2.0], jnp.array([0, 1]), 2)
    with pytest.raises(TypeError, match="integers"):
        ops.segment_sum(jnp.ones(2), jnp.array([0.0, 1.0]), 2)
    with pytest.raises(TypeError, match="boolean"):
        ops.segment_sum(jnp.array([True, False]), jnp.array([0, 0]), 2)
    with pytest.raises(ValueError, match="broadcast"):
        ops.segment_sum(jnp.ones(3), jnp.array([0, 1]), 2)
    with pytest.raises(functrans.ConcretizationTypeError, match="num_segments"):
        functrans.jit(lambda d, i, n: ops.segment_sum(d, i, n))(jnp.ones(2), jnp.array([0, 1]), 2)
    with pytest.raises(functrans.ConcretizationTypeError, match="num_segments"):
        functrans.jit(lambda d, i: ops.segment_sum(d, i))(jnp.ones(2), jnp.array([0, 1]))
    with pytest.raises(ValueError, match="empty"):
        ops.segment_sum(jnp.ones(0), jnp.zeros(0, jnp.int32))


@pytest.mark.parametrize("name", list(_SEGMENT_OPS))
def test_segment_ops_jit_vmap(name):
    op = getattr(functrans.ops, name)
    rng = np.random.default_rng(3)
    data = jnp.asarray(rng.normal(size=(3, 6, 2)).astype(np.float32))
    ids = jnp.asarray(rng.integers(-1, 5, size=(3, 6)).astype(np.int32))
    f = lambda d, i: op(d, i, 4)  # noqa: E731
    assert_same(functrans.jit(f)(data[0], ids[0]), f(data[0], ids[0]))
    assert_same(functrans.jit(f, static_argnums=())(data[1], ids[1]), f(data[1], ids[1]))
    loop = np.stack([np.asarray(f(data[i], ids[i])) for i in range(3)])
    assert_same(functrans.vmap(f)(data, ids), loop)
    loop_data_only = np.stack([np.asarray(f(data[i], ids[0])) for i in range(3)])
    assert_same(functrans.vmap(f, in_axes=(0, None))(data, ids[0]), loop_data_only)
    static_n = functrans.jit(lambda d, i, n: op(d, i, n), static_argnums=2)(data[0], ids[0], 4)
    assert_same(static_n, f(data[0], ids[0]))


@pytest.mark.parametrize("name", list(_SEGMENT_OPS))
@pytest.mark.parametrize("mode", [None, "clip"])
def test_segment_ops_gradients(name, mode):
    op = getattr(functrans.ops, name)
    ids = np.array([0, 2, 0, 1, 2, 2, -1, 5])
    # distinct values, so max/min have no ties; one zero to exercise products over zeros
    data = np.array([0.7, -1.3, 2.1, 0.4, -0.9, 1.6, 3.0, 0.0])
    with x64():
        # three segments, so none is empty (an empty max/min segment holds -inf/inf)
        check_grads(lambda d: op(d, ids, 3, mode=mode), (data,), order=1)
        if name == "segment_prod":
            # first derivatives only: a second one is an error, not a wrong number
            with pytest.raises(NotImplementedError):
                functrans.hessian(lambda d: op(d, ids, 3, mode=mode).sum())(data)
            with pytest.raises(NotImplementedError):
                functrans.jacfwd(functrans.jacfwd(lambda d: op(d, ids, 3, mode=mode)))(data)
        else:
            check_grads(lambda d: op(d, ids, 3, mode=mode), (data,), order=2)
        # rows of two values per segment id
        check_grads(lambda d: op(d, ids[:4], 3, mode=mode), (data.reshape(4, 2),), order=1)


def test_segment_prod_gradient_with_zeros_and_batched_rows():
    ids = np.array([0, 0, 0, 1, 1, 2])
    cases = [np.array([0.0, 2.0, 3.0, 0.0, 0.0, 5.0]), np.array([1.5, 0.0, -2.0, 4.0, 0.5, 0.0])]
    for data in cases:
        with x64():
            check_grads(lambda d: functrans.ops.segment_prod(d, ids, 3), (data,), order=1)
            grad = functrans.grad(lambda d: functrans.ops.segment_prod(d, ids, 3).sum())(data)
        # d prod / d x_i = product of the other members of the segment
        expected = np.zeros_like(data)
        for i, s in enumerate(ids):
            members = [data[j] for j in range(len(ids)) if ids[j] == s and j != i]
            expected[i] = np.prod(members)
        assert_same(grad, expected, atol=1e-12)
    rows = np.random.default_rng(4).normal(size=(6, 3))
    with x64():
        check_grads(lambda d: functrans.ops.segment_prod(d, ids, 3), (rows,), order=1)
        check_grads(lambda d: functrans.ops.segment_max(d, ids, 3), (rows,), order=1)


def test_segment_sum_grad_matches_gather():
    ids = jnp.array([0, 2, 0, 1, -1])
    g = functrans.grad(lambda d: (functrans.ops.segment_sum(d, ids, 3) ** 2).sum())(
        jnp.arange(5.0))
    sums = np.array([0.0 + 2.0, 3.0, 1.0])
    assert_same(g, [2 * sums[0], 2 * sums[2], 2 * sums[0], 2 * sums[1], 0.0])


# =============================================================================================
# tree_util
# =============================================================================================

class _Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def __eq__(self, other):
        return isinstance(other, _Pair) and (self.a, self.b) == (other.a, other.b)

    def __repr__(self):
        return f"_Pair({self.a!r}, {self.b!r})"


tree_util.register_pytree_with_keys(
    _Pair, lambda p: (((tree_util.GetAttrKey("a"), p.a), (tree_util.GetAttrKey("b"), p.b)), "aux"),
    lambda aux, children: _Pair(*children))


@tree_util.register_pytree_with_keys_class
class _Boxed:
    def __init__(self, items):
        self.items = items

    def tree_flatten_with_keys(self):
        return (((tree_util.DictKey("items"), self.items),), None)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


@tree_util.register_static
class _Tag:
    def __init__(self, name):
        self.name = name

    def __hash__(self):
        return hash(self.name)

    def __eq__(self, other):
        return isinstance(other, _Tag) and other.name == self.name


def test_register_pytree_with_keys():
    tree = _Pair(1, [2, 3])
    leaves, treedef = tree_util.tree_flatten(tree)
    assert leaves == [1, 2, 3]
    assert treedef.unflatten([4, 5, 6]) == _Pair(4, [5, 6])
    paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(tree)[0]]
    assert paths == [".a", ".b[0]", ".b[1]"]
    boxed_paths = tree_util.tree_flatten_with_path(_Boxed([7, 8]))[0]
    assert [(tree_util.keystr(p), v) for p, v in boxed_paths] == [("['items'][0]", 7),
                                                                   ("['items'][1]", 8)]
    assert tree_util.tree_leaves(_Boxed([7, 8])) == [7, 8]
    with pytest.raises(ValueError):
        tree_util.register_pytree_with_keys(_Pair, lambda p: ((), None), lambda a, c: None)


def test_register_static():
    tree = [_Tag("x"), 1.0]
    leaves, treedef = tree_util.tree_flatten(tree)
    assert leaves == [1.0]
    assert tree_util.tree_map(lambda v: v * 10, tree)[0] == _Tag("x")
    assert tree_util.tree_structure(_Tag("x")) == tree_util.tree_structure(_Tag("x"))
    assert tree_util.tree_structure(_Tag("x")) != tree_util.tree_structure(_Tag("y"))
    assert tree_util.flatten_one_level(_Tag("z")) == ((), _Tag("z"))
    # a static node reaches a jitted function as part of the structure, not as a tracer
    seen = []

    def f(t):
        seen.append(type(t[0]))
        return t[1] * 2

    assert float(functrans.jit(f)((_Tag("k"), jnp.float32(3.0)))) == 6.0
    assert seen == [_Tag]


def test_flatten_one_level():
    assert tree_util.flatten_one_level({"b": 1, "a": [2, 3]}) == (([2, 3], 1), ("a", "b"))
    assert tree_util.flatten_one_level([1, (2,)]) == ([1, (2,)], None)
    assert tree_util.flatten_one_level((1, 2)) == ((1, 2), None)
    assert tree_util.flatten_one_level(None) == ((), None)
    point = collections.namedtuple("Point", "x y")
    assert tree_util.flatten_one_level(point(1, 2)) == ([1, 2], point)
    assert tree_util.flatten_one_level(_Pair(1, 2)) == ([1, 2], "aux")
    with pytest.raises(ValueError, match="float"):
        tree_util.flatten_one_level(1.0)
    keyed, aux = tree_util.flatten_one_level_with_keys({"b": 1, "a": 2})
    assert keyed == [(tree_util.DictKey("a"), 2), (tree_util.DictKey("b"), 1)] and aux == ("a", "b")
    keyed, _ = tree_util.flatten_one_level_with_keys(point(1, 2))
    assert keyed == [(tree_util.GetAttrKey("x"), 1), (tree_util.GetAttrKey("y"), 2)]
    keyed, _ = tree_util.flatten_one_level_with_keys(tree_util.Partial(operator.add, 1))
    assert [k for k, _ in keyed] == [tree_util.FlattenedIndexKey(0), tree_util.FlattenedIndexKey(1)]
    with pytest.raises(ValueError):
        tree_util.flatten_one_level_with_keys(3)


def test_is_tree_node():
    point = collections.namedtuple("Point", "x y")
    for typ in (list, tuple, dict, type(None), collections.OrderedDict, point, _Pair, _Tag,
                tree_util.Partial):
        assert tree_util.is_tree_node(typ), typ
    for typ in (int, float, np.ndarray, functrans.Array, str):
        assert not tree_util.is_tree_node(typ), typ
    with pytest.raises(TypeError):
        tree_util.is_tree_node([1])


def test_treedef_children_and_tuple():
    treedef = tree_util.tree_structure({"a": [1, 2], "b": (3,)})
    children = tree_util.treedef_children(treedef)
    assert children == [tree_util.tree_structure([0, 0]), tree_util.tree_structure((0,))]
    assert tree_util.treedef_children(tree_util.tree_structure(1)) == []
    joined = tree_util.treedef_tuple([treedef, tree_util.tree_structure(1)])
    assert joined == tree_util.tree_structure(({"a": [0, 0], "b": (0,)}, 0))
    assert joined.unflatten([1, 2, 3, 4]) == ({"a": [1, 2], "b": (3,)}, 4)
    assert tree_util.treedef_tuple([]) == tree_util.tree_structure(())
    assert tree_util.treedef_tuple(iter([treedef])).num_leaves == 3


def test_tree_broadcast():
    assert tree_util.tree_broadcast([1, {"a": 2}], [(3, 4), {"a": [5, 6]}]) == \
        [(1, 1), {"a": [2, 2]}]
    assert tree_util.tree_broadcast(1, {"a": 2, "b": [3, 4]}) == {"a": 1, "b": [1, 1]}
    assert tree_util.tree_broadcast({"a": 1, "b": 2}, {"a": [1, 2], "b": None}) == \
        {"a": [1, 1], "b": None}
    assert tree_util.tree_broadcast([1, None], [[1, 2], [3]], is_leaf=lambda x: x is None) == \
        [[1, 1], [None]]
    with pytest.raises(ValueError):
        tree_util.tree_broadcast([1, 2], [1, 2, 3])
    with pytest.raises(ValueError):
        tree_util.tree_broadcast((1, None), ((1, 2), 5))


def test_tree_reduce_associative():
    assert tree_util.tree_reduce_associative(operator.add, [1, 2, 3, 4, 5]) == 15
    joined = tree_util.tree_reduce_associative(lambda a, b: f"({a}+{b})",
                                               ["a", "b", "c", "d", "e"])
    assert joined == "((a+b)+(c+(d+e)))"  # balanced, as JAX pairs them
    assert tree_util.tree_reduce_associative(operator.add, [], identity=0) == 0
    assert tree_util.tree_reduce_associative(operator.add, {"x": 5}) == 5
    with pytest.raises(TypeError, match="identity"):
        tree_util.tree_reduce_associative(operator.add, [])


def test_key_types_and_default_registry():
    assert tree_util.KeyPath == tuple[tree_util.KeyEntry, ...]
    registry = tree_util.default_registry
    leaves, treedef = registry.flatten([1, {"a": 2}])
    assert leaves == [1, 2] and treedef == tree_util.tree_structure([0, {"a": 0}])
    keyed, _ = registry.flatten_with_path([1, {"a": 2}])
    assert [tree_util.keystr(p) for p, _ in keyed] == ["[0]", "[1]['a']"]
    assert registry.flatten_one_level(3) is None
    assert registry.flatten_one_level([1, 2]) == ([1, 2], None)
    assert registry.is_node(list) and not registry.is_node(int)

    class Fresh:
        def __init__(self, v):
            self.v = v

    registry.register_node(Fresh, lambda f: ([f.v], None), lambda aux, c: Fresh(*c))
    assert tree_util.tree_leaves(Fresh(9)) == [9]


# =============================================================================================
# nn.log1mexp, random.key_impl / key_dtype
# =============================================================================================

def test_log1mexp():
    x = np.array([1e-8, 1e-3, 0.3, np.log(2.0), 1.0, 5.0, 40.0])
    # float64 reference from whichever classic form is accurate at each x (expm1 below 0.5,
    # log1p above: a different switch point than the implementation's log 2)
    with np.errstate(divide="ignore"):
        reference = np.where(x < 0.5, np.log(-np.expm1(-x)), np.log1p(-np.exp(-x)))
    with x64():
        assert_same(nn.log1mexp(x), reference, np.float64, rtol=1e-14, atol=0)
        check_grads(nn.log1mexp, (np.array([0.2, 0.5, 0.69, 0.7, 3.0]),), order=2)
    got = nn.log1mexp(jnp.asarray(x, jnp.float32))
    assert_same(got, reference, np.float32, rtol=2e-6, atol=1e-30)
    assert nn.log1mexp(2).dtype == np.float32
    assert np.isnan(float(nn.log1mexp(-1.0)))
    assert float(nn.log1mexp(0.0)) == -np.inf
    assert float(functrans.grad(nn.log1mexp)(0.0)) == np.inf  # not NaN
    assert "log1mexp" in nn.__all__


def test_key_impl_and_key_dtype():
    assert random.key_impl(random.PRNGKey(0)) == "threefry2x32"
    assert random.key_impl(random.split(random.PRNGKey(0), 3)) == "threefry2x32"
    assert random.key_impl(random.key(1)) == "threefry2x32"
    with pytest.raises(TypeError, match="uint32"):
        random.key_impl(jnp.zeros(3))
    # the dtype of typed keys (random.key), as in JAX; raw keys stay uint32
    assert random.key_dtype() == random.key(0).dtype and str(random.key_dtype()) == "key<fry>"
    assert random.key_dtype("threefry2x32") == random.key_dtype() != np.uint32
    assert random.PRNGKey(0).dtype == np.uint32
    with pytest.raises(NotImplementedError):
        random.key_dtype("rbg")
    with pytest.raises(ValueError):
        random.key_dtype("nonsense")


def test_narrow_ml_dtypes_sort_and_refuse_implicit_promotion():
    import ml_dtypes
    ints = np.array([3, -2, 1, -8, 7], dtype=ml_dtypes.int4)
    np.testing.assert_array_equal(np.asarray(jnp.sort(jnp.asarray(ints))).astype(np.int8),
                                  [-8, -2, 1, 3, 7])
    floats = np.array([3, -2, 0.5, -448, np.nan], dtype=ml_dtypes.float8_e4m3fn)
    got = np.asarray(jnp.sort(jnp.asarray(floats))).astype(np.float32)
    np.testing.assert_array_equal(got[:4], [-448, -2, 0.5, 3])
    assert np.isnan(got[4])
    with pytest.raises(TypeError, match="no implicit promotion"):
        jnp.asarray(ints) + jnp.asarray(floats)
    assert (jnp.asarray(ints) + 1).dtype == ml_dtypes.int4
