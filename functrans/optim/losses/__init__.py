"""``functrans.optim.losses``: common loss functions, elementwise or per example (no
reduction over the batch: take ``.mean()`` yourself), as optax's ``optax.losses``.

    >>> import functrans.numpy as jnp
    >>> from functrans.optim import losses
    >>> logits = jnp.array([[2.0, 0.0, -1.0]])
    >>> losses.softmax_cross_entropy_with_integer_labels(logits, jnp.array([0]))
    Array([0.16984606], dtype=float32)

Each follows its textbook formula and is written to stay finite where the naive formula
overflows (large logits, labels of exactly 0 or 1).
"""
from __future__ import annotations

from functrans.optim.losses._classification import *  # noqa: F401,F403
from functrans.optim.losses._ctc import *  # noqa: F401,F403
from functrans.optim.losses._fenchel_young import *  # noqa: F401,F403
from functrans.optim.losses._ranking import *  # noqa: F401,F403
from functrans.optim.losses._regression import *  # noqa: F401,F403
from functrans.optim.losses._segmentation import *  # noqa: F401,F403
from functrans.optim.losses._self_supervised import *  # noqa: F401,F403
from functrans.optim.losses._smoothing import *  # noqa: F401,F403
from functrans.optim.losses import (_classification, _ctc, _fenchel_young, _ranking,
                                    _regression, _segmentation, _self_supervised, _smoothing)

__all__ = (_classification.__all__ + _ctc.__all__ + _fenchel_young.__all__ + _ranking.__all__
           + _regression.__all__ + _segmentation.__all__ + _self_supervised.__all__
           + _smoothing.__all__)
