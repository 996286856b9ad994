"""Persistent compilation cache: machine code on disk, keyed by program and target.

An entry is the object file LLVM produced for a program, with its IR. The key hashes the
printed jaxpr (and every equation's parameters), the input and constant types, the target
(triple, CPU name and features), the llvmlite/LLVM versions and a digest of this backend's
own source, so any change that could change the machine code changes the key.

Entries live under ``$FUNCTRANS_CACHE_DIR/llvm`` (default ``~/.cache/functrans/llvm``). A file
is written to a temporary name and renamed into place, so readers never see half an entry;
each carries a SHA-256 of its contents, and an entry that fails the check (truncated,
corrupt, from another format version) is deleted and recompiled, never trusted.

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
import tempfile

from functrans.core import ClosedJaxpr, Jaxpr

logger = logging.getLogger("functrans")

MAGIC = b"FTLLVM02"
_DIGEST = 32
# The calling convention of the code in an entry, in every key: entries made for another
# are never loaded. 2: a segment returns an i32 status (1: a SIGINT stopped it early, see
# interrupts.py) and polls ``ft_interrupt_epoch``; 1: segments returned nothing.
CODE_ABI = 2


def cache_dir() -> pathlib.Path:
    from functrans._config import config
    root = config.cache_dir or os.environ.get("FUNCTRANS_CACHE_DIR") or \
        os.path.join(os.path.expanduser("~"), ".cache", "functrans")
    return pathlib.Path(root) / "llvm"


def enabled() -> bool:
    return os.environ.get("FUNCTRANS_DISABLE_COMPILATION_CACHE", "").lower() not in ("1", "true", "yes")


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

    import functrans
    parts = ["functrans-llvm", str(CODE_ABI), functrans.__version__, llvmlite.__version__,
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
    if fingerprint is None:
        return compute()
    path = cache_dir() / f"host-{fingerprint[:32]}.json"
    try:
        entry = json.loads(path.read_text())
        if entry.get("fingerprint") == fingerprint and isinstance(entry.get("target"), str):
            return entry["target"]
    except (OSError, ValueError, AttributeError):
        pass
    target = compute()
    _write_atomically(path, json.dumps({"fingerprint": fingerprint, "target": target}).encode())
    return target


def _write_atomically(path: pathlib.Path, data: bytes) -> None:
    """Write ``data`` to a temporary file and rename it into place: readers never see half a
    file. A read-only or full disk is logged, never raised (compilation goes on)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
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


def _path(key: str) -> pathlib.Path:
    return cache_dir() / key[:2] / f"{key}.bin"


def store(key: str, sections: dict, meta: dict) -> None:
    """Write an entry atomically: ``sections`` maps names to bytes, ``meta`` is JSON."""
    if not enabled():
        return
    names = sorted(sections)
    header = json.dumps({"meta": meta, "sections": [[n, len(sections[n])] for n in names]}).encode()
    payload = len(header).to_bytes(8, "little") + header + b"".join(sections[n] for n in names)
    _write_atomically(_path(key), MAGIC + hashlib.sha256(payload).digest() + payload)


def load(key: str):
    """``(sections, meta)`` of a valid entry, or ``None``; a corrupt entry is removed."""
    if not enabled():
        return None
    path = _path(key)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
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
    except (ValueError, KeyError, TypeError) as err:
        logger.warning("functrans: discarding corrupt compilation cache entry %s (%s)", path, err)
        discard(key)
        return None


def discard(key: str) -> None:
    try:
        _path(key).unlink()
    except OSError:
        pass
