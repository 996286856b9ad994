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
from functrans.optim import _base, _transforms, _schedules, _accumulation, _aliases

__all__ = (_base.__all__ + _transforms.__all__ + _schedules.__all__ + _accumulation.__all__
           + _aliases.__all__)
