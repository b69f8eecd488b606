"""The package's shape (docs/architecture.md): rooms one level deep, small modules, no import cycle.

Read with ``ast`` only: every ``import`` of a ``pytest_cannbench`` module, at module top or inside a function,
is an edge, so a cycle hidden behind a function-level import is found too. Imports under ``if TYPE_CHECKING:``
never run and are not edges.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_cannbench"
MAX_TOP_LEVEL_MODULES = 12
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path: Path, known: set[str]) -> set[str]:
    """The package modules a file imports (``from pkg import mod`` counts as ``pkg.mod`` when that is a module)."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _is_type_checking(block.test)
                   for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if dotted in known:
                    found.add(dotted)
                elif node.module in known:
                    found.add(node.module)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle() -> None:
    modules = _modules()
    known = set(modules)
    # a package's __init__ is imported on the way to any of its modules: it is not an edge of the cycle analysis
    graph = {name: {m for m in _imports(path, known) if m != name and modules[m].name != "__init__.py"}
             for name, path in modules.items()}
    assert _cycles(graph) == []


def test_rooms_one_level_deep_and_few_modules_on_top() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
    rooms = sorted(p for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert rooms, "no subpackages"
    for room in rooms:
        init = room / "__init__.py"
        assert init.is_file(), f"{room.name}/ is not a package"
        assert ast.get_docstring(ast.parse(init.read_text())), f"{room.name}/__init__.py says nothing of its room"
        # a data folder (report/templates) is not a room: only a folder with Python modules nests
        assert not [p for p in room.iterdir() if p.is_dir() and p.name != "__pycache__" and any(p.rglob("*.py"))], \
            f"{room.name}/ nests"


def test_no_module_over_the_size_limit() -> None:
    sizes = {name: len(path.read_text().splitlines()) for name, path in _modules().items()}
    assert {n: s for n, s in sizes.items() if s > MAX_LINES} == {}


def test_every_child_process_starts_in_a_main_module() -> None:
    """``python -m pytest_cannbench.<room>.<x>`` is only ever a ``*_main`` module (or the calibration child)."""
    started = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and node.value.startswith("pytest_cannbench.") and " " not in node.value:
                started.add(node.value)
    children = {m for m in started if m in _modules() and Path(_modules()[m]).name != "__init__.py"
                and not m.endswith(("_main",))}
    assert children <= {"pytest_cannbench.timing.calibrate"}, children


def test_plugin_holds_only_hooks() -> None:
    tree = ast.parse((PACKAGE / "plugin.py").read_text())
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    hooks = [name for name in functions if not name.startswith("_")]  # private helpers: the gate, the registration
    assert hooks and all(name.startswith("pytest_") for name in hooks), functions
