"""functrans.optim against optax 0.2.8: every optimizer in ``tests/data/optax_reference.json``
runs a few steps on the same small quadratic and must land on optax's parameters, with a
state of the same structure (NamedTuple types, field names, leaf shapes and dtypes).

The reference numbers were made once by ``tests/data/make_optax_reference.py`` with optax
0.2.8; where optax is importable the same cases also run against it directly.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib

import numpy as np
import pytest

import functrans.numpy as jnp
from functrans import optim

DATA = pathlib.Path(__file__).parent / "data"
REFERENCE = json.loads((DATA / "optax_reference.json").read_text())
CASES = {case["id"]: case for case in REFERENCE["cases"]}


def _load_generator():
    spec = importlib.util.spec_from_file_location("make_optax_reference",
                                                  DATA / "make_optax_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _load_generator()


def _same_structure(got, want, where="state"):
    """Compare two ``describe`` outputs (typed PRNG keys included: dtype key<fry>)."""
    if isinstance(want, list) and len(want) == 2 and isinstance(want[1], str):
        assert got == want, f"{where}: leaf {got} != optax's {want}"
        return
    if isinstance(want, dict) and "type" in want:
        assert isinstance(got, dict) and got.get("type") == want["type"], \
            f"{where}: {got.get('type') if isinstance(got, dict) else got!r} != {want['type']}"
        assert list(got["fields"]) == list(want["fields"]), \
            f"{where}: fields {list(got['fields'])} != {list(want['fields'])}"
        for field in want["fields"]:
            _same_structure(got["fields"][field], want["fields"][field],
                            f"{where}.{want['type']}.{field}")
        return
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got["dict"]) == list(want["dict"]), where
        for key in want["dict"]:
            _same_structure(got["dict"][key], want["dict"][key], f"{where}[{key!r}]")
        return
    if want is None:
        assert got is None, where
        return
    assert isinstance(got, list) and len(got) == len(want), f"{where}: {got} != {want}"
    for i, (g, w) in enumerate(zip(got, want)):
        _same_structure(g, w, f"{where}[{i}]")


def _assert_trajectory(got, want, case):
    for t, (g, w) in enumerate(zip(got, want)):
        for leaf in w:
            np.testing.assert_allclose(
                np.asarray(g[leaf], np.float64), np.asarray(w[leaf], np.float64),
                rtol=case["rtol"], atol=case["atol"],
                err_msg=f"{case['id']}: step {t + 1}, leaf {leaf!r}")


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_optimizer_matches_optax(case_id):
    case = CASES[case_id]
    got, state = GENERATOR.run_case(optim, jnp, case, REFERENCE["problem"])
    _assert_trajectory(got, case["trajectory"], case)
    _same_structure(state, case["state"])


# compiled, the loops, conditions and line searches must give the same steps
JIT_CASES = ["adam_schedule", "adafactor_factored", "lbfgs", "sgd_zoom_linesearch",
             "sgd_backtracking_store_grad", "conditionally_mask", "apply_if_finite",
             "multi_steps_sum_skip", "masked_adam", "partition", "inject_hyperparams_adamw",
             "contrib.reduce_on_plateau", "contrib.sam", "contrib.sophia", "contrib.galore",
             "contrib.muon", "contrib.schedule_free_adamw", "contrib.mechanize",
             "contrib.momo_adaptive"]


@pytest.mark.parametrize("case_id", JIT_CASES)
def test_jitted_optimizer_matches_optax(case_id):
    import functrans
    case = CASES[case_id]
    got, state = GENERATOR.run_case(optim, jnp, case, REFERENCE["problem"], jit=functrans.jit)
    _assert_trajectory(got, case["trajectory"], case)
    _same_structure(state, case["state"])


@pytest.fixture
def optax_and_jax():
    """optax and jax (both draw random bits with JAX's default, partitionable threefry, as
    functrans.random does)."""
    return pytest.importorskip("optax"), pytest.importorskip("jax")


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_optimizer_matches_installed_optax(case_id, optax_and_jax):
    optax, jax = optax_and_jax
    case = CASES[case_id]
    want, want_state = GENERATOR.run_case(optax, jax.numpy, case, REFERENCE["problem"])
    got, state = GENERATOR.run_case(optim, jnp, case, REFERENCE["problem"])
    _assert_trajectory(got, want, case)
    _same_structure(state, want_state)


# =============================================================================================
# Scenarios: longer computations (L-BFGS on Rosenbrock, schedules, tree utilities, losses,
# projections, ...) written once in the generator against the common API
# =============================================================================================

SCENARIOS = {s.__name__[len("scenario_"):]: s for s in GENERATOR.SCENARIOS}


def _is_array(tree) -> bool:
    """Whether ``tree`` is a number or a (nested, rectangular) list of numbers."""
    if isinstance(tree, (int, float, bool)):
        return True
    if not isinstance(tree, list) or not all(_is_array(x) for x in tree):
        return False
    return len({np.shape(x) for x in tree}) <= 1


def _assert_close_tree(got, want, rtol, atol, where):
    if isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), f"{where}: keys differ"
        for k in want:
            _assert_close_tree(got[k], want[k], rtol, atol, f"{where}[{k!r}]")
        return
    if isinstance(want, list) and not _is_array(want):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: length differs"
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_close_tree(g, w, rtol, atol, f"{where}[{i}]")
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{where}: shape {got.shape} != {want.shape}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=where)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=where)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_matches_optax(name):
    import functrans
    got = GENERATOR.run_scenario(SCENARIOS[name], optim, jnp, functrans)
    rtol, atol = GENERATOR.SCENARIO_TOLERANCES.get(name, (1e-5, 1e-6))
    _assert_close_tree(got, REFERENCE["scenarios"][name], rtol, atol, name)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_matches_installed_optax(name, optax_and_jax):
    import functrans
    optax, jax = optax_and_jax
    want = GENERATOR.run_scenario(SCENARIOS[name], optax, jax.numpy, jax)
    got = GENERATOR.run_scenario(SCENARIOS[name], optim, jnp, functrans)
    rtol, atol = GENERATOR.SCENARIO_TOLERANCES.get(name, (1e-5, 1e-6))
    _assert_close_tree(got, want, rtol, atol, name)
