"""``functrans.scipy.fft``: discrete cosine transforms (as ``jax.scipy.fft``).

Only type 2 is provided (as in JAX): ``dct`` is the DCT-II and ``idct`` its exact inverse
(a scaled DCT-III). Both are computed with one complex FFT of length ``n`` (Makhoul's
reordering), so derivatives and ``vmap`` come from the FFT primitive's rules.

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.fft import dct
    >>> dct(jnp.array([1.0, 1.0]))
    Array([4., 0.], dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import numpy as jnp
from functrans.core import get_aval
from functrans.numpy._promotion import canonicalize_axis, promote_dtypes_inexact

__all__ = ["dct", "dctn", "idct", "idctn"]


def _check(fname, type, norm):
    if type != 2:
        raise NotImplementedError(f"{fname}: only DCT type 2 is implemented, got type={type}")
    if norm not in (None, "backward", "ortho"):
        raise ValueError(f"{fname}: norm={norm!r} is not implemented")


def _resize(x, n, axis):
    """``x`` cropped or zero-padded at the end of ``axis`` to ``n`` entries."""
    size = get_aval(x).shape[axis]
    if n is None or n == size:
        return x
    if n < 1:
        raise ValueError(f"invalid number of data points ({n}) specified")
    if n < size:
        return jnp.moveaxis(jnp.moveaxis(x, axis, -1)[..., :n], -1, axis)
    widths = [(0, 0)] * get_aval(x).ndim
    widths[axis] = (0, n - size)
    return jnp.pad(x, widths)


def _ortho_scale(n, dtype):
    """The factors that turn the unnormalized DCT-II into the orthonormal one."""
    scale = np.full(n, np.sqrt(1.0 / (2 * n)))
    scale[0] = np.sqrt(1.0 / (4 * n))
    return scale.astype(dtype)


def _real_dtype(x):
    return np.finfo(get_aval(x).dtype).dtype


def _dct_last(x, norm):
    """Unnormalized (or orthonormal) DCT-II of real ``x`` along its last axis."""
    n = get_aval(x).shape[-1]
    # Makhoul: even-indexed samples in order, then odd-indexed ones reversed; one FFT of that
    # sequence, turned by a quarter-sample phase, gives the cosine transform
    v = jnp.concatenate([x[..., ::2], jnp.flip(x[..., 1::2], axis=-1)], axis=-1)
    k = np.arange(n)
    twiddle = np.exp(-1j * np.pi * k / (2 * n))
    spectrum = jnp.fft.fft(v, axis=-1)
    out = 2 * jnp.real(spectrum * twiddle.astype(get_aval(spectrum).dtype))
    if norm == "ortho":
        out = out * _ortho_scale(n, _real_dtype(x))
    return out


def _idct_last(y, norm):
    """The inverse of ``_dct_last`` along the last axis of real ``y``."""
    n = get_aval(y).shape[-1]
    if norm == "ortho":
        y = y / _ortho_scale(n, _real_dtype(y))
    # rebuild the FFT of the reordered sequence: V[k] = (Y[k] - i Y[n - k]) / (2 w[k]), with
    # Y[n] taken as zero, then undo the reordering
    reflected = jnp.concatenate([jnp.zeros_like(y[..., :1]), jnp.flip(y[..., 1:], axis=-1)],
                                axis=-1)
    k = np.arange(n)
    inverse_twiddle = np.exp(1j * np.pi * k / (2 * n)) / 2
    complex_dtype = np.result_type(_real_dtype(y), np.complex64)
    spectrum = (y - 1j * reflected) * inverse_twiddle.astype(complex_dtype)
    v = jnp.real(jnp.fft.ifft(spectrum, axis=-1))
    # v holds x[0], x[2], ... then x[..., 3], x[1] reversed: interleave them back
    order = np.empty(n, dtype=np.int32)
    order[::2] = np.arange((n + 1) // 2)
    order[1::2] = n - 1 - np.arange(n // 2)
    return jnp.take(v, order, axis=-1)


def _apply(transform, x, axis, norm):
    """``transform`` along ``axis``; complex input is transformed part by part (it is linear)."""
    x = jnp.moveaxis(x, axis, -1)
    if jnp.iscomplexobj(x):
        out = transform(jnp.real(x), norm) + 1j * transform(jnp.imag(x), norm)
    else:
        out = transform(x, norm)
    return jnp.moveaxis(out, -1, axis)


def dct(x, type: int = 2, n: int | None = None, axis: int = -1, norm: str | None = None):
    """Discrete cosine transform (type 2) of ``x`` along ``axis``.

    Args:
      x: the input array.
      type: the DCT type; only 2 is implemented.
      n: crop or zero-pad ``x`` along ``axis`` to this length first.
      axis: the axis to transform.
      norm: ``None``/``"backward"`` (unnormalized, as SciPy) or ``"ortho"``.

    Example::

        >>> dct(jnp.array([1.0, 2.0, 3.0]), norm="ortho")
        Array([ 3.4641016, -1.4142135,  0.       ], dtype=float32)
    """
    _check("dct", type, norm)
    (x,) = promote_dtypes_inexact(x)
    axis = canonicalize_axis(axis, get_aval(x).ndim)
    return _apply(_dct_last, _resize(x, n, axis), axis, norm)


def idct(x, type: int = 2, n: int | None = None, axis: int = -1, norm: str | None = None):
    """Inverse discrete cosine transform (of type 2) of ``x`` along ``axis``:
    ``idct(dct(x)) == x`` for the same ``norm``.

    Args are as for :func:`dct`.

    Example::

        >>> idct(jnp.array([4.0, 0.0]))
        Array([1., 1.], dtype=float32)
    """
    _check("idct", type, norm)
    (x,) = promote_dtypes_inexact(x)
    axis = canonicalize_axis(axis, get_aval(x).ndim)
    return _apply(_idct_last, _resize(x, n, axis), axis, norm)


def _axes_and_sizes(fname, x, s, axes):
    ndim = get_aval(x).ndim
    if axes is None:
        count = ndim if s is None else len(s)
        axes = range(ndim - count, ndim)
    axes = [canonicalize_axis(a, ndim) for a in axes]
    if len(set(axes)) != len(axes):
        raise ValueError(f"{fname}: repeated axes {tuple(axes)}")
    if s is None:
        s = [None] * len(axes)
    if len(s) != len(axes):
        raise ValueError(f"{fname}: s and axes must have the same length, got {len(s)} "
                         f"and {len(axes)}")
    return list(zip(axes, s))


def dctn(x, type: int = 2, s=None, axes=None, norm: str | None = None):
    """Multidimensional DCT (type 2): :func:`dct` along each of ``axes`` (default: all, or
    the last ``len(s)``), each axis first resized to the matching entry of ``s``.

    Example::

        >>> dctn(jnp.ones((2, 2)))
        Array([[16.,  0.],
               [ 0.,  0.]], dtype=float32)
    """
    _check("dctn", type, norm)
    (x,) = promote_dtypes_inexact(x)
    for axis, n in _axes_and_sizes("dctn", x, s, axes):
        x = _apply(_dct_last, _resize(x, n, axis), axis, norm)
    return x


def idctn(x, type: int = 2, s=None, axes=None, norm: str | None = None):
    """Multidimensional inverse DCT (of type 2): :func:`idct` along each of ``axes``.

    Example::

        >>> idctn(jnp.array([[16.0, 0.0], [0.0, 0.0]]))
        Array([[1., 1.],
               [1., 1.]], dtype=float32)
    """
    _check("idctn", type, norm)
    (x,) = promote_dtypes_inexact(x)
    for axis, n in _axes_and_sizes("idctn", x, s, axes):
        x = _apply(_idct_last, _resize(x, n, axis), axis, norm)
    return x
