"""The package's layers, checked on the source: no import runs from a lower layer up to a higher one,
no import circle remains (function-level imports included — a circle hidden in a function is
still a circle), and every package sits on its measured floor: one layer above the highest
package it imports, no higher (README "Layout").

From the ground up:
0 protocol, errors, resources, cli_errors, progress → 1 config_fields, data, llm → 2 search, verify →
3 agent → 4 rewards, eval, capability, chat → 5 integrations → 6 train → 7 demo → 8 cli.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "awarl"

LAYERS = {
    "awarl": 0, "awarl.protocol": 0, "awarl.errors": 0, "awarl.resources": 0, "awarl.cli_errors": 0,
    "awarl.progress": 0,
    "awarl.config_fields": 1, "awarl.data": 1, "awarl.llm": 1,
    "awarl.search": 2, "awarl.verify": 2,
    "awarl.agent": 3,
    "awarl.rewards": 4, "awarl.eval": 4, "awarl.capability": 4, "awarl.chat": 4,
    "awarl.integrations": 5,
    "awarl.train": 6,
    "awarl.demo": 7,
    "awarl.cli": 8,
}
# The world generator writes a verifier policy as YAML text; it must not need the verifier to do so.
EXCEPTIONS: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer(module: str) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in LAYERS:
            return LAYERS[key]
    raise KeyError(f"{module} has no layer: add it to LAYERS in tests/test_layers.py")


def _imports(path: Path) -> set[str]:
    """Every awarl module ``path`` imports, at module level or inside functions.

    Imports under ``if TYPE_CHECKING:`` never run, so they are not edges: a type-only import of a
    sibling (kinds.py naming RewardConfig in its annotations) is no circle.
    """
    package = _module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else _module_name(path)
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    type_only = {id(n) for node in ast.walk(tree) if _is_type_checking_block(node)
                 for stmt in node.body for n in ast.walk(stmt)}  # its else branch does run
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("awarl"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            if not base.startswith("awarl"):
                continue
            for alias in node.names:  # `from awarl.train import sft` imports the module awarl.train.sft
                candidate = f"{base}.{alias.name}"
                found.add(candidate if _is_module(candidate) else base)
    return found


def _is_type_checking_block(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:`` (its body only runs under a type checker)."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (PACKAGE.parent / rel).with_suffix(".py").exists() or (PACKAGE.parent / rel / "__init__.py").exists()


def _graph() -> dict[str, set[str]]:
    graph = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = _module_name(path)
        graph[name] = {m for m in _imports(path) if m != name and _is_module(m)}
    return graph


def test_no_import_runs_up_the_layers():
    upward = []
    for module, targets in _graph().items():
        for target in targets:
            if _layer(target) > _layer(module) and (module, target) not in EXCEPTIONS:
                upward.append(f"{module} (layer {_layer(module)}) imports {target} (layer {_layer(target)})")
    assert not upward, "\n".join(sorted(upward))


def _unit(module: str) -> str:
    """The LAYERS key a module belongs to."""
    parts = module.split(".")
    return next(".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in LAYERS)


def test_every_package_sits_on_its_measured_floor():
    """A package one layer above the highest package it imports (packages of one layer may import
    each other), so the ranking says what each really needs: a package ranked above its floor hides
    that it could be used lower down."""
    needs: dict[str, set[str]] = {}
    for module, targets in _graph().items():
        needs.setdefault(_unit(module), set()).update(_unit(t) for t in targets)
    wrong = []
    for unit, deps in sorted(needs.items()):
        below = [LAYERS[d] for d in deps if d != unit and LAYERS[d] < LAYERS[unit]]
        floor = max(below) + 1 if below else 0
        if LAYERS[unit] != floor:
            wrong.append(f"{unit} is at layer {LAYERS[unit]}, its imports put it at {floor}")
    assert not wrong, "\n".join(wrong)


def test_the_ground_floor_imports_nothing_above_it():
    assert _imports(PACKAGE / "protocol.py") == set()
    assert _imports(PACKAGE / "errors.py") == set()
    assert _imports(PACKAGE / "resources.py") == set()
    assert _imports(PACKAGE / "config_fields.py") == {"awarl.errors"}


def test_no_import_circle():
    graph = _graph()
    # Tarjan's strongly connected components: any component with more than one module is a circle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in graph:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    assert not circles, f"import circles: {circles}"


@pytest.mark.parametrize("module", ["awarl.protocol", "awarl.agent.settings", "awarl.rewards", "awarl.verify"])
def test_core_modules_import_without_torch(module):
    import subprocess
    import sys

    code = f"import sys, {module}; assert 'torch' not in sys.modules, 'torch imported'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
