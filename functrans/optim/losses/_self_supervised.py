"""Contrastive and metric-learning losses: NT-Xent and the triplet margin loss."""
from __future__ import annotations

from functrans import lax
from functrans import numpy as jnp
from functrans.optim.losses._inputs import _floating
from functrans.optim.losses._regression import cosine_similarity

__all__ = ["ntxent", "triplet_margin_loss"]


def ntxent(embeddings, labels, temperature=0.07):
    """The normalized temperature-scaled cross-entropy (SimCLR, Chen et al., 2020): for
    every pair of embeddings with the same label, the cross-entropy of picking it among
    the pairs with different labels, on cosine similarities divided by ``temperature``;
    averaged over positive pairs.

        >>> import functrans.numpy as jnp
        >>> emb = jnp.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
        >>> float(ntxent(emb, jnp.array([0, 0, 1, 1]))) < 0.01
        True
    """
    embeddings = _floating("ntxent", embeddings, "embeddings")
    labels = jnp.asarray(labels)
    if labels.shape[0] != embeddings.shape[0]:
        raise ValueError("Labels and embeddings must have the same leading dimension, found "
                         f"{labels.shape[0]} for labels and {embeddings.shape[0]} for "
                         "embeddings.")
    similarity = cosine_similarity(embeddings[None, :, :], embeddings[:, None, :],
                                   epsilon=jnp.finfo(embeddings.dtype).eps) / temperature
    matches = jnp.expand_dims(labels, 1) == jnp.expand_dims(labels, 0)
    diffs = matches ^ 1
    matches = (matches - jnp.eye(matches.shape[0])).astype(jnp.bool_)   # not with itself
    sim_diffs = jnp.where(diffs == 1, similarity, -jnp.inf)
    sim_matches = jnp.where(matches == 1, similarity, -jnp.inf)
    # shift by the row maximum for a stable log-sum-exp
    row_max = jnp.max(jnp.concatenate((sim_diffs, sim_matches), axis=-1), axis=1, keepdims=True)
    shifted_diffs = sim_diffs - lax.stop_gradient(row_max)
    shifted_matches = sim_matches - lax.stop_gradient(row_max)
    denominator = jnp.sum(jnp.exp(shifted_diffs), axis=1, keepdims=True) + jnp.exp(shifted_matches)
    log_softmax = shifted_matches - jnp.log(denominator)
    return -jnp.where(matches == 1, log_softmax, 0.0).sum() / matches.sum()


def triplet_margin_loss(anchors, positives, negatives, axis=-1, norm_degree=2, margin=1.0,
                        eps=1e-6):
    """The triplet margin loss (Schroff et al., 2015): ``max(d(a, p) - d(a, n) + margin, 0)``
    with ``d(x, y) = (sum |x - y|^norm_degree + eps)^(1/norm_degree)`` along ``axis``.

        >>> import functrans.numpy as jnp
        >>> a = jnp.array([[0.0, 0.0]])
        >>> triplet_margin_loss(a, jnp.array([[0.0, 1.0]]), jnp.array([[3.0, 0.0]]))
        Array([0.], dtype=float32)
    """
    anchors = _floating("triplet_margin_loss", anchors, "anchors")
    positives = _floating("triplet_margin_loss", positives, "positives")
    negatives = _floating("triplet_margin_loss", negatives, "negatives")

    def distance(x, y):
        return jnp.power(jnp.power(x - y, norm_degree).sum(axis) + eps, 1 / norm_degree)

    return jnp.maximum(distance(anchors, positives) - distance(anchors, negatives) + margin, 0)
