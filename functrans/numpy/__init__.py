"""``functrans.numpy``: the ``jax.numpy`` surface, built on the primitives."""
from __future__ import annotations

from functrans._dtypes import (bfloat16, bool_, complex64, complex128, float16, float32,
                               float64, int8, int16, int32, int64, uint8, uint16, uint32,
                               uint64, float0)
from functrans._dtypes import finfo, iinfo, promote_types, result_type
from functrans.numpy._creation import (array, asarray, empty, empty_like, full, full_like, ones,
                                       ones_like, zeros, zeros_like)
from functrans.numpy._basic import *  # noqa: F401,F403
from functrans.numpy import _indexing  # noqa: F401

import numpy as _np

pi = _np.pi
e = _np.e
inf = _np.inf
nan = _np.nan
newaxis = None
ndarray = None  # set below to Array for isinstance checks


def _set_ndarray():
    global ndarray
    from functrans._array import Array
    ndarray = Array


_set_ndarray()
