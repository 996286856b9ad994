"""Fast Fourier transforms: the ``fft`` primitive behind ``lax.fft`` and ``jnp.fft``.

One primitive covers the four transforms, chosen by ``fft_type``:

* ``FFT``   complex -> complex, ``y[k] = sum_j x[j] exp(-2 pi i jk / n)`` over each axis;
* ``IFFT``  complex -> complex, the inverse (with the ``1/n`` factor);
* ``RFFT``  real -> complex, the FFT of a real array, keeping only the ``n//2 + 1``
  non-redundant entries of the last axis;
* ``IRFFT`` complex -> real, the inverse of ``RFFT``: the input's last axis holds
  ``n//2 + 1`` entries of a Hermitian spectrum whose full length ``n`` is ``fft_lengths[-1]``.

The transform runs over the trailing ``len(fft_lengths)`` axes (one to three, as in XLA);
leading axes are batch axes. Every transform is linear over the reals, so the JVP applies
the same transform to the tangent, and each type has a transpose rule (derived below).
"""
from __future__ import annotations

import enum

import numpy as np

from functrans import _dtypes
from functrans.core import Primitive, ShapedArray, get_aval
from functrans.interpreters import ad, batching
from functrans.primitives import elementwise, structural


class FftType(enum.IntEnum):
    """Which transform ``lax.fft`` computes (``jax.lax.FftType``)."""

    FFT = 0
    IFFT = 1
    RFFT = 2
    IRFFT = 3

    def __repr__(self):
        return f"FftType.{self.name}"

    __str__ = __repr__


_COMPLEX_OF = {_dtypes.float32: _dtypes.complex64, _dtypes.float64: _dtypes.complex128}
_REAL_OF = {c: r for r, c in _COMPLEX_OF.items()}

fft_p = Primitive("fft")


@fft_p.def_abstract_eval
def _fft_rule(operand, *, fft_type, fft_lengths):
    def fail(why):
        raise TypeError(f"fft: {why} (operand {operand.str_short()}, fft_type={fft_type!r}, "
                        f"fft_lengths={fft_lengths})")

    fft_type = FftType(fft_type)
    k = len(fft_lengths)
    if not 1 <= k <= 3:
        fail("fft_lengths must name one to three trailing axes")
    if any(n < 1 for n in fft_lengths):
        fail("every fft length must be positive")
    if operand.ndim < k:
        fail(f"operand has fewer than {k} axes")
    trailing = tuple(operand.shape[operand.ndim - k:])
    if fft_type == FftType.RFFT:
        if operand.dtype not in _COMPLEX_OF:
            fail("RFFT takes a real float32 or float64 operand")
        if trailing != tuple(fft_lengths):
            fail("the operand's trailing axes must equal fft_lengths")
        shape = operand.shape[:-1] + (fft_lengths[-1] // 2 + 1,)
        dtype = _COMPLEX_OF[operand.dtype]
    else:
        if operand.dtype not in _REAL_OF:
            fail(f"{fft_type.name} takes a complex64 or complex128 operand")
        if fft_type == FftType.IRFFT:
            expected = tuple(fft_lengths[:-1]) + (fft_lengths[-1] // 2 + 1,)
            if trailing != expected:
                fail(f"the operand's trailing axes must be {expected} (the last one is "
                     f"fft_lengths[-1] // 2 + 1)")
            shape = operand.shape[:-1] + (fft_lengths[-1],)
            dtype = _REAL_OF[operand.dtype]
        else:
            if trailing != tuple(fft_lengths):
                fail("the operand's trailing axes must equal fft_lengths")
            shape, dtype = operand.shape, operand.dtype
    return ShapedArray(shape, dtype, operand.weak_type)


@fft_p.def_impl
def _fft_impl(operand, *, fft_type, fft_lengths):
    k = len(fft_lengths)
    axes = tuple(range(operand.ndim - k, operand.ndim))
    # Transform in double precision and round once, so float32 results carry only the
    # final rounding.
    if fft_type == FftType.RFFT:
        out = np.fft.rfftn(operand.astype(np.float64), s=fft_lengths, axes=axes)
        return out.astype(_COMPLEX_OF[operand.dtype])
    wide = operand.astype(np.complex128)
    if fft_type == FftType.IRFFT:
        return np.fft.irfftn(wide, s=fft_lengths, axes=axes).astype(_REAL_OF[operand.dtype])
    transform = np.fft.fftn if fft_type == FftType.FFT else np.fft.ifftn
    return transform(wide, s=fft_lengths, axes=axes).astype(operand.dtype)


# ---- transposes --------------------------------------------------------------------------
#
# Cotangents pair with values by the real bilinear form <a, b> = Re sum(a * b) (no
# conjugate), as everywhere in functrans: the transpose T of a linear map A satisfies
# <ct, A x> = <T ct, x> for all x and ct.
#
# FFT / IFFT: the DFT matrix F[k, j] = exp(-2 pi i jk / n) is symmetric, and so is its
#   inverse, so each is its own transpose (per axis, hence over several axes too).
# RFFT: A x = P F x with P keeping the first m = n//2 + 1 entries of the last axis. Then
#   T ct = F^T P^T ct = F (ct zero-padded to n), and since x is real only the real part
#   pairs with it: T ct = Re FFT(pad(ct)).
# IRFFT: over the last axis, x[j] = (1/n) Re sum_{k<m} w[k] y[k] exp(2 pi i jk / n) with
#   w = 1 at k = 0 and (for even n) at k = n/2, and w = 2 elsewhere (each interior entry
#   stands for itself and its conjugate mirror; the real parts drop the imaginary parts of
#   the self-mirrored entries). Its transpose is T ct[k] = (w[k]/n) sum_j ct[j]
#   exp(2 pi i jk / n) = w[k] conj(RFFT(ct))[k] / n for real ct. The leading transformed
#   axes are an IFFT (symmetric, 1/n each) applied first, and IFFT(conj z) = conj(FFT z)/n,
#   so over all axes T ct = w * conj(RFFT(ct)) / prod(fft_lengths).

def _rfft_transpose(ct, fft_lengths):
    aval = get_aval(ct)
    n, m = fft_lengths[-1], aval.shape[-1]
    config = [(0, 0, 0)] * (aval.ndim - 1) + [(0, n - m, 0)]
    padded = structural.pad(ct, np.zeros((), aval.dtype), config)
    return elementwise.real(fft_p.bind(padded, fft_type=FftType.FFT,
                                       fft_lengths=tuple(fft_lengths)))


def _irfft_weights(n: int) -> np.ndarray:
    """``w`` of the IRFFT transpose: 1 for the self-mirrored entries, 2 for the others."""
    w = np.full(n // 2 + 1, 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    return w


def _irfft_transpose(ct, fft_lengths):
    spectrum = elementwise.conj(fft_p.bind(ct, fft_type=FftType.RFFT,
                                           fft_lengths=tuple(fft_lengths)))
    aval = get_aval(spectrum)
    scale = _irfft_weights(fft_lengths[-1]) / float(np.prod(fft_lengths))
    scale = structural.broadcast_in_dim(scale.astype(aval.dtype), aval.shape, (aval.ndim - 1,))
    return elementwise.mul(spectrum, scale)


def _fft_transpose(ct, *, fft_type, fft_lengths):
    if fft_type == FftType.RFFT:
        return [_rfft_transpose(ct, fft_lengths)]
    if fft_type == FftType.IRFFT:
        return [_irfft_transpose(ct, fft_lengths)]
    return [fft_p.bind(ct, fft_type=fft_type, fft_lengths=fft_lengths)]


def _fft_batch(vals, dims, *, fft_type, fft_lengths):
    # The transform maps over every axis before the trailing fft_lengths, so a batch dim
    # among those stays put; one among the transformed axes moves to the front.
    (x,), (d,) = vals, dims
    if d >= get_aval(x).ndim - len(fft_lengths):
        x, d = batching.moveaxis(x, d, 0), 0
    return fft_p.bind(x, fft_type=fft_type, fft_lengths=fft_lengths), d


ad.deflinear(fft_p, _fft_transpose)
fft_p.batch = _fft_batch


# ---- the lax-level function ----------------------------------------------------------------

def _canonical_fft_type(fft_type) -> FftType:
    if isinstance(fft_type, str):
        try:
            return FftType[fft_type.upper()]
        except KeyError:
            raise ValueError(f"fft: unknown fft_type {fft_type!r}; expected one of "
                             f"'fft', 'ifft', 'rfft', 'irfft'") from None
    return FftType(fft_type)


def fft(x, fft_type, fft_lengths):
    """Fourier transform over the trailing ``len(fft_lengths)`` axes of ``x``.

    ``fft_type`` is a :class:`FftType` (or its name as a string): ``FFT``/``IFFT`` take and
    return complex arrays, ``RFFT`` takes a real array and returns ``fft_lengths[-1]//2 + 1``
    entries on the last axis, ``IRFFT`` is its inverse and returns a real array whose last
    axis is ``fft_lengths[-1]``. Real inputs are cast to the matching complex dtype for
    ``FFT``/``IFFT``/``IRFFT``, integer and half-precision inputs to 32-bit floats (64-bit
    under x64), so the result is complex64/float32, or complex128/float64 from 64-bit inputs.

    Example::

        fft(jnp.array([1., 2., 3., 4.]), FftType.RFFT, (4,))
        # Array([10.+0.j, -2.+2.j, -2.+0.j], dtype=complex64)
    """
    fft_type = _canonical_fft_type(fft_type)
    lengths = (int(fft_lengths),) if np.ndim(fft_lengths) == 0 else tuple(
        int(n) for n in fft_lengths)
    dtype = get_aval(x).dtype
    if fft_type == FftType.RFFT:
        if _dtypes.is_complex(dtype):
            raise TypeError(f"fft: RFFT takes a real operand, got {get_aval(x).str_short()}")
        target = dtype if dtype in _COMPLEX_OF else _dtypes.default_float_dtype()
    elif _dtypes.is_complex(dtype):
        target = dtype
    else:
        target = _COMPLEX_OF.get(dtype, _dtypes.default_complex_dtype())
    x = elementwise.convert_element_type(x, target)
    return fft_p.bind(x, fft_type=fft_type, fft_lengths=lengths)


__all__ = ["FftType", "fft"]
