"""Optimizers: chains of the building blocks, following the published update rules.

Each returns a :class:`GradientTransformation`; ``learning_rate`` may be a number or a
schedule (a function of the step count).

    >>> import functrans, functrans.numpy as jnp
    >>> opt = adam(1e-3)
    >>> params = {"w": jnp.ones(2)}
    >>> state = opt.init(params)
    >>> grads = functrans.grad(lambda p: jnp.sum(p["w"] ** 2))(params)
    >>> updates, state = opt.update(grads, state, params)
    >>> params = apply_updates(params, updates)
"""
from __future__ import annotations

from functrans.optim._base import GradientTransformation, chain, identity
from functrans.optim._base import apply_updates  # noqa: F401 (the docstring example uses it)
from functrans.optim._transforms import (add_decayed_weights, scale_by_adam,
                                         scale_by_learning_rate, scale_by_lion, scale_by_rms,
                                         scale_by_rss, scale_by_stddev, scale_by_trust_ratio,
                                         trace)

__all__ = ["sgd", "momentum", "nesterov", "adam", "nadam", "adamw", "rmsprop", "adagrad",
           "lamb", "lion"]


def sgd(learning_rate, momentum=None, nesterov: bool = False,
        accumulator_dtype=None) -> GradientTransformation:
    """Stochastic gradient descent, optionally with (Nesterov) momentum:
    ``t = g + momentum * t; p -= lr * t`` (``p -= lr * (g + momentum * t)`` for Nesterov)."""
    return chain(
        trace(momentum, nesterov, accumulator_dtype) if momentum is not None else identity(),
        scale_by_learning_rate(learning_rate))


def momentum(learning_rate, momentum=0.9, nesterov: bool = False) -> GradientTransformation:  # noqa: F811
    """SGD with heavy-ball momentum (``sgd(learning_rate, momentum, nesterov)``)."""
    return sgd(learning_rate, momentum, nesterov)


def nesterov(learning_rate, momentum=0.9) -> GradientTransformation:  # noqa: F811
    """SGD with Nesterov momentum (``sgd(learning_rate, momentum, nesterov=True)``)."""
    return sgd(learning_rate, momentum, nesterov=True)


def adam(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, mu_dtype=None,
         *, nesterov: bool = False) -> GradientTransformation:  # noqa: F811
    """Adam (Kingma & Ba, 2015): ``p -= lr * m_hat / (sqrt(v_hat + eps_root) + eps)``; see
    :func:`scale_by_adam`."""
    return chain(scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
                 scale_by_learning_rate(learning_rate))


def nadam(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0,
          mu_dtype=None) -> GradientTransformation:
    """Adam with Nesterov momentum (Dozat, 2016)."""
    return adam(learning_rate, b1, b2, eps, eps_root, mu_dtype, nesterov=True)


def adamw(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, mu_dtype=None,
          weight_decay=1e-4, mask=None, *, nesterov: bool = False) -> GradientTransformation:  # noqa: F811
    """Adam with decoupled weight decay (Loshchilov & Hutter, 2019):
    ``p -= lr * (adam_direction + weight_decay * p)``; ``mask`` limits the decay."""
    return chain(scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
                 add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))


def rmsprop(learning_rate, decay=0.9, eps=1e-8, initial_scale=0.0, eps_in_sqrt: bool = True,
            centered: bool = False, momentum=None, nesterov: bool = False,  # noqa: F811
            bias_correction: bool = False) -> GradientTransformation:
    """RMSProp: ``p -= lr * g / sqrt(v + eps)`` with ``v`` the running mean of ``g^2``
    (``centered``: its variance), optionally followed by momentum."""
    if centered:
        scaling = scale_by_stddev(decay, eps, initial_scale, eps_in_sqrt)
    else:
        scaling = scale_by_rms(decay, eps, initial_scale, eps_in_sqrt, bias_correction)
    return chain(scaling, scale_by_learning_rate(learning_rate),
                 trace(momentum, nesterov) if momentum is not None else identity())


def adagrad(learning_rate, initial_accumulator_value=0.1, eps=1e-7) -> GradientTransformation:
    """Adagrad (Duchi et al., 2011): ``s += g^2; p -= lr * g / sqrt(s + eps)``."""
    return chain(scale_by_rss(initial_accumulator_value, eps),
                 scale_by_learning_rate(learning_rate))


def lamb(learning_rate, b1=0.9, b2=0.999, eps=1e-6, eps_root=0.0, weight_decay=0.0,
         mask=None) -> GradientTransformation:
    """LAMB (You et al., 2020): Adam's direction plus weight decay, rescaled per leaf by the
    trust ratio ``|p| / |direction|``."""
    return chain(scale_by_adam(b1, b2, eps, eps_root),
                 add_decayed_weights(weight_decay, mask),
                 scale_by_trust_ratio(),
                 scale_by_learning_rate(learning_rate))


def lion(learning_rate, b1=0.9, b2=0.99, mu_dtype=None, weight_decay=1e-3,
         mask=None) -> GradientTransformation:
    """Lion (Chen et al., 2023): ``p -= lr * (sign(b1 m + (1-b1) g) + weight_decay * p)``;
    ``m = b2 m + (1 - b2) g``."""
    return chain(scale_by_lion(b1, b2, mu_dtype),
                 add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))
