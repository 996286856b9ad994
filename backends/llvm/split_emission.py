"""A program's machine code emitted as several objects at once, on several threads.

LLVM selects instructions and allocates registers one function at a time, once the whole
module is optimized; for a program's kernels that is about half of LLVM's time. So the
program's module is optimized as one, exactly as before (the inliner, and the
interprocedural constant propagation that specializes a kernel to the bounds its callers
pass, see every call), and its functions are then shared out among several code
generators, as LLVM's own parallel code generation for link-time optimization does. Each
*partition* (:func:`partition`) is the optimized module with the other partitions'
functions declared instead of defined; it is parsed into an LLVM context of its own and
emitted by a target machine of its own, and the objects are linked together (see
:mod:`linker`). Each function's machine code is the same as in one object.

The partitions are balanced by the size of their functions (an ``optnone`` function,
which the fast instruction selector compiles, counts a quarter). A program splits only
when each partition gets at least ``MIN_PART_LINES`` of code (a small program's objects
would cost more to set up than to emit), into at most as many partitions as threads run
a parallel loop (``FUNCTRANS_NUM_THREADS``, else the CPUs this process may use: see
:func:`thread_pool.num_threads`), and at most ``MAX_PARTS``.

llvmlite serializes every call into LLVM behind one process-wide lock. Emitting a
partition touches nothing but its own context, module and target machine, which LLVM
allows from several threads at once, so that call alone is made past the lock
(:func:`_emit`). The calling thread emits the first partition itself; a KeyboardInterrupt
or an error in any thread is raised once every thread has finished.

    >>> objects, optimized_ir = optimize_and_emit(ir_text, names)   # doctest: +SKIP
"""
from __future__ import annotations

import ctypes
import logging
import re
import threading

from functrans.backends.llvm import machine_code, targets, thread_pool

logger = logging.getLogger("functrans")

# Lines of optimized IR each partition must get (counted as below): about 10 ms of a
# code generator's time, against about 2 ms to set a partition up (its text, parsing it, a
# thread, one more object to link).
MIN_PART_LINES = 300
MAX_PARTS = 4
_OPTNONE_SHARE = 0.25

# a function definition of LLVM's printing: its header line, its body, the closing brace
_DEFINITION = re.compile(r"^define [^\n]*\{\n.*?^\}\n", re.MULTILINE | re.DOTALL)
_NAME = re.compile(r'@("(?:[^"\\]|\\.)*"|[-\w.$]+)\(')
_REFERENCE = re.compile(r'@("(?:[^"\\]|\\.)*"|[-\w.$]+)')
_ATTRIBUTE_GROUP = re.compile(r"^attributes #(\d+) = \{([^\n]*)\}$", re.MULTILINE)
_GROUP_USE = re.compile(r"#(\d+)")
# a global variable that code may write, and whose every use must therefore see one copy
_LOCAL_VARIABLE = re.compile(r"^@[^\n=]*= (?:internal|private) (?:[\w()]+ )*global ",
                             re.MULTILINE)
_UNSPLITTABLE = re.compile(r"^(?:\$|@[^\n=]*= [^\n]*\b(?:alias|ifunc)\b)", re.MULTILINE)
_LOCAL_LINKAGE = re.compile(r"^define (?:internal|private) ")


def optimize_and_emit(ir_text: str, names: dict, target=None) -> tuple[list, str]:
    """:func:`machine_code.optimize_and_emit`, with the machine code as a list of objects
    emitted in parallel when the program is large enough (see the module doc). Returns
    (objects, optimized IR)."""
    tm = machine_code.target_machine(target)
    with machine_code._llvm_lock:
        module = machine_code.optimized_module(ir_text, names, tm)
        optimized = str(module)
        texts = None
        if _raw_emit() is not None:
            texts = partition(optimized, parts_for(optimized))
        if texts is None:
            return [tm.emit_object(module)], optimized
        machines = [tm] + _worker_machines(targets.resolve(target), len(texts) - 1)
        try:
            return _emit_in_parallel(texts, machines), optimized
        except RuntimeError as err:  # a partition LLVM refused: a bug here, never fatal
            logger.warning("functrans: emitting the program in parts failed (%s); emitting "
                           "it whole", err)
            return [tm.emit_object(module)], optimized


def parts_for(optimized: str) -> int:
    """How many partitions to emit ``optimized`` (the optimized module's text) as."""
    size = sum(_sizes(optimized).values())
    return max(1, min(thread_pool.num_threads(), MAX_PARTS, int(size // MIN_PART_LINES)))


def _sizes(text: str) -> dict:
    """Each function defined in ``text``: its name -> the lines of its body, an ``optnone``
    one's counted at ``_OPTNONE_SHARE``."""
    optnone = {m.group(1) for m in _ATTRIBUTE_GROUP.finditer(text)
               if "optnone" in m.group(2).split()}
    sizes = {}
    for m in _DEFINITION.finditer(text):
        header = m.group(0).split("\n", 1)[0]
        groups = _GROUP_USE.findall(header)
        share = _OPTNONE_SHARE if groups and groups[-1] in optnone else 1.0
        sizes[_NAME.search(header).group(1)] = share * m.group(0).count("\n")
    return sizes


def partition(text: str, parts: int):
    """The optimized module ``text`` as ``parts`` module texts, each defining a share of its
    functions (balanced by size) and declaring the others it uses; a function used from
    another partition gets external linkage with hidden visibility. None when ``parts`` is
    1 or the module cannot be split (a global variable of its own, which every partition
    would otherwise copy; an alias; a comdat)."""
    if parts < 2 or _LOCAL_VARIABLE.search(text) or _UNSPLITTABLE.search(text):
        return None
    sizes = _sizes(text)
    if len(sizes) < parts:
        return None
    owner, loads = {}, [0.0] * parts
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):  # the largest first
        k = loads.index(min(loads))
        owner[name] = k
        loads[k] += sizes[name]
    shared = set()  # functions used outside their own partition
    for m in _DEFINITION.finditer(text):
        definition = m.group(0)
        k = owner[_NAME.search(definition).group(1)]
        shared.update(name for name in _REFERENCE.findall(definition.split("\n", 1)[1])
                      if name in owner and owner[name] != k)

    def text_of(k: int) -> str:
        def rewrite(m):
            definition = m.group(0)
            header, body = definition.split("\n", 1)
            name = _NAME.search(header).group(1)
            if name in shared:
                header = _LOCAL_LINKAGE.sub("define hidden ", header)
            if owner[name] == k:
                return f"{header}\n{body}"
            if name not in shared:
                return ""  # used in its own partition only
            declaration = re.sub(r"\s*\{$", "", "declare" + header[len("define"):])
            declaration = re.sub(r" (?:local_)?unnamed_addr\b", "", declaration)
            return declaration + "\n"
        return _DEFINITION.sub(rewrite, text)

    return [text_of(k) for k in range(parts)]


# ---- emission ---------------------------------------------------------------------------------

_workers: dict = {}  # target name -> the target machines of the threads besides the caller


def _worker_machines(target, count: int) -> list:
    """``count`` target machines of ``target`` for the emitting threads (one each: a target
    machine emits one module at a time), kept for the next programs. The caller holds
    ``machine_code._llvm_lock``."""
    machines = _workers.setdefault(target.name, [])
    while len(machines) < count:
        machines.append(machine_code.create_target_machine(target=target))
    return machines[:count]


_raw: list = []


def _raw_emit():
    """llvmlite's C function that emits a module, without the lock its Python wrapper takes,
    or None (an llvmlite that does not wrap its functions so: the program is then emitted
    whole)."""
    if not _raw:
        from llvmlite.binding import ffi
        _raw.append(getattr(ffi.lib.LLVMPY_TargetMachineEmitToMemory, "_cfn", None))
    return _raw[0]


def _emit(text: str, tm) -> bytes:
    """The object of the module ``text``, parsed into a context of its own and emitted by
    ``tm`` past llvmlite's lock (nothing else uses the context, the module or ``tm``)."""
    import llvmlite.binding as llvm
    from llvmlite.binding import ffi
    module = llvm.parse_assembly(text, context=llvm.create_context())
    module.verify()
    with ffi.OutputString() as error:
        buffer = _raw_emit()(tm, module, 1, error)
        if not buffer:
            raise RuntimeError(str(error))
    try:
        return ctypes.string_at(ffi.lib.LLVMPY_GetBufferStart(buffer),
                                ffi.lib.LLVMPY_GetBufferSize(buffer))
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)


def _emit_in_parallel(texts: list, machines: list) -> list:
    """The objects of the module ``texts``, the first emitted on this thread and each other
    on a thread of its own, with ``machines[k]`` emitting ``texts[k]``."""
    objects, errors = [None] * len(texts), []

    def emit(k):
        try:
            objects[k] = _emit(texts[k], machines[k])
        except BaseException as err:  # noqa: BLE001 (raised on the calling thread, below)
            errors.append(err)

    threads = [threading.Thread(target=emit, args=(k,), daemon=True,
                                name=f"functrans-emit-{k}") for k in range(1, len(texts))]
    for thread in threads:
        thread.start()
    try:
        emit(0)
    finally:
        for thread in threads:
            thread.join()
    if errors:
        # a KeyboardInterrupt on this thread first: Ctrl-C stops the compile
        raise next((e for e in errors if isinstance(e, KeyboardInterrupt)), errors[0])
    return objects
