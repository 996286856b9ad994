"""Composing transformations: in sequence (:func:`chain`, :func:`named_chain`) and side by
side over labelled parameter groups (:func:`partition`).
"""
from __future__ import annotations

import collections
from typing import Any, Hashable, Mapping, NamedTuple

from functrans.optim._base import GradientTransformationExtraArgs, with_extra_args_support
from functrans.optim._masking import masked
from functrans.tree_util import tree_leaves, tree_map

__all__ = ["chain", "named_chain", "PartitionState", "partition", "MultiTransformState",
           "multi_transform"]


def chain(*args) -> GradientTransformationExtraArgs:
    """Apply the transformations one after another; the state is the tuple of their states.
    Extra keyword arguments of ``update`` go to every part that accepts them.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import clip, scale
        >>> opt = chain(clip(1.0), scale(-0.5))
        >>> opt.update(jnp.array([4.0]), opt.init(jnp.zeros(1)))[0]
        Array([-0.5], dtype=float32)
    """
    transforms = [with_extra_args_support(t) for t in args]

    def init(params):
        return tuple(t.init(params) for t in transforms)

    def update(updates, state, params=None, **extra_args):
        if len(state) != len(transforms):
            raise ValueError(f"chain: the state has {len(state)} parts for {len(transforms)} "
                             "transformations; make sure you have called init of this chain "
                             "first")
        new_state = []
        for t, s in zip(transforms, state):
            updates, s = t.update(updates, s, params, **extra_args)
            new_state.append(s)
        return updates, tuple(new_state)

    return GradientTransformationExtraArgs(init, update)


def named_chain(*args) -> GradientTransformationExtraArgs:
    """:func:`chain` of ``(name, transformation)`` pairs; the state is a dict by name.

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import clip, scale
        >>> opt = named_chain(("clip", clip(1.0)), ("scale", scale(-0.5)))
        >>> list(opt.init(jnp.zeros(1)))
        ['clip', 'scale']
    """
    names = [name for name, _ in args]
    if len(names) != len(set(names)):
        raise ValueError(f"Named transformations must have unique names, but got {names}")
    transforms = [(name, with_extra_args_support(t)) for name, t in args]

    def init(params):
        return collections.OrderedDict((name, t.init(params)) for name, t in transforms)

    def update(updates, state, params=None, **extra_args):
        new_state = collections.OrderedDict()
        for name, t in transforms:
            updates, new_state[name] = t.update(updates, state[name], params, **extra_args)
        return updates, new_state

    return GradientTransformationExtraArgs(init, update)


class PartitionState(NamedTuple):
    """The state of :func:`partition`: each group's (masked) state by label."""
    inner_states: Mapping[Hashable, Any]


MultiTransformState = PartitionState


def partition(transforms: Mapping[Hashable, Any], param_labels, *,
              mask_compatible_extra_args: bool = False) -> GradientTransformationExtraArgs:
    """Apply ``transforms[label]`` to the leaves labelled ``label`` by ``param_labels`` (a
    pytree of labels like the parameters, or a function of the params/updates giving one).

        >>> import functrans.numpy as jnp
        >>> from functrans.optim import scale
        >>> opt = partition({"fast": scale(-1.0), "slow": scale(-0.1)},
        ...                 {"a": "fast", "b": "slow"})
        >>> params = {"a": jnp.ones(1), "b": jnp.ones(1)}
        >>> opt.update(params, opt.init(params))[0]
        {'a': Array([-1.], dtype=float32), 'b': Array([-0.1], dtype=float32)}
    """
    transforms = {k: with_extra_args_support(v) for k, v in transforms.items()}

    def labels_of(tree):
        return param_labels(tree) if callable(param_labels) else param_labels

    def group(tx, labels, label):
        mask = tree_map(lambda leaf_label: leaf_label == label, labels)
        return masked(tx, mask, mask_compatible_extra_args=mask_compatible_extra_args)

    def init(params):
        labels = labels_of(params)
        label_set = set(tree_leaves(labels))
        if not label_set.issubset(transforms.keys()):
            raise ValueError("Some parameters have no corresponding transformation.\n"
                             f"Parameter labels: {sorted(label_set)} \n"
                             f"Transforms keys: {sorted(transforms)} \n")
        return PartitionState({label: group(tx, labels, label).init(params)
                               for label, tx in transforms.items()})

    def update(updates, state, params=None, **extra_args):
        labels = labels_of(updates)
        new_states = {}
        for label, tx in transforms.items():
            updates, new_states[label] = group(tx, labels, label).update(
                updates, state.inner_states[label], params, **extra_args)
        return updates, PartitionState(new_states)

    return GradientTransformationExtraArgs(init, update)


multi_transform = partition
