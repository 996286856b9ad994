"""Bounded in-memory caches: what ``jit``, ``pmap`` and the backends keep between calls.

Every cache of traced programs or compiled code is an :class:`LRUCache`, whose size limit is
a config option read when an entry is added: ``jit_cache_max_entries`` (signatures each
``jit`` or ``pmap`` function keeps) or ``executable_cache_max_entries`` (the shared caches of
executables). Beyond its limit a cache drops its least recently used entries; -1 means no
limit. Lowering an option with ``config.update`` trims every live cache it governs at once,
and :func:`clear_all` (behind ``functrans.clear_caches``) empties them all, along with the
memory backends keep for reuse (registered with :func:`on_clear`).

    >>> cache = LRUCache("executable_cache_max_entries")
    >>> cache.insert("program", "executable")
    >>> cache.lookup("program")
    'executable'
"""
from __future__ import annotations

import collections
import threading
import weakref
from typing import Callable

from functrans._config import config

LIMIT_OPTIONS = ("jit_cache_max_entries", "executable_cache_max_entries")

_live: "weakref.WeakSet[LRUCache]" = weakref.WeakSet()
_live_lock = threading.Lock()
_clear_hooks: list[Callable[[], None]] = []


class LRUCache(collections.OrderedDict):
    """A dict ordered from least to most recently used, holding at most the number of entries
    that the config option ``option`` allows. ``lookup`` and ``insert`` count as uses; plain
    ``get`` and ``[]`` do not.

    ``plain``: a plain dict governed along with this cache (trimmed to the same limit,
    cleared with it), for a hot path whose lookup must cost no more than a dict's: its
    insertion order is its recency order (see :func:`insert_plain`; a use re-inserts).

    Entries are compared by key, the cache itself by identity (so it can be registered)."""

    __hash__ = object.__hash__
    __eq__ = object.__eq__
    __ne__ = object.__ne__

    def __init__(self, option: str, plain: dict | None = None):
        if option not in LIMIT_OPTIONS:
            raise ValueError(f"LRUCache: {option!r} is not a cache size option; "
                             f"known: {LIMIT_OPTIONS}")
        super().__init__()
        self.option = option
        self.plain = plain
        with _live_lock:
            _live.add(self)

    def lookup(self, key, default=None):
        """The value for ``key`` (now the most recently used), or ``default``."""
        value = self.get(key, default)
        if value is not default:
            try:
                self.move_to_end(key)
            except KeyError:  # evicted by another thread in between
                pass
        return value

    def insert(self, key, value) -> None:
        """Store ``value`` as the most recently used entry, then evict down to the limit."""
        self[key] = value
        try:
            self.move_to_end(key)
        except KeyError:
            pass
        self.trim()

    def trim(self) -> None:
        """Drop least recently used entries until the cache is within its limit."""
        limit = config._values[self.option]
        if limit < 0:
            return
        while len(self) > limit:
            try:
                self.popitem(last=False)
            except KeyError:  # emptied by another thread
                break
        if self.plain is not None:
            _trim_plain(self.plain, limit)

    def clear(self) -> None:
        super().clear()
        if self.plain is not None:
            self.plain.clear()

    def __repr__(self):
        return f"LRUCache({self.option}, {len(self)} entries)"


def insert_plain(plain: dict, key, value, option: str) -> None:
    """Store ``value`` last in ``plain``, a dict whose insertion order is its order of use,
    then drop its first entries beyond the limit of the config option ``option``. (A hit is
    marked used by re-inserting it: ``plain[key] = plain.pop(key)``.)"""
    plain.pop(key, None)
    plain[key] = value
    _trim_plain(plain, config._values[option])


def _trim_plain(plain: dict, limit: int) -> None:
    if limit < 0:
        return
    while len(plain) > limit:
        try:
            del plain[next(iter(plain))]
        except (KeyError, RuntimeError):  # changed by another thread meanwhile: look again
            continue
        except StopIteration:  # emptied by another thread
            break


class WeakKeyLRUCache:
    """Values keyed by objects that may be garbage collected (compared by identity): an entry
    goes when its key dies, or when it is the least recently used beyond the limit of
    ``option``. For caches keyed by a program whose value must not keep it alive."""

    def __init__(self, option: str):
        self._entries = LRUCache(option)  # id(key) -> (weak reference to key, value)
        self._lock = threading.Lock()

    def get(self, key, default=None):
        with self._lock:
            item = self._entries.lookup(id(key))
        if item is None or item[0]() is not key:
            return default
        return item[1]

    def insert(self, key, value) -> None:
        ident = id(key)
        entries = weakref.ref(self._entries)

        def forget(ref):  # the key died: drop its entry, unless the id was reused since
            live = entries()
            if live is not None and live.get(ident, (None,))[0] is ref:
                live.pop(ident, None)

        with self._lock:
            self._entries.insert(ident, (weakref.ref(key, forget), value))

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key) -> bool:
        item = self._entries.get(id(key))
        return item is not None and item[0]() is key


def on_clear(hook: Callable[[], None]) -> None:
    """Call ``hook()`` from :func:`clear_all` (a backend freeing the memory it pools)."""
    _clear_hooks.append(hook)


def _live_caches(option: str | None = None) -> list:
    with _live_lock:
        return [c for c in _live if option is None or c.option == option]


def clear_all() -> None:
    """Empty every in-memory cache of programs and compiled code, and run the hooks."""
    for cache in _live_caches():
        cache.clear()
    for hook in list(_clear_hooks):
        hook()


def _trim_all(option: str) -> Callable:
    def trim(_value) -> None:
        for cache in _live_caches(option):
            cache.trim()
    return trim


for _option in LIMIT_OPTIONS:
    config.on_change(_option, _trim_all(_option))

# Options that change how programs compile: a program compiled before the change must not
# be called after it (a pass left out to bisect a wrong result has to be left out of the
# next call of every function; code compiled for the previous target CPU, or with subnormals
# flushed or not, must not serve calls made after the change), so every compiled program is
# forgotten.
COMPILE_OPTIONS = ("disable_passes", "poison_scratch", "llvm_cpu", "flush_denormals")
for _option in COMPILE_OPTIONS:
    config.on_change(_option, lambda _value: clear_all())
