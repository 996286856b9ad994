"""Persistent compilation cache: machine code on disk, keyed by program and target.

An entry is the object file LLVM produced for a program, with its IR. The key hashes the
printed jaxpr (and every equation's parameters), the input and constant types, the target
(triple, CPU name and features), the llvmlite/LLVM versions and a digest of this backend's
own source, so any change that could change the machine code changes the key.

Entries live under ``$FUNCTRANS_CACHE_DIR/llvm`` (default ``~/.cache/functrans/llvm``;
``config.cache_dir``, alias ``compilation_cache_dir``, overrides both). A file is written to
a temporary name and renamed into place, so readers never see half an entry; each carries a
SHA-256 of its contents and the parts of its key (:class:`Key`: program digest, options,
CPU, library versions), and an entry that fails either check (truncated, corrupt, from
another format version, moved to another key's name) is deleted and recompiled, never
trusted.

Code from the cache is run, so the cache trusts only what its user alone can write (see
docs/security.md). Every access opens the root, then ``llvm/``, the entry's subdirectory
and the entry, each relative to its parent's checked descriptor, following no symbolic
link; each must belong to the current user and be writable by neither group nor others. A
root that fails the check is refused, with one warning, and nothing is cached; a directory
swapped in after an earlier access is checked like any other. Only regular files of a
bounded size are read as entries: a link, a FIFO or a device put in the directory is
ignored, never followed or waited on.

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
import secrets
import shutil
import stat
import threading
import time

from functrans._config import config
from functrans.core import ClosedJaxpr, Jaxpr
from functrans.version import __version__

logger = logging.getLogger("functrans")

MAGIC = b"FTLLVM03"  # 03: the header holds the parts of the entry's key
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


def cache_root() -> pathlib.Path:
    """The directory the user names for functrans's caches (``config.cache_dir``, else
    ``$FUNCTRANS_CACHE_DIR``, else ``~/.cache/functrans``)."""
    root = config.cache_dir or os.environ.get("FUNCTRANS_CACHE_DIR") or \
        os.path.join(os.path.expanduser("~"), ".cache", "functrans")
    return pathlib.Path(root)


def cache_dir() -> pathlib.Path:
    """This backend's entries: ``llvm/`` under :func:`cache_root`."""
    return cache_root() / "llvm"


def enabled() -> bool:
    """Whether compiled code is read from and written to the disk cache."""
    return bool(config.enable_compilation_cache) and config.compilation_cache_max_size != 0


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """A hash of this backend's source files and of the shared compiler passes it runs
    (backends/compiler): a new code generator or a changed pass invalidates the cache."""
    h = hashlib.sha256()
    here = pathlib.Path(__file__).parent
    for path in sorted(here.glob("*.py")) + sorted((here.parent / "compiler").glob("*.py")):
        h.update(f"{path.parent.name}/{path.name}".encode())
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


class Key(str):
    """A cache key: the SHA-256 (hex) of its ``parts``, a JSON object that names everything
    the machine code depends on. An entry stores the parts of its key, and is loaded only
    when they hash to the key asked for (an entry moved to another key's name is refused)."""

    parts: dict

    def __new__(cls, parts: dict):
        text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
        key = super().__new__(cls, hashlib.sha256(text.encode()).hexdigest())
        key.parts = json.loads(text)  # as an entry stores them: plain JSON values
        return key


def _digest_of(parts) -> str | None:
    try:
        return Key(parts) if isinstance(parts, dict) else None
    except (TypeError, ValueError):
        return None


def program_digest(closed: ClosedJaxpr) -> str:
    """A hash of ``closed``'s printed jaxpr, every equation's parameters and the types of
    its constants (not their values: the code reads them from the pointer table)."""
    parts = [closed.jaxpr.pretty_print(),
             repr([(v.aval.shape, str(v.aval.dtype)) for v in closed.jaxpr.constvars])]
    _describe_params(closed.jaxpr, parts)
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8", "replace"))
        h.update(b"\0")
    return h.hexdigest()


def cache_key(closed: ClosedJaxpr, target: str, options: str = "", digest=None) -> Key:
    """The cache key of ``closed`` compiled for ``target`` (LLVM's triple, CPU name and
    features) with ``options`` (what else decides the code); ``digest``: its
    :func:`program_digest`, when known."""
    import llvmlite  # its version fixes the LLVM it is built with

    return Key({"kind": "functrans-llvm", "program": digest or program_digest(closed),
                "options": options, "target": target, "functrans": __version__,
                "llvmlite": llvmlite.__version__, "source": source_digest(), "abi": CODE_ABI})


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
        # the first processor's block only: the file describes every CPU (hundreds of
        # kilobytes that the kernel formats on a large machine), and a warm start reads it
        text = ""
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            while "\n\n" not in text:
                chunk = f.read(4096)
                if not chunk:
                    break
                text += chunk
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
    if fingerprint is None:
        return compute()
    name = _host_entry_name(fingerprint)
    with _opened_directory(create=True) as directory:
        if directory is None:
            return compute()
        target = _stored_host_target(directory, fingerprint)
        if target is not None:
            return target
        target = compute()
        _write_atomically(directory, name,
                          json.dumps({"fingerprint": fingerprint, "target": target}).encode())
    return target


def host_target_stored() -> bool:
    """Whether :func:`host_target` will find this CPU's description in the cache directory
    (without creating the directory): if not, the directory is new, and this process will
    load LLVM and compile."""
    fingerprint = _cpu_fingerprint() if enabled() else None
    if fingerprint is None:
        return False
    with _opened_directory(create=False) as directory:
        return directory is not None and \
            _stored_host_target(directory, fingerprint) is not None


def _host_entry_name(fingerprint: str) -> str:
    return f"host-{fingerprint[:32]}.json"


def _stored_host_target(directory, fingerprint: str):
    try:
        entry = json.loads(_read_entry_file(directory, _host_entry_name(fingerprint),
                                            touch=False) or b"null")
        if entry.get("fingerprint") == fingerprint and isinstance(entry.get("target"), str):
            return entry["target"]
    except (_NotAnEntry, ValueError, AttributeError):  # then written anew
        pass
    return None


# ---- the directory ---------------------------------------------------------------------------
#
# Every access opens the cache root by its path, checks the directory it got (owner, mode),
# and reaches llvm/, the entry's subdirectory and the entry from there, each opened relative
# to the checked descriptor of its parent without following a symbolic link, and checked in
# turn. What is checked is what is read: a directory swapped in after an earlier check (by
# someone who may write to the root) is seen at the next access, never trusted.

_DIRECTORY_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)
# where directories cannot be opened relative to a descriptor (Windows), nothing is cached
_SUPPORTED = os.open in os.supports_dir_fd and bool(_NO_FOLLOW) and hasattr(os, "O_DIRECTORY")

_warned: set = set()  # (path, reason) already logged: one warning each per process
_warned_lock = threading.Lock()


class _Refused(Exception):
    """A directory of the cache that code may not be run from."""


def _warn_once(path, reason: str) -> None:
    with _warned_lock:
        if (str(path), reason) in _warned:
            return
        _warned.add((str(path), reason))
    logger.warning("functrans: the compilation cache directory %s %s, so code from it is not "
                   "run and compiled code is not cached; make it private (chmod 700) or set "
                   "FUNCTRANS_CACHE_DIR", path, reason)


def _check(fd: int, regular: bool = False) -> os.stat_result:
    """The status of ``fd``: a directory (or a regular file, if ``regular``) of this user
    that neither the group nor others may write to; raises :class:`_Refused` otherwise."""
    info = os.fstat(fd)
    if regular and not stat.S_ISREG(info.st_mode):
        raise _NotAnEntry("not a regular file")
    if not regular and not stat.S_ISDIR(info.st_mode):
        raise _Refused("is not a directory")
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise _Refused("is owned by another user")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _Refused("is writable by other users")
    return info


def _open_subdirectory(parent: int, name: str, create: bool) -> int | None:
    """The checked descriptor of ``parent``/``name`` (made owner-only when ``create``), or
    None when it does not exist. Raises :class:`_Refused` (a link is refused, not followed)."""
    if create:
        try:
            os.mkdir(name, 0o700, dir_fd=parent)
        except FileExistsError:
            pass
    try:
        fd = os.open(name, _DIRECTORY_FLAGS | _NO_FOLLOW, dir_fd=parent)
    except FileNotFoundError:
        return None
    except OSError as err:  # ELOOP or ENOTDIR: a link or a file where a directory should be
        raise _Refused(f"holds {name!r}, which is not a directory ({err.strerror})") from None
    try:
        _check(fd)
    except _Refused as err:
        os.close(fd)
        raise _Refused(f"holds {name!r}, which {err}") from None
    return fd


class _opened_directory:
    """``with _opened_directory(create) as fd``: the checked descriptor of ``llvm/`` under the
    cache root (made, owner-only, when ``create``), or None when it does not exist, cannot
    be made, or may not be used (then logged once)."""

    def __init__(self, create: bool):
        self.create, self.fd = create, None

    def __enter__(self) -> int | None:
        if not _SUPPORTED:
            return None
        root = cache_root()
        try:
            if self.create:
                _make_private_dirs(root)
            # the root's own path is the user's to choose (links in it included); what it
            # leads to is checked
            root_fd = os.open(root, _DIRECTORY_FLAGS)
        except OSError as err:
            if self.create:
                logger.warning("functrans: cannot use the compilation cache directory %s: %s",
                               root, err)
            return None
        try:
            _check(root_fd)
            self.fd = _open_subdirectory(root_fd, "llvm", self.create)
        except _Refused as err:
            _warn_once(root, str(err))
        except OSError as err:
            if self.create:
                logger.warning("functrans: cannot use the compilation cache directory %s: %s",
                               root, err)
        finally:
            os.close(root_fd)
        return self.fd

    def __exit__(self, *exc_info):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


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


# ---- entries ---------------------------------------------------------------------------------


class _NotAnEntry(Exception):
    """A file in the cache directory that cannot be an entry (not a regular file of ours,
    too big)."""


def _read_entry_file(directory: int, name: str, touch: bool) -> bytes | None:
    """The bytes of ``name`` in ``directory`` when it is a regular file of this user that
    no one else may write, of at most ``MAX_ENTRY_BYTES`` (a symbolic link is not followed, a
    FIFO or device not waited on); None when it does not exist. ``touch`` marks it used for
    eviction. Raises :class:`_NotAnEntry` otherwise."""
    flags = os.O_RDONLY | _NO_FOLLOW | getattr(os, "O_NONBLOCK", 0) | \
        getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(name, flags, dir_fd=directory)
    except FileNotFoundError:
        return None
    except OSError as err:  # ELOOP: a symbolic link
        raise _NotAnEntry(f"cannot be opened as a file ({err.strerror})") from None
    try:
        try:
            info = _check(fd, regular=True)
        except _Refused as err:
            raise _NotAnEntry(str(err)) from None
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
                if os.utime in os.supports_fd:
                    os.utime(fd)
            except OSError:  # a read-only cache still serves entries
                pass
        return b"".join(chunks)
    finally:
        os.close(fd)


def _write_atomically(directory: int, name: str, data: bytes) -> bool:
    """Write ``data`` to a temporary file in ``directory`` and rename it to ``name``:
    readers never see half a file. A read-only or full disk is logged, never raised
    (compilation goes on). Returns whether the file was written."""
    temporary = f".tmp-{secrets.token_hex(8)}"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_FOLLOW |
                     getattr(os, "O_CLOEXEC", 0), 0o600, dir_fd=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            try:
                os.unlink(temporary, dir_fd=directory)
            except OSError:
                pass
            raise
    except OSError as err:
        logger.warning("functrans: could not write the compilation cache entry %s: %s", name,
                       err)
        return False
    return True


def _path(directory: pathlib.Path, key: str) -> pathlib.Path:
    """Where the entry of ``key`` lies under ``directory`` (``cache_dir()``)."""
    return directory / key[:2] / f"{key}.bin"


def store(key: Key, sections: dict, meta: dict) -> None:
    """Write an entry atomically: ``sections`` maps names to bytes, ``meta`` is JSON. The
    entry holds ``key.parts``, checked by :func:`load`."""
    if not enabled():
        return
    if not isinstance(key, Key):
        raise TypeError("cache.store takes a cache.Key (whose parts the entry holds)")
    names = sorted(sections)
    header = json.dumps({"key": key.parts, "meta": meta,
                         "sections": [[n, len(sections[n])] for n in names]}).encode()
    payload = len(header).to_bytes(8, "little") + header + b"".join(sections[n] for n in names)
    data = MAGIC + hashlib.sha256(payload).digest() + payload
    limit = config.compilation_cache_max_size
    if len(data) > MAX_ENTRY_BYTES or 0 <= limit < len(data):
        return  # would be evicted at once (or never read back)
    with _opened_directory(create=True) as directory:
        if directory is None:
            return
        try:
            subdirectory = _open_subdirectory(directory, key[:2], create=True)
        except _Refused as err:
            _warn_once(cache_dir(), str(err))
            return
        except OSError as err:
            logger.warning("functrans: could not write the compilation cache entry %s: %s",
                           key, err)
            return
        try:
            written = _write_atomically(subdirectory, f"{key}.bin", data)
        finally:
            os.close(subdirectory)
    if written:
        _note_stored(cache_dir(), len(data))


def load(key: str):
    """``(sections, meta)`` of a valid entry of ``key``, or ``None``. An entry is valid when
    it is a regular file of this user in directories of this user that no one else may
    write, its checksum matches and the key parts it holds hash to ``key``; another is
    removed."""
    if not enabled():
        return None
    with _opened_directory(create=False) as directory:
        if directory is None:
            return None
        try:
            subdirectory = _open_subdirectory(directory, key[:2], create=False)
        except _Refused as err:
            _warn_once(cache_dir(), str(err))
            return None
        if subdirectory is None:
            return None
        try:
            return _read_entry(subdirectory, key)
        finally:
            os.close(subdirectory)


def _read_entry(directory: int, key: str):
    name = f"{key}.bin"
    try:
        data = _read_entry_file(directory, name, touch=True)
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
        stored = header.get("key")
        if _digest_of(stored) != key or (isinstance(key, Key) and stored != key.parts):
            raise ValueError("it is the entry of another key")
        pos = 8 + n
        sections = {}
        for section, size in header["sections"]:
            sections[section] = payload[pos:pos + size]
            pos += size
        if pos != len(payload):
            raise ValueError("length mismatch")
        return sections, header["meta"]
    except (_NotAnEntry, ValueError, KeyError, TypeError, AttributeError) as err:
        logger.warning("functrans: discarding the compilation cache entry %s (%s)",
                       _path(cache_dir(), key), err)
        try:
            os.unlink(name, dir_fd=directory)
        except OSError:
            pass
        return None


def discard(key: str) -> None:
    with _opened_directory(create=False) as directory:
        if directory is None:
            return
        _unlink(directory, f"{key[:2]}/{key}.bin")


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


def _files(directory: int) -> list:
    """``(subdirectory, name, lstat)`` of every file in ``directory`` (a descriptor of
    ``llvm/``) and in its subdirectories, ``subdirectory`` None for the top level (links and
    FIFOs included, never followed; subdirectories that may not be used are skipped)."""
    found = []

    def scan(fd: int, subdirectory):
        for name in os.listdir(fd):
            try:
                info = os.lstat(name, dir_fd=fd)
            except OSError:  # deleted in between
                continue
            if stat.S_ISDIR(info.st_mode):
                if subdirectory is None:
                    try:
                        inner = _open_subdirectory(fd, name, create=False)
                    except (_Refused, OSError):
                        continue
                    if inner is not None:
                        try:
                            scan(inner, name)
                        finally:
                            os.close(inner)
            else:
                found.append((subdirectory, name, info))
    scan(directory, None)
    return found


def usage() -> int:
    """Bytes of the files in the cache directory.

        >>> usage() >= 0
        True
    """
    with _opened_directory(create=False) as directory:
        if directory is None:
            return 0
        return sum(info.st_size for _, _, info in _files(directory)
                   if stat.S_ISREG(info.st_mode))


def evict(max_bytes: int) -> int:
    """Delete the least recently used entries until the cache directory holds at most
    ``max_bytes`` (and temporary files left by writers that died, and anything that is not
    a regular file); returns the bytes left.

        >>> evict(512 << 20) <= 512 << 20
        True
    """
    now = time.time()
    entries, total = [], 0
    with _opened_directory(create=False) as directory:
        if directory is None:
            return 0
        for subdirectory, name, info in _files(directory):
            relative = name if subdirectory is None else f"{subdirectory}/{name}"
            stale = name.startswith(".tmp-") and now - info.st_mtime > _STALE_TEMPORARY_SECONDS
            if not stat.S_ISREG(info.st_mode) or stale:
                _unlink(directory, relative)
                continue
            total += info.st_size
            if name.endswith(".bin"):
                entries.append((info.st_mtime, info.st_size, relative))
        for _, size, relative in sorted(entries, key=lambda e: e[0]):
            if total <= max_bytes:
                break
            if _unlink(directory, relative):
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
    with _warned_lock:
        _warned.clear()
    with _estimate_lock:
        _estimate["directory"] = None


def _unlink(directory: int, relative: str) -> bool:
    """Remove ``relative`` (``name`` or ``subdirectory/name``) from ``directory``; the
    subdirectory is opened (and checked) again, never followed as a link."""
    subdirectory, _, name = relative.rpartition("/")
    try:
        if not subdirectory:
            os.unlink(name, dir_fd=directory)
            return True
        inner = _open_subdirectory(directory, subdirectory, create=False)
        if inner is None:
            return False
        try:
            os.unlink(name, dir_fd=inner)
        finally:
            os.close(inner)
        return True
    except (_Refused, OSError):
        return False
