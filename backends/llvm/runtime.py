"""The executable: compiled segments, fallback steps and the buffers between them.

A call converts the arguments to C-contiguous arrays of the declared dtypes, allocates the
outputs with NumPy, fills a table of pointers (slot 0 is this thread's scratch arena) and
calls each native segment once through ctypes. ctypes drops the GIL for the duration of a
foreign call, so compiled code runs in parallel with other Python threads, and two threads
may call one executable at once (each has its own arena and pointer table).

    >>> exe = functrans.backends.llvm.compile_jaxpr(closed)   # doctest: +SKIP
    >>> outs = exe(np.ones(3, np.float32))                     # doctest: +SKIP
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from functrans.backends.llvm.buffers import BufferPlan
from functrans.backends.llvm.codegen import Segment
from functrans.backends.llvm.fusion import Buffer, FallbackStep, Program

_SEGMENT_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _ThreadState(threading.local):
    table = None
    arena = None


class Executable:
    """A compiled program. ``exe(*arrays) -> list of arrays``; ``exe.as_text()`` is the
    LLVM IR it was compiled from."""

    def __init__(self, program: Program, plan: BufferPlan, schedule: list, slots: dict,
                 entry_points: dict, ir_text: str = "", optimized_ir: str = "", engine=None,
                 description: str = ""):
        self.program = program
        self.plan = plan
        self.slots = slots
        self.ir_text = ir_text
        self.optimized_ir = optimized_ir
        self.description = description
        self._engine = engine  # keeps the machine code mapped while this object lives
        self._state = _ThreadState()
        self._num_slots = 1 + max(slots.values(), default=0)
        # the per-call plan, precomputed so the call path is a few list walks
        self._inputs = []
        for i, b in enumerate(program.inputs):
            self._inputs.append((i, slots.get(b.id) if b.is_array else None,
                                 b.dtype if b.is_array else None, b.id))
        self._consts = [(slots[b.id], np.ascontiguousarray(b.value, dtype=b.dtype), b.id)
                        for b in program.consts if b.id in slots]
        self._const_arrays = {b.id: np.ascontiguousarray(b.value, dtype=b.dtype)
                              for b in program.consts}
        self._outputs = [b for b in {id(b): b for b in program.outputs
                                     if isinstance(b, Buffer) and b.kind == "output"}.values()]
        self._schedule = []
        for item in schedule:
            if isinstance(item, Segment):
                self._schedule.append(("native", _SEGMENT_TYPE(entry_points[item.name])))
            else:
                self._schedule.append(("numpy", item))
        self._all_native = all(kind == "native" for kind, _ in self._schedule)

    # ---- calling ----------------------------------------------------------------------------

    def _thread_buffers(self):
        state = self._state
        if state.table is None:
            state.table = (ctypes.c_void_p * self._num_slots)()
            state.arena = np.empty(max(self.plan.arena_size, 1), np.uint8)
            state.table[0] = state.arena.ctypes.data
        return state.table, state.arena

    def __call__(self, *args):
        if len(args) != len(self._inputs):
            raise TypeError(f"compiled program takes {len(self._inputs)} arguments, "
                            f"got {len(args)}")
        table, arena = self._thread_buffers()
        arrays = {}
        for i, slot, dtype, bid in self._inputs:
            a = args[i]
            if dtype is not None and (type(a) is not np.ndarray or a.dtype != dtype
                                      or not a.flags.c_contiguous):
                a = np.ascontiguousarray(a, dtype=dtype)
            arrays[bid] = a
            if slot is not None:
                table[slot] = a.ctypes.data
        for slot, c, bid in self._consts:
            table[slot] = c.ctypes.data
        for b in self._outputs:
            out = np.empty(b.shape, b.dtype)
            arrays[b.id] = out
            table[self.slots[b.id]] = out.ctypes.data
        address = ctypes.addressof(table)
        if self._all_native:
            for _, fn in self._schedule:
                fn(address)
        else:
            for kind, item in self._schedule:
                if kind == "native":
                    item(address)
                else:
                    self._run_fallback(item, arrays, table, arena)
        results = []
        for b in self.program.outputs:
            if not isinstance(b, Buffer):
                results.append(np.array(b))
            elif b.id in arrays:
                results.append(arrays[b.id])
            else:
                results.append(self._const_arrays[b.id])
        return results

    def _array_of(self, b: Buffer, arrays, arena):
        if b.id in arrays:
            return arrays[b.id]
        if b.kind == "const":
            return self._const_arrays[b.id]
        if b.kind == "temp":
            offset = self.plan.offsets.get(b.id, 0)
            return np.ndarray(b.shape, b.dtype, buffer=arena, offset=offset)
        raise RuntimeError(f"llvm backend: buffer {b!r} read before it was written")

    def _run_fallback(self, step: FallbackStep, arrays, table, arena):
        eqn = step.eqn
        ins = [x if not isinstance(x, Buffer) else self._array_of(x, arrays, arena)
               for x in step.inputs]
        outs = eqn.primitive.impl(*ins, **eqn.params)
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
                o = np.ascontiguousarray(o, dtype=b.dtype)
            if np.may_share_memory(o, arena):
                o = o.copy()  # the arena is reused by later steps
            arrays[b.id] = o
            slot = self.slots.get(b.id)
            if slot is not None:
                table[slot] = o.ctypes.data

    # ---- inspection -------------------------------------------------------------------------

    def as_text(self) -> str:
        """The LLVM IR of the program (before optimization), after a summary of the fused
        schedule."""
        header = "; " + "\n; ".join(self.description.splitlines()) + "\n" if self.description else ""
        return header + self.ir_text

    def __repr__(self):
        n = sum(1 for kind, _ in self._schedule if kind == "native")
        return f"<llvm Executable: {len(self.program.steps)} steps, {n} native segment(s)>"
