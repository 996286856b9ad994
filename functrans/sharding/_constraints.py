"""``with_sharding_constraint``: say how a value inside a jitted function is split.

The constraint is an equation (``sharding_constraint``) that computes its operand unchanged;
the sharding propagation pass reshards the value to the given sharding at that point, and
later equations start from it. Eagerly, it places the array as ``device_put`` does. Its
tangent and cotangent get the same sharding; under ``vmap`` the batch dimension stays whole.
"""
from __future__ import annotations

import functools

from functrans import tree_util
from functrans._array import sharding_layer
from functrans.core import Tracer, get_aval
from functrans.interpreters import ad
from functrans.primitives import dot as _dot
from functrans.sharding._mesh import get_mesh
from functrans.sharding._partition_spec import PartitionSpec
from functrans.sharding._shard_map import RegionPrimitive
from functrans.sharding._shardings import NamedSharding, Sharding, spec_of

sharding_constraint_p = RegionPrimitive("sharding_constraint")


@sharding_constraint_p.def_abstract_eval
def _constraint_abstract_eval(x, *, sharding):
    sharding.shard_shape(x.shape)  # checks the rank and that the splits divide
    return x


@sharding_constraint_p.def_impl
def _constraint_impl(x, *, sharding):
    # placing a concrete array belongs to sharding._arrays, above this module; it reaches
    # the constraint through the sharding layer it registers with _array
    return sharding_layer.put(x, sharding)


def _constraint_batch(vals, dims, *, sharding):
    (x,), (d,) = vals, dims
    if d is None:
        return sharding_constraint_p.bind(x, sharding=sharding), None
    layout = list(sharding.layout(get_aval(x).ndim - 1))
    layout.insert(d, ())
    return sharding_constraint_p.bind(
        x, sharding=NamedSharding(sharding.mesh, spec_of(tuple(layout)))), d


sharding_constraint_p.batch = _constraint_batch
ad.deflinear(sharding_constraint_p,
             lambda ct, *, sharding: [sharding_constraint_p.bind(ct, sharding=sharding)])


def _as_sharding(s):
    if isinstance(s, PartitionSpec):
        mesh = get_mesh()
        if mesh.empty:
            raise ValueError(f"with_sharding_constraint: the PartitionSpec {s} needs a mesh; "
                             "pass a NamedSharding or set one with functrans.set_mesh(mesh)")
        return NamedSharding(mesh, s)
    return s


def with_sharding_constraint(x, shardings):
    """``x`` (a pytree) split as ``shardings`` (a sharding, a PartitionSpec under
    ``set_mesh``, or a pytree prefix of ``x`` of them) at this point of a jitted function:
    the partitioned program reshards there. Outside ``jit`` it places ``x`` as
    ``device_put`` does.

        >>> import functrans, functrans.numpy as jnp
        >>> from functrans.sharding import NamedSharding, PartitionSpec as P
        >>> mesh = functrans.make_mesh((1,), ('data',))
        >>> f = functrans.jit(lambda x: functrans.lax.with_sharding_constraint(
        ...     x * 2, NamedSharding(mesh, P('data'))))
        >>> f(jnp.ones(4)).sharding.spec
        P('data',)
    """
    targets = tree_util.tree_broadcast(shardings, x, is_leaf=lambda s: s is None or
                                       isinstance(s, (Sharding, PartitionSpec)))

    def constrain(leaf, s):
        s = _as_sharding(s)
        if s is None:
            return leaf
        if not isinstance(s, NamedSharding):
            if isinstance(s, Sharding) and not isinstance(leaf, Tracer):
                return sharding_layer.put(leaf, s)
            return leaf
        if s.mesh.empty:  # a sharding over no mesh (an abstract value's): nothing to place
            return leaf
        return sharding_constraint_p.bind(leaf, sharding=s)

    return tree_util.tree_map(constrain, x, targets)


_dot.register_sharding_constraint(with_sharding_constraint)


def reshard(xs, out_shardings):
    """``xs`` (a pytree) resharded to ``out_shardings``: inside ``jit`` a sharding
    constraint, outside it ``device_put`` (as ``jax.reshard``; every mesh axis here is
    partitioned automatically, so it is the same as :func:`with_sharding_constraint`).

        >>> import functrans, numpy as np
        >>> from functrans.sharding import NamedSharding, PartitionSpec as P
        >>> mesh = functrans.make_mesh((1,), ('data',))
        >>> functrans.reshard(np.ones(2), NamedSharding(mesh, P('data'))).sharding.spec
        P('data',)
    """
    return with_sharding_constraint(xs, out_shardings)


def auto_axes(f=None, /, *, axes=None, out_sharding=None):
    """Run ``f`` with the mesh ``axes`` (default: all) left to sharding propagation, and
    split its result as ``out_sharding`` (given here or as a keyword of the call). Every
    axis is automatic in functrans, so only the result's placement is specified."""
    if f is None:
        return lambda g: auto_axes(g, axes=axes, out_sharding=out_sharding)

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        target = _given_or_keyword(out_sharding, kwargs, "out_sharding")
        return with_sharding_constraint(f(*args, **kwargs), target)
    return wrapped


def explicit_axes(f=None, /, *, axes=None, in_sharding=None):
    """Run ``f`` with the mesh ``axes`` explicit, its arguments split as ``in_sharding``.
    Every axis is automatic in functrans, so this places the arguments and calls ``f``."""
    if f is None:
        return lambda g: explicit_axes(g, axes=axes, in_sharding=in_sharding)

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        target = _given_or_keyword(in_sharding, kwargs, "in_sharding")
        return f(*with_sharding_constraint(args, target), **kwargs)
    return wrapped


def _given_or_keyword(given, kwargs: dict, name: str):
    """The sharding the decorator was ``given``, else the call's keyword ``name`` (taken out
    of ``kwargs``, so that ``f`` does not see it), which is then required."""
    if given is not None:
        return given
    if name not in kwargs:
        raise TypeError(f"Missing required keyword argument: '{name}'")
    return kwargs.pop(name)


__all__ = ["auto_axes", "explicit_axes", "reshard", "sharding_constraint_p",
           "with_sharding_constraint"]
