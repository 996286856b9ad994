"""The less common functions of ``functrans.scipy.special``, one module per family (gamma
relatives, error functions, integrals, hypergeometric and zeta functions, Bessel functions,
spherical harmonics). ``functrans.scipy.special`` re-exports them; import from there.

Everything is a composition of ``functrans.numpy``/``functrans.lax`` operations (series and
continued fractions run as ``lax.fori_loop``/``lax.while_loop``), so the functions run under
``jit`` and ``vmap``. Functions with a closed-form derivative carry it as a custom derivative
rule (the ``while_loop`` ones need it: reverse mode cannot go through a ``while_loop``); the
others are differentiated through their fixed-length loops.
"""
from __future__ import annotations

from functrans import _dtypes
from functrans.core import get_aval


def _eps(x) -> float:
    return float(_dtypes.finfo(get_aval(x).dtype).eps)
