"""The full module graph of functrans, imports inside functions included: no import cycles,
and every import made inside a function body says why it must be lazy.

import-linter (tests/test_layers.py) checks that imports point down the declared layers;
this test reads every module's source itself, so it also sees the cycles that a flat layer
would hide, and the deferred imports that keep a cycle out of the module-level graph only.
"""
from __future__ import annotations

import pathlib
import shutil

import pytest

from module_graph import Graph, cycles

ROOT = pathlib.Path(__file__).resolve().parents[1]

# An import between functrans modules inside a function is allowed only with a comment (on
# its line, or above it or its group of imports) giving the reason it must be lazy: an
# optional dependency, or start-up time. Avoiding a cycle is no reason: a cycle through a
# function body is still a cycle.
REASON_WORDS = ("optional", "start-up", "startup", "first use")


def _unexplained(graph: Graph, keep) -> list[str]:
    """The deferred imports of modules ``keep`` accepts that give no reason to be lazy."""
    return [f"{path.relative_to(path.parents[len(module.split('.')) - 1])}:{line}: "
            f"{module} -> {target}"
            for module, target, path, line, comment in graph.deferred
            if keep(module) and not any(word in comment.lower() for word in REASON_WORDS)]


@pytest.fixture(scope="module")
def graph() -> Graph:
    return Graph(ROOT)


# ---- the package ---------------------------------------------------------------------------

def test_no_import_cycle_in_the_package(graph):
    found = cycles(graph.edges)
    assert not found, f"import cycles: {[sorted(c) for c in found]}"


def test_every_deferred_import_gives_a_reason(graph):
    missing = _unexplained(graph, lambda name: True)
    assert not missing, ("imports inside functions without a comment saying why they must be "
                         f"lazy ({', '.join(REASON_WORDS)}): {missing}")


def test_numpy_modules_build_on_the_lower_ones_only(graph):
    """No module of functrans.numpy imports the package itself (whose __init__ gathers them
    all): each names the lower modules it builds on."""
    wrong = sorted(m for m, targets in graph.edges.items()
                   if m.startswith("functrans.numpy.") and "functrans.numpy" in targets)
    assert not wrong, f"numpy modules importing the functrans.numpy package: {wrong}"


def test_array_imports_nothing_above_it(graph):
    """Array gets its methods from the numpy layer and its sharding types from the sharding
    layer, which register them: functrans._array imports only the core and devices."""
    allowed = ("functrans.core", "functrans._dtypes", "functrans._devices",
               "functrans._transfer_guard")
    assert graph.edges["functrans._array"] <= set(allowed), graph.edges["functrans._array"]


# ---- the checks can fail --------------------------------------------------------------------

def test_an_injected_deferred_import_is_a_cycle_and_needs_a_reason(tmp_path):
    shutil.copytree(ROOT / "functrans", tmp_path / "functrans",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "backends", tmp_path / "backends",
                    ignore=shutil.ignore_patterns("__pycache__"))
    array_py = tmp_path / "functrans" / "_array.py"
    array_py.write_text(array_py.read_text() + (
        "\n\ndef _sum(x):\n"
        "    import functrans.numpy as jnp\n"
        "    return jnp.sum(x)\n"
        "\n\ndef _mean(x):\n"
        "    # deferred: start-up time\n"
        "    from functrans.numpy import mean\n"
        "    return mean(x)\n"
        "\n\ndef _max(x):\n"
        "    # deferred: functrans.numpy imports this module\n"
        "    from functrans.numpy import max\n"
        "    return max(x)\n"))
    injected = Graph(tmp_path)
    found = cycles(injected.edges)
    assert any({"functrans._array", "functrans.numpy"} <= c for c in found), found
    missing = _unexplained(injected, lambda name: True)
    source = array_py.read_text().splitlines()
    line = source.index("    import functrans.numpy as jnp") + 1
    cycle_only = source.index("    from functrans.numpy import max") + 1
    # no comment, and a comment that names a cycle instead of a reason to be lazy
    assert [m for m in missing if "_array.py" in m] == [
        f"functrans/_array.py:{line}: functrans._array -> functrans.numpy",
        f"functrans/_array.py:{cycle_only}: functrans._array -> functrans.numpy"]
    # a TYPE_CHECKING import is no edge
    core_py = tmp_path / "functrans" / "core.py"
    core_py.write_text(core_py.read_text() + (
        "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    import functrans.numpy  # noqa: F401\n"))
    assert "functrans.numpy" not in Graph(tmp_path).edges["functrans.core"]
