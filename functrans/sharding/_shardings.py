"""Shardings: where the pieces of an array live. ``NamedSharding(mesh, spec)`` splits each
dimension over the mesh axes its ``PartitionSpec`` entry names and replicates over the other
axes; ``SingleDeviceSharding(device)`` keeps the whole array on one device.

Inside the library a spec is also handled as a *layout*: one tuple of mesh axis names per
dimension (``()`` for a whole dimension), e.g. ``(('data',), ())`` for ``P('data', None)``
on a matrix.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from functrans.sharding._mesh import Mesh
from functrans.sharding._partition_spec import PartitionSpec
from functrans import distributed


class DuplicateSpecError(Exception):
    """A ``PartitionSpec`` names one mesh axis on more than one dimension."""


Layout = tuple  # tuple[tuple[str, ...], ...]: the mesh axes splitting each dimension


def layout_of(spec: PartitionSpec, ndim: int, what: str = "sharding") -> Layout:
    """``spec`` as one tuple of mesh axis names per dimension of a rank-``ndim`` value."""
    if len(spec) > ndim:
        extra = " For scalars the PartitionSpec should be P()." if ndim == 0 else ""
        raise ValueError(f"{what}: PartitionSpec {spec} is only valid for values of rank at "
                         f"least {len(spec)}, but was applied to a value of rank {ndim}.{extra}")
    out = []
    for entry in tuple(spec) + (None,) * (ndim - len(spec)):
        if entry is None or entry is PartitionSpec.UNCONSTRAINED:
            out.append(())
        elif isinstance(entry, tuple):
            out.append(entry)
        else:
            out.append((entry,))
    return tuple(out)


def spec_of(layout: Layout) -> PartitionSpec:
    """The PartitionSpec of a layout (one entry per dimension)."""
    return PartitionSpec(*[None if not axes else axes[0] if len(axes) == 1 else axes
                           for axes in layout])


def check_spec(mesh: Mesh, spec: PartitionSpec, what: str = "NamedSharding") -> None:
    """Every name in ``spec`` is an axis of ``mesh``, named once."""
    seen = set()
    for entry in spec:
        if entry is None or entry is PartitionSpec.UNCONSTRAINED:
            continue
        for name in (entry if isinstance(entry, tuple) else (entry,)):
            if name not in mesh.shape:
                raise ValueError(f"Resource axis: {name} of {spec} is not found in mesh: "
                                 f"{mesh.axis_names}.")
            if name in seen:
                raise DuplicateSpecError(
                    f"A single {what} spec specification can map every mesh axis to at most "
                    f"one positional dimension, but {spec} has duplicate entries for `{name}`")
            seen.add(name)


class Sharding:
    """Where the pieces of an array live: the base of :class:`NamedSharding` and
    :class:`SingleDeviceSharding`."""

    __slots__ = ()
    memory_kind = "device"

    @property
    def device_set(self) -> set:
        raise NotImplementedError

    @property
    def _device_assignment(self) -> tuple:
        raise NotImplementedError

    def devices_indices_map(self, global_shape) -> dict:
        """Device -> the tuple of slices of a ``global_shape`` array that it holds."""
        raise NotImplementedError

    def shard_shape(self, global_shape) -> tuple:
        raise NotImplementedError

    @property
    def is_fully_replicated(self) -> bool:
        raise NotImplementedError

    @property
    def num_devices(self) -> int:
        return len(self.device_set)

    @property
    def addressable_devices(self) -> set:
        rank = distributed.process_index()
        return {d for d in self.device_set if d.process_index == rank}

    @property
    def is_fully_addressable(self) -> bool:
        return len(self.addressable_devices) == len(self.device_set)

    def addressable_devices_indices_map(self, global_shape) -> dict:
        local = self.addressable_devices
        return {d: i for d, i in self.devices_indices_map(global_shape).items() if d in local}

    def is_equivalent_to(self, other: "Sharding", ndim: int) -> bool:
        """Whether both place every element of a rank-``ndim`` array on the same devices."""
        if not isinstance(other, Sharding):
            return False
        return _placement_key(self, ndim) == _placement_key(other, ndim)


def _placement_key(sharding: Sharding, ndim: int):
    if isinstance(sharding, NamedSharding):
        layout = sharding.layout(ndim)
        if sharding.mesh.size > 1 or any(layout):
            return (sharding.mesh, tuple(a for axes in layout for a in axes
                                         if sharding.mesh.shape[a] > 1), layout)
        sharding = SingleDeviceSharding(sharding.mesh.devices.flat[0])
    return (frozenset(sharding.device_set),)


class NamedSharding(Sharding):
    """An array split over a mesh: dimension ``i`` is divided into equal blocks over the mesh
    axes named by ``spec[i]`` (the first name major); the devices along every other mesh axis
    hold copies.

        >>> import functrans
        >>> from functrans.sharding import NamedSharding, PartitionSpec as P
        >>> mesh = functrans.make_mesh((1,), ('data',))
        >>> NamedSharding(mesh, P('data')).shard_shape((8, 4))
        (8, 4)
    """

    __slots__ = ("mesh", "spec", "_memory_kind", "__weakref__")

    def __init__(self, mesh: Mesh, spec: PartitionSpec, *, memory_kind=None):
        if not isinstance(mesh, Mesh):
            raise TypeError(f"NamedSharding: mesh must be a functrans.sharding.Mesh, got "
                            f"{type(mesh).__name__}")
        if not isinstance(spec, PartitionSpec):
            raise TypeError(f"NamedSharding: spec must be a PartitionSpec (functrans.P), got "
                            f"{spec!r} of type {type(spec).__name__}")
        if memory_kind not in (None, "device"):
            raise ValueError(f"NamedSharding: memory_kind {memory_kind!r} is not supported; "
                             "functrans devices have one memory ('device')")
        check_spec(mesh, spec)
        self.mesh = mesh
        self.spec = spec
        self._memory_kind = memory_kind

    memory_kind = property(lambda self: "device")

    def update(self, *, mesh=None, spec=None, memory_kind=None) -> "NamedSharding":
        """This sharding with ``mesh`` and/or ``spec`` replaced."""
        return NamedSharding(self.mesh if mesh is None else mesh,
                             self.spec if spec is None else
                             spec if isinstance(spec, PartitionSpec) else PartitionSpec(*spec))

    def __eq__(self, other):
        return isinstance(other, NamedSharding) and self.mesh == other.mesh and \
            self.spec == other.spec

    def __hash__(self):
        return hash((self.mesh, self.spec))

    def __reduce__(self):
        return (NamedSharding, (self.mesh, self.spec))

    def __repr__(self):
        return f"NamedSharding(mesh={self.mesh}, spec={self.spec}, memory_kind=device)"

    def with_spec(self, spec) -> "NamedSharding":
        if not isinstance(spec, PartitionSpec):
            spec = PartitionSpec(*spec)
        return NamedSharding(self.mesh, spec)

    def with_memory_kind(self, kind) -> "NamedSharding":
        return NamedSharding(self.mesh, self.spec, memory_kind=kind)

    def layout(self, ndim: int) -> Layout:
        return layout_of(self.spec, ndim)

    @property
    def device_set(self) -> set:
        return set(self.mesh.devices.flat)

    @property
    def _device_assignment(self) -> tuple:
        return tuple(self.mesh.devices.flat)

    @property
    def num_devices(self) -> int:
        return self.mesh.size

    @property
    def is_fully_replicated(self) -> bool:
        names = {n for entry in self.spec if entry is not None and
                 entry is not PartitionSpec.UNCONSTRAINED
                 for n in (entry if isinstance(entry, tuple) else (entry,))}
        return all(self.mesh.shape[n] == 1 for n in names)

    def shard_shape(self, global_shape) -> tuple:
        return _shard_shape(self, tuple(global_shape))

    def devices_indices_map(self, global_shape) -> dict:
        return dict(_indices(self, tuple(global_shape)))

    def _replica_ids(self, global_shape) -> dict:
        """Device -> its position among the devices holding the same block."""
        return dict(_replicas(self, tuple(global_shape)))


def _check_divisible(sharding: NamedSharding, shape: tuple) -> Layout:
    layout = sharding.layout(len(shape))
    for d, axes in enumerate(layout):
        parts = math.prod(sharding.mesh.shape[a] for a in axes)
        if shape[d] % parts:
            raise ValueError(
                f"Sharding spec {tuple(sharding.spec)} implies that array axis {d} is "
                f"partitioned {parts} times, but does not evenly divide the dimension size "
                f"{shape[d]}. Got shape: {shape} and sharding {sharding}")
    return layout


@functools.lru_cache(maxsize=512)
def _shard_shape(sharding: NamedSharding, shape: tuple) -> tuple:
    layout = _check_divisible(sharding, shape)
    return tuple(n // math.prod(sharding.mesh.shape[a] for a in axes)
                 for n, axes in zip(shape, layout))


def block_position(mesh: Mesh, axes: tuple, coords: dict) -> int:
    """The block a device holds along a dimension split over ``axes`` (the first one
    major), from the device's mesh coordinates."""
    position = 0
    for a in axes:
        position = position * mesh.shape[a] + coords[a]
    return position


def device_coords(mesh: Mesh) -> dict:
    """Device -> {axis name: its coordinate along that mesh axis}."""
    return _coords(mesh)


@functools.lru_cache(maxsize=64)
def _coords(mesh: Mesh) -> dict:
    out = {}
    for position in np.ndindex(*mesh.devices.shape):
        out[mesh.devices[position]] = dict(zip(mesh.axis_names, position))
    return out


@functools.lru_cache(maxsize=512)
def _indices(sharding: NamedSharding, shape: tuple) -> tuple:
    layout = _check_divisible(sharding, shape)
    block = _shard_shape(sharding, shape)
    out = []
    for device, coords in _coords(sharding.mesh).items():
        index = []
        for d, axes in enumerate(layout):
            if not axes:
                index.append(slice(None))
            else:
                start = block_position(sharding.mesh, axes, coords) * block[d]
                index.append(slice(start, start + block[d]))
        out.append((device, tuple(index)))
    return tuple(out)


@functools.lru_cache(maxsize=512)
def _replicas(sharding: NamedSharding, shape: tuple) -> tuple:
    seen: dict = {}
    out = []
    for device, index in _indices(sharding, shape):
        key = tuple((s.start, s.stop) for s in index)
        out.append((device, seen.get(key, 0)))
        seen[key] = seen.get(key, 0) + 1
    return tuple(out)


class SingleDeviceSharding(Sharding):
    """The whole array on one device (the sharding of an ordinary Array).

        >>> import functrans.numpy as jnp
        >>> jnp.ones(3).sharding.is_fully_replicated
        True
    """

    __slots__ = ("_device", "__weakref__")

    def __init__(self, device, *, memory_kind=None):
        self._device = device

    def __eq__(self, other):
        return isinstance(other, SingleDeviceSharding) and self._device == other._device

    def __hash__(self):
        return hash(("SingleDeviceSharding", self._device))

    def __repr__(self):
        return f"SingleDeviceSharding(device={self._device!r}, memory_kind=device)"

    @property
    def device_set(self) -> set:
        return {self._device}

    @property
    def _device_assignment(self) -> tuple:
        return (self._device,)

    @property
    def is_fully_replicated(self) -> bool:
        return True

    def shard_shape(self, global_shape) -> tuple:
        return tuple(global_shape)

    def devices_indices_map(self, global_shape) -> dict:
        return {self._device: (slice(None),) * len(tuple(global_shape))}

    def _replica_ids(self, global_shape) -> dict:
        return {self._device: 0}


def make_single_device_sharding(device) -> SingleDeviceSharding:
    return SingleDeviceSharding(device)


__all__ = ["DuplicateSpecError", "NamedSharding", "Sharding", "SingleDeviceSharding",
           "make_single_device_sharding"]
