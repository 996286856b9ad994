"""Busy processes beside the measured one (``python -m benchmarks --contention``).

A shared machine is rarely quiet: another CPU-bound process takes a core now and then, and a
library whose threads wait for each other (a product split once per thread, workers that
spin for the core the busy process wants) slows down far more than its share. These
processes make that the measured case: each spins a Python loop, at normal priority, for the
whole run, and is stopped when the run ends, by Ctrl-C too.

    >>> with busy_processes(1):          # doctest: +SKIP
    ...     run_the_workloads()
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys

# the busy loop: no imports, no output; it exits when its parent does (its stdin closes)
_SPIN = ("import sys, threading\n"
         "threading.Thread(target=lambda: (sys.stdin.read(), __import__('os')._exit(0)),"
         " daemon=True).start()\n"
         "while True:\n    pass\n")


def count_for(cores_per_process: int, cores: int | None = None) -> int:
    """Busy processes for one per ``cores_per_process`` cores (at least one).

        >>> count_for(2, cores=8)
        4
    """
    if cores_per_process < 1:
        raise ValueError(f"--contention takes a number of cores per busy process (>= 1), "
                         f"got {cores_per_process}")
    cores = cores or os.cpu_count() or 1
    return max(1, cores // cores_per_process)


@contextlib.contextmanager
def busy_processes(count: int):
    """Run ``count`` CPU-bound Python processes for the length of the block."""
    procs = []
    try:
        for _ in range(count):
            procs.append(subprocess.Popen([sys.executable, "-c", _SPIN], stdin=subprocess.PIPE,
                                          stdout=subprocess.DEVNULL))
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
