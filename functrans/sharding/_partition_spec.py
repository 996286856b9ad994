"""``PartitionSpec`` (``P``): which mesh axes split each dimension of an array."""
from __future__ import annotations


class _Unconstrained:
    """A dimension whose sharding the compiler may choose (``P.UNCONSTRAINED``)."""

    def __repr__(self):
        return "UNCONSTRAINED"

    def __reduce__(self):
        return (_unconstrained, ())


_UNCONSTRAINED = _Unconstrained()


def _unconstrained():
    return _UNCONSTRAINED


def _canonical_entry(entry):
    """One dimension's entry: None, a mesh axis name, a tuple of names (major to minor), or
    UNCONSTRAINED. A one-name tuple is that name; a list is a tuple."""
    if entry is None or entry is _UNCONSTRAINED:
        return entry
    if isinstance(entry, (tuple, list)):
        names = tuple(entry)
        if any(n is None or isinstance(n, (tuple, list)) for n in names):
            raise TypeError(f"PartitionSpec entries are None, a mesh axis name or a tuple of "
                            f"names; got {entry!r}")
        return names[0] if len(names) == 1 else names
    return entry


class PartitionSpec:
    """How an array is split over a mesh: entry ``i`` names the mesh axis (or tuple of
    axes, the first one major) that splits dimension ``i``; ``None`` (or a missing trailing
    entry) keeps the dimension whole on every device. Mesh axes no entry names replicate.

        >>> from functrans.sharding import PartitionSpec as P
        >>> P('data', None)
        P('data', None)
        >>> P(('data', 'model')) == P(['data', 'model'])
        True
    """

    __slots__ = ("_partitions",)
    UNCONSTRAINED = _UNCONSTRAINED

    def __init__(self, *partitions, unreduced=frozenset(), reduced=frozenset()):
        if unreduced or reduced:
            raise NotImplementedError(
                "PartitionSpec: unreduced/reduced axes are not supported by functrans; "
                "values are always reduced (sum with lax.psum inside shard_map)")
        object.__setattr__(self, "_partitions", tuple(_canonical_entry(p) for p in partitions))

    def __setattr__(self, name, value):
        raise AttributeError("PartitionSpec is immutable")

    @property
    def partitions(self) -> tuple:
        return self._partitions

    unreduced = property(lambda self: frozenset())
    reduced = property(lambda self: frozenset())

    def __repr__(self):
        return f"P({repr(self._partitions)[1:-1]})"

    def __eq__(self, other):
        if isinstance(other, PartitionSpec):
            return self._partitions == other._partitions
        return NotImplemented

    def __hash__(self):
        return hash(("PartitionSpec", self._partitions))

    def __reduce__(self):
        return (PartitionSpec, self._partitions)

    def __getitem__(self, i):
        return self._partitions[i]

    def __iter__(self):
        return iter(self._partitions)

    def __len__(self):
        return len(self._partitions)

    def __add__(self, other):
        if isinstance(other, (PartitionSpec, tuple)):
            return PartitionSpec(*self._partitions, *other)
        return NotImplemented

    def __radd__(self, other):
        if isinstance(other, tuple):
            return PartitionSpec(*other, *self._partitions)
        return NotImplemented

    def index(self, value) -> int:
        return self._partitions.index(_canonical_entry(value))

    def count(self, value) -> int:
        return self._partitions.count(_canonical_entry(value))

    def update(self, partitions=None, unreduced=None, reduced=None) -> "PartitionSpec":
        return PartitionSpec(*(self._partitions if partitions is None else partitions),
                             unreduced=unreduced or frozenset(), reduced=reduced or frozenset())

    def _normalized_spec_for_aval(self, ndim: int) -> "PartitionSpec":
        """The spec with one entry per dimension (UNCONSTRAINED read as None)."""
        out = [None if p is _UNCONSTRAINED else p for p in self._partitions]
        return PartitionSpec(*out, *([None] * (ndim - len(out))))


P = PartitionSpec

__all__ = ["P", "PartitionSpec"]
