"""Segmentation losses: Dice / Tversky overlap between predicted and target masks."""
from __future__ import annotations

from functrans import nn
from functrans import numpy as jnp

__all__ = ["dice_loss", "multiclass_generalized_dice_loss", "binary_dice_loss"]


def _reduce_loss(loss, reduction, axis=None):
    if reduction == "mean":
        return jnp.mean(loss, axis=axis)
    if reduction == "sum":
        return jnp.sum(loss, axis=axis)
    if reduction == "none":
        return loss
    raise ValueError(f"Unsupported reduction: {reduction}")


def dice_loss(predictions, targets, *, class_weights=None, smooth=1.0, alpha=0.5, beta=0.5,
              apply_softmax: bool = True, reduction: str = "mean",
              ignore_background: bool = False, axis=None):
    """The Tversky / Dice loss per example: ``1 - (I + smooth) / (I + alpha (P - I) +
    beta (T - I) + smooth)`` per class, with ``I`` the soft intersection and ``P``, ``T``
    the predicted and target masses summed over ``axis`` (default: all but the batch and
    class axes), then weighted by ``class_weights`` and reduced over classes
    (``"mean"``, ``"sum"`` or ``"none"``). ``alpha = beta = 0.5`` is Dice. Predictions are
    logits turned into probabilities (sigmoid for one class, softmax otherwise) unless
    ``apply_softmax=False``; ``ignore_background`` drops class 0.

        >>> import functrans.numpy as jnp
        >>> probs = jnp.array([[[1.0, 0.0], [0.0, 1.0]]])      # (batch, pixels, classes)
        >>> dice_loss(probs, probs, apply_softmax=False, smooth=0.0)
        Array([0.], dtype=float32)
    """
    predictions, targets = jnp.asarray(predictions), jnp.asarray(targets)
    if predictions.ndim == targets.ndim - 1:
        predictions = predictions[..., None]
    if targets.ndim == predictions.ndim - 1:
        targets = targets[..., None]
    if predictions.shape != targets.shape:
        raise ValueError(f"Shape mismatch: got {predictions.shape} for predictions and "
                         f"{targets.shape} for targets.")
    if not apply_softmax:
        sums = jnp.sum(predictions, axis=-1)
        if not jnp.allclose(sums, 1.0, rtol=1e-05):
            raise ValueError("When apply_softmax=False, predictions must be valid probability "
                             "distributions that sum to 1 along the class axis. Found sum "
                             f"range: [{float(jnp.min(sums)):.6f}, {float(jnp.max(sums)):.6f}]")
    probs = predictions
    if apply_softmax:
        probs = (nn.sigmoid(predictions) if predictions.shape[-1] == 1
                 else nn.softmax(predictions, axis=-1))
    axis = tuple(range(1, probs.ndim - 1)) if axis is None else axis
    intersection = jnp.sum(probs * targets, axis=axis)
    pred_sum = jnp.sum(probs, axis=axis)
    target_sum = jnp.sum(targets, axis=axis)
    denominator = (intersection + alpha * (pred_sum - intersection)
                   + beta * (target_sum - intersection) + smooth)
    loss = 1.0 - (intersection + smooth) / denominator
    if class_weights is not None:
        class_weights = jnp.asarray(class_weights)
        if class_weights.ndim != 1:
            raise ValueError(f"Expected class_weights to have rank 1, got {class_weights.ndim}")
        loss = loss * class_weights
    if ignore_background and probs.shape[-1] > 1:
        loss = loss[..., 1:]
    return _reduce_loss(loss, reduction, axis=-1)


def multiclass_generalized_dice_loss(predictions, targets, *, smooth=1.0,
                                     apply_softmax: bool = True,
                                     ignore_background: bool = False):
    """The generalized Dice loss (Sudre et al., 2017): :func:`dice_loss` with each class
    weighted by the inverse square of its target frequency (normalized to average 1),
    averaged over examples and classes.

        >>> import functrans.numpy as jnp
        >>> t = jnp.array([[[1.0, 0.0], [0.0, 1.0]]])
        >>> multiclass_generalized_dice_loss(t, t, apply_softmax=False, smooth=0.0)
        Array(0., dtype=float32)
    """
    predictions, targets = jnp.asarray(predictions), jnp.asarray(targets)
    if predictions.shape != targets.shape:
        raise ValueError(f"Shape mismatch: got {predictions.shape} for predictions and "
                         f"{targets.shape} for targets.")
    frequencies = jnp.sum(targets, axis=tuple(range(targets.ndim - 1)))
    weights = 1.0 / (frequencies ** 2 + 1e-7)
    weights = weights / jnp.sum(weights) * len(weights)
    return jnp.mean(dice_loss(predictions, targets, class_weights=weights, smooth=smooth,
                              apply_softmax=apply_softmax, reduction="none",
                              ignore_background=ignore_background))


def binary_dice_loss(predictions, targets, *, smooth=1.0, apply_sigmoid: bool = True):
    """The Dice loss of one foreground mask per example, from logits through a sigmoid.
    (As in optax, ``apply_sigmoid=False`` takes the predictions as one-class probability
    distributions, so they must all be 1.)

        >>> import functrans.numpy as jnp
        >>> mask = jnp.array([[1.0, 0.0, 1.0]])
        >>> binary_dice_loss(jnp.array([[5.0, -5.0, 5.0]]), mask)
        Array([0.0033502], dtype=float32)
    """
    predictions, targets = jnp.asarray(predictions), jnp.asarray(targets)
    if predictions.ndim == targets.ndim and predictions.shape[-1] != 1:
        predictions, targets = predictions[..., None], targets[..., None]
    return dice_loss(predictions, targets, smooth=smooth, apply_softmax=apply_sigmoid,
                     reduction="mean")
