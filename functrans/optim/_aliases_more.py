"""More optimizers, chained from the rescalings in ``_rescaling.py`` and the modifiers in
``_modifiers.py`` the same way ``_aliases.py`` builds Adam and friends.

    >>> import functrans, functrans.numpy as jnp
    >>> opt = adafactor(learning_rate=0.01)
    >>> params = {"w": jnp.ones((3, 4))}
    >>> state = opt.init(params)
    >>> grads = functrans.grad(lambda p: jnp.sum(p["w"] ** 2))(params)
    >>> updates, state = opt.update(grads, state, params)
"""
from __future__ import annotations

from functrans import _dtypes
from functrans.optim._base import GradientTransformation, chain
from functrans.optim._modifiers import add_noise, clip_by_block_rms, ema
from functrans.optim._rescaling import (scale_by_adadelta, scale_by_adamax, scale_by_amsgrad,
                                        scale_by_belief, scale_by_factored_rms,
                                        scale_by_novograd, scale_by_optimistic_gradient,
                                        scale_by_param_block_rms, scale_by_radam, scale_by_sm3,
                                        scale_by_yogi)
from functrans.optim._transforms import (add_decayed_weights, scale, scale_by_learning_rate,
                                         scale_by_trust_ratio)

__all__ = ["adafactor", "adamax", "adabelief", "radam", "yogi",
           "amsgrad", "adadelta", "novograd", "sm3", "noisy_sgd", "fromage",
           "optimistic_gradient_descent"]


def adafactor(learning_rate=None, min_dim_size_to_factor: int = 128, decay_rate=0.8,
              decay_offset=0, multiply_by_parameter_scale: bool = True,
              clipping_threshold=1.0, momentum=None, dtype_momentum=_dtypes.float32,
              weight_decay_rate=None, eps=1e-30, factored: bool = True,
              weight_decay_mask=None) -> GradientTransformation:
    """Adafactor (Shazeer & Stern, 2018): RMS scaling with factored second moments (a row
    and a column statistic for every >= 2-D leaf whose two largest axes have at least
    ``min_dim_size_to_factor`` entries), ``decay_rate`` setting the decay schedule
    ``1 - t^(-decay_rate)``, then in order:

    - ``clipping_threshold``: clip each leaf's update to that RMS (:func:`clip_by_block_rms`);
    - ``learning_rate``: multiply by it (a number or schedule; None: no scaling);
    - ``multiply_by_parameter_scale``: the paper's relative step, multiply by
      ``max(rms(p), 1e-3)`` (:func:`scale_by_param_block_rms`);
    - ``momentum``: an EMA of the updates (no bias correction) kept in
      ``dtype_momentum``;
    - ``weight_decay_rate``: add ``rate * p`` (limited by ``weight_decay_mask``);
    - and flip the sign. The paper's relative step-size schedule ``min(1e-2, 1/sqrt(t))``
      is ``learning_rate=lambda count: jnp.minimum(1e-2, 1 / jnp.sqrt(count + 1))``.
    """
    steps = [scale_by_factored_rms(factored, decay_rate, decay_offset, min_dim_size_to_factor,
                                   eps)]
    if clipping_threshold is not None:
        steps.append(clip_by_block_rms(clipping_threshold))
    if learning_rate is not None:
        steps.append(scale_by_learning_rate(learning_rate, flip_sign=False))
    if multiply_by_parameter_scale:
        steps.append(scale_by_param_block_rms())
    if momentum is not None:
        steps.append(ema(momentum, debias=False, accumulator_dtype=dtype_momentum))
    if weight_decay_rate is not None:
        steps.append(add_decayed_weights(weight_decay_rate, weight_decay_mask))
    # descent follows the negative of the rescaled gradient
    steps.append(scale(-1))
    return chain(*steps)


def adamax(learning_rate, b1=0.9, b2=0.999, eps=1e-8) -> GradientTransformation:
    """AdaMax (Kingma & Ba, 2015): ``p -= lr * m_hat / max(b2 u, |g| + eps)``; see
    :func:`scale_by_adamax`."""
    return chain(scale_by_adamax(b1, b2, eps), scale_by_learning_rate(learning_rate))


def adabelief(learning_rate, b1=0.9, b2=0.999, eps=1e-16, eps_root=1e-16, weight_decay=None,
              weight_decay_mask=None, *, nesterov: bool = False) -> GradientTransformation:
    """AdaBelief (Zhuang et al., 2020): Adam scaled by the belief ``(g - m)^2`` instead of
    ``g^2``; see :func:`scale_by_belief`. ``weight_decay`` (optional) is decoupled, applied
    before the learning rate. (The paper's defaults are ``eps=1e-8, eps_root=0``.)"""
    steps = [scale_by_belief(b1, b2, eps, eps_root, nesterov=nesterov)]
    if weight_decay is not None:
        steps.append(add_decayed_weights(weight_decay, weight_decay_mask))
    steps.append(scale_by_learning_rate(learning_rate))
    return chain(*steps)


def radam(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, threshold=5.0, *,
          nesterov: bool = False) -> GradientTransformation:
    """Rectified Adam (Liu et al., 2020): momentum SGD while the variance of the adaptive
    rate is intractable, rectified Adam afterwards; see :func:`scale_by_radam`."""
    return chain(scale_by_radam(b1, b2, eps, eps_root, threshold, nesterov=nesterov),
                 scale_by_learning_rate(learning_rate))


def yogi(learning_rate, b1=0.9, b2=0.999, eps=1e-3) -> GradientTransformation:
    """Yogi (Zaheer et al., 2018): Adam with an additive, sign-controlled second moment;
    see :func:`scale_by_yogi`."""
    return chain(scale_by_yogi(b1, b2, eps), scale_by_learning_rate(learning_rate))


def amsgrad(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, mu_dtype=None,
            bias_correction_mu: bool = True,
            bias_correction_nu: bool = True) -> GradientTransformation:
    """AMSGrad (Reddi et al., 2018): Adam with the running maximum of the second moment;
    see :func:`scale_by_amsgrad`."""
    return chain(scale_by_amsgrad(b1, b2, eps, eps_root, mu_dtype, bias_correction_mu,
                                  bias_correction_nu),
                 scale_by_learning_rate(learning_rate))


def adadelta(learning_rate=None, rho=0.9, eps=1e-6, weight_decay=0.0,
             weight_decay_mask=None) -> GradientTransformation:
    """AdaDelta (Zeiler, 2012): weight decay, then ``sqrt(E[dx^2] + eps) / sqrt(E[g^2] + eps)
    * g`` (:func:`scale_by_adadelta`), then ``p -= learning_rate * direction``.

    ``learning_rate=None`` is the paper's rule, a step of exactly one direction downhill
    (``learning_rate=1``). (optax skips the scaling for None, sign flip included, which
    would climb the loss; here None descends.)
    """
    return chain(add_decayed_weights(weight_decay, weight_decay_mask),
                 scale_by_adadelta(rho, eps),
                 scale_by_learning_rate(1.0 if learning_rate is None else learning_rate))


def novograd(learning_rate, b1=0.9, b2=0.25, eps=1e-6, eps_root=0.0,
             weight_decay=0.0) -> GradientTransformation:
    """NovoGrad (Ginsburg et al., 2019): per-leaf second moments of the gradient norm and
    weight decay inside the momentum; see :func:`scale_by_novograd`."""
    return chain(scale_by_novograd(b1, b2, eps, eps_root, weight_decay),
                 scale_by_learning_rate(learning_rate))


def sm3(learning_rate, momentum=0.9) -> GradientTransformation:
    """SM3 (Anil et al., 2019): memory-efficient Adagrad with one accumulator vector per
    axis; ``p -= learning_rate * direction``; see :func:`scale_by_sm3`."""
    return chain(scale_by_sm3(momentum), scale(-learning_rate))


def noisy_sgd(learning_rate, eta=0.01, gamma=0.55, key=None, *,
              seed: int | None = None) -> GradientTransformation:
    """SGD on gradients with annealed Gaussian noise of variance ``eta / t^gamma``
    (Neelakantan et al., 2015); ``key`` is a PRNG key or an int seed. See
    :func:`add_noise`."""
    return chain(add_noise(eta, gamma, key, seed=seed), scale_by_learning_rate(learning_rate))


def fromage(learning_rate, min_norm=1e-6) -> GradientTransformation:
    """Fromage (Bernstein et al., 2020): a trust-ratio step shrunk towards 0 by
    ``m = 1 / sqrt(1 + lr^2)``, i.e. ``p <- m * (p - lr * |p| / |g| * g)`` per leaf."""
    if not callable(learning_rate):
        shrink = 1 / (1 + learning_rate ** 2) ** 0.5
        return chain(scale_by_trust_ratio(min_norm),
                     scale_by_learning_rate(learning_rate * shrink),
                     add_decayed_weights(shrink - 1))

    def shrink_at(count):
        return 1 / (1 + learning_rate(count) ** 2) ** 0.5

    return chain(scale_by_trust_ratio(min_norm),
                 scale_by_learning_rate(lambda count: shrink_at(count) * learning_rate(count)),
                 add_decayed_weights(lambda count: shrink_at(count) - 1))


def optimistic_gradient_descent(learning_rate, alpha=1.0, beta=1.0) -> GradientTransformation:
    """Optimistic gradient descent (Mokhtari et al., 2019), for min-max games:
    ``p -= lr * ((alpha + beta) g_t - beta g_{t-1})``; see
    :func:`scale_by_optimistic_gradient`."""
    return chain(scale_by_optimistic_gradient(alpha, beta), scale_by_learning_rate(learning_rate))
