"""A program's module compiled as several parts at once, on several threads.

LLVM's optimizer and code generator, about 110 ms of CPU for the MLP train step (the
kernels' vectorization and instruction selection), work on one module on one thread. A
program is made of independent kernels, so its module is cut into *parts*, each compiled
on a thread of its own and emitted as an object of its own; the objects are linked as one
(see :mod:`linker`) and cached together (see :mod:`program_cache`). Every kernel's
machine code stays exactly what one module gives, because a kernel's code depends on its
own body and on its call sites (LLVM specializes an internal function to the constants
all its callers pass: a kernel's loop bounds), and the cut keeps both:

* Before optimization (:func:`partition_program`), a kernel moves to another part with
  the functions that call it with computed arguments (its chunk wrappers, which the
  segment only takes the address of). A direct call from the segment, whose arguments are
  pointers the segment loaded and literal bounds, becomes a call of a *trampoline* in the
  kernel's part: an unoptimized function taking the pointers and calling the kernel with
  the same literals, so the kernel sees the same constants at the same number of call
  sites. Parts are optimized and emitted at once.
* When that finds too little to move (a kernel called from a segment or body that has
  loops of its own stays with it, see :func:`partition_program`), the module is optimized
  whole and its optimized functions are shared out among the code generators
  (:func:`partition_optimized`), as LLVM's own parallel code generation for link-time
  optimization does.

In a part, the functions of other parts that it uses are declared, with external linkage
and hidden visibility on both sides. Parts are balanced by the lines of their functions
(an ``optnone`` one, which LLVM neither optimizes nor selects instructions for with its
full selector, counts a quarter). A program is cut only when each part gets at least
``MIN_PART_LINES`` (a small program's parts would cost more to set up than they save),
into a part per thread: as many threads as run a parallel loop (``FUNCTRANS_NUM_THREADS``,
else the CPUs this process may use: see :func:`thread_pool.num_threads`), at most
``MAX_THREADS``, and no more than the machine has cores free (as the compile starts: see
:func:`thread_pool.free_cores`; on a busy machine the calling thread would wait for parts
whose threads wait for a core); one thread compiles whole.

llvmlite serializes every call into LLVM behind one process-wide lock. A part touches
nothing but its own LLVM context, module, pass pipeline and target machine, which LLVM
allows from several threads at once, so its two long calls, optimizing and emitting, are
made past that lock (:func:`machine_code.unlocked`). The calling thread compiles parts
too, each thread taking the next part left (:func:`_in_parallel`); a KeyboardInterrupt or
an error in any thread is raised when every thread has finished; a part LLVM refuses (a
bug here) makes the module compile whole.

    >>> objects, optimized_ir = optimize_and_emit(ir_text, names)   # doctest: +SKIP
"""
from __future__ import annotations

import logging
import re
import threading

from functrans.backends.llvm import float_mode, machine_code, targets, thread_pool

logger = logging.getLogger("functrans")

# Lines of IR each part must get (counted as below): about 10 ms of LLVM's time, against
# about 2 ms to set a part up (its text, parsing it, a thread, one more object to link).
MIN_PART_LINES = 300
MAX_THREADS = 4
_OPTNONE_SHARE = 0.25
# Parts before optimization are used when no part holds more than its share of the lines
# and this fraction of the whole (else the functions that cannot move, such as a segment
# with loops, would leave the other threads idle while the first optimizes them).
_IMBALANCE = 0.25


def optimize_and_emit(ir_text: str, names: dict, target=None,
                      spare: int | None = None) -> tuple[list, str]:
    """:func:`machine_code.optimize_and_emit`, in parts on several threads when the program
    is large enough (see the module doc) and ``spare`` cores are free besides the calling
    thread's (default: :func:`thread_pool.spare_cores`). Returns (objects, optimized IR)."""
    tm = machine_code.target_machine(target)
    with machine_code._llvm_lock:
        threads, parts = _threads_and_parts(ir_text, spare)
        texts = partition_program(ir_text, parts) if parts > 1 else None
        if texts is not None:
            machines = [tm] + _worker_machines(targets.resolve(target), threads - 1)
            try:
                results = _in_parallel(_compile_part, texts, machines)
                return [obj for obj, _ in results], "\n".join(text for _, text in results)
            except RuntimeError as err:
                _refused(err)
        module = machine_code.optimized_module(ir_text, names, tm)
        optimized = str(module)
        texts = partition_optimized(optimized, parts) if parts > 1 else None
        if texts is not None:
            machines = [tm] + _worker_machines(targets.resolve(target), threads - 1)
            try:
                return _in_parallel(_emit_part, texts, machines), optimized
            except RuntimeError as err:
                _refused(err)
        return [tm.emit_object(module)], optimized


def _refused(err) -> None:
    logger.warning("functrans: compiling the program in parts failed (%s); compiling it "
                   "whole", err)


def parts_for(text: str, spare: int | None = None) -> int:
    """How many parts to compile the module ``text`` as (1: whole), with ``spare`` cores
    free besides the calling thread's (default: :func:`thread_pool.spare_cores`)."""
    return _threads_and_parts(text, spare)[1]


def _threads_and_parts(text: str, spare: int | None = None) -> tuple:
    """``(threads, parts)`` for the module ``text``: a part per thread. (More parts, for
    threads to share out as they come, cost more than they balance: each part repeats
    what LLVM does once per module, and four parts of the MLP train step took a fifth
    more CPU than two.)"""
    if not (machine_code.unlocked("LLVMPY_TargetMachineEmitToMemory")
            and machine_code.unlocked("LLVMPY_RunNewModulePassManager")):
        return 1, 1
    if spare is None:
        spare = thread_pool.spare_cores()
    threads = min(thread_pool.num_threads(), 1 + spare, MAX_THREADS)
    if threads < 2:  # a busy machine: the module's text is not even read (0.4 ms)
        return 1, 1
    size = sum(f.size for f in _parse(text)[1].values())
    parts = min(threads, int(size // MIN_PART_LINES))
    return (parts, parts) if parts > 1 else (1, 1)


# ---- reading a module's text -----------------------------------------------------------------
#
# Both llvmlite's printing (before optimization: a function's attributes on its ``define``
# line, its ``{`` on the next) and LLVM's (after: attribute groups, ``{`` ending the line)
# put each definition at the start of a line and close it with a line ``}``.

_NAME = re.compile(r'@("(?:[^"\\]|\\.)*"|[-\w.$]+)\(')
_REFERENCE = re.compile(r'@("(?:[^"\\]|\\.)*"|[-\w.$]+)')
_ATTRIBUTE_GROUP = re.compile(r"^attributes #(\d+) = \{(.*)\}$")
_GROUP_USE = re.compile(r"#(\d+)")
# what a module's every part would copy, though code may write it (each copy would be a
# variable of its own), or what a part cannot declare
_UNSPLITTABLE = re.compile(r"^(?:\$|@[^=]*= (?:internal|private) (?:[\w()]+ )*global |"
                           r"@[^=]*= [^\n]*\b(?:alias|ifunc)\b)")
_LOCAL_LINKAGE = re.compile(r"^define (?:internal|private) ")


class _Function:
    """A function defined in a module's text: its lines (``define`` to ``}``), name,
    whether it is exported, ``optnone`` or ``alwaysinline``, and its size in lines
    (``optnone`` ones counted at ``_OPTNONE_SHARE``)."""

    def __init__(self, lines: list, optnone_groups: set):
        self.lines = lines
        header = lines[0]
        self.name = _NAME.search(header).group(1)
        self.exported = not _LOCAL_LINKAGE.match(header)
        attributes = header[_close_paren(header, _NAME.search(header).end() - 1) + 1:]
        groups = _GROUP_USE.findall(attributes)
        words = attributes.replace("{", " ").split()
        self.optnone = "optnone" in words or bool(groups and groups[-1] in optnone_groups)
        self.alwaysinline = "alwaysinline" in words
        self.size = (_OPTNONE_SHARE if self.optnone else 1.0) * len(lines)
        self._references = None

    def references(self) -> list:
        """``(line index, name, is the callee of a call)`` of each ``@name`` in its body."""
        if self._references is not None:
            return self._references
        found = self._references = []
        for k, line in enumerate(self.lines[1:], start=1):
            if "@" not in line:
                continue
            call = _CALL.match(line)
            for m in _REFERENCE.finditer(line):
                callee = call is not None and m.start() == call.start(3) - 1
                found.append((k, m.group(1), callee))
        return found

    def declaration(self) -> str:
        """A ``declare`` of this function with external linkage and hidden visibility: its
        return type, name and parameters, without its function attributes."""
        header = self.lines[0]
        end = _close_paren(header, _NAME.search(header).end() - 1)
        head = _LOCAL_LINKAGE.sub("define ", header[:end + 1])
        head = re.sub(r" (?:local_)?unnamed_addr\b", "", head)
        return "declare hidden" + head[len("define"):]

    def defined(self, hidden: bool) -> list:
        """Its lines, with external linkage and hidden visibility when ``hidden``."""
        if not hidden or self.exported:
            return self.lines
        return [_LOCAL_LINKAGE.sub("define hidden ", self.lines[0])] + self.lines[1:]


def _close_paren(text: str, start: int) -> int:
    """The index of the parenthesis closing the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced parentheses")


def _parse(text: str):
    """``(items, functions)``: the module's top-level lines in order, each a line or a
    :class:`_Function`, and the functions by name; ``(None, {})`` when it cannot be split."""
    lines = text.split("\n")
    optnone_groups = set()
    for line in lines:
        m = _ATTRIBUTE_GROUP.match(line)
        if m and "optnone" in m.group(2).split():
            optnone_groups.add(m.group(1))
    items, functions, i = [], {}, 0
    try:
        while i < len(lines):
            line = lines[i]
            if line.startswith("define "):
                j = lines.index("}", i)
                f = _Function(lines[i:j + 1], optnone_groups)
                items.append(f)
                functions[f.name] = f
                i = j + 1
                continue
            if _UNSPLITTABLE.match(line):
                return None, {}
            items.append(line)
            i += 1
    except (ValueError, AttributeError):  # not the printing this module knows
        return None, {}
    return items, functions


def _balance(units: dict, parts: int, loads: list) -> dict:
    """Unit name -> part, the largest units first to the least loaded part (``loads``:
    what each part holds already)."""
    owner = {}
    for name in sorted(units, key=lambda n: (-units[n], n)):
        k = loads.index(min(loads))
        owner[name] = k
        loads[k] += units[name]
    return owner


def _write(items: list, functions_of, extra: list) -> str:
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(item)
        else:
            out.extend(functions_of(item))
    return "\n".join(out + extra)


# ---- parts before optimization ---------------------------------------------------------------

# a call: its start, the callee's return type, the callee, the arguments
_CALL = re.compile(r'^(\s*(?:%"[^"]*" = |%[-\w.]+ = )?(?:tail )?call )(\S+) '
                   r'@("(?:[^"\\]|\\.)*"|[-\w.$]+)\((.*)\)$')
_RESULT = re.compile(r'^\s*(%"[^"]*"|%[-\w.]+) = ')
_POINTER_VALUE = re.compile(r'^(\S+\*) (%"[^"]*"|%[-\w.]+)$')


def _split_arguments(text: str) -> list:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if text.strip():
        parts.append(text[start:].strip())
    return parts


def _trampoline_form(line: str):
    """``(passed, template)`` of a call whose arguments are pointers (values the caller
    loaded, which LLVM knows nothing of) and literals: the pointers' ``(type, value)``
    and the arguments with each pointer replaced by ``{k}``; None for any other call."""
    m = _CALL.match(line)
    if m is None:
        return None
    passed, template = [], []
    for argument in _split_arguments(m.group(4)):
        pointer = _POINTER_VALUE.match(argument)
        if pointer:
            template.append(f"{pointer.group(1)} {{{len(passed)}}}")
            passed.append((pointer.group(1), pointer.group(2)))
        elif "%" in argument or "@" in argument or " " not in argument:
            return None  # a value the caller computed, a reference: LLVM may know it
        else:
            template.append(argument.replace("{", "{{").replace("}", "}}"))
    return passed, ", ".join(template)


class _Program:
    """A module's functions (see :func:`_parse`), who uses whom, and the units that may
    move out of the first part (see :func:`partition_program`)."""

    def __init__(self, functions: dict):
        self.functions = functions
        self.refs = {name: [] for name in functions}  # name -> (caller, line, is a call)
        for f in functions.values():
            for k, name, callee in f.references():
                if name in functions:
                    self.refs[name].append((f.name, k, callee))
        self.helpers = {n for n, f in functions.items() if f.alwaysinline and not f.exported}
        self.address_only = {n for n, f in functions.items() if not f.exported and self.refs[n]
                             and not any(c for _, _, c in self.refs[n])}
        self.units, self.members, self.calls = {}, {}, {}
        for name, f in functions.items():
            self._unit(name, f)
        # a wrapper that moves with its kernel does not move on its own
        for name in list(self.units):
            if functions[name].optnone and any(name in m[1:] for m in self.members.values()):
                del self.units[name], self.members[name]

    def uses(self, f) -> set:
        return {name for _, name, _ in f.references() if name in self.functions}

    def _unit(self, name: str, f) -> None:
        refs, helpers = self.refs[name], self.helpers
        if f.exported or name in helpers or not refs or any(c == name for c, _, _ in refs):
            return
        if f.optnone:  # a wrapper of BLAS or of a kernel: moves alone, or with its kernel
            if name in self.address_only and self.uses(f) <= helpers:
                self.units[name], self.members[name] = f.size, [name]
            return
        if not self.uses(f) <= helpers:
            return
        wrappers, calls = set(), []
        for caller, k, callee in refs:
            c = self.functions[caller]
            if caller in self.address_only and c.optnone and self.uses(c) <= helpers | {name}:
                wrappers.add(caller)
            elif callee and c.optnone and _trampoline_form(c.lines[k]) is not None:
                calls.append((caller, k))
            else:
                return
        self.units[name] = f.size + sum(self.functions[w].size for w in wrappers)
        self.members[name] = [name] + sorted(wrappers)
        self.calls[name] = calls


def partition_program(text: str, parts: int):
    """The module ``text`` (llvmlite's printing, before optimization) as ``parts`` module
    texts (see the module doc), or None when too little can move out of the first part.

    What moves, as a unit: an internal function with no ``optnone`` (a kernel) that calls
    only ``alwaysinline`` helpers (each part copies those it needs), with the ``optnone``
    functions whose address alone is taken and that call it (its chunk wrappers), when its
    every other caller is an ``optnone`` function calling it with pointers and literals;
    and an ``optnone`` function whose address alone is taken and that calls no function of
    the module (a product's chunk wrapper, which calls BLAS). A kernel called from a
    function LLVM optimizes stays: that caller's code depends on what LLVM learns of it."""
    items, functions = _parse(text)
    if items is None or parts < 2:
        return None
    program = _Program(functions)
    if not program.units:
        return None
    moving = {m for unit in program.members.values() for m in unit}
    loads = [sum(f.size for n, f in functions.items() if n not in moving)] + [0.0] * (parts - 1)
    owner = _balance(program.units, parts, loads)
    if max(loads) > sum(loads) * (1 / parts + _IMBALANCE):
        return None  # what cannot move outweighs the rest: compiled whole, emitted in parts
    part_of = {m: owner[unit] for unit, ms in program.members.items() for m in ms}
    replaced, bodies, declarations = _trampolines(program, part_of, parts)
    shared = {m for m, k in part_of.items() if k != 0}  # reached from the first part

    def first_part(f):
        if f.name in shared:
            return [f.declaration()] if f.name in program.address_only else []
        return [replaced.get((f.name, k), line) for k, line in enumerate(f.lines)]

    texts = [_write(items, first_part, declarations)]
    for p in range(1, parts):
        helpers = set()
        for m, k in part_of.items():
            if k == p:
                helpers |= program.uses(functions[m]) & program.helpers

        def other_part(f, p=p, helpers=helpers):
            if part_of.get(f.name) == p:
                return f.defined(hidden=f.name in program.address_only)
            return f.lines if f.name in helpers else []
        texts.append(_write(items, other_part, bodies[p]))
    return texts


def _trampolines(program: _Program, part_of: dict, parts: int):
    """The trampolines of the kernels that leave the first part, one per kernel and form of
    call: ``(replaced, bodies, declarations)``, the calls' new lines by (caller, line), each
    part's trampoline definitions, and their declarations in the first part."""
    replaced, bodies, declarations = {}, [[] for _ in range(parts)], []
    for kernel, calls in program.calls.items():
        part = part_of[kernel]
        if part == 0:
            continue
        attributes = "noinline nounwind optnone" + (
            f" {float_mode.ATTRIBUTE}"
            if float_mode.ATTRIBUTE in program.functions[kernel].lines[0] else "")
        forms = {}
        for caller, k in calls:
            line = program.functions[caller].lines[k]
            passed, template = _trampoline_form(line)
            m = _CALL.match(line)
            returns = m.group(2)
            name = forms.get((returns, template))
            if name is None:
                name = forms[(returns, template)] = _trampoline_name(kernel, len(forms))
                params = ", ".join(f'{ty} %"p{i}"' for i, (ty, _) in enumerate(passed))
                inner = template.format(*[f'%"p{i}"' for i in range(len(passed))])
                call = f"call {returns} @{kernel}({inner})"
                body = [f"  {call}", "  ret void"] if returns == "void" else \
                    [f'  %"r" = {call}', f'  ret {returns} %"r"']
                bodies[part] += [f"define hidden {returns} @{name}({params}) {attributes}",
                                 "{", "entry:", *body, "}"]
                declarations.append(f"declare hidden {returns} @{name}"
                                    f"({', '.join(ty for ty, _ in passed)})")
            arguments = ", ".join(f"{ty} {value}" for ty, value in passed)
            replaced[(caller, k)] = f"{m.group(1)}{returns} @{name}({arguments})"
    return replaced, bodies, declarations


def _trampoline_name(kernel: str, index: int) -> str:
    if kernel.startswith('"'):
        return f'{kernel[:-1]}.call{index}"'
    return f'"{kernel}.call{index}"'


# ---- parts after optimization ----------------------------------------------------------------


def partition_optimized(text: str, parts: int):
    """The optimized module ``text`` (LLVM's printing) as ``parts`` module texts, each
    defining a share of its functions and declaring the others it uses; None when
    ``parts`` is 1 or the module cannot be split (see :func:`_parse`)."""
    items, functions = _parse(text)
    if items is None or parts < 2 or len(functions) < parts:
        return None
    owner = _balance({n: f.size for n, f in functions.items()}, parts, [0.0] * parts)
    shared = set()  # functions used outside their own part
    for f in functions.values():
        shared.update(name for _, name, _ in f.references()
                      if name in owner and owner[name] != owner[f.name])

    def text_of(p: int) -> str:
        def lines(f):
            if owner[f.name] == p:
                return f.defined(hidden=f.name in shared)
            return [f.declaration()] if f.name in shared else []
        return _write(items, lines, [])

    return [text_of(p) for p in range(parts)]


# ---- compiling the parts ---------------------------------------------------------------------

_workers: dict = {}  # target name -> the target machines of the threads besides the caller


def _worker_machines(target, count: int) -> list:
    """``count`` target machines of ``target`` for the threads besides the caller (one
    each: a target machine serves one module at a time), kept for the next programs. The
    caller holds ``machine_code._llvm_lock``."""
    machines = _workers.setdefault(target.name, [])
    while len(machines) < count:
        machines.append(machine_code.create_target_machine(target=target))
    return machines[:count]


def _emit_part(text: str, tm) -> bytes:
    """The object of the optimized module ``text``."""
    return machine_code.emitted(machine_code.parsed(text), tm)


def _compile_part(text: str, tm) -> tuple:
    """``(object, optimized IR)`` of the module ``text``: optimized as
    :func:`machine_code.optimized_module` does, past llvmlite's lock."""
    import llvmlite.binding as llvm
    module = machine_code.parsed(text)
    module.triple = tm.triple
    module.data_layout = str(tm.target_data)
    tuning = llvm.create_pipeline_tuning_options(speed_level=2)
    machine_code.tune(tuning)
    builder = llvm.create_pass_builder(tm, tuning)
    pipeline = builder.getModulePassManager()
    try:
        machine_code.unlocked("LLVMPY_RunNewModulePassManager")(pipeline, module, builder)
    finally:
        machine_code._free_pass_manager(pipeline)
    optimized = str(module)  # before emission, whose own passes rewrite the module
    return machine_code.emitted(module, tm), optimized


def _in_parallel(work, texts: list, machines: list) -> list:
    """``work(text, machine)`` for every text of ``texts``, on this thread and one more per
    further machine of ``machines`` (each thread with its own), every thread taking the
    next text not taken yet: a thread the system does not run leaves its share to the
    others."""
    results, errors = [None] * len(texts), []
    # the longest first; next() of a list's iterator is atomic under the GIL
    taken = iter(sorted(range(len(texts)), key=lambda k: -len(texts[k])))
    stop = threading.Event()

    def run(machine):
        try:
            for k in taken:
                if stop.is_set():
                    return
                results[k] = work(texts[k], machine)
        except BaseException as err:  # noqa: BLE001 (raised on the calling thread, below)
            stop.set()
            errors.append(err)

    threads = [threading.Thread(target=run, args=(machine,), daemon=True,
                                name=f"functrans-compile-{k}")
               for k, machine in enumerate(machines[1:len(texts)], start=1)]
    for thread in threads:
        thread.start()
    try:
        run(machines[0])
    finally:
        for thread in threads:
            thread.join()
    if errors:
        # a KeyboardInterrupt first: Ctrl-C stops the compile
        raise next((e for e in errors if isinstance(e, KeyboardInterrupt)), errors[0])
    return results
