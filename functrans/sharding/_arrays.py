"""Arrays split over the devices of a mesh, and the ways to make them.

A :class:`PartitionedArray` is a ``functrans.Array`` whose sharding is a
:class:`NamedSharding`: it holds one buffer per device of its mesh that belongs to this
process (``addressable_shards``), each the block of the global array that the sharding gives
that device (devices holding the same block may share one host buffer: arrays are
immutable). It behaves as the whole array everywhere an array is expected; the whole array
is assembled on the host only when something needs it (``np.asarray``, printing, an eager
operation), and never for arrays that span other processes' devices.

``device_put(x, sharding)``, ``make_array_from_callback``,
``make_array_from_single_device_arrays`` and ``make_array_from_process_local_data`` build
them block by block, without gathering the array on one device.
"""
from __future__ import annotations

import math

import numpy as np

from functrans import _dtypes, _jit, _spmd, core, distributed
from functrans._array import Array, is_concrete_array
from functrans._spmd import AssembledArray, host_value as _host
from functrans.core import ShapedArray, Tracer, get_aval
from functrans.sharding._shardings import (block_position, device_coords, NamedSharding, Sharding,
                                           SingleDeviceSharding)
from functrans._api import device_put
from functrans.sharding._constraints import with_sharding_constraint

class Shard:
    """One device's block of an array: ``device``, ``index`` (a tuple of slices into the
    global array), ``replica_id`` (which copy of that block) and ``data`` (an Array)."""

    __slots__ = ("device", "index", "replica_id", "data")

    def __init__(self, device, index, replica_id, data):
        self.device = device
        self.index = index
        self.replica_id = replica_id
        self.data = data

    def __repr__(self):
        return (f"Shard(device={self.device!r}, index={self.index}, "
                f"replica_id={self.replica_id}, data={self.data!r})")


class PartitionedArray(AssembledArray):
    """An array split over a mesh by a :class:`NamedSharding` (see the module docstring).

        >>> import functrans, numpy as np
        >>> from functrans.sharding import NamedSharding, PartitionSpec as P
        >>> mesh = functrans.make_mesh((1,), ('data',))
        >>> x = functrans.device_put(np.arange(4.0), NamedSharding(mesh, P('data')))
        >>> x.sharding.spec, x.shape
        (P('data',), (4,))
    """

    __slots__ = ("_sharding", "_global_aval", "_buffers")
    # Not one host buffer: eager operations on it run as partitioned one-operation programs
    # (functrans.core.eval_primitive hands arrays off the host to jit).
    _platform = "mesh"

    def __init__(self, aval: ShapedArray, sharding: NamedSharding, buffers: dict):
        # ``buffers``: device -> its block, for every device of the mesh in this process.
        self._sharding = sharding
        self._global_aval = ShapedArray(aval.shape, aval.dtype, aval.weak_type)
        self._buffers = buffers
        self._start_unassembled(aval.weak_type)

    def _assemble(self) -> np.ndarray:
        sharding, aval = self._sharding, self._global_aval
        if sharding.is_fully_replicated:
            return np.asarray(_host(next(iter(self._buffers.values()))), aval.dtype)
        indices = sharding.devices_indices_map(aval.shape)
        # every block must be held by a device of this process (always so in one process)
        local: dict = {}
        for d, i in indices.items():  # the first copy of each block (replica 0 when local)
            if d in self._buffers:
                local.setdefault(_index_key(i), d)
        if len(local) != len({_index_key(i) for i in indices.values()}):
            raise RuntimeError(
                "Fetching value for `functrans.Array` that spans non-addressable (non process "
                "local) devices is not possible. Use `.addressable_shards` to inspect this "
                "process's blocks, or reshard the array to a replicated sharding first "
                "(functrans.jit(lambda x: x, out_shardings=NamedSharding(mesh, P()))).")
        out = np.empty(aval.shape, aval.dtype)
        for key, device in local.items():
            out[indices[device]] = _host(self._buffers[device])
        return out

    @property
    def aval(self) -> ShapedArray:
        return self._global_aval

    shape = property(lambda self: self._global_aval.shape)
    dtype = property(lambda self: self._global_aval.dtype)
    ndim = property(lambda self: len(self._global_aval.shape))
    size = property(lambda self: math.prod(self._global_aval.shape))
    nbytes = property(lambda self: self.size * self._global_aval.dtype.itemsize)
    itemsize = property(lambda self: self._global_aval.dtype.itemsize)

    @property
    def sharding(self) -> NamedSharding:
        return self._sharding

    @property
    def device(self):
        devices = self._sharding.device_set
        return next(iter(devices)) if len(devices) == 1 else self._sharding

    def devices(self) -> set:
        return self._sharding.device_set

    @property
    def is_fully_replicated(self) -> bool:
        return self._sharding.is_fully_replicated

    def is_fully_addressable(self) -> bool:
        return self._sharding.is_fully_addressable

    def _shards(self, devices) -> list:
        sharding, shape = self._sharding, self._global_aval.shape
        indices = sharding.devices_indices_map(shape)
        replicas = sharding._replica_ids(shape)
        out = []
        for device in devices:
            buffer = self._buffers.get(device)
            data = None if buffer is None else (
                buffer if is_concrete_array(buffer)
                else Array._from_buffer(buffer, self.weak_type, device))
            out.append(Shard(device, indices[device], replicas[device], data))
        return out

    @property
    def addressable_shards(self) -> list:
        """This process's blocks, one per device, in mesh order."""
        return self._shards([d for d in self._sharding.mesh.devices.flat if d in self._buffers])

    @property
    def global_shards(self) -> list:
        """Every device's block (``data`` is None for other processes' devices)."""
        return self._shards(list(self._sharding.mesh.devices.flat))

    def block_until_ready(self) -> "PartitionedArray":
        for b in self._buffers.values():
            if is_concrete_array(b):
                b.block_until_ready()
        return self

    def copy(self) -> "PartitionedArray":
        return PartitionedArray(self._global_aval, self._sharding, dict(self._buffers))

    def __reduce__(self):
        return (_rebuild, (self._value.copy(), self._sharding, self.weak_type))

    def __repr__(self):
        try:
            self._value
        except RuntimeError:  # blocks held only by other processes
            return (f"Array(<{self._global_aval.str_short()} spanning "
                    f"{self._sharding.num_devices} devices of several processes>)")
        return super().__repr__()


def _rebuild(value, sharding, weak_type):
    return put(value, sharding, ShapedArray(value.shape, value.dtype, weak_type))


def _index_key(index) -> tuple:
    return tuple((s.start, s.stop) for s in index)


# =============================================================================================
# Where each block comes from
# =============================================================================================


def local_devices_of(sharding: NamedSharding) -> list:
    """The sharding's devices in this process, in mesh order."""
    rank = distributed.process_index()
    return [d for d in sharding.mesh.devices.flat if d.process_index == rank]


def _block_from(x: PartitionedArray, index, shape) -> np.ndarray | None:
    """Block ``index`` of the global array ``x``, copied from the blocks of ``x`` in this
    process that overlap it; None when some of it lives only in another process."""
    source = x._sharding
    src_map = source.devices_indices_map(x.shape)
    want = [(s.start or 0, s.stop if s.stop is not None else n) for s, n in zip(index, shape)]
    # the block itself, held as it is by one of x's devices: no copy
    for device, src in src_map.items():
        have = [(s.start or 0, s.stop if s.stop is not None else n) for s, n in zip(src, shape)]
        if have == want and device in x._buffers:
            return _host(x._buffers[device])
    out = np.empty([hi - lo for lo, hi in want], x.dtype)
    covered = np.zeros(out.shape, bool) if out.size else None
    done = set()
    for device, src in src_map.items():
        if device not in x._buffers or _index_key(src) in done:
            continue
        done.add(_index_key(src))
        have = [(s.start or 0, s.stop if s.stop is not None else n) for s, n in zip(src, shape)]
        lo = [max(a[0], b[0]) for a, b in zip(want, have)]
        hi = [min(a[1], b[1]) for a, b in zip(want, have)]
        if any(a >= b for a, b in zip(lo, hi)):
            continue
        dst = tuple(slice(a - w[0], b - w[0]) for a, b, w in zip(lo, hi, want))
        src_slice = tuple(slice(a - h[0], b - h[0]) for a, b, h in zip(lo, hi, have))
        out[dst] = _host(x._buffers[device])[src_slice]
        if covered is not None:
            covered[dst] = True
    if covered is not None and not covered.all():
        return None
    return out


def put(x, sharding: Sharding, aval: ShapedArray | None = None):
    """``x`` (an array or host value) placed by ``sharding``: each device of this process gets
    its block, cut from ``x`` (a PartitionedArray's blocks are cut from its own blocks, never
    from the whole array)."""
    if aval is None:
        aval = get_aval(x)
    if isinstance(sharding, SingleDeviceSharding):
        device = next(iter(sharding.device_set))
        return device_put(x._value if isinstance(x, PartitionedArray) else x, device)
    if not isinstance(sharding, NamedSharding):
        raise TypeError(f"device_put: unsupported sharding {sharding!r}")
    shape = aval.shape
    indices = sharding.devices_indices_map(shape)  # checks rank and divisibility
    local = local_devices_of(sharding)
    if isinstance(x, PartitionedArray) and x._sharding == sharding:
        return x
    placement = _spmd.placement_for(local)
    blocks: dict = {}
    value = None
    if not isinstance(x, PartitionedArray):
        # host data is copied once per distinct block; an Array's buffer is immutable, so its
        # blocks are views of it
        value = core.to_numpy(x, aval) if not isinstance(x, np.ndarray) else x
        copy_blocks = isinstance(x, np.ndarray)
    buffers = {}
    for member, device in enumerate(local):
        index = indices[device]
        key = _index_key(index)
        block = blocks.get(key)
        if block is None:
            if value is not None:
                block = value[index]
                block = core.host_copy(block, aval.dtype) if copy_blocks else block
            else:
                block = _block_from(x, index, shape)
                if block is None:
                    return _reshard_across_processes(x, sharding)
            blocks[key] = block
        buffers[device] = placement.put(member, block, aval)
    return PartitionedArray(aval, sharding, buffers)


def _reshard_across_processes(x: PartitionedArray, sharding: NamedSharding):
    """A reshard whose blocks need data from other processes: an identity program with
    that output sharding moves them with collectives."""
    return _jit.jit(lambda a: a, out_shardings=sharding)(x)


def put_traced(x: Tracer, sharding: Sharding):
    """``device_put`` of a traced value to a NamedSharding: a sharding constraint (the
    partitioned program reshards there); to one device: the value itself."""
    if isinstance(sharding, NamedSharding):
        return with_sharding_constraint(x, sharding)
    return x


# =============================================================================================
# Building arrays block by block
# =============================================================================================


def _aval_for(shape, dtype, what) -> ShapedArray:
    return ShapedArray(tuple(int(n) for n in shape), _dtypes.canonicalize_dtype(np.dtype(dtype)))


def make_array_from_callback(shape, sharding: Sharding, data_callback, dtype=None):
    """An array of ``shape`` placed by ``sharding`` whose block for each device of this
    process is ``data_callback(index)`` (``index``: a tuple of slices into the global
    array). The whole array is never built.

        >>> import functrans, numpy as np
        >>> from functrans.sharding import NamedSharding, PartitionSpec as P
        >>> mesh = functrans.make_mesh((1,), ('data',))
        >>> data = np.arange(8.0).reshape(4, 2)
        >>> a = functrans.make_array_from_callback((4, 2), NamedSharding(mesh, P('data')),
        ...                                        lambda index: data[index])
        >>> float(a.sum())
        28.0
    """
    shape = tuple(int(n) for n in shape)
    if isinstance(sharding, SingleDeviceSharding):
        device = next(iter(sharding.device_set))
        block = np.asarray(data_callback((slice(None),) * len(shape)), dtype)
        return device_put(block, device)
    expected = sharding.shard_shape(shape)
    indices = sharding.devices_indices_map(shape)
    local = local_devices_of(sharding)
    placement = _spmd.placement_for(local)
    blocks: dict = {}
    buffers, aval = {}, None
    for member, device in enumerate(local):
        key = _index_key(indices[device])
        if key not in blocks:
            raw = data_callback(indices[device])
            block = core.to_numpy(raw) if is_concrete_array(raw) else np.asarray(raw, dtype)
            if block.shape != expected:
                raise ValueError(f"make_array_from_callback: data_callback returned a block of "
                                 f"shape {block.shape} for index {indices[device]} of device "
                                 f"{device}; the sharding {sharding} of shape {shape} expects "
                                 f"{expected}")
            if aval is None:
                aval = _aval_for(shape, block.dtype, "make_array_from_callback")
            blocks[key] = core.host_copy(block, aval.dtype) \
                if not is_concrete_array(raw) else block
        buffers[device] = placement.put(member, blocks[key], aval)
    if aval is None:  # no device of this process holds a block
        aval = _aval_for(shape, dtype or np.float32, "make_array_from_callback")
    return PartitionedArray(aval, sharding, buffers)


def make_array_from_single_device_arrays(shape, sharding: Sharding, arrays, *, dtype=None):
    """An array of ``shape`` placed by ``sharding`` from one array per device of this
    process: each array's ``device`` says which block it is (arrays not yet on a device of
    the sharding are taken in the order of the sharding's devices in this process).

        >>> import functrans, numpy as np
        >>> from functrans.sharding import NamedSharding, PartitionSpec as P
        >>> mesh = functrans.make_mesh((1,), ('data',))
        >>> d = mesh.devices.flat[0]
        >>> a = functrans.make_array_from_single_device_arrays(
        ...     (2,), NamedSharding(mesh, P('data')), [functrans.device_put(np.ones(2), d)])
        >>> a.shape
        (2,)
    """
    shape = tuple(int(n) for n in shape)
    arrays = list(arrays)
    if isinstance(sharding, SingleDeviceSharding):
        if len(arrays) != 1:
            raise ValueError(f"make_array_from_single_device_arrays: a SingleDeviceSharding "
                             f"takes one array, got {len(arrays)}")
        return arrays[0]
    local = local_devices_of(sharding)
    if len(arrays) != len(local):
        raise ValueError(f"make_array_from_single_device_arrays: got {len(arrays)} arrays for "
                         f"the {len(local)} devices of {sharding} in this process; give one "
                         "per device")
    on = [getattr(a, "_device", None) for a in arrays]
    if all(d is not None for d in on) and sorted(on, key=lambda d: d.id) == \
            sorted(local, key=lambda d: d.id):
        by_device = dict(zip(on, arrays))
    else:
        by_device = dict(zip(local, arrays))
    expected = sharding.shard_shape(shape)
    placement = _spmd.placement_for(local)
    buffers, aval = {}, None
    for member, device in enumerate(local):
        a = by_device[device]
        a_aval = get_aval(a)
        if a_aval.shape != expected:
            raise ValueError(f"make_array_from_single_device_arrays: the array for device "
                             f"{device} has shape {a_aval.shape}; the sharding {sharding} of "
                             f"shape {shape} expects blocks of shape {expected}")
        if aval is None:
            aval = ShapedArray(shape, a_aval.dtype, a_aval.weak_type)
        elif a_aval.dtype != aval.dtype:
            raise ValueError(f"make_array_from_single_device_arrays: arrays of different dtypes "
                             f"{aval.dtype} and {a_aval.dtype}")
        value = a if getattr(a, "_platform", "cpu") != "cpu" else core.to_numpy(a, a_aval)
        buffers[device] = placement.put(member, value, a_aval)
    if aval is None:
        aval = _aval_for(shape, dtype or np.float32, "make_array_from_single_device_arrays")
    return PartitionedArray(aval, sharding, buffers)


def make_array_from_process_local_data(sharding: Sharding, local_data, global_shape=None):
    """A global array from each process's part of it: ``local_data`` is the block of the
    global array that this process's devices of ``sharding`` cover together (the whole
    array when one process runs, or when the sharding replicates it over the processes).
    ``global_shape`` defaults to the local shape grown along each dimension that the
    sharding splits over the processes.

        >>> import functrans, numpy as np
        >>> from functrans.sharding import NamedSharding, PartitionSpec as P
        >>> mesh = functrans.make_mesh((1,), ('data',))
        >>> a = functrans.make_array_from_process_local_data(NamedSharding(mesh, P('data')),
        ...                                                  np.arange(6.0).reshape(3, 2))
        >>> a.shape
        (3, 2)
    """
    local_data = local_data if is_concrete_array(local_data) else np.asarray(local_data)
    local_shape = tuple(local_data.shape)
    if isinstance(sharding, SingleDeviceSharding):
        return put(local_data, sharding)
    layout = sharding.layout(len(local_shape))
    mesh = sharding.mesh
    local = local_devices_of(sharding)
    coords = device_coords(mesh)
    if global_shape is None:
        shape = []
        for d, axes in enumerate(layout):
            parts = math.prod(mesh.shape[a] for a in axes)
            here = len({block_position(mesh, axes, coords[dev]) for dev in local})
            shape.append(local_shape[d] * parts // here)
        global_shape = tuple(shape)
    global_shape = tuple(int(n) for n in global_shape)
    indices = sharding.devices_indices_map(global_shape)
    # where this process's part starts along each dimension: its first block
    starts = [min((indices[dev][d].start or 0) for dev in local) for d in range(len(layout))]
    ends = [max((indices[dev][d].stop if indices[dev][d].stop is not None else global_shape[d])
                for dev in local) for d in range(len(layout))]
    covered = tuple(e - s for s, e in zip(starts, ends))
    if covered != local_shape:
        raise ValueError(f"make_array_from_process_local_data: local_data has shape "
                         f"{local_shape}, but this process's devices of {sharding} hold the "
                         f"part of shape {covered} of the global shape {global_shape}")

    def block(index):
        return local_data[tuple(slice((s.start or 0) - o, (s.stop if s.stop is not None
                                                           else n) - o)
                                for s, o, n in zip(index, starts, global_shape))]

    return make_array_from_callback(global_shape, sharding, block)


__all__ = ["PartitionedArray", "Shard", "make_array_from_callback",
           "make_array_from_process_local_data", "make_array_from_single_device_arrays"]
