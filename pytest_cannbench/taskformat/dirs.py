"""Where a task tree starts: operator directories, the bench root, ``metadata/``.

The bench root matters beyond display: the case key ``<rel_path>_<case_id>``
seeds every input and keys the metadata anchors, so ``rel_path`` must be the
same whether pytest is pointed at ``tasks/``, ``tasks/level1`` or one operator.
"""

from __future__ import annotations

import re
from pathlib import Path

from pytest_cannbench import REQUIRED_FILES, holds_task_tree, is_operator_dir

__all__ = ["REQUIRED_FILES", "holds_task_tree", "is_operator_dir"]

_LEVEL_DIR = re.compile(r"level\d+")


def looks_like_operator_dir(path: Path) -> bool:
    """proto.yaml and cases.yaml together: an operator directory, broken if golden.py is missing."""
    return (path / "proto.yaml").is_file() and (path / "cases.yaml").is_file()


def find_bench_root(op_dir: Path) -> Path:
    """The bench root of an operator directory: the nearest ancestor that is one of

    1. a directory named ``tasks`` (the official rule);
    2. a directory holding ``metadata/``;
    3. the parent of a ``levelN`` directory;

    else the operator's parent (a flat suite). Nearest first, so a checkout that happens to live
    below some far-away ``tasks`` directory still gets its own suite's root.
    """
    op_dir = op_dir.resolve()
    for parent in op_dir.parents:
        if parent.name == "tasks" or (parent / "metadata").is_dir():
            return parent
        if _LEVEL_DIR.fullmatch(parent.name):
            return parent.parent
    return op_dir.parent


def find_metadata_dir(start: Path) -> Path | None:
    """``metadata/`` found by walking up from ``start`` (a bench root or any directory below it)."""
    start = start.resolve()
    for candidate in (start, *start.parents):
        if (candidate / "metadata").is_dir():
            return candidate / "metadata"
    return None


def iter_operator_dirs(root: Path) -> list[Path]:
    """Every operator directory below ``root``, sorted: the same order on every xdist worker."""
    root = root.resolve()
    if looks_like_operator_dir(root):
        return [root]
    return sorted(p.parent for p in root.rglob("proto.yaml") if looks_like_operator_dir(p.parent))


def pin_goldens(roots: list[Path], limit: int = 20000) -> dict[str, str]:
    """sha256 of every ``golden.py`` under ``roots`` (at most ``limit`` files: a tree that large is not a task
    tree, and collection still pins each golden it loads)."""
    import hashlib

    pins: dict[str, str] = {}
    for root in roots:
        for path in root.rglob("golden.py"):
            if len(pins) >= limit:
                return pins
            try:
                pins[str(path.resolve())] = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:
                continue
    return pins
