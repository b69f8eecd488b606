"""The package's shape (docs/architecture.md): rooms one level deep, each importing only what it declares, no cycle
between rooms or between modules, modules well under the size cap, and a reason beside every import that waits for
a function to run.

Read with ``ast`` only. Every ``import`` of a ``pytest_cannbench`` module is an edge, wherever it stands: at the
module's top, inside a function, or under ``if TYPE_CHECKING:`` (a type-only import still says that one room needs
another's words, and a cycle through one is a misplaced type).

The declarations. Each room's ``__init__.py`` docstring holds one paragraph (it ends at a blank line) of the form::

    May import: outcome, taskformat, timing.in_worker (why), workers.

Each entry names a top-level module (``outcome``), a whole room (``taskformat``) or one module of a room
(``timing.in_worker``), optionally followed by its reason in parentheses; the paragraph ends with a full stop;
``May import: nothing.`` declares none. A room may always import its own modules, and any module the package root
(its ``__version__``). The top-level modules are declared together in the package's own docstring: a paragraph starting
``Top-level modules may import:`` followed by one line per module, ``name: entries``, a long list continued on
lines indented deeper.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_cannbench"
ROOT = "pytest_cannbench"
MAX_TOP_LEVEL_MODULES = 12
MAX_LINES = 600
NEAR_CAP = int(MAX_LINES * 0.95)  # a module past this splits along a seam before it reaches the cap

# Imports that break the declarations in modules other engineers are rewriting now; listed so the rest of the
# package is held to the rules meanwhile. Each entry must still be a violation (a stale one fails the test), so the
# list only shrinks: (the importing room or top-level module, the module it imports).
PENDING_REWRITE: frozenset[tuple[str, str]] = frozenset()
# the same modules' function-level imports without a reason beside them: (module, line)
PENDING_REWRITE_LAZY: frozenset[tuple[str, int]] = frozenset()
PENDING_REWRITE_SIZE: frozenset[str] = frozenset()

# What the plugin and collection load must not bring: the plugin is loaded by every pytest run of the environment.
HEAVY = ("torch", "numpy", "jinja2")
REASON_BRINGS = re.compile(r"brings (torch|numpy|jinja2|yaml|pytest)\b")
ENTRY = re.compile(r"^(?P<name>[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)?)(?: \((?P<why>[^()]+)\))?$")


# ------------------------------------------------------------------------------------------------ the package


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _rooms() -> list[str]:
    return sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file())


def _top_level() -> list[str]:
    return sorted(p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py")


def _room_of(module: str) -> str:
    """The room a module lives in: its subpackage, or the top-level module itself (a room of one)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ROOT


def _short(module: str) -> str:
    return module.removeprefix(ROOT + ".")


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    target: str  # dotted module name (``from pkg import mod`` is ``pkg.mod`` where that is a module)
    kind: str  # "module", "function" or "typing"
    line: int


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _targets(node: ast.Import | ast.ImportFrom) -> list[str]:
    known = _modules()
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    if not node.module or node.level != 0 or node.module.split(".")[0] != ROOT:
        return []
    found = {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module for a in node.names}
    return sorted(m for m in found if m in known)


@cache
def _tree(module: str) -> ast.Module:
    path = _modules()[module]
    return ast.parse(path.read_text(), str(path))


@cache
def _imports(module: str) -> tuple[Import, ...]:
    """Every package import of ``module``, each with where it stands."""
    out: list[Import] = []

    def walk(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    walk_one(stmt, "typing")
                for stmt in child.orelse:
                    walk_one(stmt, kind)
            else:
                walk_one(child, kind)

    def walk_one(node: ast.AST, kind: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            kind = "typing" if kind == "typing" else "function"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.extend(Import(module, target, kind, node.lineno) for target in _targets(node))
        walk(node, kind)

    walk(_tree(module), "module")
    return tuple(out)


@cache
def _third_party_at_import(module: str) -> frozenset[str]:
    """The top-level names of what ``module`` imports outside the package when it is imported (not in functions,
    not under TYPE_CHECKING)."""
    names: set[str] = set()

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.orelse:
                    walk(stmt)
                continue
            if isinstance(child, ast.Import):
                names.update(a.name.split(".")[0] for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names.add(child.module.split(".")[0])
            walk(child)

    walk(_tree(module))
    return frozenset(names - {ROOT})


def _loaded_with(module: str) -> set[str]:
    """The package modules importing ``module`` loads (its parents' ``__init__`` included)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        todo += [i.target for i in _imports(name) if i.kind == "module"]
    return seen


def _brings(module: str) -> set[str]:
    return {lib for m in _loaded_with(module) for lib in _third_party_at_import(m)}


# ------------------------------------------------------------------------------------------------ declarations


def _paragraphs(doc: str) -> list[list[str]]:
    paragraphs: list[list[str]] = [[]]
    for line in doc.splitlines():
        if line.strip():
            paragraphs[-1].append(line)
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


def _entries(text: str, where: str) -> frozenset[str]:
    """The names of one declaration's entries (``nothing`` for none); AssertionError naming ``where`` and the
    entry that breaks the syntax."""
    items, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(current.strip())
            current = ""
        else:
            current += char
    items.append(current.strip())
    if items == ["nothing"]:
        return frozenset()
    names = set()
    for item in items:
        match = ENTRY.match(item)
        assert match, f"{where}: {item!r} is not an entry (name, or name followed by its reason in parentheses)"
        names.add(match["name"])
    return frozenset(names)


def _room_declaration(room: str) -> frozenset[str]:
    doc = ast.get_docstring(_tree(f"{ROOT}.{room}")) or ""
    found = [" ".join(line.strip() for line in p) for p in _paragraphs(doc) if p[0].strip().startswith("May import:")]
    where = f"{room}/__init__.py"
    assert len(found) == 1, f"{where}: its docstring needs exactly one paragraph 'May import: ...' ({len(found)} found)"
    text = found[0].removeprefix("May import:").strip()
    assert text.endswith("."), f"{where}: the 'May import:' paragraph ends with a full stop"
    return _entries(text[:-1], where)


def _top_level_declarations() -> dict[str, frozenset[str]]:
    doc = ast.get_docstring(_tree(ROOT)) or ""
    found = [p for p in _paragraphs(doc) if p[0].strip() == "Top-level modules may import:"]
    assert len(found) == 1, "pytest_cannbench/__init__.py: the docstring needs one 'Top-level modules may import:'"
    lines = found[0][1:]
    assert lines, "pytest_cannbench/__init__.py: 'Top-level modules may import:' lists no module"
    indent = len(lines[0]) - len(lines[0].lstrip())
    joined: list[str] = []
    for line in lines:
        if len(line) - len(line.lstrip()) > indent and joined:
            joined[-1] += " " + line.strip()
        else:
            joined.append(line.strip())
    out: dict[str, frozenset[str]] = {}
    for line in joined:
        name, colon, text = line.partition(":")
        where = f"pytest_cannbench/__init__.py, {name.strip()!r}"
        assert colon and re.fullmatch(r"[a-z_][a-z0-9_]*", name.strip()), f"{where}: not 'module: entries'"
        assert name not in out, f"{where}: declared twice"
        out[name.strip()] = _entries(text.strip(), where)
    return out


@cache
def _declarations() -> dict[str, frozenset[str]]:
    """Room or top-level module -> the names it may import."""
    return {**_top_level_declarations(), **{room: _room_declaration(room) for room in _rooms()}}


def _allowed(importer: str, target: str) -> bool:
    room, target_room = _room_of(importer), _room_of(target)
    if target == ROOT or room == target_room:
        return True
    declared = _declarations()[room]
    return target_room in declared or _short(target) in declared


def _violations() -> list[Import]:
    return [i for m in _modules() for i in _imports(m) if not _allowed(i.importer, i.target)]


def _pending(i: Import) -> bool:
    return (_room_of(i.importer), _short(i.target)) in PENDING_REWRITE


# ------------------------------------------------------------------------------------------------ graphs


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _edges() -> list[Import]:
    """Every import but those waiting for their module's rewrite (PENDING_REWRITE)."""
    return [i for m in _modules() for i in _imports(m) if not _pending(i)]


def room_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {_room_of(m): set() for m in _modules()}
    for i in _edges():
        if i.target != ROOT and _room_of(i.importer) != _room_of(i.target):
            graph[_room_of(i.importer)].add(_room_of(i.target))
    return graph


def module_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for i in _edges():
        # a package's __init__ is imported on the way to any of its modules: not an edge of the cycle analysis
        if i.target != i.importer and modules[i.target].name != "__init__.py":
            graph[i.importer].add(i.target)
    return graph


# ------------------------------------------------------------------------------------------------ the rules


def test_every_room_and_top_level_module_declares_its_imports() -> None:
    declarations = _declarations()  # parses every declaration: a malformed one fails here, naming its file
    names = set(_rooms()) | set(_top_level())
    assert set(declarations) == names, {"undeclared": sorted(names - set(declarations)),
                                        "declared but absent": sorted(set(declarations) - names)}
    known = names | {_short(m) for m in _modules() if "." in _short(m)}
    unknown = {owner: sorted(n for n in declared if n not in known) for owner, declared in declarations.items()}
    assert {k: v for k, v in unknown.items() if v} == {}, "declared names that are no room or module"
    own = [owner for owner, declared in declarations.items() if owner in declared
           or any(n.split(".")[0] == owner for n in declared)]
    assert own == [], "a room declares itself (its own modules are always allowed)"


def test_imports_stay_within_declarations() -> None:
    found = _violations()
    broken = sorted(f"{_short(i.importer)}:{i.line} ({i.kind}) imports {_short(i.target)}"
                    for i in found if not _pending(i))
    assert broken == [], "imports outside the importing room's 'May import:' list"
    still = {(_room_of(i.importer), _short(i.target)) for i in found}
    assert sorted(PENDING_REWRITE - still) == [], "PENDING_REWRITE entries that no longer happen: remove them"


def test_no_cycle_between_rooms() -> None:
    """Counting every import, TYPE_CHECKING ones too: the rooms form layers."""
    assert _cycles(room_graph()) == []


def test_no_import_cycle() -> None:
    assert _cycles(module_graph()) == []


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


def test_no_module_near_the_size_limit() -> None:
    sizes = {_short(name): len(path.read_text().splitlines()) for name, path in _modules().items()}
    over = {n: s for n, s in sizes.items() if s > NEAR_CAP and n not in PENDING_REWRITE_SIZE}
    assert over == {}, f"modules above {NEAR_CAP} lines (95% of {MAX_LINES}): split them along a seam"
    assert all(sizes.get(n, 0) > NEAR_CAP for n in PENDING_REWRITE_SIZE), "PENDING_REWRITE_SIZE entries to remove"


def _reason(module: str, line: int) -> str:
    """The comment on an import's line or the line above (``noqa`` and ``type: ignore`` do not count)."""
    lines = _modules()[module].read_text().splitlines()
    node = next(n for n in ast.walk(_tree(module)) if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno == line)
    end = node.end_lineno or line
    comments = []
    for text in lines[line - 2:end]:
        _, hash_, comment = text.partition("#")
        comment = re.sub(r"(noqa(:\s*[A-Z0-9, ]+)?|type:\s*ignore(\[[^]]*\])?)", "", comment).strip(" -:")
        if hash_ and comment:
            comments.append(comment)
    return " ".join(comments)


def test_function_level_imports_say_why() -> None:
    """An import inside a function is for something: torch (or jinja2, numpy) kept out of what the plugin and
    collection load, an optional dependency, the plugin's own start. The reason stands beside it; where it says
    ``brings torch`` (jinja2, numpy, yaml, pytest: ``cannbench merge`` runs without it), the imported module really
    does."""
    lazy = [i for m in _modules() for i in _imports(m) if i.kind == "function"]
    silent, wrong = [], []
    for i in lazy:
        if (_short(i.importer), i.line) in PENDING_REWRITE_LAZY:
            continue
        reason = _reason(i.importer, i.line)
        if not reason:
            silent.append(f"{_short(i.importer)}:{i.line} {_short(i.target)}")
        for lib in REASON_BRINGS.findall(reason):
            if lib not in _brings(i.target):
                wrong.append(f"{_short(i.importer)}:{i.line} {_short(i.target)} does not bring {lib}")
    assert silent == [], "function-level imports without a reason (make them module-level, or say why)"
    assert wrong == []
    pending = {(_short(i.importer), i.line) for i in lazy}
    assert sorted(PENDING_REWRITE_LAZY - pending) == [], "PENDING_REWRITE_LAZY entries to remove"


def test_collection_and_the_core_stay_torch_free() -> None:
    """What a pytest run loads before any case runs (the front-end, the core) imports no torch, numpy or jinja2:
    checked in a fresh interpreter, then statically for every module either one loads."""
    code = ("import sys, pytest_cannbench.nodes.frontend, pytest_cannbench.core; "
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PACKAGE.parent)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
    for root in (f"{ROOT}.nodes.frontend", f"{ROOT}.core", f"{ROOT}.plugin"):
        assert _brings(root) & set(HEAVY) == set(), root


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
