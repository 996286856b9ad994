"""Fenchel-Young losses (Blondel et al., 2020) from a regularized max function."""
from __future__ import annotations

from typing import Callable

from functrans import _api
from functrans import numpy as jnp

__all__ = ["make_fenchel_young_loss"]


def _over_last_axis(fn: Callable, *arrays, **kwargs):
    """``fn`` applied to the last axis of each array, over all leading axes (extra
    keyword arguments are passed unbatched)."""
    lead = arrays[0].shape[:-1]
    flat = [jnp.reshape(a, (-1, a.shape[-1])) for a in arrays]
    out = _api.vmap(lambda *rows: fn(*rows, **kwargs))(*flat)
    return jnp.reshape(out, lead)


def make_fenchel_young_loss(max_fun: Callable) -> Callable:
    """The Fenchel-Young loss of a regularized max ``max_fun(scores) -> scalar`` (convex in
    the scores): ``loss(scores, targets) = max_fun(scores) - <targets, scores>`` over the
    last axis. ``logsumexp`` gives the softmax cross-entropy.

        >>> import functrans.numpy as jnp
        >>> from functrans import nn
        >>> loss = make_fenchel_young_loss(nn.logsumexp)
        >>> loss(jnp.array([[2.0, 0.0]]), jnp.array([[1.0, 0.0]]))
        Array([0.12692809], dtype=float32)
    """
    def fenchel_young_loss(scores, targets, *args, **kwargs):
        scores, targets = jnp.asarray(scores), jnp.asarray(targets)
        if scores.ndim == 1:
            return max_fun(scores, *args, **kwargs) - jnp.vdot(targets, scores)
        max_value = _over_last_axis(lambda s: max_fun(s, *args, **kwargs), scores)
        return max_value - _over_last_axis(jnp.vdot, targets, scores)

    return fenchel_young_loss
