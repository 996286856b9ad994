"""Tracebacks that end in the user's code: frames inside functrans are dropped from errors
raised through the public API (keep them with ``FUNCTRANS_TRACEBACK_FILTERING=off``)."""
from __future__ import annotations

import functools

from functrans._config import config
from functrans._source_info import is_internal_file


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
            if config.traceback_filtering == "off":
                raise
            if not getattr(err, "_functrans_filtered", False):
                try:
                    err._functrans_filtered = True
                except AttributeError:
                    pass
                else:
                    if hasattr(err, "add_note"):  # Python 3.11+
                        err.add_note(_FILTERED_NOTE)
            # Filtered at every boundary it crosses (an outer transform's frames join the
            # traceback after an inner one filtered it). A bare raise keeps the cause and
            # context and adds no frame of this wrapper; when every frame was functrans's,
            # the user's call site is what remains.
            err.with_traceback(_filtered(err.__traceback__))
            raise

    return wrapped
