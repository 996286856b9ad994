"""Window functions (``bartlett``, ``blackman``, ``hamming``, ``hanning``, ``kaiser``).

The length ``M`` sets the output shape, so it must be a concrete integer.

    >>> import functrans.numpy as jnp
    >>> jnp.bartlett(3)
    Array([0., 1., 0.], dtype=float32)
"""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans.numpy._promotion import _static_int
from functrans.numpy._creation import asarray, ones, zeros
from functrans.numpy._ufuncs import i0


def _window(name, M, formula):
    """A symmetric window of length ``M`` from ``formula(n, M)`` over host float64 points,
    in the default float dtype (empty for ``M < 1``, ``[1.]`` for ``M == 1``)."""
    M = _static_int(name, M, "M")
    dtype = _dtypes.default_float_dtype()
    if M < 1:
        return zeros((0,), dtype)
    if M == 1:
        return ones((1,), dtype)
    n = np.arange(M, dtype=np.float64)
    return asarray(formula(n, M), dtype=dtype)


def bartlett(M):
    """The Bartlett (triangular) window of length ``M``: rises linearly from 0 to 1 and back.

        >>> bartlett(5)
        Array([0. , 0.5, 1. , 0.5, 0. ], dtype=float32)
    """
    return _window("bartlett", M, lambda n, M: 1 - np.abs(2 * n / (M - 1) - 1))


def blackman(M):
    """The Blackman window of length ``M``:
    ``0.42 - 0.5 cos(2 pi n / (M-1)) + 0.08 cos(4 pi n / (M-1))``.

        >>> blackman(3)
        Array([-1.3877788e-17,  1.0000000e+00, -1.3877788e-17], dtype=float32)
    """
    return _window("blackman", M, lambda n, M: 0.42 - 0.5 * np.cos(2 * np.pi * n / (M - 1))
                   + 0.08 * np.cos(4 * np.pi * n / (M - 1)))


def hamming(M):
    """The Hamming window of length ``M``: ``0.54 - 0.46 cos(2 pi n / (M-1))``.

        >>> hamming(3)
        Array([0.08, 1.  , 0.08], dtype=float32)
    """
    return _window("hamming", M, lambda n, M: 0.54 - 0.46 * np.cos(2 * np.pi * n / (M - 1)))


def hanning(M):
    """The Hann window of length ``M``: ``0.5 - 0.5 cos(2 pi n / (M-1))``.

        >>> hanning(3)
        Array([0., 1., 0.], dtype=float32)
    """
    return _window("hanning", M, lambda n, M: 0.5 - 0.5 * np.cos(2 * np.pi * n / (M - 1)))


def kaiser(M, beta):
    """The Kaiser window of length ``M`` and shape ``beta`` (may be traced):
    ``i0(beta * sqrt(1 - (2n/(M-1) - 1)**2)) / i0(beta)``.

        >>> kaiser(3, 2.0)
        Array([0.43867633, 1.        , 0.43867633], dtype=float32)
    """
    M = _static_int("kaiser", M, "M")
    dtype = _dtypes.default_float_dtype()
    if M < 1:
        return zeros((0,), dtype)
    beta = asarray(beta, dtype=dtype)
    if M == 1:
        return ones((1,), dtype)
    n = np.arange(M, dtype=np.float64)
    ratio = asarray(np.sqrt(np.maximum(0.0, 1 - (2 * n / (M - 1) - 1) ** 2)), dtype=dtype)
    return i0(beta * ratio) / i0(beta)
