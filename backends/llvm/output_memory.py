"""Memory for large results of compiled calls, used again instead of faulted in afresh.

A compiled call's results are new arrays. NumPy takes their memory from ``malloc``, which
for large blocks either maps fresh pages (the kernel then zeroes each one on first touch)
or reuses what the heap still holds, depending on how glibc's heap happens to lie: a train
step whose new parameters and optimizer moments come to 156 MB spent 100-250 ms of system
time per call on those faults in most runs (docs/performance.md, "The d512 transformer step
and attention").

:func:`empty` gives an output of at least :data:`POOLED_MIN_BYTES` bytes a block of
:class:`OutputPool`: the array's base is a :class:`_Lease` of the block, and every view of
the array holds the array or the lease, so the lease dies only when the last array using the
block has. Its ``__del__`` then puts the block back, where the next output of the same size
finds it already touched. The pool keeps at most half of ``config.arena_pool_max_size``
bytes of idle blocks, the most recently returned; a block is out of the pool while leased,
so no two live arrays ever share one.

An output on a lease does not own its data (``flags.owndata`` is false): :func:`sole_lease`
(registered with ``_backends.register_lent_memory_check``) tells ``jit``'s donation that
such an array is still the only one using its memory.

    >>> out = empty((512, 512), np.float32)   # doctest: +SKIP
    >>> del out                                # its block goes back to the pool
"""
from __future__ import annotations

import sys
import threading

import numpy as np

from functrans import _backends, _caches
from functrans._config import config

# Smaller outputs keep NumPy's allocator: a lease and its return cost about 2.4 us against
# 0.17 us for np.empty, and glibc serves blocks below its mmap threshold (128 KiB at first)
# from memory its heap holds.
POOLED_MIN_BYTES = 1 << 18


class _Lease:
    """The owner of a pooled block while arrays use it (see the module docstring)."""

    __slots__ = ("_entry", "__array_interface__")

    def __init__(self, entry: tuple, shape: tuple, dtype: np.dtype):
        self._entry = entry  # (block, its address, the pool that lent it)
        self.__array_interface__ = {"data": (entry[1], False), "shape": shape,
                                    "typestr": dtype.str, "version": 3}

    def __del__(self):
        entry = self._entry
        entry[2].give_back(entry)


class OutputPool:
    """Idle blocks by size, at most half of ``config.arena_pool_max_size`` bytes in all (-1:
    no limit), the least recently returned dropped first. Any thread may take and give
    back; a block is given back from a lease's ``__del__``, which a garbage collection may
    run on a thread that is inside :meth:`take` (so the lock is reentrant and each step
    leaves the pool consistent)."""

    def __init__(self):
        self._idle: dict[int, list] = {}  # insertion order: least recently returned first
        self._bytes = 0
        self._lock = threading.RLock()
        self.set_limit(config.arena_pool_max_size)

    def set_limit(self, arena_pool_max_size: int) -> None:
        """Follow the config's ``arena_pool_max_size`` (kept here: a config lookup per
        output would cost as much as the rest of a lease)."""
        self._limit = arena_pool_max_size if arena_pool_max_size < 0 \
            else arena_pool_max_size // 2
        self.trim()

    def limit(self) -> int:
        return self._limit

    def take(self, nbytes: int) -> tuple:
        """An idle block of ``nbytes`` bytes, else a new one: ``(block, address, self)``."""
        with self._lock:
            blocks = self._idle.get(nbytes)
            if blocks:
                entry = blocks.pop()
                self._bytes -= nbytes
                if not blocks:
                    del self._idle[nbytes]  # given back again, its size counts as recent
                return entry
        block = np.empty(nbytes, np.uint8)
        return block, block.ctypes.data, self

    def give_back(self, entry: tuple) -> None:
        nbytes = entry[0].nbytes
        with self._lock:
            self._idle.setdefault(nbytes, []).append(entry)
            self._bytes += nbytes
        if self._bytes > self._limit >= 0:
            self.trim()

    def trim(self, limit: int | None = None) -> None:
        """Drop the least recently returned blocks until at most ``limit`` bytes (default:
        :meth:`limit`) are idle."""
        limit = self._limit if limit is None else limit
        if limit < 0:
            return
        dropped = []
        with self._lock:
            while self._idle and self._bytes > limit:
                nbytes = next(iter(self._idle))
                blocks = self._idle[nbytes]
                dropped.append(blocks.pop(0))
                self._bytes -= nbytes
                if not blocks:
                    del self._idle[nbytes]
        del dropped  # freed here, outside the lock

    @property
    def nbytes(self) -> int:
        """Bytes of the idle blocks."""
        return self._bytes


pool = OutputPool()


def empty(shape: tuple, dtype) -> np.ndarray:
    """An uninitialized C-contiguous array, like ``np.empty``: on a pooled block from
    :data:`POOLED_MIN_BYTES` bytes (plain numeric dtypes: the array interface names others,
    bfloat16 among them, only as raw bytes)."""
    dtype = np.dtype(dtype)
    nbytes = dtype.itemsize
    for extent in shape:
        nbytes *= extent
    if nbytes < POOLED_MIN_BYTES or dtype.kind not in "biufc" or pool.limit() == 0:
        return np.empty(shape, dtype)
    return np.asarray(_Lease(pool.take(nbytes), tuple(shape), dtype))


def sole_lease(value: np.ndarray) -> bool:
    """Whether ``value`` is an output on a pooled block that no other array uses (its
    lease referenced by ``value`` alone)."""
    return type(value.base) is _Lease and _lease_references(value) <= _SOLE_LEASE_REFERENCES


def _lease_references(value: np.ndarray) -> int:
    base = value.base
    return sys.getrefcount(base)


class _Discard:
    """Where the calibrating lease below gives its block back: nowhere."""

    @staticmethod
    def give_back(entry) -> None:
        pass


# What _lease_references says of a lease only its array holds, measured rather than
# assumed: how many references the interpreter itself counts differs between versions.
_calibration_block = np.empty(8, np.uint8)
_SOLE_LEASE_REFERENCES = _lease_references(np.asarray(_Lease(
    (_calibration_block, _calibration_block.ctypes.data, _Discard), (2,), np.dtype(np.float32))))
config.on_change("arena_pool_max_size", pool.set_limit)
_caches.on_clear(lambda: pool.trim(0))
_backends.register_lent_memory_check(sole_lease)
