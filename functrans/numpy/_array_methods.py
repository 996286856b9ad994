"""Functions behind array methods that have no other home: ``astype`` and ``view``."""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans._array import Array
from functrans.numpy._promotion import concrete_value, to_array
from functrans.numpy._scalar_types import _as_dtype_or_kind
from functrans.primitives import elementwise as lax


def astype(x, dtype, /, *, copy=False, device=None):
    """``x`` converted to ``dtype`` (float to int truncates toward zero).

        >>> astype(array([1.7, -1.7]), int32)
        Array([ 1, -1], dtype=int32)
    """
    builtin = any(dtype is t for t in (int, float, complex, bool))
    dtype = _dtypes.check_user_dtype(dtype if builtin else _as_dtype_or_kind(dtype), "astype")
    return lax.convert_element_type(to_array(x), dtype)


def view(x, dtype=None, type=None):  # noqa: A002
    """``x``'s bits reinterpreted as ``dtype`` (eagerly; under a transform only a view as
    the same dtype is supported, as there is no bitcast primitive)."""
    x = to_array(x)
    if type is not None:
        raise NotImplementedError("view: the `type` argument is not supported")
    if dtype is None:
        return x
    dtype = np.dtype(_as_dtype_or_kind(dtype))
    if dtype == x.dtype:
        return x
    value = concrete_value(x)
    if value is None:
        raise NotImplementedError("view: reinterpreting the bits of a traced array as another "
                                  "dtype needs a bitcast primitive, which is not available")
    return Array._from_buffer(np.ascontiguousarray(value).view(dtype))
