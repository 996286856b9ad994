"""Standalone shared libraries: compiled programs as a ``.so`` with a C entry point.

A program is compiled as for ``jit`` (:func:`pipeline.plan_native`, then
:class:`codegen.ModuleBuilder`), and the machine code is linked by the system C compiler
(``cc -shared``) into a library that needs neither Python nor functrans:

* each entry point's LLVM module is renamed apart (``<entry>_segment_0``), its libm calls
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

from functrans.backends.llvm import codegen, interrupts, pipeline, thread_pool, vector_math
from functrans.backends.compiler.fusion import Buffer, FallbackStep

_C_TYPES = {"float32": "float", "float64": "double", "int8": "int8_t", "int16": "int16_t",
            "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t",
            "uint32": "uint32_t", "uint64": "uint64_t", "bool": "bool",
            "float16": "uint16_t", "bfloat16": "uint16_t"}  # 16-bit floats: their bits

# POSIX functions the thread pool calls as ft_<name>
_POOL_LIBC = ("pthread_mutex_init", "pthread_cond_init", "pthread_mutex_lock",
              "pthread_mutex_unlock", "pthread_cond_wait", "pthread_cond_broadcast",
              "pthread_create", "clock_gettime")
_POOL_DEFINES = ("ft_parallel_for", "ft_serial_for", "ft_pool_start", "ft_pool_reserve",
                 "ft_pool_set_blas", thread_pool.BLAS_HOLD_SYMBOL)
# defined by the generated C file
_C_DEFINES = tuple(f"ft_{r}" for r in codegen.BLAS_ROUTINES + codegen.LAPACK_ROUTINES) + (
    codegen.GEMM_FOR_SYMBOL,)
# the C library's (memset, memcpy, ... that LLVM lowers some intrinsics to)
_LIBC = ("memset", "memcpy", "memmove")

ERROR_CODES = {1: "the library could not start (see the message)", 2: "out of memory",
               3: "the workspace is not aligned to 16 bytes"}


class Entry:
    """One C function of a library: ``name``, the program ``closed`` (concrete shapes),
    C-friendly names for its inputs and results, and a description for the header."""

    def __init__(self, name: str, closed, input_names, output_names, description: str = ""):
        self.name, self.closed, self.description = name, closed, description
        self.input_names, self.output_names = list(input_names), list(output_names)


def c_compiler() -> str | None:
    """The C compiler to link with: ``$CC``, else ``cc``, ``gcc`` or ``clang`` on the PATH."""
    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if candidate and shutil.which(candidate.split()[0]):
            return candidate
    return None


def build_shared_library(entries: list[Entry], prefix: str, library: str) -> tuple[str, str]:
    """Compile ``entries`` into ``<prefix>.so`` and ``<prefix>.h``; ``library`` names the
    library's own C functions (``<library>_error_message``). Returns the two paths."""
    if not sys.platform.startswith(("linux", "freebsd")):
        raise NotImplementedError(f"shared libraries are built for ELF platforms (Linux); "
                                  f"this is {sys.platform}")
    compiler = c_compiler()
    if compiler is None:
        raise RuntimeError("to_shared_library needs a C compiler to link the library: none "
                           "found (install cc, gcc or clang, or set CC)")
    compiled = [_compile_entry(e) for e in entries]
    needs_blas = any(c.needs_blas for c in compiled)
    with tempfile.TemporaryDirectory(prefix="functrans-so-") as build:
        objects = []
        for c in compiled:
            objects.append(os.path.join(build, f"{c.entry.name}.o"))
            with open(objects[-1], "wb") as f:
                f.write(c.object)
        objects.append(os.path.join(build, "thread_pool.o"))
        with open(objects[-1], "wb") as f:
            f.write(_pool_object())
        header = _header(compiled, library)
        source = _c_source(compiled, library, build, needs_blas,
                           any(c.needs_pool for c in compiled))
        c_path = os.path.join(build, f"{library}.c")
        with open(c_path, "w") as f:
            f.write(source)
        with open(os.path.join(build, f"{library}.h"), "w") as f:
            f.write(header)
        script = os.path.join(build, "exports.map")
        exported = [c.entry.name for c in compiled] + \
            [f"{c.entry.name}_workspace_size" for c in compiled] + [f"{library}_error_message"]
        with open(script, "w") as f:
            f.write("{\n  global: " + " ".join(f"{n};" for n in exported) + "\n  local: *;\n};\n")
        so_path = os.path.join(build, f"{library}.so")
        command = compiler.split() + ["-shared", "-fPIC", "-O2", "-fvisibility=hidden",
                                      "-o", so_path, c_path, *objects, "-lm", "-ldl",
                                      "-lpthread", f"-Wl,--version-script={script}",
                                      f"-Wl,-soname,{os.path.basename(prefix)}.so",
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
            thread_pool.SYMBOL, codegen.GEMM_FOR_SYMBOL))


def _compile_entry(entry: Entry) -> _CompiledEntry:
    with pipeline._compile_lock:
        native = pipeline.plan_native(entry.closed)
        _refuse_numpy_steps(native, entry)
        segments = [s for s in native.schedule if isinstance(s, codegen.Segment)]
        if not segments:
            return _CompiledEntry(entry, native, _empty_object(), None, False)
        builder = codegen.ModuleBuilder(native.program, native.plan, native.slots,
                                        native.schedule)
        ir_text = builder.build()
    text, segment = _standalone_module(ir_text, entry.name, segments[0].name)
    obj, _ = codegen.optimize_and_emit(text, builder.names)
    return _CompiledEntry(entry, native, obj, segment, codegen.needs_blas(obj))


def _refuse_numpy_steps(native, entry: Entry):
    fallbacks = [s for s in native.program.steps if isinstance(s, FallbackStep)]
    if fallbacks:
        names = sorted({_describe_fallback(s) for s in fallbacks})
        raise NotImplementedError(
            f"to_shared_library: {entry.description or entry.name} has steps that run in "
            f"NumPy, not in native code: {', '.join(names)}. A standalone library holds "
            "native code only; export a function without these operations (or compute "
            "them outside it)")
    for b in native.program.inputs + [o for o in native.program.outputs
                                      if isinstance(o, Buffer)]:
        if not b.is_array:
            raise NotImplementedError(f"to_shared_library: {entry.name} has a non-array "
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
    module = llvm.parse_assembly(thread_pool._build_module(tm.triple))
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


def c_identifier(text: str) -> str:
    """``text`` as a C identifier (``args[0]['w']`` -> ``args_0_w``)."""
    name = re.sub(r"[^0-9A-Za-z_]+", "_", text).strip("_") or "x"
    return f"_{name}" if name[0].isdigit() else name


def _unique(names: list[str], taken: set) -> list[str]:
    out = []
    for n in names:
        candidate, k = n, 2
        while candidate in taken:
            candidate, k = f"{n}_{k}", k + 1
        taken.add(candidate)
        out.append(candidate)
    return out


def _signature(c: _CompiledEntry) -> tuple[list, list]:
    """(inputs, outputs) as (C name, C type, shape, dtype) of an entry point."""
    closed = c.entry.closed
    taken = {"workspace"}
    ins = _unique([c_identifier(n) for n in c.entry.input_names], taken)
    outs = _unique([c_identifier(n) for n in c.entry.output_names], taken)
    return ([(n, _c_type(a.dtype), a.shape, a.dtype) for n, a in zip(ins, closed.in_avals)],
            [(n, _c_type(a.dtype), a.shape, a.dtype) for n, a in zip(outs, closed.out_avals)])


def _shape_text(shape, dtype) -> str:
    name = "bfloat16" if str(dtype) == "bfloat16" else np.dtype(dtype).name
    return f"{name}[{', '.join(map(str, shape))}]"


def _prototype(c: _CompiledEntry) -> str:
    ins, outs = _signature(c)
    params = [f"const {t} *{n}" for n, t, _, _ in ins] + [f"{t} *{n}" for n, t, _, _ in outs]
    return f"int {c.entry.name}({', '.join(params + ['void *workspace'])})"


_EXPORT = '__attribute__((visibility("default"))) '  # the library's own functions


def _header(compiled: list, library: str) -> str:
    guard = f"{library.upper()}_H"
    lines = [f"/* {library}.h: generated by functrans.export.to_shared_library. */",
             f"#ifndef {guard}", f"#define {guard}", "", "#include <stdbool.h>",
             "#include <stddef.h>", "#include <stdint.h>", "", "#ifdef __cplusplus",
             'extern "C" {', "#endif", ""]
    for c in compiled:
        ins, outs = _signature(c)
        name = c.entry.name
        lines.append(f"/* {name}: {c.entry.description}".rstrip() + ".")
        lines.append(" *   inputs:  " + "; ".join(f"{n} {_shape_text(s, d)}"
                                                  for n, _, s, d in ins))
        lines.append(" *   outputs: " + "; ".join(f"{n} {_shape_text(s, d)}"
                                                  for n, _, s, d in outs))
        lines += [
            " * Arrays are C-contiguous (row-major). workspace: NULL (a buffer kept per",
            f" * thread is used), or {name}_workspace_size() bytes aligned to 16 (64 is",
            " * best), one per concurrent call. Thread-safe. Returns 0, or an error code",
            f" * ({library}_error_message(code) describes it). */"]
        lines.append(_prototype(c) + ";")
        lines.append(f"size_t {name}_workspace_size(void);")
        for n, _, s, _ in ins + outs:
            lines.append(f"#define {name.upper()}_{n.upper()}_SIZE "
                         f"{int(np.prod(s, dtype=np.int64))}  /* elements */")
        lines.append("")
    lines += [f"const char *{library}_error_message(int code);", "", "#ifdef __cplusplus",
              "}", "#endif", f"#endif  /* {guard} */", ""]
    return "\n".join(lines)


def _blob(build: str, symbol: str, array: np.ndarray, blobs: list) -> str:
    path = os.path.join(build, f"{symbol}.bin")
    with open(path, "wb") as f:
        f.write(np.ascontiguousarray(array).tobytes())
    blobs.append(f'__asm__(".section .rodata\\n.balign 64\\n.globl {symbol}\\n'
                 f'.hidden {symbol}\\n{symbol}:\\n.incbin \\"{path}\\"\\n.previous\\n");\n'
                 f"extern const unsigned char {symbol}[];")
    return symbol


def _entry_function(c: _CompiledEntry, build: str, blobs: list) -> str:
    """The C function of one entry point."""
    name, native = c.entry.name, c.native
    program, slots = native.program, native.slots
    ins, outs = _signature(c)
    n_slots = 1 + max(list(slots.values()) + [slot for slot, _ in native.nested_consts],
                      default=0)
    arena = -(-max(native.plan.arena_size, 1) // 64) * 64
    body = [f"{_EXPORT}size_t {name}_workspace_size(void) {{",
            f"    return {arena} + (size_t){n_slots} * (FT_OBJECT_WORDS + 1) * sizeof(void *);",
            "}", "", _EXPORT + _prototype(c) + " {",
            "    int status = ft_start();",
            "    if (status) return status;",
            f"    if (!workspace) workspace = ft_thread_workspace({name}_workspace_size());",
            "    if (!workspace) return 2;",
            "    if ((uintptr_t)workspace % 16) return 3;",
            f"    void **table = (void **)((char *)workspace + {arena});",
            f"    void **objects = table + {n_slots};",
            "    FT_BIND(0, workspace);  /* the arena */"]
    for i, b in enumerate(program.inputs):
        if b.id in slots:
            body.append(f"    FT_BIND({slots[b.id]}, {ins[i][0]});")
    constants = [(slots[b.id], b.value) for b in program.consts if b.id in slots]
    for k, (slot, value) in enumerate(constants + list(native.nested_consts)):
        symbol = _blob(build, f"ft_{name}_c{k}", np.asarray(value), blobs)
        body.append(f"    FT_BIND({slot}, {symbol});")
    copies, bound = [], {}
    input_of = {b.id: i for i, b in enumerate(program.inputs)}
    for k, (out, result) in enumerate(zip(outs, program.outputs)):
        nbytes = int(np.prod(out[2], dtype=np.int64)) * np.dtype(out[3]).itemsize
        if not isinstance(result, Buffer) or result.kind == "const":
            value = result if not isinstance(result, Buffer) else result.value
            source = _blob(build, f"ft_{name}_r{k}", np.asarray(value, out[3]), blobs)
        elif result.kind == "output" and result.id not in bound:
            bound[result.id] = out[0]
            body.append(f"    FT_BIND({slots[result.id]}, {out[0]});")
            continue
        elif result.kind == "output":
            source = bound[result.id]
        elif result.id in input_of:
            source = ins[input_of[result.id]][0]
        else:
            raise NotImplementedError(f"to_shared_library: result {k} of {name} is a "
                                      f"{result.kind} buffer")
        copies.append(f"    memcpy({out[0]}, {source}, {nbytes});")
    if c.segment is not None:
        # a segment that polls for SIGINT may first ask for its handler check (status 2,
        # see interrupts.py): nothing to check here, so it is called again; its SIGINT
        # counter (ft_interrupt_state, defined by the runtime below) never moves
        body.append(f"    while ({c.segment}(table) == {interrupts.CHECK_HANDLER}) {{}}")
    body += copies + ["    return 0;", "}", ""]
    return "\n".join(body)


def _c_source(compiled: list, library: str, build: str, needs_blas: bool,
              needs_pool: bool) -> str:
    data_offset = codegen.array_data_offset()
    if data_offset % 8:
        raise NotImplementedError("to_shared_library: NumPy's data pointer is not "
                                  "word-aligned in its array object on this platform")
    blobs: list = []
    functions = [_entry_function(c, build, blobs) for c in compiled]
    segments = [f"extern int32_t {c.segment}(void **table);" for c in compiled if c.segment]
    routines = codegen.BLAS_ROUTINES + codegen.LAPACK_ROUTINES
    blas_path = _scipy_openblas_path() if needs_blas else None
    parts = [
        f"/* {library}.c: generated by functrans.export.to_shared_library. */",
        "#define _GNU_SOURCE", "#include <dlfcn.h>", "#include <pthread.h>",
        "#include <sched.h>", "#include <stdint.h>", "#include <stdio.h>",
        "#include <stdlib.h>", "#include <string.h>", "#include <unistd.h>",
        f'#include "{library}.h"', "",
        "/* Generated code reads an array's data pointer from this word of the pointer",
        "   table's entry (the layout of a NumPy array object, which the Python runtime",
        "   puts there). */",
        f"#define FT_DATA_WORD {data_offset // 8}",
        "#define FT_OBJECT_WORDS (FT_DATA_WORD + 1)",
        "#define FT_BIND(slot, pointer) (objects[(slot) * FT_OBJECT_WORDS + FT_DATA_WORD] = "
        "(void *)(pointer), table[slot] = &objects[(slot) * FT_OBJECT_WORDS])", "",
        *segments,
        "extern int ft_pool_start(int workers);",
        "extern void ft_pool_set_blas(void *set_threads);",
        "extern void ft_parallel_for(void *chunk, void *context, int64_t count);",
        "extern void ft_serial_for(void *chunk, void *context, int64_t count);", "",
        *blobs, "",
        _BLAS_C.replace("@ROUTINES@", ", ".join(f'"{r}"' for r in routines))
               .replace("@COUNT@", str(len(routines)))
               .replace("@NEEDED@", "1" if needs_blas else "0")
               .replace("@BUILD_BLAS@", _c_string(blas_path or ""))
               .replace("@TRAMPOLINES@", _trampolines(routines)),
        _RUNTIME_C.replace("@LIBRARY@", library)
                  .replace("@POOL@", "1" if needs_pool else "0")
                  .replace("@MESSAGES@", "\n".join(
                      f"    case {code}: return \"{text}\";"
                      for code, text in ERROR_CODES.items() if code != 1)),
        *functions]
    return "\n".join(parts)


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


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

__attribute__((visibility("default"))) const char *@LIBRARY@_error_message(int code) {
    switch (code) {
    case 0: return "success";
    case 1: return ft_message[0] ? ft_message : "the library could not start";
@MESSAGES@
    default: return "unknown error code";
    }
}
"""
