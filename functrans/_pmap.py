"""``pmap``: run one program on many devices at once, with collectives between them.

How a call runs:

1. **Stage once per signature.** The function is traced at the *per-device* types (the
   mapped axis removed) into a jaxpr, with the axis name bound in the axis environment so
   collectives (``psum``, ``all_gather``, ...) are recorded as equations.
2. **Split at collectives.** The jaxpr is cut at each top-level collective equation into
   segments of ordinary equations. Each segment is compiled once with the default jit
   backend; the collectives stay as rendezvous points. (A collective inside a control-flow
   body cannot be cut out: such programs run on the reference backend, whose equations meet
   at the rendezvous from inside the loop or branch.)
3. **Run every device at once.** One persistent thread per device runs segment 0, then all
   device threads meet at a rendezvous where the collective is computed over their buffers
   (across processes with MPI when ``functrans.distributed`` is initialized), then
   segment 1, and so on.

Results come back as a :class:`ShardedArray`: one buffer per device, shape
``(num_devices, ...)``, joined into one array only when needed (``np.asarray``, printing,
indexing); passing it to another ``pmap`` hands each device its own buffer without a copy.

Where buffers live is the job of a *placement* chosen by the devices' platform: on CPU
devices (:class:`_HostPlacement`) they are NumPy arrays and collectives run the primitives'
``group_impl``; on GPUs the cuda backend's ``pmap_support`` module keeps every member's
values on its own GPU and carries collectives with NCCL (see docs/gpu.md). The placement is
found by name, ``functrans.backends.<backend>.pmap_support``, so this module imports no
backend.

Under another transform (``grad``, ``vmap``, ``jit`` of a pmapped function), pmap has the
same meaning as ``vmap`` with the same ``axis_name`` (the collectives have the same
semantics under both), so a pmapped function called with traced arguments is evaluated as
that vmap. ``pmap(grad(f))``, the usual data-parallel pattern, stays a real pmap.
"""
from __future__ import annotations

import functools
import hashlib
import queue
import threading
import time
from concurrent.futures import Future
from typing import Callable

import numpy as np

from functrans import _axis_env, _backends, _devices, core, distributed, tree_util
from functrans._array import Array, is_concrete_array
from functrans._caches import LRUCache
from functrans.core import ClosedJaxpr, DropVar, Jaxpr, Literal, ShapedArray, Tracer, Var, get_aval
from functrans.primitives import collectives
from functrans._api import _flatten_axes as flatten
from functrans._api import inconsistent_sizes_message
from functrans._api import vmap
from functrans._jit import compile_closed, jit_p
from functrans._traceback_util import api_boundary
from functrans.interpreters.staging import trace_to_jaxpr_dynamic
from functrans.sharding import Mesh, NamedSharding, PartitionSpec

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


_array_value_slot = Array.__dict__["_value"]
_PMAP_MESH_AXIS = "_internal_pmap_axis_name"


class ShardedArray(Array):
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
        self.weak_type = weak_type
        self._device = None
        _array_value_slot.__set__(self, None)

    @property
    def _value(self):
        value = _array_value_slot.__get__(self)
        if value is None:
            value = np.stack([_host_value(s) for s in self._shards]) if self._shards else \
                np.zeros((0,) + self._shard_aval.shape, self._shard_aval.dtype)
            value.flags.writeable = False
            _array_value_slot.__set__(self, value)
        return value

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


def _is_device_array(x) -> bool:
    """An Array whose buffer lives on a device other than the host (a GpuArray)."""
    return is_concrete_array(x) and x._platform != "cpu"


def _host_value(x) -> np.ndarray:
    return x._value if is_concrete_array(x) else x


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
# Device threads and the rendezvous
# =============================================================================================


class _Worker:
    """A persistent thread that runs one device's share of each pmap call."""

    def __init__(self, index: int):
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=f"functrans-device-{index}",
                                       daemon=True)
        self.thread.start()

    def _loop(self):
        while True:
            fn, future = self.queue.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as err:  # delivered to the caller through the future
                future.set_exception(err)

    def submit(self, fn) -> Future:
        future: Future = Future()
        self.queue.put((fn, future))
        return future


_workers: list[_Worker] = []
_workers_lock = threading.Lock()
# One pmap executes at a time per process: device threads are shared, and under MPI every
# process must issue its collectives in the same order.
_execution_lock = threading.Lock()


class _ThreadDevice(threading.local):
    index: int | None = None


_device_context = _ThreadDevice()


def current_device_index() -> int | None:
    """The pmap device position this thread is running for, or None outside pmap."""
    return _device_context.index


def _on_device(index: int, task: Callable) -> Callable:
    def run():
        _device_context.index = index
        try:
            return task()
        finally:
            _device_context.index = None
    return run


def _run_on_devices(tasks: list[Callable]) -> list:
    """Run ``tasks[i]`` for every device at once (task 0 on the calling thread)."""
    with _workers_lock:
        while len(_workers) < len(tasks) - 1:
            _workers.append(_Worker(len(_workers) + 1))
    tasks = [_on_device(i, t) for i, t in enumerate(tasks)]
    results, errors = [None] * len(tasks), []
    with _backends.device_parallel_section(len(tasks)):
        futures = [_workers[i].submit(t) for i, t in enumerate(tasks[1:])]
        try:
            results[0] = tasks[0]()
        except BaseException as err:
            errors.append(err)
        for i, f in enumerate(futures):
            try:
                results[i + 1] = f.result()
            except BaseException as err:
                errors.append(err)
    if errors:
        # Report the failure that started it, not a peer's "another device failed".
        first = next((e for e in errors if not isinstance(e, _PeerFailed)), errors[0])
        raise first
    return results


class _PeerFailed(RuntimeError):
    """Raised in a device thread when another device of the same pmap call failed."""


class _Rendezvous:
    """Where the device threads of one pmap call meet for each collective. The last thread
    to arrive computes every member's result (across processes with MPI)."""

    def __init__(self, num_local: int, process_offset: int, what: str, compute=None):
        self._cond = threading.Condition()
        # compute(primitive, params, local_inputs, offset) -> every local member's result
        self._compute = compute or _compute_collective
        self._num_local = num_local
        self._offset = process_offset
        self._what = what
        self._arrived = 0
        self._generation = 0
        self._inputs: list = [None] * num_local
        self._op = None
        self._results: list = []
        self._error: BaseException | None = None

    def abort(self, error: BaseException) -> None:
        with self._cond:
            if self._error is None:
                self._error = error
            self._cond.notify_all()

    def _fail(self, error: BaseException):
        self._error = error
        self._cond.notify_all()
        raise error

    def exchange(self, member: int, primitive, params: dict, value):
        with self._cond:
            if self._error is not None:
                raise _PeerFailed(f"{self._what}: another device failed") from self._error
            generation = self._generation
            if self._arrived == 0:
                self._op = (primitive, params)
            elif self._op[0] is not primitive or self._op[1] != params:
                self._fail(RuntimeError(
                    f"{self._what}: devices diverged: one device reached {primitive.name} "
                    f"{params} while another reached {self._op[0].name} {self._op[1]}"))
            self._inputs[member] = value
            self._arrived += 1
            if self._arrived == self._num_local:
                try:
                    results = self._compute(primitive, params, self._inputs, self._offset)
                except BaseException as err:
                    self._fail(err)
                self._results = results
                self._inputs = [None] * self._num_local
                self._arrived = 0
                self._generation += 1
                self._cond.notify_all()
                return results[member]
            timeout = distributed.collective_timeout()
            deadline = time.monotonic() + timeout
            while self._generation == generation and self._error is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._fail(distributed.DistributedTimeoutError(
                        f"{self._what}: {primitive.name}: only {self._arrived} of "
                        f"{self._num_local} devices arrived within {timeout:g} s"))
                self._cond.wait(remaining)
            if self._generation == generation:
                raise _PeerFailed(f"{self._what}: another device failed") from self._error
            return self._results[member]


def _compute_collective(primitive, params, local_inputs: list, offset: int) -> list:
    """Every local member's result of ``primitive`` given the local members' inputs; with
    several processes, the other processes' members take part through MPI."""
    if distributed.process_count() == 1:
        return primitive.group_impl(local_inputs, **params)
    what = f"pmap {primitive.name}"
    # With axis_index_groups a group may span processes: every member's input is gathered
    # and each process computes its own members' results from the groups.
    if primitive.reduce_op is not None and params.get("axis_index_groups") is None:
        # Reduce locally, across processes with one Allreduce, and hand the total back.
        local = primitive.group_impl(local_inputs, **params)[0]
        total = distributed.allreduce(local, primitive.reduce_op, what)
        return [total] * len(local_inputs)
    everyone = distributed.allgather(np.stack(local_inputs), what)
    members = [m for process in everyone for m in process]
    outs = primitive.group_impl(members, **params)
    return outs[offset:offset + len(local_inputs)]


class _DeviceContext:
    """What a collective executed by one device thread needs to know."""

    __slots__ = ("axis_name", "axis_sizes", "axis_index", "member", "rendezvous", "placement")

    def __init__(self, axis_name, axis_size, axis_index, member, rendezvous, placement=None):
        self.axis_name = axis_name
        self.axis_sizes = {axis_name: axis_size}
        self.axis_index = axis_index
        self.member = member
        self.rendezvous = rendezvous
        self.placement = placement

    def index_along(self, names) -> int:
        return self.axis_index

    def collective(self, primitive, args, params):
        if self.placement is None:
            value = np.asarray(args[0])
        else:
            value = self.placement.exchange_value(self.member, args[0])
        return self.rendezvous.exchange(self.member, primitive, params, value)


# =============================================================================================
# Placements: where each member's buffers live, and who computes the collectives
# =============================================================================================


class _HostPlacement:
    """Member values are NumPy arrays in this process, and collectives are the primitives'
    ``group_impl`` (with MPI across processes). The placement of CPU devices, and of any
    devices when a program must run on the host (collectives inside control flow): then
    ``outputs``, the devices' own placement, receives the outputs.

    A placement for other devices (``pmap_support.pmap_placement(devices)`` of a backend)
    has the same methods."""

    def __init__(self, devices, outputs=None):
        self.devices = list(devices)
        self._outputs = outputs

    def prepare(self, needs_collectives: bool) -> None:
        """Called before the device threads start (e.g. to make a communicator)."""

    def put(self, member: int, x, aval=None) -> np.ndarray:
        """``x`` as one of ``member``'s values (no copy when it already is one)."""
        return x if isinstance(x, np.ndarray) else core.to_numpy(x, aval)

    def to_host(self, member: int, x) -> np.ndarray:
        return np.asarray(_host_value(x))

    def run_segment(self, member: int, executable, args: list, out_avals) -> list:
        return executable(*args)

    def exchange_value(self, member: int, x):
        """What ``member`` hands to the rendezvous for a collective over ``x``."""
        return np.asarray(_host_value(x))

    def collective(self, primitive, params: dict, values: list, process_offset: int):
        """Every local member's result on the device, or None: computed on host copies."""
        return None

    def collective_result(self, member: int, x, aval):
        return np.asarray(x, dtype=aval.dtype)

    def output_shard(self, member: int, x, aval):
        value = np.asarray(x, dtype=aval.dtype)
        if self._outputs is None:
            return value
        return self._outputs.output_shard(member, value, aval)


def _compute_with(placement):
    """The rendezvous's computation for ``placement``: on the devices where it can, else the
    reference semantics on host copies, the results put back on each member's device."""

    def compute(primitive, params, values, offset):
        results = placement.collective(primitive, params, values, offset)
        if results is not None:
            return results
        hosts = [placement.to_host(m, v) for m, v in enumerate(values)]
        results = _compute_collective(primitive, params, hosts, offset)
        return [placement.put(m, r) for m, r in enumerate(results)]

    return compute


_placements: dict = {}


def register_placement(platform: str, factory: Callable) -> None:
    """``factory(devices)`` makes the placement of a pmap over ``platform`` devices. Backends
    need not call this: a module ``functrans.backends.<name>.pmap_support`` with a
    ``pmap_placement(devices)`` function is found on first use."""
    _placements[platform] = factory


def _placement_factory(platform: str) -> Callable:
    factory = _placements.get(platform)
    if factory is None:
        import importlib
        for backend in _backends.backends().values():
            if backend.platform != platform:
                continue
            try:
                module = importlib.import_module(f"functrans.backends.{backend.name}.pmap_support")
            except ModuleNotFoundError:
                continue
            factory = _placements[platform] = module.pmap_placement
            break
    if factory is None:
        raise NotImplementedError(f"pmap over {platform} devices: no backend provides "
                                  f"pmap support for the platform {platform!r}")
    return factory


def _placement_for(devices):
    """The placement of a pmap (or ``device_put_sharded``) over ``devices``."""
    platform = _platform_of(devices)
    if platform == "cpu":
        return _HostPlacement(devices)
    return _placement_factory(platform)(devices)


def _platform_of(devices) -> str:
    platforms = sorted({d.platform for d in devices})
    if len(platforms) != 1:
        raise ValueError(f"pmap: the devices must all be of one platform, got {platforms}")
    return platforms[0]


def _backend_platform(backend) -> str | None:
    """The platform whose devices a ``pmap(backend=...)`` runs on (None: the default)."""
    if backend is None:
        return None
    return _backends._PLATFORMS.get(backend) or _backends.get_backend(backend).platform


def _compile_backend(requested, platform: str) -> str:
    """The backend that compiles the segments for devices of ``platform``: the one asked for,
    else the configured default when it compiles for that platform, else the platform's
    preferred backend."""
    if requested is not None:
        found = _backends.get_backend(requested).platform
        if found != platform:
            raise ValueError(f"pmap: backend={requested!r} compiles for {found} devices but "
                             f"the devices are {platform} devices")
        return requested
    default = _backends.get_backend()
    if default.platform == platform:
        return default.name
    return _backends.get_backend(platform).name


# =============================================================================================
# The per-device program: segments between collectives
# =============================================================================================


def _has_collective(jaxpr: Jaxpr) -> bool:
    return any(e.primitive.is_collective or any(_has_collective(j) for j in core.subjaxprs(e))
               for e in jaxpr.eqns)


def _read_subst(subst, v):
    return v if isinstance(v, Literal) else subst.get(id(v), v)


def _inline_jit_calls(eqns, subst, out_eqns, constvars, consts):
    """Copy ``eqns`` into ``out_eqns`` with fresh output variables, replacing each ``jit``
    equation whose program holds a collective by that program's equations, so the
    collective becomes a top-level cut point."""
    for eqn in eqns:
        invars = [_read_subst(subst, v) for v in eqn.invars]
        if eqn.primitive is jit_p and _has_collective(eqn.params["jaxpr"].jaxpr):
            sub = eqn.params["jaxpr"]
            inner: dict = {}
            for v, x in zip(sub.jaxpr.invars, invars):
                inner[id(v)] = x
            for v, c in zip(sub.jaxpr.constvars, sub.consts):
                fresh = Var(v.aval)
                constvars.append(fresh)
                consts.append(c)
                inner[id(v)] = fresh
            _inline_jit_calls(sub.jaxpr.eqns, inner, out_eqns, constvars, consts)
            for v, o in zip(eqn.outvars, sub.jaxpr.outvars):
                subst[id(v)] = _read_subst(inner, o)
            continue
        outvars = []
        for v in eqn.outvars:
            if isinstance(v, DropVar):
                outvars.append(v)
            else:
                fresh = subst[id(v)] = Var(v.aval)
                outvars.append(fresh)
        out_eqns.append(eqn.replace(invars=invars, outvars=outvars))


class _Segment:
    __slots__ = ("inputs", "outputs", "executable", "out_avals")

    def __init__(self, inputs, outputs, executable):
        self.inputs = inputs
        self.outputs = outputs
        self.executable = executable
        self.out_avals = [v.aval for v in outputs]


def _literal_value(v: Literal) -> np.ndarray:
    return np.asarray(v.val, dtype=v.aval.dtype)


class _PmapProgram:
    """The staged per-device program of one pmap signature, cut at its collectives."""

    # the backend of a program with a collective inside a loop or branch (run on the host)
    nested_backend = "reference"

    def __init__(self, closed: ClosedJaxpr, axis_name, global_size: int, backend,
                 signature: str, devices=None):
        self.closed = closed
        self.axis_name = axis_name
        self.global_size = global_size
        self.signature = signature
        jaxpr = closed.jaxpr
        constvars, consts, eqns = list(jaxpr.constvars), list(closed.consts), []
        subst: dict = {}
        _inline_jit_calls(jaxpr.eqns, subst, eqns, constvars, consts)
        self.invars = list(jaxpr.invars)
        self.outvars = [_read_subst(subst, v) for v in jaxpr.outvars]
        self.const_env = {id(v): core.to_numpy(c) for v, c in zip(constvars, consts)}
        self._const_avals = {id(v): v.aval for v in constvars}
        devices = list(devices or [])
        platform = _platform_of(devices) if devices else "cpu"
        nested = any(not e.primitive.is_collective and
                     any(_has_collective(j) for j in core.subjaxprs(e)) for e in eqns)
        if nested:
            # A collective inside a loop or branch: run the whole program on the reference
            # backend, whose collective impls meet at the rendezvous wherever they occur. On
            # any devices this runs on host copies (outputs are put back on the devices).
            self.placement = _HostPlacement(
                devices, None if platform == "cpu" else _placement_for(devices))
            inputs = list(constvars) + self.invars
            outputs = [v for v in self.outvars if isinstance(v, Var)]
            whole = ClosedJaxpr(Jaxpr([], inputs, outputs, eqns), [])
            self.steps = [_Segment(inputs, outputs, compile_closed(whole, self.nested_backend))]
        else:
            self.placement = _placement_for(devices) if devices else _HostPlacement(devices)
            self.steps = self._plan(eqns, _compile_backend(backend, platform))
        self._needs_collectives = nested or any(
            not isinstance(s, _Segment) and s.invars for s in self.steps)
        # each member's constants, put on its device once (on the host: the arrays as they are)
        self._member_consts: dict = {}

    def _plan(self, eqns, backend) -> list:
        groups: list = []
        current: list = []
        for eqn in eqns:
            if eqn.primitive.is_collective:
                if current:
                    groups.append(current)
                    current = []
                groups.append(eqn)
            else:
                current.append(eqn)
        if current:
            groups.append(current)
        # Liveness, backwards: each segment returns only what later steps read.
        live = {id(v) for v in self.outvars if isinstance(v, Var)}
        steps: list = []
        for group in reversed(groups):
            if not isinstance(group, list):
                live.difference_update(id(v) for v in group.outvars)
                live.update(id(v) for v in group.invars if not isinstance(v, Literal))
                steps.append(group)
                continue
            defined = {id(v) for e in group for v in e.outvars}
            outputs = [v for e in group for v in e.outvars
                       if not isinstance(v, DropVar) and id(v) in live]
            if not outputs:
                continue
            inputs, seen = [], set()
            for e in group:
                for v in e.invars:
                    if isinstance(v, Literal) or id(v) in defined or id(v) in seen:
                        continue
                    seen.add(id(v))
                    inputs.append(v)
            live.difference_update(defined)
            live.update(seen)
            closed = ClosedJaxpr(Jaxpr([], inputs, outputs, group), [])
            steps.append(_Segment(inputs, outputs, compile_closed(closed, backend)))
        steps.reverse()
        return steps

    def _constants(self, member: int) -> dict:
        consts = self._member_consts.get(member)
        if consts is None:
            put = self.placement.put
            consts = self._member_consts[member] = {
                k: put(member, c, self._const_avals[k]) for k, c in self.const_env.items()}
        return consts

    def run_member(self, member: int, inputs: list, context: _DeviceContext) -> list:
        placement = self.placement
        env = dict(self._constants(member))
        for v, x in zip(self.invars, inputs):
            env[id(v)] = placement.put(member, x, v.aval)

        def read(v):
            return _literal_value(v) if isinstance(v, Literal) else env[id(v)]

        with collectives.device_context(context):
            for step in self.steps:
                if isinstance(step, _Segment):
                    outs = placement.run_segment(member, step.executable,
                                                 [read(v) for v in step.inputs], step.out_avals)
                    for v, o in zip(step.outputs, outs):
                        env[id(v)] = o
                else:
                    out = step.primitive.run_impl(*[read(v) for v in step.invars], **step.params)
                    (v,) = step.outvars
                    env[id(v)] = placement.collective_result(member, out, v.aval)
        return [read(v) for v in self.outvars]

    def run(self, per_member_inputs: list, process_offset: int) -> list:
        """Run every local member; returns each member's outputs."""
        what = f"pmap over axis {self.axis_name!r}"
        if distributed.process_count() > 1:
            _check_same_program(self.signature, what)
        placement = self.placement
        rendezvous = _Rendezvous(len(per_member_inputs), process_offset, what,
                                 _compute_with(placement))

        def task(member):
            def run():
                ctx = _DeviceContext(self.axis_name, self.global_size, process_offset + member,
                                     member, rendezvous, placement)
                try:
                    return self.run_member(member, per_member_inputs[member], ctx)
                except BaseException as err:
                    rendezvous.abort(err)
                    raise
            return run

        with _execution_lock:
            placement.prepare(self._needs_collectives)
            return _run_on_devices([task(m) for m in range(len(per_member_inputs))])

    def output(self, member: int, x, aval):
        """Member ``member``'s output ``x`` as a shard on its device."""
        return self.placement.output_shard(member, x, aval)

    def to_host(self, member: int, x) -> np.ndarray:
        return self.placement.to_host(member, x)


def _check_same_program(signature: str, what: str) -> None:
    """Under MPI, every process must run the same program on the same shapes: one small
    Allgather of the program's digest per call, so a mismatch fails before any device runs."""
    digests = distributed.allgather(np.frombuffer(bytes.fromhex(signature), np.uint8), what)
    if not (digests == digests[0]).all():
        groups: dict = {}
        for rank, d in enumerate(digests):
            groups.setdefault(d.tobytes(), []).append(rank)
        raise ValueError(f"{what}: the processes called pmap with different programs or "
                         f"argument shapes (process groups that agree: {list(groups.values())})")


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
            local = _devices.local_devices(backend=_backend_platform(self._backend))
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
            entry = self._build(statics, in_tree, avals, global_size, key)
            self._cache.insert(key, entry)
        program, out_tree, out_axes_flat = entry
        per_member = self._shard_inputs(leaves, axes_flat, devices)
        outs = program.run(per_member, offset)
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

    def _build(self, statics, in_tree, avals, global_size, key):
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
        program = _PmapProgram(closed, self._axis_name, global_size, self._backend, signature,
                               key[4])
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
