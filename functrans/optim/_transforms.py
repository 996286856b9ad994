"""Building blocks: small gradient transformations that the optimizers chain together.

Each follows its published rule; the docstrings give the formula. ``g`` is the incoming
update (a gradient), ``t`` the step count starting at 1.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from functrans import _dtypes, lax
from functrans.core import get_aval
from functrans.numpy._promotion import to_array
from functrans.optim._base import (EmptyState, GradientTransformation, cast, count_zero,
                                   full_like, global_norm, identity, safe_increment, sqrt,
                                   where, zeros_like)
from functrans.tree_util import tree_flatten, tree_leaves, tree_map, tree_unflatten

__all__ = [
    "ScaleByAdamState", "ScaleByRmsState", "ScaleByRmsWithCountState", "ScaleByRStdDevState", "ScaleByRssState",
    "ScaleByScheduleState", "ScaleByLionState", "TraceState", "MaskedState", "WeightDecaySchedule",
    "MultiTransformState",
    "scale", "scale_by_adam", "scale_by_rms", "scale_by_stddev", "scale_by_rss",
    "scale_by_schedule", "scale_by_learning_rate", "scale_by_lion", "scale_by_trust_ratio",
    "add_decayed_weights", "trace", "clip", "clip_by_global_norm", "masked", "multi_transform",
]


def _moment(g, m, decay, power):
    """Exponential moving average of ``g ** power``: ``decay * m + (1 - decay) * g**power``."""
    value = g if power == 1 else g * g
    return decay * m + (1 - decay) * cast(value, m)


def _bias_correct(moment, decay, count):
    """``moment / (1 - decay**count)`` (Adam's correction of the zero-initialised average)."""
    correction = 1 - decay ** lax.convert_element_type(count, _dtypes.float32)
    return tree_map(lambda m: m / cast(correction, m), moment)


# =============================================================================================
# Scaling
# =============================================================================================

def scale(step_size) -> GradientTransformation:
    """``g * step_size``.

        >>> import functrans.numpy as jnp
        >>> scale(2.0).update(jnp.ones(1), EmptyState())[0]
        Array([2.], dtype=float32)
    """
    def update(updates, state, params=None):
        return tree_map(lambda g: g * step_size, updates), state
    return GradientTransformation(lambda params: EmptyState(), update)


class ScaleByScheduleState(NamedTuple):
    count: Any


def scale_by_schedule(step_size_fn: Callable) -> GradientTransformation:
    """``g * step_size_fn(count)`` with ``count`` the number of updates done so far (from 0).

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_schedule(lambda count: 1.0 / (count + 1))
        >>> opt.update(jnp.ones(1), opt.init(jnp.ones(1)))[0]
        Array([1.], dtype=float32)
    """
    def init(params):
        return ScaleByScheduleState(count_zero())

    def update(updates, state, params=None):
        step_size = step_size_fn(state.count)
        updates = tree_map(lambda g: g * cast(step_size, g), updates)
        return updates, ScaleByScheduleState(safe_increment(state.count))

    return GradientTransformation(init, update)


def scale_by_learning_rate(learning_rate, *, flip_sign: bool = True) -> GradientTransformation:
    """``-learning_rate * g`` (a number, or a schedule of the step count).

        >>> import functrans.numpy as jnp
        >>> scale_by_learning_rate(0.1).update(jnp.ones(1), EmptyState())[0]
        Array([-0.1], dtype=float32)
    """
    if learning_rate is None:  # no scaling at all (as optax allows for some optimizers)
        return identity()
    sign = -1 if flip_sign else 1
    if callable(learning_rate):
        return scale_by_schedule(lambda count: sign * learning_rate(count))
    return scale(sign * learning_rate)


class ScaleByAdamState(NamedTuple):
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
    mu_dtype = None if mu_dtype is None else _dtypes.canonicalize_dtype(mu_dtype)

    def init(params):
        mu = tree_map(lambda p: zeros_like(p, mu_dtype), params)
        nu = tree_map(zeros_like, params)
        return ScaleByAdamState(count_zero(), mu, nu)

    def update(updates, state, params=None):
        mu = tree_map(lambda g, m: _moment(g, m, b1, 1), updates, state.mu)
        nu = tree_map(lambda g, v: _moment(g, v, b2, 2), updates, state.nu)
        count = safe_increment(state.count)
        if nesterov:
            mu_hat = tree_map(lambda m, g: b1 * m + (1 - b1) * cast(g, m),
                              _bias_correct(mu, b1, safe_increment(count)),
                              _bias_correct(updates, b1, count))
        else:
            mu_hat = _bias_correct(mu, b1, count)
        nu_hat = _bias_correct(nu, b2, count)
        updates = tree_map(lambda m, v, g: cast(m / (sqrt(v + eps_root) + eps), g),
                           mu_hat, nu_hat, updates)
        return updates, ScaleByAdamState(count, mu, nu)

    return GradientTransformation(init, update)


class ScaleByRmsState(NamedTuple):
    nu: Any


class ScaleByRmsWithCountState(NamedTuple):
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
        nu = tree_map(lambda p: full_like(p, initial_scale), params)
        return ScaleByRmsWithCountState(count_zero(), nu) if bias_correction else ScaleByRmsState(nu)

    def update(updates, state, params=None):
        nu = tree_map(lambda g, v: _moment(g, v, decay, 2), updates, state.nu)
        nu_hat = nu
        if bias_correction:
            count = safe_increment(state.count)
            nu_hat = _bias_correct(nu, decay, count)
        if eps_in_sqrt:
            updates = tree_map(lambda g, v: g * cast(lax.rsqrt(v + eps), g), updates, nu_hat)
        else:
            updates = tree_map(lambda g, v: g / cast(sqrt(v) + eps, g), updates, nu_hat)
        new_state = ScaleByRmsWithCountState(count, nu) if bias_correction else ScaleByRmsState(nu)
        return updates, new_state

    return GradientTransformation(init, update)


class ScaleByRStdDevState(NamedTuple):
    mu: Any
    nu: Any


def scale_by_stddev(decay=0.9, eps=1e-8, initial_scale=0.0,
                    eps_in_sqrt: bool = True) -> GradientTransformation:
    """Centered RMSProp's scaling (Graves, 2013): divide by the running standard deviation::

        m = decay m + (1 - decay) g;  v = decay v + (1 - decay) g^2
        update = g / sqrt(v - m^2 + eps)
    """
    def init(params):
        return ScaleByRStdDevState(tree_map(zeros_like, params),
                                   tree_map(lambda p: full_like(p, initial_scale), params))

    def update(updates, state, params=None):
        mu = tree_map(lambda g, m: _moment(g, m, decay, 1), updates, state.mu)
        nu = tree_map(lambda g, v: _moment(g, v, decay, 2), updates, state.nu)
        if eps_in_sqrt:
            updates = tree_map(lambda g, m, v: g * lax.rsqrt(v - m * m + eps), updates, mu, nu)
        else:
            updates = tree_map(lambda g, m, v: g / (sqrt(v - m * m) + eps), updates, mu, nu)
        return updates, ScaleByRStdDevState(mu, nu)

    return GradientTransformation(init, update)


class ScaleByRssState(NamedTuple):
    sum_of_squares: Any


def scale_by_rss(initial_accumulator_value=0.1, eps=1e-7) -> GradientTransformation:
    """Adagrad's scaling (Duchi et al., 2011): ``s += g^2; update = g / sqrt(s + eps)``
    (0 where ``s`` is 0)."""
    def init(params):
        return ScaleByRssState(tree_map(lambda p: full_like(p, initial_accumulator_value), params))

    def update(updates, state, params=None):
        sums = tree_map(lambda g, s: s + cast(g * g, s), updates, state.sum_of_squares)

        def scaled(g, s):
            inverse = where(lax.gt(s, zeros_like(s)), lax.rsqrt(s + eps), zeros_like(s))
            return cast(inverse * g, g)

        return tree_map(scaled, updates, sums), ScaleByRssState(sums)

    return GradientTransformation(init, update)


class ScaleByLionState(NamedTuple):
    count: Any
    mu: Any


def scale_by_lion(b1=0.9, b2=0.99, mu_dtype=None) -> GradientTransformation:
    """Lion's direction (Chen et al., 2023)::

        update = sign(b1 m + (1 - b1) g);   m = b2 m + (1 - b2) g
    """
    mu_dtype = None if mu_dtype is None else _dtypes.canonicalize_dtype(mu_dtype)

    def init(params):
        return ScaleByLionState(count_zero(), tree_map(lambda p: zeros_like(p, mu_dtype), params))

    def update(updates, state, params=None):
        directions = tree_map(lambda g, m: cast(lax.sign(b1 * m + (1 - b1) * cast(g, m)), g),
                              updates, state.mu)
        mu = tree_map(lambda g, m: _moment(g, m, b2, 1), updates, state.mu)
        return directions, ScaleByLionState(safe_increment(state.count), mu)

    return GradientTransformation(init, update)


def _norm(x):
    x = to_array(x)
    return lax.sqrt(lax.reduce_sum(lax.mul(x, x), tuple(range(get_aval(x).ndim))))


def scale_by_trust_ratio(min_norm=0.0, trust_coefficient=1.0, eps=0.0) -> GradientTransformation:
    """LARS/LAMB's layer-wise trust ratio (You et al.): each leaf's update is scaled by
    ``trust_coefficient * |param| / (|update| + eps)``, or left alone when either norm is 0.
    Norms below ``min_norm`` count as ``min_norm``."""
    def update(updates, state, params=None):
        if params is None:
            raise ValueError("scale_by_trust_ratio needs params: call update(updates, state, "
                             "params)")

        def scaled(u, p):
            param_norm = lax.max(_norm(p), full_like(_norm(p), min_norm))
            update_norm = lax.max(_norm(u), full_like(_norm(u), min_norm))
            ratio = trust_coefficient * param_norm / (update_norm + eps)
            zero = lax.bitwise_or(lax.eq(param_norm, zeros_like(param_norm)),
                                  lax.eq(update_norm, zeros_like(update_norm)))
            safe_ratio = where(zero, full_like(ratio, 1), ratio)
            return u * cast(safe_ratio, u)

        return tree_map(scaled, updates, params), state

    return GradientTransformation(lambda params: EmptyState(), update)


# =============================================================================================
# Weight decay, momentum, clipping
# =============================================================================================

class WeightDecaySchedule(NamedTuple):
    count: Any


def add_decayed_weights(weight_decay=0.0, mask=None) -> GradientTransformation:
    """``g + weight_decay * params`` (decoupled weight decay when chained before the learning
    rate). ``weight_decay`` may be a schedule of the step count (the state then counts steps:
    :class:`WeightDecaySchedule`). ``mask`` (a pytree of bools, or a function of params
    giving one) limits it to some leaves.

        >>> import functrans.numpy as jnp
        >>> add_decayed_weights(0.1).update(jnp.zeros(1), EmptyState(), jnp.ones(1))[0]
        Array([0.1], dtype=float32)
    """
    scheduled = callable(weight_decay)

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("add_decayed_weights needs params: call update(updates, state, "
                             "params)")
        if not scheduled:
            return tree_map(lambda g, p: g + cast(weight_decay * p, g), updates, params), state
        rate = weight_decay(state.count)
        updates = tree_map(lambda g, p: g + cast(rate, g) * cast(p, g), updates, params)
        return updates, WeightDecaySchedule(safe_increment(state.count))

    def init(params):
        return WeightDecaySchedule(count_zero()) if scheduled else EmptyState()

    transform = GradientTransformation(init, update)
    return masked(transform, mask) if mask is not None else transform


class TraceState(NamedTuple):
    trace: Any


def trace(decay, nesterov: bool = False, accumulator_dtype=None) -> GradientTransformation:
    """Momentum: ``t = g + decay * t``; the update is ``t``, or ``g + decay * t`` with
    ``nesterov=True`` (Sutskever et al., 2013).

        >>> import functrans.numpy as jnp
        >>> opt = trace(0.9)
        >>> opt.update(jnp.ones(1), opt.init(jnp.zeros(1)))[0]
        Array([1.], dtype=float32)
    """
    accumulator_dtype = None if accumulator_dtype is None else \
        _dtypes.canonicalize_dtype(accumulator_dtype)

    def init(params):
        return TraceState(tree_map(lambda p: zeros_like(p, accumulator_dtype), params))

    def update(updates, state, params=None):
        new_trace = tree_map(lambda g, t: cast(g, t) + decay * t, updates, state.trace)
        if nesterov:
            out = tree_map(lambda g, t: g + cast(decay * t, g), updates, new_trace)
        else:
            out = tree_map(lambda g, t: cast(t, g), updates, new_trace)
        return out, TraceState(new_trace)

    return GradientTransformation(init, update)


def clip(max_delta) -> GradientTransformation:
    """Clip each update element to ``[-max_delta, max_delta]``.

        >>> import functrans.numpy as jnp
        >>> clip(1.0).update(jnp.array([-3.0, 0.5]), EmptyState())[0]
        Array([-1. ,  0.5], dtype=float32)
    """
    def update(updates, state, params=None):
        def clipped(g):
            g = to_array(g)
            return lax.min(lax.max(g, full_like(g, -max_delta)), full_like(g, max_delta))
        return tree_map(clipped, updates), state
    return GradientTransformation(lambda params: EmptyState(), update)


def clip_by_global_norm(max_norm) -> GradientTransformation:
    """Rescale all updates together so their global L2 norm is at most ``max_norm``.

        >>> import functrans.numpy as jnp
        >>> clip_by_global_norm(1.0).update(jnp.array([3.0, 4.0]), EmptyState())[0]
        Array([0.6, 0.8], dtype=float32)
    """
    def update(updates, state, params=None):
        norm = global_norm(updates)
        within = lax.lt(norm, full_like(norm, max_norm))
        # dividing by the norm only where it exceeds max_norm keeps 0 norms safe
        safe_norm = where(within, full_like(norm, 1), norm)
        return tree_map(lambda g: where(within, g, (g / cast(safe_norm, g)) * max_norm),
                        updates), state
    return GradientTransformation(lambda params: EmptyState(), update)


# =============================================================================================
# Applying transformations to parts of the parameters
# =============================================================================================

class MaskedState(NamedTuple):
    inner_state: Any


def _mask_leaves(mask, tree) -> list:
    """One bool per leaf of ``tree``: ``mask`` may be a prefix of its structure."""
    mask_leaves, mask_def = tree_flatten(mask)
    subtrees = mask_def.flatten_up_to(tree)
    out = []
    for flag, sub in zip(mask_leaves, subtrees):
        out.extend([bool(flag)] * len(tree_leaves(sub)))
    return out


def masked(inner: GradientTransformation, mask) -> GradientTransformation:
    """Apply ``inner`` only to the leaves where ``mask`` (a pytree of bools with the
    parameters' structure, or a prefix of it; or a function of params giving one) is True;
    other updates pass through unchanged and get no state.

        >>> import functrans.numpy as jnp
        >>> opt = masked(scale(0.0), {"frozen": True, "trained": False})
        >>> params = {"frozen": jnp.ones(1), "trained": jnp.ones(1)}
        >>> opt.update(params, opt.init(params))[0]
        {'frozen': Array([0.], dtype=float32), 'trained': Array([1.], dtype=float32)}
    """
    def flags_for(tree, params):
        m = mask(params if params is not None else tree) if callable(mask) else mask
        return _mask_leaves(m, tree)

    def select(tree, flags):
        return [leaf for leaf, f in zip(tree_leaves(tree), flags) if f]

    def init(params):
        flags = flags_for(params, params)
        return MaskedState(inner.init(select(params, flags)))

    def update(updates, state, params=None):
        flags = flags_for(updates, params)
        chosen = select(updates, flags)
        chosen_params = None if params is None else select(params, flags)
        new_chosen, inner_state = inner.update(chosen, state.inner_state, chosen_params)
        leaves, treedef = tree_flatten(updates)
        it = iter(new_chosen)
        merged = [next(it) if f else leaf for leaf, f in zip(leaves, flags)]
        return tree_unflatten(treedef, merged), MaskedState(inner_state)

    return GradientTransformation(init, update)


class MultiTransformState(NamedTuple):
    inner_states: Any


def multi_transform(transforms: dict, param_labels) -> GradientTransformation:
    """Apply ``transforms[label]`` to the leaves labelled ``label`` by ``param_labels`` (a
    pytree of labels like the parameters, or a function of params giving one).

        >>> import functrans.numpy as jnp
        >>> opt = multi_transform({"fast": scale(-1.0), "slow": scale(-0.1)},
        ...                       {"a": "fast", "b": "slow"})
        >>> params = {"a": jnp.ones(1), "b": jnp.ones(1)}
        >>> opt.update(params, opt.init(params))[0]
        {'a': Array([-1.], dtype=float32), 'b': Array([-0.1], dtype=float32)}
    """
    def labels_of(params):
        return param_labels(params) if callable(param_labels) else param_labels

    def label_mask(label):
        def mask(params):
            return tree_map(lambda lab: lab == label, labels_of(params))
        return mask

    parts = {label: masked(t, label_mask(label)) for label, t in transforms.items()}

    def init(params):
        labels = set(tree_leaves(labels_of(params)))
        missing = labels - set(transforms)
        if missing:
            raise ValueError(f"multi_transform: no transformation for labels {sorted(missing)}")
        return MultiTransformState({label: t.init(params) for label, t in parts.items()})

    def update(updates, state, params=None):
        new_states = {}
        for label, t in parts.items():
            updates, new_states[label] = t.update(updates, state.inner_states[label], params)
        return updates, MultiTransformState(new_states)

    return GradientTransformation(init, update)


