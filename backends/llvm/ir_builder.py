"""The bottom of LLVM code generation: the module under construction and the small IR
building blocks every emitter uses — counted loops and loop nests, loop IDs (``!llvm.loop``
hints), stack slots in a function's prologue, ``memcpy``, pointers to a program's buffers,
the SIGINT polling of loops (see :mod:`interrupts`) — and the table of step emitters.

Each kind of step (a loop kernel, a matrix product, a ``while`` loop, a sort...) has one
emitter, registered with :func:`emits` by the module that defines how it runs; a segment or
a control-flow body emits its steps through :func:`emit_steps`, which looks the emitter up
by the step's class. The emitters take ``(step, mb, b, pointer, table)``: the step, the
:class:`ModuleIR` being built, the builder positioned where its code goes, the function
``pointer(buffer, element_type=None)`` giving a typed pointer to a buffer, and the pointer
table of the segment.

    >>> @emits(MyStep)                                    # doctest: +SKIP
    ... def emit_my_step(step, mb, b, pointer, table): ...
"""
from __future__ import annotations

import re

import llvmlite.ir as ir

from functrans.backends.compiler import passes
from functrans.backends.compiler.fusion import Buffer
from functrans.backends.llvm import interrupts
from functrans.backends.llvm.machine_code import LLVMCompileError
from functrans.backends.llvm.runtime import array_data_offset
from functrans.backends.llvm.scalar_ops import mem_type
from functrans.backends.llvm.support_code import STATE_TYPE
from functrans.backends.llvm.vector_math import MathLibrary

# a function's definition as llvmlite prints it: one line, its name quoted
_DEFINE = re.compile(r'^define [^\n]*?@"([^"]+)"\([^\n]*$', re.MULTILINE)

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
I8P = I8.as_pointer()

# step class -> emitter(step, mb, b, pointer, table): the code of one step of a segment
STEP_EMITTERS: dict = {}


def emits(*step_types):
    """Register the decorated function as the emitter of ``step_types``."""
    def register(emitter):
        for step_type in step_types:
            STEP_EMITTERS[step_type] = emitter
        return emitter
    return register


def emit_steps(mb, b: ir.IRBuilder, steps, pointer, table) -> None:
    """The code of a list of native steps, in order, at ``b``."""
    for step in steps:
        emitter = STEP_EMITTERS.get(type(step))
        if emitter is None:
            raise NotImplementedError(f"llvm backend: no emitter for {type(step).__name__}")
        emitter(step, mb, b, pointer, table)


class ModuleIR:
    """The LLVM module being built, with what its emitters share: the math library, the
    description of each function (for error messages), each function's prologue, the
    functions built once per module (kernels, chunk wrappers, control-flow bodies) and the
    SIGINT baselines (see :meth:`baseline`)."""

    def __init__(self):
        self.module = ir.Module(name="functrans")
        self.math = MathLibrary(self.module)
        self.names: dict = {}  # function name -> description (for error messages)
        self.bodies: dict = {}  # id(Body) -> its function
        self.prologues: dict = {}  # function name -> the builder of its entry block
        self.kernel_count = 0
        self.function_texts: dict = {}  # a function's IR with its name blanked -> function
        self.kernels: dict = {}  # kernel_structure(...) -> its function
        # (kernel function, rows per chunk, extent, out stride) -> its chunk wrapper
        self.chunk_functions: dict = {}
        self.constant_slots: dict = {}  # (function name, type, constant) -> its stack slot
        # per function, the SIGINT counter's value when the running segment started (see
        # interrupts.py): read in a segment's prologue, a parameter of a body; only functions
        # that poll ask for it (a segment that never does returns 0 without reading it)
        self.baselines: dict = {}
        self.baseline_sources: dict = {}
        # matrix products on the thread pool: its workers are busy (see
        # kernels.POOLED_MIN_ELEMENTS)
        self.pool_in_use = False
        self._single_vector_loop = None  # see single_vector_loop
        self._interleaved_loops: dict = {}  # see interleaved_loop
        self._scalar_loop = None  # see scalar_loop
        self.function_attributes: dict = {}  # function name -> its string attribute
        self.tile_kernel = None  # the register tiles' function, once a product needs it

    def shared(self, fn: ir.Function) -> ir.Function:
        """``fn``, or an identical function built earlier (then ``fn`` is dropped): kernels
        repeat (a bias add in each layer, a step's update of each parameter), and LLVM then
        optimizes and compiles each body once."""
        if not passes.enabled("shared_kernels"):
            return fn
        key = str(fn).replace(f'@"{fn.name}"', "@", 1)
        same = self.function_texts.get(key)
        if same is None:
            self.function_texts[key] = fn
            return fn
        del self.module.globals[fn.name]
        self.names.pop(fn.name, None)
        return same

    # ---- interrupts (see interrupts.py) -----------------------------------------------------

    def interrupt_word(self, b: ir.IRBuilder, index: int):
        """A pointer to word ``index`` of the interrupt state block (see interrupts.py)."""
        state = self.module.globals.get(interrupts.STATE_SYMBOL)
        if state is None:
            state = ir.GlobalVariable(self.module, STATE_TYPE, interrupts.STATE_SYMBOL)
        return b.gep(state, [ir.Constant(I32, 0), ir.Constant(I32, index)], inbounds=True)

    def epoch(self, b: ir.IRBuilder, ordering: str = "monotonic"):
        """The SIGINT counter, read at ``b`` (an atomic load: never hoisted out of a loop)."""
        return b.load_atomic(self.interrupt_word(b, interrupts.EPOCH), ordering, 8)

    def baseline(self, b: ir.IRBuilder):
        """The counter's value when the segment running ``b``'s function started."""
        name = b.function.name
        if name not in self.baselines:
            self.baselines[name] = self.baseline_sources[name]()
        return self.baselines[name]

    def interrupted(self, b: ir.IRBuilder):
        """Whether a SIGINT has come since the segment started (an i1): what loops poll at
        their back-edge, a load and a branch that is not taken."""
        return b.icmp_unsigned("!=", self.epoch(b), self.baseline(b))

    def interrupt_status(self, b: ir.IRBuilder):
        """A segment's return value: 1 when a SIGINT came while it ran (its loops may have
        stopped early: its results are not to be used), else 0."""
        if b.function.name not in self.baselines:
            return ir.Constant(I32, 0)  # nothing in it polls
        changed = b.icmp_unsigned("!=", self.epoch(b, "acquire"), self.baseline(b))
        return b.select(changed, ir.Constant(I32, interrupts.INTERRUPTED), ir.Constant(I32, 0))

    def check_handler_when_due(self, prologue: ir.IRBuilder, start):
        """End a polling segment's prologue: once every ``interrupts.CHECK_TICKS``, return
        ``CHECK_HANDLER`` before doing anything (the runtime checks that the SIGINT handler
        is in place, then calls again); else go on to ``start``."""
        fn = prologue.function
        now = prologue.call(self.math.declare("llvm.readcyclecounter", I64, []), [])
        last = self.interrupt_word(prologue, interrupts.LAST_CHECK)
        since = prologue.sub(now, prologue.load_atomic(last, "monotonic", 8))
        due = prologue.icmp_unsigned(">=", since, ir.Constant(I64, interrupts.CHECK_TICKS))
        check = fn.append_basic_block("check_handler")
        prologue.cbranch(due, check, start)
        b = ir.IRBuilder(check)
        b.store_atomic(now, last, "monotonic", 8)  # one thread asks; the others go on
        b.ret(ir.Constant(I32, interrupts.CHECK_HANDLER))

    def skip_chunk_if_interrupted(self, cb: ir.IRBuilder, ctx, index: int):
        """At the start of a chunk function: return at once when a SIGINT came since the
        segment started (its value is the pointer ``ctx[index]``); leaves ``cb`` where the
        chunk's work goes."""
        fn = cb.function
        run, stop = fn.append_basic_block("run"), fn.append_basic_block("interrupted")
        start = cb.ptrtoint(cb.load(cb.gep(ctx, [ir.Constant(I64, index)], inbounds=True)), I64)
        cb.cbranch(cb.icmp_unsigned("!=", self.epoch(cb), start), stop, run)
        cb.position_at_end(stop)
        cb.ret_void()
        cb.position_at_end(run)

    def chunk_context(self, b: ir.IRBuilder, pointers):
        """The array (on this thread's stack) through which a chunk function gets
        ``pointers``, then the segment's start value of the SIGINT counter."""
        ctx_array = self.entry_alloca(b, ir.ArrayType(I8P, len(pointers) + 1))
        values = [b.bitcast(p, I8P) for p in pointers] + [b.inttoptr(self.baseline(b), I8P)]
        for k, value in enumerate(values):
            b.store(value, b.gep(ctx_array, [ir.Constant(I32, 0), ir.Constant(I32, k)],
                                 inbounds=True))
        return b.bitcast(ctx_array, I8P)

    def prologue_and_body(self, fn):
        """Builders for a function's prologue (the entry block, where pointers and stack
        slots are computed; it branches to the body when the function is finished) and its
        body. Only the prologue's builder ever inserts into the entry block."""
        prologue = ir.IRBuilder(fn.append_basic_block("entry"))
        body = ir.IRBuilder(fn.append_basic_block("start"))
        self.prologues[fn.name] = prologue
        return prologue, body

    @staticmethod
    def array_data(b, table, slot):
        """The data pointer of the NumPy array whose object is ``table[slot]``."""
        obj = b.load(b.gep(table, [ir.Constant(I64, slot)], inbounds=True))
        field = b.bitcast(b.gep(obj, [ir.Constant(I64, array_data_offset())], inbounds=True),
                          I8P.as_pointer())
        return b.load(field)

    @staticmethod
    def pointer_resolver(prologue, external, arena, plan):
        """``pointer(buf, element_type=None)``: a typed pointer to ``buf`` — in the arena for a
        temp, else ``external(buf)`` (an i8*). Each is computed once, in the function's
        prologue, so it dominates every use whatever loop or branch the use is in."""
        cache: dict = {}

        def pointer(buf: Buffer, element_type=None):
            raw = cache.get(buf.id)
            if raw is None:
                if buf.kind == "temp":
                    offset = plan.offsets.get(buf.id)
                    if offset is None and buf.nbytes > 0:  # never written: nothing to read
                        raise LLVMCompileError(f"llvm backend: buffer {buf!r} is used but has "
                                               f"no place in the scratch arena (a compiler "
                                               f"bug: see backends/compiler/verify.py)")
                    raw = prologue.gep(arena, [ir.Constant(I64, offset or 0)], inbounds=True)
                else:
                    raw = external(buf)
                cache[buf.id] = raw
            ty = (element_type or mem_type(buf.dtype)).as_pointer()
            key = (buf.id, str(ty))
            if key not in cache:
                cache[key] = raw if raw.type == ty else prologue.bitcast(raw, ty,
                                                                         name=f"buf{buf.id}")
            return cache[key]
        return pointer

    def emit_steps(self, b: ir.IRBuilder, steps, pointer, table):
        """The code of a list of native steps, in order, at ``b`` (see :func:`emit_steps`)."""
        emit_steps(self, b, steps, pointer, table)

    def memcpy(self, b: ir.IRBuilder, dst, src, nbytes: int):
        if nbytes <= 0:
            return
        fn = self.math.declare("llvm.memcpy.p0.p0.i64", ir.VoidType(), [I8P, I8P, I64, I1])
        b.call(fn, [b.bitcast(dst, I8P), b.bitcast(src, I8P), ir.Constant(I64, nbytes),
                    ir.Constant(I1, 0)])

    def constant_slot(self, b: ir.IRBuilder, ty, value):
        """A stack slot holding the constant ``value``, for passing it by reference (BLAS
        reads its scalar arguments, never writes them): one per distinct constant in
        ``b``'s function, set in its prologue. A program's products share a few sizes and
        flags, and a slot per argument per product made a long segment slow to build."""
        key = (b.function.name, str(ty), repr(value))
        found = self.constant_slots.get(key)
        if found is None:
            prologue = self.prologues[b.function.name]
            found = prologue.alloca(ty)
            prologue.store(ir.Constant(ty, value), found)
            self.constant_slots[key] = found
        return found

    def entry_alloca(self, b: ir.IRBuilder, ty):
        """A stack slot allocated in the prologue of ``b``'s function (once, even if the code
        that uses it runs in a loop)."""
        return self.prologues[b.function.name].alloca(ty)

    # ---- loops ------------------------------------------------------------------------------

    def loop(self, b: ir.IRBuilder, extent: int, body, name="i", bounds=None,
             interleave=True, vectorize=True):
        """``for i in range(extent): body(i)`` (or ``range(*bounds)``, two i64 values within
        ``[0, extent]``); leaves ``b`` after the loop and returns the loop's back edge (the
        branch that carries ``llvm.loop`` hints), or None: extents are static, so an empty
        loop is simply not emitted. ``interleave=False`` asks LLVM to vectorize the loop
        without interleaving its vector iterations (see :meth:`single_vector_loop`), a
        number ``n`` for ``n`` vectors per iteration (see :mod:`vector_loops`);
        ``vectorize=False`` keeps it scalar (see :meth:`scalar_loop`)."""
        if extent <= 0:
            return
        fn = b.function
        pre = b.block
        head = fn.append_basic_block(f"{name}.loop")
        done = fn.append_basic_block(f"{name}.done")
        if bounds is None:
            start, end = ir.Constant(I64, 0), ir.Constant(I64, extent)
            b.branch(head)
        else:
            start, end = bounds
            b.cbranch(b.icmp_signed("<", start, end), head, done)
        b.position_at_end(head)
        i = b.phi(I64, name=name)
        i.add_incoming(start, pre)
        body(i)
        nxt = b.add(i, ir.Constant(I64, 1), flags=["nuw", "nsw"])
        i.add_incoming(nxt, b.block)
        latch = b.cbranch(b.icmp_signed("<", nxt, end), head, done)
        if not vectorize:
            latch.set_metadata("llvm.loop", self.scalar_loop())
        elif interleave is not True:
            count = 1 if interleave is False else interleave
            latch.set_metadata("llvm.loop", self.single_vector_loop() if count == 1
                               else self.interleaved_loop(count))
        b.position_at_end(done)
        return latch

    def single_vector_loop(self):
        """The loop ID (``!llvm.loop``) of loops whose iterations are independent (each
        writes its own elements): vectorized, one vector per iteration. Interleaving (the
        vectorizer's unrolling: 4 vectors per iteration, then a vectorized epilogue) costs
        compile time, several times the code to select instructions for, and measured no
        faster on these loops (the streamed blocks of kernels larger than the cache do
        interleave, where long chains of float32 math gain from it: see
        :mod:`streaming_stores`). Loops that carry an accumulator in a register
        (:func:`kernels.accumulate`) keep it: their several accumulators do shorten the
        chain. Every such loop shares this one node, so identical kernels keep identical
        text (see :meth:`shared`)."""
        if self._single_vector_loop is None:
            self._single_vector_loop = self.loop_id({"llvm.loop.interleave.count": 1})
        return self._single_vector_loop

    def scalar_loop(self):
        """The loop ID of loops left unvectorized: the short innermost loops of narrow
        kernels (see :func:`vector_loops.narrow`). One node, shared as
        :meth:`single_vector_loop`'s is."""
        if self._scalar_loop is None:
            self._scalar_loop = self.loop_id({"llvm.loop.vectorize.enable": 0})
        return self._scalar_loop

    def interleaved_loop(self, count: int):
        """The loop ID of loops computing ``count`` vectors per iteration (one node per
        count, shared as :meth:`single_vector_loop`'s is)."""
        loop_id = self._interleaved_loops.get(count)
        if loop_id is None:
            loop_id = self._interleaved_loops[count] = self.loop_id(
                {"llvm.loop.interleave.count": count})
        return loop_id

    def prefer_vector_width(self, fn: ir.Function, bits: int) -> None:
        """Ask LLVM to vectorize ``fn``'s loops with ``bits``-wide vectors (the function
        attribute ``prefer-vector-width``, which llvmlite's function attributes cannot
        spell: :meth:`with_function_attributes` writes it into the module's text)."""
        self.function_attributes[fn.name] = f'"prefer-vector-width"="{bits}"'

    def with_function_attributes(self, text: str) -> str:
        """``text``, this module's IR as llvmlite prints it (a function's attributes end its
        ``define`` line), with the attributes of :meth:`prefer_vector_width` added."""
        if not self.function_attributes:
            return text
        return _DEFINE.sub(lambda m: f"{m.group(0)} {self.function_attributes[m.group(1)]}"
                           if m.group(1) in self.function_attributes else m.group(0), text)

    def loop_id(self, hints: dict):
        """A new loop ID (``!llvm.loop``) carrying ``hints`` (name -> i32 value), for the
        back edge :meth:`loop` returns."""
        return LoopID(self.module, [
            self.module.add_metadata([ir.MetaDataString(self.module, name), ir.Constant(I32, value)])
            for name, value in hints.items()])

    def loop_nest(self, b, extents, body, indices=(), bounds=None, interleave=True,
                  vectorize=True):
        """Nested loops over ``extents``; ``bounds`` (start, end) limits the outermost;
        ``vectorize=False`` keeps the innermost scalar."""
        if not extents:
            body(list(indices))
            return
        self.loop(b, extents[0],
                  lambda i: self.loop_nest(b, extents[1:], body, tuple(indices) + (i,),
                                           interleave=interleave, vectorize=vectorize),
                  name=f"i{len(indices)}", bounds=bounds, interleave=interleave,
                  vectorize=vectorize or len(extents) > 1)


class LoopID(ir.values.MDValue):
    """A loop ID: ``distinct !{!self, hints...}``. LLVM wants a loop's metadata to name
    itself first, which llvmlite's (uniqued) ``add_metadata`` cannot express."""

    def __init__(self, module: ir.Module, hints: list):
        super().__init__(module, hints, name=str(len(module.metadata)))

    def descr(self, buf):
        refs = [self.get_reference()] + [hint.get_reference() for hint in self.operands]
        buf += (f"distinct !{{ {', '.join(refs)} }}", "\n")

    # identity, not contents (which include the node itself)
    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other


def calls_only_function(fn: ir.Function) -> None:
    """Mark ``fn``, whose work is calls (of kernels, BLAS), to be compiled unoptimized:
    optimizing its few instructions around the calls gains nothing measurable, and a
    function costs LLVM's optimizer and code generator about a millisecond each."""
    fn.attributes.add("noinline")
    fn.attributes.add("optnone")


def kernel_alloca(b: ir.IRBuilder, ty):
    """A stack slot in the entry block of ``b``'s function (allocated once, not per loop
    iteration: an alloca in a loop grows the stack at every iteration)."""
    entry_block = b.function.entry_basic_block
    if b.block is entry_block or not entry_block.instructions:
        return b.alloca(ty)
    entry = ir.IRBuilder(entry_block)
    entry.position_before(entry_block.instructions[0])
    return entry.alloca(ty)
