"""The on-disk compilation cache (backends/llvm/cache.py): capped in size with least recently
used entries evicted, in owner-only directories, reading only regular files of a sane size
(a FIFO or a link to a device never hangs the process), cleared on demand; and the test
suite's own cache lives in a temporary directory."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp

pytest.importorskip("llvmlite")

from functrans.backends.llvm import cache  # noqa: E402


def _limit_memory():
    # a script that reads a device endlessly fails with MemoryError, not the machine
    import resource
    resource.setrlimit(resource.RLIMIT_DATA, (4 << 30, 4 << 30))


def _run_script(script: str, tmp_path) -> str:
    """Run ``script`` (dedented) in a fresh interpreter with its own cache directory, at
    most 4 GiB of memory and two minutes; its stdout."""
    environment = dict(os.environ, FUNCTRANS_CACHE_DIR=str(tmp_path / "cache"),
                       FUNCTRANS_DEFAULT_BACKEND="cpu")
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=environment,
                            capture_output=True, text=True, timeout=120, preexec_fn=_limit_memory)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def cache_in(tmp_path):
    old = functrans.config.cache_dir
    functrans.config.update("cache_dir", str(tmp_path / "deep" / "cache"))
    yield cache.cache_dir()
    functrans.config.update("cache_dir", old)


def _entry(k: int, size: int = 10_000):
    return cache.Key({"k": k}), {"object": bytes([k % 256]) * size}, {"k": k}


def _stored(directory, keys) -> set:
    return {k for k in keys if cache._path(directory, _entry(k)[0]).exists()}


def _last_used(directory, k: int, when: float) -> None:
    os.utime(cache._path(directory, _entry(k)[0]), (when, when))


def test_disk_cache_is_capped_and_evicts_the_least_recently_used(cache_in):
    functrans.config.update("compilation_cache_max_size", 45_000)  # four entries of 10 kB
    for k in range(4):
        cache.store(*_entry(k))
        _last_used(cache_in, k, 1000 + k)
    assert cache.load(_entry(0)[0])[1] == {"k": 0}  # a read counts as a use
    cache.store(*_entry(4))  # past the limit: evicted down to 90% of it
    assert cache.usage() <= 45_000 * 0.9
    assert _stored(cache_in, range(5)) == {0, 2, 3, 4}  # 1 was the least recently used
    for when, k in enumerate((3, 0, 4, 2)):
        _last_used(cache_in, k, 2000 + when)
    cache.store(*_entry(5, size=20_000))
    assert cache.usage() <= 45_000 * 0.9
    assert _stored(cache_in, range(6)) == {4, 2, 5}


def test_disk_cache_of_a_real_program_stays_under_the_limit(cache_in):
    functrans.config.update("compilation_cache_max_size", 1 << 20)
    for k in range(12):
        functrans.jit(lambda x, k=k: jnp.sin(x) * k + jnp.cos(x) ** 2)(jnp.ones(k + 1))
    assert 0 < cache.usage() <= 1 << 20
    assert all(p.stat().st_size < 1 << 20 for p in cache_in.rglob("*.bin"))


def test_disk_cache_off(cache_in):
    functrans.config.update("compilation_cache_max_size", 0)
    cache.store(*_entry(1))
    assert not cache_in.exists() and not cache.enabled()
    functrans.config.update("compilation_cache_max_size", 1 << 20)
    functrans.config.update("jax_enable_compilation_cache", False)
    cache.store(*_entry(1))
    assert not cache_in.exists()


def test_cache_directories_are_private(cache_in):
    cache.store(*_entry(7))
    for directory in (cache_in.parent.parent, cache_in.parent, cache_in,
                      cache._path(cache_in, _entry(7)[0]).parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    entry = cache._path(cache_in, _entry(7)[0])
    assert stat.S_IMODE(entry.stat().st_mode) & 0o077 == 0


def test_a_cache_directory_others_may_write_to_is_not_used(cache_in, caplog):
    cache.store(*_entry(7))
    cache_in.chmod(0o777)
    assert cache.load(_entry(7)[0]) is None
    assert "'llvm', which is writable by other users" in caplog.text
    cache_in.chmod(0o700)
    assert cache.load(_entry(7)[0]) is not None


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="giving a directory to another user needs root")
def test_a_cache_directory_of_another_user_is_not_used(cache_in, caplog):
    cache.store(*_entry(7))
    os.chown(cache_in, 65534, -1)
    try:
        assert cache.load(_entry(7)[0]) is None
        assert "owned by another user" in caplog.text
    finally:
        os.chown(cache_in, 0, -1)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_fifo_and_device_links_in_the_cache_are_ignored(tmp_path):
    # A FIFO or a link to /dev/zero where an entry should be: reading either would never end.
    out = _run_script("""
        import os, numpy as np
        import functrans, functrans.numpy as jnp
        from functrans.backends.llvm import cache, pipeline
        f = lambda x: jnp.sin(x) + 1.0
        x = np.ones(4, np.float32)
        functrans.jit(f)(x)
        [entry] = list(cache.cache_dir().rglob("*.bin"))
        key = entry.stem
        for plant in (lambda p: os.mkfifo(p), lambda p: os.symlink("/dev/zero", p)):
            entry.unlink()
            plant(entry)
            assert cache.load(key) is None
            functrans.clear_caches()
            before = pipeline.stats["compiled"]
            np.testing.assert_allclose(functrans.jit(f)(x), np.sin(x) + 1.0)
            assert pipeline.stats["compiled"] == before + 1
            assert entry.is_file() and not entry.is_symlink()  # replaced by a good entry
        fingerprint = cache._cpu_fingerprint()
        if fingerprint:
            [host] = list(cache.cache_dir().glob("host-*.json"))
            host.unlink()
            os.mkfifo(host)
            assert cache.host_target(lambda: "computed") == "computed"
        print("ok")
    """, tmp_path)
    assert out.strip().endswith("ok")


def test_oversized_entries_are_not_read(cache_in, monkeypatch):
    key, sections, meta = _entry(3)
    cache.store(key, sections, meta)
    monkeypatch.setattr(cache, "MAX_ENTRY_BYTES", 100)
    assert cache.load(key) is None
    assert not cache._path(cache_in, key).exists()


def test_clearing_the_disk_cache(cache_in):
    for k in range(3):
        cache.store(*_entry(k))
    assert cache.usage() > 0
    cache.clear()
    assert cache.usage() == 0 and not cache_in.exists()
    cache.store(*_entry(1))
    assert cache.load(_entry(1)[0]) is not None


def test_compilation_cache_dir_is_jaxs_name_for_cache_dir(tmp_path):
    functrans.config.update("jax_compilation_cache_dir", str(tmp_path))
    assert functrans.config.cache_dir == str(tmp_path)
    assert cache.cache_dir() == tmp_path / "llvm"


def test_the_suite_caches_in_a_temporary_directory():
    home_cache = os.path.realpath(os.path.expanduser("~/.cache"))
    directory = os.path.realpath(cache.cache_dir())
    assert directory.startswith(os.path.realpath(tempfile.gettempdir()))
    assert not directory.startswith(home_cache)


# ---- a cache that runs only its own code -----------------------------------------------------

def _entries_made_by(f, x, directory) -> dict:
    """The entries (relative path -> bytes) that compiling ``f`` at ``x`` adds."""
    before = set(directory.rglob("*.bin"))
    functrans.clear_caches()
    functrans.jit(f)(x)
    return {p.relative_to(directory): p.read_bytes() for p in directory.rglob("*.bin")
            if p not in before}


def _swap_in(directory, files: dict):
    """Put a copy of ``directory`` with ``files`` written over it in its place: two
    directories and a rename, as someone who may write to the root could."""
    other = directory.parent / "other"
    shutil.copytree(directory, other)
    for relative, data in files.items():
        (other / relative).write_bytes(data)
    directory.rename(directory.parent / "old")
    other.rename(directory)


def test_an_entry_under_another_programs_key_is_not_loaded(cache_in, caplog):
    x = np.arange(4, dtype=np.float32)
    [(doubles, _)] = _entries_made_by(lambda a: a * 2, x, cache_in).items()
    [triples] = _entries_made_by(lambda a: a * 3, x, cache_in).values()
    # the code of a * 3 where a * 2's entry lies: it was loaded, and a * 2 gave 3a
    _swap_in(cache_in, {doubles: triples})
    functrans.clear_caches()
    np.testing.assert_array_equal(functrans.jit(lambda a: a * 2)(x), 2 * x)
    assert "it is the entry of another key" in caplog.text
    assert (cache_in / doubles).read_bytes() != triples  # replaced by a good entry


def test_an_entry_keeps_the_parts_of_its_key(cache_in):
    key = cache.cache_key(functrans.make_jaxpr(lambda a: a + 1)(np.ones(2, np.float32)),
                          "x86_64|cpu|+f", options="plan")
    assert set(key.parts) >= {"program", "options", "target", "functrans", "llvmlite", "abi"}
    cache.store(key, {"object": b"code"}, {})
    assert cache.load(key)[0] == {"object": b"code"}
    moved = cache.Key(dict(key.parts, target="x86_64|other|+f"))
    os.makedirs(cache._path(cache_in, moved).parent, exist_ok=True)
    os.replace(cache._path(cache_in, key), cache._path(cache_in, moved))
    assert cache.load(moved) is None and cache.load(key) is None


def _forged(entry: bytes, key) -> bytes:
    """``entry`` (code of someone's choosing) relabelled with ``key``'s parts and a valid
    checksum: what an attacker able to write the directory can make."""
    import hashlib
    import json
    payload = entry[len(cache.MAGIC) + 32:]
    n = int.from_bytes(payload[:8], "little")
    header = json.loads(payload[8:8 + n])
    header["key"] = key
    text = json.dumps(header).encode()
    payload = len(text).to_bytes(8, "little") + text + payload[8 + n:]
    return cache.MAGIC + hashlib.sha256(payload).digest() + payload


def _stored_key(entry: bytes) -> dict:
    import json
    payload = entry[len(cache.MAGIC) + 32:]
    return json.loads(payload[8:8 + int.from_bytes(payload[:8], "little")]).get("key")


def test_a_directory_others_may_write_swapped_in_after_the_first_use_is_not_used(
        cache_in, caplog):
    # the ownership of llvm/ was checked once per process: a directory swapped in later (by
    # anyone who may write to the root) was trusted, with an entry forged to pass every
    # check of the entry itself
    x = np.arange(4, dtype=np.float32)
    [(doubles, good)] = _entries_made_by(lambda a: a * 2, x, cache_in).items()
    [triples] = _entries_made_by(lambda a: a * 3, x, cache_in).values()
    _swap_in(cache_in, {doubles: _forged(triples, _stored_key(good))})
    cache_in.chmod(0o777)  # as a directory of someone else's would be to us
    functrans.clear_caches()
    np.testing.assert_array_equal(functrans.jit(lambda a: a * 2)(x), 2 * x)
    assert caplog.text.count("'llvm', which is writable by other users") == 1
    functrans.clear_caches()
    functrans.jit(lambda a: a * 2)(x + 1)
    assert caplog.text.count("writable by other users") == 1  # one warning


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777])
def test_a_cache_root_others_may_write_is_refused_with_one_warning(tmp_path, mode, caplog):
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(mode)
    old = functrans.config.cache_dir
    functrans.config.update("cache_dir", str(root))
    try:
        cache.store(*_entry(1))
        cache.store(*_entry(2))
        assert cache.load(_entry(1)[0]) is None and not (root / "llvm").exists()
    finally:
        functrans.config.update("cache_dir", old)
    assert caplog.text.count("writable by other users") == 1


def test_links_in_the_cache_are_not_followed(cache_in, tmp_path):
    cache.store(*_entry(1))
    key = _entry(1)[0]
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(cache._path(cache_in, key).parent, elsewhere)
    shutil.rmtree(cache._path(cache_in, key).parent)
    os.symlink(elsewhere, cache._path(cache_in, key).parent)  # a linked subdirectory
    assert cache.load(key) is None
    assert (elsewhere / f"{key}.bin").exists()  # and nothing there was deleted
