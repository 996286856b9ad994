"""Label smoothing."""
from __future__ import annotations

import numpy as np

from functrans import numpy as jnp
from functrans.optim.losses._inputs import _axes, _floating

__all__ = ["smooth_labels"]


def smooth_labels(labels, alpha, *, axis=-1, where=None):
    """Label smoothing (Szegedy et al., 2016): ``(1 - alpha) * labels + alpha / K`` with
    ``K`` the number of classes along ``axis`` (counting only ``where``-True ones).

        >>> import functrans.numpy as jnp
        >>> smooth_labels(jnp.array([1.0, 0.0, 0.0, 0.0]), 0.2)
        Array([0.85, 0.05, 0.05, 0.05], dtype=float32)
    """
    labels = _floating("smooth_labels", labels, "labels")
    if where is None:
        count = int(np.prod([labels.shape[a] for a in _axes(axis, labels.ndim)]))
    else:
        count = jnp.sum(jnp.asarray(where), axis=axis, keepdims=True)
    return (1.0 - alpha) * labels + alpha / count
