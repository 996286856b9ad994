"""Tracebacks that end in the user's code: frames inside functrans are dropped from errors
raised through the public API (keep them with ``FUNCTRANS_TRACEBACK_FILTERING=off``)."""
from __future__ import annotations

import functools

from functrans._config import config
from functrans._source_info import add_internal_path, excluded_paths, is_internal_file

# the registered exclusions (JAX's name for the list): editing it changes which frames count
_exclude_paths = excluded_paths


def include_filename(filename: str) -> bool:
    """Whether frames of ``filename`` stay in filtered tracebacks (it is not internal)."""
    return not is_internal_file(filename)


def include_frame(frame) -> bool:
    return include_filename(frame.f_code.co_filename)


def register_exclusion(path: str) -> None:
    """Drop frames of the file ``path`` (or of files under it) from filtered tracebacks, as
    functrans's own are (``jax._src.traceback_util.register_exclusion``: libraries built on
    the transforms register their internals so errors end in the user's code)."""
    add_internal_path(path)


class UnfilteredStackTrace(Exception):
    """The full traceback of an error whose traceback was filtered."""


def _filtered(tb):
    frames = []
    while tb is not None:
        if not is_internal_file(tb.tb_frame.f_code.co_filename):
            frames.append(tb)
        tb = tb.tb_next
    for current, nxt in zip(frames, frames[1:] + [None]):
        current.tb_next = nxt
    return frames[0] if frames else None


_FILTERED_NOTE = ("(functrans removed its internal frames from this traceback; set "
                  "FUNCTRANS_TRACEBACK_FILTERING=off to see them)")


def api_boundary(fun):
    """Decorate a public entry point: internal frames are filtered from exceptions it raises."""

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        try:
            return fun(*args, **kwargs)
        except Exception as err:
            filter_error(err)
            raise

    return wrapped


def filter_error(err: Exception) -> None:
    """What :func:`api_boundary` does to an error leaving the public API, for an entry point
    that catches it itself (a hot path saving the wrapper's frame): drop functrans's frames
    from its traceback. The caller re-raises it with a bare ``raise``, which keeps the cause
    and context and adds no frame of the caller's."""
    if config.traceback_filtering == "off":
        return
    if not getattr(err, "_functrans_filtered", False):
        try:
            err._functrans_filtered = True
        except AttributeError:
            pass
        else:
            if hasattr(err, "add_note"):  # Python 3.11+
                err.add_note(_FILTERED_NOTE)
    # Filtered at every boundary it crosses (an outer transform's frames join the traceback
    # after an inner one filtered it); when every frame was functrans's, the user's call site
    # is what remains.
    err.with_traceback(_filtered(err.__traceback__))
