"""``functrans.numpy.fft``: discrete Fourier transforms, as ``numpy.fft`` / ``jax.numpy.fft``.

Every transform is the ``lax.fft`` primitive applied to the chosen axes (moved to the end
and back), after the input is zero-padded or cropped to the requested lengths; ``norm``
scales the result. Derivatives and ``vmap`` come from the primitive's rules.

    >>> import functrans.numpy as jnp
    >>> jnp.fft.fft(jnp.array([1., 0., 0., 0.]))
    Array([1.+0.j, 1.+0.j, 1.+0.j, 1.+0.j], dtype=complex64)
"""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans.core import get_aval
from functrans.numpy import _ufuncs as uf
from functrans.numpy._promotion import (canonicalize_axis, check_arraylike, concrete_or_error,
                                        operator_index, promote_dtypes_inexact, to_array)
from functrans.numpy._shape import moveaxis, roll
from functrans.primitives import elementwise, structural
from functrans.primitives.fft import FftType, fft as _lax_fft

__all__ = ["fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn",
           "rfftn", "irfftn", "hfft", "ihfft", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]

_NORMS = ("backward", "ortho", "forward")
# the primitive computes the "backward" convention: forward transforms unscaled, inverse
# transforms divided by the number of points
_FORWARD_TYPES = (FftType.FFT, FftType.RFFT)


def _check_norm(fname, norm) -> str:
    if norm is None:
        return "backward"
    if norm not in _NORMS:
        raise ValueError(f"{fname}: invalid norm value {norm!r}; should be \"backward\", "
                         f"\"ortho\" or \"forward\"")
    return norm


def _swap_direction(norm: str) -> str:
    """The norm that scales the inverse transform as ``norm`` scales the forward one
    (``hfft`` is an inverse real transform used in the forward direction)."""
    return {"backward": "forward", "ortho": "ortho", "forward": "backward"}[norm]


def _resize(a, axis: int, size: int):
    """``a`` zero-padded or cropped at the end of ``axis`` to ``size`` entries."""
    aval = get_aval(a)
    if aval.shape[axis] == size:
        return a
    config = [(0, 0, 0)] * aval.ndim
    config[axis] = (0, size - aval.shape[axis], 0)
    return structural.pad(a, np.zeros((), aval.dtype), config)


def _transform(a, fft_type: FftType, axes: tuple, lengths: tuple):
    """``lax.fft`` over ``axes`` (distinct, in order) with ``fft_lengths=lengths``."""
    if len(axes) > 3:
        # the primitive transforms at most three axes at once; the real transforms keep their
        # real axis (the last) in the group of three that runs on real data
        if fft_type == FftType.IRFFT:
            a = _transform(a, FftType.IFFT, axes[:-3], lengths[:-3])
            return _transform(a, fft_type, axes[-3:], lengths[-3:])
        a = _transform(a, fft_type, axes[-3:], lengths[-3:])
        complex_type = FftType.IFFT if fft_type == FftType.IFFT else FftType.FFT
        return _transform(a, complex_type, axes[:-3], lengths[:-3])
    ndim = get_aval(a).ndim
    trailing = tuple(range(ndim - len(axes), ndim))
    out = _lax_fft(moveaxis(a, axes, trailing), fft_type, lengths)
    return moveaxis(out, trailing, axes)


def _fft_core(fname: str, fft_type: FftType, a, s, axes, norm):
    """The shared path of every transform: promote, pick axes and lengths, resize, transform,
    scale."""
    check_arraylike(fname, a)
    a, = promote_dtypes_inexact(to_array(a))
    norm = _check_norm(fname, norm)
    aval = get_aval(a)
    if fft_type == FftType.RFFT and _dtypes.is_complex(aval.dtype):
        raise TypeError(f"{fname}: only real valued inputs are supported, got "
                        f"{aval.str_short()}")
    if s is not None:
        s = tuple(operator_index(concrete_or_error(n, fname), "s") for n in np.ravel(s))
    if axes is None:
        axes = tuple(range(aval.ndim)) if s is None else tuple(range(-len(s), 0))
    axes = tuple(canonicalize_axis(ax, aval.ndim) for ax in np.ravel(axes))
    if len(set(axes)) != len(axes):
        raise ValueError(f"{fname}: repeated axes are not supported, got axes={axes}")
    if not axes:
        return a
    if s is not None and len(s) != len(axes):
        raise ValueError(f"{fname}: s {s} and axes {axes} must have the same length")
    in_sizes = [aval.shape[ax] for ax in axes]
    if s is None:
        s = tuple(in_sizes)
        if fft_type == FftType.IRFFT:
            s = s[:-1] + (2 * (in_sizes[-1] - 1),)
    elif fft_type == FftType.IRFFT:
        # -1 keeps an axis's input size (the default output length for the last axis)
        s = tuple(n if n != -1 else size for n, size in zip(s[:-1], in_sizes[:-1])) + (
            s[-1] if s[-1] != -1 else 2 * (in_sizes[-1] - 1),)
    else:
        s = tuple(n if n != -1 else size for n, size in zip(s, in_sizes))
    if any(n < 1 for n in s):
        raise ValueError(f"{fname}: invalid number of data points {s} along axes {axes}; "
                         f"each must be at least 1")
    # IRFFT reads n//2 + 1 entries of the Hermitian half-spectrum on its last axis
    wanted = s[:-1] + (s[-1] // 2 + 1,) if fft_type == FftType.IRFFT else s
    for ax, size in zip(axes, wanted):
        a = _resize(a, ax, size)
    out = _transform(a, fft_type, axes, s)
    count = float(np.prod(s))
    if norm == "ortho":
        scale = 1 / np.sqrt(count) if fft_type in _FORWARD_TYPES else np.sqrt(count)
    elif norm == "forward":
        scale = 1 / count if fft_type in _FORWARD_TYPES else count
    else:
        scale = 1.0
    return out if scale == 1.0 else uf.multiply(out, float(scale))


def _one_axis(n, axis):
    return (None if n is None else (n,)), (axis,)


# ---- one-dimensional ----------------------------------------------------------------------

def fft(a, n=None, axis: int = -1, norm=None):
    """One-dimensional discrete Fourier transform along ``axis``; ``n`` zero-pads or crops
    the input first. ``norm`` is ``"backward"`` (default, unscaled), ``"ortho"`` or
    ``"forward"`` (divided by ``n``).

        >>> fft(jnp.array([1., 2., 3., 4.]))
        Array([10.+0.j, -2.+2.j, -2.+0.j, -2.-2.j], dtype=complex64)
    """
    return _fft_core("fft", FftType.FFT, a, *_one_axis(n, axis), norm)


def ifft(a, n=None, axis: int = -1, norm=None):
    """One-dimensional inverse discrete Fourier transform (divided by ``n`` by default).

        >>> ifft(jnp.array([4., 0., 0., 0.]))
        Array([1.+0.j, 1.+0.j, 1.+0.j, 1.+0.j], dtype=complex64)
    """
    return _fft_core("ifft", FftType.IFFT, a, *_one_axis(n, axis), norm)


def rfft(a, n=None, axis: int = -1, norm=None):
    """Fourier transform of a real array: the ``n//2 + 1`` non-negative frequency terms.

        >>> rfft(jnp.array([1., 2., 3., 4.]))
        Array([10.+0.j, -2.+2.j, -2.+0.j], dtype=complex64)
    """
    return _fft_core("rfft", FftType.RFFT, a, *_one_axis(n, axis), norm)


def irfft(a, n=None, axis: int = -1, norm=None):
    """Inverse of :func:`rfft`: a real array of length ``n`` (default ``2 * (m - 1)`` for
    ``m`` input entries) from its non-negative frequency terms.

        >>> irfft(jnp.array([10., -2 + 2j, -2.]))
        Array([1., 2., 3., 4.], dtype=float32)
    """
    return _fft_core("irfft", FftType.IRFFT, a, *_one_axis(n, axis), norm)


def hfft(a, n=None, axis: int = -1, norm=None):
    """Fourier transform of a signal with Hermitian symmetry, given by its first half: a
    real spectrum of length ``n`` (default ``2 * (m - 1)``).

        >>> hfft(jnp.array([1., 2., 3.]))
        Array([ 8., -2.,  0., -2.], dtype=float32)
    """
    norm = _swap_direction(_check_norm("hfft", norm))
    return _fft_core("hfft", FftType.IRFFT, uf.conjugate(to_array(a)), *_one_axis(n, axis),
                     norm)


def ihfft(a, n=None, axis: int = -1, norm=None):
    """Inverse of :func:`hfft`: the first half of the Hermitian spectrum of a real signal.

        >>> ihfft(jnp.array([8., -2., 0., -2.]))
        Array([1.-0.j, 2.-0.j, 3.-0.j], dtype=complex64)
    """
    norm = _swap_direction(_check_norm("ihfft", norm))
    return uf.conjugate(_fft_core("ihfft", FftType.RFFT, a, *_one_axis(n, axis), norm))


# ---- two- and n-dimensional ---------------------------------------------------------------

def fftn(a, s=None, axes=None, norm=None):
    """N-dimensional discrete Fourier transform over ``axes`` (all axes by default, or the
    last ``len(s)`` when only ``s`` is given); ``s`` zero-pads or crops each axis first.

        >>> fftn(jnp.ones((2, 2)))
        Array([[4.+0.j, 0.+0.j],
               [0.+0.j, 0.+0.j]], dtype=complex64)
    """
    return _fft_core("fftn", FftType.FFT, a, s, axes, norm)


def ifftn(a, s=None, axes=None, norm=None):
    """N-dimensional inverse discrete Fourier transform (see :func:`fftn`).

        >>> ifftn(jnp.array([[4., 0.], [0., 0.]]))
        Array([[1.+0.j, 1.+0.j],
               [1.+0.j, 1.+0.j]], dtype=complex64)
    """
    return _fft_core("ifftn", FftType.IFFT, a, s, axes, norm)


def rfftn(a, s=None, axes=None, norm=None):
    """N-dimensional Fourier transform of a real array; the last of ``axes`` keeps its
    ``s[-1]//2 + 1`` non-negative frequencies.

        >>> rfftn(jnp.ones((2, 4))).shape
        (2, 3)
    """
    return _fft_core("rfftn", FftType.RFFT, a, s, axes, norm)


def irfftn(a, s=None, axes=None, norm=None):
    """Inverse of :func:`rfftn`; the last output axis has ``s[-1]`` entries (default
    ``2 * (m - 1)``).

        >>> irfftn(jnp.zeros((2, 3))).shape
        (2, 4)
    """
    return _fft_core("irfftn", FftType.IRFFT, a, s, axes, norm)


def fft2(a, s=None, axes=(-2, -1), norm=None):
    """Two-dimensional discrete Fourier transform (:func:`fftn` over the last two axes).

        >>> fft2(jnp.ones((2, 2)))[0, 0]
        Array(4.+0.j, dtype=complex64)
    """
    return _fft_core("fft2", FftType.FFT, a, s, axes, norm)


def ifft2(a, s=None, axes=(-2, -1), norm=None):
    """Two-dimensional inverse discrete Fourier transform.

        >>> ifft2(jnp.ones((2, 2)))[0, 0]
        Array(1.+0.j, dtype=complex64)
    """
    return _fft_core("ifft2", FftType.IFFT, a, s, axes, norm)


def rfft2(a, s=None, axes=(-2, -1), norm=None):
    """Two-dimensional Fourier transform of a real array.

        >>> rfft2(jnp.ones((3, 4))).shape
        (3, 3)
    """
    return _fft_core("rfft2", FftType.RFFT, a, s, axes, norm)


def irfft2(a, s=None, axes=(-2, -1), norm=None):
    """Inverse of :func:`rfft2`.

        >>> irfft2(jnp.zeros((3, 3))).shape
        (3, 4)
    """
    return _fft_core("irfft2", FftType.IRFFT, a, s, axes, norm)


# ---- frequencies and shifts -----------------------------------------------------------------

def _frequencies(integers, n: int, d, dtype):
    dtype = _dtypes.canonicalize_dtype(dtype) if dtype is not None \
        else _dtypes.default_float_dtype()
    counts = to_array(np.asarray(integers, dtype=dtype))
    # d may be traced; it only scales the (static) integer pattern
    freqs = uf.divide(counts, uf.multiply(d, n))
    return elementwise.convert_element_type(freqs, dtype)


def fftfreq(n, d=1.0, *, dtype=None, device=None):
    """Sample frequencies of :func:`fft`: ``[0, 1, ..., -2, -1] / (d * n)``, in cycles per
    unit of the sample spacing ``d``.

        >>> fftfreq(4)
        Array([ 0.  ,  0.25, -0.5 , -0.25], dtype=float32)
    """
    size = operator_index(concrete_or_error(n, "fftfreq"), "n")
    integers = np.concatenate([np.arange(0, (size - 1) // 2 + 1), np.arange(-(size // 2), 0)])
    return _frequencies(integers, size, d, dtype)


def rfftfreq(n, d=1.0, *, dtype=None, device=None):
    """Sample frequencies of :func:`rfft`: ``[0, 1, ..., n//2] / (d * n)``.

        >>> rfftfreq(4)
        Array([0.  , 0.25, 0.5 ], dtype=float32)
    """
    size = operator_index(concrete_or_error(n, "rfftfreq"), "n")
    return _frequencies(np.arange(0, size // 2 + 1), size, d, dtype)


def _shift(fname, x, axes, sign):
    check_arraylike(fname, x)
    x = to_array(x)
    shape = get_aval(x).shape
    if axes is None:
        axes = tuple(range(len(shape)))
    axes = tuple(canonicalize_axis(ax, len(shape)) for ax in np.ravel(axes))
    if not axes:
        return x
    return roll(x, tuple(sign * (shape[ax] // 2) for ax in axes), axes)


def fftshift(x, axes=None):
    """Move the zero-frequency term to the centre (roll each axis by half its length).

        >>> fftshift(fftfreq(4))
        Array([-0.5 , -0.25,  0.  ,  0.25], dtype=float32)
    """
    return _shift("fftshift", x, axes, 1)


def ifftshift(x, axes=None):
    """Inverse of :func:`fftshift` (they differ for odd lengths).

        >>> ifftshift(fftshift(jnp.arange(5)))
        Array([0, 1, 2, 3, 4], dtype=int32)
    """
    return _shift("ifftshift", x, axes, -1)
