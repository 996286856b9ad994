"""The examples run (small settings) and learn: loss goes down, accuracy is high, a resumed
run ends where an uninterrupted one does, data-parallel runs match the single-device run."""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def _run(script, *args, env=None, timeout=240):
    out = subprocess.run([sys.executable, str(EXAMPLES / script), *map(str, args)],
                         capture_output=True, text=True, timeout=timeout, cwd=str(ROOT),
                         env=dict(os.environ, **(env or {})))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return out.stdout


def test_mlp_digits_trains_and_resumes_exactly(tmp_path):
    full = _run("mlp_digits.py", "--epochs", "12", "--quiet", "--ckpt-dir", tmp_path / "a")
    acc = float(re.search(r"test accuracy: ([0-9.]+)", full).group(1))
    assert acc >= 0.95, full
    _run("mlp_digits.py", "--epochs", "12", "--quiet", "--ckpt-dir", tmp_path / "b",
         "--stop-after", "5")
    resumed = _run("mlp_digits.py", "--epochs", "12", "--quiet", "--ckpt-dir", tmp_path / "b",
                   "--resume")
    assert "resumed from epoch 5" in resumed
    import functrans
    a = functrans.checkpoint.CheckpointManager(tmp_path / "a").restore(12)
    b = functrans.checkpoint.CheckpointManager(tmp_path / "b").restore(12)
    for x, y in zip(functrans.tree_util.tree_leaves(a["params"]),
                    functrans.tree_util.tree_leaves(b["params"])):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_dp_sgd_example_learns():
    out = _run("per_example_grads.py", "--steps", "120")
    assert float(re.search(r"test accuracy ([0-9.]+)", out).group(1)) > 0.7, out


def test_rnn_scan_example_loss_goes_down():
    out = _run("rnn_scan.py", "--steps", "3", "--seq-len", "20")
    losses = [float(v) for v in re.findall(r"step +\d+ +loss ([0-9.eE+-]+)", out)]
    assert len(losses) >= 2 and losses[-1] < losses[0], out


def test_data_parallel_example_matches_single_device():
    single = _run("data_parallel_mlp.py", "--single", "--steps", "6")
    multi = _run("data_parallel_mlp.py", "--steps", "6", env={"FUNCTRANS_CPU_DEVICES": "4"})
    pattern = r"step +\d+ loss ([0-9.eE+-]+)"
    a = [float(v) for v in re.findall(pattern, single)]
    b = [float(v) for v in re.findall(pattern, multi)]
    assert len(a) == len(b) >= 2
    np.testing.assert_allclose(a, b, rtol=1e-5)
    assert a[-1] < a[0]


def test_cnn_example_learns():
    out = _run("cnn_digits.py", "--epochs", "6", "--quiet")
    assert float(re.search(r"test accuracy: ([0-9.]+)", out).group(1)) > 0.9, out


def test_data_parallel_sharding_example_matches_single_device():
    single = _run("data_parallel_sharding.py", "--single", "--steps", "6")
    multi = _run("data_parallel_sharding.py", "--steps", "6", env={"FUNCTRANS_CPU_DEVICES": "4"})
    pattern = r"step +\d+ loss ([0-9.eE+-]+)"
    a = [float(v) for v in re.findall(pattern, single)]
    b = [float(v) for v in re.findall(pattern, multi)]
    assert "mesh of 4 devices" in multi
    assert len(a) == len(b) == 6 and a[-1] < a[0]
    np.testing.assert_allclose(a, b, rtol=1e-5)


def test_tensor_parallel_example_equals_unsharded_and_learns():
    out = _run("tensor_parallel_mlp.py", "--steps", "8", env={"FUNCTRANS_CPU_DEVICES": "4"})
    assert "'data': 2, 'model': 2" in out
    losses = [float(v) for v in re.findall(r"loss ([0-9.eE+-]+)", out)]
    diffs = [float(v) for v in re.findall(r"grad difference ([0-9.eE+-]+)", out)]
    assert len(losses) == 8 and losses[-1] < losses[0]
    assert max(diffs) < 1e-5, out
