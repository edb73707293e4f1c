"""No import circle in awarl.search, counting function-level imports too (a circle that only
works because one side imports late is still a circle: it breaks the moment someone moves it)."""

from __future__ import annotations

import ast
from pathlib import Path

import awarl.search

PACKAGE = Path(awarl.search.__file__).parent


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.glob("*.py"):
        name = f"awarl.search.{path.stem}" if path.stem != "__init__" else "awarl.search"
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("awarl.search"):
                deps.add(node.module)
                deps.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.startswith("awarl.search"))
        graph[name] = deps
    return {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}


def test_no_import_circle_in_awarl_search():
    graph = _graph()
    assert {"awarl.search.index", "awarl.search.bm25", "awarl.search.dense"} <= set(graph)
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            assert state.get(d) != 1, f"import circle: {' -> '.join(path + [m, d])}"
            if d not in state:
                visit(d, path + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
