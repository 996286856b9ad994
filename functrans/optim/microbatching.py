"""``optim.microbatching``: evaluate a function of a large batch in micro-batches, one
after another in a ``lax.fori_loop``, and combine the results (sum, mean, running mean or
concatenation), so only one micro-batch's intermediates are alive at a time. As optax's
``optax.microbatching``.

Micro-batch ``i`` holds the examples ``i, i + n, i + 2n, ...`` (``n`` the number of
micro-batches), the split of a Fortran-order reshape.

    >>> import functrans.numpy as jnp
    >>> from functrans.optim import microbatching
    >>> total = microbatching.microbatch(lambda x: jnp.sum(x ** 2), argnums=0,
    ...                                  microbatch_size=2)
    >>> total(jnp.arange(6.0))
    Array(55., dtype=float32)
"""
from __future__ import annotations

import collections
import dataclasses
import enum
import functools
from typing import Callable, Sequence

from functrans import _api
from functrans import lax
from functrans import numpy as jnp
from functrans.tree_util import tree_flatten, tree_leaves, tree_map

__all__ = ["Accumulator", "AccumulationType", "microbatch", "micro_vmap", "micro_grad",
           "reshape_batch_axis"]

IndividualOutputs = collections.namedtuple("Aux", ["values", "metrics", "aux"])


@dataclasses.dataclass(frozen=True)
class Accumulator:
    """How micro-batch outputs combine: ``init(value_shape) -> carry``, ``update(carry,
    value, index) -> carry``, ``finalize(carry) -> result``, and ``aggregate(values)`` to
    reduce a stacked axis 0 the same way."""
    init: Callable
    update: Callable
    finalize: Callable
    aggregate: Callable


class AccumulationType(enum.Enum):
    """The built-in accumulators."""
    MEAN = enum.auto()
    """Average the microbatch outputs."""
    SUM = enum.auto()
    """Sum the microbatch outputs."""
    RUNNING_MEAN = enum.auto()
    """Average the microbatch outputs over `num_real_microbatches`."""
    CONCAT = enum.auto()
    """Concatenate the microbatch outputs along axis 0."""


def reshape_batch_axis(tree, microbatch_size: int, axis: int = 0):
    """Split axis ``axis`` of every leaf into ``(num_microbatches, microbatch_size)``, micro-
    batch ``i`` taking the examples ``i, i + n, i + 2n, ...``.

        >>> import functrans.numpy as jnp
        >>> reshape_batch_axis(jnp.arange(6), 2)
        Array([[0, 3],
               [1, 4],
               [2, 5]], dtype=int32)
    """
    def reshape_leaf(x):
        x = jnp.asarray(x)
        return x.reshape(x.shape[:axis] + (-1, microbatch_size) + x.shape[axis + 1:], order="F")
    return tree_map(reshape_leaf, tree)


def _with_floating_check(fn):
    def checked(*args, **kwargs):
        dtypes = tree_leaves(tree_map(lambda x: x.dtype, (args, kwargs)))
        if not all(jnp.issubdtype(dtype, jnp.floating) for dtype in dtypes):
            raise ValueError("MEAN and RUNNING_MEAN Accumulators require floating-point values.")
        return fn(*args, **kwargs)
    return checked


def _lift(accumulator: Accumulator) -> Accumulator:
    """The accumulator applied leafwise to pytrees."""
    return Accumulator(
        lambda value: tree_map(accumulator.init, value),
        lambda carry, value, i: tree_map(lambda c, v: accumulator.update(c, v, i), carry, value),
        lambda carry: tree_map(accumulator.finalize, carry),
        lambda values: tree_map(accumulator.aggregate, values))


def _compose(accumulators) -> Accumulator:
    """A pytree of accumulators applied to the matching subtrees of the outputs."""
    return Accumulator(
        lambda values: tree_map(lambda acc, val: acc.init(val), accumulators, values),
        lambda carry, value, index: tree_map(lambda acc, c, v: acc.update(c, v, index),
                                             accumulators, carry, value),
        lambda carry: tree_map(lambda acc, c: acc.finalize(c), accumulators, carry),
        lambda values: tree_map(lambda acc, v: acc.aggregate(v), accumulators, values))


def _zeros_like_shape(value):
    return jnp.zeros(value.shape, value.dtype)


def _sum() -> Accumulator:
    return _lift(Accumulator(_zeros_like_shape, lambda carry, value, _: carry + value,
                             lambda x: x, functools.partial(jnp.sum, axis=0)))


def _mean(num_microbatches: int) -> Accumulator:
    if num_microbatches <= 0:
        raise ValueError(f"num_microbatches={num_microbatches!r} must be positive.")
    return _lift(Accumulator(_with_floating_check(_zeros_like_shape),
                             lambda carry, value, _: carry + value,
                             lambda carry: carry / num_microbatches,
                             functools.partial(jnp.mean, axis=0)))


def _running_mean() -> Accumulator:
    def update(carry, value, index):
        weight = index / (index + 1)
        return carry * weight + value * (1 - weight)
    return _lift(Accumulator(_with_floating_check(_zeros_like_shape), update, lambda x: x,
                             functools.partial(jnp.mean, axis=0)))


def _concat(num_microbatches: int) -> Accumulator:
    if num_microbatches <= 0:
        raise ValueError(f"num_microbatches={num_microbatches!r} must be positive.")

    def init(value):
        return jnp.zeros((num_microbatches,) + tuple(value.shape), value.dtype)

    def finalize(carry):
        # undo reshape_batch_axis: example i + n j sits at [i, j]
        return carry.reshape(-1, *carry.shape[2:], order="F")

    return _lift(Accumulator(init, lambda carry, value, index: carry.at[index].set(value),
                             finalize, lambda x: x))


def _canonicalize(tree, num_microbatches: int) -> Accumulator:
    def make(acc):
        if isinstance(acc, Accumulator):
            return acc
        if acc == AccumulationType.MEAN:
            return _mean(num_microbatches)
        if acc == AccumulationType.SUM:
            return _sum()
        if acc == AccumulationType.RUNNING_MEAN:
            return _running_mean()
        if acc == AccumulationType.CONCAT:
            return _concat(num_microbatches)
        raise ValueError(f"Unknown accumulator: {acc}")
    return _compose(tree_map(make, tree, is_leaf=lambda x: isinstance(x, Accumulator)))


def _reshape_all_args(microbatch_size, argnums, argnames, in_axes, args, kwargs):
    new_args, new_kwargs = list(args), dict(kwargs)
    batch_args = [args[i] for i in argnums] + [kwargs[name] for name in argnames]
    batch_sizes = tree_flatten(tree_map(
        lambda ax, subtree: tree_map(lambda x: jnp.shape(x)[ax], subtree),
        tuple(in_axes), tuple(batch_args)))[0]
    if len(set(batch_sizes)) > 1:
        raise ValueError(f"Batch Arguments must have equal-size batch axes, found {batch_sizes}.")
    batch_size = batch_sizes[0]
    if batch_size % microbatch_size != 0:
        raise ValueError(f"batch_size={batch_size!r} must be divisible by "
                         f"microbatch_size={microbatch_size!r}.")
    for i, ax in zip(argnums, in_axes):
        new_args[i] = reshape_batch_axis(args[i], microbatch_size, ax)
    for name, ax in zip(argnames, in_axes[len(argnums):]):
        new_kwargs[name] = reshape_batch_axis(kwargs[name], microbatch_size, ax)
    return tuple(new_args), new_kwargs, batch_size


def microbatch(fun: Callable, argnums: int | Sequence[int], microbatch_size: int | None,
               accumulator=AccumulationType.SUM, *, argnames: str | Sequence[str] = (),
               in_axes: int | Sequence[int] = 0, num_real_microbatches: int | None = None
               ) -> Callable:
    """``fun`` evaluated on micro-batches of ``microbatch_size`` examples of the arguments
    ``argnums`` / ``argnames`` (batched along ``in_axes``), its outputs combined by
    ``accumulator`` (an :class:`AccumulationType`, an :class:`Accumulator`, or a pytree of
    them matching the outputs). ``num_real_microbatches`` stops after that many
    micro-batches (the rest being padding). ``microbatch_size=None`` returns ``fun``.

        >>> import functrans.numpy as jnp
        >>> mean = microbatch(lambda x: jnp.mean(x), 0, 2, AccumulationType.MEAN)
        >>> mean(jnp.arange(8.0))
        Array(3.5, dtype=float32)
    """
    if microbatch_size is None:
        return fun
    argnums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    argnames = (argnames,) if isinstance(argnames, str) else tuple(argnames)
    if isinstance(in_axes, int):
        in_axes = (in_axes,) * (len(argnums) + len(argnames))

    def microbatched(*args, **kwargs):
        args, kwargs, batch_size = _reshape_all_args(microbatch_size, argnums, argnames,
                                                     in_axes, args, kwargs)
        num_microbatches = batch_size // microbatch_size
        combine = _canonicalize(accumulator, num_microbatches)

        def on_microbatch(index):
            micro_args, micro_kwargs = list(args), dict(kwargs)
            for i, ax in zip(argnums, in_axes):
                micro_args[i] = tree_map(functools.partial(jnp.take, indices=index, axis=ax),
                                         micro_args[i])
            for name, ax in zip(argnames, in_axes[len(argnums):]):
                micro_kwargs[name] = tree_map(
                    functools.partial(jnp.take, indices=index, axis=ax), micro_kwargs[name])
            return fun(*micro_args, **micro_kwargs)

        bound = num_real_microbatches if num_real_microbatches is not None else num_microbatches
        carry = combine.init(_api.eval_shape(on_microbatch, 0))
        carry = lax.fori_loop(0, bound, lambda i, c: combine.update(c, on_microbatch(i), i),
                              carry)
        return combine.finalize(carry)

    return microbatched


def micro_vmap(fun: Callable, in_axes=0, out_axes=0, *, microbatch_size: int | None = None,
               vmap_fn: Callable = _api.vmap, accumulator=AccumulationType.CONCAT,
               num_real_microbatches: int | None = None) -> Callable:
    """``vmap(fun, in_axes)`` computed one micro-batch at a time, the per-example outputs
    combined by ``accumulator`` (by default concatenated, as plain ``vmap``).

        >>> import functrans.numpy as jnp
        >>> micro_vmap(lambda x: x * 2, microbatch_size=2)(jnp.arange(4.0))
        Array([0., 2., 4., 6.], dtype=float32)
    """
    if out_axes != 0:
        raise NotImplementedError("out_axis != 0 is not currently supported")
    if isinstance(in_axes, int):
        in_axes = (in_axes,)

    def vmap_and_reduce(*args, kwargs):
        output = vmap_fn(fun, in_axes, out_axes)(*args, **kwargs)
        size = tree_leaves(output)[0].shape[0]
        return _canonicalize(accumulator, size).aggregate(output)

    batched = microbatch(
        vmap_and_reduce, argnums=tuple(i for i, ax in enumerate(in_axes) if ax is not None),
        argnames="kwargs", microbatch_size=microbatch_size, accumulator=accumulator,
        in_axes=tuple(ax for ax in in_axes if ax is not None) + (0,),
        num_real_microbatches=num_real_microbatches)

    def wrapped(*args, **kwargs):
        return batched(*args, kwargs=kwargs)

    return wrapped


def micro_grad(fun: Callable, has_aux: bool = False, argnums: int | Sequence[int] = 0, *,
               batch_argnums: int | Sequence[int] = 1, keep_batch_dim: bool = True,
               microbatch_size: int | None = None, accumulator=AccumulationType.SUM,
               transform_fn: Callable = lambda x: x, metrics_fn: Callable = lambda x: None,
               num_real_microbatches: int | None = None) -> Callable:
    """Per-example gradients of ``fun`` (a loss of one example of the ``batch_argnums``
    arguments), each passed through ``transform_fn`` (e.g. clipping) and combined by
    ``accumulator``, computed in micro-batches. Returns ``(combined, aux)`` with ``aux``
    holding the per-example values, ``metrics_fn`` of each gradient and ``fun``'s aux.
    With ``keep_batch_dim`` each example keeps a leading batch axis of size 1.

        >>> import functrans.numpy as jnp
        >>> loss = lambda w, x: jnp.sum(w * x)
        >>> grads, aux = micro_grad(loss, microbatch_size=2)(jnp.ones(2), jnp.ones((4, 2)))
        >>> grads, aux.values.shape
        (Array([4., 4.], dtype=float32), (4,))
    """
    if isinstance(batch_argnums, int):
        batch_argnums = (batch_argnums,)
    if not has_aux:
        fun_with_aux = fun
        fun = lambda *args, **kwargs: (fun_with_aux(*args, **kwargs), None)  # noqa: E731
    value_and_grad = _api.value_and_grad(fun, argnums, has_aux=True)

    def grad_fn(*args, **kwargs):
        (value, aux), grad = value_and_grad(*args, **kwargs)
        return transform_fn(grad), IndividualOutputs(value, metrics_fn(grad), aux)

    in_axes = [None] * (max(batch_argnums) + 1)
    for i in batch_argnums:
        in_axes[i] = 0
    micro_fun = micro_vmap(grad_fn, in_axes=in_axes,
                           accumulator=(accumulator, AccumulationType.CONCAT),
                           microbatch_size=microbatch_size,
                           num_real_microbatches=num_real_microbatches)
    if not keep_batch_dim:
        return micro_fun

    def with_batch_axis(*args, **kwargs):
        args = list(args)
        for i in batch_argnums:
            args[i] = tree_map(lambda x: jnp.expand_dims(x, axis=1), args[i])
        return micro_fun(*args, **kwargs)

    return with_batch_axis

