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

import functrans
import functrans.checkpoint as ckpt
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


def test_manager_ignores_leftover_temporary_files(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(1, {"w": np.zeros(2, np.float32)})
    (tmp_path / ".checkpoint_2.safetensors.tmp-999999999-abcdef12").write_bytes(b"partial")
    assert manager.all_steps() == [1]
    manager.save(3, {"w": np.zeros(2, np.float32)})
    # that writer is dead (no such pid): its leftover is removed on the next save
    assert manager.all_steps() == [1, 3]
    assert not any(".tmp-" in name for name in os.listdir(tmp_path))


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
