"""The bottom layers (the core, the interpreters, the primitive families) import each other
at the top of their modules only, and in one direction: the families form a DAG with
``conversions`` at the bottom, function bodies included. A rule that needs a family above
its primitive's is attached by that family (as ``indexing`` attaches ``dynamic_slice``'s
batching rule), not imported inside a function."""
from __future__ import annotations

import pathlib

import pytest

from module_graph import Graph, cycles

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _bottom(name: str) -> bool:
    return name == "functrans.core" or name.startswith(
        ("functrans.interpreters", "functrans.primitives"))


@pytest.fixture(scope="module")
def graph() -> Graph:
    return Graph(ROOT)


def test_no_function_body_imports_between_the_bottom_layers(graph):
    deferred = sorted(f"{module} -> {target} (line {line})"
                      for module, target, _, line, _ in graph.deferred
                      if _bottom(module) and _bottom(target))
    assert not deferred, f"imports inside function bodies: {deferred}"


def test_the_primitive_families_form_a_dag(graph):
    families = {m: {t for t in targets if t.startswith("functrans.primitives")}
                for m, targets in graph.edges.items() if m.startswith("functrans.primitives")}
    assert cycles(families) == []


def test_conversions_is_the_bottom_family(graph):
    imported = graph.edges["functrans.primitives.conversions"]
    assert not [m for m in imported if m.startswith("functrans.primitives")], imported
