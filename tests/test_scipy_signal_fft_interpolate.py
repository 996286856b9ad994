"""functrans.scipy.{signal, fft, integrate, interpolate, ndimage, cluster}: values, dtypes and
shapes against SciPy (or against hard facts where JAX's semantics differ from SciPy's),
jit against eager, vmap against a loop, and numerical gradients in float64."""
from __future__ import annotations

import doctest
import warnings

import numpy as np
import pytest
import scipy.fft as sfft
import scipy.integrate as sint
import scipy.interpolate as sinterp
import scipy.signal as ssig

import functrans
import functrans.numpy as jnp
from functrans.scipy import fft as ffft
from functrans.scipy import integrate as fint
from functrans.scipy import interpolate as finterp
from functrans.scipy import ndimage as fnd
from functrans.scipy import signal as fsig
from functrans.scipy.cluster import vq as fvq
from functrans.test_util import check_grads, x64

RNG = np.random.default_rng(0)
SIGNAL = RNG.standard_normal((3, 40)).astype(np.float32)
KERNEL = RNG.standard_normal((2, 5)).astype(np.float32)


def _close(actual, expected, rtol=2e-5, atol=2e-5):
    actual = np.asarray(actual)
    np.testing.assert_allclose(actual, np.asarray(expected), rtol=rtol, atol=atol)


def _real_imag(z):
    """Complex outputs as real arrays, for check_grads over real inputs."""
    return jnp.stack([jnp.real(z), jnp.imag(z)])


@pytest.mark.parametrize("module", [fsig, ffft, fint, finterp, fnd, fvq])
def test_docstring_examples(module):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


# ---- signal: convolution ---------------------------------------------------------------------

CONVOLUTIONS = [
    (fsig.convolve, ssig.convolve), (fsig.correlate, ssig.correlate),
    (fsig.convolve2d, ssig.convolve2d), (fsig.correlate2d, ssig.correlate2d),
    (fsig.fftconvolve, ssig.fftconvolve),
]


@pytest.mark.parametrize("ours,theirs", CONVOLUTIONS, ids=lambda f: getattr(f, "__name__", ""))
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_convolutions_match_scipy(ours, theirs, mode):
    a = SIGNAL[:, :7]
    for x, y in [(a, KERNEL), (KERNEL, a), (a, KERNEL[:1, :2])]:   # odd, even, larger second
        out = ours(x, y, mode=mode)
        assert out.dtype == np.float32
        expected = theirs(x.astype(np.float64), y.astype(np.float64), mode=mode)
        assert out.shape == expected.shape
        _close(out, expected, rtol=1e-4, atol=1e-4)


def test_convolve_nd_complex_and_methods():
    x = RNG.standard_normal((4, 3, 5)) + 1j * RNG.standard_normal((4, 3, 5))
    y = RNG.standard_normal((2, 2, 3)) - 0.5j
    for mode in ("full", "same", "valid"):
        _close(fsig.correlate(x, y, mode=mode), ssig.correlate(x, y, mode=mode), 1e-4, 1e-4)
        _close(fsig.convolve(x, y, mode=mode, method="fft"), ssig.convolve(x, y, mode=mode),
               1e-4, 1e-4)
    # integer and boolean inputs compute in float32, as JAX does
    assert fsig.convolve(jnp.arange(3), jnp.arange(2)).dtype == np.float32
    _close(fsig.convolve(jnp.array([True, False]), jnp.array([True, True])), [1.0, 1.0, 0.0])
    assert float(fsig.convolve(jnp.float32(2.0), jnp.float32(3.0))) == 6.0


def test_fftconvolve_axes():
    x, y = SIGNAL[:, :12], RNG.standard_normal((3, 5)).astype(np.float32)
    for mode in ("full", "same", "valid"):
        _close(fsig.fftconvolve(x, y, mode=mode, axes=1),
               ssig.fftconvolve(x, y, mode=mode, axes=1), 1e-4, 1e-4)
    with pytest.raises(ValueError, match="mapped axes"):
        fsig.fftconvolve(x, y[:2], axes=(1,))


def test_convolution_errors():
    with pytest.raises(ValueError, match="same number of dimensions"):
        fsig.convolve(jnp.ones((2, 3)), jnp.ones(3))
    with pytest.raises(ValueError, match="smaller than the other"):
        fsig.convolve(jnp.ones((2, 3)), jnp.ones((3, 2)))
    with pytest.raises(ValueError, match="mode"):
        fsig.convolve(jnp.ones(3), jnp.ones(2), mode="circular")
    with pytest.raises(ValueError, match="method"):
        fsig.convolve(jnp.ones(3), jnp.ones(2), method="winograd")
    with pytest.raises(NotImplementedError, match="boundary"):
        fsig.convolve2d(jnp.ones((3, 3)), jnp.ones((2, 2)), boundary="wrap")
    with pytest.raises(NotImplementedError, match="fillvalue"):
        fsig.correlate2d(jnp.ones((3, 3)), jnp.ones((2, 2)), fillvalue=1.0)
    with pytest.raises(ValueError, match="2-D"):
        fsig.convolve2d(jnp.ones(3), jnp.ones(2))


# ---- signal: detrend and spectral analysis --------------------------------------------------

@pytest.mark.parametrize("kind", ["linear", "constant"])
@pytest.mark.parametrize("bp", [0, [5, 20], [1, 2, 39]])
def test_detrend(kind, bp):
    _close(fsig.detrend(SIGNAL, type=kind, bp=bp), ssig.detrend(SIGNAL, type=kind, bp=bp))
    _close(fsig.detrend(SIGNAL.T, axis=0, type=kind, bp=bp),
           ssig.detrend(SIGNAL.T, axis=0, type=kind, bp=bp))
    assert fsig.detrend(jnp.arange(5)).dtype == np.float32


STFT_OPTIONS = [
    {}, {"window": "hamming", "nfft": 20, "noverlap": 5}, {"window": ("tukey", 0.3)},
    {"window": np.bartlett(16)}, {"boundary": "even"}, {"boundary": "odd"},
    {"boundary": "constant", "detrend": "linear"}, {"boundary": None, "padded": False},
    {"return_onesided": False, "fs": 3.0},
]


@pytest.mark.parametrize("options", STFT_OPTIONS, ids=str)
def test_stft_matches_scipy(options):
    f, t, z = fsig.stft(SIGNAL, nperseg=16, **options)
    f0, t0, z0 = ssig.stft(SIGNAL, nperseg=16, **options)
    assert z.dtype == np.complex64 and z.shape == z0.shape and f.dtype == np.float32
    _close(f, f0, 1e-6)
    _close(t, t0, 1e-6)
    _close(z, z0, 1e-5, 1e-6)


def test_stft_axis_and_istft_roundtrip():
    _, _, z = fsig.stft(SIGNAL.T, nperseg=16, axis=0)
    assert z.shape == ssig.stft(SIGNAL.T, nperseg=16, axis=0)[2].shape == (9, 3, 6)
    _close(z, ssig.stft(SIGNAL.T, nperseg=16, axis=0)[2], 1e-5, 1e-6)
    spectra = ssig.stft(SIGNAL, nperseg=16)[2]
    for options in ({}, {"boundary": False}, {"window": "hamming", "noverlap": 10}):
        t, x = fsig.istft(spectra, nperseg=16, **options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # SciPy's invertibility (NOLA) warning
            t0, x0 = ssig.istft(spectra, nperseg=16, **options)
        assert x.dtype == np.float32 and x.shape == x0.shape
        _close(t, t0)
        _close(x, x0, 1e-4, 1e-5)
    _, x = fsig.istft(fsig.stft(SIGNAL, nperseg=16)[2], nperseg=16)
    _close(x, SIGNAL, 1e-4, 1e-5)
    moved = np.moveaxis(spectra, 0, 2)             # (freq, segment, batch)
    _close(fsig.istft(moved, freq_axis=0, time_axis=1)[1],
           ssig.istft(moved, freq_axis=0, time_axis=1)[1], 1e-4, 1e-5)
    complex_spectra = ssig.stft(SIGNAL + 1j * SIGNAL[::-1], nperseg=16, return_onesided=False)[2]
    x = fsig.istft(complex_spectra, input_onesided=False)[1]
    assert x.dtype == np.complex64
    _close(x, ssig.istft(complex_spectra, input_onesided=False)[1], 1e-4, 1e-5)


WELCH_OPTIONS = [
    {}, {"average": "median"}, {"detrend": "linear"}, {"scaling": "spectrum"},
    {"return_onesided": False}, {"detrend": False, "nfft": 19}, {"fs": 2.0, "noverlap": 3},
    {"nperseg": 100},   # longer than the signal: cut to its length
]


@pytest.mark.parametrize("options", WELCH_OPTIONS, ids=str)
def test_welch_and_csd_match_scipy(options):
    options = {"nperseg": 16, **options}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f, p = fsig.welch(SIGNAL, **options)
        f0, p0 = ssig.welch(SIGNAL, **options)
        assert p.dtype == np.float32 and p.shape == p0.shape
        _close(f, f0, 1e-6)
        _close(p, p0, 1e-4, 1e-6)
        _close(fsig.welch(SIGNAL.T, axis=0, **options)[1], ssig.welch(SIGNAL.T, axis=0, **options)[1],
               1e-4, 1e-6)
        other = 2 * SIGNAL[:1] + 0.5
        f, p = fsig.csd(SIGNAL, other, **options)
        assert p.dtype == np.complex64
        _close(p, ssig.csd(SIGNAL, other, **options)[1], 1e-4, 1e-6)


def test_csd_pads_shorter_signal_and_complex():
    short = SIGNAL[:, :30]
    padded = np.pad(short, [(0, 0), (0, 10)])
    _close(fsig.csd(SIGNAL, short, nperseg=8)[1], ssig.csd(SIGNAL, padded, nperseg=8)[1], 1e-4,
           1e-6)
    z = SIGNAL + 1j * SIGNAL[::-1]
    for average in ("mean", "median"):
        _close(fsig.csd(z, SIGNAL, nperseg=8, return_onesided=False, average=average)[1],
               ssig.csd(z, SIGNAL, nperseg=8, return_onesided=False, average=average)[1],
               1e-4, 1e-6)


# ---- fft ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 5, 8])
@pytest.mark.parametrize("norm", [None, "backward", "ortho"])
def test_dct_idct(n, norm):
    x = RNG.standard_normal((3, n)).astype(np.float32)
    out = ffft.dct(x, norm=norm)
    assert out.dtype == np.float32
    _close(out, sfft.dct(x, norm=norm), 1e-5, 1e-5)
    _close(ffft.idct(x, norm=norm), sfft.idct(x, norm=norm), 1e-5, 1e-5)
    _close(ffft.idct(ffft.dct(x, norm=norm), norm=norm), x, 1e-5, 1e-5)
    _close(ffft.dct(x.T, axis=0, n=n + 2, norm=norm), sfft.dct(x.T, axis=0, n=n + 2, norm=norm),
           1e-5, 1e-5)


def test_dctn_idctn_and_errors():
    x = RNG.standard_normal((3, 4, 5))
    _close(ffft.dctn(x, s=(2, 7)), sfft.dctn(x, s=(2, 7), axes=(1, 2)), 1e-4, 1e-4)
    _close(ffft.idctn(x, axes=(0, 2), norm="ortho"), sfft.idctn(x, axes=(0, 2), norm="ortho"),
           1e-5, 1e-5)
    _close(ffft.dctn(x), sfft.dctn(x), 1e-4, 1e-4)
    z = x[0] + 1j * x[1]
    _close(ffft.dct(z), sfft.dct(z), 1e-4, 1e-4)
    assert ffft.dct(jnp.arange(4)).dtype == np.float32
    with pytest.raises(NotImplementedError, match="type 2"):
        ffft.dct(x, type=3)
    with pytest.raises(ValueError, match="norm"):
        ffft.idct(x, norm="forward")


# ---- integrate, cluster ------------------------------------------------------------------------

def test_trapezoid():
    y = SIGNAL
    _close(fint.trapezoid(y), sint.trapezoid(y))
    _close(fint.trapezoid(y, dx=0.5, axis=0), sint.trapezoid(y, dx=0.5, axis=0))
    x = np.sort(RNG.standard_normal(40)).astype(np.float32)
    _close(fint.trapezoid(y, x=x), sint.trapezoid(y, x=x))
    _close(fint.trapezoid(y, x=y.cumsum(axis=1)), sint.trapezoid(y, x=y.cumsum(axis=1)), 1e-4)
    assert fint.trapezoid(jnp.arange(5)).dtype == np.float32


def test_vq():
    from scipy.cluster.vq import vq as scipy_vq
    obs = RNG.standard_normal((20, 3)).astype(np.float32)
    book = RNG.standard_normal((4, 3)).astype(np.float32)
    code, dist = fvq.vq(obs, book)
    code0, dist0 = scipy_vq(obs, book)
    assert code.dtype == np.int32 and dist.dtype == np.float32
    np.testing.assert_array_equal(code, code0)
    _close(dist, dist0)
    code, dist = fvq.vq(obs[:, 0], book[:, 0])
    code0, dist0 = scipy_vq(obs[:, :1], book[:, :1])
    np.testing.assert_array_equal(code, code0)
    _close(dist, dist0)
    with pytest.raises(ValueError, match="features"):
        fvq.vq(obs, book[:, :2])


# ---- ndimage, interpolate ----------------------------------------------------------------------

def test_map_coordinates_modes():
    # hard facts of JAX's modes (which differ from SciPy's outside the array)
    points = [jnp.array([-1.5, -0.3, 2.2, 4.6, 6.1])]
    data = jnp.arange(5.0)
    expected = {
        "constant": [9.0, 2.7, 2.2, 7.0, 9.0], "nearest": [0.0, 0.0, 2.2, 4.0, 4.0],
        "wrap": [3.5, 1.2, 2.2, 1.6, 1.1], "mirror": [1.5, 0.3, 2.2, 3.4, 1.9],
        "reflect": [0.5, 0.0, 2.2, 4.0, 2.9],
    }
    for mode, values in expected.items():
        _close(fnd.map_coordinates(data, points, order=1, mode=mode, cval=9.0), values, 1e-5)
    _close(fnd.map_coordinates(jnp.arange(5), [jnp.array([0.5, 1.5, 2.5, -0.5])], order=0),
           [1, 2, 3, 0])
    out = fnd.map_coordinates(jnp.arange(5), [jnp.array([0.4, 1.6])], order=1)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [0, 2])
    with pytest.raises(NotImplementedError, match="order"):
        fnd.map_coordinates(data, points, order=3)
    with pytest.raises(NotImplementedError, match="grid-wrap"):
        fnd.map_coordinates(data, points, order=1, mode="grid-wrap")


def test_map_coordinates_inside_matches_scipy():
    from scipy.ndimage import map_coordinates as scipy_map
    image = RNG.standard_normal((6, 7)).astype(np.float32)
    coords = RNG.uniform(0, 5, size=(2, 4, 3)).astype(np.float32)
    for order in (0, 1):
        for mode in ("constant", "nearest", "wrap", "mirror", "reflect"):
            out = fnd.map_coordinates(image, coords, order=order, mode=mode)
            assert out.shape == (4, 3) and out.dtype == np.float32
            _close(out, scipy_map(image, coords, order=order, mode=mode), 1e-5, 1e-5)


def test_regular_grid_interpolator():
    grid = (np.linspace(0, 1, 4), np.array([0.0, 0.5, 2.0, 3.0, 5.0]))
    values = RNG.standard_normal((4, 5, 2)).astype(np.float32)
    points = np.stack([RNG.uniform(-0.2, 1.2, 10), RNG.uniform(-1, 6, 10)], axis=-1)
    for method in ("linear", "nearest"):
        for fill in (np.nan, None, -1.0):
            ours = finterp.RegularGridInterpolator(grid, values, method=method, fill_value=fill)
            theirs = sinterp.RegularGridInterpolator(grid, values, method=method,
                                                    bounds_error=False, fill_value=fill)
            out = ours(points)
            assert out.shape == (10, 2) and out.dtype == np.float32
            np.testing.assert_allclose(out, theirs(points), rtol=1e-5, atol=1e-5)
    ours = finterp.RegularGridInterpolator(grid, values[..., 0])
    _close(ours((points[:, 0], points[:, 1])), ours(points))
    _close(ours(points, method="nearest"),
           finterp.RegularGridInterpolator(grid, values[..., 0], method="nearest")(points))
    # the interpolator is a pytree: it passes through jit
    _close(functrans.jit(lambda f, p: f(p))(ours, points), ours(points))
    with pytest.raises(NotImplementedError, match="bounds_error"):
        finterp.RegularGridInterpolator(grid, values, bounds_error=True)
    with pytest.raises(ValueError, match="cubic"):
        finterp.RegularGridInterpolator(grid, values, method="cubic")
    with pytest.raises(ValueError, match="dimension"):
        ours(points[:, :1])


# ---- transforms: jit, vmap, grad ---------------------------------------------------------------

TRANSFORMED = {
    "convolve": lambda a: fsig.convolve(a, jnp.asarray(KERNEL[:, :3], a.dtype), mode="same"),
    "correlate2d": lambda a: fsig.correlate2d(a, jnp.asarray(KERNEL, a.dtype)),
    "fftconvolve": lambda a: fsig.fftconvolve(a, jnp.asarray(KERNEL, a.dtype), mode="valid"),
    "detrend": lambda a: fsig.detrend(a, bp=[5]),
    "stft": lambda a: _real_imag(fsig.stft(a, nperseg=8)[2]),
    "welch": lambda a: fsig.welch(a, nperseg=8)[1],
    "csd_median": lambda a: _real_imag(fsig.csd(a, 2 * a[:1] + 1, nperseg=8,
                                                average="median")[1]),
    "istft": lambda a: fsig.istft(jnp.reshape(a, (5, 8)), nperseg=8)[1],
    "dctn": lambda a: ffft.dctn(a, norm="ortho"),
    "idct": lambda a: ffft.idct(a),
    "trapezoid": lambda a: fint.trapezoid(a, x=jnp.arange(10.0) ** 2),
    "map_coordinates": lambda a: fnd.map_coordinates(
        a, [jnp.array([0.3, 1.7, 2.5]), jnp.array([3.2, -0.5, 9.4])], order=1, mode="reflect"),
    "RegularGridInterpolator": lambda a: finterp.RegularGridInterpolator(
        (jnp.arange(4.0), jnp.arange(10.0)), a)(jnp.array([[0.3, 4.5], [1.9, 8.2]])),
    "vq": lambda a: fvq.vq(a, jnp.zeros((2, 10), a.dtype))[1],
}


@pytest.mark.parametrize("name", sorted(TRANSFORMED))
def test_jit_and_vmap(name):
    f = TRANSFORMED[name]
    x = SIGNAL.reshape(-1)[:40].reshape(4, 10)
    _close(functrans.jit(f)(x), f(x), 1e-5, 1e-5)
    batch = np.stack([x, 2 * x - 1])
    out = functrans.vmap(f)(batch)
    for i in range(2):
        _close(out[i], f(batch[i]), 1e-5, 1e-5)


@pytest.mark.parametrize("name", sorted(TRANSFORMED))
def test_gradients(name):
    f = TRANSFORMED[name]
    with x64():
        x = RNG.standard_normal((4, 10))
        check_grads(f, (x,), order=1, modes=("fwd", "rev"))


def test_gradients_with_respect_to_points():
    with x64():
        image = RNG.standard_normal((4, 10))
        check_grads(lambda c: fnd.map_coordinates(jnp.asarray(image), [c[0], c[1]], order=1),
                    (np.array([[0.3, 1.7], [1.2, 5.6]]),), order=1)
        interpolator = finterp.RegularGridInterpolator((jnp.arange(4.0), jnp.arange(10.0)),
                                                       jnp.asarray(image))
        check_grads(interpolator, (np.array([[0.3, 4.5], [1.9, 8.2]]),), order=1)
