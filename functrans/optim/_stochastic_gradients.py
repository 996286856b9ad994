"""Helpers for stochastic gradient estimation: a diagonal Gaussian with log-scale
parameters, and scaling a value's gradient without changing the value."""
from __future__ import annotations

import math

from functrans import _custom_derivatives
from functrans import lax, random
from functrans import numpy as jnp
from functrans.tree_util import tree_map

__all__ = ["MultiNormalDiagFromLogScale", "multi_normal", "scale_gradient"]


class MultiNormalDiagFromLogScale:
    """A Gaussian with mean ``loc`` and independent coordinates of standard deviation
    ``exp(log_scale)``.

        >>> import functrans.numpy as jnp
        >>> from functrans import random
        >>> dist = multi_normal(jnp.zeros(2), jnp.zeros(2))
        >>> dist.sample((3,), random.PRNGKey(0)).shape
        (3, 2)
        >>> round(float(dist.log_prob(jnp.zeros(2))), 4)   # -log(2 pi)
        -1.8379
    """

    def __init__(self, loc, log_scale):
        self._log_scale = jnp.asarray(log_scale)
        self._scale = jnp.exp(log_scale)
        self._mean = jnp.asarray(loc)
        self._param_shape = lax.broadcast_shapes(self._mean.shape, self._scale.shape)

    def sample(self, shape, key):
        """Samples of shape ``(*shape, *param_shape)``."""
        sample_shape = tuple(shape) + self._param_shape
        return random.normal(key, shape=sample_shape) * self._scale + self._mean

    def log_prob(self, x):
        """The log density at ``x``, summed over the parameter axes."""
        z = (x - self._mean) / self._scale
        log_prob = -0.5 * z * z - jnp.log(self._scale) - 0.5 * math.log(2 * math.pi)
        return jnp.sum(log_prob, axis=[-(i + 1) for i in range(len(self._param_shape))])

    @property
    def log_scale(self):
        return self._log_scale

    @property
    def params(self):
        return [self._mean, self._log_scale]


def multi_normal(loc, log_scale) -> MultiNormalDiagFromLogScale:
    """The diagonal Gaussian with mean ``loc`` and log standard deviations ``log_scale``
    (see :class:`MultiNormalDiagFromLogScale`)."""
    return MultiNormalDiagFromLogScale(loc=loc, log_scale=log_scale)


@_custom_derivatives.custom_vjp
def _scale_gradient(inputs, scale):
    del scale
    return inputs


def _scale_gradient_fwd(inputs, scale):
    return _scale_gradient(inputs, scale), scale


def _scale_gradient_bwd(scale, g):
    return tree_map(lambda g_: g_ * scale, g), None


_scale_gradient.defvjp(_scale_gradient_fwd, _scale_gradient_bwd)


def scale_gradient(inputs, scale):
    """``inputs`` unchanged, but gradients flowing back through it are multiplied by
    ``scale`` (0 stops them).

        >>> import functrans, functrans.numpy as jnp
        >>> functrans.grad(lambda x: jnp.sum(scale_gradient(x, 0.5) ** 2))(jnp.ones(2))
        Array([1., 1.], dtype=float32)
    """
    if scale == 1.0:
        return inputs
    if scale == 0.0:
        return lax.stop_gradient(inputs)
    return _scale_gradient(inputs, scale)
