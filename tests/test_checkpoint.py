"""functrans.checkpoint: round trips, corruption and mismatch detection, crash safety."""
from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import functrans
import functrans.checkpoint as ckpt
import functrans.numpy as jnp
from functrans.checkpoint import CheckpointError, CheckpointManager

AdamLikeState = collections.namedtuple("AdamLikeState", "count mu nu")


def _train_state(scale=1.0):
    params = {"dense": {"w": np.arange(6, dtype=np.float32).reshape(2, 3) * scale,
                        "b": np.full(3, 0.5 * scale, np.float32)},
              "embed": (np.ones((4, 2)) * scale).astype(ml_dtypes.bfloat16)}
    zeros = {"dense": {"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)},
             "embed": np.zeros((4, 2), ml_dtypes.bfloat16)}
    opt_state = (AdamLikeState(np.int32(7), params, zeros), None)
    return {"params": params, "opt_state": opt_state,
            "key": np.array([0, 42], np.uint32), "step": 7}


def _assert_trees_equal(a, b):
    leaves_a, def_a = functrans.tree_util.tree_flatten(a)
    leaves_b, def_b = functrans.tree_util.tree_flatten(b)
    assert len(leaves_a) == len(leaves_b)
    for x, y in zip(leaves_a, leaves_b):
        if isinstance(x, (int, float, bool)):
            assert type(x) is type(y) and x == y
            continue
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x.astype(np.float64), y.astype(np.float64))


def test_round_trip_with_target_keeps_namedtuples_and_types(tmp_path):
    state = _train_state()
    path = tmp_path / "state.safetensors"
    ckpt.save(path, state, step=7, metadata={"lr": 1e-3})
    restored = ckpt.restore(path, target=_train_state(scale=0.0))
    _assert_trees_equal(restored, state)
    assert type(restored["opt_state"][0]) is AdamLikeState
    assert isinstance(restored["step"], int) and restored["step"] == 7
    assert isinstance(restored["params"]["dense"]["w"], functrans.Array)
    assert restored["params"]["embed"].dtype == ml_dtypes.bfloat16
    info = ckpt.read_metadata(path)
    assert info["step"] == 7 and info["metadata"] == {"lr": 1e-3}


def test_round_trip_without_target_rebuilds_containers(tmp_path):
    state = _train_state()
    state["extra"] = {3: [np.float32(1.5), (True, 2.5)]}  # int keys (not mixed with str ones)
    path = tmp_path / "state.safetensors"
    ckpt.save(path, state)
    restored = ckpt.restore(path)
    assert set(restored) == set(state)
    opt = restored["opt_state"][0]
    assert opt._fields == ("count", "mu", "nu") and int(opt.count) == 7
    assert restored["opt_state"][1] is None
    assert restored["extra"][3][1] == (True, 2.5)
    np.testing.assert_array_equal(restored["key"], [0, 42])
    _assert_trees_equal(restored["params"], state["params"])


def test_restores_real_optimizer_state_and_prng_key(tmp_path):
    optim = pytest.importorskip("functrans.optim")
    if not hasattr(optim, "adam"):
        pytest.skip("functrans.optim.adam is not available yet")
    params = {"w": np.ones((3, 2), np.float32), "b": np.zeros(2, np.float32)}
    opt = optim.adam(1e-2)
    opt_state = opt.init(params)
    key = np.array([123, 456], np.uint32)
    tree = {"params": params, "opt_state": opt_state, "key": key, "step": 3}
    ckpt.save(tmp_path / "c.safetensors", tree)
    restored = ckpt.restore(tmp_path / "c.safetensors", target=tree)
    assert functrans.tree_util.tree_structure(restored) == functrans.tree_util.tree_structure(tree)
    _assert_trees_equal(restored, tree)


def test_saves_arrays_that_only_offer___array__(tmp_path):
    class DeviceBuffer:  # stands in for a pmap-sharded array
        def __init__(self, value):
            self.value = value

        def __array__(self, dtype=None, copy=None):
            return self.value

    ckpt.save(tmp_path / "c.safetensors", {"x": DeviceBuffer(np.arange(4.0, dtype=np.float32))})
    np.testing.assert_array_equal(ckpt.restore(tmp_path / "c.safetensors")["x"], np.arange(4.0))


def test_the_file_is_plain_safetensors(tmp_path):
    import safetensors.numpy
    ckpt.save(tmp_path / "c.safetensors", {"a": {"b": np.arange(3, dtype=np.int32)}})
    loaded = safetensors.numpy.load_file(str(tmp_path / "c.safetensors"))
    np.testing.assert_array_equal(loaded["['a']['b']"], [0, 1, 2])


def test_corrupted_array_bytes_are_detected_and_named(tmp_path):
    path = tmp_path / "c.safetensors"
    ckpt.save(path, {"first": np.zeros(64, np.float32), "second": np.ones(64, np.float32)})
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF  # safetensors stores tensors in name order: this byte is in 'second'
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"\['second'\].*SHA-256"):
        ckpt.restore(path)


def test_corrupted_tree_description_is_detected(tmp_path):
    path = tmp_path / "c.safetensors"
    ckpt.save(path, {"w": np.zeros(4, np.float32)})
    data = path.read_bytes()
    # flip a shape in the JSON header while keeping its length (and so the file layout)
    tampered = data.replace(b'\\"shape\\": [4]', b'\\"shape\\": [2]')
    assert tampered != data
    path.write_bytes(tampered)
    with pytest.raises(CheckpointError, match="corrupted"):
        ckpt.restore(path)


@pytest.mark.parametrize("keep", [5, 100, -3])
def test_truncated_file_is_detected(tmp_path, keep):
    path = tmp_path / "c.safetensors"
    ckpt.save(path, {"w": np.arange(100, dtype=np.float32)})
    data = path.read_bytes()
    path.write_bytes(data[:keep] if keep > 0 else data[:keep])
    with pytest.raises(CheckpointError):
        ckpt.restore(path)


def test_a_foreign_safetensors_file_is_refused(tmp_path):
    import safetensors.numpy
    safetensors.numpy.save_file({"w": np.zeros(2, np.float32)}, str(tmp_path / "x.safetensors"))
    with pytest.raises(CheckpointError, match="not a functrans checkpoint"):
        ckpt.restore(tmp_path / "x.safetensors")


def test_mismatched_target_is_detected(tmp_path):
    path = tmp_path / "c.safetensors"
    ckpt.save(path, _train_state())
    wrong_shape = _train_state()
    wrong_shape["params"]["dense"]["w"] = np.zeros((3, 2), np.float32)
    with pytest.raises(CheckpointError, match=r"\['dense'\]\['w'\] has shape \(2, 3\)"):
        ckpt.restore(path, target=wrong_shape)
    wrong_dtype = _train_state()
    wrong_dtype["key"] = np.zeros(2, np.int32)
    with pytest.raises(CheckpointError, match=r"\['key'\].*dtype"):
        ckpt.restore(path, target=wrong_dtype)
    extra_leaf = _train_state()
    extra_leaf["params"]["dense"]["extra"] = np.zeros(1, np.float32)
    with pytest.raises(CheckpointError, match=r"missing from the checkpoint: .*\['params'\]\['dense'\]\['extra'\]"):
        ckpt.restore(path, target=extra_leaf)
    assert issubclass(CheckpointError, ValueError)


def test_non_array_leaves_and_bad_metadata_are_refused(tmp_path):
    with pytest.raises(CheckpointError, match="str"):
        ckpt.save(tmp_path / "c.safetensors", {"name": "model"})
    with pytest.raises(CheckpointError, match="JSON"):
        ckpt.save(tmp_path / "c.safetensors", {"w": np.zeros(1)}, metadata={"f": object()})
    assert not os.listdir(tmp_path)


def test_save_never_pickles(tmp_path, monkeypatch):
    import pickle

    def forbidden(*args, **kwargs):
        raise AssertionError("pickle used")

    monkeypatch.setattr(pickle, "dumps", forbidden)
    monkeypatch.setattr(pickle, "dump", forbidden)
    ckpt.save(tmp_path / "c.safetensors", _train_state())
    ckpt.restore(tmp_path / "c.safetensors")


def test_manager_keeps_the_newest_steps(tmp_path):
    manager = CheckpointManager(tmp_path / "run", max_to_keep=2)
    assert manager.latest_step() is None and manager.all_steps() == []
    with pytest.raises(CheckpointError, match="no checkpoint"):
        manager.restore()
    for step in (10, 20, 30):
        manager.save(step, {"w": np.full(2, step, np.int32)}, metadata={"note": step})
    assert manager.all_steps() == [20, 30]
    assert manager.latest_step() == 30
    np.testing.assert_array_equal(manager.restore()["w"], [30, 30])
    np.testing.assert_array_equal(manager.restore(step=20)["w"], [20, 20])
    assert manager.metadata(20)["metadata"] == {"note": 20}
    with pytest.raises(CheckpointError, match="step 10"):
        manager.restore(step=10)
    assert sorted(os.listdir(tmp_path / "run")) == ["checkpoint_20.safetensors",
                                                     "checkpoint_30.safetensors"]


def test_leftovers_of_earlier_versions_are_removed_only_when_old_and_ours(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(1, {"w": np.zeros(2, np.float32)})
    ours = tmp_path / ".checkpoint_2.safetensors.tmp-999999999-abcdef12"   # earlier naming
    ours.write_bytes(b"partial")
    # a partial file safetensors wrote for an earlier version: its header is ours
    partial = (tmp_path / "checkpoint_1.safetensors").read_bytes()[:-4]
    (tmp_path / ".tmpAb12Cd").write_bytes(partial)
    users = {".tmpZz99Yy": b"someone else's safetensors temporary", "notes.tmp": b"x",
             ".checkpoint_3.safetensors.tmp-x": b"x", "checkpoint_x.safetensors": b"x"}
    for name, data in users.items():
        (tmp_path / name).write_bytes(data)
    manager.save(3, {"w": np.zeros(2, np.float32)})
    # a writer of an earlier version may still be at work: fresh files stay
    assert ours.exists() and (tmp_path / ".tmpAb12Cd").exists()
    hours_ago = time.time() - 2 * 3600
    for entry in os.listdir(tmp_path):
        os.utime(tmp_path / entry, (hours_ago, hours_ago))
    CheckpointManager(tmp_path)
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["checkpoint_1.safetensors", "checkpoint_3.safetensors", *users])
    assert manager.all_steps() == [1, 3]


_SLOW_WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    import functrans.checkpoint as ckpt

    manager = ckpt.CheckpointManager(sys.argv[1])
    # large enough that writing and fsyncing takes a while: the parent kills us mid-write
    big = {"w%d" % i: np.full((8_000_000,), float(i), np.float32) for i in range(6)}
    print("ready", flush=True)
    step = 2
    while True:
        manager.save(step, big)
        step += 1
""")


def test_sigkill_during_save_keeps_the_previous_checkpoint(tmp_path):
    directory = tmp_path / "run"
    manager = CheckpointManager(directory)
    previous = {"w": np.arange(5, dtype=np.float32), "step": 1}
    manager.save(1, previous)
    killed_mid_write = False
    for _attempt in range(3):
        child = subprocess.Popen([sys.executable, "-c", _SLOW_WRITER, str(directory)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert child.stdout.readline().strip() == b"ready", child.stderr.read().decode()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if any(".tmp-" in name for name in os.listdir(directory)):
                    break
                time.sleep(0.001)
            time.sleep(0.02)
            child.send_signal(signal.SIGKILL)
        finally:
            child.kill()
            child.wait()
        leftovers = [n for n in os.listdir(directory) if ".tmp-" in n]
        killed_mid_write = killed_mid_write or bool(leftovers)
        # whatever the child managed, every listed step is complete and verifiable
        for step in manager.all_steps():
            restored = manager.restore(step)
            if step == 1:
                _assert_trees_equal(restored, previous)
            else:
                assert restored["w3"].shape == (8_000_000,)
                np.testing.assert_array_equal(restored["w3"][:4], [3.0] * 4)
        assert 1 in manager.all_steps()
        if killed_mid_write:
            break
    assert killed_mid_write, "the child was never killed in the middle of a save"
    # the dead writer's partial file is cleaned up by the next save
    manager.save(100, previous)
    assert not any(".tmp-" in n for n in os.listdir(directory))
    _assert_trees_equal(manager.restore(1, target=previous), previous)
    _assert_trees_equal(manager.restore(target=previous), previous)


def test_the_module_is_also_the_remat_decorator():
    import functrans.numpy as jnp
    f = functrans.checkpoint(lambda x: jnp.sin(jnp.sin(x)))
    np.testing.assert_allclose(functrans.grad(f)(0.3), np.cos(np.sin(0.3)) * np.cos(0.3),
                               rtol=1e-6)
    assert functrans.checkpoint is ckpt


def test_header_json_is_readable(tmp_path):
    path = tmp_path / "c.safetensors"
    ckpt.save(path, {"w": np.zeros((2, 2), np.float32)}, step=4)
    data = path.read_bytes()
    header = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])
    tree = json.loads(header["__metadata__"]["tree"])
    assert tree["step"] == 4
    assert tree["leaves"][0]["dtype"] == "float32" and tree["leaves"][0]["shape"] == [2, 2]


# =============================================================================================
# Interrupted saves leave no debris
# =============================================================================================

_KILLED_BEFORE_RENAME = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    import functrans.checkpoint as ckpt

    def fsync(fd):  # the staged file is complete; die before it is renamed into place
        os.kill(os.getpid(), signal.SIGKILL)

    os.fsync = fsync
    ckpt.save(sys.argv[1], {"w": np.ones(1_000_000, np.float32)}, step=2)
""")

_KILLED_WHILE_SAFETENSORS_WRITES = textwrap.dedent("""
    import os, signal, sys, threading
    import numpy as np
    import functrans.checkpoint as ckpt

    directory = os.path.dirname(os.path.abspath(sys.argv[1]))

    def partial_write_exists():
        for entry in os.listdir(directory):
            staging = os.path.join(directory, entry)
            if ".tmp-" in entry and os.path.isdir(staging):
                for name in os.listdir(staging):
                    if name.startswith(".tmp") and os.path.getsize(os.path.join(staging, name)):
                        return True
        return False

    def kill_mid_write():  # safetensors releases the GIL while it writes
        while True:
            try:
                if partial_write_exists():
                    os.kill(os.getpid(), signal.SIGKILL)
            except OSError:
                pass

    threading.Thread(target=kill_mid_write, daemon=True).start()
    ckpt.save(sys.argv[1], {"w%d" % i: np.full(8_000_000, i, np.float32) for i in range(4)})
    print("finished", flush=True)
""")


def _run_child(script, *args, **kwargs):
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True,
                          text=True, timeout=120, **kwargs)


def _debris(directory):
    return [n for n in os.listdir(directory) if n.startswith(".")]


def test_a_save_killed_before_its_rename_leaves_debris_the_next_save_removes(tmp_path):
    path = tmp_path / "model.safetensors"
    ckpt.save(path, {"w": np.arange(3, dtype=np.float32)}, step=1)
    child = _run_child(_KILLED_BEFORE_RENAME, path)
    assert child.returncode == -signal.SIGKILL, child.stderr
    (staging,) = _debris(tmp_path)
    assert staging.startswith(".model.safetensors.tmp-")
    # the full-size file the dead writer staged
    assert os.path.getsize(tmp_path / staging / "model.safetensors") > 4_000_000
    np.testing.assert_array_equal(ckpt.restore(path)["w"], [0, 1, 2])   # still the old one
    ckpt.save(tmp_path / "other.safetensors", {"w": np.zeros(1, np.float32)})
    assert _debris(tmp_path) == []
    assert ckpt.read_metadata(path)["step"] == 1


def test_safetensors_own_temporary_file_is_debris_a_manager_removes_at_start(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(1, {"w": np.arange(3, dtype=np.float32)})
    for _attempt in range(3):
        child = _run_child(_KILLED_WHILE_SAFETENSORS_WRITES, manager.path_for(2))
        if child.returncode == -signal.SIGKILL:
            break
        assert "finished" in child.stdout, child.stderr
        os.remove(manager.path_for(2))   # the write outran the watcher; try again
    assert child.returncode == -signal.SIGKILL, "the save was never killed mid-write"
    (staging,) = _debris(tmp_path)
    partial = [n for n in os.listdir(tmp_path / staging) if n.startswith(".tmp")]
    assert len(partial) == 1 and len(partial[0]) == len(".tmpXXXXXX"), partial
    assert manager.all_steps() == [1]
    restarted = CheckpointManager(tmp_path)
    assert _debris(tmp_path) == [] and restarted.all_steps() == [1]
    np.testing.assert_array_equal(restarted.restore()["w"], [0, 1, 2])


_PAUSED_BEFORE_RENAME = textwrap.dedent("""
    import os, sys
    import numpy as np
    import functrans.checkpoint as ckpt

    real_fsync, paused = os.fsync, []

    def fsync(fd):  # wait for the parent once, with the staged file complete
        if not paused:
            paused.append(True)
            print("staged", flush=True)
            sys.stdin.readline()
        real_fsync(fd)

    os.fsync = fsync
    ckpt.save(sys.argv[1], {"w": np.arange(10, dtype=np.float32)}, step=5)
    print("saved", flush=True)
""")


def test_a_live_writer_of_another_checkpoint_keeps_its_staging_directory(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", _PAUSED_BEFORE_RENAME,
                              str(tmp_path / "checkpoint_5.safetensors")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "staged", child.stderr.read()
        (staging,) = _debris(tmp_path)
        manager = CheckpointManager(tmp_path)   # starts and saves beside the live writer
        manager.save(6, {"w": np.ones(2, np.float32)})
        ckpt.save(tmp_path / "checkpoint_7.safetensors", {"w": np.ones(2, np.float32)})
        assert _debris(tmp_path) == [staging]
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "saved"
    finally:
        child.kill()
        child.wait()
    assert _debris(tmp_path) == [] and manager.all_steps() == [5, 6, 7]
    np.testing.assert_array_equal(manager.restore(5)["w"], np.arange(10))


def test_stale_staging_directories_of_other_hosts_are_removed_by_age(tmp_path):
    ckpt.save(tmp_path / "a.safetensors", {"w": np.zeros(1, np.float32)})
    elsewhere = tmp_path / ".a.safetensors.tmp-00000000-1-0123456789abcdef"
    elsewhere.mkdir()
    (elsewhere / ".tmpQwErTy").write_bytes(b"x" * 100)
    CheckpointManager(tmp_path)
    assert elsewhere.exists()   # another host's writer may be alive: nothing is removed yet
    hours_ago = time.time() - 2 * 3600
    for p in (elsewhere / ".tmpQwErTy", elsewhere):
        os.utime(p, (hours_ago, hours_ago))
    CheckpointManager(tmp_path)
    assert not elsewhere.exists()


# =============================================================================================
# Malformed checkpoints raise CheckpointError, and bad input never costs a good checkpoint
# =============================================================================================

def _split(data: bytes):
    size = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + size]), data[8 + size:]


def _join(header: dict, body: bytes) -> bytes:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + body


def _with_tree_text(data: bytes, text: str) -> bytes:
    """The file with another tree description, its checksum made to match."""
    import hashlib
    header, body = _split(data)
    header["__metadata__"]["tree"] = text
    header["__metadata__"]["tree_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    return _join(header, body)


_DEEP = "<nested 100000 levels deep>"   # an edit's placeholder for JSON too deep to dump


def _edited(data: bytes, edit) -> bytes:
    header, _ = _split(data)
    document = json.loads(header["__metadata__"]["tree"])
    edit(document)
    text = json.dumps(document).replace(json.dumps(_DEEP), "[" * 100_000 + "]" * 100_000)
    return _with_tree_text(data, text)


def _sample_tree():
    return {"params": {"w": np.arange(6, dtype=np.float32).reshape(2, 3),
                       "b": np.array([1, 2], np.int32)},
            "opt": AdamLikeState(np.int32(3), [np.ones(2, np.float16)], (np.zeros(1),)),
            "key": np.array([7, 9], np.uint32), "step": 7, "scale": 0.5, "flag": True}


@pytest.fixture(scope="module")
def sample_bytes(tmp_path_factory):
    path = tmp_path_factory.mktemp("sample") / "c.safetensors"
    ckpt.save(path, _sample_tree(), step=3, metadata={"lr": [1e-3, {"warmup": 10}]})
    return path.read_bytes()


@pytest.fixture(scope="module")
def sample_restored(tmp_path_factory, sample_bytes):
    """The undamaged sample restored without and with a target (float64 arrays come back
    as float32 unless x64 is on, as arrays everywhere in functrans)."""
    path = tmp_path_factory.mktemp("sample") / "c.safetensors"
    path.write_bytes(sample_bytes)
    return ckpt.restore(path), ckpt.restore(path, target=_sample_tree())


def _leaf_edit(index, key, value):
    def edit(document):
        document["leaves"][index][key] = value
    return edit


def _edit_of_leaf(name, key, value):
    def edit(document):
        [leaf] = [info for info in document["leaves"] if info["name"] == name]
        leaf[key] = value
    return edit


def _deep(depth, inner=None):
    value = inner
    for _ in range(depth):
        value = [value]
    return value


def _deep_structure(depth):
    node = {"kind": "none"}
    for _ in range(depth):
        node = {"kind": "list", "children": [node]}
    return node


MALFORMED_DOCUMENTS = {
    "document is a list": lambda d: d.clear() or d.update({"version": [1]}),
    "no leaves": lambda d: d.pop("leaves"),
    "leaves is a dict": lambda d: d.update(leaves={}),
    "a leaf is a string": lambda d: d["leaves"].__setitem__(0, "w"),
    "leaf name is a number": _leaf_edit(0, "name", 3),
    "object dtype": _leaf_edit(0, "dtype", "object"),
    "string dtype": _leaf_edit(0, "dtype", "<U3"),
    "float8 dtype": _leaf_edit(0, "dtype", "float8_e4m3fn"),
    "big-endian dtype name": _leaf_edit(0, "dtype", ">f4"),
    "dtype is a number": _leaf_edit(0, "dtype", 5),
    "negative size": _leaf_edit(0, "shape", [-1, 3]),
    "fractional size": _leaf_edit(0, "shape", [1.5]),
    "shape is a string": _leaf_edit(0, "shape", "2x3"),
    "checksum is a list": _leaf_edit(0, "sha256", [1]),
    "unknown python type": _leaf_edit(0, "python_type", "str"),
    "python int of an array": _leaf_edit(1, "python_type", "int"),
    "step is a string": lambda d: d.update(step="7"),
    "step is a bool": lambda d: d.update(step=True),
    "metadata nested 100000 deep": lambda d: d.update(metadata=_DEEP),
    "structure nested 100000 deep": lambda d: d.update(structure=_DEEP),
    "structure nested 300 deep": lambda d: d.update(structure=_deep_structure(300)),
    "structure is missing": lambda d: d.pop("structure"),
    "unknown node kind": lambda d: d["structure"].update(kind="set"),
    "dict keys do not match children": lambda d: d["structure"]["keys"].pop(),
    "dict key is not a pair": lambda d: d["structure"]["keys"].__setitem__(0, "flag"),
    "dict key of the wrong type": lambda d: d["structure"]["keys"].__setitem__(0, ["int", "a"]),
    "float dict key no float holds": lambda d: d["structure"]["keys"].__setitem__(
        0, ["float", 10 ** 400]),
    "shape the stored array contradicts": _edit_of_leaf("['params']['w']", "shape", [2 ** 62]),
    "dtype the stored array contradicts": _edit_of_leaf("['params']['w']", "dtype", "int32"),
    "repeated dict key": lambda d: d["structure"]["keys"].__setitem__(1, d["structure"]["keys"][0]),
    "children is a dict": lambda d: d["structure"].update(children={}),
    "leaf node names no array": lambda d: d["structure"]["children"].__setitem__(
        0, {"kind": "leaf", "name": "nowhere"}),
    "leaf named twice": lambda d: d["structure"]["children"].__setitem__(
        0, d["structure"]["children"][1]),
    "two leaves of one name": lambda d: d["leaves"].append(dict(d["leaves"][0])),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_DOCUMENTS))
def test_malformed_tree_descriptions_raise_checkpoint_error(tmp_path, sample_bytes, case):
    path = tmp_path / "c.safetensors"
    path.write_bytes(_edited(sample_bytes, MALFORMED_DOCUMENTS[case]))
    for read in (ckpt.restore, ckpt.read_metadata,
                 lambda p: ckpt.restore(p, target=_sample_tree())):
        with pytest.raises(CheckpointError):
            read(path)


@pytest.mark.parametrize("text", ["{", "[1, 2]", "null", '{"version": 2}', "[" * 100_000])
def test_unparsable_tree_descriptions_raise_checkpoint_error(tmp_path, sample_bytes, text):
    path = tmp_path / "c.safetensors"
    path.write_bytes(_with_tree_text(sample_bytes, text))
    with pytest.raises(CheckpointError):
        ckpt.restore(path)


def test_restore_refuses_the_dtypes_save_refuses(tmp_path):
    import hashlib
    for value in (np.array(["ab"]), np.zeros(2, ml_dtypes.float8_e4m3fn),
                  np.array([1, 2], "datetime64[s]")):
        with pytest.raises(CheckpointError, match="dtype"):
            ckpt.save(tmp_path / "bad.safetensors", {"x": value})
        # a file that describes such an array anyway, with consistent bytes and checksums
        path = tmp_path / "c.safetensors"
        ckpt.save(path, {"x": np.zeros(value.nbytes, np.uint8)})
        raw = value.reshape(-1).view(np.uint8)

        def describe(document, value=value, raw=raw):
            leaf = document["leaves"][0]
            leaf.update(dtype=str(value.dtype), shape=list(value.shape),
                        sha256=hashlib.sha256(raw.tobytes()).hexdigest())
        path.write_bytes(_edited(path.read_bytes(), describe))
        with pytest.raises(CheckpointError, match="dtype"):
            ckpt.restore(path)
    assert not os.path.exists(tmp_path / "bad.safetensors")


def test_an_array_missing_from_the_file_or_stored_otherwise_is_detected(tmp_path, sample_bytes):
    header, body = _split(sample_bytes)
    renamed = dict(header)
    renamed["['key']x"] = renamed.pop("['key']")
    path = tmp_path / "c.safetensors"
    path.write_bytes(_join(renamed, body))
    with pytest.raises(CheckpointError, match=r"\['key'\] is missing"):
        ckpt.restore(path)
    retyped = json.loads(json.dumps(header))
    retyped["['key']"]["dtype"] = "I32"      # same bytes, read as another type
    path.write_bytes(_join(retyped, body))
    with pytest.raises(CheckpointError, match=r"\['key'\] is stored as I32"):
        ckpt.restore(path)


def test_deep_trees_and_metadata_are_refused_when_saving(tmp_path):
    path = tmp_path / "c.safetensors"
    ckpt.save(path, _deep(200, np.ones(1, np.float32)), metadata=_deep(200))
    assert len(ckpt.read_metadata(path)["leaves"]) == 1
    cyclic = {}
    cyclic["self"] = cyclic
    for tree, metadata in ((_deep(300, np.ones(1)), None), (_deep(5000, np.ones(1)), None),
                           ({"w": np.ones(1)}, _deep(300)), ({"w": np.ones(1)}, cyclic)):
        with pytest.raises(CheckpointError, match="nested|JSON"):
            ckpt.save(path, tree, metadata=metadata)
    restored = ckpt.restore(path)
    for _ in range(200):
        (restored,) = restored
    np.testing.assert_array_equal(restored, np.ones(1))


def test_bad_input_never_costs_the_previous_checkpoint(tmp_path):
    import functrans.numpy as jnp
    manager = CheckpointManager(tmp_path, max_to_keep=1)
    good = {"w": np.arange(4, dtype=np.float32), "step": 1}
    manager.save(1, good)
    bad_inputs = [({"w": "text"}, None), ({"w": np.zeros(2, object)}, None),
                  ({"w": np.zeros(2, ml_dtypes.float8_e4m3fn)}, None),
                  ({"w": np.zeros(2)}, {"f": object()}), ({"w": np.zeros(2)}, _deep(1000)),
                  (_deep(1000, np.zeros(1)), None), ({"a": np.zeros(1), "b": "x"}, None)]
    for tree, metadata in bad_inputs:
        with pytest.raises(CheckpointError):
            manager.save(1, tree, metadata=metadata)
        with pytest.raises(CheckpointError):
            manager.save(2, tree, metadata=metadata)
    with pytest.raises(CheckpointError, match="traced"):
        functrans.jit(lambda x: manager.save(1, {"w": x}) or x)(jnp.ones(2))
    with pytest.raises(CheckpointError, match="step"):
        ckpt.save(manager.path_for(1), good, step=1.5)
    assert os.listdir(tmp_path) == ["checkpoint_1.safetensors"]
    _assert_trees_equal(manager.restore(1, target=good), good)


def test_big_endian_arrays_round_trip(tmp_path):
    value = np.arange(5, dtype=">f8")
    ckpt.save(tmp_path / "c.safetensors", {"x": value})
    restored = ckpt.restore(tmp_path / "c.safetensors", target={"x": np.zeros(5, np.float64)})
    np.testing.assert_array_equal(np.asarray(restored["x"]), np.arange(5.0))


def test_target_leaves_without_an_array_type_raise_checkpoint_error(tmp_path, sample_bytes):
    path = tmp_path / "c.safetensors"
    path.write_bytes(sample_bytes)
    target = _sample_tree()
    target["key"] = object()
    with pytest.raises(CheckpointError, match=r"\['key'\]"):
        ckpt.restore(path, target=target)
    target = _sample_tree()
    target["scale"] = 1    # a Python int where a float was saved: int() would truncate
    with pytest.raises(CheckpointError, match=r"\['scale'\]"):
        ckpt.restore(path, target=target)


def _restored_or_checkpoint_error(path, read):
    try:
        return read(path)
    except CheckpointError:
        return None


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_bytes_raise_checkpoint_error_or_restore_exactly(tmp_path, sample_bytes,
                                                                sample_restored, data):
    damaged = bytearray(sample_bytes)
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.integers(0, max(len(damaged) - 1, 0)))
        how = data.draw(st.sampled_from(["truncate", "flip", "insert", "delete", "zero"]))
        if how == "truncate":
            del damaged[where:]
        elif how == "flip" and damaged:
            damaged[where] ^= data.draw(st.integers(1, 255))
        elif how == "insert":
            damaged[where:where] = data.draw(st.binary(min_size=1, max_size=16))
        elif how == "delete":
            del damaged[where:where + data.draw(st.integers(1, 16))]
        else:
            damaged[where:where + 8] = bytes(len(damaged[where:where + 8]))
    path = tmp_path / "c.safetensors"
    path.write_bytes(bytes(damaged))
    without_target, with_target = sample_restored
    restored = _restored_or_checkpoint_error(path, ckpt.restore)
    if restored is not None:
        _assert_trees_equal(restored, without_target)
        assert restored["opt"]._fields == ("count", "mu", "nu")
    restored = _restored_or_checkpoint_error(path, lambda p: ckpt.restore(p, target=_sample_tree()))
    if restored is not None:
        _assert_trees_equal(restored, with_target)
        assert type(restored["opt"]) is AdamLikeState


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2 ** 40) | st.floats() | st.text(max_size=4)
    | st.sampled_from(["float32", "int32", "leaf", "dict", "namedtuple", "int", "str"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["kind", "name", "children", "keys", "fields", "dtype", "shape", "x"]),
        inner, max_size=3),
    max_leaves=6)


def _locations(value, where=()):
    yield where
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _locations(v, where + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _locations(v, where + (i,))


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_edited_tree_descriptions_raise_checkpoint_error_or_restore(tmp_path, sample_bytes,
                                                                   sample_restored, data):
    # edits that keep the header's checksum consistent reach every field's validation
    header, _ = _split(sample_bytes)
    document = json.loads(header["__metadata__"]["tree"])
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.sampled_from(list(_locations(document))[1:]))
        parent = document
        for key in where[:-1]:
            parent = parent[key]
        if data.draw(st.booleans()):
            parent[where[-1]] = data.draw(_JSON)
        elif isinstance(parent, dict):
            del parent[where[-1]]
        else:
            parent.pop(where[-1])
    path = tmp_path / "c.safetensors"
    path.write_bytes(_with_tree_text(sample_bytes, json.dumps(document)))
    _restored_or_checkpoint_error(path, ckpt.restore)       # any tree, or CheckpointError
    _restored_or_checkpoint_error(path, ckpt.read_metadata)
    restored = _restored_or_checkpoint_error(path, lambda p: ckpt.restore(p, target=_sample_tree()))
    if restored is not None:   # the target fixes the structure; the arrays are checksummed
        _assert_trees_equal(restored, sample_restored[1])


def _words_from(structure, first: int):
    """The key's words swapped with two arrays of ``pair`` (from ``first`` on)."""
    key, pair = structure["children"]  # keys in sorted order
    key["children"], pair["children"][first:first + 2] = \
        pair["children"][first:first + 2], key["children"]


def _key_words_of_two_nones(structure):
    key, pair = structure["children"]  # keys in sorted order
    pair["children"] += key["children"]
    key["children"] = [{"kind": "none"}, {"kind": "none"}]


@pytest.mark.parametrize("edit", [
    lambda d: _words_from(d["structure"], 0),
    lambda d: _key_words_of_two_nones(d["structure"]),
    lambda d: _words_from(d["structure"], 2),
], ids=["float32 words", "two none nodes", "words of two shapes"])
def test_a_prng_key_is_restored_only_from_two_uint32_words(tmp_path, edit):
    # such keys were restored silently, as keys of bogus words
    path = tmp_path / "c.safetensors"
    ckpt.save(path, {"pair": (np.ones(2, np.float32), np.ones(2, np.float32),
                              np.ones(2, np.uint32), np.ones(3, np.uint32)),
                     "key": functrans.random.key(0)})
    assert ckpt.restore(path)["key"].dtype == functrans.random.key(0).dtype
    path.write_bytes(_edited(path.read_bytes(), edit))
    with pytest.raises(CheckpointError, match="PRNG key's words"):
        ckpt.restore(path)


def test_read_metadata_reports_only_shapes_the_arrays_have(tmp_path, sample_bytes):
    path = tmp_path / "c.safetensors"
    path.write_bytes(_edited(sample_bytes, _edit_of_leaf("['params']['w']", "shape", [2 ** 62])))
    with pytest.raises(CheckpointError, match=r"stored as .*but the tree describes"):
        ckpt.read_metadata(path)


@pytest.mark.skipif(os.name != "posix", reason="file modes and umasks are POSIX")
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_a_checkpoint_gets_the_mode_of_a_new_file(tmp_path, umask):
    # safetensors' temporary file is 0600, which the checkpoint kept whatever the umask
    old = os.umask(umask)
    try:
        ckpt.save(tmp_path / "c.safetensors", {"w": np.ones(2)})
        (tmp_path / "plain").write_bytes(b"")
    finally:
        os.umask(old)
    mode = (tmp_path / "c.safetensors").stat().st_mode & 0o777
    assert mode == 0o666 & ~umask == (tmp_path / "plain").stat().st_mode & 0o777


# ---- orbax's everyday surface -----------------------------------------------------------------


def test_orbax_standard_checkpointer(tmp_path):
    from functrans.checkpoint import StandardCheckpointer
    state = {"params": {"w": jnp.arange(6.0).reshape(2, 3)}, "step": jnp.asarray(4)}
    with StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "state", state)
        with pytest.raises(ValueError, match="already exists"):
            checkpointer.save(tmp_path / "state", state)
        checkpointer.save(tmp_path / "state", state, force=True)
        abstract = functrans.eval_shape(lambda s: s, state)  # ShapeDtypeStruct leaves
        restored = checkpointer.restore(tmp_path / "state", abstract)
        checkpointer.wait_until_finished()
    np.testing.assert_array_equal(np.asarray(restored["params"]["w"]),
                                  np.arange(6.0).reshape(2, 3))
    assert int(restored["step"]) == 4


def test_orbax_manager_with_args_and_options(tmp_path):
    from functrans import checkpoint as ocp
    options = ocp.CheckpointManagerOptions(max_to_keep=2, save_interval_steps=2)
    target = {"w": functrans.ShapeDtypeStruct((3,), jnp.float32)}
    with ocp.CheckpointManager(tmp_path / "run", options=options) as manager:
        saved = [manager.save(step, args=ocp.args.StandardSave({"w": jnp.full(3, float(step))}))
                 for step in range(7)]
        manager.wait_until_finished()
        assert saved == [True, False, True, False, True, False, True]
        assert manager.all_steps() == [4, 6] and manager.latest_step() == 6
        restored = manager.restore(6, args=ocp.args.StandardRestore(target))
        np.testing.assert_array_equal(np.asarray(restored["w"]), np.full(3, 6.0))
        assert manager.save(7, args=ocp.args.StandardSave({"w": jnp.ones(3)}), force=True)
        assert manager.all_steps() == [6, 7]


def test_orbax_composite_items(tmp_path):
    from functrans import checkpoint as ocp
    manager = ocp.CheckpointManager(tmp_path)
    manager.save(1, args=ocp.args.Composite(state=ocp.args.StandardSave({"w": jnp.ones(2)}),
                                            extra=ocp.args.JsonSave({"lr": 0.1, "name": "a"})))
    restored = manager.restore(1, args=ocp.args.Composite(
        state=ocp.args.StandardRestore({"w": jnp.zeros(2)}), extra=ocp.args.JsonRestore()))
    np.testing.assert_array_equal(np.asarray(restored.state["w"]), np.ones(2))
    assert restored["extra"] == {"lr": 0.1, "name": "a"}
    with pytest.raises(ocp.CheckpointError, match="no item 'other'"):
        manager.restore(1, args=ocp.args.Composite(other=ocp.args.StandardRestore()))
