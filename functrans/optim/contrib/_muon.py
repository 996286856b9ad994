"""Muon (Jordan et al., 2024): momentum whose matrix-shaped updates are orthogonalized by
a few Newton-Schulz iterations; other parameters use AdamW.

A weight is treated as a batch of matrices: :class:`MuonDimensionNumbers` names its
reduction (input) and output axes, the remaining axes are batch axes.
"""
from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple, Sequence

from functrans import _api
from functrans import lax
from functrans import numpy as jnp
from functrans.optim._adding import add_decayed_weights
from functrans.optim._aliases import adamw
from functrans.optim._base import GradientTransformation, GradientTransformationExtraArgs, \
    canonicalize_dtype, init_empty_state
from functrans.optim._combining import chain, partition
from functrans.optim._masking import MaskedNode
from functrans.optim._numerics import safe_increment
from functrans.optim._scaling import scale_by_learning_rate
from functrans.optim._tree_casting import tree_cast
from functrans.optim._tree_math import tree_bias_correction, tree_update_moment, \
    tree_zeros_like
from functrans.tree_util import tree_map

__all__ = ["MuonDimensionNumbers", "MuonState", "scale_by_muon", "muon",
           "orthogonalize_via_newton_schulz"]

_PRECONDITIONINGS = ("frobenius", "spectral", "aol", "schatten")
_DEFAULT_NS_COEFFS = (3.4445, -4.775, 2.0315)
# per-step coefficients tuned for faster convergence (used with ns_coeffs="dion")
_DION_NS_COEFFS = [(4.0848, -6.8946, 2.927), (3.9505, -6.3029, 2.6377),
                   (3.7418, -5.5913, 2.3037), (2.8769, -3.1427, 1.2046),
                   (2.8366, -3.0525, 1.2012)]
_NS_COEFFS_PRESETS = {"standard": _DEFAULT_NS_COEFFS, "dion": _DION_NS_COEFFS}


class MuonDimensionNumbers(NamedTuple):
    """Which axes of a weight are its input (``reduction_axis``) and output
    (``output_axis``) dimensions; the others are batch axes."""
    reduction_axis: Sequence[int] | int = 0
    output_axis: Sequence[int] | int = 1


def _is_dim_nums(x) -> bool:
    return isinstance(x, MuonDimensionNumbers)


def normalized_axes(x, dim_nums):
    """``dim_nums``'s reduction and output axes of ``x`` (each an int or a sequence,
    negative ones counted from the end) as two tuples of axes from 0 (GaLore's dimension
    numbers name them the same way)."""
    reduction = dim_nums.reduction_axis
    output = dim_nums.output_axis
    reduction = (reduction,) if isinstance(reduction, int) else tuple(reduction)
    output = (output,) if isinstance(output, int) else tuple(output)
    return tuple(ax % x.ndim for ax in reduction), tuple(ax % x.ndim for ax in output)


def _compute_muon_reshape(x, dim_nums):
    """Functions taking ``x`` to ``(batch, reduction, output)`` and back."""
    if x.ndim < 2:
        raise ValueError(f"Muon optimized parameters must have rank >= 2, got x.ndim={x.ndim!r}")
    reduction_axes, output_axes = normalized_axes(x, dim_nums)
    if set(reduction_axes) & set(output_axes):
        raise ValueError("Normalized reduction axes and output axes must be disjoint, got "
                         f"{reduction_axes} and {output_axes}. Originally dim_nums={dim_nums!r} "
                         f"and x.shape={x.shape!r}")
    batch_axes = tuple(sorted(set(range(x.ndim)) - set(reduction_axes) - set(output_axes)))
    order = batch_axes + reduction_axes + output_axes
    inverse_order = tuple(sorted(range(x.ndim), key=lambda i: order[i]))

    def shape_of(axes):
        return tuple(x.shape[ax] for ax in axes)

    flat = (math.prod(shape_of(batch_axes)), math.prod(shape_of(reduction_axes)),
            math.prod(shape_of(output_axes)))
    unflat = shape_of(batch_axes) + shape_of(reduction_axes) + shape_of(output_axes)
    return (lambda y: y.transpose(order).reshape(flat),
            lambda y: y.reshape(unflat).transpose(inverse_order))


def _fans(x, dim_nums):
    reduction_axes, output_axes = normalized_axes(x, dim_nums)
    return (math.prod(x.shape[ax] for ax in reduction_axes),
            math.prod(x.shape[ax] for ax in output_axes))


def _scale_for_width_transfer(update, dim_nums):
    fan_in, fan_out = _fans(update, dim_nums)
    return jnp.sqrt(jnp.maximum(1, fan_out / fan_in)) * update


def _scale_for_consistent_rms(update, dim_nums, consistent_rms):
    fan_in, fan_out = _fans(update, dim_nums)
    return jnp.sqrt(jnp.maximum(fan_in, fan_out)) * consistent_rms * update


def _scale_by_shape(weight_dimension_numbers=None, consistent_rms=None) -> GradientTransformation:
    """Scale orthogonalized updates by ``sqrt(max(1, fan_out / fan_in))`` (or, with
    ``consistent_rms``, to that RMS: ``sqrt(max(fan_in, fan_out)) * consistent_rms``)."""
    def update(updates, state, params=None):
        del params
        dim_nums = (weight_dimension_numbers(updates) if callable(weight_dimension_numbers)
                    else weight_dimension_numbers)
        if consistent_rms is not None:
            scaling = functools.partial(_scale_for_consistent_rms, consistent_rms=consistent_rms)
        else:
            scaling = _scale_for_width_transfer
        return tree_map(scaling, updates, dim_nums, is_leaf=_is_dim_nums), state
    return GradientTransformation(init_empty_state, update)


def _newton_schulz_step(x, coeffs):
    """``a x + (b A + c A^2) x`` with ``A = x x^H``: one step towards the nearest
    semi-orthogonal matrix."""
    a = x @ x.T.conj()
    return coeffs[0] * x + (coeffs[1] * a + coeffs[2] * a @ a) @ x


def _aol_first_step(x, coeffs, eps=1e-8):
    """The first step with the rows rescaled by AOL (Prach & Lampert) to bound the
    spectral norm by 1."""
    a = x @ x.T.conj()
    s = jnp.expand_dims(lax.rsqrt(jnp.clip(jnp.abs(a).sum(axis=-1), min=eps)), -1)
    x, a = x * s, a * s * s.transpose(-1, -2)
    return coeffs[0] * x + (coeffs[1] * a + coeffs[2] * a @ a) @ x


def _schatten_first_step(x, coeffs, eps=1e-8):
    """The first step with ``x`` scaled by the Schatten-4 norm bound ``|x x^T|_F^(-1/2)``."""
    a = x @ x.T
    s = jnp.expand_dims(lax.rsqrt(jnp.clip(jnp.linalg.norm(a, ord="fro", axis=(-2, -1)),
                                           min=eps)), (0, -1))
    x, a = x * s, a * s ** 2
    return coeffs[0] * x + (coeffs[1] * a + coeffs[2] * a @ a) @ x


def _ns_step_fn(preconditioning):
    first = {"aol": _aol_first_step, "schatten": _schatten_first_step}.get(preconditioning)
    if first is None:
        return lambda i, x, coeffs: _newton_schulz_step(x, coeffs)

    def step(i, x, coeffs):
        return lax.cond(i == 0, lambda x: first(x, coeffs),
                        lambda x: _newton_schulz_step(x, coeffs), x)
    return step


def orthogonalize_via_newton_schulz(x, ns_coeffs, ns_steps=5, preconditioning="frobenius",
                                    eps=1e-8, dimension_numbers=None):
    """The semi-orthogonal factor ``U V^T`` of ``x = U S V^T`` (approximately), by
    ``ns_steps`` quintic Newton-Schulz iterations with coefficients ``ns_coeffs`` (shape
    ``(3,)``, or ``(steps, 3)`` per step) after normalizing ``x`` (``"frobenius"`` or
    ``"spectral"`` norm, or ``"aol"`` / ``"schatten"`` rescaling in the first step). ``x``
    is a matrix, or a batch of them described by ``dimension_numbers``.

        >>> import functrans.numpy as jnp
        >>> q = orthogonalize_via_newton_schulz(jnp.array([[3.0, 0.0], [0.0, 0.5]]),
        ...                                     jnp.array([1.5, -0.5, 0.0]), ns_steps=20)
        >>> jnp.round(q, 3)
        Array([[1., 0.],
               [0., 1.]], dtype=float32)
    """
    x = jnp.asarray(x)
    if x.ndim != 2 and not _is_dim_nums(dimension_numbers):
        raise ValueError("Input must have shape (m, n) or weight dimension numbers must be "
                         f"provided. Got shape={x.shape} and "
                         f"dimension_numbers={dimension_numbers!r}.")
    if x.ndim == 2:
        dimension_numbers = MuonDimensionNumbers(reduction_axis=0, output_axis=1)
    ns_coeffs = jnp.asarray(ns_coeffs)
    if ns_coeffs.ndim > 2 or ns_coeffs.shape[-1] != 3:
        raise ValueError("Newton-Schulz coefficients must have shape (3,) or (n, 3), got "
                         f"{ns_coeffs.shape}")
    if preconditioning not in _PRECONDITIONINGS:
        raise ValueError(f"Unknown preconditioning {preconditioning}")
    step = _ns_step_fn(preconditioning)

    def orthogonalize(m):
        # iterate on the wide orientation: x x^T is the smaller Gram matrix
        transposed = m.shape[0] > m.shape[1]
        if transposed:
            m = m.T
        if preconditioning == "frobenius":
            m = m / (jnp.linalg.norm(m, ord="fro") + eps)
        elif preconditioning == "spectral":
            m = m / (jnp.linalg.norm(m, ord=2) + eps)
        coeffs = ns_coeffs.astype(m.dtype)
        if coeffs.ndim == 1:
            m = lax.fori_loop(0, ns_steps, lambda i, m: step(i, m, coeffs), m, unroll=True)
        else:
            def body(carry, coeffs_i):
                i, m = carry
                return (i + 1, step(i, m, coeffs_i)), None
            (_, m), _ = lax.scan(body, (jnp.asarray(0, dtype=jnp.int32), m), coeffs)
        return m.T if transposed else m

    to_batch, from_batch = _compute_muon_reshape(x, dimension_numbers)
    return from_batch(_api.vmap(orthogonalize)(to_batch(x)))


class MuonState(NamedTuple):
    """The state of :func:`scale_by_muon`: the step count, the momentum and the
    Newton-Schulz coefficients."""
    count: Any
    mu: Any
    ns_coeffs: Any


def scale_by_muon(ns_coeffs=_DEFAULT_NS_COEFFS, ns_steps=5, beta=0.95, eps=1e-8, mu_dtype=None,
                  *, nesterov: bool = True, adaptive: bool = False,
                  preconditioning: str = "frobenius", weight_dimension_numbers=None
                  ) -> GradientTransformation:
    """Muon's direction: the (Nesterov) momentum with bias correction, orthogonalized by
    :func:`orthogonalize_via_newton_schulz` per weight (``weight_dimension_numbers``: a
    :class:`MuonDimensionNumbers`, a tree of them, or a function of the updates giving
    one). ``adaptive`` rescales each result by ``<m_hat, O>`` (AdaMuon-style).

        >>> import functrans.numpy as jnp
        >>> opt = scale_by_muon()
        >>> u, _ = opt.update(jnp.eye(2) * jnp.array([4.0, 1.0]), opt.init(jnp.zeros((2, 2))))
        >>> jnp.round(u, 1)
        Array([[0.7, 0. ],
               [0. , 0.7]], dtype=float32)
    """
    mu_dtype = canonicalize_dtype(mu_dtype)

    def init(params):
        coeffs = jnp.asarray(ns_coeffs)
        if coeffs.ndim > 2 or coeffs.shape[-1] != 3:
            raise ValueError(f"ns_coeffs must have shape (3,) or (n, 3), got {coeffs.shape}")
        if coeffs.ndim == 2:
            if not coeffs.shape[0] <= ns_steps:
                raise ValueError(f"Not enough coeffs to perform {ns_steps} steps")
            coeffs = coeffs[-ns_steps:]
        return MuonState(jnp.zeros([], jnp.int32), tree_zeros_like(params, dtype=mu_dtype),
                         coeffs)

    def update(updates, state, params=None):
        del params
        dim_nums = (weight_dimension_numbers(updates) if callable(weight_dimension_numbers)
                    else weight_dimension_numbers)
        mu = tree_update_moment(updates, state.mu, beta, 1)
        count = safe_increment(state.count)
        if nesterov:
            mu_hat = tree_map(lambda m, g: beta * m + (1 - beta) * g,
                              tree_bias_correction(mu, beta, safe_increment(count)),
                              tree_bias_correction(updates, beta, count))
        else:
            mu_hat = tree_bias_correction(mu, beta, count)
        updates = tree_map(
            lambda x, d: orthogonalize_via_newton_schulz(x, state.ns_coeffs, ns_steps,
                                                         preconditioning, eps, d),
            mu_hat, dim_nums, is_leaf=_is_dim_nums)
        if adaptive:
            updates = tree_map(lambda m, o: jnp.sum(m.conj() * o) * o, mu_hat, updates)
        return updates, MuonState(count, tree_cast(mu, mu_dtype), state.ns_coeffs)

    return GradientTransformation(init, update)


def muon(learning_rate, ns_coeffs=_DEFAULT_NS_COEFFS, ns_steps=5, beta=0.95, eps=1e-8,
         weight_decay=0.0, weight_decay_mask=None, mu_dtype=None, *, nesterov: bool = True,
         adaptive: bool = False, preconditioning: str = "frobenius", adam_b1=0.9,
         adam_b2=0.999, adam_eps_root=0.0, adam_weight_decay=0.0, adam_learning_rate=None,
         muon_weight_dimension_numbers=None, consistent_rms=None
         ) -> GradientTransformationExtraArgs:
    """Muon: matrices (2-D leaves, or those given ``muon_weight_dimension_numbers``; None
    entries go to Adam) take :func:`scale_by_muon` steps scaled for width transfer (or to
    ``consistent_rms``), with weight decay and ``learning_rate``; all other leaves use
    AdamW (``adam_*`` arguments, ``adam_learning_rate`` defaulting to ``learning_rate``).
    ``ns_coeffs`` may also be ``"standard"`` or ``"dion"``.

        >>> import functrans.numpy as jnp
        >>> opt = muon(0.1)
        >>> params = {"w": jnp.zeros((2, 2)), "b": jnp.zeros(2)}
        >>> state = opt.init(params)
        >>> sorted(state.inner_states)
        ['adam', 'muon']
    """
    if adam_learning_rate is None:
        adam_learning_rate = learning_rate
    if isinstance(ns_coeffs, str):
        if ns_coeffs not in _NS_COEFFS_PRESETS:
            raise ValueError(f"Unknown ns_coeff preset string: {ns_coeffs}")
        ns_coeffs = _NS_COEFFS_PRESETS[ns_coeffs]

    if muon_weight_dimension_numbers is None:
        def param_labels(params):
            return tree_map(lambda x: "muon" if jnp.ndim(x) == 2 else "adam", params)
        muon_weight_dimension_numbers = MuonDimensionNumbers()
    else:
        def param_labels(params):
            dim_nums = (muon_weight_dimension_numbers(params)
                        if callable(muon_weight_dimension_numbers)
                        else muon_weight_dimension_numbers)
            return tree_map(lambda d, x: tree_map(lambda _: "muon" if d is not None else "adam",
                                                  x),
                            dim_nums, params, is_leaf=lambda x: x is None or _is_dim_nums(x))

    def muon_dim_nums(params):
        # the dimension numbers of the muon leaves; MaskedNode where partition masked
        dim_nums = (muon_weight_dimension_numbers(params)
                    if callable(muon_weight_dimension_numbers) else muon_weight_dimension_numbers)
        mask = tree_map(lambda label: label == "muon", param_labels(params))
        return tree_map(lambda d, submask: tree_map(lambda m: d if m else MaskedNode(), submask),
                        dim_nums, mask,
                        is_leaf=lambda x: x is None or _is_dim_nums(x) or isinstance(x, MaskedNode))

    return partition(
        transforms={
            "muon": chain(scale_by_muon(ns_coeffs=ns_coeffs, ns_steps=ns_steps, beta=beta,
                                        eps=eps, mu_dtype=mu_dtype, nesterov=nesterov,
                                        adaptive=adaptive, preconditioning=preconditioning,
                                        weight_dimension_numbers=muon_dim_nums),
                          _scale_by_shape(muon_dim_nums, consistent_rms),
                          add_decayed_weights(weight_decay, weight_decay_mask),
                          scale_by_learning_rate(learning_rate)),
            "adam": adamw(learning_rate=adam_learning_rate, b1=adam_b1, b2=adam_b2, eps=eps,
                          eps_root=adam_eps_root, weight_decay=adam_weight_decay,
                          mu_dtype=mu_dtype, nesterov=nesterov)},
        param_labels=param_labels)

