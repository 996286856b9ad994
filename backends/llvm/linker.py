"""Linking cached machine code into this process without LLVM.

A program found in the on-disk cache is an ELF relocatable object that LLVM emitted for this
machine. Loading it through LLVM's JIT needs ``llvmlite.binding``, whose import alone costs
more than the rest of a warm start. This module does a JIT linker's job for the objects our
code generator produces on x86-64 Linux: it maps the allocated sections (code read-and-execute,
data read-write), resolves symbols — first the ones registered here with
:func:`register_symbol` (BLAS, libm, the thread pool), then the process's own (``memset``) —
and applies the relocations the small PIC code model uses. A program emitted as several
objects (see :mod:`parallel_compile`) is linked as one: all of them in one mapping, each
resolving the others' symbols.

Anything else in an object — another architecture, a relocation type, section kind or
symbol kind this module does not handle — raises :class:`UnsupportedObject`, and the
caller loads the object through LLVM's JIT instead. A mistake here could only ever cost
speed, never give a wrong answer silently: every relocation is range-checked.

    >>> register_symbol("ft_answer", address)                  # doctest: +SKIP
    >>> loaded = load_object(object_bytes)                      # doctest: +SKIP
    >>> loaded.address("ft_segment_0")                          # doctest: +SKIP
"""
from __future__ import annotations

import ctypes
import logging
import mmap
import platform
import struct
import sys
import threading

from functrans.backends.llvm import machine_code

# Symbols generated code calls by name (name -> address), shared with LLVM's JIT linker
# when that is used instead (see :func:`publish_to_llvm`).
_symbols: dict[str, int] = {}
_published: set = set()
_lock = threading.Lock()


class UnsupportedObject(Exception):
    """The object needs something this linker does not do; load it through LLVM instead."""


def register_symbol(name: str, address: int) -> None:
    """Make ``name`` resolve to ``address`` in code loaded from now on (by either linker)."""
    with _lock:
        _symbols[name] = address
        _published.discard(name)


def publish_to_llvm() -> None:
    """Tell LLVM's JIT linker every symbol registered here (before it loads an object)."""
    import llvmlite.binding as llvm
    with _lock:
        for name, address in _symbols.items():
            if name not in _published:
                llvm.add_symbol(name, address)
                _published.add(name)


def supported_host() -> bool:
    """Whether this linker can load objects here (x86-64 Linux)."""
    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")


# ELF constants (System V ABI, x86-64 supplement)
_SHT_PROGBITS, _SHT_SYMTAB, _SHT_STRTAB, _SHT_RELA, _SHT_NOBITS, _SHT_REL = 1, 2, 3, 4, 8, 9
_SHT_X86_64_UNWIND = 0x70000001
_SHF_WRITE, _SHF_ALLOC, _SHF_EXECINSTR = 0x1, 0x2, 0x4
_SHN_UNDEF, _SHN_ABS, _SHN_COMMON = 0, 0xFFF1, 0xFFF2
_STB_LOCAL, _STB_WEAK = 0, 2
_STT_TLS = 6
_EM_X86_64 = 62
_R_X86_64_64, _R_X86_64_PC32, _R_X86_64_PLT32, _R_X86_64_PC64 = 1, 2, 4, 24
_R_X86_64_GOTPCREL, _R_X86_64_GOTPCRELX, _R_X86_64_REX_GOTPCRELX = 9, 41, 42
_GOT_RELOCATIONS = (_R_X86_64_GOTPCREL, _R_X86_64_GOTPCRELX, _R_X86_64_REX_GOTPCRELX)
_STUB = b"\xff\x25\x02\x00\x00\x00\x0f\x0b"  # jmp *2(%rip) ; ud2 — then the 8-byte target
_STUB_SIZE = 16

_PROT_READ, _PROT_WRITE, _PROT_EXEC = 1, 2, 4
_MAP_PRIVATE, _MAP_ANONYMOUS = 0x02, 0x20


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mprotect.restype = ctypes.c_int
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.munmap.restype = ctypes.c_int
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


_LIBC = None
_PROCESS = None


def release_free_heap() -> None:
    """Give the C heap's free memory back to the system (glibc's ``malloc_trim``): what the
    compiles and executables that ``functrans.clear_caches()`` dropped had allocated, LLVM's
    share included, otherwise stays resident in the heap for its next allocations."""
    if not sys.platform.startswith("linux"):
        return
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # a C library without it (musl)
        return
    trim.argtypes = [ctypes.c_size_t]
    trim(0)


def process_symbol(name: str):
    """The address of ``name`` among the libraries this process has loaded, or None."""
    global _PROCESS
    if _PROCESS is None:
        _PROCESS = ctypes.CDLL(None)
    try:
        return ctypes.cast(getattr(_PROCESS, name), ctypes.c_void_p).value
    except AttributeError:
        return None


class _Section:
    __slots__ = ("index", "name", "kind", "flags", "offset", "size", "align", "link", "info",
                 "address")

    def __init__(self, index, name, kind, flags, offset, size, align, link, info):
        self.index, self.name, self.kind, self.flags = index, name, kind, flags
        self.offset, self.size, self.align, self.link, self.info = offset, size, max(align, 1), link, info
        self.address = None  # where it is mapped, for the sections that are loaded


class _Object:
    """The parts of an ELF64 little-endian relocatable object that loading needs."""

    def __init__(self, data: bytes):
        if len(data) < 64 or data[:4] != b"\x7fELF":
            raise UnsupportedObject("not an ELF file")
        if data[4] != 2 or data[5] != 1:
            raise UnsupportedObject("not a 64-bit little-endian ELF file")
        (_, e_type, machine, _, _, _, shoff, _, _, _, _, shentsize, shnum,
         shstrndx) = struct.unpack_from("<16sHHIQQQIHHHHHH", data, 0)
        if e_type != 1:
            raise UnsupportedObject(f"ELF type {e_type} is not a relocatable object")
        if machine != _EM_X86_64:
            raise UnsupportedObject(f"ELF machine {machine} is not x86-64")
        if shentsize != 64 or shoff + shnum * 64 > len(data):
            raise UnsupportedObject("malformed section header table")
        self.data = data
        raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + 64 * i) for i in range(shnum)]
        names = raw[shstrndx]
        self.sections = []
        for i, (name, kind, flags, _, offset, size, link, info, align, _) in enumerate(raw):
            if kind != _SHT_NOBITS and offset + size > len(data):
                raise UnsupportedObject(f"section {i} extends past the end of the file")
            self.sections.append(_Section(i, self._string(names[4], name), kind, flags, offset,
                                          size, align, link, info))
        tables = [s for s in self.sections if s.kind == _SHT_SYMTAB]
        if len(tables) != 1:
            raise UnsupportedObject(f"{len(tables)} symbol tables")
        table = tables[0]
        strings = self.sections[table.link].offset
        self.symbols = []  # (name, binding, type, section index, value)
        for j in range(table.size // 24):
            name, info, _, shndx, value, _ = struct.unpack_from("<IBBHQQ", data, table.offset + 24 * j)
            self.symbols.append((self._string(strings, name), info >> 4, info & 0xF, shndx, value))

    def _string(self, table_offset: int, offset: int) -> str:
        start = table_offset + offset
        end = self.data.find(b"\0", start)
        if end < 0:
            raise UnsupportedObject("unterminated string in a string table")
        return self.data[start:end].decode("utf-8", "replace")

    def relocations(self, section: _Section):
        for k in range(section.size // 24):
            offset, info, addend = struct.unpack_from("<QQq", self.data, section.offset + 24 * k)
            yield offset, info >> 32, info & 0xFFFFFFFF, addend


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


class LoadedObject:
    """An object file mapped into this process and linked. ``address(name)`` gives a defined
    function's address; the mapping lives as long as this object (or for ever, ``keep()``)."""

    def __init__(self, base: int, size: int, symbols: dict):
        self._base, self._size, self._symbols = base, size, symbols
        self._kept = False

    def address(self, name: str) -> int:
        try:
            return self._symbols[name]
        except KeyError:
            raise KeyError(f"symbol {name!r} is not defined by the loaded object") from None

    def keep(self) -> None:
        """Never unmap this code (threads that outlive every Python reference run it)."""
        self._kept = True

    def __del__(self):
        if not self._kept and self._base and _LIBC is not None:
            _LIBC.munmap(self._base, self._size)
            self._base = 0


def load_object(data) -> LoadedObject:
    """Map and link the relocatable object ``data`` (bytes), or the objects ``data`` (a list
    of bytes) together, the symbols one defines resolving the others' references; raise
    :class:`UnsupportedObject` when they need what this linker does not do (the caller then
    uses LLVM's JIT)."""
    if not supported_host():
        raise UnsupportedObject(f"no linker for {sys.platform}/{platform.machine()}")
    try:
        return _link([_Object(d) for d in ([data] if isinstance(data, bytes) else data)])
    except (IndexError, KeyError, struct.error, ValueError) as err:  # a malformed object
        raise UnsupportedObject(f"malformed object ({type(err).__name__}: {err})") from None


def _loaded_sections(obj: _Object) -> list:
    loaded = [s for s in obj.sections if s.flags & _SHF_ALLOC and s.kind != _SHT_X86_64_UNWIND]
    for s in loaded:
        if s.kind not in (_SHT_PROGBITS, _SHT_NOBITS):
            raise UnsupportedObject(f"section {s.name!r} of type {s.kind:#x}")
    for s in obj.sections:
        if s.kind == _SHT_REL:
            raise UnsupportedObject(f"REL (not RELA) relocations in {s.name!r}")
    return loaded


def _relocation_sections(obj: _Object, loaded: list) -> list:
    return [s for s in obj.sections if s.kind == _SHT_RELA and s.info < len(obj.sections)
            and obj.sections[s.info] in loaded]


def _defined(obj: _Object, global_only: bool) -> dict:
    """The symbols ``obj`` defines in its loaded sections: name -> address (global ones
    only, or every named one)."""
    defined = {}
    for name, binding, kind, shndx, value in obj.symbols:
        if name and shndx not in (_SHN_UNDEF, _SHN_ABS, _SHN_COMMON) \
                and shndx < len(obj.sections) and obj.sections[shndx].address is not None \
                and (binding != _STB_LOCAL or not global_only):
            defined[name] = obj.sections[shndx].address + value
    return defined


def _link(objects: list) -> LoadedObject:
    global _LIBC
    loaded = [_loaded_sections(obj) for obj in objects]
    rela = [_relocation_sections(obj, sections) for obj, sections in zip(objects, loaded)]
    # the global symbols each object defines, which the others' references resolve to
    exported = {}
    for obj, sections in zip(objects, loaded):
        indices = {s.index for s in sections}
        for name, binding, _, shndx, _ in obj.symbols:
            if name and binding != _STB_LOCAL and shndx in indices:
                exported.setdefault(name, obj)

    # symbols that no object defines: the GOT and the call stubs need one entry each (a
    # symbol of another object gets a GOT entry too, when code reaches it through the GOT)
    external, sibling = {}, []
    for obj, sections in zip(objects, rela):
        for section in sections:
            for _, sym, kind, _ in obj.relocations(section):
                name, binding, _, shndx, _ = obj.symbols[sym]
                if shndx != _SHN_UNDEF or name in external:
                    continue
                if name in exported:
                    if kind in _GOT_RELOCATIONS and name not in sibling:
                        sibling.append(name)
                else:
                    external[name] = _resolve(name, binding)

    # layout: code, then the call stubs; at the next page, data, then the GOT
    page = mmap.PAGESIZE
    cursor = 0
    for s in (s for sections in loaded for s in sections if s.flags & _SHF_EXECINSTR):
        cursor = _align(cursor, s.align)
        s.address, cursor = cursor, cursor + s.size
    stubs_at = _align(cursor, _STUB_SIZE)
    code_size = _align(stubs_at + _STUB_SIZE * len(external), page)
    cursor = code_size
    for s in (s for sections in loaded for s in sections if not s.flags & _SHF_EXECINSTR):
        cursor = _align(cursor, s.align)
        s.address, cursor = cursor, cursor + s.size
    got_at = _align(cursor, 8)
    total = _align(got_at + 8 * (len(external) + len(sibling)), page)
    if total > (1 << 31) - page:
        raise UnsupportedObject("object too large for 32-bit relative addressing")

    if _LIBC is None:
        _LIBC = _libc()
    base = _LIBC.mmap(None, total, _PROT_READ | _PROT_WRITE, _MAP_PRIVATE | _MAP_ANONYMOUS, -1, 0)
    if base in (None, ctypes.c_void_p(-1).value):
        raise UnsupportedObject(f"mmap of {total} bytes failed (errno {ctypes.get_errno()})")
    result = LoadedObject(base, total, {})  # unmaps on any failure below
    memory = (ctypes.c_char * total).from_address(base)
    view = memoryview(memory).cast("B")
    for obj, sections in zip(objects, loaded):
        for s in sections:
            s.address += base
            if s.kind == _SHT_PROGBITS and s.size:
                view[s.address - base:s.address - base + s.size] = \
                    obj.data[s.offset:s.offset + s.size]
    globals_defined = {}
    for obj in reversed(objects):  # the first object's definition wins, as in `exported`
        globals_defined.update(_defined(obj, global_only=True))
    stub, got = {}, {}
    for k, (name, target) in enumerate(external.items()):
        got[name] = base + got_at + 8 * k
        struct.pack_into("<Q", view, got_at + 8 * k, target)
        stub[name] = base + stubs_at + _STUB_SIZE * k
        view[stub[name] - base:stub[name] - base + len(_STUB)] = _STUB
        struct.pack_into("<Q", view, stub[name] - base + len(_STUB), target)
    for k, name in enumerate(sibling, start=len(external)):
        got[name] = base + got_at + 8 * k
        struct.pack_into("<Q", view, got_at + 8 * k, globals_defined[name])

    for obj, sections in zip(objects, rela):
        _relocate(obj, sections, view, base, external, globals_defined, stub, got)

    defined = {}
    for obj in objects:
        for name, address in _defined(obj, global_only=False).items():
            defined.setdefault(name, address)
    defined.update(globals_defined)
    result._symbols = defined
    del view, memory
    if _LIBC.mprotect(base, code_size, _PROT_READ | _PROT_EXEC) != 0:
        raise UnsupportedObject(f"mprotect failed (errno {ctypes.get_errno()})")
    return result


def _relocate(obj: _Object, sections: list, view, base: int, external: dict,
              siblings: dict, stub: dict, got: dict) -> None:
    """Apply ``obj``'s relocations in ``sections`` (mapped at ``base``, as ``view``): its
    undefined symbols are another object's (``siblings``: name -> address) or reached
    through the ``stub`` and ``got`` entries of the ``external`` ones."""
    def symbol_address(index: int) -> int:
        name, _, kind, shndx, value = obj.symbols[index]
        if kind == _STT_TLS:
            raise UnsupportedObject(f"thread-local symbol {name!r}")
        if shndx == _SHN_UNDEF:
            return siblings[name] if name in siblings else external[name]
        if shndx == _SHN_ABS:
            return value
        if shndx >= len(obj.sections) or obj.sections[shndx].address is None:
            raise UnsupportedObject(f"symbol {name!r} in section {shndx}, which is not loaded")
        return obj.sections[shndx].address + value

    for section in sections:
        target = obj.sections[section.info]
        for offset, sym, kind, addend in obj.relocations(section):
            if offset + 8 > target.size and kind in (_R_X86_64_64, _R_X86_64_PC64) or \
                    offset + 4 > target.size:
                raise UnsupportedObject(f"relocation outside {target.name!r}")
            place = target.address + offset
            name, _, _, shndx, _ = obj.symbols[sym]
            if kind == _R_X86_64_64:
                _store(view, place - base, symbol_address(sym) + addend, 8, signed=False)
            elif kind == _R_X86_64_PC64:
                _store(view, place - base, symbol_address(sym) + addend - place, 8)
            elif kind == _R_X86_64_PC32:
                _store(view, place - base, symbol_address(sym) + addend - place, 4)
            elif kind == _R_X86_64_PLT32:
                callee = stub[name] if shndx == _SHN_UNDEF and name in stub \
                    else symbol_address(sym)
                _store(view, place - base, callee + addend - place, 4)
            elif kind in _GOT_RELOCATIONS:
                if shndx != _SHN_UNDEF:
                    raise UnsupportedObject(f"GOT relocation against the local symbol {name!r}")
                _store(view, place - base, got[name] + addend - place, 4)
            else:
                raise UnsupportedObject(f"x86-64 relocation type {kind} in {target.name!r}")


def _store(view, at: int, value: int, size: int, signed: bool = True) -> None:
    if size == 4:
        if not -(1 << 31) <= value < (1 << 31):
            raise UnsupportedObject("a 32-bit relative relocation is out of range")
        struct.pack_into("<i", view, at, value)
    elif signed:
        struct.pack_into("<q", view, at, value)
    else:
        struct.pack_into("<Q", view, at, value & 0xFFFFFFFFFFFFFFFF)


def _resolve(name: str, binding: int) -> int:
    address = _symbols.get(name)
    if address is None:
        address = process_symbol(name)
    if address is None:
        if binding == _STB_WEAK:
            return 0
        raise UnsupportedObject(f"undefined symbol {name!r}")
    return address


class _LLVMEngine:
    """An object loaded by LLVM's JIT (MCJIT), with :class:`LoadedObject`'s interface."""

    def __init__(self, engine):
        self._engine = engine

    def address(self, name: str) -> int:
        address = self._engine.get_function_address(name)
        if not address:
            raise KeyError(f"symbol {name!r} is not defined by the loaded object")
        return address

    def keep(self) -> None:
        # one reference nobody will drop: not even interpreter shutdown frees the engine
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(self._engine))


# How objects were loaded in this process (read by tests and benchmarks).
stats = {"linked": 0, "llvm": 0}


def load(data):
    """Load the object ``data`` (bytes), or the objects ``data`` (a list of bytes) linked
    together, into this process: through :func:`load_object` where it can, else through
    LLVM's JIT. The result has ``address(name)`` and ``keep()``."""
    try:
        loaded = load_object(data)
        stats["linked"] += 1
        return loaded
    except UnsupportedObject as err:
        reason = err
    import llvmlite.binding as llvm

    publish_to_llvm()
    with machine_code._llvm_lock:
        tm = machine_code.create_target_machine()
        backing = llvm.parse_assembly("")
        backing.triple = tm.triple
        engine = llvm.create_mcjit_compiler(backing, tm)
        for part in [data] if isinstance(data, bytes) else data:
            engine.add_object_file(llvm.ObjectFileRef.from_data(part))
        engine.finalize_object()
    stats["llvm"] += 1
    if supported_host():
        logging.getLogger("functrans").debug("functrans: object loaded by LLVM (%s)", reason)
    return _LLVMEngine(engine)
