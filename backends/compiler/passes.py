"""A backend's compiler is a list of named passes, run in order, each of which can be dumped.

Every pass takes the program as the previous pass left it (a ``ClosedJaxpr`` early on,
then a fused :class:`~functrans.backends.compiler.fusion.Program`, then a backend's plan)
and returns the next form. With the config option ``dump_passes`` set to a folder (or the
environment variable ``FUNCTRANS_DUMP_PASSES``), each compilation writes one subfolder,
``<n>-<backend>``, holding ``00-input.txt`` and, per pass, ``<k>-<name>.txt``: the program
as that pass returned it. Consecutive files are a pass's input and output.

    >>> from functrans.backends.compiler.passes import Pass, run_passes
    >>> run_passes("demo", [Pass("double", lambda x: 2 * x), Pass("inc", lambda x: x + 1)], 3)
    7
"""
from __future__ import annotations

import itertools
import os
import threading
from typing import Any, Callable, NamedTuple, Sequence

from functrans._config import config


class Pass(NamedTuple):
    """One step of a backend's compiler: ``run(program) -> program``."""
    name: str
    run: Callable[[Any], Any]


_dump_numbers = itertools.count()
_dump_lock = threading.Lock()


def run_passes(backend: str, passes: Sequence[Pass], program):
    """``program`` put through ``passes`` in order, each pass's result dumped when the
    ``dump_passes`` option names a folder (see the module docstring)."""
    folder = _dump_folder(backend)
    if folder:
        _write(folder, "00-input", program)
    for k, step in enumerate(passes, start=1):
        program = step.run(program)
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
