"""A task tree's operators as a judge sees them: loaded once, checked against the goldens' pins, each case with
its memory estimate and its source."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pytest_cannbench.options import Settings
from pytest_cannbench.taskformat.dirs import find_bench_root
from pytest_cannbench.taskformat.errors import TaskFormatError
from pytest_cannbench.taskformat.memory_need import estimate
from pytest_cannbench.taskformat.spec import CaseSpec, OperatorTask, load_operator

if TYPE_CHECKING:
    from pytest_cannbench.taskformat.memory_need import MemoryNeed


def check_pin(task: OperatorTask, pins: dict[str, str]) -> None:
    """A golden.py that changed between the run's start (before any submission code ran) and its loading was
    rewritten by something during the build: an error naming the file, never a new truth."""
    path = str(task.op_dir / "golden.py")
    pinned = pins.get(path)
    if pinned is not None and pinned != task.golden_sha256:
        raise TaskFormatError(
            task.op_dir / "golden.py",
            "",
            f"changed after the session started (sha256 "
            f"{pinned[:12]} before the submission was built, {task.golden_sha256[:12]} now)",
            "restore the task tree (something rewrote it during the build) and rerun",
        )


def load_task(op_dir: Path, pins: dict[str, str]) -> OperatorTask:
    """The operator directory, parsed and pinned (:class:`TaskFormatError` names the file and the fix)."""
    op_dir = op_dir.resolve()
    task = load_operator(op_dir, find_bench_root(op_dir))
    check_pin(task, pins)
    return task


def case_need(task: OperatorTask, case: CaseSpec, settings: Settings, timed: bool = True) -> MemoryNeed | None:
    """The case's estimated memory need; the first reference is kept through the second pass and the timing,
    except in a self-check that is not timed (its second pass keeps nothing)."""
    need = estimate(task.spec, case)
    if need is not None and settings.self_check and not (settings.perf and timed):
        need = need.without_kept()
    return need
