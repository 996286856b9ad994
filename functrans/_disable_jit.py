"""``disable_jit()``: run jitted functions eagerly, op by op, so pdb and print work."""
from __future__ import annotations

import contextlib

from functrans._config import config


@contextlib.contextmanager
def disable_jit(disable: bool = True):
    """Within this block, ``jit``-decorated functions run as plain Python.

        >>> import functrans
        >>> with functrans.disable_jit():
        ...     functrans.jit(lambda x: x + 1)(1)
        2
    """
    with config.setting("disable_jit", disable):
        yield
