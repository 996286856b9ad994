"""Helpers shared by the distributions: argument promotion and log-space arithmetic."""
from __future__ import annotations

import math

import numpy as np

from functrans import numpy as jnp
from functrans.numpy._promotion import promote_args_inexact

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def promote(name: str, *args):
    """The arguments as floating-point arrays of one dtype, broadcast to one shape."""
    return promote_args_inexact(name, *args)


def log1m_exp(a):
    """``log(1 - exp(a))`` for ``a <= 0``: ``log(-expm1(a))`` near 0, ``log1p(-exp(a))``
    further out, each where the other loses digits."""
    return jnp.where(a > -0.6931471805599453, jnp.log(-jnp.expm1(a)), jnp.log1p(-jnp.exp(a)))


def log_diff_exp(p, q):
    """``log(exp(p) - exp(q))`` for ``p >= q`` without forming the exponentials;
    ``-inf`` where ``p == q``."""
    safe = jnp.where(p == -np.inf, 0.0, p - q).astype(p.dtype)
    return jnp.where(p == -np.inf, -np.inf, p + jnp.log(-jnp.expm1(-safe)))
