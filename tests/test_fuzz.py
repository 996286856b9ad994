"""The differential fuzzer's CI profile: random programs (functrans.testing.programs) checked
four ways (functrans.testing.fuzz). A failure shrinks to a minimal program, is kept in
hypothesis's example database and replayed first by the next run; its report names the
compiler pass to blame. Longer runs: ``python -m functrans.testing.fuzz --programs N``."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llvmlite")
hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import functrans  # noqa: E402
from functrans.testing import fuzz  # noqa: E402
from functrans.testing.programs import Program, programs  # noqa: E402
from llvm_setups import miscompile_dot_epilogues  # noqa: E402

# programs per check in the suite (the derandomized CI profile draws the same ones each run)
EXAMPLES = {"jit": 150, "vmap": 60, "grad": 60, "sharded": 60, "targets": 40}


def _fuzz_settings(check):
    return settings(max_examples=EXAMPLES[check], deadline=None,
                    suppress_health_check=list(HealthCheck))


@pytest.fixture
def four_devices():
    functrans.config.update("cpu_device_count", fuzz.DEVICES)


def _run(check, program, seed):
    try:
        fuzz.CHECK_FUNCTIONS[check](program, seed)
    except fuzz.NotApplicable:
        pass


@_fuzz_settings("jit")
@given(programs(), st.integers(0, 2 ** 31 - 1))
def test_jit_matches_the_reference_interpreter(program, seed):
    _run("jit", program, seed)


@_fuzz_settings("vmap")
@given(programs(max_statements=6), st.integers(0, 2 ** 31 - 1))
def test_vmap_matches_a_loop(program, seed):
    _run("vmap", program, seed)


@_fuzz_settings("grad")
@given(programs(max_statements=6), st.integers(0, 2 ** 31 - 1))
def test_gradients_match_numerical_differences(program, seed):
    _run("grad", program, seed)


@_fuzz_settings("sharded")
@given(programs(max_statements=6), st.integers(0, 2 ** 31 - 1))
def test_sharded_jit_matches_the_reference_interpreter(four_devices, program, seed):
    _run("sharded", program, seed)


@_fuzz_settings("targets")
@given(programs(max_statements=6), st.integers(0, 2 ** 31 - 1))
def test_two_target_cpus_agree(program, seed):
    _run("targets", program, seed)


# ---- the fuzzer finds what it is for ----------------------------------------------------------

_GRAM = Program(source="def f(x0, x1):\n    v0 = x0.T @ x1 + x0 @ x1\n    return (v0,)\n",
                inputs=[((3, 3), "f"), ((3, 2), "f")], bounds=[20.0], kinds=["f"])


def test_a_mismatch_is_reported_with_the_program_and_the_pass_to_blame(monkeypatch):
    # a miscompile put into fuse_dot_epilogues: the folded product is scaled twice
    miscompile_dot_epilogues(monkeypatch)
    with pytest.raises(fuzz.Mismatch) as caught:
        fuzz.check_jit(_GRAM, seed=0)
    report = str(caught.value)
    assert "jit result 0" in report and "x0.T @ x1 + x0 @ x1" in report
    assert "'fuse_dot_epilogues' (the check passes with it disabled)" in report


def test_the_report_says_when_no_pass_is_to_blame():
    bad = Program(source="def f(x0):\n    return (x0 * 2.0,)\n", inputs=[((2,), "f")],
                  bounds=[8.0], kinds=["f"])
    assert fuzz.bisect(lambda: "always wrong").startswith("none")
    assert fuzz.bisect(lambda: None).startswith("'")
    assert bad.function(np.float32)(np.ones(2, np.float32))[0].tolist() == [2.0, 2.0]


def test_comparisons_hold_to_their_tolerances():
    x = np.linspace(-3, 3, 7).astype(np.float32)
    assert fuzz._compare(x, x, 1.0, "r") is None
    assert fuzz._compare(x * (1 + 1e-5), x, 1.0, "r") is None
    assert "differ" in fuzz._compare(x + 0.01, x, 1.0, "r")
    assert fuzz._compare(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]), 1.0, "r") is None
    assert "differ" in fuzz._compare(np.array([1.0, 1.0]), np.array([np.nan, 1.0]), 1.0, "r")
    assert "expected 3" in fuzz._compare(np.array([1, 2]), np.array([1, 3]), 1.0, "r")
    assert "float32[2]" in fuzz._compare(np.zeros(2, np.float32), np.zeros(3, np.float32), 1,
                                         "r")


def test_the_command_line_runs_a_batch(tmp_path):
    import json
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "-m", "functrans.testing.fuzz", "--programs", "4",
                             "--batch", "2", "--seed", "5", "--checks", "jit,vmap",
                             "--database", str(tmp_path / "db")],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    counts = json.loads(result.stdout[result.stdout.index("{"):])
    assert counts["programs"] == 4 and counts["jit checked"] == 4 and counts["vmap checked"] == 4

