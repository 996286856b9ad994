"""Parameter initializers (``jax.nn.initializers``).

Each factory returns ``init(key, shape, dtype=...) -> array``:

    >>> import functrans.random as random
    >>> init = glorot_uniform()
    >>> init(random.PRNGKey(0), (3, 4)).shape
    (3, 4)

Fan-in and fan-out of a weight of shape ``(..., in, out)`` count the receptive field: for a
convolution kernel ``(h, w, in, out)``, ``fan_in = h * w * in``.
"""
from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from functrans import _dtypes, lax
from functrans.primitives import elementwise as ew
from functrans import random as _random
import functrans.numpy as jnp



class Initializer(Protocol):
    """What every initializer here is: ``init(key, shape, dtype=None) -> Array``."""

    def __call__(self, key, shape, dtype=None, out_sharding=None):
        ...


__all__ = [
    "zeros", "ones", "constant", "uniform", "normal", "truncated_normal", "variance_scaling",
    "glorot_uniform", "glorot_normal", "xavier_uniform", "xavier_normal", "he_uniform",
    "he_normal", "kaiming_uniform", "kaiming_normal", "lecun_uniform", "lecun_normal",
    "orthogonal",
]


def _dtype(dtype):
    return _dtypes.default_float_dtype() if dtype is None else _dtypes.canonicalize_dtype(dtype)


def _shape(shape) -> tuple:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)


def zeros(key, shape, dtype=None):
    """All zeros (``key`` is unused).

        >>> zeros(None, (2,))
        Array([0., 0.], dtype=float32)
    """
    return lax.full(_shape(shape), 0, _dtype(dtype))


def ones(key, shape, dtype=None):
    """All ones (``key`` is unused).

        >>> ones(None, (2,))
        Array([1., 1.], dtype=float32)
    """
    return lax.full(_shape(shape), 1, _dtype(dtype))


def constant(value, dtype=None):
    """An initializer filling with ``value``.

        >>> constant(0.5)(None, (2,))
        Array([0.5, 0.5], dtype=float32)
    """
    def init(key, shape, dtype=dtype):
        return lax.full(_shape(shape), value, _dtype(dtype))
    return init


def uniform(scale=1e-2, dtype=None):
    """Uniform on ``[0, scale)``.

        >>> import functrans.random as random
        >>> float(uniform(1.0)(random.PRNGKey(0), (100,)).max()) < 1.0
        True
    """
    def init(key, shape, dtype=dtype):
        dtype = _dtype(dtype)
        return ew.mul(_random.uniform(key, _shape(shape), dtype),
                       lax.full(_shape(shape), scale, dtype))
    return init


def normal(stddev=1e-2, dtype=None):
    """Normal with mean 0 and standard deviation ``stddev``.

        >>> import functrans.random as random
        >>> normal(1.0)(random.PRNGKey(0), (2, 2)).shape
        (2, 2)
    """
    def init(key, shape, dtype=dtype):
        dtype = _dtype(dtype)
        return ew.mul(_random.normal(key, _shape(shape), dtype),
                       lax.full(_shape(shape), stddev, dtype))
    return init


def truncated_normal(stddev=1e-2, dtype=None, lower=-2.0, upper=2.0):
    """``stddev`` times a standard normal truncated to ``(lower, upper)``.

        >>> import functrans.random as random
        >>> float(abs(truncated_normal(1.0)(random.PRNGKey(0), (100,))).max()) < 2.0
        True
    """
    def init(key, shape, dtype=dtype):
        dtype = _dtype(dtype)
        return ew.mul(_random.truncated_normal(key, lower, upper, _shape(shape), dtype),
                       lax.full(_shape(shape), stddev, dtype))
    return init


def _axis_sizes(shape, axes) -> int:
    if isinstance(axes, (int, np.integer)):
        axes = (axes,)
    return math.prod(shape[a] for a in axes)


def _fans(shape, in_axis, out_axis, batch_axis):
    if len(shape) < 2:
        raise ValueError(f"fan-in/fan-out of a weight of shape {shape} are not defined: it "
                         "needs at least 2 dimensions (use zeros/normal for biases)")
    ndim = len(shape)

    def norm(axes):
        axes = (axes,) if isinstance(axes, (int, np.integer)) else tuple(axes)
        return tuple(int(a) % ndim for a in axes)

    in_axes, out_axes, batch_axes = norm(in_axis), norm(out_axis), norm(batch_axis)
    in_size, out_size = _axis_sizes(shape, in_axes), _axis_sizes(shape, out_axes)
    batch_size = _axis_sizes(shape, batch_axes)
    receptive_field = math.prod(shape) / in_size / out_size / batch_size
    return in_size * receptive_field, out_size * receptive_field


# std of a standard normal truncated to (-2, 2): dividing by it restores unit variance
_TRUNCATED_STDDEV = 0.87962566103423978


def variance_scaling(scale, mode: str, distribution: str, in_axis=-2, out_axis=-1,
                     batch_axis=(), dtype=None):
    """Samples with variance ``scale / n``, where ``n`` is the fan-in (``mode="fan_in"``),
    fan-out, their mean (``"fan_avg"``) or geometric mean (``"fan_geo_avg"``); the
    distribution is ``"truncated_normal"``, ``"normal"`` or ``"uniform"``.

        >>> import functrans.random as random
        >>> w = variance_scaling(2.0, "fan_in", "normal")(random.PRNGKey(0), (400, 300))
        >>> round(float((w ** 2).mean() * 400), 1)
        2.0
    """
    if mode not in ("fan_in", "fan_out", "fan_avg", "fan_geo_avg"):
        raise ValueError(f"variance_scaling: unknown mode {mode!r}")
    if distribution not in ("truncated_normal", "normal", "uniform"):
        raise ValueError(f"variance_scaling: unknown distribution {distribution!r}")

    def init(key, shape, dtype=dtype):
        shape = _shape(shape)
        dtype = _dtype(dtype)
        if not _dtypes.is_inexact(dtype):
            raise ValueError(f"variance_scaling: dtype must be floating or complex, got {dtype}")
        fan_in, fan_out = _fans(shape, in_axis, out_axis, batch_axis)
        denominator = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2,
                       "fan_geo_avg": math.sqrt(fan_in * fan_out)}[mode]
        variance = scale / denominator
        if _dtypes.is_complex(dtype):
            return _complex_variance_scaling(key, shape, dtype, distribution, variance)
        if distribution == "truncated_normal":
            sample = _random.truncated_normal(key, -2.0, 2.0, shape, dtype)
            factor = math.sqrt(variance) / _TRUNCATED_STDDEV
        elif distribution == "normal":
            sample = _random.normal(key, shape, dtype)
            factor = math.sqrt(variance)
        else:
            sample = _random.uniform(key, shape, dtype, -1.0, 1.0)
            factor = math.sqrt(3 * variance)
        return ew.mul(sample, lax.full(shape, factor, dtype))
    return init


# JAX's scale for complex truncated normals (applied to the square root of the variance)
_COMPLEX_TRUNCATED_SCALE = 0.95311164380491208


def _complex_variance_scaling(key, shape, dtype, distribution, variance):
    """Complex samples of the given variance: a normal's real and imaginary parts each carry
    half of it; "uniform" is uniform on a disk and "truncated_normal" a normal whose
    modulus is cut at 2 (before rescaling), both drawn as a radius and an angle."""
    if distribution == "normal":
        sample, factor = _random.normal(key, shape, dtype), math.sqrt(variance)
    else:
        real = _dtypes.finfo(dtype).dtype
        radius_key, angle_key = _random.split(key)
        u = _random.uniform(radius_key, shape, real)
        if distribution == "uniform":
            radius, factor = jnp.sqrt(2 * u), math.sqrt(variance)
        else:  # the modulus of a unit-variance complex normal has P(r > t) = exp(-t^2)
            radius = jnp.sqrt(-jnp.log1p(-u * (1 - math.exp(-4.0))))
            factor = math.sqrt(variance) * _COMPLEX_TRUNCATED_SCALE
        angle = _random.uniform(angle_key, shape, real, 0.0, 2 * math.pi)
        sample = (radius * jnp.exp(1j * angle)).astype(dtype)
    return ew.mul(sample, lax.full(shape, factor, dtype))


def glorot_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """Glorot/Xavier uniform: variance ``1 / fan_avg``."""
    return variance_scaling(1.0, "fan_avg", "uniform", in_axis, out_axis, batch_axis, dtype)


def glorot_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """Glorot/Xavier normal (truncated): variance ``1 / fan_avg``."""
    return variance_scaling(1.0, "fan_avg", "truncated_normal", in_axis, out_axis, batch_axis,
                            dtype)


def lecun_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """LeCun uniform: variance ``1 / fan_in``."""
    return variance_scaling(1.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """LeCun normal (truncated): variance ``1 / fan_in``."""
    return variance_scaling(1.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis,
                            dtype)


def he_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """He/Kaiming uniform: variance ``2 / fan_in``."""
    return variance_scaling(2.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def he_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """He/Kaiming normal (truncated): variance ``2 / fan_in``."""
    return variance_scaling(2.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis,
                            dtype)


xavier_uniform, xavier_normal = glorot_uniform, glorot_normal
kaiming_uniform, kaiming_normal = he_uniform, he_normal


def orthogonal(scale=1.0, column_axis=-1, dtype=None):
    """A (semi-)orthogonal matrix, reshaped: the columns along ``column_axis`` are
    orthonormal (or the rows, when there are more columns than rows), times ``scale``.
    Made from the QR decomposition of a Gaussian matrix, with R's diagonal signs folded in
    so the result is uniformly (Haar) distributed.

        >>> import functrans.random as random
        >>> orthogonal()(random.PRNGKey(0), (3, 3)).shape
        (3, 3)
    """
    def init(key, shape, dtype=dtype):
        shape = _shape(shape)
        dtype = _dtype(dtype)
        if len(shape) < 2:
            raise ValueError(f"orthogonal initializer needs at least 2 dimensions, got {shape}")
        axis = int(column_axis) % len(shape)
        n_cols = shape[axis]
        n_rows = math.prod(shape) // n_cols
        tall = (n_rows, n_cols) if n_rows >= n_cols else (n_cols, n_rows)
        gaussian = _random.normal(key, tall, dtype)
        q, r = jnp.linalg.qr(gaussian)
        diagonal_signs = lax.sign(jnp.diagonal(r))
        q = ew.mul(q, lax.broadcast_in_dim(diagonal_signs, tall, (1,)))
        if n_rows < n_cols:
            q = lax.transpose(q, (1, 0))
        other = tuple(s for i, s in enumerate(shape) if i != axis)
        q = lax.reshape(q, other + (n_cols,))
        perm = list(range(len(other)))
        perm.insert(axis, len(other))
        q = lax.transpose(q, tuple(perm))
        return ew.mul(q, lax.full(shape, scale, dtype))
    return init


def delta_orthogonal(scale=1.0, column_axis=-1, dtype=None):
    """The delta-orthogonal initializer for convolution kernels of shape
    ``(*spatial, in, out)`` with 1, 2 or 3 spatial axes: an orthogonal ``(in, out)`` matrix
    (times ``scale``) at the centre of the spatial window and zeros elsewhere, so the
    convolution starts as an orthogonal map (needs ``in <= out``).

        >>> import functrans.random as random
        >>> w = delta_orthogonal()(random.PRNGKey(0), (3, 3, 2, 4))
        >>> w.shape
        (3, 3, 2, 4)
    """
    def init(key, shape, dtype=dtype):
        shape = _shape(shape)
        dtype = _dtype(dtype)
        if len(shape) not in (3, 4, 5):
            raise ValueError(f"delta_orthogonal initializer needs a 3-D, 4-D or 5-D kernel "
                             f"shape (1 to 3 spatial axes, then in and out), got {shape}")
        if shape[-2] > shape[-1]:
            raise ValueError(f"delta_orthogonal initializer needs in <= out (the last two "
                             f"sides), got shape {shape}")
        matrix = orthogonal(scale, column_axis, dtype)(key, shape[-2:])
        centre = tuple((k - 1) // 2 for k in shape[:-2])
        return lax.full(shape, 0, dtype).at[centre].set(matrix)
    return init


__all__.append("delta_orthogonal")
__all__.append("Initializer")
