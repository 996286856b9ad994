"""Where in the user's code something happened: the first stack frame outside functrans."""
from __future__ import annotations

import itertools
import os
import sys
from typing import NamedTuple

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_INTERNAL_DIRS = (_PACKAGE_DIR + os.sep,)


def add_internal_dir(path: str) -> None:
    """Mark a directory (a backend's, say) as internal: its frames are never "the user's line"."""
    global _INTERNAL_DIRS
    path = os.path.abspath(path) + os.sep
    if path not in _INTERNAL_DIRS:
        _INTERNAL_DIRS = _INTERNAL_DIRS + (path,)


# Files (or path prefixes) of libraries built on functrans that registered themselves as
# internal (jax._src.traceback_util.register_exclusion); a live list, which such libraries
# may also edit directly (flax shows or hides its own frames this way).
excluded_paths: list[str] = []


def add_internal_path(path: str) -> None:
    """Mark a file (or every file whose path starts with ``path``) as internal."""
    path = os.path.abspath(path)
    if path not in excluded_paths:
        excluded_paths.append(path)


def is_internal_file(filename: str) -> bool:
    return filename.startswith(_INTERNAL_DIRS) or filename.startswith("<frozen ") or (
        bool(excluded_paths) and filename.startswith(tuple(excluded_paths)))


class SourceInfo(NamedTuple):
    filename: str
    lineno: int
    function: str
    # The frame's code object and instruction offset: the column is looked up from them only
    # when asked for (a summary such as print_saved_residuals), not on every staged equation.
    code: object = None
    lasti: int = -1

    def __str__(self):
        return f"{os.path.basename(self.filename)}:{self.lineno} ({self.function})"

    @property
    def column(self) -> int | None:
        """Where on its line the call expression starts (0-based), if Python records it."""
        positions = getattr(self.code, "co_positions", None)
        if positions is None or self.lasti < 0:
            return None
        entry = next(itertools.islice(positions(), self.lasti // 2, None), None)
        return entry[2] if entry is not None else None


def user_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` call made by the caller of this function
    that points at the user's line (the innermost frame outside functrans)."""
    frame, level = sys._getframe(2), 2
    while frame is not None and is_internal_file(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


def user_frame(skip: int = 1) -> SourceInfo | None:
    """The innermost frame that is not functrans code, or None if there is none."""
    frame = sys._getframe(skip)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not is_internal_file(filename) and "contextlib" not in filename:
            # the qualified name (outer.<locals>.f), as JAX's source info names functions
            code = frame.f_code
            name = getattr(code, "co_qualname", code.co_name)  # Python 3.11+
            return SourceInfo(filename, frame.f_lineno, name, code, frame.f_lasti)
        frame = frame.f_back
    return None


def user_line_note() -> str:
    info = user_frame(2)
    return f"(raised for the call at {info.filename}:{info.lineno}, in {info.function})" if info else ""
