"""A task tree as pytest walks it: task items only, never the tree's own test modules or conftest files.

Official trees keep files of their own beside the operators: ``test_baseline_perf.py`` next to 23 of
bench_lab's kernel_bench operators (one basename in many directories: pytest's "import file mismatch", and
an import of ``torch_npu``), ``verify_*.py`` scripts, and could keep a ``conftest.py``. A cannbench run grades
the tree; it does not run the tree's tests or load its plugins. So, in a cannbench run:

* inside an operator directory only ``cases.yaml`` is collected (every other file and directory is ignored);
* a directory that is a task tree (an operator directory, a level directory of operators or a bench root of
  them), and every directory below one, is a ``Dir`` marked :data:`TASK_DIR`, whose collection does not load
  the ``conftest.py`` files it holds;
* a path the user names (``pytest tree/level1/op/test_baseline_perf.py``) is collected as pytest would: pytest
  never asks an ignore hook about a path on its command line, and the ``conftest.py`` of a directory named on
  the command line (or above it) is loaded by pytest at startup, before any plugin sees the tree.

Only the golden rule applies outside cannbench runs (a ``python_files = *.py`` project never collects a task's
``golden.py`` as a test module).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from pytest_cannbench.taskformat.dirs import looks_like_operator_dir


@functools.lru_cache(maxsize=4096)
def is_task_dir(path: Path) -> bool:
    """An operator directory, or a directory with operator directories one or two levels down (a level
    directory, a bench root)."""
    try:
        if looks_like_operator_dir(path):
            return True
        children = [c for c in path.iterdir() if c.is_dir()]
        if any(looks_like_operator_dir(c) for c in children):
            return True
        return any(looks_like_operator_dir(g) for c in children for g in c.iterdir() if g.is_dir())
    except OSError:
        return False


def ignore(collection_path: Path, active: bool) -> bool | None:
    """``pytest_ignore_collect``: in a cannbench run, everything of an operator directory but its ``cases.yaml``
    (its golden.py, the tree's own test modules and scripts, any subdirectory); a task's ``golden.py`` always."""
    parent = collection_path.parent
    if collection_path.name == "golden.py" and (parent / "cases.yaml").is_file():
        return True
    if active and collection_path.name != "cases.yaml" and looks_like_operator_dir(parent):
        return True
    return None


TASK_DIR = pytest.StashKey[bool]()  # on a task tree's pytest.Dir (final: it cannot be subclassed)


def is_task_node(node: Any) -> bool:
    return isinstance(node, pytest.Dir) and node.stash.get(TASK_DIR, False)


def directory(path: Path, parent: pytest.Collector, active: bool) -> pytest.Collector | None:
    """``pytest_collect_directory``: a task-tree ``Dir`` (:data:`TASK_DIR`) for a task tree's directory in a
    cannbench run, and for every directory below one (``metadata/``, a KernelBench tree beside the operators: a
    plain ``Dir`` there would load the conftest.py files of the tree above it)."""
    if active and (is_task_node(parent) or is_task_dir(path.resolve())):
        node = pytest.Dir.from_parent(parent, path=path)
        node.stash[TASK_DIR] = True
        return node
    return None


def collect_report(collector: Any) -> pytest.CollectReport | None:
    """``pytest_make_collect_report`` for a task tree's ``Dir``: pytest's own report, less its first step
    (loading the directory's conftest.py files)."""
    if not is_task_node(collector):
        return None
    call = pytest.CallInfo.from_call(
        lambda: list(collector.collect()), "collect", reraise=(KeyboardInterrupt, SystemExit)
    )
    if call.excinfo is None:
        report = pytest.CollectReport(collector.nodeid, "passed", None, call.result)
    else:
        report = pytest.CollectReport(collector.nodeid, "failed", collector.repr_failure(call.excinfo), None)
    report.call = call  # type: ignore[attr-defined]  # as pytest's own: collect_one_node reads it
    return report
