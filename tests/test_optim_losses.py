"""functrans.optim.losses against NumPy: values (finite for extreme logits), masks and axes,
errors, and gradients by finite differences."""


from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

import functrans
import functrans.numpy as jnp
from functrans import optim
from functrans.optim import losses
from functrans.test_util import check_grads


RNG = np.random.default_rng(0)


# =============================================================================================
# Losses against NumPy
# =============================================================================================

def _np(x):
    return np.asarray(x)


def _log_softmax(x, axis=-1):
    return special.log_softmax(np.asarray(x, np.float64), axis=axis)


def test_regression_losses():
    p = RNG.normal(size=(4, 5)).astype(np.float32) * 3
    t = RNG.normal(size=(4, 5)).astype(np.float32)
    e = p.astype(np.float64) - t
    np.testing.assert_allclose(_np(losses.squared_error(p, t)), e ** 2, rtol=1e-5)
    np.testing.assert_allclose(_np(losses.squared_error(p)), p.astype(np.float64) ** 2, rtol=1e-5)
    np.testing.assert_allclose(_np(losses.l2_loss(p, t)), 0.5 * e ** 2, rtol=1e-5)
    for delta in (1.0, 0.3):
        want = np.where(np.abs(e) <= delta, 0.5 * e ** 2, delta * (np.abs(e) - 0.5 * delta))
        np.testing.assert_allclose(_np(losses.huber_loss(p, t, delta=delta)), want, rtol=1e-5,
                                   atol=1e-6)
    np.testing.assert_allclose(_np(losses.log_cosh(p, t)), np.log(np.cosh(e)), rtol=1e-4, atol=1e-6)
    # far out, log cosh(e) = |e| - log 2 without overflowing
    big = np.array([-1000.0, 200.0, 1e30], np.float32)
    np.testing.assert_allclose(_np(losses.log_cosh(big)), np.abs(big.astype(np.float64)) - math.log(2),
                               rtol=1e-6)


def test_cosine_similarity_and_distance():
    a = RNG.normal(size=(3, 4)).astype(np.float32)
    b = RNG.normal(size=(3, 4)).astype(np.float32)
    want = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    np.testing.assert_allclose(_np(losses.cosine_similarity(a, b)), want, rtol=1e-5)
    np.testing.assert_allclose(_np(losses.cosine_distance(a, b)), 1 - want, rtol=1e-5, atol=1e-6)
    # epsilon clips the squared norms: a zero vector then gives 0, not NaN
    zero = np.zeros((1, 4), np.float32)
    assert np.isnan(_np(losses.cosine_similarity(zero, b[:1]))).all()
    np.testing.assert_allclose(_np(losses.cosine_similarity(zero, b[:1], epsilon=1e-12)), [0.0])
    mask = np.array([True, True, False, True])
    masked = (a * b * mask).sum(-1) / (np.linalg.norm(a * mask, axis=-1)
                                      * np.linalg.norm(b * mask, axis=-1))
    np.testing.assert_allclose(_np(losses.cosine_similarity(a, b, where=mask)), masked, rtol=1e-5)
    axis0 = (a * b).sum(0) / (np.linalg.norm(a, axis=0) * np.linalg.norm(b, axis=0))
    np.testing.assert_allclose(_np(losses.cosine_similarity(a, b, axis=0)), axis0, rtol=1e-5)


def test_sigmoid_binary_cross_entropy_is_finite_for_large_logits():
    logits = np.array([-1000.0, -30.0, -1.0, 0.0, 2.5, 30.0, 1000.0], np.float32)
    for labels in (np.zeros(7), np.ones(7), np.linspace(0, 1, 7)):
        labels = labels.astype(np.float32)
        x = logits.astype(np.float64)
        want = labels * np.logaddexp(0, -x) + (1 - labels) * np.logaddexp(0, x)
        got = _np(losses.sigmoid_binary_cross_entropy(logits, labels))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        grad = _np(functrans.grad(lambda z: jnp.sum(losses.sigmoid_binary_cross_entropy(z, labels)))(
            jnp.asarray(logits)))
        np.testing.assert_allclose(grad, special.expit(x) - labels, atol=1e-6)


def test_sigmoid_focal_loss():
    logits = np.array([-40.0, -3.0, -0.5, 0.0, 0.7, 4.0, 40.0], np.float32)
    x = logits.astype(np.float64)
    for labels in (np.zeros(7), np.ones(7), np.array([0.1, 0.3, 0.6, 0.9, 0.2, 0.8, 0.45])):
        y = labels.astype(np.float64)
        ce = y * np.logaddexp(0, -x) + (1 - y) * np.logaddexp(0, x)
        one_minus_pt = special.expit(x) * (1 - y) + special.expit(-x) * y
        for alpha, gamma in ((None, 2.0), (0.25, 2.0), (0.6, 0.5)):
            want = ce * one_minus_pt ** gamma
            if alpha is not None:
                want = want * (alpha * y + (1 - alpha) * (1 - y))
            got = _np(losses.sigmoid_focal_loss(logits, labels.astype(np.float32), alpha=alpha,
                                                gamma=gamma))
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-30)
        grad = _np(functrans.grad(lambda z: jnp.sum(losses.sigmoid_focal_loss(z, labels.astype(
            np.float32))))(jnp.asarray(logits)))
        assert np.all(np.isfinite(grad))


def test_hinge_and_perceptron_losses():
    out = np.array([2.0, 0.5, -0.3, -2.0], np.float32)
    targets = np.array([1.0, -1.0, 1.0, -1.0], np.float32)
    np.testing.assert_allclose(_np(losses.hinge_loss(out, targets)), np.maximum(0, 1 - out * targets))
    np.testing.assert_allclose(_np(losses.perceptron_loss(out, targets)), np.maximum(0, -out * targets))
    scores = RNG.normal(size=(5, 4)).astype(np.float32)
    labels = np.array([0, 3, 1, 1, 2])
    one_hot = np.eye(4)[labels]
    np.testing.assert_allclose(_np(losses.multiclass_hinge_loss(scores, labels)),
                               (scores + 1 - one_hot).max(-1) - (scores * one_hot).sum(-1), rtol=1e-6)
    np.testing.assert_allclose(_np(losses.multiclass_perceptron_loss(scores, labels)),
                               scores.max(-1) - (scores * one_hot).sum(-1), rtol=1e-6)


def test_softmax_cross_entropies_with_large_logits():
    logits = (RNG.normal(size=(4, 6)) * np.array([[1.0], [50.0], [1000.0], [1e4]])).astype(np.float32)
    int_labels = np.array([0, 5, 2, 3])
    one_hot = np.eye(6, dtype=np.float32)[int_labels]
    soft = special.softmax(RNG.normal(size=(4, 6)), axis=-1).astype(np.float32)
    log_p = _log_softmax(logits)
    for labels in (one_hot, soft):
        want = -(labels * log_p).sum(-1)
        np.testing.assert_allclose(_np(losses.softmax_cross_entropy(logits, labels)), want, rtol=1e-5)
        np.testing.assert_allclose(_np(losses.safe_softmax_cross_entropy(logits, labels)), want,
                                   rtol=1e-5)
    want = -log_p[np.arange(4), int_labels]
    got = _np(losses.softmax_cross_entropy_with_integer_labels(logits, int_labels))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.all(np.isfinite(got))
    # the class axis need not be last
    got_axis0 = _np(losses.softmax_cross_entropy_with_integer_labels(logits.T, int_labels, axis=0))
    np.testing.assert_allclose(got_axis0, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(losses.softmax_cross_entropy(logits.T, one_hot.T, axis=0)),
                               -(one_hot * log_p).sum(-1), rtol=1e-5)


def test_softmax_cross_entropy_masks():
    logits = RNG.normal(size=(3, 5)).astype(np.float32)
    mask = np.array([[1, 1, 0, 1, 0], [1, 1, 1, 1, 1], [0, 1, 1, 0, 1]], bool)
    labels = np.array([1, 4, 2])
    one_hot = np.eye(5, dtype=np.float32)[labels]
    want = []
    for row, m, lab in zip(logits, mask, labels):
        sub = _log_softmax(row[m])
        want.append(-sub[np.flatnonzero(m).tolist().index(lab)] if m[lab] else np.nan)
    want = np.array(want)
    ok = mask[np.arange(3), labels]
    got = _np(losses.softmax_cross_entropy_with_integer_labels(logits, labels, where=mask))
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-5)
    got_dense = _np(losses.softmax_cross_entropy(logits, one_hot, where=mask))
    np.testing.assert_allclose(got_dense[ok], want[ok], rtol=1e-5)
    # a per-example mask (one rank lower) switches whole examples off; those give 0
    example_mask = np.array([True, False, True])
    got = _np(losses.softmax_cross_entropy_with_integer_labels(logits, labels, where=example_mask))
    full = -_log_softmax(logits)[np.arange(3), labels]
    np.testing.assert_allclose(got, np.where(example_mask, full, 0.0), rtol=1e-5)


def test_softmax_cross_entropy_integer_labels_tuple_axis():
    logits = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    labels = np.array([1, 0, 5, 3])        # a flat index over axes (0, 1)
    flat = logits.transpose(2, 0, 1).reshape(4, 6)
    want = -_log_softmax(flat)[np.arange(4), labels]
    got = _np(losses.softmax_cross_entropy_with_integer_labels(logits, labels, axis=(0, 1)))
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_safe_softmax_cross_entropy_handles_minus_infinity():
    logits = np.array([[0.0, -np.inf, 1.0], [2.0, 0.5, -np.inf]], np.float32)
    labels = np.array([[0.3, 0.0, 0.7], [1.0, 0.0, 0.0]], np.float32)
    finite = np.where(np.isfinite(logits), logits, -1e30)
    want = -(labels * np.where(labels > 0, _log_softmax(finite), 0)).sum(-1)
    np.testing.assert_allclose(_np(losses.safe_softmax_cross_entropy(logits, labels)), want,
                               rtol=1e-6)
    assert np.isnan(_np(losses.softmax_cross_entropy(logits, labels))).all()   # 0 * -inf
    grad = _np(functrans.grad(lambda z: jnp.sum(losses.safe_softmax_cross_entropy(z, labels)))(
        jnp.asarray(logits)))
    want_grad = special.softmax(finite.astype(np.float64), axis=-1) - labels
    np.testing.assert_allclose(grad, want_grad, atol=1e-6)


def test_poly_loss_kl_divergences_and_label_smoothing():
    logits = RNG.normal(size=(3, 4)).astype(np.float32)
    labels = special.softmax(RNG.normal(size=(3, 4)), axis=-1).astype(np.float32)
    p = special.softmax(logits.astype(np.float64), axis=-1)
    ce = -(labels * np.log(p)).sum(-1)
    for eps in (2.0, -1.0):
        np.testing.assert_allclose(_np(losses.poly_loss_cross_entropy(logits, labels, epsilon=eps)),
                                   ce + eps * (labels * (1 - p)).sum(-1), rtol=1e-5)
    log_pred = _log_softmax(logits).astype(np.float32)
    targets = labels.copy()
    targets[0, 1] = 0.0                       # 0 log 0 = 0
    t64 = targets.astype(np.float64)
    kl = (t64 * (np.log(np.where(t64 > 0, t64, 1.0)) - log_pred)).sum(-1)
    np.testing.assert_allclose(_np(losses.kl_divergence(log_pred, targets)), kl, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(losses.kl_divergence_with_log_targets(log_pred, np.log(labels))),
                               (labels * (np.log(labels) - log_pred)).sum(-1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        _np(losses.generalized_kl_divergence(log_pred, 2 * targets)),
        (2 * t64 * (np.log(np.where(t64 > 0, 2 * t64, 1.0)) - log_pred)).sum(-1)
        + (np.exp(log_pred) - 2 * t64).sum(-1), rtol=1e-5, atol=1e-6)
    grad = _np(functrans.grad(lambda t: jnp.sum(losses.kl_divergence(log_pred, t)))(jnp.asarray(targets)))
    assert np.all(np.isfinite(grad))
    one_hot = np.eye(4, dtype=np.float32)[[0, 2, 3]]
    np.testing.assert_allclose(_np(losses.smooth_labels(one_hot, 0.1)), 0.9 * one_hot + 0.1 / 4,
                               rtol=1e-6)
    mask = np.array([True, True, False, True])
    np.testing.assert_allclose(_np(losses.smooth_labels(one_hot, 0.1, where=mask)),
                               0.9 * one_hot + 0.1 / 3, rtol=1e-6)


def test_losses_reject_integer_inputs_and_are_reexported():
    with pytest.raises(TypeError, match="floating"):
        losses.softmax_cross_entropy(np.array([[1, 2]]), np.array([[1.0, 0.0]]))
    with pytest.raises(TypeError, match="integers"):
        losses.softmax_cross_entropy_with_integer_labels(np.zeros((1, 2), np.float32),
                                                         np.array([0.0]))
    for name in ("l2_loss", "huber_loss", "softmax_cross_entropy", "sigmoid_focal_loss",
                 "smooth_labels", "safe_softmax_cross_entropy", "kl_divergence"):
        assert getattr(optim, name) is getattr(losses, name)
    assert not hasattr(optim, "poly_loss_cross_entropy")   # optax keeps it in losses only


GRAD_CASES = {
    "squared_error": (losses.squared_error, 2),
    "huber_loss": (lambda p, t: losses.huber_loss(p, t, delta=0.7), 2),
    "log_cosh": (losses.log_cosh, 2),
    "cosine_similarity": (losses.cosine_similarity, 2),
    "softmax_cross_entropy": (losses.softmax_cross_entropy, 2),
    "safe_softmax_cross_entropy": (losses.safe_softmax_cross_entropy, 2),
    "integer_labels": (lambda z: losses.softmax_cross_entropy_with_integer_labels(
        z, np.array([0, 3, 1])), 1),
    "masked_integer_labels": (lambda z: losses.softmax_cross_entropy_with_integer_labels(
        z, np.array([0, 3, 1]), where=np.array([[1, 0, 1, 1]] * 3, bool)), 1),
    "sigmoid_binary_cross_entropy": (losses.sigmoid_binary_cross_entropy, 2),
    "sigmoid_focal_loss": (lambda z: losses.sigmoid_focal_loss(
        z, np.array([[0.0, 1.0, 0.2, 0.8]] * 3), alpha=0.3), 1),
    "hinge_loss": (lambda z: losses.hinge_loss(z, np.array([[1.0, -1.0, 1.0, -1.0]] * 3)), 1),
    "kl_divergence": (lambda lp, t: losses.kl_divergence(lp, t + 1.5), 2),
    "poly_loss_cross_entropy": (losses.poly_loss_cross_entropy, 2),
    "smooth_labels": (lambda y: losses.smooth_labels(y, 0.2), 1),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_loss_gradients(name, x64):
    fn, arity = GRAD_CASES[name]
    rng = np.random.default_rng(5)
    args = [rng.uniform(0.2, 0.8, size=(3, 4)) * rng.choice([-1.0, 1.0], size=(3, 4))
            for _ in range(arity)]
    if name in ("softmax_cross_entropy", "safe_softmax_cross_entropy", "poly_loss_cross_entropy"):
        args[1] = np.abs(args[1])
    if name == "hinge_loss":
        args[0] = args[0] * 0.5          # stay off the kink at 1
    check_grads(fn, args, order=1, modes=("fwd", "rev"))
