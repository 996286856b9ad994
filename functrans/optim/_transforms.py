"""Building blocks: the scalings that the common optimizers chain together (Adam, RMSProp,
Adagrad, Lion, trust ratios, signs, learning rates).

Each follows its published rule; the docstrings give the formula. ``g`` is the incoming
update (a gradient), ``t`` the step count starting at 1.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from functrans import lax
from functrans import numpy as jnp
from functrans.optim._base import NO_PARAMS_MSG, EmptyState, GradientTransformation, \
    canonicalize_dtype, identity, init_empty_state
from functrans.optim._numerics import abs_sq, safe_increment, safe_norm
from functrans.optim._tree_casting import tree_cast, tree_cast_like
from functrans.optim._tree_math import (tree_bias_correction, tree_full_like, tree_mul,
                                        tree_norm, tree_update_moment,
                                        tree_update_moment_per_elem_norm, tree_zeros_like)
from functrans.tree_util import tree_map

__all__ = [
    "ScaleByScheduleState", "ScaleByAdamState", "ScaleByRmsState", "ScaleByRmsWithCountState",
    "ScaleByRStdDevState", "ScaleByRStdDevWithCountState", "ScaleByRssState",
    "ScaleByLionState",
    "scale", "scale_by_schedule", "scale_by_learning_rate", "scale_by_adam", "scale_by_rms",
    "scale_by_stddev", "scale_by_rss", "scale_by_lion", "scale_by_trust_ratio",
    "scale_by_sign", "normalize_by_update_norm", "centralize",
]


def _is_none(x) -> bool:
    return x is None


def _nesterov_mu_hat(mu, updates, b1, count):
    """NAdam's look-ahead first moment ``b1 m/(1-b1^(t+1)) + (1-b1) g/(1-b1^t)``."""
    return tree_map(lambda m, g: b1 * m + (1 - b1) * g,
                    tree_bias_correction(mu, b1, safe_increment(count)),
                    tree_bias_correction(updates, b1, count))


# =============================================================================================
# Fixed and scheduled scales
# =============================================================================================

def scale(step_size) -> GradientTransformation:
    """``step_size * g``.

        >>> import functrans.numpy as jnp
        >>> scale(2.0).update(jnp.ones(1), EmptyState())[0]
        Array([2.], dtype=float32)
    """
    def update(updates, state, params=None):
        del params
        return tree_map(lambda g: step_size * g, updates), state
    return GradientTransformation(init_empty_state, update)


class ScaleByScheduleState(NamedTuple):
    """The state of :func:`scale_by_schedule`: the number of updates done so far."""
    count: Any


def scale_by_schedule(step_size_fn: Callable) -> GradientTransformation:
    """``step_size_fn(count) * g`` with ``count`` the number of updates done so far (from 0).

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_schedule(lambda count: 1.0 / (count + 1))
        >>> opt.update(jnp.ones(1), opt.init(jnp.ones(1)))[0]
        Array([1.], dtype=float32)
    """
    def init(params):
        del params
        return ScaleByScheduleState(jnp.zeros([], jnp.int32))

    def update(updates, state, params=None):
        del params
        step_size = step_size_fn(state.count)
        updates = tree_map(lambda g: jnp.array(step_size, dtype=jnp.asarray(g).dtype) * g,
                           updates)
        return updates, ScaleByScheduleState(safe_increment(state.count))

    return GradientTransformation(init, update)


def scale_by_learning_rate(learning_rate=None, *, flip_sign: bool = True
                           ) -> GradientTransformation:
    """``-learning_rate * g`` (a number, or a schedule of the step count); None is no
    scaling at all (not even the sign flip).

        >>> import functrans.numpy as jnp
        >>> scale_by_learning_rate(0.1).update(jnp.ones(1), EmptyState())[0]
        Array([-0.1], dtype=float32)
    """
    if learning_rate is None:
        return identity()
    sign = -1 if flip_sign else 1
    if callable(learning_rate):
        return scale_by_schedule(lambda count: sign * learning_rate(count))
    return scale(sign * learning_rate)


def scale_by_sign() -> GradientTransformation:
    """``sign(g)`` (signSGD, Bernstein et al., 2018).

        >>> import functrans.numpy as jnp
        >>> scale_by_sign().update(jnp.array([-3.0, 0.0, 2.0]), EmptyState())[0]
        Array([-1.,  0.,  1.], dtype=float32)
    """
    def update(updates, state, params=None):
        del params
        return tree_map(jnp.sign, updates), state
    return GradientTransformation(init_empty_state, update)


def normalize_by_update_norm(scale_factor=1.0, eps=1e-06) -> GradientTransformation:
    """``scale_factor * g / (|g| + eps)`` with ``|g|`` the global norm of all updates.

        >>> import functrans.numpy as jnp
        >>> normalize_by_update_norm(eps=0.0).update(jnp.array([3.0, 4.0]), EmptyState())[0]
        Array([0.6, 0.8], dtype=float32)
    """
    def update(updates, state, params=None):
        del params
        g_norm = (tree_norm(updates) + eps) / scale_factor
        return tree_map(lambda g: g / g_norm, updates), state
    return GradientTransformation(init_empty_state, update)


def centralize() -> GradientTransformation:
    """Gradient centralization (Yong et al., 2020): from every leaf of rank >= 2 subtract
    its mean over all axes but the first; vectors and scalars pass unchanged.

        >>> import functrans.numpy as jnp
        >>> centralize().update(jnp.array([[1.0, 2.0, 3.0], [4.0, 5.0, 9.0]]), EmptyState())[0]
        Array([[-1.,  0.,  1.],
               [-2., -1.,  3.]], dtype=float32)
    """
    def centered(g):
        g = jnp.asarray(g)
        if g.ndim < 2:
            return g
        return g - jnp.mean(g, axis=tuple(range(1, g.ndim)), keepdims=True)

    def update(updates, state, params=None):
        del params
        return tree_map(centered, updates), state
    return GradientTransformation(init_empty_state, update)


def scale_by_trust_ratio(min_norm=0.0, trust_coefficient=1.0, eps=0.0) -> GradientTransformation:
    """LARS/LAMB's layer-wise trust ratio (You et al.): each leaf's update is scaled by
    ``trust_coefficient * |param| / (|update| + eps)``, or left alone when either norm is 0.
    Norms below ``min_norm`` count as ``min_norm``.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_trust_ratio()
        >>> opt.update(jnp.array([0.3, 0.4]), EmptyState(), jnp.array([6.0, 8.0]))[0]
        Array([6., 8.], dtype=float32)
    """
    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)

        def scaled(u, p):
            param_norm = safe_norm(p, min_norm)
            update_norm = safe_norm(u, min_norm)
            ratio = trust_coefficient * param_norm / (update_norm + eps)
            zero_norm = jnp.logical_or(param_norm == 0.0, update_norm == 0.0)
            safe_ratio = jnp.where(zero_norm, jnp.array(1.0, dtype=jnp.asarray(p).dtype), ratio)
            return u * safe_ratio

        return tree_map(scaled, updates, params), state

    return GradientTransformation(init_empty_state, update)


# =============================================================================================
# Adam, RMSProp, Adagrad, Lion
# =============================================================================================

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

    def init(params):
        return ScaleByAdamState(jnp.zeros([], jnp.int32), tree_zeros_like(params, dtype=mu_dtype),
                                tree_zeros_like(params))

    def update(updates, state, params=None):
        del params
        mu = tree_update_moment(updates, state.mu, b1, 1)
        nu = tree_update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count = safe_increment(state.count)
        mu_hat = (_nesterov_mu_hat(mu, updates, b1, count) if nesterov
                  else tree_bias_correction(mu, b1, count))
        nu_hat = tree_bias_correction(nu, b2, count)
        updates = tree_map(lambda m, v: None if m is None else m / (jnp.sqrt(v + eps_root) + eps),
                           mu_hat, nu_hat, is_leaf=_is_none)
        return updates, ScaleByAdamState(count, tree_cast(mu, mu_dtype),
                                         tree_cast_like(nu, state.nu))

    return GradientTransformation(init, update)


class ScaleByRmsState(NamedTuple):
    """The state of :func:`scale_by_rms`: the running mean of ``g^2``."""
    nu: Any


class ScaleByRmsWithCountState(NamedTuple):
    """The state of :func:`scale_by_rms` with ``bias_correction``."""
    count: Any
    nu: Any


def scale_by_rms(decay=0.9, eps=1e-8, initial_scale=0.0, eps_in_sqrt: bool = True,
                 bias_correction: bool = False) -> GradientTransformation:
    """RMSProp's scaling (Tieleman & Hinton, 2012)::

        v = decay v + (1 - decay) g^2
        update = g / sqrt(v + eps)        (eps_in_sqrt=True, the default)
        update = g / (sqrt(v) + eps)      (eps_in_sqrt=False)

    ``v`` starts at ``initial_scale``; with ``bias_correction`` it is divided by
    ``1 - decay^t`` first.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_rms(decay=0.0, eps=0.0)
        >>> opt.update(jnp.array([-2.0]), opt.init(jnp.zeros(1)))[0]
        Array([-1.], dtype=float32)
    """
    def init(params):
        nu = tree_full_like(params, initial_scale)
        if bias_correction:
            return ScaleByRmsWithCountState(jnp.zeros([], jnp.int32), nu)
        return ScaleByRmsState(nu)

    def update(updates, state, params=None):
        del params
        nu = tree_update_moment_per_elem_norm(updates, state.nu, decay, 2)
        nu_hat = nu
        if bias_correction:
            count = safe_increment(state.count)
            nu_hat = tree_bias_correction(nu, decay, count)
        if eps_in_sqrt:
            scaling = tree_map(lambda n: lax.rsqrt(n + eps), nu_hat)
        else:
            scaling = tree_map(lambda n: 1 / (jnp.sqrt(n) + eps), nu_hat)
        updates = tree_map(lambda s, g: s * g, scaling, updates)
        if bias_correction:
            return updates, ScaleByRmsWithCountState(count, nu)
        return updates, ScaleByRmsState(nu)

    return GradientTransformation(init, update)


class ScaleByRStdDevState(NamedTuple):
    """The state of :func:`scale_by_stddev`: running means of ``g`` and ``g^2``."""
    mu: Any
    nu: Any


class ScaleByRStdDevWithCountState(NamedTuple):
    """The state of :func:`scale_by_stddev` with ``bias_correction``."""
    count: Any
    mu: Any
    nu: Any


def scale_by_stddev(decay=0.9, eps=1e-8, initial_scale=0.0, eps_in_sqrt: bool = True,
                    bias_correction: bool = False) -> GradientTransformation:
    """Centered RMSProp's scaling (Graves, 2013): divide by the running standard deviation::

        m = decay m + (1 - decay) g;  v = decay v + (1 - decay) g^2
        update = g / sqrt(v - m^2 + eps)

    (``g / (sqrt(v - m^2) + eps)`` with ``eps_in_sqrt=False``; ``m`` and ``v`` divided by
    ``1 - decay^t`` first with ``bias_correction``.)

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_stddev(decay=0.5, eps=0.0)
        >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0]   # 2 / sqrt(2 - 1)
        Array([2.], dtype=float32)
    """
    def init(params):
        mu = tree_zeros_like(params)
        nu = tree_full_like(params, initial_scale)
        if bias_correction:
            return ScaleByRStdDevWithCountState(jnp.zeros([], jnp.int32), mu, nu)
        return ScaleByRStdDevState(mu, nu)

    def update(updates, state, params=None):
        del params
        mu = tree_update_moment(updates, state.mu, decay, 1)
        nu = tree_update_moment_per_elem_norm(updates, state.nu, decay, 2)
        mu_hat, nu_hat = mu, nu
        if bias_correction:
            count = safe_increment(state.count)
            mu_hat = tree_bias_correction(mu, decay, count)
            nu_hat = tree_bias_correction(nu, decay, count)
        if eps_in_sqrt:
            scaling = tree_map(lambda m, n: lax.rsqrt(n - abs_sq(m) + eps), mu_hat, nu_hat)
        else:
            scaling = tree_map(lambda m, n: 1 / (jnp.sqrt(n - abs_sq(m)) + eps), mu_hat, nu_hat)
        updates = tree_map(lambda s, g: s * g, scaling, updates)
        if bias_correction:
            return updates, ScaleByRStdDevWithCountState(count, mu, nu)
        return updates, ScaleByRStdDevState(mu, nu)

    return GradientTransformation(init, update)


class ScaleByRssState(NamedTuple):
    """The state of :func:`scale_by_rss`: the running sum of ``g^2``."""
    sum_of_squares: Any


def scale_by_rss(initial_accumulator_value=0.1, eps=1e-7) -> GradientTransformation:
    """Adagrad's scaling (Duchi et al., 2011): ``s += g^2; update = g / sqrt(s + eps)``
    (0 where ``s`` is 0).

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_rss(initial_accumulator_value=0.0, eps=0.0)
        >>> opt.update(jnp.array([-2.0, 0.0]), opt.init(jnp.zeros(2)))[0]
        Array([-1.,  0.], dtype=float32)
    """
    def init(params):
        return ScaleByRssState(tree_full_like(params, initial_accumulator_value))

    def update(updates, state, params=None):
        del params
        sums = tree_map(lambda g, t: abs_sq(g) + t, updates, state.sum_of_squares)
        inverse = tree_map(lambda t: jnp.where(t > 0, lax.rsqrt(t + eps), 0.0), sums)
        return tree_mul(inverse, updates), ScaleByRssState(sums)

    return GradientTransformation(init, update)


class ScaleByLionState(NamedTuple):
    """The state of :func:`scale_by_lion`: the step count and the momentum."""
    count: Any
    mu: Any


def scale_by_lion(b1=0.9, b2=0.99, mu_dtype=None, *, mode: str = "hard",
                  smooth_beta=1.0) -> GradientTransformation:
    """Lion's direction (Chen et al., 2023)::

        x = b1 m + (1 - b1) g;   update = sign(x);   m = b2 m + (1 - b2) g

    ``mode="smooth"`` uses ``tanh(smooth_beta * x)``, ``mode="refined"`` keeps ``x`` where
    ``|x| < 1`` and its sign elsewhere.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_lion()
        >>> opt.update(jnp.array([-0.5, 2.0]), opt.init(jnp.zeros(2)))[0]
        Array([-1.,  1.], dtype=float32)
    """
    if mode not in ("hard", "smooth", "refined"):
        raise ValueError(f"Unknown lion mode: {mode}. It needs to be one of "
                         "[\"hard\", \"smooth\", \"refined\"].")
    mu_dtype = canonicalize_dtype(mu_dtype)

    def direction(g, m):
        x = (1.0 - b1) * g + b1 * m
        if mode == "hard":
            return jnp.sign(x)
        if mode == "smooth":
            return jnp.tanh(smooth_beta * x)
        return jnp.where(jnp.abs(x) < 1.0, x, jnp.sign(x))

    def init(params):
        return ScaleByLionState(jnp.zeros([], jnp.int32), tree_zeros_like(params, dtype=mu_dtype))

    def update(updates, state, params=None):
        del params
        directions = tree_map(direction, updates, state.mu)
        mu = tree_cast(tree_update_moment(updates, state.mu, b2, 1), mu_dtype)
        return directions, ScaleByLionState(safe_increment(state.count), mu)

    return GradientTransformation(init, update)
