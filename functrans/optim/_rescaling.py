"""More adaptive rescalings: the ``scale_by_*`` building blocks of AdaMax, AdaBelief, RAdam,
Yogi, AMSGrad, AdaDelta, NovoGrad, SM3, Adan, Rprop, Polyak steps, DoG and optimistic
gradient descent, and the per-block parameter scales.

Each follows its published rule (the docstrings give the formula); ``g`` is the incoming
update, ``t`` the step count starting at 1. Hyperparameters may be numbers or scalar arrays
(as :func:`inject_hyperparams` passes them), so no rule branches in Python on a
hyperparameter's value.
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple

from functrans import lax
from functrans import numpy as jnp
from functrans.optim._base import EmptyState  # noqa: F401 (the docstring examples use it)
from functrans.optim._base import NO_PARAMS_MSG, GradientTransformation, \
    GradientTransformationExtraArgs, canonicalize_dtype, init_empty_state
from functrans.optim._numerics import abs_sq, safe_increment, safe_norm, \
    safe_root_mean_squares
from functrans.optim._transforms import ScaleByAdamState, _nesterov_mu_hat
from functrans.optim._tree_casting import tree_cast
from functrans.optim._tree_math import (tree_add_scale, tree_bias_correction, tree_div,
                                        tree_full_like, tree_norm, tree_scale, tree_sub,
                                        tree_update_infinity_moment, tree_update_moment,
                                        tree_update_moment_per_elem_norm, tree_where,
                                        tree_zeros_like)
from functrans.tree_util import tree_map

__all__ = [
    "ScaleByAmsgradState", "ScaleByBeliefState", "ScaleByAdaDeltaState", "ScaleByNovogradState",
    "ScaleBySM3State", "ScaleByOptimisticGradientState", "ScaleByAdanState",
    "ScaleByRpropState", "ScaleByDistanceOverGradientsState",
    "scale_by_adamax", "scale_by_amsgrad", "scale_by_belief", "scale_by_radam", "scale_by_yogi",
    "scale_by_adadelta", "scale_by_novograd", "scale_by_sm3", "scale_by_optimistic_gradient",
    "scale_by_adan", "scale_by_rprop", "scale_by_polyak", "scale_by_distance_over_gradients",
    "scale_by_param_block_norm", "scale_by_param_block_rms",
]


def _is_none(x) -> bool:
    return x is None


def _adam_like_step(mu_hat, nu_hat, eps, eps_root):
    """``m / (sqrt(v + eps_root) + eps)`` leafwise (None leaves stay None)."""
    return tree_map(lambda m, v: None if m is None else m / (jnp.sqrt(v + eps_root) + eps),
                    mu_hat, nu_hat, is_leaf=_is_none)


# =============================================================================================
# Adam's relatives
# =============================================================================================

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
    def init(params):
        return ScaleByAdamState(jnp.zeros([], jnp.int32), tree_zeros_like(params),
                                tree_zeros_like(params))

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
    def init(params):
        return ScaleByBeliefState(jnp.zeros([], jnp.int32), tree_zeros_like(params),
                                  tree_zeros_like(params))

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

    def init(params):
        return ScaleByAdamState(jnp.zeros([], jnp.int32), tree_zeros_like(params),
                                tree_zeros_like(params))

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


# =============================================================================================
# AdaDelta, NovoGrad, SM3, optimistic gradients
# =============================================================================================

class ScaleByAdaDeltaState(NamedTuple):
    """The state of :func:`scale_by_adadelta`: running means of ``g^2`` and ``update^2``."""
    e_g: Any
    e_x: Any


def scale_by_adadelta(rho=0.9, eps=1e-6) -> GradientTransformation:
    """AdaDelta's direction (Zeiler, 2012): the ratio of running RMS of past updates to the
    running RMS of gradients::

        E[g^2] = rho E[g^2] + (1 - rho) g^2
        update = sqrt(E[dx^2] + eps) / sqrt(E[g^2] + eps) * g
        E[dx^2] = rho E[dx^2] + (1 - rho) update^2

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_adadelta(rho=0.0, eps=1.0)
        >>> opt.update(jnp.array([0.0]), opt.init(jnp.zeros(1)))[0]
        Array([0.], dtype=float32)
    """
    def init(params):
        return ScaleByAdaDeltaState(tree_zeros_like(params), tree_zeros_like(params))

    def update(updates, state, params=None):
        del params
        e_g = tree_update_moment(updates, state.e_g, rho, 2)
        updates = tree_map(lambda g, eg, ex: jnp.sqrt(ex + eps) / jnp.sqrt(eg + eps) * g,
                           updates, e_g, state.e_x)
        e_x = tree_update_moment(updates, state.e_x, rho, 2)
        return updates, ScaleByAdaDeltaState(e_g, e_x)

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


class ScaleBySM3State(NamedTuple):
    """The state of :func:`scale_by_sm3`: per leaf, one accumulator vector per axis, and
    the momentum."""
    mu: Any
    nu: Any


def scale_by_sm3(b1=0.9, b2=1.0, eps=1e-8) -> GradientTransformation:
    """SM3's direction (Anil et al., 2019): Adagrad whose accumulator is covered by one
    vector per axis (memory ``sum(shape)`` instead of ``prod(shape)``)::

        a = c g^2 + b2 * min_i(mu_i broadcast)    (c = 1 if b2 == 1 else 1 - b2)
        mu_i = max of a over all axes but i;   u = g / sqrt(a + eps) (0 where a = 0)
        update = nu = b1 nu + (1 - b1) u

    For a 1-D leaf ``mu`` is the full accumulator. ``mu`` holds a list of vectors per leaf.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_sm3(b1=0.0, eps=0.0)
        >>> opt.update(jnp.array([-2.0, 0.0]), opt.init(jnp.zeros(2)))[0]
        Array([-1.,  0.], dtype=float32)
    """
    def covers(p):
        p = jnp.asarray(p)
        if p.ndim == 0:
            raise NotImplementedError("scale_by_sm3: 0-d parameters have no axis to cover "
                                      "(reshape them to shape (1,))")
        if jnp.iscomplexobj(p):
            raise ValueError("scale_by_sm3 does not support complex parameters")
        return [jnp.zeros((size,), p.dtype) for size in p.shape]

    def init(params):
        return ScaleBySM3State(tree_map(covers, params), tree_zeros_like(params))

    def accumulate(g, vectors):
        # the paper's plain sum when b2 == 1, an exponential average otherwise
        c = 1.0 - b2 if b2 != 1.0 else 1.0
        if g.ndim < 2:
            return c * g ** 2 + b2 * vectors[0]
        expanded = [jnp.reshape(v, [1] * i + [g.shape[i]] + [1] * (g.ndim - i - 1))
                    for i, v in enumerate(vectors)]
        return c * g ** 2 + b2 * functools.reduce(jnp.minimum, expanded)

    def new_covers(a):
        if a.ndim < 2:
            return [a]
        return [jnp.max(a, axis=[j for j in range(a.ndim) if j != i]) for i in range(a.ndim)]

    def update(updates, state, params=None):
        del params
        # state.mu extends the updates' structure by a list per leaf; tree_map hands it whole
        accums = tree_map(accumulate, updates, state.mu)
        inverse = tree_map(lambda t: jnp.where(t > 0, lax.rsqrt(t + eps), 0.0), accums)
        directions = tree_map(lambda g, a: g * a, updates, inverse)
        nu = tree_update_moment(directions, state.nu, b1, 1)
        return nu, ScaleBySM3State(tree_map(new_covers, accums), nu)

    return GradientTransformation(init, update)


class ScaleByOptimisticGradientState(NamedTuple):
    """The state of :func:`scale_by_optimistic_gradient`."""
    is_initial_step: Any
    previous_gradient: Any


def scale_by_optimistic_gradient(alpha=1.0, beta=1.0) -> GradientTransformation:
    """Optimistic gradients (Mokhtari et al., 2019)::

        update = (alpha + beta) g_t - beta g_{t-1}

    with ``g_0`` taken to be ``g_1`` on the first step (so the first update is ``alpha g``).

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_optimistic_gradient()
        >>> state = opt.init(jnp.zeros(1))
        >>> u1, state = opt.update(jnp.array([1.0]), state)
        >>> u2, state = opt.update(jnp.array([3.0]), state)
        >>> u1, u2
        (Array([1.], dtype=float32), Array([5.], dtype=float32))
    """
    def init(params):
        return ScaleByOptimisticGradientState(jnp.array(True), tree_zeros_like(params))

    def update(updates, state, params=None):
        del params

        def optimistic(g, previous):
            previous = jnp.where(state.is_initial_step, g, previous)
            return (alpha + beta) * g - beta * previous

        out = tree_map(optimistic, updates, state.previous_gradient)
        return out, ScaleByOptimisticGradientState(jnp.array(False), updates)

    return GradientTransformation(init, update)


# =============================================================================================
# Sign-based steps, Polyak steps, distance over gradients
# =============================================================================================

class ScaleByRpropState(NamedTuple):
    """The state of :func:`scale_by_rprop`: per-element step sizes and the last update."""
    step_sizes: Any
    prev_updates: Any


def scale_by_rprop(learning_rate, eta_minus=0.5, eta_plus=1.2, min_step_size=1e-6,
                   max_step_size=50.0) -> GradientTransformation:
    """Rprop's direction (Riedmiller & Braun, 1993): each element moves by its own step
    size in the direction of its gradient's sign. The step size grows by ``eta_plus``
    while the sign holds and shrinks by ``eta_minus`` when it flips (clipped to
    ``[min_step_size, max_step_size]``); after a flip that element pauses for one step.
    Step sizes start at ``learning_rate``. (Chain with ``scale(-1)`` to descend.)

    As in optax 0.2.8, the direction emitted at step ``t`` is the one computed at step
    ``t - 1`` (kept in ``prev_updates``), so the first update is zero.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_rprop(0.1)
        >>> state = opt.init(jnp.zeros(2))
        >>> u1, state = opt.update(jnp.array([-3.0, 2.0]), state)
        >>> u2, state = opt.update(jnp.array([-1.0, 2.0]), state)
        >>> u1, u2
        (Array([0., 0.], dtype=float32), Array([-0.1,  0.1], dtype=float32))
    """
    def init(params):
        return ScaleByRpropState(tree_full_like(params, learning_rate), tree_zeros_like(params))

    def update(updates, state, params=None):
        del params
        agreement = tree_map(lambda g, prev: g * prev, updates, state.prev_updates)
        step_sizes = tree_map(
            lambda s, size: jnp.where(s == 0, size, jnp.clip(
                size * jnp.where(s > 0, eta_plus, eta_minus), min_step_size, max_step_size)),
            agreement, state.step_sizes)
        prev_updates = tree_map(
            lambda s, g, size: jnp.where(s < 0, jnp.zeros_like(g), size * jnp.sign(g)),
            agreement, updates, step_sizes)
        updates = tree_map(lambda s, prev: jnp.where(s < 0, jnp.zeros_like(prev), prev),
                           agreement, state.prev_updates)
        return updates, ScaleByRpropState(step_sizes, prev_updates)

    return GradientTransformation(init, update)


def scale_by_polyak(f_min=0.0, max_learning_rate=1.0, eps=0.0, variant: str = "sps"
                    ) -> GradientTransformationExtraArgs:
    """Polyak's step size (Loizou et al., 2021): ``g * min((value - f_min) / (|g|^2 + eps),
    max_learning_rate)``, with the loss ``value`` passed to ``update``. ``variant="sps+"``
    clips a negative gap ``value - f_min`` to 0. (Chain with a negative scale to descend.)

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_polyak()
        >>> opt.update(jnp.array([2.0]), EmptyState(), value=jnp.array(1.0))[0]
        Array([0.5], dtype=float32)
    """
    if variant not in ("sps", "sps+"):
        raise ValueError(f"Invalid argument value for Polyak SGD: variant={variant!r}")

    def update(updates, state, params=None, *, value, **extra_args):
        del params, extra_args
        grad_sq_norm = tree_norm(updates, squared=True)
        gap = jnp.array(value - f_min).astype(grad_sq_norm.dtype)
        if variant == "sps+":
            gap = jnp.maximum(gap, 0.0)
        step = jnp.where(grad_sq_norm + eps <= jnp.finfo(float).eps, jnp.array(0.0),
                         jnp.minimum(gap / (grad_sq_norm + eps), max_learning_rate))
        return tree_scale(step, updates), state

    return GradientTransformationExtraArgs(init_empty_state, update)


class ScaleByDistanceOverGradientsState(NamedTuple):
    """The state of :func:`scale_by_distance_over_gradients`."""
    max_dist: Any
    grad_sum_of_squares: Any
    init_params: Any


def scale_by_distance_over_gradients(reps_rel=1e-6, eps=1e-8, param_dtype=jnp.float32,
                                     global_scale=1.0) -> GradientTransformation:
    """Distance over Gradients, layer-wise (DoG, Ivgi et al., 2023): per leaf the step
    size is ``global_scale * d / sqrt(G + eps)`` with ``d`` the largest distance from the
    initial parameters so far (at least ``reps_rel * (1 + |p_0|)``) and ``G`` the running
    sum of squared gradient norms. (Chain with a negative scale to descend.)

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_distance_over_gradients(reps_rel=0.5, eps=0.0)
        >>> p = jnp.array([3.0, 4.0])
        >>> opt.update(jnp.array([0.0, 2.0]), opt.init(p), p)[0]   # 3 / 2 * g
        Array([0., 3.], dtype=float32)
    """
    def l2(x, y=0.0):
        return jnp.sqrt(jnp.sum(jnp.square(x - y)))

    def init(params):
        return ScaleByDistanceOverGradientsState(
            tree_map(lambda x: reps_rel * (1 + l2(x)), params),
            tree_map(lambda x: jnp.zeros(1), params),
            tree_cast(params, param_dtype))

    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        max_dist = tree_map(lambda d, x, y: jnp.maximum(d, l2(x, y)), state.max_dist, params,
                            state.init_params)
        g_sos = tree_map(lambda s, g: s + jnp.sum(jnp.square(g)), state.grad_sum_of_squares,
                         updates)
        updates = tree_map(lambda g, d, s: global_scale * (d / jnp.sqrt(s + eps)) * g,
                           updates, max_dist, g_sos)
        return updates, ScaleByDistanceOverGradientsState(max_dist, g_sos, state.init_params)

    return GradientTransformation(init, update)


# =============================================================================================
# Per-block parameter scales
# =============================================================================================

def scale_by_param_block_norm(min_scale=1e-3) -> GradientTransformation:
    """Scale each leaf's update by ``max(|p|, min_scale)``, the L2 norm of its parameter.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_param_block_norm()
        >>> opt.update(jnp.ones(2), EmptyState(), jnp.array([3.0, 4.0]))[0]
        Array([5., 5.], dtype=float32)
    """
    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        return tree_map(lambda u, p: u * safe_norm(p, min_scale), updates, params), state
    return GradientTransformation(init_empty_state, update)


def scale_by_param_block_rms(min_scale=1e-3) -> GradientTransformation:
    """Scale each leaf's update by ``max(rms(p), min_scale)``, the root mean square of its
    parameter (Adafactor's relative step size).

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_param_block_rms()
        >>> opt.update(jnp.ones(2), EmptyState(), jnp.array([1.0, -1.0]))[0]
        Array([1., 1.], dtype=float32)
    """
    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        return tree_map(lambda u, p: u * safe_root_mean_squares(p, min_scale), updates,
                        params), state
    return GradientTransformation(init_empty_state, update)
