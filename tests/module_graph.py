"""The module graph of functrans (the backends, at backends/, included), read from the
sources: every import statement, those inside function bodies too, for the tests that keep
the layers (tests/test_layers.py, tests/test_module_graph.py, tests/test_primitive_layers.py).
"""
from __future__ import annotations

import ast
import pathlib


def module_paths(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """Every module of functrans, the backends (root/backends, the package functrans.backends)
    included, by dotted name."""
    found = {}
    for folder, package in ((root / "functrans", "functrans"),
                            (root / "backends", "functrans.backends")):
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package] + parts)] = path
    return found


def imported_modules(module: str, path: pathlib.Path, node, known) -> list[str]:
    """The functrans modules one import statement of ``module`` names."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module if path.name == "__init__.py" else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}" if base else package
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                 for a in node.names]
    out = []
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.append(name)
    return out


class Graph:
    """``edges``: module -> the modules it imports anywhere (``if TYPE_CHECKING:`` blocks
    left out); ``top_level``: the same, leaving out imports inside function bodies;
    ``deferred``: (module, target, path, line, comment) for each import made inside a
    function body."""

    def __init__(self, root: pathlib.Path):
        self.paths = module_paths(root)
        self.edges: dict[str, set[str]] = {m: set() for m in self.paths}
        self.top_level: dict[str, set[str]] = {m: set() for m in self.paths}
        self.deferred: list[tuple[str, str, pathlib.Path, int, str]] = []
        for module, path in self.paths.items():
            lines = path.read_text().splitlines()
            self._visit(module, path, lines, ast.parse("\n".join(lines)), False)

    def _visit(self, module, path, lines, node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for stmt in child.orelse:
                    self._visit(module, path, lines, stmt, in_function)
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in imported_modules(module, path, child, self.paths):
                    self.edges[module].add(target)
                    if in_function:
                        self.deferred.append((module, target, path, child.lineno,
                                              comment_near(lines, child.lineno)))
                    else:
                        self.top_level[module].add(target)
            else:
                self._visit(module, path, lines, child, in_function or isinstance(
                    child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))


def comment_near(lines: list[str], lineno: int) -> str:
    """The comments on line ``lineno`` (1-based) and on the lines above it, up through the run
    of imports it belongs to (one comment may explain a group of imports)."""
    found = []
    index = lineno - 1
    if "#" in lines[index]:
        found.append(lines[index][lines[index].index("#"):])
    while index > 0:
        index -= 1
        text = lines[index].strip()
        if text.startswith("#"):
            found.append(text)
        elif not text.startswith(("from ", "import ")):
            break
    return " ".join(found)


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found
