"""``optim.perturbations``: differentiable approximations of piecewise-constant functions
by averaging them over random perturbations of their input (Berthet et al., 2020), as
optax's ``optax.perturbations``.

    >>> import functrans, functrans.numpy as jnp
    >>> from functrans import random
    >>> from functrans.optim import perturbations
    >>> argmax_one_hot = lambda x: functrans.nn.one_hot(jnp.argmax(x), 3)
    >>> smooth = perturbations.make_perturbed_fun(argmax_one_hot, num_samples=200, sigma=0.5)
    >>> probs = smooth(random.PRNGKey(0), jnp.array([1.0, 2.0, 0.5]))
    >>> round(float(probs.sum()), 4), int(jnp.argmax(probs))
    (1.0, 1)
"""
from __future__ import annotations

from typing import Callable

from functrans import _api
from functrans import lax, random
from functrans import numpy as jnp
from functrans.optim._tree_math import tree_add_scale, tree_scale, tree_sum
from functrans.optim._tree_random import tree_random_like
from functrans.tree_util import tree_map

__all__ = ["Normal", "Gumbel", "make_perturbed_fun"]


class Normal:
    """Standard Gaussian noise: ``sample`` and the log density up to a constant."""

    def sample(self, key, sample_shape=(), dtype=float):
        return random.normal(key, sample_shape, dtype)

    def log_prob(self, inputs):
        return -0.5 * inputs ** 2


class Gumbel:
    """Standard Gumbel noise: ``sample`` and the log density."""

    def sample(self, key, sample_shape=(), dtype=float):
        return random.gumbel(key, sample_shape, dtype)

    def log_prob(self, inputs):
        return -inputs - jnp.exp(-inputs)


def _magicbox(x):
    """1 in value, with the derivative of ``exp(x)``: score-function gradients (DiCE)."""
    return jnp.exp(x - lax.stop_gradient(x))


def make_perturbed_fun(fun: Callable, num_samples: int = 1000, sigma=0.1, noise=Gumbel(),
                       use_baseline: bool = True) -> Callable:
    """``perturbed(key, x)``: the Monte-Carlo mean of ``fun(x + sigma * Z)`` over
    ``num_samples`` draws of ``noise``, whose gradient is the score-function estimate (so
    ``fun`` itself need not be differentiable); ``use_baseline`` subtracts ``fun(x)`` to
    reduce the variance.
    """
    def estimate(key, x):
        def one_sample(key, x, baseline):
            sample = tree_random_like(key, x, sampler=noise.sample)
            shifted = lax.stop_gradient(tree_map(lambda x, z: x + sigma * z, x, sample))
            sample = tree_map(lambda x, y: (y - x) / sigma, x, shifted)
            box = _magicbox(tree_sum(tree_map(noise.log_prob, sample)))
            out = tree_scale(box, fun(shifted))
            if use_baseline:
                out = tree_add_scale(out, 1 - box, baseline)
            return out

        baseline = fun(lax.stop_gradient(x)) if use_baseline else None
        out = _api.vmap(one_sample, in_axes=(0, None, None), out_axes=0)(
            random.split(key, num_samples), x, baseline)
        return tree_map(lambda x: jnp.mean(x, axis=0), out)

    return estimate
