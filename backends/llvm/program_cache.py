"""Programs in the on-disk compilation cache, run without the compiler.

A program's entry (see :mod:`cache`) holds its machine code, its LLVM IR and, for most
programs, its *layout* (:class:`runtime.Layout`, as JSON): the pointer-table slots of its
inputs, constants and outputs, the size of its scratch arena, its segments' names. The key
is made from the jaxpr as the front end hands it over, before any compiler pass, and the
options that decide the code (:func:`program_key`). So a hit needs none of the compiler:
not the shared passes (fusion, buffer planning), not the code generator and its modules,
not LLVM. A warm start is tracing, the key, reading the entry and linking its object
(:func:`cached_executable`).

A layout is checked against the program before it is trusted: the shape and dtype of every
input, output and constant against the jaxpr's types, every slot against the table, every
donation candidate against the output it may hold, every segment against the object's
symbols. An entry whose layout fails any check is deleted and the program compiled again.
Constants are never stored: a layout names which of the jaxpr's constants fills which slot,
and a program whose constants are not simply the jaxpr's (made by a compiler pass, or
those of control-flow bodies) is stored without a layout. On a hit such a program is
planned again (its plan's digest must match the entry's) and skips only LLVM.

An executable read from the cache plans its program only when asked for it (its
``program``, ``plan``, ``description``, ``cost_analysis()``): calls never need it.

    >>> key = program_key(closed)                                   # doctest: +SKIP
    >>> executable = cached_executable(closed, key, planner)        # doctest: +SKIP
"""
from __future__ import annotations

import logging
import sys
import types
import weakref

import numpy as np

from functrans.backends.compiler import passes
from functrans.backends.llvm import (blas, cache, float_mode, interrupts, libm, linker,
                                     targets, thread_pool)
from functrans.backends.llvm.runtime import Executable, Layout, array_data_offset
from functrans.core import ShapedArray

logger = logging.getLogger("functrans")

# How compilations were served in this process (read by tests and benchmarks).
stats = {"compiled": 0, "cache_hits": 0}

# The version of the layout's JSON form: a layout of another is not read (the backend's
# source digest in every key already keeps entries of other versions apart).
_LAYOUT_VERSION = 1
# Far more than any program has: a layout claiming more is not ours.
_MAX_SLOTS = 1 << 24
_MAX_BYTES = 1 << 48


class LayoutError(ValueError):
    """A stored layout that does not fit the program it is the entry of."""


def target_description(target=None) -> str:
    """Triple, CPU name and features of ``target`` (default: the CPU being compiled for), and
    the array layout baked into the code: part of the compilation cache key. The host's
    description is remembered on disk (see :func:`targets.host`), so a process whose
    programs all come from the cache never loads LLVM."""
    # the thread count decides how matrix products are split, the cache size which loops
    # stream their output past the cache
    return (f"{targets.resolve(target).description}|data@{array_data_offset()}"
            f"|threads={thread_pool.num_threads()}"
            f"|streamed>{targets.min_streamed_bytes()}")


# the last program's digest: a compile that misses computes its key twice (here, then in
# the pipeline), and printing a large jaxpr is most of a key's cost
_last_digest: list = [None, None]


def _program_digest(closed):
    ref, digest = _last_digest
    if ref is not None and ref() is closed:
        return digest
    try:
        digest = cache.program_digest(closed)
    except Exception as err:  # noqa: BLE001 (a program the printer fails on is not cached)
        logger.debug("functrans: a program without a cache key: %s", err)
        digest = None
    _last_digest[:] = [weakref.ref(closed), digest]
    return digest


def program_key(closed, fuse: bool = True, target=None):
    """The cache key of ``closed`` (before any compiler pass) compiled for ``target``
    (default: the CPU being compiled for) with the options that decide its code: whether
    it is fused, the passes left out, whether subnormals are flushed. None for a program
    that cannot be described (the jaxpr printer fails on it): it is compiled uncached."""
    digest = _program_digest(closed)
    if digest is None:
        return None
    disabled = ",".join(sorted(passes.disabled_passes()))
    return cache.cache_key(closed, target_description(target),
                           options=f"fuse={int(fuse)}|without={disabled}"
                                   f"|flush={int(float_mode.flushes())}",
                           digest=digest)


def compiler_replaced() -> bool:
    """Whether a function of the compiler loaded in this process (a module-level function
    of ``functrans.backends.compiler`` or ``functrans.backends.llvm``) was replaced at run
    time by one defined elsewhere, as tests do to put a miscompile in. Such a process
    neither stores layouts nor trusts them: its plans are not the ones on disk (entries
    without a layout stay safe, checked against the plan digest)."""
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(_COMPILER_PACKAGES):
            continue
        for attribute, value in list(vars(module).items()):
            if type(value) is types.FunctionType and (
                    value.__name__ != attribute or not value.__module__.startswith(
                        "functrans.") and not value.__code__.co_filename.startswith(_PYTHON)):
                return True
    return False


_COMPILER_PACKAGES = ("functrans.backends.compiler.", "functrans.backends.llvm.")
# where Python's own and installed libraries' code lives (functions a module imports by name)
_PYTHON = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix})


def cached_executable(closed, key: cache.Key, entry, planner):
    """The executable of ``closed`` from its cache ``entry`` (``(sections, meta)``, read
    under ``key``), or None when the entry holds no layout (the caller plans, and checks
    the entry's plan digest). ``planner()`` plans the program when the executable is
    inspected. An entry whose layout does not fit ``closed`` is deleted (None)."""
    sections, meta = entry
    stored = meta.get("layout")
    if stored is None or compiler_replaced():
        return None
    try:
        layout = layout_from_json(stored, closed)
        objects, ir_text, optimized = (entry_objects(sections), sections["ir"],
                                       sections["optimized_ir"])
        engine, entry_points = load_object(
            objects, [name for kind, name in layout.schedule if kind == "native"])
    except (LayoutError, KeyError) as err:
        logger.warning("functrans: discarding the compilation cache entry of key %s (%s)",
                       key, err)
        cache.discard(key)
        return None
    stats["cache_hits"] += 1
    executable = Executable.from_layout(layout, entry_points, engine, ir_text, optimized,
                                        planner)
    executable.object_size = sum(map(len, objects))  # reported by memory_analysis
    return executable


def object_sections(objects: list) -> dict:
    """The sections of an entry holding the program's ``objects`` (see
    :mod:`parallel_compile`): ``object``, then ``object.1``, ``object.2``..."""
    return {("object" if k == 0 else f"object.{k}"): obj for k, obj in enumerate(objects)}


def entry_objects(sections: dict) -> list:
    """The objects an entry's ``sections`` hold (KeyError when it holds none)."""
    objects = [sections["object"]]
    while f"object.{len(objects)}" in sections:
        objects.append(sections[f"object.{len(objects)}"])
    return objects


def load_object(objects: list, names):
    """Link a program's objects into this process (see :mod:`linker`), with what their code
    calls (the SIGINT counter, libm, BLAS, the thread pool); return what keeps them mapped,
    with the named entry points. KeyError when one is missing."""
    def any_calls(symbol: bytes) -> bool:
        return any(symbol in obj for obj in objects)

    if any_calls(interrupts.STATE_SYMBOL.encode()):
        interrupts.ensure_loaded()  # its loops poll the SIGINT counter
    if any_calls(b"ft_libm_"):
        libm.register_libm_symbols()
    if any(blas.needs_blas(obj) for obj in objects):
        blas.register_blas_symbols()
    if any(blas.splits_gemms(obj) for obj in objects):
        blas.register_gemm_symbols()
    if any_calls(thread_pool.SYMBOL.encode()):
        thread_pool.ensure_started()  # only programs with parallel loops need the workers
    loaded = linker.load(objects[0] if len(objects) == 1 else objects)
    try:
        addresses = {name: loaded.address(name) for name in names}
    except KeyError as err:
        raise KeyError(f"entry point missing from the compiled object: {err}") from None
    return loaded, addresses


# ---- the layout as JSON ----------------------------------------------------------------------


def _same_array(a: np.ndarray, value) -> bool:
    """Whether ``a`` is ``value``'s memory as it is (not a converted copy)."""
    b = np.asarray(value)
    return a is b or (a.shape == b.shape and a.dtype == b.dtype and a.strides == b.strides
                      and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


def layout_to_json(layout: Layout, closed):
    """``layout`` as plain JSON values, with each constant named by its position among
    ``closed``'s constants; None when it cannot be stored (a NumPy step, a constant that is
    not one of ``closed``'s, a literal result)."""
    if any(kind != "native" for kind, _ in layout.schedule):
        return None

    def const_index(array):
        for j, value in enumerate(closed.consts):
            if _same_array(array, value):
                return j
        return None

    consts = []
    for slot, array in layout.consts:
        j = const_index(array)
        if j is None:
            return None
        consts.append([slot, j])
    results = []
    for kind, where in layout.results:
        if kind == "literal":
            j = const_index(where)
            if j is None:
                return None
            results.append(["const", j])
        elif kind in ("output", "input"):
            results.append([kind, where])
        else:
            return None
    integer, floating = layout.poison
    return {"version": _LAYOUT_VERSION,
            "inputs": [[slot, None if dtype is None else str(dtype),
                        None if shape is None else list(shape)]
                       for slot, dtype, shape, _ in layout.inputs],
            "consts": consts,
            "outputs": [[slot, list(shape), str(dtype)] for slot, shape, dtype, _ in layout.outputs],
            "results": results,
            "aliases": sorted([k, list(positions)] for k, positions in layout.aliases.items()),
            "segments": [name for _, name in layout.schedule],
            "num_slots": layout.num_slots, "arena_size": layout.arena_size,
            "poison": [[list(r) for r in integer], [list(r) for r in floating]]}


def _integer(value, low: int, high: int, what: str) -> int:
    if type(value) is not int or not low <= value < high:
        raise LayoutError(f"{what} is {value!r}")
    return value


def _list(value, what: str, length=None) -> list:
    if type(value) is not list or (length is not None and len(value) != length):
        raise LayoutError(f"{what} is not a list" + (f" of {length}" if length else ""))
    return value


def _shape_of(value, what: str) -> tuple:
    return tuple(_integer(d, 0, _MAX_BYTES, f"a dimension of {what}")
                 for d in _list(value, what))


def _check_type(what: str, shape, dtype_name, aval) -> None:
    """The stored ``shape`` and ``dtype_name`` must be ``aval``'s (the jaxpr's type)."""
    if tuple(shape) != tuple(aval.shape) or dtype_name != str(np.dtype(aval.dtype)):
        raise LayoutError(f"{what} is {dtype_name}{list(shape)}, the program's is "
                          f"{np.dtype(aval.dtype)}{list(aval.shape)}")


def layout_from_json(data, closed) -> Layout:
    """The layout stored as ``data`` (see :func:`layout_to_json`) for ``closed``, every part
    checked against ``closed``; raises :class:`LayoutError`."""
    if type(data) is not dict or data.get("version") != _LAYOUT_VERSION:
        raise LayoutError("not a layout of this version")
    try:
        num_slots = _integer(data["num_slots"], 1, _MAX_SLOTS, "the number of slots")
        arena_size = _integer(data["arena_size"], 0, _MAX_BYTES, "the arena's size")
        slots_used: set = set()

        def slot_of(value, what):
            slot = _integer(value, 1, num_slots, f"the slot of {what}")
            if slot in slots_used:
                raise LayoutError(f"slot {slot} is used twice")
            slots_used.add(slot)
            return slot

        in_avals = closed.in_avals
        stored_inputs = _list(data["inputs"], "inputs", len(in_avals))
        inputs = []
        for i, (item, aval) in enumerate(zip(stored_inputs, in_avals)):
            slot, dtype_name, shape = _list(item, f"input {i}", 3)
            if dtype_name is None:  # not an array (a token): passed through as it is
                if shape is not None or slot is not None or isinstance(aval, ShapedArray):
                    raise LayoutError(f"input {i} is an array")
                inputs.append((None, None, None, None))
                continue
            if not isinstance(aval, ShapedArray):
                raise LayoutError(f"input {i} is not an array")
            shape = _shape_of(shape, f"input {i}")
            _check_type(f"input {i}", shape, dtype_name, aval)
            # an input no native code reads has no slot
            slot = None if slot is None else slot_of(slot, f"input {i}")
            inputs.append((slot, np.dtype(aval.dtype), shape, None))

        consts, const_arrays = [], {}

        def const_array(j):
            if j not in const_arrays:
                aval = closed.jaxpr.constvars[j].aval
                const_arrays[j] = np.asarray(closed.consts[j], dtype=aval.dtype, order="C")
                if const_arrays[j].shape != tuple(aval.shape):
                    raise LayoutError(f"constant {j} does not have its variable's shape")
            return const_arrays[j]

        for item in _list(data["consts"], "consts"):
            slot, j = _list(item, "a constant", 2)
            j = _integer(j, 0, len(closed.consts), "a constant's index")
            consts.append((slot_of(slot, f"constant {j}"), const_array(j)))

        out_avals = closed.out_avals
        stored_results = _list(data["results"], "results", len(out_avals))
        stored_outputs = _list(data["outputs"], "outputs")
        results, output_avals = [], {}
        for k, (item, aval) in enumerate(zip(stored_results, out_avals)):
            kind, where = _list(item, f"result {k}", 2)
            if kind == "output":
                where = _integer(where, 0, len(stored_outputs), f"result {k}'s output")
                output_avals.setdefault(where, aval)
                results.append(("output", where))
            elif kind == "input":
                where = _integer(where, 0, len(inputs), f"result {k}'s input")
                if inputs[where][1] is not None:
                    _check_type(f"result {k}", inputs[where][2], str(inputs[where][1]), aval)
                results.append(("input", where))
            elif kind == "const":
                where = _integer(where, 0, len(closed.consts), f"result {k}'s constant")
                array = const_array(where)
                _check_type(f"result {k}", array.shape, str(array.dtype), aval)
                results.append(("literal", array))
            else:
                raise LayoutError(f"result {k} is of kind {kind!r}")
        outputs = []
        for k, item in enumerate(stored_outputs):
            slot, shape, dtype_name = _list(item, f"output {k}", 3)
            if k not in output_avals:
                raise LayoutError(f"output {k} is no result")
            shape = _shape_of(shape, f"output {k}")
            _check_type(f"output {k}", shape, dtype_name, output_avals[k])
            outputs.append((slot_of(slot, f"output {k}"), shape,
                            np.dtype(output_avals[k].dtype), None))

        aliases = {}
        for item in _list(data["aliases"], "aliases"):
            k, positions = _list(item, "an alias", 2)
            k = _integer(k, 0, len(outputs), "an aliased output")
            _, shape, dtype, _ = outputs[k]
            candidates = []
            for i in _list(positions, "alias candidates"):
                i = _integer(i, 0, len(inputs), "an alias candidate")
                if inputs[i][1] != dtype or inputs[i][2] != shape:
                    raise LayoutError(f"output {k} cannot be written into input {i}")
                candidates.append(i)
            aliases[k] = candidates

        segments = _list(data["segments"], "segments")
        if not segments or not all(type(name) is str and name.startswith("ft_segment_")
                                   for name in segments):
            raise LayoutError("the segments are not named as segments")
        poison = []
        for ranges in _list(data["poison"], "the poisoned ranges", 2):
            poison.append([(_integer(start, 0, arena_size + 1, "a poisoned range's start"),
                            _integer(end, start, arena_size + 1, "a poisoned range's end"))
                           for start, end in (_list(r, "a range", 2) for r in
                                              _list(ranges, "ranges"))])
    except (KeyError, TypeError, ValueError) as err:
        if isinstance(err, LayoutError):
            raise
        raise LayoutError(f"malformed ({type(err).__name__}: {err})") from None
    return Layout(inputs, consts, outputs, results, aliases,
                  [("native", name) for name in segments], num_slots, arena_size,
                  tuple(poison))
