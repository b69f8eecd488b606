"""The plain-Python front door of the grading core: a task tree, a submission or several, one call per case.

::

    from pytest_cannbench.core import Grader
    from pytest_cannbench.options import settings_for

    with Grader(settings_for(tasks="tasks", perf=False, report_dir="reports")) as grader:
        grader.prepare("examples/cpp_cpu", name="mine")
        for case in grader.cases(select="gelu"):
            print(grader.grade(case, candidate="mine").status)

A grader is one controller and one judge in this process. Its golden worker, baseline worker and golden memo
stay warm across candidates (that is what a service keeps between requests); each candidate has its own
private install and workers until :meth:`Grader.drop`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

from pytest_cannbench import outcome as oc
from pytest_cannbench.core.case_run import CaseRun, Route
from pytest_cannbench.core.controller import Announce, Controller
from pytest_cannbench.core.judge import Judge
from pytest_cannbench.core.multi_rank_run import MultiRankRun
from pytest_cannbench.core.select import compile_selection
from pytest_cannbench.core.tasks import case_need, load_task
from pytest_cannbench.judge.case import OperatorCase
from pytest_cannbench.options import Settings
from pytest_cannbench.outcome import CaseOutcome
from pytest_cannbench.submission.build import SubmissionState
from pytest_cannbench.taskformat.dirs import looks_like_operator_dir
from pytest_cannbench.taskformat.errors import TaskFormatError
from pytest_cannbench.taskformat.spec import CaseSpec, OperatorTask
from pytest_cannbench.timing.devices import lock_dir
from pytest_cannbench.workers.cpu_budget import claim_slot


@dataclass(frozen=True)
class CaseRef:
    """One case of the task tree: what a front-end lists, selects and asks a grade for."""

    key: str  # the official case key, e.g. level1/gelu_3
    rel_path: str  # the operator's path under its bench root, e.g. level1/gelu
    operator: str
    case_id: int | None
    level: int | None
    names: tuple[str, ...] = ()  # what a selection matches (operator, path, item name, dtypes, category, level)
    task: OperatorTask | None = field(default=None, compare=False, repr=False)
    case: CaseSpec | None = field(default=None, compare=False, repr=False)
    error: str | None = None  # the operator directory does not parse: the case is a task error


def claim_cpu_slot() -> tuple[int, IO[str]]:
    """A judge index for ``Grader(cpu_slot=...)`` that no other live process of this user on this host holds,
    kept while the returned file stays open (released when the process ends, however it ends)."""
    return claim_slot(lock_dir())


class Grader:
    """A controller and a judge in this process (a context manager); ``settings.tasks`` is the task tree."""

    def __init__(self, settings: Settings, announce: Announce | None = None, cpu_slot: int | None = None) -> None:
        """``cpu_slot``: this judge's index for its candidate and baseline workers' CPU block (the timing thread
        budget's CPUs), when several graders share a host (``workers.cpu_budget.claim_slot`` hands out one per
        live process); None: the first block, or the xdist worker's."""
        if not settings.tasks:
            raise ValueError("Grader needs settings.tasks: the task tree to grade (settings_for(tasks=...))")
        self.settings = settings
        self.tasks = Path(settings.tasks).resolve()
        self.announce = announce
        self.cpu_slot = cpu_slot
        self.controller = Controller(settings, processes=1, task_roots=[self.tasks])
        self.controller.pin_goldens()
        self._judge: Judge | None = None
        self._tasks: dict[Path, OperatorTask | TaskFormatError] = {}

    def __enter__(self) -> Grader:
        self.controller.start_submission(self.announce)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    @property
    def judge(self) -> Judge:
        if self._judge is None:
            self._judge = Judge(self.settings, self.controller.judge_setup(cpu_slot=self.cpu_slot))
        return self._judge

    # ------------------------------------------------------------ candidates

    def prepare(self, source: str | Path, name: str) -> SubmissionState:
        """Build and install a candidate in the sandbox; its state says whether it is usable (``.ok``) and why
        not (``.status``, ``.message``)."""
        if name in self.judge.submissions:
            raise ValueError(f"candidate {name!r} is already prepared: drop it first or choose another name")
        session = self.judge.claim_spare()
        sub = self.controller.prepare_candidate(name, str(source), discovery=False, session=session)
        self.judge.add_candidate(name, sub)
        if sub.ok:
            self.judge.discover(name)
        return sub

    def start_spare(self) -> None:
        """Start the next candidate's worker now (torch imported, guard and sandbox up), so that the next
        :meth:`prepare` finds it ready: what a service does between requests. Only where the grader's device and
        memory can hold one more worker while it waits."""
        self.judge.start_spare(self.controller.box().choice.to_dict())

    def drop(self, name: str) -> None:
        """Close a candidate's workers and remove its private install."""
        self.judge.drop_candidate(name)
        self.controller.drop_candidate(name)

    # ------------------------------------------------------------ cases

    def operators(self) -> Iterator[Path]:
        """Every operator directory under the task tree, in path order."""
        roots = (
            [self.tasks]
            if looks_like_operator_dir(self.tasks)
            else sorted(p.parent for p in self.tasks.rglob("cases.yaml") if looks_like_operator_dir(p.parent))
        )
        yield from roots

    def _task(self, op_dir: Path) -> OperatorTask | TaskFormatError:
        if op_dir not in self._tasks:
            try:
                self._tasks[op_dir] = load_task(op_dir, self.controller.pins)
            except TaskFormatError as exc:
                self._tasks[op_dir] = exc
        return self._tasks[op_dir]

    def cases(self, select: str | None = None) -> list[CaseRef]:
        """The task tree's cases a ``-k`` style expression selects (an operator that does not parse is one
        case with its error)."""
        match = compile_selection(select)
        found: list[CaseRef] = []
        for op_dir in self.operators():
            task = self._task(op_dir)
            if isinstance(task, TaskFormatError):
                rel = op_dir.name
                ref = CaseRef(
                    key=f"{rel}_task",
                    rel_path=rel,
                    operator=op_dir.name,
                    case_id=None,
                    level=None,
                    names=(op_dir.name, f"{op_dir.name}[task]"),
                    error=str(task),
                )
                if match(ref.names):
                    found.append(ref)
                continue
            ids = [c.case_id for c in task.cases if c.case_id is not None]
            width = max(2, len(str(max(ids)))) if ids else 2
            for case in task.cases:
                label = f"{case.case_id:0{width}d}" if case.case_id is not None else f"#{case.index}"
                names = (
                    task.spec.name,
                    task.rel_path,
                    f"{op_dir.name}[{label}]",
                    *case.dtype_names,
                    *([task.spec.category] if task.spec.category else []),
                    *([f"level{task.level}"] if task.level is not None else []),
                )
                ref = CaseRef(
                    key=task.result_key(case),
                    rel_path=task.rel_path,
                    operator=task.spec.name,
                    case_id=case.case_id,
                    level=task.level,
                    names=names,
                    task=task,
                    case=case,
                )
                if match(names):
                    found.append(ref)
        return found

    def run_of(self, case: CaseRef, candidate: str | None = None) -> CaseRun:
        """The case's run on this grader's judge (three phases a front-end may drive itself)."""
        assert case.task is not None and case.case is not None
        judge, task, spec = self.judge, case.task, case.case
        source = OperatorCase(
            task=task,
            case=spec,
            settings=self.settings,
            service=judge.golden_service,
            candidate=candidate or "",
            memo=judge.shared_reference if candidate else None,
        )
        route = Route(source=source, candidate=candidate, need=case_need(task, spec, self.settings))
        if spec.world_size is not None:
            return MultiRankRun(judge, route, task=task, case=spec)
        return CaseRun(judge, route)

    def grade(self, case: CaseRef, candidate: str | None = None) -> CaseOutcome:
        """The case's outcome for ``candidate`` (None: the settings' own source, or a self-check)."""
        if candidate is not None and candidate not in self.judge.submissions:
            raise KeyError(f"candidate {candidate!r} is not prepared (Grader.prepare first)")
        if case.error is not None:
            return CaseOutcome(
                key=case.key,
                rel_path=case.rel_path,
                operator="",
                case_id=None,
                status=oc.ERROR,
                failure_type=oc.TASK_ERROR,
                message=case.error,
                candidate=candidate or "",
            )
        result = self.run_of(case, candidate).grade()
        result.candidate = candidate or ""
        return result

    def close(self) -> None:
        if self._judge is not None:
            self._judge.close()
            self._judge = None
        self.controller.close()
