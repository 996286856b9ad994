"""``visualize_array_sharding``: which device holds which block, as a text table."""
from __future__ import annotations

import sys

from functrans.sharding._shardings import NamedSharding, Sharding, SingleDeviceSharding


def _label(devices) -> str:
    platform = devices[0].platform.upper()
    return f"{platform} " + ",".join(str(d.id) for d in sorted(devices, key=lambda d: d.id))


def _blocks(shape: tuple, sharding: Sharding):
    """(row starts, column starts, {(row, col) start: [devices]}) of a 1-D or 2-D array."""
    cells: dict = {}
    for device, index in sharding.devices_indices_map(shape).items():
        starts = tuple(s.start or 0 for s in index)
        cells.setdefault(starts, []).append(device)
    rows = sorted({k[0] for k in cells})
    cols = sorted({k[1] for k in cells}) if len(shape) == 2 else [None]
    return rows, cols, cells


def sharding_table(shape, sharding: Sharding) -> str:
    """The text of :func:`visualize_sharding`."""
    shape = tuple(shape)
    if len(shape) not in (1, 2):
        raise ValueError(f"visualize_sharding only works for shapes with 1 or 2 dimensions, "
                         f"got shape {shape}")
    index_of = (lambda r, c: (c,)) if len(shape) == 1 else (lambda r, c: (r, c))
    rows, cols, cells = _blocks(shape, sharding)
    if len(shape) == 1:
        rows, cols = [0], rows
    labels = [[_label(cells[index_of(r, c)]) for c in cols] for r in rows]
    width = max(len(s) for row in labels for s in row) + 2
    bar = "─" * width

    def line(left, mid, right):
        return left + mid.join([bar] * len(cols)) + right

    out = [line("┌", "┬", "┐")]
    for i, row in enumerate(labels):
        out.append("│" + "│".join(s.center(width) for s in row) + "│")
        out.append(line("├", "┼", "┤") if i < len(labels) - 1 else line("└", "┴", "┘"))
    return "\n".join(out)


def visualize_sharding(shape, sharding: Sharding, *, file=None, **kwargs) -> None:
    """Print which devices hold each block of an array of ``shape`` (1-D or 2-D) placed by
    ``sharding``, one cell per block. Extra keyword arguments of JAX's version (colors,
    scale) are accepted and ignored.

        >>> import functrans
        >>> from functrans.sharding import NamedSharding, PartitionSpec as P
        >>> mesh = functrans.make_mesh((1,), ('data',))
        >>> functrans.debug.visualize_sharding((4, 4), NamedSharding(mesh, P('data')))
        ┌───────┐
        │ CPU 0 │
        └───────┘
    """
    if not isinstance(sharding, (NamedSharding, SingleDeviceSharding)):
        raise TypeError(f"visualize_sharding: not a sharding: {sharding!r}")
    print(sharding_table(shape, sharding), file=file or sys.stdout)


def visualize_array_sharding(arr, **kwargs) -> None:
    """Print which devices hold each block of the 1-D or 2-D array ``arr``.

        >>> import functrans, numpy as np
        >>> from functrans.sharding import NamedSharding, PartitionSpec as P
        >>> mesh = functrans.make_mesh((1,), ('data',))
        >>> x = functrans.device_put(np.zeros(4), NamedSharding(mesh, P('data')))
        >>> functrans.debug.visualize_array_sharding(x)
        ┌───────┐
        │ CPU 0 │
        └───────┘
    """
    visualize_sharding(arr.shape, arr.sharding, **kwargs)


__all__ = ["visualize_array_sharding", "visualize_sharding"]
