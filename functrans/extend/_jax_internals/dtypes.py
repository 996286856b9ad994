"""``jax._src.dtypes``: the public dtype functions (``functrans.dtypes``) and what JAX's
private module adds that libraries use.

``ExtendedDType`` is the base of JAX's user-defined extended dtypes (a dtype with its own
rules for conversion, zeros and addition). functrans's extended dtypes are its own (typed
PRNG keys); a library may define a subclass, but an array of it cannot be made: converting
to one raises ``TypeError`` from ``convert_element_type``.
"""
from __future__ import annotations

import numpy as np

from functrans.dtypes import *  # noqa: F401,F403
from functrans.dtypes import TypePromotionError, extended, finfo, float0  # noqa: F401
from functrans._dtypes import canonicalize_dtype, is_python_scalar  # noqa: F401

DType = np.dtype


class ExtendedDType:
    """The base of extended dtypes: subclasses say their scalar ``type`` (a subclass of
    ``dtypes.extended``) and their ``_rules``."""

    @property
    def type(self) -> type:
        raise NotImplementedError

    @property
    def _rules(self) -> type:
        raise NotImplementedError

    def __repr__(self):
        return self.name


def supports_inf(dtype) -> bool:
    """Whether ``dtype`` (a floating type) has infinities (float8 ``fn``/``fnuz`` do not)."""
    dtype = np.dtype(dtype)
    if not np.issubdtype(dtype, np.inexact) and dtype.kind != "V":
        return False
    try:
        return bool(np.isinf(np.array(np.inf, dtype)))
    except (OverflowError, ValueError, TypeError):
        return False
