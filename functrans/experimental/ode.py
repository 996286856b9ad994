"""``jax.experimental.ode.odeint``: solve ``dy/dt = func(y, t, *args)`` with an adaptive
Dormand-Prince 5(4) Runge-Kutta method, differentiable in reverse mode by the adjoint method.

    >>> import functrans.numpy as jnp
    >>> ys = odeint(lambda y, t: -y, 1.0, jnp.array([0.0, 1.0]))
    >>> round(float(ys[1]), 5)
    0.36788

Each step estimates its error from the embedded 4th-order solution; a step is accepted when
the RMS of ``error / (atol + rtol * |y|)`` is at most 1, and the next step size follows
from that ratio. Values at the requested times come from a 4th-order polynomial fitted on
the step that spans them. The derivative runs a second integration backwards in time (of
the state and its cotangent together), so memory does not grow with the number of steps.
"""
from __future__ import annotations

import functools

import numpy as np

from functrans import lax, tree_util
from functrans._api import vjp, vmap
from functrans._custom_derivatives import custom_vjp
from functrans._program_transforms import closure_convert
from functrans.core import Tracer
from functrans.flatten_util import ravel_pytree
import functrans.numpy as jnp

__all__ = ["odeint"]

# Dormand-Prince 5(4): nodes, stage weights, 5th-order weights, their difference from the
# embedded 4th-order weights (the error estimate), and the weights giving y at mid-step
_NODES = np.array([0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1, 1])
_STAGES = [
    [],
    [1 / 5],
    [3 / 40, 9 / 40],
    [44 / 45, -56 / 15, 32 / 9],
    [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
    [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
    [35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84],
]
_SOLUTION = np.array([35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0])
_ERROR = _SOLUTION - np.array([5179 / 57600, 0, 7571 / 16695, 393 / 640, -92097 / 339200,
                               187 / 2100, 1 / 40])
_MIDPOINT = np.array([6025192743 / 30085553152, 0, 51252292925 / 65400821598,
                      -2691868925 / 45128329728, 187940372067 / 1594534317056,
                      -1776094331 / 19743644256, 11237099 / 235043384]) / 2


def _runge_kutta_step(func, y0, f0, t0, dt):
    """One Dormand-Prince step: (y1, f1, error estimate, the seven stage derivatives)."""
    stages = [f0]
    for i in range(1, 7):
        increment = sum((w * k for w, k in zip(_STAGES[i], stages) if w != 0),
                        jnp.zeros_like(y0))
        stages.append(func(y0 + dt * increment, t0 + dt * _NODES[i]))
    k = jnp.stack(stages)
    y1 = y0 + dt * jnp.tensordot(jnp.asarray(_SOLUTION, k.dtype), k, axes=1)
    error = dt * jnp.tensordot(jnp.asarray(_ERROR, k.dtype), k, axes=1)
    return y1, stages[-1], error, k


def _interpolation_coefficients(y0, y1, k, dt):
    """Coefficients (highest power first) of the quartic p on [0, 1] with p(0) = y0,
    p(1) = y1, p(1/2) = the mid-step value, p'(0) = dt f(y0), p'(1) = dt f(y1)."""
    y_mid = y0 + dt * jnp.tensordot(jnp.asarray(_MIDPOINT, k.dtype), k, axes=1)
    slope0, slope1 = dt * k[0], dt * k[-1]
    r1 = y1 - y0 - slope0
    r2 = slope1 - slope0
    r3 = y_mid - y0 - slope0 / 2
    a = 16 * r3 - 8 * r1 + 2 * r2
    b = 14 * r1 - 3 * r2 - 32 * r3
    c = -5 * r1 + r2 + 16 * r3
    return jnp.stack([a, b, c, slope0, y0])


def _error_ratio(error, rtol, atol, y0, y1):
    tolerance = atol + rtol * jnp.maximum(jnp.abs(y0), jnp.abs(y1))
    return jnp.sqrt(jnp.mean(jnp.square(jnp.abs(error) / tolerance)))


def _next_step_size(dt, ratio, safety=0.9, grow=10.0, shrink=0.2, order=5.0):
    factor = jnp.minimum(grow, jnp.maximum(shrink, safety * ratio ** (-1.0 / order)))
    return jnp.where(ratio == 0, dt * grow, dt * factor)


def _initial_step_size(func, t0, y0, f0, rtol, atol, order=4):
    """A first step that keeps the first-order change below the tolerance (Hairer,
    Norsett and Wanner's starting-step heuristic)."""
    scale = atol + jnp.abs(y0) * rtol
    d0 = jnp.sqrt(jnp.mean(jnp.square(y0 / scale)))
    d1 = jnp.sqrt(jnp.mean(jnp.square(f0 / scale)))
    h0 = jnp.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / d1)
    f1 = func(y0 + h0 * f0, t0 + h0)
    d2 = jnp.sqrt(jnp.mean(jnp.square((f1 - f0) / scale))) / h0
    h1 = jnp.where((d1 <= 1e-15) & (d2 <= 1e-15), jnp.maximum(1e-6, h0 * 1e-3),
                   (0.01 / jnp.maximum(d1, d2)) ** (1.0 / (order + 1.0)))
    return jnp.minimum(100.0 * h0, h1)


def odeint(func, y0, t, *args, rtol=1.4e-8, atol=1.4e-8, mxstep=jnp.inf, hmax=jnp.inf):
    """Integrate ``dy/dt = func(y, t, *args)`` from ``y0`` at ``t[0]``; returns ``y`` at
    each time of ``t`` (increasing), stacked along a new leading axis (``y0`` may be a
    pytree of arrays, and so is the result).

    ``rtol``/``atol``: relative and absolute error tolerances of each step; ``mxstep``: the
    most steps taken between two output times; ``hmax``: the largest step. ``args`` must be
    arrays (or pytrees of arrays): they are what the result is differentiated with respect
    to, besides ``y0`` and ``t``.
    """
    for arg in tree_util.tree_leaves(args):
        if not isinstance(arg, (Tracer, np.ndarray, np.generic, float, int, complex)) and \
                not hasattr(arg, "dtype"):
            raise TypeError(f"The contents of odeint *args must be arrays or scalars, but got "
                            f"{arg}.")
    converted, consts = closure_convert(func, y0, t[0], *args)
    return _odeint_pytree(converted, rtol, atol, mxstep, hmax, y0, jnp.asarray(t), *args,
                          *consts)


def _odeint_pytree(func, rtol, atol, mxstep, hmax, y0, ts, *args):
    flat_y0, unravel = ravel_pytree(y0)

    def flat_func(y, t, *args):
        return ravel_pytree(func(unravel(y), t, *args))[0]

    out = _odeint(flat_func, rtol, atol, mxstep, hmax, flat_y0, ts, *args)
    return vmap(unravel)(out)


@functools.partial(custom_vjp, nondiff_argnums=(0, 1, 2, 3, 4))
def _odeint(func, rtol, atol, mxstep, hmax, y0, ts, *args):
    dynamics = lambda y, t: func(y, t, *args)  # noqa: E731
    f0 = dynamics(y0, ts[0])
    dt = jnp.minimum(_initial_step_size(dynamics, ts[0], y0, f0, rtol, atol), hmax)
    coefficients = jnp.stack([jnp.zeros_like(y0)] * 4 + [y0])

    def advance_to(carry, target):
        def keep_going(state):
            steps, _, _, t, dt, _, _ = state
            return (t < target) & (steps < mxstep) & (dt > 0)

        def step(state):
            steps, y, f, t, dt, last_t, coeffs = state
            y1, f1, error, k = _runge_kutta_step(dynamics, y, f, t, dt)
            ratio = _error_ratio(error, rtol, atol, y, y1)
            new_dt = jnp.clip(_next_step_size(dt, ratio), 0, hmax)
            accepted = ratio <= 1
            new_coeffs = _interpolation_coefficients(y, y1, k, dt)
            pick = lambda new, old: jnp.where(accepted, new, old)  # noqa: E731
            return (steps + 1, pick(y1, y), pick(f1, f), pick(t + dt, t), new_dt,
                    pick(t, last_t), pick(new_coeffs, coeffs))

        y, f, t, dt, last_t, coeffs = carry
        _, y, f, t, dt, last_t, coeffs = lax.while_loop(
            keep_going, step, (0, y, f, t, dt, last_t, coeffs))
        fraction = (target - last_t) / (t - last_t)
        fraction = fraction.astype(coeffs.dtype)
        y_target = coeffs[0]
        for c in coeffs[1:]:  # Horner's rule
            y_target = y_target * fraction + c
        return (y, f, t, dt, last_t, coeffs), y_target

    init = (y0, f0, ts[0], dt, ts[0], coefficients)
    _, ys = lax.scan(advance_to, init, ts[1:])
    return jnp.concatenate([y0[None], ys])


def _odeint_fwd(func, rtol, atol, mxstep, hmax, y0, ts, *args):
    ys = _odeint(func, rtol, atol, mxstep, hmax, y0, ts, *args)
    return ys, (ys, ts, args)


def _odeint_bwd(func, rtol, atol, mxstep, hmax, residuals, g):
    """The adjoint method: from each output time back to the one before, integrate the state
    together with its cotangent (and the cotangents of ``t[0]`` and ``args``) backwards."""
    ys, ts, args = residuals

    def backward_dynamics(state, minus_t, *args):
        y, y_bar, _, _ = state
        y_dot, pullback = vjp(func, y, -minus_t, *args)
        y_bar_dot, t_bar_dot, *args_bar_dot = pullback(y_bar)
        return (-y_dot, y_bar_dot, t_bar_dot, args_bar_dot)

    def back_one_interval(carry, i):
        y_bar, t0_bar, args_bar = carry
        t_bar = jnp.dot(func(ys[i], ts[i], *args), g[i])
        t0_bar = t0_bar - t_bar
        state = (ys[i], y_bar, t0_bar, args_bar)
        _, y_bar, t0_bar, args_bar = odeint(
            backward_dynamics, state, jnp.stack([-ts[i], -ts[i - 1]]), *args,
            rtol=rtol, atol=atol, mxstep=mxstep, hmax=hmax)
        y_bar, t0_bar, args_bar = tree_util.tree_map(lambda v: v[1], (y_bar, t0_bar, args_bar))
        return (y_bar + g[i - 1], t0_bar, args_bar), t_bar

    init = (g[-1], jnp.zeros((), ts.dtype), tree_util.tree_map(jnp.zeros_like, args))
    (y_bar, t0_bar, args_bar), ts_bar_reversed = lax.scan(
        back_one_interval, init, jnp.arange(len(ts) - 1, 0, -1))
    ts_bar = jnp.concatenate([t0_bar[None], ts_bar_reversed[::-1]])
    return (y_bar, ts_bar, *args_bar)


_odeint.defvjp(_odeint_fwd, _odeint_bwd)
