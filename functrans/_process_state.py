"""What this process is and holds: its place among the processes (``process_indices`` and
the old ``host_*`` names), its live arrays, and host copies of them (``copy_to_host_async``)."""
from __future__ import annotations

import gc
import warnings
from typing import Any

from functrans import _devices, distributed, tree_util
from functrans._array import Array, is_concrete_array

__all__ = ["process_indices", "host_count", "host_id", "host_ids", "live_arrays",
           "copy_to_host_async"]




def _renamed(old: str, new: str) -> None:
    warnings.warn(f"functrans.{old} has been renamed to functrans.{new}; the old name will "
                  "eventually be removed. Please update your code.", UserWarning, stacklevel=3)


def process_indices(backend: str | None = None) -> list[int]:
    """The indices of all processes taking part (``[0]`` when not running distributed).

        >>> import functrans
        >>> functrans.process_indices()
        [0]
    """
    return list(range(distributed.process_count()))


def host_count(backend: str | None = None) -> int:
    """Old name of :func:`functrans.process_count` (warns)."""
    _renamed("host_count", "process_count")
    return distributed.process_count()


def host_id(backend: str | None = None) -> int:
    """Old name of :func:`functrans.process_index` (warns)."""
    _renamed("host_id", "process_index")
    return distributed.process_index()


def host_ids(backend: str | None = None) -> list[int]:
    """Old name of :func:`functrans.process_indices` (warns)."""
    _renamed("host_ids", "process_indices")
    return process_indices(backend)


def live_arrays(platform: str | None = None) -> list:
    """Every array alive in this process on ``platform`` (default: the default platform),
    not counting deleted (donated) ones. A debugging aid: it walks all objects the garbage
    collector tracks, so it is slow in a large program.

        >>> import functrans, functrans.numpy as jnp
        >>> x = jnp.ones(3)
        >>> any(a is x for a in functrans.live_arrays())
        True
    """
    platform = platform or _devices.default_platform()
    if platform == "cuda":
        platform = "gpu"
    return [obj for obj in gc.get_objects()
            if is_concrete_array(obj) and getattr(obj, "_platform", "cpu") == platform
            and not obj.is_deleted()]


def copy_to_host_async(x: Any) -> Any:
    """Start copying every array leaf of ``x`` to the host (each leaf's own
    ``copy_to_host_async`` where it has one; CPU arrays already live on the host). Returns
    ``x`` unchanged.

        >>> import functrans, functrans.numpy as jnp
        >>> functrans.copy_to_host_async({"w": jnp.ones(2)})["w"]
        Array([1., 1.], dtype=float32)
    """
    for leaf in tree_util.tree_leaves(x):
        copy = getattr(leaf, "copy_to_host_async", None)
        if callable(copy):
            copy()
    return x
