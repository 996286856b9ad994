"""``jax.experimental.shard_map``: the former home of :func:`functrans.shard_map`."""
from __future__ import annotations

from functrans.sharding._shard_map import shard_map as _shard_map

__all__ = ["shard_map"]


def shard_map(f, mesh, in_specs, out_specs, check_rep: bool = True, auto=frozenset()):
    """:func:`functrans.shard_map` with its former signature (``check_rep`` is
    ``check_vma``; ``auto`` names the mesh axes left automatic)."""
    manual = frozenset(mesh.axis_names) - frozenset(auto) if auto else frozenset()
    return _shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                      axis_names=manual, check_vma=check_rep)
