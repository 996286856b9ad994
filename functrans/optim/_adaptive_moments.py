"""Adaptive moment estimation: the ``scale_by_*`` directions that divide a running mean of
the gradient (its first moment) by the root of a running second moment, as Adam does —
Adam and NAdam, AdaMax, AMSGrad, AdaBelief, RAdam, Yogi, Adan and NovoGrad.

Scalings by the second moment alone (RMSProp, Adagrad, AdaDelta) are in
:mod:`functrans.optim._second_moments`. Each rule follows its publication (the docstrings
give the formula); ``g`` is the incoming update, ``t`` the step count starting at 1, and a
hat marks a moment divided by ``1 - b^t`` (bias correction). Hyperparameters may be numbers
or scalar arrays (as :func:`inject_hyperparams` passes them), so no rule branches in Python
on a hyperparameter's value.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from functrans import numpy as jnp
from functrans.optim._base import NO_PARAMS_MSG, GradientTransformation, canonicalize_dtype
from functrans.optim._numerics import abs_sq, safe_increment
from functrans.optim._tree_casting import tree_cast, tree_cast_like
from functrans.optim._tree_math import (tree_add_scale, tree_bias_correction, tree_div,
                                        tree_full_like, tree_sub, tree_update_infinity_moment,
                                        tree_update_moment, tree_update_moment_per_elem_norm,
                                        tree_where, tree_zeros_like)
from functrans.tree_util import tree_map

__all__ = ["ScaleByAdamState", "scale_by_adam", "scale_by_adamax", "ScaleByAmsgradState",
           "scale_by_amsgrad", "ScaleByBeliefState", "scale_by_belief", "scale_by_radam",
           "scale_by_yogi", "ScaleByAdanState", "scale_by_adan", "ScaleByNovogradState",
           "scale_by_novograd"]


def _is_none(x) -> bool:
    return x is None


def _adam_like_step(mu_hat, nu_hat, eps, eps_root):
    """``m / (sqrt(v + eps_root) + eps)`` leafwise (None leaves stay None)."""
    return tree_map(lambda m, v: None if m is None else m / (jnp.sqrt(v + eps_root) + eps),
                    mu_hat, nu_hat, is_leaf=_is_none)


def _nesterov_mu_hat(mu, updates, b1, count):
    """NAdam's look-ahead first moment ``b1 m/(1-b1^(t+1)) + (1-b1) g/(1-b1^t)``."""
    return tree_map(lambda m, g: b1 * m + (1 - b1) * g,
                    tree_bias_correction(mu, b1, safe_increment(count)),
                    tree_bias_correction(updates, b1, count))


# =============================================================================================
# Adam and its close variants: AdaMax, AMSGrad, AdaBelief, RAdam, Yogi
# =============================================================================================

def zero_moments(state_type, mu_dtype=None):
    """The ``init`` of a transformation whose state is ``state_type(count, mu, nu)``: a zero
    int32 step count and two moments of zeros shaped like the parameters (``mu`` in
    ``mu_dtype`` when it is given)."""
    def init(params):
        return state_type(jnp.zeros([], jnp.int32), tree_zeros_like(params, dtype=mu_dtype),
                          tree_zeros_like(params))

    return init


class ScaleByAdamState(NamedTuple):
    """The state of :func:`scale_by_adam` (and of AdaMax, RAdam, Yogi): the step count and
    the first and second moments."""
    count: Any
    mu: Any
    nu: Any


def scale_by_adam(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, mu_dtype=None,
                  *, nesterov: bool = False) -> GradientTransformation:
    """Adam's direction (Kingma & Ba, 2015)::

        m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
        m_hat = m / (1 - b1^t);  v_hat = v / (1 - b2^t)
        update = m_hat / (sqrt(v_hat + eps_root) + eps)

    With ``nesterov=True`` (NAdam), ``m_hat = b1 m / (1 - b1^(t+1)) + (1 - b1) g / (1 - b1^t)``.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_adam()
        >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0]  # ~ sign(g) at step 1
        Array([0.9999933], dtype=float32)
    """
    mu_dtype = canonicalize_dtype(mu_dtype)

    init = zero_moments(ScaleByAdamState, mu_dtype)

    def update(updates, state, params=None):
        del params
        mu = tree_update_moment(updates, state.mu, b1, 1)
        nu = tree_update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count = safe_increment(state.count)
        mu_hat = (_nesterov_mu_hat(mu, updates, b1, count) if nesterov
                  else tree_bias_correction(mu, b1, count))
        nu_hat = tree_bias_correction(nu, b2, count)
        updates = _adam_like_step(mu_hat, nu_hat, eps, eps_root)
        return updates, ScaleByAdamState(count, tree_cast(mu, mu_dtype),
                                         tree_cast_like(nu, state.nu))

    return GradientTransformation(init, update)


def scale_by_adamax(b1=0.9, b2=0.999, eps=1e-8) -> GradientTransformation:
    """AdaMax's direction (Kingma & Ba, 2015, section 7): Adam with the infinity norm::

        m = b1 m + (1 - b1) g;   u = max(b2 u, |g| + eps)
        update = (m / (1 - b1^t)) / u

    The state is a :class:`ScaleByAdamState` with ``nu`` holding ``u``.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_adamax()
        >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0]  # ~ sign(g) at step 1
        Array([0.99999976], dtype=float32)
    """
    init = zero_moments(ScaleByAdamState)

    def update(updates, state, params=None):
        del params
        count = safe_increment(state.count)
        mu = tree_update_moment(updates, state.mu, b1, 1)
        nu = tree_update_infinity_moment(updates, state.nu, b2, eps)
        mu_hat = tree_bias_correction(mu, b1, count)
        return tree_map(lambda m, v: m / v, mu_hat, nu), ScaleByAdamState(count, mu, nu)

    return GradientTransformation(init, update)


class ScaleByAmsgradState(NamedTuple):
    """The state of :func:`scale_by_amsgrad`."""
    count: Any
    mu: Any
    nu: Any
    nu_max: Any


def scale_by_amsgrad(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, mu_dtype=None,
                     bias_correction_mu: bool = True,
                     bias_correction_nu: bool = True) -> GradientTransformation:
    """AMSGrad's direction (Reddi et al., 2018): Adam divided by the running maximum of the
    (bias-corrected) second moment::

        v_max = max(v_max, v / (1 - b2^t));   update = m_hat / (sqrt(v_max + eps_root) + eps)

    ``bias_correction_mu`` / ``bias_correction_nu`` False drop the corrections (the paper's
    original form).

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_amsgrad()
        >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0]
        Array([0.9999933], dtype=float32)
    """
    mu_dtype = canonicalize_dtype(mu_dtype)

    def init(params):
        return ScaleByAmsgradState(jnp.zeros([], jnp.int32),
                                   tree_zeros_like(params, dtype=mu_dtype),
                                   tree_zeros_like(params), tree_zeros_like(params))

    def update(updates, state, params=None):
        del params
        mu = tree_update_moment(updates, state.mu, b1, 1)
        nu = tree_update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count = safe_increment(state.count)
        mu_hat = tree_bias_correction(mu, b1, count) if bias_correction_mu else mu
        nu_eff = tree_bias_correction(nu, b2, count) if bias_correction_nu else nu
        nu_max = tree_map(jnp.maximum, state.nu_max, nu_eff)
        updates = _adam_like_step(mu_hat, nu_max, eps, eps_root)
        return updates, ScaleByAmsgradState(count, tree_cast(mu, mu_dtype), nu, nu_max)

    return GradientTransformation(init, update)


class ScaleByBeliefState(NamedTuple):
    """The state of :func:`scale_by_belief`."""
    count: Any
    mu: Any
    nu: Any


def scale_by_belief(b1=0.9, b2=0.999, eps=1e-16, eps_root=1e-16, *,
                    nesterov: bool = False) -> GradientTransformation:
    """AdaBelief's direction (Zhuang et al., 2020): Adam with the second moment taken of the
    prediction error ``g - m`` instead of ``g``::

        m = b1 m + (1 - b1) g;   s = b2 s + (1 - b2) (g - m)^2 + eps_root
        update = m_hat / (sqrt(s_hat) + eps)      (hats: divided by 1 - b^t)

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_belief()
        >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0]  # 2 / sqrt((2 - 0.2)^2)
        Array([1.1111037], dtype=float32)
    """
    init = zero_moments(ScaleByBeliefState)

    def update(updates, state, params=None):
        del params
        mu = tree_update_moment(updates, state.mu, b1, 1)
        # the belief is measured against the freshly updated average, as in the paper
        errors = tree_sub(updates, mu)
        nu = tree_map(lambda v: v + eps_root,
                      tree_update_moment_per_elem_norm(errors, state.nu, b2, 2))
        count = safe_increment(state.count)
        mu_hat = (_nesterov_mu_hat(mu, updates, b1, count) if nesterov
                  else tree_bias_correction(mu, b1, count))
        nu_hat = tree_bias_correction(nu, b2, count)
        updates = tree_map(lambda m, v: None if m is None else m / (jnp.sqrt(v) + eps),
                           mu_hat, nu_hat, is_leaf=_is_none)
        return updates, ScaleByBeliefState(count, mu, nu)

    return GradientTransformation(init, update)


def scale_by_radam(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, threshold=5.0, *,
                   nesterov: bool = False) -> GradientTransformation:
    """Rectified Adam's direction (Liu et al., 2020). With ``rho_inf = 2/(1-b2) - 1`` and
    ``rho_t = rho_inf - 2 t b2^t / (1 - b2^t)``::

        update = r_t m_hat / (sqrt(v_hat + eps_root) + eps)     if rho_t >= threshold
        update = m_hat                                          otherwise (plain momentum)
        r_t = sqrt((rho_t-4)(rho_t-2) rho_inf / ((rho_inf-4)(rho_inf-2) rho_t))

    The state is a :class:`ScaleByAdamState`.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_radam()
        >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0]  # early: momentum only
        Array([1.9999995], dtype=float32)
    """
    rho_inf = 2.0 / (1.0 - b2) - 1.0

    init = zero_moments(ScaleByAdamState)

    def update(updates, state, params=None):
        del params
        mu = tree_update_moment(updates, state.mu, b1, 1)
        nu = tree_update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count = safe_increment(state.count)
        b2t = b2 ** count
        rho = rho_inf - 2 * count * b2t / (1 - b2t)
        mu_hat = (_nesterov_mu_hat(mu, updates, b1, count) if nesterov
                  else tree_bias_correction(mu, b1, count))
        nu_hat = tree_bias_correction(nu, b2, count)
        # r is NaN while rho < 4; the where below never takes it there
        r = jnp.sqrt((rho - 4.0) * (rho - 2.0) * rho_inf
                     / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho))
        rectified = tree_map(lambda m, v: r.astype(m.dtype) * m / (jnp.sqrt(v + eps_root) + eps),
                             mu_hat, nu_hat)
        updates = tree_map(lambda t, f: jnp.where(rho >= threshold, t, f), rectified, mu_hat)
        return updates, ScaleByAdamState(count, mu, nu)

    return GradientTransformation(init, update)


def scale_by_yogi(b1=0.9, b2=0.999, eps=1e-3, eps_root=0.0,
                  initial_accumulator_value=1e-6) -> GradientTransformation:
    """Yogi's direction (Zaheer et al., 2018): Adam with an additive second-moment update
    that cannot grow the effective learning rate too fast::

        m = b1 m + (1 - b1) g;   v = v - (1 - b2) sign(v - g^2) g^2
        update = m_hat / (sqrt(v_hat + eps_root) + eps)

    Both moments start at ``initial_accumulator_value``; the state is a
    :class:`ScaleByAdamState`.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_yogi(eps=0.0, initial_accumulator_value=0.0)
        >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0]  # ~ sign(g) at step 1
        Array([0.9999933], dtype=float32)
    """
    def init(params):
        return ScaleByAdamState(jnp.zeros([], jnp.int32),
                                tree_full_like(params, initial_accumulator_value),
                                tree_full_like(params, initial_accumulator_value))

    def update(updates, state, params=None):
        del params
        mu = tree_update_moment(updates, state.mu, b1, 1)
        nu = tree_map(lambda g, v: v - (1 - b2) * jnp.sign(v - abs_sq(g)) * abs_sq(g),
                      updates, state.nu)
        count = safe_increment(state.count)
        mu_hat = tree_bias_correction(mu, b1, count)
        nu_hat = tree_bias_correction(nu, b2, count)
        return _adam_like_step(mu_hat, nu_hat, eps, eps_root), ScaleByAdamState(count, mu, nu)

    return GradientTransformation(init, update)


# =============================================================================================
# Moments of gradient differences (Adan) and of layer norms (NovoGrad)
# =============================================================================================

class ScaleByAdanState(NamedTuple):
    """The state of :func:`scale_by_adan`: the three moments, the last gradient and the
    step count."""
    m: Any
    v: Any
    n: Any
    g: Any
    t: Any


def scale_by_adan(b1=0.98, b2=0.92, b3=0.99, eps=1e-8, eps_root=0.0) -> GradientTransformation:
    """Adan's direction (Xie et al., 2022): Nesterov momentum estimated from gradient
    differences ``d = g_t - g_{t-1}`` (0 at the first step)::

        m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) d
        n = b3 n + (1 - b3) (g + (1 - b2) d)^2
        update = (m_hat + (1 - b2) v_hat) / (sqrt(n_hat + eps_root) + eps)

    (hats: divided by ``1 - b^t``.)

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_adan(eps=0.0)
        >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0]
        Array([1.0000005], dtype=float32)
    """
    def init(params):
        return ScaleByAdanState(tree_zeros_like(params), tree_zeros_like(params),
                                tree_zeros_like(params), tree_zeros_like(params),
                                jnp.zeros([], jnp.int32))

    def update(updates, state, params=None):
        del params
        g = updates
        diff = tree_where(state.t == 0, tree_zeros_like(g), tree_sub(g, state.g))
        m = tree_update_moment(g, state.m, b1, 1)
        v = tree_update_moment(diff, state.v, b2, 1)
        n = tree_update_moment_per_elem_norm(tree_add_scale(g, 1 - b2, diff), state.n, b3, 2)
        t = safe_increment(state.t)
        m_hat = tree_bias_correction(m, b1, t)
        v_hat = tree_bias_correction(v, b2, t)
        n_hat = tree_bias_correction(n, b3, t)
        direction = tree_add_scale(m_hat, 1 - b2, v_hat)
        denominator = tree_map(lambda x: jnp.sqrt(x + eps_root) + eps, n_hat)
        return tree_div(direction, denominator), ScaleByAdanState(m, v, n, g, t)

    return GradientTransformation(init, update)


class ScaleByNovogradState(NamedTuple):
    """The state of :func:`scale_by_novograd`: the step count, the momentum and one
    second-moment scalar per leaf."""
    count: Any
    mu: Any
    nu: Any


def scale_by_novograd(b1=0.9, b2=0.25, eps=1e-8, eps_root=0.0, weight_decay=0.0,
                      mu_dtype=None) -> GradientTransformation:
    """NovoGrad's direction (Ginsburg et al., 2019): layer-wise second moments of the
    gradient norm, weight decay inside the momentum::

        v = |g|^2 at t = 1, else b2 v + (1 - b2) |g|^2          (one scalar per leaf)
        m = b1 m + g / (sqrt(v + eps_root) + eps) + weight_decay * p   (m = that step at t = 1)
        update = m

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_novograd(eps=0.0)
        >>> opt.update(jnp.array([3.0, 4.0]), opt.init(jnp.zeros(2)), jnp.zeros(2))[0]
        Array([0.6, 0.8], dtype=float32)
    """
    mu_dtype = canonicalize_dtype(mu_dtype)

    def init(params):
        return ScaleByNovogradState(jnp.zeros([], jnp.int32),
                                    tree_zeros_like(params, dtype=mu_dtype),
                                    tree_map(lambda p: jnp.asarray(0.0, dtype=p.dtype), params))

    def norm_squared(g):
        return jnp.linalg.norm(g) ** 2

    def step(g, p, v):
        return g / (jnp.sqrt(v + eps_root) + eps) + weight_decay * p

    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        count = safe_increment(state.count)
        first = count == 1
        nu = tree_map(lambda g, v: jnp.where(first, norm_squared(g).astype(v.dtype),
                                             (1 - b2) * norm_squared(g) + b2 * v),
                      updates, state.nu)
        mu = tree_map(lambda g, p, m, v: jnp.where(first, step(g, p, v), b1 * m + step(g, p, v)),
                      updates, params, state.mu, nu)
        mu = tree_cast(mu, mu_dtype)
        return mu, ScaleByNovogradState(count, mu, nu)

    return GradientTransformation(init, update)
