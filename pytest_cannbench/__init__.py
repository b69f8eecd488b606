"""pytest-cannbench: grade CANN Bench operator submissions as pytest items.

The package is imported by pytest in every session of the environment (it is a ``pytest11`` plugin), so nothing
here may import torch, numpy or yaml, nor any module of the package: besides the version, it holds only what the
entry point needs to tell a cannbench run from any other before it imports anything (what a task tree looks like
on disk; ``taskformat.dirs`` re-exports it).

The rooms (subpackages) form layers, and each declares what it may import in its ``__init__.py`` ("May import:");
``tests/unit/test_layout.py`` holds every import to those lists, TYPE_CHECKING and function-level ones too.
From the bottom: ``vocab`` (the names every part agrees on) and the utilities on top of the package (below);
``options`` (the declarations); ``taskformat``, ``guard``, ``kernelbench``; ``timing`` (measurement); ``workers``
(the child processes); ``submission``; ``judge`` (one case's verdict and timing); ``core`` (one judge, one case's
whole life); and the front-ends: ``nodes`` with ``plugin`` (the pytest run), ``serve`` (the grading service),
``cluster`` (a run across a Ray cluster), ``cli``. ``report`` is fed plain data and needs only the vocabulary and
the options' declarations. The top-level modules:

Top-level modules may import:
    atomic: nothing
    cbuild: scratch
    cli: vocab, options, outcome, scratch, report, taskformat, kernelbench, timing, judge.task_quality (cannbench
        check), workers.limits (the cores cannbench roofline measures with), cluster.command (cannbench
        cluster-grade), serve.server (cannbench serve)
    figures: nothing
    outcome: vocab
    phases: nothing
    plugin: options, nodes.frontend (a cannbench run's hooks)
    procs: nothing
    scratch: nothing
"""

from __future__ import annotations

from pathlib import Path

__version__ = "0.2.0"

REQUIRED_FILES = ("proto.yaml", "cases.yaml", "golden.py")  # an operator directory of the task format


def is_operator_dir(path: Path) -> bool:
    return all((path / name).is_file() for name in REQUIRED_FILES)


def holds_task_tree(path: Path) -> bool:
    """An operator directory, a level directory or a bench root holding operators, or a path inside an operator
    directory: what makes a plain ``pytest PATH`` a cannbench run (the plugin is inert otherwise).

    Looks two levels down only (operator, level, bench root), so an unrelated project is never walked."""
    try:
        path = path.resolve()
        if not path.exists():
            return False
        if any(is_operator_dir(p) for p in [path, *path.parents][:4] if p.is_dir()):
            return True
        if not path.is_dir():
            return False
        for child in path.iterdir():
            if child.is_dir() and (is_operator_dir(child) or any(
                    is_operator_dir(grandchild) for grandchild in child.iterdir() if grandchild.is_dir())):
                return True
    except OSError:
        return False
    return False
