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

from functrans import _backends, core, distributed, tree_util
from functrans._array import Array
from functrans.core import ClosedJaxpr, DropVar, Jaxpr, Literal, ShapedArray, Tracer, Var, get_aval
from functrans.primitives import collectives

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
        self._shards = [np.asarray(s) for s in shards]
        self._shard_aval = shard_aval
        self._shard_devices = list(devices)
        self.weak_type = weak_type
        self._device = None
        _array_value_slot.__set__(self, None)

    @property
    def _value(self):
        value = _array_value_slot.__get__(self)
        if value is None:
            value = np.stack(self._shards) if self._shards else \
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
    def device_buffers(self) -> list:
        return [Array(s, self.weak_type, d) for s, d in zip(self._shards, self._shard_devices)]

    @property
    def addressable_shards(self) -> list:
        return [Shard(d, i, Array(s, self.weak_type, d))
                for i, (s, d) in enumerate(zip(self._shards, self._shard_devices))]

    def __repr__(self):
        prefix = "ShardedArray("
        body = np.array2string(self._value, separator=", ", prefix=prefix)
        weak = ", weak_type=True" if self.weak_type else ""
        return f"{prefix}{body}, dtype={self.dtype.name}{weak})"


def _leaf_value(x) -> np.ndarray:
    return core.to_numpy(x, get_aval(x))


def device_put_replicated(x, devices):
    """A copy of every array of the pytree ``x`` on each device: leaves of shape
    ``(len(devices), *x.shape)``, ready for ``pmap``.

        >>> import functrans, numpy as np
        >>> r = functrans.device_put_replicated(np.float32(2.0), functrans.local_devices())
        >>> float(np.asarray(r)[0])
        2.0
    """
    devices = list(devices)
    if not devices:
        raise ValueError("device_put_replicated: `devices` must be a non-empty list")

    def put(leaf):
        aval = get_aval(leaf)
        value = _leaf_value(leaf)
        return ShardedArray([value] * len(devices), aval, devices, aval.weak_type)

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
        leaves_out.append(ShardedArray([_leaf_value(x) for x in column], avals[0], devices,
                                       avals[0].weak_type))
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


class _DeviceContext(threading.local):
    index: int | None = None


_device_context = _DeviceContext()


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

    def __init__(self, num_local: int, process_offset: int, what: str):
        self._cond = threading.Condition()
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

    def exchange(self, member: int, primitive, params: dict, value: np.ndarray) -> np.ndarray:
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
                    results = _compute_collective(primitive, params, self._inputs, self._offset)
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
    if primitive.reduce_op is not None:
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

    __slots__ = ("axis_name", "axis_size", "axis_index", "member", "rendezvous")

    def __init__(self, axis_name, axis_size, axis_index, member, rendezvous):
        self.axis_name = axis_name
        self.axis_size = axis_size
        self.axis_index = axis_index
        self.member = member
        self.rendezvous = rendezvous

    def collective(self, primitive, args, params):
        value = np.asarray(args[0])
        return self.rendezvous.exchange(self.member, primitive, params, value)


# =============================================================================================
# The per-device program: segments between collectives
# =============================================================================================


def _sub_jaxprs(eqn):
    for value in eqn.params.values():
        for item in (value if isinstance(value, tuple) else (value,)):
            if isinstance(item, ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, Jaxpr):
                yield item


def _has_collective(jaxpr: Jaxpr) -> bool:
    return any(collectives.is_collective(e.primitive) or any(_has_collective(j) for j in _sub_jaxprs(e))
               for e in jaxpr.eqns)


def _read_subst(subst, v):
    return v if isinstance(v, Literal) else subst.get(id(v), v)


def _inline_jit_calls(eqns, subst, out_eqns, constvars, consts):
    """Copy ``eqns`` into ``out_eqns`` with fresh output variables, replacing each ``jit``
    equation whose program holds a collective by that program's equations, so the
    collective becomes a top-level cut point."""
    from functrans._jit import jit_p
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
    __slots__ = ("inputs", "outputs", "executable")

    def __init__(self, inputs, outputs, executable):
        self.inputs = inputs
        self.outputs = outputs
        self.executable = executable


def _literal_value(v: Literal) -> np.ndarray:
    return np.asarray(v.val, dtype=v.aval.dtype)


class _PmapProgram:
    """The staged per-device program of one pmap signature, cut at its collectives."""

    def __init__(self, closed: ClosedJaxpr, axis_name, global_size: int, backend,
                 signature: str):
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
        nested = any(not collectives.is_collective(e.primitive) and
                     any(_has_collective(j) for j in _sub_jaxprs(e)) for e in eqns)
        if nested:
            # A collective inside a loop or branch: run the whole program on the reference
            # backend, whose collective impls meet at the rendezvous wherever they occur.
            from functrans._jit import compile_closed
            inputs = list(constvars) + self.invars
            outputs = [v for v in self.outvars if isinstance(v, Var)]
            whole = ClosedJaxpr(Jaxpr([], inputs, outputs, eqns), [])
            self.steps = [_Segment(inputs, outputs, compile_closed(whole, "reference"))]
        else:
            self.steps = self._plan(eqns, backend)

    def _plan(self, eqns, backend) -> list:
        from functrans._jit import compile_closed
        groups: list = []
        current: list = []
        for eqn in eqns:
            if collectives.is_collective(eqn.primitive):
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

    def run_member(self, inputs: list, context: _DeviceContext) -> list:
        env = dict(self.const_env)
        for v, x in zip(self.invars, inputs):
            env[id(v)] = x

        def read(v):
            return _literal_value(v) if isinstance(v, Literal) else env[id(v)]

        with collectives.device_context(context):
            for step in self.steps:
                if isinstance(step, _Segment):
                    outs = step.executable(*[read(v) for v in step.inputs])
                    for v, o in zip(step.outputs, outs):
                        env[id(v)] = o
                else:
                    out = step.primitive.impl(*[read(v) for v in step.invars], **step.params)
                    (v,) = step.outvars
                    env[id(v)] = np.asarray(out, dtype=v.aval.dtype)
        return [read(v) for v in self.outvars]

    def run(self, per_member_inputs: list, process_offset: int) -> list:
        """Run every local member; returns each member's outputs."""
        what = f"pmap over axis {self.axis_name!r}"
        if distributed.process_count() > 1:
            _check_same_program(self.signature, what)
        rendezvous = _Rendezvous(len(per_member_inputs), process_offset, what)

        def task(member):
            def run():
                ctx = _DeviceContext(self.axis_name, self.global_size, process_offset + member,
                                     member, rendezvous)
                try:
                    return self.run_member(per_member_inputs[member], ctx)
                except BaseException as err:
                    rendezvous.abort(err)
                    raise
            return run

        with _execution_lock:
            return _run_on_devices([task(m) for m in range(len(per_member_inputs))])


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
    from functrans._api import _flatten_axes as flatten
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
        self._cache: dict = {}

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

    def _mapped_size(self, leaves, axes_flat) -> int:
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
            detail = "; ".join(f"size {s}: argument leaves {idx}" for s, idx in sizes.items())
            raise ValueError(f"pmap got inconsistent sizes for the mapped axis: {detail}")
        if not sizes:
            if self._axis_size is None:
                raise ValueError("pmap requires at least one argument with a mapped axis "
                                 "(in_axes not None), or axis_size")
            return int(self._axis_size)
        return next(iter(sizes))

    def _devices_for(self, size: int) -> tuple[list, int, int]:
        """The local devices used, the global axis size and this process's first index."""
        from functrans import _devices
        nproc = distributed.process_count()
        local = _devices.local_devices()
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

    def __call__(self, *args, **kwargs):
        statics, dyn, axes = self._split(args)
        leaves, in_tree = tree_util.tree_flatten((dyn, kwargs))
        axes_flat = _flatten_axes("in_axes", in_tree, (axes, {k: 0 for k in kwargs}))
        size = self._mapped_size(leaves, axes_flat)
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
        entry = self._cache.get(key)
        if entry is None:
            entry = self._cache[key] = self._build(statics, in_tree, avals, global_size, key)
        program, out_tree, out_axes_flat = entry
        per_member = self._shard_inputs(leaves, axes_flat, devices)
        outs = program.run(per_member, offset)
        results = []
        for k, (aval, o) in enumerate(zip(program.closed.out_avals, out_axes_flat)):
            column = [outs[m][k] for m in range(len(devices))]
            if o is None:
                results.append(Array(np.asarray(column[0], aval.dtype), aval.weak_type))
            elif o == 0:
                results.append(ShardedArray(column, aval, devices, aval.weak_type))
            else:
                results.append(Array(np.stack(column, axis=o), aval.weak_type))
        return tree_util.tree_unflatten(out_tree, results)

    def _build(self, statics, in_tree, avals, global_size, key):
        from functrans import _axis_env
        from functrans.interpreters.staging import trace_to_jaxpr_dynamic
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
        program = _PmapProgram(closed, self._axis_name, global_size, self._backend, signature)
        return program, out_tree, normalized

    @staticmethod
    def _shard_inputs(leaves, axes_flat, devices) -> list:
        n = len(devices)
        per_member = [[] for _ in range(n)]
        for x, a in zip(leaves, axes_flat):
            if a is None:
                value = core.to_numpy(x, get_aval(x))
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
        from functrans._api import vmap

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
