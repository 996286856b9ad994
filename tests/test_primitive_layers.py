"""The bottom layers (the core, the interpreters, the primitive families) import each other
at the top of their modules only, and in one direction: the families form a DAG with
``conversions`` at the bottom, function bodies included. A rule that needs a family above
its primitive's is attached by that family (as ``indexing`` attaches ``dynamic_slice``'s
batching rule), not imported inside a function."""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "functrans"

# A function-body import between these modules is allowed only with a reason (an optional
# dependency, or start-up time): (importing module, imported module) -> the reason.
DEFERRED_IMPORTS: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, pathlib.Path]:
    found = {"functrans.core": ROOT / "core.py"}
    for package in ("interpreters", "primitives"):
        for path in sorted((ROOT / package).glob("*.py")):
            name = f"functrans.{package}" if path.stem == "__init__" else \
                f"functrans.{package}.{path.stem}"
            found[name] = path
    return found


def _imported(module: str, node: ast.AST, is_package: bool, modules) -> list[str]:
    """The modules an import statement names: ``from pkg import name`` names the module
    ``pkg.name`` when there is one, else ``pkg``."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = module.split(".")[:None if is_package else -1]
        base = base[:len(base) - (node.level - 1)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module or ""
    return [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in modules else prefix
            for a in node.names]


def _graph():
    """module -> {imported module: True when some import of it is in a function body}."""
    modules = _modules()
    graph: dict[str, dict[str, bool]] = {m: {} for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text())

        def visit(node, in_function):
            for child in ast.iter_child_nodes(node):
                nested = in_function or isinstance(
                    child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for name in _imported(module, child, path.name == "__init__.py", modules):
                        if name in modules and name != module:
                            graph[module][name] = graph[module].get(name, False) or in_function
                visit(child, nested)

        visit(tree, False)
    return graph


def test_no_function_body_imports_between_the_bottom_layers():
    deferred = {(m, i) for m, imported in _graph().items()
                for i, in_body in imported.items() if in_body}
    unexplained = sorted(deferred - set(DEFERRED_IMPORTS))
    assert not unexplained, f"imports inside function bodies: {unexplained}"
    assert set(DEFERRED_IMPORTS) <= deferred, "a listed deferred import is gone: unlist it"


def test_the_primitive_families_form_a_dag():
    graph = _graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module, path):
        state[module] = 1
        for name in graph[module]:
            if state.get(name) == 1:
                cycle = path[path.index(name):] + [name]
                pytest.fail(f"import cycle: {' -> '.join(cycle)}")
            if name not in state:
                visit(name, path + [name])
        state[module] = 2

    for module in graph:
        if module not in state:
            visit(module, [module])


def test_conversions_is_the_bottom_family():
    imported = _graph()["functrans.primitives.conversions"]
    assert not [m for m in imported if m.startswith("functrans.primitives")], imported
