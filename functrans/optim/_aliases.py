"""Optimizers: chains of the building blocks, following the published update rules.

Each returns a :class:`GradientTransformationExtraArgs`; ``learning_rate`` may be a number
or a schedule (a function of the step count).

    >>> import functrans, functrans.numpy as jnp
    >>> opt = adam(1e-3)
    >>> params = {"w": jnp.ones(2)}
    >>> state = opt.init(params)
    >>> grads = functrans.grad(lambda p: jnp.sum(p["w"] ** 2))(params)
    >>> updates, state = opt.update(grads, state, params)
    >>> params = apply_updates(params, updates)
"""
from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, Optional, Union

from functrans import numpy as jnp
from functrans.optim._adaptive_moments import (scale_by_adam, scale_by_adamax, scale_by_adan,
                                               scale_by_amsgrad, scale_by_belief,
                                               scale_by_novograd, scale_by_radam, scale_by_yogi)
from functrans.optim._adding import add_decayed_weights, add_noise
from functrans.optim._base import GradientTransformationExtraArgs, identity
from functrans.optim._clipping import clip_by_block_rms
from functrans.optim._combining import chain
from functrans.optim._factorized import scale_by_factored_rms, scale_by_sm3
from functrans.optim._masking import masked
from functrans.optim._momentum import ema, scale_by_optimistic_gradient, trace
from functrans.optim._scaling import (scale, scale_by_learning_rate, scale_by_param_block_rms,
                                      scale_by_trust_ratio)
from functrans.optim._second_moments import (scale_by_adadelta, scale_by_rms, scale_by_rss,
                                             scale_by_stddev)
from functrans.optim._sign_steps import scale_by_lion, scale_by_rprop, scale_by_sign
from functrans.optim._step_sizes import scale_by_polyak
from functrans.optim._update import apply_updates  # noqa: F401 (the docstring example uses it)

__all__ = ["MaskOrFn", "sgd", "momentum", "nesterov", "adam", "nadam", "adamw", "nadamw",
           "rmsprop", "adagrad", "lamb", "lars", "lion", "adafactor", "adamax", "adamaxw",
           "adabelief", "adan", "radam", "yogi", "amsgrad", "adadelta", "novograd", "sm3",
           "noisy_sgd", "fromage", "optimistic_gradient_descent", "optimistic_adam",
           "optimistic_adam_v2", "sign_sgd", "signum", "rprop", "polyak_sgd"]

MaskOrFn = Optional[Union[Any, Callable[[Any], Any]]]


def sgd(learning_rate, momentum=None, nesterov: bool = False,
        accumulator_dtype=None) -> GradientTransformationExtraArgs:
    """Stochastic gradient descent, optionally with (Nesterov) momentum:
    ``t = g + momentum * t; p -= lr * t`` (``p -= lr * (g + momentum * t)`` for Nesterov).

        >>> import functrans.numpy as jnp
        >>> opt = sgd(0.1)
        >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0]
        Array([-0.2], dtype=float32)
    """
    return chain(
        trace(momentum, nesterov, accumulator_dtype) if momentum is not None else identity(),
        scale_by_learning_rate(learning_rate))


def momentum(learning_rate, momentum=0.9, nesterov: bool = False  # noqa: F811
             ) -> GradientTransformationExtraArgs:
    """SGD with heavy-ball momentum (``sgd(learning_rate, momentum, nesterov)``)."""
    return sgd(learning_rate, momentum, nesterov)


def nesterov(learning_rate, momentum=0.9) -> GradientTransformationExtraArgs:  # noqa: F811
    """SGD with Nesterov momentum (``sgd(learning_rate, momentum, nesterov=True)``)."""
    return sgd(learning_rate, momentum, nesterov=True)


def adam(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, mu_dtype=None,
         *, nesterov: bool = False) -> GradientTransformationExtraArgs:  # noqa: F811
    """Adam (Kingma & Ba, 2015): ``p -= lr * m_hat / (sqrt(v_hat + eps_root) + eps)``; see
    :func:`scale_by_adam`.

        >>> import functrans.numpy as jnp
        >>> opt = adam(0.1)
        >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0]
        Array([-0.09999933], dtype=float32)
    """
    return chain(scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
                 scale_by_learning_rate(learning_rate))


nadam = functools.partial(adam, nesterov=True)
nadam.__doc__ = """NAdam (Dozat, 2016): :func:`adam` with Nesterov momentum,
``m_hat = b1 m / (1 - b1^(t+1)) + (1 - b1) g / (1 - b1^t)``."""


def adamw(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, mu_dtype=None,
          weight_decay=1e-4, mask=None, *, nesterov: bool = False  # noqa: F811
          ) -> GradientTransformationExtraArgs:
    """Adam with decoupled weight decay (Loshchilov & Hutter, 2019):
    ``p -= lr * (adam_direction + weight_decay * p)``; ``mask`` limits the decay.

        >>> import functrans.numpy as jnp
        >>> opt = adamw(0.1, weight_decay=0.5)
        >>> opt.update(jnp.array([0.0]), opt.init(jnp.ones(1)), jnp.ones(1))[0]
        Array([-0.05], dtype=float32)
    """
    return chain(scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
                 add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))


nadamw = functools.partial(adamw, nesterov=True)
nadamw.__doc__ = """NAdamW: :func:`adamw` with Nesterov momentum (see :func:`nadam`)."""


def rmsprop(learning_rate, decay=0.9, eps=1e-8, initial_scale=0.0, eps_in_sqrt: bool = True,
            centered: bool = False, momentum=None, nesterov: bool = False,  # noqa: F811
            bias_correction: bool = False) -> GradientTransformationExtraArgs:
    """RMSProp: ``p -= lr * g / sqrt(v + eps)`` with ``v`` the running mean of ``g^2``
    (``centered``: its variance), optionally followed by momentum.

        >>> import functrans.numpy as jnp
        >>> opt = rmsprop(0.1, decay=0.0, eps=0.0)
        >>> opt.update(jnp.array([-2.0]), opt.init(jnp.zeros(1)))[0]
        Array([0.1], dtype=float32)
    """
    if centered:
        scaling = scale_by_stddev(decay, eps, initial_scale, eps_in_sqrt, bias_correction)
    else:
        scaling = scale_by_rms(decay, eps, initial_scale, eps_in_sqrt, bias_correction)
    return chain(scaling, scale_by_learning_rate(learning_rate),
                 trace(momentum, nesterov) if momentum is not None else identity())


def adagrad(learning_rate, initial_accumulator_value=0.1, eps=1e-7
            ) -> GradientTransformationExtraArgs:
    """Adagrad (Duchi et al., 2011): ``s += g^2; p -= lr * g / sqrt(s + eps)``."""
    return chain(scale_by_rss(initial_accumulator_value, eps),
                 scale_by_learning_rate(learning_rate))


def lamb(learning_rate, b1=0.9, b2=0.999, eps=1e-6, eps_root=0.0, weight_decay=0.0,
         mask=None) -> GradientTransformationExtraArgs:
    """LAMB (You et al., 2020): Adam's direction plus weight decay, rescaled per leaf by the
    trust ratio ``|p| / |direction|``."""
    return chain(scale_by_adam(b1, b2, eps, eps_root),
                 add_decayed_weights(weight_decay, mask),
                 scale_by_trust_ratio(),
                 scale_by_learning_rate(learning_rate))


def lars(learning_rate, weight_decay=0.0, weight_decay_mask=True, trust_coefficient=0.001,
         eps=0.0, trust_ratio_mask=True, momentum=0.9, nesterov: bool = False  # noqa: F811
         ) -> GradientTransformationExtraArgs:
    """LARS (You et al., 2017): weight decay, then each leaf scaled by the trust ratio
    ``trust_coefficient * |p| / (|g| + eps)``, then the learning rate and (Nesterov)
    momentum. The masks limit the decay and the trust ratio to some leaves.

        >>> import functrans.numpy as jnp
        >>> opt = lars(0.1, trust_coefficient=1.0)
        >>> p = jnp.array([3.0, 4.0])
        >>> opt.update(jnp.array([0.3, 0.4]), opt.init(p), p)[0]
        Array([-0.3, -0.4], dtype=float32)
    """
    return chain(add_decayed_weights(weight_decay, mask=weight_decay_mask),
                 masked(scale_by_trust_ratio(trust_coefficient=trust_coefficient, eps=eps),
                        mask=trust_ratio_mask),
                 scale_by_learning_rate(learning_rate),
                 trace(decay=momentum, nesterov=nesterov))


def lion(learning_rate, b1=0.9, b2=0.99, mu_dtype=None, weight_decay=1e-3,
         mask=None) -> GradientTransformationExtraArgs:
    """Lion (Chen et al., 2023): ``p -= lr * (sign(b1 m + (1-b1) g) + weight_decay * p)``;
    ``m = b2 m + (1 - b2) g``."""
    return chain(scale_by_lion(b1, b2, mu_dtype),
                 add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))


def adafactor(learning_rate=None, min_dim_size_to_factor: int = 128, decay_rate=0.8,
              decay_offset=0, multiply_by_parameter_scale: bool = True,
              clipping_threshold=1.0, momentum=None, dtype_momentum=jnp.float32,  # noqa: F811
              weight_decay_rate=None, eps=1e-30, factored: bool = True,
              weight_decay_mask=None) -> GradientTransformationExtraArgs:
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

        >>> import functrans.numpy as jnp
        >>> opt = adafactor(learning_rate=0.01)
        >>> state = opt.init({"w": jnp.ones((3, 4))})
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
        steps.append(add_decayed_weights(weight_decay_rate, mask=weight_decay_mask))
    # descent follows the negative of the rescaled gradient
    steps.append(scale(-1))
    return chain(*steps)


def adamax(learning_rate, b1=0.9, b2=0.999, eps=1e-8) -> GradientTransformationExtraArgs:
    """AdaMax (Kingma & Ba, 2015): ``p -= lr * m_hat / max(b2 u, |g| + eps)``; see
    :func:`scale_by_adamax`."""
    return chain(scale_by_adamax(b1, b2, eps), scale_by_learning_rate(learning_rate))


def adamaxw(learning_rate, b1=0.9, b2=0.999, eps=1e-8, weight_decay=1e-4,
            mask=None) -> GradientTransformationExtraArgs:
    """AdaMax with decoupled weight decay: ``p -= lr * (adamax_direction + weight_decay * p)``.

        >>> import functrans.numpy as jnp
        >>> opt = adamaxw(0.1, weight_decay=0.5)
        >>> opt.update(jnp.array([0.0]), opt.init(jnp.ones(1)), jnp.ones(1))[0]
        Array([-0.05], dtype=float32)
    """
    return chain(scale_by_adamax(b1, b2, eps), add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))


def adabelief(learning_rate, b1=0.9, b2=0.999, eps=1e-16, eps_root=1e-16, weight_decay=None,
              weight_decay_mask=None, *, nesterov: bool = False  # noqa: F811
              ) -> GradientTransformationExtraArgs:
    """AdaBelief (Zhuang et al., 2020): Adam scaled by the belief ``(g - m)^2`` instead of
    ``g^2``; see :func:`scale_by_belief`. ``weight_decay`` (optional, not in optax) is
    decoupled, applied before the learning rate. (The paper's defaults are ``eps=1e-8,
    eps_root=0``.)"""
    steps = [scale_by_belief(b1, b2, eps, eps_root, nesterov=nesterov)]
    if weight_decay is not None:
        steps.append(add_decayed_weights(weight_decay, weight_decay_mask))
    steps.append(scale_by_learning_rate(learning_rate))
    return chain(*steps)


def adan(learning_rate, b1=0.98, b2=0.92, b3=0.99, eps=1e-8, eps_root=1e-8, weight_decay=0.0,
         mask=None) -> GradientTransformationExtraArgs:
    """Adan (Xie et al., 2022): Nesterov momentum from gradient differences
    (:func:`scale_by_adan`), decoupled weight decay, the learning rate.

        >>> import functrans.numpy as jnp
        >>> opt = adan(0.1, eps_root=0.0, eps=0.0)
        >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)), jnp.zeros(1))[0]
        Array([-0.10000005], dtype=float32)
    """
    return chain(scale_by_adan(b1, b2, b3, eps, eps_root),
                 add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))


def radam(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, threshold=5.0, *,
          nesterov: bool = False) -> GradientTransformationExtraArgs:  # noqa: F811
    """Rectified Adam (Liu et al., 2020): momentum SGD while the variance of the adaptive
    rate is intractable, rectified Adam afterwards; see :func:`scale_by_radam`."""
    return chain(scale_by_radam(b1, b2, eps, eps_root, threshold, nesterov=nesterov),
                 scale_by_learning_rate(learning_rate))


def yogi(learning_rate, b1=0.9, b2=0.999, eps=1e-3) -> GradientTransformationExtraArgs:
    """Yogi (Zaheer et al., 2018): Adam with an additive, sign-controlled second moment;
    see :func:`scale_by_yogi`."""
    return chain(scale_by_yogi(b1, b2, eps), scale_by_learning_rate(learning_rate))


def amsgrad(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, mu_dtype=None,
            bias_correction_mu: bool = True,
            bias_correction_nu: bool = True) -> GradientTransformationExtraArgs:
    """AMSGrad (Reddi et al., 2018): Adam with the running maximum of the second moment;
    see :func:`scale_by_amsgrad`."""
    return chain(scale_by_amsgrad(b1, b2, eps, eps_root, mu_dtype, bias_correction_mu,
                                  bias_correction_nu),
                 scale_by_learning_rate(learning_rate))


def adadelta(learning_rate=None, rho=0.9, eps=1e-6, weight_decay=0.0,
             weight_decay_mask=None) -> GradientTransformationExtraArgs:
    """AdaDelta (Zeiler, 2012): weight decay, then ``sqrt(E[dx^2] + eps) / sqrt(E[g^2] + eps)
    * g`` (:func:`scale_by_adadelta`), then ``-learning_rate`` times that.

    ``learning_rate=None`` skips the last scaling entirely, sign flip included (as in
    optax), so the update is the direction itself; pass ``learning_rate=1.0`` for the
    paper's unit step downhill.
    """
    return chain(add_decayed_weights(weight_decay, mask=weight_decay_mask),
                 scale_by_adadelta(rho, eps),
                 scale_by_learning_rate(learning_rate))


def novograd(learning_rate, b1=0.9, b2=0.25, eps=1e-6, eps_root=0.0,
             weight_decay=0.0) -> GradientTransformationExtraArgs:
    """NovoGrad (Ginsburg et al., 2019): per-leaf second moments of the gradient norm and
    weight decay inside the momentum; see :func:`scale_by_novograd`."""
    return chain(scale_by_novograd(b1, b2, eps, eps_root, weight_decay),
                 scale_by_learning_rate(learning_rate))


def sm3(learning_rate, momentum=0.9) -> GradientTransformationExtraArgs:  # noqa: F811
    """SM3 (Anil et al., 2019): memory-efficient Adagrad with one accumulator vector per
    axis; ``p -= learning_rate * direction``; see :func:`scale_by_sm3`."""
    return chain(scale_by_sm3(momentum), scale(-learning_rate))


def noisy_sgd(learning_rate, eta=0.01, gamma=0.55, key=None, *,
              seed: int | None = None) -> GradientTransformationExtraArgs:
    """SGD on gradients with annealed Gaussian noise of variance ``eta / t^gamma``
    (Neelakantan et al., 2015); ``key`` is a PRNG key or an int seed. See
    :func:`add_noise`."""
    return chain(add_noise(eta, gamma, key, seed=seed), scale_by_learning_rate(learning_rate))


def fromage(learning_rate, min_norm=1e-6) -> GradientTransformationExtraArgs:
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


def optimistic_gradient_descent(learning_rate, alpha=1.0, beta=1.0
                                ) -> GradientTransformationExtraArgs:
    """Optimistic gradient descent (Mokhtari et al., 2019), for min-max games:
    ``p -= lr * ((alpha + beta) g_t - beta g_{t-1})``; see
    :func:`scale_by_optimistic_gradient`."""
    return chain(scale_by_optimistic_gradient(alpha, beta),
                 scale_by_learning_rate(learning_rate))


def optimistic_adam(learning_rate, optimism=None, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0,
                    mu_dtype=None, *, nesterov: bool = True  # noqa: F811
                    ) -> GradientTransformationExtraArgs:
    """Optimistic Adam (Daskalakis et al., 2018), the older parametrisation (deprecated in
    favour of :func:`optimistic_adam_v2`): the Adam direction ``d`` becomes
    ``(learning_rate + optimism) d_t - optimism d_{t-1}`` and is subtracted without further
    scaling. ``optimism`` defaults to ``learning_rate``; schedules are not supported.
    """
    warnings.warn("`optimistic_adam` is deprecated, please use `optimistic_adam_v2` instead.",
                  category=DeprecationWarning, stacklevel=2)
    if callable(learning_rate):
        raise ValueError("This version of `optimistic_adam` does not support learning rate "
                         "schedules but `optimistic_adam_v2` does.")
    if optimism is None:
        optimism = learning_rate
    return chain(scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
                 scale_by_optimistic_gradient(alpha=learning_rate, beta=optimism),
                 scale_by_learning_rate(1.0))


def optimistic_adam_v2(learning_rate, *, alpha=1.0, beta=1.0, b1=0.9, b2=0.999, eps=1e-8,
                       eps_root=0.0, mu_dtype=None, nesterov: bool = True  # noqa: F811
                       ) -> GradientTransformationExtraArgs:
    """Optimistic Adam (Daskalakis et al., 2018), for min-max games: the Adam (by default
    NAdam) direction ``d`` goes through optimistic extrapolation
    ``(alpha + beta) d_t - beta d_{t-1}``, then ``p -= learning_rate * that``.

        >>> import functrans.numpy as jnp
        >>> opt = optimistic_adam_v2(0.1, nesterov=False)
        >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0]
        Array([-0.09999933], dtype=float32)
    """
    return chain(scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
                 scale_by_optimistic_gradient(alpha=alpha, beta=beta),
                 scale_by_learning_rate(learning_rate))


def sign_sgd(learning_rate) -> GradientTransformationExtraArgs:
    """signSGD (Bernstein et al., 2018): ``p -= lr * sign(g)``.

        >>> import functrans.numpy as jnp
        >>> opt = sign_sgd(0.1)
        >>> opt.update(jnp.array([-3.0, 2.0]), opt.init(jnp.zeros(2)))[0]
        Array([ 0.1, -0.1], dtype=float32)
    """
    return chain(scale_by_sign(), scale_by_learning_rate(learning_rate))


def signum(learning_rate, beta=0.9, accumulator_dtype=None) -> GradientTransformationExtraArgs:
    """Signum (Bernstein et al., 2018): ``m = beta m + (1 - beta) g; p -= lr * sign(m)``.

        >>> import functrans.numpy as jnp
        >>> opt = signum(0.1)
        >>> opt.update(jnp.array([-3.0, 2.0]), opt.init(jnp.zeros(2)))[0]
        Array([ 0.1, -0.1], dtype=float32)
    """
    return chain(ema(beta, debias=False, accumulator_dtype=accumulator_dtype), scale_by_sign(),
                 scale_by_learning_rate(learning_rate))


def rprop(learning_rate, eta_minus=0.5, eta_plus=1.2, min_step_size=1e-6, max_step_size=50.0
          ) -> GradientTransformationExtraArgs:
    """Rprop (Riedmiller & Braun, 1993): per-element step sizes adapted by the sign of the
    gradient (see :func:`scale_by_rprop`, whose steps lag by one, as in optax);
    ``learning_rate`` is the initial step size.

        >>> import functrans.numpy as jnp
        >>> opt = rprop(0.1)
        >>> state = opt.init(jnp.zeros(2))
        >>> _, state = opt.update(jnp.array([-3.0, 2.0]), state)
        >>> opt.update(jnp.array([-3.0, 2.0]), state)[0]
        Array([ 0.1, -0.1], dtype=float32)
    """
    return chain(scale_by_rprop(learning_rate, eta_minus, eta_plus, min_step_size,
                                max_step_size),
                 scale(-1.0))


def polyak_sgd(max_learning_rate=1.0, scaling=1.0, f_min=0.0, eps=0.0, variant: str = "sps"
               ) -> GradientTransformationExtraArgs:
    """SGD with Polyak step sizes (Loizou et al., 2021): ``p -= scaling * min((f(p) - f_min)
    / (|g|^2 + eps), max_learning_rate) * g``; pass the loss as ``update(..., value=f(p))``.
    ``variant="sps+"`` clips negative gaps to 0.

        >>> import functrans.numpy as jnp
        >>> opt = polyak_sgd()
        >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)), value=jnp.array(1.0))[0]
        Array([-0.5], dtype=float32)
    """
    return chain(sgd(learning_rate=scaling),
                 scale_by_polyak(max_learning_rate=max_learning_rate, f_min=f_min, eps=eps,
                                 variant=variant))
