"""Random bits: the ``threefry2x32`` counter-based hash as a primitive.

Threefry-2x32 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) maps a
64-bit key and a 64-bit counter, each given as two uint32 words, to 64 pseudo-random bits.
It is a pure elementwise function of its four uint32 operands, so it jits, vmaps and
differentiates (its outputs are integers: zero tangents) like any other elementwise op.
``functrans.random`` builds keys, splitting and every distribution on top of it.

The primitive takes four uint32 arrays of one shape ``(key1, key2, x1, x2)`` and returns two
uint32 arrays of that shape. Backends that lower it key their code by the name
``threefry2x32`` and use :data:`ROTATIONS`, :data:`KEY_SCHEDULE_PARITY` and the 20-round
schedule documented in :func:`threefry2x32_reference`.
"""
from __future__ import annotations

import numpy as np

from functrans import _dtypes
from functrans.core import Primitive, ShapedArray
from functrans.interpreters import ad, batching

# Rotation distances of the 2x32 variant: rounds alternate between the two groups of four.
ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
# The third key word is key1 ^ key2 ^ this constant (Skein's key-schedule parity).
KEY_SCHEDULE_PARITY = 0x1BD11BDA

threefry2x32_p = Primitive("threefry2x32", multiple_results=True)


def _rotate_left(x: np.ndarray, distance: int) -> np.ndarray:
    return (x << np.uint32(distance)) | (x >> np.uint32(32 - distance))


def threefry2x32_reference(key1, key2, x1, x2):
    """Threefry-2x32 with 20 rounds on NumPy uint32 arrays of one shape.

    Five groups of four mix rounds (``x1 += x2; x2 = rotl(x2, r) ^ x1``); before the first
    group and after each one, the key schedule (``ks = key1, key2, key1^key2^parity``) is
    injected with the group index added to the second word.

        >>> [hex(int(v[0])) for v in threefry2x32_reference(*np.zeros((4, 1), np.uint32))]
        ['0x6b200159', '0x99ba4efe']
    """
    key1, key2, x1, x2 = (np.asarray(a, dtype=np.uint32) for a in (key1, key2, x1, x2))
    schedule = (key1, key2, key1 ^ key2 ^ np.uint32(KEY_SCHEDULE_PARITY))
    # uint32 arithmetic wraps by design; NumPy warns on 0-d overflow unless told not to
    with np.errstate(over="ignore"):
        x1 = x1 + schedule[0]
        x2 = x2 + schedule[1]
        for group in range(5):
            for distance in ROTATIONS[group % 2]:
                x1 = x1 + x2
                x2 = _rotate_left(x2, distance) ^ x1
            x1 = x1 + schedule[(group + 1) % 3]
            x2 = x2 + schedule[(group + 2) % 3] + np.uint32(group + 1)
    return [np.asarray(x1, dtype=np.uint32), np.asarray(x2, dtype=np.uint32)]


@threefry2x32_p.def_impl
def _threefry2x32_impl(key1, key2, x1, x2):
    return threefry2x32_reference(key1, key2, x1, x2)


@threefry2x32_p.def_abstract_eval
def _threefry2x32_rule(key1, key2, x1, x2):
    avals = (key1, key2, x1, x2)
    if any(a.dtype != _dtypes.uint32 for a in avals):
        raise TypeError("threefry2x32 requires uint32 operands (key1, key2, x1, x2), got "
                        + ", ".join(a.str_short() for a in avals))
    if len({a.shape for a in avals}) != 1:
        raise TypeError("threefry2x32 requires operands of one shape (broadcast the key to the "
                        "counters' shape first), got " + ", ".join(a.str_short() for a in avals))
    out = ShapedArray(x1.shape, _dtypes.uint32)
    return [out, out]


# Integer outputs: derivatives through random bits are zero (a key carries no gradient).
ad.defjvp_zero(threefry2x32_p)
# Elementwise in all four operands: batch dims line up like any binary op's.
batching.broadcast_batcher(threefry2x32_p)


def threefry2x32(key1, key2, x1, x2):
    """Hash counters ``(x1, x2)`` under key ``(key1, key2)``: two uint32 arrays of the
    counters' shape. All four operands are uint32 arrays of one shape.

        >>> import numpy as np
        >>> z = np.zeros(2, np.uint32)
        >>> threefry2x32(z, z, z, np.arange(2, dtype=np.uint32))[0].shape
        (2,)
    """
    return threefry2x32_p.bind(key1, key2, x1, x2)


__all__ = ["threefry2x32"]
