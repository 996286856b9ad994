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
    losses = [float(v) for v in re.findall(r"step +\d+ loss ([0-9.eE+-]+)", out)]
    diffs = [float(v) for v in re.findall(r"grad difference ([0-9.eE+-]+)", out)]
    assert len(losses) == 8 and losses[-1] < losses[0]
    assert max(diffs) < 1e-5, out


# ---- every example explains itself --------------------------------------------------------

# Run in a subprocess: the example's parser is built, its flags are written out as JSON
# instead of being parsed, and the process stops before any training.
_DUMP_FLAGS = r"""
import argparse, json, runpy, sys
def dump(parser, args=None, namespace=None):
    flags = [{"options": a.option_strings, "help": a.help, "default": repr(a.default)}
             for a in parser._actions if a.option_strings != ["-h", "--help"]]
    print(json.dumps({"description": parser.description, "flags": flags,
                      "help": parser.format_help()}))
    sys.exit(0)
argparse.ArgumentParser.parse_args = dump
sys.argv = [sys.argv[1]]
sys.path.insert(0, sys.argv[0].rsplit("/", 1)[0])
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _flags(script):
    import json
    out = subprocess.run([sys.executable, "-c", _DUMP_FLAGS, str(EXAMPLES / script)],
                         capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


TRAINING_EXAMPLES = ["mlp_digits.py", "per_example_grads.py", "data_parallel_mlp.py",
                     "data_parallel_sharding.py", "tensor_parallel_mlp.py", "rnn_scan.py",
                     "cnn_digits.py", "transformer_lm.py"]


def test_every_example_is_listed():
    assert sorted(TRAINING_EXAMPLES) == sorted(
        p.name for p in EXAMPLES.glob("*.py") if p.name != "training_report.py")


import pytest  # noqa: E402


@pytest.mark.parametrize("script", TRAINING_EXAMPLES)
def test_help_explains_every_flag_and_shows_its_default(script):
    parsed = _flags(script)
    # the whole docstring, not its first line cut mid-sentence
    description = parsed["description"].strip()
    assert "\n" in description, description
    first_paragraph = description.split("\n\n")[0]
    assert first_paragraph.rstrip().endswith("."), first_paragraph
    for flag in parsed["flags"]:
        assert flag["help"] and len(flag["help"]) > 8, flag
    options = parsed["help"].split("options:")[-1]
    for flag in parsed["flags"]:
        name = flag["options"][-1]
        entry = options.split(name, 1)[1].split("\n  --", 1)[0]
        assert "(default:" in entry, (name, entry)
    names = {f["options"][-1] for f in parsed["flags"]}
    assert "--plot" in names  # every training example can plot its loss curve


@pytest.mark.parametrize("script", ["data_parallel_mlp.py", "data_parallel_sharding.py",
                                    "tensor_parallel_mlp.py"])
def test_parallel_examples_default_to_several_devices(script):
    env = {k: v for k, v in os.environ.items() if k != "FUNCTRANS_CPU_DEVICES"}
    out = subprocess.run([sys.executable, str(EXAMPLES / script), "--steps", "2"],
                         capture_output=True, text=True, timeout=240, cwd=str(ROOT), env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"training on (a mesh of )?4 devices|'data': 2, 'model': 2", out.stdout), \
        out.stdout


def test_training_examples_end_with_a_summary_and_plot_their_loss(tmp_path):
    png = tmp_path / "loss.png"
    out = _run("per_example_grads.py", "--steps", "20", "--plot", png)
    summary = [line for line in out.splitlines() if line.startswith("summary:")]
    assert len(summary) == 1, out
    assert re.search(r"final loss [0-9.]+, test accuracy [0-9.]+, [0-9.]+ steps/s, "
                     r"compile \+ first step [0-9.]+ s", summary[0]), summary[0]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
