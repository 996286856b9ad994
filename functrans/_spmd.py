"""The SPMD runtime: one per-device program run on every device of a mesh at once, with
collectives between the devices. ``pmap``, ``shard_map`` and ``jit`` with shardings are front
ends that stage the per-device program and hand it here.

How a call runs:

1. **Members.** The devices the program runs on are numbered once, as the *members* of one
   flat axis (process by process, in mesh order within a process, so each process's members
   are consecutive). A program has named axes over them (pmap: one axis; a mesh: its axes);
   a collective over some of the axes becomes the same collective over the flat axis with
   ``axis_index_groups``: one group per combination of the other axes' coordinates, each
   listing its members in the order of their position along the named axes (first name
   major). See :class:`Members`.
2. **Split at collectives.** The program is cut at each top-level collective equation into
   segments of ordinary equations, each compiled once; the collectives stay as rendezvous
   points. (A collective inside a loop or branch cannot be cut out: such a program runs on
   the host, compiled by ``nested_backend``, whose collective impls meet at the rendezvous
   from inside the loop or branch.)
3. **Run every device at once.** One persistent thread per device runs segment 0, then the
   device threads meet at a :class:`Rendezvous` where the last to arrive computes the
   collective for all of them, then segment 1, and so on. The collective goes through the
   one collective interface, a communicator (``_communicators.py``): the devices' own (NCCL
   on GPUs) where it can carry it, else on host copies (in process, or with MPI across
   processes).

Where buffers live is the job of a *placement* chosen by the devices' platform: on CPU
devices (:class:`HostPlacement`) they are NumPy arrays; on GPUs the cuda backend's
``pmap_support`` module keeps every member's values on its own GPU and carries collectives
with NCCL (see docs/gpu.md). The placement is found by name,
``functrans.backends.<backend>.pmap_support``, so this module imports no backend.
"""
from __future__ import annotations

import functools
import importlib
import queue
import threading
import time
from concurrent.futures import Future
from typing import Callable

import numpy as np

from functrans import _backends, core, distributed
from functrans._array import Array, is_concrete_array
from functrans._communicators import compute_on_host
from functrans._jit import compile_closed, jit_p
from functrans.core import ClosedJaxpr, DropVar, Jaxpr, Literal, Var
from functrans.primitives import collectives

# =============================================================================================
# Values held as one buffer per device
# =============================================================================================


def is_device_array(x) -> bool:
    """An Array whose buffer lives on a device other than the host (a GpuArray)."""
    return is_concrete_array(x) and x._platform != "cpu"


def host_value(x) -> np.ndarray:
    """A buffer's values on the host (a device buffer is copied)."""
    return x._value if is_concrete_array(x) else x


_array_value_slot = Array.__dict__["_value"]


class AssembledArray(Array):
    """An Array held as per-device buffers (pmap's ShardedArray, a mesh's PartitionedArray):
    its whole host value is assembled by ``_assemble()`` once, on first use as a whole
    array, and kept."""

    __slots__ = ()

    def _start_unassembled(self, weak_type: bool) -> None:
        self.weak_type = weak_type
        self._device = None
        _array_value_slot.__set__(self, None)

    @property
    def _value(self):
        value = _array_value_slot.__get__(self)
        if value is None:
            value = self._assemble()
            value.flags.writeable = False
            _array_value_slot.__set__(self, value)
        return value

    def _assemble(self) -> np.ndarray:
        raise NotImplementedError


# =============================================================================================
# Members and the axes over them
# =============================================================================================


class Members:
    """The devices of a program as the members of one flat axis, the program's named axes
    over them, and the groups each collective runs over (see the module docstring).

    ``axis_sizes``: the named axes in order, name -> size; ``coords[m]``: member ``m``'s
    coordinate along each axis; ``local_devices``: the devices of this process's members,
    which are ``offset, offset + 1, ...``."""

    def __init__(self, axis_sizes: dict, coords: list, local_devices: list, offset: int):
        self.axis_sizes = dict(axis_sizes)
        self.axis_names = tuple(self.axis_sizes)
        self.coords = coords
        self.local_devices = list(local_devices)
        self.offset = offset
        self.local = list(range(offset, offset + len(self.local_devices)))
        # one axis along which member m sits at m (pmap's): every collective's params are
        # already those of the flat axis
        self._flat_is_axis = len(self.axis_names) == 1 and \
            all(c[self.axis_names[0]] == m for m, c in enumerate(coords))
        self.groups = functools.lru_cache(maxsize=256)(self._groups)

    @classmethod
    def one_axis(cls, axis_name, size: int, local_devices: list, offset: int = 0) -> "Members":
        """pmap's members: ``size`` devices along ``axis_name`` (None: no axis), this
        process's ``local_devices`` being members ``offset, offset + 1, ...``."""
        axes = {} if axis_name is None else {axis_name: size}
        coords = [{} if axis_name is None else {axis_name: m} for m in range(size)]
        return cls(axes, coords, local_devices, offset)

    def index_along(self, member: int, names) -> int:
        position = 0
        for n in names:
            position = position * self.axis_sizes[n] + self.coords[member][n]
        return position

    def _groups(self, names: tuple):
        """The members of each group a collective over ``names`` combines, ordered along
        ``names``; None when one group holds every member in member order."""
        by_key: dict = {}
        others = [a for a in self.axis_names if a not in names]
        for m in range(len(self.coords)):
            key = tuple(self.coords[m][a] for a in others)
            by_key.setdefault(key, []).append(m)
        groups = tuple(tuple(sorted(g, key=lambda m: self.index_along(m, names)))
                       for g in by_key.values())
        if len(groups) == 1 and groups[0] == tuple(range(len(self.coords))):
            return None
        return groups

    def flat_params(self, primitive, params: dict) -> dict:
        """``params`` of a collective over named axes, as the same collective over the flat
        axis of members."""
        if self._flat_is_axis:
            return params
        names = primitive.axis_names(params)
        groups = self.groups(tuple(names))
        if primitive is collectives.ppermute_p:
            whole = groups or (tuple(range(len(self.coords))),)
            perm = tuple((g[s], g[d]) for g in whole for s, d in params["perm"])
            return dict(params, perm=perm)
        inner = params.get("axis_index_groups")
        if inner is not None:  # the user's groups, inside each group of the mesh
            whole = groups or (tuple(range(len(self.coords))),)
            groups = tuple(tuple(g[i] for i in user) for g in whole for user in inner)
        return dict(params, axis_index_groups=groups)


class DeviceContext:
    """What a collective executed by one device thread needs to know: the axes, this
    thread's member, and where it meets the others (``collectives.device_context``)."""

    __slots__ = ("axis_sizes", "members", "member", "local_member", "rendezvous", "placement",
                 "_flat")

    def __init__(self, members: Members, local_member: int, rendezvous, placement=None,
                 flat_cache: dict | None = None):
        self.axis_sizes = members.axis_sizes
        self.members = members
        self.local_member = local_member
        self.member = members.offset + local_member
        self.rendezvous = rendezvous
        self.placement = placement if placement is not None else HostPlacement([])
        self._flat = {} if flat_cache is None else flat_cache

    @classmethod
    def for_axis(cls, axis_name, axis_size: int, axis_index: int, member: int, rendezvous,
                 placement=None) -> "DeviceContext":
        """The context of this process's member ``member``, at ``axis_index`` along the one
        axis ``axis_name`` of size ``axis_size``."""
        members = Members.one_axis(axis_name, axis_size, [], axis_index - member)
        return cls(members, member, rendezvous, placement)

    def index_along(self, names) -> int:
        return self.members.index_along(self.member, names)

    def collective(self, primitive, args, params):
        key = (primitive, tuple(sorted(params.items())))
        flat = self._flat.get(key)
        if flat is None:
            flat = self._flat[key] = self.members.flat_params(primitive, params)
        value = self.placement.exchange_value(self.local_member, args[0])
        return self.rendezvous.exchange(self.local_member, primitive, flat, value)


# =============================================================================================
# Device threads and the rendezvous
# =============================================================================================


class _Worker:
    """A persistent thread that runs one device's share of each program call."""

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
# One program executes at a time per process: device threads are shared, and under MPI
# every process must issue its collectives in the same order.
execution_lock = threading.Lock()


class _ThreadDevice(threading.local):
    index: int | None = None


_device_context = _ThreadDevice()


def current_device_index() -> int | None:
    """The position among this process's members of the device this thread runs for (a
    pmap's device index), or None outside a program."""
    return _device_context.index


def _on_device(index: int, task: Callable) -> Callable:
    def run():
        _device_context.index = index
        try:
            return task()
        finally:
            _device_context.index = None
    return run


def run_on_devices(tasks: list[Callable]) -> list:
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
        first = next((e for e in errors if not isinstance(e, PeerFailed)), errors[0])
        raise first
    return results


class PeerFailed(RuntimeError):
    """Raised in a device thread when another device of the same call failed."""


class Rendezvous:
    """Where the device threads of one call meet for each collective. The last thread to
    arrive computes every member's result (through the placement's communicator, or on host
    copies: ``compute``)."""

    def __init__(self, num_local: int, process_offset: int, what: str, compute=None):
        self._cond = threading.Condition()
        # compute(primitive, params, local_inputs, offset) -> every local member's result
        self._compute = compute or compute_on_host
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
                raise PeerFailed(f"{self._what}: another device failed") from self._error
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
                raise PeerFailed(f"{self._what}: another device failed") from self._error
            return self._results[member]


# =============================================================================================
# Placements: where each member's buffers live, and who computes the collectives
# =============================================================================================


class HostPlacement:
    """Member values are NumPy arrays in this process, and collectives are computed on the
    host (``_communicators``: the primitives' ``group_impl``, with MPI across processes). The placement of CPU devices, and of any
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
        return np.asarray(host_value(x))

    def run_segment(self, member: int, executable, args: list, out_avals) -> list:
        return executable(*args)

    def exchange_value(self, member: int, x):
        """What ``member`` hands to the rendezvous for a collective over ``x``."""
        return np.asarray(host_value(x))

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


def _compute_with(placement, on_host):
    """The rendezvous's computation for ``placement``: on the devices where its communicator
    can, else ``on_host`` (``compute_on_host``) on host copies, the results put back on each
    member's device."""

    def compute(primitive, params, values, offset):
        results = placement.collective(primitive, params, values, offset)
        if results is not None:
            return results
        hosts = [placement.to_host(m, v) for m, v in enumerate(values)]
        results = on_host(primitive, params, hosts, offset)
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


def placement_for(devices):
    """The placement of a pmap (or ``device_put_sharded``) over ``devices``."""
    platform = platform_of(devices)
    if platform == "cpu":
        return HostPlacement(devices)
    return _placement_factory(platform)(devices)


def platform_of(devices) -> str:
    platforms = sorted({d.platform for d in devices})
    if len(platforms) != 1:
        raise ValueError(f"pmap: the devices must all be of one platform, got {platforms}")
    return platforms[0]


def backend_platform(backend) -> str | None:
    """The platform whose devices a ``pmap(backend=...)`` runs on (None: the default)."""
    if backend is None:
        return None
    return _backends._PLATFORMS.get(backend) or _backends.get_backend(backend).platform


def compile_backend(requested, platform: str) -> str:
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


class Program:
    """A staged per-device program over ``members``, cut at its collectives and compiled
    once (see the module docstring). ``signature`` (a hex digest of the program and its
    argument types) is compared across processes before each call under MPI; ``what``
    names the program in errors. ``nested_backend`` compiles a program with a collective
    inside a loop or branch, which runs on the host."""

    def __init__(self, closed: ClosedJaxpr, members: Members, backend, signature: str,
                 what: str, nested_backend: str = "reference"):
        self.closed = closed
        self.members = members
        self.signature = signature
        self.what = what
        devices = members.local_devices
        jaxpr = closed.jaxpr
        constvars, consts, eqns = list(jaxpr.constvars), list(closed.consts), []
        subst: dict = {}
        _inline_jit_calls(jaxpr.eqns, subst, eqns, constvars, consts)
        self.invars = list(jaxpr.invars)
        self.outvars = [_read_subst(subst, v) for v in jaxpr.outvars]
        self.const_env = {id(v): core.to_numpy(c) for v, c in zip(constvars, consts)}
        self._const_avals = {id(v): v.aval for v in constvars}
        platform = platform_of(devices) if devices else "cpu"
        nested = any(not e.primitive.is_collective and
                     any(_has_collective(j) for j in core.subjaxprs(e)) for e in eqns)
        if nested:
            # A collective inside a loop or branch: run the whole program on the host
            # (``nested_backend``), whose collective impls meet at the rendezvous wherever
            # they occur. On any devices this runs on host copies (outputs are put back on
            # the devices).
            self.placement = HostPlacement(
                devices, None if platform == "cpu" else placement_for(devices))
            inputs = list(constvars) + self.invars
            outputs = [v for v in self.outvars if isinstance(v, Var)]
            whole = ClosedJaxpr(Jaxpr([], inputs, outputs, eqns), [])
            self.steps = [_Segment(inputs, outputs, compile_closed(whole, nested_backend))]
        else:
            self.placement = placement_for(devices) if devices else HostPlacement(devices)
            self.steps = self._plan(eqns, compile_backend(backend, platform))
        self._needs_collectives = nested or any(
            not isinstance(s, _Segment) and s.invars for s in self.steps)
        # each member's constants, put on its device once (on the host: the arrays as they are)
        self._member_consts: dict = {}
        # each collective's params over the flat axis of members (Members.flat_params)
        self._flat_params: dict = {}

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

    def run_member(self, member: int, inputs: list, context: DeviceContext) -> list:
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

    def run(self, per_member_inputs: list, on_host=compute_on_host) -> list:
        """Run every member of this process (``per_member_inputs[i]``: the inputs of its
        i-th member); returns each member's outputs. ``on_host`` computes the collectives
        the placement's communicator does not."""
        if distributed.process_count() > 1:
            check_same_program(self.signature, self.what)
        placement, members = self.placement, self.members
        rendezvous = Rendezvous(len(per_member_inputs), members.offset, self.what,
                                _compute_with(placement, on_host))

        def task(member):
            def run():
                ctx = DeviceContext(members, member, rendezvous, placement, self._flat_params)
                try:
                    return self.run_member(member, per_member_inputs[member], ctx)
                except BaseException as err:
                    rendezvous.abort(err)
                    raise
            return run

        with execution_lock:
            placement.prepare(self._needs_collectives)
            return run_on_devices([task(m) for m in range(len(per_member_inputs))])

    def output(self, member: int, x, aval):
        """Member ``member``'s output ``x`` as a shard on its device."""
        return self.placement.output_shard(member, x, aval)

    def to_host(self, member: int, x) -> np.ndarray:
        return self.placement.to_host(member, x)


def check_same_program(signature: str, what: str) -> None:
    """Under MPI, every process must run the same program on the same shapes: one small
    Allgather of the program's digest per call, so a mismatch fails before any device runs."""
    digests = distributed.allgather(np.frombuffer(bytes.fromhex(signature), np.uint8), what)
    if not (digests == digests[0]).all():
        groups: dict = {}
        for rank, d in enumerate(digests):
            groups.setdefault(d.tobytes(), []).append(rank)
        raise ValueError(f"{what}: the processes called pmap with different programs or "
                         f"argument shapes (process groups that agree: {list(groups.values())})")


__all__ = ["AssembledArray", "DeviceContext", "HostPlacement", "Members", "PeerFailed", "Program",
           "Rendezvous", "current_device_index", "placement_for", "register_placement",
           "run_on_devices"]
