"""FFTs: the ``fft`` primitive (``lax.fft``) and ``functrans.numpy.fft`` against ``numpy.fft``,
their derivatives against finite differences, transposes against the defining identity,
``vmap`` against a Python loop and ``jit`` against eager evaluation."""
from __future__ import annotations

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans.primitives import elementwise
from functrans.primitives.fft import FftType, fft as lax_fft
from functrans.test_util import check_grads

RNG = np.random.default_rng(0)


def _rand(shape, dtype, rng=RNG):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _assert_matches(actual, expected, dtype):
    """Close to the float64 reference, relative to the result's magnitude."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    tol = 1e-12 if np.dtype(dtype) in (np.float64, np.complex128) else 2e-6
    scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    np.testing.assert_allclose(actual, expected, atol=tol * scale, rtol=0)


_NP_LAX = {FftType.FFT: np.fft.fftn, FftType.IFFT: np.fft.ifftn,
           FftType.RFFT: np.fft.rfftn, FftType.IRFFT: np.fft.irfftn}


def _lax_input_shape(fft_type, batch, lengths):
    if fft_type == FftType.IRFFT:
        return batch + lengths[:-1] + (lengths[-1] // 2 + 1,)
    return batch + lengths


def _lax_reference(x, fft_type, lengths):
    axes = tuple(range(-len(lengths), 0))
    return _NP_LAX[fft_type](x.astype(np.complex128 if x.dtype.kind == "c" else np.float64),
                             s=lengths, axes=axes)


# ---- the primitive ---------------------------------------------------------------------------

LENGTHS = [(1,), (5,), (8,), (3, 4), (4, 5), (2, 3, 5), (1, 2, 2)]
BATCHES = [(), (3,), (2, 1)]


@pytest.mark.parametrize("fft_type", list(FftType))
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("batch", BATCHES)
def test_lax_fft_matches_numpy(fft_type, lengths, batch):
    dtype = np.float32 if fft_type == FftType.RFFT else np.complex64
    x = _rand(_lax_input_shape(fft_type, batch, lengths), dtype)
    out = lax_fft(x, fft_type, lengths)
    expected_dtype = np.float32 if fft_type == FftType.IRFFT else np.complex64
    assert out.dtype == expected_dtype
    _assert_matches(out, _lax_reference(x, fft_type, lengths), dtype)


@pytest.mark.parametrize("fft_type", list(FftType))
def test_lax_fft_x64_dtypes(x64, fft_type):
    lengths = (3, 6)
    dtype = np.float64 if fft_type == FftType.RFFT else np.complex128
    x = _rand(_lax_input_shape(fft_type, (2,), lengths), dtype)
    out = lax_fft(x, fft_type.name.lower(), lengths)  # the string form of fft_type
    assert out.dtype == (np.float64 if fft_type == FftType.IRFFT else np.complex128)
    _assert_matches(out, _lax_reference(x, fft_type, lengths), dtype)


def test_lax_fft_casts_real_and_integer_inputs():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    out = lax_fft(x, FftType.FFT, (3,))
    assert out.dtype == np.complex64
    _assert_matches(out, np.fft.fft(x), np.complex64)
    assert lax_fft(x, FftType.RFFT, (3,)).dtype == np.complex64


@pytest.mark.parametrize("fft_type, shape, lengths, message", [
    (FftType.FFT, (4,), (5,), "trailing axes must equal"),
    (FftType.RFFT, (2, 4), (3, 4), "trailing axes must equal"),
    (FftType.IRFFT, (8,), (8,), r"must be \(5,\)"),
    (FftType.FFT, (2, 2, 2, 2), (2, 2, 2, 2), "one to three"),
    (FftType.FFT, (3,), (2, 3), "fewer than 2 axes"),
])
def test_lax_fft_shape_errors_name_the_primitive(fft_type, shape, lengths, message):
    dtype = np.float32 if fft_type == FftType.RFFT else np.complex64
    with pytest.raises(TypeError, match=message) as info:
        lax_fft(np.zeros(shape, dtype), fft_type, lengths)
    assert str(info.value).startswith("fft:")
    assert "complex64" in str(info.value) or "float32" in str(info.value)


def test_primitive_dtype_errors():
    from functrans.primitives.fft import fft_p
    with pytest.raises(TypeError, match="fft: RFFT takes a real"):
        fft_p.bind(np.zeros(4, np.complex64), fft_type=FftType.RFFT, fft_lengths=(4,))
    with pytest.raises(TypeError, match="fft: FFT takes a complex"):
        fft_p.bind(np.zeros(4, np.float32), fft_type=FftType.FFT, fft_lengths=(4,))
    with pytest.raises(TypeError, match="RFFT takes a real operand"):
        lax_fft(np.zeros(4, np.complex64), FftType.RFFT, (4,))


@pytest.mark.parametrize("fft_type", list(FftType))
@pytest.mark.parametrize("lengths", [(1,), (2,), (5,), (6,), (3, 4), (4, 3), (2, 3, 5)])
def test_transpose_satisfies_the_adjoint_identity(x64, fft_type, lengths):
    # <ct, A x> == <A^T ct, x> with the real bilinear pairing Re sum(a * b) that cotangents
    # use, for random x and ct (in float64, so the identity holds to rounding)
    rng = np.random.default_rng(1)
    in_dtype = np.float64 if fft_type == FftType.RFFT else np.complex128
    x = _rand(_lax_input_shape(fft_type, (2,), lengths), in_dtype, rng)
    y, f_vjp = functrans.vjp(lambda v: lax_fft(v, fft_type, lengths), x)
    ct = _rand(y.shape, y.dtype, rng)
    (ct_x,) = f_vjp(ct)
    assert ct_x.dtype == x.dtype and ct_x.shape == x.shape
    lhs = np.real(np.sum(ct * np.asarray(y)))
    rhs = np.real(np.sum(np.asarray(ct_x) * x))
    assert abs(lhs - rhs) <= 1e-10 * max(1.0, abs(lhs))


def test_transpose_of_dense_matrix():
    # the cotangent map is the transpose (not the conjugate transpose) of the real-linear
    # map, checked column by column for the IRFFT of length 6 (which drops imaginary parts)
    with functrans.test_util.x64():
        n, m = 6, 4
        dense = np.zeros((n, 2 * m))
        for k in range(m):
            for part, unit in ((0, 1.0), (1, 1j)):
                e = np.zeros(m, np.complex128)
                e[k] = unit
                dense[:, 2 * k + part] = np.fft.irfft(e, n)
        ct = np.random.default_rng(2).standard_normal(n)
        _, f_vjp = functrans.vjp(lambda v: lax_fft(v, FftType.IRFFT, (n,)),
                                 np.zeros(m, np.complex128))
        (got,) = f_vjp(ct)
        # d<ct, x>/d(re y_k) = real part, d/d(im y_k) = -imag part (conjugate convention)
        expected = dense.T @ ct
        np.testing.assert_allclose(np.real(got), expected[0::2], atol=1e-12)
        np.testing.assert_allclose(-np.imag(got), expected[1::2], atol=1e-12)


@pytest.mark.parametrize("fft_type", list(FftType))
@pytest.mark.parametrize("in_axis", [0, 1, 2])
def test_lax_fft_vmap_matches_loop(fft_type, in_axis):
    lengths = (3, 4)
    dtype = np.float32 if fft_type == FftType.RFFT else np.complex64
    per_example = _lax_input_shape(fft_type, (), lengths)
    x = _rand(per_example[:in_axis] + (5,) + per_example[in_axis:], dtype)
    f = lambda v: lax_fft(v, fft_type, lengths)  # noqa: E731
    out = functrans.vmap(f, in_axes=in_axis)(x)
    loop = np.stack([np.asarray(f(np.take(x, i, axis=in_axis))) for i in range(5)])
    _assert_matches(out, loop, dtype)


def test_lax_fft_vmap_keeps_a_leading_batch_dim():
    x = _rand((2, 5, 4), np.complex64)
    out = functrans.vmap(lambda v: lax_fft(v, FftType.FFT, (4,)), in_axes=1, out_axes=1)(x)
    _assert_matches(out, np.fft.fft(x), np.complex64)
    jaxpr = functrans.make_jaxpr(functrans.vmap(lambda v: lax_fft(v, FftType.FFT, (4,)),
                                                in_axes=1))(x)
    # a leading batch dim needs no transpose before the transform
    assert [e.primitive.name for e in jaxpr.jaxpr.eqns][0] == "fft"


# ---- functrans.numpy.fft vs numpy.fft ------------------------------------------------------

# (name, input is real-only, shape, kwargs)
NUMPY_CASES = [
    ("fft", False, (8,), {}),
    ("fft", False, (3, 7), {"axis": 0}),
    ("fft", False, (4, 5), {"n": 3}),
    ("fft", False, (4, 5), {"n": 9, "norm": "ortho"}),
    ("fft", False, (1,), {"norm": "forward"}),
    ("ifft", False, (2, 6), {}),
    ("ifft", False, (6, 2), {"axis": 0, "n": 4, "norm": "ortho"}),
    ("ifft", False, (5,), {"norm": "forward"}),
    ("rfft", True, (8,), {}),
    ("rfft", True, (7, 3), {"axis": 0}),
    ("rfft", True, (2, 5), {"n": 8, "norm": "ortho"}),
    ("rfft", True, (2, 5), {"n": 3, "norm": "forward"}),
    ("rfft", True, (1,), {}),
    ("irfft", False, (5,), {}),
    ("irfft", False, (2, 5), {"n": 9}),
    ("irfft", False, (4, 3), {"axis": 0, "n": 3, "norm": "ortho"}),
    ("irfft", False, (2, 3), {"n": 12, "norm": "forward"}),
    ("irfft", False, (2,), {}),
    ("hfft", False, (5,), {}),
    ("hfft", False, (3, 4), {"n": 7, "axis": 0, "norm": "ortho"}),
    ("hfft", False, (3, 4), {"norm": "forward"}),
    ("ihfft", True, (8,), {}),
    ("ihfft", True, (3, 7), {"axis": 0, "norm": "ortho"}),
    ("ihfft", True, (3, 7), {"n": 4, "norm": "forward"}),
    ("fft2", False, (4, 5), {}),
    ("fft2", False, (2, 3, 4), {"axes": (0, 2), "s": (3, 6), "norm": "ortho"}),
    ("ifft2", False, (2, 3, 4), {}),
    ("ifft2", False, (3, 4), {"axes": (1, 0), "norm": "forward"}),
    ("rfft2", True, (4, 6), {}),
    ("rfft2", True, (2, 3, 5), {"axes": (2, 0), "s": (4, 3)}),
    ("irfft2", False, (4, 3), {}),
    ("irfft2", False, (3, 2, 4), {"axes": (0, 1), "s": (4, 5), "norm": "ortho"}),
    ("fftn", False, (2, 3, 4), {}),
    ("fftn", False, (2, 3, 4), {"axes": (1,)}),
    ("fftn", False, (2, 3, 4, 2), {"norm": "forward"}),
    ("fftn", False, (3, 4, 2), {"s": (2, 5)}),
    ("ifftn", False, (2, 3, 2, 3), {"axes": (3, 0, 1, 2), "norm": "ortho"}),
    ("ifftn", False, (3, 5), {"s": (4, 4)}),
    ("rfftn", True, (2, 3, 4, 5), {}),
    ("rfftn", True, (3, 4, 5), {"axes": (2, 0), "norm": "ortho"}),
    ("rfftn", True, (4, 6), {"s": (3, 7)}),
    ("irfftn", False, (2, 3, 2, 3), {}),
    ("irfftn", False, (3, 4, 5), {"axes": (2, 0), "s": (2, 6), "norm": "forward"}),
    ("irfftn", False, (4, 3), {"s": (5, 5)}),
]


def _np_call(name, x, kwargs):
    kwargs = dict(kwargs)
    if name in ("fftn", "ifftn", "rfftn", "irfftn") and "s" in kwargs and "axes" not in kwargs:
        # NumPy 2 asks for explicit axes with s; the default is the last len(s) axes
        kwargs["axes"] = tuple(range(-len(kwargs["s"]), 0))
    return getattr(np.fft, name)(x, **kwargs)


# real-input transforms run on float32 only, the others on float32 and complex64
DTYPE_CASES = [(*case, dtype) for case in NUMPY_CASES
               for dtype in ((np.float32,) if case[1] else (np.float32, np.complex64))]


@pytest.mark.parametrize("name, real_only, shape, kwargs, dtype", DTYPE_CASES,
                         ids=[f"{c[0]}-{c[2]}-{c[3]}-{np.dtype(c[4]).name}"
                              for c in DTYPE_CASES])
def test_numpy_fft_matches_numpy(name, real_only, shape, kwargs, dtype):
    x = _rand(shape, dtype)
    out = getattr(jnp.fft, name)(x, **kwargs)
    expected = _np_call(name, x.astype(np.complex128 if x.dtype.kind == "c" else np.float64),
                        kwargs)
    assert out.dtype == (np.complex64 if expected.dtype.kind == "c" else np.float32)
    _assert_matches(out, expected, dtype)


@pytest.mark.parametrize("name, real_only, shape, kwargs", NUMPY_CASES[::3],
                         ids=[f"{c[0]}-{c[2]}-{c[3]}" for c in NUMPY_CASES[::3]])
def test_numpy_fft_matches_numpy_x64(x64, name, real_only, shape, kwargs):
    dtype = np.float64 if real_only else np.complex128
    x = _rand(shape, dtype)
    out = getattr(jnp.fft, name)(x, **kwargs)
    expected = _np_call(name, x, kwargs)
    assert out.dtype == expected.dtype
    _assert_matches(out, expected, dtype)


def test_integer_input_is_promoted():
    x = np.arange(6, dtype=np.int32)
    out = jnp.fft.fft(x)
    assert out.dtype == np.complex64
    _assert_matches(out, np.fft.fft(x), np.complex64)
    _assert_matches(jnp.fft.rfft(x), np.fft.rfft(x), np.complex64)


def test_inverse_round_trips():
    x = _rand((3, 7), np.float32)
    _assert_matches(jnp.fft.irfft(jnp.fft.rfft(x), n=7), x, np.float32)
    _assert_matches(jnp.fft.ifftn(jnp.fft.fftn(x)).real, x, np.float32)
    _assert_matches(jnp.fft.hfft(jnp.fft.ihfft(x), n=7), x, np.float32)


@pytest.mark.parametrize("n", [1, 4, 7])
@pytest.mark.parametrize("d", [1.0, 0.25])
def test_frequencies_match_numpy(n, d):
    out = jnp.fft.fftfreq(n, d)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, np.fft.fftfreq(n, d), rtol=1e-6)
    np.testing.assert_allclose(jnp.fft.rfftfreq(n, d), np.fft.rfftfreq(n, d), rtol=1e-6)


def test_frequencies_dtype_and_traced_spacing(x64):
    assert jnp.fft.fftfreq(4).dtype == np.float64
    assert jnp.fft.rfftfreq(5, dtype=np.float32).dtype == np.float32
    out = functrans.jit(lambda d: jnp.fft.fftfreq(5, d))(0.5)
    np.testing.assert_allclose(out, np.fft.fftfreq(5, 0.5), rtol=1e-12)


@pytest.mark.parametrize("shape, axes", [((5,), None), ((4, 5), None), ((4, 5), 1),
                                         ((3, 4, 5), (0, 2)), ((1, 6), -1)])
def test_shifts_match_numpy(shape, axes):
    x = np.arange(np.prod(shape)).reshape(shape).astype(np.float32)
    np.testing.assert_array_equal(jnp.fft.fftshift(x, axes), np.fft.fftshift(x, axes))
    np.testing.assert_array_equal(jnp.fft.ifftshift(x, axes), np.fft.ifftshift(x, axes))


def test_numpy_fft_errors():
    with pytest.raises(ValueError, match="invalid norm"):
        jnp.fft.fft(np.ones(4), norm="bogus")
    with pytest.raises(TypeError, match="only real valued inputs"):
        jnp.fft.rfft(np.ones(4, np.complex64))
    with pytest.raises(ValueError, match="repeated axes"):
        jnp.fft.fftn(np.ones((2, 2)), axes=(0, 0))
    with pytest.raises(ValueError, match="at least 1"):
        jnp.fft.fft(np.ones(4), n=0)
    with pytest.raises(ValueError, match="same length"):
        jnp.fft.fftn(np.ones((2, 2)), s=(2,), axes=(0, 1))
    with pytest.raises(ValueError, match="out of bounds"):
        jnp.fft.fft(np.ones(4), axis=1)


# ---- derivatives ---------------------------------------------------------------------------

def _complex_of(re, im):
    return elementwise.complex(re, im)


def _weighted_power(z, weights):
    """A real loss with a nonzero second derivative: sum(w * |z|^2) (|z|^2 as re^2 + im^2,
    so it is differentiable for complex z)."""
    if np.iscomplexobj(np.zeros((), z.dtype)):
        power = jnp.real(z) ** 2 + jnp.imag(z) ** 2
    else:
        power = z ** 2
    return jnp.sum(weights * power) + jnp.sum(weights * jnp.real(z))


# (name, complex input, shape, kwargs): the transform under a real loss
GRAD_CASES = [
    ("fft", True, (2, 5), {}),
    ("fft", False, (6,), {"n": 8, "norm": "ortho"}),
    ("ifft", True, (4, 3), {"axis": 0}),
    ("rfft", False, (3, 6), {}),
    ("rfft", False, (5, 2), {"axis": 0, "n": 7, "norm": "forward"}),
    ("irfft", True, (2, 4), {}),
    ("irfft", True, (4,), {"n": 7, "norm": "ortho"}),
    ("hfft", True, (4,), {}),
    ("ihfft", False, (5,), {}),
    ("fft2", True, (3, 4), {}),
    ("rfft2", False, (2, 3, 4), {"axes": (0, 2)}),
    ("irfft2", True, (3, 3), {}),
    ("fftn", True, (2, 2, 3), {"norm": "ortho"}),
    ("ifftn", True, (2, 3), {"s": (3, 4)}),
    ("rfftn", False, (2, 3, 4), {}),
    ("irfftn", True, (2, 2, 3), {"axes": (0, 2)}),
]


@pytest.mark.parametrize("name, complex_input, shape, kwargs", GRAD_CASES,
                         ids=[f"{c[0]}-{c[2]}-{c[3]}" for c in GRAD_CASES])
def test_grads_of_real_losses(x64, name, complex_input, shape, kwargs):
    rng = np.random.default_rng(3)
    transform = getattr(jnp.fft, name)
    out_aval = functrans.eval_shape(lambda v: transform(v, **kwargs),
                                    np.zeros(shape, np.complex128 if complex_input
                                             else np.float64))
    weights = rng.uniform(0.5, 1.5, out_aval.shape)
    if complex_input:
        def loss(re, im):
            return _weighted_power(transform(_complex_of(re, im), **kwargs), weights)
        args = (rng.standard_normal(shape), rng.standard_normal(shape))
    else:
        def loss(x):
            return _weighted_power(transform(x, **kwargs), weights)
        args = (rng.standard_normal(shape),)
    check_grads(loss, args, order=2, modes=("fwd", "rev"), atol=1e-5, rtol=1e-5)


def test_grad_matches_closed_form(x64):
    # d/dx sum |fft(x)|^2 = 2 n x (Parseval), for complex x the conjugate-convention
    # gradient 2 n conj(x)
    x = _rand((6,), np.complex128)
    g = functrans.grad(lambda v: jnp.sum(jnp.real(jnp.fft.fft(v) * jnp.conj(jnp.fft.fft(v)))))(x)
    np.testing.assert_allclose(g, 2 * 6 * np.conj(x), atol=1e-10)
    xr = _rand((7,), np.float64)
    g = functrans.grad(lambda v: jnp.sum(jnp.abs(jnp.fft.irfft(jnp.fft.rfft(v), n=7)) ** 2))(xr)
    np.testing.assert_allclose(g, 2 * xr, atol=1e-10)


def test_vmap_of_grad_matches_loop(x64):
    rng = np.random.default_rng(4)
    weights = rng.standard_normal((3, 4))

    def loss(x):
        return _weighted_power(jnp.fft.rfft2(x), weights)

    xs = rng.standard_normal((5, 3, 6))
    batched = functrans.vmap(functrans.grad(loss))(xs)
    loop = np.stack([np.asarray(functrans.grad(loss)(x)) for x in xs])
    np.testing.assert_allclose(batched, loop, atol=1e-10)


@pytest.mark.parametrize("name, kwargs", [("fft", {"axis": 0}), ("irfft", {"n": 5}),
                                          ("rfftn", {"axes": (1, 0)}), ("ihfft", {})])
def test_numpy_fft_vmap_matches_loop(name, kwargs):
    transform = getattr(jnp.fft, name)
    dtype = np.float32 if name in ("rfftn", "ihfft") else np.complex64
    xs = _rand((4, 3, 4), dtype)
    for in_axis in (0, 2):
        batched = functrans.vmap(lambda v: transform(v, **kwargs), in_axes=in_axis)(xs)
        loop = np.stack([np.asarray(transform(np.take(xs, i, axis=in_axis), **kwargs))
                         for i in range(xs.shape[in_axis])])
        _assert_matches(batched, loop, dtype)


# ---- jit -----------------------------------------------------------------------------------

def test_jit_matches_eager():
    rng = np.random.default_rng(5)

    def program(x, z):
        spectrum = jnp.fft.rfft2(x, norm="ortho") * 2.0
        back = jnp.fft.irfft2(spectrum, s=x.shape)
        mixed = jnp.fft.ifftn(jnp.fft.fft(z, axis=0) + 1.0, axes=(0, 1))
        return back + jnp.real(mixed), jnp.fft.fftshift(jnp.abs(mixed))

    x = rng.standard_normal((4, 6)).astype(np.float32)
    z = _rand((4, 6), np.complex64, rng)
    eager = program(x, z)
    compiled = functrans.jit(program)(x, z)
    for a, b in zip(compiled, eager):
        assert a.dtype == b.dtype
        _assert_matches(a, b, np.float32)


def test_jit_of_grad_matches_eager(x64):
    weights = np.random.default_rng(6).standard_normal((3, 3))

    def loss(x):
        return _weighted_power(jnp.fft.rfftn(x), weights)

    x = np.random.default_rng(7).standard_normal((3, 4))
    np.testing.assert_allclose(functrans.jit(functrans.grad(loss))(x),
                               functrans.grad(loss)(x), atol=1e-10)
