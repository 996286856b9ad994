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


def log_diff_exp(p, q):
    """``log(exp(p) - exp(q))`` for ``p >= q`` without forming the exponentials;
    ``-inf`` where ``p == q``."""
    safe = jnp.where(p == -np.inf, 0.0, p - q).astype(p.dtype)
    return jnp.where(p == -np.inf, -np.inf, p + jnp.log(-jnp.expm1(-safe)))
