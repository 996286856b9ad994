"""``functrans.random``: splittable, counter-based pseudo-random numbers (threefry2x32).

There is no hidden global state. A *key* determines every number drawn from it; every
sampler takes a key and returns the same numbers for the same key, so programs stay pure and
reproducible under ``jit``, ``vmap`` and ``grad``. Use :func:`split` (or :func:`fold_in`) to
derive independent keys, and never reuse a key for two different draws::

    >>> import functrans.random as random
    >>> key = random.key(0)
    >>> key, subkey = random.split(key)
    >>> random.uniform(subkey, (2,)).shape
    (2,)

Same numbers as JAX. Keys, bits and every sampler follow jax.random (JAX 0.10): the same
seed gives the same keys and bits, the same integers, and the same floats up to the rounding
of transcendental functions. Bits come from JAX's current *partitionable* threefry scheme;
``config.update("jax_threefry_partitionable", False)`` (or the environment variable
``FUNCTRANS_THREEFRY_PARTITIONABLE=0``, also read as ``JAX_THREEFRY_PARTITIONABLE``) selects
the original one, which older JAX releases used. :mod:`functrans.random._bits` describes both.

Two forms of keys, as in JAX:

* ``random.key(seed)`` makes a *typed* key: a scalar array of dtype ``key<fry>``
  (``jnp.issubdtype(k.dtype, dtypes.prng_key)``). ``split`` of it gives typed keys of shape
  ``(num,)``; key arrays index, reshape and transpose like arrays and refuse arithmetic.
* ``random.PRNGKey(seed)`` makes a *raw* key, the ``uint32[2]`` array of its two words;
  ``split`` of it gives ``uint32[num, 2]``. :func:`key_data` and :func:`wrap_key_data`
  convert between the forms.

How typed keys are represented. A typed key array of shape ``s`` is a
:class:`PRNGKeyArray`, a small Python object holding threefry's two key words as two uint32
arrays of shape ``s``, registered as a pytree node whose leaves are those words. Nothing in
the core knows about keys: ``jit``, ``vmap``, ``scan``, ``pmap``, ``device_put`` and
checkpoints see two ordinary uint32 arrays of the key array's own shape, so every axis
argument (``in_axes``, ``out_axes``, scan's leading axis) means the same for the key array
and for its leaves, and every backend runs key code unchanged. JAX instead makes ``key<fry>``
an extended dtype of its abstract values, which every primitive and lowering must then
handle; the wrapper gives the same user-facing behaviour (dtype, shape, indexing, errors)
with no special cases below this package. The one visible difference: ``tree_leaves`` of a
key array yields its two words rather than the key array itself.

The samplers live in modules by subject: :mod:`._keys` (key forms), :mod:`._bits` (bits,
split, fold_in), :mod:`._continuous` (transforms of uniform and normal draws),
:mod:`._discrete` (integers, choices, permutations), :mod:`._gamma` (the gamma family, with
its reparameterization gradient in :mod:`._gamma_derivative`), :mod:`._multivariate` and
:mod:`._counts` (geometric, Poisson, binomial, multinomial).
"""
from __future__ import annotations

from functrans._environment import clear_caches as _clear_caches
from functrans._config import config as _config
from functrans.random._bits import bits, fold_in, split, threefry_2x32
from functrans.random._continuous import (cauchy, double_sided_maxwell, exponential, gumbel,
                                          laplace, logistic, lognormal, maxwell, normal, pareto,
                                          rademacher, rayleigh, triangular, truncated_normal,
                                          uniform, wald, weibull_min)
from functrans.random._counts import binomial, geometric, multinomial, poisson
from functrans.random._discrete import bernoulli, categorical, choice, permutation, randint
from functrans.random._gamma import (beta, chisquare, dirichlet, f, gamma, generalized_normal,
                                     loggamma, t)
from functrans.random._keys import (PRNGKey, PRNGKeyArray, clone, key, key_data, key_dtype,
                                    key_impl, wrap_key_data)
from functrans.random._multivariate import ball, multivariate_normal, orthogonal

__all__ = [
    "PRNGKey", "PRNGKeyArray", "key", "key_data", "wrap_key_data", "key_impl", "key_dtype",
    "clone", "split", "fold_in", "bits", "threefry_2x32",
    "uniform", "normal", "bernoulli", "categorical", "randint", "permutation", "choice",
    "truncated_normal", "exponential", "laplace", "logistic", "gumbel", "rademacher",
    "multivariate_normal",
    # the gamma family
    "gamma", "loggamma", "beta", "dirichlet", "chisquare", "f", "t", "generalized_normal",
    # transforms of uniform and normal draws
    "cauchy", "pareto", "lognormal", "rayleigh", "maxwell", "double_sided_maxwell",
    "weibull_min", "triangular", "wald", "ball", "orthogonal",
    # counts
    "geometric", "poisson", "binomial", "multinomial",
]


def _forget_compiled_programs(_value):
    # jitted functions cache programs traced under the old scheme; a new scheme must retrace.
    _clear_caches()


_config.on_change("threefry_partitionable", _forget_compiled_programs)
