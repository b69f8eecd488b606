"""A case's key from its node id alone: what the controller of an interrupted xdist session, which collects nothing
and heard no key from its killed workers, files an unrun case under (``report.collector``). Each room reads back
the names it makes: :func:`nodes.items.key_of_name` an operator's cases, :func:`kernelbench.spec.key_of_name` a
KernelBench problem's items.

A node id's path is relative to the rootdir, except for a file outside it: pytest then names it relative to the
command-line path it lies under (``--cann-tasks=/elsewhere/bench/level5`` from another directory gives
``batched_svd/cases.yaml::...``), or names a file given on the command line by nothing at all (``::...``). Read
back against the rootdir alone, such a case lost its level (``batched_svd`` beside ``level5/batched_svd``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_cannbench.kernelbench import spec as problems
from pytest_cannbench.nodes import items


def initial_paths(config: Any) -> list[Path]:
    """The session's command-line paths (``config.args``, which ``--cann-tasks`` sets), absolute, as pytest
    resolves them for node ids."""
    base = Path(config.invocation_params.dir)
    found = []
    for arg in config.args:
        text = str(arg).split("::", 1)[0]
        if text and not text.startswith("-"):
            found.append(Path(base, text).absolute())
    return found


def node_path(path: str, name: str, rootdir: Path, initial: Sequence[Path] = ()) -> Path | None:
    """The file a node id's path names, as pytest made it (``_pytest.nodes._check_initialpaths_for_relpath``)."""
    if not path:  # a file named on the command line, outside the rootdir: find it by the item's name
        stem = name.partition("[")[0]
        return next((p for p in initial if p.is_file() and stem in (p.parent.name, p.stem)), None)
    for base in initial:
        candidate = base / path
        if base.is_dir() and candidate.exists() and not _within(candidate, rootdir):
            return candidate
    return rootdir / path


def _within(path: Path, root: Path) -> bool:
    try:
        path.absolute().relative_to(root.absolute())
        return True
    except ValueError:
        return False


def key_from_nodeid(nodeid: str, rootdir: Path, kb_trials: int, initial: Sequence[Path] = ()) -> str | None:
    """The case key of a node id of ours (an operator's case or a KernelBench problem's item), None otherwise."""
    path, sep, name = nodeid.partition("::")
    if not sep:
        return None
    file = node_path(path, name, rootdir, initial)
    if file is None:
        return None
    if file.name.endswith(".py"):
        return problems.key_of_name(file, name, kb_trials)
    return items.key_of_name(file, name)
