"""Scratch arenas: small ones stay with their executable, large ones are lent per call.

A program's intermediates live in one arena of ``plan.arena_size`` bytes (laid out by
:mod:`buffers`). An executable that keeps its arena between calls runs without allocating,
which matters for small programs (a call costs microseconds); but one that keeps a 100 MB
arena holds 100 MB for as long as it lives, called again or not. So an arena of at most
``config.arena_cache_threshold`` bytes stays with its executable (one per thread), and a
larger one is lent to a call by the process's :class:`ArenaPool` and given back when the
call returns. The pool keeps at most ``config.arena_pool_max_size`` bytes of given-back
arenas, the most recently returned, so a large program called in a loop reuses its arena
instead of faulting in fresh pages each time, while the scratch memory of programs no longer
running is returned to the operating system: pooled arenas are anonymous memory maps,
unmapped as soon as the pool drops them.

    >>> arena = borrow(64 << 20)      # doctest: +SKIP
    >>> give_back(arena)              # doctest: +SKIP
"""
from __future__ import annotations

import mmap
import threading

import numpy as np

from functrans import _caches
from functrans._config import config

_PAGE = mmap.PAGESIZE


def kept_with_executable(size: int) -> bool:
    """Whether an arena of ``size`` bytes stays with its executable between calls."""
    threshold = config.arena_cache_threshold
    return threshold < 0 or size <= threshold


def _map(size: int) -> np.ndarray:
    """A fresh arena of at least ``size`` bytes: an anonymous private mapping (page aligned,
    given back to the system when the array dies), with transparent huge pages asked for."""
    size = max(_PAGE, -(-size // _PAGE) * _PAGE)
    if hasattr(mmap, "MAP_ANONYMOUS"):
        memory = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        advice = getattr(mmap, "MADV_HUGEPAGE", None)
        if advice is not None:
            try:
                memory.madvise(advice)
            except OSError:  # a kernel without transparent huge pages
                pass
    else:
        memory = mmap.mmap(-1, size)
    return np.frombuffer(memory, np.uint8)


class ArenaPool:
    """Arenas given back by calls, least recently returned first, at most
    ``config.arena_pool_max_size`` bytes in all. Any thread may borrow: an arena lent to one
    call is out of the pool until that call gives it back."""

    def __init__(self):
        self._arenas: list[np.ndarray] = []
        self._bytes = 0
        self._lock = threading.Lock()

    def borrow(self, size: int) -> np.ndarray:
        """The smallest pooled arena of at least ``size`` bytes, else a new one."""
        with self._lock:
            fits = [a for a in self._arenas if a.nbytes >= size]
            if fits:
                arena = min(fits, key=lambda a: a.nbytes)
                self._arenas = [a for a in self._arenas if a is not arena]
                self._bytes -= arena.nbytes
                return arena
        return _map(size)

    def give_back(self, arena: np.ndarray) -> None:
        with self._lock:
            self._arenas.append(arena)
            self._bytes += arena.nbytes
        self.trim()

    def trim(self, limit: int | None = None) -> None:
        """Drop the least recently returned arenas until the pool holds at most ``limit``
        bytes (default: the config's ``arena_pool_max_size``; -1: no limit)."""
        limit = config.arena_pool_max_size if limit is None else limit
        if limit < 0:
            return
        dropped = []
        with self._lock:
            while self._arenas and self._bytes > limit:
                arena = self._arenas.pop(0)
                self._bytes -= arena.nbytes
                dropped.append(arena)
        del dropped  # unmapped here, outside the lock

    @property
    def nbytes(self) -> int:
        """Bytes of the arenas held, waiting for a call."""
        return self._bytes


# One pool for the process: the threads calling programs (pmap's devices, user threads) share
# its limit, so the memory it keeps does not grow with their number.
pool = ArenaPool()


def borrow(size: int) -> np.ndarray:
    """An arena of at least ``size`` bytes for one call."""
    return pool.borrow(size)


def give_back(arena: np.ndarray) -> None:
    """Return a borrowed arena, once the call that used it is over."""
    pool.give_back(arena)


config.on_change("arena_pool_max_size", lambda _value: pool.trim())
_caches.on_clear(lambda: pool.trim(0))
