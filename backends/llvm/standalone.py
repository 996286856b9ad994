"""Standalone shared libraries: compiled programs as a ``.so`` with a C entry point.

A program is compiled as for ``jit`` (:func:`pipeline.plan_native`, then
:class:`codegen.ModuleBuilder`), and the machine code is linked by the system C compiler
(``cc -shared``) into a library that needs neither Python nor functrans:

* each entry point's LLVM module is renamed apart (``ft_e0_segment_0``), its libm calls
  (``ft_libm_expf``) are pointed at the C library's names (``expf``), and it is emitted
  as an object file;
* the native thread pool (:mod:`thread_pool`) is one more object file, its POSIX calls
  pointed at ``pthread_*``; the library starts its workers on first call
  (``FUNCTRANS_NUM_THREADS`` threads in all, default: the CPUs the process may use);
* a generated C file holds the entry functions: each fills the pointer table the segment
  reads (as the Python runtime does with NumPy arrays, it gives every slot a small
  "object" whose word at :func:`codegen.array_data_offset` is the data pointer), runs the
  segment, and copies the results that are inputs, constants or repeats. The constants
  are embedded with the assembler's ``.incbin``;
* BLAS and LAPACK (for matrix products, triangular solves, Cholesky) are resolved when the
  library first runs, with ``dlopen``: ``$FUNCTRANS_BLAS`` if set, else the OpenBLAS of
  the SciPy the library was built with (path recorded at build time), else the system's
  ``libopenblas.so.0`` / ``libblas.so.3`` (with ``liblapack.so.3``). The symbols tried
  are SciPy's ``scipy_<routine>_`` and the standard ``<routine>_``;
* every name in the generated C is an identifier made by :mod:`c_identifiers` (the
  exported program's names may come from someone else's file); internal symbols are named
  by position (``ft_e0_...``), never after the caller's names;
* a version script exports only the entry functions: two generated libraries (or a
  library and functrans itself) never see each other's internals.

Programs with steps that run in NumPy (:class:`fusion.FallbackStep`) cannot go into a
library: :func:`build_shared_library` refuses them, naming the primitives.

    >>> build_shared_library([entry], "out/model")  # doctest: +SKIP
    ('out/model.so', 'out/model.h')
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from functrans.backends.llvm import (c_identifiers, codegen, interrupts, pipeline,
                                     support_code, thread_pool, vector_math)
from functrans.backends.llvm.targets import compiling_for
from functrans.backends.compiler.fusion import Buffer, FallbackStep

_C_TYPES = {"float32": "float", "float64": "double", "int8": "int8_t", "int16": "int16_t",
            "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t",
            "uint32": "uint32_t", "uint64": "uint64_t", "bool": "bool",
            "float16": "uint16_t", "bfloat16": "uint16_t"}  # 16-bit floats: their bits

# POSIX functions the thread pool calls as ft_<name>
_POOL_LIBC = ("pthread_mutex_init", "pthread_cond_init", "pthread_mutex_lock",
              "pthread_mutex_unlock", "pthread_cond_wait", "pthread_cond_broadcast",
              "pthread_create", "clock_gettime")
_POOL_DEFINES = (thread_pool.SYMBOL, thread_pool.RANGE_SYMBOL, thread_pool.JOINED_SYMBOL,
                 thread_pool.SERIAL_SYMBOL, thread_pool.SERIAL_RANGE_SYMBOL, "ft_pool_start",
                 "ft_pool_reserve",
                 "ft_pool_set_blas", thread_pool.BLAS_HOLD_SYMBOL)
# defined by the generated C file
_C_DEFINES = tuple(f"ft_{r}" for r in codegen.BLAS_ROUTINES + codegen.LAPACK_ROUTINES) + (
    codegen.GEMM_FOR_SYMBOL, codegen.GEMM_RANGE_FOR_SYMBOL, codegen.GEMM_JOINED_FOR_SYMBOL)
# the C library's (memset, memcpy, ... that LLVM lowers some intrinsics to)
_LIBC = ("memset", "memcpy", "memmove")

ERROR_CODES = {1: "the library could not start (see the message)", 2: "out of memory",
               3: "the workspace is not aligned to 16 bytes",
               4: "the workspace is smaller than <entry>_workspace_size() bytes"}


class Entry:
    """One C function of a library: the ``name`` asked for, the program ``closed``
    (concrete shapes), names for its inputs and results, the exported function's name and
    the sizes of its dimension variables. All are text from the caller (or from a
    serialized file): :class:`_LibraryNames` makes C identifiers of them."""

    def __init__(self, name: str, closed, input_names, output_names,
                 function_name: str = "", sizes=None):
        self.name, self.closed, self.function_name = name, closed, function_name
        self.input_names, self.output_names = list(input_names), list(output_names)
        self.sizes = dict(sizes or {})

    @property
    def description(self) -> str:
        """For Python error messages (never written into C)."""
        at = f" at {', '.join(f'{v}={n}' for v, n in self.sizes.items())}" if self.sizes else ""
        return f"'{self.function_name or self.name}'{at}"


def c_compiler() -> str | None:
    """The C compiler to link with: ``$CC``, else ``cc``, ``gcc`` or ``clang`` on the PATH."""
    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if candidate and shutil.which(candidate.split()[0]):
            return candidate
    return None


def build_shared_library(entries: list[Entry], prefix: str, library: str,
                         target_cpu: str | None = None) -> tuple[str, str]:
    """Compile ``entries`` into ``<prefix>.so`` and ``<prefix>.h``; ``library`` names the
    library's own C functions (``<library>_error_message``). The machine code is for
    ``target_cpu`` (see :mod:`targets`; default ``config.llvm_cpu``), which need not be
    this machine's. Returns the two paths."""
    if not sys.platform.startswith(("linux", "freebsd")):
        raise NotImplementedError(f"shared libraries are built for ELF platforms (Linux); "
                                  f"this is {sys.platform}")
    compiler = c_compiler()
    if compiler is None:
        raise RuntimeError("to_shared_library needs a C compiler to link the library: none "
                           "found (install cc, gcc or clang, or set CC)")
    with compiling_for(target_cpu):
        compiled = [_compile_entry(e, k) for k, e in enumerate(entries)]
        pool_object = _pool_object()
    names = _LibraryNames(compiled, library, compiler)
    needs_blas = any(c.needs_blas for c in compiled)
    with tempfile.TemporaryDirectory(prefix="functrans-so-") as build:
        objects = []
        for k, c in enumerate(compiled):
            objects.append(os.path.join(build, f"entry{k}.o"))
            with open(objects[-1], "wb") as f:
                f.write(c.object)
        objects.append(os.path.join(build, "thread_pool.o"))
        with open(objects[-1], "wb") as f:
            f.write(pool_object)
        header = _header(compiled, names)
        blobs: dict[str, bytes] = {}
        source = _c_source(compiled, names, blobs, needs_blas,
                           any(c.needs_pool for c in compiled))
        for symbol, data in blobs.items():
            with open(os.path.join(build, f"{symbol}.bin"), "wb") as f:
                f.write(data)
        # the generated files have fixed names: no text of the caller's is in a path
        c_path = os.path.join(build, "library.c")
        with open(c_path, "w") as f:
            f.write(source)
        with open(os.path.join(build, "library.h"), "w") as f:
            f.write(header)
        script = os.path.join(build, "exports.map")
        exported = [n for entry in names.entries for n in (entry.name, entry.workspace_size)]
        with open(script, "w") as f:
            f.write("{\n  global: " + " ".join(f"{n};" for n in exported + [names.error_message])
                    + "\n  local: *;\n};\n")
        so_path = os.path.join(build, "library.so")
        # -Xlinker passes the file's name to the linker as one argument, commas and all
        command = compiler.split() + ["-shared", "-fPIC", "-O2", "-fvisibility=hidden",
                                      "-o", so_path, c_path, *objects, "-lm", "-ldl",
                                      "-lpthread", f"-Wl,--version-script={script}",
                                      "-Xlinker", "-soname",
                                      "-Xlinker", f"{os.path.basename(prefix)}.so",
                                      "-Wl,--no-undefined"]
        result = subprocess.run(command, capture_output=True, text=True, cwd=build)
        if result.returncode != 0:
            raise RuntimeError(f"to_shared_library: linking with {compiler} failed "
                               f"({' '.join(command)}):\n{result.stderr.strip()}")
        directory = os.path.dirname(os.path.abspath(prefix))
        os.makedirs(directory, exist_ok=True)
        targets = (os.path.abspath(prefix) + ".so", os.path.abspath(prefix) + ".h")
        shutil.copyfile(so_path, targets[0])
        with open(targets[1], "w") as f:
            f.write(header)
    return targets


# =============================================================================================
# Native code per entry point
# =============================================================================================


class _CompiledEntry:
    def __init__(self, entry, native, object_code, segment, needs_blas):
        self.entry, self.native, self.object = entry, native, object_code
        self.segment = segment  # the C name of its segment function, or None
        self.needs_blas = needs_blas
        # parallel loops or split products: the library starts the pool's workers
        self.needs_pool = any(name.encode() in object_code for name in (
            thread_pool.SYMBOL, thread_pool.RANGE_SYMBOL, codegen.GEMM_FOR_SYMBOL,
            codegen.GEMM_RANGE_FOR_SYMBOL, codegen.GEMM_JOINED_FOR_SYMBOL))


def _compile_entry(entry: Entry, index: int) -> _CompiledEntry:
    with pipeline._compile_lock:
        native = pipeline.plan_native(entry.closed)
        _refuse_numpy_steps(native, entry)
        segments = [s for s in native.schedule if isinstance(s, codegen.Segment)]
        if not segments:
            return _CompiledEntry(entry, native, _empty_object(), None, False)
        builder = codegen.ModuleBuilder(native.program, native.plan, native.slots,
                                        native.schedule)
        ir_text = builder.build()
    # the module's symbols are renamed apart by the entry's position, never by its name
    text, segment = _standalone_module(ir_text, f"ft_e{index}", segments[0].name)
    obj, _ = codegen.optimize_and_emit(text, builder.names)
    return _CompiledEntry(entry, native, obj, segment, codegen.needs_blas(obj))


def _refuse_numpy_steps(native, entry: Entry):
    fallbacks = [s for s in native.program.steps if isinstance(s, FallbackStep)]
    if fallbacks:
        names = sorted({_describe_fallback(s) for s in fallbacks})
        raise NotImplementedError(
            f"to_shared_library: {entry.description} has steps that run in "
            f"NumPy, not in native code: {', '.join(names)}. A standalone library holds "
            "native code only; export a function without these operations (or compute "
            "them outside it)")
    for b in native.program.inputs + [o for o in native.program.outputs
                                      if isinstance(o, Buffer)]:
        if not b.is_array:
            raise NotImplementedError(f"to_shared_library: {entry.description} has a non-array "
                                      "argument or result (a token)")


def _describe_fallback(step) -> str:
    """The primitive of a NumPy step; for control flow, with the NumPy steps of its bodies
    (compiled on their own by :mod:`host_loops`)."""
    name = step.eqn.primitive.name
    inner = set()
    for value in vars(step.driver).values() if step.driver is not None else ():
        for executable in value if isinstance(value, list) else [value]:
            program = getattr(executable, "program", None)
            for s in getattr(program, "steps", ()):
                if isinstance(s, FallbackStep):
                    inner.add(_describe_fallback(s))
    return f"{name} (whose body runs {', '.join(sorted(inner))} in NumPy)" if inner else name


def _standalone_module(ir_text: str, prefix: str, segment: str) -> tuple[str, str]:
    """The module with its exported symbols renamed apart (``<prefix>_...``) and its libm
    calls pointed at the C library; returns (IR text, the segment's new name)."""
    import llvmlite.binding as llvm
    codegen.initialize()
    module = llvm.parse_assembly(ir_text)
    libm = {f"ft_libm_{sym}": sym for f32, f64, _ in vector_math.LIBM_FUNCTIONS.values()
            for sym in (f32, f64)}
    for fn in list(module.functions):
        name = fn.name
        if fn.is_declaration:
            if name in libm:
                _rename(module, fn, libm[name])
            elif not (name.startswith("llvm.") or name in _POOL_DEFINES + _C_DEFINES + _LIBC):
                raise NotImplementedError(
                    f"to_shared_library: the compiled program calls {name!r}, which a "
                    "standalone library does not provide")
        elif str(fn.linkage) not in ("Linkage.internal", "Linkage.private"):
            _rename(module, fn, f"{prefix}_{name}")
    for g in module.global_variables:
        if not g.is_declaration and str(g.linkage) not in ("Linkage.internal",
                                                            "Linkage.private"):
            _rename(module, g, f"{prefix}_{g.name}")
    return str(module), f"{prefix}_{segment}"


def _rename(module, value, new: str):
    for existing in list(module.functions) + list(module.global_variables):
        if existing.name == new:
            raise NotImplementedError(f"to_shared_library: cannot rename {value.name!r} to "
                                      f"{new!r}: the module already has that symbol")
    value.name = new


def _empty_object() -> bytes:
    """An object file with no code, for an entry point whose results are all copies."""
    import llvmlite.binding as llvm
    codegen.initialize()
    module = llvm.parse_assembly("")
    tm = codegen.target_machine()
    module.triple = tm.triple
    with codegen._llvm_lock:
        return tm.emit_object(module)


def _pool_object() -> bytes:
    """The thread pool (:mod:`thread_pool`), its POSIX calls pointed at the C library."""
    import llvmlite.binding as llvm
    codegen.initialize()
    tm = codegen.target_machine()
    module = llvm.parse_assembly(support_code.pool_module(tm.triple))
    for fn in list(module.functions):
        if fn.is_declaration and fn.name.startswith("ft_") and fn.name[3:] in _POOL_LIBC:
            _rename(module, fn, fn.name[3:])
    module.verify()
    with codegen._llvm_lock:
        return tm.emit_object(module)


# =============================================================================================
# The C side: header and entry functions
# =============================================================================================


def _c_type(dtype) -> str:
    name = "bfloat16" if str(dtype) == "bfloat16" else np.dtype(dtype).name
    found = _C_TYPES.get(name)
    if found is None:
        raise NotImplementedError(f"to_shared_library: arrays of dtype {name} have no C type "
                                  "here")
    return found


# the generated C file's first lines: what its names must not clash with
_C_PRELUDE = "\n".join([
    "#define _GNU_SOURCE", "#include <dlfcn.h>", "#include <pthread.h>", "#include <sched.h>",
    "#include <stdbool.h>", "#include <stddef.h>", "#include <stdint.h>", "#include <stdio.h>",
    "#include <stdlib.h>", "#include <string.h>", "#include <unistd.h>", ""])


class _Array:
    """An input or output of an entry point: C name, C type, shape, dtype, and the name of
    its element-count macro."""

    def __init__(self, name: str, aval):
        self.name, self.shape, self.dtype = name, tuple(aval.shape), aval.dtype
        self.c_type = _c_type(aval.dtype)
        self.size_macro = ""

    @property
    def count(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


class _EntryNames:
    def __init__(self, name: str, workspace_size: str, inputs: list, outputs: list):
        self.name, self.workspace_size = name, workspace_size
        self.inputs, self.outputs = inputs, outputs


class _LibraryNames:
    """Every name of the generated header and C file, made from the caller's text by
    :mod:`c_identifiers`, in a fixed order (library, header guard, entry points, their
    arrays, the size macros) so that the same program always gets the same names:

    * no name is a keyword, a macro or type of the C library, a macro the compiler defines,
      or (for the library's global functions) anything the C file's headers declare;
    * the global functions (``<entry>``, ``<entry>_workspace_size``,
      ``<library>_error_message``) and an entry's arrays are distinct even upper-cased;
      an array is never named as a global function or macro it could hide;
    * the ``<ENTRY>_<ARRAY>_SIZE`` macros are distinct from each other and from every
      other name."""

    def __init__(self, compiled: list, library: str, compiler: str | None):
        macros, declared = c_identifiers.compiler_names(compiler, _C_PRELUDE) \
            if compiler else (frozenset(), frozenset())
        common = c_identifiers.KEYWORDS | c_identifiers.STANDARD_NAMES | macros | {
            "workspace", "workspace_size", "memcpy", "size_t", "uintptr_t"}
        globals_ = c_identifiers.Namespace(common | declared, fold_case=True)
        # the library's name itself is no symbol: only its error-message function is
        self.error_message = globals_.claim(library, "program", ending="_error_message")
        self.library = self.error_message[:-len("_error_message")]
        self.guard = globals_.claim(f"FUNCTRANS_{self.library}", ending="_H")
        self.entries = []
        for c in compiled:
            name = globals_.claim(c.entry.name, "program", also=("_workspace_size",))
            self.entries.append(_EntryNames(name, f"{name}_workspace_size", [], []))
        global_names = {self.library, self.error_message, self.guard} | {
            n for e in self.entries for n in (e.name, e.workspace_size)}
        every_name = set(global_names)
        for c, names in zip(compiled, self.entries):
            arrays = c_identifiers.Namespace(common | global_names, fold_case=True)
            names.inputs = [_Array(arrays.claim(n), a)
                            for n, a in zip(c.entry.input_names, c.entry.closed.in_avals)]
            names.outputs = [_Array(arrays.claim(n), a)
                             for n, a in zip(c.entry.output_names, c.entry.closed.out_avals)]
            every_name.update(a.name for a in names.inputs + names.outputs)
        size_macros = c_identifiers.Namespace(common | declared | every_name)
        for names in self.entries:
            for a in names.inputs + names.outputs:
                a.size_macro = size_macros.claim(f"{names.name}_{a.name}".upper(),
                                                 ending="_SIZE")


def _shape_text(shape, dtype) -> str:
    name = "bfloat16" if str(dtype) == "bfloat16" else np.dtype(dtype).name
    return f"{name}[{', '.join(map(str, shape))}]"


def _prototype(names: _EntryNames) -> str:
    params = [f"const {a.c_type} *{a.name}" for a in names.inputs] + \
        [f"{a.c_type} *{a.name}" for a in names.outputs]
    params += ["void *workspace", "size_t workspace_size"]
    return f"int {names.name}({', '.join(params)})"


_EXPORT = '__attribute__((visibility("default"))) '  # the library's own functions


def _header(compiled: list, names: _LibraryNames) -> str:
    """The header. Its comments hold identifiers and numbers only (no text from the
    exported program goes into generated C as it is)."""
    library, guard = names.library, names.guard
    lines = [f"/* {library}.h: generated by functrans.export.to_shared_library. */",
             f"#ifndef {guard}", f"#define {guard}", "", "#include <stdbool.h>",
             "#include <stddef.h>", "#include <stdint.h>", "", "#ifdef __cplusplus",
             'extern "C" {', "#endif", ""]
    for c, entry in zip(compiled, names.entries):
        name = entry.name
        source = c_identifiers.comment_text(c.entry.function_name, "a function")
        sizes = "".join(f", {c_identifiers.comment_text(v)}={int(n)}"
                        for v, n in c.entry.sizes.items())
        lines.append(f"/* {name}: exported from {source}{sizes}.")
        lines.append(" *   inputs:  " + "; ".join(f"{a.name} {_shape_text(a.shape, a.dtype)}"
                                                  for a in entry.inputs))
        lines.append(" *   outputs: " + "; ".join(f"{a.name} {_shape_text(a.shape, a.dtype)}"
                                                  for a in entry.outputs))
        lines += [
            " * Arrays are C-contiguous (row-major). workspace: NULL (a buffer kept per",
            " * thread is used; workspace_size is then ignored), or a buffer of",
            f" * workspace_size >= {entry.workspace_size}() bytes aligned to 16 (64 is",
            " * best), one per concurrent call. Thread-safe. Returns 0, or an error code",
            f" * ({names.error_message}(code) describes it). */"]
        lines.append(_prototype(entry) + ";")
        lines.append(f"size_t {entry.workspace_size}(void);")
        for a in entry.inputs + entry.outputs:
            lines.append(f"#define {a.size_macro} {a.count}  /* elements */")
        lines.append("")
    lines += [f"const char *{names.error_message}(int code);", "", "#ifdef __cplusplus",
              "}", "#endif", f"#endif  /* {guard} */", ""]
    return "\n".join(lines)


def _blob(symbol: str, array: np.ndarray, blobs: dict) -> str:
    """``symbol``: the bytes of ``array``, kept in ``blobs`` and embedded from the file
    ``<symbol>.bin`` of the build directory (where the compiler runs)."""
    blobs[symbol] = np.ascontiguousarray(array).tobytes()
    return symbol


def _blob_declaration(symbol: str) -> str:
    return (f'__asm__(".section .rodata\\n.balign 64\\n.globl {symbol}\\n'
            f'.hidden {symbol}\\n{symbol}:\\n.incbin \\"{symbol}.bin\\"\\n.previous\\n");\n'
            f"extern const unsigned char {symbol}[];")


def _entry_function(c: _CompiledEntry, index: int, names: _EntryNames, blobs: dict) -> str:
    """The C function of one entry point. Its locals and everything else it names start
    with ``ft_``, which no array name does."""
    native = c.native
    program, slots = native.program, native.slots
    ins, outs = names.inputs, names.outputs
    n_slots = 1 + max(list(slots.values()) + [slot for slot, _ in native.nested_consts],
                      default=0)
    arena = -(-max(native.plan.arena_size, 1) // 64) * 64
    body = [f"{_EXPORT}size_t {names.workspace_size}(void) {{",
            f"    return {arena} + (size_t){n_slots} * (FT_OBJECT_WORDS + 1) * sizeof(void *);",
            "}", "", _EXPORT + _prototype(names) + " {",
            "    int ft_code = ft_start();",
            "    if (ft_code) return ft_code;",
            f"    if (!workspace) workspace = ft_thread_workspace({names.workspace_size}());",
            f"    else if (workspace_size < {names.workspace_size}()) return 4;",
            "    if (!workspace) return 2;",
            "    if ((uintptr_t)workspace % 16) return 3;",
            f"    void **ft_table = (void **)((char *)workspace + {arena});",
            f"    void **ft_objects = ft_table + {n_slots};",
            "    FT_BIND(0, workspace);  /* the arena */"]
    for i, b in enumerate(program.inputs):
        if b.id in slots:
            body.append(f"    FT_BIND({slots[b.id]}, {ins[i].name});")
    constants = [(slots[b.id], b.value) for b in program.consts if b.id in slots]
    for k, (slot, value) in enumerate(constants + list(native.nested_consts)):
        symbol = _blob(f"ft_e{index}_c{k}", np.asarray(value), blobs)
        body.append(f"    FT_BIND({slot}, {symbol});")
    copies, bound = [], {}
    input_of = {b.id: i for i, b in enumerate(program.inputs)}
    for k, (out, result) in enumerate(zip(outs, program.outputs)):
        nbytes = out.count * np.dtype(out.dtype).itemsize
        if not isinstance(result, Buffer) or result.kind == "const":
            value = result if not isinstance(result, Buffer) else result.value
            source = _blob(f"ft_e{index}_r{k}", np.asarray(value, out.dtype), blobs)
        elif result.kind == "output" and result.id not in bound:
            bound[result.id] = out.name
            body.append(f"    FT_BIND({slots[result.id]}, {out.name});")
            continue
        elif result.kind == "output":
            source = bound[result.id]
        elif result.id in input_of:
            source = ins[input_of[result.id]].name
        else:
            raise NotImplementedError(f"to_shared_library: result {k} of {c.entry.description}"
                                      f" is a {result.kind} buffer")
        copies.append(f"    memcpy({out.name}, {source}, {nbytes});")
    if c.segment is not None:
        # a segment that polls for SIGINT may first ask for its handler check (status 2,
        # see interrupts.py): nothing to check here, so it is called again; its SIGINT
        # counter (ft_interrupt_state, defined by the runtime below) never moves
        body.append(f"    while ({c.segment}(ft_table) == {interrupts.CHECK_HANDLER}) {{}}")
    body += copies + ["    return 0;", "}", ""]
    return "\n".join(body)


def _c_source(compiled: list, names: _LibraryNames, blobs: dict, needs_blas: bool,
              needs_pool: bool) -> str:
    """The C file; ``blobs`` receives the arrays it embeds (symbol -> bytes, each to be
    written to ``<symbol>.bin`` beside it)."""
    data_offset = codegen.array_data_offset()
    if data_offset % 8:
        raise NotImplementedError("to_shared_library: NumPy's data pointer is not "
                                  "word-aligned in its array object on this platform")
    functions = [_entry_function(c, k, entry, blobs)
                 for k, (c, entry) in enumerate(zip(compiled, names.entries))]
    declarations = [_blob_declaration(symbol) for symbol in blobs]
    segments = [f"extern int32_t {c.segment}(void **table);" for c in compiled if c.segment]
    routines = codegen.BLAS_ROUTINES + codegen.LAPACK_ROUTINES
    blas_path = _scipy_openblas_path() if needs_blas else None
    parts = [
        f"/* {names.library}.c: generated by functrans.export.to_shared_library. */",
        _C_PRELUDE, '#include "library.h"', "",
        "/* Generated code reads an array's data pointer from this word of the pointer",
        "   table's entry (the layout of a NumPy array object, which the Python runtime",
        "   puts there). */",
        f"#define FT_DATA_WORD {data_offset // 8}",
        "#define FT_OBJECT_WORDS (FT_DATA_WORD + 1)",
        "#define FT_BIND(slot, pointer) (ft_objects[(slot) * FT_OBJECT_WORDS + FT_DATA_WORD] = "
        "(void *)(pointer), ft_table[slot] = &ft_objects[(slot) * FT_OBJECT_WORDS])", "",
        *segments,
        "extern int ft_pool_start(int workers);",
        "extern void ft_pool_set_blas(void *set_threads);",
        "extern void ft_parallel_for(void *chunk, void *context, int64_t count);",
        "extern void ft_serial_for(void *chunk, void *context, int64_t count);",
        "extern void ft_parallel_for_range(void *chunk, void *context, int64_t count);",
        "extern void ft_parallel_for_joined(void *chunk, void *context, int64_t count);",
        "extern void ft_serial_for_range(void *chunk, void *context, int64_t count);", "",
        *declarations, "",
        _BLAS_C.replace("@ROUTINES@", ", ".join(f'"{r}"' for r in routines))
               .replace("@COUNT@", str(len(routines)))
               .replace("@NEEDED@", "1" if needs_blas else "0")
               .replace("@BUILD_BLAS@", _c_string(blas_path or ""))
               .replace("@TRAMPOLINES@", _trampolines(routines)),
        _RUNTIME_C.replace("@ERROR_MESSAGE@", names.error_message)
                  .replace("@POOL@", "1" if needs_pool else "0")
                  .replace("@MESSAGES@", "\n".join(
                      f"    case {code}: return {_c_string(text)};"
                      for code, text in ERROR_CODES.items() if code != 1)),
        *functions]
    return "\n".join(parts)


def _c_string(text: str) -> str:
    """``text`` as a C string literal: its UTF-8 bytes, every one but letters, digits and
    a few safe punctuation marks written as an octal escape."""
    return '"' + "".join(chr(b) if re.fullmatch(rb"[A-Za-z0-9 _.,:;/+=()-]", bytes([b]))
                         else f"\\{b:03o}" for b in text.encode()) + '"'


def _trampolines(routines) -> str:
    """``ft_<routine>``: a call through the routine's address found at load time. Every
    argument of a Fortran BLAS/LAPACK routine is a pointer (see ``codegen.gemm_calls`` and
    :mod:`lapack`)."""
    arity = {"gemm": 13, "gemv": 11, "trsm": 11, "potrf": 5}
    out = []
    for k, r in enumerate(routines):
        n = arity[r[1:]]
        params = ", ".join(f"void *a{i}" for i in range(n))
        args = ", ".join(f"a{i}" for i in range(n))
        kinds = ", ".join(["void *"] * n)
        out.append(f"__attribute__((visibility(\"hidden\"))) void ft_{r}({params}) "
                   f"{{ ((void (*)({kinds}))ft_blas[{k}])({args}); }}")
    return "\n".join(out)


def _scipy_openblas_path() -> str | None:
    library = codegen._scipy_openblas()
    return getattr(library, "_name", None) if library is not None else None


_BLAS_C = r"""
/* ---- BLAS and LAPACK, found when the library first runs ---- */
static const char *const ft_routines[@COUNT@] = {@ROUTINES@};
static void *ft_blas[@COUNT@];
static int (*ft_local_threads)(int);  /* OpenBLAS's openblas_set_num_threads_local */
static char ft_message[768];

static void *ft_find(void *handle, const char *routine) {
    char name[64];
    snprintf(name, sizeof name, "scipy_%s_", routine);
    void *found = dlsym(handle, name);
    if (!found) {
        snprintf(name, sizeof name, "%s_", routine);
        found = dlsym(handle, name);
    }
    return found;
}

static int ft_load_blas(void) {
    if (!@NEEDED@) return 0;
    const char *candidates[] = {getenv("FUNCTRANS_BLAS"), @BUILD_BLAS@, "libopenblas.so.0",
                                "libopenblas.so", "libblas.so.3", "libblas.so",
                                "liblapack.so.3", "liblapack.so"};
    size_t count = sizeof candidates / sizeof candidates[0];
    int missing = @COUNT@;
    for (size_t i = 0; i < count && missing; i++) {
        if (!candidates[i] || !candidates[i][0]) continue;
        void *handle = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
        if (!handle) continue;
        for (int k = 0; k < @COUNT@; k++) {
            if (!ft_blas[k] && (ft_blas[k] = ft_find(handle, ft_routines[k]))) missing--;
        }
        if (!ft_local_threads)
            ft_local_threads = (int (*)(int))dlsym(handle, "openblas_set_num_threads_local");
    }
    for (int k = 0; k < @COUNT@; k++) {
        if (!ft_blas[k]) {
            snprintf(ft_message, sizeof ft_message,
                     "no BLAS/LAPACK library providing %s_ was found (tried $FUNCTRANS_BLAS, "
                     "%s, libopenblas.so.0, libblas.so.3, liblapack.so.3); set FUNCTRANS_BLAS "
                     "to the path of an OpenBLAS library", ft_routines[k], @BUILD_BLAS@);
            return 1;
        }
    }
    return 0;
}

@TRAMPOLINES@
"""

_RUNTIME_C = r"""
/* ---- start-up (once), the thread pool and per-thread workspaces ---- */
static pthread_once_t ft_once = PTHREAD_ONCE_INIT;
/* what compiled loops poll for Ctrl-C in a Python process; a library has no handler, so
   its counter stays 0 and no loop stops early */
__attribute__((visibility("hidden"), aligned(64))) int64_t ft_interrupt_state[8];
static int ft_status;
static int ft_workers;
static pthread_key_t ft_workspace_key;

static int ft_thread_count(void) {
    const char *text = getenv("FUNCTRANS_NUM_THREADS");
    if (text && atoi(text) > 0) return atoi(text);
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
#endif
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}

static void ft_initialize(void) {
    if (pthread_key_create(&ft_workspace_key, free) != 0) {
        snprintf(ft_message, sizeof ft_message, "pthread_key_create failed");
        ft_status = 1;
        return;
    }
    ft_status = ft_load_blas();
    /* products hold BLAS to one thread while they run (see thread_pool.py) */
    if (!ft_status) ft_pool_set_blas((void *)ft_local_threads);
    /* worker threads only for programs with parallel loops or split products */
    if (!ft_status && @POOL@) ft_workers = ft_pool_start(ft_thread_count() - 1);
}

static int ft_start(void) {
    pthread_once(&ft_once, ft_initialize);
    return ft_status;
}

/* matrix products split over the pool, each chunk's BLAS on one thread; serially when the
   BLAS cannot be limited per thread */
__attribute__((visibility("hidden"))) void ft_gemm_for(void *chunk, void *context,
                                                       int64_t count) {
    if (ft_local_threads && ft_workers > 0) ft_parallel_for(chunk, context, count);
    else ft_serial_for(chunk, context, count);
}

/* the bands of a matrix-vector product: one call when they run serially */
__attribute__((visibility("hidden"))) void ft_gemm_for_range(void *chunk, void *context,
                                                             int64_t count) {
    if (ft_local_threads && ft_workers > 0) ft_parallel_for_range(chunk, context, count);
    else ft_serial_for_range(chunk, context, count);
}

/* a matrix product cut into blocks of rows or columns: one call when they run serially */
__attribute__((visibility("hidden"))) void ft_gemm_for_joined(void *chunk, void *context,
                                                              int64_t count) {
    if (ft_local_threads && ft_workers > 0) ft_parallel_for_joined(chunk, context, count);
    else ft_serial_for_range(chunk, context, count);
}

static void *ft_thread_workspace(size_t size) {
    size_t *block = pthread_getspecific(ft_workspace_key);
    if (block && block[0] >= size) return (char *)block + 64;
    size_t bytes = 64 + (size + 63) / 64 * 64;
    free(block);
    block = aligned_alloc(64, bytes);
    if (block) block[0] = size;
    pthread_setspecific(ft_workspace_key, block);
    return block ? (char *)block + 64 : NULL;
}

__attribute__((visibility("default"))) const char *@ERROR_MESSAGE@(int code) {
    switch (code) {
    case 0: return "success";
    case 1: return ft_message[0] ? ft_message : "the library could not start";
@MESSAGES@
    default: return "unknown error code";
    }
}
"""
