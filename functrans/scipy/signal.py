"""``functrans.scipy.signal``: convolution, detrending and spectral analysis (as
``jax.scipy.signal``).

Direct convolutions are one ``lax.conv_general_dilated``; ``fftconvolve`` and the spectral
functions use ``functrans.numpy.fft``. Everything is built from traced operations, so it works
under ``jit``, ``grad`` and ``vmap``.

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.signal import convolve
    >>> convolve(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 1.0, 0.5]))
    Array([0. , 1. , 2.5, 4. , 1.5], dtype=float32)
"""
from __future__ import annotations

import operator

import numpy as np

from functrans import lax
from functrans import numpy as jnp
from functrans.core import get_aval
from functrans.numpy._promotion import canonicalize_axis, promote_dtypes_inexact

__all__ = ["convolve", "correlate", "convolve2d", "correlate2d", "fftconvolve", "detrend",
           "stft", "istft", "csd", "welch"]

_MODES = ("full", "same", "valid")


def _check_mode(mode):
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {list(_MODES)}, got {mode!r}")


def _shape(x):
    return get_aval(x).shape


# ---- convolution -------------------------------------------------------------------------------

def _convolve_direct(fname, in1, in2, mode, precision, same_centre_early=False):
    """N-D convolution of two arrays of equal rank by one ``conv_general_dilated``.

    For an even-sized kernel the centre of the full result lies between two samples;
    ``same_centre_early`` picks the earlier one for ``mode="same"`` (SciPy's ``correlate2d``
    does, its ``convolve``/``correlate`` pick the later one)."""
    _check_mode(mode)
    in1, in2 = promote_dtypes_inexact(in1, in2)
    s1, s2 = _shape(in1), _shape(in2)
    if len(s1) != len(s2):
        raise ValueError(f"{fname}: in1 and in2 must have the same number of dimensions, got "
                         f"shapes {s1} and {s2}")
    if 0 in s1 or 0 in s2:
        raise ValueError(f"{fname}: zero-size arrays are not supported, got shapes {s1} "
                         f"and {s2}")
    if not s1:
        return in1 * in2
    in1_larger = all(a >= b for a, b in zip(s1, s2))
    in2_larger = all(b >= a for a, b in zip(s1, s2))
    if not (in1_larger or in2_larger):
        raise ValueError(f"{fname}: one input must be smaller than the other in every "
                         f"dimension, got shapes {s1} and {s2}")
    if mode == "valid" and not in1_larger:
        # convolution commutes; the window must be the smaller operand for 'valid'
        in1, in2, s1, s2 = in2, in1, s2, s1
    if mode == "full":
        padding = [(k - 1, k - 1) for k in s2]
    elif mode == "same":
        # 'same' is the centre of the full result, of in1's shape
        padding = [(k - 1 - (k - 1) // 2, (k - 1) // 2) for k in s2]
        if same_centre_early:
            padding = [(hi, lo) for lo, hi in padding]
    else:
        padding = [(0, 0)] * len(s2)
    # the primitive correlates, so the kernel is flipped; a batch and a feature axis of size
    # one are added around the signal axes
    kernel = jnp.flip(in2)
    out = lax.conv_general_dilated(in1[None, None], kernel[None, None],
                                   window_strides=(1,) * len(s1), padding=padding,
                                   precision=precision)
    return out[0, 0]


def convolve(in1, in2, mode: str = "full", method: str = "auto", precision=None):
    """N-dimensional convolution of ``in1`` with ``in2``.

    Args:
      in1, in2: arrays of the same rank; one must be at least as large as the other along
        every axis.
      mode: ``"full"`` (every overlap), ``"same"`` (the centre, of ``in1``'s shape) or
        ``"valid"`` (only full overlaps).
      method: ``"auto"`` or ``"direct"`` (a direct convolution) or ``"fft"`` (as
        :func:`fftconvolve`).
      precision: passed to ``lax.conv_general_dilated``.

    Example::

        >>> convolve(jnp.array([[1.0, 2.0], [3.0, 4.0]]), jnp.array([[1.0, 1.0]]), mode="same")
        Array([[1., 3.],
               [3., 7.]], dtype=float32)
    """
    if method == "fft":
        return fftconvolve(in1, in2, mode=mode)
    if method not in ("auto", "direct"):
        raise ValueError(f"convolve: got method={method!r}; expected 'auto', 'fft' or "
                         f"'direct'")
    return _convolve_direct("convolve", in1, in2, mode, precision)


def _flip_conj(x):
    (x,) = promote_dtypes_inexact(x)
    return jnp.flip(jnp.conj(x)) if jnp.iscomplexobj(x) else jnp.flip(x)


def correlate(in1, in2, mode: str = "full", method: str = "auto", precision=None):
    """N-dimensional cross-correlation of ``in1`` with ``in2``:
    ``convolve(in1, flip(conj(in2)))``. Arguments are as for :func:`convolve`.

    Example::

        >>> correlate(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 1.0, 0.5]), mode="same")
        Array([2. , 3.5, 3. ], dtype=float32)
    """
    return convolve(in1, _flip_conj(in2), mode=mode, method=method, precision=precision)


def _check_2d(fname, in1, in2, boundary, fillvalue):
    if boundary != "fill" or not isinstance(fillvalue, (int, float)) or fillvalue != 0:
        raise NotImplementedError(f"{fname}: only boundary='fill' with fillvalue=0 is "
                                  f"implemented, got boundary={boundary!r}, "
                                  f"fillvalue={fillvalue!r}")
    if jnp.ndim(in1) != 2 or jnp.ndim(in2) != 2:
        raise ValueError(f"{fname}: only 2-D inputs are supported, got shapes "
                         f"{jnp.shape(in1)} and {jnp.shape(in2)}")


def convolve2d(in1, in2, mode: str = "full", boundary: str = "fill", fillvalue=0,
               precision=None):
    """Two-dimensional convolution of ``in1`` with ``in2`` (zero boundary only).

    Example::

        >>> convolve2d(jnp.eye(2), jnp.array([[1.0, 2.0]]))
        Array([[1., 2., 0.],
               [0., 1., 2.]], dtype=float32)
    """
    _check_2d("convolve2d", in1, in2, boundary, fillvalue)
    return _convolve_direct("convolve2d", in1, in2, mode, precision)


def correlate2d(in1, in2, mode: str = "full", boundary: str = "fill", fillvalue=0,
                precision=None):
    """Two-dimensional cross-correlation of ``in1`` with ``in2`` (zero boundary only).

    Example::

        >>> correlate2d(jnp.eye(2), jnp.array([[1.0, 2.0]]))
        Array([[2., 1., 0.],
               [0., 2., 1.]], dtype=float32)
    """
    _check_2d("correlate2d", in1, in2, boundary, fillvalue)
    return _convolve_direct("correlate2d", in1, _flip_conj(in2), mode, precision,
                            same_centre_early=True)


def _centred(x, axes, sizes):
    """The centred block of ``sizes`` along ``axes`` of ``x``."""
    index = [slice(None)] * get_aval(x).ndim
    for axis, size in zip(axes, sizes):
        start = (_shape(x)[axis] - size) // 2
        index[axis] = slice(start, start + size)
    return x[tuple(index)]


def fftconvolve(in1, in2, mode: str = "full", axes=None):
    """N-dimensional convolution of ``in1`` with ``in2`` through the FFT.

    Args:
      in1, in2: arrays of the same rank.
      mode: ``"full"``, ``"same"`` or ``"valid"``, as for :func:`convolve`.
      axes: the axes to convolve over (default: all); the inputs must have equal sizes along
        the other axes, which are treated as a batch.

    Example::

        >>> fftconvolve(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 1.0, 0.5])).round(4)
        Array([0. , 1. , 2.5, 4. , 1.5], dtype=float32)
    """
    _check_mode(mode)
    in1, in2 = promote_dtypes_inexact(in1, in2)
    s1, s2 = _shape(in1), _shape(in2)
    if len(s1) != len(s2):
        raise ValueError(f"fftconvolve: in1 and in2 should have the same dimensionality, got "
                         f"shapes {s1} and {s2}")
    if axes is None:
        axes = range(len(s1))
    elif isinstance(axes, int):
        axes = (axes,)
    axes = sorted({canonicalize_axis(operator.index(a), len(s1)) for a in axes})
    mapped = [i for i in range(len(s1)) if i not in axes]
    if any(s1[i] != s2[i] for i in mapped):
        raise ValueError(f"fftconvolve: mapped axes must have the same size; got shapes {s1} "
                         f"and {s2} with axes={tuple(axes)}")
    if 0 in s1 or 0 in s2:
        raise ValueError(f"fftconvolve: zero-size arrays are not supported, got shapes {s1} "
                         f"and {s2}")
    if not axes:
        return in1 * in2
    k1, k2 = [s1[a] for a in axes], [s2[a] for a in axes]
    if mode == "valid":
        if all(a >= b for a, b in zip(k1, k2)):
            pass
        elif all(b >= a for a, b in zip(k1, k2)):
            in1, in2, k1, k2 = in2, in1, k2, k1
        else:
            raise ValueError(f"fftconvolve: for 'valid' mode one input must be at least as "
                             f"large as the other in every dimension, got shapes {s1} and "
                             f"{s2}")
    full = [a + b - 1 for a, b in zip(k1, k2)]
    if jnp.iscomplexobj(in1) or jnp.iscomplexobj(in2):
        out = jnp.fft.ifftn(jnp.fft.fftn(in1, s=full, axes=axes) *
                            jnp.fft.fftn(in2, s=full, axes=axes), s=full, axes=axes)
    else:
        out = jnp.fft.irfftn(jnp.fft.rfftn(in1, s=full, axes=axes) *
                             jnp.fft.rfftn(in2, s=full, axes=axes), s=full, axes=axes)
    if mode == "full":
        return out
    if mode == "same":
        return _centred(out, axes, k1)
    return _centred(out, axes, [a - b + 1 for a, b in zip(k1, k2)])


# ---- detrending --------------------------------------------------------------------------------

def _segment_times(length, dtype):
    t = np.arange(length, dtype=np.float64)
    return (t - t.mean()).astype(np.finfo(dtype).dtype)


def _detrend_last(y, type, bp=0):
    if type in ("constant", "c"):
        return y - jnp.mean(y, axis=-1, keepdims=True)
    if type not in ("linear", "l"):
        raise ValueError(f"detrend: trend type must be 'linear' or 'constant', got {type!r}")
    length = _shape(y)[-1]
    breaks = np.unique(np.concatenate([[0], np.atleast_1d(np.asarray(bp, dtype=int)),
                                       [length]]))
    if breaks[0] < 0 or breaks[-1] > length:
        raise ValueError(f"detrend: breakpoints must lie in [0, {length}], got {bp!r}")
    pieces = []
    for start, stop in zip(breaks[:-1], breaks[1:]):
        segment = y[..., int(start):int(stop)]
        size = int(stop - start)
        if size == 1:
            # a line fits one sample exactly
            pieces.append(segment - segment)
            continue
        t = _segment_times(size, get_aval(y).dtype)
        centred = segment - jnp.mean(segment, axis=-1, keepdims=True)
        slope = jnp.sum(centred * t, axis=-1, keepdims=True) / np.sum(t * t)
        pieces.append(centred - slope * t)
    return pieces[0] if len(pieces) == 1 else jnp.concatenate(pieces, axis=-1)


def detrend(data, axis: int = -1, type: str = "linear", bp=0, overwrite_data=None):
    """Remove a linear (or constant) trend from ``data`` along ``axis``.

    Args:
      data: the input array.
      axis: the axis along which to detrend.
      type: ``"linear"`` (subtract the least-squares line, fitted separately between the
        breakpoints ``bp``) or ``"constant"`` (subtract the mean).
      bp: static breakpoint indices for ``type="linear"``.
      overwrite_data: accepted for SciPy compatibility and ignored.

    Example::

        >>> detrend(jnp.array([1.0, 2.0, 4.0]))
        Array([ 0.16666675, -0.33333325,  0.16666675], dtype=float32)
    """
    del overwrite_data
    (data,) = promote_dtypes_inexact(data)
    axis = canonicalize_axis(axis, get_aval(data).ndim)
    out = _detrend_last(jnp.moveaxis(data, axis, -1), type, bp)
    return jnp.moveaxis(out, -1, axis)


# ---- spectral analysis -------------------------------------------------------------------------

def _window(fname, window, nperseg, dtype):
    """The window samples: a name (or ``(name, parameter)``) looked up with SciPy's
    ``get_window`` (periodic, for spectral analysis), or an explicit 1-D array."""
    if isinstance(window, (str, tuple)):
        import scipy.signal  # a host-side table of window shapes, evaluated once per trace
        return jnp.asarray(scipy.signal.get_window(window, nperseg).astype(dtype))
    window = jnp.asarray(window, dtype=dtype)
    if get_aval(window).ndim != 1 or _shape(window)[0] != nperseg:
        raise ValueError(f"{fname}: window must be 1-D with nperseg={nperseg} samples, got "
                         f"shape {_shape(window)}")
    return window


def _segment_length(fname, window, nperseg, input_length, default):
    """nperseg as SciPy chooses it: the window's length for an array window, else the request
    (default ``default``), at most the input's length."""
    if not isinstance(window, (str, tuple)):
        window_length = _shape(jnp.asarray(window))[0]
        if nperseg is not None and nperseg != window_length:
            raise ValueError(f"{fname}: nperseg={nperseg} does not match the window's "
                             f"length {window_length}")
        return window_length
    nperseg = default if nperseg is None else operator.index(nperseg)
    if nperseg < 1:
        raise ValueError(f"{fname}: nperseg must be a positive integer, got {nperseg}")
    return min(nperseg, input_length)


def _extend(x, width, boundary):
    """``x`` extended by ``width`` samples at both ends of its last axis."""
    if boundary == "zeros":
        return jnp.pad(x, [(0, 0)] * (get_aval(x).ndim - 1) + [(width, width)])
    if boundary == "constant":
        return jnp.pad(x, [(0, 0)] * (get_aval(x).ndim - 1) + [(width, width)], mode="edge")
    # 'even' mirrors about the end samples; 'odd' also negates about them
    left = jnp.flip(x[..., 1:width + 1], axis=-1)
    right = jnp.flip(x[..., -width - 1:-1], axis=-1)
    if boundary == "odd":
        left = 2 * x[..., :1] - left
        right = 2 * x[..., -1:] - right
    return jnp.concatenate([left, x, right], axis=-1)


_BOUNDARIES = ("even", "odd", "constant", "zeros", None)


def _spectral(fname, x, y, fs, window, nperseg, noverlap, nfft, detrend_type,
              return_onesided, scaling, axis, mode, boundary, padded, default_nperseg):
    """The short-time spectra shared by ``stft`` (mode ``"stft"``) and ``csd``/``welch``
    (mode ``"psd"``): returns ``(freqs, times, result)`` with the data axis replaced by
    ``(..., freq, segment)`` at the end."""
    if boundary not in _BOUNDARIES:
        raise ValueError(f"{fname}: unknown boundary option {boundary!r}, must be one of "
                         f"{list(_BOUNDARIES)}")
    if scaling not in ("density", "spectrum"):
        raise ValueError(f"{fname}: unknown scaling {scaling!r}")
    same_data = y is None
    if same_data:
        (x,) = promote_dtypes_inexact(x)
    else:
        x, y = promote_dtypes_inexact(x, y)
    axis = canonicalize_axis(axis, get_aval(x).ndim)
    x = jnp.moveaxis(x, axis, -1)
    if not same_data:
        if get_aval(y).ndim != get_aval(x).ndim:
            raise ValueError(f"{fname}: x and y must have the same rank, got shapes "
                             f"{_shape(x)} and {_shape(y)}")
        y = jnp.moveaxis(y, axis, -1)
        # the shorter signal is zero-padded; the other axes broadcast
        nx, ny = _shape(x)[-1], _shape(y)[-1]
        if nx != ny:
            pad_to = max(nx, ny)
            x = jnp.pad(x, [(0, 0)] * (get_aval(x).ndim - 1) + [(0, pad_to - nx)])
            y = jnp.pad(y, [(0, 0)] * (get_aval(y).ndim - 1) + [(0, pad_to - ny)])
        batch = jnp.broadcast_shapes(_shape(x)[:-1], _shape(y)[:-1])
        x = jnp.broadcast_to(x, batch + _shape(x)[-1:])
        y = jnp.broadcast_to(y, batch + _shape(y)[-1:])
    length = _shape(x)[-1]
    if length == 0:
        raise ValueError(f"{fname}: empty input")
    nperseg = _segment_length(fname, window, nperseg, length, default_nperseg)
    real_dtype = np.finfo(get_aval(x).dtype).dtype
    win = _window(fname, window, nperseg, real_dtype)
    nfft = nperseg if nfft is None else operator.index(nfft)
    if nfft < nperseg:
        raise ValueError(f"{fname}: nfft must be greater than or equal to nperseg")
    noverlap = nperseg // 2 if noverlap is None else operator.index(noverlap)
    if noverlap >= nperseg:
        raise ValueError(f"{fname}: noverlap must be less than nperseg")
    step = nperseg - noverlap

    def prepare(signal):
        if boundary is not None:
            signal = _extend(signal, nperseg // 2, boundary)
        if padded:
            extra = (-(_shape(signal)[-1] - nperseg) % step) % nperseg
            signal = jnp.pad(signal, [(0, 0)] * (get_aval(signal).ndim - 1) + [(0, extra)])
        count = (_shape(signal)[-1] - nperseg) // step + 1
        # (..., segment, sample) by one gather of static indices
        starts = step * np.arange(count)
        segments = signal[..., starts[:, None] + np.arange(nperseg)[None, :]]
        if detrend_type is not False and detrend_type is not None:
            if callable(detrend_type):
                segments = detrend_type(segments)
            else:
                segments = _detrend_last(segments, detrend_type)
        segments = segments * win
        if return_onesided and not jnp.iscomplexobj(segments):
            return jnp.fft.rfft(segments, n=nfft, axis=-1)
        return jnp.fft.fft(segments, n=nfft, axis=-1)

    onesided = return_onesided and not jnp.iscomplexobj(x) and \
        (same_data or not jnp.iscomplexobj(y))
    if return_onesided and not onesided:
        import warnings
        warnings.warn(f"{fname}: input data is complex, switching to return_onesided=False")
    spectrum_x = prepare(x)
    if scaling == "density":
        scale = 1.0 / (fs * jnp.sum(win * win))
    else:
        scale = 1.0 / jnp.sum(win) ** 2
    if mode == "stft":
        result = spectrum_x * jnp.sqrt(scale).astype(real_dtype)
    else:
        spectrum_y = spectrum_x if same_data else prepare(y)
        result = jnp.conj(spectrum_x) * spectrum_y * jnp.asarray(scale).astype(real_dtype)
        if onesided:
            # the negative frequencies fold onto the positive ones (not DC, nor Nyquist)
            doubling = np.full(_shape(result)[-1], 2, real_dtype)
            doubling[0] = 1
            if nfft % 2 == 0:
                doubling[-1] = 1
            result = result * doubling
    frequencies = (np.fft.rfftfreq(nfft) if onesided else np.fft.fftfreq(nfft)).astype(real_dtype)
    frequencies = frequencies * jnp.asarray(fs).astype(real_dtype)
    count = _shape(result)[-2]
    times = (nperseg / 2 + step * np.arange(count)).astype(real_dtype)
    if boundary is not None:
        times = times - nperseg / 2
    times = times / jnp.asarray(fs).astype(real_dtype)
    return frequencies, times, jnp.swapaxes(result, -1, -2), axis


def _restore_axis(result, axis, ndim):
    """Move the frequency axis (second to last) back to where the data axis was."""
    if axis == ndim - 1:
        return result
    return jnp.moveaxis(result, -2, axis)


def stft(x, fs=1.0, window="hann", nperseg: int = 256, noverlap=None, nfft=None,
         detrend=False, return_onesided: bool = True, boundary="zeros", padded: bool = True,
         axis: int = -1):
    """Short-time Fourier transform of ``x`` along ``axis``.

    Args:
      x: the signal.
      fs: the sampling frequency.
      window: a window name or ``(name, parameter)`` (as ``scipy.signal.get_window``), or an
        array of ``nperseg`` samples.
      nperseg: the length of each segment; noverlap: samples shared by neighbouring
        segments (default ``nperseg // 2``); nfft: the FFT length (default ``nperseg``).
      detrend: ``False``, ``"constant"``, ``"linear"`` or a function, applied to each segment.
      return_onesided: return only the non-negative frequencies of a real signal.
      boundary: extend the signal by ``nperseg // 2`` samples at both ends: ``"zeros"``,
        ``"even"``, ``"odd"``, ``"constant"`` or ``None``.
      padded: zero-pad the end so that the last segment is complete.
      axis: the time axis of ``x``.

    Returns:
      ``(f, t, Zxx)``: the frequencies, the segment times, and the spectra with the data axis
      replaced by a frequency axis (at ``axis``) and a segment axis (last).

    Example::

        >>> f, t, Z = stft(jnp.ones(8), nperseg=4)
        >>> Z.shape
        (3, 5)
    """
    ndim = jnp.ndim(x)
    f, t, result, axis = _spectral("stft", x, None, fs, window, nperseg, noverlap, nfft,
                                   detrend, return_onesided, "spectrum", axis, "stft",
                                   boundary, padded, 256)
    return f, t, _restore_axis(result, axis, ndim)


def csd(x, y, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None,
        detrend="constant", return_onesided: bool = True, scaling: str = "density",
        axis: int = -1, average: str = "mean"):
    """Cross power spectral density of ``x`` and ``y`` by Welch's method (averaged periodograms
    of overlapping windowed segments).

    Args:
      x, y: the signals, of the same rank (``y=None`` uses ``x``); the other axes broadcast,
        and the shorter signal is zero-padded.
      scaling: ``"density"`` (V**2/Hz) or ``"spectrum"`` (V**2).
      average: ``"mean"`` or ``"median"`` (bias-corrected) over the segments.

    The other arguments are as for :func:`stft` (default ``nperseg`` 256, at most the
    signal's length).

    Returns:
      ``(f, Pxy)``: the frequencies and the cross spectral density along ``axis``.

    Example::

        >>> f, P = csd(jnp.ones(8), jnp.ones(8), nperseg=4)
        >>> P.shape
        (3,)
    """
    if average not in ("mean", "median"):
        raise ValueError(f"csd: average must be 'median' or 'mean', got {average!r}")
    ndim = max(jnp.ndim(x), 0 if y is None else jnp.ndim(y))
    f, _, result, axis = _spectral("csd", x, y, fs, window, nperseg, noverlap, nfft, detrend,
                                   return_onesided, scaling, axis, "psd", None, False, 256)
    count = _shape(result)[-1]
    if count > 1:
        if average == "median":
            # the median of chi-squared periodograms is biased low; SciPy's correction
            bias = np.sum(1.0 / (1 + 2 * np.arange(1, (count - 1) // 2 + 1)) -
                          1.0 / (2 * np.arange(1, (count - 1) // 2 + 1)))
            bias = 1.0 + bias
            if jnp.iscomplexobj(result):
                result = (jnp.median(jnp.real(result), axis=-1) +
                          1j * jnp.median(jnp.imag(result), axis=-1))
            else:
                result = jnp.median(result, axis=-1)
            result = result / np.asarray(bias, np.finfo(get_aval(result).dtype).dtype)
        else:
            result = jnp.mean(result, axis=-1)
    else:
        result = result[..., 0]
    if axis != ndim - 1:
        result = jnp.moveaxis(result, -1, axis)
    return f, result


def welch(x, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None,
          detrend="constant", return_onesided: bool = True, scaling: str = "density",
          axis: int = -1, average: str = "mean"):
    """Power spectral density of ``x`` by Welch's method: the real part of
    ``csd(x, x, ...)``. Arguments are as for :func:`csd`.

    Example::

        >>> f, P = welch(jnp.array([1.0, -1.0] * 8), nperseg=8)
        >>> int(jnp.argmax(P)), f.shape
        (4, (5,))
    """
    f, result = csd(x, None, fs=fs, window=window, nperseg=nperseg, noverlap=noverlap,
                    nfft=nfft, detrend=detrend, return_onesided=return_onesided,
                    scaling=scaling, axis=axis, average=average)
    return f, jnp.real(result)


def istft(Zxx, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None,
          input_onesided: bool = True, boundary: bool = True, time_axis: int = -1,
          freq_axis: int = -2):
    """Inverse short-time Fourier transform: rebuild a signal from :func:`stft` output by
    windowed overlap-add.

    Args:
      Zxx: the spectra, with a frequency axis ``freq_axis`` and a segment axis ``time_axis``.
      fs, window, nperseg, noverlap, nfft: as given to :func:`stft` (``nperseg`` and ``nfft``
        default from the number of frequencies).
      input_onesided: ``Zxx`` holds only non-negative frequencies of a real signal.
      boundary: ``stft`` extended the signal at both ends; remove the extension.
      time_axis, freq_axis: the axes of ``Zxx``.

    Returns:
      ``(t, x)``: the sample times and the signal, its time axis where ``Zxx``'s segment axis
      was (other axes kept). As in SciPy, ``t`` counts along the first axis of ``x``.

    Example::

        >>> _, _, Z = stft(jnp.arange(8.0), nperseg=4)
        >>> istft(Z, nperseg=4)[1]
        Array([0., 1., 2., 3., 4., 5., 6., 7.], dtype=float32)
    """
    (Zxx,) = promote_dtypes_inexact(Zxx)
    if not jnp.iscomplexobj(Zxx):
        Zxx = Zxx.astype(np.result_type(get_aval(Zxx).dtype, np.complex64))
    ndim = get_aval(Zxx).ndim
    if ndim < 2:
        raise ValueError(f"istft: input stft must be at least 2-D, got shape {_shape(Zxx)}")
    freq_axis = canonicalize_axis(freq_axis, ndim)
    time_axis = canonicalize_axis(time_axis, ndim)
    if freq_axis == time_axis:
        raise ValueError("istft: must specify differing time and frequency axes")
    # (..., segment, frequency)
    Zxx = jnp.moveaxis(Zxx, (time_axis, freq_axis), (-2, -1))
    count, frequencies = _shape(Zxx)[-2:]
    default = 2 * (frequencies - 1) if input_onesided else frequencies
    if nperseg is None:
        nperseg = default
    nperseg = operator.index(nperseg)
    if nperseg < 1:
        raise ValueError(f"istft: nperseg must be a positive integer, got {nperseg}")
    if nfft is None:
        # an odd nperseg is the only way an odd one-sided transform length is recoverable
        nfft = nperseg if input_onesided and nperseg == default + 1 else default
    nfft = operator.index(nfft)
    if nfft < nperseg:
        raise ValueError("istft: nfft must be greater than or equal to nperseg")
    noverlap = nperseg // 2 if noverlap is None else operator.index(noverlap)
    if noverlap >= nperseg:
        raise ValueError("istft: noverlap must be less than nperseg")
    step = nperseg - noverlap
    real_dtype = np.finfo(get_aval(Zxx).dtype).dtype
    win = _window("istft", window, nperseg, real_dtype)

    if input_onesided:
        segments = jnp.fft.irfft(Zxx, n=nfft, axis=-1)[..., :nperseg]
    else:
        segments = jnp.fft.ifft(Zxx, n=nfft, axis=-1)[..., :nperseg]
    # stft scaled every spectrum by 1 / sum(win); undo that, then window again for the
    # weighted overlap-add
    segments = segments * (jnp.sum(win) * win)
    length = nperseg + (count - 1) * step
    positions = step * np.arange(count)[:, None] + np.arange(nperseg)[None, :]
    batch = _shape(segments)[:-2]
    signal = jnp.zeros(batch + (length,), get_aval(segments).dtype)
    signal = signal.at[..., positions].add(segments)
    # the squared windows summed at every sample: the weight of the overlap-add
    norm = jnp.zeros((length,), real_dtype).at[positions].add(
        jnp.broadcast_to(win * win, (count, nperseg)))
    if boundary:
        half = nperseg // 2
        signal = signal[..., half:length - half]
        norm = norm[half:length - half]
    signal = signal / jnp.where(norm > 1e-10, norm, 1.0)
    if input_onesided:
        signal = jnp.real(signal)
    if ndim > 2 and time_axis != ndim - 1:
        # the time axis replaces the segment axis (the frequency axis is gone)
        target = time_axis - 1 if freq_axis < time_axis else time_axis
        signal = jnp.moveaxis(signal, -1, target)
    # as SciPy (and JAX) do, the times count along the result's first axis, which is the
    # time axis for 1-D signals
    times = np.arange(_shape(signal)[0]).astype(real_dtype) / jnp.asarray(fs).astype(real_dtype)
    return times, signal
