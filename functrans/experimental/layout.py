"""``jax.experimental.layout``: how an array's elements are laid out in memory.

functrans keeps every array in row-major order (the last axis varies fastest). ``Layout``
describes a layout by its major-to-minor axis order and ``Format`` pairs a layout with a
sharding; a program given a layout other than row-major raises ``NotImplementedError``.
"""
from __future__ import annotations

__all__ = ["Format", "Layout"]


class Layout:
    """A memory layout: ``major_to_minor`` lists the axes from slowest to fastest varying.
    ``Layout.AUTO`` lets the compiler choose (here always row-major)."""

    AUTO: "Layout"

    def __init__(self, major_to_minor=None, tiling=None, sub_byte_element_size_in_bits=0):
        self.major_to_minor = None if major_to_minor is None else tuple(major_to_minor)
        self.tiling = tiling
        self.sub_byte_element_size_in_bits = sub_byte_element_size_in_bits

    def is_row_major(self) -> bool:
        m = self.major_to_minor
        return m is None or m == tuple(range(len(m)))

    def check_supported(self) -> None:
        if not self.is_row_major() or self.tiling:
            raise NotImplementedError(f"{self}: functrans keeps arrays in row-major order; "
                                      f"other layouts are not supported")

    def __eq__(self, other):
        return isinstance(other, Layout) and (self.major_to_minor, self.tiling) == (
            other.major_to_minor, other.tiling)

    def __hash__(self):
        return hash((self.major_to_minor, self.tiling))

    def __repr__(self):
        return "Layout.AUTO" if self is Layout.AUTO else \
            f"Layout(major_to_minor={self.major_to_minor})"


Layout.AUTO = Layout()


class Format:
    """An array's layout and sharding together."""

    def __init__(self, layout: Layout | None = None, sharding=None):
        if isinstance(layout, Layout):
            layout.check_supported()
        self.layout = layout
        self.sharding = sharding

    def __eq__(self, other):
        return isinstance(other, Format) and (self.layout, self.sharding) == (
            other.layout, other.sharding)

    def __hash__(self):
        return hash((self.layout, self.sharding))

    def __repr__(self):
        return f"Format({self.layout}, {self.sharding})"
