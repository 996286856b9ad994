"""Code generation: a fused :class:`~fusion.Program` becomes one LLVM module.

Layout of the module:

* one ``internal`` function per kernel, named after the primitives it fuses
  (``k3_exp_mul_add``), whose buffer arguments are ``noalias`` pointers: the buffer plan
  guarantees a kernel never writes memory it reads through another argument, and telling
  LLVM so lets it vectorize without runtime overlap checks;
* one exported *segment* function ``i32 ft_segment_<i>(i8** table)`` per run of native
  steps between NumPy fallbacks (usually exactly one). ``table[0]`` is the scratch arena;
  ``table[slot]`` is the NumPy array object (its address) of each input, constant, output
  or fallback-produced array; the segment reads the arrays' data pointers itself. It
  returns 0, or a status for the runtime if its code polls for SIGINT (see
  :mod:`interrupts`);
* a kernel's function takes the bounds of its outermost loop; a large kernel is called
  through ``ft_parallel_for`` (see :mod:`thread_pool`) with a small ``_chunk`` wrapper that
  runs one chunk of rows;
* one internal function per control-flow body (see :mod:`control_flow`), called from the
  loops and branches the control steps emit.

Loops are plain counted loops over contiguous memory; LLVM's O3 pipeline, given the target
CPU's features (the host's by default; see :mod:`targets`), vectorizes them. Matrix products call BLAS ``sgemm``/``dgemm`` (from SciPy's
bundled BLAS) through symbols registered with the JIT linker, so the machine code does not
embed addresses and can be cached across processes.

    >>> module = ModuleBuilder(program, plan, slots).build()   # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import tempfile
import threading

import llvmlite.ir as ir
import numpy as np

from functrans.backends.compiler import exprs as E
from functrans.backends.compiler import passes
from functrans.backends.llvm import (cache, float_mode, interrupts, linker, scalar_ops,
                                     streaming_stores, targets, thread_pool)
from functrans.backends.compiler.buffers import BufferPlan
from functrans.backends.llvm.control_flow import Body, ControlStep, nested_programs
from functrans.backends.llvm.along_axis import CumulativeStep
from functrans.backends.llvm.indexing import ScatterLoop
from functrans.backends.llvm.convolution import ConvolutionStep
from functrans.backends.llvm.lapack import CholeskyStep, TriangularSolveStep
from functrans.backends.llvm.sorting import SortStep
from functrans.backends.llvm.row_fusion import RowGroup
from functrans.backends.compiler.fusion import (Buffer, DotKernel, FallbackStep, LoopKernel, Program,
                                            ReduceKernel, unique_buffers)
from functrans.backends.llvm.scalar_ops import ScalarContext, constant, mem_type, reg_type
from functrans.backends.llvm.vector_math import (F32, F64, I1, I64, MathLibrary,
                                                 register_libm_symbols)

I8, I32 = ir.IntType(8), ir.IntType(32)
I8P = I8.as_pointer()
CHUNK_FN = thread_pool.CHUNK_FN

# A loop is split across threads when it has at least this many elements, in chunks of
# about CHUNK_ELEMENTS (many more chunks than threads, so uneven progress evens out). The
# pool's dispatch costs a few microseconds, a loop this size tens of them. In a program
# whose matrix products run on the pool, its workers are awake anyway: loops from
# POOLED_MIN_ELEMENTS up are split too. (Elsewhere they are not: workers spinning after a
# small loop would take the cores from the BLAS threads of the next unsplit product.)
PARALLEL_MIN_ELEMENTS = 1 << 18
POOLED_MIN_ELEMENTS = 1 << 16
CHUNK_ELEMENTS = 1 << 14


class LLVMCompileError(RuntimeError):
    """LLVM rejected the code generated for a program (a bug in this backend). The message
    names the primitives of the failing kernel and where the IR was written."""


# =============================================================================================
# LLVM setup (once per process)
# =============================================================================================

_llvm_lock = threading.RLock()
_initialized = False


def initialize() -> None:
    global _initialized
    with _llvm_lock:
        if not _initialized:
            import llvmlite.binding as llvm
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            register_libm_symbols()
            _initialized = True


def create_target_machine(opt: int = 3, target=None):
    """A new target machine for ``target`` (default: the CPU being compiled for, see
    :mod:`targets`): its CPU name and features decide the instructions and the vector
    width. (A JIT engine takes ownership of the target machine it is given, so each engine
    gets its own.) ``opt`` is the code generator's optimization level."""
    import llvmlite.binding as llvm
    initialize()
    target = targets.resolve(target)
    return llvm.Target.from_triple(target.triple).create_target_machine(
        cpu=target.cpu, features=target.features, opt=opt, reloc="pic", codemodel="default")


_target_machines: dict = {}  # target name -> the machine that optimizes and emits its code


def target_machine(target=None):
    """The process-wide target machine of ``target`` (default: the CPU being compiled for)."""
    target = targets.resolve(target)
    with _llvm_lock:
        machine = _target_machines.get(target.name)
        if machine is None:
            machine = _target_machines[target.name] = create_target_machine(target=target)
        return machine


def target_description(target=None) -> str:
    """Triple, CPU name and features of ``target`` (default: the CPU being compiled for), and
    the array layout baked into the code: part of the compilation cache key. The host's
    description is remembered on disk (see :func:`targets.host`), so a process whose
    programs all come from the cache never loads LLVM."""
    # the thread count decides how matrix products are split, the cache size which loops
    # stream their output past the cache
    return (f"{targets.resolve(target).description}|data@{array_data_offset()}"
            f"|threads={thread_pool.num_threads()}"
            f"|streamed>{streaming_stores.min_streamed_bytes()}")


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


_blas_registered = False


# BLAS and LAPACK routines generated code calls (as ``ft_<name>``), from SciPy's libraries
BLAS_ROUTINES = ("sgemm", "dgemm", "sgemv", "dgemv", "strsm", "dtrsm")
LAPACK_ROUTINES = ("spotrf", "dpotrf")


def register_blas_symbols() -> None:
    """Register ``ft_sgemm``/``ft_dgemm`` (and the other :data:`BLAS_ROUTINES` and
    :data:`LAPACK_ROUTINES`) as the Fortran-ABI routines of SciPy's BLAS and LAPACK. Done on
    first need: importing scipy.linalg takes a noticeable part of a second."""
    global _blas_registered
    if _blas_registered:
        return
    names = BLAS_ROUTINES + LAPACK_ROUTINES
    openblas = _scipy_openblas()
    if openblas is not None and all(hasattr(openblas, f"scipy_{n}_") for n in names):
        # the library behind SciPy's cython_blas, without importing it (and SciPy)
        for name in names:
            address = ctypes.cast(getattr(openblas, f"scipy_{name}_"), ctypes.c_void_p).value
            linker.register_symbol(f"ft_{name}", address)
    else:
        get_name = ctypes.pythonapi.PyCapsule_GetName
        get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
        get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
        get_pointer.restype, get_pointer.argtypes = (ctypes.c_void_p,
                                                     [ctypes.py_object, ctypes.c_char_p])
        for module, routines in ((_load_cython_module("cython_blas"), BLAS_ROUTINES),
                                 (_load_cython_module("cython_lapack"), LAPACK_ROUTINES)):
            for name in routines:
                capsule = module.__pyx_capi__[name]
                linker.register_symbol(f"ft_{name}", get_pointer(capsule, get_name(capsule)))
    _blas_registered = True


_openblas_library: list = []


def _scipy_openblas():
    """The OpenBLAS that SciPy's wheels ship (``scipy.libs``), loaded, or None."""
    if not _openblas_library:
        import glob
        import importlib.util
        found = None
        try:
            site = os.path.dirname(os.path.dirname(importlib.util.find_spec("scipy").origin))
            for folder in ("scipy.libs", os.path.join("scipy", ".dylibs")):
                for path in sorted(glob.glob(os.path.join(site, folder, "*openblas*"))):
                    try:
                        found = ctypes.CDLL(path)
                        break
                    except OSError:
                        continue
                if found is not None:
                    break
        except Exception:  # noqa: BLE001 (no SciPy layout we know)
            found = None
        _openblas_library.append(found)
    return _openblas_library[0]


def _load_cython_module(name: str):
    """SciPy's ``cython_blas`` or ``cython_lapack`` extension (its ``__pyx_capi__`` holds the
    routines' pointers). Loaded from its file when possible: importing it through
    ``scipy.linalg`` runs that package's ``__init__``, which takes a large part of a
    second."""
    import glob
    import importlib
    import importlib.machinery
    import importlib.util
    try:
        scipy_spec = importlib.util.find_spec("scipy")
        folder = os.path.join(os.path.dirname(scipy_spec.origin), "linalg")
        suffixes = importlib.machinery.EXTENSION_SUFFIXES
        paths = [p for suffix in suffixes for p in glob.glob(os.path.join(folder, name + suffix))]
        loader = importlib.machinery.ExtensionFileLoader(name, paths[0])
        spec = importlib.util.spec_from_file_location(name, paths[0], loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        module.__pyx_capi__  # noqa: B018 (the pointers we need are there)
        return module
    except Exception:  # noqa: BLE001 (any layout surprise: the ordinary import)
        return importlib.import_module(f"scipy.linalg.{name}")


_gemm_registered = False


def register_gemm_symbols() -> None:
    """Register what matrix products call: ``ft_gemm_for`` runs a split product's chunks
    (see :func:`gemm_split`) on the thread pool, and ``ft_blas_hold`` keeps BLAS on one
    thread around a product (see :mod:`thread_pool`) through OpenBLAS's
    ``openblas_set_num_threads_local``. A BLAS without that function keeps its own threads:
    the chunks then run one after another on the calling thread, and the hold does
    nothing."""
    global _gemm_registered
    if _gemm_registered:
        return
    register_blas_symbols()
    local_threads = _blas_local_threads_address()
    thread_pool.hold_blas_with(local_threads)  # starts the pool: it defines ft_blas_hold
    if local_threads is not None and thread_pool.num_threads() > 1:
        linker.register_symbol(GEMM_FOR_SYMBOL, thread_pool._state["address"])
    else:
        linker.register_symbol(GEMM_FOR_SYMBOL, thread_pool.helper_address(thread_pool.SERIAL_SYMBOL))
    _gemm_registered = True


def _blas_local_threads_address():
    """The address of ``openblas_set_num_threads_local`` in the OpenBLAS behind SciPy's
    BLAS (OpenBLAS >= 0.3.27), or None."""
    libraries = [_scipy_openblas()]
    if libraries[0] is None and os.path.exists("/proc/self/maps"):
        # a shared OpenBLAS (a distribution's or conda's), not the copy inside NumPy's wheel
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps
                            if "openblas" in line and "numpy" not in line})
        libraries = []
        for path in paths:
            try:
                libraries.append(ctypes.CDLL(path))
            except OSError:
                continue
    for library in libraries:
        function = getattr(library, "openblas_set_num_threads_local", None)
        if function is not None:
            return ctypes.cast(function, ctypes.c_void_p).value
    return None


_blas_controller = None


@contextlib.contextmanager
def blas_threads(count: int):
    """Limit the BLAS libraries to ``count`` threads within the block (no-op before BLAS is
    loaded, or without threadpoolctl)."""
    global _blas_controller
    if not _blas_registered:
        yield
        return
    if _blas_controller is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            yield
            return
        _blas_controller = ThreadpoolController()
    with _blas_controller.limit(limits=count, user_api="blas"):
        yield


def needs_blas(object_code: bytes) -> bool:
    """Whether compiled code calls BLAS or LAPACK (their names are in its symbol table)."""
    return any(f"ft_{name}".encode() in object_code
               for name in BLAS_ROUTINES + LAPACK_ROUTINES)


def splits_gemms(object_code: bytes) -> bool:
    """Whether compiled code runs matrix products in chunks (see :func:`gemm_split`) or
    holds BLAS to one thread around a product."""
    return (GEMM_FOR_SYMBOL.encode() in object_code
            or thread_pool.BLAS_HOLD_SYMBOL.encode() in object_code)


def support_object(label: str, build) -> bytes:
    """The machine code of a runtime support module (the thread pool, the SIGINT handler)
    whose IR is ``build(triple)``: from the on-disk compilation cache when an earlier
    process compiled it (the module's text is then not even built: this backend's source,
    in the key, determines it). It runs in this process only: compiled for this CPU,
    whatever target the programs that call it are compiled for."""
    host = targets.host()
    key = cache.Key({"kind": "support", "label": label, "build": build.__name__,
                     "target": target_description(host), "source": cache.source_digest(),
                     "abi": cache.CODE_ABI})
    entry = cache.load(key)
    if entry is not None:
        return entry[0]["object"]
    import llvmlite.binding as llvm
    with _llvm_lock:
        # straight-line waiting and claiming code: the unoptimizing code generator emits it
        # in a quarter of the time (a first compile waits for this)
        tm = create_target_machine(opt=0, target=host)
        mod = llvm.parse_assembly(build(tm.triple))
        mod.verify()
        obj = tm.emit_object(mod)
    cache.store(key, {"object": obj}, {})
    return obj


def optimize_and_emit(ir_text: str, names: dict, target=None) -> tuple[bytes, str]:
    """Parse, verify, optimize (O2, loop and SLP vectorization) and compile ``ir_text`` to
    an object file for ``target`` (default: the CPU being compiled for). Returns (object
    bytes, optimized IR)."""
    import llvmlite.binding as llvm
    tm = target_machine(target)
    with _llvm_lock:
        try:
            mod = llvm.parse_assembly(ir_text)
            mod.verify()
        except RuntimeError as err:
            raise _compile_error(ir_text, str(err), names) from None
        mod.triple = tm.triple
        mod.data_layout = str(tm.target_data)
        pto = llvm.create_pipeline_tuning_options(speed_level=2)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_unrolling = False
        pb = llvm.create_pass_builder(tm, pto)
        pipeline = pb.getModulePassManager()
        try:
            pipeline.run(mod, pb)
        finally:
            _free_pass_manager(pipeline)
        return tm.emit_object(mod), str(mod)


def _free_pass_manager(manager) -> None:
    """Free a pass pipeline of llvmlite's. Its ``ModulePassManager`` lists ``ObjectRef``
    before ``NewPassManager`` among its bases, so the no-op ``ObjectRef._dispose`` hides the
    one that frees the pipeline: every compile kept its O2 pipeline (about 100 KB, with what
    the passes allocated while running) for the life of the process."""
    from llvmlite.binding import ffi, newpassmanagers
    if type(manager)._dispose is ffi.ObjectRef._dispose:
        newpassmanagers.NewPassManager._dispose(manager)
        manager.detach()
    else:  # an llvmlite whose pass managers free themselves
        manager.close()


def _compile_error(ir_text: str, message: str, names: dict) -> LLVMCompileError:
    fd, path = tempfile.mkstemp(prefix="functrans-llvm-", suffix=".ll")
    with os.fdopen(fd, "w") as f:
        f.write(ir_text)
    culprit = "the program"
    m = re.search(r":(\d+):\d+:", message)
    if m:
        line_no = int(m.group(1))
        for line in reversed(ir_text.splitlines()[:line_no]):
            d = re.match(r'define .*@"?([\w.]+)"?\(', line)
            if d:
                culprit = names.get(d.group(1), d.group(1))
                break
    return LLVMCompileError(f"llvm backend: LLVM rejected the code for {culprit}: "
                            f"{message.strip()}\nThe IR was written to {path}")


# =============================================================================================
# Module construction
# =============================================================================================


class Segment:
    """A run of native steps compiled into one exported function."""

    def __init__(self, index: int, steps: list):
        self.index = index
        self.steps = steps
        self.name = f"ft_segment_{index}"


def split_segments(program: Program) -> list:
    """Steps grouped into native segments and fallback steps, in order."""
    out, current = [], []
    for step in program.steps:
        if isinstance(step, FallbackStep):
            if current:
                out.append(Segment(len([s for s in out if isinstance(s, Segment)]), current))
                current = []
            out.append(step)
        else:
            current.append(step)
    if current:
        out.append(Segment(len([s for s in out if isinstance(s, Segment)]), current))
    return out


# steps that emit their own code (``step.emit(module_builder, builder, pointer, table)``)
NATIVE_STEPS = (ControlStep, ScatterLoop, CumulativeStep, SortStep, CholeskyStep,
                TriangularSolveStep, ConvolutionStep)


class ModuleBuilder:
    """Builds the LLVM module of a program: kernels, then segment entry points."""

    def __init__(self, program: Program, plan: BufferPlan, slots: dict, schedule: list):
        initialize()
        self.program = program
        self.plan = plan
        self.slots = slots  # buffer id -> index in the pointer table
        self.schedule = schedule
        self.module = ir.Module(name="functrans")
        self.math = MathLibrary(self.module)
        self.names: dict = {}  # function name -> description (for error messages)
        self.bodies: dict = {}  # id(Body) -> its function
        self.prologues: dict = {}  # function name -> the builder of its entry block
        self.kernel_count = 0
        self.function_texts: dict = {}  # a function's IR with its name blanked -> function
        self.kernels: dict = {}  # kernel_structure(...) -> its function
        self.chunk_functions: dict = {}  # (kernel function, rows per chunk, extent) -> wrapper
        self.constant_slots: dict = {}  # (function name, type, constant) -> its stack slot
        # per function, the SIGINT counter's value when the running segment started (see
        # interrupts.py): read in a segment's prologue, a parameter of a body; only functions
        # that poll ask for it (a segment that never does returns 0 without reading it)
        self.baselines: dict = {}
        self.baseline_sources: dict = {}
        # matrix products on the thread pool: its workers are busy (see POOLED_MIN_ELEMENTS)
        self.pool_in_use = thread_pool.compiled_threads() > 1 and splits_products(program)
        self._single_vector_loop = None  # see single_vector_loop
        # subnormals flushed to zero while its segments run (see float_mode.py)
        self.flush = float_mode.flushes()

    def build(self) -> str:
        with E.lock:
            for item in self.schedule:
                if isinstance(item, Segment):
                    self.build_segment(item)
        text = str(self.module)
        return float_mode.mark_functions(text) if self.flush else text

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

    # ---- segments ---------------------------------------------------------------------------

    def build_segment(self, segment: Segment):
        # with subnormals flushed, the exported name is a small entry around this function
        # that sets the floating-point mode (see float_mode.py)
        flush = self.flush
        name = f"{segment.name}_code" if flush else segment.name
        fn = ir.Function(self.module, ir.FunctionType(I32, [I8P.as_pointer()]), name=name)
        fn.attributes.add("nounwind")
        if all(calls_only(step) for step in segment.steps):
            # straight-line calls of kernels and BLAS, as long as the program: optimizing
            # them gains nothing, and took most of LLVM's time for large programs
            calls_only_function(fn)
        prologue, b = self.prologue_and_body(fn)
        self.baseline_sources[fn.name] = lambda: self.epoch(prologue)
        table = fn.args[0]
        arena = self.array_data(prologue, table, 0)
        arena.name = "arena"
        pointer = self.pointer_resolver(
            prologue, lambda buf: self.array_data(prologue, table, self.slots[buf.id]), arena,
            self.plan)
        self.emit_steps(b, segment.steps, pointer, table)
        b.ret(self.interrupt_status(b))
        start = b.function.basic_blocks[1]
        if fn.name in self.baselines:
            self.check_handler_when_due(prologue, start)
        else:
            prologue.branch(start)
        self.names[name] = "a program segment"
        if flush:
            float_mode.flushing_entry(self.module, segment.name, fn)
            self.names[segment.name] = "a program segment's entry"

    # ---- interrupts (see interrupts.py) -----------------------------------------------------

    def interrupt_word(self, b: ir.IRBuilder, index: int):
        """A pointer to word ``index`` of the interrupt state block (see interrupts.py)."""
        state = self.module.globals.get(interrupts.STATE_SYMBOL)
        if state is None:
            state = ir.GlobalVariable(self.module, interrupts.STATE_TYPE, interrupts.STATE_SYMBOL)
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
        """The code of a list of native steps, in order, at ``b``."""
        for step in steps:
            if isinstance(step, DotKernel):
                self.emit_dot(b, step, pointer)
            elif isinstance(step, NATIVE_STEPS):
                step.emit(self, b, pointer, table)
            else:
                self.call_kernel(b, step, pointer)

    def call_body(self, b: ir.IRBuilder, body: Body, table, io, arena):
        """Call ``body``'s function, with the segment's SIGINT baseline when it polls."""
        fn = self.body_function(body)
        start = self.baseline(b) if fn.name in self.baselines else ir.Constant(I64, 0)
        b.call(fn, [table, io, arena, start])

    def body_function(self, body: Body) -> ir.Function:
        """``void body(i8** table, i8** io, i8* arena, i64 baseline)``: a control-flow body,
        built once (``baseline``: see :meth:`baseline`)."""
        fn = self.bodies.get(id(body))
        if fn is not None:
            return fn
        self.kernel_count += 1
        name = f"body{self.kernel_count}"
        self.names[name] = "a control-flow body"
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [I8P.as_pointer(),
                                                                      I8P.as_pointer(), I8P, I64]),
                         name=name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        self.bodies[id(body)] = fn
        table, io, arena, _ = fn.args
        prologue, b = self.prologue_and_body(fn)
        self.baseline_sources[name] = lambda: fn.args[3]
        program = body.program
        position = {}
        for k, buf in enumerate(program.inputs):
            position.setdefault(buf.id, k)
        for k, buf in enumerate(program.outputs):
            if buf.kind == "output":
                position.setdefault(buf.id, body.n_in + k)

        def io_pointer(k):
            return prologue.load(prologue.gep(io, [ir.Constant(I64, k)], inbounds=True))

        def external(buf):
            if buf.id in position:
                return io_pointer(position[buf.id])
            return self.array_data(prologue, table, body.const_slots[buf.id])

        pointer = self.pointer_resolver(prologue, external, arena, body.plan)
        self.emit_steps(b, program.steps, pointer, table)
        # outputs no kernel wrote in place: inputs passed through, constants, repeats (a
        # carry updated in its input's buffer is already where the loop reads it)
        for k, buf in enumerate(program.outputs):
            if position.get(buf.id) != body.n_in + k and k not in body.in_place:
                self.memcpy(b, io_pointer(body.n_in + k), pointer(buf, I8), buf.nbytes)
        b.ret_void()
        prologue.branch(fn.basic_blocks[1])
        return fn

    def memcpy(self, b: ir.IRBuilder, dst, src, nbytes: int):
        if nbytes <= 0:
            return
        fn = self.math.declare("llvm.memcpy.p0.p0.i64", ir.VoidType(), [I8P, I8P, I64, I1])
        b.call(fn, [b.bitcast(dst, I8P), b.bitcast(src, I8P), ir.Constant(I64, nbytes),
                    ir.Constant(I1, 0)])

    def build_kernel(self, step):
        """The kernel's function ``k<n>_<prims>(buffers..., i64 start, i64 end)``, which runs
        the outermost loop from ``start`` to ``end`` (the whole loop, or one chunk of it)."""
        buffers = unique_buffers(step.writes() + step.reads())
        # kernels repeat (each layer's bias add, each parameter's update): a kernel whose
        # structure was built before is that function, found without building its IR
        key = kernel_structure(step, buffers) if passes.enabled("shared_kernels") else object()
        if key in self.kernels:
            return self.kernels[key], buffers
        self.kernel_count += 1
        prims = "_".join(p for p in step.prims[:6]) or "copy"
        name = f"k{self.kernel_count}_{re.sub(r'[^A-Za-z0-9_]', '_', prims)}"
        self.names[name] = f"the kernel fusing [{', '.join(step.prims)}]"
        fty = ir.FunctionType(ir.VoidType(), [mem_type(buf.dtype).as_pointer() for buf in buffers]
                              + [I64, I64])
        fn = ir.Function(self.module, fty, name=name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        # a kernel stays its own function: inlined, a program's hundreds of kernels become
        # one segment function whose optimization grows faster than the program (a 64-layer
        # MLP step: 22 s in LLVM, against 4 s as separate functions). A call per kernel
        # costs nanoseconds.
        fn.attributes.add("noinline")
        for arg in fn.args[:len(buffers)]:
            arg.add_attribute("noalias")
        ptrs = {buf.id: arg for buf, arg in zip(buffers, fn.args)}
        bounds = tuple(fn.args[len(buffers):])
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        emit = (self.emit_loop_kernel if isinstance(step, LoopKernel) else
                self.emit_row_group if isinstance(step, RowGroup) else self.emit_reduce_kernel)
        values = ([v for _, _, v in step.outputs] if isinstance(step, LoopKernel) else
                  step.values() if isinstance(step, RowGroup) else [step.value])
        if scalar_ops.needs_guard(values):
            # fast vectorized pass, noting elements outside the fast path's domain; if there
            # were any, redo the whole range with C library calls (outputs never alias
            # inputs, so running a kernel twice is harmless)
            flag = b.alloca(I1, name="needs_exact")
            b.store(ir.Constant(I1, 0), flag)
            emit(b, step, ptrs, bounds, flag=flag)
            exact = fn.append_basic_block("exact")
            done = fn.append_basic_block("done")
            b.cbranch(b.load(flag), exact, done)
            b.position_at_end(exact)
            emit(b, step, ptrs, bounds, exact=True)
            b.branch(done)
            b.position_at_end(done)
        else:
            emit(b, step, ptrs, bounds)
        b.ret_void()
        self.kernels[key] = self.shared(fn)
        return self.kernels[key], buffers

    def call_kernel(self, b: ir.IRBuilder, step, pointer):
        """Run ``step``'s kernel: directly, or in chunks of its outermost loop on the thread
        pool when the loop is large (see :func:`parallel_chunks`)."""
        kernel_fn, buffers = self.build_kernel(step)
        args = [pointer(buf) for buf in buffers]
        extent = step.shape[0] if step.shape else 1
        chunks = parallel_chunks(step, POOLED_MIN_ELEMENTS if self.pool_in_use
                                 else PARALLEL_MIN_ELEMENTS)
        if chunks <= 1:
            b.call(kernel_fn, args + [ir.Constant(I64, 0), ir.Constant(I64, extent)])
            return
        rows = -(-extent // chunks)
        chunks = -(-extent // rows)
        chunk_fn = self.chunk_functions.get((kernel_fn.name, rows, extent))
        if chunk_fn is None:
            chunk_fn = self.chunk_function(kernel_fn, args, rows, extent)
            self.chunk_functions[(kernel_fn.name, rows, extent)] = chunk_fn
        # the pointers travel to the workers in an array on this thread's stack
        ctx = self.chunk_context(b, args)
        parallel_for = self.math.declare(thread_pool.SYMBOL, ir.VoidType(), [I8P, I8P, I64])
        b.call(parallel_for, [b.bitcast(chunk_fn, I8P), ctx, ir.Constant(I64, chunks)])

    def chunk_function(self, kernel_fn, args, rows: int, extent: int):
        """The wrapper running chunk ``c`` (rows ``[c * rows, (c + 1) * rows)`` of
        ``extent``) of ``kernel_fn`` on the thread pool, its arguments in an array."""
        self.kernel_count += 1  # a fresh name: the kernel may be shared with another step
        chunk_fn = ir.Function(self.module, CHUNK_FN,
                               name=f"{kernel_fn.name}_chunk{self.kernel_count}")
        chunk_fn.linkage = "internal"
        chunk_fn.attributes.add("nounwind")
        calls_only_function(chunk_fn)
        cb = ir.IRBuilder(chunk_fn.append_basic_block("entry"))
        ctx = cb.bitcast(chunk_fn.args[0], I8P.as_pointer())
        self.skip_chunk_if_interrupted(cb, ctx, len(args))  # the rest of the job is dropped
        loaded = [cb.bitcast(cb.load(cb.gep(ctx, [ir.Constant(I64, k)], inbounds=True)), a.type)
                  for k, a in enumerate(args)]
        start = cb.mul(chunk_fn.args[1], ir.Constant(I64, rows), flags=["nuw", "nsw"])
        end = cb.add(start, ir.Constant(I64, rows), flags=["nuw", "nsw"])
        end = cb.select(cb.icmp_signed("<", end, ir.Constant(I64, extent)), end,
                        ir.Constant(I64, extent))
        cb.call(kernel_fn, loaded + [start, end])
        cb.ret_void()
        return self.shared(chunk_fn)

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
             interleave=True):
        """``for i in range(extent): body(i)`` (or ``range(*bounds)``, two i64 values within
        ``[0, extent]``); leaves ``b`` after the loop and returns the loop's back edge (the
        branch that carries ``llvm.loop`` hints), or None: extents are static, so an empty
        loop is simply not emitted. ``interleave=False`` asks LLVM to vectorize the loop
        without interleaving its vector iterations (see :meth:`single_vector_loop`)."""
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
        if not interleave:
            latch.set_metadata("llvm.loop", self.single_vector_loop())
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
        (:meth:`accumulate`) keep it: their several accumulators do shorten the chain. Every such loop shares this one node, so
        identical kernels keep identical text (see :meth:`shared`)."""
        if self._single_vector_loop is None:
            self._single_vector_loop = self.loop_id({"llvm.loop.interleave.count": 1})
        return self._single_vector_loop

    def loop_id(self, hints: dict):
        """A new loop ID (``!llvm.loop``) carrying ``hints`` (name -> i32 value), for the
        back edge :meth:`loop` returns."""
        return _LoopID(self.module, [
            self.module.add_metadata([ir.MetaDataString(self.module, name), ir.Constant(I32, value)])
            for name, value in hints.items()])

    def loop_nest(self, b, extents, body, indices=(), bounds=None, interleave=True):
        """Nested loops over ``extents``; ``bounds`` (start, end) limits the outermost."""
        if not extents:
            body(list(indices))
            return
        self.loop(b, extents[0],
                  lambda i: self.loop_nest(b, extents[1:], body, tuple(indices) + (i,),
                                           interleave=interleave),
                  name=f"i{len(indices)}", bounds=bounds, interleave=interleave)

    def emit_loop_kernel(self, b, step: LoopKernel, ptrs, bounds, flag=None, exact=False):
        def body(indices):
            ev = _Evaluator(self, b, indices, ptrs, exact)
            values = [(buf, ev.index(off), ev.scalar(node)) for buf, off, node in step.outputs]
            for buf, off, value in values:
                ev.store(buf, off, value)
            ev.record_guards(flag)

        def value_at(indices):
            ev = _Evaluator(self, b, indices, ptrs, exact)
            value = ev.scalar(step.outputs[0][2])
            ev.record_guards(flag)
            return value
        # the exact path (rare: inputs outside the fast math's domain) keeps plain stores
        streamed = None if exact else streaming_stores.streamed_output(step)
        if streamed is not None:
            streaming_stores.emit_streamed_loops(self, b, step, ptrs[streamed.id], value_at,
                                                 bounds)
        elif step.shape:
            self.loop_nest(b, list(step.shape), body, bounds=bounds, interleave=False)
        else:
            body([])

    def emit_row_group(self, b, step: RowGroup, ptrs, bounds, flag=None, exact=False):
        """For each row (within ``bounds``), each part's loop over the row's columns in turn;
        internal buffers are stack slots of one row (see :mod:`row_fusion`)."""
        rows, width = step.shape
        ptrs = dict(ptrs)
        for buf in step.internal:
            slot = kernel_alloca(b, ir.ArrayType(mem_type(buf.dtype), step.row_slots(buf)))
            ptrs[buf.id] = b.gep(slot, [ir.Constant(I64, 0), ir.Constant(I64, 0)], inbounds=True)

        def row(r):
            for part in step.parts:
                if isinstance(part, LoopKernel):
                    def element(j, part=part):
                        ev = _Evaluator(self, b, [r, j], ptrs, exact)
                        values = [(buf, ev.index(off), ev.scalar(node))
                                  for buf, off, node in part.outputs]
                        for buf, off, value in values:
                            ev.store(buf, off, value)
                        ev.record_guards(flag)
                    self.loop(b, width, element, name="col", interleave=False)
                    continue

                def value_at(idx, part=part):
                    ev = _Evaluator(self, b, idx, ptrs, exact)
                    value = ev.scalar(part.value)
                    ev.record_guards(flag)
                    return ev, value
                dtype = part.out.dtype
                acc = self.accumulate(b, part.monoid, dtype, _identity(part.monoid, dtype), [r],
                                      [width], value_at)
                ev = _Evaluator(self, b, [r, ir.Constant(I64, 0)], ptrs)
                ev.store(part.out, ev.index(part.out_offset), acc)
        self.loop(b, rows, row, name="row", bounds=bounds)

    def emit_reduce_kernel(self, b, step: ReduceKernel, ptrs, bounds, flag=None, exact=False):
        shape, reduced = list(step.shape), list(step.reduced)
        kept = [d for d, r in enumerate(reduced) if not r]
        last_kept = kept[-1] if kept else -1
        outer, inner = shape[:last_kept + 1], shape[last_kept + 1:]
        accumulate_in_memory = any(reduced[:last_kept + 1])
        out, dtype, monoid = step.out, step.out.dtype, step.monoid
        identity = _identity(monoid, dtype)
        if accumulate_in_memory:
            def init(indices):
                ev = _Evaluator(self, b, [], ptrs)
                ev.store(out, indices[0], identity)
            self.loop_nest(b, [out.size], init, interleave=False)

        def outer_body(outer_idx):
            def value_at(idx):
                ev = _Evaluator(self, b, idx, ptrs, exact)
                value = ev.scalar(step.value)
                ev.record_guards(flag)
                return ev, value

            if inner:
                acc = self.accumulate(b, monoid, dtype, identity, list(outer_idx), inner, value_at)
                ev = _Evaluator(self, b, list(outer_idx) + [ir.Constant(I64, 0)] * len(inner), ptrs)
            else:
                ev, acc = value_at(list(outer_idx))
            off = ev.index(step.out_offset)
            if accumulate_in_memory:
                acc = _combine(self, b, monoid, dtype, ev.load(out, off), acc)
            ev.store(out, off, acc)

        if outer:
            # only a kept outermost dimension is ever split into chunks (each chunk then
            # owns its outputs); otherwise the bounds are the whole extent
            self.loop_nest(b, outer, outer_body, bounds=bounds if not reduced[0] else None)
        else:
            outer_body([])

    def accumulate(self, b, monoid, dtype, identity, prefix, extents, value_at):
        """Reduce ``value_at(prefix + inner indices)`` over ``extents`` in a register."""
        if 0 in extents:
            return identity
        fn = b.function
        pre = b.block
        level = len(prefix)
        head = fn.append_basic_block(f"r{level}.loop")
        done = fn.append_basic_block(f"r{level}.done")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, name=f"r{level}")
        acc = b.phi(reg_type(dtype), name=f"acc{level}")
        i.add_incoming(ir.Constant(I64, 0), pre)
        acc.add_incoming(identity, pre)
        if len(extents) == 1:
            _, value = value_at(prefix + [i])
            new_acc = _combine(self, b, monoid, dtype, acc, value)
        else:
            new_acc = self.accumulate(b, monoid, dtype, acc, prefix + [i], extents[1:], value_at)
        nxt = b.add(i, ir.Constant(I64, 1), flags=["nuw", "nsw"])
        i.add_incoming(nxt, b.block)
        acc.add_incoming(new_acc, b.block)
        b.cbranch(b.icmp_signed("<", nxt, ir.Constant(I64, extents[0])), head, done)
        b.position_at_end(done)
        return new_acc

    # ---- matrix products --------------------------------------------------------------------

    def emit_dot(self, b: ir.IRBuilder, step: DotKernel, pointer):
        dtype = step.out.dtype
        a_ptr, b_ptr, c_ptr = pointer(step.lhs), pointer(step.rhs), pointer(step.out)
        k = step.k
        if k == 0:
            if not step.accumulate:
                self.loop(b, step.out.size,
                          lambda i: b.store(constant(dtype, 0), b.gep(c_ptr, [i])),
                          interleave=False)
            return
        if dtype in (np.float32, np.float64):
            self.emit_gemm(b, step, a_ptr, b_ptr, c_ptr)
        elif step.accumulate or step.alpha != 1.0:
            raise NotImplementedError(f"llvm backend: a scaled or accumulating {dtype} product")
        else:
            self.emit_naive_dot(b, step, a_ptr, b_ptr, c_ptr)

    def emit_gemm(self, b, step: DotKernel, a_ptr, b_ptr, c_ptr):
        """Row-major C = op(A) op(B) as the column-major product Cᵀ = op(B)ᵀ op(A)ᵀ: BLAS
        sees our row-major B as its first operand and A as its second. A large product is
        split into chunks (see :func:`gemm_split`) that the thread pool runs, each a
        single-threaded BLAS call: a product large enough for BLAS to thread holds BLAS to
        one thread while it runs (see :mod:`thread_pool`), so that its result never depends
        on the BLAS thread count another thread left behind."""
        if matrix_vector(step):
            held = step.m * step.n * step.k >= BLAS_SERIAL_GEMV_ELEMENTS  # per call
        else:
            held = step.batch * step.m * step.n * step.k > BLAS_SERIAL_MNK
        if held:
            hold = self.math.declare(thread_pool.BLAS_HOLD_SYMBOL, ir.VoidType(), [I32])
            b.call(hold, [ir.Constant(I32, 1)])
        axis, chunks = gemm_split(step)
        if chunks <= 1:
            self.gemm_calls(b, step, a_ptr, b_ptr, c_ptr, lambda ty, v: self.entry_alloca(b, ty))
        else:
            self.emit_split_gemm(b, step, a_ptr, b_ptr, c_ptr, axis, chunks)
        if held:
            b.call(hold, [ir.Constant(I32, 0)])

    def emit_split_gemm(self, b, step: DotKernel, a_ptr, b_ptr, c_ptr, axis: str, chunks: int):
        """The product in ``chunks`` chunks along ``axis``, run by ``ft_gemm_for``. Each
        chunk writes its own block of C with the whole k sum, so which thread runs which
        chunk never changes the result."""
        self.kernel_count += 1
        name = f"gemm{self.kernel_count}_chunk"
        self.names[name] = f"a matrix product {step.describe()}"
        extent = {"batch": step.batch, "m": step.m, "n": step.n}[axis]
        rows = -(-extent // chunks)
        chunks = -(-extent // rows)
        fn = ir.Function(self.module, CHUNK_FN, name=name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        calls_only_function(fn)
        cb = ir.IRBuilder(fn.append_basic_block("entry"))
        ctx = cb.bitcast(fn.args[0], I8P.as_pointer())
        stack = ir.IRBuilder(fn.entry_basic_block)
        stack.position_at_start(fn.entry_basic_block)
        self.skip_chunk_if_interrupted(cb, ctx, 3)
        ptrs = [cb.bitcast(cb.load(cb.gep(ctx, [ir.Constant(I64, k)], inbounds=True)), p.type)
                for k, p in enumerate((a_ptr, b_ptr, c_ptr))]
        start = cb.mul(fn.args[1], ir.Constant(I64, rows), flags=["nuw", "nsw"])
        end = cb.add(start, ir.Constant(I64, rows), flags=["nuw", "nsw"])
        end = cb.select(cb.icmp_signed("<", end, ir.Constant(I64, extent)), end,
                        ir.Constant(I64, extent))
        slot = lambda ty, v: stack.alloca(ty)  # noqa: E731 (stack slots in the entry block)
        self.gemm_calls(cb, step, *ptrs, slot, split=(axis, start, end))
        cb.ret_void()
        fn = self.shared(fn)
        ctx = self.chunk_context(b, (a_ptr, b_ptr, c_ptr))
        gemm_for = self.math.declare(GEMM_FOR_SYMBOL, ir.VoidType(), [I8P, I8P, I64])
        b.call(gemm_for, [b.bitcast(fn, I8P), ctx, ir.Constant(I64, chunks)])

    def gemm_calls(self, b, step: DotKernel, a_ptr, b_ptr, c_ptr, new_slot, split=None):
        """The BLAS call(s) of ``step`` at ``b``: all of it, or with ``split = (axis, start,
        end)`` (i64 values) the batch elements, rows of C ("m") or columns of C ("n") in
        ``[start, end)``. ``new_slot(type, None)`` makes a stack slot."""
        ty = F32 if step.out.dtype == np.float32 else F64
        tp = ty.as_pointer()
        i32p = I32.as_pointer()
        gemm = self.math.declare("ft_sgemm" if ty == F32 else "ft_dgemm", ir.VoidType(),
                                 [I8P, I8P, i32p, i32p, i32p, tp, tp, i32p, tp, i32p, tp, tp, i32p])
        m, n, k = step.m, step.n, step.k
        axis, start, end = split if split is not None else (None, None, None)

        # Fortran passes every argument by reference: stack slots (in the entry block: a
        # product inside a loop body must not grow the stack per iteration)
        def slot(ty_, value):
            if split is None and not isinstance(value, ir.Value):
                return self.constant_slot(b, ty_, value)
            p = new_slot(ty_, None)
            b.store(value if isinstance(value, ir.Value) else ir.Constant(ty_, value), p)
            return p

        def i64(v):
            return ir.Constant(I64, v)

        size = b.trunc(b.sub(end, start), I32) if axis in ("m", "n") else None
        args = dict(
            trans_b=slot(I8, ord("T" if step.rhs_transposed else "N")),
            trans_a=slot(I8, ord("T" if step.lhs_transposed else "N")),
            m=slot(I32, size if axis == "n" else n), n=slot(I32, size if axis == "m" else m),
            k=slot(I32, k),
            lda=slot(I32, max(1, k if step.rhs_transposed else n)),
            ldb=slot(I32, max(1, m if step.lhs_transposed else k)),
            ldc=slot(I32, max(1, n)), alpha=slot(ty, step.alpha),
            beta=slot(ty, 1.0 if step.accumulate else 0.0))

        vector = matrix_vector(step)
        if vector:
            gemv = self.math.declare("ft_sgemv" if ty == F32 else "ft_dgemv", ir.VoidType(),
                                     [I8P, i32p, i32p, tp, tp, i32p, tp, i32p, tp, tp, i32p])
            unit = slot(I32, 1)
            # BLAS reads our row-major B as the column-major matrix B_cm = Bᵀ (and A as Aᵀ;
            # see emit_gemm). With m == 1, y = op(B)ᵀ x (x the row of A) is gemv of B_cm,
            # transposed when B is stored transposed; with n == 1, y = op(A) x (x the column
            # of B) is gemv of A_cm, transposed unless A is stored transposed. (rows, cols):
            # the matrix as stored, column-major.
            matrix_is_b = vector == "m"
            if matrix_is_b:
                flip = step.rhs_transposed
                rows, cols = (args["k"], args["m"]) if flip else (args["m"], args["k"])
            else:
                flip = not step.lhs_transposed
                rows, cols = (args["k"], args["n"]) if flip else (args["n"], args["k"])
            trans = slot(I8, ord("T" if flip else "N"))

        def call(a, bb, c):
            if axis == "m":  # rows start.. of op(A) and of C
                a = b.gep(a, [start if step.lhs_transposed else b.mul(start, i64(k))])
                c = b.gep(c, [b.mul(start, i64(n))])
            elif axis == "n":  # columns start.. of op(B) and of C
                bb = b.gep(bb, [b.mul(start, i64(k)) if step.rhs_transposed else start])
                c = b.gep(c, [start])
            if vector:
                matrix, ld, x = (bb, args["lda"], a) if matrix_is_b else (a, args["ldb"], bb)
                b.call(gemv, [trans, rows, cols, args["alpha"], matrix, ld, x, unit,
                              args["beta"], c, unit])
                return
            b.call(gemm, [args["trans_b"], args["trans_a"], args["m"], args["n"], args["k"],
                          args["alpha"], bb, args["lda"], a, args["ldb"], args["beta"], c,
                          args["ldc"]])

        def one(bi):
            if bi is None:
                return call(a_ptr, b_ptr, c_ptr)
            call(b.gep(a_ptr, [b.mul(bi, i64(m * k))]), b.gep(b_ptr, [b.mul(bi, i64(k * n))]),
                 b.gep(c_ptr, [b.mul(bi, i64(m * n))]))

        if axis == "batch":
            self.loop(b, step.batch, one, name="batch", bounds=(start, end))
        elif step.batch == 1:
            one(None)
        else:
            self.loop(b, step.batch, one, name="batch")

    def emit_naive_dot(self, b, step: DotKernel, a_ptr, b_ptr, c_ptr):
        """Integer products: C[b,i,j] = sum_k A[b,i,k] * B[b,k,j], with j innermost."""
        m, n, k = step.m, step.n, step.k
        dtype = step.out.dtype
        self.loop(b, step.out.size, lambda i: b.store(constant(dtype, 0), b.gep(c_ptr, [i])))
        c64 = lambda v: ir.Constant(I64, v)  # noqa: E731

        def body(idx):
            bi, i, kk, j = idx
            a_off = (b.add(b.mul(bi, c64(m * k)), b.add(b.mul(kk, c64(m)), i)) if step.lhs_transposed
                     else b.add(b.mul(bi, c64(m * k)), b.add(b.mul(i, c64(k)), kk)))
            b_off = (b.add(b.mul(bi, c64(k * n)), b.add(b.mul(j, c64(k)), kk)) if step.rhs_transposed
                     else b.add(b.mul(bi, c64(k * n)), b.add(b.mul(kk, c64(n)), j)))
            c_off = b.add(b.mul(bi, c64(m * n)), b.add(b.mul(i, c64(n)), j))
            av = b.load(b.gep(a_ptr, [a_off]))
            bv = b.load(b.gep(b_ptr, [b_off]))
            cp = b.gep(c_ptr, [c_off])
            b.store(b.add(b.load(cp), b.mul(av, bv)), cp)

        self.loop_nest(b, [step.batch, m, k, n], body)




# A matrix product is split across the thread pool into a fixed number of chunks (each a
# single-threaded BLAS call, claimed dynamically). The split depends only on the product's
# shape and the pool's thread count, never on which threads are free, so results do not
# change from run to run. Products from GEMM_SPLIT_MIN_FLOPS up are split (from about there
# OpenBLAS would thread them itself, which the hold rules out), into chunks of at least
# GEMM_CHUNK_FLOPS: one per thread, or, from GEMM_FINE_SPLIT_FLOPS (milliseconds of work),
# GEMM_CHUNKS_PER_THREAD per thread, so that a thread that loses its core to another process
# holds up one chunk, not half the product, while the others take the rest. (Smaller
# products are not worth it: each chunk re-packs an operand, and on a busy machine the pool
# runs short jobs on the calling thread alone; see thread_pool.) A split of rows or columns
# re-packs the operand the chunks share once per chunk, so each such chunk keeps at least
# GEMM_CHUNK_EXTENT rows or columns (more when that operand is large); a batch of products
# re-packs nothing. Chunks
# beyond one per thread are only cut where each keeps GEMM_FINE_CHUNK_EXTENT rows or
# columns: with other processes on the cores, the 2048-row products of a transformer layer
# ran 5-10% faster in two chunks than in eight of 256 rows (whose re-packing competes for
# the shared cache), and on a quiet machine the two tie.
GEMM_SPLIT_MIN_FLOPS = 1 << 20
GEMM_CHUNK_FLOPS = 1 << 19
GEMM_CHUNKS_PER_THREAD = 4
GEMM_FINE_SPLIT_FLOPS = 1 << 28
GEMM_CHUNK_EXTENT = 128
GEMM_FINE_CHUNK_EXTENT = 1024
GEMM_MAX_CHUNKS = 64
GEMM_FOR_SYMBOL = "ft_gemm_for"
# OpenBLAS runs a product of m * n * k up to this on one thread whatever its thread count
# (SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD in its interface/gemm.c): no hold needed
BLAS_SERIAL_MNK = 65536 * 4
# ... and a matrix-vector product whose matrix has fewer elements than this (2304 *
# GEMM_MULTITHREAD_THRESHOLD in its interface/gemv.c)
BLAS_SERIAL_GEMV_ELEMENTS = 2304 * 4


class _LoopID(ir.values.MDValue):
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


def kernel_structure(step, buffers) -> tuple:
    """A key equal for two kernels exactly when they compile to the same function: their
    loops, expressions and buffer types, with buffers named by their position among the
    function's arguments (``buffers``)."""
    position = {b.id: k for k, b in enumerate(buffers)}
    if isinstance(step, RowGroup):
        position.update((b.id, ("row", k)) for k, b in enumerate(step.internal))
    ids: dict = {}
    nodes = []

    def canon(x):
        if isinstance(x, (E.IndexExpr, E.ScalarExpr)):
            return ids[x]
        if isinstance(x, Buffer):
            return ("buffer", position[x.id])
        if isinstance(x, (tuple, list)):
            return tuple(canon(y) for y in x)
        return (type(x).__name__, repr(x))  # repr: 0.0 and -0.0 differ, as do int and float

    def frame(part):
        if isinstance(part, LoopKernel):
            roots = [r for _, off, v in part.outputs for r in (off, v)]
            fields = ("loop", part.shape, tuple(position[b.id] for b, _, _ in part.outputs))
        elif isinstance(part, ReduceKernel):
            roots = [part.value, part.out_offset]
            fields = ("reduce", part.shape, part.reduced, part.monoid, position[part.out.id])
        else:
            return ("rows", part.shape, tuple(frame(p) for p in part.parts))
        for node in E.postorder(roots):
            if node not in ids:
                ids[node] = len(nodes)
                nodes.append((node.kind, canon(node.args), str(getattr(node, "dtype", ""))))
        return fields + (tuple(ids[r] for r in roots),)

    shape = frame(step)
    return (shape, tuple(nodes), tuple((b.dtype.str, b.shape) for b in buffers),
            tuple((b.dtype.str, b.shape) for b in getattr(step, "internal", ())))


def calls_only(step) -> bool:
    """Whether ``step``'s code in a segment is only a call: a kernel (run by
    :meth:`ModuleBuilder.call_kernel`) or a floating-point product (BLAS)."""
    if isinstance(step, DotKernel):
        return step.k > 0 and step.out.dtype in (np.float32, np.float64)
    return isinstance(step, (LoopKernel, ReduceKernel, RowGroup))


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


def matrix_vector(step: DotKernel) -> str | None:
    """Whether a float product is a matrix times a vector, BLAS's ``gemv``: "m" when C has
    one row (a batch-1 dense layer, ``x @ w``), "n" when it has one column (``w @ x``), else
    None. OpenBLAS's ``gemm`` with one row or column packs its operands as for a matrix
    product: ``gemv`` reads the matrix once, in place (measured: docs/performance.md).
    None too with the optimization ``matrix_vector`` disabled (see ``disable_passes``)."""
    if not passes.enabled("matrix_vector"):
        return None
    if step.m == 1:
        return "m"
    if step.n == 1:
        return "n"
    return None


def gemm_split(step: DotKernel, threads: int | None = None) -> tuple:
    """``(axis, chunks)``: how a product is split for ``threads`` threads (default: the thread
    pool's), over "batch" elements, rows of C ("m") or columns of C ("n") (the longer side:
    each chunk re-packs the other operand); ``chunks`` is 1 for a product run by one BLAS
    call. On two threads, a 128x784 by 784x512 product: ``("n", 2)``, two chunks of 256
    columns; an 8192x512 by 512x512 one: ``("m", 8)``, eight chunks of 1024 rows."""
    threads = thread_pool.compiled_threads() if threads is None else threads
    flops = 2 * step.batch * step.m * step.n * step.k
    if threads < 2 or flops < GEMM_SPLIT_MIN_FLOPS:
        return None, 1
    per_thread = GEMM_CHUNKS_PER_THREAD if flops >= GEMM_FINE_SPLIT_FLOPS else 1
    wanted = min(flops // GEMM_CHUNK_FLOPS, threads * per_thread, GEMM_MAX_CHUNKS)
    if step.batch > 1:
        chunks = min(step.batch, wanted)
    else:
        axis, extent, other = ("n", step.n, step.m) if step.n >= step.m else ("m", step.m, step.n)
        chunks = min(extent // max(GEMM_CHUNK_EXTENT, other // 4), wanted)
        if chunks > threads:
            chunks = max(threads, min(chunks, extent // GEMM_FINE_CHUNK_EXTENT))
    if chunks > threads:
        chunks -= chunks % threads  # whole rounds, for balance on a quiet machine
    if chunks < 2:
        return None, 1
    return ("batch" if step.batch > 1 else axis), int(chunks)


def splits_products(program: Program) -> bool:
    """Whether ``program`` (or a loop body in it) runs a matrix product or a convolution on
    the thread pool (its other products then keep BLAS to one thread)."""
    programs = [program] + [body.program for body in nested_programs(program)]
    return any((isinstance(s, DotKernel) and s.out.dtype in (np.float32, np.float64)
                and gemm_split(s)[1] > 1) or (isinstance(s, ConvolutionStep) and s.chunks() > 1)
               for p in programs for s in p.steps)


def parallel_chunks(step, min_elements: int = PARALLEL_MIN_ELEMENTS) -> int:
    """How many chunks of its outermost loop a kernel is split into (1: run it serially):
    none below ``min_elements``.

    Only loops whose chunks write disjoint outputs qualify: an elementwise loop, or a
    reduction whose outermost dimension is kept and whose reduced dimensions all come after
    the kept ones (so each output element is finished by one thread)."""
    if not step.shape or step.shape[0] < 2 or thread_pool.compiled_threads() < 2:
        return 1
    size = int(np.prod(step.shape, dtype=np.int64))
    if size < min_elements:
        return 1
    if isinstance(step, ReduceKernel):
        kept = [d for d, r in enumerate(step.reduced) if not r]
        if step.reduced[0] or any(step.reduced[:kept[-1] + 1]):
            return 1
    elif not isinstance(step, (LoopKernel, RowGroup)):  # a group's rows are independent
        return 1
    return int(min(step.shape[0], max(2, size // CHUNK_ELEMENTS)))


# =============================================================================================
# Reductions
# =============================================================================================


def _identity(monoid: str, dtype):
    dtype = np.dtype(dtype)
    if monoid in ("add", "or", "xor"):
        return constant(dtype, 0)
    if monoid == "mul":
        return constant(dtype, 1)
    if monoid == "and":
        return constant(dtype, True) if dtype == np.bool_ else constant(dtype, -1)
    if dtype == np.bool_:
        return constant(dtype, monoid == "min")
    if dtype.kind == "f":
        return constant(dtype, -np.inf if monoid == "max" else np.inf)
    info = np.iinfo(dtype)
    return constant(dtype, info.min if monoid == "max" else info.max)


def _combine(mb: ModuleBuilder, b: ir.IRBuilder, monoid: str, dtype, acc, value):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        if monoid == "add":
            r = b.fadd(acc, value)
            r.flags.append("reassoc")  # lets the vectorizer keep partial sums per lane
            return r
        if monoid == "mul":
            r = b.fmul(acc, value)
            r.flags.append("reassoc")
            return r
        name = "llvm.maximum" if monoid == "max" else "llvm.minimum"
        return mb.math.intrinsic(b, name, acc.type, acc, value)
    if dtype == np.bool_:
        op = {"add": "or_", "mul": "and_", "max": "or_", "min": "and_", "and": "and_",
              "or": "or_", "xor": "xor"}[monoid]
        return getattr(b, op)(acc, value)
    if monoid in ("add", "mul", "and", "or", "xor"):
        return getattr(b, {"add": "add", "mul": "mul", "and": "and_", "or": "or_",
                           "xor": "xor"}[monoid])(acc, value)
    cmp = b.icmp_signed if dtype.kind == "i" else b.icmp_unsigned
    return b.select(cmp(">" if monoid == "max" else "<", acc, value), acc, value)


# =============================================================================================
# Expression evaluation inside a loop body
# =============================================================================================


class _Evaluator:
    """Emits the code of expression nodes at given loop indices, each node once."""

    def __init__(self, mb: ModuleBuilder, b: ir.IRBuilder, indices, ptrs, exact=False):
        self.mb, self.b = mb, b
        self.indices = list(indices)
        self.ptrs = ptrs
        self.memo: dict = {}
        self.ctx = ScalarContext(b, mb.math, exact)

    def record_guards(self, flag):
        """OR this element's "needs the exact path" conditions into ``flag``."""
        if flag is None or not self.ctx.guards:
            return
        any_guard = self.ctx.guards[0]
        for g in self.ctx.guards[1:]:
            any_guard = self.b.or_(any_guard, g)
        self.b.store(self.b.or_(self.b.load(flag), any_guard), flag)

    def index(self, node) -> ir.Value:
        self.evaluate(node)
        return self.memo[node]

    def scalar(self, node) -> ir.Value:
        self.evaluate(node)
        return self.memo[node]

    def evaluate(self, root):
        if root in self.memo:
            return
        for node in E.postorder([root]):
            if node in self.memo:
                continue
            if isinstance(node, E.IndexExpr):
                self.memo[node] = self.emit_index(node)
            else:
                self.memo[node] = self.emit_scalar(node)

    def emit_index(self, x: E.IndexExpr):
        b, k, a = self.b, x.kind, x.args
        c = lambda v: ir.Constant(I64, v)  # noqa: E731
        if k == "const":
            return c(a[0])
        if k == "var":
            return self.indices[a[0]]
        if k == "lin":
            acc = None
            for term, coef in a[0]:
                v = self.memo[term]
                v = v if coef == 1 else b.mul(v, c(coef), flags=["nsw"])
                acc = v if acc is None else b.add(acc, v, flags=["nsw"])
            return b.add(acc, c(a[1]), flags=["nsw"]) if a[1] else acc
        if k == "div":
            v, d = self.memo[a[0]], c(a[1])
            if a[0].lo >= 0:
                return b.sdiv(v, d)
            q = b.sdiv(v, d)
            r = b.srem(v, d)
            return b.select(b.icmp_signed("<", r, c(0)), b.sub(q, c(1)), q)
        if k == "mod":
            v, d = self.memo[a[0]], c(a[1])
            r = b.srem(v, d)
            if a[0].lo >= 0:
                return r
            return b.select(b.icmp_signed("<", r, c(0)), b.add(r, d), r)
        if k in ("min", "max"):
            x0, x1 = self.memo[a[0]], self.memo[a[1]]
            return b.select(b.icmp_signed("<" if k == "min" else ">", x0, x1), x0, x1)
        if k == "scalar":
            s = a[0]
            v = self.memo[s]
            width = v.type.width
            if s.dtype.kind == "u":
                v = v if width == 64 else b.zext(v, I64)
                if width == 64:  # values past int64 act as "very large"
                    v = b.select(b.icmp_signed("<", v, c(0)), c(2 ** 63 - 1), v)
                return v
            if s.dtype == np.bool_:
                return b.zext(v, I64)
            return v if width == 64 else b.sext(v, I64)
        raise NotImplementedError(f"index node {k}")

    def emit_scalar(self, node: E.ScalarExpr):
        b, k, a = self.b, node.kind, node.args
        if k == "load":
            return self.load(a[0], self.memo[a[1]])
        if k == "const":
            return constant(node.dtype, a[0])
        if k == "op":
            name, params, args = a
            return scalar_ops.emit(self.ctx, name, dict(params), [self.memo[x] for x in args],
                                   [x.dtype for x in args], node.dtype)
        if k == "iota":
            v = self.memo[a[0]]
            if node.dtype.kind == "f":
                return b.sitofp(v, reg_type(node.dtype))
            ty = reg_type(node.dtype)
            return b.trunc(v, ty) if ty.width < 64 else v
        if k == "compare":
            op = {"lt": "<", "le": "<=", "eq": "==", "ne": "!=", "ge": ">=", "gt": ">"}[a[0]]
            return b.icmp_signed(op, self.memo[a[1]], self.memo[a[2]])
        raise NotImplementedError(f"scalar node {k}")

    def load(self, buf: Buffer, offset):
        v = self.b.load(self.b.gep(self.ptrs[buf.id], [offset], inbounds=True))
        if buf.dtype == np.bool_:
            return self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
        return v

    def store(self, buf: Buffer, offset, value):
        if buf.dtype == np.bool_:
            value = self.b.zext(value, I8)
        self.b.store(value, self.b.gep(self.ptrs[buf.id], [offset], inbounds=True))

