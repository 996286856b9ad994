"""The executable: compiled segments, fallback steps and the buffers between them.

A call converts the arguments to C-contiguous arrays of the declared dtypes, allocates the
outputs with NumPy, fills a table of pointers (slot 0 is this thread's scratch arena) and
calls each native segment once through ctypes. ctypes drops the GIL for the duration of a
foreign call, so compiled code runs in parallel with other Python threads, and two threads
may call one executable at once (each has its own arena and pointer table). An arena above
``config.arena_cache_threshold`` bytes is not kept between calls but lent to each call by
the process's pool (see :mod:`arenas`), so scratch memory is not held by executables that
are not running. A segment returns a status, almost always 0: when Ctrl-C stopped its loops
early the call raises KeyboardInterrupt, and nothing needs resetting before the next one
(see :mod:`interrupts`).

With the config option ``poison_scratch`` on when it is compiled (the test suite's
default), an executable fills its scratch arena and its fresh outputs before every call:
floating-point memory with NaN (all bits set), integer and boolean memory with the byte
0xA5. A kernel that reads memory no step of this call wrote then returns a NaN or a
marker value instead of what a previous call or another buffer left there.

    >>> exe = functrans.backends.llvm.compile_jaxpr(closed)   # doctest: +SKIP
    >>> outs = exe(np.ones(3, np.float32))                     # doctest: +SKIP
"""
from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from functrans._config import config
from functrans.backends.llvm import arenas, interrupts, output_memory
from functrans.backends.compiler import cost
from functrans.backends.compiler.buffers import BufferPlan
from functrans.backends.compiler.fusion import Buffer, FallbackStep, Program

_SEGMENT_TYPE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)  # a status: see interrupts.py


_data_offset = None


def array_data_offset() -> int:
    """Byte offset of the data pointer inside a NumPy array object.

    The pointer table holds the *objects* (their addresses, ``id(array)``), and generated code
    reads each data pointer itself: reading ``array.ctypes.data`` costs about 2 µs per array
    in Python, most of a small call. The offset is found, not assumed, by looking for a
    known array's data pointer in its object."""
    global _data_offset
    if _data_offset is None:
        probes = [np.empty(n, np.float64) for n in (3, 5)]
        found = None
        for offset in range(8, 128, 8):
            if all(ctypes.c_void_p.from_address(id(a) + offset).value == a.ctypes.data
                   for a in probes):
                found = offset
                break
        if found is None:
            raise RuntimeError("llvm backend: cannot locate the data pointer of NumPy arrays")
        _data_offset = found
    return _data_offset


class _ThreadState(threading.local):
    table = None  # the pointer table: a uint64 array (one per thread)
    view = None  # a memoryview of it, the cheapest way to store a pointer from Python
    arena = None  # kept here between calls when small; else set for the length of a call
    address = 0


def _const_arrays(program: Program) -> dict:
    return {b.id: np.asarray(b.value, dtype=b.dtype, order="C") for b in program.consts}


class Layout:
    """How a compiled program is called: plain data, what :class:`Executable` needs besides
    the machine code. A program's layout is stored with its machine code in the on-disk
    cache (see :mod:`program_cache`), so a program read from there runs without planning.

    ``inputs``: per argument, ``(slot or None, dtype or None for a non-array, shape,
    buffer id)``; ``consts``: ``(slot, array)``; ``outputs``: the fresh output arrays,
    ``(slot, shape, dtype, buffer id)``; ``results``: per result, ``("output", k)``,
    ``("input", position)``, ``("literal", array)`` or ``("array", buffer id)`` (a NumPy
    step's); ``aliases``: output index -> the input positions it may be written into
    (see donation.py); ``schedule``: ``("native", entry point name)`` or ``("numpy",
    step)``; ``poison``: the arena's integer and floating-point byte ranges (see
    :func:`_poison_ranges`)."""

    def __init__(self, inputs, consts, outputs, results, aliases, schedule, num_slots: int,
                 arena_size: int, poison):
        self.inputs, self.consts, self.outputs, self.results = inputs, consts, outputs, results
        self.aliases, self.schedule, self.poison = aliases, schedule, poison
        self.num_slots, self.arena_size = num_slots, arena_size

    @classmethod
    def of_program(cls, program: Program, plan: BufferPlan, schedule: list, slots: dict,
                   nested_consts=(), aliases=None, const_arrays=None) -> "Layout":
        """The layout of ``program`` planned as ``plan`` and ``slots`` (see
        ``pipeline.NativePlan``); ``nested_consts``: the (slot, array) pairs of the
        constants of its control-flow bodies; ``aliases``: buffer id -> input positions;
        ``const_arrays``: buffer id -> the array of each constant (by default made here)."""
        if const_arrays is None:
            const_arrays = _const_arrays(program)
        inputs = [(slots.get(b.id) if b.is_array else None, b.dtype if b.is_array else None,
                   b.shape if b.is_array else None, b.id) for b in program.inputs]
        consts = [(slots[b.id], const_arrays[b.id]) for b in program.consts
                  if b.id in slots] + list(nested_consts)
        fresh = {b.id: b for b in program.outputs
                 if isinstance(b, Buffer) and b.kind == "output"}
        outputs = [(slots[b.id], b.shape, b.dtype, b.id) for b in fresh.values()]
        results = []
        input_position = {b.id: i for i, b in enumerate(program.inputs)}
        out_position = {bid: k for k, bid in enumerate(fresh)}
        for b in program.outputs:
            if not isinstance(b, Buffer):
                results.append(("literal", np.asarray(b)))
            elif b.id in out_position:
                results.append(("output", out_position[b.id]))
            elif b.id in input_position:
                results.append(("input", input_position[b.id]))
            elif b.kind == "const":
                results.append(("literal", const_arrays[b.id]))
            else:
                results.append(("array", b.id))
        aliases = {k: (aliases or {})[bid] for k, (_, _, _, bid) in enumerate(outputs)
                   if bid in (aliases or {})}
        schedule = [("numpy", item) if isinstance(item, FallbackStep) else ("native", item.name)
                    for item in schedule]
        num_slots = max([1 + max(slots.values(), default=0)] +
                        [slot + 1 for slot, _ in nested_consts])
        return cls(inputs, consts, outputs, results, aliases, schedule, num_slots,
                   plan.arena_size, _poison_ranges(program, plan))


class Executable:
    """A compiled program. ``exe(*arrays) -> list of arrays``; ``exe.as_text()`` is the
    LLVM IR it was compiled from."""

    _lends_arena = False  # see _LentArenaExecutable
    # a fresh output, large ones on memory used before (see output_memory; poisoned ones:
    # see _poisoned_empty)
    _empty = staticmethod(output_memory.empty)

    def __init__(self, program: Program, plan: BufferPlan, schedule: list, slots: dict,
                 entry_points: dict, ir_text: str = "", optimized_ir: str = "", engine=None,
                 description: str = "", nested_consts=(), aliases=None):
        self._planned = (program, plan, slots, description)
        self._ir = (ir_text, optimized_ir)
        self._const_arrays = _const_arrays(program)
        self._start(Layout.of_program(program, plan, schedule, slots, nested_consts, aliases,
                                      self._const_arrays), entry_points, engine)

    @classmethod
    def from_layout(cls, layout: Layout, entry_points: dict, engine, ir_text: bytes,
                    optimized_ir: bytes, planner) -> "Executable":
        """The executable of a program read from the on-disk cache: its ``layout``, and
        ``planner()`` giving its ``pipeline.NativePlan`` when it is first inspected (its
        program, buffer plan, slots and description: calls need none of them)."""
        self = cls.__new__(cls)
        self._planned, self._planner = None, planner
        self._ir = (ir_text, optimized_ir)
        self._const_arrays = {}
        self._start(layout, entry_points, engine)
        return self

    def _start(self, layout: Layout, entry_points: dict, engine) -> None:
        self.layout = layout
        self._engine = engine  # keeps the machine code mapped while this object lives
        self._state = _ThreadState()
        self._arena_size = layout.arena_size
        self._num_slots = layout.num_slots
        self._num_inputs = len(layout.inputs)
        # The per-call plan, precomputed so that a call is a few short loops:
        # inputs as (position, slot or None, dtype or None for non-arrays, buffer id),
        self._inputs = [(i, slot, dtype, bid) for i, (slot, dtype, _, bid)
                        in enumerate(layout.inputs)]
        # the shape of each array input: native code indexes it without bounds checks, so a
        # call checks every array against it before the pointer table is filled
        self._input_shapes = [shape for _, _, shape, _ in layout.inputs]
        # constants as (slot, array), outputs to allocate as (slot, shape, dtype, buffer id),
        self._consts = list(layout.consts)
        self._outputs = list(layout.outputs)
        # outputs that may be written into a donated input (see donation.py): output index
        # -> candidate input positions
        self._aliases = dict(layout.aliases)
        # and, per result, where it comes from.
        self._results = list(layout.results)
        self._simple_results = all(kind == "output" for kind, _ in self._results)
        self._schedule = [("native", _SEGMENT_TYPE(entry_points[item])) if kind == "native"
                          else ("numpy", item) for kind, item in layout.schedule]
        self._native_only = [fn for kind, fn in self._schedule] \
            if all(kind == "native" for kind, _ in self._schedule) else None
        # arena byte ranges to fill before each call, integer ones and then floating-point
        # ones (where memory is reused, NaN wins); None: no poisoning
        self._poison = layout.poison if config.poison_scratch else None
        if self._poison is not None:
            self._empty = _poisoned_empty  # fresh outputs too
        # The common case (one native segment, array inputs, results that are fresh outputs)
        # gets a call path with nothing else in it: about 1 µs of Python around the native
        # call for a small program.
        lent = not arenas.kept_with_executable(layout.arena_size)
        if self._native_only is not None and len(self._native_only) == 1 \
                and self._simple_results and all(d is not None for _, _, d, _ in self._inputs):
            self._fast_inputs = [(i, slot or 0, dtype, self._input_shapes[i])
                                 for i, slot, dtype, _ in self._inputs]
            self._fast_outputs = [(slot, shape, dtype) for slot, shape, dtype, _ in self._outputs]
            self._fast_order = None if [k for _, k in self._results] == list(
                range(len(self._outputs))) else [k for _, k in self._results]
            self.__class__ = _SingleSegmentExecutable if self._poison is None \
                else _PoisonedSingleSegmentExecutable
            if not lent:
                self.call_specialized = _specialized_call(self)
        if lent:
            self.__class__ = _LentArenaExecutable

    # ---- what the program was compiled from (planned again, for a cached one) ---------------

    def _plan(self) -> tuple:
        if self._planned is None:
            native = self._planner()
            self._planned = (native.program, native.plan, native.slots,
                             native.program.describe())
        return self._planned

    program = property(lambda self: self._plan()[0], doc="The fused program (see fusion.py).")
    plan = property(lambda self: self._plan()[1], doc="Its buffer plan (see buffers.py).")
    slots = property(lambda self: self._plan()[2],
                     doc="Buffer id -> its index in the pointer table.")
    description = property(lambda self: self._plan()[3], doc="A summary of the schedule.")

    def _text(self, k: int) -> str:
        text = self._ir[k]
        if isinstance(text, bytes):  # as read from the disk cache: decoded on first use
            text = text.decode()
            self._ir = tuple(text if j == k else t for j, t in enumerate(self._ir))
        return text

    ir_text = property(lambda self: self._text(0), doc="The LLVM IR it was compiled from.")
    optimized_ir = property(lambda self: self._text(1), doc="That IR after LLVM's passes.")

    # ---- calling ----------------------------------------------------------------------------

    def _thread_buffers(self):
        return _thread_buffers(self._state, self._num_slots,
                               None if self._lends_arena else self._arena_size, self._consts)

    def _fast_call(self, *args):
        state = self._state
        view = state.view
        if view is None:
            view = self._thread_buffers()[0]
        if len(args) != self._num_inputs:
            raise TypeError(f"compiled program takes {self._num_inputs} arguments, "
                            f"got {len(args)}")
        converted = None  # keeps converted inputs alive until the native code returns
        for i, slot, dtype, shape in self._fast_inputs:
            a = args[i]
            if type(a) is not np.ndarray or (a.dtype is not dtype and a.dtype != dtype) \
                    or not a.flags.c_contiguous:
                a = np.asarray(a, dtype=dtype, order="C")
                converted = (converted or []) + [a]
            if a.shape != shape:
                _raise_shape_mismatch(i, shape, dtype, a)
            view[slot] = id(a)
        outputs = []
        for slot, shape, dtype in self._fast_outputs:
            out = self._empty(shape, dtype)
            outputs.append(out)
            view[slot] = id(out)
        status = self._native_only[0](state.address)
        if status:  # see interrupts.py
            interrupts.settle(status, self._native_only[0], state.address)
        if self._fast_order is None:
            return outputs
        return [outputs[k] for k in self._fast_order]

    def __call__(self, *args):
        return self.call_donating(args, ())

    def call_donating(self, args, donated) -> list:
        """Call with the arrays at positions ``donated`` given to the program: an output may
        be written into one of them (the caller must own them and never read them again)."""
        if len(args) != self._num_inputs:
            raise TypeError(f"compiled program takes {self._num_inputs} arguments, "
                            f"got {len(args)}")
        table, arena = self._thread_buffers()
        if self._poison is not None:
            _poison_arena(arena, self._poison)
        # Every array the table points at stays referenced by ``inputs``/``outputs`` (or by
        # this executable) until the native code has returned.
        inputs = list(args)
        for i, slot, dtype, _ in self._inputs:
            a = inputs[i]
            if dtype is not None:
                if type(a) is not np.ndarray or a.dtype != dtype or not a.flags.c_contiguous:
                    a = inputs[i] = np.asarray(a, dtype=dtype, order="C")
                if a.shape != self._input_shapes[i]:
                    _raise_shape_mismatch(i, self._input_shapes[i], dtype, a)
                if slot is not None:
                    table[slot] = id(a)
        outputs = []
        reused: set = set()
        for k, (slot, shape, dtype, _) in enumerate(self._outputs):
            out = None
            for i in self._aliases.get(k, ()) if donated else ():
                a = inputs[i]
                if i in donated and i not in reused and a is args[i] and a.flags.c_contiguous:
                    out = a  # the donated array itself (not a converted copy)
                    reused.add(i)
                    break
            if out is None:
                out = self._empty(shape, dtype)
            outputs.append(out)
            table[slot] = id(out)
        if self._native_only is not None:
            address = self._state.address
            for fn in self._native_only:
                status = fn(address)
                if status:
                    interrupts.settle(status, fn, address)
            arrays = None
        else:
            arrays = {bid: inputs[i] for i, _, _, bid in self._inputs}
            arrays.update((bid, out) for (_, _, _, bid), out in zip(self._outputs, outputs))
            for kind, item in self._schedule:
                if kind == "native":
                    status = item(self._state.address)
                    if status:
                        interrupts.settle(status, item, self._state.address)
                else:
                    self._run_fallback(item, arrays, table, arena)
        if self._simple_results:
            return [outputs[k] for _, k in self._results]
        results = []
        for kind, where in self._results:
            if kind == "output":
                results.append(outputs[where])
            elif kind == "input":
                results.append(inputs[where])
            elif kind == "literal":
                results.append(where)
            else:
                results.append(arrays[where])
        return results

    def _array_of(self, b: Buffer, arrays, arena):
        if b.id in arrays:
            return arrays[b.id]
        if b.kind == "const":
            return self._const_arrays[b.id]
        if b.kind == "temp":
            offset = self.plan.offsets.get(b.id)
            if offset is not None or b.nbytes == 0:
                return np.ndarray(b.shape, b.dtype, buffer=arena, offset=offset or 0)
        raise RuntimeError(f"llvm backend: buffer {b!r} read before it was written")

    def _run_fallback(self, step: FallbackStep, arrays, table, arena):
        eqn = step.eqn
        ins = [x if not isinstance(x, Buffer) else self._array_of(x, arrays, arena)
               for x in step.inputs]
        if step.driver is not None:  # control flow around compiled bodies
            outs = step.driver(*ins)
        else:
            outs = eqn.primitive.run_impl(*ins, **eqn.params)
        if not eqn.primitive.multiple_results:
            outs = [outs]
        for b, o in zip(step.outputs, outs):
            if b is None:
                continue
            if not b.is_array:
                arrays[b.id] = o
                continue
            o = np.asarray(o)
            if o.dtype != b.dtype or not o.flags.c_contiguous:
                o = np.asarray(o, dtype=b.dtype, order="C")
            if o.shape != b.shape:  # native steps after this one index it by b.shape
                raise RuntimeError(f"llvm backend: the NumPy step for "
                                   f"'{eqn.primitive.name}' returned shape {o.shape}, its "
                                   f"shape rule says {b.shape}")
            if np.may_share_memory(o, arena):
                o = o.copy()  # the arena is reused by later steps
            arrays[b.id] = o
            slot = self.slots.get(b.id)
            if slot is not None:
                table[slot] = id(o)

    # ---- inspection -------------------------------------------------------------------------

    def as_text(self) -> str:
        """The LLVM IR of the program (before optimization), after a summary of the fused
        schedule."""
        header = "; " + "\n; ".join(self.description.splitlines()) + "\n" if self.description else ""
        return header + self.ir_text

    def cost_analysis(self) -> dict:
        """FLOPs, transcendentals and bytes accessed of one call (see :mod:`cost`)."""
        return cost.program_cost(self.program)

    object_size = 0  # bytes of the object file its native code was loaded from

    def memory_analysis(self) -> dict:
        """Bytes of the arguments, outputs, constants and scratch arena of one call, and of
        the object code."""
        return {**cost.memory_sizes(self.program, self.plan),
                "generated_code_size_in_bytes": self.object_size}

    def __repr__(self):
        n = sum(1 for kind, _ in self._schedule if kind == "native")
        return f"<llvm Executable: {len(self.program.steps)} steps, {n} native segment(s)>"


def poison(array: np.ndarray) -> None:
    """Fill ``array`` (C-contiguous) with NaN if it holds floating-point numbers, else with
    the byte 0xA5 (see the module docstring)."""
    array.reshape(-1).view(np.uint8).fill(_POISON_FLOAT if _is_float(array.dtype)
                                          else _POISON_INTEGER)


_POISON_FLOAT = 0xFF  # all bits set: a NaN in every floating-point format
_POISON_INTEGER = 0xA5


def _is_float(dtype) -> bool:
    # bfloat16 and the other ml_dtypes floats are kind "V"
    return dtype.kind in "fcV"


def _poisoned_empty(shape, dtype) -> np.ndarray:
    out = output_memory.empty(shape, dtype)
    poison(out)
    return out


def _poison_ranges(program: Program, plan: BufferPlan) -> tuple:
    """``(integer ranges, floating-point ranges)`` of the arena, as (start, end) bytes. The
    control-flow steps' scratch (carries, bodies' arenas: mostly floats) counts as
    floating-point."""
    scratch = {s.scratch.id for s in program.steps if getattr(s, "scratch", None) is not None}
    integer, floating = [], []
    for b in program.buffers:
        offset = plan.offsets.get(b.id)
        if b.kind != "temp" or offset is None or b.nbytes == 0:
            continue
        kind = floating if _is_float(b.dtype) or b.id in scratch else integer
        kind.append((offset, offset + b.nbytes))
    return integer, floating


def _poison_arena(arena: np.ndarray, ranges) -> None:
    arena.fill(_POISON_FLOAT)
    integer, floating = ranges
    for start, end in integer:
        arena[start:end] = _POISON_INTEGER
    for start, end in floating:
        arena[start:end] = _POISON_FLOAT


def _raise_shape_mismatch(position: int, shape, dtype, given) -> None:
    expected = f"{dtype.name}[{','.join(map(str, shape))}]"
    raise TypeError(f"compiled program: argument {position} must be an array of type "
                    f"{expected}, got one of shape {np.shape(given)}")


def _thread_buffers(state: _ThreadState, num_slots: int, arena_size: int | None,
                    consts) -> tuple:
    """``(view of the pointer table, arena)`` of the calling thread in ``state``, made on its
    first call: the arena (``arena_size`` bytes; None: lent by each call, which fills slot
    0) and the constants entered once."""
    if state.table is None:
        table = np.zeros(num_slots, np.uint64)
        arena = None
        if arena_size is not None:
            arena = np.empty(max(arena_size, 1), np.uint8)
            table[0] = id(arena)
        for slot, array in consts:
            table[slot] = id(array)
        state.table, state.view, state.arena = table, memoryview(table), arena
        state.address = table.ctypes.data
    return state.view, state.arena


def _specialized_call(exe: Executable):
    """``exe``'s short call path (``_fast_call``, its poisoning included) as straight-line code
    for its signature, ``call(*arrays) -> list of arrays``: the same checks of the count,
    type, dtype, layout and shape of every argument and the same steps, without the loops
    over the plans of the inputs and outputs. After a program whose data went through the
    caches (a batch-1 forward streams megabytes of weights), those loops' lookups cost
    microseconds (see docs/performance.md, "Batch 1"). It refers to ``exe``'s state and
    machine code, not to ``exe`` (no cycle: the executable still goes with its last
    reference); ``jit``'s fast path calls it (``call_specialized``)."""
    state, segment = exe._state, exe._native_only[0]
    names = {"ndarray": np.ndarray, "asarray": np.asarray, "empty": exe._empty,
             "mismatch": _raise_shape_mismatch, "settle": interrupts.settle, "state": state,
             "segment": segment, "poison_arena": _poison_arena, "ranges": exe._poison,
             "machine_code": exe._engine,  # mapped while the call exists
             "thread_buffers": functools.partial(_thread_buffers, state, exe._num_slots,
                                                 exe._arena_size, exe._consts)}
    n = exe._num_inputs
    lines = ["def call(*args):",
             "    view = state.view",
             "    if view is None:",
             "        view = thread_buffers()[0]",
             f"    if len(args) != {n}:",
             f"        raise TypeError(f'compiled program takes {n} arguments, '",
             "                        f'got {len(args)}')"]
    if exe._poison is not None:
        lines.append("    poison_arena(state.arena, ranges)")
    for i, slot, dtype, shape in exe._fast_inputs:
        names[f"dtype{i}"], names[f"shape{i}"] = dtype, shape
        a, d = f"a{i}", f"dtype{i}"
        lines += [f"    {a} = args[{i}]",
                  f"    if type({a}) is not ndarray or ({a}.dtype is not {d} and {a}.dtype != {d})"
                  f" or not {a}.flags.c_contiguous:",
                  f"        {a} = asarray({a}, dtype={d}, order='C')",
                  f"    if {a}.shape != shape{i}:",
                  f"        mismatch({i}, shape{i}, {d}, {a})",
                  f"    view[{slot}] = id({a})"]
    for k, (slot, shape, dtype) in enumerate(exe._fast_outputs):
        names[f"out_shape{k}"], names[f"out_dtype{k}"] = shape, dtype
        lines += [f"    o{k} = empty(out_shape{k}, out_dtype{k})", f"    view[{slot}] = id(o{k})"]
    order = exe._fast_order if exe._fast_order is not None else range(len(exe._fast_outputs))
    lines += ["    address = state.address",
              "    status = segment(address)",
              "    if status:  # see interrupts.py",
              "        settle(status, segment, address)",
              f"    return [{', '.join(f'o{k}' for k in order)}]"]
    exec("\n".join(lines) + "\n", names)
    return names.pop("call")  # not left in its own globals: no cycle to outlive it


class _SingleSegmentExecutable(Executable):
    """An :class:`Executable` whose calls take the short path (see ``_fast_call``); the
    class is switched at construction, because Python looks ``__call__`` up on the type."""

    __call__ = Executable._fast_call


class _PoisonedSingleSegmentExecutable(Executable):
    """The short path with poisoned scratch (see the module docstring): the arena kept with
    the executable is poisoned before each call (fresh outputs are, by ``_empty``)."""

    def __call__(self, *args):
        _poison_arena(self._thread_buffers()[1], self._poison)
        return self._fast_call(*args)


class _LentArenaExecutable(Executable):
    """An :class:`Executable` whose arena is larger than ``config.arena_cache_threshold``:
    each call borrows one from the pool and gives it back when it returns (so the memory is
    shared with other large programs, and returned to the system beyond the pool's limit)."""

    _lends_arena = True

    def __call__(self, *args):
        return self.call_donating(args, ())

    def call_donating(self, args, donated) -> list:
        view = self._thread_buffers()[0]
        state = self._state
        outer = state.arena  # set when this call is nested in one of the same executable
        arena = arenas.borrow(self._arena_size)
        state.arena, view[0] = arena, id(arena)
        try:
            return Executable.call_donating(self, args, donated)
        finally:
            state.arena, view[0] = outer, id(outer) if outer is not None else 0
            arenas.give_back(arena)
