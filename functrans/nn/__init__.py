"""``functrans.nn``: activation functions, softmax/logsumexp, one_hot, and
:mod:`functrans.nn.initializers` (as ``jax.nn``).

    >>> import functrans.numpy as jnp
    >>> from functrans import nn
    >>> nn.relu(jnp.array([-1.0, 2.0]))
    Array([0., 2.], dtype=float32)
"""
from __future__ import annotations

from functrans.nn._activations import *  # noqa: F401,F403
from functrans.nn._activations import __all__ as _activation_names
from functrans.nn._attention import dot_product_attention  # noqa: F401
from functrans.nn import initializers  # noqa: F401

__all__ = list(_activation_names) + ["dot_product_attention", "initializers"]
