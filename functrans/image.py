"""Image resampling (``jax.image``): :func:`resize` and :func:`scale_and_translate`.

Every method except ``nearest`` is separable: for each axis whose size changes we build a
``(input_size, output_size)`` matrix of kernel weights and contract the image with it, one
axis at a time. Each output sample sits at ``(j + 0.5) / scale - 0.5`` in input
coordinates (pixel centres, as in JAX and TensorFlow). When downsampling with
``antialias=True`` the kernel is stretched by ``1 / scale`` so it averages over every input
pixel the output pixel covers; weights are normalised to sum to one, and output samples
that fall outside the input get zero.

    >>> import functrans.numpy as jnp
    >>> from functrans import image
    >>> image.resize(jnp.array([0.0, 1.0]), (4,), "linear")
    Array([0.  , 0.25, 0.75, 1.  ], dtype=float32)
"""
from __future__ import annotations

import enum
from typing import Callable, Sequence

import numpy as np

import functrans.numpy as jnp
from functrans import _dtypes

__all__ = ["ResizeMethod", "resize", "scale_and_translate"]


class ResizeMethod(enum.Enum):
    """The interpolation methods of :func:`resize`."""

    NEAREST = 0
    LINEAR = 1
    LANCZOS3 = 2
    LANCZOS5 = 3
    CUBIC = 4

    @staticmethod
    def from_string(name: str) -> "ResizeMethod":
        """The method for a name: ``nearest``, ``linear`` (``bilinear``, ``trilinear``,
        ``triangle``), ``lanczos3``, ``lanczos5`` or ``cubic`` (``bicubic``, ``tricubic``)."""
        method = _METHOD_NAMES.get(name.lower())
        if method is None:
            raise ValueError(f"Unknown resize method: {name!r}; expected one of "
                             f"{sorted(_METHOD_NAMES)}")
        return method


_METHOD_NAMES = {
    "nearest": ResizeMethod.NEAREST,
    "linear": ResizeMethod.LINEAR, "bilinear": ResizeMethod.LINEAR,
    "trilinear": ResizeMethod.LINEAR, "triangle": ResizeMethod.LINEAR,
    "lanczos3": ResizeMethod.LANCZOS3, "lanczos5": ResizeMethod.LANCZOS5,
    "cubic": ResizeMethod.CUBIC, "bicubic": ResizeMethod.CUBIC, "tricubic": ResizeMethod.CUBIC,
}


def _as_method(method) -> ResizeMethod:
    return method if isinstance(method, ResizeMethod) else ResizeMethod.from_string(method)


# =============================================================================================
# Kernels: functions of the distance |x| (in input pixels, after antialias stretching)
# =============================================================================================

def _triangle_kernel(x):
    return jnp.maximum(0, 1 - jnp.abs(x))


def _keys_cubic_kernel(x):
    # Keys' cubic convolution with a = -0.5 (Catmull-Rom), as TensorFlow and JAX use
    x = jnp.abs(x)
    near = ((1.5 * x - 2.5) * x) * x + 1
    far = ((-0.5 * x + 2.5) * x - 4) * x + 2
    return jnp.where(x >= 2, 0, jnp.where(x >= 1, far, near))


def _lanczos_kernel(radius: int):
    def kernel(x):
        x = jnp.abs(x)
        # sinc(x) * sinc(x / radius), with the removable singularity at 0 filled in
        safe = jnp.where(x == 0, 1, x)
        value = (radius * jnp.sin(np.pi * safe) * jnp.sin(np.pi * safe / radius)
                 / (np.pi ** 2 * safe * safe))
        return jnp.where(x > radius, 0, jnp.where(x == 0, 1, value))
    return kernel


_KERNELS: dict[ResizeMethod, Callable] = {
    ResizeMethod.LINEAR: _triangle_kernel,
    ResizeMethod.CUBIC: _keys_cubic_kernel,
    ResizeMethod.LANCZOS3: _lanczos_kernel(3),
    ResizeMethod.LANCZOS5: _lanczos_kernel(5),
}


def _weight_matrix(input_size: int, output_size: int, scale, translation, kernel,
                   antialias: bool):
    """The ``(input_size, output_size)`` matrix whose column ``j`` holds the weights of the
    input pixels in output pixel ``j``."""
    dtype = _dtypes.default_float_dtype()
    scale = jnp.asarray(scale, dtype)
    translation = jnp.asarray(translation, dtype)
    inverse_scale = 1 / scale
    # stretching the kernel by 1/scale when shrinking makes it a low-pass filter
    kernel_scale = jnp.maximum(inverse_scale, 1) if antialias else jnp.ones_like(scale)
    # output pixel centre j + 0.5 mapped back to input coordinates
    sample = ((jnp.arange(output_size, dtype=dtype) + 0.5) * inverse_scale
              - translation * inverse_scale - 0.5)
    distance = jnp.abs(sample[None, :] - jnp.arange(input_size, dtype=dtype)[:, None])
    weights = kernel(distance / kernel_scale)
    total = jnp.sum(weights, axis=0, keepdims=True)
    tiny = 1000 * float(np.finfo(np.float32).eps)
    weights = jnp.where(jnp.abs(total) > tiny, weights / jnp.where(total != 0, total, 1), 0)
    # samples outside the input image get no contribution at all
    inside = (sample >= -0.5) & (sample <= input_size - 0.5)
    return jnp.where(inside[None, :], weights, 0)


def _contract_axes(image, output_shape, spatial_dims, scale, translation, kernel, antialias,
                   precision):
    for d, s, t in zip(spatial_dims, scale, translation):
        weights = _weight_matrix(image.shape[d], output_shape[d], s, t, kernel, antialias)
        weights = weights.astype(image.dtype)
        contracted = jnp.tensordot(image, weights, axes=([d], [0]), precision=precision)
        image = jnp.moveaxis(contracted, -1, d)
    return image


def _to_inexact(image):
    image = jnp.asarray(image)
    if not _dtypes.is_inexact(image.dtype):
        image = image.astype(jnp.result_type(image.dtype, np.float32))
    return image


def _resize_nearest(image, shape):
    for d in range(image.ndim):
        m, n = image.shape[d], shape[d]
        if m == n:
            continue
        # the input pixel containing each output pixel's centre (float32, as in JAX)
        centres = (np.arange(n, dtype=np.float32) + np.float32(0.5)) * np.float32(m)
        sources = np.floor(centres / np.float32(n)).astype(np.int32)
        image = jnp.take(image, jnp.asarray(np.minimum(sources, m - 1)), axis=d)
    return image


def _check_shape(name, image, shape):
    shape = tuple(int(s) for s in shape)
    if len(shape) != image.ndim:
        raise ValueError(f"image.{name}: shape {shape} must have one entry per axis of the "
                         f"image, which has shape {image.shape}")
    return shape


def resize(image, shape: Sequence[int], method, antialias: bool = True, precision=None):
    """Resample ``image`` to ``shape`` (one entry per axis; axes that keep their size are
    left alone, so ``(H, W, C) -> (h, w, C)`` resizes an RGB image).

    Args:
      image: the array to resize (integer images are computed in float32).
      shape: the output shape.
      method: ``"nearest"``, ``"linear"``/``"bilinear"``, ``"cubic"``/``"bicubic"``,
        ``"lanczos3"``, ``"lanczos5"``, or a :class:`ResizeMethod`.
      antialias: when downsampling, widen the kernel so every input pixel contributes
        (ignored by ``nearest``).
      precision: passed to the contractions (all backends compute them at full precision,
        which is JAX's default ``HIGHEST``).

        >>> import functrans.numpy as jnp
        >>> resize(jnp.array([[1.0, 2.0], [3.0, 4.0]]), (1, 1), "linear")
        Array([[2.5]], dtype=float32)
    """
    image = jnp.asarray(image)
    shape = _check_shape("resize", image, shape)
    method = _as_method(method)
    if method is ResizeMethod.NEAREST:
        return _resize_nearest(image, shape)
    image = _to_inexact(image)
    # all kernels interpolate, so an axis that keeps its size is unchanged
    spatial_dims = tuple(d for d in range(image.ndim) if image.shape[d] != shape[d])
    scale = [1.0 if shape[d] == 0 else shape[d] / image.shape[d] for d in spatial_dims]
    return _contract_axes(image, shape, spatial_dims, scale, [0.0] * len(spatial_dims),
                          _KERNELS[method], antialias, precision)


def scale_and_translate(image, shape: Sequence[int], spatial_dims: Sequence[int], scale,
                        translation, method, antialias: bool = True, precision=None):
    """Resample ``image`` to ``shape`` through the map ``out = in * scale + translation`` on
    each axis of ``spatial_dims`` (in pixel-centre coordinates): output pixel ``j`` samples
    the input at ``(j + 0.5 - translation) / scale - 0.5``. ``scale`` and ``translation``
    (one entry per spatial axis) may be traced. ``method`` is any of :func:`resize`'s except
    ``nearest``.

        >>> import functrans.numpy as jnp
        >>> scale_and_translate(jnp.array([0.0, 1.0, 2.0, 3.0]), (4,), (0,),
        ...                     jnp.array([1.0]), jnp.array([1.0]), "linear")
        Array([0., 0., 1., 2.], dtype=float32)
    """
    image = jnp.asarray(image)
    shape = _check_shape("scale_and_translate", image, shape)
    method = _as_method(method)
    if method is ResizeMethod.NEAREST:
        raise ValueError("image.scale_and_translate does not support the 'nearest' method; "
                         "use resize or one of linear, cubic, lanczos3, lanczos5")
    spatial_dims = tuple(int(d) % image.ndim for d in spatial_dims)
    for d in range(image.ndim):
        if d not in spatial_dims and image.shape[d] != shape[d]:
            raise ValueError(f"image.scale_and_translate: axis {d} is not a spatial axis, so "
                             f"its size must stay {image.shape[d]}, got {shape[d]}")
    scale = jnp.asarray(scale)
    translation = jnp.asarray(translation)
    if scale.shape != (len(spatial_dims),) or translation.shape != (len(spatial_dims),):
        raise ValueError(f"image.scale_and_translate: scale and translation need one entry "
                         f"per spatial axis ({len(spatial_dims)}), got shapes {scale.shape} "
                         f"and {translation.shape}")
    image = _to_inexact(image)
    return _contract_axes(image, shape, spatial_dims,
                          [scale[i] for i in range(len(spatial_dims))],
                          [translation[i] for i in range(len(spatial_dims))],
                          _KERNELS[method], antialias, precision)


