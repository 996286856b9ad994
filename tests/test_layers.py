"""The layers: what the core declares for the layers above it (Primitive fields, the
registrations of the eager array type and of device evaluation, the reference evaluator),
and the import contracts that keep every import pointing down."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import core, lax
from functrans._array import Array
from functrans.primitives import collectives, control_flow
from module_graph import Graph, cycles


def test_primitive_declares_the_fields_transforms_read():
    plain = core.Primitive("plain")
    assert plain.batch_needs_axis is False and plain.is_collective is False
    assert core.Primitive("axis_rule", batch_needs_axis=True).batch_needs_axis is True
    for p in (collectives.psum_p, collectives.all_gather_p, collectives.axis_index_p):
        assert p.is_collective and p.batch_needs_axis, p
    for p in (control_flow.cond_p, control_flow.while_p, control_flow.scan_p):
        assert p.batch_needs_axis and not p.is_collective, p
    assert not lax.sin_p.is_collective


def test_collective_of_unbatched_operand_under_vmap_still_runs_its_rule():
    # is_collective makes vmap run psum's rule on an operand that is not batched
    out = functrans.vmap(lambda x: collectives.psum(1.0, "i"), axis_name="i")(jnp.zeros(5))
    np.testing.assert_array_equal(np.asarray(out), np.full(5, 5.0, np.float32))


def test_eval_jaxpr_numpy_lives_in_the_core():
    closed = functrans.make_jaxpr(lambda x: lax.sin(x) * 2.0 + 1.0)(np.float32(0.5))
    out, = core.eval_jaxpr_numpy(closed.jaxpr, [core.to_numpy(c) for c in closed.consts],
                                 [np.float32(0.5)])
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, np.sin(np.float32(0.5)) * 2 + 1, rtol=1e-6)


class _OnOtherDevice(Array):
    """An Array that says it lives off the host, as a GPU array does."""
    __slots__ = ()
    _platform = "elsewhere"


@pytest.fixture
def registered_device_eval():
    calls = []
    previous = core._device_eval

    def evaluate(primitive, args, params):
        calls.append(primitive.name)
        if primitive is lax.neg_p:
            return NotImplemented  # declined: the reference implementation runs instead
        return Array(np.full(np.shape(args[0]), 7.0, np.float32))

    core.register_device_eval(evaluate)
    try:
        yield calls
    finally:
        core.register_device_eval(previous)


def test_eager_primitive_on_a_device_array_goes_to_the_registered_evaluator(
        registered_device_eval):
    x = _OnOtherDevice(np.ones(3, np.float32))
    np.testing.assert_array_equal(np.asarray(lax.sin(x)), np.full(3, 7.0, np.float32))
    np.testing.assert_array_equal(np.asarray(lax.neg(x)), -np.ones(3, np.float32))
    # host arrays never reach it
    np.testing.assert_allclose(np.asarray(lax.sin(jnp.ones(3))), np.sin(np.ones(3)), rtol=1e-6)
    assert registered_device_eval == ["sin", "neg"]


def test_eager_results_are_the_registered_array_type():
    assert core._array_type is Array
    assert type(lax.sin(np.float32(1.0))) is Array


# =============================================================================================
# Import contracts
# =============================================================================================

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _lint_imports(root: pathlib.Path) -> subprocess.CompletedProcess:
    """lint-imports with the contracts of ``root``/pyproject.toml, over the functrans package
    found in ``root`` (in a fresh interpreter, so it reads those files and no other copy)."""
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True,
                          text=True, timeout=120)


def test_import_contracts_are_kept():
    run = _lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 kept, 0 broken" in run.stdout


def test_import_contracts_catch_an_upward_import(tmp_path):
    shutil.copytree(ROOT / "functrans", tmp_path / "functrans",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    core_py = tmp_path / "functrans" / "core.py"
    core_py.write_text(core_py.read_text() + "\nfrom functrans.numpy import _creation  # noqa\n")
    run = _lint_imports(tmp_path)
    assert run.returncode != 0, run.stdout
    assert "functrans.core -> functrans.numpy._creation" in run.stdout


def _import_graph(top_level_only: bool) -> dict[str, set[str]]:
    """Module -> the functrans modules it imports (at import time only, or anywhere),
    leaving out imports under ``if TYPE_CHECKING:``."""
    graph = Graph(ROOT)
    return graph.top_level if top_level_only else graph.edges


# Import cycles left in the package: the test fails when a cycle appears that is not one of
# these, or when one of these is gone (remove it here).
KNOWN_CYCLES = []


def test_cycle_finder_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert cycles(graph) == [{"a", "b", "c"}]


def test_no_import_cycles_between_modules():
    found = cycles(_import_graph(top_level_only=True))
    unexpected = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert not unexpected, f"import cycles: {unexpected}"
    assert sorted(map(sorted, found)) == sorted(map(sorted, KNOWN_CYCLES))


# What a backend may import from the front end: the core layer (the IR, dtypes,
# configuration, caches, the backend and device registries) and the primitives (the IR's
# vocabulary, which lowering tables are keyed by).
BACKEND_MAY_IMPORT = ("functrans.core", "functrans._config", "functrans._dtypes",
                      "functrans._caches", "functrans._backends", "functrans._source_info",
                      "functrans.version", "functrans.primitives",
                      # the IR's call inliner, shared with the front end's own passes
                      "functrans.interpreters.inline",
                      # the floating-point mode (subnormals flushed) all computation runs in
                      "functrans._float_mode")
# Known exceptions, each a front-end service a backend uses today.
BACKEND_EXCEPTIONS = {
    # the GPU Array subclass and its device (a GPU array is a functrans.Array)
    ("functrans.backends.cuda.arrays", "functrans._array"),
    ("functrans.backends.cuda.arrays", "functrans._devices"),
    ("functrans.backends.cuda.pmap_support", "functrans._array"),
    ("functrans.backends.cuda", "functrans._devices"),
    # process ranks for NCCL and multi-process pmap
    ("functrans.backends.cuda", "functrans.distributed"),
    ("functrans.backends.cuda.arrays", "functrans.distributed"),
    ("functrans.backends.cuda.nccl", "functrans.distributed"),
    ("functrans.backends.cuda.pmap_support", "functrans.distributed"),
    # the decomposition pass writes its rewrites with lax and numpy and traces them
    ("functrans.backends.compiler.decompose", "functrans.lax"),
    ("functrans.backends.compiler.decompose", "functrans.numpy"),
    ("functrans.backends.compiler.decompose", "functrans._jit"),
    ("functrans.backends.compiler.decompose", "functrans.interpreters.staging"),
    # the coverage table walks every module of the package for its primitives
    ("functrans.backends.coverage", "functrans"),
    # the host-fallback tables name primitives by object: the ones defined by front-end
    # modules (callbacks, custom rules, remat, sharding), and others through lax's re-exports
    *(("functrans.backends.compiler.lowering", m) for m in (
        "functrans._callbacks", "functrans._custom_derivatives", "functrans._remat",
        "functrans.ops", "functrans.debug", "functrans.sharding._shard_map",
        "functrans.sharding._constraints", "functrans.lax")),
    ("functrans.backends.llvm.lowering", "functrans.lax"),
}


def test_backends_import_only_the_core_and_primitives():
    graph = _import_graph(top_level_only=False)
    seen, wrong = set(), []
    for module, imported in graph.items():
        if not module.startswith("functrans.backends"):
            continue
        for name in imported:
            if name.startswith("functrans.backends") or name.startswith(BACKEND_MAY_IMPORT):
                continue
            if (module, name) in BACKEND_EXCEPTIONS:
                seen.add((module, name))
            else:
                wrong.append(f"{module} -> {name}")
    assert not wrong, f"backends import front-end modules: {wrong}"
    assert seen == BACKEND_EXCEPTIONS, f"exceptions no longer needed: {BACKEND_EXCEPTIONS - seen}"


def test_front_end_never_imports_a_backend():
    graph = _import_graph(top_level_only=False)
    wrong = [f"{m} -> {i}" for m, imported in graph.items()
             if not m.startswith("functrans.backends")
             for i in imported if i.startswith("functrans.backends")]
    assert not wrong, f"the front end imports backends by name: {wrong}"
