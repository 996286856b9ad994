"""Host values exchanged between the processes of a multi-process run: the module JAX
names ``jax.experimental.multihost_utils`` (``functrans.experimental.multihost_utils``),
for a run (``functrans.distributed``, over MPI). In a single process each is the
identity on its one participant."""
from __future__ import annotations

import zlib

import numpy as np

from functrans import distributed, tree_util
from functrans.numpy import asarray

__all__ = ["assert_equal", "broadcast_one_to_all", "process_allgather",
           "sync_global_devices"]


def broadcast_one_to_all(in_tree, is_source: bool | None = None):
    """Every process gets the source process's values of ``in_tree`` (the source is process
    0 unless ``is_source`` says otherwise, on exactly one process)."""
    if is_source is None:
        is_source = distributed.process_index() == 0

    def one(leaf):
        value = np.asarray(leaf)
        contribution = value if is_source else np.zeros_like(value)
        return asarray(distributed.allreduce(contribution, "sum", "broadcast_one_to_all"))
    return tree_util.tree_map(one, in_tree)


def process_allgather(in_tree, tiled: bool = False):
    """Every process's values of ``in_tree``, stacked on a new axis 0 (``tiled``:
    concatenated along axis 0)."""
    def one(leaf):
        stacked = distributed.allgather(np.asarray(leaf), "process_allgather")
        return asarray(np.concatenate(list(stacked)) if tiled else stacked)
    return tree_util.tree_map(one, in_tree)


def sync_global_devices(name: str) -> None:
    """Wait until every process reaches this point; ``name`` must be the same everywhere
    (a mismatch raises AssertionError)."""
    digest = np.array([zlib.crc32(name.encode())], np.uint32)
    seen = distributed.allgather(digest, f"sync_global_devices({name})")
    if not (seen == digest).all():
        raise AssertionError(f"sync_global_devices name mismatch ('{name}')")


def assert_equal(in_tree, fail_message: str = "") -> None:
    """Raise AssertionError unless ``in_tree`` holds the same values on every process."""
    for leaf in tree_util.tree_leaves(in_tree):
        value = np.asarray(leaf)
        gathered = distributed.allgather(value, "assert_equal")
        if not all(np.array_equal(g, gathered[0], equal_nan=True) for g in gathered):
            raise AssertionError(f"{fail_message} Expected equal values across processes, "
                                 f"got {gathered}")
