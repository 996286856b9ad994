"""LLVM itself: its one-time setup, the target machines, and IR -> optimized machine code.

Everything here runs LLVM through ``llvmlite.binding``, imported inside the functions that
need it: a process whose programs all come from the on-disk cache never loads LLVM (see
:mod:`cache`). One process-wide lock (``_llvm_lock``) serializes the work on what threads
share (the target machines of :func:`target_machine`); a module in a context of its own,
with a target machine of its own, is compiled past it (:func:`emitted`).

    >>> obj, optimized_ir = optimize_and_emit(ir_text, names)    # doctest: +SKIP
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import sys
import tempfile
import threading

from functrans.backends.llvm import cache, targets


class LLVMCompileError(RuntimeError):
    """LLVM rejected the code generated for a program (a bug in this backend). The message
    names the primitives of the failing kernel and where the IR was written."""


# =============================================================================================
# LLVM setup (once per process)
# =============================================================================================

_llvm_lock = threading.RLock()
_initialized = False


def initialize() -> None:
    """Set LLVM up for the host (once per process)."""
    global _initialized
    if _initialized:  # set after the setup: a support object made on its own thread (see
        return        # pipeline) must not wait for a program compiling under the lock
    with _llvm_lock:
        if not _initialized:
            import llvmlite.binding as llvm
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _initialized = True


def load_library_ahead():
    """Start mapping LLVM's shared library (``libllvmlite.so``: its relocations and static
    initializers, 8-11 ms) on a thread of its own, or return None where it is loaded
    already or cannot be found. The thread calls ``dlopen`` through ctypes, which releases
    the GIL, so the calling thread runs Python meanwhile; ``import llvmlite.binding`` then
    finds the library mapped. (Its own Python, 13-14 ms, holds the GIL: not done here.)
    The caller joins the thread before importing ``llvmlite.binding``."""
    if "llvmlite.binding" in sys.modules or os.name != "posix":
        return None
    spec = importlib.util.find_spec("llvmlite")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(spec.submodule_search_locations[0], "binding",
                        "libllvmlite.dylib" if sys.platform == "darwin" else "libllvmlite.so")
    if not os.path.exists(path):
        return None
    thread = threading.Thread(target=_map_library, args=(path,), daemon=True,
                              name="functrans-llvm-library")
    thread.start()
    return thread


def _map_library(path: str) -> None:
    try:
        dlopen = ctypes.CDLL(None).dlopen
        dlopen.argtypes, dlopen.restype = [ctypes.c_char_p, ctypes.c_int], ctypes.c_void_p
        # the flags ctypes.CDLL uses, as llvmlite's loading will: the same mapping
        dlopen(os.fsencode(path), os.RTLD_NOW | os.RTLD_LOCAL)
    except (OSError, AttributeError):  # llvmlite loads it itself
        pass


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


_support_objects: dict = {}  # (label, builder's name) -> the object, once made or read
_support_locks: dict = {}
_support_locks_lock = threading.Lock()


def support_object(label: str, build, built=None) -> bytes:
    """The machine code of a runtime support module (the thread pool, the SIGINT handler)
    whose IR is ``build(triple)``: from the on-disk compilation cache when an earlier
    process compiled it (the module's text is then not even built: this backend's source,
    in the key, determines it). It runs in this process only: compiled for this CPU,
    whatever target the programs that call it are compiled for (its code depends on the
    host CPU alone: not on the thread count or the array layout that programs bake in).
    Made once per process; a caller that comes while another thread makes it (a compile
    that prepares it ahead, see ``pipeline``) waits for that. ``built``, if given, is
    called once the module's text is built, before LLVM compiles it (not when the object
    is made by another caller or read from the cache)."""
    name = (label, build.__name__)
    with _support_locks_lock:
        lock = _support_locks.setdefault(name, threading.Lock())
    with lock:
        obj = _support_objects.get(name)
        if obj is None:
            obj = _support_objects[name] = _support_object(label, build, built)
        return obj


def _support_object(label: str, build, built) -> bytes:
    host = targets.host()
    key = cache.Key({"kind": "support", "label": label, "build": build.__name__,
                     "target": host.description, "source": cache.source_digest(),
                     "abi": cache.CODE_ABI})
    entry = cache.load(key)
    if entry is not None:
        return entry[0]["object"]
    initialize()
    # straight-line waiting and claiming code: the unoptimizing code generator emits it in
    # a quarter of the time. A module, context and target machine of its own: it is made
    # past the locks (see emitted), while a program compiles on another thread.
    tm = create_target_machine(opt=0, target=host)
    text = build(tm.triple)
    if built is not None:
        built()
    obj = emitted(parsed(text), tm)
    cache.store(key, {"object": obj}, {})
    return obj


# ---- LLVM past llvmlite's lock -----------------------------------------------------------------
#
# llvmlite serializes every call into LLVM behind one process-wide lock. LLVM itself lets
# several threads work at once on modules of their own, each in a context of its own with
# a target machine of its own; the long calls on such a module (optimizing it, emitting
# it) are made past llvmlite's lock, so that they run at once (see parallel_compile).

_raw: dict = {}


def unlocked(name: str):
    """llvmlite's C function ``name`` without the lock its Python wrapper takes, or None (an
    llvmlite that does not wrap its functions so)."""
    if name not in _raw:
        from llvmlite.binding import ffi
        _raw[name] = getattr(getattr(ffi.lib, name), "_cfn", None)
    return _raw[name]


def parsed(text: str):
    """The module ``text`` parsed (and verified) into an LLVM context of its own."""
    import llvmlite.binding as llvm
    module = llvm.parse_assembly(text, context=llvm.create_context())
    module.verify()
    return module


def emitted(module, tm) -> bytes:
    """``tm.emit_object(module)``, past llvmlite's lock where llvmlite allows it (the
    caller's module and ``tm`` are used by no other thread)."""
    raw = unlocked("LLVMPY_TargetMachineEmitToMemory")
    if raw is None:
        return tm.emit_object(module)
    from llvmlite.binding import ffi
    with ffi.OutputString() as error:
        buffer = raw(tm, module, 1, error)
        if not buffer:
            raise RuntimeError(str(error))
    try:
        return ctypes.string_at(ffi.lib.LLVMPY_GetBufferStart(buffer),
                                ffi.lib.LLVMPY_GetBufferSize(buffer))
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)


def optimize_and_emit(ir_text: str, names: dict, target=None) -> tuple[bytes, str]:
    """Parse, verify, optimize (O2, loop and SLP vectorization) and compile ``ir_text`` to
    an object file for ``target`` (default: the CPU being compiled for). Returns (object
    bytes, optimized IR)."""
    tm = target_machine(target)
    with _llvm_lock:
        mod = optimized_module(ir_text, names, tm)
        return tm.emit_object(mod), str(mod)


def optimized_module(ir_text: str, names: dict, tm):
    """``ir_text`` parsed, verified and optimized (O2, loop and SLP vectorization) for the
    target machine ``tm``: an ``llvmlite.binding`` module. The caller holds ``_llvm_lock``."""
    import llvmlite.binding as llvm
    try:
        mod = llvm.parse_assembly(ir_text)
        mod.verify()
    except RuntimeError as err:
        raise _compile_error(ir_text, str(err), names) from None
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=2)
    tune(pto)
    pb = llvm.create_pass_builder(tm, pto)
    pipeline = pb.getModulePassManager()
    try:
        pipeline.run(mod, pb)
    finally:
        _free_pass_manager(pipeline)
    return mod


def tune(options) -> None:
    """Set llvmlite's pipeline tuning ``options`` (O2) as every program is optimized: loop
    and SLP vectorization, no unrolling."""
    options.loop_vectorization = True
    options.slp_vectorization = True
    options.loop_unrolling = False


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

