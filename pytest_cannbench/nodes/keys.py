"""A case's key from its node id alone: what the controller of an interrupted xdist session, which collects nothing
and heard no key from its killed workers, files an unrun case under (``report.collector``). Each room reads back
the names it makes: :func:`nodes.items.key_of_name` an operator's cases, :func:`kernelbench.collect.key_of_name` a
KernelBench problem's items."""

from __future__ import annotations

from pathlib import Path

from pytest_cannbench.kernelbench import collect as problems
from pytest_cannbench.nodes import items


def key_from_nodeid(nodeid: str, rootdir: Path, kb_trials: int) -> str | None:
    """The case key of a node id of ours (an operator's case or a KernelBench problem's item), None otherwise."""
    path, sep, name = nodeid.partition("::")
    if not sep:
        return None
    if path.endswith(".py"):
        return problems.key_of_name(rootdir / path, name, kb_trials)
    return items.key_of_name(rootdir / path, name)
