"""Optimizing complex parameters with real-valued optimizers: split each complex leaf into
its real and imaginary parts."""
from __future__ import annotations

from typing import Any, NamedTuple

from functrans import numpy as jnp
from functrans.optim._base import GradientTransformation
from functrans.tree_util import tree_map

__all__ = ["SplitRealAndImaginaryState", "split_real_and_imaginary"]


class SplitRealAndImaginaryArrays(NamedTuple):
    """A complex array as two real ones."""
    real: Any
    imaginary: Any


def _complex_to_real_pair(x):
    if jnp.iscomplexobj(x):
        return SplitRealAndImaginaryArrays(x.real, x.imag)
    return x


def _real_pair_to_complex(x):
    if isinstance(x, SplitRealAndImaginaryArrays):
        return x.real + x.imaginary * 1j
    return x


class SplitRealAndImaginaryState(NamedTuple):
    """The state of :func:`split_real_and_imaginary`: the inner state."""
    inner_state: Any


def split_real_and_imaginary(inner: GradientTransformation) -> GradientTransformation:
    """Run ``inner`` on the real and imaginary parts of complex leaves as separate real
    leaves (real leaves pass as they are), then recombine the updates.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import sign_sgd
        >>> opt = split_real_and_imaginary(sign_sgd(0.1))
        >>> p = jnp.array([1.0 + 2.0j])
        >>> opt.update(jnp.array([3.0 - 1.0j]), opt.init(p), p)[0]
        Array([-0.1+0.1j], dtype=complex64)
    """
    def init(params):
        return SplitRealAndImaginaryState(inner.init(tree_map(_complex_to_real_pair, params)))

    def update(updates, state, params=None):
        updates = tree_map(_complex_to_real_pair, updates)
        params = tree_map(_complex_to_real_pair, params)
        updates, inner_state = inner.update(updates, state.inner_state, params)
        updates = tree_map(_real_pair_to_complex, updates,
                           is_leaf=lambda x: isinstance(x, SplitRealAndImaginaryArrays))
        return updates, SplitRealAndImaginaryState(inner_state)

    return GradientTransformation(init, update)
