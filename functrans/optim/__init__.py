"""``functrans.optim``: optax-style gradient transformations.

An optimizer is a :class:`GradientTransformation` ``(init, update)``; small transformations
compose with :func:`chain` (``adamw`` is ``chain(scale_by_adam(), add_decayed_weights(),
scale_by_learning_rate())``). States are pytrees of arrays, so everything jits, vmaps and
checkpoints. The names, arguments, defaults and state layouts follow optax 0.2.8, so
``import functrans.optim as optax`` ports optax code::

    >>> import functrans, functrans.numpy as jnp
    >>> from functrans import optim
    >>> params = {"w": jnp.array([1.0, -2.0])}
    >>> opt = optim.chain(optim.clip_by_global_norm(1.0), optim.adam(0.1))
    >>> state = opt.init(params)
    >>> grads = functrans.grad(lambda p: jnp.sum(p["w"] ** 2))(params)
    >>> updates, state = functrans.jit(opt.update)(grads, state, params)
    >>> params = optim.apply_updates(params, updates)
"""

import importlib
import warnings

from functrans.optim._base import *  # noqa: F401,F403
from functrans.optim._numerics import *  # noqa: F401,F403
from functrans.optim._update import *  # noqa: F401,F403
from functrans.optim._combining import *  # noqa: F401,F403
from functrans.optim._masking import *  # noqa: F401,F403
from functrans.optim._scaling import *  # noqa: F401,F403
from functrans.optim._adaptive_moments import *  # noqa: F401,F403
from functrans.optim._second_moments import *  # noqa: F401,F403
from functrans.optim._factorized import *  # noqa: F401,F403
from functrans.optim._sign_steps import *  # noqa: F401,F403
from functrans.optim._step_sizes import *  # noqa: F401,F403
from functrans.optim._momentum import *  # noqa: F401,F403
from functrans.optim._accumulation import *  # noqa: F401,F403
from functrans.optim._adding import *  # noqa: F401,F403
from functrans.optim._clipping import *  # noqa: F401,F403
from functrans.optim._constraining import *  # noqa: F401,F403
from functrans.optim._conditionality import *  # noqa: F401,F403
from functrans.optim._freezing import *  # noqa: F401,F403
from functrans.optim._layouts import *  # noqa: F401,F403
from functrans.optim._monitoring import *  # noqa: F401,F403
from functrans.optim._lookahead import *  # noqa: F401,F403
from functrans.optim._linesearch import *  # noqa: F401,F403
from functrans.optim._lbfgs import *  # noqa: F401,F403
from functrans.optim._linear_algebra import *  # noqa: F401,F403
from functrans.optim._stochastic_gradients import *  # noqa: F401,F403
from functrans.optim._schedules import *  # noqa: F401,F403
from functrans.optim._inject import *  # noqa: F401,F403
from functrans.optim._aliases import *  # noqa: F401,F403
from functrans.optim import (losses, projections, schedules, transforms, tree,  # noqa: F401
                             tree_utils)
# optax also exposes these tree helpers and losses at the top level
from functrans.optim._tree_math import tree_bias_correction as bias_correction  # noqa: F401
from functrans.optim._tree_math import (  # noqa: F401
    tree_update_infinity_moment as update_infinity_moment)
from functrans.optim._tree_math import tree_update_moment as update_moment  # noqa: F401
from functrans.optim._tree_math import (  # noqa: F401
    tree_update_moment_per_elem_norm as update_moment_per_elem_norm)
from functrans.optim._tree_state import tree_map_params  # noqa: F401
from functrans.optim.losses import (cosine_distance, cosine_similarity, hinge_loss,  # noqa: F401
                                    huber_loss, kl_divergence, l2_loss, log_cosh,
                                    safe_softmax_cross_entropy, sigmoid_binary_cross_entropy,
                                    sigmoid_focal_loss, smooth_labels, softmax_cross_entropy,
                                    softmax_cross_entropy_with_integer_labels, squared_error,
                                    convex_kl_divergence, generalized_kl_divergence, ctc_loss,
                                    ctc_loss_with_forward_probs, ntxent)

# the namespaces used less often load on first access, keeping `import functrans` light
_LAZY_MODULES = ("assignment", "contrib", "experimental", "microbatching", "perturbations",
                 "second_order")


# names optax 0.2.8 still answers with a DeprecationWarning: (message, where it moved)
_DEPRECATED = {
    "differentially_private_aggregate": (
        "optax.differentially_private_aggregate is deprecated: use "
        "optax.contrib.differentially_private_aggregate (optax v0.1.8 or newer).",
        "differentially_private_aggregate"),
    "DifferentiallyPrivateAggregateState": (
        "optax.DifferentiallyPrivateAggregateState is deprecated: use "
        "optax.contrib.DifferentiallyPrivateAggregateState (optax v0.1.8 or newer).",
        "DifferentiallyPrivateAggregateState"),
    "dpsgd": ("optax.dpsgd is deprecated: use optax.contrib.dpsgd (optax v0.1.8 or newer).",
              "dpsgd"),
}


def __getattr__(name):
    if name in _LAZY_MODULES:
        return importlib.import_module(f"functrans.optim.{name}")
    if name == "microbatch":
        return importlib.import_module("functrans.optim.microbatching").microbatch
    if name in _DEPRECATED:
        message, moved_to = _DEPRECATED[name]
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module("functrans.optim.contrib"), moved_to)
    if name == "monte_carlo":
        raise AttributeError("optax.monte_carlo is deprecated. (optax v0.2.7 or newer).")
    raise AttributeError(f"module 'functrans.optim' has no attribute '{name}'")


def __dir__():
    return sorted(set(globals()) | set(_LAZY_MODULES) | {"microbatch"})


__all__ = sorted([name for name in globals()
                  if not name.startswith("_") and name not in ("importlib", "warnings")]
                 + list(_LAZY_MODULES) + ["microbatch"])
