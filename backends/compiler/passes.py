"""A backend's compiler is a list of named passes, run in order, each of which can be dumped.

Every pass takes the program as the previous pass left it (a ``ClosedJaxpr`` early on,
then a fused :class:`~functrans.backends.compiler.fusion.Program`, then a backend's plan)
and returns the next form. With the config option ``dump_passes`` set to a folder (or the
environment variable ``FUNCTRANS_DUMP_PASSES``), each compilation writes one subfolder,
``<n>-<backend>``, holding ``00-input.txt`` and, per pass, ``<k>-<name>.txt``: the program
as that pass returned it. Consecutive files are a pass's input and output.

Passes that only make the program faster can be left out by name, to bisect a wrong
result: the config option ``disable_passes`` (or ``FUNCTRANS_DISABLE_PASSES``) lists them,
comma-separated. A pass left out runs its ``off`` form instead (none: the program goes on
unchanged); a pass the program cannot do without (``required``) cannot be left out. Some
optimizations live inside a pass or in code generation (carries updated in place, kernels
run on the thread pool, ...): they have names too (:data:`INNER_SWITCHES`), and
:func:`enabled` tells their code whether to run.

    >>> from functrans.backends.compiler.passes import Pass, run_passes
    >>> run_passes("demo", [Pass("double", lambda x: 2 * x), Pass("inc", lambda x: x + 1)], 3)
    7
    >>> run_passes("demo", [Pass("double", lambda x: 2 * x), Pass("inc", lambda x: x + 1)], 3,
    ...            disabled={"double"})
    4
"""
from __future__ import annotations

import itertools
import os
import threading
from typing import Any, Callable, NamedTuple, Sequence

from functrans._config import config


class Pass(NamedTuple):
    """One step of a backend's compiler: ``run(program) -> program``. ``off``: what runs
    instead when the pass is disabled (None: nothing); ``required``: it cannot be."""
    name: str
    run: Callable[[Any], Any]
    off: Callable[[Any], Any] | None = None
    required: bool = False


# Optimizations inside passes and code generation that can be switched off by name, as
# passes are (see :func:`enabled`), with what switching them off does.
INNER_SWITCHES = {
    "broadcast_operands": "a broadcast several kernels read is written out as a full array "
                          "(not its operand, with the broadcast repeated in each reader)",
    "carries_in_place": "loop carries get two buffers each, swapped every iteration",
    "common_subexpressions": "equal equations are each computed (inside the inline pass)",
    "donation": "outputs are never written into donated inputs' buffers",
    "merged_loops": "a loop reading what an earlier loop of its shape wrote stays a loop of "
                    "its own (the value is written out and read back)",
    "matrix_vector": "products with one row or one column call BLAS's gemm, not gemv",
    "parallel_loops": "loops and products run on the calling thread alone",
    "recomputed_values": "a few additions, products or selects that several kernels read "
                         "are written out once, not computed again in each reader",
    "register_tiles": "float32 products with few rows call BLAS's sgemm, not generated "
                      "register-tiled code",
    "shared_kernels": "identical kernels are compiled once each, not shared",
    "streaming_stores": "large loops write their outputs with ordinary stores",
}

_parsed: tuple = ("", frozenset())


def disabled_passes() -> frozenset:
    """The names in the config option ``disable_passes``."""
    global _parsed
    text = config.read("disable_passes") or ""
    if _parsed[0] != text:
        _parsed = (text, frozenset(n.strip() for n in text.split(",") if n.strip()))
    return _parsed[1]


def enabled(name: str) -> bool:
    """Whether the optimization ``name`` (a key of :data:`INNER_SWITCHES`) may run."""
    assert name in INNER_SWITCHES, name
    return name not in disabled_passes()


def optional_names(passes: Sequence[Pass]) -> list:
    """The passes of ``passes`` that may be disabled, then the inner switches."""
    return [p.name for p in passes if not p.required] + list(INNER_SWITCHES)


def check_disabled(backend: str, passes: Sequence[Pass], disabled) -> None:
    """Raise ValueError for a name in ``disabled`` that is neither an optional pass of
    ``passes`` nor an inner switch."""
    names = {p.name: p for p in passes}
    for name in sorted(disabled):
        if name in INNER_SWITCHES:
            continue
        if name not in names:
            optional = sorted(optional_names(passes))
            raise ValueError(f"disable_passes: the {backend} backend has no pass {name!r}; "
                             f"those that can be disabled: {', '.join(optional)}")
        if names[name].required:
            raise ValueError(f"disable_passes: the {backend} backend's pass {name!r} cannot be "
                             f"disabled: the program cannot be compiled without it")


_dump_numbers = itertools.count()
_dump_lock = threading.Lock()


def run_passes(backend: str, passes: Sequence[Pass], program, disabled=None):
    """``program`` put through ``passes`` in order, each pass's result dumped when the
    ``dump_passes`` option names a folder (see the module docstring). ``disabled``: the
    names of passes to leave out (default: the config option ``disable_passes``)."""
    disabled = disabled_passes() if disabled is None else frozenset(disabled)
    check_disabled(backend, passes, disabled)
    folder = _dump_folder(backend)
    if folder:
        _write(folder, "00-input", program)
    for k, step in enumerate(passes, start=1):
        if step.name not in disabled:
            program = step.run(program)
        elif step.off is not None:
            program = step.off(program)
        if folder:
            _write(folder, f"{k:02d}-{step.name}", program)
    return program


def describe(program) -> str:
    """The text a dump holds for ``program``: its ``describe()`` if it has one (fused
    programs and plans), else how it prints (jaxprs)."""
    text = program.describe() if hasattr(program, "describe") else str(program)
    return text if text.endswith("\n") else text + "\n"


def _dump_folder(backend: str) -> str | None:
    root = config.read("dump_passes")
    if not root:
        return None
    with _dump_lock:  # numbered in the order compilations start, also across threads
        while True:
            folder = os.path.join(root, f"{next(_dump_numbers):04d}-{backend}")
            try:
                os.makedirs(folder)
                return folder
            except FileExistsError:  # another process dumps into the same folder
                continue


def _write(folder: str, name: str, program) -> None:
    with open(os.path.join(folder, name + ".txt"), "w") as f:
        f.write(describe(program))
