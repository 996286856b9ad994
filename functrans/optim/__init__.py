"""``functrans.optim``: optax-style gradient transformations.

An optimizer is a :class:`GradientTransformation` ``(init, update)``; small transformations
compose with :func:`chain` (``adamw`` is ``chain(scale_by_adam(), add_decayed_weights(),
scale_by_learning_rate())``). States are pytrees of arrays, so everything jits, vmaps and
checkpoints::

    >>> import functrans, functrans.numpy as jnp
    >>> from functrans import optim
    >>> params = {"w": jnp.array([1.0, -2.0])}
    >>> opt = optim.chain(optim.clip_by_global_norm(1.0), optim.adam(0.1))
    >>> state = opt.init(params)
    >>> grads = functrans.grad(lambda p: jnp.sum(p["w"] ** 2))(params)
    >>> updates, state = functrans.jit(opt.update)(grads, state, params)
    >>> params = optim.apply_updates(params, updates)
"""
from __future__ import annotations

from functrans.optim._base import *  # noqa: F401,F403
from functrans.optim._transforms import *  # noqa: F401,F403
from functrans.optim._schedules import *  # noqa: F401,F403
from functrans.optim._accumulation import *  # noqa: F401,F403
from functrans.optim._aliases import *  # noqa: F401,F403
from functrans.optim._rescaling import *  # noqa: F401,F403
from functrans.optim._modifiers import *  # noqa: F401,F403
from functrans.optim._wrappers import *  # noqa: F401,F403
from functrans.optim._aliases_more import *  # noqa: F401,F403
from functrans.optim import losses  # noqa: F401
# optax also exposes its common losses at the top level
from functrans.optim.losses import (cosine_distance, cosine_similarity, hinge_loss,  # noqa: F401
                                    huber_loss, kl_divergence, l2_loss, log_cosh,
                                    safe_softmax_cross_entropy, sigmoid_binary_cross_entropy,
                                    sigmoid_focal_loss, smooth_labels, softmax_cross_entropy,
                                    softmax_cross_entropy_with_integer_labels, squared_error)
from functrans.optim import (_base, _transforms, _schedules, _accumulation, _aliases,
                             _rescaling, _modifiers, _wrappers, _aliases_more)

_TOP_LEVEL_LOSSES = ["cosine_distance", "cosine_similarity", "hinge_loss", "huber_loss",
                     "kl_divergence", "l2_loss", "log_cosh", "safe_softmax_cross_entropy",
                     "sigmoid_binary_cross_entropy", "sigmoid_focal_loss", "smooth_labels",
                     "softmax_cross_entropy", "softmax_cross_entropy_with_integer_labels",
                     "squared_error"]

__all__ = (_base.__all__ + _transforms.__all__ + _schedules.__all__ + _accumulation.__all__
           + _aliases.__all__ + _rescaling.__all__ + _modifiers.__all__ + _wrappers.__all__
           + _aliases_more.__all__ + ["losses"] + _TOP_LEVEL_LOSSES)
