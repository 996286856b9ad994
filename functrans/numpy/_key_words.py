"""jnp's shape functions on typed PRNG key arrays: applied to each of a key array's two
uint32 words, the result rebuilt as a key array (``jnp.stack(keys)``, ``jnp.where(c, k1,
k2)``, ``jnp.broadcast_to(key, shape)``, ...), as JAX's accept key arrays there. Arithmetic
still refuses keys.

A key array says what it is by its ``_key_words`` (the two word arrays) and rebuilds itself
from new words with ``_with_words`` (``functrans.random`` defines it, above this layer).
"""
from __future__ import annotations

import functools

import numpy as np



def _words(x):
    return getattr(x, "_key_words", None)


def over_key_words(fn, positions=(0,), sequence: bool = False):
    """``fn`` accepting key arrays at the positional ``positions`` (``sequence``: the first
    argument is a sequence of arrays, all keys or none)."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        template = None
        if sequence and args and isinstance(args[0], (list, tuple)):
            found = [_words(a) is not None for a in args[0]]
            if any(found):
                if not all(found):
                    raise TypeError(f"{fn.__name__}: key arrays cannot be combined with "
                                    f"arrays of numbers")
                template = args[0][0]
        else:
            for p in positions:
                if p < len(args) and _words(args[p]) is not None:
                    template = args[p]
                    break
        if template is None:
            return fn(*args, **kwargs)
        outs = []
        for i in (0, 1):
            new = list(args)
            if sequence:
                new[0] = [_words(a)[i] for a in args[0]]
            else:
                for p in positions:
                    if p < len(args) and _words(args[p]) is not None:
                        new[p] = _words(args[p])[i]
            outs.append(fn(*new, **kwargs))
        return template._with_words(*outs)
    return wrapped


def key_array_equal(fn):
    """``array_equal`` where both operands may be key arrays (equal when both words are)."""
    @functools.wraps(fn)
    def wrapped(a1, a2, equal_nan=False):
        w1, w2 = _words(a1), _words(a2)
        if w1 is None and w2 is None:
            return fn(a1, a2, equal_nan)
        if w1 is None or w2 is None or np.shape(w1[0]) != np.shape(w2[0]):
            return fn(False, True)  # a boolean Array False, as array_equal returns
        first, second = fn(w1[0], w2[0]), fn(w1[1], w2[1])
        return first & second
    return wrapped


# name -> positions of arguments that may be key arrays ("seq": a sequence as the first)
KEY_AWARE = {
    "broadcast_to": (0,), "expand_dims": (0,), "squeeze": (0,), "ravel": (0,),
    "reshape": (0,), "transpose": (0,), "moveaxis": (0,), "swapaxes": (0,), "flip": (0,),
    "tile": (0,), "repeat": (0,), "take": (0,), "atleast_1d": (0,), "roll": (0,),
    "where": (1, 2),
    "stack": "seq", "concatenate": "seq", "vstack": "seq", "hstack": "seq",
}
