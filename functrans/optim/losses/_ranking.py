"""Learning-to-rank losses."""
from __future__ import annotations

from functrans import nn
from functrans import numpy as jnp
from functrans.optim.losses._inputs import _floating

__all__ = ["ranking_softmax_loss"]


def _safe_reduce(a, where=None, reduce_fn=None):
    """``reduce_fn(a, where=where)``, with the mean of nothing (NaN) read as 0."""
    output = reduce_fn(a, where=where) if reduce_fn is not None else a
    if reduce_fn is jnp.mean:
        input_valid = jnp.logical_not(jnp.any(jnp.isnan(a)))
        output = jnp.where(jnp.isnan(output) & input_valid, 0.0, output)
    if reduce_fn is None and where is not None:
        output = jnp.where(where, output, 0.0)
    return output


def ranking_softmax_loss(logits, labels, *, where=None, weights=None, reduce_fn=jnp.mean):
    """The listwise softmax ranking loss (Cao et al., 2007): per list,
    ``-sum(labels * log_softmax(logits))`` over the items (those where ``where`` is True,
    labels times ``weights``), reduced over lists by ``reduce_fn`` (None: per list).

        >>> import functrans.numpy as jnp
        >>> ranking_softmax_loss(jnp.array([[2.0, 0.0]]), jnp.array([[1.0, 0.0]]))
        Array(0.12692805, dtype=float32)
    """
    logits = _floating("ranking_softmax_loss", logits, "logits")
    labels = jnp.asarray(labels).astype(logits.dtype)
    if where is not None:
        labels = jnp.where(where, labels, jnp.zeros_like(labels))
        logits = jnp.where(where, logits, -jnp.ones_like(logits) * jnp.inf)
    if weights is not None:
        labels = labels * weights
    loss = -jnp.sum(labels * nn.log_softmax(logits, axis=-1), axis=-1, where=where)
    if where is not None:
        where = jnp.any(where, axis=-1)
    return _safe_reduce(loss, where=where, reduce_fn=reduce_fn)
