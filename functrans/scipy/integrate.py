"""``functrans.scipy.integrate``: numerical integration of sampled data (as
``jax.scipy.integrate``).

    >>> import functrans.numpy as jnp
    >>> from functrans.scipy.integrate import trapezoid
    >>> trapezoid(jnp.array([1.0, 2.0, 3.0]))
    Array(4., dtype=float32)
"""
from __future__ import annotations

from functrans import numpy as jnp
from functrans.numpy._promotion import promote_dtypes_inexact

__all__ = ["trapezoid"]


def trapezoid(y, x=None, dx=1.0, axis: int = -1):
    """Integrate ``y`` along ``axis`` with the composite trapezoidal rule.

    Args:
      y: the sampled values.
      x: the sample points, 1-D along ``axis`` or broadcastable to ``y``; when ``None`` the
        samples are ``dx`` apart.
      dx: the spacing of the samples when ``x`` is ``None``.
      axis: the axis to integrate over.

    Example::

        >>> trapezoid(jnp.array([0.0, 1.0, 4.0]), x=jnp.array([0.0, 1.0, 2.0]))
        Array(3., dtype=float32)
    """
    if x is None:
        (y,) = promote_dtypes_inexact(y)
        y = jnp.moveaxis(y, axis, -1)
        spacing = dx
    else:
        y, x = promote_dtypes_inexact(y, x)
        y = jnp.moveaxis(y, axis, -1)
        # a 1-D x gives the sample points along the integration axis; otherwise x is laid
        # out like y (and broadcasts against it)
        x = x if jnp.ndim(x) == 1 else jnp.moveaxis(x, axis, -1)
        spacing = jnp.diff(x, axis=-1)
    return 0.5 * jnp.sum(spacing * (y[..., 1:] + y[..., :-1]), axis=-1)
