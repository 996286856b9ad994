"""Persistent compilation cache: machine code on disk, keyed by program and target.

An entry is the object file LLVM produced for a program, with its IR. The key hashes the
printed jaxpr (and every equation's parameters), the input and constant types, the target
(triple, CPU name and features), the llvmlite/LLVM versions and a digest of this backend's
own source, so any change that could change the machine code changes the key.

Entries live under ``$FUNCTRANS_CACHE_DIR/llvm`` (default ``~/.cache/functrans/llvm``;
``config.cache_dir``, alias ``compilation_cache_dir``, overrides both). A file is written to
a temporary name and renamed into place, so readers never see half an entry; each carries a
SHA-256 of its contents, and an entry that fails the check (truncated, corrupt, from another
format version) is deleted and recompiled, never trusted. The directories are created
readable by their owner only, and one owned by another user or writable by all is not used
(its code would be run). Only regular files of a bounded size are read as entries: a link, a FIFO or a device
put in the directory is ignored, never followed or waited on.

The directory holds at most ``config.compilation_cache_max_size`` bytes (default 1 GiB; -1:
no limit; 0: no cache, as ``enable_compilation_cache=False``). Reading an entry marks it used
(its modification time); when a store takes the directory past the limit, the least recently
used entries are deleted until it is at 90% of the limit. :func:`clear` deletes every entry,
:func:`usage` measures the directory.

    >>> key = cache_key(closed, "x86_64|znver4|+avx2")    # doctest: +SKIP
    >>> entry = load(key)                                 # doctest: +SKIP
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import pathlib
import shutil
import stat
import tempfile
import threading
import time

from functrans._config import config
from functrans.core import ClosedJaxpr, Jaxpr
from functrans.version import __version__

logger = logging.getLogger("functrans")

MAGIC = b"FTLLVM02"
_DIGEST = 32
# The calling convention of the code in an entry, in every key: entries made for another
# are never loaded. 2: a segment returns an i32 status (1: a SIGINT stopped it early, see
# interrupts.py) and polls ``ft_interrupt_epoch``; 1: segments returned nothing.
CODE_ABI = 2
# No program's object and IR come near this: a larger file is not an entry of ours.
MAX_ENTRY_BYTES = 256 << 20
# After an eviction the directory holds at most this fraction of the limit, so that the
# next few stores do not each scan the directory again.
_LOW_WATER = 0.9
# A temporary file this old was left by a writer that died; eviction removes it.
_STALE_TEMPORARY_SECONDS = 3600


def cache_dir() -> pathlib.Path:
    root = config.cache_dir or os.environ.get("FUNCTRANS_CACHE_DIR") or \
        os.path.join(os.path.expanduser("~"), ".cache", "functrans")
    return pathlib.Path(root) / "llvm"


def enabled() -> bool:
    """Whether compiled code is read from and written to the disk cache."""
    return bool(config.enable_compilation_cache) and config.compilation_cache_max_size != 0


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """A hash of this backend's source files: a new code generator invalidates the cache."""
    h = hashlib.sha256()
    here = pathlib.Path(__file__).parent
    for path in sorted(here.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _describe_params(jaxpr: Jaxpr, out: list) -> None:
    for eqn in jaxpr.eqns:
        out.append(eqn.primitive.name)
        for k, v in sorted(eqn.params.items()):
            if isinstance(v, ClosedJaxpr):
                out.append(f"{k}=<jaxpr>")
                _describe_params(v.jaxpr, out)
            elif isinstance(v, Jaxpr):
                out.append(f"{k}=<jaxpr>")
                _describe_params(v, out)
            else:
                out.append(f"{k}={v!r}")


def cache_key(closed: ClosedJaxpr, target: str) -> str:
    """The cache key of ``closed`` compiled for ``target``."""
    import llvmlite  # its version fixes the LLVM it is built with

    parts = ["functrans-llvm", str(CODE_ABI), __version__, llvmlite.__version__,
             source_digest(), target,
             closed.jaxpr.pretty_print(),
             repr([(v.aval.shape, str(v.aval.dtype)) for v in closed.jaxpr.constvars])]
    _describe_params(closed.jaxpr, parts)
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8", "replace"))
        h.update(b"\0")
    return h.hexdigest()


# /proc/cpuinfo fields that identify a CPU model and what it can do (not its clock)
_CPU_FIELDS = ("vendor_id", "cpu family", "model", "model name", "stepping", "flags",
               "Features", "CPU implementer", "CPU architecture", "CPU variant", "CPU part")


def _cpu_fingerprint():
    """A hash of this CPU's identity and features (and of what could change how LLVM names
    them), or None where the OS does not describe the CPU."""
    import platform
    import sys

    import llvmlite
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    first = text.split("\n\n", 1)[0]
    fields = sorted(line.strip() for line in first.splitlines()
                    if line.split(":", 1)[0].strip() in _CPU_FIELDS)
    if not fields:
        return None
    parts = [sys.platform, platform.machine(), llvmlite.__version__] + fields
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def host_target(compute) -> str:
    """LLVM's description of this CPU, ``compute()``: computed once per CPU and kept in the
    cache directory, since asking LLVM means loading it (a large part of a warm start)."""
    fingerprint = _cpu_fingerprint() if enabled() else None
    directory = _directory(create=True) if fingerprint else None
    if fingerprint is None or directory is None:
        return compute()
    path = directory / f"host-{fingerprint[:32]}.json"
    try:
        entry = json.loads(_read_entry_file(path, touch=False) or b"null")
        if entry.get("fingerprint") == fingerprint and isinstance(entry.get("target"), str):
            return entry["target"]
    except (_NotAnEntry, ValueError, AttributeError):  # then written anew, below
        pass
    target = compute()
    _write_atomically(path, json.dumps({"fingerprint": fingerprint, "target": target}).encode())
    return target


# ---- the directory ---------------------------------------------------------------------------

_checked: dict = {}  # directory -> whether it may be used (ownership checked once)


def _directory(create: bool) -> pathlib.Path | None:
    """The cache directory, made (owner-only) when ``create``; None when it does not exist
    and is not to be made, or when another user owns it or every user may write to it."""
    path = cache_dir()
    usable = _checked.get(path)
    if usable is None:
        try:
            if create:
                _make_private_dirs(path)
            info = os.stat(path)
        except OSError as err:
            if create:
                logger.warning("functrans: cannot use the compilation cache directory %s: %s",
                               path, err)
            return None
        usable = _trustworthy(path, info)
        _checked[path] = usable
    return path if usable else None


def _make_private_dirs(path: pathlib.Path) -> None:
    """``mkdir -p`` where every directory made is readable and writable by its owner only."""
    missing = []
    while not path.exists():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:  # made by another process in between
            pass


def _trustworthy(path: pathlib.Path, info: os.stat_result) -> bool:
    """Whether code found under ``path`` may be run: a directory of this user that not every
    user may write to (where the system has users; a group-writable one is the user's choice,
    as with a umask of 002)."""
    if not stat.S_ISDIR(info.st_mode):
        logger.warning("functrans: the compilation cache path %s is not a directory; "
                       "compiled code is not cached", path)
        return False
    if hasattr(os, "getuid") and (info.st_uid != os.getuid() or info.st_mode & stat.S_IWOTH):
        logger.warning("functrans: the compilation cache directory %s is owned by another user "
                       "or writable by all users, so code from it is not run; remove it or set "
                       "FUNCTRANS_CACHE_DIR", path)
        return False
    return True


# ---- entries ---------------------------------------------------------------------------------


class _NotAnEntry(Exception):
    """A file in the cache directory that cannot be an entry (not a regular file, too big)."""


def _read_entry_file(path: pathlib.Path, touch: bool) -> bytes | None:
    """The bytes of ``path`` when it is a regular file of at most ``MAX_ENTRY_BYTES`` (a
    symbolic link is not followed, a FIFO or device not waited on); None when it does not
    exist. ``touch`` marks it used for eviction. Raises :class:`_NotAnEntry` otherwise."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | \
        getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as err:  # ELOOP: a symbolic link
        raise _NotAnEntry(f"cannot be opened as a file ({err.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _NotAnEntry("not a regular file")
        if info.st_size > MAX_ENTRY_BYTES:
            raise _NotAnEntry(f"{info.st_size} bytes, more than an entry can be")
        chunks, remaining = [], info.st_size
        while remaining > 0:
            chunk = os.read(fd, remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        if touch:
            try:
                os.utime(fd if os.utime in os.supports_fd else path)
            except OSError:  # a read-only cache still serves entries
                pass
        return b"".join(chunks)
    finally:
        os.close(fd)


def _write_atomically(path: pathlib.Path, data: bytes) -> bool:
    """Write ``data`` to a temporary file and rename it into place: readers never see half a
    file. A read-only or full disk is logged, never raised (compilation goes on). Returns
    whether the file was written."""
    try:
        _make_private_dirs(path.parent)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as err:
        logger.warning("functrans: could not write the compilation cache entry %s: %s", path, err)
        return False
    return True


def _path(directory: pathlib.Path, key: str) -> pathlib.Path:
    return directory / key[:2] / f"{key}.bin"


def store(key: str, sections: dict, meta: dict) -> None:
    """Write an entry atomically: ``sections`` maps names to bytes, ``meta`` is JSON."""
    if not enabled():
        return
    names = sorted(sections)
    header = json.dumps({"meta": meta, "sections": [[n, len(sections[n])] for n in names]}).encode()
    payload = len(header).to_bytes(8, "little") + header + b"".join(sections[n] for n in names)
    data = MAGIC + hashlib.sha256(payload).digest() + payload
    limit = config.compilation_cache_max_size
    if len(data) > MAX_ENTRY_BYTES or 0 <= limit < len(data):
        return  # would be evicted at once (or never read back)
    directory = _directory(create=True)
    if directory is None:
        return
    if _write_atomically(_path(directory, key), data):
        _note_stored(directory, len(data))


def load(key: str):
    """``(sections, meta)`` of a valid entry, or ``None``; a corrupt entry is removed."""
    if not enabled():
        return None
    directory = _directory(create=False)
    if directory is None:
        return None
    path = _path(directory, key)
    try:
        data = _read_entry_file(path, touch=True)
        if data is None:
            return None
        if data[:len(MAGIC)] != MAGIC:
            raise ValueError("bad magic")
        digest = data[len(MAGIC):len(MAGIC) + _DIGEST]
        payload = data[len(MAGIC) + _DIGEST:]
        if hashlib.sha256(payload).digest() != digest:
            raise ValueError("checksum mismatch")
        n = int.from_bytes(payload[:8], "little")
        header = json.loads(payload[8:8 + n])
        pos = 8 + n
        sections = {}
        for name, size in header["sections"]:
            sections[name] = payload[pos:pos + size]
            pos += size
        if pos != len(payload):
            raise ValueError("length mismatch")
        return sections, header["meta"]
    except (_NotAnEntry, ValueError, KeyError, TypeError) as err:
        logger.warning("functrans: discarding the compilation cache entry %s (%s)", path, err)
        discard(key)
        return None


def discard(key: str) -> None:
    try:
        _path(cache_dir(), key).unlink()
    except OSError:
        pass


# ---- size ------------------------------------------------------------------------------------

# This process's running estimate of the directory's size: measured at its first store, then
# counted up by what it stores; other processes' stores show at the next measurement.
_estimate = {"directory": None, "bytes": 0}
_estimate_lock = threading.Lock()


def _note_stored(directory: pathlib.Path, nbytes: int) -> None:
    limit = config.compilation_cache_max_size
    if limit < 0:
        return
    with _estimate_lock:
        if _estimate["directory"] != directory:
            _estimate["directory"], _estimate["bytes"] = directory, usage()
        else:
            _estimate["bytes"] += nbytes
        if _estimate["bytes"] > limit:
            _estimate["bytes"] = evict(int(limit * _LOW_WATER))


def _files(directory: pathlib.Path) -> list:
    """``(path, lstat)`` of every file under ``directory`` (links and FIFOs included, never
    followed)."""
    found = []
    for root, _, names in os.walk(directory):
        for name in names:
            path = pathlib.Path(root) / name
            try:
                found.append((path, os.lstat(path)))
            except OSError:  # deleted in between
                pass
    return found


def usage() -> int:
    """Bytes of the files in the cache directory.

        >>> usage() >= 0
        True
    """
    return sum(info.st_size for _, info in _files(cache_dir()) if stat.S_ISREG(info.st_mode))


def evict(max_bytes: int) -> int:
    """Delete the least recently used entries until the cache directory holds at most
    ``max_bytes`` (and temporary files left by writers that died, and anything that is not
    a regular file); returns the bytes left.

        >>> evict(512 << 20) <= 512 << 20
        True
    """
    now = time.time()
    entries, total = [], 0
    for path, info in _files(cache_dir()):
        stale = path.name.startswith(".tmp-") and now - info.st_mtime > _STALE_TEMPORARY_SECONDS
        if not stat.S_ISREG(info.st_mode) or stale:
            _unlink(path)
            continue
        total += info.st_size
        if path.suffix == ".bin":
            entries.append((info.st_mtime, info.st_size, path))
    for _, size, path in sorted(entries, key=lambda e: e[0]):
        if total <= max_bytes:
            break
        if _unlink(path):
            total -= size
    return total


def clear() -> None:
    """Delete the on-disk compilation cache (every entry, for every CPU): programs compile
    again on first use, in every process. ``functrans.clear_caches()`` clears what a
    process holds in memory.

        >>> from functrans.backends.llvm import cache
        >>> cache.clear()
        >>> cache.usage()
        0
    """
    shutil.rmtree(cache_dir(), ignore_errors=True)
    _checked.clear()
    with _estimate_lock:
        _estimate["directory"] = None


def _unlink(path: pathlib.Path) -> bool:
    try:
        path.unlink()
        return True
    except OSError:
        return False
