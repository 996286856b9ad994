"""Classification losses: binary and multiclass cross-entropies, hinge and perceptron
losses, KL divergences."""
from __future__ import annotations

import numpy as np

from functrans import _api
from functrans import nn
from functrans import numpy as jnp
from functrans.optim.losses._inputs import _axes, _floating
from functrans.optim.projections import projection_simplex

__all__ = ["sigmoid_binary_cross_entropy", "sigmoid_focal_loss", "hinge_loss",
           "perceptron_loss", "softmax_cross_entropy", "softmax_cross_entropy_with_integer_labels",
           "safe_softmax_cross_entropy", "poly_loss_cross_entropy", "multiclass_hinge_loss",
           "multiclass_perceptron_loss", "kl_divergence", "kl_divergence_with_log_targets",
           "generalized_kl_divergence", "convex_kl_divergence", "sparsemax_loss",
           "multiclass_sparsemax_loss"]


# =============================================================================================
# Binary classification
# =============================================================================================

def sigmoid_binary_cross_entropy(logits, labels):
    """``-y log sigmoid(x) - (1 - y) log(1 - sigmoid(x))`` elementwise, for labels in
    ``[0, 1]`` (hard or soft), from log-sigmoids so large logits stay finite.

        >>> import functrans.numpy as jnp
        >>> sigmoid_binary_cross_entropy(jnp.array([0.0, 100.0]), jnp.array([1.0, 0.0]))
        Array([  0.6931472, 100.       ], dtype=float32)
    """
    logits = _floating("sigmoid_binary_cross_entropy", logits, "logits")
    labels = jnp.asarray(labels).astype(logits.dtype)
    return -labels * nn.log_sigmoid(logits) - (1.0 - labels) * nn.log_sigmoid(-logits)


def sigmoid_focal_loss(logits, labels, *, alpha=None, gamma=2.0):
    """Focal loss (Lin et al., 2017): the binary cross entropy weighted by ``(1 - p_t)^gamma``
    with ``p_t`` the probability given to the label, and, with ``alpha``, by ``alpha`` for
    positives and ``1 - alpha`` for negatives.

        >>> import functrans.numpy as jnp
        >>> sigmoid_focal_loss(jnp.array([0.0]), jnp.array([1.0]))  # 0.25 * log 2
        Array([0.1732868], dtype=float32)
    """
    logits = _floating("sigmoid_focal_loss", logits, "logits")
    labels = jnp.asarray(labels).astype(logits.dtype)
    cross_entropy = sigmoid_binary_cross_entropy(logits, labels)
    # log(1 - p_t) = log(sigmoid(x)(1 - y) + sigmoid(-x) y), expanded around the larger of
    # y and 1 - y so that neither saturated logits nor y in {0, 1} lose it to rounding
    positive = labels >= 0.5
    y_big = jnp.where(positive, labels, 1.0 - labels)
    x_big = jnp.where(positive, -logits, logits)
    log_one_minus_pt = (nn.log_sigmoid(x_big) + jnp.log(y_big)
                        + nn.softplus(-x_big + jnp.log1p(-y_big) - jnp.log(y_big)))
    loss = cross_entropy * jnp.exp(gamma * log_one_minus_pt)
    if alpha is None:
        return loss
    return (alpha * labels + (1.0 - alpha) * (1.0 - labels)) * loss


def hinge_loss(predictor_outputs, targets):
    """``max(0, 1 - output * target)`` for targets in ``{-1, 1}``.

        >>> import functrans.numpy as jnp
        >>> hinge_loss(jnp.array([2.0, 0.5, -1.0]), jnp.array([1.0, 1.0, 1.0]))
        Array([0. , 0.5, 2. ], dtype=float32)
    """
    return jnp.maximum(0.0, 1.0 - jnp.asarray(predictor_outputs) * targets)


def perceptron_loss(predictor_outputs, targets):
    """``max(0, -output * target)`` for targets in ``{-1, 1}``.

        >>> import functrans.numpy as jnp
        >>> perceptron_loss(jnp.array([2.0, -1.0]), jnp.array([1.0, 1.0]))
        Array([0., 1.], dtype=float32)
    """
    return jnp.maximum(0.0, -jnp.asarray(predictor_outputs) * targets)


# =============================================================================================
# Multiclass classification
# =============================================================================================

def _expand_where(where, logits, axis):
    """A per-example mask (one rank lower than ``logits``) gains the class axis back."""
    if where is None:
        return None
    where = jnp.asarray(where)
    if where.ndim != logits.ndim:
        where = jnp.expand_dims(where, axis)
    return where


def softmax_cross_entropy(logits, labels, axis=-1, where=None):
    """``-sum(labels * log_softmax(logits))`` along ``axis`` (labels are distributions,
    e.g. one-hot). ``where`` (of the logits' shape, or one per example) leaves classes out
    of both the softmax and the sum.

        >>> import functrans.numpy as jnp
        >>> softmax_cross_entropy(jnp.array([[0.0, 0.0]]), jnp.array([[1.0, 0.0]]))
        Array([0.6931472], dtype=float32)
    """
    logits = _floating("softmax_cross_entropy", logits, "logits")
    where = _expand_where(where, logits, axis)
    log_probs = nn.log_softmax(logits, axis, where=where)
    return -jnp.sum(labels * log_probs, axis=axis, where=where)


def safe_softmax_cross_entropy(logits, labels):
    """:func:`softmax_cross_entropy` over the last axis, with ``0 * log 0 = 0``: classes with
    label 0 contribute nothing even when their logit is ``-inf`` (plain
    ``softmax_cross_entropy`` gives NaN there).

        >>> import functrans.numpy as jnp
        >>> safe_softmax_cross_entropy(jnp.array([0.0, 0.0, -jnp.inf]), jnp.array([1.0, 0.0, 0.0]))
        Array(0.6931472, dtype=float32)
    """
    logits = _floating("safe_softmax_cross_entropy", logits, "logits")
    labels = jnp.asarray(labels)
    weighted = jnp.where(labels != 0, labels * nn.log_softmax(logits, axis=-1), 0.0)
    return -jnp.sum(weighted, axis=-1)


def softmax_cross_entropy_with_integer_labels(logits, labels, axis=-1, where=None):
    """``logsumexp(logits) - logits[label]`` along ``axis``: cross entropy against integer
    class labels (shape of ``logits`` without ``axis``). A tuple ``axis`` flattens those
    axes into one class index. Examples whose ``where`` mask is all False give 0.

        >>> import functrans.numpy as jnp
        >>> softmax_cross_entropy_with_integer_labels(jnp.array([[0.0, 0.0]]), jnp.array([1]))
        Array([0.6931472], dtype=float32)
    """
    logits = _floating("softmax_cross_entropy_with_integer_labels", logits, "logits")
    labels = jnp.asarray(labels)
    if not np.issubdtype(labels.dtype, np.integer):
        raise TypeError("softmax_cross_entropy_with_integer_labels: labels must be integers, "
                        f"got {labels.dtype} (use softmax_cross_entropy for distributions)")
    where = _expand_where(where, logits, axis)
    if isinstance(axis, tuple):
        class_axes = _axes(axis, logits.ndim)
        batch_axes = tuple(i for i in range(logits.ndim) if i not in class_axes)
        # the class axes move to the back in order and flatten into one
        logits = jnp.transpose(logits, batch_axes + class_axes)
        logits = jnp.reshape(logits, logits.shape[:len(batch_axes)] + (-1,))
        if where is not None:
            where = jnp.transpose(where, batch_axes + class_axes)
            where = jnp.reshape(where, where.shape[:len(batch_axes)] + (-1,))
        axis = len(batch_axes)
    else:
        axis = axis % logits.ndim
    # only the chosen logit is read, rather than normalizing every class
    chosen = jnp.squeeze(jnp.take_along_axis(logits, jnp.expand_dims(labels, axis), axis=axis),
                         axis=axis)
    out = nn.logsumexp(logits, axis=axis, where=where) - chosen
    if where is not None:
        out = jnp.where(jnp.any(where, axis=axis), out, 0.0)
    return out


def poly_loss_cross_entropy(logits, labels, *, epsilon=2.0, axis=-1, where=None):
    """Poly-1 loss (Leng et al., 2022): cross entropy plus ``epsilon * (1 - p_t)`` with
    ``1 - p_t = sum(labels * (1 - softmax(logits)))``.

        >>> import functrans.numpy as jnp
        >>> poly_loss_cross_entropy(jnp.array([0.0, 0.0]), jnp.array([1.0, 0.0]))
        Array(1.6931472, dtype=float32)
    """
    logits = _floating("poly_loss_cross_entropy", logits, "logits")
    labels = _floating("poly_loss_cross_entropy", labels, "labels")
    where = _expand_where(where, logits, axis)
    probabilities = nn.softmax(logits, axis=axis, where=where)
    one_minus_pt = jnp.sum(labels * (1.0 - probabilities), axis=axis, where=where)
    return softmax_cross_entropy(logits, labels, axis=axis, where=where) + epsilon * one_minus_pt


def multiclass_hinge_loss(scores, labels):
    """Crammer-Singer hinge: ``max_j(scores_j + [j != label]) - scores[label]``.

        >>> import functrans.numpy as jnp
        >>> multiclass_hinge_loss(jnp.array([[2.0, 1.5, 0.0]]), jnp.array([0]))
        Array([0.5], dtype=float32)
    """
    scores = jnp.asarray(scores)
    one_hot = nn.one_hot(labels, scores.shape[-1], dtype=scores.dtype)
    return jnp.max(scores + 1.0 - one_hot, axis=-1) - jnp.sum(scores * one_hot, axis=-1)


def multiclass_perceptron_loss(scores, labels):
    """``max_j scores_j - scores[label]``.

        >>> import functrans.numpy as jnp
        >>> multiclass_perceptron_loss(jnp.array([[2.0, 3.0]]), jnp.array([0]))
        Array([1.], dtype=float32)
    """
    scores = jnp.asarray(scores)
    one_hot = nn.one_hot(labels, scores.shape[-1], dtype=scores.dtype)
    return jnp.max(scores, axis=-1) - jnp.sum(scores * one_hot, axis=-1)


# =============================================================================================
# Divergences and label smoothing
# =============================================================================================

def _xlogx_term(targets):
    """``log(targets)`` where targets are nonzero, else 0 (so ``0 log 0 = 0``); the inner
    select keeps the derivative finite at 0 too."""
    zero = targets == 0
    return jnp.where(zero, 0.0, jnp.log(jnp.where(zero, 1.0, targets)))


def kl_divergence(log_predictions, targets, axis=-1, where=None):
    """``KL(targets || predictions) = sum(t (log t - log_predictions))`` along ``axis``, with
    predictions given as log-probabilities and ``0 log 0 = 0``.

        >>> import functrans.numpy as jnp
        >>> kl_divergence(jnp.log(jnp.array([0.5, 0.5])), jnp.array([1.0, 0.0]))
        Array(0.6931472, dtype=float32)
    """
    log_predictions = _floating("kl_divergence", log_predictions, "log_predictions")
    targets = _floating("kl_divergence", targets, "targets")
    return jnp.sum(targets * (_xlogx_term(targets) - log_predictions), axis=axis, where=where)


def kl_divergence_with_log_targets(log_predictions, log_targets, axis=-1, where=None):
    """:func:`kl_divergence` with the targets also as log-probabilities:
    ``sum(exp(lt) (lt - log_predictions))``.

        >>> import functrans.numpy as jnp
        >>> half = jnp.log(jnp.array([0.5, 0.5]))
        >>> kl_divergence_with_log_targets(half, half)
        Array(0., dtype=float32)
    """
    log_predictions = _floating("kl_divergence_with_log_targets", log_predictions,
                                "log_predictions")
    log_targets = _floating("kl_divergence_with_log_targets", log_targets, "log_targets")
    return jnp.sum(jnp.exp(log_targets) * (log_targets - log_predictions), axis=axis, where=where)


def generalized_kl_divergence(log_predictions, targets, axis=-1, where=None):
    """KL divergence for unnormalized measures: ``kl_divergence + sum(exp(lp) - t)``.

        >>> import functrans.numpy as jnp
        >>> generalized_kl_divergence(jnp.log(jnp.array([2.0])), jnp.array([1.0]))
        Array(0.30685282, dtype=float32)
    """
    return (kl_divergence(log_predictions, targets, axis=axis, where=where)
            + jnp.sum(jnp.exp(log_predictions) - targets, axis=axis, where=where))


def convex_kl_divergence(log_predictions, targets, axis=-1, where=None):
    """The older name of :func:`generalized_kl_divergence`."""
    return generalized_kl_divergence(log_predictions, targets, axis=axis, where=where)


# =============================================================================================
# Sparsemax
# =============================================================================================

def sparsemax_loss(logits, labels):
    """The binary sparsemax loss (Martins & Astudillo, 2016): ``sparse_plus(-z)`` for
    positive labels and ``sparse_plus(z)`` for negative ones, elementwise.

        >>> import functrans.numpy as jnp
        >>> sparsemax_loss(jnp.array([2.0, 0.0]), jnp.array([1, 0]))
        Array([0.  , 0.25], dtype=float32)
    """
    logits = _floating("sparsemax_loss", logits, "logits")
    return nn.sparse_plus(jnp.where(labels, -logits, logits))


def _multiclass_sparsemax_loss(scores, label):
    proba = projection_simplex(scores)
    scores = (scores - scores[label]).at[label].set(0.0)
    return jnp.dot(proba, jnp.where(proba, scores, 0.0)) + 0.5 * (1.0 - jnp.dot(proba, proba))


def multiclass_sparsemax_loss(scores, labels):
    """The multiclass sparsemax loss (Martins & Astudillo, 2016) per example: the
    Fenchel-Young loss of sparsemax (the projection of the scores onto the simplex) at the
    integer ``labels``.

        >>> import functrans.numpy as jnp
        >>> multiclass_sparsemax_loss(jnp.array([[3.0, 0.0, 0.0]]), jnp.array([0]))
        Array([0.], dtype=float32)
    """
    scores = _floating("multiclass_sparsemax_loss", scores, "scores")
    return _api.vmap(_multiclass_sparsemax_loss)(scores, jnp.asarray(labels))
