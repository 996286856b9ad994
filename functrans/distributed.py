"""Multi-process runs: ``initialize()`` under ``mpirun``/``mpiexec`` joins the processes."""
from __future__ import annotations

_state = {"process_index": 0, "process_count": 1, "comm": None}


def process_index() -> int:
    """This process's rank (0 when not running distributed)."""
    return _state["process_index"]


def process_count() -> int:
    """How many processes take part (1 when not running distributed)."""
    return _state["process_count"]
