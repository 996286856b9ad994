"""``Mesh``: an n-dimensional array of devices with a name per axis, and the current mesh.

A mesh is what shardings and ``shard_map`` name devices by: ``Mesh(devices, ('data',
'model'))`` over a ``(2, 2)`` array of devices has a 'data' axis and a 'model' axis of two
devices each. ``make_mesh`` builds one from the available devices; ``set_mesh`` makes one
the current mesh, used where a mesh is not given (``shard_map(mesh=None)``,
``PartitionSpec``s passed as shardings).
"""
from __future__ import annotations

import collections
import enum
import functools
import math
import threading
import warnings

import numpy as np
from functrans import _devices, distributed


class AxisType(enum.Enum):
    """How a mesh axis is partitioned. functrans partitions every axis automatically (its
    sharding propagation decides where values are split); the type is recorded and shown,
    as in JAX, and ``shard_map`` makes its axes manual."""

    Auto = enum.auto()
    Explicit = enum.auto()
    Manual = enum.auto()

    def __repr__(self):
        return self.name


def _axis_types(axis_names: tuple, axis_types, default) -> tuple:
    if axis_types is None:
        axis_types = (default,) * len(axis_names)
    elif isinstance(axis_types, AxisType):
        axis_types = (axis_types,)
    axis_types = tuple(axis_types)
    if not all(isinstance(t, AxisType) for t in axis_types):
        raise TypeError(f"axis_types must be functrans.sharding.AxisType members, got "
                        f"{axis_types}")
    if len(axis_types) != len(axis_names):
        raise ValueError(f"Number of axis names should match the number of axis_types. Got "
                         f"axis_names={axis_names} and axis_types={axis_types}")
    return axis_types


class _AxisTypeQueries:
    """Which axes of a mesh are of which type (``Auto``, ``Explicit``, ``Manual``)."""

    __slots__ = ()

    def _of_type(self, kind) -> tuple:
        return tuple(n for n, t in zip(self.axis_names, self.axis_types) if t == kind)

    auto_axes = property(lambda self: self._of_type(AxisType.Auto))
    explicit_axes = property(lambda self: self._of_type(AxisType.Explicit))
    manual_axes = property(lambda self: self._of_type(AxisType.Manual))
    are_all_axes_auto = property(lambda self: all(t == AxisType.Auto for t in self.axis_types))
    are_all_axes_explicit = property(
        lambda self: all(t == AxisType.Explicit for t in self.axis_types))
    are_all_axes_manual = property(
        lambda self: all(t == AxisType.Manual for t in self.axis_types))
    _any_axis_auto = property(lambda self: AxisType.Auto in self.axis_types)
    _any_axis_explicit = property(lambda self: AxisType.Explicit in self.axis_types)
    _any_axis_manual = property(lambda self: AxisType.Manual in self.axis_types)


class Mesh(_AxisTypeQueries):
    """Devices arranged in an n-dimensional array with one name per axis.

    ``devices`` is an array (or nested sequence) of devices; ``axis_names`` names its axes.

        >>> import functrans, numpy as np
        >>> from functrans.sharding import Mesh
        >>> mesh = Mesh(np.array(functrans.devices()[:1]).reshape(1, 1), ('data', 'model'))
        >>> dict(mesh.shape)
        {'data': 1, 'model': 1}
    """

    __slots__ = ("devices", "axis_names", "axis_types", "size", "_key", "__dict__")

    def __init__(self, devices, axis_names, axis_types=None):
        devices = np.array(devices, dtype=object) if not isinstance(devices, np.ndarray) \
            else devices.astype(object)
        if isinstance(axis_names, str):
            axis_names = (axis_names,)
        axis_names = tuple(axis_names)
        if any(n is None for n in axis_names):
            raise ValueError(f"Mesh axis names cannot be None. Got: {axis_names}")
        if any(isinstance(n, str) and not n for n in axis_names):
            # '' is no name: collectives and PartitionSpecs could not tell it from "no axis"
            raise ValueError(f"Mesh axis names cannot be empty strings. Got: {axis_names}")
        if len(set(axis_names)) != len(axis_names):
            raise ValueError(f"Mesh axis names must be unique, got {axis_names}")
        if devices.ndim != len(axis_names):
            raise ValueError(
                "Mesh requires the ndim of its first argument (`devices`) to equal the length "
                f"of its second argument (`axis_names`), but got devices.ndim == "
                f"{devices.ndim} and len(axis_names) == {len(axis_names)}.")
        flat = list(devices.flat) if axis_names else []  # the empty mesh holds no device
        if len(set(flat)) != len(flat):
            raise ValueError(f"Mesh: a device appears more than once in {flat}")
        devices.flags.writeable = False
        object.__setattr__(self, "devices", devices)
        object.__setattr__(self, "axis_names", axis_names)
        object.__setattr__(self, "axis_types", _axis_types(axis_names, axis_types,
                                                           AxisType.Auto))
        object.__setattr__(self, "size", len(flat) if axis_names else 0)
        object.__setattr__(self, "_key", (tuple((d.platform, d.id) for d in flat),
                                          devices.shape, axis_names, self.axis_types))

    def __setattr__(self, name, value):
        raise AttributeError("Mesh is immutable")

    def __eq__(self, other):
        return isinstance(other, Mesh) and self._key == other._key

    def __hash__(self):
        return hash(self._key)

    def __reduce__(self):
        return (Mesh, (self.devices, self.axis_names, self.axis_types))

    @functools.cached_property
    def shape(self) -> "collections.OrderedDict[str, int]":
        """Axis name -> number of devices along it, in axis order."""
        return collections.OrderedDict(zip(self.axis_names, self.devices.shape))

    @property
    def shape_tuple(self) -> tuple:
        return tuple(self.shape.items())

    @property
    def axis_sizes(self) -> tuple:
        return self.devices.shape

    @property
    def empty(self) -> bool:
        return self.size == 0

    @functools.cached_property
    def device_ids(self) -> np.ndarray:
        """The devices' ids, in the mesh's shape."""
        return np.vectorize(lambda d: d.id, otypes=[int])(self.devices)

    @property
    def local_devices(self) -> list:
        """The mesh's devices that belong to this process, in mesh order."""
        rank = distributed.process_index()
        return [d for d in self.devices.flat if d.process_index == rank]

    @property
    def is_multi_process(self) -> bool:
        return len(self.local_devices) != self.devices.size

    @property
    def local_mesh(self) -> "Mesh":
        """The sub-mesh of this process's devices (they must form a block of the mesh)."""
        rank = distributed.process_index()
        local = np.vectorize(lambda d: d.process_index == rank, otypes=[bool])(self.devices)
        ranges = []
        for axis in range(self.devices.ndim):
            hit = np.nonzero(local.any(axis=tuple(a for a in range(local.ndim) if a != axis)))[0]
            ranges.append(slice(int(hit.min()), int(hit.max()) + 1) if hit.size else slice(0, 0))
        if not local[tuple(ranges)].all():
            raise ValueError("the devices of this process do not form a contiguous block of "
                             "the mesh")
        return Mesh(self.devices[tuple(ranges)], self.axis_names, self.axis_types)

    @property
    def abstract_mesh(self) -> "Mesh":
        return self

    def update(self, devices=None, axis_names=None, axis_types=None) -> "Mesh":
        return Mesh(self.devices if devices is None else devices,
                    self.axis_names if axis_names is None else axis_names,
                    self.axis_types if axis_types is None else axis_types)

    def __enter__(self):
        warnings.warn("`with mesh:` is deprecated, as in JAX; use `with "
                      "functrans.set_mesh(mesh):` instead.", DeprecationWarning, stacklevel=2)
        _stack.append(_state.mesh)
        _state.mesh = self
        return self

    def __exit__(self, *exc):
        _state.mesh = _stack.pop()
        return False

    def __str__(self):
        if self.empty:
            return "Mesh()"
        axes = ", ".join(f"'{k}': {v}" for k, v in self.shape.items())
        return f"Mesh({axes}, axis_types={self.axis_types})"

    def __repr__(self):
        if self.empty:
            return "Mesh(axis_sizes=(), axis_names=())"
        return (f"Mesh(axis_sizes={self.axis_sizes}, axis_names={self.axis_names!r}, "
                f"axis_types={self.axis_types})")


class AbstractMesh(_AxisTypeQueries):
    """The shape of a mesh without its devices: axis sizes, names and types. What tracing
    needs to know about a mesh (a spec's axis sizes), comparable and hashable.

        >>> from functrans.sharding import AbstractMesh
        >>> AbstractMesh((2, 4), ("data", "model")).shape
        OrderedDict([('data', 2), ('model', 4)])
    """

    def __init__(self, axis_sizes, axis_names, axis_types=None):
        if isinstance(axis_names, str):
            axis_names = (axis_names,)
        self.axis_sizes = tuple(int(s) for s in axis_sizes)
        self.axis_names = tuple(axis_names)
        if len(self.axis_sizes) != len(self.axis_names):
            raise ValueError(f"AbstractMesh: {len(self.axis_sizes)} axis sizes for "
                             f"{len(self.axis_names)} axis names")
        self.axis_types = _axis_types(self.axis_names, axis_types, AxisType.Auto)

    @property
    def shape(self) -> "collections.OrderedDict[str, int]":
        return collections.OrderedDict(zip(self.axis_names, self.axis_sizes))

    @property
    def shape_tuple(self) -> tuple:
        return tuple(zip(self.axis_names, self.axis_sizes))

    @property
    def size(self) -> int:
        return int(np.prod(self.axis_sizes, dtype=np.int64))

    @property
    def empty(self) -> bool:
        return not self.axis_names

    @property
    def abstract_mesh(self) -> "AbstractMesh":
        return self

    def update(self, axis_sizes=None, axis_names=None, axis_types=None) -> "AbstractMesh":
        return AbstractMesh(self.axis_sizes if axis_sizes is None else axis_sizes,
                            self.axis_names if axis_names is None else axis_names,
                            self.axis_types if axis_types is None else axis_types)

    def __eq__(self, other):
        if isinstance(other, Mesh):
            other = AbstractMesh(other.axis_sizes, other.axis_names, other.axis_types)
        return isinstance(other, AbstractMesh) and (
            self.axis_sizes, self.axis_names, self.axis_types) == (
            other.axis_sizes, other.axis_names, other.axis_types)

    def __hash__(self):
        return hash((self.axis_sizes, self.axis_names, self.axis_types))

    def __repr__(self):
        shape = ", ".join(f"'{n}': {s}" for n, s in zip(self.axis_names, self.axis_sizes))
        return f"AbstractMesh({shape}, axis_types={self.axis_types})"


_EMPTY = Mesh(np.empty((), dtype=object), ())


class _CurrentMesh:
    mesh: Mesh = _EMPTY


_state = _CurrentMesh()
_stack: list = []
_lock = threading.Lock()


def get_mesh() -> Mesh:
    """The current mesh (set with :func:`set_mesh`), or an empty mesh.

        >>> from functrans.sharding import get_mesh
        >>> get_mesh().empty
        True
    """
    return _state.mesh


get_abstract_mesh = get_mesh


class set_mesh:
    """Make ``mesh`` the current mesh: from now on, or, used as a context manager, for the
    block (the previous mesh comes back at its end).

        >>> import functrans
        >>> mesh = functrans.make_mesh((1,), ('data',))
        >>> with functrans.set_mesh(mesh):
        ...     functrans.sharding.get_mesh().axis_names
        ('data',)
    """

    def __init__(self, mesh: Mesh):
        if not isinstance(mesh, Mesh):
            raise TypeError(f"set_mesh expects a Mesh, got {type(mesh).__name__}")
        with _lock:
            self._previous = _state.mesh
            _state.mesh = mesh

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        with _lock:
            _state.mesh = self._previous
        return False


def make_mesh(axis_shapes, axis_names, axis_types=None, *, devices=None) -> Mesh:
    """A mesh of ``prod(axis_shapes)`` devices (the first ones of ``devices``, default
    ``functrans.devices()``, in order) with the given axis names. As in JAX, the axes are
    ``AxisType.Explicit`` unless ``axis_types`` says otherwise.

        >>> import functrans
        >>> dict(functrans.make_mesh((1,), ('data',)).shape)
        {'data': 1}
    """
    axis_shapes = tuple(int(s) for s in axis_shapes)
    if isinstance(axis_names, str):
        axis_names = (axis_names,)
    axis_names = tuple(axis_names)
    if len(axis_shapes) != len(axis_names):
        raise ValueError(f"make_mesh: axis_shapes {axis_shapes} and axis_names {axis_names} "
                         "must have the same length")
    devices = list(_devices.devices() if devices is None else devices)
    count = math.prod(axis_shapes)
    if count > len(devices) or count < 1:
        raise ValueError(
            f"Number of devices {len(devices)} must be >= the product of mesh_shape "
            f"{axis_shapes}. Set FUNCTRANS_CPU_DEVICES={count} (or "
            f"functrans.config.update('cpu_device_count', {count}) before using devices) "
            "for that many CPU devices.")
    grid = np.empty(count, dtype=object)
    grid[:] = devices[:count]
    return Mesh(grid.reshape(axis_shapes), axis_names,
                _axis_types(axis_names, axis_types, AxisType.Explicit))


__all__ = ["AbstractMesh", "AxisType", "Mesh", "get_abstract_mesh", "get_mesh", "make_mesh",
           "set_mesh"]
