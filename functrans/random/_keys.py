"""PRNG keys: typed key arrays (``random.key``) and raw ``uint32[..., 2]`` keys (``PRNGKey``).

A threefry2x32 key is two uint32 words. A *typed* key array of shape ``s`` (dtype
``key<fry>``) is a :class:`PRNGKeyArray` holding those words as two uint32 arrays of shape
``s``; it is a pytree node whose two leaves are the words. A *raw* key is the uint32 array
``[word0, word1]`` (shape ``s + (2,)``), as ``PRNGKey`` makes and as older code passes around.
Every function of ``functrans.random`` takes either form; ``split`` and ``fold_in`` return
keys of the form they were given.
"""
from __future__ import annotations

import numpy as np

import functrans.numpy as jnp
from functrans import _dtypes, lax
from functrans._array import register_array_value_type
from functrans.core import ShapedArray, Tracer, get_aval, register_extended_aval
from functrans.random._arguments import asarray
from functrans.tree_util import SequenceKey, register_pytree_with_keys

_UINT32 = _dtypes.uint32
_IMPL = "threefry2x32"
# JAX's implementation names: only threefry2x32 exists here; the others are known by name so
# that asking for one fails with "not implemented" rather than "unknown".
_KNOWN_IMPLS = (_IMPL, "rbg", "unsafe_rbg", "philox2x32", "philox4x32", "threefry4x32")


class PRNGKeyDType:
    """The dtype of typed key arrays: ``key<fry>`` (threefry2x32), an extended dtype whose
    kind is :class:`functrans.dtypes.prng_key`.

        >>> import functrans.numpy as jnp, functrans.dtypes as dtypes
        >>> jnp.issubdtype(key_dtype(), dtypes.prng_key)
        True
    """

    __slots__ = ("impl",)
    type = _dtypes.prng_key
    tag = "fry"

    def __init__(self, impl: str = _IMPL):
        self.impl = impl

    name = property(lambda self: f"key<{self.tag}>")
    # the words of one key: two uint32
    itemsize = property(lambda self: 2 * _UINT32.itemsize)

    def __repr__(self):
        return self.name

    __str__ = __repr__

    def __eq__(self, other):
        return type(other) is PRNGKeyDType and other.impl == self.impl

    def __hash__(self):
        return hash((PRNGKeyDType, self.impl))


def _resolve_impl(name: str, impl) -> str:
    if impl is None or impl == _IMPL or impl == PRNGKeyDType():
        return _IMPL
    if impl in _KNOWN_IMPLS:
        raise NotImplementedError(f"{name}: PRNG implementation {impl!r} is not implemented; "
                                  f"the available one is {_IMPL!r}")
    raise ValueError(f"{name}: unrecognized PRNG implementation {impl!r}; the available one is "
                     f"{_IMPL!r}")


def _not_for_keys(op: str):
    def method(self, *args, **kwargs):
        raise TypeError(f"{op} does not accept dtype {self.dtype}: PRNG keys are not numbers. "
                        "Derive new keys with random.split / random.fold_in, or take the raw "
                        "uint32 words with random.key_data(keys)")
    method.__name__ = op
    return method


class PRNGKeyArray:
    """An array of threefry2x32 keys, dtype ``key<fry>``: what :func:`key`, and
    :func:`split` / :func:`fold_in` of such keys, return.

    It indexes, reshapes and transposes like an array of its shape, passes through ``jit``,
    ``vmap``, ``scan``, ``pmap``, ``device_put`` and checkpoints as a pytree of its two uint32
    key words (each of the key array's shape), and refuses arithmetic.

        >>> keys = split(key(0), 4)
        >>> keys.shape, keys[1:].shape, keys.reshape(2, 2).shape
        ((4,), (3,), (2, 2))
    """

    __slots__ = ("_words", "_impl")
    __array_priority__ = 200   # NumPy defers to our operators, which raise TypeError

    def __init__(self, word0, word1, impl: str = _IMPL):
        # Any leaves are accepted: pytree utilities rebuild nodes around non-arrays
        # (ShapeDtypeStructs, axis specs); only real keys reach the methods below.
        self._words = (word0, word1)
        self._impl = impl

    # ---- array-like metadata -------------------------------------------------------------
    dtype = property(lambda self: PRNGKeyDType(self._impl))
    shape = property(lambda self: tuple(np.shape(self._words[0])))
    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))
    itemsize = property(lambda self: self.dtype.itemsize)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object (a 0-d key array)")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d key array")
        return (self[i] for i in range(self.shape[0]))

    # ---- structural operations: the same on both words -----------------------------------
    @property
    def _key_words(self) -> tuple:
        """The two uint32 word arrays (jnp's shape functions apply to each: see
        ``functrans.numpy._key_words``)."""
        return self._words

    def _with_words(self, word0, word1) -> "PRNGKeyArray":
        return PRNGKeyArray(word0, word1, self._impl)

    def _map(self, fn) -> "PRNGKeyArray":
        return PRNGKeyArray(fn(self._words[0]), fn(self._words[1]), self._impl)

    def __getitem__(self, index):
        return self._map(lambda w: w[index])

    @property
    def at(self):
        """``keys.at[index].get()`` / ``.set(other_keys)``: indexed reads and functional
        writes, word by word."""
        return _KeyIndexHelper(self)

    def reshape(self, *shape, order="C"):
        return self._map(lambda w: w.reshape(*shape, order=order))

    def ravel(self, order="C"):
        return self._map(lambda w: w.ravel(order))

    def flatten(self, order="C"):
        return self._map(lambda w: w.flatten(order))

    def squeeze(self, axis=None):
        return self._map(lambda w: w.squeeze(axis))

    def transpose(self, *axes):
        return self._map(lambda w: w.transpose(*axes))

    def swapaxes(self, axis1, axis2):
        return self._map(lambda w: w.swapaxes(axis1, axis2))

    T = property(lambda self: self._map(lambda w: w.T))
    mT = property(lambda self: self._map(lambda w: w.mT))

    def copy(self):
        return self._map(lambda w: w.copy())

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self.copy()

    def block_until_ready(self):
        for w in self._words:
            w.block_until_ready()
        return self

    @property
    def device(self):
        return self._words[0].device

    def devices(self):
        return self._words[0].devices()

    # ---- comparisons (keys are equal when both words are) ---------------------------------
    def __eq__(self, other):
        if not isinstance(other, PRNGKeyArray):
            return NotImplemented
        (a0, a1), (b0, b1) = self._words, other._words
        return jnp.logical_and(jnp.equal(a0, b0), jnp.equal(a1, b1))

    def __ne__(self, other):
        if not isinstance(other, PRNGKeyArray):
            return NotImplemented
        return jnp.logical_not(self == other)

    __hash__ = None

    # ---- what keys refuse ------------------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        raise TypeError("an array of PRNG keys (dtype key<fry>) cannot be converted to a NumPy "
                        "array. Use random.key_data(keys) for the underlying uint32 words.")

    def __jax_array__(self):
        # functrans.numpy functions convert their operands through this protocol
        raise TypeError(f"functrans.numpy functions do not accept PRNG keys (dtype "
                        f"{self.dtype}, shape {self.shape}). Index and reshape key arrays "
                        "directly, derive keys with random.split / fold_in, or use "
                        "random.key_data(keys) for the raw uint32 words.")

    def __bool__(self):
        raise TypeError("the truth value of a PRNG key is not defined")

    astype = _not_for_keys("astype")

    def __repr__(self):
        w0 = self._words[0]
        if isinstance(w0, Tracer):
            return f"Traced<{self.dtype}[{','.join(map(str, self.shape))}]>"
        if not isinstance(w0, (np.ndarray, np.generic)) and not hasattr(w0, "_value"):
            # an abstract key array (eval_shape's): words without values
            return f"PRNGKeyArray(shape={self.shape}, dtype={self.dtype})"
        data = np.stack([np.asarray(w) for w in self._words], axis=-1)
        return f"Array({self.shape}, dtype={self.dtype}) overlaying:\n{data}"

    __str__ = __repr__


_ARITHMETIC = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
               "xor", "lshift", "rshift", "divmod", "lt", "le", "gt", "ge")
for _op in _ARITHMETIC:
    setattr(PRNGKeyArray, f"__{_op}__", _not_for_keys(_op))
    if _op not in ("lt", "le", "gt", "ge"):
        setattr(PRNGKeyArray, f"__r{_op}__", _not_for_keys(_op))
for _op in ("neg", "pos", "abs", "invert", "float", "int", "complex", "index"):
    setattr(PRNGKeyArray, f"__{_op}__", _not_for_keys(_op))
del _op


# the leaves are the two key words, each of the key array's shape ("[0]" and "[1]" in paths)
# a key array is a jax.Array to isinstance, as in JAX
register_array_value_type(PRNGKeyArray)
register_pytree_with_keys(PRNGKeyArray,
                          lambda k: (((SequenceKey(0), k._words[0]), (SequenceKey(1), k._words[1])),
                                     k._impl),
                          lambda impl, words: PRNGKeyArray(*words, impl),
                          # without key paths: what every jit call of a key flattens
                          flatten_func=lambda k: (k._words, k._impl))


class _KeyIndexHelper:
    __slots__ = ("keys",)

    def __init__(self, keys):
        self.keys = keys

    def __getitem__(self, index):
        return _KeyIndexRef(self.keys, index)


class _KeyIndexRef:
    __slots__ = ("keys", "index")

    def __init__(self, keys, index):
        self.keys, self.index = keys, index

    def get(self, **kwargs):
        return self.keys._map(lambda w: w.at[self.index].get(**kwargs))

    def set(self, values, **kwargs):
        if not isinstance(values, PRNGKeyArray):
            raise TypeError(f"keys.at[...].set takes key arrays, got {type(values).__name__}")
        (w0, w1), (v0, v1) = self.keys._words, values._words
        return PRNGKeyArray(w0.at[self.index].set(v0, **kwargs),
                            w1.at[self.index].set(v1, **kwargs), self.keys._impl)


class KeyShapedArray(ShapedArray):
    """The abstract value of a key array (what ``functrans.typeof`` gives): its shape and
    key dtype.

        >>> KeyShapedArray((2,), key_dtype())
        ShapedArray(key<fry>[2])
    """

    __slots__ = ()

    def __init__(self, shape, dtype: PRNGKeyDType):
        self.shape = tuple(map(int, shape))
        self.dtype = dtype
        self.weak_type = False
        self._sharding = None

    def update(self, shape=None, dtype=None, weak_type=None):
        return KeyShapedArray(self.shape if shape is None else shape,
                              self.dtype if dtype is None else dtype)

    def str_short(self, short_dtypes: bool = False) -> str:
        return f"{self.dtype}[{','.join(str(d) for d in self.shape)}]"

    __str__ = str_short


register_extended_aval(_dtypes.prng_key, KeyShapedArray)


def key_aval(keys: PRNGKeyArray) -> KeyShapedArray:
    return KeyShapedArray(keys.shape, keys.dtype)


# =============================================================================================
# Checking keys and converting between the forms
# =============================================================================================

def _raw_words(name: str, raw, single: bool):
    """The two words of a raw ``uint32[..., 2]`` key array, checked."""
    if not isinstance(raw, Tracer):
        try:
            raw = asarray(raw)
        except TypeError as err:
            raise TypeError(f"{name}: unexpected PRNG key type {type(raw).__name__}") from err
    aval = get_aval(raw)
    if aval.dtype != _UINT32 or aval.shape[-1:] != (2,):
        what = ("a typed key (random.key) or a uint32[2] array (random.PRNGKey)" if single else
                "typed keys (random.key) or a uint32 array whose last axis has size 2 "
                "(random.PRNGKey)")
        raise TypeError(f"{name}: a PRNG key is {what}, got {aval.str_short()}")
    axis = aval.ndim - 1
    return tuple(lax.index_in_dim(raw, i, axis, keepdims=False) for i in (0, 1))


def check_key(name: str, key, single: bool = True) -> tuple[PRNGKeyArray, bool]:
    """``key`` as a typed key array, and whether it was given raw. With ``single``, it must
    be one key (shape ``()``)."""
    if isinstance(key, PRNGKeyArray):
        typed, raw = key, False
    else:
        typed, raw = PRNGKeyArray(*_raw_words(name, key, single)), True
    if single and typed.shape != ():
        raise ValueError(f"{name} takes a single key, got a batch of keys of shape "
                         f"{typed.shape}; use functrans.vmap to map over keys")
    return typed, raw


def as_key(name: str, key) -> PRNGKeyArray:
    """The single typed key a sampler draws from (raw keys are wrapped)."""
    return check_key(name, key)[0]


def raw_data(keys: PRNGKeyArray):
    """The ``uint32[..., 2]`` data of typed keys: the two words stacked on a last axis."""
    w0, w1 = keys._words
    ndim = get_aval(w0).ndim
    return lax.concatenate([lax.expand_dims(w0, (ndim,)), lax.expand_dims(w1, (ndim,))], ndim)


def returned_keys(keys: PRNGKeyArray, raw: bool):
    """Derived keys in the form their parent key came in."""
    return raw_data(keys) if raw else keys


# =============================================================================================
# Making keys
# =============================================================================================

def _seed_words(name: str, seed):
    """(high, low) uint32 words of an integer seed, as threefry's seeding splits it."""
    if isinstance(seed, PRNGKeyArray):
        raise TypeError(f"{name} takes an integer seed, but was given a PRNG key")
    if isinstance(seed, bool):
        raise TypeError(f"{name}: the seed must be an integer, got a bool")
    if isinstance(seed, (int, np.integer)):
        seed = int(seed)
        if not -2 ** 63 <= seed < 2 ** 64:
            raise OverflowError(f"{name}: seed {seed} does not fit in 64 bits")
        # Python ints are taken as int64 (wrapping above 2**63), then narrowed as the
        # default int dtype is when 64-bit mode is off.
        seed = np.array(seed & (2 ** 64 - 1), np.uint64).view(np.int64)
        if not _dtypes.x64_enabled():
            seed = seed.astype(np.int32)
        seed = asarray(seed)
    elif not isinstance(seed, Tracer):
        seed = asarray(seed)
    aval = get_aval(seed)
    if aval.shape != ():
        raise TypeError(f"{name} takes a scalar seed, but was given an array of shape "
                        f"{aval.shape}; use functrans.vmap for batches of seeds")
    if not _dtypes.is_integer(aval.dtype):
        raise TypeError(f"{name}: the seed must be an integer scalar, got {aval.str_short()}")
    if aval.dtype.itemsize == 8:
        high = lax.convert_element_type(lax.shift_right_logical(seed, lax.full((), 32, aval.dtype)),
                                        _UINT32)
    else:
        high = lax.full((), 0, _UINT32)
    return high, lax.convert_element_type(seed, _UINT32)


def key(seed, *, impl=None, dtype=None) -> PRNGKeyArray:
    """A typed PRNG key from an integer seed: a scalar key array of dtype ``key<fry>``.

    ``impl`` (or ``dtype``, a key dtype or implementation name) picks the implementation;
    only ``"threefry2x32"`` exists. :func:`key_data` gives its raw words.

        >>> k = key(0)
        >>> k.shape, k.dtype
        ((), key<fry>)
        >>> key_data(key(42))
        Array([ 0, 42], dtype=uint32)
    """
    if dtype is not None:
        if impl is not None:
            raise ValueError("key: give either impl or dtype, not both")
        impl = dtype
    return PRNGKeyArray(*_seed_words("key", seed), _resolve_impl("key", impl))


def PRNGKey(seed, *, impl=None):  # noqa: N802 (JAX's name)
    """A raw key from an integer seed: the ``uint32[2]`` array ``[high word, low word]``.

    With 64-bit mode off, a Python int seed keeps its low 32 bits (as JAX does). Every
    sampler takes raw keys and typed keys (:func:`key`) alike.

        >>> PRNGKey(0)
        Array([0, 0], dtype=uint32)
        >>> PRNGKey(42)
        Array([ 0, 42], dtype=uint32)
    """
    _resolve_impl("PRNGKey", impl)
    high, low = _seed_words("PRNGKey", seed)
    return lax.concatenate([lax.reshape(high, (1,)), lax.reshape(low, (1,))], 0)


def key_data(keys):
    """The raw ``uint32`` words of keys: shape ``keys.shape + (2,)`` for typed keys; raw keys
    are returned as they are.

        >>> key_data(split(key(0)))
        Array([[1797259609, 2579123966],
               [ 928981903, 3453687069]], dtype=uint32)
    """
    typed, raw = check_key("key_data", keys, single=False)
    return raw_data(typed) if not raw else keys if isinstance(keys, Tracer) else asarray(keys)


def wrap_key_data(key_bits_array, *, impl=None, dtype=None) -> PRNGKeyArray:
    """Typed keys from raw ``uint32[..., 2]`` data (the inverse of :func:`key_data`).

        >>> wrap_key_data(PRNGKey(3)) == key(3)
        Array(True, dtype=bool)
    """
    if dtype is not None:
        if impl is not None:
            raise ValueError("wrap_key_data: give either impl or dtype, not both")
        impl = dtype
    impl = _resolve_impl("wrap_key_data", impl)
    if isinstance(key_bits_array, PRNGKeyArray):
        raise TypeError("wrap_key_data takes the raw uint32 words of keys, but was given typed "
                        "keys (dtype key<fry>) already")
    return PRNGKeyArray(*_raw_words("wrap_key_data", key_bits_array, single=False), impl)


def key_impl(keys) -> str:
    """The name of the PRNG implementation behind ``keys`` (typed or raw, one key or many):
    ``"threefry2x32"``.

        >>> key_impl(key(0)), key_impl(PRNGKey(0))
        ('threefry2x32', 'threefry2x32')
    """
    typed, _ = check_key("key_impl", keys, single=False)
    return typed._impl


def key_dtype(impl_spec=None) -> PRNGKeyDType:
    """The dtype of typed keys of PRNG implementation ``impl_spec`` (default threefry2x32).

        >>> key_dtype()
        key<fry>
    """
    return PRNGKeyDType(_resolve_impl("key_dtype", impl_spec))


def clone(key):
    """The same key. Keys are immutable values, so a clone is the key itself (JAX's version
    matters only to its experimental key-reuse checker).

        >>> clone(key(0)) == key(0)
        Array(True, dtype=bool)
    """
    return key
