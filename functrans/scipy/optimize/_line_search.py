"""An inexact line search that finds a step satisfying the strong Wolfe conditions.

This is Algorithms 3.5 (bracketing) and 3.6 (zoom) of Nocedal & Wright, *Numerical
Optimization* (2nd ed., 2006), written as a single ``lax.while_loop`` so that it can be
staged by ``jit`` and batched by ``vmap``: every iteration evaluates the objective once,
at a trial step chosen by whichever phase the search is in.
"""
from __future__ import annotations

from typing import NamedTuple

from functrans import _api
from functrans import lax
from functrans import numpy as jnp

__all__ = ["line_search", "LineSearchResults"]

# status codes (BFGS reports ``2 + status`` when the search fails)
_OK, _ZOOM_FAILED, _NOT_DESCENT, _MAX_ITERATIONS = 0, 1, 2, 3


class LineSearchResults(NamedTuple):
    """The outcome of :func:`line_search`.

    ``failed``: no step satisfying the strong Wolfe conditions was found; then ``a_k`` is the
    best step seen that still decreases ``f`` enough (possibly 0). ``nit``: iterations of
    the search; ``nfev``/``ngev``: objective and gradient evaluations; ``k``: the same as
    ``nit``; ``a_k``, ``f_k``, ``g_k``: the step, the value and the gradient there;
    ``status``: 0 success, 1 the zoom phase failed, 2 ``pk`` is not a descent direction,
    3 the iteration limit was reached.
    """
    failed: object
    nit: object
    nfev: object
    ngev: object
    k: object
    a_k: object
    f_k: object
    g_k: object
    status: object


def _cubic_minimizer(a_lo, phi_lo, dphi_lo, a_hi, phi_hi, dphi_hi):
    """The minimizer of the cubic matching ``phi`` and ``phi'`` at both ends (N&W eq. 3.59);
    NaN where that cubic has no real minimizer."""
    d1 = dphi_lo + dphi_hi - 3.0 * (phi_lo - phi_hi) / (a_lo - a_hi)
    radicand = d1 * d1 - dphi_lo * dphi_hi
    d2 = jnp.sign(a_hi - a_lo) * jnp.sqrt(jnp.where(radicand >= 0, radicand, jnp.nan))
    return a_hi - (a_hi - a_lo) * (dphi_hi + d2 - d1) / (dphi_hi - dphi_lo + 2.0 * d2)


def _zoom_trial(a_lo, phi_lo, dphi_lo, a_hi, phi_hi, dphi_hi):
    """A trial step inside the bracket: the cubic's minimizer when it lies safely inside
    (not within 10% of either end, so the bracket keeps shrinking), else the midpoint."""
    cubic = _cubic_minimizer(a_lo, phi_lo, dphi_lo, a_hi, phi_hi, dphi_hi)
    left, right = jnp.minimum(a_lo, a_hi), jnp.maximum(a_lo, a_hi)
    margin = 0.1 * (right - left)
    safe = jnp.isfinite(cubic) & (cubic > left + margin) & (cubic < right - margin)
    return jnp.where(safe, cubic, 0.5 * (a_lo + a_hi))


def _pick(*cases, default):
    """``default``, replaced by the value of each ``(condition, value)`` case that holds (a
    later case wins over an earlier one)."""
    out = default
    for cond, value in cases:
        out = jnp.where(cond, value, out)
    return out


def _moved_bracket(s, a, phi, dphi, g, *, enter_after, enter_before, zoom_hi, zoom_lo,
                   zoom_flip, expand):
    """The search state ``s`` with the bracket and the last bracketing step moved for the
    trial step ``a`` (value ``phi``, gradient ``g``, slope ``dphi``). In the bracketing phase
    the new bracket is [prev, a] (``enter_after``) or [a, prev] (``enter_before``), or the
    step grows (``expand``); in the zoom phase ``a`` replaces hi, or replaces lo, the old lo
    moving to hi on a flip."""
    new = dict(s)
    new["a_lo"] = _pick((enter_after, s["a_prev"]), (enter_before, a), (zoom_lo, a),
                        default=s["a_lo"])
    new["phi_lo"] = _pick((enter_after, s["phi_prev"]), (enter_before, phi),
                          (zoom_lo, phi), default=s["phi_lo"])
    new["dphi_lo"] = _pick((enter_after, s["dphi_prev"]), (enter_before, dphi),
                           (zoom_lo, dphi), default=s["dphi_lo"])
    new["g_lo"] = _pick((enter_after, s["g_prev"]), (enter_before, g), (zoom_lo, g),
                        default=s["g_lo"])
    new["a_hi"] = _pick((enter_after, a), (enter_before, s["a_prev"]), (zoom_hi, a),
                        (zoom_flip, s["a_lo"]), default=s["a_hi"])
    new["phi_hi"] = _pick((enter_after, phi), (enter_before, s["phi_prev"]),
                          (zoom_hi, phi), (zoom_flip, s["phi_lo"]), default=s["phi_hi"])
    new["dphi_hi"] = _pick((enter_after, dphi), (enter_before, s["dphi_prev"]),
                           (zoom_hi, dphi), (zoom_flip, s["dphi_lo"]),
                           default=s["dphi_hi"])
    new["a_prev"] = jnp.where(expand, a, s["a_prev"])
    new["phi_prev"] = jnp.where(expand, phi, s["phi_prev"])
    new["dphi_prev"] = jnp.where(expand, dphi, s["dphi_prev"])
    new["g_prev"] = jnp.where(expand, g, s["g_prev"])
    new["next_a"] = jnp.where(expand, 2.0 * a, s["next_a"])
    return new


def line_search(f, xk, pk, old_fval=None, old_old_fval=None, gfk=None, c1=1e-4, c2=0.9,
                maxiter=20):
    """Find a step ``a`` along ``pk`` from ``xk`` satisfying the strong Wolfe conditions
    ``f(xk + a pk) <= f(xk) + c1 a g.pk`` and ``|g(xk + a pk).pk| <= c2 |g.pk|``.

    Args:
      f: a scalar function of a 1-D array, differentiable with ``grad``.
      xk: the starting point; pk: a descent direction.
      old_fval, gfk: ``f(xk)`` and its gradient, if already known.
      old_old_fval: the objective at the previous iterate; sets the first trial step as
        SciPy does (``min(1, 2.02 (f_k - f_{k-1}) / g.pk)``), else the first trial is 1.
      c1, c2: the sufficient-decrease and curvature constants, ``0 < c1 < c2 < 1``.
      maxiter: the most objective evaluations.

    Returns a :class:`LineSearchResults`. Works under ``jit`` and ``vmap``.

        >>> f = lambda x: jnp.sum((x - 1.0) ** 2)
        >>> line_search(f, jnp.zeros(2), jnp.array([1.0, 1.0])).a_k
        Array(1., dtype=float32)
    """
    xk = jnp.asarray(xk)
    pk = jnp.asarray(pk, dtype=xk.dtype)
    value_and_grad = _api.value_and_grad(f)

    def phi_and_grad(a):
        value, g = value_and_grad(xk + a * pk)
        return value, g, jnp.real(jnp.vdot(g, pk))

    if old_fval is None or gfk is None:
        phi0, g0 = value_and_grad(xk)
        initial_evals = 1
    else:
        phi0, g0 = jnp.asarray(old_fval), jnp.asarray(gfk)
        initial_evals = 0
    dphi0 = jnp.real(jnp.vdot(g0, pk))
    real_dtype = jnp.result_type(phi0)

    first = jnp.ones((), real_dtype)
    if old_old_fval is not None:
        guess = 1.01 * 2.0 * (phi0 - old_old_fval) / dphi0
        first = jnp.where(jnp.isfinite(guess) & (guess > 0), jnp.minimum(1.0, guess), 1.0)
    first = first.astype(real_dtype)
    zero = jnp.zeros((), real_dtype)

    # The state names the two phases' points explicitly: ``prev`` is the last accepted
    # bracketing step (it always satisfies sufficient decrease), ``lo``/``hi`` the zoom
    # bracket, where ``lo`` is the best point seen so far.
    state = dict(
        i=jnp.int32(0), done=jnp.array(False), failed=jnp.array(False),
        status=jnp.int32(_OK), zooming=jnp.array(False),
        next_a=first,
        a_prev=zero, phi_prev=phi0, dphi_prev=dphi0, g_prev=g0,
        a_lo=zero, phi_lo=phi0, dphi_lo=dphi0, g_lo=g0,
        a_hi=zero, phi_hi=phi0, dphi_hi=dphi0,
        a_star=zero, phi_star=phi0, g_star=g0,
    )
    not_descent = ~(dphi0 < 0)
    state["done"] = not_descent
    state["failed"] = not_descent
    state["status"] = jnp.where(not_descent, _NOT_DESCENT, _OK).astype(jnp.int32)

    def keep_going(s):
        return ~s["done"] & (s["i"] < maxiter)

    def step(s):
        zoom_a = _zoom_trial(s["a_lo"], s["phi_lo"], s["dphi_lo"],
                             s["a_hi"], s["phi_hi"], s["dphi_hi"])
        a = jnp.where(s["zooming"], zoom_a, s["next_a"])
        phi, g, dphi = phi_and_grad(a)
        too_high = (phi > phi0 + c1 * a * dphi0) | ~jnp.isfinite(phi)
        flat_enough = jnp.abs(dphi) <= -c2 * dphi0

        # bracketing (Algorithm 3.5)
        b_zoom_after = too_high | ((s["i"] > 0) & (phi >= s["phi_prev"]))
        b_accept = ~b_zoom_after & flat_enough
        b_zoom_before = ~b_zoom_after & ~b_accept & (dphi >= 0)
        b_expand = ~(b_zoom_after | b_accept | b_zoom_before)

        # zoom (Algorithm 3.6)
        z_new_hi = too_high | (phi >= s["phi_lo"])
        z_accept = ~z_new_hi & flat_enough
        z_new_lo = ~z_new_hi & ~z_accept
        z_flip = z_new_lo & (dphi * (s["a_hi"] - s["a_lo"]) >= 0)

        zooming = s["zooming"]
        bracketing = ~zooming
        accept = jnp.where(zooming, z_accept, b_accept)

        # the new bracket: in the bracketing phase it is [prev, a] or [a, prev]; in the
        # zoom phase a replaces hi, or replaces lo (the old lo moving to hi on a flip)
        enter_after = bracketing & b_zoom_after
        enter_before = bracketing & b_zoom_before
        zoom_hi = zooming & z_new_hi
        zoom_lo = zooming & z_new_lo
        zoom_flip = zooming & z_flip
        expand = bracketing & b_expand
        new = _moved_bracket(s, a, phi, dphi, g, enter_after=enter_after,
                             enter_before=enter_before, zoom_hi=zoom_hi, zoom_lo=zoom_lo,
                             zoom_flip=zoom_flip, expand=expand)
        new["zooming"] = zooming | enter_after | enter_before

        # a bracket narrower than rounding can resolve will never yield a Wolfe point
        width = jnp.abs(new["a_hi"] - new["a_lo"])
        collapsed = new["zooming"] & ~accept & (
            width <= 10 * jnp.finfo(real_dtype).eps * jnp.maximum(1.0, jnp.abs(new["a_lo"])))
        i = s["i"] + 1
        out_of_iterations = ~accept & ~collapsed & (i >= maxiter)
        failed = collapsed | out_of_iterations

        # on success report the accepted point, on failure the best point seen
        best_a = jnp.where(new["zooming"], new["a_lo"], new["a_prev"])
        best_phi = jnp.where(new["zooming"], new["phi_lo"], new["phi_prev"])
        best_g = jnp.where(new["zooming"], new["g_lo"], new["g_prev"])
        new["a_star"] = jnp.where(accept, a, best_a)
        new["phi_star"] = jnp.where(accept, phi, best_phi)
        new["g_star"] = jnp.where(accept, g, best_g)
        new["i"] = i
        new["done"] = accept | failed
        new["failed"] = failed
        new["status"] = _pick((collapsed, _ZOOM_FAILED), (out_of_iterations, _MAX_ITERATIONS),
                              default=s["status"]).astype(jnp.int32)
        return new

    s = lax.while_loop(keep_going, step, state)
    # maxiter == 0 (or a search that never ran) leaves ``done`` unset
    failed = s["failed"] | ~s["done"]
    status = jnp.where(~s["done"], _MAX_ITERATIONS, s["status"]).astype(jnp.int32)
    evals = s["i"] + initial_evals
    return LineSearchResults(failed=failed, nit=s["i"], nfev=evals, ngev=evals, k=s["i"],
                             a_k=s["a_star"], f_k=s["phi_star"], g_k=s["g_star"],
                             status=status)
