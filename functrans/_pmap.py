"""``pmap``: run one program on many devices at once, with collectives between them.

pmap is a front end of the SPMD runtime (``_spmd.py``), as ``shard_map`` and ``jit`` with
shardings are: a call stages the function once per signature at the *per-device* types
(the mapped axis removed), with the axis name bound in the axis environment so collectives
(``psum``, ``all_gather``, ...) are recorded as equations, and hands the program to the
runtime over a one-axis set of members, the devices. The runtime cuts it at its
collectives, compiles the segments once, and runs every device at once (across processes
with MPI when ``functrans.distributed`` is initialized, with NCCL between GPUs).

Results come back as a :class:`ShardedArray`: one buffer per device, shape
``(num_devices, ...)``, joined into one array only when needed (``np.asarray``, printing,
indexing); passing it to another ``pmap`` hands each device its own buffer without a copy.

Under another transform (``grad``, ``vmap``, ``jit`` of a pmapped function), pmap has the
same meaning as ``vmap`` with the same ``axis_name`` (the collectives have the same
semantics under both), so a pmapped function called with traced arguments is evaluated as
that vmap. ``pmap(grad(f))``, the usual data-parallel pattern, stays a real pmap.
"""
from __future__ import annotations

import functools
import hashlib
from typing import Callable

import numpy as np

from functrans import _axis_env, _devices, _spmd, core, distributed, tree_util
from functrans._array import Array
from functrans._caches import LRUCache
from functrans._communicators import compute_on_host as _compute_collective
from functrans._spmd import AssembledArray, Members, Program
# the runtime's names as pmap's own (the rendezvous, the placements' registry)
from functrans._spmd import PeerFailed as _PeerFailed  # noqa: F401
from functrans._spmd import Rendezvous as _Rendezvous  # noqa: F401
from functrans._spmd import _placements  # noqa: F401
from functrans._spmd import host_value as _host_value
from functrans._spmd import is_device_array as _is_device_array
from functrans._spmd import placement_for as _placement_for
from functrans.core import ClosedJaxpr, ShapedArray, Tracer, get_aval
from functrans._api import _flatten_axes as flatten
from functrans._api import inconsistent_sizes_message
from functrans._api import vmap
from functrans._traceback_util import api_boundary
from functrans.interpreters.staging import trace_to_jaxpr_dynamic
from functrans.sharding import Mesh, NamedSharding, PartitionSpec

# the context of a device thread of a one-axis program (pmap's)
_DeviceContext = _spmd.DeviceContext.for_axis

# =============================================================================================
# Sharded arrays and explicit placement
# =============================================================================================


class Shard:
    """One device's piece of a :class:`ShardedArray`."""

    __slots__ = ("device", "index", "data")

    def __init__(self, device, index, data):
        self.device = device
        self.index = index
        self.data = data

    def __repr__(self):
        return f"Shard(device={self.device!r}, index={self.index}, data={self.data!r})"


_PMAP_MESH_AXIS = "_internal_pmap_axis_name"


class ShardedArray(AssembledArray):
    """An array split along its leading axis over devices: entry ``i`` lives on
    ``devices[i]``. It behaves as the joined array ``(num_devices, ...)`` everywhere an
    array is expected; the join happens once, on first use as a whole array.

        >>> import functrans, numpy as np
        >>> x = functrans.device_put_replicated(np.arange(3.0), functrans.local_devices())
        >>> x.shape[1:]
        (3,)
    """

    __slots__ = ("_shards", "_shard_aval", "_shard_devices")

    def __init__(self, shards, shard_aval: ShapedArray, devices, weak_type: bool = False):
        # A shard is a NumPy array (a CPU device) or an Array that lives on its device (a
        # GpuArray), kept as it is so that a later pmap takes it without a copy.
        self._shards = [s if _is_device_array(s) else np.asarray(s) for s in shards]
        self._shard_aval = shard_aval
        self._shard_devices = list(devices)
        self._start_unassembled(weak_type)

    def _assemble(self) -> np.ndarray:
        if not self._shards:
            return np.zeros((0,) + self._shard_aval.shape, self._shard_aval.dtype)
        return np.stack([_host_value(s) for s in self._shards])

    @property
    def aval(self) -> ShapedArray:
        return ShapedArray(self.shape, self._shard_aval.dtype, self.weak_type)

    shape = property(lambda self: (len(self._shards),) + self._shard_aval.shape)
    dtype = property(lambda self: self._shard_aval.dtype)
    ndim = property(lambda self: 1 + self._shard_aval.ndim)
    size = property(lambda self: len(self._shards) * self._shard_aval.size)

    def __len__(self):
        return len(self._shards)

    @property
    def sharding_devices(self) -> list:
        """The device of each entry of the leading axis."""
        return list(self._shard_devices)

    def devices(self) -> set:
        return set(self._shard_devices)

    @property
    def sharding(self):
        """The leading axis split over the devices, one entry each (as JAX's pmap outputs:
        a NamedSharding over a one-axis mesh of the devices)."""
        # (functrans.sharding builds on pmap's placements; imported on use)
        mesh = Mesh(np.array(self._shard_devices, dtype=object), (_PMAP_MESH_AXIS,))
        return NamedSharding(mesh, PartitionSpec(_PMAP_MESH_AXIS))

    @property
    def is_fully_replicated(self) -> bool:
        return len(self._shards) == 1

    def _shard_array(self, s, device) -> Array:
        # a shard is a buffer pmap or a device_put made (host data was copied on the way in)
        return s if _is_device_array(s) else Array._from_buffer(s, self.weak_type, device)

    @property
    def device_buffers(self) -> list:
        return [self._shard_array(s, d) for s, d in zip(self._shards, self._shard_devices)]

    @property
    def addressable_shards(self) -> list:
        return [Shard(d, i, self._shard_array(s, d))
                for i, (s, d) in enumerate(zip(self._shards, self._shard_devices))]

    def block_until_ready(self) -> "ShardedArray":
        for s in self._shards:
            if _is_device_array(s):
                s.block_until_ready()
        return self

    def __repr__(self):
        prefix = "ShardedArray("
        body = np.array2string(self._value, separator=", ", prefix=prefix)
        weak = ", weak_type=True" if self.weak_type else ""
        return f"{prefix}{body}, dtype={self.dtype.name}{weak})"


def _leaf_value(x) -> np.ndarray:
    return core.to_numpy(x, get_aval(x))


def _put_everywhere(placement, leaf, aval) -> list:
    """``leaf`` as one shard per device of ``placement`` (a device array already on its
    device is kept as it is)."""
    value = leaf if _is_device_array(leaf) else _leaf_value(leaf)
    return [placement.put(m, value, aval) for m in range(len(placement.devices))]


def device_put_replicated(x, devices):
    """A copy of every array of the pytree ``x`` on each device: leaves of shape
    ``(len(devices), *x.shape)``, ready for ``pmap`` (on GPUs, one GPU buffer per device).

        >>> import functrans, numpy as np
        >>> r = functrans.device_put_replicated(np.float32(2.0), functrans.local_devices())
        >>> float(np.asarray(r)[0])
        2.0
    """
    devices = list(devices)
    if not devices:
        raise ValueError("device_put_replicated: `devices` must be a non-empty list")
    placement = _placement_for(devices)

    def put(leaf):
        aval = get_aval(leaf)
        return ShardedArray(_put_everywhere(placement, leaf, aval), aval, devices,
                            aval.weak_type)

    return tree_util.tree_map(put, x)


def device_put_sharded(shards, devices):
    """Put ``shards[i]`` (pytrees of one structure, arrays of one shape and dtype) on
    ``devices[i]``: leaves of shape ``(len(devices), *shard.shape)``, ready for ``pmap``.

        >>> import functrans, numpy as np
        >>> devs = functrans.local_devices()
        >>> s = functrans.device_put_sharded([np.ones(2)] * len(devs), devs)
        >>> s.shape[1:]
        (2,)
    """
    devices = list(devices)
    shards = list(shards)
    if len(shards) != len(devices):
        raise ValueError(f"device_put_sharded: {len(shards)} shards for {len(devices)} devices; "
                         "give one shard per device")
    if not shards:
        raise ValueError("device_put_sharded: `shards` must be a non-empty list")
    placement = _placement_for(devices)
    trees = [tree_util.tree_flatten(s) for s in shards]
    treedef = trees[0][1]
    for i, (_, td) in enumerate(trees):
        if td != treedef:
            raise ValueError(f"device_put_sharded: shard {i} has structure {td}, shard 0 has "
                             f"{treedef}")
    leaves_out = []
    for k in range(treedef.num_leaves):
        column = [t[0][k] for t in trees]
        avals = [get_aval(x) for x in column]
        for i, a in enumerate(avals):
            if (a.shape, a.dtype) != (avals[0].shape, avals[0].dtype):
                raise ValueError(f"device_put_sharded: shards differ in shape or dtype: shard 0 "
                                 f"is {avals[0].str_short()}, shard {i} is {a.str_short()}")
        on_devices = [placement.put(m, x if _is_device_array(x) else _leaf_value(x), avals[0])
                      for m, x in enumerate(column)]
        leaves_out.append(ShardedArray(on_devices, avals[0], devices, avals[0].weak_type))
    return tree_util.tree_unflatten(treedef, leaves_out)


# =============================================================================================
# The user-facing wrapper
# =============================================================================================


class _Static:
    __slots__ = ("value",)

    def __init__(self, value, index):
        try:
            hash(value)
        except TypeError:
            raise ValueError(f"pmap: static_broadcasted_argnums argument {index} must be "
                             f"hashable, got {type(value).__name__}") from None
        self.value = value

    def __hash__(self):
        return hash(self.value)

    def __eq__(self, other):
        return type(self.value) is type(other.value) and self.value == other.value

    def __repr__(self):
        return repr(self.value)


def _flatten_axes(what, treedef, spec) -> list:
    try:
        return flatten(what, treedef, spec)
    except ValueError as err:
        raise ValueError(f"pmap {what} specification {spec} must be a tree prefix of the "
                         f"corresponding value ({treedef})") from err


class PmapFunction:
    """A pmapped function; see :func:`pmap`."""

    def __init__(self, fun, axis_name, in_axes, out_axes, static_broadcasted_argnums, devices,
                 backend, axis_size):
        functools.update_wrapper(self, fun)
        self._fun = fun
        self._axis_name = axis_name
        self._in_axes = tuple(in_axes) if isinstance(in_axes, list) else in_axes
        self._out_axes = out_axes
        if isinstance(static_broadcasted_argnums, int):
            static_broadcasted_argnums = (static_broadcasted_argnums,)
        self._static = tuple(int(i) for i in static_broadcasted_argnums)
        self._devices = None if devices is None else list(devices)
        self._backend = backend
        self._axis_size = axis_size
        self._cache = LRUCache("jit_cache_max_entries")  # per signature, least recent first

    # ---- arguments ---------------------------------------------------------------------

    def _split(self, args):
        static_pos = {i % len(args) if args else i for i in self._static}
        for i in self._static:
            if not -len(args) <= i < len(args):
                raise ValueError(f"pmap: static_broadcasted_argnums={self._static} but the "
                                 f"function was called with {len(args)} positional arguments")
        statics = tuple((i, _Static(args[i], i)) for i in sorted(static_pos))
        dyn = tuple(a for i, a in enumerate(args) if i not in static_pos)
        if isinstance(self._in_axes, tuple):
            if len(self._in_axes) == len(args):
                axes = tuple(a for i, a in enumerate(self._in_axes) if i not in static_pos)
            elif len(self._in_axes) == len(dyn):
                axes = self._in_axes
            else:
                raise ValueError(f"pmap in_axes has length {len(self._in_axes)} but the "
                                 f"function was called with {len(args)} positional arguments")
        else:
            axes = (self._in_axes,) * len(dyn)
        return statics, dyn, axes

    def _call_fun(self, statics, dyn, kwargs):
        it = iter(dyn)
        positions = dict(statics)
        full = [positions[i].value if i in positions else next(it)
                for i in range(len(dyn) + len(statics))]
        return self._fun(*full, **kwargs)

    def _mapped_size(self, leaves, axes_flat, args, kwargs) -> int:
        sizes: dict = {}
        for k, (x, a) in enumerate(zip(leaves, axes_flat)):
            if a is None:
                continue
            aval = get_aval(x)
            if not -aval.ndim <= a < aval.ndim:
                raise ValueError(f"pmap was requested to map its argument along axis {a}, which "
                                 f"implies that its rank should be at least "
                                 f"{a + 1 if a >= 0 else -a}, but is only {aval.ndim} (its "
                                 f"shape is {aval.shape})")
            sizes.setdefault(aval.shape[a % aval.ndim], []).append(k)
        if len(sizes) > 1:
            # static arguments are not among the leaves: None stands for them (it has none)
            static = {i % len(args) for i in self._static}
            dynamic = [None if i in static else a for i, a in enumerate(args)]
            names = tree_util._argument_paths(self._fun, dynamic, kwargs)
            dims = [None if a is None else a % get_aval(x).ndim
                    for x, a in zip(leaves, axes_flat)]
            raise ValueError(inconsistent_sizes_message("pmap", names, leaves, dims))
        if not sizes:
            if self._axis_size is None:
                raise ValueError("pmap requires at least one argument with a mapped axis "
                                 "(in_axes not None), or axis_size")
            return int(self._axis_size)
        return next(iter(sizes))

    def _devices_for(self, size: int) -> tuple[list, int, int]:
        """The local devices used, the global axis size and this process's first index."""
        nproc = distributed.process_count()
        if self._devices is not None and nproc == 1:
            local = self._devices
        else:
            local = _devices.local_devices(backend=_spmd.backend_platform(self._backend))
        if nproc > 1:
            if self._devices is not None:
                raise NotImplementedError("pmap(devices=...) is not supported in a multi-process "
                                          "run; it always spans every process's devices")
            if size != len(local):
                raise ValueError(
                    f"pmap: in a run of {nproc} processes each process passes one entry per "
                    f"local device along the mapped axis: expected size {len(local)}, got {size}")
            return local, size * nproc, distributed.process_index() * size
        if self._devices is not None:
            if size != len(self._devices):
                raise ValueError(f"pmap: the mapped axis has size {size} but devices= lists "
                                 f"{len(self._devices)} devices; they must be equal")
            return self._devices, size, 0
        if size > len(local):
            raise ValueError(
                f"pmap: the mapped axis has size {size} but only {len(local)} devices are "
                f"available. Set FUNCTRANS_CPU_DEVICES={size} or call "
                f"functrans.config.update('cpu_device_count', {size}) before using devices.")
        return local[:size], size, 0

    # ---- calling -----------------------------------------------------------------------

    @api_boundary
    def __call__(self, *args, **kwargs):
        statics, dyn, axes = self._split(args)
        leaves, in_tree = tree_util.tree_flatten((dyn, kwargs))
        axes_flat = _flatten_axes("in_axes", in_tree, (axes, {k: 0 for k in kwargs}))
        size = self._mapped_size(leaves, axes_flat, args, kwargs)
        traced = any(isinstance(x, Tracer) for x in leaves) or core._state.dynamic.level > 0
        if traced:
            return self._as_vmap(statics, dyn, axes, kwargs, size)
        devices, global_size, offset = self._devices_for(size)
        axes_flat = [None if a is None else a % get_aval(x).ndim for x, a in zip(leaves, axes_flat)]
        avals = []
        for x, a in zip(leaves, axes_flat):
            aval = get_aval(x)
            if a is not None:
                shape = aval.shape[:a] + aval.shape[a + 1:]
                aval = ShapedArray(shape, aval.dtype, aval.weak_type)
            avals.append(aval)
        key = (in_tree, tuple(avals), tuple(axes_flat), statics, tuple(devices), global_size)
        entry = self._cache.lookup(key)
        if entry is None:
            entry = self._build(statics, in_tree, avals, global_size, offset, key)
            self._cache.insert(key, entry)
        program, out_tree, out_axes_flat = entry
        per_member = self._shard_inputs(leaves, axes_flat, devices)
        outs = program.run(per_member, on_host=_compute_collective)
        results = []
        for k, (aval, o) in enumerate(zip(program.closed.out_avals, out_axes_flat)):
            column = [program.output(m, outs[m][k], aval) for m in range(len(devices))]
            if o is None:
                # Unmapped: every member holds the same value; the first device's is returned
                # (on a GPU, a GpuArray on devices[0]).
                first = column[0]
                results.append(first if _is_device_array(first)
                               else Array._from_buffer(np.asarray(first, aval.dtype),
                                                       aval.weak_type))
            elif o == 0:
                results.append(ShardedArray(column, aval, devices, aval.weak_type))
            else:
                # Mapped along another axis: joined on the host (a host Array).
                hosts = [program.to_host(m, c) for m, c in enumerate(column)]
                results.append(Array._from_buffer(np.stack(hosts, axis=o), aval.weak_type))
        return tree_util.tree_unflatten(out_tree, results)

    def _build(self, statics, in_tree, avals, global_size, offset, key):
        out_tree_cell: list = []

        def flat_fun(*flat):
            dyn, kwargs = tree_util.tree_unflatten(in_tree, flat)
            out = self._call_fun(statics, dyn, kwargs)
            out_leaves, out_tree = tree_util.tree_flatten(out)
            out_tree_cell.append(out_tree)
            return out_leaves

        env = [] if self._axis_name is None else [(self._axis_name, global_size)]
        with _axis_env.extend_axis_env_nd(env):
            jaxpr, consts = trace_to_jaxpr_dynamic(flat_fun, avals)
        closed = ClosedJaxpr(jaxpr, consts)
        out_tree = out_tree_cell[0]
        out_axes_flat = _flatten_axes("out_axes", out_tree, self._out_axes)
        normalized = []
        for aval, o in zip(closed.out_avals, out_axes_flat):
            if o is not None:
                if not -(aval.ndim + 1) <= o <= aval.ndim:
                    raise ValueError(f"pmap out_axes={o} is out of range for an output of "
                                     f"per-device shape {aval.shape}")
                o %= aval.ndim + 1
            normalized.append(o)
        signature = hashlib.sha256(
            (repr(key[:3]) + repr(global_size) + closed.pretty_print()).encode()).hexdigest()
        members = Members.one_axis(self._axis_name, global_size, key[4], offset)
        program = Program(closed, members, self._backend, signature,
                          f"pmap over axis {self._axis_name!r}")
        return program, out_tree, normalized

    @staticmethod
    def _shard_inputs(leaves, axes_flat, devices) -> list:
        """Each member's inputs: NumPy arrays, or arrays already on a device (a shard of a
        ShardedArray on these devices, a broadcast GpuArray), which the program's placement
        takes as they are when they are on the member's device."""
        n = len(devices)
        per_member = [[] for _ in range(n)]
        for x, a in zip(leaves, axes_flat):
            if a is None:
                value = x if _is_device_array(x) else core.to_numpy(x, get_aval(x))
                for m in range(n):
                    per_member[m].append(value)
                continue
            if isinstance(x, ShardedArray) and a == 0 and \
                    list(x._shard_devices[:n]) == list(devices) and len(x._shards) == n:
                shards = x._shards  # already one buffer per device: no copy
            else:
                value = core.to_numpy(x, get_aval(x))
                view = np.moveaxis(value, a, 0) if a else value
                shards = [view[m] for m in range(n)]
            for m in range(n):
                per_member[m].append(shards[m])
        return per_member

    def _as_vmap(self, statics, dyn, axes, kwargs, size):
        """Under grad/vmap/jit, pmap means vmap over the same axis name."""
        if distributed.process_count() > 1:
            raise NotImplementedError(
                "pmap called with traced arguments (under grad, vmap or jit) in a "
                "multi-process run is not supported; apply grad/vmap inside the pmapped "
                "function instead (e.g. pmap(grad(loss)))")
        self._devices_for(size)  # the same size checks as a real pmap call

        def per_member(dyn_args, kw):
            return self._call_fun(statics, dyn_args, kw)

        return vmap(per_member, in_axes=(tuple(axes), 0), out_axes=self._out_axes,
                    axis_name=self._axis_name, axis_size=size)(tuple(dyn), kwargs)

    def clear_cache(self):
        self._cache.clear()

    def _cache_size(self) -> int:
        return len(self._cache)


def pmap(fun: Callable | None = None, axis_name=None, *, in_axes=0, out_axes=0,
         static_broadcasted_argnums=(), devices=None, backend=None, axis_size=None,
         donate_argnums=(), global_arg_shapes=None):
    """Run ``fun`` on every device at once, one slice of the mapped inputs per device.

    ``in_axes``/``out_axes`` say which axis of each input/output is mapped (an int, None for
    broadcast, or a pytree prefix). The mapped size must not exceed the number of local
    devices (set it with ``FUNCTRANS_CPU_DEVICES`` or
    ``functrans.config.update("cpu_device_count", n)``). Inside ``fun``, collectives over
    ``axis_name`` (``lax.psum``, ``lax.pmean``, ``lax.all_gather``, ...) combine the devices'
    values. ``donate_argnums`` is accepted and ignored (inputs are never overwritten).

    On GPUs (``devices=functrans.devices("gpu")``, ``backend="cuda"``, or by default when a
    GPU is available) each device's values stay on its GPU, the program runs as CUDA kernels
    and the collectives go through NCCL. Mapped outputs are :class:`ShardedArray`s whose
    shards are GPU arrays; an ``out_axes=None`` output is the first device's GPU array, and
    an output mapped along another axis is joined on the host.

        >>> import functrans, numpy as np
        >>> from functrans import lax
        >>> n = functrans.local_device_count()
        >>> f = functrans.pmap(lambda x: x / lax.psum(x, 'i'), axis_name='i')
        >>> float(np.asarray(f(np.ones(n, np.float32))).sum())
        1.0
    """
    if fun is None:
        return functools.partial(pmap, axis_name=axis_name, in_axes=in_axes, out_axes=out_axes,
                                 static_broadcasted_argnums=static_broadcasted_argnums,
                                 devices=devices, backend=backend, axis_size=axis_size,
                                 donate_argnums=donate_argnums)
    return PmapFunction(fun, axis_name, in_axes, out_axes, static_broadcasted_argnums, devices,
                        backend, axis_size)


__all__ = ["ShardedArray", "device_put_replicated", "device_put_sharded", "pmap"]
