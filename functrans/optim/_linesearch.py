"""Line searches: pick the step size along the incoming update direction by evaluating the
objective. Both take the objective through ``update``'s extra arguments (``value``,
``grad`` at the current parameters and ``value_fn``) and run as ``lax.while_loop``s, so
they jit.

- :func:`scale_by_backtracking_linesearch`: shrink the step until the Armijo (sufficient
  decrease) condition holds;
- :func:`scale_by_zoom_linesearch`: bracket then zoom (More & Thuente; Nocedal & Wright,
  algorithms 3.5 and 3.6) until the strong Wolfe conditions hold — the search L-BFGS uses.

    >>> import functrans, functrans.numpy as jnp
    >>> from functrans import optim
    >>> f = lambda x: jnp.sum((x - 1.0) ** 2)
    >>> opt = optim.chain(optim.sgd(1.0), scale_by_backtracking_linesearch(15))
    >>> x = jnp.zeros(2)
    >>> state = opt.init(x)
    >>> value, grad = functrans.value_and_grad(f)(x)
    >>> updates, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=f)
    >>> float(f(optim.apply_updates(x, updates))) < float(value)
    True
"""
from __future__ import annotations

import functools
import inspect
import operator
from typing import Any, Callable, NamedTuple

from functrans import _api
from functrans import debug, lax
from functrans import numpy as jnp
from functrans.optim._base import GradientTransformationExtraArgs
from functrans.optim._numerics import safe_increment
from functrans.optim._tree_casting import tree_cast_like
from functrans.optim._tree_math import (tree_add_scale, tree_conj, tree_real, tree_scale,
                                        tree_vdot, tree_where, tree_zeros_like)
from functrans.optim._tree_state import tree_get
from functrans.tree_util import tree_leaves

__all__ = ["BacktrackingLinesearchInfo", "ScaleByBacktrackingLinesearchState",
           "scale_by_backtracking_linesearch", "ZoomLinesearchInfo",
           "ScaleByZoomLinesearchState", "scale_by_zoom_linesearch",
           "value_and_grad_from_state"]


def _extract_fns_kwargs(fns, kwargs):
    """Split ``kwargs`` into the ones each of ``fns`` accepts by name and the rest."""
    names = [list(inspect.signature(fn).parameters) for fn in fns]
    fns_kwargs = [{k: v for k, v in kwargs.items() if k in fn_names} for fn_names in names]
    accepted = functools.reduce(operator.add, names)
    remaining = {k: v for k, v in kwargs.items() if k not in accepted}
    return fns_kwargs, remaining


def _cond_print(condition, message, **kwargs):
    """Print ``message`` (formatted with ``kwargs``) when ``condition`` holds at run time."""
    lax.cond(condition, lambda _: debug.print(message, ordered=True, **kwargs),
             lambda _: None, None)


def _value_dtype(params):
    """The real dtype of the objective's values: that of the first parameter leaf."""
    return jnp.real(jnp.empty((), jnp.asarray(tree_leaves(params)[0]).dtype)).dtype


# =============================================================================================
# Backtracking (Armijo)
# =============================================================================================

class BacktrackingLinesearchInfo(NamedTuple):
    """Diagnostics of the last backtracking search."""
    num_linesearch_steps: Any
    decrease_error: Any


class ScaleByBacktrackingLinesearchState(NamedTuple):
    """The state of :func:`scale_by_backtracking_linesearch`: the accepted step size, the
    objective (and, with ``store_grad``, its gradient) at the accepted point, and the
    search's diagnostics."""
    learning_rate: Any
    value: Any
    grad: Any
    info: BacktrackingLinesearchInfo


class _BacktrackingSearch(NamedTuple):
    learning_rate: Any
    new_value: Any
    new_grad: Any
    decrease_error: Any
    iter_num: Any


def scale_by_backtracking_linesearch(max_backtracking_steps: int, slope_rtol=1e-4,
                                     decrease_factor=0.8, increase_factor=1.5,
                                     max_learning_rate=1.0, atol=0.0, rtol=0.0,
                                     store_grad: bool = False, verbose: bool = False
                                     ) -> GradientTransformationExtraArgs:
    """Scale the update ``u`` by the largest step ``s`` found by backtracking that
    satisfies the sufficient decrease (Armijo) condition::

        f(x + s u) <= (1 + rtol) f(x) + s * slope_rtol * <u, grad f(x)> + atol

    Each search starts from ``min(increase_factor * previous s, max_learning_rate)`` and
    multiplies by ``decrease_factor`` at most ``max_backtracking_steps`` times; a step with
    a non-finite value becomes 0. ``update`` needs ``value`` and ``grad`` at ``params`` and
    ``value_fn`` (other keyword arguments go to ``value_fn``); with ``store_grad`` the
    gradient at the accepted point is kept in the state (see
    :func:`value_and_grad_from_state`).

        >>> import functrans, functrans.numpy as jnp
        >>> f = lambda x: jnp.sum(x ** 2)
        >>> opt = scale_by_backtracking_linesearch(max_backtracking_steps=10)
        >>> x = jnp.array([1.0])
        >>> value, grad = functrans.value_and_grad(f)(x)
        >>> updates, state = opt.update(-grad, opt.init(x), x, value=value, grad=grad,
        ...                             value_fn=f)
        >>> round(float(state.learning_rate), 4)   # 1.0 overshoots to -1; 0.8 is accepted
        0.8
    """
    def init(params):
        dtype = _value_dtype(params)
        return ScaleByBacktrackingLinesearchState(
            learning_rate=jnp.array(1.0, dtype=dtype), value=jnp.array(jnp.inf, dtype=dtype),
            grad=tree_zeros_like(params) if store_grad else None,
            info=BacktrackingLinesearchInfo(jnp.asarray(0), jnp.array(jnp.inf, dtype=dtype)))

    def decrease_error_of(stepsize, slope, value, new_value):
        error = new_value - (1.0 + rtol) * value - stepsize * slope_rtol * slope
        error = jnp.where(jnp.isnan(error), jnp.inf, error)
        return jnp.maximum(error, 0.0)

    def update(updates, state, params=None, *, value, grad, value_fn, **extra_args):
        (fn_kwargs,), remaining = _extract_fns_kwargs((value_fn,), extra_args)
        if remaining:
            raise TypeError("Unexpected keyword arguments passed to "
                            "`scale_by_backtracking_linesearch.update`. These arguments were "
                            f"not consumed by `value_fn`: {sorted(remaining)}. Ensure that all "
                            "extra keyword arguments are accepted by `value_fn`.")
        objective = functools.partial(value_fn, **fn_kwargs)
        slope = tree_real(tree_vdot(updates, tree_conj(grad)))

        def cond(search):
            return ~(search.decrease_error <= atol) & (search.iter_num <= max_backtracking_steps)

        def body(search):
            learning_rate = jnp.where(search.iter_num > 0,
                                      decrease_factor * search.learning_rate,
                                      search.learning_rate)
            new_params = tree_add_scale(params, learning_rate, updates)
            new_value = objective(new_params)
            error = decrease_error_of(learning_rate, slope, value, new_value)
            new_grad = search.new_grad
            if store_grad:
                # the gradient is only needed where the search stops
                stops = (error <= atol) | (search.iter_num == max_backtracking_steps)
                new_grad = lax.cond(stops, lambda p: _api.grad(objective)(p),
                                    lambda _: search.new_grad, new_params)
            new_search = _BacktrackingSearch(learning_rate, new_value, new_grad, error,
                                             search.iter_num + 1)
            return tree_cast_like(new_search, search)

        learning_rate = jnp.minimum(increase_factor * state.learning_rate, max_learning_rate)
        search = _BacktrackingSearch(learning_rate, value, tree_zeros_like(params),
                                     jnp.array(jnp.inf), jnp.asarray(0))
        search = lax.while_loop(cond, body, search)
        # a step into non-finite values is not taken at all
        new_learning_rate = jnp.where(jnp.isinf(search.decrease_error), 0.0,
                                      search.learning_rate)
        if verbose:
            _cond_print(search.decrease_error > atol,
                        "INFO: optim.scale_by_backtracking_linesearch:\nBacktracking linesearch "
                        "failed to find a stepsize ensuring sufficient decrease.\nValue at "
                        "current params: {value},\nSlope along update direction: {slope}\n"
                        "Stepsize: {stepsize}\nDecrease Error: {decrease_error}",
                        stepsize=search.learning_rate, decrease_error=search.decrease_error,
                        value=value, slope=slope)
            _cond_print(jnp.isinf(search.decrease_error),
                        "Using a stepsize of 0 to avoid infinite or nan values.")
        info = BacktrackingLinesearchInfo(search.iter_num, search.decrease_error)
        new_state = ScaleByBacktrackingLinesearchState(
            new_learning_rate, search.new_value, search.new_grad if store_grad else None, info)
        return tree_scale(new_learning_rate, updates), tree_cast_like(new_state, state)

    return GradientTransformationExtraArgs(init, update)


# =============================================================================================
# Zoom (strong Wolfe)
# =============================================================================================

FLAG_INTERVAL_NOT_FOUND = ("No interval satisfying curvature condition. Consider increasing "
                           "maximal possible stepsize of the linesearch.")
FLAG_INTERVAL_TOO_SMALL = "Length of searched interval has been reduced below threshold."
FLAG_CURVATURE_COND_NOT_SATISFIED = ("Returning stepsize with sufficient decrease but "
                                     "curvature condition not satisfied.")
FLAG_NO_STEPSIZE_FOUND = "Linesearch failed, no stepsize satisfying sufficient decrease found."
FLAG_NOT_A_DESCENT_DIRECTION = ("The linesearch failed because the provided direction is "
                                "not a descent direction. ")


class _ZoomState(NamedTuple):
    """The loop carry of the zoom line search."""
    count: Any
    params: Any
    updates: Any
    stepsize_guess: Any
    stepsize: Any
    value: Any
    grad: Any
    slope: Any
    value_init: Any
    slope_init: Any
    decrease_error: Any
    curvature_error: Any
    error: Any
    interval_found: Any
    done: Any
    failed: Any
    low: Any
    value_low: Any
    slope_low: Any
    high: Any
    value_high: Any
    slope_high: Any
    cubic_ref: Any
    value_cubic_ref: Any
    safe_stepsize: Any
    safe_value: Any
    safe_grad: Any


def _cubicmin(a, fa, fpa, b, fb, c, fc):
    """The minimizer of the cubic through ``(a, fa)`` with slope ``fpa``, ``(b, fb)`` and
    ``(c, fc)`` (NaN when it has none)."""
    C = fpa  # noqa: N806 (the polynomial's coefficients)
    db, dc = b - a, c - a
    denom = (db * dc) ** 2 * (db - dc)
    d1 = jnp.array([[dc ** 2, -db ** 2], [-dc ** 3, db ** 3]])
    A, B = jnp.dot(d1, jnp.array([fb - fa - C * db, fc - fa - C * dc]),  # noqa: N806
                   precision=lax.Precision.HIGHEST) / denom
    radical = B * B - 3.0 * A * C
    return a + (-B + jnp.sqrt(radical)) / (3.0 * A)


def _quadmin(a, fa, fpa, b, fb):
    """The minimizer of the quadratic through ``(a, fa)`` with slope ``fpa`` and ``(b, fb)``."""
    db = b - a
    B = (fb - fa - fpa * db) / db ** 2  # noqa: N806
    return a - fpa / (2.0 * B)


def _on_line(value_and_grad_fn, params, stepsize, updates, fn_kwargs):
    """The objective, its gradient and the slope along ``updates`` at ``stepsize``."""
    step = tree_add_scale(params, stepsize, updates)
    value, grad = value_and_grad_fn(step, **fn_kwargs)
    slope = tree_real(tree_vdot(tree_conj(grad), updates))
    return value, grad, slope


def _print_failure_diagnostic(state):
    """Why the zoom search found no step size, printed (the search has failed)."""
    debug.print(FLAG_NO_STEPSIZE_FOUND, ordered=True)
    is_descent = state.slope_init < 0.0
    _cond_print(~is_descent, FLAG_NOT_A_DESCENT_DIRECTION
                + "The slope (={slope_init}) at stepsize=0 should be negative",
                slope_init=state.slope_init)
    _cond_print(is_descent, "Consider augmenting the maximal number of linesearch "
                "iterations.")
    eps = jnp.finfo(jnp.float32).eps
    _cond_print((state.stepsize < eps) & is_descent,
                "Computed stepsize (={stepsize}) is below machine precision (={eps}), "
                "consider passing to higher precision (x64).", stepsize=state.stepsize,
                eps=eps)
    abs_slope = jnp.abs(state.slope_init)
    _cond_print((abs_slope > 1e16) & is_descent,
                "Very large absolute slope at stepsize=0. (|slope|={abs_slope_init}). The "
                "objective is badly conditioned. Consider reparameterizing objective (e.g., "
                "normalizing parameters) or finding a better guess for the initial "
                "parameters for the solver.", abs_slope_init=abs_slope)
    outside_domain = jnp.isinf(state.decrease_error)
    _cond_print(outside_domain, "Cannot even make a step without getting Inf or Nan. The "
                "linesearch won't make a step and the optimizer is stuck.")
    _cond_print(~outside_domain, "Making an unsafe step, not decreasing enough the "
                "objective. Convergence of the solver is compromised as it does not reduce "
                "values.")


def _print_unsafe_step(state, interval_threshold):
    """The state of a failed search, and why, printed before it falls back to a safe step."""
    debug.print("INFO: optim.scale_by_zoom_linesearch:\nValue at current params: "
                "{value_init}\nSlope along update direction: {slope_init}\nStepsize "
                "reached: {stepsize}\nDecrease Error: {decrease_error}\nCurvature "
                "Error: {curvature_error}", value_init=state.value_init,
                slope_init=state.slope_init, stepsize=state.stepsize,
                decrease_error=state.decrease_error,
                curvature_error=state.curvature_error, ordered=True)
    interval_length = jnp.abs(state.low - state.high)
    _cond_print(interval_length <= interval_threshold,
                FLAG_INTERVAL_TOO_SMALL + " Interval length: {interval_length}.",
                interval_length=interval_length)
    lax.cond(state.safe_stepsize > 0.0,
             lambda s: debug.print(FLAG_CURVATURE_COND_NOT_SATISFIED + " Stepsize "
                                   "ensuring sufficient decrease: {safe_stepsize}.",
                                   safe_stepsize=s.safe_stepsize),
             _print_failure_diagnostic, state)


def _zoom_init(updates, params, *, value, grad, prev_stepsize=1.0, initial_guess_strategy="one"):
    """The zoom search's state before its first step, at ``params`` along ``updates``."""
    if initial_guess_strategy == "one":
        stepsize_guess = jnp.asarray(1.0)
    elif initial_guess_strategy == "keep":
        stepsize_guess = prev_stepsize
    else:
        raise ValueError(f"Unknown initial guess strategy: {initial_guess_strategy}")
    dtype = _value_dtype(params)
    slope = tree_real(tree_vdot(updates, grad))
    return _ZoomState(
        count=jnp.asarray(0), params=params, updates=updates,
        stepsize_guess=stepsize_guess, stepsize=jnp.asarray(0.0, dtype=dtype),
        value=jnp.array(value, dtype=dtype), grad=grad, slope=slope, value_init=value,
        slope_init=slope, decrease_error=jnp.asarray(jnp.inf),
        curvature_error=jnp.asarray(jnp.inf), error=jnp.asarray(jnp.inf),
        interval_found=jnp.asarray(False), done=jnp.asarray(False),
        failed=jnp.asarray(False), low=jnp.asarray(0.0), value_low=value,
        slope_low=slope, high=jnp.asarray(0.0), value_high=value, slope_high=slope,
        cubic_ref=jnp.asarray(0.0), value_cubic_ref=value, safe_stepsize=jnp.asarray(0.0),
        safe_value=value, safe_grad=grad)


def _zoom_linesearch(max_linesearch_steps, max_stepsize, tol, increase_factor, slope_rtol,
                     curv_rtol, approx_dec_rtol, interval_threshold, verbose):
    """The zoom search as ``(init, step, cond)`` for a ``lax.while_loop``."""

    def decrease_error_of(stepsize, value, slope, value_init, slope_init):
        error = value - value_init - slope_rtol * stepsize * slope_init
        if approx_dec_rtol is not None:
            # the approximate Wolfe condition of Hager & Zhang, robust to round-off near
            # the minimum
            approx = slope - (2 * slope_rtol - 1.0) * slope_init
            delta_values = value - value_init - approx_dec_rtol * jnp.abs(value_init)
            error = jnp.minimum(jnp.maximum(approx, delta_values), error)
        error = jnp.maximum(error, 0.0)
        return jnp.where(jnp.isnan(error), jnp.inf, error)

    def curvature_error_of(slope, slope_init):
        error = jnp.maximum(jnp.abs(slope) - curv_rtol * jnp.abs(slope_init), 0.0)
        return jnp.where(jnp.isnan(error), jnp.inf, error)

    def try_safe_step(state):
        # fall back to the best step with sufficient decrease, or to the last one tried
        outside_domain = jnp.isinf(state.decrease_error)
        stepsize, value, grad = tree_where(
            (state.safe_stepsize > 0.0) | outside_domain,
            [state.safe_stepsize, state.safe_value, state.safe_grad],
            [state.stepsize, state.value, state.grad])
        if verbose:
            _print_unsafe_step(state, interval_threshold)
        new_state = state._replace(stepsize=stepsize, grad=grad, value=value)
        return tree_cast_like(new_state, state)

    def search_interval(state, value_and_grad_fn, fn_kwargs):
        """Grow the step until it brackets a point satisfying the Wolfe conditions."""
        iter_num = state.count
        new_stepsize = jnp.where(iter_num == 0, state.stepsize_guess,
                                 increase_factor * state.stepsize)
        if max_stepsize is not None:
            max_stepsize_reached = new_stepsize >= max_stepsize
            new_stepsize = jnp.minimum(new_stepsize, max_stepsize)
        else:
            max_stepsize_reached = jnp.asarray(False)
        value, grad, slope = _on_line(value_and_grad_fn, state.params, new_stepsize,
                                     state.updates, fn_kwargs)
        decrease_error = decrease_error_of(new_stepsize, value, slope, state.value_init,
                                           state.slope_init)
        curvature_error = curvature_error_of(slope, state.slope_init)
        error = jnp.maximum(decrease_error, curvature_error)
        safe_stepsize, safe_value, safe_grad = tree_where(
            decrease_error <= tol, [new_stepsize, value, grad],
            [state.safe_stepsize, state.safe_value, state.safe_grad])
        set_high_to_new = (decrease_error > 0.0) | ((value >= state.value) & (iter_num > 0))
        set_low_to_new = (slope >= 0.0) & ~set_high_to_new
        low, value_low, slope_low, high, value_high, slope_high = tree_where(
            set_low_to_new,
            [new_stepsize, value, slope, state.stepsize, state.value, state.slope],
            [state.stepsize, state.value, state.slope, new_stepsize, value, slope])
        interval_found = set_high_to_new | set_low_to_new | (error <= tol)
        done = (error <= tol) | (max_stepsize_reached & ~interval_found)
        if verbose:
            _cond_print(max_stepsize_reached & ~interval_found,
                        "INFO: optim.scale_by_zoom_linesearch:\nValue at current params: "
                        "{value_init}\nSlope along update direction: {slope_init}\nStepsize "
                        "reached: {stepsize}\nDecrease Error: {decrease_error}\nCurvature "
                        "Error: {curvature_error}" + FLAG_INTERVAL_NOT_FOUND + "\n"
                        + FLAG_CURVATURE_COND_NOT_SATISFIED, value_init=state.value_init,
                        slope_init=state.slope_init, stepsize=new_stepsize,
                        decrease_error=decrease_error, curvature_error=curvature_error)
        failed = (iter_num + 1 >= max_linesearch_steps) & ~done
        new_state = state._replace(
            count=safe_increment(iter_num), stepsize=new_stepsize, value=value, grad=grad,
            slope=slope, decrease_error=decrease_error, curvature_error=curvature_error,
            error=error, interval_found=jnp.asarray(interval_found), done=jnp.asarray(done),
            failed=jnp.asarray(failed), low=low, value_low=value_low, slope_low=slope_low,
            high=high, value_high=value_high, slope_high=slope_high, cubic_ref=low,
            value_cubic_ref=value_low, safe_stepsize=safe_stepsize, safe_value=safe_value,
            safe_grad=safe_grad)
        return tree_cast_like(new_state, state)

    def zoom_into_interval(state, value_and_grad_fn, fn_kwargs):
        """Shrink the bracket ``[low, high]`` around a Wolfe point by cubic, quadratic or
        bisection steps (the first that lands well inside the bracket)."""
        low, value_low, slope_low = state.low, state.value_low, state.slope_low
        high, value_high, slope_high = state.high, state.value_high, state.slope_high
        delta = jnp.abs(high - low)
        left, right = jnp.minimum(high, low), jnp.maximum(high, low)
        too_small_interval = delta <= interval_threshold
        middle_cubic = _cubicmin(low, value_low, slope_low, high, value_high, state.cubic_ref,
                                 state.value_cubic_ref)
        use_cubic = (middle_cubic > left + 0.2 * delta) & (middle_cubic < right - 0.2 * delta)
        middle_quad = _quadmin(low, value_low, slope_low, high, value_high)
        use_quad = ~use_cubic & (middle_quad > left + 0.1 * delta) & (
            middle_quad < right - 0.1 * delta)
        use_bisection = ~use_cubic & ~use_quad
        middle = jnp.where(use_cubic, middle_cubic, state.cubic_ref)
        middle = jnp.where(use_quad, middle_quad, middle)
        middle = jnp.where(use_bisection, (low + high) / 2.0, middle)
        value, grad, slope = _on_line(value_and_grad_fn, state.params, middle, state.updates,
                                     fn_kwargs)
        decrease_error = decrease_error_of(middle, value, slope, state.value_init,
                                           state.slope_init)
        curvature_error = curvature_error_of(slope, state.slope_init)
        error = jnp.maximum(decrease_error, curvature_error)
        update_safe = (decrease_error <= tol) & (value < state.safe_value)
        safe_stepsize, safe_value, safe_grad = tree_where(
            update_safe, [middle, value, grad],
            [state.safe_stepsize, state.safe_value, state.safe_grad])
        done = error <= tol
        set_high_to_middle = (decrease_error > 0.0) | (value >= value_low)
        set_high_to_low = (slope * (high - low) >= 0.0) & ~set_high_to_middle
        set_low_to_middle = ~set_high_to_middle
        high_, value_high_, slope_high_ = tree_where(set_high_to_middle, [middle, value, slope],
                                                     [high, value_high, slope_high])
        new_high, new_value_high, new_slope_high = tree_where(
            set_high_to_low, [low, value_low, slope_low], [high_, value_high_, slope_high_])
        new_low, new_value_low, new_slope_low = tree_where(
            set_low_to_middle, [middle, value, slope], [low, value_low, slope_low])
        new_cubic_ref, new_value_cubic_ref = tree_where(
            set_high_to_middle | set_high_to_low, [high, value_high], [low, value_low])
        max_iter_reached = state.count + 1 >= max_linesearch_steps
        presumably_failed = jnp.asarray(max_iter_reached) | (too_small_interval
                                                             & (safe_stepsize > 0.0))
        new_state = state._replace(
            count=safe_increment(state.count), stepsize=middle, value=value, grad=grad,
            slope=slope, decrease_error=decrease_error, curvature_error=curvature_error,
            error=error, done=done, failed=presumably_failed & ~done, low=new_low,
            value_low=new_value_low, slope_low=new_slope_low, high=new_high,
            value_high=new_value_high, slope_high=new_slope_high, cubic_ref=new_cubic_ref,
            value_cubic_ref=new_value_cubic_ref, safe_stepsize=safe_stepsize,
            safe_value=safe_value, safe_grad=safe_grad)
        return tree_cast_like(new_state, state)

    def step(state, *, value_and_grad_fn, fn_kwargs):
        kwargs = dict(value_and_grad_fn=value_and_grad_fn, fn_kwargs=fn_kwargs)
        new_state = lax.cond(state.interval_found,
                             functools.partial(zoom_into_interval, **kwargs),
                             functools.partial(search_interval, **kwargs), state)
        new_state = lax.cond(new_state.failed, try_safe_step, lambda s: s, new_state)
        return tree_cast_like(new_state, state)

    def cond(state):
        return ~(state.done | state.failed)

    return _zoom_init, step, cond


class ZoomLinesearchInfo(NamedTuple):
    """Diagnostics of the last zoom search."""
    num_linesearch_steps: Any
    decrease_error: Any
    curvature_error: Any


class ScaleByZoomLinesearchState(NamedTuple):
    """The state of :func:`scale_by_zoom_linesearch`: the accepted step size, the objective
    and its gradient at the accepted point, and the search's diagnostics."""
    learning_rate: Any
    value: Any
    grad: Any
    info: ZoomLinesearchInfo


def scale_by_zoom_linesearch(max_linesearch_steps: int, max_learning_rate=None, tol=0.0,
                             increase_factor=2.0, slope_rtol=1e-4, curv_rtol=0.9,
                             approx_dec_rtol=1e-6, stepsize_precision=1e-5,
                             initial_guess_strategy: str = "keep", verbose: bool = False
                             ) -> GradientTransformationExtraArgs:
    """Scale the update ``u`` by a step ``s`` satisfying the strong Wolfe conditions,
    found by bracketing and zooming (Nocedal & Wright, algorithms 3.5-3.6)::

        f(x + s u) <= f(x) + slope_rtol * s * <u, grad f(x)>          (sufficient decrease)
        |<u, grad f(x + s u)>| <= curv_rtol * |<u, grad f(x)>|         (curvature)

    with Hager & Zhang's approximate decrease condition (``approx_dec_rtol``; None turns it
    off). The search starts from 1 (``initial_guess_strategy="one"``) or the previous step
    (``"keep"``), grows by ``increase_factor`` up to ``max_learning_rate`` until the
    interval is bracketed, then zooms by cubic/quadratic interpolation or bisection, for at
    most ``max_linesearch_steps`` evaluations; if it fails, the best step with sufficient
    decrease is taken. ``update`` needs ``value`` and ``grad`` at ``params`` and ``value_fn``
    (other keyword arguments go to ``value_fn``); the value and gradient at the accepted
    point are kept in the state for :func:`value_and_grad_from_state`.

        >>> import functrans, functrans.numpy as jnp
        >>> f = lambda x: jnp.sum((x - 3.0) ** 2)
        >>> opt = scale_by_zoom_linesearch(max_linesearch_steps=15)
        >>> x = jnp.zeros(1)
        >>> value, grad = functrans.value_and_grad(f)(x)
        >>> updates, state = opt.update(-grad, opt.init(x), x, value=value, grad=grad,
        ...                             value_fn=f)
        >>> x + updates   # the exact minimizer along -grad
        Array([3.], dtype=float32)
    """
    init_search, step_search, cond_search = _zoom_linesearch(
        max_linesearch_steps=max_linesearch_steps, max_stepsize=max_learning_rate, tol=tol,
        increase_factor=increase_factor, slope_rtol=slope_rtol, curv_rtol=curv_rtol,
        approx_dec_rtol=approx_dec_rtol, interval_threshold=stepsize_precision,
        verbose=verbose)

    def init(params):
        dtype = _value_dtype(params)
        return ScaleByZoomLinesearchState(
            learning_rate=jnp.asarray(1.0, dtype=dtype), value=jnp.asarray(jnp.inf, dtype=dtype),
            grad=tree_zeros_like(params),
            info=ZoomLinesearchInfo(jnp.asarray(0), jnp.asarray(jnp.inf), jnp.asarray(jnp.inf)))

    def update(updates, state, params=None, *, value, grad, value_fn, **extra_args):
        (fn_kwargs,), remaining = _extract_fns_kwargs((value_fn,), extra_args)
        if remaining:
            raise TypeError("Unexpected keyword arguments passed to "
                            "`scale_by_zoom_linesearch.update`. These arguments were not "
                            f"consumed by `value_fn`: {sorted(remaining)}. Ensure that all "
                            "extra keyword arguments are accepted by `value_fn`.")
        start = init_search(updates, params, value=value, grad=grad,
                            prev_stepsize=state.learning_rate,
                            initial_guess_strategy=initial_guess_strategy)
        final = lax.while_loop(
            cond_search,
            functools.partial(step_search, value_and_grad_fn=_api.value_and_grad(value_fn),
                              fn_kwargs=fn_kwargs),
            start)
        info = ZoomLinesearchInfo(final.count, final.decrease_error, final.curvature_error)
        new_state = ScaleByZoomLinesearchState(final.stepsize, final.value, final.grad, info)
        return tree_scale(final.stepsize, updates), tree_cast_like(new_state, state)

    return GradientTransformationExtraArgs(init, update)


def value_and_grad_from_state(value_fn: Callable) -> Callable:
    """Like ``value_and_grad(value_fn)``, but reuse the value and gradient a line search
    left in the optimizer state (``state=`` keyword) when they are there and finite,
    saving an evaluation per step of L-BFGS.

        >>> import functrans.numpy as jnp
        >>> from functrans import optim
        >>> f = lambda x: jnp.sum(x ** 2)
        >>> opt = optim.lbfgs()
        >>> x = jnp.array([1.0, 2.0])
        >>> state = opt.init(x)
        >>> value_and_grad = value_and_grad_from_state(f)
        >>> value, grad = value_and_grad(x, state=state)   # computed: nothing stored yet
        >>> updates, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=f)
        >>> x = optim.apply_updates(x, updates)
        >>> value, grad = value_and_grad(x, state=state)   # read back from the state
        >>> bool(value == f(x)), bool(value == state[2].value)
        (True, True)
    """
    def value_and_grad(params, *fn_args, state, **fn_kwargs):
        value = tree_get(state, "value")
        grad = tree_get(state, "grad")
        if value is None or grad is None:
            raise ValueError("Value or gradient not found in the state. Make sure that these "
                             "values are stored in the state by the optimizer.")
        return lax.cond(~jnp.isinf(value) & ~jnp.isnan(value),
                        lambda *_: (value, grad),
                        lambda p, a, kw: _api.value_and_grad(value_fn)(p, *a, **kw),
                        params, fn_args, fn_kwargs)

    return value_and_grad
