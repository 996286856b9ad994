"""``jax.extend.source_info_util``: where in the user's code an operation was traced from."""
from __future__ import annotations

import contextlib

from functrans._source_info import SourceInfo, add_internal_path, user_frame

__all__ = ["SourceInfo", "current", "user_frame", "extend_name_stack", "transform_name_stack",
           "new_name_stack", "register_exclusion"]


def current() -> SourceInfo | None:
    """The user's source line being traced now (None outside user code)."""
    return user_frame()


@contextlib.contextmanager
def extend_name_stack(name: str):
    """A scope named ``name`` for the operations traced inside (names are not recorded in
    functrans's programs, which keep source lines instead)."""
    yield


transform_name_stack = extend_name_stack


def new_name_stack(name: str = ""):
    return name


def register_exclusion(path: str) -> None:
    """Treat frames of ``path`` (a file, or files under a folder) as library code, never as
    the user's line that an operation is attributed to."""
    add_internal_path(path)
