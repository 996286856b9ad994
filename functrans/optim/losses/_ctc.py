"""Connectionist temporal classification (Graves et al., 2006): the negative log
likelihood of a label sequence summed over all its alignments to the frames."""
from __future__ import annotations

from functrans import lax, nn
from functrans import numpy as jnp

__all__ = ["ctc_loss_with_forward_probs", "ctc_loss"]


def _check_rank(name, x, rank):
    if x.ndim != rank:
        raise ValueError(f"Expected {name} to have rank {rank}, got {x.ndim} instead "
                         f"(shape {x.shape})")


def _check_same_shape(a_name, a, b_name, b):
    if a.shape != b.shape:
        raise ValueError(f"Shape mismatch: got {a.shape} for {a_name} and {b.shape} for "
                         f"{b_name}.")


def ctc_loss_with_forward_probs(logits, logit_paddings, labels, label_paddings, *,
                                blank_id: int = 0, log_epsilon=-1e5):
    """The CTC loss per sequence, and the forward (alpha) log-probabilities.

    ``logits`` is ``(batch, frames, classes)`` (unnormalized), ``labels`` ``(batch,
    max_labels)`` integers; the paddings (same shapes without the class axis) are 1.0 at
    padded positions. ``log_epsilon`` stands for ``log(0)``. Returns ``(loss (batch,),
    logalpha_phi (frames, batch, max_labels + 1), logalpha_emit (frames, batch,
    max_labels))``: the log-probabilities of the prefixes ending in a blank and in the
    label, frame by frame.

    The example's loss is -log(3/4): the alignments "1 1", "_ 1" and "1 _" are 3 of the 4
    paths. It is shown to 6 decimals, as its last float32 digit depends on the CPU (NumPy
    and the compiled code use its vector instructions; see docs/compiler.md).

        >>> import functrans.numpy as jnp
        >>> logits = jnp.zeros((1, 2, 2))                 # two frames, uniform over 2 classes
        >>> loss, _, _ = ctc_loss_with_forward_probs(logits, jnp.zeros((1, 2)),
        ...                                          jnp.array([[1]]), jnp.zeros((1, 1)))
        >>> loss.round(6)
        Array([0.287682], dtype=float32)
    """
    logits, labels = jnp.asarray(logits), jnp.asarray(labels)
    logit_paddings, label_paddings = jnp.asarray(logit_paddings), jnp.asarray(label_paddings)
    _check_rank("logits", logits, 3)
    _check_rank("labels", labels, 2)
    _check_same_shape("labels", labels, "label_paddings", label_paddings)
    _check_same_shape("logits[..., 0]", logits[..., 0], "logit_paddings", logit_paddings)
    batchsize, _, num_classes = logits.shape
    if labels.shape[0] != batchsize:
        raise ValueError(f"Expected `labels` to have batch size {batchsize}, got "
                         f"{labels.shape[0]}.")
    maxlabellen = labels.shape[1]
    logprobs = nn.log_softmax(logits)
    labellens = maxlabellen - jnp.sum(label_paddings, axis=1).astype(jnp.int32)
    # a repeated label needs a blank in between: moving on from it costs log_epsilon
    repeat = (labels[:, :-1] == labels[:, 1:]).astype(jnp.float32)
    repeat = jnp.pad(repeat, ((0, 0), (0, 1)))
    logprobs_phi = jnp.transpose(logprobs[:, :, blank_id:blank_id + 1], (1, 0, 2))
    one_hot = nn.one_hot(labels, num_classes=num_classes)
    logprobs_emit = jnp.transpose(jnp.einsum("btk,bnk->btn", logprobs, one_hot), (1, 0, 2))
    logalpha_phi_init = (jnp.ones((batchsize, maxlabellen + 1)) * log_epsilon).at[:, 0].set(0.0)
    logalpha_emit_init = jnp.ones((batchsize, maxlabellen)) * log_epsilon

    def add_to_phi(phi, added):
        return jnp.concatenate([phi[:, :1], jnp.logaddexp(phi[:, 1:], added)], axis=-1)

    def step(previous, frame):
        prev_phi, prev_emit = previous
        prev_phi_orig = prev_phi
        prev_phi = add_to_phi(prev_phi, prev_emit + log_epsilon * repeat)
        logprob_emit, logprob_phi, pad = frame
        next_emit = jnp.logaddexp(prev_phi[:, :-1] + logprob_emit, prev_emit + logprob_emit)
        next_phi = add_to_phi(prev_phi + logprob_phi,
                              prev_emit + logprob_phi + log_epsilon * (1.0 - repeat))
        pad = pad.reshape((batchsize, 1))   # padded frames carry the previous values over
        next_emit = pad * prev_emit + (1.0 - pad) * next_emit
        next_phi = pad * prev_phi_orig + (1.0 - pad) * next_phi
        return (next_phi, next_emit), (next_phi, next_emit)

    frames = (logprobs_emit, logprobs_phi, logit_paddings.transpose((1, 0)))
    _, (logalpha_phi, logalpha_emit) = lax.scan(step, (logalpha_phi_init, logalpha_emit_init),
                                                frames)
    logalpha_phi_last = add_to_phi(logalpha_phi[-1], logalpha_emit[-1])
    logalpha_phi = logalpha_phi.at[-1].set(logalpha_phi_last)
    at_label_end = nn.one_hot(labellens, num_classes=maxlabellen + 1)
    per_seq_loss = -jnp.einsum("bn,bn->b", logalpha_phi_last, at_label_end)
    return per_seq_loss, logalpha_phi, logalpha_emit


def ctc_loss(logits, logit_paddings, labels, label_paddings, *, blank_id: int = 0,
             log_epsilon=-1e5):
    """The CTC loss per sequence (see :func:`ctc_loss_with_forward_probs`).

        >>> import functrans.numpy as jnp
        >>> loss = ctc_loss(jnp.zeros((1, 2, 2)), jnp.zeros((1, 2)), jnp.array([[1]]),
        ...                 jnp.zeros((1, 1)))
        >>> loss.round(6)                                  # -log(3/4), to 6 decimals
        Array([0.287682], dtype=float32)
    """
    loss, _, _ = ctc_loss_with_forward_probs(logits, logit_paddings, labels, label_paddings,
                                             blank_id=blank_id, log_epsilon=log_epsilon)
    return loss
