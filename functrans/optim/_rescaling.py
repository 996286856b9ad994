"""More adaptive rescalings: the ``scale_by_*`` building blocks of AdaMax, AdaBelief, RAdam,
Yogi, AMSGrad, AdaDelta, NovoGrad, SM3, optimistic gradient descent and Adafactor.

Each follows its published rule (the docstrings give the formula); ``g`` is the incoming
update, ``t`` the step count starting at 1. Hyperparameters may be numbers or scalar arrays
(as :func:`inject_hyperparams` passes them), so no rule branches in Python on a
hyperparameter's value.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from functrans import _dtypes, lax
from functrans import numpy as jnp
from functrans.core import get_aval
from functrans.numpy._promotion import to_array
from functrans.optim._base import (EmptyState, GradientTransformation, cast, count_zero,
                                   full_like, safe_increment, where, zeros_like)
from functrans.optim._transforms import ScaleByAdamState, _bias_correct, _moment
from functrans.tree_util import tree_map

__all__ = [
    "ScaleByAmsgradState", "ScaleByBeliefState", "ScaleByAdaDeltaState", "ScaleByNovogradState",
    "ScaleBySM3State", "ScaleByOptimisticGradientState", "FactoredState",
    "scale_by_adamax", "scale_by_amsgrad", "scale_by_belief", "scale_by_radam", "scale_by_yogi",
    "scale_by_adadelta", "scale_by_novograd", "scale_by_sm3", "scale_by_optimistic_gradient",
    "scale_by_param_block_norm", "scale_by_param_block_rms", "scale_by_factored_rms",
]


def _float_count(count):
    return lax.convert_element_type(to_array(count), _dtypes.default_float_dtype())


def _ndim(x) -> int:
    return get_aval(to_array(x)).ndim


def _shape(x) -> tuple:
    return get_aval(to_array(x)).shape


def _mu_dtype(mu_dtype):
    return None if mu_dtype is None else _dtypes.canonicalize_dtype(mu_dtype)


def _need_params(name, params):
    if params is None:
        raise ValueError(f"{name} needs params: call update(updates, state, params)")


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
        return ScaleByAdamState(count_zero(), tree_map(zeros_like, params),
                                tree_map(zeros_like, params))

    def update(updates, state, params=None):
        count = safe_increment(state.count)
        mu = tree_map(lambda g, m: _moment(g, m, b1, 1), updates, state.mu)
        nu = tree_map(lambda g, u: jnp.maximum(jnp.abs(cast(g, u)) + eps, b2 * u),
                      updates, state.nu)
        mu_hat = _bias_correct(mu, b1, count)
        updates = tree_map(lambda m, u, g: cast(m / u, g), mu_hat, nu, updates)
        return updates, ScaleByAdamState(count, mu, nu)

    return GradientTransformation(init, update)


class ScaleByAmsgradState(NamedTuple):
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
    mu_dtype = _mu_dtype(mu_dtype)

    def init(params):
        mu = tree_map(lambda p: zeros_like(p, mu_dtype), params)
        return ScaleByAmsgradState(count_zero(), mu, tree_map(zeros_like, params),
                                   tree_map(zeros_like, params))

    def update(updates, state, params=None):
        count = safe_increment(state.count)
        mu = tree_map(lambda g, m: _moment(g, m, b1, 1), updates, state.mu)
        nu = tree_map(lambda g, v: _moment(g, v, b2, 2), updates, state.nu)
        mu_hat = _bias_correct(mu, b1, count) if bias_correction_mu else mu
        nu_eff = _bias_correct(nu, b2, count) if bias_correction_nu else nu
        nu_max = tree_map(jnp.maximum, state.nu_max, nu_eff)
        updates = tree_map(lambda m, v, g: cast(m / (jnp.sqrt(v + eps_root) + eps), g),
                           mu_hat, nu_max, updates)
        return updates, ScaleByAmsgradState(count, mu, nu, nu_max)

    return GradientTransformation(init, update)


class ScaleByBeliefState(NamedTuple):
    count: Any
    mu: Any
    nu: Any


def _nesterov_mu_hat(mu, updates, b1, count):
    """NAdam's look-ahead first moment ``b1 m/(1-b1^(t+1)) + (1-b1) g/(1-b1^t)``."""
    return tree_map(lambda m, g: b1 * m + (1 - b1) * cast(g, m),
                    _bias_correct(mu, b1, safe_increment(count)),
                    _bias_correct(updates, b1, count))


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
        return ScaleByBeliefState(count_zero(), tree_map(zeros_like, params),
                                  tree_map(zeros_like, params))

    def update(updates, state, params=None):
        mu = tree_map(lambda g, m: _moment(g, m, b1, 1), updates, state.mu)
        # the belief is measured against the freshly updated average, as in the paper
        errors = tree_map(lambda g, m: cast(g, m) - m, updates, mu)
        nu = tree_map(lambda e, s: _moment(e, s, b2, 2) + eps_root, errors, state.nu)
        count = safe_increment(state.count)
        mu_hat = (_nesterov_mu_hat(mu, updates, b1, count) if nesterov
                  else _bias_correct(mu, b1, count))
        nu_hat = _bias_correct(nu, b2, count)
        updates = tree_map(lambda m, s, g: cast(m / (jnp.sqrt(s) + eps), g),
                           mu_hat, nu_hat, updates)
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
    def init(params):
        return ScaleByAdamState(count_zero(), tree_map(zeros_like, params),
                                tree_map(zeros_like, params))

    def update(updates, state, params=None):
        mu = tree_map(lambda g, m: _moment(g, m, b1, 1), updates, state.mu)
        nu = tree_map(lambda g, v: _moment(g, v, b2, 2), updates, state.nu)
        count = safe_increment(state.count)
        t = _float_count(count)
        rho_inf = 2.0 / (1.0 - b2) - 1.0
        b2t = b2 ** t
        rho = rho_inf - 2 * t * b2t / (1 - b2t)
        mu_hat = (_nesterov_mu_hat(mu, updates, b1, count) if nesterov
                  else _bias_correct(mu, b1, count))
        nu_hat = _bias_correct(nu, b2, count)
        tractable = rho >= threshold
        # r is NaN while rho < 4; the select below never takes it there
        r = jnp.sqrt((rho - 4.0) * (rho - 2.0) * rho_inf
                     / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho))

        def direction(m, v, g):
            rectified = cast(r, m) * m / (jnp.sqrt(v + eps_root) + eps)
            return cast(where(tractable, rectified, m), g)

        return tree_map(direction, mu_hat, nu_hat, updates), ScaleByAdamState(count, mu, nu)

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
        return ScaleByAdamState(count_zero(),
                                tree_map(lambda p: full_like(p, initial_accumulator_value), params),
                                tree_map(lambda p: full_like(p, initial_accumulator_value), params))

    def update(updates, state, params=None):
        mu = tree_map(lambda g, m: _moment(g, m, b1, 1), updates, state.mu)

        def second(g, v):
            g2 = cast(g * g, v)
            return v - (1 - b2) * jnp.sign(v - g2) * g2

        nu = tree_map(second, updates, state.nu)
        count = safe_increment(state.count)
        mu_hat = _bias_correct(mu, b1, count)
        nu_hat = _bias_correct(nu, b2, count)
        updates = tree_map(lambda m, v, g: cast(m / (jnp.sqrt(v + eps_root) + eps), g),
                           mu_hat, nu_hat, updates)
        return updates, ScaleByAdamState(count, mu, nu)

    return GradientTransformation(init, update)


# =============================================================================================
# AdaDelta, NovoGrad, SM3, optimistic gradients
# =============================================================================================

class ScaleByAdaDeltaState(NamedTuple):
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
        return ScaleByAdaDeltaState(tree_map(zeros_like, params), tree_map(zeros_like, params))

    def update(updates, state, params=None):
        e_g = tree_map(lambda g, e: _moment(g, e, rho, 2), updates, state.e_g)
        updates = tree_map(
            lambda g, eg, ex: cast(jnp.sqrt(ex + eps) / jnp.sqrt(eg + eps), g) * g,
            updates, e_g, state.e_x)
        e_x = tree_map(lambda u, e: _moment(u, e, rho, 2), updates, state.e_x)
        return updates, ScaleByAdaDeltaState(e_g, e_x)

    return GradientTransformation(init, update)


class ScaleByNovogradState(NamedTuple):
    count: Any
    mu: Any
    nu: Any


def _sum_squares(x):
    x = to_array(x)
    return lax.reduce_sum(x * x, tuple(range(_ndim(x))))


def scale_by_novograd(b1=0.9, b2=0.25, eps=1e-8, eps_root=0.0, weight_decay=0.0,
                      mu_dtype=None) -> GradientTransformation:
    """NovoGrad's direction (Ginsburg et al., 2019): layer-wise second moments of the
    gradient norm, weight decay inside the momentum::

        v = |g|^2 at t = 1, else b2 v + (1 - b2) |g|^2          (one scalar per leaf)
        m = b1 m + g / (sqrt(v + eps_root) + eps) + weight_decay * p
        update = m

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_novograd(eps=0.0)
        >>> opt.update(jnp.array([3.0, 4.0]), opt.init(jnp.zeros(2)), jnp.zeros(2))[0]
        Array([0.6, 0.8], dtype=float32)
    """
    mu_dtype = _mu_dtype(mu_dtype)

    def init(params):
        return ScaleByNovogradState(
            count_zero(), tree_map(lambda p: zeros_like(p, mu_dtype), params),
            tree_map(lambda p: lax.full((), 0, get_aval(to_array(p)).dtype), params))

    def update(updates, state, params=None):
        if params is None:
            if isinstance(weight_decay, (int, float)) and weight_decay == 0:
                params = tree_map(zeros_like, updates)
            else:
                _need_params("scale_by_novograd with weight_decay", params)
        count = safe_increment(state.count)
        first = lax.eq(count, lax.full((), 1, _dtypes.int32))
        nu = tree_map(lambda g, v: where(first, cast(_sum_squares(g), v),
                                         _moment(_sum_squares(g), v, b2, 1)),
                      updates, state.nu)

        def momentum(g, p, m, v):
            step = cast(g, m) / cast(jnp.sqrt(v + eps_root) + eps, m) + weight_decay * cast(p, m)
            return where(first, step, b1 * m + step)

        mu = tree_map(momentum, updates, params, state.mu, nu)
        out = tree_map(lambda m, g: cast(m, g), mu, updates)
        return out, ScaleByNovogradState(count, mu, nu)

    return GradientTransformation(init, update)


class ScaleBySM3State(NamedTuple):
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
    def accumulators(p):
        shape = _shape(p)
        if not shape:
            raise NotImplementedError("scale_by_sm3: 0-d parameters have no axis to cover "
                                      "(reshape them to shape (1,))")
        dtype = get_aval(to_array(p)).dtype
        return [lax.full((size,), 0, dtype) for size in shape]

    def init(params):
        return ScaleBySM3State(tree_map(accumulators, params), tree_map(zeros_like, params))

    def update(updates, state, params=None):
        # the paper's plain sum when b2 == 1, an exponential average otherwise
        coefficient = jnp.where(jnp.asarray(b2) == 1.0, 1.0, 1.0 - jnp.asarray(b2))

        def accumulate(g, vectors):
            g = to_array(g)
            shape = _shape(g)
            if not shape:
                raise NotImplementedError("scale_by_sm3: 0-d parameters are not supported")
            covers = [jnp.reshape(v, tuple(s if j == i else 1 for j, s in enumerate(shape)))
                      for i, (s, v) in enumerate(zip(shape, vectors))]
            smallest = covers[0]
            for cover in covers[1:]:
                smallest = jnp.minimum(smallest, cover)
            return cast(coefficient, g) * g * g + cast(b2, g) * smallest

        # state.mu extends the updates' structure by a list per leaf; tree_map hands it whole
        accums = tree_map(accumulate, updates, state.mu)

        def scaled(g, a):
            inverse = where(a > 0, lax.rsqrt(a + eps), zeros_like(a))
            return g * inverse

        directions = tree_map(scaled, updates, accums)
        nu = tree_map(lambda u, n: _moment(u, n, b1, 1), directions, state.nu)

        def new_covers(a):
            n = _ndim(a)
            if n < 2:
                return [a]
            return [jnp.max(a, axis=tuple(j for j in range(n) if j != i)) for i in range(n)]

        mu = tree_map(new_covers, accums)
        return nu, ScaleBySM3State(mu, nu)

    return GradientTransformation(init, update)


class ScaleByOptimisticGradientState(NamedTuple):
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
        return ScaleByOptimisticGradientState(lax.full((), True, np.dtype(np.bool_)),
                                              tree_map(zeros_like, params))

    def update(updates, state, params=None):
        def optimistic(g, previous):
            previous = where(state.is_initial_step, g, cast(previous, g))
            return (alpha + beta) * g - beta * previous

        out = tree_map(optimistic, updates, state.previous_gradient)
        new_state = ScaleByOptimisticGradientState(
            lax.full((), False, np.dtype(np.bool_)),
            tree_map(lambda g, p: cast(g, p), updates, state.previous_gradient))
        return out, new_state

    return GradientTransformation(init, update)


# =============================================================================================
# Per-block scales and Adafactor's factored second moments
# =============================================================================================

def _safe_norm(x, min_norm):
    """``max(|x|, min_norm)`` whose gradient is 0 (not NaN) where ``|x|`` is 0."""
    x = to_array(x)
    norm = jnp.sqrt(_sum_squares(x))
    small = norm <= min_norm
    # the norm of a stand-in vector of ones keeps sqrt away from 0 in the derivative
    safe_x = where(small, jnp.ones_like(x), x)
    return where(small, full_like(norm, min_norm), jnp.sqrt(_sum_squares(safe_x)))


def _safe_rms(x, min_rms):
    """``max(rms(x), min_rms)`` with a finite gradient at ``x = 0``."""
    x = to_array(x)
    size = max(int(np.prod(_shape(x))), 1)
    rms = jnp.sqrt(_sum_squares(x) / size)
    small = rms <= min_rms
    safe_x = where(small, jnp.ones_like(x), x)
    return where(small, full_like(rms, min_rms), jnp.sqrt(_sum_squares(safe_x) / size))


def scale_by_param_block_norm(min_scale=1e-3) -> GradientTransformation:
    """Scale each leaf's update by ``max(|p|, min_scale)``, the L2 norm of its parameter.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_param_block_norm()
        >>> opt.update(jnp.ones(2), EmptyState(), jnp.array([3.0, 4.0]))[0]
        Array([5., 5.], dtype=float32)
    """
    def update(updates, state, params=None):
        _need_params("scale_by_param_block_norm", params)
        return tree_map(lambda u, p: u * cast(_safe_norm(p, min_scale), u), updates, params), state
    return GradientTransformation(lambda params: EmptyState(), update)


def scale_by_param_block_rms(min_scale=1e-3) -> GradientTransformation:
    """Scale each leaf's update by ``max(rms(p), min_scale)``, the root mean square of its
    parameter (Adafactor's relative step size).

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_param_block_rms()
        >>> opt.update(jnp.ones(2), EmptyState(), jnp.array([1.0, -1.0]))[0]
        Array([1., 1.], dtype=float32)
    """
    def update(updates, state, params=None):
        _need_params("scale_by_param_block_rms", params)
        return tree_map(lambda u, p: u * cast(_safe_rms(p, min_scale), u), updates, params), state
    return GradientTransformation(lambda params: EmptyState(), update)


class FactoredState(NamedTuple):
    count: Any
    v_row: Any
    v_col: Any
    v: Any


def _decay_rate_pow(step, exponent=0.8):
    """Adafactor's second-moment decay ``1 - (step + 1)^(-exponent)`` (0 at step 0)."""
    t = _float_count(step) + 1.0
    return 1.0 - t ** (-exponent)


def _factored_dims(shape, factored: bool, min_dim_size_to_factor: int):
    """The two largest axes ``(d1, d0)`` (``d0`` the largest) when the second moment is
    factored over them, else None: only for >= 2-D leaves whose second-largest axis has at
    least ``min_dim_size_to_factor`` entries."""
    if not factored or len(shape) < 2:
        return None
    order = np.argsort(shape, kind="stable")
    if shape[order[-2]] < min_dim_size_to_factor:
        return None
    return int(order[-2]), int(order[-1])


def scale_by_factored_rms(factored: bool = True, decay_rate=0.8, step_offset=0,
                          min_dim_size_to_factor: int = 128, epsilon=1e-30,
                          decay_rate_fn: Callable = _decay_rate_pow) -> GradientTransformation:
    """Adafactor's rescaling (Shazeer & Stern, 2018): divide by a running RMS of the
    gradient whose second moment is, for >= 2-D leaves, factored into a row and a column
    statistic over the two largest axes ``d1, d0``::

        b_t = decay_rate_fn(t - 1 - step_offset, decay_rate)    # 1 - t^(-0.8) by default
        R = b_t R + (1 - b_t) mean(g^2 + epsilon, axis=d0)
        C = b_t C + (1 - b_t) mean(g^2 + epsilon, axis=d1)
        update = g / sqrt(R C / mean(R, axis=d1))              (factored)
        V = b_t V + (1 - b_t) (g^2 + epsilon);  update = g / sqrt(V)   (otherwise)

    The state keeps optax's layout: per leaf ``v_row``/``v_col`` (factored) or ``v``; the
    unused ones are zeros of shape ``(1,)``.

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_factored_rms()
        >>> opt.update(jnp.array([2.0, -3.0]), opt.init(jnp.zeros(2)), jnp.zeros(2))[0]
        Array([ 1., -1.], dtype=float32)
    """
    def dims_of(x):
        return _factored_dims(_shape(x), factored, min_dim_size_to_factor)

    def placeholder(p):
        return lax.full((1,), 0, get_aval(to_array(p)).dtype)

    def init(params):
        def v_row(p):
            dims = dims_of(p)
            return placeholder(p) if dims is None else jnp.zeros(
                tuple(s for i, s in enumerate(_shape(p)) if i != dims[1]), to_array(p).dtype)

        def v_col(p):
            dims = dims_of(p)
            return placeholder(p) if dims is None else jnp.zeros(
                tuple(s for i, s in enumerate(_shape(p)) if i != dims[0]), to_array(p).dtype)

        def v(p):
            return zeros_like(p) if dims_of(p) is None else placeholder(p)

        return FactoredState(count_zero(), tree_map(v_row, params), tree_map(v_col, params),
                             tree_map(v, params))

    def update(updates, state, params=None):
        _need_params("scale_by_factored_rms", params)
        decay = decay_rate_fn(to_array(state.count) - step_offset, decay_rate)

        def one_leaf(g, row, col, v, p):
            g = to_array(g)
            dtype = get_aval(to_array(p)).dtype
            decay_t = cast(decay, g)
            squares = g * g + epsilon
            dims = dims_of(p)
            if dims is None:
                new_v = cast(decay_t * v + (1 - decay_t) * squares, p)
                return g * lax.rsqrt(new_v), placeholder(p), placeholder(p), new_v
            d1, d0 = dims
            new_row = cast(decay_t * row + (1 - decay_t) * jnp.mean(squares, axis=d0), p)
            new_col = cast(decay_t * col + (1 - decay_t) * jnp.mean(squares, axis=d1), p)
            row_axis = d1 - 1 if d1 > d0 else d1   # d1's position once d0 is dropped
            row_factor = lax.rsqrt(new_row / jnp.mean(new_row, axis=row_axis, keepdims=True))
            col_factor = lax.rsqrt(new_col)
            out = (g * jnp.expand_dims(row_factor, d0) * jnp.expand_dims(col_factor, d1))
            return out, new_row, new_col, lax.full((1,), 0, dtype)

        results = tree_map(lambda *leaves: one_leaf(*leaves), updates, state.v_row, state.v_col,
                           state.v, params)
        # each result is a 4-tuple; pull the four trees apart along the updates' structure
        pick = [tree_map(lambda _, r: r[i], updates, results) for i in range(4)]
        return pick[0], FactoredState(safe_increment(state.count), pick[1], pick[2], pick[3])

    return GradientTransformation(init, update)
